/* The length of the run of "plain" string bytes at s: printable ASCII
 * (0x20..0x7F) other than '"' and '\\', the bytes a JSON string can hold
 * with nothing to check or decode. Headers and indexes are almost all such
 * bytes, so the strict scan and the streaming reader skip them 8 at a time
 * and look at the others one by one; of those, the bytes >= 0x80 must begin
 * a valid UTF-8 sequence (ck_utf8_seq, shared by both). */
#ifndef CK_JSON_PLAIN_H
#define CK_JSON_PLAIN_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline int ck_json_plain_byte(unsigned char c)
{
	return c >= 0x20 && c < 0x80 && c != '"' && c != '\\';
}

static inline size_t ck_json_plain_run(const char *s, size_t n)
{
	const uint64_t ones = 0x0101010101010101ull, high = 0x8080808080808080ull;
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		uint64_t w, q, b;
		memcpy(&w, s + i, 8);
		q = w ^ (ones * '"');  /* a '"' byte becomes 0 */
		b = w ^ (ones * '\\'); /* a '\\' byte becomes 0 */
		/* (x - 0x01..) & ~x & 0x80.. is non-zero iff x has a zero byte;
		 * with 0x20 instead of 0x01, iff a byte is below 0x20; a byte
		 * >= 0x80 shows in w itself */
		uint64_t bad = ((q - ones) & ~q) | ((b - ones) & ~b) | ((w - ones * 0x20) & ~w) | w;
		if (bad & high) {
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
			/* the lowest flagged byte is the first one that is not
			 * plain: the tests' false alarms (borrows) only ever lie
			 * above a byte that really is 0x00 or below 0x20 */
			return i + (size_t)__builtin_ctzll(bad & high) / 8;
#else
			break;
#endif
		}
	}
	while (i < n && ck_json_plain_byte((unsigned char)s[i]))
		i++;
	return i;
}

/* Length of the valid UTF-8 sequence at s (n >= 1 bytes left), or 0 if
 * invalid: overlong forms, surrogates and code points above U+10FFFF are
 * refused. */
static inline size_t ck_utf8_seq(const unsigned char *s, size_t n)
{
	unsigned c = s[0];
	if (c < 0x80)
		return 1;
	size_t len;
	unsigned cp, min;
	if ((c & 0xE0) == 0xC0) {
		len = 2, cp = c & 0x1F, min = 0x80;
	} else if ((c & 0xF0) == 0xE0) {
		len = 3, cp = c & 0x0F, min = 0x800;
	} else if ((c & 0xF8) == 0xF0) {
		len = 4, cp = c & 0x07, min = 0x10000;
	} else {
		return 0;
	}
	if (len > n)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xC0) != 0x80)
			return 0;
		cp = (cp << 6) | (s[i] & 0x3F);
	}
	if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
		return 0;
	return len;
}

#endif
