#include "jsonw.h"

#include <stdint.h>
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

/* Whether any of the 8 bytes in w needs an escape: below 0x20 (NUL
 * included), '"' or '\\'. Each test is exact ("has a zero byte" is never
 * true of a word without one), so a clean word goes out whole. */
static int word_needs_escape(uint64_t w)
{
	const uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
	uint64_t q = w ^ (ones * '"'), bs = w ^ (ones * '\\');
	return ((((w - ones * 0x20) & ~w) | ((q - ones) & ~q) | ((bs - ones) & ~bs)) & highs) != 0;
}

char *ck_json_put_str(char *dst, const char *s, size_t n)
{
	*dst++ = '"';
	size_t i = 0;
	/* names are plain almost always: 8 bytes a step while they are */
	while (i + 8 <= n) {
		uint64_t w;
		memcpy(&w, s + i, 8);
		if (word_needs_escape(w))
			break;
		memcpy(dst, &w, 8);
		dst += 8;
		i += 8;
	}
	for (; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (plain(c)) {
			*dst++ = (char)c;
		} else {
			char e[7];
			size_t k = escape(c, e);
			memcpy(dst, e, k);
			dst += k;
		}
	}
	*dst++ = '"';
	return dst;
}
