/* A PyTorch Distributed Checkpoint (DCP) directory laid out over a plan's
 * targets (reference/formats.md §4): `.metadata`, a pickle of
 * torch.distributed.checkpoint.metadata.Metadata as PyTorch 2.x writes it
 * (TensorStorageMetadata with TensorProperties, the global size and its
 * chunks; storage_data mapping each MetadataIndex to a byte range of the
 * data file), and the data file `__<rank>_0.distcp`, each chunk a complete torch.save
 * blob of the one tensor, its data a span of the target. Built from shapes
 * alone; reading a chunk evaluates only that tensor. Megatron-core's
 * torch_dist format is the same files plus metadata.json and common.pt. */
#ifndef CK_DCP_OUT_H
#define CK_DCP_OUT_H

#include <stddef.h>
#include <stdint.h>

#include "plan.h"
#include "vfile.h"

struct ck_dcp_out {
	struct ck_vfile metadata; /* .metadata */
	struct ck_vfile data;	  /* __0_0.distcp */
	/* Megatron-core torch_dist: metadata.json naming the backend, and
	 * common.pt (torch.save of an empty dict: nothing common is known) */
	struct ck_vfile megatron_json, common;
	uint32_t *omitted; /* targets with no torch storage type (FP8, U16..U64) */
	size_t n_omitted;
	char data_name[32]; /* __R_0.distcp */
};

/* torch_dist: also metadata.json and common.pt. rank >= 0: a per-rank
 * view, whose targets carry their fragments: each contiguous fragment is a
 * chunk at its global offset, the tensor's size is the global shape, and
 * the data file is __<rank>_0.distcp (rank -1: whole tensors, __0_0). */
int ck_dcp_out_build(const struct ck_plan *p, int torch_dist, int64_t rank, struct ck_dcp_out *o,
		     struct ck_err *err);
void ck_dcp_out_free(struct ck_dcp_out *o);

#endif
