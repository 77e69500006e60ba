/* Flat safetensors views of a plan: one header computed from a list of
 * targets (in that order, "__metadata__": {"format": "pt"}) and their bytes
 * packed after it, as a vfile. The whole plan gives model.safetensors; a
 * split by size gives the shards of model.safetensors.index.json (and vLLM's
 * per-rank model-rank-R-part-P.safetensors). */
#ifndef CK_FLAT_H
#define CK_FLAT_H

#include <stddef.h>
#include <stdint.h>

#include "plan.h"
#include "vfile.h"

struct ck_flat {
	struct ck_vfile v;
	uint64_t header_len;
	uint64_t *off; /* file offset of each listed target, in list order */
};

/* targets NULL: every target of the plan, in plan order. */
int ck_flat_build(const struct ck_plan *p, const uint32_t *targets, size_t n, struct ck_flat *f,
		  struct ck_err *err);
void ck_flat_free(struct ck_flat *f);

/* Split the plan's targets, in order, into runs of at most max_bytes of
 * tensor data (a bigger tensor gets a run of its own). first[k] is the first
 * target of run k; returns the number of runs (at least 1). *first is
 * malloc'd. Returns 0 on allocation failure. */
size_t ck_flat_split(const struct ck_plan *p, uint64_t max_bytes, size_t **first);

/* The runs of ck_flat_split as safetensors files: *out is calloc'd with *n
 * entries (at least one; an empty plan gives one empty file). */
int ck_flat_split_build(const struct ck_plan *p, uint64_t max_bytes, struct ck_flat **out,
			size_t *n, struct ck_err *err);

/* A plan as a Hugging Face checkpoint: files of at most max_bytes of tensor
 * data named model-0000k-of-0000n.safetensors with
 * model.safetensors.index.json, or, when single_name is set and everything
 * fits one file, that one file and no index. The mount (which always shows
 * the index) and convert (which writes model.safetensors when it can) both
 * build their files here. */
struct ck_flat_set {
	struct ck_flat *files;
	char **names;
	size_t n;
	struct ck_vfile index; /* literal JSON; size 0 when there is no index */
};

int ck_flat_set_build(const struct ck_plan *p, uint64_t max_bytes, const char *single_name,
		      struct ck_flat_set *s, struct ck_err *err);
void ck_flat_set_free(struct ck_flat_set *s);

#endif
