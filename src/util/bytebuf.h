/* A growable byte buffer for the writers of literal bytes (pickles, zip
 * records, GGUF headers): appends never fail on the spot; an allocation
 * failure is remembered in oom and the writer checks it once at the end. */
#ifndef CK_BYTEBUF_H
#define CK_BYTEBUF_H

#include <stddef.h>
#include <stdint.h>

struct ck_buf {
	unsigned char *p;
	size_t n, cap;
	int oom;
};

void ck_buf_put(struct ck_buf *b, const void *p, size_t n);
void ck_buf_free(struct ck_buf *b);

/* The one-byte and little-endian appends are inline: a pickle or zip
 * directory of 92,000 tensors makes millions of them. A failed growth
 * leaves cap == n, so they fall through to ck_buf_put, which drops them. */
static inline void ck_buf_byte(struct ck_buf *b, unsigned v)
{
	unsigned char c = (unsigned char)v;
	if (b->n < b->cap)
		b->p[b->n++] = c;
	else
		ck_buf_put(b, &c, 1);
}

/* v as `bytes` little-endian bytes (at most 8) */
static inline void ck_buf_le(struct ck_buf *b, uint64_t v, int bytes)
{
	unsigned char t[8];
	for (int i = 0; i < bytes; i++)
		t[i] = (unsigned char)(v >> (8 * i));
	if ((size_t)bytes <= b->cap - b->n) {
		for (int i = 0; i < bytes; i++)
			b->p[b->n + (size_t)i] = t[i];
		b->n += (size_t)bytes;
	} else {
		ck_buf_put(b, t, (size_t)bytes);
	}
}

#endif
