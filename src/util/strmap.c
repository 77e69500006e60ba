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

/* The map's own hash: eight bytes per step (keys of a large checkpoint run
 * 40-80 bytes and are hashed several times each while planning), mixed so
 * that the low bits, which pick the slot, depend on every byte. Not
 * ck_hash_str: that one is part of the served names and stays FNV-1a. */
uint32_t ck_strmap_hash(const char *s)
{
	return ck_strmap_hash_n(s, strlen(s));
}

uint32_t ck_strmap_hash_n(const char *s, size_t n)
{
	uint64_t h = 0x9e3779b97f4a7c15ULL ^ n;
	for (; n >= 8; s += 8, n -= 8) {
		uint64_t w;
		memcpy(&w, s, 8);
		h = (h ^ w) * 0xbf58476d1ce4e5b9ULL;
		h ^= h >> 31;
	}
	uint64_t w = 0;
	memcpy(&w, s, n);
	h = (h ^ w) * 0x94d049bb133111ebULL;
	h ^= h >> 29;
	h *= 0xbf58476d1ce4e5b9ULL;
	return (uint32_t)(h ^ (h >> 32));
}

int ck_strmap_init(struct ck_strmap *m, size_t expected)
{
	size_t cap = 16; /* at most 3/4 full (put grows it past that) */
	while (cap < expected + expected / 3 + 1)
		cap *= 2;
	m->slots = calloc(cap, sizeof *m->slots);
	m->cap = m->slots ? cap : 0;
	m->len = 0;
	return m->slots ? 0 : -1;
}

void ck_strmap_free(struct ck_strmap *m)
{
	free(m->slots);
	m->slots = NULL;
	m->cap = m->len = 0;
}

/* The slot holding key, or the empty slot where it would go. The stored hash
 * is the low 32 bits, the probe start its low bits: equal keys have equal
 * stored hashes, so a mismatch skips the string compare. */
static size_t slot_of(const struct ck_strmap *m, const char *key, uint32_t h)
{
	size_t i = h & (m->cap - 1);
	while (m->slots[i].key && (m->slots[i].hash != h || strcmp(m->slots[i].key, key) != 0))
		i = (i + 1) & (m->cap - 1);
	return i;
}

static int grow(struct ck_strmap *m)
{
	struct ck_strmap n;
	if (ck_strmap_init(&n, m->cap) < 0) /* doubles the capacity */
		return -1;
	for (size_t i = 0; i < m->cap; i++) {
		const struct ck_strmap_slot *s = &m->slots[i];
		if (!s->key)
			continue;
		size_t j = s->hash & (n.cap - 1); /* keys are distinct: first empty slot */
		while (n.slots[j].key)
			j = (j + 1) & (n.cap - 1);
		n.slots[j] = *s;
		n.len++;
	}
	ck_strmap_free(m);
	*m = n;
	return 0;
}

int ck_strmap_put(struct ck_strmap *m, const char *key, uint32_t val, uint32_t *existing)
{
	return ck_strmap_put_h(m, key, ck_strmap_hash(key), val, existing);
}

int ck_strmap_put_h(struct ck_strmap *m, const char *key, uint32_t h, uint32_t val,
		    uint32_t *existing)
{
	if ((m->len + 1) * 4 > m->cap * 3 && grow(m) < 0)
		return -1;
	size_t i = slot_of(m, key, h);
	if (m->slots[i].key) {
		if (existing)
			*existing = m->slots[i].val;
		return 1;
	}
	m->slots[i] = (struct ck_strmap_slot){key, h, val};
	m->len++;
	return 0;
}

int ck_strmap_get(const struct ck_strmap *m, const char *key, uint32_t *val)
{
	return ck_strmap_get_h(m, key, ck_strmap_hash(key), val);
}

int ck_strmap_get_h(const struct ck_strmap *m, const char *key, uint32_t h, uint32_t *val)
{
	if (!m->cap)
		return -1;
	size_t i = slot_of(m, key, h);
	if (!m->slots[i].key)
		return -1;
	*val = m->slots[i].val;
	return 0;
}

void ck_strmap_prefetch(const struct ck_strmap *m, uint32_t h)
{
	if (m->cap)
		__builtin_prefetch(&m->slots[h & (m->cap - 1)], 1);
}

uint32_t ck_strmap_ahead(const struct ck_strmap *m, struct ck_strmap_window *w, size_t i,
			 size_t n, const char *(*name)(const void *ctx, size_t j), const void *ctx)
{
	for (size_t j = i ? i + CK_STRMAP_AHEAD - 1 : 0; j < i + CK_STRMAP_AHEAD && j < n; j++) {
		uint32_t h = ck_strmap_hash(name(ctx, j));
		w->h[j % CK_STRMAP_AHEAD] = h;
		ck_strmap_prefetch(m, h);
	}
	return w->h[i % CK_STRMAP_AHEAD];
}
