/* The places where cJSON is lenient and ckptfs must not be. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../malformed.h"
#include "ckpt/catalog.h"
#include "ckpt/safetensors.h"
#include "testutil.h"
#include "util/json_lex.h"
#include "util/json_plain.h"
#include "util/json_strict.h"

static int parses(const char *s, unsigned flags)
{
	struct ck_err err;
	cJSON *j = ck_json_parse(s, strlen(s), flags, CK_E_SOURCE, "t", &err);
	cJSON_Delete(j);
	return j != NULL;
}

START_TEST(trailing_garbage_refused)
{
	ck_assert(parses("{\"a\": 1}  \n\t ", 0));
	ck_assert(!parses("{\"a\": 1} x", 0));
	ck_assert(!parses("{\"a\": 1}{}", 0));
	ck_assert(!parses("{\"a\": 1}]", 0));
}
END_TEST

START_TEST(non_integer_numbers_refused)
{
	ck_assert(parses("[1, 0, -3, 9007199254740992]", CK_JSON_INTEGERS_ONLY));
	ck_assert(!parses("[2.0]", CK_JSON_INTEGERS_ONLY));
	ck_assert(!parses("[1e3]", CK_JSON_INTEGERS_ONLY));
	ck_assert(!parses("[1E3]", CK_JSON_INTEGERS_ONLY));
	ck_assert(!parses("[9007199254740993]", CK_JSON_INTEGERS_ONLY));
	ck_assert(!parses("[18446744073709551617]", CK_JSON_INTEGERS_ONLY));
	/* numbers inside strings are not numbers */
	ck_assert(parses("[\"2.5e3\"]", CK_JSON_INTEGERS_ONLY));
	/* config.json may hold floats */
	ck_assert(parses("{\"rms_norm_eps\": 1e-05, \"rope_theta\": 500000.0}", 0));
	int64_t v;
	cJSON *n = cJSON_CreateNumber(2.5);
	ck_assert_int_eq(ck_json_int(n, 0, 10, &v), -1);
	cJSON_SetNumberValue(n, 7);
	ck_assert_int_eq(ck_json_int(n, 0, 10, &v), 0);
	ck_assert_int_eq(v, 7);
	ck_assert_int_eq(ck_json_int(n, 0, 5, &v), -1);
	cJSON_Delete(n);
}
END_TEST

START_TEST(nul_and_utf8_refused)
{
	ck_assert(!parses("{\"a\\u0000b\": 1}", 0));
	ck_assert(parses("{\"a\\u0001b\": 1}", 0));
	ck_assert(!parses("{\"a\xc0\xaf\": 1}", 0));	 /* overlong '/' */
	ck_assert(!parses("{\"a\xed\xa0\x80\": 1}", 0)); /* surrogate */
	ck_assert(!parses("{\"a\xf4\x90\x80\x80\": 1}", 0)); /* > U+10FFFF */
	ck_assert(parses("{\"\xce\xba\xf0\x9f\x98\x80\": 1}", 0));
	/* a NUL byte ends cJSON's view of the text: must not pass as "{}" */
	const char s[] = "{}\0 junk";
	struct ck_err err;
	ck_assert_ptr_null(ck_json_parse(s, sizeof s - 1, 0, CK_E_SOURCE, "t", &err));
	ck_assert_ptr_nonnull(strstr(err.msg, "NUL byte"));
}
END_TEST

/* The scan and the streaming reader skip plain bytes eight at a time: a byte
 * that needs a look must be seen at every position of a word, before and
 * after the first whole word of a string. */
static int lex_string(const char *doc, size_t n, char *out, size_t cap)
{
	struct ck_err err;
	struct ck_jlex p = {.s = doc, .n = n, .what = "t", .ctx = "t", .err = &err};
	int rc = ck_jlex_string(&p);
	if (rc == 0)
		snprintf(out, cap, "%s", p.str);
	ck_jlex_free(&p);
	return rc;
}

/* The plain run ends exactly at the first byte that is not plain, wherever
 * it lies in its word, whatever follows it (a 0x00 or 0x1f followed by 0x01
 * makes the word tests flag the next byte too), against a byte by byte
 * count. */
START_TEST(plain_run_is_exact)
{
	static const unsigned char odd[] = {0x00, 0x01, 0x1f, '"', '\\', 0x80, 0xc3, 0xff};
	static const unsigned char after[] = {'a', 0x01, 0x00, 0x21, 0x7f, '"'};
	for (int len = 0; len <= 20; len++)
		for (int at = 0; at <= len; at++)
			for (size_t o = 0; o < sizeof odd; o++)
				for (size_t f = 0; f < sizeof after; f++) {
					char s[24];
					memset(s, 'x', sizeof s);
					if (at < len)
						s[at] = (char)odd[o];
					if (at + 1 < len)
						s[at + 1] = (char)after[f];
					size_t want = 0;
					while (want < (size_t)len &&
					       ck_json_plain_byte((unsigned char)s[want]))
						want++;
					ck_assert_uint_eq(ck_json_plain_run(s, (size_t)len), want);
				}
}
END_TEST

START_TEST(special_bytes_at_every_position)
{
	struct ck_err err;
	for (int at = 0; at < 24; at++) {
		char doc[64], want[64], got[64];
		/* "aaa<x>bbb", x at position at of the string */
		struct {
			const char *ins;
			int scan_ok, lex_ok;
			const char *dec; /* what the reader decodes it to */
		} c[] = {
			{"\x01", 1, 0, NULL},	/* a raw control byte: JSON refuses it */
			{"\xff", 0, 0, NULL},	/* never UTF-8 */
			{"\0", 0, 0, NULL},	/* NUL */
			{"\\n", 1, 1, "\n"}, /* an escape */
			{"\\u0000", 0, 1, NULL},
			{"\xc3\xa9", 1, 1, "\xc3\xa9"}, /* U+00E9 */
			{"\\\"", 1, 1, "\""},
			{"\x7f", 1, 1, "\x7f"},
		};
		for (size_t k = 0; k < sizeof c / sizeof c[0]; k++) {
			size_t il = c[k].ins[0] ? strlen(c[k].ins) : 1, n = 0;
			doc[n++] = '"';
			memset(doc + n, 'a', (size_t)at), n += (size_t)at;
			memcpy(doc + n, c[k].ins, il), n += il;
			memset(doc + n, 'b', 24 - (size_t)at), n += 24 - (size_t)at;
			doc[n++] = '"';
			ck_assert_msg((ck_json_scan(doc, n, 0, CK_E_SOURCE, "t", &err) == 0) ==
					      c[k].scan_ok,
				      "scan, case %zu at %d", k, at);
			if (!c[k].scan_ok)
				continue;
			int lex = lex_string(doc, n, got, sizeof got);
			ck_assert_msg((lex == 0) == c[k].lex_ok, "reader, case %zu at %d", k, at);
			if (!c[k].lex_ok)
				continue;
			snprintf(want, sizeof want, "%.*s%s%.*s", at, "aaaaaaaaaaaaaaaaaaaaaaaa",
				 c[k].dec, 24 - at, "bbbbbbbbbbbbbbbbbbbbbbbb");
			ck_assert_str_eq(got, want);
		}
	}
}
END_TEST

START_TEST(keys_are_case_sensitive)
{
	/* cJSON_GetObjectItem would find "DTYPE" for "dtype" */
	const char *json = "{\"t\":{\"DTYPE\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
	size_t len;
	unsigned char *img = st_image(json, 4, &len);
	struct ck_file_tensors h;
	struct ck_err err;
	ck_assert_int_eq(ck_st_parse_buffer(img, len, "case", &h, &err), -1);
	ck_assert_ptr_nonnull(strstr(err.msg, "missing field \"dtype\""));
	free(img);
	/* and tensor names differing only in case are two tensors */
	json = "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
	       "\"W\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}";
	img = st_image(json, 2, &len);
	ck_assert_int_eq(ck_st_parse_buffer(img, len, "case", &h, &err), 0);
	ck_assert_uint_eq(h.n_tensors, 2);
	ck_file_tensors_free(&h);
	free(img);
}
END_TEST

/* 100,000 keys, parsed and catalogued; with an O(n^2) lookup (cJSON's object
 * lookup per key) this runs for minutes and hits the test timeout. */
START_TEST(hundred_thousand_keys)
{
	enum { N = 100000 };
	size_t cap = (size_t)N * 128 + 64, k = 0;
	char *json = malloc(cap);
	ck_assert_ptr_nonnull(json);
	k += (size_t)snprintf(json + k, cap - k, "{");
	for (int i = 0; i < N; i++)
		k += (size_t)snprintf(json + k, cap - k,
				      "%s\"layers.%d.experts.w\":{\"dtype\":\"U8\",\"shape\":[1],"
				      "\"data_offsets\":[%d,%d]}",
				      i ? "," : "", N - 1 - i, i, i + 1);
	snprintf(json + k, cap - k, "}");
	size_t len;
	unsigned char *img = st_image(json, N, &len);
	char *dir = tu_mkdtemp();
	char *path = tu_path(dir, "many.safetensors");
	tu_write(path, img, len);
	struct ck_catalog *cat;
	struct ck_err err;
	ck_assert_msg(ck_catalog_open(path, &cat, &err) == 0, "%s", err.msg);
	ck_assert_uint_eq(cat->n_entries, N);
	ck_assert_str_eq(cat->entries[2].t.name, "layers.2.experts.w"); /* natural order */
	const struct ck_catalog_entry *e = ck_catalog_find(cat, "layers.77777.experts.w");
	ck_assert_ptr_nonnull(e);
	ck_assert_uint_eq(e->t.offset - (8 + strlen(json)), N - 1 - 77777);
	ck_catalog_free(cat);
	tu_rmtree(dir);
	free(path);
	free(dir);
	free(img);
	free(json);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("json_strict");
	TCase *tc = tcase_create("strict");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, trailing_garbage_refused);
	tcase_add_test(tc, non_integer_numbers_refused);
	tcase_add_test(tc, nul_and_utf8_refused);
	tcase_add_test(tc, plain_run_is_exact);
	tcase_add_test(tc, special_bytes_at_every_position);
	tcase_add_test(tc, keys_are_case_sensitive);
	tcase_add_test(tc, hundred_thousand_keys);
	suite_add_tcase(s, tc);
	return tu_run_suite(s, 1);
}
