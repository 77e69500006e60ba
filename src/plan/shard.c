#include "shard_int.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../map/keyshape.h"
#include "../util/json_strict.h"

int ck_mesh_parse(const char *text, struct ck_mesh *m, struct ck_err *err)
{
	memset(m, 0, sizeof *m);
	const char *s = text;
	while (*s) {
		if (m->n == CK_MAX_AXES)
			return ck_fail(err, CK_E_USAGE, "--mesh: more than %d axes", CK_MAX_AXES);
		size_t n = 0;
		while (isalnum((unsigned char)s[n]) || s[n] == '_')
			n++;
		if (!n || n >= sizeof m->name[0] || s[n] != '=')
			return ck_fail(err, CK_E_USAGE, "--mesh \"%s\": expected AXIS=SIZE[,AXIS=SIZE]",
				       text);
		memcpy(m->name[m->n], s, n);
		for (int i = 0; i < m->n; i++)
			if (!strcmp(m->name[i], m->name[m->n]))
				return ck_fail(err, CK_E_USAGE, "--mesh: axis %s given twice", m->name[i]);
		char *end;
		long long v = strtoll(s + n + 1, &end, 10);
		if (end == s + n + 1 || v < 1 || v > (1 << 20) || (*end && *end != ','))
			return ck_fail(err, CK_E_USAGE, "--mesh \"%s\": axis sizes are 1..%d", text,
				       1 << 20);
		m->size[m->n++] = v;
		s = *end ? end + 1 : end;
		if (ck_mesh_world(m) > CK_MAX_WORLD) /* eight axes of 2^20 overflow int64 */
			return ck_fail(err, CK_E_USAGE, "--mesh \"%s\": more than %d ranks in all",
				       text, CK_MAX_WORLD);
	}
	if (!m->n)
		return ck_fail(err, CK_E_USAGE, "--mesh: no axes");
	return 0;
}

int64_t ck_mesh_world(const struct ck_mesh *m)
{
	int64_t w = 1;
	for (int i = 0; i < m->n; i++)
		w *= m->size[i];
	return w;
}

int ck_mesh_axis(const struct ck_mesh *m, const char *name)
{
	for (int i = 0; i < m->n; i++)
		if (!strcmp(m->name[i], name))
			return i;
	return -1;
}

int ck_shard_lookup(void *vctx, const char *name, struct ck_xval *out, struct ck_err *err)
{
	struct req_ctx *c = vctx;
	memset(out, 0, sizeof *out);
	int a = ck_mesh_axis(c->m, name);
	if (a >= 0 || !strcmp(name, "tp") || !strcmp(name, "ep") || !strcmp(name, "dp") ||
	    !strcmp(name, "pp")) {
		out->kind = XV_INT;
		out->i = a >= 0 ? c->m->size[a] : 1;
		return 0;
	}
	/* config.json as the mapping's expressions see it (text_config and
	 * quantization_config nested, lists of integers) */
	return ck_config_value(c->config, name, out, err);
}

/* The partition rule deciding each target's split: the first whose pattern
 * matches it (optimizer state: its parameter's name; scalars: none). Each
 * rule's pattern is tried once per key shape (map/keyshape.h), so a 90k-key
 * MoE costs a shape lookup per target, not a match per rule. *out[i] is
 * NULL where no rule applies; the array is the caller's to free. */
static int partitions_of(const struct ck_plan *p, const struct ck_mapping *rules,
			 const struct ck_partition ***out, struct ck_err *err)
{
	const struct ck_partition **part = calloc(p->n ? p->n : 1, sizeof *part);
	int n_parts = rules ? rules->n_parts : 0;
	struct ck_shape_memo *memo = calloc((size_t)(n_parts ? n_parts : 1), sizeof *memo);
	uint32_t *id = malloc((p->n ? p->n : 1) * sizeof *id);
	struct ck_keyshapes ks = {0};
	int rc = part && memo && id ? 0 : -1;
	/* shapes first, then verdicts; names lie scattered, so one 8 ahead is
	 * prefetched and the misses overlap */
	for (size_t i = 0; rc == 0 && n_parts && i < p->n; i++) {
		const struct ck_target *ahead = &p->t[i + 8 < p->n ? i + 8 : i];
		__builtin_prefetch(ahead->param ? ahead->param : ahead->name);
		if (ck_keyshapes_id(&ks, p->t[i].param ? p->t[i].param : p->t[i].name, &id[i]) < 0)
			rc = -1;
	}
	for (int k = 0; rc == 0 && k < n_parts; k++)
		rc = ck_shape_memo_fill(&rules->parts[k].match, &ks, &memo[k]);
	for (size_t i = 0; rc == 0 && i < p->n; i++) {
		const struct ck_target *t = &p->t[i];
		const char *name = t->param ? t->param : t->name;
		if (t->scalar || !n_parts)
			continue;
		for (int k = 0; k < n_parts && !part[i]; k++) {
			const struct ck_pattern *pat = &rules->parts[k].match;
			if (pat->shape_exact) { /* the shape's verdict is the key's */
				if (memo[k].v[id[i]] == 2)
					part[i] = &rules->parts[k];
				continue;
			}
			struct ck_binding b;
			int hit = ck_pattern_match(pat, name, &b);
			if (hit < 0) {
				rc = -1;
				break;
			}
			if (hit > 0) {
				ck_binding_clear(&b);
				part[i] = &rules->parts[k];
			}
		}
	}
	for (int k = 0; memo && k < n_parts; k++)
		ck_shape_memo_free(&memo[k]);
	free(memo);
	free(id);
	ck_keyshapes_free(&ks);
	if (rc < 0) {
		free(part);
		return ck_fail_sys(err, ENOMEM, "partition rules");
	}
	*out = part;
	return 0;
}

/* What a "pad" rule's dims are padded to a multiple of, per axis position:
 * 1 for `true`, the value of its expression otherwise (Megatron's
 * make_vocab_size_divisible_by). */
static int pad_multiple(const struct ck_partition *pr, struct req_ctx *rc, const char *path,
			int64_t *out, struct ck_err *err)
{
	*out = 1;
	if (!pr->pad_to)
		return 0;
	struct ck_xval v;
	if (ck_expr_eval(pr->pad_to, ck_shard_lookup, rc, &v, err) < 0) {
		char msg[sizeof err->msg];
		memcpy(msg, err->msg, sizeof msg);
		return ck_fail(err, CK_E_MAPPING, "%s: partition rule %d: pad: %s", path, pr->index,
			       msg);
	}
	int ok = v.kind == XV_INT && v.i >= 1 && v.i <= (1 << 30);
	*out = ok ? v.i : 1;
	ck_xval_free(&v);
	if (!ok)
		return ck_fail(err, CK_E_MAPPING,
			       "%s: partition rule %d: pad: the multiple must be an integer from 1 to "
			       "2^30",
			       path, pr->index);
	return 0;
}

int ck_plan_pad(struct ck_plan *p, const struct ck_mapping *rules, struct ck_err *err)
{
	int any = 0;
	for (int k = 0; rules && k < rules->n_parts; k++)
		any |= rules->parts[k].pad_to != NULL;
	if (!any)
		return 0;
	struct ck_mesh none = {0};
	int64_t coord[CK_MAX_AXES] = {0};
	struct req_ctx rc = {&none, p->config, coord};
	/* the multiple depends on the rule and the config only: once per rule */
	int64_t *mults = calloc((size_t)rules->n_parts, sizeof *mults);
	const struct ck_partition **part = NULL;
	if (!mults)
		return ck_fail_sys(err, ENOMEM, "%s", rules->path);
	int ret = -1, padded = 0;
	if (partitions_of(p, rules, &part, err) < 0)
		goto out;
	for (size_t i = 0; i < p->n; i++) {
		struct ck_target *t = &p->t[i];
		const struct ck_partition *pr = part[i];
		if (!pr || !pr->pad_to)
			continue;
		if (pr->ndim != t->v.ndim) {
			ck_fail(err, CK_E_MAPPING,
				"%s: partition rule %d: spec has %d dims but target \"%s\" has %d",
				rules->path, pr->index, pr->ndim, t->name, t->v.ndim);
			goto out;
		}
		int64_t *mult = &mults[pr - rules->parts];
		if (!*mult && pad_multiple(pr, &rc, rules->path, mult, err) < 0)
			goto out;
		for (int d = 0; d < t->v.ndim; d++) {
			int64_t S = t->v.shape[d], m = *mult;
			if (!pr->spec[d] || pr->blocks[d] != 1 || !(S % m))
				continue;
			if (ck_value_pad(&t->v, d, (S + m - 1) / m * m, err) < 0)
				goto out;
			padded = 1;
		}
	}
	/* sizes and groups again only if a shape changed (a vocabulary that
	 * already divides, the usual case, leaves the plan as it was) */
	ret = padded ? ck_plan_refresh(p, err) : 0;
out:
	free(part);
	free(mults);
	return ret;
}

/* Shard one target along the rule; fills info. */
static int shard_target(struct ck_target *t, const struct ck_partition *r, const struct ck_mesh *m,
			const int64_t *coord, unsigned sel_axes, int64_t mult, const char *path,
			struct ck_shard_info *info, struct ck_err *err)
{
	struct ck_value *v = &t->v;
	if (r->ndim != v->ndim)
		return ck_fail(err, CK_E_MAPPING,
			       "%s: partition rule %d: spec has %d dims but target \"%s\" has %d", path,
			       r->index, r->ndim, t->name, v->ndim);
	int used[CK_MAX_AXES] = {0};
	memcpy(info->global_shape, v->shape, sizeof info->global_shape);
	/* per dim: (blocks, parts, coordinate) */
	int64_t k[CK_MAX_DIMS], n[CK_MAX_DIMS], c[CK_MAX_DIMS];
	for (int d = 0; d < v->ndim; d++) {
		k[d] = r->blocks[d], n[d] = 1, c[d] = 0;
		info->axis_frag[d] = 1;
		if (!r->spec[d])
			continue;
		int a = ck_mesh_axis(m, r->spec[d]);
		if (a >= 0) {
			if (used[a]++)
				return ck_fail(err, CK_E_MAPPING,
					       "%s: partition rule %d: axis %s splits two dims of \"%s\"",
					       path, r->index, r->spec[d], t->name);
			n[d] = m->size[a];
			c[d] = coord[a];
		}
		int64_t S = v->shape[d];
		if (S % (mult * n[d]) && r->pad && k[d] == 1) { /* zeros up to a multiple */
			S = (S + mult * n[d] - 1) / (mult * n[d]) * (mult * n[d]);
			if (ck_value_pad(v, d, S, err) < 0)
				return -1;
			info->global_shape[d] = S;
		}
		if (S % (k[d] * n[d]))
			return ck_fail(err, CK_E_MAPPING,
				       "%s: partition rule %d: dim %d of \"%s\" (size %lld) does not "
				       "split into %lld block(s) x %lld (axis %s)%s",
				       path, r->index, d, t->name, (long long)S, (long long)k[d],
				       (long long)n[d], r->spec[d],
				       r->pad ? "; \"pad\" does not apply to block-wise dims" : "");
		info->axis_frag[d] = k[d] * n[d];
		if (n[d] == 1)
			continue;
		int64_t blk = S / k[d], part = blk / n[d];
		if (k[d] == 1) {
			if (ck_value_narrow(v, d, c[d] * part, part, err) < 0)
				return -1;
		} else { /* view the dim as [k, S/k], take each block's part, view back */
			if (v->ndim == CK_MAX_DIMS) /* the view takes one dim more */
				return ck_fail(
				    err, CK_E_MAPPING,
				    "%s: partition rule %d: a block-wise split of \"%s\" "
				    "needs a dim more than its %d (at most %d)",
				    path, r->index, t->name, v->ndim, CK_MAX_DIMS);
			int64_t sh[CK_MAX_DIMS];
			int nd = 0;
			for (int e = 0; e < v->ndim; e++) {
				if (e == d) {
					sh[nd++] = k[d];
					sh[nd++] = blk;
				} else {
					sh[nd++] = v->shape[e];
				}
			}
			if (ck_value_reshape(v, sh, nd, err) < 0 ||
			    ck_value_narrow(v, d + 1, c[d] * part, part, err) < 0)
				return -1;
			int64_t back[CK_MAX_DIMS]; /* dims after d moved up by one */
			for (int e = 0; e < r->ndim; e++)
				back[e] = e == d ? k[d] * part : v->shape[e < d ? e : e + 1];
			if (ck_value_reshape(v, back, r->ndim, err) < 0)
				return -1;
		}
	}
	/* fragments: the product of every dim's blocks */
	int nf = 1;
	for (int d = 0; d < r->ndim; d++)
		nf *= (int)k[d];
	info->frag = calloc((size_t)nf, sizeof *info->frag);
	if (!info->frag)
		return ck_fail_sys(err, ENOMEM, "fragments");
	info->n_frag = nf;
	for (int f = 0; f < nf; f++) {
		int rem = f;
		for (int d = r->ndim - 1; d >= 0; d--) {
			int64_t b = rem % k[d], blk = info->global_shape[d] / k[d], part = blk / n[d];
			rem /= (int)k[d];
			info->frag[f].shape[d] = part;
			info->frag[f].local_off[d] = b * part;
			info->frag[f].global_off[d] = b * blk + c[d] * part;
		}
	}
	for (int a = 0; a < m->n; a++)
		if (!used[a] && !(sel_axes >> a & 1))
			info->replica_id[info->n_replica++] = coord[a];
	return 0;
}

/* Every mesh axis but dp must be named by some partition or select rule. */
static int axes_named(const struct ck_mapping *rules, const struct ck_mesh *m, struct ck_err *err)
{
	for (int a = 0; a < m->n; a++) {
		if (!strcmp(m->name[a], "dp"))
			continue;
		int found = 0;
		for (int i = 0; rules && i < rules->n_sels && !found; i++)
			found |= !strcmp(rules->sels[i].axis, m->name[a]);
		for (int i = 0; rules && i < rules->n_parts && !found; i++)
			for (int d = 0; d < rules->parts[i].ndim; d++)
				found |= rules->parts[i].spec[d] && !strcmp(rules->parts[i].spec[d], m->name[a]);
		if (!found)
			return ck_fail(err, CK_E_USAGE,
				       "--mesh: axis %s is used by no partition or select rule%s%s",
				       m->name[a], rules ? " of " : " (no mapping has partition rules)",
				       rules ? rules->path : "");
	}
	return 0;
}

/* used[k]: whether partition rule k splits some target of p (the array
 * is the caller's to free). */
static int parts_used(const struct ck_plan *p, const struct ck_mapping *rules, unsigned char **used,
		      struct ck_err *err)
{
	const struct ck_partition **part = NULL;
	*used = NULL;
	if (partitions_of(p, rules, &part, err) < 0)
		return -1;
	if (!(*used = calloc((size_t)(rules && rules->n_parts ? rules->n_parts : 1), 1))) {
		free(part);
		return ck_fail_sys(err, ENOMEM, "sharding");
	}
	for (size_t i = 0; i < p->n; i++)
		if (part[i])
			(*used)[part[i] - rules->parts] = 1;
	free(part);
	return 0;
}

/* The "require" of each partition rule that splits some target of p (a
 * requirement binds only then: the FP8 scales' block alignment means
 * nothing once they are dequantised); with prep, of each that splits some
 * target of the whole plan p is a rank's part of. */
static int check_requirements(const struct ck_plan *p, const struct ck_shard_prep *prep,
			      const struct ck_mapping *rules, struct req_ctx *rc, const char *path,
			      struct ck_err *err)
{
	int any_req = 0;
	for (int i = 0; rules && i < rules->n_parts; i++)
		any_req |= rules->parts[i].require != NULL;
	if (!any_req)
		return 0;
	unsigned char *used = prep ? prep->part_used : NULL;
	if (!prep && parts_used(p, rules, &used, err) < 0)
		return -1;
	int r = 0;
	for (int i = 0; r == 0 && i < rules->n_parts; i++) {
		const struct ck_partition *pr = &rules->parts[i];
		if (!pr->require || !used[i])
			continue;
		struct ck_xval v;
		if (ck_expr_eval(pr->require, ck_shard_lookup, rc, &v, err) < 0) {
			char msg[sizeof err->msg];
			memcpy(msg, err->msg, sizeof msg);
			r = ck_fail(err, CK_E_MAPPING, "%s: partition rule %d: require: %s", path,
				    pr->index, msg);
			break;
		}
		int ok = v.kind == XV_INT && v.i;
		ck_xval_free(&v);
		if (!ok)
			r = ck_fail(err, CK_E_MAPPING, "%s: partition rule %d: %s", path, pr->index,
				    pr->message ? pr->message : "requirement does not hold");
	}
	if (!prep)
		free(used);
	return r;
}

/* A target no partition rule splits: whole on every rank, a replica along
 * every axis select does not use. */
static int replicated(struct ck_target *t, struct ck_shard_info *info, const struct ck_mesh *m,
		      const int64_t *coord, unsigned sel_axes, struct ck_err *err)
{
	memcpy(info->global_shape, t->v.shape, sizeof info->global_shape);
	for (int d = 0; d < t->v.ndim; d++)
		info->axis_frag[d] = 1;
	if (!(info->frag = calloc(1, sizeof *info->frag)))
		return ck_fail_sys(err, ENOMEM, "fragments");
	info->n_frag = 1;
	memcpy(info->frag[0].shape, t->v.shape, sizeof info->frag[0].shape);
	for (int a = 0; a < m->n; a++)
		if (!(sel_axes >> a & 1))
			info->replica_id[info->n_replica++] = coord[a];
	return 0;
}

/* Each mesh axis but dp must split or select something in this view, or
 * place something of the whole model (model_axes: a pipeline stage of dense
 * layers holds no experts, yet ep splits the model's MoE layers): a mapping
 * whose rules name ep (its MoE rules) says nothing to a dense model. */
static int axes_used(const struct ck_plan *p, const struct ck_partition *const *part,
		     const unsigned *sel_axes, unsigned model_axes, const struct ck_mesh *m,
		     const char *path, struct ck_err *err)
{
	unsigned used_axes = model_axes;
	for (size_t i = 0; i < p->n; i++) {
		used_axes |= sel_axes[i];
		const struct ck_partition *pr = part[i];
		for (int d = 0; pr && d < pr->ndim; d++) {
			int a = pr->spec[d] ? ck_mesh_axis(m, pr->spec[d]) : -1;
			if (a >= 0)
				used_axes |= 1u << a;
		}
	}
	for (int a = 0; a < m->n; a++)
		if (strcmp(m->name[a], "dp") && !(used_axes >> a & 1))
			return ck_fail(err, CK_E_USAGE,
				       "--mesh: axis %s is used by no partition or select rule of %s on "
				       "any tensor of this checkpoint",
				       m->name[a], path);
	return 0;
}

/* rank's position on each axis (row-major: the last axis varies fastest) */
static int rank_coords(const struct ck_mesh *m, int64_t rank, int64_t *coord, struct ck_err *err)
{
	int64_t world = ck_mesh_world(m);
	if (rank < 0 || rank >= world)
		return ck_fail(err, CK_E_USAGE, "rank %lld is outside the mesh (world size %lld)",
			       (long long)rank, (long long)world);
	for (int a = m->n - 1; a >= 0; a--) {
		coord[a] = rank % m->size[a];
		rank /= m->size[a];
	}
	return 0;
}

/* What sharding checks before it selects: the rank, the mesh's axes, the
 * partition rules' requirements (coord: the rank's coordinates). */
static int first_checks(const struct ck_plan *p, const struct ck_shard_prep *prep,
			const struct ck_mapping *rules, const struct ck_mesh *m, int64_t rank,
			int64_t *coord, struct ck_err *err)
{
	struct req_ctx rc = {m, p->config, coord};
	if (rank_coords(m, rank, coord, err) < 0 || axes_named(rules, m, err) < 0)
		return -1;
	return check_requirements(p, prep, rules, &rc, rules ? rules->path : "mapping", err);
}

/* rows: with prep, the whole plan's index of each target of p */
static int shard(struct ck_plan *p, const struct ck_shard_prep *prep, const uint32_t *rows,
		 const struct ck_mapping *rules, const struct ck_mesh *m, int64_t rank,
		 struct ck_err *err)
{
	int64_t coord[CK_MAX_AXES];
	const char *path = rules ? rules->path : "mapping";
	struct req_ctx rc = {m, p->config, coord};
	if (first_checks(p, prep, rules, m, rank, coord, err) < 0)
		return -1;
	unsigned *sel_axes = NULL;
	char **global = NULL;
	const struct ck_partition **part = NULL;
	int64_t *mults = calloc((size_t)(rules && rules->n_parts ? rules->n_parts : 1), sizeof *mults);
	unsigned model_axes = 0;
	int rc_ = mults ? ck_select_targets(p, prep, rules, m, path, rows, &rc, &sel_axes, &global,
					    &model_axes, err)
			: ck_fail_sys(err, ENOMEM, "sharding");
	if (rc_ == 0) /* after select, which keeps some targets in a new order */
		rc_ = partitions_of(p, rules, &part, err);
	for (size_t i = 0; rc_ == 0 && i < p->n; i++) {
		struct ck_target *t = &p->t[i];
		struct ck_shard_info *info = calloc(1, sizeof *info);
		if (!info) {
			rc_ = ck_fail_sys(err, ENOMEM, "sharding");
			break;
		}
		t->shard = info;
		info->global_name = global[i];
		global[i] = NULL;
		/* optimizer state is split as its parameter; scalars never */
		const struct ck_partition *pr = part[i];
		if (!pr) {
			rc_ = replicated(t, info, m, coord, sel_axes[i], err);
			continue;
		}
		info->partition_rule = pr->index;
		int64_t *mult = &mults[pr - rules->parts]; /* per rule: rule and config only */
		rc_ = *mult ? 0 : pad_multiple(pr, &rc, path, mult, err);
		if (rc_ == 0)
			rc_ = shard_target(t, pr, m, coord, sel_axes[i], *mult, path, info, err);
	}
	if (rc_ == 0)
		rc_ = axes_used(p, part, sel_axes, model_axes, m, path, err);
	for (size_t i = 0; global && i < p->n; i++)
		free(global[i]);
	free(global);
	free(sel_axes);
	free(mults);
	free(part);
	return rc_ < 0 ? -1 : ck_plan_refresh(p, err);
}

int ck_plan_shard(struct ck_plan *p, const struct ck_mapping *rules, const struct ck_mesh *m,
		  int64_t rank, struct ck_err *err)
{
	return shard(p, NULL, NULL, rules, m, rank, err);
}

int ck_shard_prepare(const struct ck_plan *p, const struct ck_mapping *rules,
		     const struct ck_mesh *m, struct ck_shard_prep *prep, struct ck_err *err)
{
	memset(prep, 0, sizeof *prep);
	if (parts_used(p, rules, &prep->part_used, err) < 0 ||
	    ck_select_prepare(p, rules, m, prep, err) < 0) {
		ck_shard_prep_free(prep);
		return -1;
	}
	return 0;
}

void ck_shard_prep_free(struct ck_shard_prep *prep)
{
	free(prep->part_used);
	prep->part_used = NULL;
	free(prep->sel_tab);
	prep->sel_tab = NULL;
}

int ck_plan_shard_copy(const struct ck_plan *p, const struct ck_shard_prep *prep,
		       const struct ck_mapping *rules, const struct ck_mesh *m, int64_t rank,
		       struct ck_plan **out, struct ck_err *err)
{
	int64_t coord[CK_MAX_AXES];
	const char *path = rules ? rules->path : "mapping";
	struct req_ctx rc = {m, p->config, coord};
	*out = NULL;
	if (first_checks(p, prep, rules, m, rank, coord, err) < 0) /* then select */
		return -1;
	unsigned char *keep = calloc(p->n ? p->n : 1, 1);
	uint32_t *rows = malloc((p->n ? p->n : 1) * sizeof *rows);
	int r = keep && rows ? ck_select_keep(p, prep, rules, m, path, &rc, keep, err)
			     : ck_fail_sys(err, ENOMEM, "sharding");
	if (r == 0)
		r = ck_plan_copy_some(p, keep, out, err);
	for (size_t i = 0, n = 0; r == 0 && i < p->n; i++) /* the copy keeps their order */
		if (keep[i])
			rows[n++] = (uint32_t)i;
	if (r == 0)
		r = shard(*out, prep, rows, rules, m, rank, err);
	free(keep);
	free(rows);
	return r;
}

void ck_shard_fput_json(FILE *f, const struct ck_shard_info *s, int ndim, const char *field)
{
	if (!strcmp(field, "global_shape") || !strcmp(field, "axis_fragmentations")) {
		const int64_t *v = field[0] == 'g' ? s->global_shape : s->axis_frag;
		fputc('[', f);
		for (int d = 0; d < ndim; d++)
			fprintf(f, "%s%lld", d ? ", " : "", (long long)v[d]);
		fputc(']', f);
	} else if (!strcmp(field, "replica_id")) {
		fputc('[', f);
		for (int a = 0; a < s->n_replica; a++)
			fprintf(f, "%s%lld", a ? ", " : "", (long long)s->replica_id[a]);
		fputc(']', f);
	} else if (!strcmp(field, "fragments")) {
		fputc('[', f);
		for (int i = 0; i < s->n_frag; i++) {
			const struct ck_fragment *fr = &s->frag[i];
			const int64_t *parts[3] = {fr->local_off, fr->global_off, fr->shape};
			static const char *const names[3] = {"local_offset", "global_offset", "shape"};
			fprintf(f, "%s{", i ? ", " : "");
			for (int k = 0; k < 3; k++) {
				fprintf(f, "%s\"%s\": [", k ? ", " : "", names[k]);
				for (int d = 0; d < ndim; d++)
					fprintf(f, "%s%lld", d ? ", " : "", (long long)parts[k][d]);
				fputc(']', f);
			}
			fputc('}', f);
		}
		fputc(']', f);
	}
}
