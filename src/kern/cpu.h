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

/* Element conversions through F32, exposed for the tests' oracles. */
float ck_cpu_load_f32(const unsigned char *p, enum ck_dtype dt);
void ck_cpu_store_f32(unsigned char *p, enum ck_dtype dt, float v, int saturate);

#endif
