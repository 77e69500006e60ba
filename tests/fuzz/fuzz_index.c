/* Fuzz target: the model.safetensors.index.json parser. An index it accepts
 * must pass the strict scan and the strict cJSON parse too (a finding
 * aborts): the reader makes the scan's checks as it reads. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "ckpt/index.h"
#include "util/json_strict.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ck_index idx;
	struct ck_err err;
	if (ck_index_parse((const char *)data, size, "fuzz", &idx, &err) != 0)
		return 0;
	ck_index_free(&idx);
	cJSON *j = ck_json_parse((const char *)data, size, 0, CK_E_SOURCE, "fuzz", &err);
	if (!j)
		abort();
	cJSON_Delete(j);
	return 0;
}
