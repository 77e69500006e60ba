/* Fuzz target: GGUF headers as sources (metadata values, nested arrays,
 * tensor infos, alignment, offsets), read from a memfd. */
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ckpt/gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int fd = memfd_create("fuzz", MFD_CLOEXEC);
	if (fd < 0)
		return 0;
	if (write(fd, data, size) == (ssize_t)size) {
		struct ck_file_tensors h;
		struct ck_err err;
		cJSON *meta;
		if (ck_gguf_read_fd(fd, size, "fuzz", &h, &meta, &err) == 0) {
			/* rope divisor lists of the lengths a few rotations take */
			static const float f[8] = {1, 1, 1, 1, 1, 1, 1, 1};
			size_t n = size % 9;
			struct ck_gguf_rope rope = {n ? f : NULL, NULL, NULL, n, 0, 0};
			cJSON *c;
			if (ck_gguf_hf_config(meta, 32, 1, &rope, "fuzz", &c, &err) == 0)
				cJSON_Delete(c);
			cJSON_Delete(meta);
			ck_file_tensors_free(&h);
		}
	}
	close(fd);
	return 0;
}
