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
	/* the data files, one per rank: __R_0.distcp (each in its plan's
	 * target numbering; the caller renumbers them for its cache) */
	struct ck_vfile *data;
	char (*data_name)[32];
	size_t n_data;
	/* Megatron-core torch_dist: metadata.json naming the backend, and
	 * common.pt (torch.save of an empty dict: nothing common is known) */
	struct ck_vfile megatron_json, common;
	/* targets with no torch storage type (FP8, U16..U64): how many, and
	 * the first one's name (the plans own it) */
	size_t n_omitted;
	const char *first_omitted;
	size_t n_keys; /* in .metadata */
};

/* torch_dist: also metadata.json and common.pt. rank >= 0: a per-rank
 * view, whose targets carry their fragments: each contiguous fragment is a
 * chunk at its global offset, the tensor's size is the global shape, and
 * the data file is __<rank>_0.distcp (rank -1: whole tensors, __0_0). */
int ck_dcp_out_build(const struct ck_plan *p, int torch_dist, int64_t rank, struct ck_dcp_out *o,
		     struct ck_err *err);
/* One directory for n ranks' views (--ranks), as torch's writer leaves it
 * after a save by those ranks: data file k (__<ranks[k]>_0.distcp) holds
 * rank k's chunks, `.metadata` lists every key once with the chunks of all
 * ranks. A piece several ranks hold (a replica) is written once, by its
 * main replica (replica id 0) or else the first rank holding it; each
 * key's chunks must tile its global shape (ranks that leave a gap are
 * refused: a load would keep whatever the gap held). */
int ck_dcp_out_build_ranks(const struct ck_plan *const *plans, const int64_t *ranks, size_t n,
			   int torch_dist, struct ck_dcp_out *o, struct ck_err *err);
void ck_dcp_out_free(struct ck_dcp_out *o);

#endif
