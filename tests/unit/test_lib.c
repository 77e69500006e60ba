/* libckptfs through its public header only (the shared library, as a user
 * links it): errors as codes and one line, metadata without reads, values
 * against an expectation computed here from the safetensors header (parsed
 * with cJSON, not the library) and the generator's byte formula, flat files,
 * and concurrent readers through a cache small enough to evict. */
#include <ckptfs.h>

#include <check.h>
#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static char *dir, *src, *map;

/* The source: data byte i of the file's data region is i % 251
 * (tu_write_st); where each tensor starts comes from the header. */
struct src_tensor {
	char name[16];
	uint64_t begin, end;
};
static struct src_tensor st[8];
static int n_st;

static const struct src_tensor *find_src(const char *name)
{
	for (int i = 0; i < n_st; i++)
		if (!strcmp(st[i].name, name))
			return &st[i];
	ck_abort_msg("no source tensor %s", name);
	return NULL;
}

static unsigned char src_byte(const struct src_tensor *s, uint64_t j)
{
	return (unsigned char)((s->begin + j) % 251);
}

static void parse_source_header(void)
{
	FILE *f = fopen(src, "rb");
	ck_assert_ptr_nonnull(f);
	unsigned char len8[8];
	ck_assert_uint_eq(fread(len8, 1, 8, f), 8);
	uint64_t hl = 0;
	for (int k = 7; k >= 0; k--)
		hl = hl << 8 | len8[k];
	char *h = malloc(hl + 1);
	ck_assert_uint_eq(fread(h, 1, hl, f), hl);
	h[hl] = '\0';
	fclose(f);
	cJSON *root = cJSON_Parse(h);
	ck_assert_ptr_nonnull(root);
	n_st = 0;
	for (cJSON *e = root->child; e; e = e->next) {
		if (!strcmp(e->string, "__metadata__"))
			continue;
		cJSON *off = cJSON_GetObjectItem(e, "data_offsets");
		snprintf(st[n_st].name, sizeof st[n_st].name, "%s", e->string);
		st[n_st].begin = (uint64_t)cJSON_GetArrayItem(off, 0)->valuedouble;
		st[n_st].end = (uint64_t)cJSON_GetArrayItem(off, 1)->valuedouble;
		n_st++;
	}
	cJSON_Delete(root);
	free(h);
}

/* Byte j of target name, as the mapping defines it:
 *   a_t  = a.t()      a is F32 [64, 48]: element (r, c) of a_t is a[c][r]
 *   d_t  = d.t()      d is F32 [1024, 320] (1.25 MiB: read whole, it streams)
 *   b32  = b.to(F32)  b is BF16 [3000]: the F32 bits are the BF16 bits << 16
 *   big, c            unchanged (unused: keep) */
static unsigned char want_byte(const char *name, uint64_t j)
{
	if (!strcmp(name, "a_t")) {
		uint64_t e = j / 4, r = e / 64, c = e % 64;
		return src_byte(find_src("a"), (c * 48 + r) * 4 + j % 4);
	}
	if (!strcmp(name, "d_t")) {
		uint64_t e = j / 4, r = e / 1024, c = e % 1024;
		return src_byte(find_src("d"), (c * 320 + r) * 4 + j % 4);
	}
	if (!strcmp(name, "b32")) {
		uint64_t e = j / 4;
		return j % 4 < 2 ? 0 : src_byte(find_src("b"), e * 2 + (j % 4 - 2));
	}
	return src_byte(find_src(name), j);
}

static void setup(void)
{
	dir = tu_mkdtemp();
	src = tu_path(dir, "model.safetensors");
	map = tu_path(dir, "map.json");
	const struct tu_tensor t[] = {
		{"a", CK_DT_F32, 2, {64, 48}},
		{"b", CK_DT_BF16, 1, {3000}},
		{"big", CK_DT_F32, 2, {512, 160}},
		{"c", CK_DT_F32, 2, {300, 7}},
		{"d", CK_DT_F32, 2, {1024, 320}},
	};
	tu_write_st(src, t, 5);
	tu_write_str(map, "{\"unused\": \"keep\", \"rules\": ["
			  "{\"from\": \"a\", \"to\": \"a_t\", \"expr\": \"x.t()\"},"
			  "{\"from\": \"b\", \"to\": \"b32\", \"expr\": \"x.to(F32)\"},"
			  "{\"from\": \"d\", \"to\": \"d_t\", \"expr\": \"x.t()\"}]}");
	parse_source_header();
}

static void teardown(void)
{
	tu_rmtree(dir);
	free(dir);
	free(src);
	free(map);
}

static ckptfs *open_ok(const char *extra, const char *extra2)
{
	char mopt[4200];
	snprintf(mopt, sizeof mopt, "mapping=%s", map);
	const char *opts[] = {mopt, "cache_size=64KiB", "chunk=4KiB", extra, extra2, NULL};
	ckptfs *h = NULL;
	struct ckptfs_error e;
	ck_assert_msg(ckptfs_open(&h, src, opts, &e) == 0, "%s", e.message);
	return h;
}

static void refused(const char *source, const char *opt, int code, const char *says)
{
	const char *opts[] = {opt, NULL};
	ckptfs *h = (ckptfs *)1;
	struct ckptfs_error e = {0};
	ck_assert_int_eq(ckptfs_open(&h, source, opts, &e), -1);
	ck_assert_ptr_null(h);
	ck_assert_msg(e.code == code, "%s: code %d, want %d (%s)", opt ? opt : "-", e.code, code,
		      e.message);
	ck_assert_msg(strstr(e.message, says) && !strchr(e.message, '\n'), "%s: message \"%s\"",
		      opt ? opt : "-", e.message);
}

START_TEST(t_open_errors)
{
	char bad_map[4200], missing[4200], broken[4200];
	snprintf(missing, sizeof missing, "%s/nope", dir);
	refused(missing, NULL, CKPTFS_E_SOURCE, "nope");
	refused(src, "bogus=1", CKPTFS_E_USAGE, "unknown option bogus=1");
	refused(src, "chunk=1", CKPTFS_E_USAGE, "chunk=1");
	refused(src, "cache_size=lots", CKPTFS_E_USAGE, "cache_size=lots");
	refused(src, "ranks=0-1", CKPTFS_E_USAGE, "one per rank");
	refused(src, "rank=3", CKPTFS_E_USAGE, "--rank needs --mesh");
	refused(src, "state=weights", CKPTFS_E_USAGE, "state=weights (params, optimizer or all)");
	refused(src, "mapping=no-such-mapping", CKPTFS_E_MAPPING, "no-such-mapping");
	snprintf(broken, sizeof broken, "%s/broken.json", dir);
	tu_write_str(broken, "{\"rules\": [{\"from\": \"a\", \"to\": \"z\", \"expr\": \"x.t(\"}]}");
	snprintf(bad_map, sizeof bad_map, "mapping=%s", broken);
	refused(src, bad_map, CKPTFS_E_MAPPING, "broken.json");
	struct ckptfs_error e;
	ck_assert_int_eq(ckptfs_open(NULL, src, NULL, &e), -1);
	ck_assert_int_eq(e.code, CKPTFS_E_USAGE);
	ckptfs_close(NULL);
}
END_TEST

START_TEST(t_metadata)
{
	/* no optimizer state here: state=optimizer keeps nothing, params all */
	ckptfs *h = open_ok("state=optimizer", NULL);
	ck_assert_uint_eq(ckptfs_count(h), 0);
	ckptfs_close(h);
	h = open_ok("state=params", NULL);
	ck_assert_uint_eq(ckptfs_count(h), 5);
	ckptfs_close(h);
	h = open_ok(NULL, NULL);
	ck_assert_uint_eq(ckptfs_count(h), 5);
	const char *names[] = {"a_t", "b32", "big", "c", "d_t"};
	const char *dtypes[] = {"F32", "F32", "F32", "F32", "F32"};
	const int64_t shapes[][2] = {{48, 64}, {3000, 0}, {512, 160}, {300, 7}, {320, 1024}};
	const int ndims[] = {2, 1, 2, 2, 2};
	for (size_t i = 0; i < 5; i++) {
		ck_assert_int_eq(ckptfs_find(h, names[i]), (long)i);
		ck_assert_str_eq(ckptfs_tensor_name(h, i), names[i]);
		ck_assert_str_eq(ckptfs_tensor_dtype(h, i), dtypes[i]);
		ck_assert_int_eq(ckptfs_tensor_ndim(h, i), ndims[i]);
		uint64_t n = 4;
		for (int d = 0; d < ndims[i]; d++) {
			ck_assert_int_eq(ckptfs_tensor_shape(h, i)[d], shapes[i][d]);
			n *= (uint64_t)shapes[i][d];
		}
		ck_assert_uint_eq(ckptfs_tensor_bytes(h, i), n);
		ck_assert_int_ge(ckptfs_tensor_group(h, i), 0);
	}
	ck_assert_int_eq(ckptfs_find(h, "a"), -1);
	ck_assert_ptr_null(ckptfs_tensor_name(h, 5));
	ck_assert_int_eq(ckptfs_tensor_ndim(h, 99), -1);
	size_t len;
	const char *plan = ckptfs_plan_json(h, &len);
	ck_assert(plan && len == strlen(plan) && strstr(plan, "\"a_t\""));
	ck_assert_int_ge(ckptfs_file_find(h, "model.safetensors"), 0);
	ck_assert_int_ge(ckptfs_file_find(h, "pytorch_model.bin"), 0);
	ck_assert_int_eq(ckptfs_file_find(h, "tensors"), -1);
	struct ckptfs_stats s;
	ckptfs_get_stats(h, &s, sizeof s);
	ck_assert_uint_eq(s.source_bytes_read, 0); /* listing reads no tensor data */
	ck_assert_str_eq(ckptfs_version(), "0.1.0");
	ckptfs_close(h);
}
END_TEST

static void check_range(ckptfs *h, size_t i, uint64_t off, size_t len, unsigned char *buf)
{
	struct ckptfs_error e;
	uint64_t size = ckptfs_tensor_bytes(h, i);
	int64_t n = ckptfs_read(h, i, off, buf, len, &e);
	ck_assert_msg(n >= 0, "%s", e.message);
	uint64_t want_n = off >= size ? 0 : (size - off < len ? size - off : len);
	ck_assert_uint_eq((uint64_t)n, want_n);
	for (uint64_t j = 0; j < want_n; j++)
		if (buf[j] != want_byte(ckptfs_tensor_name(h, i), off + j))
			ck_abort_msg("%s byte %llu: %u, want %u", ckptfs_tensor_name(h, i),
				     (unsigned long long)(off + j), buf[j],
				     want_byte(ckptfs_tensor_name(h, i), off + j));
}

START_TEST(t_values)
{
	ckptfs *h = open_ok(NULL, NULL);
	unsigned char *buf = malloc(2 << 20);
	for (size_t i = 0; i < ckptfs_count(h); i++) {
		uint64_t size = ckptfs_tensor_bytes(h, i);
		check_range(h, i, 0, 2 << 20, buf);	       /* whole, with room to spare */
		check_range(h, i, 3, 1001, buf);	       /* unaligned */
		check_range(h, i, size - 5, 100, buf);	       /* short at the end */
		check_range(h, i, size, 10, buf);	       /* at the end: 0 */
		check_range(h, i, size + 12345, 10, buf);      /* past it: 0 */
	}
	struct ckptfs_error e;
	ck_assert_int_eq(ckptfs_read(h, 5, 0, buf, 10, &e), -1);
	ck_assert_int_eq(e.code, CKPTFS_E_USAGE);
	ck_assert_int_eq(ckptfs_read(h, 0, 0, NULL, 10, &e), -1);
	struct ckptfs_stats s;
	ckptfs_get_stats(h, &s, sizeof s);
	ck_assert_uint_gt(s.source_bytes_read, 0);
	ck_assert_uint_gt(s.direct_reads, 0); /* big and c: renames, read from the file */
	ck_assert_uint_gt(s.streamed_reads, 0); /* d_t read whole: evaluated into buf */
	free(buf);
	ckptfs_close(h);
}
END_TEST

/* A small read of a cast (b32: streamable) is evaluated straight into the
 * caller's buffer, nothing cached; with no_stream it goes through the cache.
 * A small read of a transpose (a_t) goes through the cache either way. */
START_TEST(t_streamed)
{
	for (int no_stream = 0; no_stream <= 1; no_stream++) {
		ckptfs *h = open_ok(no_stream ? "no_stream" : NULL, NULL);
		unsigned char buf[2048];
		struct ckptfs_stats s;
		check_range(h, (size_t)ckptfs_find(h, "b32"), 3, 1001, buf);
		ckptfs_get_stats(h, &s, sizeof s);
		ck_assert_uint_eq(s.streamed_reads, no_stream ? 0 : 1);
		uint64_t held = s.cache_bytes;
		ck_assert(no_stream ? held > 0 : held == 0);
		check_range(h, (size_t)ckptfs_find(h, "a_t"), 3, 1001, buf);
		ckptfs_get_stats(h, &s, sizeof s);
		ck_assert_uint_eq(s.streamed_reads, no_stream ? 0 : 1);
		ck_assert_uint_gt(s.cache_bytes, held);
		ckptfs_close(h);
	}
}
END_TEST

/* read_once: a reader that keeps what it reads. d_t (1.25 MiB of 64 KiB
 * chunks, through the cache: no_stream) read front to back in 16 KiB
 * reads. Without it every chunk stays (the 4 MiB budget holds them all);
 * with it the chunks read whole are dropped past cache_size / 8 and their
 * memory is reused for the next ones. The bytes are the same either way. */
START_TEST(t_read_once)
{
	unsigned char buf[16384];
	char mopt[4200];
	snprintf(mopt, sizeof mopt, "mapping=%s", map);
	for (int once = 0; once <= 1; once++) {
		const char *opts[] = {mopt,	   "cache_size=4MiB", "chunk=64KiB",
				      "no_stream", "no_prefetch",     once ? "read_once" : NULL,
				      NULL};
		ckptfs *h = NULL;
		struct ckptfs_error e;
		ck_assert_msg(ckptfs_open(&h, src, opts, &e) == 0, "%s", e.message);
		size_t i = (size_t)ckptfs_find(h, "d_t");
		uint64_t size = ckptfs_tensor_bytes(h, i);
		for (uint64_t off = 0; off < size; off += sizeof buf)
			check_range(h, i, off, sizeof buf, buf);
		struct ckptfs_stats s;
		ckptfs_get_stats(h, &s, sizeof s);
		ck_assert_uint_eq(s.cache_evictions, 0);
		if (once) {
			ck_assert_uint_gt(s.cache_dropped, 0);
			ck_assert_uint_gt(s.cache_recycled, 0);
			ck_assert_uint_le(s.cache_bytes, (512u + 4 * 64u) << 10);
		} else {
			ck_assert_uint_eq(s.cache_dropped, 0);
			ck_assert_uint_ge(s.cache_bytes, size);
		}
		ckptfs_close(h);
	}
}
END_TEST

/* A small read of a_t evaluates its group (12 KiB, under group_max) and
 * prefetches the next evaluated target, b32, into the cache. Reading b32
 * then (a cast: streamed when nothing holds it) must take the prefetched
 * bytes (done or in flight), not evaluate them again into the caller's
 * buffer. */
START_TEST(t_prefetched)
{
	ckptfs *h = open_ok("cache_size=1MiB", NULL);
	unsigned char buf[16384];
	check_range(h, (size_t)ckptfs_find(h, "a_t"), 0, 100, buf);
	check_range(h, (size_t)ckptfs_find(h, "b32"), 0, sizeof buf, buf);
	struct ckptfs_stats s;
	ckptfs_get_stats(h, &s, sizeof s);
	ck_assert_uint_eq(s.streamed_reads, 0);
	ckptfs_close(h);
}
END_TEST

/* One large read (all of model.safetensors, over 1 MiB) evaluates its
 * large and streamable tensors itself; only the small transpose a_t goes
 * through the cache, and nothing is prefetched for a next read, which
 * would evaluate its own bytes anyway: the cache holds a_t's 12288 bytes
 * and nothing else. */
START_TEST(t_large_read)
{
	ckptfs *h = open_ok("cache_size=1MiB", NULL);
	long k = ckptfs_file_find(h, "model.safetensors");
	ck_assert_int_ge(k, 0);
	uint64_t size = ckptfs_file_size(h, (size_t)k);
	ck_assert_uint_gt(size, 1u << 20);
	unsigned char *buf = malloc(size);
	struct ckptfs_error e;
	ck_assert_int_eq(ckptfs_file_read(h, (size_t)k, 0, buf, size, &e), (int64_t)size);
	struct ckptfs_stats s;
	ckptfs_get_stats(h, &s, sizeof s);
	ck_assert_uint_eq(s.cache_bytes, 12288);
	ck_assert_uint_ge(s.streamed_reads, 2); /* b32 and d_t */
	free(buf);
	ckptfs_close(h);
}
END_TEST

/* A large read whose first span is the last few bytes of a padded target
 * (in order, but not streamable: small reads of it go through the cache).
 * The read before evaluated the rest of that target into its own buffer;
 * the tail must be evaluated the same way, not through the cache, which
 * would evaluate the whole target's group again: every source byte is read
 * once. The same when the tail is a small read of its own (_i 1) that
 * starts where the large read ended: a sequential reader's next piece.
 * Source: p F32 [1024, 320] padded with zero rows to 1100 (p_pad, 1.34
 * MiB), then z F32 [512, 640] kept (1.25 MiB, read from the file). */
START_TEST(t_large_read_edges)
{
	int sequel = _i;
	free(src);
	src = tu_path(dir, "pad.safetensors");
	const struct tu_tensor t[] = {{"p", CK_DT_F32, 2, {1024, 320}},
				      {"z", CK_DT_F32, 2, {512, 640}}};
	tu_write_st(src, t, 2);
	parse_source_header();
	tu_write_str(map, "{\"unused\": \"keep\", \"rules\": [{\"from\": \"p\", \"to\": "
			  "\"p_pad\", \"expr\": \"pad(x, 0, 1100)\"}]}");
	ckptfs *h = open_ok("cache_size=16MiB", "chunk=64KiB");
	long k = ckptfs_file_find(h, "model.safetensors");
	uint64_t size = ckptfs_file_size(h, (size_t)k), hl = 0;
	unsigned char *f = malloc(size);
	struct ckptfs_error e;
	ck_assert_int_eq(ckptfs_file_read(h, (size_t)k, 0, f, 8, &e), 8);
	for (int b = 7; b >= 0; b--)
		hl = hl << 8 | f[b];
	uint64_t pad_end = 8 + hl + 1100 * 320 * 4; /* p_pad sorts first */
	uint64_t cut = pad_end - 100000;	    /* both reads over 1 MiB */
	ck_assert_uint_ge(cut, 1u << 20);
	ck_assert_uint_ge(size - cut, 1u << 20);
	ck_assert_int_eq(ckptfs_file_read(h, (size_t)k, 0, f, cut, &e), (int64_t)cut);
	if (sequel) { /* the tail alone: small, but it continues the large read */
		ck_assert_int_eq(ckptfs_file_read(h, (size_t)k, cut, f + cut, pad_end - cut, &e),
				 (int64_t)(pad_end - cut));
		cut = pad_end;
	}
	ck_assert_int_eq(ckptfs_file_read(h, (size_t)k, cut, f + cut, size - cut, &e),
			 (int64_t)(size - cut));
	struct ckptfs_stats s;
	ckptfs_get_stats(h, &s, sizeof s);
	ck_assert_uint_eq(s.source_bytes_read, (1024 * 320 + 512 * 640) * 4); /* each byte once */
	ck_assert_uint_eq(s.cache_misses, 0);
	const unsigned char *pp = f + 8 + hl, *z = pp + 1100 * 320 * 4;
	for (uint64_t j = 0; j < 1100 * 320 * 4; j++)
		if (pp[j] != (j < 1024 * 320 * 4 ? src_byte(find_src("p"), j) : 0))
			ck_abort_msg("p_pad byte %llu", (unsigned long long)j);
	for (uint64_t j = 0; j < 512 * 640 * 4; j++)
		if (z[j] != src_byte(find_src("z"), j))
			ck_abort_msg("z byte %llu", (unsigned long long)j);
	ck_assert_uint_eq(size, (uint64_t)(z - f) + 512 * 640 * 4);
	free(f);
	ckptfs_close(h);
}
END_TEST

/* A large transpose (its source over the engine's 32 MiB window) read in 2
 * MiB pieces: each piece needs 62 source columns of every 2 KiB row, runs
 * a page apart that a read takes whole, so a piece evaluated on its own
 * reads the whole source (17 pieces, 17 times its bytes). Taken through the
 * cache, whose jobs evaluate many of its chunks per read of the source, the
 * source is read once. A read of the whole target is still evaluated on
 * its own, in one pass. Values against the source's bytes transposed. */
START_TEST(t_large_transpose_batched)
{
	enum { ROWS = 16896, COLS = 1024 }; /* BF16: 34.6 MB */
	free(src);
	src = tu_path(dir, "wide.safetensors");
	const struct tu_tensor t[] = {{"w", CK_DT_BF16, 2, {ROWS, COLS}}};
	tu_write_st(src, t, 1);
	parse_source_header();
	tu_write_str(map, "{\"rules\": [{\"from\": \"w\", \"to\": \"wt\", \"expr\": \"x.t()\"}]}");
	const struct src_tensor *w = find_src("w");
	uint64_t size = (uint64_t)ROWS * COLS * 2, piece = 2u << 20;
	unsigned char *buf = malloc(size);
	for (int whole = 0; whole <= 1; whole++) {
		ckptfs *h = open_ok("cache_size=512MiB", "chunk=1MiB");
		struct ckptfs_error e;
		uint64_t step = whole ? size : piece;
		for (uint64_t off = 0; off < size; off += step) {
			size_t n = (size_t)(size - off < step ? size - off : step);
			ck_assert_int_eq(ckptfs_read(h, 0, off, buf + off, n, &e), (int64_t)n);
		}
		struct ckptfs_stats s;
		ckptfs_get_stats(h, &s, sizeof s);
		ck_assert_uint_eq(s.source_bytes_read, size);
		ck_assert_uint_eq(s.streamed_reads, whole); /* the whole read: on its own */
		for (uint64_t c = 0; c < COLS; c++)
			for (uint64_t r = 0; r < ROWS; r++)
				for (int b = 0; b < 2; b++)
					if (buf[(c * ROWS + r) * 2 + b] !=
					    src_byte(w, (r * COLS + c) * 2 + b))
						ck_abort_msg("wt (%llu, %llu)",
							     (unsigned long long)c,
							     (unsigned long long)r);
		ckptfs_close(h);
	}
	free(buf);
}
END_TEST

/* model.safetensors through the library: its header parsed here, each
 * tensor's bytes against the expectation. */
START_TEST(t_flat_file)
{
	ckptfs *h = open_ok("max_shard_size=100KiB", NULL);
	long k = ckptfs_file_find(h, "model.safetensors");
	uint64_t size = ckptfs_file_size(h, (size_t)k);
	unsigned char *f = malloc(size);
	struct ckptfs_error e;
	/* in odd pieces, to cross literal and tensor spans */
	for (uint64_t off = 0; off < size;) {
		int64_t n = ckptfs_file_read(h, (size_t)k, off, f + off, 7777, &e);
		ck_assert_msg(n > 0, "%s", e.message);
		off += (uint64_t)n;
	}
	ck_assert_int_eq(ckptfs_file_read(h, (size_t)k, size, f, 10, &e), 0);
	uint64_t hl = 0;
	for (int b = 7; b >= 0; b--)
		hl = hl << 8 | f[b];
	char *hdr = strndup((char *)f + 8, hl);
	cJSON *root = cJSON_Parse(hdr);
	ck_assert_ptr_nonnull(root);
	int seen = 0;
	for (cJSON *t = root->child; t; t = t->next) {
		if (!strcmp(t->string, "__metadata__"))
			continue;
		cJSON *off = cJSON_GetObjectItem(t, "data_offsets");
		uint64_t b = (uint64_t)cJSON_GetArrayItem(off, 0)->valuedouble;
		uint64_t en = (uint64_t)cJSON_GetArrayItem(off, 1)->valuedouble;
		ck_assert_uint_eq(en - b, ckptfs_tensor_bytes(h, (size_t)ckptfs_find(h, t->string)));
		for (uint64_t j = 0; j < en - b; j++)
			if (f[8 + hl + b + j] != want_byte(t->string, j))
				ck_abort_msg("model.safetensors: %s byte %llu", t->string,
					     (unsigned long long)j);
		seen++;
	}
	ck_assert_int_eq(seen, 5);
	/* the shards and their index exist beside it */
	ck_assert_int_ge(ckptfs_file_find(h, "model.safetensors.index.json"), 0);
	int shards = 0;
	for (size_t j = 0; j < ckptfs_file_count(h); j++)
		shards += !strncmp(ckptfs_file_name(h, j), "model-0000", 10);
	ck_assert_int_ge(shards, 2); /* 1.6 MiB of tensors in files of at most 100 KiB */
	cJSON_Delete(root);
	free(hdr);
	ck_assert_int_eq(ckptfs_file_read(h, 99, 0, f, 1, &e), -1);
	ck_assert_int_eq(e.code, CKPTFS_E_USAGE);
	free(f);
	ckptfs_close(h);
}
END_TEST

/* npy/NAME.npy per target, checked against the NumPy format description
 * (magic, version 1.0, little-endian header length, the header dict padded
 * with spaces to a multiple of 64 and ended by a newline), the tensor's
 * metadata and the generator's bytes. */
START_TEST(t_npy_files)
{
	ckptfs *h = open_ok(NULL, NULL);
	size_t npy = 0, n = ckptfs_count(h);
	for (size_t k = 0; k < ckptfs_file_count(h); k++)
		npy += !strncmp(ckptfs_file_name(h, k), "npy/", 4);
	ck_assert_uint_eq(npy, n);
	struct ckptfs_error e;
	for (size_t i = 0; i < n; i++) {
		const char *name = ckptfs_tensor_name(h, i);
		char fname[64], want[256];
		snprintf(fname, sizeof fname, "npy/%s.npy", name);
		long k = ckptfs_file_find(h, fname);
		ck_assert_msg(k >= 0 && !strcmp(ckptfs_file_name(h, (size_t)k), fname), "%s", fname);
		uint64_t size = ckptfs_file_size(h, (size_t)k), bytes = ckptfs_tensor_bytes(h, i);
		unsigned char *f = malloc(size);
		for (uint64_t off = 0; off < size;) { /* in odd pieces across header and data */
			int64_t got = ckptfs_file_read(h, (size_t)k, off, f + off, 5003, &e);
			ck_assert_msg(got > 0, "%s", e.message);
			off += (uint64_t)got;
		}
		ck_assert(!memcmp(f, "\x93NUMPY\x01\x00", 8));
		size_t hl = (size_t)f[8] | (size_t)f[9] << 8;
		ck_assert_uint_eq((10 + hl) % 64, 0);
		ck_assert_uint_eq(size, 10 + hl + bytes);
		ck_assert_int_eq(f[9 + hl], '\n');
		const int64_t *sh = ckptfs_tensor_shape(h, i);
		int nd = ckptfs_tensor_ndim(h, i);
		ck_assert_str_eq(ckptfs_tensor_dtype(h, i), "F32"); /* every target here */
		int w = snprintf(want, sizeof want, "{'descr': '<f4', 'fortran_order': False, 'shape': (");
		for (int d = 0; d < nd; d++)
			w += snprintf(want + w, sizeof want - (size_t)w, "%lld,%s", (long long)sh[d],
				      d + 1 < nd ? " " : "");
		if (nd > 1)
			want[--w] = '\0'; /* (3,) but (64, 48) */
		snprintf(want + w, sizeof want - (size_t)w, "), }");
		ck_assert_msg(!strncmp((char *)f + 10, want, strlen(want)), "%s: header %.*s, want %s",
			      fname, (int)hl, (char *)f + 10, want);
		for (size_t j = 10 + strlen(want); j < 9 + hl; j++)
			ck_assert_int_eq(f[j], ' ');
		for (uint64_t j = 0; j < bytes; j++)
			if (f[10 + hl + j] != want_byte(name, j))
				ck_abort_msg("%s: data byte %llu", fname, (unsigned long long)j);
		free(f);
	}
	ck_assert_int_eq(ckptfs_file_find(h, "npy/no-such.npy"), -1);
	ck_assert_int_eq(ckptfs_file_find(h, "npy/"), -1);
	ckptfs_close(h);
}
END_TEST

struct reader_arg {
	ckptfs *h;
	unsigned seed;
};

static void *reader(void *p)
{
	struct reader_arg *a = p;
	unsigned char *buf = malloc(1200 << 10);
	for (int k = 0; k < 150; k++) {
		size_t i = (size_t)rand_r(&a->seed) % ckptfs_count(a->h);
		uint64_t size = ckptfs_tensor_bytes(a->h, i);
		uint64_t off = (uint64_t)rand_r(&a->seed) % size;
		/* mostly small reads (through the cache), some of 1 MiB and more (streamed) */
		size_t len = 1 + (size_t)rand_r(&a->seed) % (k % 10 ? 256 << 10 : 1200 << 10);
		check_range(a->h, i, off, len, buf);
	}
	free(buf);
	return NULL;
}

START_TEST(t_threads)
{
	ckptfs *h = open_ok("threads=3", "no_direct");
	pthread_t tid[6];
	struct reader_arg args[6];
	for (int t = 0; t < 6; t++) {
		args[t] = (struct reader_arg){h, 1000u + (unsigned)t};
		pthread_create(&tid[t], NULL, reader, &args[t]);
	}
	for (int t = 0; t < 6; t++)
		pthread_join(tid[t], NULL);
	struct ckptfs_stats s;
	ckptfs_get_stats(h, &s, sizeof s);
	/* no_direct: big (320 KiB) evaluated too, through 64 KiB of cache */
	ck_assert_uint_gt(s.cache_evictions, 0);
	ck_assert_uint_eq(s.direct_reads, 0);
	/* a smaller stats struct (an older caller) gets its prefix only */
	uint64_t two[3] = {0, 0, 0xdead};
	ckptfs_get_stats(h, (struct ckptfs_stats *)two, 2 * sizeof(uint64_t));
	ck_assert_uint_eq(two[0], s.source_bytes_read);
	ck_assert_uint_eq(two[2], 0xdead);
	ckptfs_close(h);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("libckptfs");
	TCase *tc = tcase_create("api");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 240);
	tcase_add_test(tc, t_open_errors);
	tcase_add_test(tc, t_metadata);
	tcase_add_test(tc, t_values);
	tcase_add_test(tc, t_streamed);
	tcase_add_test(tc, t_read_once);
	tcase_add_test(tc, t_prefetched);
	tcase_add_test(tc, t_large_read);
	tcase_add_loop_test(tc, t_large_read_edges, 0, 2);
	tcase_add_test(tc, t_large_transpose_batched);
	tcase_add_test(tc, t_flat_file);
	tcase_add_test(tc, t_npy_files);
	tcase_add_test(tc, t_threads);
	suite_add_tcase(s, tc);
	return tu_run_suite(s, 1);
}
