/* Fuzz target: the safetensors header parser on a whole file image. The
 * reader makes the strict scan's checks as it reads: a header it accepts
 * must pass the scan and the strict cJSON parse too (a finding aborts). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "ckpt/safetensors.h"
#include "util/json_strict.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ck_file_tensors h;
	struct ck_err err;
	if (ck_st_parse_buffer(data, size, "fuzz", &h, &err) != 0)
		return 0;
	ck_file_tensors_free(&h);
	uint64_t n = 0; /* accepted: the header length is in bounds */
	for (int i = 7; i >= 0; i--)
		n = n << 8 | data[i];
	cJSON *j = ck_json_parse((const char *)data + 8, (size_t)n, CK_JSON_INTEGERS_ONLY,
				 CK_E_SOURCE, "fuzz", &err);
	if (!j)
		abort();
	cJSON_Delete(j);
	return 0;
}
