/* Virtual files: spans of random byte ranges reassemble exactly the bytes a
 * plain model of the file holds (literal bytes and target bytes, each target
 * byte standing for (target, offset)), literals copied or taken whole; CRC-32
 * against known check values; the byte and decimal writers the flat files'
 * literals are made with. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/vfile.h"
#include "testutil.h"
#include "util/bytebuf.h"
#include "util/crc32.h"
#include "util/numfmt.h"

/* The model: each file byte is a literal byte or (target << 32 | offset). */
struct model {
	uint64_t *b;
	int *lit;
	size_t n;
};

static void model_add(struct model *m, uint64_t v, int lit)
{
	m->b = realloc(m->b, (m->n + 1) * sizeof *m->b);
	m->lit = realloc(m->lit, (m->n + 1) * sizeof *m->lit);
	m->b[m->n] = v;
	m->lit[m->n++] = lit;
}

START_TEST(random_files)
{
	srand(1000 + (unsigned)_i);
	struct ck_vfile v;
	memset(&v, 0, sizeof v);
	struct model m = {0};
	int parts = 1 + rand() % 40;
	for (int p = 0; p < parts; p++) {
		if (rand() % 7 == 0) /* room set aside changes nothing */
			ck_assert_int_eq(ck_vfile_reserve(&v, (size_t)(rand() % 20)), 0);
		size_t len = (size_t)(rand() % 3 ? rand() % 50 : rand() % 3);
		if (rand() % 2) {
			unsigned char buf[64];
			for (size_t i = 0; i < len; i++) {
				buf[i] = (unsigned char)rand();
				model_add(&m, buf[i], 1);
			}
			if (rand() % 5 == 0) { /* taken whole: the blob itself, or copied */
				unsigned char *own = malloc(len + 1);
				memcpy(own, buf, len);
				ck_assert_int_eq(ck_vfile_lit_take(&v, own, len), 0);
			} else if (rand() % 3)
				ck_assert_int_eq(ck_vfile_lit(&v, buf, len), 0);
			else { /* a fill is a literal too */
				memset(buf, buf[0], len);
				for (size_t i = 0; i < len; i++)
					m.b[m.n - len + i] = buf[0];
				ck_assert_int_eq(ck_vfile_fill(&v, len ? buf[0] : 0, len), 0);
			}
		} else {
			uint32_t t = (uint32_t)(rand() % 5);
			uint64_t off = (uint64_t)(rand() % 100);
			for (size_t i = 0; i < len; i++)
				model_add(&m, (uint64_t)t << 32 | (off + i), 0);
			ck_assert_int_eq(ck_vfile_target(&v, t, off, len), 0);
		}
	}
	ck_assert_uint_eq(v.size, m.n);
	size_t bad = 0;
	for (int q = 0; q < 200; q++) {
		uint64_t off = (uint64_t)(rand() % (int)(m.n + 5));
		uint64_t len = (uint64_t)(rand() % (int)(m.n + 5));
		size_t n = ck_vfile_spans(&v, off, len, NULL, 0);
		struct ck_span *s = calloc(n + 1, sizeof *s);
		ck_assert_uint_eq(ck_vfile_spans(&v, off, len, s, n), n);
		uint64_t want = off >= m.n ? 0 : (len < m.n - off ? len : m.n - off);
		uint64_t covered = 0;
		for (size_t k = 0; k < n; k++) {
			bad += s[k].dst != covered || s[k].len == 0;
			for (uint64_t i = 0; i < s[k].len; i++) {
				size_t fb = (size_t)(off + s[k].dst + i);
				if (s[k].lit)
					bad += !m.lit[fb] || s[k].lit[i] != m.b[fb];
				else
					bad += m.lit[fb] ||
					       ((uint64_t)s[k].target << 32 | (s[k].off + i)) != m.b[fb];
			}
			covered += s[k].len;
		}
		bad += covered != want;
		free(s);
	}
	ck_assert_uint_eq(bad, 0);
	ck_vfile_free(&v);
	free(m.b);
	free(m.lit);
}
END_TEST

START_TEST(crc32_check_values)
{
	/* the standard check value, and incremental use */
	ck_assert_uint_eq(ck_crc32(0, "123456789", 9), 0xCBF43926u);
	ck_assert_uint_eq(ck_crc32(ck_crc32(0, "1234", 4), "56789", 5), 0xCBF43926u);
	ck_assert_uint_eq(ck_crc32(0, "", 0), 0);
	/* slicing by 8 equals the bytewise definition on odd lengths */
	unsigned char buf[1000];
	for (size_t i = 0; i < sizeof buf; i++)
		buf[i] = (unsigned char)(i * 7 + 3);
	for (size_t n = 0; n < sizeof buf; n += 37) {
		uint32_t c = 0xFFFFFFFFu;
		for (size_t i = 0; i < n; i++) {
			c ^= buf[i];
			for (int k = 0; k < 8; k++)
				c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
		}
		ck_assert_uint_eq(ck_crc32(0, buf, n), ~c);
	}
}
END_TEST

/* The byte writers' appends, one at a time and inline, give the bytes
 * written out by hand; the decimal writer gives printf's digits. */
START_TEST(byte_writers)
{
	srand(5);
	struct ck_buf b = {0};
	size_t cap = 1 << 16, n = 0;
	unsigned char *want = malloc(cap);
	while (n < cap - 16) {
		uint64_t v = (uint64_t)rand() << 33 ^ (uint64_t)rand() << 11 ^ (uint64_t)rand();
		int kind = rand() % 3, bytes = 1 + rand() % 8;
		if (kind == 0) {
			ck_buf_byte(&b, (unsigned)v);
			want[n++] = (unsigned char)v;
		} else if (kind == 1) {
			ck_buf_le(&b, v, bytes);
			for (int i = 0; i < bytes; i++)
				want[n++] = (unsigned char)(v >> (8 * i));
		} else {
			ck_buf_put(&b, &v, (size_t)bytes); /* little-endian host */
			memcpy(want + n, &v, (size_t)bytes);
			n += (size_t)bytes;
		}
	}
	ck_assert(!b.oom);
	ck_assert_uint_eq(b.n, n);
	ck_assert_int_eq(memcmp(b.p, want, n), 0);
	ck_buf_free(&b);
	free(want);
	int64_t edge[] = {0,
			  1,
			  -1,
			  9,
			  10,
			  -10,
			  99,
			  100,
			  INT32_MAX,
			  INT32_MIN,
			  INT64_MAX,
			  INT64_MIN,
			  INT64_MAX - 1,
			  INT64_MIN + 1,
			  1000000000000000000};
	char got[CK_FMT_INT_MAX], ref[32];
	for (size_t i = 0; i < sizeof edge / sizeof *edge; i++) {
		snprintf(ref, sizeof ref, "%lld", (long long)edge[i]);
		ck_assert_int_eq(ck_fmt_i64(got, edge[i]), (int)strlen(ref));
		ck_assert_str_eq(got, ref);
	}
	for (int i = 0; i < 100000; i++) {
		uint64_t u = (uint64_t)rand() << 42 ^ (uint64_t)rand() << 21 ^ (uint64_t)rand();
		u >>= rand() % 64;
		snprintf(ref, sizeof ref, "%llu", (unsigned long long)u);
		ck_assert_int_eq(ck_fmt_u64(got, u), (int)strlen(ref));
		ck_assert_str_eq(got, ref);
	}
	snprintf(ref, sizeof ref, "%llu", (unsigned long long)UINT64_MAX);
	ck_fmt_u64(got, UINT64_MAX);
	ck_assert_str_eq(got, ref);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("vfile");
	TCase *tc = tcase_create("vfile");
	tcase_set_timeout(tc, 60);
	tcase_add_loop_test(tc, random_files, 0, 200);
	tcase_add_test(tc, crc32_check_values);
	tcase_add_test(tc, byte_writers);
	suite_add_tcase(s, tc);
	return tu_run_suite(s, 0);
}
