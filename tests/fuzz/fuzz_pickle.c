/* Fuzz target: the restricted pickle reader on its own. */
#include <stddef.h>
#include <stdint.h>

#include "ckpt/pickle.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ck_pickle p;
	struct ck_err err;
	if (ck_pickle_parse(data, size, "fuzz", &p, &err) == 0)
		ck_pickle_free(&p);
	return 0;
}
