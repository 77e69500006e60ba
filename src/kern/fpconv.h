/* Element conversions among F32, F16, BF16, F8_E4M3 (e4m3fn) and F8_E5M2.
 * One source for every backend: the CPU kernels include it directly and the
 * CUDA kernels compile the same functions as __host__ __device__, so both
 * give identical bits. Semantics follow PyTorch's scalar `.to()` (c10):
 * - round to nearest, ties to even;
 * - F16/E5M2 overflow to infinity; E4M3FN has no infinity, so values at or
 *   above 480 (and inf) become NaN (0x7F with the sign);
 * - NaN: F16 0x7E00|sign, BF16 0x7FC0 (c10's scalar path), E4M3 0x7F|sign,
 *   E5M2 0x7F|sign;
 * - the saturating mode clamps finite overflow and infinities to the largest
 *   finite value instead (NaN stays NaN).
 * Every narrow format widens to F32 exactly, so X -> Y is X -> F32 -> Y. */
#ifndef CK_FPCONV_H
#define CK_FPCONV_H

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define CK_HD __host__ __device__ __forceinline__
#else
#define CK_HD static inline
#endif

CK_HD uint32_t ck_f32_bits(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return u;
}

CK_HD float ck_bits_f32(uint32_t u)
{
	float f;
	memcpy(&f, &u, 4);
	return f;
}

/* ---- widening (exact) ---- */

CK_HD float ck_bf16_to_f32(uint16_t h)
{
	return ck_bits_f32((uint32_t)h << 16);
}

CK_HD float ck_f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16;
	uint32_t exp = (h >> 10) & 0x1F, man = h & 0x3FF;
	uint32_t bits;
	if (exp == 0x1F) {
		bits = sign | 0x7F800000u | (man << 13); /* inf / NaN, payload kept */
	} else if (exp) {
		bits = sign | ((exp + 112) << 23) | (man << 13);
	} else if (man) { /* subnormal: normalise */
		int e = -1;
		do {
			e++;
			man <<= 1;
		} while (!(man & 0x400));
		bits = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3FF) << 13);
	} else {
		bits = sign;
	}
	return ck_bits_f32(bits);
}

CK_HD float ck_e5m2_to_f32(uint8_t b)
{
	return ck_f16_to_f32((uint16_t)((uint16_t)b << 8)); /* E5M2 is F16's top byte */
}

CK_HD float ck_e4m3_to_f32(uint8_t b)
{
	uint32_t sign = (uint32_t)(b & 0x80) << 24;
	uint32_t exp = (b >> 3) & 0xF, man = b & 0x7;
	if (exp == 0xF && man == 0x7)
		return ck_bits_f32(sign | 0x7FC00000u);
	if (exp)
		return ck_bits_f32(sign | ((exp + 120) << 23) | (man << 20));
	/* subnormal: man * 2^-9 */
	float v = (float)man * (1.0f / 512.0f);
	return sign ? -v : v;
}

/* ---- narrowing ---- */

CK_HD uint16_t ck_f32_to_bf16(float f, int saturate)
{
	uint32_t u = ck_f32_bits(f);
	if ((u & 0x7FFFFFFFu) > 0x7F800000u)
		return 0x7FC0;
	if (saturate && (u & 0x7FFFFFFFu) >= 0x7F7F8000u) /* rounds to inf or is inf */
		return (uint16_t)(((u >> 16) & 0x8000) | 0x7F7F);
	u += ((u >> 16) & 1) + 0x7FFF;
	return (uint16_t)(u >> 16);
}

CK_HD uint16_t ck_f32_to_f16(float f, int saturate)
{
	uint32_t u = ck_f32_bits(f);
	uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
	uint32_t a = u & 0x7FFFFFFFu;
	if (a > 0x7F800000u)
		return sign | 0x7E00;
	if (a >= 0x477FF000u) /* >= 65520 rounds to inf */
		return sign | (saturate ? 0x7BFF : 0x7C00);
	if (a >= 0x38800000u) { /* normal in F16 (>= 2^-14) */
		uint32_t r = a + 0x0FFF + ((a >> 13) & 1);
		return sign | (uint16_t)((r - (112u << 23)) >> 13);
	}
	/* subnormal or zero: let float addition do the RNE (the c10 trick) */
	float t = ck_bits_f32(a) + 0.5f; /* 0.5 = 2^-1: ulp becomes 2^-24 */
	return sign | (uint16_t)(ck_f32_bits(t) - ck_f32_bits(0.5f));
}

CK_HD uint8_t ck_f32_to_e4m3(float f, int saturate)
{
	uint32_t u = ck_f32_bits(f);
	uint8_t sign = (uint8_t)((u >> 24) & 0x80);
	uint32_t a = u & 0x7FFFFFFFu;
	if (a > 0x7F800000u)
		return sign | 0x7F;
	if (saturate && a >= 0x43E00000u) /* 448 and above, inf too */
		return sign | 0x7E;
	if (a >= (1087u << 20)) /* >= 480 (incl. inf): no infinity, so NaN */
		return sign | 0x7F;
	if (a < (121u << 23)) { /* below 2^-6: subnormal, RNE by float addition */
		const uint32_t denorm = 141u << 23;
		uint32_t t = ck_f32_bits(ck_bits_f32(a) + ck_bits_f32(denorm));
		return sign | (uint8_t)(t - denorm);
	}
	uint32_t mant_odd = (a >> 20) & 1;
	a += ((uint32_t)(7 - 127) << 23) + 0x7FFFF + mant_odd;
	return sign | (uint8_t)(a >> 20);
}

CK_HD uint8_t ck_f32_to_e5m2(float f, int saturate)
{
	uint32_t u = ck_f32_bits(f);
	uint8_t sign = (uint8_t)((u >> 24) & 0x80);
	uint32_t a = u & 0x7FFFFFFFu;
	if (a > 0x7F800000u)
		return sign | 0x7F;
	if (saturate && a >= 0x47600000u) /* 57344 and above, inf too */
		return sign | 0x7B;
	if (a >= (143u << 23)) /* >= 65536 (incl. inf) */
		return sign | 0x7C;
	if (a < (113u << 23)) { /* below 2^-14: subnormal */
		const uint32_t denorm = 134u << 23;
		uint32_t t = ck_f32_bits(ck_bits_f32(a) + ck_bits_f32(denorm));
		return sign | (uint8_t)(t - denorm);
	}
	uint32_t mant_odd = (a >> 21) & 1;
	a += ((uint32_t)(15 - 127) << 23) + 0xFFFFF + mant_odd;
	return sign | (uint8_t)(a >> 21);
}

/* ---- MXFP4 (OCP Microscaling formats v1.0) ---- */

/* E2M1, one nibble: 1 sign, 2 exponent (bias 1), 1 mantissa bit; no inf or
 * NaN. The 16 codes are +-{0, 0.5, 1, 1.5, 2, 3, 4, 6}. */
CK_HD float ck_e2m1_to_f32(unsigned nib)
{
	uint32_t sign = (uint32_t)(nib & 8) << 28;
	uint32_t e = (nib >> 1) & 3, m = nib & 1;
	if (e == 0) /* subnormal: m * 0.5 */
		return ck_bits_f32(sign | (m ? 0x3F000000u : 0));
	return ck_bits_f32(sign | ((e - 1 + 127) << 23) | (m << 22));
}

/* E8M0, a scale: 2^(code - 127), exactly; 0xFF is NaN (there is no zero).
 * Code 0 is 2^-127, an F32 subnormal. */
CK_HD float ck_e8m0_to_f32(uint8_t code)
{
	if (code == 0xFF)
		return ck_bits_f32(0x7FC00000u);
	return ck_bits_f32(code ? (uint32_t)code << 23 : 0x00400000u);
}

#endif
