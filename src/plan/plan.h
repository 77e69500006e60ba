/* The plan: every target tensor of the (possibly chained) mapping, with its
 * dtype, shape and layout over source tensors, known before any data is read;
 * and the dependency groups, the smallest sets {sources -> targets} that can
 * be evaluated alone (connected components: targets sharing a source share a
 * group). The group is the unit of caching and of sharding across processes. */
#ifndef CK_PLAN_H
#define CK_PLAN_H

#include "../ckpt/catalog.h"
#include "../map/mapping.h"
#include "../util/strmap.h"
#include "../layout/layout.h"

struct ck_shard_info;

struct ck_target {
	char *name;
	struct ck_shard_info *shard; /* per-rank views only */
	struct ck_value v;
	uint64_t nbytes;
	uint32_t group;
	int stage, rule; /* what produced it (0, 0: identity) */
	int holes;	 /* padding: some elements come from no source (zeros) */
	/* >0: served as these ggml blocks (CK_GGML_Q8_0 / Q4_0, the GGUF view):
	 * the value is F32, quantized on read 32 elements along the last dim at
	 * a time; nbytes counts the blocks */
	uint32_t qtype;
	/* importance weights for the quantizer (-o gguf_imatrix), one per
	 * column of each matrix (stacked experts: per expert), or NULL; owned
	 * by the view */
	const float *qw;
	/* optimizer state (src/plan/optstate.h): the parameter target it
	 * follows and the state's name ("exp_avg"), NULL for a parameter;
	 * scalar: a per-parameter scalar ("step"), never split over ranks */
	char *param, *state;
	int scalar;
};

struct ck_group {
	uint32_t *targets, *sources;
	size_t n_targets, n_sources;
	uint64_t in_bytes, out_bytes;
};

struct ck_plan {
	const struct ck_catalog *cat;
	/* config.json as the mapping's expressions see it: the catalog's, or
	 * the effective one of a view that fills in a class's defaults */
	const cJSON *config;
	struct ck_target *t; /* natural name order */
	size_t n;
	struct ck_strmap by_name;
	struct ck_group *g;
	size_t n_groups;
	uint64_t total_bytes;
	/* lint: rules whose layout choices a shape cannot confirm (one line
	 * each, naming the mapping and the rule), unless the rule says
	 * "checked" */
	char **warnings;
	size_t n_warnings;
	/* how optimizer state targets are named ("state.{param}.{state}"), or
	 * NULL when the plan has none */
	char *opt_template;
};

/* A config.json value as expressions see it: top level, else under
 * text_config or quantization_config; booleans and integers as XV_INT,
 * strings, lists of integers. 1 when absent (or null), -1 with err. */
int ck_config_value(const cJSON *cfg, const char *name, struct ck_xval *out, struct ck_err *err);
/* Build the plan for maps applied in order (none: the identity view).
 * Fails with CK_E_MAPPING and a message naming the mapping file, the rule
 * and the key; nothing is read. A rule matching 4,096 keys or more runs
 * its instances on short-lived threads, one per CPU of the affinity mask,
 * joined before the rule's outputs are added in instance order: the plan,
 * its warnings and its first error are those of one thread. */
int ck_plan_build(const struct ck_catalog *cat, struct ck_mapping *const *maps, int n_maps,
		  struct ck_plan **out, struct ck_err *err);
/* The same on `threads` threads for every rule with two instances or more
 * (1: one thread; 0: as ck_plan_build). */
int ck_plan_build_threads(const struct ck_catalog *cat, struct ck_mapping *const *maps,
			  int n_maps, int threads, struct ck_plan **out, struct ck_err *err);
/* ck_plan_build with the mapping's expressions reading `config` (kept by
 * the plan: it must outlive it) in place of the catalog's config.json. */
int ck_plan_build_config(const struct ck_catalog *cat, const cJSON *config,
			 struct ck_mapping *const *maps, int n_maps, struct ck_plan **out,
			 struct ck_err *err);
void ck_plan_free(struct ck_plan *p);
const struct ck_target *ck_plan_find(const struct ck_plan *p, const char *name);
/* Recompute sizes and dependency groups after targets' layouts changed. */
int ck_plan_refresh(struct ck_plan *p, struct ck_err *err);
/* Keep only the targets with keep[i] set (freeing the others), renumber and
 * regroup. */
int ck_plan_retain(struct ck_plan *p, const unsigned char *keep, struct ck_err *err);
/* The union of plans over one catalog (the ranks of one daemon), for one
 * cache: a target with the same name and layout in several plans (a
 * replicated tensor) appears once. (*idx)[k][i] is plan k's target i in the
 * union; free with ck_plan_merge_free_idx. */
int ck_plan_merge(const struct ck_plan *const *plans, size_t n, struct ck_plan **out,
		  uint32_t ***idx, struct ck_err *err);
void ck_plan_merge_free_idx(uint32_t **idx, size_t n);
/* A copy of p's targets with keep[i] set (keep NULL: all), each (and each
 * warning) as in p, in p's order, regrouped. */
int ck_plan_copy_some(const struct ck_plan *p, const unsigned char *keep, struct ck_plan **out,
		      struct ck_err *err);
/* The file offset a target's bytes start at when they are one contiguous,
 * cast-free range of one source file (a rename: reads are answered from the
 * file itself), or -1. */
int64_t ck_plan_direct_offset(const struct ck_plan *plan, uint32_t t);
/* 1 when any window of a target's output reads about its own bytes of
 * source: every piece reads its source in output order, innermost
 * dimension contiguous (casts, renames with a cast, fused and sliced
 * blocks, padding, GGUF-quantized outputs; not transposes, block scales,
 * quantized sources). */
int ck_plan_in_order(const struct ck_plan *plan, uint32_t t);
/* In order, and cheap enough per byte that any read of it, small or large,
 * is best evaluated on its own: no padding (zero runs between pieces) and
 * no quantized output (whole blocks, a quantizer's cost). */
int ck_plan_streamable(const struct ck_plan *plan, uint32_t t);
/* Keep the parameters (which 1), the optimizer state (2) or both (0). */
int ck_plan_keep_state(struct ck_plan *p, int which, struct ck_err *err);
/* Cast every floating-point target to dt (convert --dtype). */
int ck_plan_cast_all(struct ck_plan *p, enum ck_dtype dt, struct ck_err *err);
/* The same for the targets decoded from quantized GGUF blocks only
 * (mount -o gguf_dequant=BF16), or all (only_quantized 0). */
int ck_plan_cast(struct ck_plan *p, enum ck_dtype dt, int only_quantized, struct ck_err *err);
/* A new plan over p's catalog holding a copy of each target whose dtype
 * widens() accepts, cast to `to` (npy_f32: BF16 and FP8 as F32 for NumPy);
 * (*of)[j] is the index in p of its target j (malloc'd). */
int ck_plan_widen(const struct ck_plan *p, int (*widens)(enum ck_dtype), enum ck_dtype to,
		  struct ck_plan **out, uint32_t **of, struct ck_err *err);

#endif
