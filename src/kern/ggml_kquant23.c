/* ggml's reference quantizers for Q2_K and Q3_K, the base types of
 * llama-quantize's Q2_K and Q3_K_S / Q3_K_M / Q3_K_L mixes: quantize_row_
 * q2_K_ref and q3_K_ref without an importance matrix, the same float
 * operations in the same order as ggml's (tests/cli/gguf_kquant.py
 * compares whole files with llama.cpp's own quantizer). Sixteen
 * sub-blocks of 16 per 256-element super-block. The scale searches run
 * them in vector lanes, eight at a time (ggml_lanes.h; Q2_K's 5x its
 * scalar loop: 0.20 s for 8 Mi floats on one core; Q3_K's 1.5x, 0.21 ->
 * 0.14 s, its passes a chain of dependent steps). */
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

LANES_DISPATCH(q2_k_fit, (const float *x, uint8_t *L, float *scales, float *mins),
	       (x, L, scales, mins))

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

/* ggml's make_q3_quants with do_rmse for the 16 sub-blocks of 16, two
 * groups of 8 in lanes, lane j of group g sub-block 8 g + j (xt[g][i]:
 * element i of each): signed levels -4..3 (stored + 4; 0 for a block under
 * ggml's epsilon) and the scale, then up to five passes moving one level
 * at a time while the weighted fit (weights x^2) improves. A lane whose
 * pass changed nothing repeats the same steps to the same state while
 * another lane still changes, so the lanes stop together when none
 * changed. Each pass is a chain of dependent steps per lane (a step's sums
 * feed the next), so the two groups' steps alternate: two independent
 * chains keep the CPU busy where one waits on its last division. */
struct q3_sums {
	v8f lx, l2;
	v8i changed;
};

/* Element i's level moved where that improves the fit. */
LANE_FN void q3_move(v8f x, v8i *lt, struct q3_sums *s)
{
	const int nmax = 4;
	const v8f zero = {0}, w = x * x, l = tof(*lt);
	v8f slx = s->lx - w * x * l;
	const v8i pos = slx > zero;
	v8f sl2 = s->l2 - w * l * l;
	const v8i nl = levels8(x * sl2 / slx, -nmax, nmax - 1);
	const v8f nf = tof(nl);
	slx += w * x * nf;
	sl2 += w * nf * nf;
	const v8i take =
	    pos & (nl != *lt) & (sl2 > zero) & (slx * slx * s->l2 > s->lx * s->lx * sl2);
	*lt = seli(take, nl, *lt);
	s->lx = sel(take, slx, s->lx);
	s->l2 = sel(take, sl2, s->l2);
	s->changed |= take;
}

LANE_FN void q3_lanes(const v8f (*xt)[16], v8i (*lt)[16], v8f *scale)
{
	const int nmax = 4;
	const v8f zero = {0};
	struct q3_sums s[2];
	v8i small[2];
	for (int g = 0; g < 2; g++) {
		v8f max;
		small[g] = ck_amax_lanes(16, xt[g], &max) < CK_GROUP_MAX_EPS;
		const v8f iscale = (float)-nmax / max;
		s[g].lx = s[g].l2 = zero;
		for (int i = 0; i < 16; i++) {
			lt[g][i] = levels8(iscale * xt[g][i], -nmax, nmax - 1);
			const v8f w = xt[g][i] * xt[g][i], l = tof(lt[g][i]);
			s[g].lx += w * xt[g][i] * l;
			s[g].l2 += w * l * l;
		}
	}
	for (int itry = 0; itry < 5; itry++) {
		s[0].changed = s[1].changed = (v8i){0};
		for (int i = 0; i < 16; i++) {
			q3_move(xt[0][i], &lt[0][i], &s[0]);
			q3_move(xt[1][i], &lt[1][i], &s[1]);
		}
		const v8i c = s[0].changed | s[1].changed;
		int any = 0;
		for (int j = 0; j < 8; j++)
			any |= c[j];
		if (!any)
			break;
	}
	const v8i z = {0};
	for (int g = 0; g < 2; g++) {
		for (int i = 0; i < 16; i++)
			lt[g][i] = seli(small[g], z, lt[g][i] + nmax);
		scale[g] = sel(small[g] | ~(s[g].l2 > zero), zero, s[g].lx / s[g].l2);
	}
}

/* The 16 sub-blocks' levels and scales of a Q3_K super-block. */
LANE_FN void q3_k_fit_body(const float *x, int8_t *L, float *scales)
{
	v8f xt[2][16], sc[2];
	v8i lt[2][16];
	for (int g = 0; g < 2; g++)
		for (int i = 0; i < 16; i++)
			for (int j = 0; j < 8; j++)
				xt[g][i][j] = x[16 * (8 * g + j) + i];
	q3_lanes((const v8f(*)[16])xt, lt, sc);
	for (int g = 0; g < 2; g++)
		for (int j = 0; j < 8; j++) {
			scales[8 * g + j] = sc[g][j];
			for (int i = 0; i < 16; i++)
				L[16 * (8 * g + j) + i] = (int8_t)lt[g][i][j];
		}
}

/* Sixteen levels nearest_int(x / d) clamped to -4..3, stored + 4. */
LANE_FN void q3_levels_body(const float *x, float d, int8_t *L)
{
	const v8i four = (v8i){0} + 4;
	for (int i = 0; i < 16; i += 8) {
		v8f v;
		memcpy(&v, x + i, sizeof v);
		const v8i l = levels8(v / d, -4, 3) + four;
		for (int j = 0; j < 8; j++)
			L[i + j] = (int8_t)l[j];
	}
}

LANES_DISPATCH(q3_k_fit, (const float *x, int8_t *L, float *scales), (x, L, scales))

LANES_DISPATCH(q3_levels, (const float *x, float d, int8_t *L), (x, d, L))

/* block_q3_K: hmask[32] (the third bits), qs[64], scales[12] (16 6-bit
 * signed scales), d. */
void ck_quant_q3_k(const float *x, unsigned char *y)
{
	int8_t L[QK_K];
	float scales[16], max_scale = 0, amax = 0;
	q3_k_fit(x, L, scales);
	for (int j = 0; j < 16; j++) {
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
		if (d != 0.0f)
			q3_levels(x + 16 * j, d, L + 16 * j);
	}
	/* the third bit of element 32 b + m is bit b of hm[m]; the low two
	 * bits go to qs (no branch on the bit: it is data, 50:50) */
	uint8_t u[QK_K];
	for (int m = 0; m < QK_K / 8; m++) {
		unsigned h = 0;
		for (int b = 0; b < 8; b++) {
			const int j = QK_K / 8 * b + m, hi = L[j] > 3;
			h |= (unsigned)hi << b;
			u[j] = (uint8_t)(L[j] - 4 * hi);
		}
		hm[m] = (unsigned char)h;
	}
	pack2(u, y + 32);
}
