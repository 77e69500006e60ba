/* Builds safetensors headers: the 8-byte length, compact JSON with
 * "__metadata__" first and tensors in the given order, padded with spaces to
 * a multiple of 8 as safetensors' own writer does. Shared by `convert`, the
 * mount's virtual model.safetensors and the test-checkpoint tool. */
#ifndef CK_ST_WRITER_H
#define CK_ST_WRITER_H

#include <stddef.h>
#include <stdint.h>

#include "../util/error.h"
#include "dtype.h"

struct ck_st_out {
	const char *name;
	enum ck_dtype dtype;
	int ndim;
	const int64_t *shape;
	uint64_t nbytes;
};

/* On success *out holds header_len bytes (prefix + JSON + padding); tensor i's
 * data goes at file offset header_len + data_off[i] (packed back to back).
 * meta is n_meta key/value pairs (keys[i], vals[i]). */
int ck_st_build_header(const struct ck_st_out *t, size_t n, const char *const *meta_keys,
		       const char *const *meta_vals, size_t n_meta, char **out, size_t *header_len,
		       uint64_t *data_off, struct ck_err *err);

/* model.safetensors.index.json, as Hugging Face writes it: names[i] is
 * stored in shard shard_of[i] (1-based) of n_shards, keys in the order
 * given; the one writer for convert, group-sharded converts and the
 * mount. NULL on ENOMEM. */
char *ck_st_index_json(const char *const *names, const uint64_t *shard_of, size_t n,
		       uint64_t n_shards, uint64_t total_size, size_t *len);

/* The Hugging Face name of shard k (1-based) of n: model-0000k-of-0000n.safetensors,
 * the one spelling for convert, the mount's shards, their index and mkckpt. */
void ck_st_shard_name(char *buf, size_t cap, uint64_t k, uint64_t n);

#endif
