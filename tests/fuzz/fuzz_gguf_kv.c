/* Fuzz target: --gguf-override-kv (gguf_kv.c). The input is
 * "KEY=TYPE:VALUE\n" then one count byte and the bytes of a metadata
 * buffer of that many records, which the walker must never read past
 * (the view's own buffers are well formed; a GGUF source's tokenizer
 * records are copied in whole). An override that applies must be there
 * afterwards, and read back as the number it set. */
#include <assert.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "view/gguf_kv.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *nl = memchr(data, '\n', size);
	if (!nl || memchr(data, 0, (size_t)(nl - data)))
		return 0;
	char *spec = malloc((size_t)(nl - data) + 1);
	if (!spec)
		return 0;
	memcpy(spec, data, (size_t)(nl - data));
	spec[nl - data] = '\0';
	struct ck_gguf_kv_set kv;
	struct ck_err err;
	size_t rest = size - (size_t)(nl - data) - 1;
	if (ck_gguf_kv_parse(spec, &kv, &err) == 0 && rest >= 1) {
		struct ck_gguf_meta m = {0};
		m.n = nl[1];
		ck_buf_put(&m.b, nl + 2, rest - 1);
		if (!m.b.oom && ck_gguf_kv_apply(&m, &kv, 1, &err) == 0) {
			double v = NAN;
			int found = ck_gguf_meta_number(&m, kv.key, &v);
			assert(kv.tag == 's' || found); /* a number set reads back as itself */
			assert(kv.tag != 'i' || v == kv.u);
			assert(kv.tag != 'f' || (float)v == kv.f);
			assert(kv.tag != 'b' || v == kv.b);
		}
		ck_gguf_meta_free(&m);
	}
	free(spec);
	return 0;
}
