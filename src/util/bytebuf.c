#include "bytebuf.h"

#include <stdlib.h>
#include <string.h>

void ck_buf_put(struct ck_buf *b, const void *p, size_t n)
{
	if (b->oom || !n)
		return;
	if (n > b->cap - b->n) {
		size_t cap = b->cap ? b->cap : 4096;
		while (cap - b->n < n)
			cap *= 2;
		unsigned char *np = realloc(b->p, cap);
		if (!np) {
			b->oom = 1;
			b->cap = b->n; /* the inline appends come here, and stop */
			return;
		}
		b->p = np;
		b->cap = cap;
	}
	memcpy(b->p + b->n, p, n);
	b->n += n;
}

void ck_buf_free(struct ck_buf *b)
{
	free(b->p);
	memset(b, 0, sizeof *b);
}
