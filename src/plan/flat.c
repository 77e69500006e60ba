#include "flat.h"

#include <errno.h>
#include <stdio.h>
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
	if ((r = ck_vfile_reserve(&f->v, n + 1)) < 0)
		free(header);
	else /* the header's buffer becomes the file's literal bytes */
		r = ck_vfile_lit_take(&f->v, header, hl);
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

int ck_flat_split_build(const struct ck_plan *p, uint64_t max_bytes, struct ck_flat **out,
			size_t *n, struct ck_err *err)
{
	size_t *first;
	size_t runs = ck_flat_split(p, max_bytes, &first);
	*out = NULL;
	*n = 0;
	if (!runs || !(*out = calloc(runs, sizeof **out))) {
		if (runs)
			free(first);
		return ck_fail_sys(err, ENOMEM, "flat view");
	}
	uint32_t *ids = malloc((p->n ? p->n : 1) * sizeof *ids);
	int rc = ids ? 0 : ck_fail_sys(err, ENOMEM, "flat view");
	for (size_t i = 0; ids && i < p->n; i++)
		ids[i] = (uint32_t)i;
	for (size_t k = 0; rc == 0 && k < runs; k++) {
		size_t a = first[k], b = k + 1 < runs ? first[k + 1] : p->n;
		if ((rc = ck_flat_build(p, ids + a, b - a, &(*out)[k], err)) == 0)
			*n = k + 1;
	}
	free(ids);
	free(first);
	return rc;
}

/* model.safetensors.index.json for the files, as HF writes it. */
static int set_index(const struct ck_plan *p, struct ck_flat_set *s, struct ck_err *err)
{
	size_t n = p->n, len, i = 0;
	const char **names = malloc((n ? n : 1) * sizeof *names);
	uint64_t *of = malloc((n ? n : 1) * sizeof *of);
	char *buf = NULL;
	if (names && of) {
		for (size_t k = 0; k < s->n; k++)
			for (size_t j = 0; j < s->files[k].v.n; j++)
				if (s->files[k].v.parts[j].target != CK_VLIT && i < n)
					names[i] = p->t[s->files[k].v.parts[j].target].name,
					of[i++] = k + 1;
		buf = ck_st_index_json(names, of, i, s->n, p->total_bytes, &len);
	}
	free(names);
	free(of);
	int r = buf ? ck_vfile_lit(&s->index, buf, len) : -1;
	free(buf);
	return r < 0 ? ck_fail_sys(err, ENOMEM, "model.safetensors.index.json") : 0;
}

int ck_flat_set_build(const struct ck_plan *p, uint64_t max_bytes, const char *single_name,
		      struct ck_flat_set *s, struct ck_err *err)
{
	memset(s, 0, sizeof *s);
	if (ck_flat_split_build(p, max_bytes ? max_bytes : UINT64_MAX, &s->files, &s->n, err) < 0) {
		ck_flat_set_free(s);
		return -1;
	}
	if (!(s->names = calloc(s->n, sizeof *s->names))) {
		ck_flat_set_free(s);
		return ck_fail_sys(err, ENOMEM, "flat view");
	}
	for (size_t k = 0; k < s->n; k++) {
		char name[64];
		if (single_name && s->n == 1)
			snprintf(name, sizeof name, "%s", single_name);
		else
			ck_st_shard_name(name, sizeof name, k + 1, s->n);
		if (!(s->names[k] = strdup(name))) {
			ck_flat_set_free(s);
			return ck_fail_sys(err, ENOMEM, "flat view");
		}
	}
	if ((!single_name || s->n > 1) && set_index(p, s, err) < 0) {
		ck_flat_set_free(s);
		return -1;
	}
	return 0;
}

void ck_flat_set_free(struct ck_flat_set *s)
{
	for (size_t k = 0; k < s->n; k++) {
		ck_flat_free(&s->files[k]);
		if (s->names)
			free(s->names[k]);
	}
	free(s->files);
	free(s->names);
	ck_vfile_free(&s->index);
	memset(s, 0, sizeof *s);
}
