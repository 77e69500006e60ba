#include "box.h"

uint64_t ck_box_numel(const struct ck_box *b)
{
	uint64_t n = 1;
	for (int d = 0; d < b->ndim; d++)
		n *= (uint64_t)b->ext[d];
	return n;
}

uint64_t ck_box_src_bytes(const struct ck_box *b)
{
	uint64_t last = 0; /* element offset of the last element */
	for (int d = 0; d < b->ndim; d++)
		last += (uint64_t)(b->sstride[d] * (b->ext[d] - 1));
	if (b->sdt == CK_DT_F4_E2M1)
		return (((uint64_t)b->snib + last) >> 1) + 1;
	return (last + 1) * ck_dtype_size(b->sdt);
}

uint64_t ck_box_scale_bytes(const struct ck_box *b)
{
	if (!b->scaled)
		return 0;
	uint64_t last = 0;
	for (int d = 0; d < b->ndim; d++)
		last += (uint64_t)(b->scstride[d] * ((b->ext[d] - 1 + b->sphase[d]) / b->sblock[d]));
	return (last + 1) * ck_dtype_size(b->scdt);
}

/* Whether dim d's scale index is a plain affine function (or constant), so
 * that it can merge with a neighbour. */
static int scale_affine(const struct ck_box *b, int d)
{
	return !b->scaled || b->scstride[d] == 0 || (b->sblock[d] == 1 && b->sphase[d] == 0);
}

static void copy_dim(struct ck_box *b, int to, int from)
{
	b->ext[to] = b->ext[from];
	b->sstride[to] = b->sstride[from];
	b->dstride[to] = b->dstride[from];
	b->sblock[to] = b->sblock[from];
	b->sphase[to] = b->sphase[from];
	b->scstride[to] = b->scstride[from];
}

void ck_box_normalise(struct ck_box *b)
{
	int n = 0;
	for (int d = 0; d < b->ndim; d++) {
		if (b->ext[d] == 1)
			continue; /* i[d] is always 0: contributes nothing (sphase < sblock) */
		if (n > 0) {
			int p = n - 1;
			int64_t e = b->ext[d];
			if (b->sstride[p] == b->sstride[d] * e && b->dstride[p] == b->dstride[d] * e &&
			    scale_affine(b, p) && scale_affine(b, d) &&
			    (!b->scaled || b->scstride[p] == b->scstride[d] * e)) {
				b->ext[p] *= e;
				b->sstride[p] = b->sstride[d];
				b->dstride[p] = b->dstride[d];
				b->scstride[p] = b->scstride[d];
				b->sblock[p] = 1;
				b->sphase[p] = 0;
				continue;
			}
		}
		copy_dim(b, n++, d);
	}
	b->ndim = n;
}
