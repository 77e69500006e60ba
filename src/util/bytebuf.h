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
void ck_buf_byte(struct ck_buf *b, unsigned v);
/* v as `bytes` little-endian bytes (at most 8) */
void ck_buf_le(struct ck_buf *b, uint64_t v, int bytes);
void ck_buf_free(struct ck_buf *b);

#endif
