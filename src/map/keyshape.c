#include "keyshape.h"

#include <stdlib.h>
#include <string.h>

static int is_digit(char c)
{
	return c >= '0' && c <= '9';
}

/* key with each non-empty all-digit segment replaced by "0" */
static char *shape_of(const char *key)
{
	size_t len = strlen(key), k = 0;
	char *s = malloc(len + 1);
	if (!s)
		return NULL;
	for (size_t i = 0; i <= len;) {
		size_t j = i;
		while (key[j] && key[j] != '.')
			j++;
		int digits = j > i;
		for (size_t t = i; t < j && digits; t++)
			digits = is_digit(key[t]);
		if (digits) {
			s[k++] = '0';
		} else {
			memcpy(s + k, key + i, j - i);
			k += j - i;
		}
		if (!key[j])
			break;
		s[k++] = '.';
		i = j + 1;
	}
	s[k] = '\0';
	return s;
}

int ck_keyshapes_id(struct ck_keyshapes *ks, const char *key, uint32_t *id)
{
	if (!ks->map.cap && ck_strmap_init(&ks->map, 64) < 0)
		return -1;
	char *s = shape_of(key);
	if (!s)
		return -1;
	uint32_t found;
	if (ck_strmap_get(&ks->map, s, &found) == 0) {
		free(s);
		*id = found;
		return 0;
	}
	if (ks->n == ks->cap) {
		size_t c = ks->cap ? ks->cap * 2 : 64;
		char **n = realloc(ks->shape, c * sizeof *n);
		if (!n) {
			free(s);
			return -1;
		}
		ks->shape = n;
		ks->cap = c;
	}
	if (ck_strmap_put(&ks->map, s, (uint32_t)ks->n, NULL) < 0) {
		free(s);
		return -1;
	}
	ks->shape[ks->n] = s;
	*id = (uint32_t)ks->n++;
	return 0;
}

void ck_keyshapes_free(struct ck_keyshapes *ks)
{
	for (size_t i = 0; i < ks->n; i++)
		free(ks->shape[i]);
	free(ks->shape);
	ck_strmap_free(&ks->map);
	memset(ks, 0, sizeof *ks);
}

int ck_pattern_shape_exact(const struct ck_pattern *p)
{
	for (int t = 0; t < p->n; t++) {
		const char *l = p->tok[t].lit;
		for (size_t i = 0; l && l[i];) {
			size_t j = i;
			int digit = 0, other = 0;
			for (; l[j] && l[j] != '.'; j++)
				*(is_digit(l[j]) ? &digit : &other) = 1;
			if (digit && !other)
				return 0;
			i = l[j] ? j + 1 : j;
		}
	}
	return 1;
}

int ck_shape_may_match(const struct ck_pattern *p, const struct ck_keyshapes *ks, uint32_t id,
		       struct ck_shape_memo *memo)
{
	if (!p->shape_exact || id >= ks->n)
		return 1;
	if (id >= memo->n) {
		size_t n = ks->n;
		uint8_t *v = realloc(memo->v, n);
		if (!v)
			return -1;
		memset(v + memo->n, 0, n - memo->n);
		memo->v = v;
		memo->n = n;
	}
	if (!memo->v[id]) {
		struct ck_binding b;
		int r = ck_pattern_match(p, ks->shape[id], &b);
		if (r < 0)
			return -1;
		ck_binding_clear(&b);
		memo->v[id] = r ? 2 : 1;
	}
	return memo->v[id] == 2;
}

void ck_shape_memo_free(struct ck_shape_memo *memo)
{
	free(memo->v);
	memo->v = NULL;
	memo->n = 0;
}
