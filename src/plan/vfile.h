/* A virtual file assembled from literal bytes (headers, pickles, zip
 * directories) and byte ranges of targets. The flat views (model.safetensors,
 * its shards, pytorch_model.bin) are built as vfiles; a read of any byte range
 * maps to literal pieces and target spans, so it evaluates only the tensors
 * it touches. */
#ifndef CK_VFILE_H
#define CK_VFILE_H

#include <stddef.h>
#include <stdint.h>

#define CK_VLIT UINT32_MAX /* part.target of a literal part */

struct ck_vpart {
	uint64_t off, len; /* in the file */
	uint32_t target;   /* or CK_VLIT */
	uint64_t src;	   /* offset in the target, or in the blob */
};

struct ck_vfile {
	unsigned char *blob; /* literal bytes of all literal parts */
	size_t blob_len, blob_cap;
	struct ck_vpart *parts;
	size_t n, cap;
	uint64_t size;
};

/* A piece of a read: target bytes (lit NULL) or literal bytes (lit set). */
struct ck_span {
	uint32_t target;
	uint64_t off, len; /* within the target (or the literal) */
	uint64_t dst;	   /* offset in the caller's buffer */
	const unsigned char *lit;
};

/* Append literal bytes / a target range. Return 0 or -ENOMEM. Adjacent
 * literals share one part. The blob may move until the file is complete:
 * take spans only once it is. */
int ck_vfile_lit(struct ck_vfile *v, const void *p, size_t len);
int ck_vfile_fill(struct ck_vfile *v, unsigned char byte, size_t len);
int ck_vfile_target(struct ck_vfile *v, uint32_t target, uint64_t off, uint64_t len);
/* ck_vfile_lit of a malloc'd buffer the file takes (freed here on any
 * outcome): the first literal is kept as the blob, uncopied (a flat view's
 * header of many MB is not copied into fresh pages). */
int ck_vfile_lit_take(struct ck_vfile *v, void *p, size_t len);
/* Room for n more parts, so that appending them does not move the array. */
int ck_vfile_reserve(struct ck_vfile *v, size_t n);
void ck_vfile_free(struct ck_vfile *v);
/* Put v's target parts in another plan's numbering: target t becomes
 * idx[t] (idx NULL: unchanged), as when v's plan is merged into a union. */
void ck_vfile_renumber(struct ck_vfile *v, const uint32_t *idx);

/* Spans of [off, off+len), in file order. Returns their number, writing at
 * most max of them to out (out NULL: count only). */
size_t ck_vfile_spans(const struct ck_vfile *v, uint64_t off, uint64_t len, struct ck_span *out,
		      size_t max);

#endif
