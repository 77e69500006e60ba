/* Open-addressing hash map from NUL-terminated strings (not owned; they must
 * outlive the map) to uint32 values. Used wherever key lookup must stay O(1):
 * a 100,000-key checkpoint must never cost O(n^2). */
#ifndef CK_STRMAP_H
#define CK_STRMAP_H

#include <stddef.h>
#include <stdint.h>

struct ck_strmap_slot {
	const char *key; /* NULL: empty */
	uint32_t hash;	 /* low bits of the key's hash: most probes end without strcmp */
	uint32_t val;
};

struct ck_strmap {
	struct ck_strmap_slot *slots;
	size_t cap; /* power of two */
	size_t len;
};

uint64_t ck_hash_str(const char *s);
int ck_strmap_init(struct ck_strmap *m, size_t expected);
void ck_strmap_free(struct ck_strmap *m);
/* Insert key -> val. Returns 0 when inserted, 1 when the key was already
 * present (*existing gets its value, the map is unchanged), -1 on ENOMEM. */
int ck_strmap_put(struct ck_strmap *m, const char *key, uint32_t val, uint32_t *existing);
/* Returns 0 and sets *val when found, -1 when absent. */
int ck_strmap_get(const struct ck_strmap *m, const char *key, uint32_t *val);

/* The same with the key's hash computed once by the caller: a name looked
 * up in two maps, or many inserted with the slot of a later one prefetched
 * (a map of 100,000 names is a cache miss per probe; a run of prefetches
 * overlaps them). h must be ck_strmap_hash(key). */
uint32_t ck_strmap_hash(const char *key);
/* The same for a key whose length n (strlen) the caller has. */
uint32_t ck_strmap_hash_n(const char *key, size_t n);
int ck_strmap_put_h(struct ck_strmap *m, const char *key, uint32_t h, uint32_t val,
		    uint32_t *existing);
int ck_strmap_get_h(const struct ck_strmap *m, const char *key, uint32_t h, uint32_t *val);
/* A hint only: the first slot key's probe would read. */
void ck_strmap_prefetch(const struct ck_strmap *m, uint32_t h);

/* Keys 0..n-1 (name(ctx, j) gives key j) taken in order: ck_strmap_ahead
 * returns key i's hash, having hashed the keys up to CK_STRMAP_AHEAD - 1
 * past it and prefetched their slots. Call it for i = 0, 1, 2, ... */
#define CK_STRMAP_AHEAD 16
struct ck_strmap_window {
	uint32_t h[CK_STRMAP_AHEAD];
};
uint32_t ck_strmap_ahead(const struct ck_strmap *m, struct ck_strmap_window *w, size_t i,
			 size_t n, const char *(*name)(const void *ctx, size_t j), const void *ctx);

#endif
