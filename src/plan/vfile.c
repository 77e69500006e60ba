#include "vfile.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static int add_part(struct ck_vfile *v, struct ck_vpart p)
{
	if (v->n == v->cap) {
		size_t cap = v->cap ? 2 * v->cap : 16;
		struct ck_vpart *np = realloc(v->parts, cap * sizeof *np);
		if (!np)
			return -ENOMEM;
		v->parts = np;
		v->cap = cap;
	}
	v->parts[v->n++] = p;
	v->size += p.len;
	return 0;
}

static unsigned char *blob_grow(struct ck_vfile *v, size_t len)
{
	if (len > v->blob_cap - v->blob_len) {
		size_t cap = v->blob_cap ? v->blob_cap : 4096;
		while (cap - v->blob_len < len)
			cap *= 2;
		unsigned char *nb = realloc(v->blob, cap);
		if (!nb)
			return NULL;
		v->blob = nb;
		v->blob_cap = cap;
	}
	unsigned char *at = v->blob + v->blob_len;
	struct ck_vpart *last = v->n ? &v->parts[v->n - 1] : NULL;
	if (last && last->target == CK_VLIT && last->src + last->len == v->blob_len) {
		last->len += len;
		v->size += len;
	} else if (add_part(v, (struct ck_vpart){v->size, len, CK_VLIT, v->blob_len}) < 0) {
		return NULL;
	}
	v->blob_len += len;
	return at;
}

int ck_vfile_lit(struct ck_vfile *v, const void *p, size_t len)
{
	if (!len)
		return 0;
	unsigned char *at = blob_grow(v, len);
	if (!at)
		return -ENOMEM;
	memcpy(at, p, len);
	return 0;
}

int ck_vfile_fill(struct ck_vfile *v, unsigned char byte, size_t len)
{
	if (!len)
		return 0;
	unsigned char *at = blob_grow(v, len);
	if (!at)
		return -ENOMEM;
	memset(at, byte, len);
	return 0;
}

int ck_vfile_target(struct ck_vfile *v, uint32_t target, uint64_t off, uint64_t len)
{
	if (!len)
		return 0;
	return add_part(v, (struct ck_vpart){v->size, len, target, off});
}

int ck_vfile_lit_take(struct ck_vfile *v, void *p, size_t len)
{
	if (v->blob || !len) {
		int r = ck_vfile_lit(v, p, len);
		free(p);
		return r;
	}
	if (add_part(v, (struct ck_vpart){v->size, len, CK_VLIT, 0}) < 0) {
		free(p);
		return -ENOMEM;
	}
	v->blob = p;
	v->blob_len = v->blob_cap = len;
	return 0;
}

int ck_vfile_reserve(struct ck_vfile *v, size_t n)
{
	if (n <= v->cap - v->n)
		return 0;
	struct ck_vpart *np = realloc(v->parts, (v->n + n) * sizeof *np);
	if (!np)
		return -ENOMEM;
	v->parts = np;
	v->cap = v->n + n;
	return 0;
}

void ck_vfile_renumber(struct ck_vfile *v, const uint32_t *idx)
{
	for (size_t k = 0; idx && k < v->n; k++)
		if (v->parts[k].target != CK_VLIT)
			v->parts[k].target = idx[v->parts[k].target];
}

void ck_vfile_free(struct ck_vfile *v)
{
	free(v->blob);
	free(v->parts);
	memset(v, 0, sizeof *v);
}

size_t ck_vfile_spans(const struct ck_vfile *v, uint64_t off, uint64_t len, struct ck_span *out,
		      size_t max)
{
	if (off >= v->size || !len)
		return 0;
	if (len > v->size - off)
		len = v->size - off;
	uint64_t end = off + len;
	size_t lo = 0, hi = v->n; /* first part ending after off */
	while (lo < hi) {
		size_t m = lo + (hi - lo) / 2;
		if (v->parts[m].off + v->parts[m].len <= off)
			lo = m + 1;
		else
			hi = m;
	}
	size_t k = 0;
	for (size_t i = lo; i < v->n && v->parts[i].off < end; i++) {
		const struct ck_vpart *p = &v->parts[i];
		uint64_t a = off > p->off ? off : p->off;
		uint64_t b = end < p->off + p->len ? end : p->off + p->len;
		if (out && k < max) {
			uint64_t in = p->src + (a - p->off);
			out[k] = (struct ck_span){p->target == CK_VLIT ? 0 : p->target,
						  p->target == CK_VLIT ? 0 : in, b - a, a - off,
						  p->target == CK_VLIT ? v->blob + in : NULL};
		}
		k++;
	}
	return k;
}
