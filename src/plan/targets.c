/* The plan as a container: its targets and dependency groups, and what
 * is done to a built plan (find, merge per-rank plans, retain, cast,
 * refresh, direct offsets). plan.c is the mapping interpreter that builds
 * one. */
#include "plan.h"
#include "plan_int.h"

#include "../ckpt/ggml_types.h"
#include "../util/natsort.h"
#include "shard.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int nomem(struct ck_err *err)
{
	return ck_fail_sys(err, ENOMEM, "planning");
}

static void target_free(struct ck_target *t)
{
	free(t->name);
	free(t->param);
	free(t->state);
	ck_value_free(&t->v);
	if (t->shard) {
		free(t->shard->frag);
		free(t->shard->global_name);
	}
	free(t->shard);
}

void ck_warnings_free(struct ck_warnings *w)
{
	for (size_t i = 0; i < w->n; i++)
		free(w->w[i]);
	free(w->w);
	w->w = NULL;
	w->n = 0;
}

void ck_plan_free(struct ck_plan *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < p->n; i++) {
		target_free(&p->t[i]);
	}
	for (size_t i = 0; i < p->n_groups; i++) {
		free(p->g[i].targets);
		free(p->g[i].sources);
	}
	free(p->t);
	free(p->g);
	ck_strmap_free(&p->by_name);
	struct ck_warnings w = {p->warnings, p->n_warnings};
	ck_warnings_free(&w);
	free(p->opt_template);
	free(p);
}

const struct ck_target *ck_plan_find(const struct ck_plan *p, const char *name)
{
	uint32_t i;
	return ck_strmap_get(&p->by_name, name, &i) == 0 ? &p->t[i] : NULL;
}

static const char *target_name(const void *rec)
{
	return ((const struct ck_target *)rec)->name;
}

static uint32_t uf_find(uint32_t *par, uint32_t x)
{
	while (par[x] != x) {
		par[x] = par[par[x]];
		x = par[x];
	}
	return x;
}

static int build_groups(struct ck_plan *p, struct ck_err *err)
{
	size_t ns = p->cat->n_entries, n = ns + p->n;
	uint32_t *par = malloc(n * sizeof *par), *gid = malloc(n * sizeof *gid);
	if (!par || !gid) {
		free(par);
		free(gid);
		return nomem(err);
	}
	for (size_t i = 0; i < n; i++)
		par[i] = (uint32_t)i, gid[i] = UINT32_MAX;
	/* one pass over every piece (a 100k-key MoE's are 21 MB): its sources
	 * join the target's group, and its elements count towards whether the
	 * target has holes (padding: pad(), a padded vocabulary; the engine
	 * zero-fills what no piece covers, in whatever memory it is given) */
	for (size_t t = 0; t < p->n; t++) {
		struct ck_target *tg = &p->t[t];
		uint64_t covered = 0;
		for (size_t k = 0; k < tg->v.n; k++) {
			const struct ck_piece *q = &tg->v.p[k];
			uint32_t a = uf_find(par, (uint32_t)(ns + t)), b = uf_find(par, q->src);
			par[a] = b;
			if (q->sc) { /* the scale tensor is a source of the group too */
				a = uf_find(par, (uint32_t)(ns + t));
				b = uf_find(par, q->sc->src);
				par[a] = b;
			}
			covered += ck_piece_numel(q, tg->v.ndim);
		}
		tg->holes = covered != ck_value_numel(&tg->v);
	}
	/* groups numbered in target order; sources without targets get none */
	p->g = calloc(p->n ? p->n : 1, sizeof *p->g);
	if (!p->g) {
		free(par);
		free(gid);
		return nomem(err);
	}
	for (size_t t = 0; t < p->n; t++) {
		uint32_t root = uf_find(par, (uint32_t)(ns + t));
		if (gid[root] == UINT32_MAX)
			gid[root] = (uint32_t)p->n_groups++;
		p->t[t].group = gid[root];
	}
	for (size_t pass = 0; pass < 2; pass++) {
		for (size_t t = 0; t < p->n; t++) {
			struct ck_group *g = &p->g[p->t[t].group];
			if (pass)
				g->targets[g->n_targets] = (uint32_t)t;
			g->n_targets++;
			g->out_bytes += pass ? 0 : p->t[t].nbytes;
		}
		for (size_t s = 0; s < ns; s++) {
			uint32_t root = uf_find(par, (uint32_t)s);
			if (gid[root] == UINT32_MAX)
				continue;
			struct ck_group *g = &p->g[gid[root]];
			if (pass)
				g->sources[g->n_sources] = (uint32_t)s;
			g->n_sources++;
			g->in_bytes += pass ? 0 : p->cat->entries[s].t.nbytes;
		}
		for (size_t i = 0; i < p->n_groups && !pass; i++) {
			struct ck_group *g = &p->g[i];
			g->targets = malloc((g->n_targets ? g->n_targets : 1) * sizeof *g->targets);
			g->sources = malloc((g->n_sources ? g->n_sources : 1) * sizeof *g->sources);
			if (!g->targets || !g->sources) {
				free(par);
				free(gid);
				return nomem(err);
			}
			g->n_targets = g->n_sources = 0;
		}
	}
	free(par);
	free(gid);
	return 0;
}

static const char *nth_target_name(const void *p, size_t i)
{
	return ((const struct ck_plan *)p)->t[i].name;
}

int ck_plan_finish(struct ck_plan *p, struct ck_err *err)
{
	ck_natural_sort(p->t, p->n, sizeof *p->t, target_name);
	if (ck_strmap_init(&p->by_name, p->n) < 0)
		return nomem(err);
	p->total_bytes = 0;
	struct ck_strmap_window w; /* 91k names: the slots' misses overlap */
	for (size_t i = 0; i < p->n; i++) {
		uint32_t h = ck_strmap_ahead(&p->by_name, &w, i, p->n, nth_target_name, p);
		struct ck_target *t = &p->t[i];
		uint64_t bytes;
		if (ck_shape_bytes(t->v.shape, t->v.ndim, t->v.dtype, &bytes) < 0)
			return ck_fail(err, CK_E_MAPPING, "target \"%s\": size overflows", t->name);
		t->nbytes = bytes;
		p->total_bytes += bytes;
		if (ck_strmap_put_h(&p->by_name, t->name, h, (uint32_t)i, NULL) < 0)
			return nomem(err);
	}
	return build_groups(p, err);
}

/* A chunked (DCP) tensor: each chunk's pieces, moved to its place. */

int ck_plan_refresh(struct ck_plan *p, struct ck_err *err)
{
	for (size_t i = 0; i < p->n_groups; i++) {
		free(p->g[i].targets);
		free(p->g[i].sources);
	}
	free(p->g);
	p->g = NULL;
	p->n_groups = 0;
	p->total_bytes = 0;
	for (size_t i = 0; i < p->n; i++) {
		struct ck_target *t = &p->t[i];
		ck_shape_bytes(t->v.shape, t->v.ndim, t->v.dtype, &t->nbytes);
		size_t qk, qb;
		if (t->qtype && ck_ggml_block(t->qtype, &qk, &qb)) /* whole blocks (F32 elements) */
			t->nbytes = t->nbytes / 4 / qk * qb;
		p->total_bytes += t->nbytes;
	}
	return build_groups(p, err);
}

void ck_plan_merge_free_idx(uint32_t **idx, size_t n)
{
	for (size_t k = 0; idx && k < n; k++)
		free(idx[k]);
	free(idx);
}

int ck_plan_merge(const struct ck_plan *const *plans, size_t n, struct ck_plan **out,
		  uint32_t ***idx, struct ck_err *err)
{
	*out = NULL;
	*idx = calloc(n ? n : 1, sizeof **idx);
	size_t total = 0;
	for (size_t k = 0; k < n; k++)
		total += plans[k]->n;
	struct ck_plan *p = calloc(1, sizeof *p);
	uint32_t *next = malloc((total ? total : 1) * sizeof *next); /* same name, chained */
	int bad = !*idx || !p || !next ||
		  !(p->t = calloc(total ? total : 1, sizeof *p->t)) ||
		  ck_strmap_init(&p->by_name, total) < 0;
	if (!bad && n) {
		p->cat = plans[0]->cat;
		p->config = plans[0]->config;
	}
	if (!bad && n && plans[0]->opt_template && !(p->opt_template = strdup(plans[0]->opt_template)))
		bad = 1;
	for (size_t k = 0; !bad && k < n; k++) {
		const struct ck_plan *q = plans[k];
		if (!((*idx)[k] = malloc((q->n ? q->n : 1) * sizeof ***idx))) {
			bad = 1;
			break;
		}
		for (size_t i = 0; i < q->n && !bad; i++) {
			const struct ck_target *t = &q->t[i];
			uint32_t u;
			int found = 0;
			if (ck_strmap_get(&p->by_name, t->name, &u) == 0)
				for (; u != UINT32_MAX; u = next[u])
					if (ck_value_equal(&p->t[u].v, &t->v) &&
					    p->t[u].qtype == t->qtype && p->t[u].qw == t->qw) {
						found = 1;
						break;
					}
			if (!found) {
				u = (uint32_t)p->n;
				struct ck_target *nt = &p->t[p->n];
				uint32_t head;
				int dup = ck_strmap_get(&p->by_name, t->name, &head) == 0;
				/* a differing layout of one name (a shard): its own entry */
				size_t len = strlen(t->name) + 24;
				if (!(nt->name = malloc(len)) || ck_value_copy(&nt->v, &t->v, err) < 0) {
					free(nt->name);
					nt->name = NULL;
					bad = 1;
					break;
				}
				snprintf(nt->name, len, dup ? "%s@%zu" : "%s", t->name, k);
				nt->nbytes = t->nbytes;
				nt->holes = t->holes;
				nt->qtype = t->qtype;
				nt->qw = t->qw; /* the view that owns it outlives the union */
				nt->scalar = t->scalar;
				if ((t->param && !(nt->param = strdup(t->param))) ||
				    (t->state && !(nt->state = strdup(t->state))))
					bad = 1;
				p->total_bytes += t->nbytes;
				next[u] = UINT32_MAX;
				if (dup) { /* chain after the head */
					next[u] = next[head];
					next[head] = u;
				} else if (ck_strmap_put(&p->by_name, nt->name, u, NULL) < 0) {
					bad = 1;
				}
				p->n++;
			}
			(*idx)[k][i] = u;
		}
	}
	free(next);
	if (bad || build_groups(p, err) < 0) {
		ck_plan_free(p);
		ck_plan_merge_free_idx(*idx, n);
		*idx = NULL;
		return bad ? nomem(err) : -1;
	}
	*out = p;
	return 0;
}

int ck_plan_retain(struct ck_plan *p, const unsigned char *keep, struct ck_err *err)
{
	size_t k = 0;
	for (size_t i = 0; i < p->n; i++) {
		if (keep[i]) {
			p->t[k++] = p->t[i];
			continue;
		}
		target_free(&p->t[i]);
	}
	p->n = k;
	ck_strmap_free(&p->by_name);
	if (ck_strmap_init(&p->by_name, p->n) < 0)
		return nomem(err);
	for (size_t i = 0; i < p->n; i++)
		if (ck_strmap_put(&p->by_name, p->t[i].name, (uint32_t)i, NULL) < 0)
			return nomem(err);
	return ck_plan_refresh(p, err);
}

int ck_plan_keep_state(struct ck_plan *p, int which, struct ck_err *err)
{
	if (!which)
		return 0;
	unsigned char *keep = malloc(p->n ? p->n : 1);
	if (!keep)
		return nomem(err);
	for (size_t i = 0; i < p->n; i++)
		keep[i] = (p->t[i].param != NULL) == (which == 2);
	int r = ck_plan_retain(p, keep, err);
	free(keep);
	return r;
}

/* Whether every piece of t reads quantized GGUF blocks. */
static int from_quantized(const struct ck_plan *p, const struct ck_target *t)
{
	for (size_t k = 0; k < t->v.n; k++)
		if (!p->cat->entries[t->v.p[k].src].t.quant)
			return 0;
	return t->v.n > 0;
}

int ck_plan_cast_all(struct ck_plan *p, enum ck_dtype dt, struct ck_err *err)
{
	return ck_plan_cast(p, dt, 0, err);
}

int ck_plan_cast(struct ck_plan *p, enum ck_dtype dt, int only_quantized, struct ck_err *err)
{
	p->total_bytes = 0;
	for (size_t i = 0; i < p->n; i++) {
		struct ck_target *t = &p->t[i];
		if (ck_dtype_is_castable_float(t->v.dtype) && (!only_quantized || from_quantized(p, t)) &&
		    ck_value_cast(&t->v, dt, 0, err) < 0)
			return -1;
		ck_shape_bytes(t->v.shape, t->v.ndim, t->v.dtype, &t->nbytes);
		p->total_bytes += t->nbytes;
	}
	for (size_t i = 0; i < p->n_groups; i++) {
		p->g[i].out_bytes = 0;
		for (size_t k = 0; k < p->g[i].n_targets; k++)
			p->g[i].out_bytes += p->t[p->g[i].targets[k]].nbytes;
	}
	return 0;
}

/* A target whose bytes are one contiguous, cast-free range of one source
 * file (a rename, the identity view) needs no evaluation: reads can be
 * answered from the file itself. */
int64_t ck_plan_direct_offset(const struct ck_plan *plan, uint32_t t)
{
	const struct ck_target *tg = &plan->t[t];
	const struct ck_value *v = &tg->v;
	if (v->n != 1 || !ck_piece_plain(&v->p[0]) || tg->holes || !tg->nbytes || tg->qtype)
		return -1;
	const struct ck_piece *p = &v->p[0];
	int64_t run = 1;
	for (int d = v->ndim - 1; d >= 0; d--) {
		if (p->lo[d] != 0 || p->hi[d] != v->shape[d])
			return -1;
		if (v->shape[d] > 1 && p->stride[d] != run)
			return -1;
		run *= v->shape[d];
	}
	const struct ck_tensor_info *src = &plan->cat->entries[p->src].t;
	if (src->quant) /* quantized blocks are decoded, never served as they are */
		return -1;
	return (int64_t)(src->offset + (uint64_t)p->base * ck_dtype_size(src->dtype));
}

/* Each source element a piece reads lies after the one before it in output
 * order, and the innermost varying dimension reads consecutive elements: a
 * window of output rows then reads about its own bytes of source. */
static int piece_in_order(const struct ck_piece *p, int ndim)
{
	int64_t inner = 0; /* source elements one step of the dimensions inside spans */
	for (int d = ndim - 1; d >= 0; d--) {
		int64_t e = p->hi[d] - p->lo[d];
		if (e <= 1)
			continue;
		if (inner ? p->stride[d] < inner : p->stride[d] != 1)
			return 0;
		if (p->stride[d] > INT64_MAX / e)
			return 0;
		inner = p->stride[d] * e;
	}
	return 1;
}

int ck_plan_in_order(const struct ck_plan *plan, uint32_t t)
{
	const struct ck_target *tg = &plan->t[t];
	const struct ck_value *v = &tg->v;
	if (!v->n || !tg->nbytes)
		return 0;
	for (size_t i = 0; i < v->n; i++) {
		const struct ck_piece *p = &v->p[i];
		if (p->sc || p->fp4 || plan->cat->entries[p->src].t.quant ||
		    !piece_in_order(p, v->ndim))
			return 0;
	}
	return 1;
}

int ck_plan_streamable(const struct ck_plan *plan, uint32_t t)
{
	const struct ck_target *tg = &plan->t[t];
	return !tg->holes && !tg->qtype && ck_plan_in_order(plan, t);
}

int ck_plan_copy_some(const struct ck_plan *p, const unsigned char *keep, struct ck_plan **out,
		      struct ck_err *err)
{
	/* the kept targets side by side (shallow: merge copies them deeply) */
	struct ck_plan part = {.cat = p->cat,
			       .config = p->config,
			       .t = p->t,
			       .n = p->n,
			       .opt_template = p->opt_template};
	uint32_t *from = NULL;
	if (keep) {
		part.t = malloc((p->n ? p->n : 1) * sizeof *part.t);
		from = malloc((p->n ? p->n : 1) * sizeof *from);
		if (!part.t || !from) {
			free(part.t);
			free(from);
			*out = NULL;
			return nomem(err);
		}
		part.n = 0;
		for (size_t i = 0; i < p->n; i++)
			if (keep[i])
				from[part.n] = (uint32_t)i, part.t[part.n++] = p->t[i];
	}
	const struct ck_plan *one = &part;
	uint32_t **idx;
	int r = ck_plan_merge(&one, 1, out, &idx, err); /* the union of one plan */
	if (keep)
		free(part.t);
	if (r < 0) {
		free(from);
		return -1;
	}
	ck_plan_merge_free_idx(idx, 1);
	struct ck_plan *c = *out;
	for (size_t i = 0; i < c->n; i++) { /* what produced each target, as it was */
		const struct ck_target *t = &p->t[from ? from[i] : i];
		c->t[i].stage = t->stage, c->t[i].rule = t->rule;
	}
	free(from);
	if (p->n_warnings && !(c->warnings = calloc(p->n_warnings, sizeof *c->warnings)))
		goto oom;
	for (; c->n_warnings < p->n_warnings; c->n_warnings++)
		if (!(c->warnings[c->n_warnings] = strdup(p->warnings[c->n_warnings])))
			goto oom;
	return 0;
oom:
	ck_plan_free(c);
	*out = NULL;
	return nomem(err);
}

int ck_plan_widen(const struct ck_plan *p, int (*widens)(enum ck_dtype), enum ck_dtype to,
		  struct ck_plan **out, uint32_t **of, struct ck_err *err)
{
	*out = NULL;
	unsigned char *keep = calloc(p->n ? p->n : 1, 1);
	*of = malloc((p->n ? p->n : 1) * sizeof **of);
	int r = keep && *of ? 0 : nomem(err);
	for (size_t i = 0, k = 0; r == 0 && i < p->n; i++)
		if ((keep[i] = widens(p->t[i].v.dtype) && !p->t[i].qtype))
			(*of)[k++] = (uint32_t)i;
	if (r == 0)
		r = ck_plan_copy_some(p, keep, out, err);
	free(keep);
	if (r < 0 || ck_plan_cast(*out, to, 0, err) < 0) {
		ck_plan_free(*out);
		*out = NULL;
		free(*of);
		*of = NULL;
		return -1;
	}
	return 0;
}
