/* Fuzz target: the model.safetensors.index.json parser. */
#include <stddef.h>
#include <stdint.h>

#include "ckpt/index.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ck_index idx;
	struct ck_err err;
	if (ck_index_parse((const char *)data, size, "fuzz", &idx, &err) == 0)
		ck_index_free(&idx);
	return 0;
}
