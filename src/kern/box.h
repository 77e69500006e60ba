/* The kernels' common unit of work, the same on every backend: a box of n
 * dimensions whose element i (a multi-index) is read from
 *     src[sum_d sstride[d] * i[d]]     (source elements, dtype sdt)
 * and written to
 *     dst[sum_d dstride[d] * i[d]]     (output elements, dtype ddt)
 * through the element pipeline of elem.h. With a block scale, the factor is
 *     scale[sum_d scstride[d] * ((i[d] + sphase[d]) / sblock[d])]
 * (integer division: the block that holds the element); with a shift, a
 * constant is added after it. Strides are never
 * negative. The engine builds one box per piece of a target it evaluates.
 * An F4_E2M1 source (MXFP4) counts nibbles: element i is nibble
 * snib + sum_d sstride[d] * i[d] of src, low nibble of a byte first; it is
 * always scaled (E8M0). */
#ifndef CK_BOX_H
#define CK_BOX_H

#include <stdint.h>

#include "../ckpt/dtype.h"
#include "../ckpt/tensors.h" /* CK_MAX_DIMS */

#define CK_BOX_CASTS 4

struct ck_box {
	int ndim; /* 0: one element */
	int64_t ext[CK_MAX_DIMS];
	int64_t sstride[CK_MAX_DIMS], dstride[CK_MAX_DIMS];
	enum ck_dtype sdt, ddt; /* ddt: the last cast, F32 when scaled without casts, else sdt */
	int nc;
	enum ck_dtype casts[CK_BOX_CASTS];
	unsigned saturate; /* bit k: cast k clamps overflow to the largest finite value */
	int scaled, divide;
	int shifted; /* `shift` added in F32 after the scale, before the casts */
	float shift;
	enum ck_dtype scdt;
	int64_t sblock[CK_MAX_DIMS], sphase[CK_MAX_DIMS], scstride[CK_MAX_DIMS];
	int64_t snib; /* F4_E2M1 only: the nibble of element 0 */
};

/* Canonical form: dims of extent 1 dropped, neighbours that chain in the
 * source, the output and the scale merged, innermost output dim last. Keeps
 * the same element mapping; the kernels then see few, long dims. */
void ck_box_normalise(struct ck_box *b);
uint64_t ck_box_numel(const struct ck_box *b);
/* Bytes of src the box reaches (through its last element), and of the scales. */
uint64_t ck_box_src_bytes(const struct ck_box *b);
uint64_t ck_box_scale_bytes(const struct ck_box *b);
/* Whether elements go through the float pipeline (casts, a scale or a shift). */
static inline int ck_box_is_float(const struct ck_box *b)
{
	return b->nc > 0 || b->scaled || b->shifted;
}

#endif
