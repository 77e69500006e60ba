/* Safetensors header parsing and validation (reference/formats.md §1).
 * Everything in a header is untrusted: every offset, size and shape product
 * is checked, and a header that safetensors' own reader would refuse is
 * refused here too, with one line naming the file, the key and the rule. */
#ifndef CK_SAFETENSORS_H
#define CK_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "../util/error.h"
#include "dtype.h"

#define CK_MAX_DIMS 16
#define CK_ST_MAX_HEADER 100000000ULL /* safetensors' MAX_HEADER_SIZE */

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

struct ck_st_meta {
	char *key;
	char *value;
};

struct ck_st_header {
	uint64_t header_len; /* N: JSON bytes after the 8-byte length */
	struct ck_tensor_info *tensors;
	size_t n_tensors; /* sorted by offset */
	struct ck_st_meta *meta;
	size_t n_meta;
};

/* Validate a whole safetensors file held in memory (the fuzz/replay entry). */
int ck_st_parse_buffer(const unsigned char *buf, size_t len, const char *what,
		       struct ck_st_header *out, struct ck_err *err);
/* Read and validate the header of an open file of the given size; tensor
 * data is never read. */
int ck_st_read_fd(int fd, uint64_t file_size, const char *what, struct ck_st_header *out,
		  struct ck_err *err);
void ck_st_header_free(struct ck_st_header *h);

/* Shape helpers shared with the planner: element count and byte size with
 * overflow checks. Return -1 on overflow. */
int ck_shape_numel(const int64_t *shape, int ndim, uint64_t *numel);
int ck_shape_bytes(const int64_t *shape, int ndim, enum ck_dtype dt, uint64_t *bytes);

#endif
