/* Fuzz target: key patterns. The input is "PATTERN\nKEY". A match must
 * substitute back to the key itself (the captures are a parse of the key);
 * slow inputs are findings too (fuzz.sh runs with a per-input timeout), so
 * adversarial patterns that made the old matcher exponential count. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "map/pattern.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = malloc(size + 1);
	if (!text)
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';
	char *key = strchr(text, '\n');
	if (!key || strlen(text) != size) { /* no separator, or a NUL inside */
		free(text);
		return 0;
	}
	*key++ = '\0';
	struct ck_pattern p;
	struct ck_err err;
	if (ck_pattern_compile(text, &p, &err) == 0) {
		struct ck_binding b = {0};
		if (ck_pattern_match(&p, key, &b) == 1) {
			char *back = NULL;
			if (ck_pattern_subst(&p, &b, &back, &err) != 0 || strcmp(back, key) != 0)
				abort(); /* a match that does not describe the key */
			free(back);
			ck_binding_clear(&b);
		}
		ck_pattern_free(&p);
	}
	free(text);
	return 0;
}
