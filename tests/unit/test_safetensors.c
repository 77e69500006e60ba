/* Safetensors header validation: one test per malformed class, plus the
 * valid edge cases that must be accepted. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
	suite_add_tcase(s, tc);
	return tu_run_suite(s, 1);
}
