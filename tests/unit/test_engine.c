/* The engine: bytes of targets equal an independent computation from the
 * source file, and a region costs only the source bytes it needs. */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "ckpt/catalog.h"
#include "exec/compare.h"
#include "exec/convert.h"
#include "exec/engine.h"
#include "kern/fpconv.h"
#include "map/mapping.h"
#include "plan/plan.h"
#include "testutil.h"
#include "util/fileio.h"

static char *dir;
static struct ck_catalog *cat;
static unsigned char *file; /* the whole source file */
static size_t file_len;

enum { R = 64, C = 4096, BR = 48, BC = 40 };

static void setup(void)
{
	dir = tu_mkdtemp();
	static const struct tu_tensor t[] = {{"big", CK_DT_F32, 2, {R, C}},
					     {"b16", CK_DT_BF16, 2, {BR, BC}},
					     {"other", CK_DT_F32, 2, {R, C}}};
	char *p = tu_path(dir, "model.safetensors");
	tu_write_st(p, t, 3);
	file = tu_read(p, &file_len);
	free(p);
	struct ck_err err;
	ck_assert_msg(ck_catalog_open(dir, &cat, &err) == 0, "%s", err.msg);
}

static void teardown(void)
{
	ck_catalog_free(cat);
	tu_rmtree(dir);
	free(dir);
	free(file);
}

static struct ck_plan *plan_of(const char *text)
{
	struct ck_err err;
	struct ck_mapping *m;
	struct ck_plan *p;
	ck_assert_msg(ck_mapping_parse(text, strlen(text), "t.json", &m, &err) == 0, "%s", err.msg);
	ck_assert_msg(ck_plan_build(cat, &m, 1, &p, &err) == 0, "%s", err.msg);
	ck_mapping_free(m);
	return p;
}

static const unsigned char *src_bytes(const char *name)
{
	return file + ck_catalog_find(cat, name)->t.offset;
}

static float f32_at(const char *name, size_t i)
{
	float v;
	memcpy(&v, src_bytes(name) + 4 * i, 4);
	return v;
}

static uint32_t tidx(const struct ck_plan *p, const char *name)
{
	return (uint32_t)(ck_plan_find(p, name) - p->t);
}

static const char *MAP =
	"{\"unused\": \"drop\", \"rules\": ["
	"{\"from\": \"big\", \"to\": \"rows\", \"expr\": \"x.narrow(0, 10, 20)\", \"share\": true},"
	"{\"from\": \"big\", \"to\": \"cols\", \"expr\": \"x.narrow(1, 1024, 1024)\", \"share\": true},"
	"{\"from\": \"big\", \"to\": \"tr\", \"expr\": \"x.t()\", \"share\": true},"
	"{\"from\": {\"a\": \"big\", \"b\": \"other\"}, \"to\": \"cat\", \"expr\": \"cat([a, b], 0)\","
	" \"share\": true},"
	"{\"from\": \"b16\", \"to\": \"e4s\", \"expr\": \"x.t().to(F8_E4M3, 1)\", \"share\": true},"
	"{\"from\": \"b16\", \"to\": \"e4\", \"expr\": \"x.t().to(F8_E4M3)\", \"share\": true},"
	"{\"from\": \"b16\", \"to\": \"wide\", \"expr\": \"x.to(F32)\", \"share\": true},"
	"{\"from\": \"other\", \"to\": \"ob\", \"expr\": \"x.to(BF16)\", \"share\": true}]}";

/* Loop index bit 1: read the source with O_DIRECT, and make sure it is. */
static void maybe_direct(struct ck_engine *e, int loop)
{
	if (!(loop & 2))
		return;
	struct ck_err err;
	uint32_t first;
	ck_assert_msg(ck_engine_open_direct(e, &first, &err) == 0,
		      "%s refuses O_DIRECT: run the tests with TMPDIR on a disk file system", dir);
	ck_assert(fcntl(e->dfd[0], F_GETFL) & O_DIRECT);
}

START_TEST(values_match_reference)
{
	struct ck_plan *p = plan_of(MAP);
	struct ck_engine e;
	ck_engine_init(&e, p, _i & 1); /* loop: bit 0 io_uring (else pread), bit 1 O_DIRECT */
	maybe_direct(&e, _i);
	struct ck_eval_ctx c;
	ck_eval_ctx_init(&c, &e);
	struct ck_err err;
	float *out = malloc((size_t)R * C * 2 * 4);
	/* rows: a row range of big */
	ck_assert_int_eq(ck_engine_read(&c, tidx(p, "rows"), 0, 20 * C * 4, out, &err), 0);
	for (size_t i = 0; i < 20 * C; i++)
		ck_assert(out[i] == f32_at("big", 10 * C + i));
	/* cols: a dim-1 slice */
	ck_assert_int_eq(ck_engine_read(&c, tidx(p, "cols"), 0, R * 1024 * 4, out, &err), 0);
	for (size_t r = 0; r < R; r++)
		for (size_t k = 0; k < 1024; k++)
			ck_assert(out[r * 1024 + k] == f32_at("big", r * C + 1024 + k));
	/* tr: transpose */
	ck_assert_int_eq(ck_engine_read(&c, tidx(p, "tr"), 0, R * C * 4, out, &err), 0);
	for (size_t k = 0; k < C; k++)
		for (size_t r = 0; r < R; r++)
			ck_assert(out[k * R + r] == f32_at("big", r * C + k));
	/* cat across two sources, read from the middle at an odd byte offset */
	unsigned char bytes[4096];
	uint64_t off = (uint64_t)R * C * 4 - 1001;
	ck_assert_int_eq(ck_engine_read(&c, tidx(p, "cat"), off, sizeof bytes, bytes, &err), 0);
	for (size_t i = 0; i < sizeof bytes; i++) {
		uint64_t b = off + i, half = (uint64_t)R * C * 4;
		unsigned char want = b < half ? src_bytes("big")[b] : src_bytes("other")[b - half];
		ck_assert_uint_eq(bytes[i], want);
	}
	/* wide: BF16 -> F32 */
	ck_assert_int_eq(ck_engine_read(&c, tidx(p, "wide"), 0, BR * BC * 4, out, &err), 0);
	for (size_t i = 0; i < BR * BC; i++) {
		uint16_t h;
		memcpy(&h, src_bytes("b16") + 2 * i, 2);
		float want = ck_bf16_to_f32(h);
		ck_assert(memcmp(&out[i], &want, 4) == 0);
	}
	/* e4 / e4s: transposed BF16 -> E4M3, PyTorch overflow rule and saturating;
	 * the raw bytes make every kind of value: huge, tiny, inf, NaN */
	unsigned char e4[BR * BC], e4s[BR * BC];
	ck_assert_int_eq(ck_engine_read(&c, tidx(p, "e4"), 0, BR * BC, e4, &err), 0);
	ck_assert_int_eq(ck_engine_read(&c, tidx(p, "e4s"), 0, BR * BC, e4s, &err), 0);
	int differ = 0;
	for (size_t j = 0; j < BC; j++)
		for (size_t r = 0; r < BR; r++) {
			uint16_t h;
			memcpy(&h, src_bytes("b16") + 2 * (r * BC + j), 2);
			float f = ck_bf16_to_f32(h);
			ck_assert_uint_eq(e4[j * BR + r], ck_f32_to_e4m3(f, 0));
			ck_assert_uint_eq(e4s[j * BR + r], ck_f32_to_e4m3(f, 1));
			differ += e4[j * BR + r] != e4s[j * BR + r];
		}
	ck_assert_int_gt(differ, 0); /* the data does exercise saturation */
	free(out);
	ck_eval_ctx_free(&c);
	ck_engine_fini(&e);
	ck_plan_free(p);
}
END_TEST

/* A partial region costs exactly its source bytes. */
START_TEST(regions_read_only_what_they_need)
{
	struct ck_plan *p = plan_of(MAP);
	struct ck_engine e;
	ck_engine_init(&e, p, 1);
	struct ck_eval_ctx c;
	ck_eval_ctx_init(&c, &e);
	struct ck_err err;
	unsigned char *buf = malloc((size_t)R * C * 8);
	/* 3 rows out of the middle of "rows" */
	ck_assert_int_eq(ck_engine_read(&c, tidx(p, "rows"), 5 * C * 4, 3 * C * 4, buf, &err), 0);
	ck_assert_uint_eq(atomic_load(&e.source_bytes_read), 3 * C * 4);
	/* a dim-1 slice: one 4 KiB run per row, gaps of 12 KiB are not read */
	atomic_store(&e.source_bytes_read, 0);
	ck_assert_int_eq(ck_engine_read(&c, tidx(p, "cols"), 0, R * 1024 * 4, buf, &err), 0);
	ck_assert_uint_eq(atomic_load(&e.source_bytes_read), R * 1024 * 4);
	/* the second half of "cat" touches only "other" */
	atomic_store(&e.source_bytes_read, 0);
	ck_assert_int_eq(ck_engine_read(&c, tidx(p, "cat"), (uint64_t)R * C * 4 + 400, 800, buf,
				       &err), 0);
	ck_assert_uint_eq(atomic_load(&e.source_bytes_read), 800);
	free(buf);
	ck_eval_ctx_free(&c);
	ck_plan_free(p);
}
END_TEST

/* A column slice (a 4 KiB run of each 16 KiB row): read buffered, one
 * request per row, the 12 KiB gaps skipped; read with O_DIRECT, where each
 * request reaches the device, the gaps are read through (under 64 KiB) in
 * one request. The same values either way, against the file's bytes. */
START_TEST(odirect_reads_through_small_gaps)
{
	struct ck_plan *p = plan_of(MAP);
	size_t n = (size_t)R * 1024 * 4;
	for (int direct = 0; direct <= 1; direct++) {
		struct ck_engine e;
		ck_engine_init(&e, p, 1);
		maybe_direct(&e, direct * 2);
		struct ck_eval_ctx c;
		ck_eval_ctx_init(&c, &e);
		struct ck_err err;
		float *out = malloc(n);
		ck_assert_int_eq(ck_engine_read(&c, tidx(p, "cols"), 0, n, out, &err), 0);
		for (size_t r = 0; r < R; r++)
			for (size_t k = 0; k < 1024; k++) {
				float want = f32_at("big", r * C + 1024 + k);
				ck_assert(memcmp(&out[r * 1024 + k], &want, 4) == 0);
			}
		ck_assert_uint_eq(atomic_load(&e.read_requests), direct ? 1 : R);
		ck_assert_uint_eq(atomic_load(&e.source_bytes_read),
				  direct ? ((R - 1) * C + 1024) * 4 : n);
		/* the transpose in 64 KiB pieces (16 source columns each, rows 16
		 * KiB apart): with O_DIRECT its window is read whole, kept and
		 * extended piece by piece, so the source is read once, in far
		 * fewer requests than one per row per piece (buffered); a fresh
		 * context, so that nothing is kept from the slice */
		ck_eval_ctx_free(&c);
		ck_eval_ctx_init(&c, &e);
		atomic_store(&e.source_bytes_read, 0);
		atomic_store(&e.read_requests, 0);
		for (size_t off = 0; off < (size_t)R * C * 4; off += n)
			ck_assert_int_eq(ck_engine_read(&c, tidx(p, "tr"), off, n, out, &err), 0);
		ck_assert_uint_eq(atomic_load(&e.source_bytes_read), (uint64_t)R * C * 4);
		if (direct)
			ck_assert_uint_lt(atomic_load(&e.read_requests),
					  (uint64_t)R * C * 4 / n * 2);
		free(out);
		ck_eval_ctx_free(&c);
		ck_engine_fini(&e);
	}
	ck_plan_free(p);
}
END_TEST

/* Row blocks of one source put side by side (how a fused QKV's groups are
 * split back into q_proj): each block is one run of source and output,
 * read straight into the output, and the blocks' common window (their
 * source rows and the ones between) is not read besides: 24 rows of
 * source for 24 rows out, in 3 requests. Values against the file. */
START_TEST(row_blocks_read_once)
{
	struct ck_plan *p = plan_of(
	    "{\"unused\": \"drop\", \"rules\": [{\"from\": \"big\", \"to\": \"picks\", "
	    "\"expr\": \"cat([x.narrow(0, 0, 8), x.narrow(0, 16, 8), x.narrow(0, 32, 8)], 0)\"}]}");
	struct ck_engine e;
	ck_engine_init(&e, p, 1);
	struct ck_eval_ctx c;
	ck_eval_ctx_init(&c, &e);
	struct ck_err err;
	size_t n = (size_t)24 * C * 4;
	float *out = malloc(n);
	ck_assert_int_eq(ck_engine_read(&c, tidx(p, "picks"), 0, n, out, &err), 0);
	ck_assert_uint_eq(atomic_load(&e.source_bytes_read), n);
	ck_assert_uint_eq(atomic_load(&e.read_requests), 3);
	for (size_t r = 0; r < 24; r++)
		for (size_t k = 0; k < C; k++) {
			float want = f32_at("big", (r / 8 * 16 + r % 8) * C + k);
			ck_assert(memcmp(&out[r * C + k], &want, 4) == 0);
		}
	free(out);
	ck_eval_ctx_free(&c);
	ck_engine_fini(&e);
	ck_plan_free(p);
}
END_TEST

/* A window smaller than one row forces the evaluation to split; bytes stay
 * the same. */
START_TEST(small_window_same_bytes)
{
	struct ck_plan *p = plan_of(MAP);
	struct ck_engine e;
	ck_engine_init(&e, p, 1);
	struct ck_eval_ctx c;
	ck_eval_ctx_init(&c, &e);
	struct ck_err err;
	size_t n = (size_t)R * C * 4;
	unsigned char *a = malloc(n), *b = malloc(n);
	ck_assert_int_eq(ck_engine_read(&c, tidx(p, "tr"), 0, n, a, &err), 0);
	e.window_max = 1000;
	struct ck_eval_ctx c2;
	ck_eval_ctx_init(&c2, &e);
	ck_assert_int_eq(ck_engine_read(&c2, tidx(p, "tr"), 0, n, b, &err), 0);
	ck_assert(memcmp(a, b, n) == 0);
	ck_assert_uint_le(c2.win.cap, 1000);
	ck_eval_ctx_free(&c2);
	free(a);
	free(b);
	ck_eval_ctx_free(&c);
	ck_plan_free(p);
}
END_TEST

/* A GGUF file at path holding one Q8_0 tensor "q" of rows x 256 (the
 * layout of reference/gguf.md: header, one key, the tensor info, data at
 * 32), its blocks' scales 1/64 and codes i % 251 - 125. */
static void write_gguf_q8(const char *path, uint64_t rows)
{
	size_t nb = (size_t)rows * 256 / 32, data_len = nb * 34;
	unsigned char *b = calloc(1, 256 + data_len), *o = b;
	uint32_t u32;
	uint64_t u64;
#define PUT(v) (memcpy(o, &(v), sizeof(v)), o += sizeof(v))
	memcpy(o, "GGUF", 4), o += 4;
	u32 = 3, PUT(u32);
	u64 = 1, PUT(u64); /* tensors */
	u64 = 1, PUT(u64); /* keys */
	u64 = 20, PUT(u64);
	memcpy(o, "general.architecture", 20), o += 20;
	u32 = 8, PUT(u32);
	u64 = 4, PUT(u64);
	memcpy(o, "test", 4), o += 4;
	u64 = 1, PUT(u64);
	*o++ = 'q';
	u32 = 2, PUT(u32);
	u64 = 256, PUT(u64); /* the fastest dim first */
	PUT(rows);
	u32 = 8, PUT(u32); /* Q8_0 */
	u64 = 0, PUT(u64);
#undef PUT
	size_t head = ((size_t)(o - b) + 31) / 32 * 32;
	for (size_t i = 0; i < nb; i++) {
		unsigned char *blk = b + head + 34 * i;
		blk[0] = 0x00, blk[1] = 0x24; /* F16 0x2400 = 1/64 */
		for (int j = 0; j < 32; j++)
			blk[2 + j] = (unsigned char)((i * 32 + (size_t)j) % 251 - 125);
	}
	tu_write(path, b, head + data_len);
	free(b);
}

/* A GGUF source's contiguous reads decode straight into the output, as F32
 * and cast to BF16 on the way: with the window held to 340 bytes (ten Q8_0
 * blocks) the bytes are the same as with the whole window, and the blocks
 * staged for them never grow past it; into a buffer at an odd address,
 * the same bytes again. Reads start and end inside blocks. */
START_TEST(gguf_runs_stage_within_the_window)
{
	char *d = tu_mkdtemp(), *path = tu_path(d, "model.gguf");
	write_gguf_q8(path, 64);
	struct ck_catalog *tc;
	struct ck_err err;
	ck_assert_msg(ck_catalog_open(path, &tc, &err) == 0, "%s", err.msg);
	const char *map =
	    _i ? "{\"rules\": [{\"from\": \"q\", \"to\": \"o\", \"expr\": \"x.to(BF16)\"}]}"
	       : "{\"rules\": [{\"from\": \"q\", \"to\": \"o\"}]}";
	struct ck_mapping *m;
	struct ck_plan *p;
	ck_assert_msg(ck_mapping_parse(map, strlen(map), "t.json", &m, &err) == 0, "%s", err.msg);
	ck_assert_msg(ck_plan_build(tc, &m, 1, &p, &err) == 0, "%s", err.msg);
	ck_mapping_free(m);
	const size_t es = _i ? 2 : 4, n = 64 * 256 * es, off = 37 * es, len = n - off - 101 * es;
	unsigned char *a = malloc(n), *b = malloc(n);
	struct ck_engine e;
	ck_engine_init(&e, p, 1);
	struct ck_eval_ctx c;
	ck_eval_ctx_init(&c, &e);
	ck_assert_msg(ck_engine_read(&c, tidx(p, "o"), off, len, a, &err) == 0, "%s", err.msg);
	ck_assert_uint_gt(c.qwin_cap, 340);
	e.window_max = 340;
	struct ck_eval_ctx c2;
	ck_eval_ctx_init(&c2, &e);
	ck_assert_msg(ck_engine_read(&c2, tidx(p, "o"), off, len, b, &err) == 0, "%s", err.msg);
	ck_assert(memcmp(a, b, len) == 0);
	ck_assert_uint_le(c2.qwin_cap, 340);
	/* a caller's buffer not aligned for floats (UBSan checks the stores) */
	unsigned char *odd = malloc(n + 1);
	ck_assert_msg(ck_engine_read(&c, tidx(p, "o"), off, len, odd + 1, &err) == 0, "%s",
		      err.msg);
	ck_assert(memcmp(a, odd + 1, len) == 0);
	free(odd);
	/* and the values: element k is code k % 251 - 125 over 64, exact in BF16 */
	for (size_t k = 0; k < len / es; k++) {
		float want = (float)((int)((37 + k) % 251) - 125) / 64.0f, got;
		uint16_t h;
		if (_i)
			memcpy(&h, b + 2 * k, 2), got = ck_bf16_to_f32(h);
		else
			memcpy(&got, b + 4 * k, 4);
		ck_assert_msg(got == want, "element %zu: %g, not %g", 37 + k, got, want);
	}
	ck_eval_ctx_free(&c2);
	ck_eval_ctx_free(&c);
	free(a);
	free(b);
	ck_plan_free(p);
	ck_catalog_free(tc);
	tu_rmtree(d);
	free(path);
	free(d);
}
END_TEST

/* A checkpoint of its own (tensors t in dir *d, the file's bytes in *img)
 * and the plan of map over its catalog *tc. */
static struct ck_plan *own_plan(const struct tu_tensor *t, size_t n, const char *map, char **d,
				unsigned char **img, struct ck_catalog **tc)
{
	*d = tu_mkdtemp();
	char *path = tu_path(*d, "model.safetensors");
	tu_write_st(path, t, n);
	size_t len;
	*img = tu_read(path, &len);
	free(path);
	struct ck_err err;
	ck_assert_msg(ck_catalog_open(*d, tc, &err) == 0, "%s", err.msg);
	struct ck_mapping *m;
	struct ck_plan *p;
	ck_assert_msg(ck_mapping_parse(map, strlen(map), "t.json", &m, &err) == 0, "%s", err.msg);
	ck_assert_msg(ck_plan_build(*tc, &m, 1, &p, &err) == 0, "%s", err.msg);
	ck_mapping_free(m);
	return p;
}

/* Element i of an F32 or BF16 (ses 2) source tensor's bytes sb, as F32. */
static float src_elem(const unsigned char *sb, size_t ses, int64_t i)
{
	float f;
	if (ses == 4) {
		memcpy(&f, sb + 4 * i, 4);
		return f;
	}
	uint16_t h;
	memcpy(&h, sb + 2 * i, 2);
	return ck_bf16_to_f32(h);
}

static void own_plan_free(struct ck_plan *p, struct ck_catalog *tc, unsigned char *img, char *d)
{
	ck_plan_free(p);
	ck_catalog_free(tc);
	free(img);
	tu_rmtree(d);
	free(d);
}

/* A transpose read chunk by chunk, as the cache evaluates a group: each
 * chunk needs a few source columns of every row, and with rows under 4 KiB
 * the runs merge into one read of the window. That window is kept and
 * extended to the next chunk's, so the whole target costs its source bytes
 * once (it cost them once per chunk: 64 chunks, 64x). Values against the
 * file's bytes transposed; F32 and BF16 -> F32, chunks ending mid-row. */
START_TEST(chunked_transpose_reads_source_once)
{
	static const struct tu_tensor t[] = {{"w", CK_DT_F32, 2, {900, 1000}},
					     {"h", CK_DT_BF16, 2, {700, 1900}}};
	char *d;
	unsigned char *img;
	struct ck_catalog *tc;
	struct ck_err err;
	struct ck_plan *p = own_plan(t, 2,
				     "{\"rules\": [{\"from\": \"w\", \"to\": \"wt\", \"expr\": \"x.t()\"},"
				     "{\"from\": \"h\", \"to\": \"ht\", \"expr\": \"x.t().to(F32)\"}]}",
				     &d, &img, &tc);
	static const char *const src[] = {"w", "h"}, *const tgt[] = {"wt", "ht"};
	for (int i = 0; i < 2; i++) {
		const struct ck_catalog_entry *se = ck_catalog_find(tc, src[i]);
		int64_t rows = se->t.shape[0], cols = se->t.shape[1];
		size_t ses = ck_dtype_size(se->t.dtype), n = (size_t)(rows * cols) * 4;
		struct ck_engine e;
		ck_engine_init(&e, p, 1);
		struct ck_eval_ctx c;
		ck_eval_ctx_init(&c, &e);
		float *out = malloc(n);
		ck_assert_ptr_nonnull(out);
		for (size_t off = 0; off < n; off += 57344) /* 56 KiB: chunks end mid-row */
			ck_assert_msg(ck_engine_read(&c, (uint32_t)(ck_plan_find(p, tgt[i]) - p->t), off,
						     n - off < 57344 ? n - off : 57344,
						     (unsigned char *)out + off, &err) == 0,
				      "%s", err.msg);
		uint64_t read = atomic_load(&e.source_bytes_read);
		ck_assert_msg(read == (uint64_t)(rows * cols) * ses, "%s: %llu source bytes read for %llu",
			      tgt[i], (unsigned long long)read,
			      (unsigned long long)((uint64_t)(rows * cols) * ses));
		const unsigned char *sb = img + se->t.offset;
		for (int64_t k = 0; k < cols; k++)
			for (int64_t r = 0; r < rows; r++) {
				float want = src_elem(sb, ses, r * cols + k);
				ck_assert(memcmp(&out[k * rows + r], &want, 4) == 0);
			}
		free(out);
		ck_eval_ctx_free(&c);
		ck_engine_fini(&e);
	}
	own_plan_free(p, tc, img, d);
}
END_TEST

/* Llama's rope permutation for GGUF, x.view(nh, 2, -1, H).transpose(1, 2)
 * .reshape(-1, H): output row h*hd + 2i + j is source row h*hd + j*hd/2 + i,
 * a piece per pair of output rows. Read whole, its pieces' rows together
 * fill their source window, which is read in one request, not one per
 * row; a few rows of one head read only their own source rows. Values
 * against the file's rows moved by that formula; F32 and BF16 -> F32. */
START_TEST(interleaved_rows_read_together)
{
	enum { NH = 4, HD = 16, H = 512 }; /* BF16 rows 7 apart: gaps over 4 KiB */
	static const struct tu_tensor t[] = {{"q", CK_DT_F32, 2, {NH * HD, H}},
					     {"k", CK_DT_BF16, 2, {NH * HD, H}}};
	char *d;
	unsigned char *img;
	struct ck_catalog *tc;
	struct ck_err err;
	struct ck_plan *p =
	    own_plan(t, 2,
		     "{\"rules\": [{\"from\": \"q\", \"to\": \"qp\", \"expr\": "
		     "\"x.view(4, 2, -1, 512).transpose(1, 2).reshape(-1, 512)\"},"
		     "{\"from\": \"k\", \"to\": \"kp\", \"expr\": "
		     "\"x.view(4, 2, -1, 512).transpose(1, 2).reshape(-1, 512).to(F32)\"}]}",
		     &d, &img, &tc);
	static const char *const src[] = {"q", "k"}, *const tgt[] = {"qp", "kp"};
	for (int i = 0; i < 2; i++) {
		const struct ck_catalog_entry *se = ck_catalog_find(tc, src[i]);
		size_t ses = ck_dtype_size(se->t.dtype), n = (size_t)NH * HD * H * 4;
		uint32_t ti = (uint32_t)(ck_plan_find(p, tgt[i]) - p->t);
		ck_assert_uint_ge(p->t[ti].v.n, NH * HD / 2); /* the layout's pieces, as above */
		struct ck_engine e;
		ck_engine_init(&e, p, 1);
		struct ck_eval_ctx c;
		ck_eval_ctx_init(&c, &e);
		float *out = malloc(n);
		ck_assert_int_eq(ck_engine_read(&c, ti, 0, n, out, &err), 0);
		ck_assert_uint_eq(atomic_load(&e.source_bytes_read), (uint64_t)NH * HD * H * ses);
		ck_assert_uint_eq(atomic_load(&e.read_requests), 1);
		/* again in odd pieces (boxes of part rows and of some rows), every
		 * other one in a fresh context (no window kept), into a second
		 * buffer: the same bytes */
		unsigned char *again = malloc(n);
		for (size_t off = 0; off < n; off += 7777) {
			if (off / 7777 % 2) {
				ck_eval_ctx_free(&c);
				ck_eval_ctx_init(&c, &e);
			}
			ck_assert_int_eq(ck_engine_read(&c, ti, off,
							n - off < 7777 ? n - off : 7777,
							again + off, &err),
					 0);
		}
		ck_assert(memcmp(again, out, n) == 0);
		free(again);
		const unsigned char *sb = img + se->t.offset;
		for (int r = 0; r < NH * HD; r++) {
			int h = r / HD, ii = r % HD / 2, j = r % 2, sr = h * HD + j * HD / 2 + ii;
			for (int col = 0; col < H; col++) {
				float want = src_elem(sb, ses, sr * H + col);
				ck_assert_msg(memcmp(&out[r * H + col], &want, 4) == 0, "%s row %d",
					      tgt[i], r);
			}
		}
		/* rows 2..5 of head 1, in a context with no window yet: their
		 * four source rows (1, 2, 9 and 10 of the head), not the head */
		ck_eval_ctx_free(&c);
		ck_eval_ctx_init(&c, &e);
		atomic_store(&e.source_bytes_read, 0);
		ck_assert_int_eq(ck_engine_read(&c, ti, (HD + 2) * H * 4, 4 * H * 4, out, &err), 0);
		ck_assert_uint_eq(atomic_load(&e.source_bytes_read), 4 * H * ses);
		free(out);
		ck_eval_ctx_free(&c);
		ck_engine_fini(&e);
	}
	own_plan_free(p, tc, img, d);
}
END_TEST

/* Each of the nrows rows of w F32 values in out is columns [c0, c0 + w) of
 * row sr[r] (r with sr NULL) of the F32 source sb, whose rows are cols long. */
static void rows_match(const float *out, int nrows, int w, const unsigned char *sb, int cols,
		       int c0, const int *sr)
{
	for (int r = 0; r < nrows; r++)
		for (int col = 0; col < w; col++) {
			float want = src_elem(sb, 4, (int64_t)(sr ? sr[r] : r) * cols + c0 + col);
			ck_assert_msg(memcmp(&out[(size_t)r * w + col], &want, 4) == 0,
				      "row %d col %d", r, col);
		}
}

/* The source of c's plan cut short in the middle of tensor se after
 * planning: reading target ti's n bytes is EIO naming se. */
static void cut_source_is_eio(struct ck_eval_ctx *c, const char *d,
			      const struct ck_catalog_entry *se, uint32_t ti, size_t n)
{
	char *path = tu_path(d, "model.safetensors");
	ck_assert_int_eq(truncate(path, (off_t)(se->t.offset + se->t.nbytes / 2)), 0);
	free(path);
	struct ck_err err;
	void *out = malloc(n);
	ck_assert_int_eq(ck_engine_read(c, ti, 0, n, out, &err), -1);
	free(out);
	ck_assert_int_eq(err.sys_errno, EIO);
	char want[300];
	snprintf(want, sizeof want, "reading tensor \"%s\"", se->t.name);
	ck_assert_msg(strstr(err.msg, want), "%s", err.msg);
}

/* One source tensor planned through map, and its target `to` read whole (n
 * bytes) by a fresh engine, the window left empty: what the tests of reads
 * straight into the output share. whole_read_end checks that a source cut
 * short after planning is EIO naming it, and frees everything. */
struct whole_read {
	char *d;
	unsigned char *img;
	struct ck_catalog *tc;
	struct ck_plan *p;
	const struct ck_catalog_entry *se; /* the source tensor */
	uint32_t ti;			   /* the target */
	struct ck_engine e;
	struct ck_eval_ctx c;
	float *out;
	size_t n;
};

static void whole_read(struct whole_read *r, const struct tu_tensor *t, const char *map,
		       const char *from, const char *to, size_t n)
{
	struct ck_err err;
	r->p = own_plan(t, 1, map, &r->d, &r->img, &r->tc);
	r->se = ck_catalog_find(r->tc, from);
	r->ti = (uint32_t)(ck_plan_find(r->p, to) - r->p->t);
	r->n = n;
	ck_engine_init(&r->e, r->p, 1);
	ck_eval_ctx_init(&r->c, &r->e);
	r->out = malloc(n);
	ck_assert_msg(ck_engine_read(&r->c, r->ti, 0, n, r->out, &err) == 0, "%s", err.msg);
	ck_assert_uint_eq(r->c.win.cap, 0); /* nothing staged */
}

static void whole_read_end(struct whole_read *r)
{
	free(r->out);
	cut_source_is_eio(&r->c, r->d, r->se, r->ti, r->n);
	ck_eval_ctx_free(&r->c);
	ck_engine_fini(&r->e);
	own_plan_free(r->p, r->tc, r->img, r->d);
}

/* Pieces that copy one source as stored but not as one block (the rope
 * permutation again, F32: a piece per pair of rows, 512 rows of 2 KiB)
 * read their rows straight into the output: the window, whose contents
 * each piece then copied out, is never filled. Whole rows (one stretch,
 * read in batches of iovecs) and rows cut at both ends (the gaps between
 * them read through a sink); values against the permutation formula; a
 * source cut short after planning is EIO naming the tensor. */
START_TEST(permuted_rows_read_straight_into_output)
{
	enum { NH = 8, HD = 64, H = 512 };
	const int C0 = _i ? 16 : 0, C1 = _i ? 496 : H, W = C1 - C0;
	static const struct tu_tensor t[] = {{"q", CK_DT_F32, 2, {NH * HD, H}}};
	char map[256];
	snprintf(map, sizeof map,
		 "{\"rules\": [{\"from\": \"q\", \"to\": \"qp\", \"expr\": "
		 "\"x.view(8, 2, -1, 512).transpose(1, 2).reshape(-1, 512).narrow(1, %d, %d)\"}]}",
		 C0, W);
	struct whole_read r;
	whole_read(&r, t, map, "q", "qp", (size_t)NH * HD * W * 4);
	/* the rows' bytes, and with the cut rows at most the gaps between them */
	ck_assert_uint_ge(atomic_load(&r.e.source_bytes_read), (uint64_t)NH * HD * W * 4);
	ck_assert_uint_le(atomic_load(&r.e.source_bytes_read), (uint64_t)(NH * HD * H - H + W) * 4);
	int sr[NH * HD]; /* the permutation: output row k is source row sr[k] */
	for (int k = 0; k < NH * HD; k++)
		sr[k] = k / HD * HD + k % 2 * HD / 2 + k % HD / 2;
	rows_match(r.out, NH * HD, W, r.img + r.se->t.offset, H, C0, sr);
	whole_read_end(&r);
}
END_TEST

/* Tensor-parallel shards joined along their rows (a row-parallel weight of a
 * tp=2 checkpoint, a shard per file: cat([a, b], 1)) read each shard's rows
 * straight into its half of the output rows: one read per file, the window
 * never filled. BF16 shards widened to F32 convert, and one shard joined to
 * itself has two steps reading the same bytes: both go through the window.
 * Values against the shards' bytes. */
START_TEST(column_shards_read_straight_into_output)
{
	enum { R = 200, C = 256 };
	enum ck_dtype dt = _i == 1 ? CK_DT_BF16 : CK_DT_F32;
	struct tu_tensor ta[] = {{"a", dt, 2, {R, C}}}, tb[] = {{"b", dt, 2, {R, C}}};
	char *d = tu_mkdtemp(), *pa = tu_path(d, "a.safetensors"),
	     *pb = tu_path(d, "b.safetensors");
	tu_write_st(pa, ta, 1);
	tu_write_st(pb, tb, 1);
	size_t la, lb;
	unsigned char *ia = tu_read(pa, &la), *ib = tu_read(pb, &lb);
	struct ck_catalog *tc;
	struct ck_err err;
	ck_assert_msg(ck_catalog_open(d, &tc, &err) == 0, "%s", err.msg);
	static const char *const maps[] = {
	    "{\"rules\": [{\"from\": {\"a\": \"a\", \"b\": \"b\"}, \"to\": \"ab\", \"expr\": "
	    "\"cat([a, b], 1)\"}]}",
	    "{\"rules\": [{\"from\": {\"a\": \"a\", \"b\": \"b\"}, \"to\": \"ab\", \"expr\": "
	    "\"cat([a, b], 1).to(F32)\"}]}",
	    /* one shard twice: two steps read the same bytes */
	    "{\"unused\": \"drop\", \"rules\": [{\"from\": {\"a\": \"a\"}, \"to\": \"ab\", "
	    "\"expr\": \"cat([a, a], 1)\"}]}"};
	const char *map = maps[_i];
	struct ck_mapping *m;
	struct ck_plan *p;
	ck_assert_msg(ck_mapping_parse(map, strlen(map), "t.json", &m, &err) == 0, "%s", err.msg);
	ck_assert_msg(ck_plan_build(tc, &m, 1, &p, &err) == 0, "%s", err.msg);
	ck_mapping_free(m);
	struct ck_engine e;
	ck_engine_init(&e, p, 1);
	struct ck_eval_ctx c;
	ck_eval_ctx_init(&c, &e);
	size_t n = (size_t)R * 2 * C * 4, ses = ck_dtype_size(dt);
	float *out = malloc(n);
	ck_assert_msg(ck_engine_read(&c, tidx(p, "ab"), 0, n, out, &err) == 0, "%s", err.msg);
	if (_i == 2) {
		ck_assert_uint_le(atomic_load(&e.source_bytes_read), (uint64_t)2 * R * C * ses);
	} else {
		ck_assert_uint_eq(atomic_load(&e.source_bytes_read), (uint64_t)2 * R * C * ses);
	}
	if (_i)
		ck_assert_uint_gt(c.win.cap, 0);
	else {
		ck_assert_uint_eq(c.win.cap, 0);
		ck_assert_uint_eq(atomic_load(&e.read_requests), 2);
	}
	const unsigned char *sa = ia + ck_catalog_find(tc, "a")->t.offset,
			    *sb = _i == 2 ? sa : ib + ck_catalog_find(tc, "b")->t.offset;
	for (int r = 0; r < R; r++)
		for (int col = 0; col < 2 * C; col++) {
			float want = src_elem(col < C ? sa : sb, ses, r * C + col % C);
			ck_assert_msg(memcmp(&out[r * 2 * C + col], &want, 4) == 0, "row %d col %d",
				      r, col);
		}
	free(out);
	ck_eval_ctx_free(&c);
	ck_engine_fini(&e);
	ck_plan_free(p);
	ck_catalog_free(tc);
	free(ia);
	free(ib);
	free(pa);
	free(pb);
	tu_rmtree(d);
	free(d);
}
END_TEST

/* A column slice (a tensor-parallel rank's share of a row-parallel weight)
 * reads its rows straight into the output too: rows under 4 KiB apart in
 * one read (the gaps into a sink, at most the union's bytes), rows further
 * apart one request each, its bytes and no more; the window is never filled.
 * Values against the source rows; a source cut short is EIO naming it. */
START_TEST(column_slice_reads_straight_into_output)
{
	enum { R = 256, C = 2048 };
	const int c0 = _i ? 0 : 100, w = _i ? 512 : 1800;
	static const struct tu_tensor t[] = {{"w", CK_DT_F32, 2, {R, C}}};
	char map[160];
	snprintf(
	    map, sizeof map,
	    "{\"rules\": [{\"from\": \"w\", \"to\": \"s\", \"expr\": \"x.narrow(1, %d, %d)\"}]}",
	    c0, w);
	size_t n = (size_t)R * w * 4;
	struct whole_read r;
	whole_read(&r, t, map, "w", "s", n);
	uint64_t got = atomic_load(&r.e.source_bytes_read);
	if (_i) {
		ck_assert_uint_eq(got, n);
		ck_assert_uint_eq(atomic_load(&r.e.read_requests), R);
	} else {
		ck_assert_uint_ge(got, n);
		ck_assert_uint_le(got, (uint64_t)((R - 1) * C + w) * 4);
	}
	rows_match(r.out, R, w, r.img + r.se->t.offset, C, c0, NULL);
	whole_read_end(&r);
}
END_TEST

/* ck_preadv_full: buffers filled in order, empty ones skipped (none at all
 * reads nothing), a read past the end of the file EIO; ck_pread_full of
 * nothing reads nothing. */
START_TEST(preadv_full_fills_in_order)
{
	char *d = tu_mkdtemp(), *path = tu_path(d, "f");
	unsigned char img[100];
	for (int i = 0; i < 100; i++)
		img[i] = (unsigned char)(i * 7 + 1);
	FILE *f = fopen(path, "wb");
	ck_assert(f && fwrite(img, 1, 100, f) == 100 && fclose(f) == 0);
	int fd = open(path, O_RDONLY);
	ck_assert_int_ge(fd, 0);
	unsigned char a[10], b[20], z;
	struct iovec v[] = {{&z, 0}, {a, 10}, {&z, 0}, {b, 20}, {&z, 0}};
	ck_assert_int_eq(ck_preadv_full(fd, v, 5, 5), 0);
	ck_assert(memcmp(a, img + 5, 10) == 0 && memcmp(b, img + 15, 20) == 0);
	struct iovec none[] = {{&z, 0}, {&z, 0}};
	ck_assert_int_eq(ck_preadv_full(fd, none, 2, 1000), 0);
	struct iovec past[] = {{a, 10}, {b, 20}};
	ck_assert_int_eq(ck_preadv_full(fd, past, 2, 80), -EIO);
	ck_assert_int_eq(ck_pread_full(fd, a, 0, 1000), 0);
	ck_assert_int_eq(ck_pread_full(fd, b, 20, 80), 0);
	ck_assert(memcmp(b, img + 80, 20) == 0);
	close(fd);
	tu_rmtree(d);
	free(path);
	free(d);
}
END_TEST

/* A source truncated after planning: EIO for the reads that need it. */
START_TEST(truncated_source_is_eio)
{
	struct ck_plan *p = plan_of(MAP);
	struct ck_engine e;
	ck_engine_init(&e, p, _i & 1);
	maybe_direct(&e, _i);
	struct ck_eval_ctx c;
	ck_eval_ctx_init(&c, &e);
	char *path = tu_path(dir, "model.safetensors");
	ck_assert_int_eq(truncate(path, (off_t)(file_len - 100)), 0);
	struct ck_err err;
	unsigned char buf[4096];
	ck_assert_int_eq(ck_engine_read(&c, tidx(p, "cat"), (uint64_t)R * C * 8 - 4096, 4096, buf,
				       &err), -1);
	ck_assert_int_eq(err.sys_errno, 5 /* EIO */);
	ck_assert_ptr_nonnull(strstr(err.msg, "reading tensor \"other\""));
	/* other tensors are still served */
	ck_assert_int_eq(ck_engine_read(&c, tidx(p, "rows"), 0, 4096, buf, &err), 0);
	/* a window whose read failed is not found again: the last 50 elements
	 * of ob lie in the window of the 4 KiB before them, and past the end */
	uint64_t ob = (uint64_t)R * C * 2;
	ck_assert_int_eq(ck_engine_read(&c, tidx(p, "ob"), ob - 4096, 4096, buf, &err), -1);
	ck_assert_int_eq(ck_engine_read(&c, tidx(p, "ob"), ob - 100, 100, buf, &err), -1);
	ck_assert_int_eq(err.sys_errno, 5 /* EIO */);
	free(path);
	ck_eval_ctx_free(&c);
	ck_engine_fini(&e);
	ck_plan_free(p);
}
END_TEST

/* convert writes a target that transposes a source larger than the window
 * (rows under a page apart: linear chunks read the whole source for each)
 * in blocks of the source's rows, every other dim whole: each source byte
 * is read once, and the file holds the transpose, padding zeros included. */
START_TEST(convert_transposes_in_blocks)
{
	static const struct tu_tensor t[] = {{"w", CK_DT_F32, 2, {1200, 700}},
					     {"h", CK_DT_BF16, 2, {700, 1900}}};
	char *d;
	unsigned char *img;
	struct ck_catalog *tc;
	struct ck_err err;
	struct ck_plan *p = own_plan(
	    t, 2,
	    "{\"rules\": [{\"from\": \"w\", \"to\": \"wt\", \"expr\": \"x.t()\", \"share\": true},"
	    "{\"from\": \"w\", \"to\": \"wp\", \"expr\": \"x.t().pad(1, 1250)\", \"share\": true},"
	    "{\"from\": \"h\", \"to\": \"ht\", \"expr\": \"x.t()\"}]}",
	    &d, &img, &tc);
	size_t len;
	for (uint32_t k = 0; k < 3; k++)
		ck_assert_int_eq(ck_engine_block_dim(&(struct ck_engine){.plan = p, .window_max = 65536}, k),
				 1);
	char *out = tu_path(d, "out");
	/* 64 KiB chunks and window, blocks of at most 256 KiB */
	struct ck_convert_opts o = {.threads = 2, .use_uring = 1, .window_max = 65536,
				    .chunk = 65536, .block = 262144};
	struct ck_convert_stats st;
	ck_assert_msg(ck_convert(p, out, &o, &st, &err) == 0, "%s", err.msg);
	ck_assert_uint_eq(st.source_bytes_read, 2ull * 1200 * 700 * 4 + 700ull * 1900 * 2);
	struct ck_catalog *oc;
	ck_assert_msg(ck_catalog_open(out, &oc, &err) == 0, "%s", err.msg);
	char *of = tu_path(out, "model.safetensors");
	unsigned char *oimg = tu_read(of, &len);
	static const char *const tgt[] = {"wt", "wp", "ht"}, *const src[] = {"w", "w", "h"};
	static const unsigned char zero[4];
	for (int i = 0; i < 3; i++) {
		const struct ck_catalog_entry *se = ck_catalog_find(tc, src[i]);
		const struct ck_catalog_entry *e = ck_catalog_find(oc, tgt[i]);
		ck_assert_ptr_nonnull(e);
		int64_t rows = se->t.shape[0], cols = se->t.shape[1], width = i == 1 ? 1250 : rows;
		size_t es = ck_dtype_size(se->t.dtype);
		ck_assert_int_eq(e->t.shape[0], cols);
		ck_assert_int_eq(e->t.shape[1], width);
		const unsigned char *sb = img + se->t.offset, *ob = oimg + e->t.offset;
		for (int64_t r = 0; r < cols; r++)
			for (int64_t c = 0; c < width; c++)
				ck_assert_msg(memcmp(ob + es * (size_t)(r * width + c),
						     c < rows ? sb + es * (size_t)(c * cols + r) : zero,
						     es) == 0,
					      "%s[%lld, %lld]", tgt[i], (long long)r, (long long)c);
	}
	/* a box straddling the padding, into a buffer that held other bytes */
	struct ck_engine e;
	ck_engine_init(&e, p, 1);
	struct ck_eval_ctx c;
	ck_eval_ctx_init(&c, &e);
	const struct ck_catalog_entry *se = ck_catalog_find(tc, "w");
	int64_t lo[2] = {300, 1190}, hi[2] = {700, 1250};
	unsigned char *box = malloc(400 * 60 * 4);
	ck_assert_ptr_nonnull(box);
	memset(box, 0xaa, 400 * 60 * 4);
	ck_assert_msg(ck_engine_read_box(&c, (uint32_t)(ck_plan_find(p, "wp") - p->t), lo, hi, box,
					 &err) == 0,
		      "%s", err.msg);
	for (int64_t r = 300; r < 700; r++)
		for (int64_t k = 1190; k < 1250; k++)
			ck_assert(memcmp(box + 4 * ((r - 300) * 60 + (k - 1190)),
					 k < 1200 ? img + se->t.offset + 4 * (k * 700 + r) : zero, 4) == 0);
	hi[1] = 1251;
	ck_assert_int_eq(ck_engine_read_box(&c, (uint32_t)(ck_plan_find(p, "wp") - p->t), lo, hi, box,
					    &err),
			 -1);
	free(box);
	ck_eval_ctx_free(&c);
	ck_engine_fini(&e);
	/* diff reads such a pair in blocks too, and names the lowest flat index
	 * that differs, found in the last block: wt[0, 1199] (flat 1199) after
	 * wt[699, 0] (flat 838,800, in the first block) */
	int fd = open(of, O_WRONLY);
	ck_assert_int_ge(fd, 0);
	const struct ck_catalog_entry *we = ck_catalog_find(oc, "wt");
	static const uint64_t flip[] = {699 * 1200, 1199};
	for (int i = 0; i < 2; i++) {
		unsigned char v = oimg[we->t.offset + 4 * flip[i] + 3] ^ 0x40;
		ck_assert_int_eq(pwrite(fd, &v, 1, (off_t)(we->t.offset + 4 * flip[i] + 3)), 1);
	}
	close(fd);
	struct ck_catalog *fc;
	struct ck_plan *fp;
	ck_assert_msg(ck_catalog_open(out, &fc, &err) == 0, "%s", err.msg);
	ck_assert_msg(ck_plan_build(fc, NULL, 0, &fp, &err) == 0, "%s", err.msg);
	uint32_t ia = (uint32_t)(ck_plan_find(p, "wt") - p->t), ib = (uint32_t)(ck_plan_find(fp, "wt") - fp->t);
	struct ck_cmp_opts co = {.bytes = 1, .threads = 1, .use_uring = 1, .window_max = 65536,
				 .chunk = 262144};
	struct ck_cmp_report rep;
	ck_assert_msg(ck_compare(p, fp, &ia, &ib, 1, &co, &rep, &err) == 0, "%s", err.msg);
	ck_assert_uint_eq(rep.read_a, 1200 * 700 * 4); /* the source once */
	ck_assert_uint_eq(rep.read_b, 1200 * 700 * 4);
	ck_assert_uint_eq(rep.r[0].n_diff, 2);
	ck_assert_uint_eq(rep.r[0].first, 1199);
	float want;
	memcpy(&want, img + se->t.offset + 4 * (1199 * 700), 4);
	ck_assert(rep.r[0].first_a == (double)want);
	ck_cmp_report_free(&rep);
	ck_plan_free(fp);
	ck_catalog_free(fc);
	free(oimg);
	free(of);
	free(out);
	ck_catalog_free(oc);
	ck_plan_free(p);
	ck_catalog_free(tc);
	free(img);
	tu_rmtree(d);
	free(d);
}
END_TEST

/* A convert that fails half way (a source shrank after planning) leaves
 * no file behind, temporary or final; the same convert succeeds before. */
START_TEST(failed_convert_leaves_nothing)
{
	struct ck_plan *p = plan_of(MAP);
	struct ck_err err;
	char *ok = tu_path(dir, "ok"), *out = tu_path(dir, "out");
	struct ck_convert_opts o = {.max_shard_size = 100000, .threads = 2, .use_uring = 1};
	struct ck_convert_stats st;
	ck_assert_msg(ck_convert(p, ok, &o, &st, &err) == 0, "%s", err.msg);
	ck_assert_int_gt(st.n_files, 1);
	char *src = tu_path(dir, "model.safetensors");
	ck_assert_int_eq(truncate(src, (off_t)(file_len - 100)), 0);
	ck_assert_int_eq(ck_convert(p, out, &o, &st, &err), -1);
	ck_assert_ptr_nonnull(strstr(err.msg, "reading tensor"));
	DIR *d = opendir(out);
	ck_assert_ptr_nonnull(d);
	struct dirent *de;
	int n = 0;
	while ((de = readdir(d)))
		n += de->d_name[0] != '.' || strncmp(de->d_name, ".ckptfs", 7) == 0;
	closedir(d);
	ck_assert_int_eq(n, 0);
	free(src);
	free(ok);
	free(out);
	ck_plan_free(p);
}
END_TEST

/* O_DIRECT reads (io_direct.c) of any offset and length: unaligned ones,
 * one longer than all the bounce buffers together, up to the last byte of
 * a file whose size is not aligned, in one batch with a buffered request;
 * past the end is EIO and the ring reads on. Loop: 0 pread, 1 io_uring. */
START_TEST(odirect_reads_any_range)
{
	size_t n = (size_t)(CK_DIO_SLOTS + 2) * CK_DIO_PIECE + 1237;
	unsigned char *want = malloc(n);
	uint32_t x = 12345;
	for (size_t i = 0; i < n; i++) {
		x = x * 1103515245u + 12345u;
		want[i] = (unsigned char)(x >> 24);
	}
	char *path = tu_path(dir, "raw.bin");
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, want, n), (ssize_t)n);
	int dfd = open(path, O_RDONLY | O_DIRECT | O_CLOEXEC);
	ck_assert_msg(dfd >= 0, "%s refuses O_DIRECT: run the tests with TMPDIR on a disk file system",
		      path);
	const uint64_t r[][2] = {{0, 1},	{1, 4095},	   {4095, 2},	    {4096, 4096},
				 {5000, 0},	{n - 1, 1},	   {n - 5000, 5000}, {0, n},
				 {777, n - 777}, {123, 3 * CK_DIO_PIECE + 77}, {CK_DIO_PIECE - 1, 2}};
	enum { NR = sizeof r / sizeof *r };
	struct ck_io_req reqs[NR + 1];
	unsigned char *out[NR + 1];
	for (int k = 0; k <= NR; k++) {
		uint64_t off = k < NR ? r[k][0] : 3, len = k < NR ? r[k][1] : 10000;
		out[k] = malloc(len + 1);
		/* the last one reads the buffered descriptor */
		reqs[k] = (struct ck_io_req){k < NR ? dfd : fd, off, len, out[k] + 1,
					     k < NR ? CK_DIO_ALIGN : 0};
	}
	struct ck_io io;
	ck_io_init(&io, _i, 64, NULL);
	ck_assert_int_eq(ck_io_read(&io, reqs, NR + 1), 0);
	for (int k = 0; k <= NR; k++) {
		ck_assert_msg(memcmp(out[k] + 1, want + reqs[k].off, reqs[k].len) == 0, "request %d", k);
		free(out[k]);
	}
	/* the synchronous reader of direct spans, through a bounce buffer of two
	 * blocks: every request again, in many pieces */
	unsigned char *bounce = aligned_alloc(CK_DIO_ALIGN, 2 * CK_DIO_ALIGN);
	for (int k = 0; k < NR; k++) {
		unsigned char *o = malloc(r[k][1] + 1);
		ck_assert_int_eq(ck_io_pread_direct(dfd, o + 1, r[k][1], r[k][0], bounce, 2 * CK_DIO_ALIGN),
				 0);
		ck_assert_msg(memcmp(o + 1, want + r[k][0], r[k][1]) == 0, "pread_direct %d", k);
		free(o);
	}
	unsigned char tail[64];
	ck_assert_int_eq(ck_io_pread_direct(dfd, tail, 20, n - 10, bounce, 2 * CK_DIO_ALIGN), -EIO);
	free(bounce);
	struct ck_io_req past = {dfd, n - 10, 20, tail, CK_DIO_ALIGN};
	ck_assert_int_eq(ck_io_read(&io, &past, 1), -EIO);
	struct ck_io_req last = {dfd, n - 10, 10, tail, CK_DIO_ALIGN};
	ck_assert_int_eq(ck_io_read(&io, &last, 1), 0);
	ck_assert(memcmp(tail, want + n - 10, 10) == 0);
	ck_io_close(&io);
	close(dfd);
	close(fd);
	free(path);
	free(want);
}
END_TEST

/* Only work worth a PCIe round trip goes to a GPU: casts and transposes,
 * not slices or concatenation. */
START_TEST(gpu_policy_keeps_copies_on_cpu)
{
	struct ck_plan *p = plan_of(MAP);
	static const struct {
		const char *name;
		int gpu;
	} want[] = {{"rows", 0}, {"cols", 0}, {"cat", 0}, {"tr", 1}, {"e4", 1}, {"wide", 1}};
	for (size_t k = 0; k < sizeof want / sizeof *want; k++)
		ck_assert_msg(ck_engine_gpu_worth(&p->t[tidx(p, want[k].name)]) == want[k].gpu,
			      "%s", want[k].name);
	ck_plan_free(p);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("engine");
	TCase *tc = tcase_create("eval");
	tcase_set_timeout(tc, 120);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_loop_test(tc, values_match_reference, 0, 4);
	tcase_add_loop_test(tc, odirect_reads_any_range, 0, 2);
	tcase_add_test(tc, regions_read_only_what_they_need);
	tcase_add_test(tc, odirect_reads_through_small_gaps);
	tcase_add_test(tc, row_blocks_read_once);
	tcase_add_test(tc, small_window_same_bytes);
	tcase_add_test(tc, chunked_transpose_reads_source_once);
	tcase_add_test(tc, interleaved_rows_read_together);
	tcase_add_loop_test(tc, permuted_rows_read_straight_into_output, 0, 2);
	tcase_add_loop_test(tc, column_shards_read_straight_into_output, 0, 3);
	tcase_add_loop_test(tc, column_slice_reads_straight_into_output, 0, 2);
	tcase_add_test(tc, preadv_full_fills_in_order);
	tcase_add_loop_test(tc, truncated_source_is_eio, 0, 4);
	tcase_add_test(tc, failed_convert_leaves_nothing);
	tcase_add_test(tc, convert_transposes_in_blocks);
	tcase_add_test(tc, gpu_policy_keeps_copies_on_cpu);
	tcase_add_loop_test(tc, gguf_runs_stage_within_the_window, 0, 2);
	suite_add_tcase(s, tc);
	return tu_run_suite(s, 1);
}
