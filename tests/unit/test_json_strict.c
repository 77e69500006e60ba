/* The places where cJSON is lenient and ckptfs must not be. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../malformed.h"
#include "ckpt/catalog.h"
#include "ckpt/index.h"
#include "ckpt/safetensors.h"
#include "ckpt/st_header.h"
#include "testutil.h"
#include "util/json_lex.h"
#include "util/json_plain.h"
#include "util/json_strict.h"
#include "util/jsonw.h"
#include "util/stream_read.h"

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
static int lex_string(const char *doc, size_t n, char *out, size_t cap, struct ck_err *err)
{
	struct ck_jlex p = {.s = doc, .n = n, .what = "t", .ctx = "t", .err = err};
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

/* The reader does the scan's checks itself (the header is walked once): it
 * must refuse what the scan refuses, with the scan's message, wherever the
 * byte lies relative to the eight-byte steps. */
START_TEST(special_bytes_at_every_position)
{
	struct ck_err err, lerr;
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
			{"\xc3(", 0, 0, NULL}, /* a lead byte without its continuation */
			{"\xe0\x80\xaf", 0, 0, NULL}, /* overlong */
			{"\0", 0, 0, NULL},	/* NUL */
			{"\\\0", 0, 0, NULL}, /* NUL escaped */
			{"\\n", 1, 1, "\n"}, /* an escape */
			{"\\u0000", 0, 0, NULL},
			{"\xc3\xa9", 1, 1, "\xc3\xa9"}, /* U+00E9 */
			{"\\\"", 1, 1, "\""},
			{"\x7f", 1, 1, "\x7f"},
		};
		for (size_t k = 0; k < sizeof c / sizeof c[0]; k++) {
			size_t il = c[k].ins[0] ? strlen(c[k].ins) : 1, n = 0;
			if (c[k].ins[0] == '\\' && !c[k].ins[1])
				il = 2; /* backslash, NUL */
			doc[n++] = '"';
			memset(doc + n, 'a', (size_t)at), n += (size_t)at;
			memcpy(doc + n, c[k].ins, il), n += il;
			memset(doc + n, 'b', 24 - (size_t)at), n += 24 - (size_t)at;
			doc[n++] = '"';
			ck_assert_msg((ck_json_scan(doc, n, 0, CK_E_SOURCE, "t", &err) == 0) ==
					      c[k].scan_ok,
				      "scan, case %zu at %d", k, at);
			int lex = lex_string(doc, n, got, sizeof got, &lerr);
			ck_assert_msg((lex == 0) == c[k].lex_ok, "reader, case %zu at %d", k, at);
			if (!c[k].scan_ok)
				ck_assert_str_eq(lerr.msg, err.msg);
			if (!c[k].lex_ok)
				continue;
			snprintf(want, sizeof want, "%.*s%s%.*s", at, "aaaaaaaaaaaaaaaaaaaaaaaa",
				 c[k].dec, 24 - at, "bbbbbbbbbbbbbbbbbbbbbbbb");
			ck_assert_str_eq(got, want);
		}
	}
}
END_TEST

/* Bytes that make or break a header: structure, number syntax, escapes,
 * NUL and UTF-8 lead, continuation and never-valid bytes. */
static const char mutant_bytes[] = {'"', '\\', '{', '}', '[', ']', ',', ':', '.', 'e', 'E', '-',
				    '0', '1', '9', 'u', 'n', ' ', '\0', '\x1f', '\x7f', '\x80',
				    '\xbf', '\xc0', '\xc3', '\xe0', '\xed', '\xf4', '\xf5', '\xff'};

/* One byte of doc (n bytes), in a quarter of the calls two or three,
 * replaced, inserted or deleted, or a
 * "\u0000" or a digit run put in; returns the new length (cap: room). */
static size_t mutate(char *doc, size_t n, size_t cap, unsigned *seed)
{
	int edits = rand_r(seed) % 4 ? 1 : 2 + rand_r(seed) % 2;
	for (int e = 0; e < edits && n + 16 < cap; e++) {
		size_t at = (size_t)rand_r(seed) % (n + 1);
		char b = mutant_bytes[(size_t)rand_r(seed) % sizeof mutant_bytes];
		switch (rand_r(seed) % 5) {
		case 0:
			if (at < n)
				doc[at] = b;
			break;
		case 1:
			memmove(doc + at + 1, doc + at, n - at), doc[at] = b, n++;
			break;
		case 2:
			if (at < n)
				memmove(doc + at, doc + at + 1, n - at - 1), n--;
			break;
		case 3:
			memmove(doc + at + 6, doc + at, n - at), memcpy(doc + at, "\\u0000", 6);
			n += 6;
			break;
		default: { /* 2^53 + 1, or a shorter run */
			size_t k = rand_r(seed) % 2 ? 16 : 3;
			memmove(doc + at + k, doc + at, n - at), memcpy(doc + at, "9007199254740993", k);
			n += k;
			break;
		}
		}
	}
	return n;
}

/* A header using every feature: metadata, escapes, non-ASCII names,
 * unknown fields holding every kind of value. */
static const char header_base[] =
	"{\"__metadata__\":{\"format\":\"pt\",\"note\":\"caf\\u00e9 \\\"q\\\" \xc3\xa9\"},"
	"\"a.w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24],"
	"\"x\":[15,{\"k\":-0,\"t\":true,\"f\":false,\"n\":null,\"s\":\"\\ud83d\\ude00\"}]},"
	"\"b\xc3\xa9\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[24,28]}}  ";

/* Differential: thousands of mutants of a header and an index that use every
 * feature (metadata, escapes, non-ASCII names, unknown fields holding every
 * kind of value). Whatever a reader accepts, the scan and the strict cJSON
 * parse accept too; whatever the scan refuses, the reader refuses. Both
 * outcomes must occur often, or the mutants test nothing. */
START_TEST(reader_refuses_what_the_scan_refuses)
{
	static const char *const base[2] = {
		header_base,
		"{\"metadata\":{\"total_size\":1.5e3,\"n\":[-2,0.25,{}]},"
		"\"weight_map\":{\"a.w\":\"m-1.safetensors\",\"b\xc3\xa9\":\"m\\u00e9.safetensors\"}}\n",
	};
	for (int which = 0; which < 2; which++) {
		unsigned seed = 12345u + (unsigned)which;
		int accepted = 0, refused = 0, scan_refused = 0;
		for (int round = 0; round < 20000; round++) {
			char doc[1024];
			size_t n = strlen(base[which]);
			memcpy(doc, base[which], n);
			if (round)
				n = mutate(doc, n, sizeof doc, &seed);
			struct ck_err err, serr;
			int ok;
			if (which == 0) {
				struct ck_file_tensors h;
				struct ck_st_span *spans = NULL;
				memset(&h, 0, sizeof h);
				ok = ck_st_header_json(doc, n, NULL, "t", 1, &h, &spans, &err) == 0;
				ck_file_tensors_free(&h);
				free(spans);
			} else {
				struct ck_index idx;
				ok = ck_index_parse(doc, n, "t", &idx, &err) == 0;
				if (ok)
					ck_index_free(&idx);
			}
			unsigned flags = which == 0 ? CK_JSON_INTEGERS_ONLY : 0;
			int scan_ok = ck_json_scan(doc, n, flags, CK_E_SOURCE, "t", &serr) == 0;
			ck_assert_msg(round || ok, "the unmutated document: %s", err.msg);
			if (ok) {
				cJSON *j = ck_json_parse(doc, n, flags, CK_E_SOURCE, "t", &serr);
				ck_assert_msg(scan_ok && j, "round %d accepted what %s", round,
					      serr.msg);
				cJSON_Delete(j);
			}
			accepted += ok;
			refused += !ok;
			scan_refused += !scan_ok;
		}
		ck_assert_msg(accepted > 1000 && refused > 1000 && scan_refused > 1000,
			      "document %d: %d accepted, %d refused, %d refused by the scan", which,
			      accepted, refused, scan_refused);
	}
}
END_TEST

/* The header of one tensor whose shape list is written as given (its data
 * offsets [0,end]): 0 or -1, its dims in dims (ndim in *nd), the message
 * with the offset of a syntax error left out. */
static int shape_list_header(const char *list, int end, int64_t *dims, int *nd, char *msg,
			     size_t cap)
{
	char doc[512];
	size_t n = (size_t)snprintf(doc, sizeof doc,
				    "{\"w\":{\"dtype\":\"U8\",\"shape\":%s,\"data_offsets\":[0,%d]}}",
				    list, end);
	struct ck_file_tensors h;
	struct ck_st_span *spans = NULL;
	struct ck_err err;
	memset(&h, 0, sizeof h);
	int rc = ck_st_header_json(doc, n, NULL, "t", 1, &h, &spans, &err);
	if (rc == 0) {
		*nd = h.tensors[0].ndim;
		memcpy(dims, h.tensors[0].shape, sizeof h.tensors[0].shape);
		msg[0] = '\0';
	} else {
		size_t k = 0;
		for (const char *c = err.msg; *c && k + 1 < cap; c++) {
			msg[k++] = *c;
			if (!strncmp(c, "offset ", 7)) /* a space more: one byte later */
				for (c += 6; c[1] >= '0' && c[1] <= '9';)
					c++;
		}
		msg[k] = '\0';
	}
	ck_file_tensors_free(&h);
	free(spans);
	return rc;
}

/* Integer lists as writers put them ("[2,3]") are read by a fast path; the
 * same list after a space ("[ 2,3]") by the general reader. Both readings
 * agree, values and verdicts, over lists at every edge: empty, one to nine
 * numbers, 15 to 17 digits, leading zeros, signs, fractions, exponents,
 * spaces inside, missing and extra commas, other values. */
START_TEST(compact_int_lists_read_as_spaced)
{
	static const char *const lists[] = {
		"[]", "[0]", "[7]", "[2,3]", "[10,0,4]", "[1,2,3,4,5,6,7,8]", "[1,2,3,4,5,6,7,8,9]",
		"[999999999999999]", "[1000000000000000]", "[9007199254740992]",
		"[9007199254740993]", "[12345678901234567]", "[01]", "[0,04]", "[00]", "[-1]",
		"[1,-0]", "[1.5]", "[1e3]", "[2E1]", "[1,]", "[,1]", "[1 ,2]", "[1, 2]", "[1,2 ]",
		"[1,,2]", "[1", "[1,2", "[\"1\"]", "[true]", "[null,1]", "[[1]]", "[1]x", "[1}",
		"[1,{}]", "[3]]", "[1:2]", "[3;]", "[4/]", "[5?]", "[6>7]", "[1234567:]",
		"[12345678<]", "[123456789=1]", "[1234567890123/]", "[12\x80]", "[12\xb9]"};
	for (size_t i = 0; i < sizeof lists / sizeof *lists; i++) {
		char spaced[64];
		snprintf(spaced, sizeof spaced, "[ %s", lists[i] + 1);
		int64_t da[CK_MAX_DIMS], db[CK_MAX_DIMS];
		int na = -1, nb = -1;
		char ma[1024], mb[1024];
		int ra = shape_list_header(lists[i], 1, da, &na, ma, sizeof ma);
		int rb = shape_list_header(spaced, 1, db, &nb, mb, sizeof mb);
		ck_assert_msg(ra == rb, "%s: %d, spaced %d (%s / %s)", lists[i], ra, rb, ma, mb);
		ck_assert_msg(!strcmp(ma, mb), "%s: \"%s\" against \"%s\"", lists[i], ma, mb);
		if (ra == 0) {
			ck_assert_int_eq(na, nb);
			for (int d = 0; d < na; d++)
				ck_assert_int_eq(da[d], db[d]);
		}
	}
	/* numbers of every length, 1 to 17 digits, of every digit, in lists of
	 * one to three, against strtoull: the fast path reads eight bytes at a
	 * time where eight are left (the shape list) and one by one at the end
	 * of the text (the offsets, last) */
	unsigned seed = 4242u;
	for (int len = 1; len <= 17; len++)
		for (int round = 0; round < 60; round++) {
			char num[3][24], list[96], offs[64];
			int cnt = 1 + round % 3;
			for (int q = 0; q < cnt; q++) {
				for (int c = 0; c < len; c++) {
					seed = seed * 1103515245u + 12345u;
					num[q][c] = (char)('0' + (seed >> 16) % 10);
				}
				if (len > 1 && num[q][0] == '0' && round % 7)
					num[q][0] = '1' + (char)(round % 9); /* mostly no leading zero */
				num[q][len] = '\0';
			}
			snprintf(list, sizeof list, "[%s%s%s%s%s]", num[0], cnt > 1 ? "," : "",
				 cnt > 1 ? num[1] : "", cnt > 2 ? "," : "", cnt > 2 ? num[2] : "");
			int64_t da[CK_MAX_DIMS], db[CK_MAX_DIMS];
			int na, nb;
			char ma[1024], mb[1024], spaced[112];
			snprintf(spaced, sizeof spaced, "[ %s", list + 1);
			uint64_t product = 1;
			for (int q = 0; q < cnt; q++)
				product = strtoull(num[q], NULL, 10) > 0 && product < (1ull << 40)
						  ? product * strtoull(num[q], NULL, 10)
						  : 0;
			int end = product < 1000 ? (int)product : 1;
			int ra = shape_list_header(list, end, da, &na, ma, sizeof ma);
			int rb = shape_list_header(spaced, end, db, &nb, mb, sizeof mb);
			ck_assert_msg(ra == rb && !strcmp(ma, mb), "%s: %d \"%s\" / %d \"%s\"", list, ra,
				      ma, rb, mb);
			if (ra == 0)
				for (int q = 0; q < cnt; q++)
					ck_assert_msg(da[q] == (int64_t)strtoull(num[q], NULL, 10) &&
							      db[q] == da[q],
						      "%s: dim %d", list, q);
			/* the same number as the last offset, the text's last bytes */
			char doc[256];
			snprintf(offs, sizeof offs, "%s", num[0]);
			size_t n = (size_t)snprintf(doc, sizeof doc,
						    "{\"w\":{\"dtype\":\"U8\",\"shape\":[],"
						    "\"data_offsets\":[%s,%s]}}",
						    "0", offs);
			struct ck_file_tensors h;
			struct ck_st_span *spans = NULL;
			struct ck_err err;
			memset(&h, 0, sizeof h);
			int rc = ck_st_header_json(doc, n, NULL, "t", 1, &h, &spans, &err);
			uint64_t v = strtoull(offs, NULL, 10);
			int valid = len <= 16 && (offs[0] != '0' || len == 1) && v <= (1ull << 53);
			char said[64]; /* the span the message gives is the value read */
			snprintf(said, sizeof said, "span %llu bytes", (unsigned long long)v);
			if (!valid)
				ck_assert_msg(rc == -1 && !strstr(err.msg, "span"), "%s: %s", offs,
					      err.msg);
			else if (v == 1)
				ck_assert_msg(rc == 0 && spans[0].end == 1, "%s", offs);
			else
				ck_assert_msg(rc == -1 && strstr(err.msg, said), "%s: %s", offs, err.msg);
			ck_file_tensors_free(&h);
			free(spans);
		}
	/* and against the numbers themselves */
	int64_t d[CK_MAX_DIMS];
	int nd;
	char m[1024];
	ck_assert_int_eq(shape_list_header("[999999999999999,0,12]", 0, d, &nd, m, sizeof m), 0);
	ck_assert_int_eq(nd, 3);
	ck_assert(d[0] == 999999999999999LL && d[1] == 0 && d[2] == 12);
}
END_TEST

/* Integers of every length from 1 to 20 digits, a non-digit at every
 * position, against strtoull: the reader checks the 2^53 bound once, after
 * the digits, and refuses a run of more than 16 (whose value wrapped). */
START_TEST(integers_read_exactly)
{
	unsigned seed = 7;
	for (int len = 1; len <= 20; len++)
		for (int stop = 0; stop <= len; stop++)
			for (int rep = 0; rep < 20; rep++) {
				char doc[40];
				int k = 0;
				doc[k++] = '[';
				if (rep & 1)
					doc[k++] = '-';
				int d0 = k;
				for (int i = 0; i < len; i++)
					doc[k++] = (char)('0' + (i == 0 ? 1 + rand_r(&seed) % 9
								       : rand_r(&seed) % 10));
				if (rep == 2) /* the largest exact values and one above */
					memcpy(doc + d0, len == 16 ? "9007199254740992" : "9007199254740993",
					       len == 16 || len == 17 ? (size_t)16 : 0);
				if (stop < len) /* a byte just outside 0-9, or a letter */
					doc[d0 + stop] = "/:aA"[rand_r(&seed) % 4];
				doc[k++] = ']';
				doc[k] = '\0';
				struct ck_err err;
				struct ck_jlex p = {.s = doc, .n = (size_t)k, .what = "t", .ctx = "t",
						    .err = &err, .ints_only = 1};
				int64_t v = 0;
				int isnum = 0;
				ck_assert(ck_jlex_eat(&p, '['));
				int rc = ck_jlex_int(&p, &v, &isnum);
				char *end;
				errno = 0;
				unsigned long long ref = strtoull(doc + d0, &end, 10);
				int ref_num = doc[d0] >= '0' && doc[d0] <= '9'; /* no strtoull spaces */
				if (!ref_num) {
					ck_assert_int_eq(rc, 0);
					ck_assert_msg(isnum == 0, "%s", doc);
					continue;
				}
				int lead0 = doc[d0] == '0' && end - (doc + d0) > 1;
				if (errno || ref > (1ull << 53) || lead0) {
					ck_assert_msg(rc < 0, "%s read as %lld", doc, (long long)v);
					continue;
				}
				ck_assert_msg(rc == 0 && isnum, "%s: %s", doc, err.msg);
				ck_assert_int_eq(v, (rep & 1) ? -(int64_t)ref : (int64_t)ref);
				ck_assert_uint_eq(p.i, (size_t)(end - doc));
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

/* The header reader matches the three field names in the raw text; any
 * other spelling of them must mean the same, and near-misses nothing. */
START_TEST(field_names_in_any_spelling)
{
	static const struct {
		const char *json;
		const char *err; /* NULL: parses, one F32 [2] tensor */
	} c[] = {
		{"{\"t\":{\"dt\\u0079pe\":\"F32\",\"sh\\u0061pe\":[2],\"data_offsets\":[0,8]}}", NULL},
		{"{\"t\":{\"\\u0064ata_offsets\":[0,8],\"shape\":[2],\"dtype\":\"F32\"}}", NULL},
		{"{\"t\":{\"dtypes\":\"F64\",\"dtype\":\"F32\",\"shapes\":[3],\"shape\":[2],"
		 "\"data_offset\":[0,4],\"data_offsets\":[0,8],\"d\":1,\"s\":2}}",
		 NULL},
		{"{\"t\":{\"dtype\":\"F32\",\"dt\\u0079pe\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
		 "duplicate field \"dtype\""},
		{"{\"t\":{\"dtyp\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
		 "missing field \"dtype\""},
		{"{\"t\":{\"shape\" :[2], \"data_offsets\"\n:[0,8],\"dtype\"\t: \"F32\"}}", NULL},
		{"{\"t\":{\"shape\"[2]}}", "invalid JSON"},
		{"{\"t\":{\"dtype", "invalid JSON"},
		{"{\"t\":{\"d", "invalid JSON"},
	};
	for (size_t k = 0; k < sizeof c / sizeof c[0]; k++) {
		size_t len;
		unsigned char *img = st_image(c[k].json, 8, &len);
		struct ck_file_tensors h;
		struct ck_err err;
		int rc = ck_st_parse_buffer(img, len, "f", &h, &err);
		if (!c[k].err) {
			ck_assert_msg(rc == 0, "case %zu: %s", k, err.msg);
			ck_assert_uint_eq(h.n_tensors, 1);
			ck_assert_int_eq(h.tensors[0].dtype, CK_DT_F32);
			ck_assert_int_eq(h.tensors[0].ndim, 1);
			ck_assert_int_eq(h.tensors[0].shape[0], 2);
			ck_file_tensors_free(&h);
		} else {
			ck_assert_msg(rc < 0 && strstr(err.msg, c[k].err), "case %zu: %s", k,
				      rc < 0 ? err.msg : "parsed");
		}
		free(img);
	}
}
END_TEST

/* Whether two parses of a header gave the same tensors, spans and metadata. */
static int same_header(const struct ck_file_tensors *a, const struct ck_st_span *sa,
		       const struct ck_file_tensors *b, const struct ck_st_span *sb)
{
	if (a->n_tensors != b->n_tensors || a->n_meta != b->n_meta)
		return 0;
	for (size_t i = 0; i < a->n_tensors; i++) {
		const struct ck_tensor_info *x = &a->tensors[i], *y = &b->tensors[i];
		if (strcmp(x->name, y->name) || x->dtype != y->dtype || x->ndim != y->ndim ||
		    memcmp(x->shape, y->shape, sizeof x->shape) || sa[i].begin != sb[i].begin ||
		    sa[i].end != sb[i].end)
			return 0;
	}
	for (size_t i = 0; i < a->n_meta; i++)
		if (strcmp(a->meta[i].key, b->meta[i].key) ||
		    strcmp(a->meta[i].value, b->meta[i].value))
			return 0;
	return 1;
}

/* A header parsed as it is read, by a read that is always behind (in steps
 * of 1 to 40 bytes; a member read once 1 to 300 bytes past its start are
 * in), past which the buffer holds bytes that would parse otherwise ('}',
 * ' ', digits, 0xff): whenever the streamed parse accepts, the whole text's
 * parse accepts the same; where the text runs out before a member ends, it
 * fails instead. Both occur thousands of times over the mutants. */
START_TEST(streamed_parse_is_the_whole_texts)
{
	static const char fill[] = "} 1\xff";
	unsigned seed = 4242;
	int same = 0, cut = 0;
	for (int round = 0; round < 20000; round++) {
		char doc[1024], buf[1024];
		size_t n = strlen(header_base);
		memcpy(doc, header_base, n);
		if (round % 4)
			n = mutate(doc, n, sizeof doc, &seed);
		memset(buf, fill[round % 4], sizeof buf);
		struct ck_file_tensors w = {0}, st = {0};
		struct ck_st_span *ws = NULL, *ss = NULL;
		struct ck_err werr, serr;
		int wok = ck_st_header_json(doc, n, NULL, "t", 1, &w, &ws, &werr) == 0;
		struct ck_stream_read in;
		uint64_t step = 1 + (uint64_t)rand_r(&seed) % 40;
		ck_stream_read_of(&in, buf, doc, n, step, 1 + (uint64_t)rand_r(&seed) % 300);
		int sok = ck_st_header_json(buf, n, &in, "t", 1, &st, &ss, &serr) == 0;
		ck_assert_int_eq(ck_stream_read_finish(&in), 0);
		if (sok)
			ck_assert_msg(wok && same_header(&w, ws, &st, ss),
				      "round %d: the streamed parse accepted %s", round,
				      wok ? "other tensors" : werr.msg);
		same += sok;
		cut += wok && !sok;
		ck_file_tensors_free(&w);
		ck_file_tensors_free(&st);
		free(ws);
		free(ss);
	}
	ck_assert_msg(same > 1500 && cut > 1500, "%d accepted alike, %d cut short", same, cut);
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

/* The in-memory string writer, 8 bytes a step while no byte needs an
 * escape, writes what a byte-by-byte reference escaper written here does,
 * for strings with quotes, backslashes, control bytes and UTF-8 at every
 * position, each at the very end of its allocation (ASan: no read past
 * it); cJSON reads every output back as the string. */
static size_t ref_escape(const unsigned char *s, size_t n, char *out)
{
	size_t k = 0;
	out[k++] = '"';
	for (size_t i = 0; i < n; i++) {
		if (s[i] == '"' || s[i] == '\\')
			out[k++] = '\\', out[k++] = (char)s[i];
		else if (s[i] < 0x20)
			k += (size_t)sprintf(out + k, "\\u%04x", s[i]);
		else
			out[k++] = (char)s[i];
	}
	out[k++] = '"';
	return k;
}

START_TEST(string_writer_escapes_as_the_reference)
{
	static const unsigned char special[] = {'"',  '\\', 0x01, 0x1f, 0x20,
						0x7f, 0x80, 0xc3, 0xff, '.'};
	srand(4242);
	for (int trial = 0; trial < 20000; trial++) {
		size_t n = (size_t)(rand() % 40);
		unsigned char *s = malloc(n + 1);
		ck_assert_ptr_nonnull(s);
		int odds = 1 + rand() % 40; /* from mostly plain to mostly special */
		for (size_t i = 0; i < n; i++)
			s[i] = rand() % odds ? (unsigned char)('a' + rand() % 26)
					     : special[rand() % sizeof special];
		s[n] = '\0';
		char *want = malloc(6 * n + 3), *got = malloc(6 * n + 3);
		ck_assert(want && got);
		size_t wl = ref_escape(s, n, want);
		size_t gl = (size_t)(ck_json_put_str(got, (const char *)s, n) - got);
		ck_assert_msg(gl == wl, "trial %d: %.*s against %.*s", trial, (int)gl, got, (int)wl,
			      want);
		ck_assert_uint_eq(ck_json_str_len((const char *)s), wl);
		ck_assert_msg(memcmp(got, want, wl) == 0, "trial %d: %.*s against %.*s", trial,
			      (int)gl, got, (int)wl, want);
		got[gl] = '\0';
		cJSON *j = cJSON_Parse(got);
		ck_assert_msg(cJSON_IsString(j) && !strcmp(j->valuestring, (const char *)s),
			      "trial %d", trial);
		cJSON_Delete(j);
		free(s);
		free(want);
		free(got);
	}
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
	tcase_add_test(tc, reader_refuses_what_the_scan_refuses);
	tcase_add_test(tc, integers_read_exactly);
	tcase_add_test(tc, keys_are_case_sensitive);
	tcase_add_test(tc, field_names_in_any_spelling);
	tcase_add_test(tc, hundred_thousand_keys);
	tcase_add_test(tc, compact_int_lists_read_as_spaced);
	tcase_add_test(tc, streamed_parse_is_the_whole_texts);
	tcase_add_test(tc, string_writer_escapes_as_the_reference);
	suite_add_tcase(s, tc);
	return tu_run_suite(s, 1);
}
