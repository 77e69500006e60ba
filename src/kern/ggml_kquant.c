/* ggml's reference quantizers for the K-quant mixes the GGUF view serves
 * (Q4_K_S/M, Q5_K_S/M, Q6_K; Q2_K and Q3_K are in ggml_kquant23.c, the
 * legacy Q4_1, Q5_0 and Q5_1 in ggml_legacy.c), as
 * quantize_row_*_ref compute them without an importance matrix, which is
 * what llama-quantize runs without one. Byte-identity with ggml asks for the
 * same float operations in the same order: every sum accumulates element by
 * element, as ggml's loops do, and rounding goes through the same 1.5 * 2^23
 * trick. The scale searches, most of the time, run a super-block's
 * sub-blocks side by side in vector lanes, each lane the scalar steps.
 * tests/cli/gguf_kquant.py compares whole files with llama.cpp's own
 * quantizer and blocks with ggml's; a block holding a NaN is the exception
 * (which NaN payload an operation keeps depends on operand order, which C
 * leaves to the compiler: ggml's own builds differ there). */
#include "ggml_kquant.h"

#include "avx2.h"
#include "ggml_int.h"
#include "ggml_lanes.h"

#define QK_K 256

/* The eight sub-blocks' scales, mins and levels of a Q4_K / Q5_K
 * super-block, fitted in lanes. */
LANE_FN void k45_fit_body(const float *x, int nmax, v8f *sv, v8f *mv, uint8_t *L)
{
	v8f xt[32], wt[32], sum_x2 = {0}, av_x;
	for (int i = 0; i < 32; i++) {
		for (int j = 0; j < 8; j++)
			xt[i][j] = x[32 * j + i];
		sum_x2 += xt[i] * xt[i];
	}
	for (int j = 0; j < 8; j++)
		av_x[j] = sqrtf(sum_x2[j] / 32);
	const v8i abs_mask = (v8i){0} + 0x7FFFFFFF;
	for (int i = 0; i < 32; i++)
		wt[i] = av_x + (v8f)((v8i)xt[i] & abs_mask);
	v8i lt[32];
	if (nmax == 15)
		*sv = ck_qkx2_lanes(32, 0, 15, xt, wt, lt, mv, -1.f, 0.1f, 20);
	else
		*sv = ck_qkx2_lanes(32, 0, 31, xt, wt, lt, mv, -0.5f, 0.1f, 15);
	for (int j = 0; j < 8; j++)
		for (int i = 0; i < 32; i++)
			L[32 * j + i] = (uint8_t)lt[i][j];
}

/* The 16 sub-blocks' levels (L) and scales of a Q6_K super-block, two
 * groups of 8 in lanes. */
LANE_FN void q6_k_fit_body(const float *x, int8_t *L, float *scales)
{
	for (int g = 0; g < 2; g++) {
		v8f xt[16];
		v8i lt[16];
		for (int i = 0; i < 16; i++)
			for (int j = 0; j < 8; j++)
				xt[i][j] = x[16 * (8 * g + j) + i];
		const v8f s = ck_qx_lanes(16, 32, xt, NULL, lt);
		for (int j = 0; j < 8; j++) {
			scales[8 * g + j] = s[j];
			for (int i = 0; i < 16; i++)
				L[16 * (8 * g + j) + i] = (int8_t)lt[i][j];
		}
	}
}

LANES_DISPATCH(k45_fit, (const float *x, int nmax, v8f *sv, v8f *mv, uint8_t *L),
	       (x, nmax, sv, mv, L))

LANES_DISPATCH(q6_k_fit, (const float *x, int8_t *L, float *scales), (x, L, scales))

/* The rest of a Q4_K / Q5_K block (levels 0..nmax = 15 or 31) once its
 * eight 6-bit scales ls and mins lm and the two F16 factors d, dmin are
 * chosen: the scales packed into 12 bytes, the levels L (the fit's)
 * recomputed from them but where a scale is zero, the levels packed
 * (Q5_K: the fifth bits in qh). */
void ck_k45_finish(const float *x, int nmax, const uint8_t *ls, const uint8_t *lm, float d,
		   float dmin, uint8_t *L, unsigned char *y)
{
	unsigned char *dd = y, *sc = y + 4;
	memset(sc, 0, 12);
	for (int j = 0; j < 8; j++) {
		if (j < 4) {
			sc[j] = ls[j];
			sc[j + 4] = lm[j];
		} else {
			sc[j + 4] = (unsigned char)((ls[j] & 0xF) | ((lm[j] & 0xF) << 4));
			sc[j - 4] |= (unsigned char)((ls[j] >> 4) << 6);
			sc[j] |= (unsigned char)((lm[j] >> 4) << 6);
		}
	}
	ck_put_half(dd, d);
	ck_put_half(dd + 2, dmin);
	for (int j = 0; j < 8; j++) {
		unsigned s, m;
		ck_scale_min_k4(j, sc, &s, &m);
		const float dj = ck_half_at(dd) * (float)s;
		if (dj == 0.0f) /* the fitted levels stay */
			continue;
		const float dm = ck_half_at(dd + 2) * (float)m;
		for (int i = 0; i < 32; i++)
			L[32 * j + i] =
			    (uint8_t)ck_clampi(ck_nearest_int((x[32 * j + i] + dm) / dj), 0, nmax);
	}
	if (nmax == 15) { /* Q4_K: elements j and j + 32 of each 64 in a byte */
		unsigned char *q = y + 16;
		for (int j = 0; j < QK_K; j += 64, q += 32)
			for (int l = 0; l < 32; l++)
				q[l] = (unsigned char)(L[j + l] | (L[j + l + 32] << 4));
		return;
	}
	unsigned char *qh = y + 16, *ql = y + 48; /* Q5_K: qh[32], qs[128] */
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

/* block_q4_K (d, dmin, scales[12], qs[128]) and block_q5_K (d, dmin,
 * scales[12], qh[32], qs[128]): eight sub-blocks of 32, each a scale and a
 * min fitted with weights |x| + rms, both quantized to 6 bits against the
 * largest. */
static void quant_k45(const float *x, int nmax, unsigned char *y)
{
	uint8_t L[QK_K];
	v8f sv, mv;
	k45_fit(x, nmax, &sv, &mv, L);
	float max_scale = 0, max_min = 0;
	for (int j = 0; j < 8; j++) {
		if (sv[j] > max_scale)
			max_scale = sv[j];
		if (mv[j] > max_min)
			max_min = mv[j];
	}
	float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
	float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
	uint8_t ls[8], lm[8];
	for (int j = 0; j < 8; j++) {
		ls[j] = (uint8_t)ck_nearest_int(inv_scale * sv[j]);
		lm[j] = (uint8_t)ck_nearest_int(inv_min * mv[j]);
		ls[j] = ls[j] < 63 ? ls[j] : 63;
		lm[j] = lm[j] < 63 ? lm[j] : 63;
	}
	ck_k45_finish(x, nmax, ls, lm, max_scale / 63.f, max_min / 63.f, L, y);
}

/* The rest of a block_q6_K (ql[128], qh[64], scales[16], d) once its 16
 * sub-blocks' scales and levels L are fitted: the scales quantized to int8
 * against the largest magnitude, the levels recomputed from them but where
 * a scale is zero, packed. */
void ck_q6_k_finish(const float *x, const float *scales, int8_t *L, unsigned char *y)
{
	float max_scale = 0, max_abs = 0;
	for (int ib = 0; ib < 16; ib++) {
		if (fabsf(scales[ib]) > max_abs) {
			max_abs = fabsf(scales[ib]);
			max_scale = scales[ib];
		}
	}
	memset(y, 0, 210);
	if (max_abs < CK_GROUP_MAX_EPS)
		return; /* all zeros, d too */
	unsigned char *ql = y, *qh = y + 128;
	int8_t *sc = (int8_t *)(void *)(y + 192);
	const float iscale = -128.f / max_scale;
	ck_put_half(y + 208, 1 / iscale);
	for (int ib = 0; ib < 16; ib++) {
		int s = ck_nearest_int(iscale * scales[ib]);
		sc[ib] = (int8_t)(s < 127 ? s : 127);
	}
	for (int j = 0; j < 16; j++) {
		const float d = ck_half_at(y + 208) * (float)sc[j];
		if (d == 0.0f)
			continue;
		for (int i = 0; i < 16; i++)
			L[16 * j + i] =
			    (int8_t)(ck_clampi(ck_nearest_int(x[16 * j + i] / d), -32, 31) + 32);
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

static void quant_q6_k(const float *x, unsigned char *y)
{
	int8_t L[QK_K];
	float scales[16];
	q6_k_fit(x, L, scales);
	ck_q6_k_finish(x, scales, L, y);
}

/* One block of 32 or 256 elements. */
static int block(uint32_t type, const float *x, unsigned char *y)
{
	switch (type) {
	case CK_GGML_Q2_K: ck_quant_q2_k(x, y); return 0;
	case CK_GGML_Q3_K: ck_quant_q3_k(x, y); return 0;
	case CK_GGML_Q4_K: quant_k45(x, 15, y); return 0;
	case CK_GGML_Q5_K: quant_k45(x, 31, y); return 0;
	case CK_GGML_Q6_K: quant_q6_k(x, y); return 0;
	case CK_GGML_IQ4_XS: ck_quant_iq4_xs(x, NULL, y); return 0;
	case CK_GGML_MXFP4: ck_quant_mxfp4(x, y); return 0;
	default: return -1;
	}
}

int ck_kquant_blocks(uint32_t type, const float *x, int n, unsigned char *y)
{
	size_t qk, qb;
	if (!ck_ggml_block(type, &qk, &qb) || n < 1 || (size_t)n * qk > 256)
		return -1;
	if (type == CK_GGML_IQ4_NL) { /* side by side in lanes */
		ck_quant_iq4_nl(x, NULL, n, y);
		return 0;
	}
	if (type == CK_GGML_Q4_1 || type == CK_GGML_Q5_0 || type == CK_GGML_Q5_1) {
		ck_quant_legacy(type, x, n, y);
		return 0;
	}
	for (int i = 0; i < n; i++)
		if (block(type, x + i * qk, y + i * qb) < 0)
			return -1;
	return 0;
}
