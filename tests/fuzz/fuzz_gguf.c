/* Fuzz target: GGUF headers as sources (metadata values, nested arrays,
 * tensor infos, alignment, offsets), read from a memfd. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ckpt/gguf.h"
#include "ckpt/gguf_shapes.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void tensor_at(const void *ctx, size_t i, const char **name, int *ndim,
		      const int64_t **shape)
{
	const struct ck_tensor_info *t = &((const struct ck_file_tensors *)ctx)->tensors[i];
	*name = t->name;
	*ndim = t->ndim;
	*shape = t->shape;
}

/* Each kept tokenizer.* record begins with its key as the file encodes
 * it (u64 length, bytes) and ends inside the copied bytes. */
static void check_records(const struct ck_gguf_kvs *k)
{
	for (size_t i = 0; i < k->n; i++) {
		const struct ck_gguf_kv *kv = &k->kv[i];
		size_t n = strlen(kv->key);
		uint64_t len = 0;
		for (int b = 7; b >= 0 && kv->len >= 8; b--)
			len = len << 8 | k->bytes[kv->off + (size_t)b];
		if (strncmp(kv->key, "tokenizer.", 10) || kv->len < 8 + n + 4 || len != n ||
		    memcmp(k->bytes + kv->off + 8, kv->key, n) ||
		    (i && kv->off != k->kv[i - 1].off + k->kv[i - 1].len))
			abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int fd = memfd_create("fuzz", MFD_CLOEXEC);
	if (fd < 0)
		return 0;
	if (write(fd, data, size) == (ssize_t)size) {
		struct ck_file_tensors h;
		struct ck_err err;
		cJSON *meta;
		struct ck_gguf_kvs tok;
		if (ck_gguf_read_fd(fd, size, "fuzz", &h, &meta, &tok, &err) == 0) {
			/* rope divisor lists of the lengths a few rotations take */
			static const float f[8] = {1, 1, 1, 1, 1, 1, 1, 1};
			size_t n = size % 9;
			struct ck_gguf_rope rope = {n ? f : NULL, NULL, NULL, n, 0, 0};
			cJSON *c;
			if (ck_gguf_hf_config(meta, 32, 1, &rope, "fuzz", &c, &err) == 0 && c) {
				ck_gguf_check_hf_config(c, &h, h.n_tensors, tensor_at, "fuzz",
							&err);
				cJSON_Delete(c);
			}
			check_records(&tok);
			cJSON_Delete(meta);
			ck_gguf_kvs_free(&tok);
			ck_file_tensors_free(&h);
		}
	}
	close(fd);
	return 0;
}
