/* Per-rank views. A device mesh (named axes with sizes, row-major in the
 * order written, so the last axis varies fastest) and a rank pick each
 * target's local shard through the mapping's partition rules; the shard is
 * more layout algebra (narrow, or view+narrow+view for block-wise splits), so
 * a rank reads only its bytes. Each local target keeps Megatron's
 * ShardedTensor description: global shape, fragments (local and global
 * offsets), fragments per axis and a replica id. */
#ifndef CK_SHARD_H
#define CK_SHARD_H

#include "../map/mapping.h"
#include "plan.h"

#define CK_MAX_AXES 8
/* ranks in a mesh: far past any cluster, and a product that stays exact */
#define CK_MAX_WORLD (1 << 24)

struct ck_mesh {
	int n;
	char name[CK_MAX_AXES][16];
	int64_t size[CK_MAX_AXES];
};

struct ck_fragment {
	int64_t local_off[CK_MAX_DIMS], global_off[CK_MAX_DIMS], shape[CK_MAX_DIMS];
};

struct ck_shard_info {
	int64_t global_shape[CK_MAX_DIMS];
	int64_t axis_frag[CK_MAX_DIMS]; /* fragments of the global tensor along each dim */
	struct ck_fragment *frag;
	int n_frag;
	int64_t replica_id[CK_MAX_AXES]; /* coordinates over the axes it is not split on */
	int n_replica;
	int partition_rule; /* 0: replicated */
	char *global_name;  /* the name before a select rule renumbered it, or NULL */
};

/* "tp=8", "dp=2,tp=8", ... */
int ck_mesh_parse(const char *text, struct ck_mesh *m, struct ck_err *err);
int64_t ck_mesh_world(const struct ck_mesh *m);
/* Replace every target by its shard for `rank` under the partition rules of
 * `rules` (NULL: all replicated). */
int ck_plan_shard(struct ck_plan *p, const struct ck_mapping *rules, const struct ck_mesh *m,
		  int64_t rank, struct ck_err *err);

/* What sharding learns from the whole plan, the same for every rank: which
 * select rules match some target, their splits' counts where a rule gives
 * none, which partition rules some target uses, what each select rule's
 * pattern captures from each target's name. --ranks works it out once,
 * then shards for each rank only the targets it keeps. */
/* What select rule k says of a target's own name (select.c): the split's
 * value (INT64_MIN: no match; -1: not a decimal integer; 0 for a stage
 * rule), and where the split's capture lies in the name. */
struct ck_sel_cell {
	int64_t v;
	uint32_t pos, len;
};

struct ck_shard_prep {
	uint64_t sel_hit;	  /* bit k: select rule k matches a target */
	int64_t sel_count[64];	  /* select rule k's count taken from the plan */
	unsigned char *part_used; /* per partition rule */
	struct ck_sel_cell *sel_tab; /* per target, per select rule (select.c) */
	size_t sel_rows;	  /* the plan's targets: sel_tab's rows */
};
int ck_shard_prepare(const struct ck_plan *p, const struct ck_mapping *rules,
		     const struct ck_mesh *m, struct ck_shard_prep *prep, struct ck_err *err);
void ck_shard_prep_free(struct ck_shard_prep *prep);
/* Rank `rank`'s plan, made from p (left as it is; prep from ck_shard_prepare
 * over it): the targets the rank keeps, copied, then sharded. The same plan
 * and the same errors as ck_plan_shard of a copy of p, without copying the
 * targets other ranks keep. */
int ck_plan_shard_copy(const struct ck_plan *p, const struct ck_shard_prep *prep,
		       const struct ck_mapping *rules, const struct ck_mesh *m, int64_t rank,
		       struct ck_plan **out, struct ck_err *err);

/* A whole view (no mesh): pad the dims of targets whose partition rule has
 * "pad": EXPR to a multiple of EXPR, as a one-rank mesh would. */
int ck_plan_pad(struct ck_plan *p, const struct ck_mapping *rules, struct ck_err *err);

/* Group sharding (d9d's Shard): whole dependency groups per process,
 * balanced by output bytes (largest first, each to the least loaded rank;
 * ties to the lower rank), the same on every process. rank_of[g] for every
 * group of p (malloc'd). */
int ck_groups_assign(const struct ck_plan *p, int64_t world, uint32_t **rank_of,
		     struct ck_err *err);
/* Keep only rank's groups. */
int ck_plan_shard_groups(struct ck_plan *p, int64_t world, int64_t rank, struct ck_err *err);

/* Write one field of the description as JSON: "global_shape", "fragments",
 * "axis_fragmentations" or "replica_id". */
#include <stdio.h>
void ck_shard_fput_json(FILE *f, const struct ck_shard_info *s, int ndim, const char *field);

#endif
