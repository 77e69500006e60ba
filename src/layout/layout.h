/* Layout algebra: a tensor value during planning is a list of pieces. Each
 * piece is a box of the value's index space whose elements come from one
 * source tensor through an affine map
 *     source element = base + sum_d stride[d] * (t[d] - lo[d])
 * followed by a chain of dtype casts. Rename, permute, narrow, cat, stack,
 * select and reshape are exact transformations of piece lists, so any region
 * of a target maps back to exactly the source elements it needs. Reshape of a
 * non-contiguous layout splits pieces; CK_MAX_PIECES bounds that. */
#ifndef CK_LAYOUT_H
#define CK_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "../ckpt/dtype.h"
#include "../ckpt/tensors.h"
#include "../util/error.h"

#define CK_MAX_CASTS 4
#define CK_MAX_PIECES (1u << 16) /* per value */

/* Block scaling (DeepSeek-V3-style FP8 weights): each element read is
 * multiplied (dequant) or divided (quant) in F32 by a scale element, before
 * the casts. The scale element for index t of the piece is
 *     base + sum_k stride[k] * ((t[dim[k]] - lo[dim[k]] + phase[k]) / block[k])
 * with 0 <= phase < block; dims without an entry stay inside one block. */
#define CK_SCALE_DIMS 4
struct ck_piece_scale {
	uint32_t src; /* catalog entry of the scale tensor (F32, BF16 or F16) */
	uint8_t divide, n;
	int8_t dim[CK_SCALE_DIMS];
	int64_t block[CK_SCALE_DIMS], phase[CK_SCALE_DIMS], stride[CK_SCALE_DIMS];
	int64_t base;
};

_Static_assert(CK_DT_COUNT <= 256, "a piece keeps its casts' dtypes in a byte each");

struct ck_piece {
	uint32_t src; /* catalog entry */
	uint8_t n_casts;
	uint8_t saturate; /* bit k: cast k clamps instead of inf/NaN */
	uint8_t shifted;  /* `shift` is added in F32 after the scale, before the casts */
	/* MXFP4: the source is U8 read as packed E2M1, two per byte, low nibble
	 * first; base and strides count nibbles (byte = element >> 1). Always
	 * scaled (E8M0, one per 32 values), so never plain. */
	uint8_t fp4;
	/* enum ck_dtype values, applied in order after reading (a byte each:
	 * a 100k-key plan holds 100k pieces) */
	uint8_t casts[CK_MAX_CASTS];
	float shift;
	int64_t lo[CK_MAX_DIMS], hi[CK_MAX_DIMS];
	int64_t stride[CK_MAX_DIMS]; /* source elements per step of each dim */
	int64_t base;		     /* source element at lo */
	/* NULL, or the block scale, owned by the piece (only dequantising and
	 * quantising pieces have one; out of line, a 100k-key plan's pieces
	 * take a third less memory) */
	struct ck_piece_scale *sc;
};

struct ck_value {
	enum ck_dtype dtype;
	int ndim;
	int64_t shape[CK_MAX_DIMS];
	struct ck_piece *p;
	size_t n;
};

/* All functions return 0, or -1 with err (kind CK_E_MAPPING) naming the
 * problem; `v` is left valid (possibly unchanged) either way. */
int ck_value_leaf(struct ck_value *v, uint32_t src, enum ck_dtype dt, int ndim,
		  const int64_t *shape, struct ck_err *err);
int ck_value_copy(struct ck_value *dst, const struct ck_value *src, struct ck_err *err);
void ck_value_free(struct ck_value *v);
/* Same dtype, shape and pieces: the same bytes from the same sources. */
int ck_value_equal(const struct ck_value *a, const struct ck_value *b);

int ck_value_permute(struct ck_value *v, const int *perm, struct ck_err *err);
int ck_value_narrow(struct ck_value *v, int dim, int64_t start, int64_t len, struct ck_err *err);
int ck_value_unsqueeze(struct ck_value *v, int dim, struct ck_err *err);
int ck_value_squeeze(struct ck_value *v, int dim, struct ck_err *err);
/* Concatenate vals along dim into *out (vals are consumed and freed). */
int ck_value_cat(struct ck_value *out, struct ck_value *vals, int n, int dim, struct ck_err *err);
/* shape may hold one -1. */
int ck_value_reshape(struct ck_value *v, const int64_t *shape, int ndim, struct ck_err *err);
int ck_value_cast(struct ck_value *v, enum ck_dtype to, int saturate, struct ck_err *err);
/* Block scaling: v (as stored: no casts, no scale yet) times (or, with
 * divide, divided by) the block scale s, one element per block of
 * block[d] elements in each dim (s.shape[d] = ceil(v.shape[d] / block[d]));
 * s must be one uncast, unscaled piece of F32, BF16 or F16. The result is
 * F32; cast it for the dtype wanted. */
int ck_value_block_scale(struct ck_value *v, const struct ck_value *s, const int64_t *block,
			 int divide, struct ck_err *err);
/* v + c (Gemma's RMSNorm weights stored as offsets from 1): every element
 * is widened to F32 (and scaled, if it is), c is added in F32, then any later
 * casts round. v must not be cast to a narrower type before (only exact
 * widenings to F32); |c| <= 2^24 keeps c exact. A v shifted already gets
 * one shift by the sum, which must be as exact (a zero sum adds -0: the
 * identity). The result is F32; padding stays zero. */
int ck_value_shift(struct ck_value *v, float c, struct ck_err *err);
/* MXFP4 (OCP Microscaling; GPT-OSS's `*_blocks` / `*_scales`): blocks is U8
 * [..., G, B], each byte two E2M1 values (low nibble first); scales is U8 or
 * F8_E8M0 [..., G], one power of two 2^(s-127) per 2B values (0xFF: NaN).
 * *blocks becomes the F32 value [..., G * 2B] = E2M1 * scale, exact. Both
 * must be read as stored (sliced or permuted at most); on error *blocks is
 * unchanged. */
int ck_value_mxfp4(struct ck_value *blocks, const struct ck_value *scales, struct ck_err *err);
/* Whether a piece is read as stored: no cast, no scale, no shift. */
static inline int ck_piece_plain(const struct ck_piece *p)
{
	return p->n_casts == 0 && !p->sc && !p->shifted && !p->fp4;
}

uint64_t ck_value_numel(const struct ck_value *v);
/* Grow dim to size (>= its size): the new elements belong to no piece and
 * read as zeros (padding for splits that do not divide). */
int ck_value_pad(struct ck_value *v, int dim, int64_t size, struct ck_err *err);
/* Whether some element belongs to no piece (the engine zero-fills it):
 * the pieces' elements (ck_piece_numel: they are disjoint boxes) add up to
 * fewer than the value's. */
int ck_value_has_holes(const struct ck_value *v);
uint64_t ck_piece_numel(const struct ck_piece *q, int ndim);

#endif
