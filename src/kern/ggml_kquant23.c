/* ggml's reference quantizers for Q2_K and Q3_K, the base types of
 * llama-quantize's Q2_K and Q3_K_S / Q3_K_M / Q3_K_L mixes: quantize_row_
 * q2_K_ref and q3_K_ref without an importance matrix, the same float
 * operations in the same order as ggml's (tests/cli/gguf_kquant.py
 * compares whole files with llama.cpp's own quantizer). Sixteen
 * sub-blocks of 16 per 256-element super-block. Q2_K's scale search runs
 * them in vector lanes, eight at a time (ggml_lanes.h; 5x its scalar loop:
 * 0.20 s for 8 Mi floats on one core); Q3_K's, a quarter of Q2_K's scalar
 * cost (0.21 s), stays scalar. */
#include "ggml_kquant.h"

#include "avx2.h"
#include "ggml_int.h"
#include "ggml_lanes.h"

#define QK_K 256

/* The 16 sub-blocks' scales, mins and levels of a Q2_K super-block
 * (weights |x|), two groups of 8 in lanes. */
LANE_FN void q2_k_fit_body(const float *x, uint8_t *L, float *scales, float *mins)
{
	const v8i abs_mask = (v8i){0} + 0x7FFFFFFF;
	for (int g = 0; g < 2; g++) {
		v8f xt[16], wt[16], mv;
		v8i lt[16];
		for (int i = 0; i < 16; i++) {
			for (int j = 0; j < 8; j++)
				xt[i][j] = x[16 * (8 * g + j) + i];
			wt[i] = (v8f)((v8i)xt[i] & abs_mask);
		}
		const v8f s = ck_qkx2_lanes(16, 1, 3, xt, wt, lt, &mv, -0.5f, 0.1f, 15);
		for (int j = 0; j < 8; j++) {
			scales[8 * g + j] = s[j];
			mins[8 * g + j] = mv[j];
			for (int i = 0; i < 16; i++)
				L[16 * (8 * g + j) + i] = (uint8_t)lt[i][j];
		}
	}
}

#ifdef HAVE_AVX2_LANES
AVX2_LANES static void q2_k_fit_avx2(const float *x, uint8_t *L, float *scales, float *mins)
{
	q2_k_fit_body(x, L, scales, mins);
}
#endif

static void q2_k_fit(const float *x, uint8_t *L, float *scales, float *mins)
{
#ifdef HAVE_AVX2_LANES
	if (ck_avx2_usable()) {
		q2_k_fit_avx2(x, L, scales, mins);
		return;
	}
#endif
	q2_k_fit_body(x, L, scales, mins);
}

/* Four 2-bit levels of elements j, j + 32, j + 64, j + 96 of each 128 in
 * one byte (Q2_K's and Q3_K's qs). */
static void pack2(const uint8_t *L, unsigned char *qs)
{
	for (int j = 0; j < QK_K; j += 128)
		for (int l = 0; l < 32; l++)
			qs[j / 4 + l] =
			    (unsigned char)(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) |
					    (L[j + l + 96] << 6));
}

/* block_q2_K: scales[16] (4-bit scale, 4-bit min), qs[64], d, dmin. */
void ck_quant_q2_k(const float *x, unsigned char *y)
{
	uint8_t L[QK_K];
	float scales[16], mins[16], max_scale = 0, max_min = 0;
	q2_k_fit(x, L, scales, mins);
	for (int j = 0; j < 16; j++) {
		if (scales[j] > max_scale)
			max_scale = scales[j];
		if (mins[j] > max_min)
			max_min = mins[j];
	}
	unsigned char *sc = y, *dd = y + 80;
	memset(sc, 0, 16);
	if (max_scale > 0) {
		const float iscale = 15.f / max_scale;
		for (int j = 0; j < 16; j++)
			sc[j] = (unsigned char)ck_nearest_int(iscale * scales[j]);
	}
	ck_put_half(dd, max_scale > 0 ? max_scale / 15.f : 0.f);
	if (max_min > 0) {
		const float iscale = 15.f / max_min;
		for (int j = 0; j < 16; j++)
			sc[j] |= (unsigned char)(ck_nearest_int(iscale * mins[j]) << 4);
	}
	ck_put_half(dd + 2, max_min > 0 ? max_min / 15.f : 0.f);
	ck_q2_k_finish(x, L, y);
}

void ck_q2_k_finish(const float *x, uint8_t *L, unsigned char *y)
{
	const unsigned char *sc = y, *dd = y + 80;
	for (int j = 0; j < 16; j++) {
		const float d = ck_half_at(dd) * (float)(sc[j] & 0xF);
		if (d == 0.0f)
			continue;
		const float dm = ck_half_at(dd + 2) * (float)(sc[j] >> 4);
		for (int i = 0; i < 16; i++)
			L[16 * j + i] =
			    (uint8_t)ck_clampi(ck_nearest_int((x[16 * j + i] + dm) / d), 0, 3);
	}
	pack2(L, y + 16);
}

/* ggml's make_q3_quants with do_rmse: signed levels -nmax..nmax-1 (stored
 * + nmax) of 16 values, then up to five passes moving one level at a time
 * while the weighted fit improves. */
static float q3(int nmax, const float *x, int8_t *L)
{
	enum { N = 16 };
	float max = 0, amax = 0;
	for (int i = 0; i < N; i++) {
		float ax = fabsf(x[i]);
		if (ax > amax) {
			amax = ax;
			max = x[i];
		}
	}
	if (amax < CK_GROUP_MAX_EPS) {
		memset(L, 0, N);
		return 0.f;
	}
	const float iscale = (float)-nmax / max;
	float sumlx = 0, suml2 = 0;
	for (int i = 0; i < N; i++) {
		int l = ck_clampi(ck_nearest_int(iscale * x[i]), -nmax, nmax - 1);
		L[i] = (int8_t)l;
		float w = x[i] * x[i];
		sumlx += w * x[i] * (float)l;
		suml2 += w * (float)l * (float)l;
	}
	for (int itry = 0; itry < 5; itry++) {
		int changed = 0;
		for (int i = 0; i < N; i++) {
			float w = x[i] * x[i];
			float slx = sumlx - w * x[i] * (float)L[i];
			if (!(slx > 0))
				continue;
			float sl2 = suml2 - w * (float)L[i] * (float)L[i];
			int nl = ck_clampi(ck_nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
			if (nl == L[i])
				continue;
			slx += w * x[i] * (float)nl;
			sl2 += w * (float)nl * (float)nl;
			if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
				L[i] = (int8_t)nl;
				sumlx = slx;
				suml2 = sl2;
				changed++;
			}
		}
		if (!changed)
			break;
	}
	for (int i = 0; i < N; i++)
		L[i] = (int8_t)(L[i] + nmax);
	return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* block_q3_K: hmask[32] (the third bits), qs[64], scales[12] (16 6-bit
 * signed scales), d. */
void ck_quant_q3_k(const float *x, unsigned char *y)
{
	int8_t L[QK_K];
	float scales[16], max_scale = 0, amax = 0;
	for (int j = 0; j < 16; j++) {
		scales[j] = q3(4, x + 16 * j, L + 16 * j);
		if (fabsf(scales[j]) > amax) {
			amax = fabsf(scales[j]);
			max_scale = scales[j];
		}
	}
	unsigned char *sc = y + 96, *dd = y + 108;
	memset(sc, 0, 12);
	float iscale = 0;
	if (max_scale != 0.0f) {
		iscale = -32.f / max_scale;
		for (int j = 0; j < 16; j++) {
			int l = ck_clampi((int8_t)ck_nearest_int(iscale * scales[j]), -32, 31) + 32;
			if (j < 8)
				sc[j] = (unsigned char)(l & 0xF);
			else
				sc[j - 8] |= (unsigned char)((l & 0xF) << 4);
			sc[j % 4 + 8] |= (unsigned char)((l >> 4) << (2 * (j / 4)));
		}
	}
	ck_put_half(dd, max_scale != 0.0f ? 1 / iscale : 0.f);
	ck_q3_k_finish(x, L, y);
}

void ck_q3_k_finish(const float *x, int8_t *L, unsigned char *y)
{
	const unsigned char *sc = y + 96, *dd = y + 108;
	unsigned char *hm = y;
	for (int j = 0; j < 16; j++) {
		int s = j < 8 ? sc[j] & 0xF : sc[j - 8] >> 4;
		s = (s | (((sc[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32;
		const float d = ck_half_at(dd) * (float)s;
		if (d == 0.0f)
			continue;
		for (int i = 0; i < 16; i++)
			L[16 * j + i] =
			    (int8_t)(ck_clampi(ck_nearest_int(x[16 * j + i] / d), -4, 3) + 4);
	}
	memset(hm, 0, 32);
	uint8_t u[QK_K];
	for (int j = 0, m = 0, bit = 1; j < QK_K; j++) {
		u[j] = (uint8_t)L[j];
		if (u[j] > 3) {
			hm[m] |= (unsigned char)bit;
			u[j] -= 4;
		}
		if (++m == QK_K / 8) {
			m = 0;
			bit <<= 1;
		}
	}
	pack2(u, y + 32);
}
