/* Fuzz target: the safetensors header parser on a whole file image. The
 * reader makes the strict scan's checks as it reads: a header it accepts
 * must pass the scan and the strict cJSON parse too, and the header text
 * parsed as it is read (by a read always behind) may accept only what the
 * whole text's parse accepts, alike (a finding aborts). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/safetensors.h"
#include "ckpt/st_header.h"
#include "util/json_strict.h"
#include "util/stream_read.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* text (n bytes) parsed whole and as read in steps of 1 to 61 bytes, with
 * a look-ahead of 1 to 509 (from knob), '}' past what is in. */
static void streamed_as_whole(const char *text, size_t n, unsigned knob)
{
	struct ck_file_tensors w = {0}, s = {0};
	struct ck_st_span *ws = NULL, *ss = NULL;
	struct ck_err err;
	int wok = ck_st_header_json(text, n, NULL, "fuzz", 1, &w, &ws, &err) == 0;
	char *buf = malloc(n + 1);
	if (!buf)
		abort();
	memset(buf, '}', n + 1);
	struct ck_stream_read in;
	ck_stream_read_of(&in, buf, text, n, 1 + knob % 61, 1 + knob / 61 % 509);
	int sok = ck_st_header_json(buf, n, &in, "fuzz", 1, &s, &ss, &err) == 0;
	if (ck_stream_read_finish(&in) != 0 || (sok && (!wok || s.n_tensors != w.n_tensors)))
		abort();
	for (size_t i = 0; sok && i < s.n_tensors; i++)
		if (strcmp(s.tensors[i].name, w.tensors[i].name) || ss[i].begin != ws[i].begin ||
		    ss[i].end != ws[i].end)
			abort();
	ck_file_tensors_free(&w);
	ck_file_tensors_free(&s);
	free(ws);
	free(ss);
	free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ck_file_tensors h;
	struct ck_err err;
	uint64_t hn = 0;
	for (int i = 7; size >= 8 && i >= 0; i--)
		hn = hn << 8 | data[i];
	if (size >= 8 && hn <= size - 8)
		streamed_as_whole((const char *)data + 8, (size_t)hn, (unsigned)size * 2654435761u >> 7);
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
