/* CPU kernels behind the engine's device-neutral interface: a strided run of
 * source elements becomes a contiguous run of target elements, passing
 * through a chain of casts. Contiguous copies are memcpy; casts use the shared
 * conversions of fpconv.h so every backend gives the same bits. */
#ifndef CK_KERN_CPU_H
#define CK_KERN_CPU_H

#include <stdint.h>

#include "../ckpt/dtype.h"
#include "box.h"

/* n elements: src element i at src + i*sstride*size(sdt); dst contiguous.
 * casts[0..nc) are applied in order (nc = 0: plain copy); bit k of saturate
 * makes cast k clamp to the largest finite value. */
void ck_cpu_convert_run(const unsigned char *src, int64_t sstride, enum ck_dtype sdt,
			const enum ck_dtype *casts, int nc, unsigned saturate, unsigned char *dst,
			int64_t n);

/* The box kernel (box.h): the reference every other backend must match bit
 * for bit. scale points at the scale element of the box's origin block (NULL
 * when the box is not scaled). */
void ck_cpu_convert_box(const struct ck_box *b, const unsigned char *src,
			const unsigned char *scale, unsigned char *dst);

/* n contiguous F32 elements to BF16 (ck_f32_to_bf16 without saturation:
 * round to nearest even, every NaN 0x7FC0): the cast ck_cpu_convert_run
 * takes for them. vector: in AVX2 first where the CPU has it (kern/avx2.h);
 * 0, the portable blocks alone (tests compare the two). */
void ck_cpu_f32_to_bf16_run(const unsigned char *src, unsigned char *dst, int64_t n, int vector);

/* n contiguous F8_E4M3 elements times (or, divide, over) sv, to BF16
 * (to_bf16) or F32, as the element path rounds: the box kernel's run for
 * block-scaled FP8. vector: in AVX2 first where the CPU has it
 * (kern/avx2.h); 0, the portable blocks alone (tests compare the two). */
void ck_cpu_e4m3_scaled_run(const unsigned char *src, float sv, int divide, int to_bf16,
			    unsigned char *dst, int64_t n, int vector);

/* n F4_E2M1 elements from nibble n0 of src (two a byte, the low one
 * first), times (or over) sv, to BF16 or F32: MXFP4's run, as
 * ck_cpu_e4m3_scaled_run. */
void ck_cpu_fp4_scaled_run(const unsigned char *src, int64_t n0, float sv, int divide, int to_bf16,
			   unsigned char *dst, int64_t n, int vector);

/* Element conversions through F32, exposed for the tests' oracles. */
float ck_cpu_load_f32(const unsigned char *p, enum ck_dtype dt);
void ck_cpu_store_f32(unsigned char *p, enum ck_dtype dt, float v, int saturate);

#endif
