/* ggml's IQ4_NL and IQ4_XS quantizers (quantize_iq4_nl, quantize_iq4_xs:
 * quantize_row_iq4_nl_impl with 7 trials a side), with or without an
 * importance matrix: each 32 elements as indices into a fixed non-linear
 * table of 16 levels times a scale; IQ4_XS groups eight such blocks in a
 * 256-element super-block with 6-bit signed sub-scales of one F16 factor.
 * The same float operations in the same order as ggml's, so the same bytes
 * (tests/cli/gguf_kquant.py and gguf_imatrix.py compare whole files with
 * llama.cpp's own quantizer). The scale search, 16 trial scales of 32
 * elements, runs eight blocks side by side in vector lanes (ggml_lanes.h):
 * IQ4_XS's eight sub-blocks, or eight consecutive IQ4_NL blocks. */
#include <string.h>

#include "avx2.h"
#include "ggml_int.h"
#include "ggml_kquant.h"
#include "ggml_lanes.h"

/* kvalues_iq4nl: the decoder's table (ckpt/ggml_types.h has its own copy
 * for reading sources) */
static const int8_t KV[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
			      1,    13,	  25,  38,  53,	 69,  89,  113};
/* The midpoints of neighbouring levels. ggml's best_index_int8 (a binary
 * search, then x - KV[l] < KV[l + 1] - x ? l : l + 1) gives the number of
 * midpoints x is not below: ties go up, NaN gets 15. Near a midpoint both
 * differences are exact in float, so the search's comparison is x >= MID;
 * checked for every one of the 2^32 floats when this was written. */
static const float MID[15] = {-115.5f, -93.5f, -74.f, -57.f, -42.f, -28.5f, -16.f, -4.5f,
			      7.f,     19.f,   31.5f, 45.5f, 61.f,  79.f,   101.f};

/* best_index_int8 in each lane */
LANE_FN v8i index_lanes(v8f x)
{
	v8i l = (v8i){0} + 15;
	for (int k = 0; k < 15; k++)
		l += x < MID[k]; /* -1 where below */
	return l;
}

/* KV[best_index_int8(x)] in each lane: KV[0] and the steps up to the level
 * (small integers: the sum is exact) */
LANE_FN v8f value_lanes(v8f x)
{
	const v8f zero = {0};
	v8f q = zero + (float)KV[0];
	for (int k = 0; k < 15; k++)
		q += (v8f)((v8i)(zero + (float)(KV[k + 1] - KV[k])) & ~(x < MID[k]));
	return q;
}

/* Eight blocks of 32 side by side, lane b block b (xt[i]: element i of
 * each, wt[i] its weight): the scale that fits each best, over the first
 * guess -max / KV[0] and 15 trial scales around it; 0 where the block's
 * largest magnitude is under ggml's epsilon. */
LANE_FN v8f fit_lanes(const v8f *xt, const v8f *wt)
{
	const v8f zero = {0};
	v8f max;
	const v8i small = ck_amax_lanes(32, xt, &max) < CK_GROUP_MAX_EPS;
	v8f d = -max / (float)KV[0], id = 1 / d, sumqx = zero, sumq2 = zero;
	for (int i = 0; i < 32; i++) {
		const v8f q = value_lanes(id * xt[i]);
		sumqx += wt[i] * q * xt[i];
		sumq2 += wt[i] * q * q;
	}
	/* 0, not NaN, where no weight counts (columns the importance matrix
	 * never saw active: the scale stays 0 through the trials) */
	d = sel(sumq2 > zero, sumqx / sumq2, zero);
	v8f best = d * sumqx;
	for (int itry = -7; itry <= 7; itry++) {
		id = (float)(itry + KV[0]) / max;
		sumqx = sumq2 = zero;
		for (int i = 0; i < 32; i++) {
			const v8f q = value_lanes(id * xt[i]);
			sumqx += wt[i] * q * xt[i];
			sumq2 += wt[i] * q * q;
		}
		const v8i take = (sumq2 > zero) & (sumqx * sumqx > best * sumq2);
		const v8f dn = sumqx / sumq2;
		d = sel(take, dn, d);
		best = sel(take, dn * sumqx, best);
	}
	return sel(small, zero, d);
}

/* The first nb (1..8) blocks of 32 at x (lanes past nb: zeros), their
 * weights qw[j] * sqrt(sigma2[b] + x^2) with an importance matrix, x^2
 * without (ggml's): the fitted scales, into s. */
LANE_FN void fit_body(const float *x, const float *qw, const float *sigma2, int nb, float *s)
{
	v8f xt[32], wt[32];
	for (int i = 0; i < 32; i++)
		for (int b = 0; b < 8; b++) {
			const float v = b < nb ? x[32 * b + i] : 0.f;
			xt[i][b] = v;
			wt[i][b] = qw && b < nb ? qw[32 * b + i] * sqrtf(sigma2[b] + v * v) : v * v;
		}
	const v8f d = fit_lanes(xt, wt);
	memcpy(s, &d, sizeof d);
}

/* The 32 indices of id * x[j], eight at a time. */
LANE_FN void levels_body(const float *x, float id, uint8_t *L)
{
	for (int i = 0; i < 32; i += 8) {
		v8f v;
		memcpy(&v, x + i, sizeof v);
		const v8i l = index_lanes(id * v);
		for (int j = 0; j < 8; j++)
			L[i + j] = (uint8_t)l[j];
	}
}

LANES_DISPATCH(fit, (const float *x, const float *qw, const float *sigma2, int nb, float *s),
	       (x, qw, sigma2, nb, s))

LANES_DISPATCH(levels, (const float *x, float id, uint8_t *L), (x, id, L))

/* ggml's sigma2: the mean square of the n elements it weighs by, times 2,
 * summed in order */
static float sigma2_of(const float *x, int n)
{
	float s = 0;
	for (int j = 0; j < n; j++)
		s += x[j] * x[j];
	return s * (2.f / (float)n);
}

/* 32 indices as 16 bytes: element j low nibble, j + 16 high */
static void pack(const uint8_t *L, unsigned char *q)
{
	for (int j = 0; j < 16; j++)
		q[j] = (unsigned char)(L[j] | (L[16 + j] << 4));
}

void ck_quant_iq4_nl(const float *x, const float *qw, int nb, unsigned char *y)
{
	float sigma2[8] = {0};
	for (int b = 0; b < nb; b++)
		sigma2[b] = sigma2_of(x + 32 * b, 32);
	float s[8];
	fit(x, qw, sigma2, nb, s);
	for (int b = 0; b < nb; b++) {
		uint8_t L[32];
		const float d = s[b], id = d != 0.0f ? 1 / d : 0;
		ck_put_half(y + 18 * b, d);
		levels(x + 32 * b, id, L);
		pack(L, y + 18 * b + 2);
	}
}

void ck_quant_iq4_xs(const float *x, const float *qw, unsigned char *y)
{
	float sigma2[8];
	sigma2[0] = sigma2_of(x, 256);
	for (int b = 1; b < 8; b++)
		sigma2[b] = sigma2[0];
	float s[8], max_scale = 0, amax_scale = 0;
	fit(x, qw, sigma2, 8, s);
	for (int b = 0; b < 8; b++)
		if (fabsf(s[b]) > amax_scale) {
			amax_scale = fabsf(s[b]);
			max_scale = s[b];
		}
	/* the sub-scales as 6-bit levels of d, each block's indices again */
	const float d = -max_scale / 32, id = d != 0.0f ? 1 / d : 0.f;
	uint16_t sh = 0;
	ck_put_half(y, d);
	memset(y + 4, 0, 4);
	for (int b = 0; b < 8; b++) {
		int l = ck_clampi(ck_nearest_int(id * s[b]), -32, 31);
		const float dl = d * (float)l, idl = dl != 0.0f ? 1 / dl : 0.f;
		uint8_t L[32];
		levels(x + 32 * b, idl, L);
		pack(L, y + 8 + 16 * b);
		l += 32;
		y[4 + b / 2] |= (unsigned char)((l & 0xF) << (4 * (b % 2)));
		sh |= (uint16_t)((l >> 4) << (2 * b));
	}
	y[2] = (unsigned char)(sh & 0xFF);
	y[3] = (unsigned char)(sh >> 8);
}
