/* The virtual pytorch_model.bin: a torch.save zip (reference/formats.md §2)
 * assembled as a vfile. Entries are stored, each data start 64-byte aligned
 * (the first tensor's and the `version` record's on 4 KiB, so reading the
 * pickle or the directory never touches tensor bytes); the pickle is a
 * protocol-2 OrderedDict of torch._utils._rebuild_tensor_v2 calls with
 * persistent ids ('storage', torch.<Type>Storage, key, 'cpu', numel), one
 * storage per tensor. ZIP64 records are always written (as torch does).
 *
 * CRC-32 fields of tensor records are 0: a lazy view cannot know them
 * without evaluating everything, and torch's reader does not check them.
 * ck_torchzip_set_crc fills them in (mount -o zip_crc). Targets whose dtype
 * has no typed storage in torch 1.13 (fp8, unsigned wider than 8 bits) are
 * left out and listed in `omitted`. */
#ifndef CK_TORCHZIP_H
#define CK_TORCHZIP_H

#include <stddef.h>
#include <stdint.h>

#include "plan.h"
#include "vfile.h"

struct ck_torchzip {
	struct ck_vfile v;
	uint32_t *included, *omitted; /* target indices */
	size_t n_included, n_omitted;
	uint64_t *crc_at; /* blob offsets of the two CRC fields of included[k] */
};

/* dir: the archive's top-level directory name (torch uses the file's base
 * name: "pytorch_model"). */
int ck_torchzip_build(const struct ck_plan *p, const char *dir, struct ck_torchzip *z,
		      struct ck_err *err);
/* A contiguous part of a target: bytes [off, off+bytes) holding a tensor
 * of this shape (a DCP chunk of a per-rank view's fragment). */
struct ck_zchunk {
	int ndim;
	const int64_t *shape;
	uint64_t off, bytes;
};

/* torch.save(tensor) of target t alone, or of the part c of it (NULL: the
 * whole target); the top-level object is the tensor: a DCP chunk. A dtype
 * without a torch 1.13 storage gives an archive with t in omitted and no
 * data. */
int ck_torchzip_build_one(const struct ck_plan *p, uint32_t t, const char *dir,
			  const struct ck_zchunk *c, struct ck_torchzip *z, struct ck_err *err);
void ck_torchzip_set_crc(struct ck_torchzip *z, size_t k, uint32_t crc);
void ck_torchzip_free(struct ck_torchzip *z);

#endif
