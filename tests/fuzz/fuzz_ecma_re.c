/* Fuzz target: the ECMAScript regex engine (llama-quantize's --tensor-type
 * patterns). The input is "PATTERN\nSUBJECT". A pattern that compiles must
 * give the same answer as itself in a group and as the group or a class
 * that matches nothing ((?:P)|[]); slow inputs are findings too (fuzz.sh
 * runs with a per-input timeout): the engine is an NFA, never exponential. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/ecma_re.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int search(const char *pattern, const char *s, int *ok)
{
	struct ck_re re;
	struct ck_err err;
	*ok = ck_re_compile(pattern, &re, &err) == 0;
	if (!*ok)
		return -1;
	int r = ck_re_search(&re, s, strlen(s));
	ck_re_free(&re);
	if (r < 0)
		abort(); /* only ENOMEM, which the fuzzer's limits would report first */
	return r;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = malloc(size + 1), *wrapped = malloc(size + 16);
	if (!text || !wrapped)
		goto out;
	memcpy(text, data, size);
	text[size] = '\0';
	char *subject = strchr(text, '\n');
	if (!subject || strlen(text) != size) /* no separator, or a NUL inside */
		goto out;
	*subject++ = '\0';
	int ok, ok2, r = search(text, subject, &ok);
	if (!ok)
		goto out;
	snprintf(wrapped, size + 16, "(?:%s)|[]", text);
	int r2 = search(wrapped, subject, &ok2);
	/* the group may nest one too deep; otherwise the answers agree */
	if (ok2 && r2 != r)
		abort();
out:
	free(text);
	free(wrapped);
	return 0;
}
