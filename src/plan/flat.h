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

#endif
