/* A source opened and planned through its mappings: the catalog, the
 * mappings, the plan and the per-rank selection. Shared by the CLI verbs,
 * the FUSE daemon and libckptfs. */
#ifndef CK_VIEW_OPEN_H
#define CK_VIEW_OPEN_H

#include "../ckpt/catalog.h"
#include "../map/mapping.h"
#include "../plan/plan.h"
#include "../util/error.h"

struct ck_view {
	int64_t rank;  /* -1: not a per-rank view */
	int64_t world; /* >0: group-sharded over this many processes */
	/* --ranks: one plan per rank (rank_plans, ranks) and plan = their union,
	 * rank_idx[k][i] = rank k's target i in it */
	struct ck_plan **rank_plans;
	int64_t *ranks;
	uint32_t **rank_idx;
	size_t n_ranks;
	struct ck_catalog *cat;
	struct ck_mapping *maps[16];
	int n_maps;
	struct ck_plan *plan;
};

#define CK_MAX_MAPPINGS 16

/* What selects a process's part of the view, shared by the verbs:
 *   --mapping MAP (repeatable), --mesh AXES --rank R (a per-rank view through
 *   the last mapping with partition or select rules), --shard-groups
 *   [--world-size N] (whole dependency groups, balanced by bytes).
 * rank -1: from OMPI_COMM_WORLD_RANK or RANK; world 0: from
 * OMPI_COMM_WORLD_SIZE or WORLD_SIZE. */
#define CK_MAX_SETS 32
struct ck_view_set { /* --set NAME=VALUE, parsed */
	char name[129];
	long long val;
	int is_bool;
};
struct ck_view_args {
	char *maps[16];
	int n_maps;
	const char *mesh;
	int64_t rank, world;
	int shard_groups;
	const char *ranks; /* mount --ranks 0-7 | 0,2,5 | all: one daemon, rankR/ each */
	int state; /* --state: 0 all, 1 parameters only, 2 optimizer state only */
	struct ck_view_set sets[CK_MAX_SETS]; /* config values as mappings see them */
	int n_sets;
};
/* Add a --set NAME=VALUE (checked: a name, an integer or true/false). */
int ck_view_add_set(struct ck_view_args *a, const char *assignment, struct ck_err *err);
/* "all", "params" or "optimizer" (--state, state=): 0, 1, 2; -1 if none. */
int ck_state_parse(const char *text);
int ck_view_open(struct ck_view *v, const char *source, const struct ck_view_args *a,
		 struct ck_err *err);
/* Replace {rank}, {local_rank} and each mesh axis {tp}, {dp}, ... in path. */
int ck_subst_rank(const char *path, const char *mesh, int64_t rank, char *out, size_t n,
		  struct ck_err *err);
/* The rank from --rank, or the launcher's environment; -1 if none. */
int64_t ck_env_rank(int64_t given);
/* The launcher's local rank (size 0) or local world size (size 1); -1 if none. */
int64_t ck_env_local(int size);
/* The world size from --world-size, or the launcher's environment; 0 if none. */
int64_t ck_env_world(int64_t given);
void ck_view_close(struct ck_view *v);
/* --mapping NAME: the file it names, or a shipped mapping by name (with or
 * without .json) in $CKPTFS_MAPPING_PATH, the installed share directory and
 * the source tree's mappings/; CK_E_MAPPING when there is none. */
int ck_mapping_resolve(const char *arg, char *out, size_t n, struct ck_err *err);
/* The directories searched, in order (buf holds the environment's copy). */
int ck_mapping_dirs(const char **dirs, int max, char *buf, size_t n);
#endif
