/* The flat safetensors view of a plan: one header computed from the targets
 * (plan order, "__metadata__": {"format": "pt"}) and every target's bytes
 * packed after it. Maps a byte range of the flat file to header bytes and
 * target segments, so a read evaluates only the tensors it touches. */
#ifndef CK_FLAT_H
#define CK_FLAT_H

#include <stddef.h>
#include <stdint.h>

#include "plan.h"

struct ck_flat {
	char *header; /* header_len bytes */
	uint64_t header_len, size;
	uint64_t *off; /* file offset of each target */
};

struct ck_span {
	uint32_t target;
	uint64_t off, len; /* within the target */
	uint64_t dst;	   /* offset in the caller's buffer */
};

int ck_flat_build(const struct ck_plan *p, struct ck_flat *f, struct ck_err *err);
void ck_flat_free(struct ck_flat *f);
/* Spans of [off, off+len) that fall in targets, in order (header bytes are
 * the caller's: they are f->header). Returns the number of spans, writing at
 * most max of them to out (out NULL: count only). */
size_t ck_flat_spans(const struct ck_plan *p, const struct ck_flat *f, uint64_t off, uint64_t len,
		     struct ck_span *out, size_t max);

#endif
