#include "optstate.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- recognising keys ---- */

/* The state names Megatron-core writes as optimizer.state.{state}.{key}. */
static const char *const megatron_states[] = {"exp_avg", "exp_avg_sq", "fp32_param", "step",
					      "momentum_buffer", "max_exp_avg_sq"};

static int has_prefix(const char *s, const char *p)
{
	return !strncmp(s, p, strlen(p));
}

/* rest = "{fqn}.{state}": the state is the last segment, the fqn non-empty */
static int split_last(const char *rest, enum ck_opt_form f, struct ck_opt_key *k)
{
	const char *dot = strrchr(rest, '.');
	if (!dot || dot == rest || !dot[1])
		return 0;
	*k = (struct ck_opt_key){f, rest, dot + 1, (size_t)(dot - rest), strlen(dot + 1)};
	return 1;
}

/* Megatron's distributed-optimizer buffers: "optimizer.distributed.*", or
 * a key naming per_bucket_numel anywhere. Every key of every checkpoint is
 * asked: the first byte first, then strchr from one '_' to the next, each
 * the possible first '_' of the name (16 ns a key here, against 29 from
 * one 'p' to the next and 73 for glibc's strstr on this CPU). */
static int is_dist_buffer(const char *key)
{
	if (key[0] == 'o' && has_prefix(key, "optimizer.distributed."))
		return 1;
	for (const char *q = strchr(key, '_'); q; q = strchr(q + 1, '_'))
		if (q - key >= 3 && !strncmp(q - 3, "per_bucket_numel", 16))
			return 1;
	return 0;
}

int ck_opt_classify(const char *key, struct ck_opt_key *k, struct ck_err *err)
{
	if (is_dist_buffer(key))
		return ck_fail(err, CK_E_MAPPING,
			       "\"%s\" is Megatron's distributed-optimizer buffer (flattened per "
			       "bucket, many parameters in one tensor): only the per-parameter "
			       "layout can be mapped (torch_dist saved with sharding_type "
			       "fully_sharded_model_space: optimizer.state.exp_avg.<param>)",
			       key);
	if (key[0] == 's' && has_prefix(key, "state."))
		return split_last(key + 6, CK_OPTF_FLAT, k);
	if (key[0] != 'o' || !has_prefix(key, "optimizer.state."))
		return 0;
	const char *rest = key + 16;
	for (size_t i = 0; i < sizeof megatron_states / sizeof *megatron_states; i++) {
		size_t n = strlen(megatron_states[i]);
		if (!strncmp(rest, megatron_states[i], n) && rest[n] == '.' && rest[n + 1]) {
			*k = (struct ck_opt_key){CK_OPTF_MEGATRON, rest + n + 1, rest,
						 strlen(rest + n + 1), n};
			return 1;
		}
	}
	return split_last(rest, CK_OPTF_NESTED, k);
}

const char *ck_opt_form_template(enum ck_opt_form f)
{
	return f == CK_OPTF_MEGATRON ? "optimizer.state.{state}.{param}"
	       : f == CK_OPTF_NESTED ? "optimizer.state.{param}.{state}"
				     : "state.{param}.{state}";
}

char *ck_opt_name(const char *tmpl, const char *param, const char *state)
{
	size_t n = strlen(tmpl) + strlen(param) + strlen(state) + 1;
	char *out = malloc(n), *w = out;
	if (!out)
		return NULL;
	for (const char *s = tmpl; *s;) {
		const char *v = has_prefix(s, "{param}") ? param : has_prefix(s, "{state}") ? state : NULL;
		if (v) {
			size_t l = strlen(v);
			memcpy(w, v, l);
			w += l;
			s += 7;
		} else {
			*w++ = *s++;
		}
	}
	*w = '\0';
	return out;
}

/* ---- taking them out of the keys ---- */

struct ostate {
	char *param; /* the parameter's source key */
	char *state; /* "exp_avg" */
	uint32_t src, param_src; /* source keys */
	int scalar;
};

struct ck_opt_split {
	struct ostate *s; /* sorted by (param_src, state) */
	size_t n;
	char *tmpl;
	uint32_t *run_start, *run_len; /* per source key: its states s[start..+len) */
	size_t n_src;
};

void ck_opt_free(struct ck_opt_split *os)
{
	if (!os)
		return;
	for (size_t i = 0; i < os->n; i++) {
		free(os->s[i].param);
		free(os->s[i].state);
	}
	free(os->s);
	free(os->tmpl);
	free(os->run_start);
	free(os->run_len);
	free(os);
}

static int nomem(struct ck_err *err)
{
	return ck_fail_sys(err, ENOMEM, "planning optimizer state");
}

static void src_shape(const struct ck_catalog *cat, uint32_t i, int *ndim, const int64_t **shape)
{
	if (cat->logical) {
		*ndim = cat->logical[i].ndim;
		*shape = cat->logical[i].shape;
	} else {
		*ndim = cat->entries[i].t.ndim;
		*shape = cat->entries[i].t.shape;
	}
}

static void fmt_shape(char *b, size_t n, int ndim, const int64_t *shape)
{
	size_t o = (size_t)snprintf(b, n, "[");
	for (int d = 0; d < ndim && o < n; d++)
		o += (size_t)snprintf(b + o, n - o, "%s%lld", d ? ", " : "", (long long)shape[d]);
	if (o < n)
		snprintf(b + o, n - o, "]");
}

/* A per-element state has its parameter's shape; a scalar one element. */
static int state_kind(const struct ck_catalog *cat, struct ostate *o, const char *key,
		      struct ck_err *err)
{
	int nd, pnd;
	const int64_t *sh, *psh;
	src_shape(cat, o->src, &nd, &sh);
	src_shape(cat, o->param_src, &pnd, &psh);
	int64_t numel = 1;
	for (int d = 0; d < nd; d++)
		numel *= sh[d];
	int same = nd == pnd && !memcmp(sh, psh, (size_t)nd * sizeof *sh);
	if (same)
		return 0;
	if (numel == 1 && nd <= 1) {
		o->scalar = 1;
		return 0;
	}
	char a[160], b[160];
	fmt_shape(a, sizeof a, nd, sh);
	fmt_shape(b, sizeof b, pnd, psh);
	return ck_fail(err, CK_E_MAPPING,
		       "optimizer state \"%s\" has shape %s but its parameter \"%s\" has %s: only "
		       "per-element state and scalars can follow a parameter",
		       key, a, o->param, b);
}

static int cmp_ostate(const void *a, const void *b)
{
	const struct ostate *x = a, *y = b;
	if (x->param_src != y->param_src)
		return x->param_src < y->param_src ? -1 : 1;
	return strcmp(x->state, y->state);
}

/* The mode the chain asks for: the last mapping that says, NONE anywhere
 * wins. */
static enum ck_opt_mode chain_mode(struct ck_mapping *const *maps, int n_maps, const char **tmpl)
{
	enum ck_opt_mode mode = CK_OPT_DEFAULT;
	*tmpl = NULL;
	for (int i = 0; i < n_maps; i++) {
		if (maps[i]->opt_mode == CK_OPT_NONE)
			return CK_OPT_NONE;
		if (maps[i]->opt_mode != CK_OPT_DEFAULT) {
			mode = maps[i]->opt_mode;
			*tmpl = maps[i]->opt_template;
		}
	}
	return mode;
}

static const char *source_name(const struct ck_catalog *cat, uint32_t i)
{
	return cat->logical ? cat->logical[i].name : cat->entries[i].t.name;
}

/* Classify every key: the optimizer state ones go to os (and is_state),
 * in key order; *first_form is the first one's form. A refusal leaves the
 * keys as they were. */
static int classify_keys(const struct ck_catalog *cat, const struct skey *keys, size_t n,
			 struct ck_opt_split *os, unsigned char *is_state,
			 enum ck_opt_form *first_form, struct ck_err *err)
{
	size_t cap = 0;
	for (size_t i = 0; i < n; i++) {
		const struct skey *k = &keys[i];
		struct ck_opt_key ok;
		int c = ck_opt_classify(k->name, &ok, err);
		if (c < 0) {
			char m[sizeof err->msg];
			memcpy(m, err->msg, sizeof m);
			return ck_fail(err, CK_E_MAPPING, "%s: %s", cat->source, m);
		}
		if (!c)
			continue;
		if (os->n == cap) {
			cap = cap ? cap * 2 : 64;
			struct ostate *ns = realloc(os->s, cap * sizeof *ns);
			if (!ns)
				return nomem(err);
			os->s = ns;
		}
		struct ostate *o = &os->s[os->n];
		*o = (struct ostate){strndup(ok.param, ok.param_len), strndup(ok.state, ok.state_len),
				     k->leaf - 1, 0, 0};
		if (!o->param || !o->state) {
			free(o->param);
			free(o->state);
			return nomem(err);
		}
		os->n++;
		is_state[i] = 1;
		if (*first_form == CK_OPTF_NONE)
			*first_form = ok.form;
	}
	return 0;
}

/* Each state's parameter must be a source key (one of the n left). */
static int find_params(const struct ck_catalog *cat, const struct skey *keys, size_t n,
		       struct ck_opt_split *os, struct ck_err *err)
{
	struct ck_strmap names;
	if (ck_strmap_init(&names, n) < 0)
		return nomem(err);
	int rc = 0;
	for (size_t i = 0; rc == 0 && i < n; i++)
		if (ck_strmap_put(&names, keys[i].name, keys[i].leaf - 1, NULL) < 0)
			rc = nomem(err);
	for (size_t i = 0; rc == 0 && i < os->n; i++) {
		struct ostate *o = &os->s[i];
		const char *key = source_name(cat, o->src);
		if (ck_strmap_get(&names, o->param, &o->param_src) < 0)
			rc = ck_fail(err, CK_E_MAPPING,
				     "%s: optimizer state \"%s\" belongs to parameter \"%s\", which is "
				     "not in the source",
				     cat->source, key, o->param);
		else
			rc = state_kind(cat, o, key, err);
	}
	ck_strmap_free(&names);
	return rc < 0 ? -1 : 0;
}

/* The states sorted by parameter, each parameter's run of them indexed by
 * its source key, and the names' template. */
static int index_states(const struct ck_catalog *cat, struct ck_opt_split *os, const char *tmpl,
			struct ck_err *err)
{
	qsort(os->s, os->n, sizeof *os->s, cmp_ostate);
	os->n_src = cat->logical ? cat->n_logical : cat->n_entries;
	os->run_start = calloc(os->n_src ? os->n_src : 1, sizeof *os->run_start);
	os->run_len = calloc(os->n_src ? os->n_src : 1, sizeof *os->run_len);
	os->tmpl = strdup(tmpl);
	if (!os->run_start || !os->run_len || !os->tmpl)
		return nomem(err);
	for (size_t i = os->n; i-- > 0;) {
		os->run_start[os->s[i].param_src] = (uint32_t)i;
		os->run_len[os->s[i].param_src]++;
	}
	return 0;
}

int ck_opt_take(const struct ck_catalog *cat, struct ck_mapping *const *maps, int n_maps,
		struct skey **keys, size_t *n, struct ck_opt_split **out, struct ck_err *err)
{
	*out = NULL;
	const char *tmpl;
	enum ck_opt_mode mode = chain_mode(maps, n_maps, &tmpl);
	if (!n_maps || mode == CK_OPT_NONE)
		return 0;
	for (size_t i = 0; i < cat->left_out.n; i++) /* legacy buckets hold lists of sizes */
		if (is_dist_buffer(cat->left_out.e[i].key))
			return ck_fail(err, CK_E_MAPPING,
				       "%s: \"%s\" belongs to Megatron's legacy distributed-optimizer "
				       "file (flattened per-bucket buffers): only the per-parameter "
				       "torch_dist layout (optimizer.state.exp_avg.<param>) can be "
				       "mapped",
				       cat->source, cat->left_out.e[i].key);
	struct ck_opt_split *os = calloc(1, sizeof *os);
	unsigned char *is_state = calloc(*n ? *n : 1, 1);
	enum ck_opt_form first_form = CK_OPTF_NONE;
	if (!os || !is_state || classify_keys(cat, *keys, *n, os, is_state, &first_form, err) < 0) {
		if (!os || !is_state)
			nomem(err);
		free(is_state);
		ck_opt_free(os);
		return -1;
	}
	size_t kept = 0;
	for (size_t i = 0; i < *n; i++) {
		if (!is_state[i])
			(*keys)[kept++] = (*keys)[i];
		else if (!(*keys)[i].borrowed)
			free((*keys)[i].name);
	}
	free(is_state);
	*n = kept;
	if (!os->n || mode == CK_OPT_DROP) {
		ck_opt_free(os);
		return 0;
	}
	if (find_params(cat, *keys, kept, os, err) < 0 ||
	    index_states(cat, os, mode == CK_OPT_TEMPLATE ? tmpl : ck_opt_form_template(first_form),
			 err) < 0) {
		ck_opt_free(os);
		return -1;
	}
	*out = os;
	return 0;
}

/* ---- planning them through the rules ---- */

/* A DCP source's pieces name chunk entries: *owner[entry] is the tensor
 * (logical key) a chunk belongs to; NULL for other sources. */
static int chunk_owners(const struct ck_catalog *cat, uint32_t **owner)
{
	*owner = NULL;
	if (!cat->logical)
		return 0;
	if (!(*owner = calloc(cat->n_entries ? cat->n_entries : 1, sizeof **owner)))
		return -1;
	for (size_t l = 0; l < cat->n_logical; l++)
		for (size_t c = 0; c < cat->logical[l].n_chunks; c++)
			(*owner)[cat->logical[l].chunks[c].entry] = (uint32_t)l;
	return 0;
}

static int same_states(const struct ck_opt_split *os, uint32_t a, uint32_t b)
{
	if (os->run_len[a] != os->run_len[b])
		return 0;
	const struct ostate *x = &os->s[os->run_start[a]], *y = &os->s[os->run_start[b]];
	for (uint32_t i = 0; i < os->run_len[a]; i++)
		if (strcmp(x[i].state, y[i].state) || x[i].scalar != y[i].scalar)
			return 0;
	return 1;
}

static void list_states(const struct ck_opt_split *os, uint32_t s, char *b, size_t n)
{
	size_t o = 0;
	b[0] = '\0';
	for (uint32_t i = 0; i < os->run_len[s] && o < n; i++)
		o += (size_t)snprintf(b + o, n - o, "%s%s", i ? ", " : "",
				      os->s[os->run_start[s] + i].state);
	if (!os->run_len[s])
		snprintf(b, n, "no state");
}

struct addkeys {
	struct skey *k;
	size_t n, cap;
};

static int add_key(struct addkeys *a, struct skey *k, struct ck_err *err)
{
	if (a->n == a->cap) {
		size_t nc = a->cap ? a->cap * 2 : 64;
		struct skey *nk = realloc(a->k, nc * sizeof *nk);
		if (!nk)
			return nomem(err);
		a->k = nk;
		a->cap = nc;
	}
	a->k[a->n++] = *k;
	return 0;
}

/* Target j's source keys (data pieces, not FP8 scales), first use first. */
static int target_sources(const struct skey *t, const uint32_t *owner, uint32_t stamp,
			  uint32_t *mark, uint32_t **list, size_t *nl, size_t *cap)
{
	*nl = 0;
	size_t n = t->leaf ? 1 : t->v.n;
	for (size_t i = 0; i < n; i++) {
		uint32_t s = t->leaf ? t->leaf - 1 : t->v.p[i].src;
		if (!t->leaf && owner)
			s = owner[s];
		if (mark[s] == stamp)
			continue;
		mark[s] = stamp;
		if (*nl == *cap) {
			size_t nc = *cap ? *cap * 2 : 16;
			uint32_t *nn = realloc(*list, nc * sizeof *nn);
			if (!nn)
				return -1;
			*list = nn;
			*cap = nc;
		}
		(*list)[(*nl)++] = s;
	}
	return 0;
}

/* Per-parameter scalars follow their target's name: the first source's. */
static int plan_scalars(struct ck_opt_split *os, const struct ck_catalog *cat,
			const uint32_t *owner, struct skey *keys, size_t np, struct addkeys *add,
			struct ck_err *err)
{
	uint32_t *mark = calloc(os->n_src ? os->n_src : 1, sizeof *mark), *list = NULL;
	size_t nl = 0, cap = 0;
	int rc = mark ? 0 : nomem(err);
	for (size_t j = 0; j < np && rc == 0; j++) {
		if (target_sources(&keys[j], owner, (uint32_t)j + 1, mark, &list, &nl, &cap) < 0) {
			rc = nomem(err);
			break;
		}
		for (size_t i = 1; i < nl && rc == 0; i++) {
			if (same_states(os, list[0], list[i]))
				continue;
			char a[300], b[300];
			const char *na = source_name(cat, list[0]), *nb = source_name(cat, list[i]);
			list_states(os, list[0], a, sizeof a);
			list_states(os, list[i], b, sizeof b);
			rc = ck_fail(err, CK_E_MAPPING,
				     "%s: optimizer state: target \"%s\" is built from \"%s\" (%s) and "
				     "\"%s\" (%s); the sources of one target must carry the same state",
				     cat->source, keys[j].name, na, a, nb, b);
		}
		for (uint32_t i = 0; nl && rc == 0 && i < os->run_len[list[0]]; i++) {
			const struct ostate *o = &os->s[os->run_start[list[0]] + i];
			if (!o->scalar)
				continue;
			struct skey k = {.leaf = o->src + 1, .scalar = 1};
			k.param = strdup(keys[j].name);
			k.state = strdup(o->state);
			k.name = k.param && k.state ? ck_opt_name(os->tmpl, k.param, k.state) : NULL;
			if (!k.name || add_key(add, &k, err) < 0) {
				ck_plan_keys_free(&k, 1);
				rc = nomem(err);
			}
		}
	}
	free(mark);
	free(list);
	return rc;
}

/* Every per-element state name: the parameters' rules over {param -> state}. */
static int plan_elements(struct ck_opt_split *os, const struct ck_catalog *cat,
			 struct ck_mapping *const *maps, int n_maps, const struct ck_strmap *params,
			 struct addkeys *add, struct ck_err *err)
{
	const char *kinds[64];
	size_t nkinds = 0;
	for (size_t i = 0; i < os->n; i++) {
		size_t k = 0;
		while (k < nkinds && strcmp(kinds[k], os->s[i].state))
			k++;
		if (os->s[i].scalar || k < nkinds)
			continue;
		if (nkinds == sizeof kinds / sizeof *kinds)
			return ck_fail(err, CK_E_MAPPING,
				       "%s: more than %zu names of optimizer state (\"%s\")", cat->source,
				       nkinds, os->s[i].state);
		kinds[nkinds++] = os->s[i].state;
	}
	for (size_t ki = 0; ki < nkinds; ki++) {
		const char *kind = kinds[ki];
		struct skey *ks = NULL;
		size_t nk = 0;
		for (size_t j = 0; j < os->n; j++)
			nk += !os->s[j].scalar && !strcmp(os->s[j].state, kind);
		if (!(ks = calloc(nk ? nk : 1, sizeof *ks)))
			return nomem(err);
		nk = 0;
		for (size_t j = 0; j < os->n; j++) {
			if (os->s[j].scalar || strcmp(os->s[j].state, kind))
				continue;
			ks[nk].leaf = os->s[j].src + 1;
			if (!(ks[nk++].name = strdup(os->s[j].param))) {
				ck_plan_keys_free(ks, nk);
				return nomem(err);
			}
		}
		struct ck_warnings w = {NULL, 0}; /* the parameters' run said them */
		int rc = 0;
		for (int s = 0; s < n_maps && rc == 0; s++)
			rc = ck_plan_run_stage(maps[s], s == 0, 1, cat, &ks, &nk, &w, err);
		for (size_t j = 0; j < w.n; j++)
			free(w.w[j]);
		free(w.w);
		if (rc < 0) { /* a rule's message, said of the state it planned */
			char m[sizeof err->msg];
			memcpy(m, err->msg, sizeof m);
			ck_fail(err, err->kind, "optimizer state \"%s\": %s", kind, m);
		}
		for (size_t j = 0; j < nk && rc == 0; j++) {
			uint32_t t;
			if (ck_strmap_get(params, ks[j].name, &t) < 0) {
				rc = ck_fail(err, CK_E_MAPPING,
					     "optimizer state \"%s\": target \"%s\" is not a parameter "
					     "target",
					     kind, ks[j].name);
				break;
			}
			ks[j].param = ks[j].name;
			ks[j].state = strdup(kind);
			ks[j].name = ks[j].state ? ck_opt_name(os->tmpl, ks[j].param, kind) : NULL;
			if (!ks[j].name || add_key(add, &ks[j], err) < 0) {
				rc = nomem(err);
				break;
			}
			memset(&ks[j], 0, sizeof ks[j]); /* moved */
		}
		if (rc < 0) {
			ck_plan_keys_free(ks, nk);
			return -1;
		}
		free(ks);
	}
	return 0;
}

int ck_opt_plan(struct ck_opt_split *os, const struct ck_catalog *cat,
		struct ck_mapping *const *maps, int n_maps, struct skey **keys, size_t *n,
		char **tmpl, struct ck_err *err)
{
	*tmpl = NULL;
	size_t np = *n;
	uint32_t *owner = NULL;
	struct addkeys add = {NULL, 0, 0};
	struct ck_strmap params = {0};
	int rc = -1;
	if (chunk_owners(cat, &owner) < 0)
		return nomem(err);
	if (ck_strmap_init(&params, np) < 0) {
		nomem(err);
		goto out;
	}
	for (size_t j = 0; j < np; j++)
		if (ck_strmap_put(&params, (*keys)[j].name, (uint32_t)j, NULL) < 0) {
			nomem(err);
			goto out;
		}
	if (plan_scalars(os, cat, owner, *keys, np, &add, err) < 0 ||
	    plan_elements(os, cat, maps, n_maps, &params, &add, err) < 0)
		goto out;
	struct skey *all = realloc(*keys, (np + add.n ? np + add.n : 1) * sizeof *all);
	if (!all) {
		nomem(err);
		goto out;
	}
	*keys = all;
	for (size_t i = 0; i < add.n; i++) {
		uint32_t prev;
		int r = ck_strmap_put(&params, add.k[i].name, (uint32_t)(np + i), &prev);
		all[(*n)++] = add.k[i];
		add.k[i] = (struct skey){0};
		if (r < 0) {
			nomem(err);
			goto out;
		}
		if (r == 1) {
			ck_fail(err, CK_E_MAPPING,
				"optimizer state is named \"%s\" (\"%s\" of \"%s\"), which is already "
				"the name of another target: give the mapping an \"optimizer_state\" "
				"template",
				all[np + i].name, all[np + i].state, all[np + i].param);
			goto out;
		}
	}
	if (!(*tmpl = strdup(os->tmpl))) {
		nomem(err);
		goto out;
	}
	rc = 0;
out:
	ck_plan_keys_free(add.k, add.n);
	ck_strmap_free(&params);
	free(owner);
	return rc;
}

/* ---- hyper-parameters that are not tensors ---- */

void ck_opt_hparams_free(struct ck_hparam *h, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(h[i].to);
	free(h);
}

/* "param_groups.{fqn}.{name}" (or under "optimizer."): the fqn's span */
static int hparam_key(const char *key, const char **fqn, size_t *len, const char **name)
{
	const char *s = has_prefix(key, "optimizer.") ? key + 10 : key;
	if (!has_prefix(s, "param_groups."))
		return 0;
	s += 13;
	const char *dot = strrchr(s, '.');
	if (!dot || dot == s || !dot[1])
		return 0;
	*fqn = s;
	*len = (size_t)(dot - s);
	*name = dot + 1;
	return 1;
}

int ck_opt_hparams(const struct ck_plan *p, struct ck_hparam **out, size_t *n,
		   struct ck_err *err)
{
	*out = NULL;
	*n = 0;
	const struct ck_catalog *cat = p->cat;
	const struct ck_leftout *lo = &cat->left_out;
	size_t cap = 0;
	uint32_t *next = malloc((p->n ? p->n : 1) * sizeof *next), *owner = NULL;
	struct ck_strmap first = {0}; /* first source's name -> a target (chained by next) */
	int rc = -1;
	if (!next || ck_strmap_init(&first, p->n) < 0)
		goto oom;
	if (chunk_owners(cat, &owner) < 0)
		goto oom;
	for (size_t i = 0; i < p->n; i++) {
		const struct ck_target *t = &p->t[i];
		next[i] = UINT32_MAX;
		if (t->param || !t->v.n)
			continue;
		const char *src = source_name(cat, owner ? owner[t->v.p[0].src] : t->v.p[0].src);
		uint32_t head;
		int r = ck_strmap_put(&first, src, (uint32_t)i, &head);
		if (r < 0)
			goto oom;
		if (r == 1) { /* tied: one source, several targets */
			next[i] = next[head];
			next[head] = (uint32_t)i;
		}
	}
	for (size_t k = 0; k < lo->n; k++) {
		const char *fqn, *name;
		size_t len;
		if (!hparam_key(lo->e[k].key, &fqn, &len, &name))
			continue;
		char *f = strndup(fqn, len);
		uint32_t t;
		if (!f)
			goto oom;
		int found = ck_strmap_get(&first, f, &t) == 0;
		free(f);
		for (; found && t != UINT32_MAX; t = next[t]) {
			if (*n == cap) {
				cap = cap ? cap * 2 : 32;
				struct ck_hparam *nh = realloc(*out, cap * sizeof *nh);
				if (!nh)
					goto oom;
				*out = nh;
			}
			struct ck_hparam *h = &(*out)[*n];
			h->from = lo->e[k].key;
			h->what = lo->e[k].what;
			if (asprintf(&h->to, "%sparam_groups.%s.%s",
				     has_prefix(lo->e[k].key, "optimizer.") ? "optimizer." : "",
				     p->t[t].name, name) < 0)
				goto oom;
			(*n)++;
		}
	}
	rc = 0;
	goto out;
oom:
	rc = nomem(err);
	ck_opt_hparams_free(*out, *n);
	*out = NULL;
	*n = 0;
out:
	free(next);
	free(owner);
	ck_strmap_free(&first);
	return rc;
}
