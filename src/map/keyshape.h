/* Key shapes: a key with every all-digit segment written "0"
 * ("model.layers.17.mlp.experts.203.up_proj.weight" ->
 * "model.layers.0.mlp.experts.0.up_proj.weight"). A 90,000-key MoE has a few
 * dozen shapes, and for most patterns whether a key matches depends only on
 * its shape: the planner tries each such pattern once per shape, not once
 * per key, and runs the real match (for the captures) only on keys whose
 * shape matched. */
#ifndef CK_KEYSHAPE_H
#define CK_KEYSHAPE_H

#include <stddef.h>
#include <stdint.h>

#include "../util/strmap.h"
#include "pattern.h"

struct ck_keyshapes {
	struct ck_strmap map;
	char **shape; /* by id, owned */
	size_t n, cap;
};

/* The id of key's shape (a new shape gets the next id). -1 on ENOMEM. */
int ck_keyshapes_id(struct ck_keyshapes *ks, const char *key, uint32_t *id);
/* ids[i] = the id of key(ctx, i)'s shape for every i in [0, n), new shapes
 * numbered in order of first appearance as ck_keyshapes_id in a loop would;
 * on up to `threads` threads (pieces shaped into maps of their own, whose
 * shapes then join ks in order). -1 on ENOMEM. */
int ck_keyshapes_ids(struct ck_keyshapes *ks, size_t n, const char *(*key)(const void *ctx, size_t i),
		     const void *ctx, uint32_t *ids, int threads);
void ck_keyshapes_free(struct ck_keyshapes *ks);

/* 1 when p matches a key exactly when it matches the key's shape: no literal
 * text of p has a dot-free run made of digits alone ("layers.0.", "fc.1"),
 * so an all-digit key segment can only lie inside a capture, where "0"
 * matches as well as any other number. 0 when p must see the key itself. */
int ck_pattern_shape_exact(const struct ck_pattern *p);

/* Per-pattern memo of the verdict for each shape id. */
struct ck_shape_memo {
	uint8_t *v; /* 0 not tried, 1 no match, 2 match */
	size_t n;
};

/* Whether p can match the key of shape id: 1 maybe (run the real match), 0
 * certainly not, -1 ENOMEM. Patterns that are not shape-exact always say 1. */
int ck_shape_may_match(const struct ck_pattern *p, const struct ck_keyshapes *ks, uint32_t id,
		       struct ck_shape_memo *memo);
/* Every verdict of a shape-exact p decided at once, for loops over many
 * keys that read memo->v[id] (2: may match) themselves. -1 ENOMEM. */
int ck_shape_memo_fill(const struct ck_pattern *p, const struct ck_keyshapes *ks,
		       struct ck_shape_memo *memo);
void ck_shape_memo_free(struct ck_shape_memo *memo);

#endif
