/* The tensor vocabulary every source reader speaks: one stored tensor (name,
 * dtype, shape, the byte range of its data in its file) and the list a
 * reader makes of one file's tensors from its header alone. */
#ifndef CK_TENSORS_H
#define CK_TENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "../util/strpool.h"
#include "dtype.h"

/* The most dimensions a tensor may have. Checkpoints hold at most 5 or 6
 * (a Conv3d weight, stacked experts of one); every planned value carries
 * three CK_MAX_DIMS arrays per layout piece, so at 91,991 keys 16 dims cost
 * ~20 MB more of fresh memory and 25-30% of the planning time (bench_inspect).
 * Readers refuse a tensor with more, naming it. */
#define CK_MAX_DIMS 8

struct ck_tensor_info {
	char *name;
	enum ck_dtype dtype;
	int ndim;
	int64_t shape[CK_MAX_DIMS];
	uint64_t numel;
	uint64_t nbytes;
	uint64_t offset; /* absolute byte offset of the data in the file */
	/* a view (torch sources): its element strides (ndim of them, owned);
	 * NULL when C-contiguous */
	int64_t *stride;
	/* a GGUF tensor of quantized blocks (ggml type; 0: none): served as F32
	 * (dtype, nbytes), stored as qbytes of blocks along the fastest dim */
	uint32_t quant;
	uint64_t qbytes;
};

/* A key/value string pair of a file's metadata (safetensors' __metadata__). */
struct ck_file_meta {
	char *key;
	char *value;
};

/* What a reader found in one file. */
struct ck_file_tensors {
	uint64_t header_len; /* bytes before the first tensor's data (safetensors: N) */
	struct ck_tensor_info *tensors;
	size_t n_tensors; /* sorted by offset */
	struct ck_file_meta *meta;
	size_t n_meta;
	/* holding blocks: every tensor's name lives here, none on its own */
	struct ck_strpool names;
};

void ck_file_tensors_free(struct ck_file_tensors *h);

/* Element count and byte size of a shape, -1 on a negative dim or overflow
 * (every reader and the planner check shapes with these). */
int ck_shape_numel(const int64_t *shape, int ndim, uint64_t *numel);
int ck_shape_bytes(const int64_t *shape, int ndim, enum ck_dtype dt, uint64_t *bytes);

#endif
