#include "strmap.h"

#include <stdlib.h>
#include <string.h>

uint64_t ck_hash_str(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ULL; /* FNV-1a 64 */
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 0x100000001b3ULL;
	return h;
}

int ck_strmap_init(struct ck_strmap *m, size_t expected)
{
	size_t cap = 16;
	while (cap < expected * 2 + 1)
		cap *= 2;
	m->keys = calloc(cap, sizeof *m->keys);
	m->vals = calloc(cap, sizeof *m->vals);
	m->cap = cap;
	m->len = 0;
	if (!m->keys || !m->vals) {
		ck_strmap_free(m);
		return -1;
	}
	return 0;
}

void ck_strmap_free(struct ck_strmap *m)
{
	free(m->keys);
	free(m->vals);
	m->keys = NULL;
	m->vals = NULL;
	m->cap = m->len = 0;
}

static size_t slot_of(const struct ck_strmap *m, const char *key)
{
	size_t i = (size_t)ck_hash_str(key) & (m->cap - 1);
	while (m->keys[i] && strcmp(m->keys[i], key) != 0)
		i = (i + 1) & (m->cap - 1);
	return i;
}

static int grow(struct ck_strmap *m)
{
	struct ck_strmap n;
	if (ck_strmap_init(&n, m->cap) < 0) /* doubles the capacity */
		return -1;
	for (size_t i = 0; i < m->cap; i++)
		if (m->keys[i]) {
			size_t j = slot_of(&n, m->keys[i]);
			n.keys[j] = m->keys[i];
			n.vals[j] = m->vals[i];
			n.len++;
		}
	ck_strmap_free(m);
	*m = n;
	return 0;
}

int ck_strmap_put(struct ck_strmap *m, const char *key, uint32_t val, uint32_t *existing)
{
	if ((m->len + 1) * 2 > m->cap && grow(m) < 0)
		return -1;
	size_t i = slot_of(m, key);
	if (m->keys[i]) {
		if (existing)
			*existing = m->vals[i];
		return 1;
	}
	m->keys[i] = key;
	m->vals[i] = val;
	m->len++;
	return 0;
}

int ck_strmap_get(const struct ck_strmap *m, const char *key, uint32_t *val)
{
	if (!m->cap)
		return -1;
	size_t i = slot_of(m, key);
	if (!m->keys[i])
		return -1;
	*val = m->vals[i];
	return 0;
}
