#include "pickle_w.h"

#include <string.h>

void ck_pk_str(struct ck_buf *b, const char *s)
{
	ck_buf_byte(b, 'X');
	ck_buf_le(b, strlen(s), 4);
	ck_buf_put(b, s, strlen(s));
}

void ck_pk_global(struct ck_buf *b, const char *mod, const char *name)
{
	ck_buf_byte(b, 'c');
	ck_buf_put(b, mod, strlen(mod));
	ck_buf_byte(b, '\n');
	ck_buf_put(b, name, strlen(name));
	ck_buf_byte(b, '\n');
}

void ck_pk_int(struct ck_buf *b, uint64_t v)
{
	if (v < 256) {
		ck_buf_byte(b, 'K');
		ck_buf_byte(b, (unsigned)v);
	} else if (v < 65536) {
		ck_buf_byte(b, 'M');
		ck_buf_le(b, v, 2);
	} else if (v < 0x80000000u) {
		ck_buf_byte(b, 'J');
		ck_buf_le(b, v, 4);
	} else { /* LONG1: little-endian two's complement, positive */
		int n = 0;
		while (n < 8 && (v >> (8 * n)))
			n++;
		int extra = (v >> (8 * n - 1)) & 1; /* keep the sign bit clear */
		ck_buf_byte(b, 0x8a);
		ck_buf_byte(b, (unsigned)(n + extra));
		ck_buf_le(b, v, n);
		if (extra)
			ck_buf_byte(b, 0);
	}
}
