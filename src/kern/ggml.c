#include "ggml.h"

#include <math.h>
#include <string.h>

#include "avx2.h"
#include "fpconv.h"
#include "ggml_int.h"
#include "ggml_kquant.h"

static void q4_0(const unsigned char *restrict b, float *restrict y)
{
	float d = ck_half_at(b);
	for (int j = 0; j < 16; j++) {
		y[j] = (float)((b[2 + j] & 0x0F) - 8) * d;
		y[j + 16] = (float)((b[2 + j] >> 4) - 8) * d;
	}
}

/* Q4_1: d, m, qs[16]: an unsigned nibble times d plus the block's minimum
 * m. Q5_0 / Q5_1 add qh, 32 fifth bits (bit j for element j), before qs;
 * Q5_0 centres its 5-bit codes on 16 instead of adding a minimum. Branch-free
 * loops of fixed counts, as qk45's. */
static void q45_legacy(const unsigned char *restrict b, float *restrict y, int five, int with_min)
{
	float d = ck_half_at(b), m = with_min ? ck_half_at(b + 2) : 0.0f;
	const unsigned char *p = b + (with_min ? 4 : 2);
	uint32_t qh = 0;
	if (five) {
		memcpy(&qh, p, 4); /* little-endian, as the file stores it */
		p += 4;
	}
	int code[32];
	for (int j = 0; j < 16; j++) {
		code[j] = (p[j] & 0x0F) | (int)((qh >> j) & 1) << 4;
		code[j + 16] = (p[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
	}
	if (with_min)
		for (int j = 0; j < 32; j++)
			y[j] = (float)code[j] * d + m;
	else
		for (int j = 0; j < 32; j++)
			y[j] = (float)(code[j] - (five ? 16 : 0)) * d;
}

/* IQ4_NL's 16 non-uniform levels (ggml's kvalues_iq4nl); IQ4_XS uses the
 * same with a 6-bit scale per 32 elements. */
static const int8_t iq4nl_levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
					1,    13,   25,	 38,  53,  69,	89,  113};

static void iq4_32(const unsigned char *restrict qs, float d, float *restrict y)
{
	for (int j = 0; j < 16; j++) {
		y[j] = d * (float)iq4nl_levels[qs[j] & 0x0F];
		y[j + 16] = d * (float)iq4nl_levels[qs[j] >> 4];
	}
}

/* IQ4_XS: d, scales_h (u16: 2 high bits per sub-block), scales_l[4] (a
 * nibble per sub-block), qs[128]; each sub-block's scale is d * (ls - 32). */
static void iq4_xs(const unsigned char *restrict b, float *restrict y)
{
	float d = ck_half_at(b);
	uint16_t sh;
	memcpy(&sh, b + 2, 2);
	for (int ib = 0; ib < 8; ib++) {
		int ls = ((b[4 + ib / 2] >> (4 * (ib % 2))) & 0x0F) | (((sh >> (2 * ib)) & 3) << 4);
		iq4_32(b + 8 + 16 * ib, d * (float)(ls - 32), y + 32 * ib);
	}
}

/* Q2_K: scales[16] (a 4-bit scale and a 4-bit min per 16 elements), qs[64]
 * (2-bit codes), d, dmin. Each 32-byte half of qs holds 128 elements: four
 * passes over it, two bits further each, 16 + 16 elements per pass. */
static void q2_k(const unsigned char *restrict b, float *restrict y)
{
	const unsigned char *sc = b, *q = b + 16;
	float d = ck_half_at(b + 80), min = ck_half_at(b + 82);
	for (int n = 0; n < 2; n++, q += 32)
		for (int shift = 0; shift < 8; shift += 2)
			for (int h = 0; h < 2; h++) {
				unsigned s = *sc++;
				float dl = d * (float)(s & 0x0F), ml = min * (float)(s >> 4);
				for (int l = 0; l < 16; l++)
					*y++ = dl * (float)((q[16 * h + l] >> shift) & 3) - ml;
			}
}

/* Q3_K's sixteen 6-bit scales from its 12 bytes: the low nibbles of bytes
 * 0-7 (scales 0-7 and, as high nibbles, 8-15) with two high bits each from
 * bytes 8-11 (bits 2k..2k+1 of byte 8 + i serve scale i + 4k). */
static void q3_k_scales(const unsigned char *p, int *out)
{
	for (int i = 0; i < 16; i++) {
		int low = i < 8 ? p[i] & 0x0F : p[i - 8] >> 4;
		int high = (p[8 + i % 4] >> (2 * (i / 4))) & 3;
		out[i] = (low | high << 4) - 32;
	}
}

/* Q3_K: hmask[32] (the third bit: bit k of byte l for element l (+16) of
 * pass k), qs[64] (2-bit codes, laid out as Q2_K's), scales[12], d. A code
 * whose hmask bit is clear is lowered by 4. */
static void q3_k(const unsigned char *restrict b, float *restrict y)
{
	const unsigned char *hm = b, *q = b + 32;
	int sc[16];
	q3_k_scales(b + 96, sc);
	float d = ck_half_at(b + 108);
	int is = 0, pass = 0;
	for (int n = 0; n < 2; n++, q += 32)
		for (int shift = 0; shift < 8; shift += 2, pass++)
			for (int h = 0; h < 2; h++) {
				float dl = d * (float)sc[is++];
				for (int l = 0; l < 16; l++) {
					int code = (q[16 * h + l] >> shift) & 3;
					code -= hm[16 * h + l] >> pass & 1 ? 0 : 4;
					*y++ = dl * (float)code;
				}
			}
}

static void q8_0(const unsigned char *restrict b, float *restrict y)
{
	float d = ck_half_at(b);
	for (int j = 0; j < 32; j++)
		y[j] = (float)(int8_t)b[2 + j] * d;
}

/* MXFP4 (GPT-OSS in GGUF): e (E8M0), qs[16]; byte j holds element j (low
 * nibble) and j + 16 (high), E2M1 codes stored doubled as small integers
 * and scaled by half of 2^(e - 127). ggml's half scale has no NaN: e = 255
 * is 2^127 and e = 0, 1 are the subnormals 2^-128, 2^-127 (its
 * ggml_e8m0_to_fp32_half); the products are exact. */
static void mxfp4(const unsigned char *restrict b, float *restrict y)
{
	static const int8_t kv[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
	uint32_t bits = b[0] < 2 ? 0x00200000u << b[0] : (uint32_t)(b[0] - 1) << 23;
	float d;
	memcpy(&d, &bits, 4);
	for (int j = 0; j < 16; j++) {
		y[j] = (float)kv[b[1 + j] & 0x0F] * d;
		y[j + 16] = (float)kv[b[1 + j] >> 4] * d;
	}
}

/* TQ2_0 (ternary, BitNet b1.58): qs[64], d; 2-bit codes 0..2 meaning
 * -1, 0, 1 times d, laid out as Q2_K's (each 32-byte half holds 128
 * elements, four passes two bits further each). */
static void tq2_0(const unsigned char *restrict b, float *restrict y)
{
	float d = ck_half_at(b + 64);
	for (int j = 0; j < 64; j += 32)
		for (int shift = 0; shift < 8; shift += 2, y += 32)
			for (int m = 0; m < 32; m++)
				y[m] = (float)(((b[j + m] >> shift) & 3) - 1) * d;
}

/* A TQ1_0 byte holds five ternary digits as a fixed-point fraction of
 * 3^5: digit n (the most significant first) is the top of (q * 3^n mod 256)
 * times 3, over 256. */
static float trit(unsigned q, int n, float d)
{
	static const unsigned pow3[5] = {1, 3, 9, 27, 81};
	unsigned v = (q * pow3[n]) & 0xFF;
	return (float)((int)((v * 3) >> 8) - 1) * d;
}

/* TQ1_0: qs[48] (five elements a byte: bytes 0-31 give 160 elements, a
 * digit of all 32 at a time; bytes 32-47 the next 80, 16 at a time),
 * qh[4] (the last 16, four digits of each byte), d. */
static void tq1_0(const unsigned char *restrict b, float *restrict y)
{
	float d = ck_half_at(b + 52);
	for (int n = 0; n < 5; n++, y += 32)
		for (int m = 0; m < 32; m++)
			y[m] = trit(b[m], n, d);
	for (int n = 0; n < 5; n++, y += 16)
		for (int m = 0; m < 16; m++)
			y[m] = trit(b[32 + m], n, d);
	for (int n = 0; n < 4; n++, y += 4)
		for (int j = 0; j < 4; j++)
			y[j] = trit(b[48 + j], n, d);
}

/* Q4_K: d, dmin (f16), scales[12], qs[128]; Q5_K adds qh[32] before qs,
 * the fifth bits (bit 2p of byte l for element l of pass p's first 32, bit
 * 2p + 1 for its second 32). The loops have fixed counts and no branches,
 * so the compiler runs them in vector lanes (the same operations on each
 * element: the same floats). */
static void qk45(const unsigned char *restrict b, float *restrict y, int five)
{
	float d = ck_half_at(b), min = ck_half_at(b + 2);
	const unsigned char *sc = b + 4, *qh = b + 16, *q = b + (five ? 48 : 16);
	for (int p = 0; p < 4; p++, q += 32, y += 64) {
		unsigned s, m;
		ck_scale_min_k4(2 * p, sc, &s, &m);
		float d1 = d * (float)s, m1 = min * (float)m;
		ck_scale_min_k4(2 * p + 1, sc, &s, &m);
		float d2 = d * (float)s, m2 = min * (float)m;
		if (!five) {
			for (int l = 0; l < 32; l++)
				y[l] = d1 * (float)(q[l] & 0xF) - m1;
			for (int l = 0; l < 32; l++)
				y[32 + l] = d2 * (float)(q[l] >> 4) - m2;
			continue;
		}
		for (int l = 0; l < 32; l++)
			y[l] = d1 * (float)((q[l] & 0xF) | ((qh[l] >> (2 * p)) & 1) << 4) - m1;
		for (int l = 0; l < 32; l++)
			y[32 + l] =
			    d2 * (float)((q[l] >> 4) | ((qh[l] >> (2 * p + 1)) & 1) << 4) - m2;
	}
}

/* Q6_K: ql[128], qh[64], scales[16] (i8), d (f16). Each half of 128
 * elements takes 64 bytes of ql (low nibbles, then high) and 32 of qh (two
 * bits per element, four elements a byte); each 16 elements a scale. */
static void q6_k(const unsigned char *restrict b, float *restrict y)
{
	const unsigned char *ql = b, *qh = b + 128;
	const int8_t *sc = (const int8_t *)(b + 192);
	float d = ck_half_at(b + 208);
	for (int n = 0; n < 2; n++, y += 128, ql += 64, qh += 32, sc += 8)
		for (int h = 0; h < 32; h += 16) {
			float s1 = d * (float)sc[h / 16], s2 = d * (float)sc[h / 16 + 2];
			float s3 = d * (float)sc[h / 16 + 4], s4 = d * (float)sc[h / 16 + 6];
			for (int l = h; l < h + 16; l++) {
				int q1 = (int)((ql[l] & 0xF) | ((qh[l] & 3) << 4)) - 32;
				int q2 = (int)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
				int q3 = (int)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
				int q4 = (int)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
				y[l] = s1 * (float)q1;
				y[l + 32] = s2 * (float)q2;
				y[l + 64] = s3 * (float)q3;
				y[l + 96] = s4 * (float)q4;
			}
		}
}

void ck_ggml_dequant(uint32_t type, const unsigned char *blocks, size_t n, float *out)
{
	size_t elems, bytes;
	if (!ck_ggml_block(type, &elems, &bytes))
		return;
	for (size_t i = 0; i < n; i++, blocks += bytes, out += elems)
		switch (type) {
		case CK_GGML_Q4_0: q4_0(blocks, out); break;
		case CK_GGML_Q4_1: q45_legacy(blocks, out, 0, 1); break;
		case CK_GGML_Q5_0: q45_legacy(blocks, out, 1, 0); break;
		case CK_GGML_Q5_1: q45_legacy(blocks, out, 1, 1); break;
		case CK_GGML_Q8_0: q8_0(blocks, out); break;
		case CK_GGML_IQ4_NL: iq4_32(blocks + 2, ck_half_at(blocks), out); break;
		case CK_GGML_IQ4_XS: iq4_xs(blocks, out); break;
		case CK_GGML_Q2_K: q2_k(blocks, out); break;
		case CK_GGML_Q3_K: q3_k(blocks, out); break;
		case CK_GGML_Q4_K: qk45(blocks, out, 0); break;
		case CK_GGML_Q5_K: qk45(blocks, out, 1); break;
		case CK_GGML_MXFP4: mxfp4(blocks, out); break;
		case CK_GGML_Q6_K: q6_k(blocks, out); break;
		case CK_GGML_TQ1_0: tq1_0(blocks, out); break;
		case CK_GGML_TQ2_0: tq2_0(blocks, out); break;
		default: break; /* ck_ggml_block refused it above */
		}
}

/* The quantizers: ggml's quantize_row_q8_0_ref and quantize_row_q4_0_ref,
 * step for step (the same float operations in the same order, the scale
 * rounded to F16 to nearest even), so the blocks are byte-identical to
 * ggml_quantize_chunk's (tests/cli/gguf_view.py compares them). Most blocks
 * take q8_0_lanes/q4_0_lanes below; these take the rest. */

/* (int8_t)roundf(v) as ggml computes it on x86, without a libm call:
 * half away from zero through a double (exact for every float), and the
 * conversion's out-of-range result (INT_MIN, low byte 0) for NaN and huge
 * values instead of undefined behaviour. */
static unsigned char round_i8(float v)
{
	double a = fabs((double)v);
	if (!(a < 2147483647.0))
		return 0;
	int32_t q = (int32_t)(a + 0.5);
	return (unsigned char)(v < 0 ? -q : q);
}

static void quant_q8_0(const float *x, unsigned char *y)
{
	float amax = 0.0f;
	for (int j = 0; j < 32; j++) {
		float v = fabsf(x[j]);
		amax = amax > v ? amax : v;
	}
	const float d = amax / 127;
	const float id = d != 0.0f ? 1.0f / d : 0.0f;
	ck_put_half(y, d);
	for (int j = 0; j < 32; j++) {
		const float x0 = x[j] * id;
		y[2 + j] = round_i8(x0);
	}
}

static void quant_q4_0(const float *x, unsigned char *y)
{
	const float d = ck_first_absmax(x, 32) / -8;
	const float id = d != 0.0f ? 1.0f / d : 0.0f;
	ck_put_half(y, d);
	for (int j = 0; j < 16; j++) {
		const float x0 = x[j] * id, x1 = x[16 + j] * id;
		int8_t a = ck_trunc_i8(x0 + 8.5f), b = ck_trunc_i8(x1 + 8.5f);
		uint8_t xi0 = (uint8_t)(a < 15 ? a : 15), xi1 = (uint8_t)(b < 15 ? b : 15);
		y[2 + j] = (unsigned char)(xi0 | (xi1 << 4));
	}
}

/* The same blocks with the loops in lanes GCC vectorises (fixed counts,
 * signed integer compares; the step-for-step loops above stayed scalar and
 * were 60% of serving a Q8_0 view). Taken when no element is NaN or infinite
 * and every product x * id stays below 2^22: then the block's largest
 * magnitude does not depend on the order it is sought in (the absolute
 * values' bits order as the floats do), and round half away from zero is
 * the truncation plus the fraction's test, both exact. The other blocks (a
 * NaN makes ggml's running MAX order-dependent) take the loops above.
 * Returns 0 when the block is left to them. */
static int32_t abs_bits_max(const float *x, int32_t *abs)
{
	uint32_t bits[32];
	memcpy(bits, x, sizeof bits);
	int32_t m = 0;
	for (int j = 0; j < 32; j++) {
		abs[j] = (int32_t)(bits[j] & 0x7FFFFFFFu);
		m = abs[j] > m ? abs[j] : m;
	}
	return m;
}

static float bits_float(int32_t b)
{
	float f;
	memcpy(&f, &b, sizeof f);
	return f;
}

#define LANE_LIMIT 4194304.0f /* 2^22: products below it round exactly */

static int q8_0_lanes(const float *x, unsigned char *y)
{
	int32_t abs[32], m = abs_bits_max(x, abs);
	if (m >= 0x7F800000)
		return 0;
	const float amax = bits_float(m), d = amax / 127, id = d != 0.0f ? 1.0f / d : 0.0f;
	if (!(amax * id < LANE_LIMIT))
		return 0;
	ck_put_half(y, d);
	int32_t q[32];
	for (int j = 0; j < 32; j++) {
		const float v = x[j] * id;
		const int32_t t = (int32_t)v;
		const float f = v - (float)t;
		q[j] = t + (f >= 0.5f ? 1 : 0) - (f <= -0.5f ? 1 : 0);
	}
	for (int j = 0; j < 32; j++)
		y[2 + j] = (unsigned char)(q[j] & 0xFF);
	return 1;
}

static int q4_0_lanes(const float *x, unsigned char *y)
{
	int32_t abs[32], m = abs_bits_max(x, abs);
	if (m >= 0x7F800000)
		return 0;
	/* ggml keeps the signed value at the first largest magnitude; +0 when
	 * all are zeros (its running max never moved) */
	int first = 0;
	while (m && abs[first] != m)
		first++;
	const float amax = bits_float(m), max = m ? x[first] : 0.0f;
	const float d = max / -8, id = d != 0.0f ? 1.0f / d : 0.0f;
	if (!(amax * fabsf(id) < LANE_LIMIT))
		return 0;
	ck_put_half(y, d);
	int32_t c[32];
	for (int j = 0; j < 32; j++) {
		const int32_t t = (int32_t)(x[j] * id + 8.5f);
		const int32_t a = ((t & 0xFF) ^ 0x80) - 0x80; /* the int8_t ggml keeps */
		c[j] = a < 15 ? a : 15;
	}
	for (int j = 0; j < 16; j++)
		y[2 + j] = (unsigned char)((c[j] & 0xFF) | ((c[16 + j] & 0x0F) << 4));
	return 1;
}

/* A block's 32 elements of type from as the F32 they widen to (exactly). */
static void widen_block(int from, const unsigned char *x, float *f)
{
	if (from == CK_QSRC_F32) {
		memcpy(f, x, 32 * sizeof *f);
		return;
	}
	for (int j = 0; j < 32; j++) {
		uint16_t h;
		memcpy(&h, x + 2 * j, 2);
		f[j] = from == CK_QSRC_BF16 ? ck_bf16_to_f32(h) : ck_f16_to_f32(h);
	}
}

/* One block of 32 floats, the lanes where they take it, else ggml's steps. */
static void quant_block(int q4, const float *x, unsigned char *y)
{
	if (q4 ? !q4_0_lanes(x, y) : !q8_0_lanes(x, y))
		(q4 ? quant_q4_0 : quant_q8_0)(x, y);
}

/* n blocks of a K-quant or IQ4 mix's type (kern/ggml_kquant.c), each
 * widened to F32 first; 256 elements at a time (IQ4_NL fits eight blocks
 * side by side). */
static int quant_k(uint32_t type, int from, const unsigned char *in, size_t n, unsigned char *out)
{
	size_t qk, qb;
	if (!ck_ggml_block(type, &qk, &qb) || qk > 256 ||
	    (type != CK_GGML_Q2_K && type != CK_GGML_Q3_K && type != CK_GGML_Q4_K &&
	     type != CK_GGML_Q5_K && type != CK_GGML_Q6_K && type != CK_GGML_Q4_1 &&
	     type != CK_GGML_Q5_0 && type != CK_GGML_Q5_1 && type != CK_GGML_IQ4_NL &&
	     type != CK_GGML_IQ4_XS && type != CK_GGML_MXFP4))
		return -1;
	const size_t es = from == CK_QSRC_F32 ? 4 : 2, per = 256 / qk;
	for (size_t i = 0; i < n; i += per) {
		const size_t m = n - i < per ? n - i : per;
		float f[256];
		for (size_t k = 0; k < m * qk; k += 32)
			widen_block(from, in + (i * qk + k) * es, f + k);
		if (ck_kquant_blocks(type, f, (int)m, out + i * qb) < 0)
			return -1;
	}
	return 0;
}

int ck_ggml_quant_imx(uint32_t type, int from, const void *x, const float *qw, float row_sigma2,
		      int n, unsigned char *out)
{
	size_t qk, qb;
	if (!ck_ggml_block(type, &qk, &qb) || qk % 32 || n < 1 || (size_t)n * qk > 256 ||
	    (from != CK_QSRC_F32 && from != CK_QSRC_BF16 && from != CK_QSRC_F16))
		return -1;
	const size_t es = from == CK_QSRC_F32 ? 4 : 2;
	float f[256];
	for (size_t k = 0; k < n * qk; k += 32)
		widen_block(from, (const unsigned char *)x + k * es, f + k);
	return ck_kquant_blocks_imx(type, f, qw, row_sigma2, n, out);
}

float ck_row_sigma2(int from, const void *x, uint64_t n)
{
	const size_t es = from == CK_QSRC_F32 ? 4 : 2;
	float f[32], s = 0;
	for (uint64_t k = 0; k + 32 <= n; k += 32) {
		widen_block(from, (const unsigned char *)x + k * es, f);
		for (int j = 0; j < 32; j++)
			s += f[j] * f[j];
	}
	return s / (float)n;
}

int ck_ggml_quant(uint32_t type, int from, const void *x, size_t n, unsigned char *out, int vector)
{
	if (from != CK_QSRC_F32 && from != CK_QSRC_BF16 && from != CK_QSRC_F16)
		return -1;
	if (type != CK_GGML_Q8_0 && type != CK_GGML_Q4_0)
		return quant_k(type, from, x, n, out);
	const int q4 = type == CK_GGML_Q4_0;
	const size_t xs = from == CK_QSRC_F32 ? 128 : 64, ys = q4 ? 18 : 34;
	const unsigned char *in = x;
	for (size_t i = 0; i < n; i++) {
		/* runs of blocks in AVX2 where the CPU has it (kern/avx2.h: Q8_0
		 * 2.5x the lanes); each block it leaves goes through here */
		if (vector) {
			size_t k = ck_avx2_quant(q4, from, in + i * xs, n - i, out + i * ys);
			if ((i += k) == n)
				break;
		}
		float f[32];
		widen_block(from, in + i * xs, f);
		quant_block(q4, f, out + i * ys);
	}
	return 0;
}
