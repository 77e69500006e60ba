/* Select rules: whole targets placed on positions of a mesh axis (pipeline
 * stages, experts of per-expert keys), renumbered if asked. */
#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../map/keyshape.h"
#include "../util/natsort.h"
#include "../util/numfmt.h"
#include "../util/parallel.h"
#include "optstate.h"
#include "shard_int.h"

/* The decimal integer (up to 12 digits) the n bytes at s spell, or -1. */
static int64_t span_int(const char *s, size_t n)
{
	if (!n || n > 12)
		return -1;
	int64_t x = 0;
	for (size_t q = 0; q < n; q++) {
		if (!isdigit((unsigned char)s[q]))
			return -1;
		x = x * 10 + (s[q] - '0');
	}
	return x;
}

/* The integer value of a capture, or -1 if it is not a decimal integer. */
static int64_t capture_int(const struct ck_binding *b, const char *name)
{
	const char *v = ck_binding_get(b, name);
	return v ? span_int(v, strlen(v)) : -1;
}

/* A split's count where its rule gives none: one past the largest value of
 * its capture among the plan's targets. */
static int64_t split_count(const struct ck_select *s, const struct ck_plan *p)
{
	int64_t count = 0;
	for (size_t i = 0; i < p->n; i++) {
		struct ck_binding b = {0};
		if (ck_pattern_match(&s->match, p->t[i].name, &b) > 0) {
			int64_t x = capture_int(&b, s->split);
			count = x >= count ? x + 1 : count;
		}
		ck_binding_clear(&b);
	}
	return count;
}

/* Contiguous range [lo, hi) of a split's values held by position c. */
static int select_range(const struct ck_select *s, const struct ck_plan *p, const struct ck_mesh *m,
			int a, const char *path, struct req_ctx *rc, const int64_t *plan_count,
			int64_t *lo, int64_t *hi, int64_t *count_out, struct ck_err *err)
{
	int64_t count = 0, size = m->size[a];
	if (!s->count && plan_count) {
		count = *plan_count;
	} else if (s->count) {
		struct ck_xval v;
		if (ck_expr_eval(s->count, ck_shard_lookup, rc, &v, err) < 0) {
			char msg[sizeof err->msg];
			memcpy(msg, err->msg, sizeof msg);
			return ck_fail(err, CK_E_MAPPING, "%s: select rule %d: count: %s", path,
				       s->index, msg);
		}
		int ok = v.kind == XV_INT && v.i >= 0;
		count = v.i;
		ck_xval_free(&v);
		if (!ok)
			return ck_fail(err, CK_E_MAPPING, "%s: select rule %d: count is not a "
							  "non-negative integer",
				       path, s->index);
	} else {
		count = split_count(s, p);
	}
	int64_t c = rc->coord[a]; /* this rank's position on the axis */
	*count_out = count;
	if (s->bounds) {
		if (s->n_bounds != size + 1 || s->bounds[s->n_bounds - 1] != count)
			return ck_fail(err, CK_E_MAPPING,
				       "%s: select rule %d: boundaries need %lld values from 0 to %lld "
				       "(the count of {%s}) for %s=%lld",
				       path, s->index, (long long)(size + 1), (long long)count, s->split,
				       s->axis, (long long)size);
		*lo = s->bounds[c];
		*hi = s->bounds[c + 1];
		return 0;
	}
	if (count % size)
		return ck_fail(err, CK_E_MAPPING,
			       "%s: select rule %d: %lld values of {%s} do not split evenly over "
			       "%s=%lld (give \"boundaries\")",
			       path, s->index, (long long)count, s->split, s->axis, (long long)size);
	*lo = c * (count / size);
	*hi = *lo + count / size;
	return 0;
}

struct order {
	struct ck_target t;
	unsigned axes;
	char *global;
};

static int cmp_order(const void *a, const void *b)
{
	const struct order *x = a, *y = b;
	int c = ck_natural_cmp(x->t.name, y->t.name);
	return c ? c : strcmp(x->t.name, y->t.name);
}

/* A select rule's verdict on a name it does not match (match_table). */
#define NO_MATCH INT64_MIN
#define MATCH_PARALLEL_MIN 4096 /* fewer targets: a thread's start costs more */

/* The select rules over one plan: each rule's axis, and the range of its
 * split's values this rank holds; what each rule says of each target's own
 * name, matched once (tab, row[i] the row of target i, or i). */
struct sel {
	const struct ck_mapping *rules;
	const struct ck_mesh *m;
	struct req_ctx *rc;
	const char *path;
	int ns, ax[64];
	int64_t lo[64], hi[64], cnt[64];
	unsigned model_axes; /* axes some rule places a target of the whole model on */
	unsigned char seg_split[64]; /* the split is a whole segment (split_is_segment) */
	const struct ck_sel_cell *tab;
	const uint32_t *row;
};

static int n_cols(const struct ck_mapping *rules)
{
	return rules ? (rules->n_sels < 64 ? rules->n_sels : 64) : 0;
}

struct match_job {
	const struct ck_plan *p;
	const struct ck_mapping *rules;
	int ns;
	size_t np;
	struct ck_sel_cell *tab;
	unsigned char *oom; /* per piece */
	uint32_t *shape;    /* each target's key shape */
	struct ck_shape_memo *memo; /* per rule: which shapes may match */
	unsigned char on_mesh[64];  /* per rule: its axis is in the mesh */
};

/* What select rule s says of name; *oom set when out of memory. */
static struct ck_sel_cell verdict(const struct ck_select *s, const char *name, unsigned char *oom)
{
	size_t pos = 0, len = 0;
	int r = ck_pattern_match_at(&s->match, name, s->split, &pos, &len);
	if (r < 0)
		*oom = 1;
	if (r <= 0)
		return (struct ck_sel_cell){NO_MATCH, 0, 0};
	/* a name is far shorter than 4 GiB (a span that is not: matched anew) */
	int fits = pos <= UINT32_MAX && len < UINT32_MAX;
	return (struct ck_sel_cell){s->split ? span_int(name + pos, len) : 0,
				    fits ? (uint32_t)pos : 0, fits ? (uint32_t)len : UINT32_MAX};
}

/* Rows of the match table for one piece of the targets; a rule on an axis
 * the mesh lacks matches nothing, nor one whose pattern misses the key's
 * shape (map/keyshape.h: most keys, for most rules). */
static void match_piece(void *ctx, size_t piece)
{
	struct match_job *j = ctx;
	size_t n = j->p->n, a = ck_piece_start(n, j->np, piece);
	size_t e = ck_piece_start(n, j->np, piece + 1);
	for (size_t i = a; i < e; i++) {
		const struct ck_target *t = &j->p->t[i];
		for (int k = 0; k < j->ns; k++) {
			const struct ck_select *s = &j->rules->sels[k];
			int may = j->on_mesh[k] &&
				  (!s->match.shape_exact || j->memo[k].v[j->shape[i]] == 2);
			j->tab[i * (size_t)j->ns + (size_t)k] =
			    may ? verdict(s, t->param ? t->param : t->name, &j->oom[piece])
				: (struct ck_sel_cell){NO_MATCH, 0, 0};
		}
	}
}

static const char *own_name(const void *ctx, size_t i)
{
	const struct ck_target *t = &((const struct ck_plan *)ctx)->t[i];
	return t->param ? t->param : t->name;
}

/* The key shape of each target's own name, and each shape-exact rule's
 * verdict on each shape. */
static int shapes_of(struct match_job *j, int threads)
{
	struct ck_keyshapes ks = {0};
	int rc = (j->shape = malloc((j->p->n ? j->p->n : 1) * sizeof *j->shape)) &&
			 (j->memo = calloc((size_t)(j->ns ? j->ns : 1), sizeof *j->memo)) &&
			 ck_keyshapes_ids(&ks, j->p->n, own_name, j->p, j->shape, threads) == 0
		     ? 0
		     : -1;
	for (int k = 0; rc == 0 && k < j->ns; k++)
		if (j->on_mesh[k])
			rc = ck_shape_memo_fill(&j->rules->sels[k].match, &ks, &j->memo[k]);
	ck_keyshapes_free(&ks);
	return rc;
}

/* Match every select rule (the first 64: more are refused) against every
 * target's own name (its parameter's for optimizer state), on the cores:
 * *tab, p->n rows of n_cols(rules) values. */
static int match_table(const struct ck_plan *p, const struct ck_mapping *rules,
		       const struct ck_mesh *m, struct ck_sel_cell **tab, struct ck_err *err)
{
	int threads = p->n >= MATCH_PARALLEL_MIN ? ck_cpu_count() : 1;
	struct match_job j = {
	    .p = p, .rules = rules, .ns = n_cols(rules), .np = ck_pieces(p->n, threads, 4)};
	for (int k = 0; k < j.ns; k++) /* once per rule, not per target */
		j.on_mesh[k] = ck_mesh_axis(m, rules->sels[k].axis) >= 0;
	size_t cells = p->n * (size_t)j.ns;
	j.tab = malloc((cells ? cells : 1) * sizeof *j.tab);
	j.oom = calloc(j.np ? j.np : 1, 1);
	int bad = !j.tab || !j.oom || shapes_of(&j, threads) < 0;
	if (!bad)
		ck_parallel_for(j.np, threads, match_piece, &j);
	for (size_t k = 0; !bad && k < j.np; k++)
		bad = j.oom[k];
	for (int k = 0; j.memo && k < j.ns; k++)
		ck_shape_memo_free(&j.memo[k]);
	free(j.memo);
	free(j.shape);
	free(j.oom);
	if (bad) {
		free(j.tab);
		*tab = NULL;
		return ck_fail_sys(err, ENOMEM, "select");
	}
	*tab = j.tab;
	return 0;
}

/* Whether select rule k matches some target of the table's n rows. */
static int rule_hits(const struct ck_sel_cell *tab, size_t n, int ns, int k)
{
	for (size_t i = 0; i < n; i++)
		if (tab[i * (size_t)ns + (size_t)k].v != NO_MATCH)
			return 1;
	return 0;
}

/* Whether renumbering s's split keeps a name's key shape (map/keyshape.h):
 * its capture is a whole segment, so one number takes another's place
 * ("layers.{L}.{rest:path}"; not "{layer:path}.weight{E:int}"). */
static int split_is_segment(const struct ck_pattern *p, const char *split)
{
	for (int t = 0; t < p->n; t++) {
		if (p->tok[t].lit || strcmp(p->tok[t].name, split) != 0)
			continue;
		const struct ck_ptok *a = t > 0 ? &p->tok[t - 1] : NULL;
		const struct ck_ptok *b = t + 1 < p->n ? &p->tok[t + 1] : NULL;
		return (!a || (a->lit && a->lit_len && a->lit[a->lit_len - 1] == '.')) &&
		       (!b || (b->lit && b->lit_len && b->lit[0] == '.'));
	}
	return 0;
}

/* prep: what the whole plan says (ck_select_prepare), when p is a part of it */
static int select_ranges(struct sel *x, const struct ck_plan *p, const struct ck_shard_prep *prep,
			 struct ck_err *err)
{
	if (x->ns > 64)
		return ck_fail(err, CK_E_MAPPING, "%s: more than 64 select rules", x->path);
	for (int k = 0; k < x->ns; k++) {
		const struct ck_select *s = &x->rules->sels[k];
		x->ax[k] = ck_mesh_axis(x->m, s->axis);
		x->seg_split[k] = s->split && split_is_segment(&s->match, s->split);
		/* a split that matches no key asks nothing (the MoE rules of a
		 * mapping, on a dense model): its count is not even evaluated */
		int hit = x->ax[k] >= 0 && (prep ? (int)(prep->sel_hit >> k & 1)
						 : rule_hits(x->tab, p->n, x->ns, k));
		if (hit)
			x->model_axes |= 1u << x->ax[k];
		if (hit && s->split &&
		    select_range(s, p, x->m, x->ax[k], x->path, x->rc,
				 prep ? &prep->sel_count[k] : NULL, &x->lo[k], &x->hi[k],
				 &x->cnt[k], err) < 0)
			return -1;
	}
	return 0;
}

int ck_select_prepare(const struct ck_plan *p, const struct ck_mapping *rules,
		      const struct ck_mesh *m, struct ck_shard_prep *prep, struct ck_err *err)
{
	int ns = n_cols(rules);
	if (match_table(p, rules, m, &prep->sel_tab, err) < 0)
		return -1;
	prep->sel_rows = p->n;
	for (int k = 0; k < ns; k++) {
		const struct ck_select *s = &rules->sels[k];
		if (!rule_hits(prep->sel_tab, p->n, ns, k))
			continue;
		prep->sel_hit |= (uint64_t)1 << k;
		if (s->split && !s->count)
			prep->sel_count[k] = split_count(s, p);
	}
	return 0;
}

/* Select rule k on target i's name: 1 with *v, 0 when it does not match,
 * -1 out of memory. The table answers (*cell) for a name no rule renamed
 * yet, and for a renamed one of the same key shape (renumbering a whole
 * segment keeps it) that a shape-exact rule misses; a name matched anew
 * leaves its captures in b (*cell NULL). */
static int rule_on(const struct sel *x, int k, size_t i, const char *name, int renamed,
		   int same_shape, struct ck_binding *b, int64_t *v,
		   const struct ck_sel_cell **cell)
{
	const struct ck_select *s = &x->rules->sels[k];
	*cell = &x->tab[(size_t)(x->row ? x->row[i] : i) * (size_t)x->ns + (size_t)k];
	*v = (*cell)->v;
	if (!renamed || (same_shape && s->match.shape_exact && *v == NO_MATCH))
		return *v != NO_MATCH;
	*cell = NULL;
	int r = ck_pattern_match(&s->match, name, b);
	if (r > 0)
		*v = s->split ? capture_int(b, s->split) : 0;
	return r;
}

/* Renumber name (s's split becomes num) into *nn: the table's span of the
 * split in name replaced (cell), or b's captures substituted back. */
static int renumber(const struct ck_select *s, const char *name, const struct ck_sel_cell *cell,
		    struct ck_binding *b, const char *num, char **nn, struct ck_err *err)
{
	if (cell && cell->len != UINT32_MAX) {
		size_t n = strlen(name), k = strlen(num), tail = n - cell->pos - cell->len;
		if (!(*nn = malloc(n - cell->len + k + 1)))
			return ck_fail_sys(err, ENOMEM, "select");
		memcpy(*nn, name, cell->pos);
		memcpy(*nn + cell->pos, num, k);
		memcpy(*nn + cell->pos + k, name + cell->pos + cell->len, tail + 1);
		return 0;
	}
	if (!b->n && ck_pattern_match(&s->match, name, b) <= 0) /* the table's match */
		return ck_fail_sys(err, ENOMEM, "select");
	if (ck_binding_set(b, s->split, num) < 0)
		return ck_fail_sys(err, ENOMEM, "select");
	return ck_pattern_subst(&s->match, b, nn, err);
}

/* Where target i (t) goes: *keep (this rank holds it), *axes (the axes it
 * is placed on), and when renumbered *name (malloc'd) with *orig the name it
 * had. name starts as base (t's parameter's name for optimizer state). */
static int place_target(const struct sel *x, const struct ck_target *t, size_t i, char *base,
			int *keep, unsigned *axes, char **name, char **orig, struct ck_err *err)
{
	int same_shape = 1; /* *name has base's key shape */
	for (int k = 0; k < x->ns && *keep; k++) {
		const struct ck_select *s = &x->rules->sels[k];
		struct ck_binding b = {0};
		int64_t v = 0;
		const struct ck_sel_cell *cell = NULL;
		int hit = x->ax[k] < 0
			      ? 0
			      : rule_on(x, k, i, *name, *name != base, same_shape, &b, &v, &cell);
		if (hit < 0)
			return ck_fail_sys(err, ENOMEM, "select");
		if (!hit) /* b holds nothing */
			continue;
		int64_t c = x->rc->coord[x->ax[k]], size = x->m->size[x->ax[k]];
		*axes |= 1u << x->ax[k];
		int r = 0;
		if (s->stage) {
			*keep = s->stage == 1 ? c == 0 : c == size - 1;
		} else {
			if (v < 0 || v >= x->cnt[k])
				r = ck_fail(err, CK_E_MAPPING,
					    "%s: select rule %d: {%s} of \"%s\" is not an integer below "
					    "its count",
					    x->path, s->index, s->split, t->name);
			*keep = v >= x->lo[k] && v < x->hi[k];
			if (*keep && s->renumber) {
				/* name: t's own, or one this loop made */
				char num[24], *nn = NULL;
				ck_fmt_i64(num, v - x->lo[k]);
				if (renumber(s, *name, cell, &b, num, &nn, err) < 0)
					r = -1;
				same_shape = same_shape && x->seg_split[k];
				if (!*orig)
					*orig = *name;
				else if (*name != base)
					free(*name);
				*name = nn;
			}
		}
		if (b.n || b.block) /* matched anew */
			ck_binding_clear(&b);
		if (r < 0)
			return -1;
	}
	return 0;
}

/* Renumbered names sort anew; keep the axes and global names beside them,
 * and refuse two targets renumbered to one name. */
static int resort(struct ck_plan *p, unsigned *sel_axes, char **global, const char *path,
		  struct ck_err *err)
{
	struct order *o = calloc(p->n ? p->n : 1, sizeof *o);
	if (!o)
		return ck_fail_sys(err, ENOMEM, "select");
	for (size_t i = 0; i < p->n; i++)
		o[i] = (struct order){p->t[i], sel_axes[i], global[i]};
	qsort(o, p->n, sizeof *o, cmp_order);
	ck_strmap_free(&p->by_name);
	int bad = ck_strmap_init(&p->by_name, p->n) < 0, rc = 0;
	for (size_t i = 0; i < p->n; i++) {
		p->t[i] = o[i].t;
		sel_axes[i] = o[i].axes;
		global[i] = o[i].global;
		uint32_t other;
		if (!bad && ck_strmap_put(&p->by_name, p->t[i].name, (uint32_t)i, &other) == 1)
			rc = ck_fail(err, CK_E_MAPPING,
				     "%s: renumbering gives two targets the name \"%s\"", path,
				     p->t[i].name);
	}
	free(o);
	return bad ? ck_fail_sys(err, ENOMEM, "select") : rc;
}

/* The select rules over p (prep and rows: the whole plan's table, row[i]
 * the row of p's target i; else p's own, in *own, to free). */
static int sel_open(struct sel *x, const struct ck_plan *p, const struct ck_shard_prep *prep,
		    const uint32_t *rows, struct ck_sel_cell **own, struct ck_err *err)
{
	*own = NULL;
	if (prep && prep->sel_tab && (rows || prep->sel_rows == p->n)) {
		x->tab = prep->sel_tab;
		x->row = rows;
	} else {
		if (match_table(p, x->rules, x->m, own, err) < 0)
			return -1;
		x->tab = *own;
	}
	if (select_ranges(x, p, prep, err) < 0) {
		free(*own);
		*own = NULL;
		return -1;
	}
	return 0;
}

int ck_select_keep(const struct ck_plan *p, const struct ck_shard_prep *prep,
		   const struct ck_mapping *rules, const struct ck_mesh *m, const char *path,
		   struct req_ctx *rc, unsigned char *keep, struct ck_err *err)
{
	struct sel x = {
	    .rules = rules, .m = m, .rc = rc, .path = path, .ns = rules ? rules->n_sels : 0};
	struct ck_sel_cell *own;
	if (sel_open(&x, p, prep, NULL, &own, err) < 0)
		return -1;
	int r = 0;
	for (size_t i = 0; r == 0 && i < p->n; i++) {
		const struct ck_target *t = &p->t[i];
		char *base = t->param ? t->param : t->name, *name = base, *orig = NULL;
		unsigned axes = 0;
		int k = 1;
		r = place_target(&x, t, i, base, &k, &axes, &name, &orig, err);
		if (name != base) /* renamed: the names it had between are gone */
			free(name);
		keep[i] = (unsigned char)k;
	}
	free(own);
	return r;
}

/* Apply the select rules: drop the targets this rank does not hold, rename
 * renumbered ones (keeping the global name), and record per target the
 * axes it is placed on (not replicated over). */
int ck_select_targets(struct ck_plan *p, const struct ck_shard_prep *prep,
		      const struct ck_mapping *rules, const struct ck_mesh *m, const char *path,
		      const uint32_t *rows, struct req_ctx *rc, unsigned **sel_axes,
		      char ***global_out, unsigned *model_axes, struct ck_err *err)
{
	struct sel x = {
	    .rules = rules, .m = m, .rc = rc, .path = path, .ns = rules ? rules->n_sels : 0};
	struct ck_sel_cell *own;
	if (sel_open(&x, p, prep, rows, &own, err) < 0)
		return -1;
	*model_axes = x.model_axes;
	*sel_axes = calloc(p->n ? p->n : 1, sizeof **sel_axes);
	char **global = calloc(p->n ? p->n : 1, sizeof *global);
	if (!*sel_axes || !global) {
		free(global);
		free(own);
		return ck_fail_sys(err, ENOMEM, "select");
	}
	size_t kept = 0;
	for (size_t i = 0; i < p->n; i++) {
		struct ck_target *t = &p->t[i];
		unsigned axes = 0;
		int keep = 1;
		/* optimizer state is placed by its parameter's name */
		char *base = t->param ? t->param : t->name, *name = base, *orig = NULL;
		int rc_ = place_target(&x, t, i, base, &keep, &axes, &name, &orig, err);
		char *full = NULL; /* a renumbered state's name follows its parameter's */
		if (rc_ == 0 && keep && orig && t->param &&
		    !(full = ck_opt_name(p->opt_template, name, t->state)))
			rc_ = ck_fail_sys(err, ENOMEM, "select");
		if (rc_ < 0) { /* keep every target owned by the plan, then fail */
			if (name != base)
				free(name);
			size_t k0 = kept;
			for (size_t j = i; j < p->n; j++)
				p->t[kept++] = p->t[j];
			p->n = kept;
			for (size_t j = 0; j < k0; j++)
				free(global[j]);
			free(global);
			free(own);
			return -1;
		}
		if (!keep) { /* not this rank's */
			if (name != base)
				free(name);
			free(t->name);
			free(t->param);
			free(t->state);
			ck_value_free(&t->v);
			continue;
		}
		if (full) {
			global[kept] = t->name;
			free(t->param);
			t->param = name;
			t->name = full;
		} else if (orig) {
			global[kept] = orig;
			t->name = name;
		}
		(*sel_axes)[kept] = axes;
		p->t[kept++] = *t;
	}
	p->n = kept;
	*global_out = global;
	free(own);
	return resort(p, *sel_axes, global, path, err);
}
