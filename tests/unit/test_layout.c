/* Layout algebra against a dense reference: random sequences of permute,
 * narrow, reshape, cat, unsqueeze and squeeze are applied both to piece lists
 * and to dense arrays of source element ids; evaluating the pieces element
 * by element must give the same ids, each target element covered once. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "layout/layout.h"
#include "testutil.h"

#define MAXN 4096

struct dense {
	int ndim;
	int64_t shape[CK_MAX_DIMS];
	int64_t *d; /* src * 1e6 + element */
};

static uint64_t rng_state;
static uint64_t rnd(void)
{
	rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
	return rng_state >> 33;
}
static int64_t rr(int64_t n)
{
	return n > 0 ? (int64_t)(rnd() % (uint64_t)n) : 0;
}

static int64_t numel(const int64_t *s, int nd)
{
	int64_t n = 1;
	for (int i = 0; i < nd; i++)
		n *= s[i];
	return n;
}

static void cstrides(const int64_t *s, int nd, int64_t *st)
{
	int64_t k = 1;
	for (int i = nd - 1; i >= 0; i--)
		st[i] = k, k *= s[i];
}

static void unravel(int64_t lin, const int64_t *s, int nd, int64_t *idx)
{
	for (int i = nd - 1; i >= 0; i--) {
		idx[i] = lin % s[i];
		lin /= s[i];
	}
}

static struct dense dense_leaf(uint32_t src, const int64_t *s, int nd)
{
	struct dense x = {nd, {0}, NULL};
	memcpy(x.shape, s, (size_t)nd * sizeof *s);
	int64_t n = numel(s, nd);
	x.d = malloc((size_t)(n ? n : 1) * sizeof *x.d);
	for (int64_t i = 0; i < n; i++)
		x.d[i] = (int64_t)src * 1000000 + i;
	return x;
}

/* Dense result of the pieces: every element from exactly one piece. */
static void check_equal(const struct ck_value *v, const struct dense *x)
{
	ck_assert_int_eq(v->ndim, x->ndim);
	for (int i = 0; i < v->ndim; i++)
		ck_assert_int_eq(v->shape[i], x->shape[i]);
	int64_t n = numel(v->shape, v->ndim), st[CK_MAX_DIMS];
	cstrides(v->shape, v->ndim, st);
	int64_t *got = malloc((size_t)(n ? n : 1) * sizeof *got);
	for (int64_t i = 0; i < n; i++)
		got[i] = -1;
	for (size_t k = 0; k < v->n; k++) {
		const struct ck_piece *p = &v->p[k];
		int64_t idx[CK_MAX_DIMS], cnt = 1;
		for (int d = 0; d < v->ndim; d++) {
			ck_assert(p->lo[d] >= 0 && p->lo[d] < p->hi[d] && p->hi[d] <= v->shape[d]);
			idx[d] = p->lo[d];
			cnt *= p->hi[d] - p->lo[d];
		}
		for (int64_t c = 0; c < cnt; c++) {
			int64_t lin = 0, src = p->base;
			for (int d = 0; d < v->ndim; d++) {
				lin += idx[d] * st[d];
				src += p->stride[d] * (idx[d] - p->lo[d]);
			}
			ck_assert_msg(got[lin] == -1, "element %lld covered twice", (long long)lin);
			got[lin] = (int64_t)p->src * 1000000 + src;
			for (int d = v->ndim - 1; d >= 0; d--) {
				if (++idx[d] < p->hi[d])
					break;
				idx[d] = p->lo[d];
			}
		}
	}
	for (int64_t i = 0; i < n; i++)
		ck_assert_msg(got[i] == x->d[i], "element %lld: pieces give %lld, dense %lld",
			      (long long)i, (long long)got[i], (long long)x->d[i]);
	free(got);
}

/* dense[out_idx] = dense_in[map(out_idx)] helpers */
static void dense_permute(struct dense *x, const int *perm)
{
	struct dense y = *x;
	for (int i = 0; i < x->ndim; i++)
		y.shape[i] = x->shape[perm[i]];
	int64_t n = numel(y.shape, y.ndim), sx[CK_MAX_DIMS], idx[CK_MAX_DIMS];
	cstrides(x->shape, x->ndim, sx);
	y.d = malloc((size_t)(n ? n : 1) * sizeof *y.d);
	for (int64_t i = 0; i < n; i++) {
		unravel(i, y.shape, y.ndim, idx);
		int64_t o = 0;
		for (int k = 0; k < y.ndim; k++)
			o += idx[k] * sx[perm[k]];
		y.d[i] = x->d[o];
	}
	free(x->d);
	*x = y;
}

static void dense_narrow(struct dense *x, int dim, int64_t start, int64_t len)
{
	struct dense y = *x;
	y.shape[dim] = len;
	int64_t n = numel(y.shape, y.ndim), sx[CK_MAX_DIMS], idx[CK_MAX_DIMS];
	cstrides(x->shape, x->ndim, sx);
	y.d = malloc((size_t)(n ? n : 1) * sizeof *y.d);
	for (int64_t i = 0; i < n; i++) {
		unravel(i, y.shape, y.ndim, idx);
		idx[dim] += start;
		int64_t o = 0;
		for (int k = 0; k < y.ndim; k++)
			o += idx[k] * sx[k];
		y.d[i] = x->d[o];
	}
	free(x->d);
	*x = y;
}

static void dense_cat(struct dense *x, struct dense *b, int dim)
{
	struct dense y = *x;
	y.shape[dim] += b->shape[dim];
	int64_t n = numel(y.shape, y.ndim), sa[CK_MAX_DIMS], sb[CK_MAX_DIMS], idx[CK_MAX_DIMS];
	cstrides(x->shape, x->ndim, sa);
	cstrides(b->shape, b->ndim, sb);
	y.d = malloc((size_t)(n ? n : 1) * sizeof *y.d);
	for (int64_t i = 0; i < n; i++) {
		unravel(i, y.shape, y.ndim, idx);
		const struct dense *src = x;
		const int64_t *s = sa;
		if (idx[dim] >= x->shape[dim]) {
			idx[dim] -= x->shape[dim];
			src = b, s = sb;
		}
		int64_t o = 0;
		for (int k = 0; k < y.ndim; k++)
			o += idx[k] * s[k];
		y.d[i] = src->d[o];
	}
	free(x->d);
	free(b->d);
	*x = y;
}

static void random_perm(int *perm, int n)
{
	for (int i = 0; i < n; i++)
		perm[i] = i;
	for (int i = n - 1; i > 0; i--) {
		int j = (int)rr(i + 1), t = perm[i];
		perm[i] = perm[j], perm[j] = t;
	}
}

static void random_shape(int64_t n, int64_t *s, int *nd)
{
	/* random factorisation of n into 1..4 dims, size-1 dims allowed */
	*nd = 1 + (int)rr(4);
	for (int i = 0; i < *nd; i++)
		s[i] = 1;
	int64_t left = n;
	for (int i = 0; i < *nd - 1; i++) {
		int64_t divs[64];
		int nd2 = 0;
		for (int64_t f = 1; f <= left && nd2 < 64; f++)
			if (left % f == 0)
				divs[nd2++] = f;
		s[i] = divs[rr(nd2)];
		left /= s[i];
	}
	s[*nd - 1] = left;
}

START_TEST(random_op_sequences)
{
	rng_state = 0x1234567ULL + (uint64_t)_i * 7919;
	static const int64_t starts[][4] = {{4, 6, 5, 0}, {8, 9, 0, 0}, {2, 3, 4, 5}, {12, 10, 0, 0}};
	static const int nds[] = {3, 2, 4, 2};
	int si = (int)rr(4);
	struct ck_err err;
	struct ck_value v;
	ck_assert_int_eq(ck_value_leaf(&v, 0, CK_DT_F32, nds[si], starts[si], &err), 0);
	struct dense x = dense_leaf(0, starts[si], nds[si]);
	int nops = 1 + (int)rr(6);
	for (int op = 0; op < nops; op++) {
		int kind = (int)rr(6);
		if (kind == 0 && v.ndim > 0) { /* permute */
			int perm[CK_MAX_DIMS];
			random_perm(perm, v.ndim);
			ck_assert_int_eq(ck_value_permute(&v, perm, &err), 0);
			dense_permute(&x, perm);
		} else if (kind == 1 && v.ndim > 0) { /* narrow */
			int d = (int)rr(v.ndim);
			if (v.shape[d] < 1)
				continue;
			int64_t start = rr(v.shape[d]), len = 1 + rr(v.shape[d] - start);
			ck_assert_int_eq(ck_value_narrow(&v, d, start, len, &err), 0);
			dense_narrow(&x, d, start, len);
		} else if (kind == 2) { /* reshape */
			int64_t s[CK_MAX_DIMS];
			int nd;
			random_shape(numel(v.shape, v.ndim), s, &nd);
			ck_assert_msg(ck_value_reshape(&v, s, nd, &err) == 0, "%s", err.msg);
			x.ndim = nd;
			memcpy(x.shape, s, sizeof s); /* dense data is C-order already */
		} else if (kind == 3 && v.ndim > 0) { /* cat with a fresh source */
			int d = (int)rr(v.ndim);
			int64_t s[CK_MAX_DIMS];
			memcpy(s, v.shape, sizeof s);
			s[d] = 1 + rr(3);
			struct ck_value vals[2];
			vals[0] = v;
			ck_assert_int_eq(ck_value_leaf(&vals[1], 1 + (uint32_t)op, CK_DT_F32, v.ndim, s, &err), 0);
			ck_assert_int_eq(ck_value_cat(&v, vals, 2, d, &err), 0);
			struct dense b = dense_leaf(1 + (uint32_t)op, s, x.ndim);
			dense_cat(&x, &b, d);
		} else if (kind == 4 && v.ndim < 6) { /* unsqueeze */
			int d = (int)rr(v.ndim + 1);
			ck_assert_int_eq(ck_value_unsqueeze(&v, d, &err), 0);
			for (int i = x.ndim; i > d; i--)
				x.shape[i] = x.shape[i - 1];
			x.shape[d] = 1;
			x.ndim++;
		} else if (kind == 5) { /* squeeze the first size-1 dim */
			for (int d = 0; d < v.ndim; d++)
				if (v.shape[d] == 1) {
					ck_assert_int_eq(ck_value_squeeze(&v, d, &err), 0);
					for (int i = d; i < x.ndim - 1; i++)
						x.shape[i] = x.shape[i + 1];
					x.ndim--;
					break;
				}
		}
		check_equal(&v, &x);
	}
	ck_value_free(&v);
	free(x.d);
}
END_TEST

/* The scale element each element of v is multiplied by (scale src * 1e6 +
 * element), -1 for unscaled pieces, against the dense reference. */
static void check_scales(const struct ck_value *v, const struct dense *x)
{
	int64_t n = numel(v->shape, v->ndim), st[CK_MAX_DIMS];
	cstrides(v->shape, v->ndim, st);
	int64_t wrong = 0, first = -1, got_first = 0;
	for (size_t k = 0; k < v->n; k++) {
		const struct ck_piece *p = &v->p[k];
		int64_t idx[CK_MAX_DIMS], cnt = 1;
		for (int d = 0; d < v->ndim; d++) {
			idx[d] = p->lo[d];
			cnt *= p->hi[d] - p->lo[d];
		}
		for (int64_t c = 0; c < cnt; c++) {
			int64_t lin = 0, got = -1;
			for (int d = 0; d < v->ndim; d++)
				lin += idx[d] * st[d];
			if (p->sc) {
				int64_t e = p->sc->base;
				for (int j = 0; j < p->sc->n; j++) {
					int d = p->sc->dim[j];
					e += p->sc->stride[j] *
					     ((idx[d] - p->lo[d] + p->sc->phase[j]) / p->sc->block[j]);
				}
				got = (int64_t)p->sc->src * 1000000 + e;
			}
			if (lin < n && got != x->d[lin] && !wrong++)
				first = lin, got_first = got;
			for (int d = v->ndim - 1; d >= 0; d--) {
				if (++idx[d] < p->hi[d])
					break;
				idx[d] = p->lo[d];
			}
		}
	}
	ck_assert_msg(wrong == 0, "%lld elements get the wrong scale; element %lld: %lld, dense %lld",
		      (long long)wrong, (long long)first, (long long)got_first,
		      first >= 0 ? (long long)x->d[first] : -1LL);
}

/* Block scaling survives permute, narrow, cat, unsqueeze, squeeze and
 * reshapes (a scaled dim split into whole blocks, or merged where each box
 * steps one block-scaled dim): a dense reference tracks, for every element,
 * the weight element and the scale element it is multiplied by; a reshape
 * that would cut blocks is refused, the value unchanged. */
START_TEST(block_scale_op_sequences)
{
	rng_state = 0xB10C5CA1ULL + (uint64_t)_i * 104729;
	struct ck_err err;
	int nd = 2 + (int)rr(2);
	int64_t ws[CK_MAX_DIMS], ss[CK_MAX_DIMS], block[CK_MAX_DIMS];
	for (int d = 0; d < nd; d++) {
		ws[d] = 1 + rr(nd == 2 ? 20 : 9);
		block[d] = 1 + rr(6);
		ss[d] = (ws[d] + block[d] - 1) / block[d];
	}
	struct ck_value v, sv;
	ck_assert_int_eq(ck_value_leaf(&v, 0, CK_DT_F8_E4M3, nd, ws, &err), 0);
	ck_assert_int_eq(ck_value_leaf(&sv, 7, CK_DT_F32, nd, ss, &err), 0);
	if (rr(2)) { /* a transposed scale tensor works too */
		int perm[CK_MAX_DIMS];
		for (int d = 0; d < nd; d++)
			perm[d] = nd - 1 - d;
		int64_t rs[CK_MAX_DIMS];
		for (int d = 0; d < nd; d++)
			rs[d] = ss[nd - 1 - d];
		ck_value_free(&sv);
		ck_assert_int_eq(ck_value_leaf(&sv, 7, CK_DT_F32, nd, rs, &err), 0);
		ck_assert_int_eq(ck_value_permute(&sv, perm, &err), 0);
	}
	ck_assert_msg(ck_value_block_scale(&v, &sv, block, (int)rr(2), &err) == 0, "%s", err.msg);
	/* dense: weight ids, and the scale ids evaluated from sv's own layout */
	struct dense x = dense_leaf(0, ws, nd), sc = dense_leaf(0, ws, nd);
	int64_t sst[CK_MAX_DIMS], idx[CK_MAX_DIMS];
	for (int64_t i = 0; i < numel(ws, nd); i++) {
		unravel(i, ws, nd, idx);
		int64_t e = sv.p[0].base;
		for (int d = 0; d < nd; d++)
			e += sv.p[0].stride[d] * (idx[d] / block[d]);
		sc.d[i] = 7 * 1000000 + e;
	}
	(void)sst;
	ck_value_free(&sv);
	check_equal(&v, &x);
	check_scales(&v, &sc);
	int nops = 1 + (int)rr(6);
	for (int op = 0; op < nops; op++) {
		int kind = (int)rr(8);
		if (kind >= 6) { /* split a dim into two, or merge two: exact or refused */
			int64_t s[CK_MAX_DIMS];
			int m = 0, d = (int)rr(v.ndim), ok = 0;
			if (kind == 6 && v.ndim < 6) {
				int64_t f = 2 + rr(4);
				ok = v.shape[d] % f == 0 && v.shape[d] > f;
				for (int k = 0; k < v.ndim; k++) {
					if (k == d) {
						s[m++] = f;
						s[m++] = v.shape[k] / f;
					} else {
						s[m++] = v.shape[k];
					}
				}
			} else if (kind == 7 && v.ndim > 1) {
				d = (int)rr(v.ndim - 1);
				ok = 1;
				for (int k = 0; k < v.ndim; k++) {
					if (k == d + 1)
						s[m - 1] *= v.shape[k];
					else
						s[m++] = v.shape[k];
				}
			}
			if (!ok)
				continue;
			if (ck_value_reshape(&v, s, m, &err) < 0) {
				/* refused: only for blocks that would not stay whole,
				 * and the value is unchanged */
				ck_assert_msg(strstr(err.msg, "block-scaled"), "%s", err.msg);
				check_equal(&v, &x);
				check_scales(&v, &sc);
				continue;
			}
			memcpy(x.shape, s, sizeof s);
			memcpy(sc.shape, s, sizeof s);
			x.ndim = sc.ndim = m;
		} else if (kind == 0) {
			int perm[CK_MAX_DIMS];
			random_perm(perm, v.ndim);
			ck_assert_int_eq(ck_value_permute(&v, perm, &err), 0);
			dense_permute(&x, perm);
			dense_permute(&sc, perm);
		} else if (kind == 1) {
			int d = (int)rr(v.ndim);
			int64_t start = rr(v.shape[d]), len = 1 + rr(v.shape[d] - start);
			ck_assert_int_eq(ck_value_narrow(&v, d, start, len, &err), 0);
			dense_narrow(&x, d, start, len);
			dense_narrow(&sc, d, start, len);
		} else if (kind == 2) { /* cat an unscaled F32 leaf */
			int d = (int)rr(v.ndim);
			int64_t s[CK_MAX_DIMS];
			memcpy(s, v.shape, sizeof s);
			s[d] = 1 + rr(3);
			struct ck_value vals[2];
			vals[0] = v;
			ck_assert_int_eq(ck_value_leaf(&vals[1], 1 + (uint32_t)op, CK_DT_F32, v.ndim, s, &err), 0);
			ck_assert_int_eq(ck_value_cat(&v, vals, 2, d, &err), 0);
			struct dense b = dense_leaf(1 + (uint32_t)op, s, x.ndim), bs = b;
			bs.d = malloc((size_t)numel(s, x.ndim) * sizeof *bs.d);
			for (int64_t i = 0; i < numel(s, x.ndim); i++)
				bs.d[i] = -1;
			dense_cat(&x, &b, d);
			dense_cat(&sc, &bs, d);
		} else if (kind == 3 && v.ndim < 6) {
			int d = (int)rr(v.ndim + 1);
			ck_assert_int_eq(ck_value_unsqueeze(&v, d, &err), 0);
			for (int i = x.ndim; i > d; i--)
				x.shape[i] = x.shape[i - 1], sc.shape[i] = sc.shape[i - 1];
			x.shape[d] = sc.shape[d] = 1;
			x.ndim++, sc.ndim++;
		} else if (kind == 4) {
			for (int d = 0; d < v.ndim; d++)
				if (v.shape[d] == 1) {
					ck_assert_int_eq(ck_value_squeeze(&v, d, &err), 0);
					for (int i = d; i < x.ndim - 1; i++)
						x.shape[i] = x.shape[i + 1], sc.shape[i] = sc.shape[i + 1];
					x.ndim--, sc.ndim--;
					break;
				}
		} else if (kind == 5) { /* view(1, *shape): scaled dims stay whole */
			int64_t s[CK_MAX_DIMS];
			s[0] = 1;
			memcpy(s + 1, v.shape, (size_t)v.ndim * sizeof *s);
			ck_assert_msg(ck_value_reshape(&v, s, v.ndim + 1, &err) == 0, "%s", err.msg);
			memcpy(x.shape, s, sizeof s);
			memcpy(sc.shape, s, sizeof s);
			x.ndim++, sc.ndim++;
		}
		check_equal(&v, &x);
		check_scales(&v, &sc);
	}
	ck_value_free(&v);
	free(x.d);
	free(sc.d);
}
END_TEST

/* The Megatron QKV layout as pieces: 3 pieces per KV group, exact rows. */
START_TEST(qkv_interleave_pieces)
{
	struct ck_err err;
	const int64_t ng = 2, hpg = 3, hd = 4, H = 5;
	int64_t sq[] = {ng * hpg * hd, H}, skv[] = {ng * hd, H};
	struct ck_value q[3];
	ck_value_leaf(&q[0], 0, CK_DT_BF16, 2, sq, &err);
	ck_value_leaf(&q[1], 1, CK_DT_BF16, 2, skv, &err);
	ck_value_leaf(&q[2], 2, CK_DT_BF16, 2, skv, &err);
	int64_t v3[] = {ng, -1, H};
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(ck_value_reshape(&q[i], v3, 3, &err), 0);
	struct ck_value out;
	ck_assert_int_eq(ck_value_cat(&out, q, 3, 1, &err), 0);
	int64_t v2[] = {-1, H};
	ck_assert_int_eq(ck_value_reshape(&out, v2, 2, &err), 0);
	ck_assert_int_eq(out.shape[0], (hpg + 2) * ng * hd);
	ck_assert_uint_eq(out.n, 3 * ng);
	/* rows of group 1's k block come from k rows [hd, 2hd) */
	int found = 0;
	for (size_t i = 0; i < out.n; i++)
		if (out.p[i].src == 1 && out.p[i].lo[0] == (hpg + 2) * hd + hpg * hd) {
			ck_assert_int_eq(out.p[i].base, hd * H);
			found = 1;
		}
	ck_assert(found);
	ck_value_free(&out);
}
END_TEST

START_TEST(errors)
{
	struct ck_err err;
	struct ck_value v;
	int64_t s[] = {6, 4};
	ck_value_leaf(&v, 0, CK_DT_F32, 2, s, &err);
	int64_t bad[] = {5, -1};
	ck_assert_int_eq(ck_value_reshape(&v, bad, 2, &err), -1);
	ck_assert_ptr_nonnull(strstr(err.msg, "do not divide"));
	int64_t two[] = {-1, -1};
	ck_assert_int_eq(ck_value_reshape(&v, two, 2, &err), -1);
	ck_assert_int_eq(ck_value_narrow(&v, 0, 4, 3, &err), -1);
	ck_assert_int_eq(ck_value_narrow(&v, 2, 0, 1, &err), -1);
	int perm[] = {0, 0};
	ck_assert_int_eq(ck_value_permute(&v, perm, &err), -1);
	ck_assert_int_eq(ck_value_cast(&v, CK_DT_I32, 0, &err), -1);
	struct ck_value pair[2], out;
	ck_value_copy(&pair[0], &v, &err);
	int64_t s2[] = {6, 5};
	ck_value_leaf(&pair[1], 1, CK_DT_F32, 2, s2, &err);
	ck_assert_int_eq(ck_value_cat(&out, pair, 2, 0, &err), -1);
	ck_assert_ptr_nonnull(strstr(err.msg, "size 5 in dim 1"));
	ck_value_free(&v);
}
END_TEST

/* pad and shift on hostile sizes and types: refused, the value unchanged */
START_TEST(pad_and_shift_errors)
{
	struct ck_err err;
	struct ck_value v, q;
	int64_t s[] = {6, 4};
	ck_assert_int_eq(ck_value_leaf(&v, 0, CK_DT_F32, 2, s, &err), 0);
	ck_assert_int_eq(ck_value_pad(&v, 0, 5, &err), -1);			   /* shrink */
	ck_assert_int_eq(ck_value_pad(&v, 0, INT64_MAX, &err), -1);		   /* overflow */
	ck_assert_int_eq(ck_value_pad(&v, 1, (int64_t)1 << 59, &err), -1); /* > 2^60 elements */
	ck_assert_ptr_nonnull(strstr(err.msg, "2^60"));
	ck_assert_int_eq(ck_value_pad(&v, 2, 8, &err), -1);
	ck_assert(v.shape[0] == 6 && v.shape[1] == 4);
	ck_assert_int_eq(ck_value_pad(&v, 0, 8, &err), 0);
	ck_assert(v.shape[0] == 8 && ck_value_has_holes(&v));
	/* shift: integers refused; after a narrowing cast refused; twice folded */
	ck_assert_int_eq(ck_value_leaf(&q, 1, CK_DT_I32, 2, s, &err), 0);
	ck_assert_int_eq(ck_value_shift(&q, 1, &err), -1);
	ck_assert_ptr_nonnull(strstr(err.msg, "not I32"));
	ck_value_free(&q);
	ck_assert_int_eq(ck_value_copy(&q, &v, &err), 0);
	ck_assert_int_eq(ck_value_cast(&q, CK_DT_BF16, 0, &err), 0);
	ck_assert_int_eq(ck_value_shift(&q, 1, &err), -1);
	ck_value_free(&q);
	ck_assert_int_eq(ck_value_shift(&v, -1, &err), 0);
	ck_assert(v.dtype == CK_DT_F32 && v.p[0].shifted && v.p[0].shift == -1.0f &&
		  !ck_piece_plain(&v.p[0]));
	/* a second shift folds into the first: -1 then +1 adds -0 (the
	 * identity, negative zeros included), then sums while exact */
	ck_assert_int_eq(ck_value_shift(&v, 1, &err), 0);
	ck_assert(v.p[0].shifted && v.p[0].shift == 0.0f && signbit(v.p[0].shift));
	ck_assert_int_eq(ck_value_shift(&v, 16777216, &err), 0);
	ck_assert(v.dtype == CK_DT_F32 && v.p[0].shift == 16777216.0f);
	ck_assert_int_eq(ck_value_shift(&v, 1, &err), -1);
	ck_assert_ptr_nonnull(strstr(err.msg, "already has +1.67772e+07 added"));
	ck_assert(v.p[0].shift == 16777216.0f); /* unchanged when refused */
	ck_value_free(&v);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("layout");
	TCase *tc = tcase_create("algebra");
	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc, random_op_sequences, 0, 400);
	tcase_add_test(tc, qkv_interleave_pieces);
	tcase_add_loop_test(tc, block_scale_op_sequences, 0, 300);
	tcase_add_test(tc, errors);
	tcase_add_test(tc, pad_and_shift_errors);
	suite_add_tcase(s, tc);
	return tu_run_suite(s, 0); /* 400 small loop tests: no fork each */
}
