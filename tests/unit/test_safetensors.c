/* Safetensors header validation: one test per malformed class, plus the
 * valid edge cases that must be accepted. */
#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../malformed.h"
#include "ckpt/catalog.h"
#include "ckpt/safetensors.h"
#include "ckpt/st_writer.h"
#include "testutil.h"

/* Each class is refused from memory and from a file, with a one-line message
 * naming the file and containing the class's fragment. */
START_TEST(malformed_class_refused)
{
	const struct malformed_class *c = &malformed_classes[_i];
	size_t len;
	unsigned char *img = c->make(&len);
	struct ck_file_tensors h;
	struct ck_err err;
	ck_assert_int_eq(ck_st_parse_buffer(img, len, c->name, &h, &err), -1);
	ck_assert_int_eq(err.kind, CK_E_SOURCE);
	ck_assert_msg(strstr(err.msg, c->expect), "%s: message \"%s\" lacks \"%s\"", c->name,
		      err.msg, c->expect);
	ck_assert_msg(strncmp(err.msg, c->name, strlen(c->name)) == 0, "%s: not named: %s",
		      c->name, err.msg);
	ck_assert_ptr_null(strchr(err.msg, '\n'));

	char *dir = tu_mkdtemp();
	char *path = tu_path(dir, "bad.safetensors");
	tu_write(path, img, len);
	struct ck_catalog *cat = (void *)1;
	ck_assert_int_eq(ck_catalog_open(path, &cat, &err), -1);
	ck_assert_ptr_null(cat);
	ck_assert_int_eq(err.kind, CK_E_SOURCE);
	ck_assert_msg(strstr(err.msg, c->expect), "%s (file): \"%s\"", c->name, err.msg);
	ck_assert_msg(strstr(err.msg, path), "%s: path missing from \"%s\"", c->name, err.msg);
	free(img);
	tu_rmtree(dir);
	free(path);
	free(dir);
}
END_TEST

START_TEST(valid_edge_cases_accepted)
{
	/* scalar, zero-size tensor between others, unknown entry field ignored,
	 * metadata, padding spaces, entries out of offset order */
	const char *json = "{\"__metadata__\":{\"format\":\"pt\"},"
			   "\"b\":{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[4,12]},"
			   "\"z\":{\"dtype\":\"F64\",\"shape\":[0,5],\"data_offsets\":[4,4],\"x\":1},"
			   "\"a\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]}}   ";
	size_t len;
	unsigned char *img = st_image(json, 12, &len);
	struct ck_file_tensors h;
	struct ck_err err;
	ck_assert_msg(ck_st_parse_buffer(img, len, "ok", &h, &err) == 0, "%s", err.msg);
	ck_assert_uint_eq(h.n_tensors, 3);
	ck_assert_uint_eq(h.n_meta, 1);
	ck_assert_str_eq(h.meta[0].key, "format");
	ck_assert_str_eq(h.tensors[0].name, "a"); /* sorted by offset */
	ck_assert_int_eq(h.tensors[0].ndim, 0);
	ck_assert_uint_eq(h.tensors[0].numel, 1);
	ck_assert_uint_eq(h.tensors[0].offset, 8 + strlen(json));
	ck_assert_uint_eq(h.tensors[2].nbytes, 8);
	ck_assert_str_eq(h.tensors[2].name, "b");
	ck_file_tensors_free(&h);
	free(img);

	/* in offset order but for the last pair: still sorted before the tiling check */
	json = "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
	       "\"c\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]},"
	       "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}";
	img = st_image(json, 12, &len);
	ck_assert_msg(ck_st_parse_buffer(img, len, "late", &h, &err) == 0, "%s", err.msg);
	ck_assert_str_eq(h.tensors[1].name, "b");
	ck_assert_str_eq(h.tensors[2].name, "c");
	ck_file_tensors_free(&h);
	free(img);

	img = st_image("{}", 0, &len); /* no tensors at all */
	ck_assert_int_eq(ck_st_parse_buffer(img, len, "empty", &h, &err), 0);
	ck_assert_uint_eq(h.n_tensors, 0);
	ck_file_tensors_free(&h);
	free(img);
}
END_TEST

/* A name given twice over different bytes: the entries tile the data, so
 * only a check of the names finds it, in memory and through the catalog
 * (which checks all its files' names at once), in the middle of others. */
START_TEST(repeated_name_over_other_bytes_refused)
{
	const char *json = "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
			   "\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]},"
			   "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[12,16]},"
			   "\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[16,24]}}";
	size_t len;
	unsigned char *img = st_image(json, 24, &len);
	struct ck_file_tensors h;
	struct ck_err err;
	ck_assert_int_eq(ck_st_parse_buffer(img, len, "mem", &h, &err), -1);
	ck_assert_msg(strstr(err.msg, "mem: duplicate key \"t\""), "%s", err.msg);
	char *dir = tu_mkdtemp();
	char *path = tu_path(dir, "rep.safetensors");
	tu_write(path, img, len);
	struct ck_catalog *cat = (void *)1;
	ck_assert_int_eq(ck_catalog_open(path, &cat, &err), -1);
	ck_assert_ptr_null(cat);
	ck_assert_int_eq(err.kind, CK_E_SOURCE);
	ck_assert_msg(strstr(err.msg, "duplicate key \"t\"") && strstr(err.msg, path), "%s",
		      err.msg);
	ck_assert_ptr_null(strchr(err.msg, '\n'));
	free(img);
	tu_rmtree(dir);
	free(path);
	free(dir);
}
END_TEST

START_TEST(every_dtype_accepted)
{
	static const char *names[] = {"BOOL",	 "U8",	   "I8",	  "F8_E5M2",	 "F8_E4M3",
				      "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "I16", "U16",
				      "F16",	 "BF16",    "I32",	  "U32",	 "F32",
				      "C64",	 "F64",	    "I64",	  "U64"};
	static const int sizes[] = {1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 4, 4, 4, 8, 8, 8, 8};
	for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
		char json[256];
		snprintf(json, sizeof json,
			 "{\"t\":{\"dtype\":\"%s\",\"shape\":[3],\"data_offsets\":[0,%d]}}", names[i],
			 3 * sizes[i]);
		size_t len;
		unsigned char *img = st_image(json, (size_t)(3 * sizes[i]), &len);
		struct ck_file_tensors h;
		struct ck_err err;
		ck_assert_msg(ck_st_parse_buffer(img, len, names[i], &h, &err) == 0, "%s", err.msg);
		ck_assert_str_eq(ck_dtype_name(h.tensors[0].dtype), names[i]);
		ck_assert_uint_eq(ck_dtype_size(h.tensors[0].dtype), (unsigned)sizes[i]);
		ck_file_tensors_free(&h);
		free(img);
	}
}
END_TEST

/* Writer -> parser round trip, including names that need JSON escaping. */
START_TEST(writer_round_trip)
{
	int64_t s1[] = {3, 5}, s2[] = {7};
	struct ck_st_out o[] = {{"we\"ird\\name\x01", CK_DT_F16, 2, s1, 30},
				{"ünïcode.κλειδί", CK_DT_I64, 1, s2, 56}};
	const char *mk[] = {"format"}, *mv[] = {"pt"};
	char *hdr;
	size_t hl;
	uint64_t off[2];
	struct ck_err err;
	ck_assert_int_eq(ck_st_build_header(o, 2, mk, mv, 1, &hdr, &hl, off, &err), 0);
	ck_assert_uint_eq((hl - 8) % 8, 0);
	unsigned char *img = calloc(1, hl + 86);
	memcpy(img, hdr, hl);
	struct ck_file_tensors h;
	ck_assert_msg(ck_st_parse_buffer(img, hl + 86, "rt", &h, &err) == 0, "%s", err.msg);
	ck_assert_uint_eq(h.n_tensors, 2);
	ck_assert_str_eq(h.tensors[0].name, o[0].name);
	ck_assert_str_eq(h.tensors[1].name, o[1].name);
	ck_assert_uint_eq(h.tensors[1].offset, hl + off[1]);
	ck_assert_int_eq(h.tensors[0].shape[1], 5);
	ck_file_tensors_free(&h);
	free(img);
	free(hdr);
}
END_TEST

/* The writer's text against the same header printed with snprintf from the
 * format's description: scalars, empty and 8-dim shapes, numbers up to 2^63
 * (shape and offset digits are written without printf). */
START_TEST(writer_text_is_the_format)
{
	srand(77 + (unsigned)_i);
	enum { N = 40 };
	struct ck_st_out o[N];
	int64_t shapes[N][CK_MAX_DIMS];
	char names[N][32];
	size_t cap = 64 + (size_t)N * 400, k = 0;
	char *want = malloc(cap);
	ck_assert_ptr_nonnull(want);
	k += (size_t)snprintf(want + k, cap - k, "{\"__metadata__\":{\"format\":\"pt\"}");
	uint64_t off = 0;
	for (int i = 0; i < N; i++) {
		int ndim = rand() % (CK_MAX_DIMS + 1);
		for (int d = 0; d < ndim; d++) { /* 0, small, or up to 2^63 - 1 */
			int kind = rand() % 3;
			uint64_t big =
			    ((uint64_t)rand() << 42 ^ (uint64_t)rand() << 21 ^ (uint64_t)rand()) &
			    INT64_MAX;
			shapes[i][d] = kind == 0 ? 0 : kind == 1 ? rand() % 1000 : (int64_t)big;
		}
		snprintf(names[i], sizeof names[i], "t.%d", i);
		uint64_t nb =
		    i == N - 1 ? UINT64_MAX / 2 : (uint64_t)rand() * (uint64_t)rand() >> 6;
		o[i] = (struct ck_st_out){names[i], i % 2 ? CK_DT_BF16 : CK_DT_F32, ndim, shapes[i],
					  nb};
		k += (size_t)snprintf(want + k, cap - k, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[",
				      names[i], ck_dtype_name(o[i].dtype));
		for (int d = 0; d < ndim; d++)
			k += (size_t)snprintf(want + k, cap - k, "%s%lld", d ? "," : "",
					      (long long)shapes[i][d]);
		k += (size_t)snprintf(want + k, cap - k, "],\"data_offsets\":[%llu,%llu]}",
				      (unsigned long long)off, (unsigned long long)(off + nb));
		off += nb;
	}
	k += (size_t)snprintf(want + k, cap - k, "}");
	while (k % 8)
		want[k++] = ' ';
	const char *mk[] = {"format"}, *mv[] = {"pt"};
	char *hdr;
	size_t hl;
	uint64_t offs[N];
	struct ck_err err;
	ck_assert_int_eq(ck_st_build_header(o, N, mk, mv, 1, &hdr, &hl, offs, &err), 0);
	ck_assert_uint_eq(hl, 8 + k);
	uint64_t jl = 0;
	for (int b = 0; b < 8; b++)
		jl |= (uint64_t)(unsigned char)hdr[b] << (8 * b);
	ck_assert_uint_eq(jl, k);
	ck_assert_int_eq(memcmp(hdr + 8, want, k), 0);
	free(hdr);
	free(want);
}
END_TEST

/* model.safetensors.index.json as HF writes it (two-space indents, one
 * "name": "file" line per tensor), against the text printed here with
 * snprintf: names with JSON escapes, runs of shards, 10^5 shards. */
START_TEST(index_json_is_hfs_layout)
{
	const char *names[] = {"a.weight", "we\"ird\\name", "ctl\x01", "b", "c", "d"};
	uint64_t of[] = {1, 1, 2, 2, 7, 99999};
	const char *esc[] = {"a.weight", "we\\\"ird\\\\name", "ctl\\u0001", "b", "c", "d"};
	size_t n = sizeof names / sizeof *names, len, k = 0, cap = 4096;
	char *want = malloc(cap);
	k += (size_t)snprintf(want + k, cap - k,
			      "{\n  \"metadata\": {\n    \"total_size\": %llu\n  },\n"
			      "  \"weight_map\": {",
			      18446744073709551615ull);
	for (size_t i = 0; i < n; i++)
		k += (size_t)snprintf(want + k, cap - k,
				      "%s\n    \"%s\": \"model-%05llu-of-%05llu.safetensors\"",
				      i ? "," : "", esc[i], (unsigned long long)of[i], 99999ull);
	k += (size_t)snprintf(want + k, cap - k, "\n  }\n}\n");
	char *got = ck_st_index_json(names, of, n, 99999, UINT64_MAX, &len);
	ck_assert_ptr_nonnull(got);
	ck_assert_uint_eq(len, k);
	ck_assert_str_eq(got, want); /* NUL-terminated as well */
	free(got);
	free(want);
}
END_TEST

/* The image of a header of n U8 entries "model.layers.{i}.mlp.experts.w"
 * (shape [1], bytes i to i + 1; 84 bytes each), extra put in as the member
 * after entry at (raw JSON text, or NULL), bad_last: the last entry's dtype
 * unknown, and tail after the closing brace. */
static unsigned char *big_header(int n, int at, const char *extra, int bad_last, const char *tail,
				 size_t *len)
{
	size_t cap = (size_t)n * 100 + (extra ? strlen(extra) : 0) + strlen(tail) + 16, k = 0;
	char *json = malloc(cap);
	ck_assert_ptr_nonnull(json);
	json[k++] = '{';
	for (int i = 0; i < n; i++) {
		const char *dt = bad_last && i == n - 1 ? "Q9" : "U8";
		k += (size_t)snprintf(json + k, cap - k,
				      "%s\"model.layers.%d.mlp.experts.w\":{\"dtype\":\"%s\","
				      "\"shape\":[1],\"data_offsets\":[%d,%d]}",
				      i ? "," : "", i, dt, i, i + 1);
		if (extra && i == at)
			k += (size_t)snprintf(json + k, cap - k, ",%s", extra);
	}
	snprintf(json + k, cap - k, "}%s", tail);
	unsigned char *img = st_image(json, (size_t)n, len);
	free(json);
	return img;
}

/* ck_st_read_fd over the file of img (len bytes; size: the size it is
 * said to have), its result and message against the whole text's parse
 * (ck_st_parse_buffer): same outcome, same message, same tensors. */
static void read_fd_as_whole(const unsigned char *img, size_t len, uint64_t size, const char *label)
{
	char *dir = tu_mkdtemp();
	char *path = tu_path(dir, "big.safetensors");
	tu_write(path, img, len);
	int fd = open(path, O_RDONLY);
	ck_assert_int_ge(fd, 0);
	struct ck_file_tensors got, want;
	struct ck_err gerr, werr;
	int g = ck_st_read_fd(fd, size, path, &got, &gerr);
	int w = ck_st_parse_buffer(img, len, path, &want, &werr);
	ck_assert_msg(g == w, "%s: read %d (%s), whole text %d (%s)", label, g, g ? gerr.msg : "",
		      w, w ? werr.msg : "");
	if (g < 0)
		ck_assert_str_eq(gerr.msg, werr.msg);
	ck_assert_uint_eq(got.n_tensors, want.n_tensors);
	ck_assert_uint_eq(got.n_meta, want.n_meta);
	for (size_t i = 0; i < got.n_tensors; i++) {
		ck_assert_str_eq(got.tensors[i].name, want.tensors[i].name);
		ck_assert_uint_eq(got.tensors[i].offset, want.tensors[i].offset);
		ck_assert_int_eq(got.tensors[i].dtype, want.tensors[i].dtype);
	}
	for (size_t i = 0; i < got.n_meta; i++)
		ck_assert_str_eq(got.meta[i].value, want.meta[i].value);
	ck_file_tensors_free(&got);
	ck_file_tensors_free(&want);
	close(fd);
	tu_rmtree(dir);
	free(path);
	free(dir);
}

/* Headers of 4 MiB and more are parsed as a helper thread reads them in:
 * the result is the whole text's whatever comes where, a member longer than
 * the parse's look-ahead and than the first read (a 1.5 MB metadata value)
 * included, and so is the message of an error at the end or after the
 * object. */
START_TEST(large_header_read_as_streamed)
{
	enum { N = 60000 };
	char *meta = malloc(1536 * 1024 + 64);
	ck_assert_ptr_nonnull(meta);
	int k = sprintf(meta, "\"__metadata__\":{\"config\":\"");
	memset(meta + k, 'c', 1536 * 1024);
	strcpy(meta + k + 1536 * 1024, "\"}");
	struct {
		const char *label, *extra, *tail;
		int at, bad_last;
	} v[] = {{"plain", NULL, "", 0, 0},
		 {"long metadata in the middle", meta, "  ", N / 2, 0},
		 {"long metadata first", meta, "", 0, 0},
		 {"unknown dtype in the last entry", NULL, "", 0, 1},
		 {"trailing data", NULL, " x", 0, 0},
		 {"a NUL byte after the object", NULL, "\n\\u0000", 0, 0}};
	for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
		size_t len;
		unsigned char *img =
		    big_header(N, v[i].at, v[i].extra, v[i].bad_last, v[i].tail, &len);
		ck_assert_uint_ge(len, 8 + (4u << 20)); /* streamed */
		read_fd_as_whole(img, len, len, v[i].label);
		free(img);
	}
	free(meta);
}
END_TEST

/* A file that ends inside its header (shorter than its size said: cut while
 * it was read) fails as a read error naming the file, for a header read at
 * once and for one read as it is parsed; no hang, no crash. */
START_TEST(header_cut_short_is_a_read_error)
{
	for (int big = 0; big < 2; big++) {
		size_t len;
		unsigned char *img = big_header(big ? 60000 : 50, 0, NULL, 0, "", &len);
		uint64_t hlen = 0;
		for (int b = 7; b >= 0; b--)
			hlen = hlen << 8 | img[b];
		char *dir = tu_mkdtemp();
		char *path = tu_path(dir, "cut.safetensors");
		tu_write(path, img, 8 + hlen * 2 / 3);
		int fd = open(path, O_RDONLY);
		ck_assert_int_ge(fd, 0);
		struct ck_file_tensors h;
		struct ck_err err;
		ck_assert_int_eq(ck_st_read_fd(fd, len, path, &h, &err), -1);
		ck_assert_int_eq(err.kind, CK_E_SYS);
		ck_assert_msg(strstr(err.msg, path) && strstr(err.msg, "cannot read header"), "%s",
			      err.msg);
		ck_assert_uint_eq(h.n_tensors, 0);
		close(fd);
		tu_rmtree(dir);
		free(path);
		free(dir);
		free(img);
	}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("safetensors");
	TCase *tc = tcase_create("validation");
	tcase_set_timeout(tc, 60);
	tcase_add_loop_test(tc, malformed_class_refused, 0, (int)n_malformed_classes);
	tcase_add_test(tc, valid_edge_cases_accepted);
	tcase_add_test(tc, repeated_name_over_other_bytes_refused);
	tcase_add_test(tc, every_dtype_accepted);
	tcase_add_test(tc, writer_round_trip);
	tcase_add_loop_test(tc, writer_text_is_the_format, 0, 20);
	tcase_add_test(tc, index_json_is_hfs_layout);
	tcase_add_test(tc, large_header_read_as_streamed);
	tcase_add_test(tc, header_cut_short_is_a_read_error);
	suite_add_tcase(s, tc);
	return tu_run_suite(s, 1);
}
