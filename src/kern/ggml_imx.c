/* ggml's quantizers given an importance matrix (llama-quantize --imatrix):
 * quantize_row_<type>_impl for Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q4_0, Q4_1,
 * Q5_0 and Q5_1, the same float operations in the same order as ggml's, so the
 * same bytes (tests/cli/gguf_imatrix.py compares whole files with
 * llama.cpp's own quantizer given the same matrix). Each element's weight
 * is its column's imatrix value (the mean square of the activations it
 * multiplies, over the calibration text) times sqrt(sigma2 + x^2); the
 * scale searches minimise the weighted squared error, and the K-quants'
 * sub-block scales are quantized by a weighted search too (make_qp_quants)
 * instead of against the largest. The K-quants' sub-block fits run eight
 * sub-blocks side by side in vector lanes (ggml_lanes.h, AVX2 where the
 * CPU has it), each lane ggml's scalar steps; the rest is scalar. */
#include <string.h>

#include "avx2.h"
#include "ggml_int.h"
#include "ggml_kquant.h"
#include "ggml_lanes.h"

#define QK_K 256

/* make_qx_quants, rmse_type 1 with weights w: signed levels
 * -nmax..nmax-1 (stored + nmax) and the scale that fits them best over the
 * first guess and 18 trial scales around it. */
static float qx_w(int n, int nmax, const float *x, int8_t *L, const float *w)
{
	float max = 0, amax = 0;
	for (int i = 0; i < n; i++)
		if (fabsf(x[i]) > amax) {
			amax = fabsf(x[i]);
			max = x[i];
		}
	if (amax < CK_GROUP_MAX_EPS) {
		memset(L, 0, (size_t)n);
		return 0.f;
	}
	float iscale = (float)-nmax / max, sumlx = 0, suml2 = 0;
	for (int i = 0; i < n; i++) {
		const int l = ck_clampi(ck_nearest_int(iscale * x[i]), -nmax, nmax - 1);
		L[i] = (int8_t)(l + nmax);
		sumlx += w[i] * x[i] * (float)l;
		suml2 += w[i] * (float)l * (float)l;
	}
	float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f, best = scale * sumlx;
	for (int is = -9; is <= 9; is++) {
		if (is == 0)
			continue;
		iscale = -((float)nmax + 0.1f * (float)is) / max;
		sumlx = suml2 = 0;
		for (int i = 0; i < n; i++) {
			const int l = ck_clampi(ck_nearest_int(iscale * x[i]), -nmax, nmax - 1);
			sumlx += w[i] * x[i] * (float)l;
			suml2 += w[i] * (float)l * (float)l;
		}
		if (suml2 > 0 && sumlx * sumlx > best * suml2) {
			for (int i = 0; i < n; i++)
				L[i] = (int8_t)(nmax + ck_clampi(ck_nearest_int(iscale * x[i]),
								 -nmax, nmax - 1));
			scale = sumlx / suml2;
			best = scale * sumlx;
		}
	}
	return scale;
}

/* make_qp_quants: the K-quants' n sub-block scales (or mins) x >= 0 as
 * levels 0..nmax of one factor, weighted by w: the best of 9 trial factors,
 * then up to five passes moving one level at a time while the fit
 * improves. The levels are bytes, as ggml's (a negative level wraps). */
static float qp(int n, int nmax, const float *x, uint8_t *L, const float *w)
{
	float max = 0;
	for (int i = 0; i < n; i++)
		max = max > x[i] ? max : x[i];
	if (max < CK_GROUP_MAX_EPS) {
		memset(L, 0, (size_t)n);
		return 0.f;
	}
	float iscale = (float)nmax / max, best = 0;
	for (int i = 0; i < n; i++)
		L[i] = (uint8_t)ck_nearest_int(iscale * x[i]);
	const float scale = 1 / iscale;
	for (int i = 0; i < n; i++) {
		const float diff = x[i] - scale * (float)L[i];
		best += w[i] * diff * diff;
	}
	for (int is = -4; is <= 4; is++) {
		if (is == 0)
			continue;
		const float isc = (0.1f * (float)is + (float)nmax) / max, sc = 1 / isc;
		float mse = 0;
		for (int i = 0; i < n; i++) {
			int l = ck_nearest_int(isc * x[i]);
			l = l < nmax ? l : nmax;
			const float diff = x[i] - sc * (float)l;
			mse += w[i] * diff * diff;
		}
		if (mse < best) {
			best = mse;
			iscale = isc;
		}
	}
	float sumlx = 0, suml2 = 0;
	for (int i = 0; i < n; i++) {
		int l = ck_nearest_int(iscale * x[i]);
		l = l < nmax ? l : nmax;
		L[i] = (uint8_t)l;
		sumlx += w[i] * x[i] * (float)l;
		suml2 += w[i] * (float)l * (float)l;
	}
	for (int itry = 0; itry < 5; itry++) {
		int changed = 0;
		for (int i = 0; i < n; i++) {
			float slx = sumlx - w[i] * x[i] * (float)L[i];
			float sl2 = suml2 - w[i] * (float)L[i] * (float)L[i];
			if (!(slx > 0 && sl2 > 0))
				continue;
			int nl = ck_nearest_int(x[i] * sl2 / slx);
			nl = nl < nmax ? nl : nmax;
			if (nl == L[i])
				continue;
			slx += w[i] * x[i] * (float)nl;
			sl2 += w[i] * (float)nl * (float)nl;
			if (slx * slx * suml2 > sumlx * sumlx * sl2) {
				L[i] = (uint8_t)nl;
				sumlx = slx;
				suml2 = sl2;
				changed++;
			}
		}
		if (!changed)
			break;
	}
	return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* w[l] = qw[l] * sqrt(sigma2 + x[l]^2) for n elements; their sum. */
static float weigh(const float *x, const float *qw, float sigma2, int n, float *w)
{
	float sum = 0;
	for (int l = 0; l < n; l++) {
		w[l] = qw[l] * sqrtf(sigma2 + x[l] * x[l]);
		sum += w[l];
	}
	return sum;
}

static float sum_squares(const float *x, int n)
{
	float s = 0;
	for (int i = 0; i < n; i++)
		s += x[i] * x[i];
	return s;
}

/* The K-quants' sub-block fits, eight sub-blocks of n side by side in
 * vector lanes (ggml_lanes.h), each lane the scalar steps above: the
 * weights of sub-blocks j0.. j0+7 (from sigma2), their sums into sw, and
 * with min (qkx3's steps: make_qkx2_quants' loop with -0.9, 0.05, 36) the
 * scales, mins and levels 0..nmax, or without (qx, signed levels) the
 * scales and levels; raw: the imatrix values themselves as the weights
 * (Q6_K). */
LANE_FN void fit8_body(const float *x, const float *qw, float sigma2, int n, int nmax, int min,
		       int raw, float *sw, float *scales, float *mins, uint8_t *L)
{
	v8f xt[32], wt[32], mv;
	v8i lt[32];
	for (int j = 0; j < 8; j++) {
		float w[32];
		if (raw)
			memcpy(w, qw + n * j, (size_t)n * sizeof *w);
		else
			sw[j] = weigh(x + n * j, qw + n * j, sigma2, n, w);
		for (int i = 0; i < n; i++) {
			xt[i][j] = x[n * j + i];
			wt[i][j] = w[i];
		}
	}
	const v8f s = min ? ck_qkx2_lanes(n, 0, nmax, xt, wt, lt, &mv, -0.9f, 0.05f, 36)
			  : ck_qx_lanes(n, nmax, xt, wt, lt);
	for (int j = 0; j < 8; j++) {
		scales[j] = s[j];
		if (min)
			mins[j] = mv[j];
		for (int i = 0; i < n; i++)
			L[n * j + i] = (uint8_t)lt[i][j];
	}
}

LANES_DISPATCH(fit8,
	       (const float *x, const float *qw, float sigma2, int n, int nmax, int min, int raw,
		float *sw, float *scales, float *mins, uint8_t *L),
	       (x, qw, sigma2, n, nmax, min, raw, sw, scales, mins, L))

/* Q4_K / Q5_K: eight sub-blocks of 32 (weights from the super-block's
 * 2 * mean square), scales and mins as qp levels; Q5_K caps them at 63. */
static void k45(const float *x, const float *qw, int nmax, unsigned char *y)
{
	uint8_t L[QK_K], Ls[8], Lm[8];
	float sw[8], mins[8], scales[8];
	const float sigma2 = 2 * sum_squares(x, QK_K) / QK_K;
	fit8(x, qw, sigma2, 32, nmax, 1, 0, sw, scales, mins, L);
	const float d = qp(8, 63, scales, Ls, sw), dmin = qp(8, 63, mins, Lm, sw);
	for (int j = 0; j < 8 && nmax == 31; j++) {
		Ls[j] = Ls[j] < 63 ? Ls[j] : 63;
		Lm[j] = Lm[j] < 63 ? Lm[j] : 63;
	}
	ck_k45_finish(x, nmax, Ls, Lm, d, dmin, L, y);
}

/* Q6_K: each sub-block of 16 fitted with the raw imatrix values as its
 * weights (ggml leaves sigma2 out here). */
static void q6_k(const float *x, const float *qw, unsigned char *y)
{
	int8_t L[QK_K];
	float scales[16];
	for (int g = 0; g < 2; g++)
		fit8(x + 128 * g, qw + 128 * g, 0, 16, 32, 0, 1, NULL, scales + 8 * g, NULL,
		     (uint8_t *)L + 128 * g);
	ck_q6_k_finish(x, scales, L, y);
}

/* Q2_K: sixteen sub-blocks of 16 (weights from the super-block's mean
 * square), 4-bit scales and mins as qp levels. */
static void q2_k(const float *x, const float *qw, unsigned char *y)
{
	uint8_t L[QK_K], Ls[16], Lm[16];
	float sw[16], mins[16], scales[16];
	const float sigma2 = sum_squares(x, QK_K) / QK_K;
	for (int g = 0; g < 2; g++)
		fit8(x + 128 * g, qw + 128 * g, sigma2, 16, 3, 1, 0, sw + 8 * g, scales + 8 * g,
		     mins + 8 * g, L + 128 * g);
	const float dm = qp(16, 15, scales, Ls, sw), mm = qp(16, 15, mins, Lm, sw);
	ck_put_half(y + 80, dm);
	ck_put_half(y + 82, mm);
	for (int j = 0; j < 16; j++)
		y[j] = (unsigned char)(Ls[j] | (Lm[j] << 4));
	ck_q2_k_finish(x, L, y);
}

/* Q3_K: sixteen sub-blocks of 16 fitted with weights, their scales as
 * signed 6-bit levels of one factor fitted with the sub-blocks' weight
 * sums. */
static void q3_k(const float *x, const float *qw, unsigned char *y)
{
	int8_t L[QK_K], Ls[16];
	float sw[16], scales[16];
	const float sigma2 = 2 * sum_squares(x, QK_K) / QK_K;
	for (int g = 0; g < 2; g++)
		fit8(x + 128 * g, qw + 128 * g, sigma2, 16, 4, 0, 0, sw + 8 * g, scales + 8 * g,
		     NULL, (uint8_t *)L + 128 * g);
	unsigned char *sc = y + 96;
	memset(sc, 0, 12);
	const float d = qx_w(16, 32, scales, Ls, sw);
	for (int j = 0; j < 16; j++) {
		int l = Ls[j];
		if (j < 8)
			sc[j] = (unsigned char)(l & 0xF);
		else
			sc[j - 8] |= (unsigned char)((l & 0xF) << 4);
		l >>= 4;
		sc[j % 4 + 8] |= (unsigned char)(l << (2 * (j / 4)));
	}
	ck_put_half(y + 108, d);
	ck_q3_k_finish(x, L, y);
}

/* Q4_0, Q5_0 (signed levels, qx) and Q4_1, Q5_1 (a min, qkx3): a run of
 * n (1..8) blocks of 32 of one row fitted side by side in lanes, weights
 * from the whole row's mean square (the lanes past n fit zeros of weight
 * 0, and are dropped). */
static void q32_run(uint32_t type, const float *x, const float *qw, float sigma2, int n, size_t qb,
		    unsigned char *y)
{
	float xs[QK_K], ws[QK_K], sw[8], scales[8], mins[8];
	uint8_t L[QK_K];
	if (n < 8) {
		memset(xs, 0, sizeof xs);
		memset(ws, 0, sizeof ws);
		memcpy(xs, x, (size_t)n * 32 * sizeof *xs);
		memcpy(ws, qw, (size_t)n * 32 * sizeof *ws);
		x = xs, qw = ws;
	}
	const int min = type == CK_GGML_Q4_1 || type == CK_GGML_Q5_1;
	const int nmax = type == CK_GGML_Q4_0	? 8
			 : type == CK_GGML_Q5_0 ? 16
			 : type == CK_GGML_Q4_1 ? 15
						: 31;
	fit8(x, qw, sigma2, 32, nmax, min, 0, sw, scales, mins, L);
	for (int b = 0; b < n; b++) {
		unsigned char *yb = y + (size_t)b * qb, *q = yb + (min ? 4 : 2);
		const uint8_t *c = L + 32 * b;
		ck_put_half(yb, scales[b]);
		if (min)
			ck_put_half(yb + 2, -mins[b]);
		if (type == CK_GGML_Q4_0 || type == CK_GGML_Q4_1)
			for (int j = 0; j < 16; j++)
				q[j] = (unsigned char)(c[j] | (c[j + 16] << 4));
		else
			ck_pack5(c, q, q + 4);
	}
}

/* One block of 32 or 256 elements. */
static int block_imx(uint32_t type, const float *x, const float *qw, unsigned char *y)
{
	switch (type) {
	case CK_GGML_Q2_K: q2_k(x, qw, y); return 0;
	case CK_GGML_Q3_K: q3_k(x, qw, y); return 0;
	case CK_GGML_Q4_K: k45(x, qw, 15, y); return 0;
	case CK_GGML_Q5_K: k45(x, qw, 31, y); return 0;
	case CK_GGML_Q6_K: q6_k(x, qw, y); return 0;
	case CK_GGML_IQ4_XS: ck_quant_iq4_xs(x, qw, y); return 0;
	default: return -1;
	}
}

int ck_kquant_blocks_imx(uint32_t type, const float *x, const float *qw, float row_sigma2, int n,
			 unsigned char *y)
{
	size_t qk, qb;
	if (!ck_ggml_block(type, &qk, &qb) || n < 1 || (size_t)n * qk > 256)
		return -1;
	if (type == CK_GGML_IQ4_NL) { /* side by side in lanes */
		ck_quant_iq4_nl(x, qw, n, y);
		return 0;
	}
	if (type == CK_GGML_Q4_0 || type == CK_GGML_Q4_1 || type == CK_GGML_Q5_0 ||
	    type == CK_GGML_Q5_1) { /* so are these */
		q32_run(type, x, qw, row_sigma2, n, qb, y);
		return 0;
	}
	for (int i = 0; i < n; i++)
		if (block_imx(type, x + i * qk, qw + i * qk, y + i * qb) < 0)
			return -1;
	return 0;
}
