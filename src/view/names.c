#include "names.h"

#include <stdint.h>
#include <string.h>

#include "../util/strmap.h"

#define KEEP_BYTES 237

static int needs_escape(unsigned char c)
{
	return c == '%' || c == '/' || c < 0x20 || c == 0x7F;
}

static const char hex[] = "0123456789ABCDEF";

#define ONES 0x0101010101010101ull
#define HIGHS 0x8080808080808080ull

/* Whether any of 8 key bytes needs escaping: a byte below 0x20, 0x7F, '%'
 * or '/' (exact: each test below is the classic "has a byte less than n"
 * word test, which reports no byte that is not there). */
static int word_needs_escape(uint64_t w)
{
	uint64_t below = (w - ONES * 0x20) & ~w & HIGHS;
	uint64_t x7f = w ^ (ONES * 0x7F), pct = w ^ (ONES * '%'), sl = w ^ (ONES * '/');
	uint64_t eq = ((x7f - ONES) & ~x7f) | ((pct - ONES) & ~pct) | ((sl - ONES) & ~sl);
	return ((below | eq) & HIGHS) != 0;
}

/* Length of key when every byte of it is kept as it is, else SIZE_MAX:
 * almost every key, checked 8 bytes at a time (a 92,000-target view spent
 * most of its names' time in the byte loop below). */
static size_t plain_length(const char *key)
{
	size_t n = strlen(key), i = 0;
	for (uint64_t w; i + 8 <= n; i += 8) {
		memcpy(&w, key + i, 8);
		if (word_needs_escape(w))
			return SIZE_MAX;
	}
	for (; i < n; i++)
		if (needs_escape((unsigned char)key[i]))
			return SIZE_MAX;
	return n;
}

size_t ck_escape_name(const char *key, size_t max, char *out)
{
	const char *whole = !strcmp(key, ".") ? "%2E" : !strcmp(key, "..") ? "%2E%2E" : NULL;
	if (!key[0])
		whole = "%00";
	if (whole) {
		strcpy(out, whole);
		return strlen(whole);
	}
	size_t plain = plain_length(key);
	if (plain <= max) {
		memcpy(out, key, plain + 1);
		return plain;
	}
	/* escape into out while it fits; past max only the cut point matters */
	size_t n = 0, keep = max - (CK_NAME_MAX - KEEP_BYTES);
	for (const unsigned char *p = (const unsigned char *)key; *p; p++) {
		size_t w = needs_escape(*p) ? 3 : 1;
		if (n + w > max) {
			n = max + 1; /* too long: cut below */
			break;
		}
		if (w == 3) {
			out[n] = '%';
			out[n + 1] = hex[*p >> 4];
			out[n + 2] = hex[*p & 15];
		} else {
			out[n] = (char)*p;
		}
		n += w;
	}
	if (n <= max) {
		out[n] = '\0';
		return n;
	}
	/* do not cut inside a UTF-8 sequence or a %XX escape */
	while (keep > 0 && ((unsigned char)out[keep] & 0xC0) == 0x80)
		keep--;
	for (size_t back = 1; back <= 2 && keep >= back; back++)
		if (out[keep - back] == '%')
			keep -= back;
	uint64_t h = ck_hash_str(key);
	out[keep++] = '%';
	out[keep++] = '~';
	for (int i = 15; i >= 0; i--)
		out[keep++] = "0123456789abcdef"[(h >> (4 * i)) & 15];
	out[keep] = '\0';
	return keep;
}
