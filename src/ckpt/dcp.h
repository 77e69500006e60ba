/* PyTorch Distributed Checkpoint (DCP) directories as sources, and Megatron
 * torch_dist checkpoints (DCP plus metadata.json; common.pt is opaque).
 * `.metadata` is read through the restricted pickle reader: for every key
 * its dtype, global size and chunks (offsets, sizes), and for every chunk
 * the file, offset and length of its storage item, a complete torch.save
 * zip holding one tensor. Each chunk becomes a catalog entry ("key#k") and
 * each key a logical tensor assembled from its chunks, which must tile it
 * exactly. Non-tensor items (bytes) are counted and left out. */
#ifndef CK_DCP_H
#define CK_DCP_H

#include "catalog.h"

/* Whether dir holds a DCP checkpoint (a .metadata file). */
int ck_dcp_detect(const char *dir);
int ck_dcp_open(struct ck_catalog *cat, const char *dir, struct ck_err *err);

/* The chunks of l (sizes[k] is chunk k's extent) lie inside it, do not
 * overlap and cover it: O(n log n + grid cells), for tens of thousands of
 * chunks of one key. */
int ck_dcp_check_tiling(const char *what, const struct ck_logical *l,
			const int64_t (*sizes)[CK_MAX_DIMS], struct ck_err *err);

#endif
