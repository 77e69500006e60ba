#include "mapping.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../util/json_strict.h"

#define MAX_MAPPING_BYTES (64u << 20)

static void free_named_expr(struct ck_named_expr *e, int n)
{
	if (!e)
		return;
	for (int i = 0; i < n; i++) {
		free(e[i].name);
		ck_expr_free(e[i].expr);
	}
	free(e);
}

static void free_named_pat(struct ck_named_pat *p, int n)
{
	if (!p)
		return;
	for (int i = 0; i < n; i++) {
		free(p[i].name);
		ck_pattern_free(&p[i].pat);
	}
	free(p);
}

static void free_rule(struct ck_rule *r)
{
	free(r->desc);
	ck_expr_free(r->cond);
	free_named_pat(r->in, r->n_in);
	free_named_pat(r->out, r->n_out);
	free_named_expr(r->expr, r->n_out);
	free_named_expr(r->let, r->n_let);
	for (int i = 0; i < r->n_reduce; i++)
		free(r->reduce[i]);
	free(r->for_name);
	ck_expr_free(r->for_count);
	for (int i = 0; i < r->n_each; i++) {
		free(r->each[i].name);
		free(r->each[i].text);
		ck_expr_free(r->each[i].count);
	}
	free(r->each);
	free(r->checked);
	for (int i = 0; i < r->n_shape; i++) {
		for (int d = 0; d < r->shape[i].ndim; d++)
			ck_expr_free(r->shape[i].dim[d]);
		free(r->shape[i].text);
	}
	free(r->shape);
}

static void free_partition(struct ck_partition *p)
{
	ck_pattern_free(&p->match);
	for (int d = 0; d < p->ndim; d++)
		free(p->spec[d]);
	ck_expr_free(p->require);
	ck_expr_free(p->pad_to);
	free(p->message);
}

static void free_select(struct ck_select *s)
{
	ck_pattern_free(&s->match);
	free(s->axis);
	free(s->split);
	ck_expr_free(s->count);
	free(s->bounds);
}

void ck_mapping_free(struct ck_mapping *m)
{
	if (!m)
		return;
	for (int i = 0; i < m->n_sels; i++)
		free_select(&m->sels[i]);
	free(m->sels);
	for (int i = 0; i < m->n_parts; i++)
		free_partition(&m->parts[i]);
	free(m->parts);
	for (int i = 0; i < m->n_rules; i++)
		free_rule(&m->rules[i]);
	free(m->rules);
	free_named_expr(m->params, m->n_params);
	ck_strmap_free(&m->param_index);
	for (int i = 0; i < m->n_renames; i++) {
		ck_pattern_free(&m->renames[i].match);
		ck_pattern_free(&m->renames[i].to);
		ck_expr_free(m->renames[i].cond);
	}
	free(m->renames);
	for (int i = 0; i < m->n_strip_prefixes; i++)
		free(m->strip_prefixes[i]);
	for (int i = 0; i < m->n_strip_segments; i++)
		free(m->strip_segments[i]);
	free(m->strip_prefixes);
	free(m->strip_segments);
	free(m->add_prefix);
	free(m->opt_template);
	for (int i = 0; i < m->n_architectures; i++)
		free(m->architectures[i]);
	free(m->architectures);
	free(m->description);
	free(m->path);
	free(m);
}

static int is_ident(const char *s)
{
	if (!(isalpha((unsigned char)*s) || *s == '_'))
		return 0;
	for (; *s; s++)
		if (!(isalnum((unsigned char)*s) || *s == '_'))
			return 0;
	return 1;
}

struct pctx {
	const char *what;
	struct ck_err *err;
};

static int fail_at(struct pctx *c, const struct ck_rule *r, const char *fmt, const char *a,
		   const char *b)
{
	char msg[600];
	snprintf(msg, sizeof msg, fmt, a ? a : "", b ? b : "");
	if (r)
		return ck_fail(c->err, CK_E_MAPPING, "%s: rule %d: %s", c->what, r->index, msg);
	return ck_fail(c->err, CK_E_MAPPING, "%s: %s", c->what, msg);
}

/* The text of an expression given as a JSON string, integer or boolean
 * (buf holds a number's), or NULL. */
static const char *expr_text(const cJSON *j, char buf[static 32])
{
	if (cJSON_IsString(j))
		return j->valuestring;
	if (cJSON_IsBool(j))
		return cJSON_IsTrue(j) ? "1" : "0";
	if (cJSON_IsNumber(j) && j->valuedouble == (double)(long long)j->valuedouble &&
	    j->valuedouble >= 0 && j->valuedouble < 9e15) {
		snprintf(buf, 32, "%lld", (long long)j->valuedouble);
		return buf;
	}
	return NULL;
}

/* An expression given as a JSON string, integer or boolean. */
static int parse_expr_json(struct pctx *c, const struct ck_rule *r, const cJSON *j,
			   const char *field, struct ck_expr **out)
{
	char buf[32];
	const char *text = expr_text(j, buf);
	if (!text)
		return fail_at(c, r, "\"%s\" must be an expression string%s", field, NULL);
	*out = ck_expr_parse(text, c->err);
	if (!*out) {
		char m[sizeof c->err->msg];
		memcpy(m, c->err->msg, sizeof m);
		return fail_at(c, r, "\"%s\": %s", field, m);
	}
	return 0;
}

static int parse_pat(struct pctx *c, struct ck_rule *r, const char *name, const cJSON *j,
		     struct ck_named_pat *out)
{
	if (!cJSON_IsString(j))
		return fail_at(c, r, "pattern \"%s\" must be a string", name, NULL);
	out->name = strdup(name);
	if (!out->name)
		return ck_fail_sys(c->err, ENOMEM, "mapping");
	if (ck_pattern_compile(j->valuestring, &out->pat, c->err) < 0) {
		char m[sizeof c->err->msg];
		memcpy(m, c->err->msg, sizeof m);
		return fail_at(c, r, "%s%s", m, NULL);
	}
	return 0;
}

/* A pattern of a partition, select or rename entry: an error names it. */
static int compile_at(struct pctx *c, const char *where, const char *text, struct ck_pattern *p)
{
	if (ck_pattern_compile(text, p, c->err) == 0)
		return 0;
	char m[sizeof c->err->msg];
	memcpy(m, c->err->msg, sizeof m);
	return fail_at(c, NULL, "%s: %s", where, m);
}

/* "from"/"to": a string (one name, `dflt`) or an object of named patterns. */
static int parse_pats(struct pctx *c, struct ck_rule *r, const cJSON *j, const char *field,
		      const char *dflt, struct ck_named_pat **out, int *n)
{
	int cnt = cJSON_IsString(j) ? 1 : cJSON_IsObject(j) ? cJSON_GetArraySize(j) : -1;
	if (cnt < 1 || cnt > 64)
		return fail_at(c, r, "\"%s\" must be a pattern string or an object of 1..64 named "
				     "patterns",
			       field, NULL);
	*out = calloc((size_t)cnt, sizeof **out);
	if (!*out)
		return ck_fail_sys(c->err, ENOMEM, "mapping");
	if (cJSON_IsString(j)) {
		*n = 1;
		return parse_pat(c, r, dflt, j, &(*out)[0]);
	}
	for (const cJSON *e = j->child; e; e = e->next) {
		if (!is_ident(e->string))
			return fail_at(c, r, "\"%s\" name \"%s\" is not an identifier", field,
				       e->string);
		for (int k = 0; k < *n; k++)
			if (!strcmp((*out)[k].name, e->string))
				return fail_at(c, r, "\"%s\" names \"%s\" twice", field, e->string);
		if (parse_pat(c, r, e->string, e, &(*out)[(*n)++]) < 0)
			return -1;
	}
	return 0;
}

static int set_desc(struct ck_rule *r, const cJSON *from, const cJSON *to)
{
	char buf[512];
	const char *f = cJSON_IsString(from) ? from->valuestring
			: (from && from->child && cJSON_IsString(from->child)) ? from->child->valuestring
										: "?";
	const char *t = cJSON_IsString(to) ? to->valuestring
			: (to && to->child && cJSON_IsString(to->child)) ? to->child->valuestring
									 : "";
	if (to)
		snprintf(buf, sizeof buf, "\"%s\" -> \"%s\"", f, t);
	else
		snprintf(buf, sizeof buf, "drop \"%s\"", f);
	r->desc = strdup(buf);
	return r->desc ? 0 : -1;
}

/* "if" is decided before any input is read, and for each key when it names
 * a capture: it may name parameters, config values and captures of the
 * input patterns, never an input, a let or the for variable. */
struct cond_names {
	const struct ck_rule *r;
	const char *bad;
	int per_key;
};

static void cond_name(void *vctx, const char *name)
{
	struct cond_names *c = vctx;
	const struct ck_rule *r = c->r;
	for (int i = 0; i < r->n_in; i++) {
		if (!strcmp(r->in[i].name, name) && !c->bad)
			c->bad = r->in[i].name;
		if (ck_pattern_has_capture(&r->in[i].pat, name))
			c->per_key = 1;
	}
	for (int k = 0; k < r->n_let && !c->bad; k++)
		if (!strcmp(r->let[k].name, name))
			c->bad = r->let[k].name;
	if (r->for_name && !strcmp(r->for_name, name) && !c->bad)
		c->bad = r->for_name;
}

static int check_cond(struct pctx *c, struct ck_rule *r)
{
	if (!r->cond)
		return 0;
	struct cond_names cn = {r, NULL, 0};
	ck_expr_names(r->cond, cond_name, &cn);
	if (cn.bad)
		return fail_at(c, r, "\"if\" names \"%s\": a condition is decided before any "
				     "input is read, so it may name parameters, config values and "
				     "captures only%s",
			       cn.bad, NULL);
	r->cond_per_key = cn.per_key;
	return 0;
}

/* A rule's fields, each given at most once. */
struct rule_fields {
	const cJSON *from, *to, *expr, *let, *reduce, *forj, *cond, *drop, *each, *shape;
};

static int rule_fields(struct pctx *c, const cJSON *j, struct ck_rule *r, struct rule_fields *f)
{
	for (const cJSON *e = j->child; e; e = e->next) {
		const cJSON **slot = !strcmp(e->string, "from")	    ? &f->from
				     : !strcmp(e->string, "to")	    ? &f->to
				     : !strcmp(e->string, "expr")   ? &f->expr
				     : !strcmp(e->string, "let")    ? &f->let
				     : !strcmp(e->string, "reduce") ? &f->reduce
				     : !strcmp(e->string, "for")    ? &f->forj
				     : !strcmp(e->string, "if")	    ? &f->cond
				     : !strcmp(e->string, "drop")   ? &f->drop
				     : !strcmp(e->string, "each")   ? &f->each
				     : !strcmp(e->string, "shape")  ? &f->shape
								    : NULL;
		if (!strcmp(e->string, "share") || !strcmp(e->string, "optional")) {
			if (!cJSON_IsBool(e))
				return fail_at(c, r, "\"%s\" must be true or false", e->string, NULL);
			*(e->string[0] == 's' ? &r->share : &r->optional) = cJSON_IsTrue(e);
			continue;
		}
		if (!strcmp(e->string, "comment"))
			continue;
		if (!strcmp(e->string, "checked")) {
			if (!cJSON_IsString(e) || !e->valuestring[0] || r->checked)
				return fail_at(c, r, "\"checked\" must be a non-empty string, given once "
						     "(how the rule's layout is verified)%s%s",
					       NULL, NULL);
			if (!(r->checked = strdup(e->valuestring)))
				return ck_fail_sys(c->err, ENOMEM, "mapping");
			continue;
		}
		if (!slot)
			return fail_at(c, r, "unknown field \"%s\"", e->string, NULL);
		if (*slot)
			return fail_at(c, r, "field \"%s\" given twice", e->string, NULL);
		*slot = e;
	}
	return 0;
}

/* "expr": one expression for a single output (none: the input itself), or
 * an object with one per named output. */
static int parse_outputs(struct pctx *c, struct ck_rule *r, const cJSON *to, const cJSON *expr)
{
	r->expr = calloc((size_t)r->n_out, sizeof *r->expr);
	if (!r->expr)
		return ck_fail_sys(c->err, ENOMEM, "mapping");
	for (int k = 0; k < r->n_out; k++)
		if (!(r->expr[k].name = strdup(r->out[k].name)))
			return ck_fail_sys(c->err, ENOMEM, "mapping");
	if (cJSON_IsString(to)) {
		if (expr && parse_expr_json(c, r, expr, "expr", &r->expr[0].expr) < 0)
			return -1;
		if (!expr && r->n_in != 1)
			return fail_at(c, r, "several inputs need an \"expr\"%s%s", NULL, NULL);
		return 0;
	}
	if (!cJSON_IsObject(expr))
		return fail_at(c, r, "named outputs need \"expr\" as an object with an "
				     "expression per output%s%s",
			       NULL, NULL);
	for (const cJSON *e = expr->child; e; e = e->next) {
		int k = 0;
		while (k < r->n_out && strcmp(r->out[k].name, e->string))
			k++;
		if (k == r->n_out)
			return fail_at(c, r, "\"expr\" names \"%s\", which is not an output",
				       e->string, NULL);
		if (r->expr[k].expr)
			return fail_at(c, r, "\"expr\" names \"%s\" twice", e->string, NULL);
		if (parse_expr_json(c, r, e, e->string, &r->expr[k].expr) < 0)
			return -1;
	}
	for (int k = 0; k < r->n_out; k++)
		if (!r->expr[k].expr)
			return fail_at(c, r, "output \"%s\" has no expression", r->out[k].name, NULL);
	return 0;
}

static int parse_let(struct pctx *c, struct ck_rule *r, const cJSON *let)
{
	if (!cJSON_IsObject(let))
		return fail_at(c, r, "\"let\" must be an object of named expressions%s%s", NULL,
			       NULL);
	int n = cJSON_GetArraySize(let);
	if (!(r->let = calloc((size_t)(n ? n : 1), sizeof *r->let)))
		return ck_fail_sys(c->err, ENOMEM, "mapping");
	for (const cJSON *e = let->child; e; e = e->next) {
		if (!is_ident(e->string))
			return fail_at(c, r, "\"let\" name \"%s\" is not an identifier", e->string,
				       NULL);
		struct ck_named_expr *l = &r->let[r->n_let++];
		if (!(l->name = strdup(e->string)))
			return ck_fail_sys(c->err, ENOMEM, "mapping");
		if (parse_expr_json(c, r, e, e->string, &l->expr) < 0)
			return -1;
	}
	return 0;
}

static int parse_reduce(struct pctx *c, struct ck_rule *r, const cJSON *reduce)
{
	const cJSON *items = cJSON_IsArray(reduce) ? reduce->child : reduce;
	for (const cJSON *e = items; e; e = cJSON_IsArray(reduce) ? e->next : NULL) {
		if (!cJSON_IsString(e) || r->n_reduce == CK_MAX_CAPTURES)
			return fail_at(c, r, "\"reduce\" must name captures%s%s", NULL, NULL);
		int found = 0;
		for (int k = 0; k < r->n_in; k++)
			found |= ck_pattern_has_capture(&r->in[k].pat, e->valuestring);
		if (!found)
			return fail_at(c, r, "\"reduce\" names {%s}, which no input pattern has",
				       e->valuestring, NULL);
		if (!(r->reduce[r->n_reduce++] = strdup(e->valuestring)))
			return ck_fail_sys(c->err, ENOMEM, "mapping");
	}
	for (int k = 0; k < r->n_reduce; k++)
		for (int j = 0; j < k; j++)
			if (!strcmp(r->reduce[j], r->reduce[k]))
				return fail_at(c, r, "\"reduce\" names {%s} twice%s", r->reduce[k], NULL);
	return 0;
}

static int parse_for(struct pctx *c, struct ck_rule *r, const cJSON *forj)
{
	if (!cJSON_IsObject(forj) || cJSON_GetArraySize(forj) != 1)
		return fail_at(c, r, "\"for\" must be {\"CAPTURE\": count}%s%s", NULL, NULL);
	if (!(r->for_name = strdup(forj->child->string)))
		return ck_fail_sys(c->err, ENOMEM, "mapping");
	if (parse_expr_json(c, r, forj->child, "for", &r->for_count) < 0)
		return -1;
	/* "for" may not rebind a capture (a silent rebinding maps keys to
	 * wrong targets) */
	for (int i = 0; i < r->n_in; i++)
		if (ck_pattern_has_capture(&r->in[i].pat, r->for_name))
			return fail_at(c, r, "\"for\" binds {%s}, which input pattern \"%s\" "
					     "already captures",
				       r->for_name, r->in[i].name);
	return 0;
}

/* A name is bound once: "let" may not rebind a capture, an input, "for"'s
 * name or itself; every output capture comes from an input pattern, "for"
 * or a "let" (an integer, checked when it is evaluated: `"let": {"M": "L -
 * num_hidden_layers"}` renumbers), never from a reduced capture. */
static int check_bindings(struct pctx *c, struct ck_rule *r)
{
	for (int k = 0; k < r->n_let; k++) {
		const char *n = r->let[k].name;
		for (int j = 0; j < k; j++)
			if (!strcmp(r->let[j].name, n))
				return fail_at(c, r, "\"let\" binds \"%s\" twice%s", n, NULL);
		for (int i = 0; i < r->n_in; i++)
			if (!strcmp(r->in[i].name, n) || ck_pattern_has_capture(&r->in[i].pat, n))
				return fail_at(c, r, "\"let\" binds \"%s\", which is already an input "
						     "or a capture",
					       n, NULL);
		if (r->for_name && !strcmp(r->for_name, n))
			return fail_at(c, r, "\"let\" binds \"%s\", which \"for\" binds%s", n, NULL);
	}
	for (int k = 0; k < r->n_out; k++)
		for (int t = 0; t < r->out[k].pat.n; t++) {
			const struct ck_ptok *tok = &r->out[k].pat.tok[t];
			if (tok->lit || (r->for_name && !strcmp(tok->name, r->for_name)))
				continue;
			int found = 0;
			for (int i = 0; i < r->n_let; i++)
				found |= !strcmp(r->let[i].name, tok->name);
			if (found)
				continue;
			for (int i = 0; i < r->n_in; i++)
				found |= ck_pattern_has_capture(&r->in[i].pat, tok->name);
			for (int i = 0; i < r->n_reduce; i++)
				found &= strcmp(r->reduce[i], tok->name) != 0;
			if (!found)
				return fail_at(c, r, "output pattern uses {%s}, which no input or let binds",
					       tok->name, NULL);
		}
	return 0;
}

/* Names an "each" count or a per-key "if" beside "each" may not use. */
struct each_names {
	const struct ck_rule *r;
	int of_count; /* 1: a count (config values and params only); 0: the "if" */
	const char *bad;
};

static int counted(const struct ck_rule *r, const char *name)
{
	for (int k = 0; k < r->n_each; k++)
		if (!strcmp(r->each[k].name, name))
			return 1;
	return 0;
}

static void each_name(void *vctx, const char *name)
{
	struct each_names *c = vctx;
	const struct ck_rule *r = c->r;
	for (int i = 0; i < r->n_in && !c->bad; i++)
		if ((c->of_count && !strcmp(r->in[i].name, name)) ||
		    (ck_pattern_has_capture(&r->in[i].pat, name) && (c->of_count || !counted(r, name))))
			c->bad = name;
	for (int k = 0; k < r->n_let && c->of_count && !c->bad; k++)
		if (!strcmp(r->let[k].name, name))
			c->bad = name;
	if (c->of_count && !c->bad && r->for_name && !strcmp(r->for_name, name))
		c->bad = name;
}

static int parse_each_entry(struct pctx *c, struct ck_rule *r, const cJSON *e)
{
	struct ck_each *x = &r->each[r->n_each];
	char buf[32];
	const char *text = expr_text(e, buf);
	if (!ck_pattern_has_capture(&r->in[0].pat, e->string))
		return fail_at(c, r, "\"each\" names {%s}, which the first input pattern does not "
				     "capture%s",
			       e->string, NULL);
	if (counted(r, e->string))
		return fail_at(c, r, "\"each\" names {%s} twice%s", e->string, NULL);
	if (!text)
		return fail_at(c, r, "\"each\": the count of {%s} must be an expression string%s",
			       e->string, NULL);
	if (!(x->name = strdup(e->string)) || !(x->text = strdup(text))) {
		free(x->name);
		return ck_fail_sys(c->err, ENOMEM, "mapping");
	}
	r->n_each++;
	if (parse_expr_json(c, r, e, "each", &x->count) < 0)
		return -1;
	struct each_names en = {r, 1, NULL};
	ck_expr_names(x->count, each_name, &en);
	if (en.bad)
		return fail_at(c, r, "\"each\": the count of {%s} names \"%s\"; a count is decided "
				     "once per rule, from config values and parameters",
			       x->name, en.bad);
	return 0;
}

static int parse_each(struct pctx *c, struct ck_rule *r, const cJSON *each)
{
	int n = cJSON_IsObject(each) ? cJSON_GetArraySize(each) : 0;
	if (n < 1) /* at most CK_MAX_CAPTURES: each entry a distinct capture */
		return fail_at(c, r, "\"each\" must be {\"CAPTURE\": count, ...}%s%s", NULL, NULL);
	if (!(r->each = calloc((size_t)n, sizeof *r->each)))
		return ck_fail_sys(c->err, ENOMEM, "mapping");
	for (const cJSON *e = each->child; e; e = e->next)
		if (parse_each_entry(c, r, e) < 0)
			return -1;
	struct each_names en = {r, 0, NULL};
	if (r->cond_per_key)
		ck_expr_names(r->cond, each_name, &en);
	if (en.bad)
		return fail_at(c, r, "\"if\" names {%s}, which \"each\" does not count: the "
				     "combinations \"each\" expects are decided from its captures%s",
			       en.bad, NULL);
	return 0;
}

/* Names a "shape" dim may not use: the inputs (their values are not
 * read to decide their own shape), lets and "for" (bound after it). */
struct shape_names {
	const struct ck_rule *r;
	const char *bad;
};

static void shape_name(void *vctx, const char *name)
{
	struct shape_names *c = vctx;
	const struct ck_rule *r = c->r;
	for (int i = 0; i < r->n_in && !c->bad; i++)
		if (!strcmp(r->in[i].name, name))
			c->bad = name;
	for (int k = 0; k < r->n_let && !c->bad; k++)
		if (!strcmp(r->let[k].name, name))
			c->bad = name;
	if (!c->bad && r->for_name && !strcmp(r->for_name, name))
		c->bad = name;
}

/* One "shape" entry: "INPUT": [dim, ...], each an expression (params,
 * config values, captures) or null for any size. */
static int parse_shape_entry(struct pctx *c, struct ck_rule *r, const cJSON *e)
{
	struct ck_shape_decl *s = &r->shape[r->n_shape];
	s->input = -1;
	for (int i = 0; i < r->n_in; i++)
		if (!strcmp(r->in[i].name, e->string))
			s->input = i;
	for (int k = 0; k < r->n_shape && s->input >= 0; k++)
		if (r->shape[k].input == s->input)
			return fail_at(c, r, "\"shape\" names input \"%s\" twice%s", e->string,
				       NULL);
	if (s->input < 0)
		return fail_at(c, r, "\"shape\" names \"%s\", which is not an input of the rule%s",
			       e->string, NULL);
	int n = cJSON_IsArray(e) ? cJSON_GetArraySize(e) : -1;
	if (n < 1 || n > CK_MAX_DIMS)
		return fail_at(c, r, "\"shape\" of \"%s\" must be a list of 1 to 8 dims%s",
			       e->string, NULL);
	r->n_shape++;
	char text[512] = "[";
	for (const cJSON *d = e->child; d; d = d->next) {
		char buf[32];
		const char *t = cJSON_IsNull(d) ? "*" : expr_text(d, buf);
		if (!t)
			return fail_at(c, r,
				       "\"shape\" of \"%s\": a dim is an expression or null%s",
				       e->string, NULL);
		snprintf(text + strlen(text), sizeof text - strlen(text), "%s%s",
			 s->ndim ? ", " : "", t);
		int k = s->ndim++;
		if (!cJSON_IsNull(d) && parse_expr_json(c, r, d, "shape", &s->dim[k]) < 0)
			return -1;
		struct shape_names sn = {r, NULL};
		if (s->dim[k])
			ck_expr_names(s->dim[k], shape_name, &sn);
		if (sn.bad)
			return fail_at(c, r,
				       "\"shape\" of \"%s\" names \"%s\": a dim is decided from "
				       "parameters, config values and captures",
				       e->string, sn.bad);
	}
	snprintf(text + strlen(text), sizeof text - strlen(text), "]");
	return (s->text = strdup(text)) ? 0 : ck_fail_sys(c->err, ENOMEM, "mapping");
}

static int parse_shape(struct pctx *c, struct ck_rule *r, const cJSON *shape)
{
	int n = cJSON_IsObject(shape) ? cJSON_GetArraySize(shape) : 0;
	if (n < 1)
		return fail_at(c, r, "\"shape\" must be {\"INPUT\": [dim, ...], ...}%s%s", NULL,
			       NULL);
	if (!(r->shape = calloc((size_t)n, sizeof *r->shape)))
		return ck_fail_sys(c->err, ENOMEM, "mapping");
	for (const cJSON *e = shape->child; e; e = e->next)
		if (parse_shape_entry(c, r, e) < 0)
			return -1;
	return 0;
}

struct use_count {
	const char *name;
	int n;
};

static void count_use(void *ctx, const char *name)
{
	struct use_count *u = ctx;
	u->n += !strcmp(u->name, name);
}

/* Which inputs are used once (ck_named_pat.once): a copy of each of 100k
 * stacked experts' layouts, made for the expression and then freed, was 5%
 * of planning an MoE. An output without an expression is input 0 itself. */
static void mark_single_use(struct ck_rule *r)
{
	for (int i = 0; i < r->n_in; i++) {
		struct use_count u = {r->in[i].name, 0};
		for (int k = 0; k < r->n_out; k++)
			if (r->expr[k].expr)
				ck_expr_names(r->expr[k].expr, count_use, &u);
			else
				u.n += i == 0;
		for (int k = 0; k < r->n_let; k++)
			ck_expr_names(r->let[k].expr, count_use, &u);
		r->in[i].once = !r->for_name && u.n == 1;
	}
}

static int parse_rule(struct pctx *c, const cJSON *j, struct ck_rule *r)
{
	if (!cJSON_IsObject(j))
		return fail_at(c, r, "a rule must be an object%s%s", NULL, NULL);
	struct rule_fields f = {0};
	if (rule_fields(c, j, r, &f) < 0)
		return -1;
	if (set_desc(r, f.drop ? f.drop : f.from, f.drop ? NULL : f.to) < 0)
		return ck_fail_sys(c->err, ENOMEM, "mapping");
	if (f.cond && parse_expr_json(c, r, f.cond, "if", &r->cond) < 0)
		return -1;
	if (f.drop) {
		if (f.from || f.to || f.expr || f.let || f.reduce || f.forj || f.shape)
			return fail_at(
			    c, r, "a \"drop\" rule takes no from/to/expr/let/reduce/for/shape%s%s",
			    NULL, NULL);
		r->drop = 1;
		if (parse_pats(c, r, f.drop, "drop", "x", &r->in, &r->n_in) < 0 ||
		    check_cond(c, r) < 0)
			return -1;
		return f.each ? parse_each(c, r, f.each) : 0;
	}
	if (!f.from || !f.to)
		return fail_at(c, r, "a rule needs \"%s\" and \"to\" (or \"drop\")%s", "from", NULL);
	if (parse_pats(c, r, f.from, "from", "x", &r->in, &r->n_in) < 0 ||
	    parse_pats(c, r, f.to, "to", "out", &r->out, &r->n_out) < 0 ||
	    parse_outputs(c, r, f.to, f.expr) < 0 || (f.let && parse_let(c, r, f.let) < 0) ||
	    (f.reduce && parse_reduce(c, r, f.reduce) < 0) ||
	    (f.forj && parse_for(c, r, f.forj) < 0) || check_bindings(c, r) < 0 ||
	    check_cond(c, r) < 0)
		return -1;
	mark_single_use(r);
	return (f.each && parse_each(c, r, f.each) < 0) ||
		       (f.shape && parse_shape(c, r, f.shape) < 0)
		   ? -1
		   : 0;
}

static int parse_partition(struct pctx *c, const cJSON *j, struct ck_partition *p)
{
	char where[64];
	snprintf(where, sizeof where, "partition rule %d", p->index);
	const cJSON *match = NULL, *spec = NULL, *blocks = NULL, *req = NULL, *msg = NULL,
		    *pad = NULL;
	if (!cJSON_IsObject(j))
		return fail_at(c, NULL, "%s: must be an object%s", where, NULL);
	for (const cJSON *e = j->child; e; e = e->next) {
		const cJSON **slot = !strcmp(e->string, "match")     ? &match
				     : !strcmp(e->string, "spec")    ? &spec
				     : !strcmp(e->string, "blocks")  ? &blocks
				     : !strcmp(e->string, "require") ? &req
				     : !strcmp(e->string, "message") ? &msg
				     : !strcmp(e->string, "pad")     ? &pad
								     : NULL;
		if (!strcmp(e->string, "comment"))
			continue;
		if (!slot || *slot)
			return fail_at(c, NULL, "%s: unknown or repeated field \"%s\"", where, e->string);
		*slot = e;
	}
	if (!cJSON_IsString(match) || !cJSON_IsArray(spec))
		return fail_at(c, NULL, "%s: needs \"match\" (a pattern) and \"spec\" (a list)%s",
			       where, NULL);
	if (compile_at(c, where, match->valuestring, &p->match) < 0)
		return -1;
	/* the count is set only once it is known to fit: free_partition walks
	 * spec[0..ndim) */
	int ndim = cJSON_GetArraySize(spec);
	if (ndim > CK_MAX_DIMS)
		return ck_fail(c->err, CK_E_MAPPING, "%s: %s: more than %d dims", c->what, where,
			       CK_MAX_DIMS);
	p->ndim = ndim;
	int d = 0;
	for (const cJSON *e = spec->child; e; e = e->next, d++) {
		p->blocks[d] = 1;
		if (cJSON_IsNull(e))
			continue;
		if (!cJSON_IsString(e) || !e->valuestring[0])
			return fail_at(c, NULL, "%s: spec entries are a mesh axis name or null%s", where,
				       NULL);
		if (!(p->spec[d] = strdup(e->valuestring)))
			return ck_fail_sys(c->err, ENOMEM, "mapping");
	}
	if (blocks) {
		if (!cJSON_IsArray(blocks) || cJSON_GetArraySize(blocks) != p->ndim)
			return fail_at(c, NULL, "%s: \"blocks\" needs one count per dim%s", where, NULL);
		d = 0;
		for (const cJSON *e = blocks->child; e; e = e->next, d++)
			if (ck_json_int(e, 1, 1 << 20, &p->blocks[d]) < 0)
				return fail_at(c, NULL, "%s: block counts are positive integers%s", where,
					       NULL);
	}
	if (req && parse_expr_json(c, NULL, req, "require", &p->require) < 0)
		return -1;
	if (pad && !cJSON_IsBool(pad) && !cJSON_IsString(pad) && !cJSON_IsNumber(pad))
		return fail_at(c, NULL, "%s: \"pad\" must be true, false or an expression%s", where,
			       NULL);
	if (pad && !cJSON_IsBool(pad) && parse_expr_json(c, NULL, pad, "pad", &p->pad_to) < 0)
		return -1;
	p->pad = pad && (cJSON_IsTrue(pad) || p->pad_to);
	if (msg && (!cJSON_IsString(msg) || !(p->message = strdup(msg->valuestring))))
		return fail_at(c, NULL, "%s: \"message\" must be a string%s", where, NULL);
	return 0;
}

static int parse_select(struct pctx *c, const cJSON *j, struct ck_select *s)
{
	char where[64];
	snprintf(where, sizeof where, "select rule %d", s->index);
	const cJSON *match = NULL, *axis = NULL, *split = NULL, *stage = NULL, *count = NULL,
		    *bounds = NULL, *renum = NULL;
	if (!cJSON_IsObject(j))
		return fail_at(c, NULL, "%s: must be an object%s", where, NULL);
	for (const cJSON *e = j->child; e; e = e->next) {
		const cJSON **slot = !strcmp(e->string, "match")	? &match
				     : !strcmp(e->string, "axis")	? &axis
				     : !strcmp(e->string, "split")	? &split
				     : !strcmp(e->string, "stage")	? &stage
				     : !strcmp(e->string, "count")	? &count
				     : !strcmp(e->string, "boundaries") ? &bounds
				     : !strcmp(e->string, "renumber")	? &renum
									: NULL;
		if (!strcmp(e->string, "comment"))
			continue;
		if (!slot || *slot)
			return fail_at(c, NULL, "%s: unknown or repeated field \"%s\"", where, e->string);
		*slot = e;
	}
	if (!cJSON_IsString(match) || !cJSON_IsString(axis) || !axis->valuestring[0])
		return fail_at(c, NULL, "%s: needs \"match\" (a pattern) and \"axis\" (a mesh axis)%s",
			       where, NULL);
	if (!split == !stage)
		return fail_at(c, NULL, "%s: needs exactly one of \"split\" (a capture) and "
				     "\"stage\" (\"first\" or \"last\")%s",
			       where, NULL);
	if (compile_at(c, where, match->valuestring, &s->match) < 0)
		return -1;
	if (!(s->axis = strdup(axis->valuestring)))
		return ck_fail_sys(c->err, ENOMEM, "mapping");
	if (stage) {
		const char *v = cJSON_IsString(stage) ? stage->valuestring : "";
		s->stage = !strcmp(v, "first") ? 1 : !strcmp(v, "last") ? 2 : 0;
		if (!s->stage)
			return fail_at(c, NULL, "%s: \"stage\" must be \"first\" or \"last\"%s", where,
				       NULL);
		if (count || bounds || renum)
			return fail_at(c, NULL, "%s: \"count\", \"boundaries\" and \"renumber\" go "
					     "with \"split\"%s",
				       where, NULL);
		return 0;
	}
	if (!cJSON_IsString(split) || !ck_pattern_has_capture(&s->match, split->valuestring))
		return fail_at(c, NULL, "%s: \"split\" must name a capture of \"match\"%s", where,
			       NULL);
	if (!(s->split = strdup(split->valuestring)))
		return ck_fail_sys(c->err, ENOMEM, "mapping");
	if (count && parse_expr_json(c, NULL, count, "count", &s->count) < 0)
		return -1;
	if (renum && !cJSON_IsBool(renum))
		return fail_at(c, NULL, "%s: \"renumber\" must be true or false%s", where, NULL);
	s->renumber = renum && cJSON_IsTrue(renum);
	if (bounds) {
		int nb = cJSON_IsArray(bounds) ? cJSON_GetArraySize(bounds) : 0;
		if (nb < 2 || !(s->bounds = calloc((size_t)nb, sizeof *s->bounds)))
			return fail_at(c, NULL, "%s: \"boundaries\" must be a list of at least two "
					     "integers%s",
				       where, NULL);
		for (const cJSON *e = bounds->child; e; e = e->next, s->n_bounds++)
			if (ck_json_int(e, 0, INT64_MAX / 2, &s->bounds[s->n_bounds]) < 0 ||
			    (s->n_bounds && s->bounds[s->n_bounds] < s->bounds[s->n_bounds - 1]))
				return fail_at(c, NULL, "%s: \"boundaries\" must be non-decreasing "
						     "integers >= 0%s",
					       where, NULL);
		if (s->bounds[0] != 0)
			return fail_at(c, NULL, "%s: \"boundaries\" must start at 0%s", where, NULL);
	}
	return 0;
}

static int str_list(struct pctx *c, const cJSON *j, const char *field, char ***out, int *n)
{
	if (!cJSON_IsArray(j))
		return fail_at(c, NULL, "\"%s\" must be a list of strings", field, NULL);
	int cnt = cJSON_GetArraySize(j);
	*out = calloc((size_t)(cnt ? cnt : 1), sizeof **out);
	if (!*out)
		return ck_fail_sys(c->err, ENOMEM, "mapping");
	for (const cJSON *e = j->child; e; e = e->next) {
		if (!cJSON_IsString(e) || !e->valuestring[0])
			return fail_at(c, NULL, "\"%s\" must be a list of non-empty strings", field,
				       NULL);
		if (!((*out)[(*n)++] = strdup(e->valuestring)))
			return ck_fail_sys(c->err, ENOMEM, "mapping");
	}
	return 0;
}

/* "optimizer_state": "drop", "none", or a template naming each {param}
 * and {state} once, with nothing else in braces. */
static int parse_opt_mode(struct pctx *c, const cJSON *e, struct ck_mapping *m)
{
	const char *v = cJSON_IsString(e) ? e->valuestring : NULL;
	if (v && !strcmp(v, "drop")) {
		m->opt_mode = CK_OPT_DROP;
		return 0;
	}
	if (v && !strcmp(v, "none")) {
		m->opt_mode = CK_OPT_NONE;
		return 0;
	}
	const char *p = v ? strstr(v, "{param}") : NULL, *s = v ? strstr(v, "{state}") : NULL;
	int braces = 0;
	for (const char *q = v; q && *q; q++)
		braces += *q == '{';
	if (!p || !s || strstr(p + 1, "{param}") || strstr(s + 1, "{state}") || braces != 2) {
		fail_at(c, NULL,
			"\"optimizer_state\" must be \"drop\", \"none\" or a key template with "
			"{param} and {state} once each (\"optimizer.state.{state}.{param}\")%s%s",
			NULL, NULL);
		return -1;
	}
	m->opt_mode = CK_OPT_TEMPLATE;
	if (!(m->opt_template = strdup(v)))
		return ck_fail_sys(c->err, ENOMEM, "mapping");
	return 0;
}

static int parse_params(struct pctx *c, const cJSON *e, struct ck_mapping *m)
{
	if (!cJSON_IsObject(e))
		return fail_at(c, NULL, "\"params\" must be an object%s%s", NULL, NULL);
	int n = cJSON_GetArraySize(e);
	if (!(m->params = calloc((size_t)(n ? n : 1), sizeof *m->params)) ||
	    ck_strmap_init(&m->param_index, (size_t)n) < 0)
		return ck_fail_sys(c->err, ENOMEM, "mapping");
	for (const cJSON *p = e->child; p; p = p->next) {
		struct ck_named_expr *ne = &m->params[m->n_params++];
		if (!is_ident(p->string))
			return fail_at(c, NULL, "param name \"%s\" is not an identifier", p->string,
				       NULL);
		if (!(ne->name = strdup(p->string)))
			return ck_fail_sys(c->err, ENOMEM, "mapping");
		int put = ck_strmap_put(&m->param_index, ne->name, (uint32_t)(m->n_params - 1), NULL);
		if (put < 0)
			return ck_fail_sys(c->err, ENOMEM, "mapping");
		if (put > 0)
			return fail_at(c, NULL, "param \"%s\" given twice%s", p->string, NULL);
		if (parse_expr_json(c, NULL, p, p->string, &ne->expr) < 0)
			return -1;
	}
	return 0;
}

/* "rules", "partition" and "select": lists of objects, each parsed into
 * its numbered slot (numbers from 1, as messages name them). */
static int parse_rule_list(struct pctx *c, const cJSON *e, const char *field,
			   struct ck_mapping *m)
{
	if (e && !cJSON_IsArray(e))
		return fail_at(c, NULL, !strcmp(field, "rules") ? "\"%s\" must be a list%s"
								: "\"%s\" must be a list of rules%s",
			       field, NULL);
	int n = e ? cJSON_GetArraySize(e) : 0;
	size_t cap = (size_t)(n ? n : 1);
	if (field[0] == 'r' && !(m->rules = calloc(cap, sizeof *m->rules)))
		return ck_fail_sys(c->err, ENOMEM, "mapping");
	if (field[0] == 'p' && !(m->parts = calloc(cap, sizeof *m->parts)))
		return ck_fail_sys(c->err, ENOMEM, "mapping");
	if (field[0] == 's' && !(m->sels = calloc(cap, sizeof *m->sels)))
		return ck_fail_sys(c->err, ENOMEM, "mapping");
	for (const cJSON *r = e ? e->child : NULL; r; r = r->next) {
		int rc;
		if (field[0] == 'r') {
			struct ck_rule *x = &m->rules[m->n_rules++];
			x->index = m->n_rules;
			rc = parse_rule(c, r, x);
		} else if (field[0] == 'p') {
			struct ck_partition *x = &m->parts[m->n_parts++];
			x->index = m->n_parts;
			rc = parse_partition(c, r, x);
		} else {
			struct ck_select *x = &m->sels[m->n_sels++];
			x->index = m->n_sels;
			rc = parse_select(c, r, x);
		}
		if (rc < 0)
			return -1;
	}
	return 0;
}

/* One "rename" entry: "match" and "to" patterns, every capture of "to" one
 * of "match"'s (substituted as the text it matched), and an optional "if". */
static int parse_rename(struct pctx *c, const cJSON *j, struct ck_rename *x)
{
	char where[64];
	snprintf(where, sizeof where, "rename %d", x->index);
	const cJSON *match = NULL, *to = NULL, *cond = NULL;
	if (!cJSON_IsObject(j))
		return fail_at(c, NULL, "%s: must be an object%s", where, NULL);
	for (const cJSON *e = j->child; e; e = e->next) {
		const cJSON **slot = !strcmp(e->string, "match") ? &match
				     : !strcmp(e->string, "to")	 ? &to
				     : !strcmp(e->string, "if")	 ? &cond
								 : NULL;
		if (!strcmp(e->string, "comment"))
			continue;
		if (!slot || *slot)
			return fail_at(c, NULL, "%s: unknown or repeated field \"%s\"", where, e->string);
		*slot = e;
	}
	if (!cJSON_IsString(match) || !cJSON_IsString(to))
		return fail_at(c, NULL, "%s: needs \"match\" and \"to\" (patterns)%s", where, NULL);
	if (compile_at(c, where, match->valuestring, &x->match) < 0 ||
	    compile_at(c, where, to->valuestring, &x->to) < 0)
		return -1;
	for (int t = 0; t < x->to.n; t++)
		if (!x->to.tok[t].lit && !ck_pattern_has_capture(&x->match, x->to.tok[t].name))
			return fail_at(c, NULL, "%s: \"to\" names {%s}, which \"match\" does not capture",
				       where, x->to.tok[t].name);
	return cond ? parse_expr_json(c, NULL, cond, "if", &x->cond) : 0;
}

static int parse_renames(struct pctx *c, const cJSON *e, struct ck_mapping *m)
{
	if (!cJSON_IsArray(e))
		return fail_at(c, NULL, "\"rename\" must be a list%s%s", NULL, NULL);
	int n = cJSON_GetArraySize(e);
	if (!(m->renames = calloc((size_t)(n ? n : 1), sizeof *m->renames)))
		return ck_fail_sys(c->err, ENOMEM, "mapping");
	for (const cJSON *r = e->child; r; r = r->next) {
		struct ck_rename *x = &m->renames[m->n_renames++];
		x->index = m->n_renames;
		if (parse_rename(c, r, x) < 0)
			return -1;
	}
	return 0;
}

/* A string field (description, add_prefix), copied. */
static int str_field(struct pctx *c, const cJSON *e, const char *field, char **to)
{
	if (!cJSON_IsString(e))
		return fail_at(c, NULL, "\"%s\" must be a string%s", field, NULL);
	return (*to = strdup(e->valuestring)) ? 0 : ck_fail_sys(c->err, ENOMEM, "mapping");
}

/* One top-level field of a mapping other than "rules". */
static int parse_field(struct pctx *c, const cJSON *e, struct ck_mapping *m)
{
	const char *k = e->string;
	if (!strcmp(k, "ckptfs_mapping")) {
		int64_t v;
		if (ck_json_int(e, 1, 1, &v) < 0)
			return fail_at(c, NULL, "\"ckptfs_mapping\" must be 1 (the version)%s%s", NULL,
				       NULL);
		return 0;
	}
	if (!strcmp(k, "comment"))
		return 0;
	if (!strcmp(k, "description"))
		return str_field(c, e, k, &m->description);
	if (!strcmp(k, "add_prefix"))
		return str_field(c, e, k, &m->add_prefix);
	if (!strcmp(k, "architectures"))
		return str_list(c, e, k, &m->architectures, &m->n_architectures);
	if (!strcmp(k, "strip_prefixes"))
		return str_list(c, e, k, &m->strip_prefixes, &m->n_strip_prefixes);
	if (!strcmp(k, "strip_segments"))
		return str_list(c, e, k, &m->strip_segments, &m->n_strip_segments);
	if (!strcmp(k, "params"))
		return parse_params(c, e, m);
	if (!strcmp(k, "optimizer_state"))
		return parse_opt_mode(c, e, m);
	if (!strcmp(k, "partition") || !strcmp(k, "select"))
		return parse_rule_list(c, e, k, m);
	if (!strcmp(k, "rename"))
		return parse_renames(c, e, m);
	if (!strcmp(k, "unused")) {
		const char *v = cJSON_IsString(e) ? e->valuestring : "";
		m->unused = !strcmp(v, "error")	 ? CK_UNUSED_ERROR
			    : !strcmp(v, "drop") ? CK_UNUSED_DROP
			    : !strcmp(v, "keep") ? CK_UNUSED_KEEP
						 : CK_UNUSED_DEFAULT;
		if (m->unused == CK_UNUSED_DEFAULT)
			return fail_at(c, NULL, "\"unused\" must be \"error\", \"drop\" or \"keep\"%s%s",
				       NULL, NULL);
		return 0;
	}
	return fail_at(c, NULL, "unknown field \"%s\"", k, NULL);
}

static int parse_mapping(struct pctx *c, const cJSON *root, struct ck_mapping *m)
{
	if (!cJSON_IsObject(root))
		return fail_at(c, NULL, "a mapping is a JSON object%s%s", NULL, NULL);
	const cJSON *rules = NULL;
	for (const cJSON *e = root->child; e; e = e->next) {
		/* cJSON keeps duplicated keys; a field given twice is an error */
		for (const cJSON *prev = root->child; prev != e; prev = prev->next)
			if (!strcmp(prev->string, e->string))
				return fail_at(c, NULL, "field \"%s\" given twice", e->string, NULL);
		if (!strcmp(e->string, "rules"))
			rules = e; /* last: rules may name params */
		else if (parse_field(c, e, m) < 0)
			return -1;
	}
	return parse_rule_list(c, rules, "rules", m);
}

int ck_mapping_parse(const char *json, size_t len, const char *what, struct ck_mapping **out,
		     struct ck_err *err)
{
	*out = NULL;
	struct pctx c = {what, err};
	cJSON *root = ck_json_parse(json, len, 0, CK_E_MAPPING, what, err);
	if (!root)
		return -1;
	struct ck_mapping *m = calloc(1, sizeof *m);
	int rc = -1;
	if (!m || !(m->path = strdup(what)))
		ck_fail_sys(err, ENOMEM, "mapping");
	else {
		m->unused = CK_UNUSED_DEFAULT;
		rc = parse_mapping(&c, root, m);
	}
	cJSON_Delete(root);
	if (rc < 0)
		ck_mapping_free(m);
	else
		*out = m;
	return rc;
}

int ck_mapping_load(const char *path, struct ck_mapping **out, struct ck_err *err)
{
	char *buf;
	size_t len;
	if (ck_read_file(path, MAX_MAPPING_BYTES, &buf, &len, CK_E_MAPPING, err) < 0)
		return -1;
	int rc = ck_mapping_parse(buf, len, path, out, err);
	free(buf);
	return rc;
}
