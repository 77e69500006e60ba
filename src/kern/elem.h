/* One element through the transform pipeline, shared by every backend (the
 * CPU kernels include it; the CUDA kernels compile it __host__ __device__):
 *   load from the source dtype, widening to F32 exactly;
 *   optionally multiply or divide by a block scale, in F32 (DeepSeek-V3's
 *   `weight.float() * scale_inv`; MXFP4's E2M1 values times 2^(e - 127));
 *   optionally add a constant, in F32 (Gemma's norm offsets: `w + 1`);
 *   round through each cast of the chain; the last one is the output dtype.
 * A cast-free, unscaled element is copied byte for byte (any dtype). */
#ifndef CK_ELEM_H
#define CK_ELEM_H

#include "../ckpt/dtype.h"
#include "fpconv.h"

CK_HD float ck_elem_load(const unsigned char *p, enum ck_dtype dt)
{
	uint16_t h;
	switch (dt) {
	case CK_DT_F16:
		memcpy(&h, p, 2);
		return ck_f16_to_f32(h);
	case CK_DT_BF16:
		memcpy(&h, p, 2);
		return ck_bf16_to_f32(h);
	case CK_DT_F8_E4M3:
		return ck_e4m3_to_f32(p[0]);
	case CK_DT_F8_E5M2:
		return ck_e5m2_to_f32(p[0]);
	case CK_DT_F8_E8M0: /* MXFP4's scales */
		return ck_e8m0_to_f32(p[0]);
	default: {
		float f;
		memcpy(&f, p, 4);
		return f;
	}
	}
}

CK_HD void ck_elem_store(unsigned char *p, enum ck_dtype dt, float v, int saturate)
{
	uint16_t h;
	switch (dt) {
	case CK_DT_F16:
		h = ck_f32_to_f16(v, saturate);
		memcpy(p, &h, 2);
		break;
	case CK_DT_BF16:
		h = ck_f32_to_bf16(v, saturate);
		memcpy(p, &h, 2);
		break;
	case CK_DT_F8_E4M3:
		p[0] = ck_f32_to_e4m3(v, saturate);
		break;
	case CK_DT_F8_E5M2:
		p[0] = ck_f32_to_e5m2(v, saturate);
		break;
	default:
		memcpy(p, &v, 4);
	}
}

/* The float path: v (already loaded and scaled) through casts[0..nc) into
 * dst; with nc == 0 the output is F32. */
CK_HD void ck_elem_finish(float v, const enum ck_dtype *casts, int nc, unsigned saturate,
			  unsigned char *dst)
{
	if (nc == 0) {
		memcpy(dst, &v, 4);
		return;
	}
	for (int k = 0; k < nc - 1; k++) { /* intermediate casts round through their format */
		unsigned char tmp[4];
		ck_elem_store(tmp, casts[k], v, (saturate >> k) & 1);
		v = ck_elem_load(tmp, casts[k]);
	}
	ck_elem_store(dst, casts[nc - 1], v, (saturate >> (nc - 1)) & 1);
}

/* Scale values are F32, BF16, F16 or E8M0 (checked when the plan is made). A NaN
 * result is made canonical (0x7FC00000): x86 passes an operand's payload
 * through, a GPU does not, and an F32 output must not depend on which ran. */
CK_HD float ck_elem_scaled(float v, float s, int divide)
{
	float r = divide ? v / s : v * s;
	return r != r ? ck_bits_f32(0x7FC00000u) : r;
}

/* v + c in F32, NaN canonical as for the scale. */
CK_HD float ck_elem_shift(float v, float c)
{
	float r = v + c;
	return r != r ? ck_bits_f32(0x7FC00000u) : r;
}

#endif
