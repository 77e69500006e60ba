#include "flat.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../ckpt/st_writer.h"

int ck_flat_build(const struct ck_plan *p, struct ck_flat *f, struct ck_err *err)
{
	memset(f, 0, sizeof *f);
	struct ck_st_out *o = calloc(p->n ? p->n : 1, sizeof *o);
	f->off = calloc(p->n ? p->n : 1, sizeof *f->off);
	if (!o || !f->off) {
		free(o);
		free(f->off);
		return ck_fail_sys(err, ENOMEM, "flat view");
	}
	for (size_t i = 0; i < p->n; i++) {
		const struct ck_target *t = &p->t[i];
		o[i] = (struct ck_st_out){t->name, t->v.dtype, t->v.ndim, t->v.shape, t->nbytes};
	}
	const char *mk[] = {"format"}, *mv[] = {"pt"};
	size_t hl;
	int r = ck_st_build_header(o, p->n, mk, mv, 1, &f->header, &hl, f->off, err);
	free(o);
	if (r < 0) {
		free(f->off);
		f->off = NULL;
		return -1;
	}
	f->header_len = hl;
	for (size_t i = 0; i < p->n; i++)
		f->off[i] += hl;
	f->size = hl + p->total_bytes;
	return 0;
}

void ck_flat_free(struct ck_flat *f)
{
	free(f->header);
	free(f->off);
	memset(f, 0, sizeof *f);
}

size_t ck_flat_spans(const struct ck_plan *p, const struct ck_flat *f, uint64_t off, uint64_t len,
		     struct ck_span *out, size_t max)
{
	if (off >= f->size)
		return 0;
	if (len > f->size - off)
		len = f->size - off;
	uint64_t end = off + len;
	/* first target whose data ends after off: binary search on offsets */
	size_t lo = 0, hi = p->n;
	while (lo < hi) {
		size_t m = (lo + hi) / 2;
		if (f->off[m] + p->t[m].nbytes <= off)
			lo = m + 1;
		else
			hi = m;
	}
	size_t k = 0;
	for (size_t i = lo; i < p->n && f->off[i] < end; i++) {
		uint64_t a = off > f->off[i] ? off : f->off[i];
		uint64_t b = end < f->off[i] + p->t[i].nbytes ? end : f->off[i] + p->t[i].nbytes;
		if (a >= b)
			continue;
		if (out && k < max)
			out[k] = (struct ck_span){(uint32_t)i, a - f->off[i], b - a, a - off};
		k++;
	}
	return k;
}
