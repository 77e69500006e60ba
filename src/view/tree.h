/* The files a plan is served as (tensors/, npy/, the flat files of the
 * root, .ckptfs/plan.json), with every name and virtual file laid out from
 * shapes alone: no FUSE here, so the daemon and libckptfs share it. A mount
 * has one tree, or one per rank (--ranks), all read through one cache whose
 * plan is the union of theirs: a tree's target i is target cache_idx[i] of
 * that plan. */
#ifndef CK_TREE_H
#define CK_TREE_H

#include <pthread.h>
#include <stdint.h>

#include "../plan/dcp_out.h"
#include "../plan/flat.h"
#include "../plan/plan.h"
#include "../plan/torchzip.h"
#include "../util/strmap.h"
#include "../util/strpool.h"

struct ck_tree_file {
	char *name;
	const struct ck_vfile *v;
};

struct ck_tree_opts {
	const char *source;
	uint64_t max_shard_size; /* >0: model-0000k-of-0000n.safetensors + index */
	uint64_t part_size;	 /* per-rank views: model-rank-R-part-P.safetensors */
	int zip_crc;
	int no_direct; /* every target through the cache (plan.json says which are direct) */
	int no_stream; /* no read evaluated into its reply (plan.json says which are) */
	/* more root files, laid out by their owner in the cache's numbering:
	 * model.gguf, or its gguf-split pieces */
	const char *const *extra_names;
	const struct ck_vfile *extras;
	size_t n_extras;
	int dcp; /* also dcp/ (1) or torch_dist/ (2): a DCP directory of the targets */
	/* dcp/ laid out on its first use (ck_tree_sub_ready), not at build: a
	 * mount shows it by default, and 100k keys' archives cost a second */
	int dcp_lazy;
	int threads; /* for its files; 0: the cores, for a large plan */
};

struct ck_tree {
	const struct ck_plan *plan;
	const uint32_t *cache_idx; /* NULL: the cache's plan is this plan */
	int64_t rank;		   /* >= 0: a per-rank view (vLLM part files) */
	char dir[32];		   /* its directory under a --ranks mount ("rank3") */
	uint64_t base;		   /* its first inode (the FUSE front end's) */
	struct ck_flat flat;	   /* model.safetensors */
	struct ck_torchzip zip;	   /* pytorch_model.bin */
	struct ck_flat_set shards; /* with max_shard_size: shards + index */
	struct ck_flat *parts;	   /* per-rank views: vLLM's part files */
	size_t n_parts;
	struct ck_vfile config;
	struct ck_tree_file *roots;
	size_t n_roots;
	char **names, **npy_names;   /* escaped file names per target, */
	struct ck_strpool name_pool; /* which live here */
	/* npy_f32: per target, the cache's number of its F32 copy
	 * (UINT32_MAX: served as it is); NULL: none widened */
	const uint32_t *npy_wide;
	struct ck_strmap by_name, npy_by_name;
	/* .ckptfs/plan.json, built on its first use (ck_tree_plan_json) under
	 * plan_mu from the options kept here: a 100k-key plan's is 14 MB that
	 * a mount would otherwise write and hold before anyone asks for it */
	char *plan_json;
	size_t plan_json_len;
	char *plan_source;
	int plan_zip_crc, plan_no_direct, plan_no_stream;
	int plan_mu_ok; /* plan_mu initialised (a tree that failed to build may not have it) */
	pthread_mutex_t plan_mu;
	/* dcp/ (-o dcp): .metadata and __0_0.distcp; torch_dist/ (-o torch_dist)
	 * adds metadata.json and common.pt; n_sub 0 without either */
	struct ck_dcp_out dcp;
	const char *sub_dir;
	struct ck_tree_file sub[4]; /* names from the build; v once ready */
	size_t n_sub;
	/* a lazy dcp/: built under sub_mu on first use; sub_state 0 not yet,
	 * 1 built, -1 failed (sub_err says why) */
	int sub_lazy, sub_state, sub_torch_dist;
	pthread_mutex_t sub_mu;
	struct ck_err sub_err;
};

/* v->plan, cache_idx, npy_wide, rank and dir are set by the caller. */
int ck_tree_build(struct ck_tree *v, const struct ck_tree_opts *o, struct ck_err *err);
void ck_tree_free(struct ck_tree *v);

/* dcp/'s files laid out (at once when not lazy): 0, or -1 with err. The
 * tree is otherwise immutable; its dcp/ is built once, under its lock, by
 * whichever reader needs it first. Thread-safe. */
int ck_tree_sub_ready(const struct ck_tree *v, struct ck_err *err);

/* plan.json: *json and *len, built on the first call (thread-safe); 0, or
 * -ENOMEM (the next call tries again). */
int ck_tree_plan_json(const struct ck_tree *v, const char **json, size_t *len);

/* npy/NAME.npy of target i, built on demand (a few hundred bytes, so a
 * 100k-key tree holds none): the NumPy 1.0 header, then the tensor's bytes
 * or, with npy_wide, its F32 copy's, in the cache's numbering. 0 or -ENOMEM;
 * free with ck_vfile_free. */
int ck_tree_npy(const struct ck_tree *v, uint32_t i, struct ck_vfile *out);

static inline uint32_t ck_tree_cache_target(const struct ck_tree *v, uint32_t i)
{
	return v->cache_idx ? v->cache_idx[i] : i;
}

#endif
