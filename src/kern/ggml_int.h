/* Helpers the ggml block decoders (ggml.c) and quantizers (ggml.c,
 * ggml_kquant.c) share: F16 fields, the K-quants' packed 6-bit scales, and
 * the truncating conversion ggml's quantizers make. */
#ifndef CK_GGML_INT_H
#define CK_GGML_INT_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "fpconv.h"

static inline float ck_half_at(const unsigned char *p)
{
	uint16_t h;
	memcpy(&h, p, 2);
	return ck_f16_to_f32(h);
}

/* d rounded to F16 (nearest even), stored little-endian at p. */
static inline void ck_put_half(unsigned char *p, float d)
{
	uint16_t h = ck_f32_to_f16(d, 0);
	memcpy(p, &h, 2);
}

/* ggml's GROUP_MAX_EPS: a group whose largest magnitude is below it
 * quantizes to zeros. */
#define CK_GROUP_MAX_EPS 1e-15f

/* The 6-bit scale and min of sub-block j of a Q4_K/Q5_K super-block. */
static inline void ck_scale_min_k4(int j, const unsigned char *q, unsigned *d, unsigned *m)
{
	if (j < 4) {
		*d = q[j] & 63;
		*m = q[j + 4] & 63;
	} else {
		*d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
		*m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
	}
}

/* The value of the first largest magnitude among x[0..n) (+0 when all are
 * zeros), found as ggml's Q4_0 / Q5_0 quantizers find it. */
static inline float ck_first_absmax(const float *x, int n)
{
	float amax = 0.0f, max = 0.0f;
	for (int j = 0; j < n; j++)
		if (amax < fabsf(x[j])) {
			amax = fabsf(x[j]);
			max = x[j];
		}
	return max;
}

/* Round to nearest even by adding 1.5 * 2^23 and reading the mantissa
 * (ggml's nearest_int; exact for |v| < 2^22, and defined for any v). */
static inline int ck_nearest_int(float v)
{
	float t = v + 12582912.f;
	int32_t i;
	memcpy(&i, &t, sizeof i);
	return (i & 0x007fffff) - 0x00400000;
}

static inline int ck_clampi(int v, int lo, int hi)
{
	return v < lo ? lo : v > hi ? hi : v;
}

/* Eight lanes of floats or ints (GCC's and clang's vector extensions: SSE
 * pairs on x86-64, whatever the target has elsewhere). Each lane computes
 * what the scalar code computes, operation for operation: IEEE arithmetic
 * is the same in a lane as alone, and nothing is contracted (ISO C). */
/* (int8_t)(v) or (uint8_t)(v) truncating, as x86 converts: through a
 * 32-bit integer, whose out-of-range result (INT_MIN, low byte 0) NaN and
 * huge values take instead of undefined behaviour. The low byte. */
static inline int8_t ck_trunc_i8(float v)
{
	if (!(fabsf(v) < 2147483520.0f))
		return 0;
	return (int8_t)(int32_t)v;
}

#endif
