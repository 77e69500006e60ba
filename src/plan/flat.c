#include "flat.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../ckpt/st_writer.h"

int ck_flat_build(const struct ck_plan *p, const uint32_t *targets, size_t n, struct ck_flat *f,
		  struct ck_err *err)
{
	memset(f, 0, sizeof *f);
	if (!targets)
		n = p->n;
	struct ck_st_out *o = calloc(n ? n : 1, sizeof *o);
	f->off = calloc(n ? n : 1, sizeof *f->off);
	if (!o || !f->off) {
		free(o);
		ck_flat_free(f);
		return ck_fail_sys(err, ENOMEM, "flat view");
	}
	for (size_t i = 0; i < n; i++) {
		const struct ck_target *t = &p->t[targets ? targets[i] : i];
		o[i] = (struct ck_st_out){t->name, t->v.dtype, t->v.ndim, t->v.shape, t->nbytes};
	}
	const char *mk[] = {"format"}, *mv[] = {"pt"};
	char *header;
	size_t hl;
	int r = ck_st_build_header(o, n, mk, mv, 1, &header, &hl, f->off, err);
	free(o);
	if (r < 0) {
		ck_flat_free(f);
		return -1;
	}
	f->header_len = hl;
	r = ck_vfile_lit(&f->v, header, hl);
	free(header);
	for (size_t i = 0; i < n && r == 0; i++) {
		uint32_t t = targets ? targets[i] : (uint32_t)i;
		f->off[i] += hl;
		r = ck_vfile_target(&f->v, t, 0, p->t[t].nbytes);
	}
	if (r < 0) {
		ck_flat_free(f);
		return ck_fail_sys(err, ENOMEM, "flat view");
	}
	return 0;
}

void ck_flat_free(struct ck_flat *f)
{
	ck_vfile_free(&f->v);
	free(f->off);
	memset(f, 0, sizeof *f);
}

size_t ck_flat_split(const struct ck_plan *p, uint64_t max_bytes, size_t **first)
{
	size_t n = 0, cap = 8;
	size_t *a = malloc(cap * sizeof *a);
	if (!a)
		return 0;
	a[n++] = 0;
	uint64_t used = 0;
	for (size_t i = 0; i < p->n; i++) {
		uint64_t b = p->t[i].nbytes;
		if (used > 0 && b > max_bytes - (used < max_bytes ? used : max_bytes)) {
			if (n == cap) {
				size_t *na = realloc(a, 2 * cap * sizeof *na);
				if (!na) {
					free(a);
					return 0;
				}
				a = na;
				cap *= 2;
			}
			a[n++] = i;
			used = 0;
		}
		used += b;
	}
	*first = a;
	return n;
}
