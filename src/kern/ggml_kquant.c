/* ggml's reference quantizers for the K-quant mixes the GGUF view serves
 * (Q4_K_M, Q4_K_S, Q5_K_M, Q6_K) and their fallbacks for rows that are not
 * whole super-blocks: Q4_K, Q5_K, Q6_K, Q5_0 and Q5_1, as
 * quantize_row_*_ref compute them without an importance matrix, which is
 * what llama-quantize runs without one. Byte-identity with ggml asks for the
 * same float operations in the same order: every sum below accumulates
 * element by element, as ggml's loops do, and rounding goes through the
 * same 1.5 * 2^23 trick (tests/cli/gguf_view.py compares the blocks with
 * the prebuilt ggml's and whole files with llama.cpp's own quantizer). */
#include "ggml_kquant.h"

#include <float.h>

#include "ggml_int.h"

#define QK_K 256
#define GROUP_MAX_EPS 1e-15f

/* Round to nearest even by adding 1.5 * 2^23 and reading the mantissa
 * (ggml's nearest_int; exact for |v| < 2^22, and defined for any v). */
static inline int nearest_int(float v)
{
	float t = v + 12582912.f;
	int32_t i;
	memcpy(&i, &t, sizeof i);
	return (i & 0x007fffff) - 0x00400000;
}

static inline int clampi(int v, int lo, int hi)
{
	return v < lo ? lo : v > hi ? hi : v;
}

/* The levels 0..nmax of n values and the scale and min (min <= 0, *neg_min
 * its negation) minimising the weighted squared error: the first guess
 * from the range, then nstep + 1 scales around nmax / range, each refined
 * by least squares (ggml's make_qkx2_quants, use_mad false). */
static float qkx2(int n, int nmax, const float *x, const float *w, uint8_t *L, float *neg_min,
		  uint8_t *aux, float rmin, float rdelta, int nstep)
{
	float min = x[0], max = x[0], sum_w = w[0], sum_x = sum_w * x[0];
	for (int i = 1; i < n; i++) {
		if (x[i] < min)
			min = x[i];
		if (x[i] > max)
			max = x[i];
		sum_w += w[i];
		sum_x += w[i] * x[i];
	}
	if (min > 0)
		min = 0;
	if (max == min) {
		memset(L, 0, (size_t)n);
		*neg_min = -min;
		return 0.f;
	}
	float iscale = (float)nmax / (max - min), scale = 1 / iscale, best = 0;
	for (int i = 0; i < n; i++) {
		L[i] = (uint8_t)clampi(nearest_int(iscale * (x[i] - min)), 0, nmax);
		float diff = scale * L[i] + min - x[i];
		best += w[i] * (diff * diff);
	}
	for (int is = 0; is <= nstep; is++) {
		iscale = (rmin + rdelta * (float)is + (float)nmax) / (max - min);
		float sum_l = 0, sum_l2 = 0, sum_xl = 0;
		for (int i = 0; i < n; i++) {
			int l = clampi(nearest_int(iscale * (x[i] - min)), 0, nmax);
			aux[i] = (uint8_t)l;
			sum_l += w[i] * (float)l;
			sum_l2 += w[i] * (float)l * (float)l;
			sum_xl += w[i] * (float)l * x[i];
		}
		float D = sum_w * sum_l2 - sum_l * sum_l;
		if (!(D > 0))
			continue;
		float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
		float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
		if (this_min > 0) {
			this_min = 0;
			this_scale = sum_xl / sum_l2;
		}
		float err = 0;
		for (int i = 0; i < n; i++) {
			float diff = this_scale * aux[i] + this_min - x[i];
			err += w[i] * (diff * diff);
		}
		if (err < best) {
			memcpy(L, aux, (size_t)n);
			best = err;
			scale = this_scale;
			min = this_min;
		}
	}
	*neg_min = -min;
	return scale;
}

/* Q4_K and Q5_K (levels 0..nmax = 15 or 31): eight sub-blocks of 32, each
 * a scale and a min fitted with weights |x| + rms, both quantized to 6
 * bits against the largest, then the levels recomputed from those; the
 * 6-bit scales packed into 12 bytes at sc. */
static void kquant_levels(const float *x, int nmax, unsigned char *dd, unsigned char *sc,
			  uint8_t *L)
{
	float scales[8], mins[8], w[32], max_scale = 0, max_min = 0;
	uint8_t aux[32];
	for (int j = 0; j < 8; j++) {
		const float *xs = x + 32 * j;
		float sum_x2 = 0;
		for (int l = 0; l < 32; l++)
			sum_x2 += xs[l] * xs[l];
		float av_x = sqrtf(sum_x2 / 32);
		for (int l = 0; l < 32; l++)
			w[l] = av_x + fabsf(xs[l]);
		scales[j] = nmax == 15
				? qkx2(32, 15, xs, w, L + 32 * j, &mins[j], aux, -1.f, 0.1f, 20)
				: qkx2(32, 31, xs, w, L + 32 * j, &mins[j], aux, -0.5f, 0.1f, 15);
		if (scales[j] > max_scale)
			max_scale = scales[j];
		if (mins[j] > max_min)
			max_min = mins[j];
	}
	float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
	float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
	memset(sc, 0, 12);
	for (int j = 0; j < 8; j++) {
		uint8_t ls = (uint8_t)nearest_int(inv_scale * scales[j]);
		uint8_t lm = (uint8_t)nearest_int(inv_min * mins[j]);
		ls = ls < 63 ? ls : 63;
		lm = lm < 63 ? lm : 63;
		if (j < 4) {
			sc[j] = ls;
			sc[j + 4] = lm;
		} else {
			sc[j + 4] = (unsigned char)((ls & 0xF) | ((lm & 0xF) << 4));
			sc[j - 4] |= (unsigned char)((ls >> 4) << 6);
			sc[j] |= (unsigned char)((lm >> 4) << 6);
		}
	}
	ck_put_half(dd, max_scale / 63.f);
	ck_put_half(dd + 2, max_min / 63.f);
	for (int j = 0; j < 8; j++) {
		unsigned s, m;
		ck_scale_min_k4(j, sc, &s, &m);
		const float d = ck_half_at(dd) * (float)s;
		if (d == 0.0f) /* the fitted levels stay */
			continue;
		const float dm = ck_half_at(dd + 2) * (float)m;
		for (int i = 0; i < 32; i++)
			L[32 * j + i] =
			    (uint8_t)clampi(nearest_int((x[32 * j + i] + dm) / d), 0, nmax);
	}
}

/* block_q4_K: d, dmin, scales[12], qs[128] (elements j and j + 32 of each
 * 64 in one byte's nibbles). */
static void quant_q4_k(const float *x, unsigned char *y)
{
	uint8_t L[QK_K];
	kquant_levels(x, 15, y, y + 4, L);
	unsigned char *q = y + 16;
	for (int j = 0; j < QK_K; j += 64, q += 32)
		for (int l = 0; l < 32; l++)
			q[l] = (unsigned char)(L[j + l] | (L[j + l + 32] << 4));
}

/* block_q5_K: d, dmin, scales[12], qh[32] (the fifth bits, two per 64
 * elements), qs[128] as Q4_K's. */
static void quant_q5_k(const float *x, unsigned char *y)
{
	uint8_t L[QK_K];
	kquant_levels(x, 31, y, y + 4, L);
	unsigned char *qh = y + 16, *ql = y + 48;
	memset(qh, 0, 32);
	unsigned m1 = 1, m2 = 2;
	for (int n = 0; n < QK_K; n += 64, m1 <<= 2, m2 <<= 2, ql += 32)
		for (int j = 0; j < 32; j++) {
			int l1 = L[n + j], l2 = L[n + j + 32];
			if (l1 > 15) {
				l1 -= 16;
				qh[j] |= (unsigned char)m1;
			}
			if (l2 > 15) {
				l2 -= 16;
				qh[j] |= (unsigned char)m2;
			}
			ql[j] = (unsigned char)(l1 | (l2 << 4));
		}
}

/* Signed levels -nmax..nmax-1 (stored + nmax) of n values with weights
 * x^2 and the scale that fits them best over 19 trial scales (ggml's
 * make_qx_quants, rmse_type 1). */
static float qx(int n, int nmax, const float *x, int8_t *L)
{
	float max = 0, amax = 0;
	for (int i = 0; i < n; i++) {
		float ax = fabsf(x[i]);
		if (ax > amax) {
			amax = ax;
			max = x[i];
		}
	}
	if (amax < GROUP_MAX_EPS) {
		memset(L, 0, (size_t)n);
		return 0.f;
	}
	float iscale = (float)-nmax / max, sumlx = 0, suml2 = 0;
	for (int i = 0; i < n; i++) {
		int l = clampi(nearest_int(iscale * x[i]), -nmax, nmax - 1);
		L[i] = (int8_t)(l + nmax);
		float w = x[i] * x[i];
		sumlx += w * x[i] * (float)l;
		suml2 += w * (float)l * (float)l;
	}
	float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f, best = scale * sumlx;
	for (int is = -9; is <= 9; is++) {
		if (is == 0)
			continue;
		iscale = -((float)nmax + 0.1f * (float)is) / max;
		sumlx = suml2 = 0;
		for (int i = 0; i < n; i++) {
			int l = clampi(nearest_int(iscale * x[i]), -nmax, nmax - 1);
			float w = x[i] * x[i];
			sumlx += w * x[i] * (float)l;
			suml2 += w * (float)l * (float)l;
		}
		if (suml2 > 0 && sumlx * sumlx > best * suml2) {
			for (int i = 0; i < n; i++)
				L[i] = (int8_t)(nmax + clampi(nearest_int(iscale * x[i]), -nmax,
							      nmax - 1));
			scale = sumlx / suml2;
			best = scale * sumlx;
		}
	}
	return scale;
}

/* block_q6_K: ql[128] (low nibbles), qh[64] (the two high bits), scales[16]
 * (int8, one per 16 elements), d. */
static void quant_q6_k(const float *x, unsigned char *y)
{
	int8_t L[QK_K];
	float scales[16], max_scale = 0, max_abs = 0;
	for (int ib = 0; ib < 16; ib++) {
		scales[ib] = qx(16, 32, x + 16 * ib, L + 16 * ib);
		if (fabsf(scales[ib]) > max_abs) {
			max_abs = fabsf(scales[ib]);
			max_scale = scales[ib];
		}
	}
	memset(y, 0, 210);
	if (max_abs < GROUP_MAX_EPS)
		return; /* all zeros, d too */
	unsigned char *ql = y, *qh = y + 128;
	int8_t *sc = (int8_t *)(void *)(y + 192);
	const float iscale = -128.f / max_scale;
	ck_put_half(y + 208, 1 / iscale);
	for (int ib = 0; ib < 16; ib++) {
		int s = nearest_int(iscale * scales[ib]);
		sc[ib] = (int8_t)(s < 127 ? s : 127);
	}
	for (int j = 0; j < 16; j++) {
		const float d = ck_half_at(y + 208) * (float)sc[j];
		if (d == 0.0f)
			continue;
		for (int i = 0; i < 16; i++)
			L[16 * j + i] =
			    (int8_t)(clampi(nearest_int(x[16 * j + i] / d), -32, 31) + 32);
	}
	for (int j = 0; j < QK_K; j += 128, ql += 64, qh += 32)
		for (int l = 0; l < 32; l++) {
			const int a = L[j + l], b = L[j + l + 32], c = L[j + l + 64],
				  e = L[j + l + 96];
			ql[l] = (unsigned char)((a & 0xF) | ((c & 0xF) << 4));
			ql[l + 32] = (unsigned char)((b & 0xF) | ((e & 0xF) << 4));
			qh[l] = (unsigned char)((a >> 4) | ((b >> 4) << 2) | ((c >> 4) << 4) |
						((e >> 4) << 6));
		}
}

/* The 32 five-bit codes c of a Q5_0 / Q5_1 block: low nibbles paired as
 * Q4_0's (j and 16 + j), the fifth bits in a little-endian u32 at qh. */
static void pack5(const uint8_t *c, unsigned char *qh, unsigned char *qs)
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

/* block_q5_0: d, qh, qs; d = the largest-magnitude value / -16. */
static void quant_q5_0(const float *x, unsigned char *y)
{
	const float d = ck_first_absmax(x, 32) / -16, id = d != 0.0f ? 1.0f / d : 0.0f;
	ck_put_half(y, d);
	uint8_t c[32];
	for (int j = 0; j < 32; j++) {
		int8_t t = ck_trunc_i8(x[j] * id + 16.5f);
		c[j] = (uint8_t)(t < 31 ? t : 31);
	}
	pack5(c, y + 2, y + 6);
}

/* block_q5_1: d, m (the minimum), qh, qs; d = range / 31. */
static void quant_q5_1(const float *x, unsigned char *y)
{
	float min = FLT_MAX, max = -FLT_MAX;
	for (int j = 0; j < 32; j++) {
		if (x[j] < min)
			min = x[j];
		if (x[j] > max)
			max = x[j];
	}
	const float d = (max - min) / 31, id = d != 0.0f ? 1.0f / d : 0.0f;
	ck_put_half(y, d);
	ck_put_half(y + 2, min);
	uint8_t c[32];
	for (int j = 0; j < 32; j++)
		c[j] = (uint8_t)ck_trunc_i8((x[j] - min) * id + 0.5f);
	pack5(c, y + 4, y + 8);
}

int ck_kquant_block(uint32_t type, const float *x, unsigned char *y)
{
	switch (type) {
	case CK_GGML_Q4_K: quant_q4_k(x, y); return 0;
	case CK_GGML_Q5_K: quant_q5_k(x, y); return 0;
	case CK_GGML_Q6_K: quant_q6_k(x, y); return 0;
	case CK_GGML_Q5_0: quant_q5_0(x, y); return 0;
	case CK_GGML_Q5_1: quant_q5_1(x, y); return 0;
	default: return -1;
	}
}
