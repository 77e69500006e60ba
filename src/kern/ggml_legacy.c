/* ggml's legacy 32-element blocks Q4_1, Q5_0 and Q5_1 without an
 * importance matrix (quantize_row_q4_1_ref, _q5_0_ref, _q5_1_ref): the
 * base types of llama-quantize's legacy mixes and the K-quants' fallbacks
 * (Q4_0 and Q8_0 are in ggml.c; the weighted fits in ggml_imx.c). Each
 * block takes lanes GCC vectorises (compiled twice: for AVX2, chosen per
 * call where the CPU has it, and for the baseline) when every element is
 * finite and every code stays below 2^22; the rest (NaN, infinities, a
 * range that overflows, a block whose end is a zero) ggml's scalar steps.
 * Both give ggml's bytes (tests/cli/gguf_kquant.py). */
#include <float.h>
#include <string.h>

#include "avx2.h"
#include "ggml_int.h"
#include "ggml_kquant.h"
#include "ggml_lanes.h"

#define LANE_LIMIT 4194304.0f /* 2^22: codes below it truncate exactly */

/* The 32 five-bit codes c of a Q5_0 / Q5_1 block: low nibbles paired as
 * Q4_0's (j and 16 + j), the fifth bits in a little-endian u32 at qh. */
void ck_pack5(const uint8_t *c, unsigned char *qh, unsigned char *qs)
{
	uint32_t h = 0;
	for (int j = 0; j < 16; j++) {
		qs[j] = (unsigned char)((c[j] & 0x0F) | ((c[16 + j] & 0x0F) << 4));
		h |= (uint32_t)((c[j] & 0x10u) >> 4) << j;
		h |= (uint32_t)((c[16 + j] & 0x10u) >> 4) << (j + 16);
	}
	for (int k = 0; k < 4; k++)
		qh[k] = (unsigned char)(h >> (8 * k));
}

/* ggml's steps, one element at a time. */

/* block_q5_0: d, qh, qs; d = the largest-magnitude value / -16. */
static void q5_0_steps(const float *x, unsigned char *y)
{
	const float d = ck_first_absmax(x, 32) / -16, id = d != 0.0f ? 1.0f / d : 0.0f;
	ck_put_half(y, d);
	uint8_t c[32];
	for (int j = 0; j < 32; j++) {
		int8_t t = ck_trunc_i8(x[j] * id + 16.5f);
		c[j] = (uint8_t)(t < 31 ? t : 31);
	}
	ck_pack5(c, y + 2, y + 6);
}

/* Q4_1's and Q5_1's d = (max - min) / levels and m = min, from the
 * block's range as ggml seeks it (a NaN never moves either end), into the
 * block's first four bytes; returns 1 / d (0 for d 0) and the min. */
static float put_d_min(const float *x, float levels, unsigned char *y, float *min)
{
	float lo = FLT_MAX, hi = -FLT_MAX;
	for (int j = 0; j < 32; j++) {
		if (x[j] < lo)
			lo = x[j];
		if (x[j] > hi)
			hi = x[j];
	}
	const float d = (hi - lo) / levels;
	ck_put_half(y, d);
	ck_put_half(y + 2, lo);
	*min = lo;
	return d != 0.0f ? 1.0f / d : 0.0f;
}

/* block_q5_1: d, m (the minimum), qh, qs; d = range / 31. */
static void q5_1_steps(const float *x, unsigned char *y)
{
	float min;
	const float id = put_d_min(x, 31, y, &min);
	uint8_t c[32];
	for (int j = 0; j < 32; j++)
		c[j] = (uint8_t)ck_trunc_i8((x[j] - min) * id + 0.5f);
	ck_pack5(c, y + 4, y + 8);
}

/* block_q4_1: d, m (the minimum), qs; d = range / 15, each code clamped
 * to 15 as a signed byte first, as ggml's MIN(15, (int8_t)...) does (a
 * code that wraps negative keeps its high bits, which the pairing's OR
 * then carries into the other nibble, as ggml's does). */
static void q4_1_steps(const float *x, unsigned char *y)
{
	float min;
	const float id = put_d_min(x, 15, y, &min);
	for (int j = 0; j < 16; j++) {
		const int8_t a = ck_trunc_i8((x[j] - min) * id + 0.5f);
		const int8_t b = ck_trunc_i8((x[16 + j] - min) * id + 0.5f);
		const uint8_t xi0 = (uint8_t)(a < 15 ? a : 15), xi1 = (uint8_t)(b < 15 ? b : 15);
		y[4 + j] = (unsigned char)(xi0 | (xi1 << 4));
	}
}

/* The lanes: fixed counts and integer compares, which GCC vectorises.
 * With every element finite a float's bits, read as a signed integer with
 * a negative float's magnitude bits flipped, order as the floats do, so
 * the block's ends do not depend on the order they are sought in, but for
 * the two zeros (ggml keeps whichever comes first: Q4_1 and Q5_1 leave a
 * block whose end is a zero to the steps). */
LANE_FN float from_ordered(int32_t k)
{
	const int32_t b = k ^ (k < 0 ? 0x7FFFFFFF : 0);
	float f;
	memcpy(&f, &b, sizeof f);
	return f;
}

/* The block's ends, each element's magnitude bits and the largest; 1 when
 * every element is finite. */
LANE_FN int scan(const float *x, float *lo, float *hi, int32_t *abs, int32_t *big)
{
	int32_t b[32], mn = INT32_MAX, mx = INT32_MIN, m = 0;
	memcpy(b, x, sizeof b);
	for (int j = 0; j < 32; j++) {
		const int32_t k = b[j] ^ (b[j] < 0 ? 0x7FFFFFFF : 0);
		mn = k < mn ? k : mn;
		mx = k > mx ? k : mx;
		abs[j] = b[j] & 0x7FFFFFFF;
		m = abs[j] > m ? abs[j] : m;
	}
	*lo = from_ordered(mn), *hi = from_ordered(mx), *big = m;
	return m < 0x7F800000;
}

/* Q4_1 / Q5_1 (levels 15 / 31) in lanes: the codes as the int8_t ggml's
 * conversion keeps (before Q4_1's clamp); 0 to leave the block to the
 * steps. */
LANE_FN int min_codes(const float *x, float levels, unsigned char *y, int32_t *c)
{
	float lo, hi;
	int32_t abs[32], big;
	if (!scan(x, &lo, &hi, abs, &big) || lo == 0.0f || hi == 0.0f)
		return 0;
	const float d = (hi - lo) / levels, id = d != 0.0f ? 1.0f / d : 0.0f;
	if (!((hi - lo) * id < LANE_LIMIT))
		return 0;
	ck_put_half(y, d);
	ck_put_half(y + 2, lo);
	for (int j = 0; j < 32; j++) {
		c[j] = (int32_t)((x[j] - lo) * id + 0.5f);
		c[j] = ((c[j] & 0xFF) ^ 0x80) - 0x80;
	}
	return 1;
}

/* Q5_0 in lanes: the codes, clamped to 31; 0 to leave the block to the
 * steps. ggml's scale is the first element of the largest magnitude, with
 * its sign (+0 when all are zeros: its running max never moved). */
LANE_FN int q5_0_codes(const float *x, unsigned char *y, uint8_t *c)
{
	float lo, hi;
	int32_t abs[32], big;
	if (!scan(x, &lo, &hi, abs, &big))
		return 0;
	int first = 0;
	while (big && abs[first] != big)
		first++;
	const float max = big ? x[first] : 0.0f, d = max / -16;
	const float id = d != 0.0f ? 1.0f / d : 0.0f;
	if (!(fabsf(max) * fabsf(id) < LANE_LIMIT))
		return 0;
	ck_put_half(y, d);
	int32_t t[32];
	for (int j = 0; j < 32; j++) {
		t[j] = (int32_t)(x[j] * id + 16.5f);
		t[j] = ((t[j] & 0xFF) ^ 0x80) - 0x80; /* the int8_t ggml keeps */
		t[j] = t[j] < 31 ? t[j] : 31;
	}
	for (int j = 0; j < 32; j++)
		c[j] = (uint8_t)t[j];
	return 1;
}

/* One block: the lanes, or the steps where they leave it. */
LANE_FN void legacy_block(uint32_t type, const float *x, unsigned char *y)
{
	int32_t t[32];
	uint8_t c[32];
	if (type == CK_GGML_Q4_1) {
		if (!min_codes(x, 15, y, t)) {
			q4_1_steps(x, y);
			return;
		}
		for (int j = 0; j < 32; j++)
			t[j] = t[j] < 15 ? t[j] : 15;
		for (int j = 0; j < 16; j++)
			y[4 + j] = (unsigned char)((t[j] & 0xFF) | ((t[16 + j] & 0x0F) << 4));
	} else if (type == CK_GGML_Q5_1) {
		if (!min_codes(x, 31, y, t)) {
			q5_1_steps(x, y);
			return;
		}
		for (int j = 0; j < 32; j++)
			c[j] = (uint8_t)t[j];
		ck_pack5(c, y + 4, y + 8);
	} else if (q5_0_codes(x, y, c)) {
		ck_pack5(c, y + 2, y + 6);
	} else {
		q5_0_steps(x, y);
	}
}

LANE_FN void legacy_run_body(uint32_t type, const float *x, int n, size_t qb, unsigned char *y)
{
	for (int i = 0; i < n; i++)
		legacy_block(type, x + 32 * i, y + qb * (size_t)i);
}

LANES_DISPATCH(legacy_run, (uint32_t type, const float *x, int n, size_t qb, unsigned char *y),
	       (type, x, n, qb, y))

void ck_quant_legacy(uint32_t type, const float *x, int n, unsigned char *y)
{
	size_t qk, qb;
	ck_ggml_block(type, &qk, &qb);
	legacy_run(type, x, n, qb, y);
}
