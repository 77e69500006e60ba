#include "strpool.h"

#include <stdlib.h>
#include <string.h>

static int push_block(struct ck_strpool *a, char *b)
{
	if (a->n == a->cap) {
		size_t cap = a->cap ? 2 * a->cap : 16;
		char **nb = realloc(a->blocks, cap * sizeof *nb);
		if (!nb)
			return -1;
		a->blocks = nb;
		a->cap = cap;
	}
	a->blocks[a->n++] = b;
	return 0;
}

char *ck_strpool_add(struct ck_strpool *a, const char *s, size_t len)
{
	if (len >= a->left) {
		size_t size = len + 1 > CK_STRPOOL_BLOCK ? len + 1 : CK_STRPOOL_BLOCK;
		char *b = malloc(size);
		if (!b || push_block(a, b) < 0) {
			free(b);
			return NULL;
		}
		if (size > CK_STRPOOL_BLOCK) { /* its own block: the current one stays current */
			memcpy(b, s, len);
			b[len] = '\0';
			return b;
		}
		a->at = b;
		a->left = size;
	}
	char *out = a->at;
	memcpy(out, s, len);
	out[len] = '\0';
	a->at += len + 1;
	a->left -= len + 1;
	return out;
}

int ck_strpool_take(struct ck_strpool *to, struct ck_strpool *from)
{
	if (to->n + from->n > to->cap) {
		size_t cap = to->n + from->n;
		char **nb = realloc(to->blocks, cap * sizeof *nb);
		if (!nb)
			return -1;
		to->blocks = nb;
		to->cap = cap;
	}
	if (from->n)
		memcpy(to->blocks + to->n, from->blocks, from->n * sizeof *from->blocks);
	to->n += from->n;
	free(from->blocks);
	*from = (struct ck_strpool){0};
	return 0;
}

void ck_strpool_free(struct ck_strpool *a)
{
	for (size_t i = 0; i < a->n; i++)
		free(a->blocks[i]);
	free(a->blocks);
	*a = (struct ck_strpool){0};
}
