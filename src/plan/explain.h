/* Provenance: where every element of a target comes from, read off its
 * pieces (boxes of the target, each an affine map into one source tensor
 * followed by casts and an optional block scale). Used by `inspect
 * --explain KEY[INDEX]` and the xattr user.ckptfs.pieces. */
#ifndef CK_EXPLAIN_H
#define CK_EXPLAIN_H

#include <stdio.h>

#include "plan.h"

/* [{"box": [[lo, hi], ...], "source": KEY, "source_dtype": ..., "start":
 * [index of the box's first element in the source], "strides": [source
 * elements per step of each target dim], "casts": [...], "scale": {...}}],
 * the first max pieces. */
void ck_explain_json(FILE *f, const struct ck_plan *p, const struct ck_target *t, size_t max);
/* One line per piece, for people. */
void ck_explain_text(FILE *f, const struct ck_plan *p, const struct ck_target *t);
/* "KEY[i, j] = SOURCE[a, b] (DTYPE -> casts)": the element's origin. */
int ck_explain_index(FILE *f, const struct ck_plan *p, const struct ck_target *t,
		     const int64_t *idx, int n, struct ck_err *err);

#endif
