#include "jsonw.h"

#include <stdio.h>
#include <string.h>

/* The one escaping rule: quote and backslash escaped, control bytes as
 * \u00XX, everything else (UTF-8 included) as it is. */
static int plain(unsigned char c)
{
	return c != '"' && c != '\\' && c >= 0x20;
}

static size_t escape(unsigned char c, char out[7])
{
	if (c == '"' || c == '\\') {
		out[0] = '\\', out[1] = (char)c;
		return 2;
	}
	return (size_t)snprintf(out, 7, "\\u%04x", c);
}

void ck_json_fput_str(FILE *f, const char *s)
{
	fputc('"', f);
	while (*s) {
		/* runs that need no escape go out in one write (plan.json lists
		 * every source key: per-character stdio calls showed in profiles) */
		size_t n = 0;
		while (s[n] && plain((unsigned char)s[n]))
			n++;
		fwrite(s, 1, n, f);
		s += n;
		if (!*s)
			break;
		char e[7];
		fwrite(e, 1, escape((unsigned char)*s++, e), f);
	}
	fputc('"', f);
}

size_t ck_json_str_len(const char *s)
{
	size_t n = 2;
	for (; *s; s++) {
		char e[7];
		n += plain((unsigned char)*s) ? 1 : escape((unsigned char)*s, e);
	}
	return n;
}

char *ck_json_put_str(char *dst, const char *s)
{
	*dst++ = '"';
	for (; *s; s++) {
		if (plain((unsigned char)*s)) {
			*dst++ = *s;
		} else {
			char e[7];
			size_t n = escape((unsigned char)*s, e);
			memcpy(dst, e, n);
			dst += n;
		}
	}
	*dst++ = '"';
	return dst;
}
