/* Element conversions against a brute-force oracle written independently of
 * fpconv.h: every value of each narrow format is decoded with ldexp from its
 * bit fields; a float converts to the nearest of them, ties to the even code,
 * and anything at or past the midpoint above the largest finite value
 * overflows (to infinity, or NaN for E4M3FN, or the largest finite value when
 * saturating). Every F16 and BF16 code round-trips exactly, and every one of
 * the 2^32 F32 bit patterns converts to each format (both modes) as the
 * oracle says; that sweep walks the positive floats in order beside the
 * sorted table of representable values (one step of the oracle per float),
 * on every core. The casts in runs and the GGUF block quantizers are held to
 * the element path and to ggml's reference quantizers transcribed. */
#include <check.h>
#if defined(__x86_64__)
#include <xmmintrin.h>
#endif
#include <math.h>
#include <pthread.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kern/avx2.h"
#include "kern/box.h"
#include "kern/cpu.h"
#include "kern/fpconv.h"
#include "kern/ggml.h"
#include "testutil.h"

struct fmt {
	const char *name;
	int ebits, mbits, bias;
	int e4m3; /* E4M3FN: no infinity; S.1111.111 is NaN */
	uint32_t (*conv)(float, int);
	float (*widen)(uint32_t);
	double *pos;	 /* sorted finite non-negative values */
	uint32_t *code;	 /* their codes */
	int n;
	double overflow; /* the virtual next value above the largest finite */
};

static uint32_t c_f16(float f, int s) { return ck_f32_to_f16(f, s); }
static uint32_t c_bf16(float f, int s) { return ck_f32_to_bf16(f, s); }
static uint32_t c_e4m3(float f, int s) { return ck_f32_to_e4m3(f, s); }
static uint32_t c_e5m2(float f, int s) { return ck_f32_to_e5m2(f, s); }
static float w_f16(uint32_t c) { return ck_f16_to_f32((uint16_t)c); }
static float w_bf16(uint32_t c) { return ck_bf16_to_f32((uint16_t)c); }
static float w_e4m3(uint32_t c) { return ck_e4m3_to_f32((uint8_t)c); }
static float w_e5m2(uint32_t c) { return ck_e5m2_to_f32((uint8_t)c); }

static struct fmt fmts[] = {
	{"F16", 5, 10, 15, 0, c_f16, w_f16, NULL, NULL, 0, 0},
	{"BF16", 8, 7, 127, 0, c_bf16, w_bf16, NULL, NULL, 0, 0},
	{"F8_E4M3", 4, 3, 7, 1, c_e4m3, w_e4m3, NULL, NULL, 0, 0},
	{"F8_E5M2", 5, 2, 15, 0, c_e5m2, w_e5m2, NULL, NULL, 0, 0},
};

/* Decode a non-negative code from its fields; returns 0 for inf/NaN. */
static int decode(const struct fmt *f, uint32_t c, double *v)
{
	uint32_t e = c >> f->mbits, m = c & ((1u << f->mbits) - 1);
	uint32_t emax = (1u << f->ebits) - 1;
	if (!f->e4m3 && e == emax)
		return 0;
	if (f->e4m3 && e == emax && m == (1u << f->mbits) - 1)
		return 0;
	if (e == 0)
		*v = ldexp((double)m, 1 - f->bias - f->mbits);
	else
		*v = ldexp(1.0 + ldexp((double)m, -f->mbits), (int)e - f->bias);
	return 1;
}

static void build(struct fmt *f)
{
	uint32_t ncodes = 1u << (f->ebits + f->mbits);
	f->pos = malloc(ncodes * sizeof *f->pos);
	f->code = malloc(ncodes * sizeof *f->code);
	f->n = 0;
	for (uint32_t c = 0; c < ncodes; c++) { /* codes ascend with value */
		double v;
		if (decode(f, c, &v)) {
			f->pos[f->n] = v;
			f->code[f->n++] = c;
		}
	}
	double top = f->pos[f->n - 1], below = f->pos[f->n - 2];
	f->overflow = top + (top - below);
}

/* Oracle for |x| (finite, non-negative): code, or -1 for overflow. */
static int64_t nearest(const struct fmt *f, double x)
{
	int lo = 0, hi = f->n - 1;
	if (x >= f->pos[hi]) {
		double mid = (f->pos[hi] + f->overflow) / 2;
		/* the virtual next code is the largest code + 1: its parity decides ties */
		int next_even = ((f->code[hi] + 1) & 1) == 0;
		if (x > mid || (x == mid && next_even))
			return -1;
		return f->code[hi];
	}
	while (hi - lo > 1) {
		int m = (lo + hi) / 2;
		if (f->pos[m] <= x)
			lo = m;
		else
			hi = m;
	}
	double dl = x - f->pos[lo], dh = f->pos[hi] - x;
	if (dl < dh)
		return f->code[lo];
	if (dh < dl)
		return f->code[hi];
	return (f->code[lo] & 1) == 0 ? f->code[lo] : f->code[hi];
}

static uint32_t sign_bit(const struct fmt *f)
{
	return 1u << (f->ebits + f->mbits);
}

/* Hot loops must not call ck_assert (Check reports each pass through a pipe):
 * count mismatches, keep the first message, assert once. */
static long bad;
static char first_bad[256];

static void mismatch(const struct fmt *f, int sat, float x, uint32_t got, const char *want)
{
	if (!bad++)
		snprintf(first_bad, sizeof first_bad, "%s%s: %a -> %#x, oracle %s", f->name,
			 sat ? " (saturating)" : "", (double)x, got, want);
}

static void check_one(const struct fmt *f, float x)
{
	uint32_t sign = signbit(x) ? sign_bit(f) : 0;
	for (int sat = 0; sat < 2; sat++) {
		uint32_t got = f->conv(x, sat);
		if (isnan(x)) {
			if (!isnan(f->widen(got)))
				mismatch(f, sat, x, got, "NaN");
			continue;
		}
		int64_t want = isinf(x) ? -1 : nearest(f, fabs((double)x));
		if (want < 0 && !sat) { /* overflow: inf, or NaN for E4M3FN */
			float g = f->widen(got);
			if (f->e4m3 ? !isnan(g) : !(isinf(g) && signbit(g) == signbit(x)))
				mismatch(f, sat, x, got, f->e4m3 ? "NaN" : "infinity");
			continue;
		}
		uint32_t w = sign | (want >= 0 ? (uint32_t)want : f->code[f->n - 1]);
		if (got != w) {
			char buf[32];
			snprintf(buf, sizeof buf, "%#x", w);
			mismatch(f, sat, x, got, buf);
		}
	}
}

START_TEST(narrow_formats_match_oracle)
{
	struct fmt *f = &fmts[_i];
	build(f);
	for (uint64_t u = 0; u <= 0xFFFFFFFFu; u += 97) {
		float x;
		uint32_t b = (uint32_t)u;
		memcpy(&x, &b, 4);
		check_one(f, x);
	}
	/* every representable value, its neighbours and the midpoints */
	for (int i = 0; i < f->n; i++) {
		double v = f->pos[i];
		check_one(f, (float)v);
		check_one(f, -(float)v);
		check_one(f, nextafterf((float)v, INFINITY));
		check_one(f, nextafterf((float)v, 0));
		double nxt = i + 1 < f->n ? f->pos[i + 1] : f->overflow;
		float mid = (float)((v + nxt) / 2);
		if ((double)mid == (v + nxt) / 2) {
			check_one(f, mid);
			check_one(f, nextafterf(mid, INFINITY));
			check_one(f, nextafterf(mid, 0));
		}
	}
	check_one(f, INFINITY);
	check_one(f, -INFINITY);
	ck_assert_msg(bad == 0, "%ld mismatches, first: %s", bad, first_bad);
	free(f->pos);
	free(f->code);
}
END_TEST

/* ---- the exhaustive sweep ---- */

struct sweep {
	const struct fmt *f;
	uint32_t from, to; /* positive bit patterns [from, to) */
	long bad;
	char first[160];
};

static void sweep_bad(struct sweep *w, float x, int sat, uint32_t got, uint32_t want)
{
	if (!w->bad++)
		snprintf(w->first, sizeof w->first, "%s%s: %a -> %#x, oracle %#x", w->f->name,
			 sat ? " (saturating)" : "", (double)x, got, want);
}

/* Under ASan and UBSan (what they add is memory and undefined behaviour,
 * not numerics) the sweep takes every 61st pattern: 2^32 values through
 * every cast took 848 s there against 406 s in the plain build, which
 * takes them all. */
#ifdef __SANITIZE_ADDRESS__
#define SWEEP_STRIDE 61
#else
#define SWEEP_STRIDE 1
#endif

static void *sweep_run(void *arg)
{
	struct sweep *w = arg;
	const struct fmt *f = w->f;
	uint32_t sbit = sign_bit(f), top = f->code[f->n - 1];
	int lo = 0; /* f->pos[lo] <= x: advanced as x grows */
	float x0;
	memcpy(&x0, &w->from, 4);
	while (lo + 1 < f->n && f->pos[lo + 1] <= (double)x0)
		lo++;
	for (uint32_t u = w->from; u < w->to; u += SWEEP_STRIDE) {
		float x;
		memcpy(&x, &u, 4);
		double d = (double)x;
		while (lo + 1 < f->n && f->pos[lo + 1] <= d)
			lo++;
		/* nearest: between pos[lo] and the next value (or the virtual one) */
		double next = lo + 1 < f->n ? f->pos[lo + 1] : f->overflow;
		double mid = (f->pos[lo] + next) / 2;
		uint32_t lo_code = f->code[lo], hi_code = lo + 1 < f->n ? f->code[lo + 1] : top + 1;
		uint32_t want = d < mid ? lo_code : d > mid ? hi_code : (lo_code & 1) ? hi_code : lo_code;
		int over = want == top + 1 || isinf(x);
		for (int neg = 0; neg < 2; neg++) {
			float xs = neg ? -x : x;
			for (int sat = 0; sat < 2; sat++) {
				uint32_t got = f->conv(xs, sat), w_ = (neg ? sbit : 0) | (over ? top : want);
				if (over && !sat) { /* infinity, or NaN for E4M3FN */
					float g = f->widen(got);
					if (f->e4m3 ? !isnan(g) : !(isinf(g) && (signbit(g) != 0) == neg))
						sweep_bad(w, xs, sat, got, 0xFFFFFFFFu);
				} else if (got != w_) {
					sweep_bad(w, xs, sat, got, w_);
				}
			}
		}
	}
	return NULL;
}

/* NaN inputs (every payload, both signs) stay NaN. */
static long nan_sweep(const struct fmt *f)
{
	long wrong = 0;
	for (uint32_t u = 0x7F800001u; u != 0; u++) { /* to 0xFFFFFFFF, skipping finite negatives */
		if (u == 0x80000000u)
			u = 0xFF800001u;
		float x;
		memcpy(&x, &u, 4);
		for (int sat = 0; sat < 2; sat++)
			wrong += !isnan(f->widen(f->conv(x, sat)));
	}
	return wrong;
}

START_TEST(every_f32_matches_oracle)
{
	struct fmt f = fmts[_i];
	build(&f);
	long nth = sysconf(_SC_NPROCESSORS_ONLN);
	nth = nth < 1 ? 1 : nth > 16 ? 16 : nth;
	struct sweep w[16];
	pthread_t th[16];
	/* every positive finite pattern and +inf: [0, 0x7F800001) */
	uint64_t span = 0x7F800001ull, step = (span + (uint64_t)nth - 1) / (uint64_t)nth;
	for (long t = 0; t < nth; t++) {
		uint64_t a = (uint64_t)t * step, b = a + step < span ? a + step : span;
		w[t] = (struct sweep){&f, (uint32_t)a, (uint32_t)b, 0, ""};
		ck_assert_int_eq(pthread_create(&th[t], NULL, sweep_run, &w[t]), 0);
	}
	long total = 0;
	const char *first = "";
	for (long t = 0; t < nth; t++) {
		pthread_join(th[t], NULL);
		if (w[t].bad && !total)
			first = w[t].first;
		total += w[t].bad;
	}
	ck_assert_msg(total == 0, "%ld of the F32 values swept convert wrongly, first: %s", total,
		      first);
	ck_assert_int_eq(nan_sweep(&f), 0);
	free(f.pos);
	free(f.code);
}
END_TEST

/* Every F16 and BF16 code widens exactly and narrows back to itself (NaN
 * to the canonical NaN). */
START_TEST(every_half_code_round_trips)
{
	long wrong = 0;
	uint32_t first = 0;
	for (uint32_t c = 0; c < 65536; c++) {
		float h = ck_f16_to_f32((uint16_t)c), b = ck_bf16_to_f32((uint16_t)c);
		int ok = ck_f32_to_f16(h, 0) == (isnan(h) ? ((c & 0x8000) | 0x7E00) : c) &&
			 ck_f32_to_bf16(b, 0) == (isnan(b) ? 0x7FC0 : c);
		/* the widening agrees with an independent decode */
		double v;
		if (decode(&fmts[0], c & 0x7FFF, &v))
			ok &= fabs((double)h) == v;
		if (decode(&fmts[1], c & 0x7FFF, &v))
			ok &= fabs((double)b) == v;
		if (c < 256) {
			float e4 = ck_e4m3_to_f32((uint8_t)c), e5 = ck_e5m2_to_f32((uint8_t)c);
			ok &= isnan(e4) || ck_f32_to_e4m3(e4, 0) == c;
			ok &= isnan(e5) || ck_f32_to_e5m2(e5, 0) == c;
			if (decode(&fmts[2], c & 0x7F, &v))
				ok &= fabs((double)e4) == v;
			if (decode(&fmts[3], c & 0x7F, &v))
				ok &= fabs((double)e5) == v;
		}
		if (!ok && !wrong++)
			first = c;
	}
	ck_assert_msg(wrong == 0, "%ld codes do not round-trip, first %#x", wrong, first);
}
END_TEST

/* MXFP4's element types against their definitions (OCP MX v1.0): E2M1 is
 * (-1)^s * 2^(e-1) * (1 + m/2), or m/2 when e is 0; E8M0 is 2^(code-127)
 * and 0xFF is NaN. */
START_TEST(mxfp4_codes_match_definition)
{
	for (unsigned c = 0; c < 16; c++) {
		unsigned sgn = c >> 3, e = (c >> 1) & 3, m = c & 1;
		double want = e ? ldexp(1.0 + m / 2.0, (int)e - 1) : m / 2.0;
		float got = ck_e2m1_to_f32(c);
		ck_assert_msg(fabs((double)got) == want && !!signbit(got) == (int)sgn,
			      "E2M1 %#x: %g, want %s%g", c, (double)got, sgn ? "-" : "", want);
	}
	for (unsigned c = 0; c < 256; c++) {
		float got = ck_e8m0_to_f32((uint8_t)c);
		if (c == 255) {
			ck_assert_msg(ck_f32_bits(got) == 0x7FC00000u, "E8M0 0xFF: %#x",
				      ck_f32_bits(got));
			continue;
		}
		ck_assert_msg((double)got == ldexp(1.0, (int)c - 127), "E8M0 %u: %a", c, (double)got);
	}
}
END_TEST

/* The engine's blocked cast loops (kern/cpu.c: eight elements at a time,
 * then one at a time; BF16 <-> F32, BF16 and F32 -> F16, F16 -> F32 and
 * BF16) against the element conversions the sweeps above hold to the
 * oracle: every BF16 and F16 code, and F32 patterns with every high half
 * beside the low halves where rounding to BF16 or F16 turns (0x7FFF-0x8001,
 * 0x0FFF-0x1001, 0x2FFF-0x3001, 0xF000: 65520), in runs of every length
 * 0..40 from every byte offset 0..3 of the buffers, so that block and tail
 * both meet every value. Loop 0 runs them as this CPU does (the F16 casts
 * by F16C's instructions where it has them, kern/avx2.h), loop 1 with
 * flush-to-zero and denormals-are-zero set in MXCSR, where the F16 casts
 * take the portable blocks and must give the same bits. */
START_TEST(cast_runs_match_elements)
{
#if defined(__x86_64__)
	unsigned csr = _mm_getcsr();
	if (_i == 1)
		_mm_setcsr(csr | 0x8040);
	ck_assert_int_eq(!!ck_f16c_usable(), _i == 0 && __builtin_cpu_supports("f16c") &&
						 __builtin_cpu_supports("avx2") && !(csr & 0x8040));
#else
	ck_assert(!ck_f16c_usable());
#endif
	static const uint16_t low[] = {0,      1,      0x0FFF, 0x1000, 0x1001, 0x2FFF, 0x3000,
				       0x3001, 0x7FFF, 0x8000, 0x8001, 0xF000, 0xFFFF, 0x1234, 0xBEEF};
	size_t nv = 65536 * (sizeof low / sizeof *low);
	uint32_t *f = malloc(nv * 4);
	uint16_t *b = malloc(65536 * 2);
	unsigned char *in = malloc(nv * 4 + 8), *out = malloc(nv * 4 + 8);
	ck_assert(f && b && in && out);
	for (size_t i = 0; i < nv; i++)
		f[i] = (uint32_t)(i / (sizeof low / sizeof *low)) << 16 | low[i % (sizeof low / sizeof *low)];
	for (uint32_t c = 0; c < 65536; c++)
		b[c] = (uint16_t)c;
	const enum ck_dtype to_bf16 = CK_DT_BF16, to_f32 = CK_DT_F32, to_f16 = CK_DT_F16;
	/* the whole sweep in one run (length not a multiple of 8: minus 3) */
	memcpy(in + 1, f, nv * 4);
	ck_cpu_convert_run(in + 1, 1, CK_DT_F32, &to_bf16, 1, 0, out + 3, (int64_t)nv - 3);
	for (size_t i = 0; i + 3 < nv; i++) {
		uint16_t got, want = ck_f32_to_bf16(ck_bits_f32(f[i]), 0);
		memcpy(&got, out + 3 + 2 * i, 2);
		ck_assert_msg(got == want, "F32 %08x -> BF16 %04x, element says %04x", f[i], got, want);
	}
	ck_cpu_convert_run(in + 1, 1, CK_DT_F32, &to_f16, 1, 0, out + 3, (int64_t)nv - 3);
	for (size_t i = 0; i + 3 < nv; i++) {
		uint16_t got, want = ck_f32_to_f16(ck_bits_f32(f[i]), 0);
		memcpy(&got, out + 3 + 2 * i, 2);
		ck_assert_msg(got == want, "F32 %08x -> F16 %04x, element says %04x", f[i], got, want);
	}
	memcpy(in + 2, b, 65536 * 2);
	ck_cpu_convert_run(in + 2, 1, CK_DT_BF16, &to_f32, 1, 0, out + 1, 65536);
	for (uint32_t c = 0; c < 65536; c++) {
		uint32_t got;
		memcpy(&got, out + 1 + 4 * c, 4);
		ck_assert_uint_eq(got, ck_f32_bits(ck_bf16_to_f32((uint16_t)c)));
	}
	/* every F16 code (b's) to F32 and to BF16 */
	ck_cpu_convert_run(in + 2, 1, CK_DT_F16, &to_f32, 1, 0, out + 1, 65536);
	for (uint32_t c = 0; c < 65536; c++) {
		uint32_t got;
		memcpy(&got, out + 1 + 4 * c, 4);
		ck_assert_msg(got == ck_f32_bits(ck_f16_to_f32((uint16_t)c)), "F16 %04x -> %08x", c,
			      got);
	}
	ck_cpu_convert_run(in + 2, 1, CK_DT_F16, &to_bf16, 1, 0, out + 1, 65536);
	for (uint32_t c = 0; c < 65536; c++) {
		uint16_t got;
		memcpy(&got, out + 1 + 2 * c, 2);
		ck_assert_uint_eq(got, ck_f32_to_bf16(ck_f16_to_f32((uint16_t)c), 0));
	}
	ck_cpu_convert_run(in + 2, 1, CK_DT_BF16, &to_f16, 1, 0, out + 1, 65536);
	for (uint32_t c = 0; c < 65536; c++) {
		uint16_t got, want = ck_f32_to_f16(ck_bf16_to_f32((uint16_t)c), 0);
		memcpy(&got, out + 1 + 2 * c, 2);
		ck_assert_msg(got == want, "BF16 %04x -> F16 %04x, element says %04x", c, got, want);
	}
	/* short runs at every offset: blocks and tails of every length */
	for (int len = 0; len <= 40; len++)
		for (int off = 0; off < 4; off++) {
			size_t at = (size_t)(len * 7919 + off * 104729) % (nv - 64);
			memcpy(in + off, f + at, (size_t)len * 4);
			memset(out, 0xAB, (size_t)len * 2 + 8);
			ck_cpu_convert_run(in + off, 1, CK_DT_F32, &to_bf16, 1, 0, out + off, len);
			for (int i = 0; i < len; i++) {
				uint16_t got;
				memcpy(&got, out + off + 2 * i, 2);
				ck_assert_uint_eq(got, ck_f32_to_bf16(ck_bits_f32(f[at + (size_t)i]), 0));
			}
			ck_assert_uint_eq(out[off + 2 * len], 0xAB); /* nothing past the run */
			memset(out, 0xAB, (size_t)len * 4 + 8);
			ck_cpu_convert_run(in + off, 1, CK_DT_BF16, &to_f32, 1, 0, out + off, len);
			for (int i = 0; i < len; i++) {
				uint16_t h;
				uint32_t got;
				memcpy(&h, in + off + 2 * i, 2);
				memcpy(&got, out + off + 4 * i, 4);
				ck_assert_uint_eq(got, (uint32_t)h << 16);
			}
			ck_assert_uint_eq(out[off + 4 * len], 0xAB);
			memset(out, 0xAB, (size_t)len * 4 + 8);
			ck_cpu_convert_run(in + off, 1, CK_DT_F16, &to_f32, 1, 0, out + off, len);
			for (int i = 0; i < len; i++) {
				uint16_t h;
				uint32_t got;
				memcpy(&h, in + off + 2 * i, 2);
				memcpy(&got, out + off + 4 * i, 4);
				ck_assert_uint_eq(got, ck_f32_bits(ck_f16_to_f32(h)));
			}
			ck_assert_uint_eq(out[off + 4 * len], 0xAB);
			memset(out, 0xAB, (size_t)len * 2 + 8);
			ck_cpu_convert_run(in + off, 1, CK_DT_BF16, &to_f16, 1, 0, out + off, len);
			for (int i = 0; i < len; i++) {
				uint16_t h, got;
				memcpy(&h, in + off + 2 * i, 2);
				memcpy(&got, out + off + 2 * i, 2);
				ck_assert_uint_eq(got, ck_f32_to_f16(ck_bf16_to_f32(h), 0));
			}
			ck_assert_uint_eq(out[off + 2 * len], 0xAB);
		}
	free(f);
	free(b);
	free(in);
	free(out);
#if defined(__x86_64__)
	_mm_setcsr(csr);
#endif
}
END_TEST

/* Block-scaled FP8 (DeepSeek-V3's weights): rows of F8_E4M3 times, or over,
 * one F32 scale per block, to BF16 and F32, through the engine's box path
 * (blocks of eight, kern/cpu.c) against the element path's operations on
 * the element conversions the oracle holds: every E4M3 code under scales
 * that keep, underflow, overflow, zero, NaN and infinity, blocks of 1, 7
 * and 128 elements starting at phases 0 and 5, runs of every length 0..40
 * and of 1024. */
START_TEST(fp8_scaled_runs_match_elements)
{
	static const float scales[] = {1.0f, 0.5f, 3.7f, -2.0f, 1e-30f, 1e38f, 0.0f, -0.0f,
				       INFINITY, NAN, 2.2e-3f, 448.0f, -1e-3f, 7.0f, 1e-40f, 65504.0f};
	unsigned char src[1024], out[4096 + 8];
	for (int i = 0; i < 1024; i++)
		src[i] = (unsigned char)((i * 167 + i / 256) & 0xFF); /* every code, four times */
	const enum ck_dtype outs[2] = {CK_DT_BF16, CK_DT_F32};
	static const int blocks[] = {1, 7, 128}, phases[] = {0, 5};
	for (int divide = 0; divide < 2; divide++)
		for (int o = 0; o < 2; o++)
			for (int bi = 0; bi < 3; bi++)
				for (int pi = 0; pi < 2; pi++)
					for (int len = 0; len <= 41; len++) {
						int n = len == 41 ? 1024 : len, blk = blocks[bi], ph = phases[pi];
						int need = (n + ph) / blk + 1; /* scales the run reaches */
						float sc[1100];
						for (int q = 0; q < need; q++)
							sc[q] = scales[(q + len + bi) % 16];
						struct ck_box b;
						memset(&b, 0, sizeof b);
						b.ndim = 1, b.ext[0] = n, b.sstride[0] = 1, b.dstride[0] = 1;
						b.sdt = CK_DT_F8_E4M3, b.ddt = outs[o], b.nc = 1, b.casts[0] = outs[o];
						b.scaled = 1, b.divide = divide, b.scdt = CK_DT_F32;
						b.sblock[0] = blk, b.sphase[0] = ph, b.scstride[0] = 1;
						size_t es = o ? 4 : 2;
						memset(out, 0xAB, sizeof out);
						if (n)
							ck_cpu_convert_box(&b, src, (const unsigned char *)sc, out);
						for (int i = 0; i < n; i++) {
							float v = ck_e4m3_to_f32(src[i]), s = sc[(i + ph) / blk];
							float r = divide ? v / s : v * s;
							uint32_t want = r != r ? 0x7FC00000u : ck_f32_bits(r), got = 0;
							if (!o)
								want = ck_f32_to_bf16(ck_bits_f32(want), 0);
							memcpy(&got, out + (size_t)i * es, es);
							ck_assert_msg(got == want,
								      "E4M3 %02x %s %g -> %x, want %x (%s, block %d, phase %d, n %d)",
								      src[i], divide ? "/" : "*", (double)s, got, want,
								      o ? "F32" : "BF16", blk, ph, n);
						}
						ck_assert_uint_eq(out[(size_t)n * es], 0xAB);
					}
}
END_TEST

/* F32 -> BF16 runs both ways: loop 0 as this CPU runs them (in AVX2 where
 * it has it, kern/avx2.h), loop 1 the portable blocks alone; every high
 * half with the low halves where rounding turns (and NaNs of every sign and
 * payload, infinities, the largest finite values, which round to
 * infinity), against the element conversion, in one long run and in runs
 * of every length 0..40 from byte offsets 0..3. */
START_TEST(f32_to_bf16_runs_match_elements_both_paths)
{
	static const uint16_t low[] = {0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF, 0x1234};
	const size_t nl = sizeof low / sizeof *low, nv = 65536 * nl;
	uint32_t *f = malloc(nv * 4);
	unsigned char *in = malloc(nv * 4 + 8), *out = malloc(nv * 2 + 16);
	ck_assert(f && in && out);
	for (size_t i = 0; i < nv; i++)
		f[i] = (uint32_t)(i / nl) << 16 | low[i % nl];
	memcpy(in + 3, f, nv * 4);
	ck_cpu_f32_to_bf16_run(in + 3, out + 1, (int64_t)nv, _i == 0);
	for (size_t i = 0; i < nv; i++) {
		uint16_t got, want = ck_f32_to_bf16(ck_bits_f32(f[i]), 0);
		memcpy(&got, out + 1 + 2 * i, 2);
		ck_assert_msg(got == want, "F32 %08x -> BF16 %04x, element says %04x (vector %d)",
			      f[i], got, want, _i == 0);
	}
	for (int len = 0; len <= 40; len++)
		for (int off = 0; off < 4; off++) {
			size_t at = (size_t)(len * 7919 + off * 104729) % (nv - 64);
			memcpy(in + off, f + at, (size_t)len * 4);
			memset(out, 0xAB, (size_t)len * 2 + 8);
			ck_cpu_f32_to_bf16_run(in + off, out + off, len, _i == 0);
			for (int i = 0; i < len; i++) {
				uint16_t got;
				memcpy(&got, out + off + 2 * i, 2);
				ck_assert_uint_eq(
				    got, ck_f32_to_bf16(ck_bits_f32(f[at + (size_t)i]), 0));
			}
			ck_assert_uint_eq(out[off + 2 * len], 0xAB); /* nothing past the run */
		}
	free(f);
	free(in);
	free(out);
}
END_TEST

/* The FP8 run behind those boxes, both ways: loop 0 as this CPU runs it (in
 * AVX2 where it has it, kern/avx2.h), loop 1 the portable blocks alone;
 * every E4M3 code under each scale above, times and over, to BF16 and F32,
 * runs of every length 0..40 and of 1024 from byte offsets 0..3. */
START_TEST(fp8_runs_match_elements_both_paths)
{
	static const float scales[] = {1.0f,   0.5f,  3.7f,	-2.0f,	 1e-30f,  1e38f,
				       0.0f,   -0.0f, INFINITY, NAN,	 2.2e-3f, 448.0f,
				       -1e-3f, 7.0f,  1e-40f,	65504.0f};
	unsigned char src[1024 + 4], out[4096 + 16];
	for (int i = 0; i < 1024 + 4; i++)
		src[i] = (unsigned char)((i * 167 + i / 256) & 0xFF);
	for (int si = 0; si < 16; si++)
		for (int divide = 0; divide < 2; divide++)
			for (int to_bf16 = 0; to_bf16 < 2; to_bf16++)
				for (int len = 0; len <= 41; len++) {
					int n = len == 41 ? 1024 : len, off = len % 4;
					size_t es = to_bf16 ? 2 : 4;
					float sv = scales[si];
					memset(out, 0xAB, sizeof out);
					ck_cpu_e4m3_scaled_run(src + off, sv, divide, to_bf16,
							       out + off, n, _i == 0);
					for (int i = 0; i < n; i++) {
						float v = ck_e4m3_to_f32(src[off + i]);
						float r = divide ? v / sv : v * sv;
						uint32_t want =
							     r != r ? 0x7FC00000u : ck_f32_bits(r),
							 got = 0;
						if (to_bf16)
							want = ck_f32_to_bf16(ck_bits_f32(want), 0);
						memcpy(&got, out + off + (size_t)i * es, es);
						ck_assert_msg(
						    got == want,
						    "E4M3 %02x %s %g -> %x, want %x (%s, n %d)",
						    src[off + i], divide ? "/" : "*", (double)sv,
						    got, want, to_bf16 ? "BF16" : "F32", n);
					}
					ck_assert_uint_eq(out[off + (size_t)n * es], 0xAB);
				}
}
END_TEST

/* MXFP4's run (gpt-oss's experts), both ways as the FP8 one: every byte
 * (two E2M1 codes) under E8M0 scales from 2^-127 to 2^127, NaN (0xFF) and
 * other floats, times and over, to BF16 and F32, runs of every length
 * 0..40 and of 1024 starting at even and odd nibbles, against
 * ck_e2m1_to_f32 (held to the definition above) scaled in F32 and rounded
 * by the element conversion. */
START_TEST(fp4_runs_match_elements_both_paths)
{
	static const float scales[] = {1.0f, 0x1p-127f, 0x1p127f, NAN,	0x1p-20f, 0x1p40f,
				       0.0f, -0.0f,	INFINITY, 3.7f, -2.0f,	  1e-40f};
	unsigned char src[520], out[4096 + 16];
	for (int i = 0; i < 520; i++)
		src[i] = (unsigned char)((i * 167 + i / 256) & 0xFF);
	for (size_t si = 0; si < sizeof scales / sizeof *scales; si++)
		for (int divide = 0; divide < 2; divide++)
			for (int to_bf16 = 0; to_bf16 < 2; to_bf16++)
				for (int len = 0; len <= 41; len++)
					for (int64_t n0 = 0; n0 < 2; n0++) {
						int n = len == 41 ? 1024 : len;
						size_t es = to_bf16 ? 2 : 4;
						float sv = scales[si];
						memset(out, 0xAB, sizeof out);
						ck_cpu_fp4_scaled_run(src, n0, sv, divide, to_bf16,
								      out, n, _i == 0);
						for (int i = 0; i < n; i++) {
							int64_t k = n0 + i;
							unsigned code = (unsigned)(src[k >> 1] >>
										   ((k & 1) * 4)) &
									15;
							float v = ck_e2m1_to_f32(code),
							      r = divide ? v / sv : v * sv;
							uint32_t want = r != r ? 0x7FC00000u
									       : ck_f32_bits(r),
								 got = 0;
							if (to_bf16)
								want = ck_f32_to_bf16(
								    ck_bits_f32(want), 0);
							memcpy(&got, out + (size_t)i * es, es);
							ck_assert_msg(got == want,
								      "E2M1 %x %s %g -> %x, want "
								      "%x (%s, n %d, n0 %d)",
								      code, divide ? "/" : "*",
								      (double)sv, got, want,
								      to_bf16 ? "BF16" : "F32", n,
								      (int)n0);
						}
						ck_assert_uint_eq(out[(size_t)n * es], 0xAB);
					}
}
END_TEST

/* ggml's reference quantizers, transcribed from quantize_row_q8_0_ref and
 * quantize_row_q4_0_ref (ggml-quants.c): the running MAX macro, libm's
 * roundf, the scale stored as F16 (ck_f32_to_f16: every_f32_matches_oracle
 * checks it), and a float's conversion to int8_t as x86 compiles it
 * (cvttss2si to 32 bits, low byte; NaN and out-of-range give 0x80000000). */
#define REF_MAX(a, b) ((a) > (b) ? (a) : (b))
#define REF_MIN(a, b) ((a) < (b) ? (a) : (b))

static int8_t ref_i8(float v)
{
	return fabsf(v) < 2147483648.0f ? (int8_t)(uint8_t)((uint32_t)(int32_t)v & 0xFF) : 0;
}

static void ref_q8_0(const float *x, unsigned char *y)
{
	float amax = 0.0f;
	for (int j = 0; j < 32; j++)
		amax = REF_MAX(amax, fabsf(x[j]));
	const float d = amax / ((1 << 7) - 1);
	const float id = d ? 1.0f / d : 0.0f;
	uint16_t h = ck_f32_to_f16(d, 0);
	memcpy(y, &h, 2);
	for (int j = 0; j < 32; j++)
		y[2 + j] = (unsigned char)ref_i8(roundf(x[j] * id));
}

static void ref_q4_0(const float *x, unsigned char *y)
{
	float amax = 0.0f, max = 0.0f;
	for (int j = 0; j < 32; j++) {
		const float v = x[j];
		if (amax < fabsf(v)) {
			amax = fabsf(v);
			max = v;
		}
	}
	const float d = max / -8;
	const float id = d ? 1.0f / d : 0.0f;
	uint16_t h = ck_f32_to_f16(d, 0);
	memcpy(y, &h, 2);
	for (int j = 0; j < 16; j++) {
		const float x0 = x[j] * id, x1 = x[16 + j] * id;
		const uint8_t xi0 = (uint8_t)REF_MIN(15, ref_i8(x0 + 8.5f));
		const uint8_t xi1 = (uint8_t)REF_MIN(15, ref_i8(x1 + 8.5f));
		y[2 + j] = xi0;
		y[2 + j] |= (unsigned char)(xi1 << 4);
	}
}

/* Block k of the adversarial set: ties at every half (scale 1), values a
 * hair below a half, the largest magnitude first, last, repeated with both
 * signs, zeros of both signs, subnormals, scales whose inverse overflows or
 * underflows, NaN and infinities at the ends and in the middle, the largest
 * floats; then blocks of random bits (every class of float) and random
 * values at scales 2^-140 .. 2^120. */
static void quant_block(int k, uint64_t *rng, float *x)
{
	static const float special[] = {NAN, -NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1e-45f,
					-1e-45f, 1.1754942e-38f, 3.4028235e38f, -3.4028235e38f,
					0.49999997f, -0.49999997f, 0.5f, -0.5f, 1.5f, -2.5f, 127.0f};
	const int ns = (int)(sizeof special / sizeof *special);
	for (int j = 0; j < 32; j++)
		x[j] = 0.0f;
	switch (k) {
	case 0: /* x * id == x: every .5 tie and its neighbours */
		for (int j = 0; j < 31; j++)
			x[j] = (float)(j * 4 - 62) + (j % 3 ? 0.5f : -0.5f);
		x[31] = 127.0f;
		return;
	case 1:
		for (int j = 0; j < 32; j++)
			x[j] = j % 2 ? 0.0f : -0.0f; /* ggml's max stays +0: the scale is -0 */
		return;
	case 2: /* -8 * scale first, +8 * scale later: Q4_0 keeps the first */
		for (int j = 0; j < 32; j++)
			x[j] = (float)(j % 9) - 4.5f;
		x[3] = -8.0f, x[6] = 8.0f, x[20] = 8.0f; /* a tie within 8 lanes too */
		return;
	case 3:
		for (int j = 0; j < 32; j++)
			x[j] = (float)(j % 7) - 3.0f;
		x[30] = 8.0f, x[5] = -8.0f, x[31] = -8.0f;
		return;
	case 4: /* subnormals only: the scale underflows to zero */
		for (int j = 0; j < 32; j++)
			x[j] = (float)(j - 16) * 1e-45f;
		return;
	case 5: /* a scale that is subnormal: its inverse is coarse or infinite */
		for (int j = 0; j < 32; j++)
			x[j] = (float)(j - 16) * 3e-39f;
		return;
	}
	uint32_t r = (uint32_t)(*rng >> 32);
	if (k < 6 + 4 * ns) { /* one special value among random ones, 4 places */
		for (int j = 0; j < 32; j++)
			x[j] = (float)((int)((*rng = *rng * 6364136223846793005ull + 1442695040888963407ull) >> 40 & 0xFFFF) - 32768) / 256.0f;
		static const int at[] = {0, 13, 31, 16};
		x[at[(k - 6) % 4]] = special[(k - 6) / 4];
		return;
	}
	for (int j = 0; j < 32; j++) {
		*rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
		r = (uint32_t)(*rng >> 32);
		if (k % 2)
			x[j] = ck_bits_f32(r);
		else
			x[j] = ldexpf((float)(int32_t)r / 2147483648.0f, k % 261 - 140);
	}
}

/* An F16 bit pattern's value as F32 bits, from the format's definition
 * (sign, 5-bit exponent biased by 15, 10-bit fraction; NaN payloads kept
 * as widening keeps them), for the reference. */
static uint32_t f16_def_bits(uint16_t h)
{
	uint32_t sign = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 31, m = h & 1023;
	if (e == 31)
		return sign | 0x7F800000u | m << 13;
	float v = e ? ldexpf((float)(m + 1024), (int)e - 25) : ldexpf((float)m, -24);
	return sign | ck_f32_bits(v);
}

/* Loops 0 and 1: F32 blocks; 2 and 3: the same blocks cut to BF16 (the
 * top half of each float's bits); 4 and 5: those halves read as F16. The
 * 2-byte ones are quantized as they are and held to the reference on the
 * F32 they widen to. Even loops as this CPU quantizes (AVX2 where it has
 * it, kern/avx2.h), odd ones the portable code alone. */
START_TEST(ggml_quantizers_match_reference)
{
	enum { N = 40000 };
	static const int from[] = {CK_QSRC_F32, CK_QSRC_BF16, CK_QSRC_F16};
	static const char *const name[] = {"", " from BF16", " from F16"};
	const int src = _i / 2, vector = _i % 2 == 0;
	float *x = malloc(N * 32 * sizeof *x);
	uint16_t *h = malloc(N * 32 * sizeof *h);
	unsigned char *got = malloc(N * 34 + 1), want[34];
	ck_assert(x && h && got);
	uint64_t rng = 0x9E3779B97F4A7C15ull;
	for (int k = 0; k < N; k++)
		quant_block(k, &rng, x + 32 * k);
	for (int j = 0; src && j < N * 32; j++) {
		h[j] = (uint16_t)(ck_f32_bits(x[j]) >> 16);
		x[j] = ck_bits_f32(src == 1 ? (uint32_t)h[j] << 16 : f16_def_bits(h[j]));
	}
	for (int q4 = 0; q4 < 2; q4++) {
		size_t bs = q4 ? 18 : 34;
		got[N * bs] = 0xAB;
		ck_assert_int_eq(ck_ggml_quant(q4 ? CK_GGML_Q4_0 : CK_GGML_Q8_0, from[src],
					       src ? (const void *)h : (const void *)x, N, got,
					       vector),
				 0);
		ck_assert_uint_eq(got[N * bs], 0xAB);
		for (int k = 0; k < N; k++) {
			if (q4)
				ref_q4_0(x + 32 * k, want);
			else
				ref_q8_0(x + 32 * k, want);
			for (size_t b = 0; b < bs; b++)
				ck_assert_msg(got[k * bs + b] == want[b],
					      "%s%s block %d byte %zu: %02x, ggml's %02x (block "
					      "starts %a %a)",
					      q4 ? "Q4_0" : "Q8_0", name[src], k, b,
					      got[k * bs + b], want[b], (double)x[32 * k],
					      (double)x[32 * k + 1]);
		}
	}
	/* types no view writes (TQ1_0, TQ2_0) and element types no quantizer
	 * reads are refused (the K-quants', Q4_1's and MXFP4's blocks:
	 * tests/cli/gguf_kquant.py, against ggml) */
	ck_assert_int_eq(ck_ggml_quant(CK_GGML_TQ1_0, CK_QSRC_F32, x, 1, got, 1), -1);
	ck_assert_int_eq(ck_ggml_quant(CK_GGML_TQ2_0, CK_QSRC_F32, x, 1, got, 1), -1);
	/* MXFP4 (session 50): a block whose largest magnitude is 6 at index 0
	 * and -1.5 at 17 takes exponent floor(log2 6) - 2 + 127 = 127 (half
	 * scale 2^-1), 6 the doubled level 12 (code 7), -1.5 the doubled -3
	 * (code 11) in the high nibble of qs[1] */
	float mx[32] = {6.0f};
	mx[17] = -1.5f;
	unsigned char mq[17];
	ck_assert_int_eq(ck_ggml_quant(CK_GGML_MXFP4, CK_QSRC_F32, mx, 1, mq, 1), 0);
	ck_assert_uint_eq(mq[0], 127);
	ck_assert_uint_eq(mq[1], 7);
	ck_assert_uint_eq(mq[2], 11 << 4);
	for (int b = 3; b < 17; b++)
		ck_assert_uint_eq(mq[b], 0);
	ck_assert_int_eq(ck_ggml_quant(CK_GGML_Q8_0, 3, x, 1, got, 1), -1);
	ck_assert_int_eq(ck_ggml_quant(CK_GGML_Q4_K, 3, x, 1, got, 1), -1);
	/* weighted runs: a type that takes no weights, no blocks, and more
	 * than 256 elements (the engine's run buffer) are refused */
	float qw[512];
	for (int j = 0; j < 512; j++)
		qw[j] = 1.0f;
	got[0] = 0xAB;
	ck_assert_int_eq(ck_ggml_quant_imx(CK_GGML_Q8_0, CK_QSRC_F32, x, qw, 0, 1, got), -1);
	ck_assert_int_eq(ck_ggml_quant_imx(CK_GGML_IQ4_NL, CK_QSRC_F32, x, qw, 0, 0, got), -1);
	ck_assert_int_eq(ck_ggml_quant_imx(CK_GGML_IQ4_NL, CK_QSRC_F32, x, qw, 0, 9, got), -1);
	ck_assert_int_eq(ck_ggml_quant_imx(CK_GGML_Q4_K, CK_QSRC_F32, x, qw, 0, 2, got), -1);
	ck_assert_uint_eq(got[0], 0xAB); /* nothing written */
	ck_assert_int_eq(ck_ggml_quant_imx(CK_GGML_IQ4_NL, CK_QSRC_F32, x, qw, 0, 8, got), 0);
	free(x);
	free(h);
	free(got);
}
END_TEST

/* One element of a transposed box, computed from the box's definition: the
 * source element's bytes, or its value through one cast by the element
 * functions (every_f32_matches_oracle and every_half_code_round_trips hold
 * those to the oracle). */
static void box_elem_ref(enum ck_dtype sdt, int nc, enum ck_dtype to, const unsigned char *p,
			 unsigned char *out)
{
	size_t es = ck_dtype_size(sdt);
	if (!nc) {
		memcpy(out, p, es);
		return;
	}
	float f;
	uint16_t h;
	if (sdt == CK_DT_F32) {
		memcpy(&f, p, 4);
	} else {
		memcpy(&h, p, 2);
		f = sdt == CK_DT_BF16 ? ck_bf16_to_f32(h) : ck_f16_to_f32(h);
	}
	if (to == CK_DT_F32) {
		memcpy(out, &f, 4);
		return;
	}
	h = to == CK_DT_BF16 ? ck_f32_to_bf16(f, 0) : ck_f32_to_f16(f, 0);
	memcpy(out, &h, 2);
}

/* Transposing boxes (the source contiguous along the output's second-last
 * dim, strided along its last, as x.t() of a Linear weight makes them):
 * 1-, 2-, 4- and 8-byte elements, copies and casts, row strides on both
 * sides wider than the box, an outer dim, and extents around the tile edges
 * (one line of source, 256 columns), source rows at, under and over the
 * tiles' 2 KiB threshold, every element against the box's
 * definition and every padding byte of the output untouched. */
START_TEST(transposed_boxes_match_elements)
{
	static const struct {
		enum ck_dtype sdt, to; /* to == sdt: a copy */
	} kinds[] = {{CK_DT_F32, CK_DT_F32},  {CK_DT_BF16, CK_DT_BF16}, {CK_DT_U8, CK_DT_U8},
		     {CK_DT_I64, CK_DT_I64},  {CK_DT_BF16, CK_DT_F32},  {CK_DT_F32, CK_DT_BF16},
		     {CK_DT_F16, CK_DT_F32},  {CK_DT_F32, CK_DT_F16},   {CK_DT_C64, CK_DT_C64}};
	static const int64_t cols[] = {1, 256, 257, 520};
	/* bytes between source rows: at, under and over the tiles' threshold */
	static const int64_t sbytes_row[] = {2048, 1000, 2056, 4100};
	uint64_t rng = 12345;
	for (size_t ki = 0; ki < sizeof kinds / sizeof *kinds; ki++)
		for (int ri = 0; ri < 5; ri++)
			for (int ci = 0; ci < 4; ci++) {
				enum ck_dtype sdt = kinds[ki].sdt, to = kinds[ki].to;
				size_t ses = ck_dtype_size(sdt), des = ck_dtype_size(to);
				int64_t line = 64 / (int64_t)ses; /* a tile's rows */
				const int64_t rows[] = {2, line - 1, line, line + 1, 2 * line + 3};
				int nc = to != sdt, outer = 1 + (ri + ci) % 2;
				int64_t nr = rows[ri], nk = cols[ci];
				int64_t ss = sbytes_row[(ri + ci + ki) % 4] / (int64_t)ses;
				if (ss < nr)
					ss = nr;
				int64_t drow = nk + 3, dout = nr * drow + 5, sout = nk * ss + 7;
				size_t sbytes = (size_t)(outer * sout) * ses, dbytes = (size_t)(outer * dout) * des;
				unsigned char *src = malloc(sbytes), *dst = malloc(dbytes), *want = malloc(dbytes);
				ck_assert(src && dst && want);
				for (size_t i = 0; i + 8 <= sbytes; i += 8) {
					rng = rng * 6364136223846793005ull + 1442695040888963407ull;
					memcpy(src + i, &rng, 8);
				}
				memset(dst, 0xAB, dbytes);
				memset(want, 0xAB, dbytes);
				struct ck_box b;
				memset(&b, 0, sizeof b);
				b.ndim = 3, b.sdt = sdt, b.ddt = to, b.nc = nc, b.casts[0] = to;
				b.ext[0] = outer, b.ext[1] = nr, b.ext[2] = nk;
				b.sstride[0] = sout, b.sstride[1] = 1, b.sstride[2] = ss;
				b.dstride[0] = dout, b.dstride[1] = drow, b.dstride[2] = 1;
				for (int64_t o = 0; o < outer; o++)
					for (int64_t i = 0; i < nr; i++)
						for (int64_t k = 0; k < nk; k++)
							box_elem_ref(sdt, nc, to,
								     src + (size_t)(o * sout + i + k * ss) * ses,
								     want + (size_t)(o * dout + i * drow + k) * des);
				ck_cpu_convert_box(&b, src, NULL, dst);
				for (size_t i = 0; i < dbytes; i++)
					ck_assert_msg(dst[i] == want[i],
						      "%s -> %s, %d x %lld x %lld, source rows %lld apart: "
						      "byte %zu is %02x, not %02x",
						      ck_dtype_name(sdt), ck_dtype_name(to), outer,
						      (long long)nr, (long long)nk, (long long)ss, i, dst[i],
						      want[i]);
				free(src);
				free(dst);
				free(want);
			}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("fpconv");
	TCase *tc = tcase_create("oracle");
	tcase_set_timeout(tc, 600);
	tcase_add_loop_test(tc, narrow_formats_match_oracle, 0, 4);
	tcase_add_test(tc, every_half_code_round_trips);
	tcase_add_test(tc, mxfp4_codes_match_definition);
	tcase_add_loop_test(tc, cast_runs_match_elements, 0, 2);
	tcase_add_loop_test(tc, f32_to_bf16_runs_match_elements_both_paths, 0, 2);
	tcase_add_test(tc, fp8_scaled_runs_match_elements);
	tcase_add_loop_test(tc, fp8_runs_match_elements_both_paths, 0, 2);
	tcase_add_loop_test(tc, fp4_runs_match_elements_both_paths, 0, 2);
	tcase_add_loop_test(tc, ggml_quantizers_match_reference, 0, 6);
	tcase_add_test(tc, transposed_boxes_match_elements);
	suite_add_tcase(s, tc);
	TCase *ex = tcase_create("exhaustive");
	tcase_set_timeout(ex, 1800);
	tcase_add_loop_test(ex, every_f32_matches_oracle, 0, 4);
	suite_add_tcase(s, ex);
	return tu_run_suite(s, 1);
}
