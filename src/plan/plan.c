#include "plan.h"
#include "optstate.h"
#include "each.h"
#include "plan_int.h"

#include "../ckpt/ggml_types.h"

#include "../map/keyshape.h"
#include "../util/json_strict.h"
#include "../util/numfmt.h"
#include "../util/parallel.h"
#include "shard.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct stage {
	const struct ck_mapping *m;
	const struct ck_catalog *cat;
	const cJSON *config; /* what the mapping's expressions read (ck_plan's) */
	struct skey *in; /* the stage's inputs and intermediates */
	size_t n_in, cap_in;
	/* the catalog's name map when in[0 .. n) are its n entries in its
	 * order (its values are their indices): in_map holds only the names
	 * added after them */
	const struct ck_strmap *cat_map;
	struct ck_strmap in_map;
	struct skey *out;
	size_t n_out, cap_out;
	struct ck_strmap out_map; /* built once the rules ran (index_targets) */
	struct ck_keyshapes shapes; /* of in[0 .. n_shaped) */
	size_t n_shaped;
	int by_shape; /* rules find keys by shape (CK_SHAPE_RULES_MIN) */
	/* in[] indices by shape id, ascending: a rule whose pattern decides by
	 * shape visits the keys of the shapes it matches, not every key */
	struct key_list {
		uint32_t *i;
		size_t n, cap;
	} *of_shape;
	size_t cap_of_shape;
	/* config.json values looked up so far (a per-key "if" reads the same
	 * few names once per key) */
	struct {
		struct ck_strmap map;
		char **name;
		struct ck_xval *v; /* XV_NONE: absent */
		size_t n, cap;
	} cfg;
	struct ck_xval *params;
	int n_params;
	int lenient; /* optimizer state: a rule matching nothing is fine */
	struct ck_err *err;
	struct ck_lint lint;	   /* the current rule's first ambiguity */
	struct ck_warnings *warn; /* where a rule's lint goes */
	int threads;		   /* for a rule's work on many keys: 0 as many as pay */
	/* a worker's copy of the stage (run_pieces): the shared parts are read
	 * only, and the outputs its instances make wait in *pend */
	struct pending *pend;
};

/* ---- helpers ---- */

/* Below this many keys a rule's matching and instances run on the caller's
 * thread: starting threads would cost more than they save. */
#define PAR_MIN_KEYS 4096

static int nomem(struct ck_err *err)
{
	return ck_fail_sys(err, ENOMEM, "planning");
}

/* Room for one more key in *arr. */
static int key_room(struct skey **arr, size_t *n, size_t *cap, struct ck_err *err)
{
	if (*n == *cap) {
		size_t nc = *cap ? *cap * 2 : 64;
		struct skey *na = realloc(*arr, nc * sizeof *na);
		if (!na)
			return nomem(err);
		*arr = na;
		*cap = nc;
	}
	return 0;
}

static int key_add(struct skey **arr, size_t *n, size_t *cap, struct ck_strmap *map, char *name,
		   struct ck_value *v, int rule, uint32_t *existing, struct ck_err *err)
{
	if (key_room(arr, n, cap, err) < 0)
		return -1;
	int r = ck_strmap_put(map, name, (uint32_t)*n, existing);
	if (r < 0)
		return nomem(err);
	if (r == 1)
		return 1;
	(*arr)[*n] = (struct skey){.name = name, .v = *v, .produced_by = rule};
	(*n)++;
	return 0;
}

void ck_plan_keys_free(struct skey *k, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (!k[i].borrowed)
			free(k[i].name);
		free(k[i].param);
		free(k[i].state);
		ck_value_free(&k[i].v);
	}
	free(k);
}

/* ---- names in expressions: params, config, rule environment ---- */

int ck_config_value(const cJSON *cfg, const char *name, struct ck_xval *out, struct ck_err *err)
{
	const cJSON *j = cfg ? cJSON_GetObjectItemCaseSensitive(cfg, name) : NULL;
	/* multimodal configs nest the language model; quantised checkpoints keep
	 * their block sizes (weight_block_size) under quantization_config */
	static const char *const nests[] = {"text_config", "quantization_config"};
	for (size_t k = 0; !j && cfg && k < sizeof nests / sizeof *nests; k++) {
		const cJSON *tc = cJSON_GetObjectItemCaseSensitive(cfg, nests[k]);
		j = cJSON_IsObject(tc) ? cJSON_GetObjectItemCaseSensitive(tc, name) : NULL;
	}
	if (!j || cJSON_IsNull(j))
		return 1;
	memset(out, 0, sizeof *out);
	if (cJSON_IsBool(j)) {
		out->kind = XV_INT;
		out->i = cJSON_IsTrue(j);
		return 0;
	}
	if (cJSON_IsString(j)) {
		out->kind = XV_STR;
		return (out->s = strdup(j->valuestring)) ? 0 : nomem(err);
	}
	int64_t v;
	if (cJSON_IsArray(j)) { /* a list of integers, e.g. weight_block_size: [128, 128] */
		int n = cJSON_GetArraySize(j);
		if (n > CK_MAX_DIMS)
			return ck_fail(err, CK_E_MAPPING, "config.json: \"%s\" has more than %d items",
				       name, CK_MAX_DIMS);
		out->kind = XV_LIST;
		if (!(out->items = calloc((size_t)(n ? n : 1), sizeof *out->items)))
			return nomem(err);
		const cJSON *it;
		cJSON_ArrayForEach(it, j)
		{
			if (ck_json_int(it, INT64_MIN / 2, INT64_MAX / 2, &v) != 0) {
				ck_xval_free(out);
				return ck_fail(err, CK_E_MAPPING,
					       "config.json: \"%s\" is not a list of integers", name);
			}
			out->items[out->n].kind = XV_INT;
			out->items[out->n++].i = v;
		}
		return 0;
	}
	if (ck_json_int(j, INT64_MIN / 2, INT64_MAX / 2, &v) == 0) {
		out->kind = XV_INT;
		out->i = v;
		return 0;
	}
	return ck_fail(err, CK_E_MAPPING,
		       "config.json: \"%s\" is not an integer, boolean, string or list of integers",
		       name);
}

/* Keep a copy of a config lookup (v NULL: the name is absent). Best effort:
 * without memory nothing is kept and the next lookup reads the config again. */
static void remember_config(struct stage *st, const char *name, const struct ck_xval *v)
{
	if (st->cfg.n == st->cfg.cap) {
		size_t c = st->cfg.cap ? 2 * st->cfg.cap : 8;
		char **nn = realloc(st->cfg.name, c * sizeof *nn);
		if (!nn)
			return;
		st->cfg.name = nn;
		struct ck_xval *nv = realloc(st->cfg.v, c * sizeof *nv);
		if (!nv)
			return;
		st->cfg.v = nv;
		st->cfg.cap = c;
	}
	if (!st->cfg.map.cap && ck_strmap_init(&st->cfg.map, 8) < 0)
		return;
	struct ck_xval keep = {0};
	struct ck_err ignored;
	char *dup = strdup(name);
	if (!dup || (v && ck_xval_copy(&keep, v, &ignored) < 0) ||
	    ck_strmap_put(&st->cfg.map, dup, (uint32_t)st->cfg.n, NULL) != 0) {
		ck_xval_free(&keep);
		free(dup);
		return;
	}
	st->cfg.name[st->cfg.n] = dup;
	st->cfg.v[st->cfg.n++] = keep;
}

/* ck_config_value through the stage's cache: 1 absent, 0 found, -1 error */
static int cached_config_value(struct stage *st, const char *name, struct ck_xval *out,
			       struct ck_err *err)
{
	uint32_t i;
	if (st->cfg.map.cap && ck_strmap_get(&st->cfg.map, name, &i) == 0)
		return st->cfg.v[i].kind == XV_NONE ? 1 : ck_xval_copy(out, &st->cfg.v[i], err);
	int r = ck_config_value(st->config, name, out, err);
	if (r >= 0 && !st->pend) /* a worker leaves the cache as it is */
		remember_config(st, name, r == 0 ? out : NULL);
	return r;
}

struct pctx {
	struct stage *st;
	int upto; /* params visible: [0, upto) */
};

static int param_lookup(void *vctx, const char *name, struct ck_xval *out, struct ck_err *err)
{
	struct pctx *c = vctx;
	uint32_t i;
	if (c->upto > 0 && ck_strmap_get(&c->st->m->param_index, name, &i) == 0 &&
	    (int)i < c->upto)
		return ck_xval_copy(out, &c->st->params[i], err);
	return cached_config_value(c->st, name, out, err);
}

struct env {
	struct stage *st;
	const struct ck_rule *r;
	const struct ck_binding *b;
	struct ck_xval *inputs; /* one per rule input */
	struct ck_xval *lets;
	int n_lets;
};

static int env_lookup(void *vctx, const char *name, struct ck_xval *out, struct ck_err *err)
{
	struct env *e = vctx;
	for (int i = e->n_lets - 1; i >= 0; i--)
		if (!strcmp(e->r->let[i].name, name))
			return ck_xval_copy(out, &e->lets[i], err);
	for (int i = 0; i < e->r->n_in; i++) {
		if (strcmp(e->r->in[i].name, name))
			continue;
		if (!e->r->in[i].once)
			return ck_xval_copy(out, &e->inputs[i], err);
		*out = e->inputs[i]; /* its only use: taken, not copied */
		e->inputs[i] = (struct ck_xval){0};
		return 0;
	}
	const char *cap = e->b ? ck_binding_get(e->b, name) : NULL;
	if (cap) {
		memset(out, 0, sizeof *out);
		char *end;
		long long v = strtoll(cap, &end, 10);
		if (*cap && !*end && cap[0] != '-' && cap[0] != '+') {
			out->kind = XV_INT;
			out->i = v;
			return 0;
		}
		out->kind = XV_STR;
		return (out->s = strdup(cap)) ? 0 : nomem(err);
	}
	struct pctx pc = {e->st, e->st->m ? e->st->m->n_params : 0};
	return param_lookup(&pc, name, out, err);
}

static int eval_int(struct stage *st, const struct ck_expr *x, struct env *env, int64_t *out)
{
	struct ck_xval v;
	if (ck_expr_eval(x, env_lookup, env, &v, st->err) < 0)
		return -1;
	int ok = v.kind == XV_INT;
	*out = v.i;
	ck_xval_free(&v);
	return ok ? 0 : ck_fail(st->err, CK_E_MAPPING, "expected an integer");
}

/* ---- errors naming the mapping and rule ---- */

static int rule_fail_as(struct stage *st, const struct ck_rule *r, const char *key,
			enum ck_errkind kind)
{
	char m[sizeof st->err->msg];
	memcpy(m, st->err->msg, sizeof m);
	if (key)
		return ck_fail(st->err, kind, "%s: rule %d (%s): key \"%s\": %s", st->m->path,
			       r->index, r->desc, key, m);
	return ck_fail(st->err, kind, "%s: rule %d (%s): %s", st->m->path, r->index, r->desc, m);
}

static int rule_fail(struct stage *st, const struct ck_rule *r, const char *key)
{
	return rule_fail_as(st, r, key, CK_E_MAPPING);
}

/* ---- consuming inputs ---- */


/* The value of a key, as a copy the caller owns. */
static int key_value(const struct ck_catalog *cat, const struct skey *k, struct ck_value *out,
		     struct ck_err *err)
{
	return k->leaf ? ck_plan_source_value(cat, k->leaf - 1, out, err) : ck_value_copy(out, &k->v, err);
}

/* The index of the input of that name; -1 when there is none. */
static int input_index(const struct stage *st, const char *name, uint32_t *i)
{
	uint32_t h = ck_strmap_hash(name);
	if (ck_strmap_get_h(&st->in_map, name, h, i) == 0)
		return 0;
	return st->cat_map ? ck_strmap_get_h(st->cat_map, name, h, i) : -1;
}

/* A new input (an intermediate) as key_add: 1 (*prev set) when an input of
 * that name exists, in either map. */
static int add_input(struct stage *st, char *name, struct ck_value *v, int rule, uint32_t *prev)
{
	if (st->cat_map && ck_strmap_get(st->cat_map, name, prev) == 0)
		return 1;
	return key_add(&st->in, &st->n_in, &st->cap_in, &st->in_map, name, v, rule, prev, st->err);
}

/* No input known to bear the name: consume looks it up. */
#define NO_HINT UINT32_MAX

/* Take input key for rule r. hint: the input that a match found under this
 * name, if any; it is checked by name, and a lookup in a 100k-name map is a
 * cache miss per key that the plan's ~100,000 consumed keys pay otherwise. */
static int consume(struct stage *st, const struct ck_rule *r, const char *key, int want_share,
		   uint32_t hint, struct skey **out)
{
	uint32_t i = hint;
	if ((i >= st->n_in || strcmp(st->in[i].name, key) != 0) && input_index(st, key, &i) < 0) {
		ck_fail(st->err, CK_E_MAPPING, "missing source key");
		return rule_fail(st, r, key);
	}
	struct skey *k = &st->in[i];
	if (k->produced_by && k->produced_by >= r->index) {
		ck_fail(st->err, CK_E_MAPPING,
			"consumes the output of rule %d; a rule may only consume intermediates of "
			"earlier rules (this also rules out cycles)",
			k->produced_by);
		return rule_fail(st, r, key);
	}
	/* atomic: the rule's instances may run on several threads, which all
	 * write the same value (an earlier rule's was written before them) */
	int by = __atomic_load_n(&k->consumed_by, __ATOMIC_RELAXED);
	if (by && by != r->index && !want_share) {
		ck_fail(st->err, CK_E_MAPPING,
			"already consumed by rule %d (add \"share\": true to use a source twice)",
			by);
		return rule_fail(st, r, key);
	}
	if (!by)
		__atomic_store_n(&k->consumed_by, r->index, __ATOMIC_RELAXED);
	*out = k;
	return 0;
}

/* ---- one instance of a rule: bound captures, evaluate, emit outputs ---- */

/* A reduced capture's value and the input its match found (a hint). */
struct rval {
	int64_t v;
	uint32_t key;
};

static int cmp_rval(const void *a, const void *b)
{
	int64_t x = ((const struct rval *)a)->v, y = ((const struct rval *)b)->v;
	return x < y ? -1 : x > y;
}

static int is_reduced(const struct ck_rule *r, const char *cap)
{
	for (int i = 0; i < r->n_reduce; i++)
		if (!strcmp(r->reduce[i], cap))
			return 1;
	return 0;
}

static int pat_reduced(const struct ck_rule *r, const struct ck_pattern *p)
{
	for (int i = 0; i < r->n_reduce; i++)
		if (ck_pattern_has_capture(p, r->reduce[i]))
			return 1;
	return 0;
}

/* b plus the lets output pattern p names (mapping.c allows only those), as
 * decimal text in num[]: a renumbering let must be a non-negative integer.
 * 0, or -1 with err set (the caller names the rule). */
static int bind_lets(struct stage *st, const struct ck_rule *r, const struct ck_pattern *p,
		     const struct env *env, struct ck_binding *b, char (*num)[24])
{
	for (int t = 0, n = 0; t < p->n; t++) {
		for (int i = 0; !p->tok[t].lit && i < env->n_lets; i++) {
			const char *name = p->tok[t].name;
			const struct ck_xval *v = &env->lets[i];
			if (strcmp(r->let[i].name, name) != 0)
				continue;
			if (v->kind != XV_INT || v->i < 0)
				return ck_fail(st->err, CK_E_MAPPING,
					       "let \"%s\" is used in an output name, so it must be "
					       "a non-negative integer",
					       name);
			struct ck_binding bb;
			if (n < CK_MAX_CAPTURES)
				ck_fmt_i64(num[n], v->i);
			if (n == CK_MAX_CAPTURES || ck_binding_borrow(&bb, b, name, num[n++]) < 0)
				return ck_fail(st->err, CK_E_MAPPING,
					       "an output name binds more than %d names",
					       CK_MAX_CAPTURES);
			*b = bb;
		}
	}
	return 0;
}

/* A rule's output: a target, or an intermediate input of later rules.
 * name and v are taken either way. */
static int add_output(struct stage *st, const struct ck_rule *r, char *name, struct ck_value *v)
{
	uint32_t prev;
	int rc;
	if (name[0] != '~') { /* a target: a repeat is found once all are known */
		rc = key_room(&st->out, &st->n_out, &st->cap_out, st->err);
		if (rc == 0)
			st->out[st->n_out++] = (struct skey){.name = name, .v = *v,
							     .produced_by = r->index};
	} else if ((rc = add_input(st, name, v, r->index, &prev)) == 1) {
		int other = st->in[prev].produced_by;
		ck_fail(st->err, CK_E_MAPPING, "target produced twice (also by %s %d)",
			other ? "rule" : "the inputs of the stage, rule", other);
		rule_fail(st, r, name);
	}
	if (rc != 0) {
		ck_value_free(v);
		free(name);
		return -1;
	}
	return 0;
}

/* Outputs a worker's instances made, in order, and how its run ended. */
struct pending {
	struct pend_out {
		char *name;
		struct ck_value v;
	} *o;
	size_t n, cap;
	size_t a, b; /* its instances */
	int rc;
	struct ck_err err;
	struct ck_lint lint;
};

static int pend_push(struct stage *st, char *name, struct ck_value *v)
{
	struct pending *p = st->pend;
	if (p->n == p->cap) {
		size_t c = p->cap ? 2 * p->cap : 8;
		struct pend_out *o = realloc(p->o, c * sizeof *o);
		if (!o) {
			ck_value_free(v);
			free(name);
			return nomem(st->err);
		}
		p->o = o, p->cap = c;
	}
	p->o[p->n++] = (struct pend_out){name, *v};
	return 0;
}

static int emit_output(struct stage *st, const struct ck_rule *r, int k, struct ck_binding *b,
		       struct env *env)
{
	char *name;
	const struct ck_pattern *p = &r->out[k].pat;
	struct ck_binding bl = *b; /* borrowed: b plus the lets the name uses */
	char num[CK_MAX_CAPTURES][24];
	if ((r->n_let && bind_lets(st, r, p, env, &bl, num) < 0) ||
	    ck_pattern_subst(p, &bl, &name, st->err) < 0)
		return rule_fail(st, r, NULL);
	struct ck_xval v;
	if (r->expr[k].expr) {
		if (ck_expr_eval_lint(r->expr[k].expr, env_lookup, env, &v, &st->lint, st->err) < 0) {
			rule_fail(st, r, name);
			free(name);
			return -1;
		}
	} else if (r->n_out == 1 && !r->for_name) { /* a rename: its input is used once */
		v = env->inputs[0];
		env->inputs[0] = (struct ck_xval){0};
	} else if (ck_xval_copy(&v, &env->inputs[0], st->err) < 0) {
		free(name);
		return -1;
	}
	if (v.kind != XV_TENSOR) {
		ck_fail(st->err, CK_E_MAPPING, "expression for output \"%s\" is not a tensor",
			r->out[k].name);
		ck_xval_free(&v);
		rule_fail(st, r, name);
		free(name);
		return -1;
	}
	if (st->pend)
		return pend_push(st, name, &v.t);
	return add_output(st, r, name, &v.t);
}

/* Evaluate the rule's lets in order into env (freeing earlier values). */
static int eval_lets(struct stage *st, const struct ck_rule *r, struct env *env)
{
	for (int i = 0; i < env->n_lets; i++)
		ck_xval_free(&env->lets[i]);
	env->n_lets = 0;
	for (int i = 0; i < r->n_let; i++) {
		if (ck_expr_eval_lint(r->let[i].expr, env_lookup, env, &env->lets[i], &st->lint,
				      st->err) < 0) {
			rule_fail(st, r, r->let[i].name);
			return -1;
		}
		env->n_lets++;
	}
	return 0;
}

static void dims_text(char *out, size_t cap, const int64_t *d, int n)
{
	size_t w = (size_t)snprintf(out, cap, "[");
	for (int k = 0; k < n && w < cap; k++)
		w += (size_t)snprintf(out + w, cap - w, "%s%lld", k ? ", " : "", (long long)d[k]);
	if (w < cap)
		snprintf(out + w, cap - w, "]");
}

/* Input i's key against the rule's "shape" for it: what the parameters say
 * its shape is (a dim of -1 in the message: any size). */
static int check_shape(struct stage *st, const struct ck_rule *r, int i, struct env *env,
		       const char *key, const struct ck_value *v)
{
	for (int k = 0; k < r->n_shape; k++) {
		const struct ck_shape_decl *s = &r->shape[k];
		if (s->input != i)
			continue;
		int64_t want[CK_MAX_DIMS];
		int ok = v->ndim == s->ndim;
		for (int d = 0; d < s->ndim; d++) {
			want[d] = d < v->ndim ? v->shape[d] : -1; /* a null dim: any */
			if (s->dim[d] && eval_int(st, s->dim[d], env, &want[d]) < 0)
				return rule_fail(st, r, key);
			ok &= d < v->ndim && v->shape[d] == want[d];
		}
		if (ok)
			return 0;
		char got[160], need[160];
		dims_text(got, sizeof got, v->shape, v->ndim);
		dims_text(need, sizeof need, want, s->ndim);
		/* the source's fault (exit 3): its config and weights disagree */
		ck_fail(st->err, CK_E_SOURCE,
			"is %s, but the rule's \"shape\" of %s says %s = %s: the config does not "
			"describe this checkpoint",
			got, r->in[i].name, s->text, need);
		return rule_fail_as(st, r, key, CK_E_SOURCE);
	}
	return 0;
}

/* Where input i's key for reduced value j likely is: the first input's is
 * where its match was; another's as far from the one taken for value j - 1
 * (prev) as the first input's keys are apart (w3 of expert E + 1 three keys
 * after w3 of expert E, as w1's are). consume checks it by name, so a wrong
 * guess costs a compare; a right one saves a lookup in a map of every key
 * (33,280 of them planning a 100k-key MoE: 0.7% of its instructions). */
static uint32_t input_hint(const struct rval *rv, int j, int i, int red, uint32_t hint,
			   uint32_t prev)
{
	if (i == 0)
		return red ? rv[j].key : hint;
	if (!red || j == 0 || prev == NO_HINT)
		return NO_HINT;
	return prev + (rv[j].key - rv[j - 1].key); /* unsigned: a wrap is out of range */
}

/* b binds every non-reduced capture; rv are the reduced capture's values;
 * hint: the input the match found for the first input, if not reduced */
static int run_instance(struct stage *st, const struct ck_rule *r, struct ck_binding *b,
			const struct rval *rv, int n_rv, uint32_t hint)
{
	int rc = -1;
	/* on the stack for the usual few (a plan runs ~100,000 instances) */
	struct ck_xval in_st[8], let_st[8];
	struct ck_xval *inputs = r->n_in <= 8 ? in_st : calloc((size_t)r->n_in, sizeof *inputs);
	struct ck_xval *lets = r->n_let <= 8 ? let_st : calloc((size_t)r->n_let, sizeof *lets);
	struct env env = {st, r, b, inputs, lets, 0};
	if (inputs == in_st) /* what calloc would have done, for the used few */
		memset(in_st, 0, (size_t)r->n_in * sizeof *in_st);
	if (lets == let_st)
		memset(let_st, 0, (size_t)r->n_let * sizeof *let_st);
	if (!inputs || !lets) {
		nomem(st->err);
		goto out;
	}
	for (int i = 0; i < r->n_in; i++) {
		int red = pat_reduced(r, &r->in[i].pat);
		int cnt = red ? n_rv : 1;
		if (red) {
			inputs[i].kind = XV_LIST;
			if (!(inputs[i].items = calloc((size_t)cnt, sizeof *inputs[i].items))) {
				nomem(st->err);
				goto out;
			}
		}
		uint32_t prev = NO_HINT; /* the input taken for value j - 1 */
		for (int j = 0; j < cnt; j++) {
			char num[CK_FMT_INT_MAX], *key;
			struct ck_binding bb; /* borrowed: b plus the reduced capture */
			if (red && (ck_fmt_i64(num, rv[j].v),
				    ck_binding_borrow(&bb, b, r->reduce[0], num) < 0)) {
				nomem(st->err);
				goto out;
			}
			char kbuf[256];
			int s = ck_pattern_subst_in(&r->in[i].pat, red ? &bb : b, kbuf, sizeof kbuf,
						    &key, st->err);
			if (s < 0) {
				rule_fail(st, r, NULL);
				goto out;
			}
			struct skey *k;
			s = consume(st, r, key, r->share, input_hint(rv, j, i, red, hint, prev), &k);
			if (key != kbuf)
				free(key);
			struct ck_xval *slot = red ? &inputs[i].items[inputs[i].n++] : &inputs[i];
			if (s < 0)
				goto out;
			prev = (uint32_t)(k - st->in);
			slot->kind = XV_TENSOR;
			if (key_value(st->cat, k, &slot->t, st->err) < 0 ||
			    (r->n_shape && check_shape(st, r, i, &env, k->name, &slot->t) < 0))
				goto out;
		}
	}
	if (!r->for_name && eval_lets(st, r, &env) < 0)
		goto out;
	if (r->for_name) {
		int64_t n;
		if (eval_int(st, r->for_count, &env, &n) < 0) {
			rule_fail(st, r, NULL);
			goto out;
		}
		if (n < 0 || n > CK_MAX_PIECES) {
			ck_fail(st->err, CK_E_MAPPING, "\"for\" count %lld is outside 0..%u",
				(long long)n, CK_MAX_PIECES);
			rule_fail(st, r, NULL);
			goto out;
		}
		for (int64_t v = 0; v < n; v++) {
			char num[CK_FMT_INT_MAX];
			ck_fmt_i64(num, v);
			struct ck_binding bb; /* borrowed: b plus the "for" capture */
			if (ck_binding_borrow(&bb, b, r->for_name, num) < 0) {
				nomem(st->err);
				goto out;
			}
			env.b = &bb;
			/* lets see the "for" capture: evaluated for each value */
			int s = eval_lets(st, r, &env);
			for (int k = 0; k < r->n_out && s == 0; k++)
				s = emit_output(st, r, k, &bb, &env);
			env.b = b;
			if (s < 0)
				goto out;
		}
	} else {
		for (int k = 0; k < r->n_out; k++)
			if (emit_output(st, r, k, b, &env) < 0)
				goto out;
	}
	rc = 0;
out:
	for (int i = 0; inputs && i < r->n_in; i++)
		ck_xval_free(&inputs[i]);
	for (int i = 0; i < env.n_lets; i++)
		ck_xval_free(&lets[i]);
	if (inputs != in_st)
		free(inputs);
	if (lets != let_st)
		free(lets);
	return rc;
}

/* ---- a whole rule ---- */

struct match {
	struct ck_binding b;
	char *group; /* non-reduced capture values joined */
	int64_t rval;
	uint32_t key; /* the input it matched */
};

/* A rule's matches, for work on each (on threads: each match its own). */
struct matches {
	const struct ck_rule *r;
	struct match *ms;
};

/* A reduction groups matches by their other captures: matches sorted by
 * (group, position) make each group one run, O(n log n) however many. */
/* A per-key condition names captures, parameters and config values only
 * (mapping.c checks), so it is a function of the named captures' values:
 * decided once per distinct combination (dropping the layers past
 * num_hidden_layers is 62 decisions, not one for each of 92,000 keys). */
struct cond_memo {
	const struct ck_pattern *pat;
	const char *cap[CK_MAX_CAPTURES]; /* the pattern's captures the condition names */
	int n_cap;
	struct ck_strmap map; /* the values, length-prefixed and joined -> decision */
	char **keys;
	size_t n, cap_keys;
};

static void memo_name(void *vc, const char *name)
{
	struct cond_memo *c = vc;
	for (int i = 0; i < c->n_cap; i++)
		if (!strcmp(c->cap[i], name))
			return;
	if (c->n_cap < CK_MAX_CAPTURES && ck_pattern_has_capture(c->pat, name))
		c->cap[c->n_cap++] = name;
}

static void cond_memo_free(struct cond_memo *c)
{
	for (size_t i = 0; i < c->n; i++)
		free(c->keys[i]);
	free(c->keys);
	ck_strmap_free(&c->map);
}

/* The condition's value for binding b: 1 keep, 0 leave, -1 error (err set). */
static int cond_decide(struct stage *st, const struct ck_rule *r, struct cond_memo *c,
		       const struct ck_binding *b)
{
	/* the key: each value's length, ':', the value (on the stack unless long) */
	const char *val[CK_MAX_CAPTURES];
	size_t vlen[CK_MAX_CAPTURES], len = 1;
	for (int i = 0; i < c->n_cap; i++) {
		val[i] = ck_binding_get(b, c->cap[i]);
		vlen[i] = val[i] ? strlen(val[i]) : 0;
		len += 21 + vlen[i];
	}
	char stack[256], *key = len <= sizeof stack ? stack : malloc(len), *o = key;
	if (!key)
		return nomem(st->err);
	for (int i = 0; i < c->n_cap; i++) {
		o += ck_fmt_i64(o, (int64_t)vlen[i]);
		*o++ = ':';
		memcpy(o, val[i] ? val[i] : "", vlen[i]);
		o += vlen[i];
	}
	*o = '\0';
	uint32_t got;
	if (c->map.cap && ck_strmap_get(&c->map, key, &got) == 0) {
		if (key != stack)
			free(key);
		return (int)got;
	}
	if (key == stack && !(key = strdup(stack)))
		return nomem(st->err);
	struct env env = {st, r, b, NULL, NULL, 0};
	int64_t v;
	if (eval_int(st, r->cond, &env, &v) < 0) {
		free(key);
		return -1;
	}
	if (c->n == c->cap_keys) { /* remembered when there is memory; decided anyway */
		size_t nc = c->cap_keys ? 2 * c->cap_keys : 16;
		char **nk = realloc(c->keys, nc * sizeof *nk);
		if (nk)
			c->keys = nk, c->cap_keys = nc;
	}
	if (c->n < c->cap_keys && (c->map.cap || ck_strmap_init(&c->map, 64) == 0) &&
	    ck_strmap_put(&c->map, key, v != 0, NULL) == 0)
		c->keys[c->n++] = key;
	else
		free(key);
	return v != 0;
}

/* The inputs from n_shaped on, listed under their shapes (ids[k]: input
 * n_shaped + k's), ascending. -1 ENOMEM. */
static int list_by_shape(struct stage *st, const uint32_t *ids)
{
	for (size_t k = 0; st->n_shaped < st->n_in; st->n_shaped++, k++) {
		uint32_t id = ids[k];
		if (id >= st->cap_of_shape) {
			size_t c = st->cap_of_shape ? st->cap_of_shape * 2 : 64;
			while (c <= id)
				c *= 2;
			struct key_list *n = realloc(st->of_shape, c * sizeof *n);
			if (!n)
				return -1;
			memset(n + st->cap_of_shape, 0, (c - st->cap_of_shape) * sizeof *n);
			st->of_shape = n, st->cap_of_shape = c;
		}
		struct key_list *l = &st->of_shape[id];
		if (l->n == l->cap) {
			size_t c = l->cap ? l->cap * 2 : 16;
			uint32_t *n = realloc(l->i, c * sizeof *n);
			if (!n)
				return -1;
			l->i = n, l->cap = c;
		}
		l->i[l->n++] = (uint32_t)st->n_shaped;
	}
	return 0;
}

static const char *input_name(const void *in, size_t i)
{
	return ((const struct skey *)in)[i].name;
}

/* Threads for work over n keys (ck_plan_build_threads' count, or as many
 * as pay). */
static int key_threads(const struct stage *st, size_t n)
{
	if (st->threads)
		return st->threads;
	return n >= PAR_MIN_KEYS ? ck_cpu_count() : 1;
}

/* Shape ids for the inputs that have none yet, each input listed under its
 * shape. -1 ENOMEM. */
static int shape_inputs(struct stage *st)
{
	size_t n = st->n_in - st->n_shaped;
	if (!n)
		return 0;
	uint32_t *ids = malloc(n * sizeof *ids);
	int rc = ids && ck_keyshapes_ids(&st->shapes, n, input_name, st->in + st->n_shaped, ids,
					 key_threads(st, n)) == 0
		     ? list_by_shape(st, ids)
		     : -1;
	free(ids);
	return rc;
}

/* ---- a rule's work on several threads: matching, group keys, instances ---- */

/* Item i of a rule's work on stage st (the stage, or a worker's copy). */
typedef int (*instance_fn)(struct stage *st, const void *ctx, size_t i);

/* Pieces per thread: instances differ in cost (a layer's experts, a norm) */
#define PAR_PIECES 8

struct par {
	const struct stage *st;
	instance_fn fn;
	const void *ctx;
	struct pending *piece;
};

/* One piece of the instances on a copy of the stage whose outputs, error
 * and lint stay its own; it stops at its first error, as one thread
 * would have. */
static void par_piece(void *vctx, size_t t)
{
	struct par *p = vctx;
	struct pending *pc = &p->piece[t];
	struct stage w = *p->st;
	w.err = &pc->err;
	w.lint.msg[0] = '\0';
	w.pend = pc;
	for (size_t i = pc->a; i < pc->b && pc->rc == 0; i++)
		pc->rc = p->fn(&w, p->ctx, i);
	pc->lint = w.lint;
}

/* How many threads rule r's n instances over nm matched keys run on. Its
 * intermediates stay on one thread: another instance of the rule could
 * look one up before it is added (and is refused by name that way). */
static int instance_threads(const struct stage *st, const struct ck_rule *r, size_t n, size_t nm)
{
	for (int k = 0; k < r->n_out; k++)
		if (r->out[k].pat.text[0] == '~')
			return 1;
	return n < 2 ? 1 : key_threads(st, nm);
}

/* Run fn on [0, n), in order on one thread, or in pieces on several whose
 * outputs (of rule r) are then added piece by piece: the stage ends as one
 * thread leaves it, its error the first one met in order. */
static int run_pieces(struct stage *st, const struct ck_rule *r, size_t n, int threads,
		      instance_fn fn, const void *ctx)
{
	if (threads <= 1) {
		for (size_t i = 0; i < n; i++)
			if (fn(st, ctx, i) < 0)
				return -1;
		return 0;
	}
	size_t np = ck_pieces(n, threads, PAR_PIECES);
	struct pending *pc = calloc(np, sizeof *pc);
	if (!pc)
		return nomem(st->err);
	for (size_t t = 0; t < np; t++)
		pc[t].a = ck_piece_start(n, np, t), pc[t].b = ck_piece_start(n, np, t + 1);
	struct par p = {st, fn, ctx, pc};
	ck_parallel_for(np, threads, par_piece, &p);
	int rc = 0;
	for (size_t t = 0; t < np; t++) {
		for (size_t j = 0; j < pc[t].n; j++) {
			if (rc == 0) {
				rc = add_output(st, r, pc[t].o[j].name, &pc[t].o[j].v);
			} else {
				free(pc[t].o[j].name);
				ck_value_free(&pc[t].o[j].v);
			}
		}
		free(pc[t].o);
		if (rc == 0 && pc[t].rc < 0) {
			*st->err = pc[t].err;
			rc = -1;
		}
		if (rc == 0 && !st->lint.msg[0])
			st->lint = pc[t].lint;
	}
	free(pc);
	return rc;
}

static int run_instances(struct stage *st, const struct ck_rule *r, size_t n, size_t nm,
			 instance_fn fn, const void *ctx)
{
	return run_pieces(st, r, n, instance_threads(st, r, n, nm), fn, ctx);
}

struct collect {
	const struct ck_rule *r;
	struct cond_memo cm;
	struct match **ms;
	size_t *nm, cap;
};

/* Whether the rule may take input k: not consumed by another rule (unless
 * it shares), not made by this rule or a later one. */
static int may_take(const struct ck_rule *r, const struct skey *k)
{
	return !(k->consumed_by && !r->share) && k->produced_by < r->index;
}

/* Input i, if it is the rule's to take and matches: appended to the
 * matches. 0 or -1 (err set). */
static int collect_key(struct stage *st, struct collect *c, size_t i)
{
	const struct ck_rule *r = c->r;
	struct skey *k = &st->in[i];
	if (!may_take(r, k))
		return 0;
	struct match m = {.key = (uint32_t)i};
	int hit = ck_pattern_match(&r->in[0].pat, k->name, &m.b);
	if (hit <= 0)
		return hit < 0 ? nomem(st->err) : 0;
	if (r->cond_per_key) { /* a key the condition rejects is left for later rules */
		int v = cond_decide(st, r, &c->cm, &m.b);
		if (v <= 0) {
			ck_binding_clear(&m.b);
			return v < 0 ? rule_fail(st, r, k->name) : 0;
		}
	}
	if (*c->nm == c->cap) {
		size_t cap = c->cap ? c->cap * 2 : 64;
		struct match *n = realloc(*c->ms, cap * sizeof *n);
		if (!n) {
			ck_binding_clear(&m.b);
			return nomem(st->err);
		}
		*c->ms = n, c->cap = cap;
	}
	(*c->ms)[(*c->nm)++] = m;
	return 0;
}

/* Candidates on threads: candidate j's match goes to slot j, hit[j] says
 * whether there is one (no per-key condition: a memo of its own each). */
struct cand_job {
	const struct ck_rule *r;
	const uint32_t *idx; /* the candidates' inputs */
	struct match *slot;
	unsigned char *hit;
};

static int cand_match(struct stage *st, const void *ctx, size_t j)
{
	const struct cand_job *cj = ctx;
	uint32_t i = cj->idx[j];
	const struct skey *k = &st->in[i];
	if (!may_take(cj->r, k))
		return 0;
	cj->slot[j] = (struct match){.key = i};
	int hit = ck_pattern_match(&cj->r->in[0].pat, k->name, &cj->slot[j].b);
	if (hit < 0)
		return nomem(st->err);
	cj->hit[j] = hit > 0;
	return 0;
}

/* The inputs idx[0, n), in order, that the rule takes and its first input
 * matches: appended to the matches. */
static int collect_candidates(struct stage *st, struct collect *c, const uint32_t *idx, size_t n)
{
	const struct ck_rule *r = c->r;
	int threads = r->cond_per_key ? 1 : key_threads(st, n);
	if (threads <= 1 || n < 2) {
		for (size_t j = 0; j < n; j++)
			if (collect_key(st, c, idx[j]) < 0)
				return -1;
		return 0;
	}
	size_t nm = *c->nm;
	if (nm + n > c->cap) {
		struct match *m = realloc(*c->ms, (nm + n) * sizeof *m);
		if (!m)
			return nomem(st->err);
		*c->ms = m, c->cap = nm + n;
	}
	struct cand_job cj = {r, idx, *c->ms + nm, calloc(n, 1)};
	if (!cj.hit)
		return nomem(st->err);
	int rc = run_pieces(st, r, n, threads, cand_match, &cj);
	for (size_t j = 0; j < n; j++) { /* packed in candidate order */
		if (cj.hit[j] && rc < 0)
			ck_binding_clear(&cj.slot[j].b);
		else if (cj.hit[j])
			(*c->ms)[(*c->nm)++] = cj.slot[j];
	}
	free(cj.hit);
	return rc;
}

/* The inputs before n_keys the rule may take whose names end with the text
 * its first pattern ends with (every such input when it ends with a
 * capture), in order: one pass, and the matches array only as long as
 * those (on threads, each candidate has a slot). */
static int collect_by_suffix(struct stage *st, struct collect *c, size_t n_keys)
{
	const struct ck_rule *r = c->r;
	uint32_t *idx = malloc((n_keys ? n_keys : 1) * sizeof *idx);
	if (!idx)
		return nomem(st->err);
	size_t n = 0;
	for (size_t i = 0; i < n_keys; i++) {
		const struct skey *k = &st->in[i];
		if (may_take(r, k) && ck_pattern_may_match(&r->in[0].pat, k->name, strlen(k->name)))
			idx[n++] = (uint32_t)i;
	}
	int rc = collect_candidates(st, c, idx, n);
	free(idx);
	return rc;
}

/* The inputs before n_keys of the shapes memo marks (2), in order. Through
 * a bitmap when several shapes do: their lists are each ascending. */
static int collect_by_shape(struct stage *st, struct collect *c, const struct ck_shape_memo *memo,
			    size_t n_keys)
{
	size_t hits = 0, one = 0, most = 0;
	for (size_t s = 0; s < memo->n && s < st->cap_of_shape; s++)
		if (memo->v[s] == 2 && st->of_shape[s].n)
			hits++, one = s, most += st->of_shape[s].n;
	if (*c->nm + most > c->cap) { /* room for every candidate at once: no doubling copies */
		struct match *n = realloc(*c->ms, (*c->nm + most) * sizeof *n);
		if (!n)
			return nomem(st->err);
		*c->ms = n, c->cap = *c->nm + most;
	}
	if (hits == 1) {
		const struct key_list *l = &st->of_shape[one];
		size_t n = 0;
		while (n < l->n && l->i[n] < n_keys)
			n++;
		return collect_candidates(st, c, l->i, n);
	}
	if (!hits)
		return 0;
	uint64_t *bits = calloc(n_keys / 64 + 1, sizeof *bits);
	uint32_t *idx = malloc(most * sizeof *idx);
	if (!bits || !idx) {
		free(bits);
		free(idx);
		return nomem(st->err);
	}
	for (size_t s = 0; s < memo->n && s < st->cap_of_shape; s++)
		for (size_t j = 0; memo->v[s] == 2 && j < st->of_shape[s].n; j++) {
			uint32_t i = st->of_shape[s].i[j];
			if (i < n_keys)
				bits[i / 64] |= 1ull << (i % 64);
		}
	size_t n = 0;
	for (size_t w = 0; w <= n_keys / 64; w++)
		for (uint64_t b = bits[w]; b; b &= b - 1)
			idx[n++] = (uint32_t)(w * 64 + (size_t)__builtin_ctzll(b));
	int rc = collect_candidates(st, c, idx, n);
	free(bits);
	free(idx);
	return rc;
}

/* The rule's matches among the stage's keys (its first input's pattern;
 * keys a per-key condition rejects are left for later rules), appended to
 * *ms. 0 or -1 (err set). */
static int collect_matches(struct stage *st, const struct ck_rule *r, struct match **ms,
			   size_t *nm)
{
	size_t n_keys = st->n_in; /* keys produced by this rule are not its inputs */
	struct ck_shape_memo memo = {0};
	struct collect c = {.r = r, .cm = {.pat = &r->in[0].pat}, .ms = ms, .nm = nm};
	if (r->cond_per_key)
		ck_expr_names(r->cond, memo_name, &c.cm);
	int rc = -1;
	if (!st->by_shape || !r->in[0].pat.shape_exact)
		rc = collect_by_suffix(st, &c, n_keys);
	else if (shape_inputs(st) < 0 || ck_shape_memo_fill(&r->in[0].pat, &st->shapes, &memo) < 0)
		nomem(st->err);
	else
		rc = collect_by_shape(st, &c, &memo, n_keys);
	ck_shape_memo_free(&memo);
	cond_memo_free(&c.cm);
	return rc;
}

/* "drop": consume every matched key. */
static int drop_matches(struct stage *st, const struct ck_rule *r, const struct match *ms,
			size_t nm)
{
	for (size_t i = 0; i < nm; i++) {
		char *key;
		struct skey *k;
		if (ck_pattern_subst(&r->in[0].pat, &ms[i].b, &key, st->err) < 0)
			return -1;
		int s = consume(st, r, key, 1, ms[i].key, &k);
		free(key);
		if (s < 0)
			return -1;
	}
	return 0;
}

/* Match i's reduced capture as an integer (rval) and its other captures
 * joined as its group's key. */
static int reduction_key(struct stage *st, const void *ctx, size_t i)
{
	const struct ck_rule *r = ((const struct matches *)ctx)->r;
	struct match *m = &((const struct matches *)ctx)->ms[i];
	const char *rc_name = r->reduce[0];
	const char *v = ck_binding_get(&m->b, rc_name);
	char *end;
	if (!v || !*v || (m->rval = strtoll(v, &end, 10), *end) || v[0] == '-') {
		ck_fail(st->err, CK_E_MAPPING, "reduced capture {%s} = \"%s\" is not an integer",
			rc_name, v ? v : "");
		return rule_fail(st, r, NULL);
	}
	size_t len = 1;
	for (int j = 0; j < m->b.n; j++)
		len += strlen(m->b.val[j]) + 1;
	if (!(m->group = calloc(1, len)))
		return nomem(st->err);
	for (int j = 0; j < m->b.n; j++)
		if (strcmp(m->b.name[j], rc_name)) {
			strcat(m->group, m->b.val[j]);
			strcat(m->group, "\x1f");
		}
	return 0;
}

static int reduction_keys(struct stage *st, const struct ck_rule *r, struct match *ms, size_t nm)
{
	struct matches m = {r, ms};
	return run_pieces(st, r, nm, key_threads(st, nm), reduction_key, &m);
}

/* One group of a reduction: its reduced values must run 0..n-1; the rule
 * runs once with the group's other captures. */
static int reduce_group(struct stage *st, const struct ck_rule *r, const struct match *first,
			struct rval *vals, int n, int64_t want)
{
	if (want >= 0 && n != want) { /* "each" counts the reduced capture */
		ck_fail(st->err, CK_E_MAPPING,
			"reduce over {%s}: %d values where \"each\" asks for %lld",
			r->reduce[0], n, (long long)want);
		return rule_fail(st, r, NULL);
	}
	/* matches arrive in the catalog's natural order, so the values
	 * normally run 0..n-1 already (128 qsorts of 520 experts were 1.6% of
	 * planning a 100k-key MoE); sorted only when they do not */
	int in_order = 0;
	while (in_order < n && vals[in_order].v == in_order)
		in_order++;
	if (in_order < n)
		qsort(vals, (size_t)n, sizeof *vals, cmp_rval);
	for (int j = 0; j < n; j++)
		if (vals[j].v != j) {
			ck_fail(st->err, CK_E_MAPPING,
				"reduce over {%s}: values must run 0..%d without gaps or repeats, "
				"found %lld at position %d",
				r->reduce[0], n - 1, (long long)vals[j].v, j);
			return rule_fail(st, r, NULL);
		}
	struct ck_binding b = {0};
	int rc = 0;
	for (int j = 0; rc == 0 && j < first->b.n; j++)
		if (!is_reduced(r, first->b.name[j]) &&
		    ck_binding_set(&b, first->b.name[j], first->b.val[j]) < 0)
			rc = nomem(st->err);
	if (rc == 0)
		rc = run_instance(st, r, &b, vals, n, NO_HINT);
	ck_binding_clear(&b);
	return rc;
}

/* A reduction's groups: group g's values are vals[start[g - 1], start[g])
 * (from 0 for the first) */
struct groups {
	const struct ck_rule *r;
	const struct match *ms;
	const size_t *first, *start;
	struct rval *vals;
	int64_t want;
};

static int group_instance(struct stage *st, const void *ctx, size_t g)
{
	const struct groups *gs = ctx;
	size_t a = g ? gs->start[g - 1] : 0;
	return reduce_group(st, gs->r, &gs->ms[gs->first[g]], gs->vals + a,
			    (int)(gs->start[g] - a), gs->want);
}

/* Reduction: group matches by the other captures, each group one run of
 * the rule, taken in the order of its first match. Groups are numbered by a
 * map in that order and the matches placed by counting: linear, where
 * sorting 100k matches by their group string was 5% of planning an MoE. */
static int run_reduction(struct stage *st, const struct ck_rule *r, struct match *ms, size_t nm,
			 int64_t want)
{
	if (reduction_keys(st, r, ms, nm) < 0)
		return -1;
	struct ck_strmap groups = {0};
	size_t room = nm ? nm : 1;
	uint32_t *gid = malloc(room * sizeof *gid), ng = 0;
	size_t *first = malloc(room * sizeof *first); /* each group's first match */
	size_t *start = calloc(nm + 1, sizeof *start); /* each group's place in order */
	size_t *order = malloc(room * sizeof *order);  /* matches, group by group */
	struct rval *vals = malloc(room * sizeof *vals);
	int rc = !gid || !first || !start || !order || !vals || ck_strmap_init(&groups, 64) < 0
		     ? nomem(st->err)
		     : 0;
	for (size_t i = 0; rc == 0 && i < nm; i++) {
		int got = ck_strmap_put(&groups, ms[i].group, ng, &gid[i]);
		if (got < 0) {
			rc = nomem(st->err);
			break;
		}
		if (got == 0) /* a new group */
			first[ng] = i, gid[i] = ng++;
		start[gid[i] + 1]++;
	}
	for (uint32_t g = 0; rc == 0 && g < ng; g++)
		start[g + 1] += start[g];
	for (size_t i = 0; rc == 0 && i < nm; i++) /* in match order within a group */
		order[start[gid[i]]++] = i;
	for (size_t j = 0; rc == 0 && j < nm; j++) /* start[g] moved to the group's end */
		vals[j] = (struct rval){ms[order[j]].rval, ms[order[j]].key};
	struct groups gs = {r, ms, first, start, vals, want};
	if (rc == 0)
		rc = run_instances(st, r, ng, nm, group_instance, &gs);
	ck_strmap_free(&groups);
	free(gid);
	free(first);
	free(start);
	free(order);
	free(vals);
	return rc;
}

/* The tuple of counted values vals as a binding (the strings in num). */
static int each_binding(const struct ck_each_seen *s, const int64_t *vals,
			char num[][24], struct ck_binding *b)
{
	*b = (struct ck_binding){0};
	for (int k = 0; k < s->n; k++) {
		ck_fmt_i64(num[k], vals[k]);
		if (ck_binding_borrow(b, b, s->each[k].name, num[k]) < 0)
			return -1;
	}
	return 0;
}

struct each_job {
	const struct ck_rule *r;
	const struct match *ms;
	struct ck_each_seen *s;
};

/* Match i's combination marked seen; a value that is no count's names the
 * key it came from. */
static int each_mark(struct stage *st, const void *ctx, size_t i)
{
	const struct each_job *j = ctx;
	if (ck_each_seen_add(j->s, &j->ms[i].b, st->err) == 0)
		return 0;
	char *key = NULL;
	struct ck_err e2 = {0};
	ck_pattern_subst(&j->r->in[0].pat, &j->ms[i].b, &key, &e2);
	int rc = rule_fail(st, j->r, key);
	free(key);
	return rc;
}

/* "each": the rule's matches give every counted combination its "if"
 * keeps, and only those (counts[k]: each[k]'s value, for the reduction). */
static int check_each(struct stage *st, const struct ck_rule *r, const struct match *ms,
		      size_t nm, int64_t *counts)
{
	struct env env = {st, r, NULL, NULL, NULL, 0};
	for (int k = 0; k < r->n_each; k++)
		if (eval_int(st, r->each[k].count, &env, &counts[k]) < 0) {
			char m[sizeof st->err->msg];
			memcpy(m, st->err->msg, sizeof m);
			ck_fail(st->err, CK_E_MAPPING, "\"each\": the count of {%s} (%s): %s",
				r->each[k].name, r->each[k].text, m);
			return rule_fail(st, r, NULL);
		}
	struct ck_each_seen s;
	if (ck_each_seen_init(&s, r->each, r->n_each, counts, nm, st->err) < 0)
		return rule_fail(st, r, NULL);
	struct each_job ej = {r, ms, &s};
	int rc = run_pieces(st, r, nm, key_threads(st, nm), each_mark, &ej);
	struct cond_memo cm = {.pat = &r->in[0].pat};
	if (r->cond_per_key)
		ck_expr_names(r->cond, memo_name, &cm);
	int64_t vals[CK_MAX_CAPTURES];
	for (uint64_t pos = 0; rc == 0 && ck_each_seen_gap(&s, &pos, vals); pos++) {
		char num[CK_MAX_CAPTURES][24];
		struct ck_binding b;
		int keep = 1;
		if (r->cond_per_key) /* a combination the "if" rejects is not expected */
			keep = each_binding(&s, vals, num, &b) < 0 ? nomem(st->err)
								     : cond_decide(st, r, &cm, &b);
		if (keep < 0) {
			rc = rule_fail(st, r, NULL);
		} else if (keep) {
			char d[512];
			ck_each_describe(&s, vals, d, sizeof d);
			ck_fail(st->err, CK_E_MAPPING, "\"each\": no key for %s", d);
			rc = rule_fail(st, r, NULL);
		}
	}
	cond_memo_free(&cm);
	ck_each_seen_free(&s);
	return rc;
}

/* A rule without reduction: an instance per match. */
static int match_instance(struct stage *st, const void *ctx, size_t i)
{
	const struct matches *m = ctx;
	return run_instance(st, m->r, &m->ms[i].b, NULL, 0, m->ms[i].key);
}

static int run_rule(struct stage *st, const struct ck_rule *r)
{
	if (r->cond && !r->cond_per_key) {
		struct env env = {st, r, NULL, NULL, NULL, 0};
		int64_t v;
		if (eval_int(st, r->cond, &env, &v) < 0)
			return rule_fail(st, r, NULL);
		if (!v)
			return 0;
	}
	if (r->n_reduce > 1) {
		ck_fail(st->err, CK_E_MAPPING, "reduce over more than one capture is not supported");
		return rule_fail(st, r, NULL);
	}
	struct match *ms = NULL;
	size_t nm = 0;
	int rc = collect_matches(st, r, &ms, &nm);
	int64_t counts[CK_MAX_CAPTURES], reduce_n = -1;
	/* "each" on a rule that must match: no key at all is a missing
	 * combination unless its "if" expects none (no dense layers) */
	int each = r->n_each && !st->lenient && (nm || !r->optional);
	if (rc == 0 && each) {
		rc = check_each(st, r, ms, nm, counts);
		for (int k = 0; k < r->n_each && r->n_reduce; k++)
			if (!strcmp(r->each[k].name, r->reduce[0]))
				reduce_n = counts[k];
	}
	if (rc == 0 && nm == 0 && !r->optional && !st->lenient && !each) {
		ck_fail(st->err, CK_E_MAPPING, "matches no %skey",
			st->m == NULL ? "" : "unconsumed ");
		rc = rule_fail(st, r, NULL);
	} else if (rc == 0 && r->drop) {
		rc = drop_matches(st, r, ms, nm);
	} else if (rc == 0 && !r->n_reduce) {
		struct matches one = {r, ms};
		rc = run_instances(st, r, nm, nm, match_instance, &one);
	} else if (rc == 0 && nm) {
		rc = run_reduction(st, r, ms, nm, reduce_n);
	}
	for (size_t i = 0; i < nm; i++) {
		ck_binding_clear(&ms[i].b);
		free(ms[i].group);
	}
	free(ms);
	return rc;
}

/* ---- stage set-up: names rewritten by strip/add prefix ---- */

static char *rename_key(const struct ck_mapping *m, const char *name)
{
	const char *s = name;
	for (int again = 1; again;) {
		again = 0;
		for (int i = 0; i < m->n_strip_prefixes; i++) {
			size_t n = strlen(m->strip_prefixes[i]);
			if (!strncmp(s, m->strip_prefixes[i], n) && s[n]) {
				s += n;
				again = 1;
			}
		}
	}
	size_t pre = m->add_prefix ? strlen(m->add_prefix) : 0;
	char *out = malloc(pre + strlen(s) + 1);
	if (!out)
		return NULL;
	memcpy(out, m->add_prefix ? m->add_prefix : "", pre);
	char *w = out + pre;
	/* drop whole dot-separated segments named in strip_segments */
	const char *seg = s;
	int first = 1;
	while (seg) {
		const char *dot = strchr(seg, '.');
		size_t len = dot ? (size_t)(dot - seg) : strlen(seg);
		int drop = 0;
		for (int i = 0; i < m->n_strip_segments && !drop; i++)
			drop = strlen(m->strip_segments[i]) == len &&
			       !strncmp(seg, m->strip_segments[i], len);
		if (!drop) {
			if (!first)
				*w++ = '.';
			memcpy(w, seg, len);
			w += len;
			first = 0;
		}
		seg = dot ? dot + 1 : NULL;
	}
	*w = '\0';
	return out;
}

static int stage_params(struct stage *st)
{
	const struct ck_mapping *m = st->m;
	st->params = calloc((size_t)(m->n_params ? m->n_params : 1), sizeof *st->params);
	if (!st->params)
		return nomem(st->err);
	for (int i = 0; i < m->n_params; i++) {
		struct pctx c = {st, i};
		if (ck_expr_eval(m->params[i].expr, param_lookup, &c, &st->params[i], st->err) < 0) {
			char msg[sizeof st->err->msg];
			memcpy(msg, st->err->msg, sizeof msg);
			return ck_fail(st->err, CK_E_MAPPING, "%s: param \"%s\": %s", m->path,
				       m->params[i].name, msg);
		}
		st->n_params++;
	}
	return 0;
}

static void stage_free(struct stage *st)
{
	ck_plan_keys_free(st->in, st->n_in);
	ck_plan_keys_free(st->out, st->n_out);
	ck_strmap_free(&st->in_map);
	ck_strmap_free(&st->out_map);
	ck_keyshapes_free(&st->shapes);
	for (size_t i = 0; i < st->cap_of_shape; i++)
		free(st->of_shape[i].i);
	free(st->of_shape);
	for (size_t i = 0; i < st->cfg.n; i++) {
		free(st->cfg.name[i]);
		ck_xval_free(&st->cfg.v[i]);
	}
	free(st->cfg.name);
	free(st->cfg.v);
	ck_strmap_free(&st->cfg.map);
	for (int i = 0; i < st->n_params; i++)
		ck_xval_free(&st->params[i]);
	free(st->params);
}

/* Run one mapping over keys (consumed: they move into the stage). */
/* After a rule ran: its first ambiguity becomes one warning, unless the
 * rule says how it is checked. */
static int note_lint(struct stage *st, const struct ck_rule *r)
{
	if (!st->lint.msg[0])
		return 0;
	int rc = 0;
	if (!r->checked) {
		char *w = NULL;
		char **nw = realloc(st->warn->w, (st->warn->n + 1) * sizeof *nw);
		if (nw)
			st->warn->w = nw;
		if (!nw || asprintf(&w, "%s: rule %d (%s): %s; a numerical test must confirm it "
					"(then say how in the rule's \"checked\")",
				    st->m->path, r->index, r->desc, st->lint.msg) < 0)
			rc = nomem(st->err);
		else
			st->warn->w[st->warn->n++] = w;
	}
	st->lint.msg[0] = '\0';
	return rc;
}

/* The mapping's "rename" entries that hold ("if": config values and
 * params, decided once): on[i]. */
static int renames_on(struct stage *st, int *on)
{
	const struct ck_mapping *m = st->m;
	for (int i = 0; i < m->n_renames; i++) {
		on[i] = 1;
		if (!m->renames[i].cond)
			continue;
		struct pctx c = {st, st->n_params};
		struct ck_xval v;
		if (ck_expr_eval(m->renames[i].cond, param_lookup, &c, &v, st->err) < 0) {
			char msg[sizeof st->err->msg];
			memcpy(msg, st->err->msg, sizeof msg);
			return ck_fail(st->err, CK_E_MAPPING, "%s: rename %d: \"if\": %s", m->path, i + 1,
				       msg);
		}
		int ok = v.kind == XV_INT;
		on[i] = ok && v.i != 0;
		ck_xval_free(&v);
		if (!ok)
			return ck_fail(st->err, CK_E_MAPPING,
				       "%s: rename %d: \"if\" must give an integer or a boolean", m->path,
				       i + 1);
	}
	return 0;
}

/* The "rename" pass over the stage's outputs (see ck_rename): the first
 * entry that matches; two outputs may not end up with one name. */
static int rename_outputs(struct stage *st)
{
	const struct ck_mapping *m = st->m;
	if (!m->n_renames)
		return 0;
	int *on = malloc((size_t)m->n_renames * sizeof *on);
	int *by = calloc(st->n_out ? st->n_out : 1, sizeof *by); /* the entry that renamed */
	struct ck_strmap seen = {0};
	int rc = !on || !by ? nomem(st->err) : renames_on(st, on), any = 0;
	for (int i = 0; i < m->n_renames && rc == 0; i++)
		any |= on[i];
	if (rc == 0 && any && ck_strmap_init(&seen, st->n_out) < 0)
		rc = nomem(st->err);
	for (size_t k = 0; k < st->n_out && rc == 0 && any; k++) {
		struct skey *o = &st->out[k];
		for (int i = 0; i < m->n_renames && !by[k] && rc == 0; i++) {
			struct ck_binding b;
			int r = on[i] ? ck_pattern_match(&m->renames[i].match, o->name, &b) : 0;
			char *name = NULL;
			if (r < 0)
				rc = nomem(st->err);
			if (r == 1) {
				rc = ck_pattern_subst(&m->renames[i].to, &b, &name, st->err);
				ck_binding_clear(&b);
			}
			if (r == 1 && rc == 0) {
				free(o->name);
				o->name = name;
				by[k] = i + 1;
			}
		}
		uint32_t prev;
		int put = rc ? 0 : ck_strmap_put(&seen, o->name, (uint32_t)k, &prev);
		if (put < 0)
			rc = nomem(st->err);
		else if (put == 1) /* names were unique before: one of the two was renamed */
			rc = ck_fail(st->err, CK_E_MAPPING,
				     "%s: rename %d: makes a second target named \"%s\"", m->path,
				     by[k] ? by[k] : by[prev], o->name);
	}
	ck_strmap_free(&seen);
	free(by);
	free(on);
	return rc;
}

static const char *out_name(const void *st, size_t i)
{
	return ((const struct stage *)st)->out[i].name;
}

/* The rules' targets (all a rule's so far) in the stage's map of them,
 * which is sized for them now (a fusing mapping makes a few hundred of
 * 100,000 keys; a map sized for the keys would be 4 MB of slots zeroed for
 * nothing): a name made twice is refused, naming both rules. Slots are
 * prefetched a few names ahead, as in the catalog's index. */
static int index_targets(struct stage *st)
{
	uint32_t prev;
	struct ck_strmap_window w;
	if (ck_strmap_init(&st->out_map, st->n_out) < 0)
		return nomem(st->err);
	for (size_t i = 0; i < st->n_out; i++) {
		uint32_t h = ck_strmap_ahead(&st->out_map, &w, i, st->n_out, out_name, st);
		const struct skey *o = &st->out[i];
		int r = ck_strmap_put_h(&st->out_map, o->name, h, (uint32_t)i, &prev);
		if (r < 0)
			return nomem(st->err);
		if (r == 1) {
			ck_fail(st->err, CK_E_MAPPING, "target produced twice (also by rule %d)",
				st->out[prev].produced_by);
			return rule_fail(st, &st->m->rules[o->produced_by - 1], o->name);
		}
	}
	return 0;
}

/* Every key moves in, with room for intermediates, and about as many come
 * out: no doubling series, whose copies would each fault in fresh memory
 * (room never touched costs address space only). *as_cat: the keys when
 * they are the catalog's as they are (keys_are_catalog): the array becomes
 * the inputs (NULL once it did), the catalog's map their map (cat_map). */
static int stage_alloc(struct stage *st, size_t n_keys, struct skey **as_cat)
{
	st->cap_in = n_keys + n_keys / 4 + 16;
	st->cap_out = n_keys + n_keys / 8 + 16;
	st->cat_map = *as_cat ? &st->cat->by_name : NULL;
	if (!(st->in = realloc(*as_cat, st->cap_in * sizeof *st->in)))
		return nomem(st->err);
	if (*as_cat)
		st->n_in = n_keys, *as_cat = NULL;
	if (!(st->out = malloc(st->cap_out * sizeof *st->out)) ||
	    ck_strmap_init(&st->in_map, st->cat_map ? 64 : n_keys) < 0)
		return nomem(st->err);
	return 0;
}

/* Whether keys are the catalog's tensors, all, in its order, under their
 * own names (the catalog's strings), untouched by any rule: then they are
 * the stage's inputs as they are, and the catalog's name map, whose values
 * are the entries' indices, finds them (a 100k-key stage would copy every
 * key and put every name in a map of its own, each a cache miss). */
static int keys_are_catalog(const struct ck_mapping *m, const struct ck_catalog *cat,
			    const struct skey *keys, size_t n)
{
	if (m->n_strip_prefixes || m->n_strip_segments || m->add_prefix || cat->logical ||
	    n != cat->n_entries || cat->by_name.len != n)
		return 0;
	for (size_t i = 0; i < n; i++) {
		const struct skey *k = &keys[i];
		if (k->leaf != i + 1 || !k->borrowed || k->consumed_by || k->produced_by ||
		    k->param || k->state || k->scalar)
			return 0;
	}
	return 1;
}

/* The n keys become the stage's inputs (renamed as the mapping says); they
 * are freed either way. 0 or -1 (err set). */
static int stage_inputs(struct stage *st, struct skey *keys, size_t n)
{
	const struct ck_mapping *m = st->m;
	struct skey *as_cat = keys_are_catalog(m, st->cat, keys, n) ? keys : NULL;
	int rc = -1;
	if (stage_alloc(st, n, &as_cat) < 0) {
		if (!as_cat && st->cat_map) /* it moved in */
			keys = NULL, n = 0;
		goto out;
	}
	if (st->cat_map) /* the keys are the inputs */
		return 0;
	/* no renaming: each name moves into the stage as it is */
	int plain = !m->n_strip_prefixes && !m->n_strip_segments && !m->add_prefix;
	for (size_t i = 0; i < n; i++) {
		struct skey *k = &keys[i];
		char *name = plain ? k->name : rename_key(m, k->name);
		int borrowed = plain && k->borrowed;
		if (plain)
			k->name = NULL; /* moved into the stage */
		uint32_t prev;
		int r = name ? key_add(&st->in, &st->n_in, &st->cap_in, &st->in_map, name, &k->v, 0,
				       &prev, st->err)
			     : nomem(st->err);
		if (r == 1)
			ck_fail(st->err, CK_E_MAPPING,
				"%s: keys \"%s\" and \"%s\" both become \"%s\"", m->path,
				plain ? st->in[prev].name : keys[prev].name, plain ? name : k->name,
				name);
		if (r != 0) {
			if (!borrowed)
				free(name);
			goto out;
		}
		st->in[st->n_in - 1].leaf = k->leaf;
		st->in[st->n_in - 1].borrowed = (uint8_t)borrowed;
		k->v.p = NULL; /* moved into the stage */
	}
	rc = 0;
out:
	ck_plan_keys_free(keys, n);
	return rc;
}

int ck_plan_run_stage(const struct ck_mapping *m, int first, int lenient,
		      const struct ck_catalog *cat, struct skey **keys, size_t *n_keys,
		      struct ck_warnings *warn, struct ck_err *err)
{
	return ck_plan_run_stage_threads(m, first, lenient, 0, cat, cat->config, keys, n_keys, warn,
					 err);
}

/* The rules whose first input's pattern decides by shape. */
static int shape_rules(const struct ck_mapping *m)
{
	int n = 0;
	for (int i = 0; i < m->n_rules; i++)
		n += m->rules[i].n_in > 0 && m->rules[i].in[0].pat.shape_exact;
	return n;
}

int ck_plan_run_stage_threads(const struct ck_mapping *m, int first, int lenient, int threads,
			      const struct ck_catalog *cat, const cJSON *config, struct skey **keys,
			      size_t *n_keys, struct ck_warnings *warn, struct ck_err *err)
{
	struct stage st = {0};
	st.threads = threads;
	st.lenient = lenient;
	st.m = m;
	st.by_shape = shape_rules(m) >= CK_SHAPE_RULES_MIN;
	st.cat = cat;
	st.config = config;
	st.err = err;
	st.warn = warn;
	int rc = stage_inputs(&st, *keys, *n_keys);
	*keys = NULL; /* taken by the stage */
	*n_keys = 0;
	if (rc < 0) {
		stage_free(&st);
		return -1;
	}
	rc = -1;
	if (stage_params(&st) < 0)
		goto fail;
	for (int i = 0; i < m->n_rules; i++)
		if (run_rule(&st, &m->rules[i]) < 0 || note_lint(&st, &m->rules[i]) < 0)
			goto fail;
	if (index_targets(&st) < 0)
		goto fail;
	enum ck_unused pol = m->unused != CK_UNUSED_DEFAULT ? m->unused
			     : first			       ? CK_UNUSED_ERROR
							       : CK_UNUSED_KEEP;
	size_t unused = 0, first_unused = 0;
	for (size_t i = 0; i < st.n_in; i++) {
		struct skey *k = &st.in[i];
		if (k->consumed_by)
			continue;
		if (k->produced_by) {
			ck_fail(err, CK_E_MAPPING, "%s: rule %d: intermediate \"%s\" is never used",
				m->path, k->produced_by, k->name);
			goto fail;
		}
		if (!unused++)
			first_unused = i;
		if (pol == CK_UNUSED_KEEP) {
			uint32_t prev;
			char *name = strdup(k->name);
			int r = name ? key_add(&st.out, &st.n_out, &st.cap_out, &st.out_map, name,
					       &k->v, 0, &prev, err)
				     : nomem(err);
			if (r == 1)
				ck_fail(err, CK_E_MAPPING,
					"%s: unused key \"%s\" is kept but rule %d also produces it",
					m->path, name, st.out[prev].produced_by);
			if (r != 0) {
				free(name);
				goto fail;
			}
			st.out[st.n_out - 1].leaf = k->leaf;
			k->v.p = NULL;
			k->v.n = 0;
		}
	}
	if (unused && pol == CK_UNUSED_ERROR) {
		ck_fail(err, CK_E_MAPPING,
			"%s: %zu source key%s used by no rule, first \"%s\" (set \"unused\": "
			"\"drop\" or \"keep\" to allow)",
			m->path, unused, unused == 1 ? " is" : "s are", st.in[first_unused].name);
		goto fail;
	}
	if (rename_outputs(&st) < 0)
		goto fail;
	*keys = st.out;
	*n_keys = st.n_out;
	st.out = NULL;
	st.n_out = 0;
	rc = 0;
fail:
	stage_free(&st);
	return rc;
}

static int logical_value(const struct ck_catalog *cat, const struct ck_logical *l,
			 struct ck_value *v, struct ck_err *err)
{
	memset(v, 0, sizeof *v);
	v->dtype = l->dtype;
	v->ndim = l->ndim;
	memcpy(v->shape, l->shape, sizeof v->shape);
	if (!(v->p = calloc(l->n_chunks ? l->n_chunks : 1, sizeof *v->p)))
		return nomem(err);
	for (size_t k = 0; k < l->n_chunks; k++) {
		const struct ck_tensor_info *t = &cat->entries[l->chunks[k].entry].t;
		if (!t->numel)
			continue;
		struct ck_piece *p = &v->p[v->n++];
		p->src = l->chunks[k].entry;
		int64_t s = 1;
		for (int d = t->ndim - 1; d >= 0; d--) {
			p->lo[d] = l->chunks[k].off[d];
			p->hi[d] = l->chunks[k].off[d] + t->shape[d];
			p->stride[d] = t->stride ? t->stride[d] : s;
			s *= t->shape[d];
		}
	}
	return 0;
}

/* Source key i (a tensor, or a DCP tensor made of chunks) as a value. */
int ck_plan_source_value(const struct ck_catalog *cat, uint32_t i, struct ck_value *v,
			struct ck_err *err)
{
	if (cat->logical)
		return logical_value(cat, &cat->logical[i], v, err);
	const struct ck_tensor_info *t = &cat->entries[i].t;
	if (ck_value_leaf(v, i, t->dtype, t->ndim, t->shape, err) < 0)
		return -1;
	if (t->stride && v->n) { /* a view (torch sources): its own strides */
		for (int d = 0; d < t->ndim; d++)
			v->p[0].stride[d] = t->stride[d];
	}
	return 0;
}

static int build(const struct ck_catalog *cat, const cJSON *config, struct ck_mapping *const *maps,
		 int n_maps, int threads, struct ck_plan **out, struct ck_err *err);

int ck_plan_build(const struct ck_catalog *cat, struct ck_mapping *const *maps, int n_maps,
		  struct ck_plan **out, struct ck_err *err)
{
	return build(cat, cat->config, maps, n_maps, 0, out, err);
}

int ck_plan_build_threads(const struct ck_catalog *cat, struct ck_mapping *const *maps,
			  int n_maps, int threads, struct ck_plan **out, struct ck_err *err)
{
	return build(cat, cat->config, maps, n_maps, threads, out, err);
}

int ck_plan_build_config(const struct ck_catalog *cat, const cJSON *config,
			 struct ck_mapping *const *maps, int n_maps, struct ck_plan **out,
			 struct ck_err *err)
{
	return build(cat, config, maps, n_maps, 0, out, err);
}

static int build(const struct ck_catalog *cat, const cJSON *config, struct ck_mapping *const *maps,
		 int n_maps, int threads, struct ck_plan **out, struct ck_err *err)
{
	*out = NULL;
	size_t n = cat->logical ? cat->n_logical : cat->n_entries;
	struct skey *keys = malloc((n ? n : 1) * sizeof *keys);
	if (!keys)
		return nomem(err);
	for (size_t i = 0; i < n; i++) /* named with the catalog's strings */
		keys[i] = (struct skey){.name = cat->logical ? cat->logical[i].name
							     : (char *)cat->entries[i].t.name,
					.leaf = (uint32_t)i + 1,
					.borrowed = 1};
	struct ck_warnings warn = {NULL, 0};
	struct ck_opt_split *os = NULL;
	char *opt_template = NULL;
	if (ck_opt_take(cat, maps, n_maps, &keys, &n, &os, err) < 0) {
		ck_plan_keys_free(keys, n);
		return -1;
	}
	for (int s = 0; s < n_maps; s++)
		if (ck_plan_run_stage_threads(maps[s], s == 0, 0, threads, cat, config, &keys, &n,
					      &warn, err) < 0) {
			ck_warnings_free(&warn);
			ck_opt_free(os);
			return -1;
		}
	if (os) {
		int r = ck_opt_plan(os, cat, maps, n_maps, &keys, &n, &opt_template, err);
		ck_opt_free(os);
		if (r < 0) {
			ck_plan_keys_free(keys, n);
			ck_warnings_free(&warn);
			return -1;
		}
	}
	for (size_t i = 0; i < n; i++) { /* targets that are source keys as they are */
		struct skey *k = &keys[i];
		if (k->borrowed && (k->name = strdup(k->name))) /* a target owns its name */
			k->borrowed = 0;
		if ((k->borrowed && nomem(err)) ||
		    (k->leaf && ck_plan_source_value(cat, k->leaf - 1, &k->v, err) < 0)) {
			ck_plan_keys_free(keys, n);
			ck_warnings_free(&warn);
			free(opt_template);
			return -1;
		}
		k->leaf = 0;
	}
	struct ck_plan *p = calloc(1, sizeof *p);
	struct ck_target *t = calloc(n ? n : 1, sizeof *t);
	if (!p || !t) {
		free(p);
		free(t);
		ck_plan_keys_free(keys, n);
		ck_warnings_free(&warn);
		return nomem(err);
	}
	p->warnings = warn.w;
	p->n_warnings = warn.n;
	p->opt_template = opt_template;
	p->cat = cat;
	p->config = config;
	p->t = t;
	p->n = n;
	for (size_t i = 0; i < n; i++) {
		t[i].name = keys[i].name;
		t[i].v = keys[i].v;
		t[i].rule = keys[i].produced_by;
		t[i].stage = n_maps;
		t[i].param = keys[i].param;
		t[i].state = keys[i].state;
		t[i].scalar = keys[i].scalar;
	}
	free(keys);
	if (ck_plan_finish(p, err) < 0) {
		ck_plan_free(p);
		return -1;
	}
	*out = p;
	return 0;
}

