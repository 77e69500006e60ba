#include "leftout.h"

#include <stdlib.h>
#include <string.h>

/* Room for one more entry. */
static int grow(struct ck_leftout *lo)
{
	if (lo->n < lo->cap)
		return 0;
	size_t c = lo->cap ? 2 * lo->cap : 16;
	struct ck_leftout_entry *ne = realloc(lo->e, c * sizeof *ne);
	if (!ne)
		return -1;
	lo->e = ne;
	lo->cap = c;
	return 0;
}

int ck_leftout_add(struct ck_leftout *lo, const char *key, const char *what)
{
	lo->total++;
	if (lo->n == CK_LEFTOUT_KEEP)
		return 0;
	if (grow(lo) < 0)
		return -1;
	char *k = strdup(key), *w = strdup(what);
	if (!k || !w) {
		free(k);
		free(w);
		return -1;
	}
	lo->e[lo->n++] = (struct ck_leftout_entry){k, w};
	return 0;
}

void ck_leftout_free(struct ck_leftout *lo)
{
	for (size_t i = 0; i < lo->n; i++) {
		free(lo->e[i].key);
		free(lo->e[i].what);
	}
	free(lo->e);
	memset(lo, 0, sizeof *lo);
}
