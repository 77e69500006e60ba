/* ggml's IQ4_NL and IQ4_XS quantizers (quantize_iq4_nl, quantize_iq4_xs:
 * quantize_row_iq4_nl_impl with 7 trials a side), with or without an
 * importance matrix: each 32 elements as indices into a fixed non-linear
 * table of 16 levels times a scale; IQ4_XS groups eight such blocks in a
 * 256-element super-block with 6-bit signed sub-scales of one F16 factor.
 * The same float operations in the same order as ggml's, so the same bytes
 * (tests/cli/gguf_kquant.py and gguf_imatrix.py compare whole files with
 * llama.cpp's own quantizer). Scalar: 0.72x llama-quantize's time for an
 * IQ4_XS file on this project's VM (tools/bench.py --only kquant); vector
 * lanes for the fit are the next step. */
#include <string.h>

#include "ggml_int.h"
#include "ggml_kquant.h"

/* kvalues_iq4nl: the decoder's table (ckpt/ggml_types.h has its own copy
 * for reading sources) */
static const int8_t KV[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
			      1,    13,	  25,  38,  53,	 69,  89,  113};

/* The nearest table index to x (ties and NaN: the upper one), as ggml's
 * best_index_int8 searches it. */
static int best_index(float x)
{
	if (x <= KV[0])
		return 0;
	if (x >= KV[15])
		return 15;
	int ml = 0, mu = 15;
	while (mu - ml > 1) {
		int mav = (ml + mu) / 2;
		if (x < KV[mav])
			mu = mav;
		else
			ml = mav;
	}
	return x - KV[mu - 1] < KV[mu] - x ? mu - 1 : mu;
}

/* One block of 32 (sigma2 from its super-block): its indices into L and
 * the scale that fits best over the first guess and 15 trial scales;
 * weights qw * sqrt(sigma2 + x^2), or x^2 without an importance matrix. */
static float fit32(const float *xb, const float *qw, float sigma2, uint8_t *L)
{
	float w[32], amax = 0, max = 0;
	for (int j = 0; j < 32; j++) {
		w[j] = qw ? qw[j] * sqrtf(sigma2 + xb[j] * xb[j]) : xb[j] * xb[j];
		if (fabsf(xb[j]) > amax) {
			amax = fabsf(xb[j]);
			max = xb[j];
		}
	}
	if (amax < CK_GROUP_MAX_EPS)
		return 0; /* (ggml leaves L as it was: every caller recomputes it) */
	float d = -max / (float)KV[0], id = 1 / d, sumqx = 0, sumq2 = 0;
	for (int j = 0; j < 32; j++) {
		const int l = best_index(id * xb[j]);
		L[j] = (uint8_t)l;
		const float q = KV[l];
		sumqx += w[j] * q * xb[j];
		sumq2 += w[j] * q * q;
	}
	d = sumqx / sumq2;
	float best = d * sumqx;
	for (int itry = -7; itry <= 7; itry++) {
		id = (float)(itry + KV[0]) / max;
		sumqx = sumq2 = 0;
		for (int j = 0; j < 32; j++) {
			const float q = KV[best_index(id * xb[j])];
			sumqx += w[j] * q * xb[j];
			sumq2 += w[j] * q * q;
		}
		if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
			d = sumqx / sumq2;
			best = d * sumqx;
		}
	}
	return d;
}

/* xs 0: block_iq4_nl (d, qs[16]) of 32 elements; xs 1: block_iq4_xs (d,
 * scales_h, scales_l[4], qs[128]) of 256. qw: the importance weights of
 * the block's columns, or NULL. */
void ck_quant_iq4(int xs, const float *x, const float *qw, unsigned char *y)
{
	const int n = xs ? 256 : 32, nb = n / 32;
	float sigma2 = 0, scales[8], max_scale = 0, amax_scale = 0;
	uint8_t L[256];
	for (int j = 0; j < n; j++)
		sigma2 += x[j] * x[j];
	sigma2 *= 2.f / (float)n;
	for (int ib = 0; ib < nb; ib++) {
		scales[ib] = fit32(x + 32 * ib, qw ? qw + 32 * ib : NULL, sigma2, L + 32 * ib);
		if (fabsf(scales[ib]) > amax_scale) {
			amax_scale = fabsf(scales[ib]);
			max_scale = scales[ib];
		}
	}
	unsigned char *q4 = y + (xs ? 8 : 2);
	if (xs) { /* the sub-scales as 6-bit levels of d, each block's indices again */
		const float d = -max_scale / 32, id = d != 0.0f ? 1 / d : 0.f;
		uint16_t sh = 0;
		ck_put_half(y, d);
		memset(y + 4, 0, 4);
		for (int ib = 0; ib < 8; ib++) {
			int l = ck_clampi(ck_nearest_int(id * scales[ib]), -32, 31);
			const float dl = d * (float)l, idl = dl != 0.0f ? 1 / dl : 0.f;
			for (int j = 0; j < 32; j++)
				L[32 * ib + j] = (uint8_t)best_index(idl * x[32 * ib + j]);
			l += 32;
			y[4 + ib / 2] |= (unsigned char)((l & 0xF) << (4 * (ib % 2)));
			sh |= (uint16_t)((l >> 4) << (2 * ib));
		}
		y[2] = (unsigned char)(sh & 0xFF);
		y[3] = (unsigned char)(sh >> 8);
	} else {
		ck_put_half(y, scales[0]);
		const float id = scales[0] != 0.0f ? 1 / scales[0] : 0;
		for (int j = 0; j < 32; j++)
			L[j] = (uint8_t)best_index(id * x[j]);
	}
	for (int i = 0; i < n / 32; i++)
		for (int j = 0; j < 16; j++)
			q4[16 * i + j] = (unsigned char)(L[32 * i + j] | (L[32 * i + 16 + j] << 4));
}
