/* Fuzz target: the safetensors header parser on a whole file image. */
#include <stddef.h>
#include <stdint.h>

#include "ckpt/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ck_file_tensors h;
	struct ck_err err;
	if (ck_st_parse_buffer(data, size, "fuzz", &h, &err) == 0)
		ck_file_tensors_free(&h);
	return 0;
}
