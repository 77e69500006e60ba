/* "each" (mappings/README.md): the combinations of counted capture values a
 * rule's keys gave, one bit per combination, so a layer or an expert that
 * the source lacks is found without a second pass over the keys. */
#ifndef CK_EACH_H
#define CK_EACH_H

#include <stddef.h>
#include <stdint.h>

#include "../map/mapping.h"

struct ck_each_seen {
	const struct ck_each *each;
	int n;
	int64_t count[CK_MAX_CAPTURES];
	uint64_t total; /* combinations: the product of the counts */
	uint8_t *bits;
};

/* counts[k]: each[k]'s value. More combinations than 1024 + 64 per key
 * matched (or 2^24) is an error: an out-of-range config value would
 * otherwise cost work and memory for nothing. 0, or -1 with err. */
int ck_each_seen_init(struct ck_each_seen *s, const struct ck_each *each, int n,
		      const int64_t *counts, size_t n_keys, struct ck_err *err);
/* Marks b's combination: 0, or -1 with err when a counted value is not a
 * decimal integer below its count. Safe on several threads at once. */
int ck_each_seen_add(struct ck_each_seen *s, const struct ck_binding *b, struct ck_err *err);
/* The first combination at or after *pos that no key gave: 1 with vals
 * filled (and *pos at it), 0 when there is none. */
int ck_each_seen_gap(const struct ck_each_seen *s, uint64_t *pos, int64_t *vals);
/* "{L} = 3, {E} = 7 (each {L} below num_hidden_layers = 4, ...)" */
void ck_each_describe(const struct ck_each_seen *s, const int64_t *vals, char *buf, size_t cap);
void ck_each_seen_free(struct ck_each_seen *s);

#endif
