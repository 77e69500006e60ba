#include "names.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../util/strmap.h"

#define NAME_MAX_BYTES 255
#define KEEP_BYTES 237

static int needs_escape(unsigned char c)
{
	return c == '%' || c == '/' || c < 0x20 || c == 0x7F;
}

char *ck_escape_name(const char *key)
{
	return ck_escape_name_max(key, NAME_MAX_BYTES);
}

char *ck_escape_name_max(const char *key, size_t max)
{
	if (!strcmp(key, "."))
		return strdup("%2E");
	if (!strcmp(key, ".."))
		return strdup("%2E%2E");
	if (!key[0])
		return strdup("%00");
	size_t n = 0;
	for (const unsigned char *p = (const unsigned char *)key; *p; p++)
		n += needs_escape(*p) ? 3 : 1;
	char *out = malloc(n + 1 > 256 ? n + 1 : 256);
	if (!out)
		return NULL;
	char *w = out;
	for (const unsigned char *p = (const unsigned char *)key; *p; p++) {
		if (needs_escape(*p)) {
			sprintf(w, "%%%02X", *p);
			w += 3;
		} else {
			*w++ = (char)*p;
		}
	}
	*w = '\0';
	if (n <= max)
		return out;
	size_t keep = max - (NAME_MAX_BYTES - KEEP_BYTES);
	/* do not cut inside a UTF-8 sequence or a %XX escape */
	while (keep > 0 && ((unsigned char)out[keep] & 0xC0) == 0x80)
		keep--;
	for (size_t back = 1; back <= 2 && keep >= back; back++)
		if (out[keep - back] == '%')
			keep -= back;
	snprintf(out + keep, 256 - keep, "%%~%016llx", (unsigned long long)ck_hash_str(key));
	return out;
}
