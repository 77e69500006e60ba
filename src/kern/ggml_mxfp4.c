/* ggml's MXFP4 quantizer (quantize_row_mxfp4_ref; llama-quantize's
 * MXFP4_MOE mix gives the experts this type): one shared E8M0 exponent per
 * 32 elements, floor(log2(amax)) - 2 + 127, so the largest magnitude lands
 * in E2M1's top binade (4 or 6); each element the nearest of the 16
 * levels, the first on a tie, ggml's steps in ggml's order. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ggml_kquant.h"

/* E2M1's values doubled (ggml's kvalues_mxfp4), scaled by half of 2^(e -
 * 127) */
static const int8_t KV[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

static int nearest(float x, float d)
{
	int best = 0;
	float best_err = fabsf((float)KV[0] * d - x);
	for (int i = 1; i < 16; i++) {
		float err = fabsf((float)KV[i] * d - x);
		if (err < best_err) {
			best = i;
			best_err = err;
		}
	}
	return best;
}

/* ggml's (uint8_t) of the exponent's float, as x86-64 converts it: through
 * a 32-bit signed integer (cvttss2si), whose low byte wraps a negative
 * exponent (amax below 2^-125) and is 0 for a value past int32 (infinite
 * amax); C leaves the direct conversion undefined there. */
static uint8_t e8m0_of(float amax)
{
	if (!(amax > 0.0f))
		return 0;
	float f = floorf(log2f(amax)) - 2 + 127;
	if (!(f >= -2147483648.0f && f < 2147483648.0f))
		return 0;
	return (uint8_t)(uint32_t)(int32_t)f;
}

void ck_quant_mxfp4(const float *x, unsigned char *y)
{
	float amax = 0.0f;
	for (int j = 0; j < 32; j++)
		if (amax < fabsf(x[j]))
			amax = fabsf(x[j]);
	const uint8_t e = e8m0_of(amax);
	/* ggml_e8m0_to_fp32_half: 2^(e - 128), its two subnormals below e = 2 */
	uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
	float d;
	memcpy(&d, &bits, sizeof d);
	y[0] = e;
	for (int j = 0; j < 16; j++)
		y[1 + j] = (unsigned char)(nearest(x[j], d) | nearest(x[16 + j], d) << 4);
}
