#include "layout.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int oom(struct ck_err *err)
{
	return ck_fail_sys(err, ENOMEM, "planning");
}

/* Pieces own their scales: freed with them, copied when a piece is. */
static void free_pieces(struct ck_piece *p, size_t n)
{
	for (size_t i = 0; p && i < n; i++)
		free(p[i].sc);
	free(p);
}

/* q->sc becomes q's own copy of the scale it points to (NULL on failure). */
static int own_scale(struct ck_piece *q, struct ck_err *err)
{
	if (!q->sc)
		return 0;
	struct ck_piece_scale *c = malloc(sizeof *c);
	if (c)
		*c = *q->sc;
	q->sc = c;
	return c ? 0 : oom(err);
}

static int push(struct ck_value *v, size_t *cap, const struct ck_piece *p, struct ck_err *err)
{
	if (v->n == *cap) {
		size_t nc = *cap ? *cap * 2 : 1; /* most values are one piece */
		struct ck_piece *np = realloc(v->p, nc * sizeof *np);
		if (!np)
			return oom(err);
		v->p = np;
		*cap = nc;
	}
	if (v->n >= CK_MAX_PIECES)
		return ck_fail(err, CK_E_MAPPING,
			       "layout needs more than %u pieces (a reshape of a strided or sliced "
			       "layout that does not stay contiguous)",
			       CK_MAX_PIECES);
	v->p[v->n++] = *p;
	return 0;
}

uint64_t ck_value_numel(const struct ck_value *v)
{
	uint64_t n = 1;
	for (int d = 0; d < v->ndim; d++)
		n *= (uint64_t)v->shape[d];
	return n;
}

int ck_value_pad(struct ck_value *v, int dim, int64_t size, struct ck_err *err)
{
	if (dim < 0 || dim >= v->ndim || size < v->shape[dim])
		return ck_fail(err, CK_E_MAPPING, "pad: dim %d cannot shrink to %lld", dim,
			       (long long)size);
	int64_t n = 1; /* bytes must stay countable: at most 2^60 elements */
	for (int d = 0; d < v->ndim; d++)
		if (__builtin_mul_overflow(n, d == dim ? size : v->shape[d], &n) || n > (1LL << 60))
			return ck_fail(err, CK_E_MAPPING, "pad: dim %d of %lld makes more than 2^60 "
							  "elements",
				       dim, (long long)size);
	v->shape[dim] = size;
	return 0;
}

uint64_t ck_piece_numel(const struct ck_piece *q, int ndim)
{
	uint64_t n = 1;
	for (int d = 0; d < ndim; d++)
		n *= (uint64_t)(q->hi[d] - q->lo[d]);
	return n;
}

int ck_value_has_holes(const struct ck_value *v)
{
	uint64_t covered = 0; /* pieces are disjoint boxes */
	for (size_t i = 0; i < v->n; i++)
		covered += ck_piece_numel(&v->p[i], v->ndim);
	return covered != ck_value_numel(v);
}

static int piece_equal(const struct ck_piece *a, const struct ck_piece *b, int ndim)
{
	if (a->src != b->src || a->n_casts != b->n_casts || a->saturate != b->saturate ||
	    a->base != b->base || a->fp4 != b->fp4)
		return 0;
	for (int k = 0; k < a->n_casts; k++)
		if (a->casts[k] != b->casts[k])
			return 0;
	if (!a->sc != !b->sc || a->shifted != b->shifted || (a->shifted && a->shift != b->shift))
		return 0;
	if (a->sc) {
		const struct ck_piece_scale *x = a->sc, *y = b->sc;
		if (x->src != y->src || x->divide != y->divide || x->n != y->n || x->base != y->base)
			return 0;
		for (int k = 0; k < x->n; k++)
			if (x->dim[k] != y->dim[k] || x->block[k] != y->block[k] ||
			    x->phase[k] != y->phase[k] || x->stride[k] != y->stride[k])
				return 0;
	}
	for (int d = 0; d < ndim; d++)
		if (a->lo[d] != b->lo[d] || a->hi[d] != b->hi[d] || a->stride[d] != b->stride[d])
			return 0;
	return 1;
}

int ck_value_equal(const struct ck_value *a, const struct ck_value *b)
{
	if (a->dtype != b->dtype || a->ndim != b->ndim || a->n != b->n)
		return 0;
	for (int d = 0; d < a->ndim; d++)
		if (a->shape[d] != b->shape[d])
			return 0;
	for (size_t i = 0; i < a->n; i++)
		if (!piece_equal(&a->p[i], &b->p[i], a->ndim))
			return 0;
	return 1;
}

void ck_value_free(struct ck_value *v)
{
	free_pieces(v->p, v->n);
	v->p = NULL;
	v->n = 0;
}

int ck_value_leaf(struct ck_value *v, uint32_t src, enum ck_dtype dt, int ndim,
		  const int64_t *shape, struct ck_err *err)
{
	memset(v, 0, sizeof *v);
	v->dtype = dt;
	v->ndim = ndim;
	memcpy(v->shape, shape, (size_t)ndim * sizeof *shape);
	if (ck_value_numel(v) == 0)
		return 0; /* an empty tensor reads nothing */
	/* built where it stays (a plan makes a leaf per source key) */
	struct ck_piece *p = calloc(1, sizeof *p);
	if (!p)
		return oom(err);
	p->src = src;
	int64_t s = 1;
	for (int d = ndim - 1; d >= 0; d--) {
		p->hi[d] = shape[d];
		p->stride[d] = s;
		s *= shape[d];
	}
	v->p = p;
	v->n = 1;
	return 0;
}

int ck_value_copy(struct ck_value *dst, const struct ck_value *src, struct ck_err *err)
{
	*dst = *src;
	dst->p = NULL;
	if (src->n) {
		dst->p = malloc(src->n * sizeof *dst->p);
		if (!dst->p) {
			dst->n = 0;
			return oom(err);
		}
		memcpy(dst->p, src->p, src->n * sizeof *dst->p);
		for (size_t i = 0; i < src->n; i++)
			if (own_scale(&dst->p[i], err) < 0) {
				for (size_t j = i + 1; j < src->n; j++)
					dst->p[j].sc = NULL; /* still src's */
				ck_value_free(dst);
				return -1;
			}
	}
	return 0;
}

int ck_value_permute(struct ck_value *v, const int *perm, struct ck_err *err)
{
	int seen[CK_MAX_DIMS] = {0};
	for (int d = 0; d < v->ndim; d++) {
		if (perm[d] < 0 || perm[d] >= v->ndim || seen[perm[d]]++)
			return ck_fail(err, CK_E_MAPPING, "permute: not a permutation of %d dims",
				       v->ndim);
	}
	int64_t shape[CK_MAX_DIMS];
	for (int d = 0; d < v->ndim; d++)
		shape[d] = v->shape[perm[d]];
	memcpy(v->shape, shape, sizeof shape);
	for (size_t i = 0; i < v->n; i++) {
		struct ck_piece q = v->p[i];
		for (int d = 0; d < v->ndim; d++) {
			q.lo[d] = v->p[i].lo[perm[d]];
			q.hi[d] = v->p[i].hi[perm[d]];
			q.stride[d] = v->p[i].stride[perm[d]];
		}
		for (int k = 0; q.sc && k < q.sc->n; k++) { /* old dim perm[d] is new dim d */
			int od = q.sc->dim[k];
			for (int d = 0; d < v->ndim; d++)
				if (perm[d] == od)
					q.sc->dim[k] = (int8_t)d;
		}
		v->p[i] = q;
	}
	return 0;
}

int ck_value_narrow(struct ck_value *v, int dim, int64_t start, int64_t len, struct ck_err *err)
{
	if (dim < 0 || dim >= v->ndim)
		return ck_fail(err, CK_E_MAPPING, "narrow: dim %d out of range for %d dims", dim,
			       v->ndim);
	if (start < 0 || len < 0 || start > v->shape[dim] || len > v->shape[dim] - start)
		return ck_fail(err, CK_E_MAPPING,
			       "narrow: start %lld, length %lld is outside dim %d of size %lld",
			       (long long)start, (long long)len, dim, (long long)v->shape[dim]);
	size_t k = 0;
	for (size_t i = 0; i < v->n; i++) {
		struct ck_piece q = v->p[i];
		int64_t lo = q.lo[dim] > start ? q.lo[dim] : start;
		int64_t hi = q.hi[dim] < start + len ? q.hi[dim] : start + len;
		if (lo >= hi) {
			free(q.sc);
			continue;
		}
		q.base += q.stride[dim] * (lo - q.lo[dim]);
		for (int k = 0; q.sc && k < q.sc->n; k++)
			if (q.sc->dim[k] == dim) { /* the new corner's block and place in it */
				int64_t pos = q.sc->phase[k] + (lo - q.lo[dim]);
				q.sc->base += q.sc->stride[k] * (pos / q.sc->block[k]);
				q.sc->phase[k] = pos % q.sc->block[k];
			}
		q.lo[dim] = lo - start;
		q.hi[dim] = hi - start;
		v->p[k++] = q;
	}
	v->n = k;
	v->shape[dim] = len;
	if (len == 0)
		v->n = 0;
	return 0;
}

int ck_value_unsqueeze(struct ck_value *v, int dim, struct ck_err *err)
{
	if (dim < 0 || dim > v->ndim || v->ndim >= CK_MAX_DIMS)
		return ck_fail(err, CK_E_MAPPING, "unsqueeze: dim %d out of range", dim);
	for (int d = v->ndim; d > dim; d--)
		v->shape[d] = v->shape[d - 1];
	v->shape[dim] = 1;
	for (size_t i = 0; i < v->n; i++) {
		struct ck_piece *q = &v->p[i];
		for (int d = v->ndim; d > dim; d--) {
			q->lo[d] = q->lo[d - 1];
			q->hi[d] = q->hi[d - 1];
			q->stride[d] = q->stride[d - 1];
		}
		q->lo[dim] = 0;
		q->hi[dim] = 1;
		q->stride[dim] = 0;
		for (int k = 0; q->sc && k < q->sc->n; k++)
			if (q->sc->dim[k] >= dim)
				q->sc->dim[k]++;
	}
	v->ndim++;
	return 0;
}

/* Dim d (of extent 1 in the piece) goes away: its index is always lo, so its
 * entry adds nothing (phase < block); later dims move down. */
static void scale_drop_dim(struct ck_piece_scale *sc, int d)
{
	int n = 0;
	for (int k = 0; k < sc->n; k++) {
		if (sc->dim[k] == d)
			continue;
		sc->dim[n] = (int8_t)(sc->dim[k] > d ? sc->dim[k] - 1 : sc->dim[k]);
		sc->block[n] = sc->block[k];
		sc->phase[n] = sc->phase[k];
		sc->stride[n] = sc->stride[k];
		n++;
	}
	sc->n = (uint8_t)n;
}

int ck_value_squeeze(struct ck_value *v, int dim, struct ck_err *err)
{
	if (dim < 0 || dim >= v->ndim || v->shape[dim] != 1)
		return ck_fail(err, CK_E_MAPPING, "squeeze: dim %d is not of size 1", dim);
	for (size_t i = 0; i < v->n; i++) {
		struct ck_piece *q = &v->p[i];
		for (int d = dim; d < v->ndim - 1; d++) {
			q->lo[d] = q->lo[d + 1];
			q->hi[d] = q->hi[d + 1];
			q->stride[d] = q->stride[d + 1];
		}
		if (q->sc)
			scale_drop_dim(q->sc, dim);
	}
	for (int d = dim; d < v->ndim - 1; d++)
		v->shape[d] = v->shape[d + 1];
	v->ndim--;
	return 0;
}

int ck_value_cat(struct ck_value *out, struct ck_value *vals, int n, int dim, struct ck_err *err)
{
	int rc = -1;
	memset(out, 0, sizeof *out);
	if (n < 1) {
		ck_fail(err, CK_E_MAPPING, "cat/stack of no tensors");
		goto done;
	}
	if (dim < 0 || dim >= vals[0].ndim) {
		ck_fail(err, CK_E_MAPPING, "cat: dim %d out of range for %d dims", dim,
			vals[0].ndim);
		goto done;
	}
	*out = vals[0];
	out->p = NULL;
	out->n = 0;
	out->shape[dim] = 0;
	size_t cap = 0, total = 0;
	for (int k = 0; k < n; k++)
		total += vals[k].n;
	if (total && total <= CK_MAX_PIECES) { /* one allocation, not a doubling series */
		if (!(out->p = malloc(total * sizeof *out->p))) {
			oom(err);
			goto done;
		}
		cap = total;
	}
	for (int k = 0; k < n; k++) {
		struct ck_value *x = &vals[k];
		if (x->dtype != vals[0].dtype) {
			ck_fail(err, CK_E_MAPPING, "cat/stack: input %d is %s, input 0 is %s", k,
				ck_dtype_name(x->dtype), ck_dtype_name(vals[0].dtype));
			goto done;
		}
		if (x->ndim != vals[0].ndim) {
			ck_fail(err, CK_E_MAPPING, "cat/stack: input %d has %d dims, input 0 has %d",
				k, x->ndim, vals[0].ndim);
			goto done;
		}
		for (int d = 0; d < x->ndim; d++)
			if (d != dim && x->shape[d] != vals[0].shape[d]) {
				ck_fail(err, CK_E_MAPPING,
					"cat/stack: input %d has size %lld in dim %d, input 0 has "
					"%lld",
					k, (long long)x->shape[d], d, (long long)vals[0].shape[d]);
				goto done;
			}
		int64_t grown;
		if (__builtin_add_overflow(out->shape[dim], x->shape[dim], &grown) ||
		    grown > ((int64_t)1 << 56)) {
			ck_fail(err, CK_E_MAPPING, "cat/stack: dim %d grows past 2^56 elements", dim);
			goto done;
		}
		for (size_t i = 0; i < x->n; i++) {
			struct ck_piece q = x->p[i];
			q.lo[dim] += out->shape[dim];
			q.hi[dim] += out->shape[dim];
			if (push(out, &cap, &q, err) < 0)
				goto done;
			x->p[i].sc = NULL; /* moved into out */
		}
		out->shape[dim] += x->shape[dim];
	}
	/* nested cats double per level: the element count must stay countable */
	uint64_t numel = 1;
	for (int d = 0; d < out->ndim; d++)
		if (__builtin_mul_overflow(numel, (uint64_t)out->shape[d], &numel) ||
		    numel > ((uint64_t)1 << 60)) {
			ck_fail(err, CK_E_MAPPING, "cat/stack: the result has more than 2^60 elements");
			goto done;
		}
	rc = 0;
done:
	for (int k = 0; k < n; k++)
		ck_value_free(&vals[k]);
	if (rc < 0)
		ck_value_free(out);
	return rc;
}

/* ---- reshape ---- */

struct rgroup {
	int a, b; /* old dims [a, b) */
	int c, d; /* new dims [c, d) */
};

/* A scale entry on an old dim that the reshape splits into several new
 * dims: its new entries depend on where each emitted box starts. */
struct split_scale {
	int group;	 /* the group: one old dim and several new ones, or
			    several old dims merged into one new one */
	int merge;	 /* the latter: */
	int od, j;	 /* the old dim (squeezed) and the first of the box's run */
	int64_t omult;	 /* old elements per step of od within the group */
	int64_t old_lo;	 /* the input piece's lo on the old dim */
	int64_t block, phase, stride;
};

struct reshape_ctx {
	const int64_t *oshape, *nshape; /* squeezed old dims; new dims (with 1s) */
	const int *nmap;		/* new non-1 dim index -> full new dim index */
	int n_new_full;
	struct rgroup *g;
	int ng;
	struct ck_value *out;
	size_t cap;
	struct ck_err *err;
	const struct split_scale *split; /* of the piece being emitted */
	int n_split;
};

/* The scale entries of box q for an old dim of block B split into new dims
 * [c, d): its old offset is sum_k (t_k - lo_k) * mult_k + P (P: where q
 * starts in the old piece, plus the phase). Dims whose mult is a multiple
 * of B step whole blocks (block 1); of the rest, the outermost that moves
 * must have a mult dividing B and P a multiple of it (block B / mult); the
 * dims inside it never leave its block. Anything else is refused. */
/* The scale entry of box q for an old dim merged with others into new dim
 * f. The box fixes the old dims before the run's first dim j, steps j and
 * covers the dims after j whole (emit_groups): od before j is a constant,
 * od == j steps one old index per omult new ones, od after j must sit in
 * one block. */
static int merge_scale_entry(const struct reshape_ctx *x, const struct split_scale *e,
			     struct ck_piece *q)
{
	int f = x->nmap[x->g[e->group].c];
	int64_t lin = q->lo[f], B = e->block;
	int64_t t = lin / e->omult % x->oshape[e->od]; /* the old index where the box starts */
	if (e->od < e->j || q->hi[f] - q->lo[f] <= 1) {
		q->sc->base += e->stride * ((t - e->old_lo + e->phase) / B);
		return 0;
	}
	if (e->od > e->j) {
		if (e->old_lo == 0 && e->phase + x->oshape[e->od] <= B)
			return 0;
		goto refuse;
	}
	int64_t P = t - e->old_lo + e->phase;
	if (P < 0 || q->sc->n == CK_SCALE_DIMS)
		goto refuse;
	int n = q->sc->n++;
	q->sc->dim[n] = (int8_t)f;
	q->sc->block[n] = B * e->omult;
	q->sc->phase[n] = P % B * e->omult;
	q->sc->stride[n] = e->stride;
	q->sc->base += e->stride * (P / B);
	return 0;
refuse:
	return ck_fail(x->err, CK_E_MAPPING,
		       "reshape: dim %d of a block-scaled value (block %lld) would be merged across "
		       "its blocks; its blocks must stay whole (reshape before quant/dequant is not "
		       "possible either: slice or permute)",
		       e->od, (long long)B);
}

static int split_scale_entries(const struct reshape_ctx *x, const struct split_scale *e,
			       struct ck_piece *q)
{
	if (e->merge)
		return merge_scale_entry(x, e, q);
	const struct rgroup *g = &x->g[e->group];
	int64_t mult[CK_MAX_DIMS], lin = 0, B = e->block, acc = 1;
	for (int m = g->d - 1; m >= g->c; m--) {
		mult[m] = acc;
		acc *= x->nshape[x->nmap[m]];
	}
	for (int m = g->c; m < g->d; m++)
		lin += q->lo[x->nmap[m]] * mult[m];
	int64_t P = lin - e->old_lo + e->phase;
	if (P < 0)
		return ck_fail(x->err, CK_E_MAPPING, "reshape: a block-scaled box starts before its piece");
	int small = -1;
	for (int m = g->c; m < g->d; m++) {
		int f = x->nmap[m];
		if (q->hi[f] - q->lo[f] <= 1)
			continue;
		if (mult[m] % B == 0) {
			if (q->sc->n == CK_SCALE_DIMS)
				goto refuse;
			int n = q->sc->n++;
			q->sc->dim[n] = (int8_t)f;
			q->sc->block[n] = 1;
			q->sc->phase[n] = 0;
			q->sc->stride[n] = e->stride * (mult[m] / B);
		} else if (small < 0) {
			small = m;
		}
	}
	if (small < 0) {
		q->sc->base += e->stride * (P / B);
		return 0;
	}
	int64_t ms = mult[small];
	if (B % ms || P % ms || q->sc->n == CK_SCALE_DIMS)
		goto refuse;
	int64_t b2 = B / ms, p2 = P / ms;
	int n = q->sc->n++;
	q->sc->dim[n] = (int8_t)x->nmap[small];
	q->sc->block[n] = b2;
	q->sc->phase[n] = p2 % b2;
	q->sc->stride[n] = e->stride;
	q->sc->base += e->stride * (p2 / b2);
	return 0;
refuse:
	return ck_fail(x->err, CK_E_MAPPING,
		       "reshape: a block-scaled dim (block %lld) would be split across its blocks; "
		       "its blocks must stay whole (reshape before quant/dequant is not possible "
		       "either: slice or permute)",
		       (long long)B);
}

/* Emit the boxes covering linear range [p0, p1) of new dims [c, d) (non-1
 * dims, sizes in nsz), into piece q, then continue with group gi + 1. */
static int emit_groups(struct reshape_ctx *x, const struct ck_piece *in, struct ck_piece *q,
		       int gi);

static int emit_range(struct reshape_ctx *x, const struct ck_piece *in, struct ck_piece *q,
		      int gi, int c, int d, int64_t p0, int64_t p1, int64_t base, int64_t s)
{
	/* dims c..d-1 are indices into the non-1 new dims; x->nmap maps them */
	if (p0 >= p1)
		return 0;
	int64_t inner = 1, si;
	for (int m = c + 1; m < d; m++)
		inner *= x->nshape[x->nmap[m]];
	/* strides of one-element dims are never used but are carried along; a
	 * long chain of views and transposes must not overflow them */
	if (__builtin_mul_overflow(s, inner, &si))
		return ck_fail(x->err, CK_E_MAPPING, "reshape: the layout's strides overflow");
	int fd = x->nmap[c];
	if (c == d - 1 || (p0 % inner == 0 && p1 % inner == 0)) {
		/* one box: dim c over [p0/inner, p1/inner), inner dims full */
		q->lo[fd] = p0 / inner;
		q->hi[fd] = p1 / inner;
		q->stride[fd] = si;
		int64_t sub = inner;
		for (int m = c + 1; m < d; m++) {
			int f = x->nmap[m];
			sub /= x->nshape[f];
			q->lo[f] = 0;
			q->hi[f] = x->nshape[f];
			q->stride[f] = s * sub;
		}
		int64_t save = q->base;
		q->base += base;
		int r = emit_groups(x, in, q, gi + 1);
		q->base = save;
		return r;
	}
	int64_t h = (p0 + inner - 1) / inner * inner, t = p1 / inner * inner;
	if (h > p1)
		h = p1;
	if (p0 < h) { /* head: one outer index, partial inner range */
		int64_t o = p0 / inner;
		q->lo[fd] = o, q->hi[fd] = o + 1, q->stride[fd] = si;
		if (emit_range(x, in, q, gi, c + 1, d, p0 - o * inner, h - o * inner, base, s) < 0)
			return -1;
	}
	int64_t bh, bt;
	if (__builtin_mul_overflow(s, h - p0, &bh) || __builtin_mul_overflow(s, t - p0, &bt) ||
	    __builtin_add_overflow(base, bh, &bh) || __builtin_add_overflow(base, bt, &bt))
		return ck_fail(x->err, CK_E_MAPPING, "reshape: the layout's strides overflow");
	if (h < t && emit_range(x, in, q, gi, c, d, h, t, bh, s) < 0)
		return -1;
	if (t >= h && t < p1) { /* tail */
		int64_t o = t / inner;
		q->lo[fd] = o, q->hi[fd] = o + 1, q->stride[fd] = si;
		if (emit_range(x, in, q, gi, c + 1, d, 0, p1 - t, bt, s) < 0)
			return -1;
	}
	return 0;
}

static int emit_groups(struct reshape_ctx *x, const struct ck_piece *in, struct ck_piece *q,
		       int gi)
{
	if (gi == x->ng) { /* a box: a piece of its own, with its own scale */
		struct ck_piece r = *q;
		if (own_scale(&r, x->err) < 0)
			return -1;
		for (int k = 0; k < x->n_split; k++)
			if (split_scale_entries(x, &x->split[k], &r) < 0) {
				free(r.sc);
				return -1;
			}
		if (push(x->out, &x->cap, &r, x->err) < 0) {
			free(r.sc);
			return -1;
		}
		return 0;
	}
	const struct rgroup *g = &x->g[gi];
	/* Find the run: dims j..b-1 full (except j) and chained by stride. */
	int j = g->b - 1;
	while (j > g->a) {
		int k = j - 1;
		int full_j = in->lo[j] == 0 && in->hi[j] == x->oshape[j];
		if (!full_j || in->stride[k] != in->stride[j] * x->oshape[j])
			break;
		j = k;
	}
	/* Dims a..j-1 must be single indices: enumerate their combinations. */
	int64_t idx[CK_MAX_DIMS];
	for (int k = g->a; k < j; k++)
		idx[k] = in->lo[k];
	for (;;) {
		int64_t lin = 0, base = 0;
		for (int k = g->a; k < g->b; k++) {
			int64_t start = k < j ? idx[k] : in->lo[k];
			lin = lin * x->oshape[k] + start;
			base += in->stride[k] * (start - in->lo[k]);
		}
		int64_t n = 1;
		for (int k = j; k < g->b; k++)
			n *= in->hi[k] - in->lo[k];
		/* linear positions within the group: lin is the first; the run
		 * advances by stride[b-1] per position */
		int64_t s = in->stride[g->b - 1];
		/* lin counts in units of the group's old linear index, which is
		 * also the new linear index */
		if (emit_range(x, in, q, gi, g->c, g->d, lin, lin + n, base, s) < 0)
			return -1;
		int k = j - 1;
		while (k >= g->a && ++idx[k] == in->hi[k]) {
			idx[k] = in->lo[k];
			k--;
		}
		if (k < g->a)
			break;
	}
	return 0;
}

/* The new shape with its -1 inferred, checked to hold v's elements. */
static int reshape_shape(const struct ck_value *v, const int64_t *shape_in, int ndim,
			 int64_t *shape, struct ck_err *err)
{
	if (ndim > CK_MAX_DIMS)
		return ck_fail(err, CK_E_MAPPING, "reshape: more than %d dims", CK_MAX_DIMS);
	uint64_t numel = ck_value_numel(v), known = 1;
	int infer = -1;
	for (int d = 0; d < ndim; d++) {
		shape[d] = shape_in[d];
		if (shape[d] == -1) {
			if (infer >= 0)
				return ck_fail(err, CK_E_MAPPING, "reshape: more than one -1");
			infer = d;
		} else if (shape[d] < 0) {
			return ck_fail(err, CK_E_MAPPING, "reshape: negative size %lld",
				       (long long)shape[d]);
		} else if (__builtin_mul_overflow(known, (uint64_t)shape[d], &known)) {
			return ck_fail(err, CK_E_MAPPING, "reshape: size overflows");
		}
	}
	if (infer >= 0) {
		if (known == 0 || numel % known)
			return ck_fail(err, CK_E_MAPPING,
				       "reshape: %llu elements do not divide into the known sizes "
				       "(product %llu)",
				       (unsigned long long)numel, (unsigned long long)known);
		shape[infer] = (int64_t)(numel / known);
		known = numel;
	}
	if (known == numel)
		return 0;
	char a[160] = "", b[160] = "";
	for (int d = 0; d < v->ndim; d++)
		snprintf(a + strlen(a), sizeof a - strlen(a), "%s%lld", d ? "," : "",
			 (long long)v->shape[d]);
	for (int d = 0; d < ndim; d++)
		snprintf(b + strlen(b), sizeof b - strlen(b), "%s%lld", d ? "," : "",
			 (long long)shape[d]);
	return ck_fail(err, CK_E_MAPPING, "reshape: [%s] (%llu elements) cannot view as [%s]", a,
		       (unsigned long long)numel, b);
}

/* The reshape's dims without their 1s (osh: old sizes, nmap: new non-1
 * dim -> new dim) and their groups: runs of old dims whose product is that
 * of a run of new dims. Returns the number of groups. */
static int reshape_groups(const struct ck_value *v, const int64_t *shape, int ndim, int64_t *osh,
			  int *nmap, struct rgroup *g)
{
	int oz = 0, nz = 0;
	for (int d = 0; d < v->ndim; d++)
		if (v->shape[d] != 1)
			osh[oz++] = v->shape[d];
	for (int d = 0; d < ndim; d++)
		if (shape[d] != 1)
			nmap[nz++] = d;
	int ng = 0, i = 0, j = 0;
	while (i < oz && j < nz) {
		int64_t pa = osh[i], pb = shape[nmap[j]];
		g[ng].a = i, g[ng].c = j;
		while (pa != pb) {
			if (pa < pb)
				pa *= osh[++i];
			else
				pb *= shape[nmap[++j]];
		}
		g[ng].b = ++i, g[ng].d = ++j;
		ng++;
	}
	return ng;
}

/* Where each old dim of v goes: dmap, the new dim when its group is that
 * one dim on both sides (block-scaled dims must stay whole), else -1;
 * gsplit, its group when the group is this old dim alone split into
 * several new dims, or several old dims merged into one (a block-scaled dim
 * may be split so), else -1; sq, its index among the non-1 old dims. */
static void reshape_dim_maps(const struct ck_value *v, const struct rgroup *g, int ng,
			     const int *nmap, int *dmap, int *gsplit, int *sq)
{
	for (int d = 0, o = 0; d < v->ndim; d++) {
		dmap[d] = gsplit[d] = -1;
		sq[d] = o;
		if (v->shape[d] == 1)
			continue;
		for (int k = 0; k < ng; k++) {
			if (g[k].a == o && g[k].b == o + 1 && g[k].d == g[k].c + 1)
				dmap[d] = nmap[g[k].c];
			if (g[k].a <= o && o < g[k].b &&
			    ((g[k].b == g[k].a + 1 && g[k].d > g[k].c + 1) ||
			     (g[k].b > g[k].a + 1 && g[k].d == g[k].c + 1)))
				gsplit[d] = k;
		}
		o++;
	}
}

/* A scale entry on old dim od (squeezed index sq) of a group split or
 * merged: how emit_groups places its blocks. */
static void split_entry(struct split_scale *ss, const struct rgroup *gr, int group,
			const int64_t *osh, int sq, const struct ck_piece *in, int64_t old_lo, int e)
{
	ss->group = group;
	ss->merge = gr->b > gr->a + 1;
	ss->od = sq;
	ss->omult = 1;
	for (int m = sq + 1; m < gr->b; m++)
		ss->omult *= osh[m];
	/* the run's first dim, as emit_groups finds it */
	ss->j = gr->b - 1;
	while (ss->j > gr->a) {
		int m = ss->j - 1;
		if (in->lo[ss->j] != 0 || in->hi[ss->j] != osh[ss->j] ||
		    in->stride[m] != in->stride[ss->j] * osh[ss->j])
			break;
		ss->j = m;
	}
	ss->old_lo = old_lo;
	ss->block = in->sc->block[e];
	ss->phase = in->sc->phase[e];
	ss->stride = in->sc->stride[e];
}

/* Piece k of v reshaped into x->out. */
static int reshape_piece(struct reshape_ctx *x, const struct ck_value *v, size_t k,
			 const int *dmap, const int *gsplit, const int *sq,
			 struct split_scale *split)
{
	x->n_split = 0;
	struct ck_piece in = v->p[k], q;
	struct ck_piece_scale qs; /* q is the template of the boxes: each copies it */
	int o = 0;
	for (int d = 0; d < v->ndim; d++)
		if (v->shape[d] != 1) {
			in.lo[o] = v->p[k].lo[d];
			in.hi[o] = v->p[k].hi[d];
			in.stride[o] = v->p[k].stride[d];
			o++;
		}
	memset(&q, 0, sizeof q);
	q.src = in.src;
	q.n_casts = in.n_casts;
	q.saturate = in.saturate;
	memcpy(q.casts, in.casts, sizeof q.casts);
	q.base = in.base;
	q.shifted = in.shifted;
	q.shift = in.shift;
	q.fp4 = in.fp4;
	q.sc = NULL;
	if (in.sc) {
		qs = *in.sc;
		qs.n = 0;
		q.sc = &qs;
	}
	for (int e = 0; in.sc && e < in.sc->n; e++) {
		int od = in.sc->dim[e];
		if (v->shape[od] == 1)
			continue; /* a constant index: the entry adds nothing */
		if (dmap[od] < 0 && gsplit[od] >= 0) {
			split_entry(&split[x->n_split++], &x->g[gsplit[od]], gsplit[od], x->oshape,
				    sq[od], &in, v->p[k].lo[od], e);
			continue;
		}
		if (dmap[od] < 0)
			return ck_fail(x->err, CK_E_MAPPING,
				       "reshape: dim %d of a block-scaled value would be split or "
				       "merged; its blocks must stay whole (reshape before "
				       "quant/dequant is not possible either: slice or permute)",
				       od);
		int n = qs.n++;
		qs.dim[n] = (int8_t)dmap[od];
		qs.block[n] = in.sc->block[e];
		qs.phase[n] = in.sc->phase[e];
		qs.stride[n] = in.sc->stride[e];
	}
	for (int d = 0; d < x->n_new_full; d++)
		q.lo[d] = 0, q.hi[d] = 1, q.stride[d] = 0; /* size-1 new dims */
	return emit_groups(x, &in, &q, 0);
}

int ck_value_reshape(struct ck_value *v, const int64_t *shape_in, int ndim, struct ck_err *err)
{
	int64_t shape[CK_MAX_DIMS];
	if (reshape_shape(v, shape_in, ndim, shape, err) < 0)
		return -1;
	if (ck_value_numel(v) == 0 || v->n == 0) {
		memcpy(v->shape, shape, sizeof shape);
		v->ndim = ndim;
		for (size_t i = 0; i < v->n; i++) /* n goes to 0: nothing else frees them */
			free(v->p[i].sc), v->p[i].sc = NULL;
		v->n = 0;
		return 0;
	}
	int nmap[CK_MAX_DIMS], dmap[CK_MAX_DIMS], gsplit[CK_MAX_DIMS], sq[CK_MAX_DIMS];
	int64_t osh[CK_MAX_DIMS];
	struct rgroup g[CK_MAX_DIMS];
	int ng = reshape_groups(v, shape, ndim, osh, nmap, g);
	reshape_dim_maps(v, g, ng, nmap, dmap, gsplit, sq);
	struct ck_value out = *v;
	out.p = NULL;
	out.n = 0;
	out.ndim = ndim;
	memcpy(out.shape, shape, sizeof shape);
	struct split_scale split[CK_SCALE_DIMS];
	struct reshape_ctx x = {osh, shape, nmap, ndim, g, ng, &out, 0, err, split, 0};
	for (size_t k = 0; k < v->n; k++)
		if (reshape_piece(&x, v, k, dmap, gsplit, sq, split) < 0) {
			ck_value_free(&out);
			return -1;
		}
	free_pieces(v->p, v->n);
	*v = out;
	return 0;
}

int ck_value_block_scale(struct ck_value *v, const struct ck_value *s, const int64_t *block,
			 int divide, struct ck_err *err)
{
	const char *op = divide ? "quant" : "dequant";
	int fp4 = v->dtype == CK_DT_F4_E2M1; /* from ck_value_mxfp4 only */
	if (!fp4 && !ck_dtype_is_castable_float(v->dtype))
		return ck_fail(err, CK_E_MAPPING, "%s: the weight is %s, not a float type", op,
			       ck_dtype_name(v->dtype));
	if (fp4 ? s->dtype != CK_DT_F8_E8M0
		: s->dtype != CK_DT_F32 && s->dtype != CK_DT_BF16 && s->dtype != CK_DT_F16)
		return ck_fail(err, CK_E_MAPPING, "%s: the scale is %s (%s expected)", op,
			       ck_dtype_name(s->dtype), fp4 ? "E8M0" : "F32, BF16 or F16");
	if (s->ndim != v->ndim)
		return ck_fail(err, CK_E_MAPPING, "%s: the scale has %d dims, the weight %d", op,
			       s->ndim, v->ndim);
	int nscaled = 0;
	for (int d = 0; d < v->ndim; d++) {
		if (block[d] < 1)
			return ck_fail(err, CK_E_MAPPING, "%s: block size %lld in dim %d", op,
				       (long long)block[d], d);
		int64_t want = v->shape[d] / block[d] + (v->shape[d] % block[d] != 0);
		if (s->shape[d] != want)
			return ck_fail(err, CK_E_MAPPING,
				       "%s: the scale has %lld blocks in dim %d; a weight of %lld "
				       "in blocks of %lld needs %lld",
				       op, (long long)s->shape[d], d, (long long)v->shape[d],
				       (long long)block[d], (long long)want);
		nscaled += want > 1;
	}
	if (nscaled > CK_SCALE_DIMS)
		return ck_fail(err, CK_E_MAPPING, "%s: more than %d dims hold several blocks", op,
			       CK_SCALE_DIMS);
	if (s->n != 1 || !ck_piece_plain(&s->p[0]) || ck_value_has_holes(s))
		return ck_fail(err, CK_E_MAPPING,
			       "%s: the scale must be one stored tensor (sliced or permuted at "
			       "most), not cast, scaled or assembled from several",
			       op);
	const struct ck_piece *sp = &s->p[0];
	for (size_t i = 0; i < v->n; i++)
		if (v->p[i].n_casts || v->p[i].sc || v->p[i].shifted || v->p[i].fp4 != fp4)
			return ck_fail(err, CK_E_MAPPING,
				       "%s: the weight must be read as stored (apply it before any "
				       "cast, quant or dequant)",
				       op);
	for (size_t i = 0; i < v->n; i++) {
		struct ck_piece *q = &v->p[i];
		struct ck_piece_scale *sc = calloc(1, sizeof *sc);
		if (!sc) { /* v unchanged */
			for (size_t j = 0; j < i; j++)
				free(v->p[j].sc), v->p[j].sc = NULL;
			return oom(err);
		}
		q->sc = sc;
		sc->divide = (uint8_t)divide;
		sc->src = sp->src;
		sc->base = sp->base;
		for (int d = 0; d < v->ndim; d++) {
			int64_t b = q->lo[d] / block[d];
			sc->base += sp->stride[d] * (b - sp->lo[d]);
			if (s->shape[d] > 1) {
				int n = sc->n++;
				sc->dim[n] = (int8_t)d;
				sc->block[n] = block[d];
				sc->phase[n] = q->lo[d] % block[d];
				sc->stride[n] = sp->stride[d];
			}
		}
	}
	v->dtype = CK_DT_F32;
	return 0;
}

int ck_value_shift(struct ck_value *v, float c, struct ck_err *err)
{
	if (!ck_dtype_is_castable_float(v->dtype))
		return ck_fail(err, CK_E_MAPPING, "%+g: adding a constant is defined for float tensors "
						  "(F32, F16, BF16, F8), not %s",
			       (double)c, ck_dtype_name(v->dtype));
	for (size_t i = 0; i < v->n; i++) {
		const struct ck_piece *q = &v->p[i];
		for (int k = 0; k < q->n_casts; k++)
			if (q->casts[k] != CK_DT_F32)
				return ck_fail(err, CK_E_MAPPING,
					       "%+g: the tensor was cast to %s first; add before "
					       "narrowing casts (x + c, then .to())",
					       (double)c, ck_dtype_name(q->casts[k]));
		/* a second constant folds into the first (composed mappings:
		 * GGUF's Gemma norms to HF's and back add -1 then +1), the sum
		 * added in one rounding, as the real numbers say */
		double sum = (double)q->shift + (double)c;
		if (q->shifted &&
		    (sum > (1 << 24) || sum < -(1 << 24) || sum != (double)(float)sum))
			return ck_fail(
			    err, CK_E_MAPPING,
			    "%+g: the tensor already has %+g added, and their sum is not "
			    "exact in F32 (within 2^24)",
			    (double)c, (double)q->shift);
	}
	for (size_t i = 0; i < v->n; i++) {
		struct ck_piece *q = &v->p[i];
		float sum = q->shifted ? (float)((double)q->shift + (double)c) : c;
		q->shifted = 1;
		q->shift = sum == 0.0f ? -0.0f : sum; /* x + -0 is x, signed zeros too */
		q->n_casts = 0; /* widenings to F32 only: exact, and the result is F32 */
		q->saturate = 0;
	}
	v->dtype = CK_DT_F32;
	return 0;
}

int ck_value_cast(struct ck_value *v, enum ck_dtype to, int saturate, struct ck_err *err)
{
	if (to == v->dtype)
		return 0;
	if (!ck_dtype_is_castable_float(v->dtype) || !ck_dtype_is_castable_float(to))
		return ck_fail(err, CK_E_MAPPING,
			       "cast %s -> %s: casts are defined among F32, F16, BF16, F8_E4M3 and "
			       "F8_E5M2",
			       ck_dtype_name(v->dtype), ck_dtype_name(to));
	for (size_t i = 0; i < v->n; i++) {
		struct ck_piece *q = &v->p[i];
		if (q->n_casts == CK_MAX_CASTS)
			return ck_fail(err, CK_E_MAPPING, "more than %d chained casts",
				       CK_MAX_CASTS);
		if (saturate)
			q->saturate |= (uint8_t)(1u << q->n_casts);
		q->casts[q->n_casts++] = (uint8_t)to;
	}
	v->dtype = to;
	return 0;
}

int ck_value_mxfp4(struct ck_value *blocks, const struct ck_value *scales, struct ck_err *err)
{
	const struct ck_value *b = blocks;
	if (b->dtype != CK_DT_U8)
		return ck_fail(err, CK_E_MAPPING, "mxfp4: the blocks are %s, not U8 (two E2M1 "
						  "values per byte)",
			       ck_dtype_name(b->dtype));
	if (scales->dtype != CK_DT_U8 && scales->dtype != CK_DT_F8_E8M0)
		return ck_fail(err, CK_E_MAPPING, "mxfp4: the scales are %s, not U8 or F8_E8M0",
			       ck_dtype_name(scales->dtype));
	if (b->ndim < 2 || b->ndim > CK_MAX_DIMS - 1 || scales->ndim != b->ndim - 1)
		return ck_fail(err, CK_E_MAPPING,
			       "mxfp4: blocks of %d dims and scales of %d: the scales must be the "
			       "blocks' shape without its last dim",
			       b->ndim, scales->ndim);
	for (int d = 0; d < scales->ndim; d++)
		if (scales->shape[d] != b->shape[d])
			return ck_fail(err, CK_E_MAPPING,
				       "mxfp4: dim %d is %lld in the blocks and %lld in the scales", d,
				       (long long)b->shape[d], (long long)scales->shape[d]);
	for (size_t i = 0; i < b->n; i++)
		if (!ck_piece_plain(&b->p[i]))
			return ck_fail(err, CK_E_MAPPING, "mxfp4: the blocks must be read as stored "
							  "(sliced or permuted at most)");
	int nd = b->ndim;
	int64_t per = b->shape[nd - 1] * 2; /* values per scale */
	struct ck_value v, s;
	if (ck_value_copy(&v, b, err) < 0)
		return -1;
	/* bytes -> nibbles: a new innermost dim of 2 (low, high), every stride
	 * and base in nibbles */
	for (size_t i = 0; i < v.n; i++) {
		struct ck_piece *q = &v.p[i];
		q->base *= 2;
		for (int d = 0; d < nd; d++)
			q->stride[d] *= 2;
		q->lo[nd] = 0, q->hi[nd] = 2, q->stride[nd] = 1;
		q->fp4 = 1;
	}
	v.shape[nd] = 2;
	v.ndim = nd + 1;
	v.dtype = CK_DT_F4_E2M1;
	int64_t shape[CK_MAX_DIMS], block[CK_MAX_DIMS];
	for (int d = 0; d < nd - 2; d++)
		shape[d] = b->shape[d], block[d] = 1;
	shape[nd - 2] = b->shape[nd - 2] * per; /* [..., G, B, 2] -> [..., G * 2B] */
	block[nd - 2] = per;
	if (ck_value_reshape(&v, shape, nd - 1, err) < 0 || ck_value_copy(&s, scales, err) < 0) {
		ck_value_free(&v);
		return -1;
	}
	s.dtype = CK_DT_F8_E8M0; /* the same bytes, read as exponents */
	int rc = ck_value_block_scale(&v, &s, block, 0, err);
	ck_value_free(&s);
	if (rc < 0) {
		ck_value_free(&v);
		return -1;
	}
	ck_value_free(blocks);
	*blocks = v;
	return 0;
}
