#include "cpu.h"

#include <string.h>

#include "fpconv.h"

float ck_cpu_load_f32(const unsigned char *p, enum ck_dtype dt)
{
	uint16_t h;
	float f;
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
	default:
		memcpy(&f, p, 4);
		return f;
	}
}

void ck_cpu_store_f32(unsigned char *p, enum ck_dtype dt, float v, int saturate)
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

static void copy_strided(const unsigned char *src, int64_t ss, size_t es, unsigned char *dst,
			 int64_t n)
{
	if (ss == 1) {
		memcpy(dst, src, (size_t)n * es);
		return;
	}
	int64_t step = ss * (int64_t)es;
	switch (es) { /* fixed sizes let the compiler use plain loads */
	case 1:
		for (int64_t i = 0; i < n; i++)
			dst[i] = src[i * step];
		break;
	case 2:
		for (int64_t i = 0; i < n; i++)
			memcpy(dst + 2 * i, src + i * step, 2);
		break;
	case 4:
		for (int64_t i = 0; i < n; i++)
			memcpy(dst + 4 * i, src + i * step, 4);
		break;
	case 8:
		for (int64_t i = 0; i < n; i++)
			memcpy(dst + 8 * i, src + i * step, 8);
		break;
	default:
		for (int64_t i = 0; i < n; i++)
			memcpy(dst + (size_t)i * es, src + i * step, es);
	}
}

/* The common single casts, as tight loops the compiler can vectorise. */
static int fast_cast(const unsigned char *src, enum ck_dtype s, enum ck_dtype d,
		     unsigned char *dst, int64_t n)
{
	if (s == CK_DT_BF16 && d == CK_DT_F32) {
		for (int64_t i = 0; i < n; i++) {
			uint16_t h;
			memcpy(&h, src + 2 * i, 2);
			uint32_t u = (uint32_t)h << 16;
			memcpy(dst + 4 * i, &u, 4);
		}
		return 1;
	}
	if (s == CK_DT_F32 && d == CK_DT_BF16) {
		for (int64_t i = 0; i < n; i++) {
			float f;
			memcpy(&f, src + 4 * i, 4);
			uint16_t h = ck_f32_to_bf16(f, 0);
			memcpy(dst + 2 * i, &h, 2);
		}
		return 1;
	}
	if (s == CK_DT_F16 && d == CK_DT_F32) {
		for (int64_t i = 0; i < n; i++) {
			uint16_t h;
			memcpy(&h, src + 2 * i, 2);
			float f = ck_f16_to_f32(h);
			memcpy(dst + 4 * i, &f, 4);
		}
		return 1;
	}
	return 0;
}

void ck_cpu_convert_run(const unsigned char *src, int64_t sstride, enum ck_dtype sdt,
			const enum ck_dtype *casts, int nc, unsigned saturate, unsigned char *dst,
			int64_t n)
{
	size_t ses = ck_dtype_size(sdt);
	if (nc == 0) {
		copy_strided(src, sstride, ses, dst, n);
		return;
	}
	if (nc == 1 && !saturate && sstride == 1 && fast_cast(src, sdt, casts[0], dst, n))
		return;
	enum ck_dtype last = casts[nc - 1];
	size_t des = ck_dtype_size(last);
	for (int64_t i = 0; i < n; i++) {
		float v = ck_cpu_load_f32(src + i * sstride * (int64_t)ses, sdt);
		/* intermediate casts round through their format */
		for (int k = 0; k < nc - 1; k++) {
			unsigned char tmp[4];
			ck_cpu_store_f32(tmp, casts[k], v, (saturate >> k) & 1);
			v = ck_cpu_load_f32(tmp, casts[k]);
		}
		ck_cpu_store_f32(dst + (size_t)i * des, last, v, (saturate >> (nc - 1)) & 1);
	}
}
