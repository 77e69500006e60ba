/* Importance matrices (llama.cpp's llama-imatrix output, llama-quantize
 * --imatrix): per tensor of a GGUF model, the mean square of the
 * activations each column multiplies over a calibration text, n_per_row
 * values per matrix (times the experts of a stacked MoE tensor). Two file
 * formats, told apart by GGUF's magic:
 *   GGUF (llama.cpp since mid-2025): tensors NAME.in_sum2 (F32,
 *     [experts][n_per_row]) and NAME.counts (F32, [experts]), the value
 *     in_sum2 / count, 1 where a count is 0; the metadata must hold
 *     imatrix.datasets, imatrix.chunk_count and imatrix.chunk_size;
 *   legacy (imatrix.dat): int32 entries, then per entry int32 name length,
 *     the name, int32 ncall, int32 nval, nval floats (divided by ncall
 *     when ncall > 0), and optionally int32 chunks, int32 length, the
 *     dataset's name.
 * The file is untrusted: counts and lengths are bounded by its size, a
 * name must be a GGUF tensor name (1 to 64 bytes, no NUL) and appear once,
 * and every value must be finite (llama-quantize refuses one that is not). */
#ifndef CK_IMATRIX_H
#define CK_IMATRIX_H

#include <stdint.h>

#include "../util/error.h"

struct ck_imatrix_entry {
	char *name;
	float *v;
	uint64_t n;
};

struct ck_imatrix {
	struct ck_imatrix_entry *e; /* sorted by name */
	size_t n;
	char *dataset;	/* the calibration text's name, or NULL */
	int64_t chunks; /* chunks it was computed on (0: not said) */
	int gguf;	/* the GGUF format (else legacy) */
};

/* Load path; -1 with err (CK_E_SOURCE naming the file and what is wrong). */
int ck_imatrix_load(const char *path, struct ck_imatrix *m, struct ck_err *err);
/* The entry for a tensor name, or NULL. */
const struct ck_imatrix_entry *ck_imatrix_find(const struct ck_imatrix *m, const char *name);
void ck_imatrix_free(struct ck_imatrix *m);

#endif
