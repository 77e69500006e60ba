/* Internals shared by the per-rank planning files (shard.c: partition
 * rules; select.c: select rules). */
#ifndef CK_SHARD_INT_H
#define CK_SHARD_INT_H

#include "../map/expr.h"
#include "shard.h"

/* The axis named name, or -1. */
int ck_mesh_axis(const struct ck_mesh *m, const char *name);

/* What `require` and `count` expressions see. */
struct req_ctx {
	const struct ck_mesh *m;
	const cJSON *config;
	const int64_t *coord; /* this rank's position on each axis */
};

/* Names in `require` and `count`: mesh axis sizes (an axis not in the mesh
 * is 1), then config.json values. */
int ck_shard_lookup(void *vctx, const char *name, struct ck_xval *out, struct ck_err *err);

/* Apply the select rules (select.c): drop the targets this rank does not
 * hold, rename renumbered ones; sel_axes[i] are the axes target i is placed
 * on, global[i] its name before renumbering (or NULL), *model_axes the axes
 * some select rule places any target of the whole model on. prep (or NULL)
 * holds what the whole plan says when p is the part of it a rank keeps,
 * rows[i] the whole plan's index of p's target i. */
int ck_select_targets(struct ck_plan *p, const struct ck_shard_prep *prep,
		      const struct ck_mapping *rules, const struct ck_mesh *m, const char *path,
		      const uint32_t *rows, struct req_ctx *rc, unsigned **sel_axes, char ***global,
		      unsigned *model_axes, struct ck_err *err);
/* The same decision without a change to p: keep[i], whether this rank
 * holds target i (the same errors, in the same order). */
int ck_select_keep(const struct ck_plan *p, const struct ck_shard_prep *prep,
		   const struct ck_mapping *rules, const struct ck_mesh *m, const char *path,
		   struct req_ctx *rc, unsigned char *keep, struct ck_err *err);
/* The select rules' part of a ck_shard_prep. */
int ck_select_prepare(const struct ck_plan *p, const struct ck_mapping *rules,
		      const struct ck_mesh *m, struct ck_shard_prep *prep, struct ck_err *err);

#endif
