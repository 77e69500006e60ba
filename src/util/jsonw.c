#include "jsonw.h"

#include <string.h>

void ck_json_fput_str(FILE *f, const char *s)
{
	fputc('"', f);
	while (*s) {
		/* runs that need no escape go out in one write (plan.json lists
		 * every source key: per-character stdio calls showed in profiles) */
		size_t n = 0;
		while (s[n] && s[n] != '"' && s[n] != '\\' && (unsigned char)s[n] >= 0x20)
			n++;
		fwrite(s, 1, n, f);
		s += n;
		if (!*s)
			break;
		unsigned char c = (unsigned char)*s++;
		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else
			fprintf(f, "\\u%04x", c);
	}
	fputc('"', f);
}
