#include "expr.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 64 /* parser recursion bound for untrusted mapping text */
/* AST height bound: `1+1+...`, `x.T.T...` and `x[0][0]...` are parsed in a
 * loop but make trees as deep as they are long, and evaluation, freeing and
 * name walks recurse over that height. */
#define MAX_HEIGHT 256
#define MAX_ARGS 64

enum node { N_INT, N_NAME, N_CALL, N_LIST, N_INDEX, N_ATTR, N_BIN, N_UN };

struct ck_expr {
	enum node kind;
	int height; /* 1 + the largest child's height */
	int64_t i;
	char *name; /* N_NAME, N_CALL, N_ATTR; operator text for N_BIN/N_UN */
	struct ck_expr **args;
	int n;
};

/* ---- parsing ---- */

struct parser {
	const char *s, *p;
	int depth;
	struct ck_err *err;
};

static void skip_ws(struct parser *ps)
{
	while (isspace((unsigned char)*ps->p))
		ps->p++;
}

static struct ck_expr *mk(enum node k, struct parser *ps)
{
	struct ck_expr *e = calloc(1, sizeof *e);
	if (!e) {
		ck_fail_sys(ps->err, ENOMEM, "expression");
	} else {
		e->kind = k;
		e->height = 1;
	}
	return e;
}

void ck_expr_free(struct ck_expr *e)
{
	if (!e)
		return;
	for (int i = 0; i < e->n; i++)
		ck_expr_free(e->args[i]);
	free(e->args);
	free(e->name);
	free(e);
}

static int perr(struct parser *ps, const char *what);

static int add_arg(struct ck_expr *e, struct ck_expr *a, struct parser *ps)
{
	if (e->n == MAX_ARGS) {
		ck_expr_free(a);
		return ck_fail(ps->err, CK_E_MAPPING, "more than %d arguments", MAX_ARGS);
	}
	if (a->height >= MAX_HEIGHT) {
		ck_expr_free(a);
		return perr(ps, "nested too deeply (a chain of more than 256 operations)");
	}
	struct ck_expr **na = realloc(e->args, (size_t)(e->n + 1) * sizeof *na);
	if (!na) {
		ck_expr_free(a);
		return ck_fail_sys(ps->err, ENOMEM, "expression");
	}
	e->args = na;
	e->args[e->n++] = a;
	if (a->height + 1 > e->height)
		e->height = a->height + 1;
	return 0;
}

static int perr(struct parser *ps, const char *what)
{
	/* a long expression is cut so the reason stays in the message */
	int n = (int)strlen(ps->s);
	return ck_fail(ps->err, CK_E_MAPPING, "expression \"%.*s%s\": %s at offset %d",
		       n > 80 ? 80 : n, ps->s, n > 80 ? "..." : "", what, (int)(ps->p - ps->s));
}

static struct ck_expr *parse_expr(struct parser *ps);

static int accept(struct parser *ps, const char *tok)
{
	skip_ws(ps);
	size_t n = strlen(tok);
	if (strncmp(ps->p, tok, n) != 0)
		return 0;
	/* do not split "//" into "/" or "<=" into "<", "==" into "=" */
	if ((n == 1 && (tok[0] == '/' || tok[0] == '<' || tok[0] == '>' || tok[0] == '!') &&
	     (ps->p[1] == '=' || (tok[0] == '/' && ps->p[1] == '/'))))
		return 0;
	ps->p += n;
	return 1;
}

/* args until `close`; the list node e gets them */
static int parse_args(struct parser *ps, struct ck_expr *e, const char *close)
{
	if (accept(ps, close))
		return 0;
	for (;;) {
		struct ck_expr *a = parse_expr(ps);
		if (!a || add_arg(e, a, ps) < 0)
			return -1;
		if (accept(ps, close))
			return 0;
		if (!accept(ps, ","))
			return perr(ps, close[0] == ')' ? "expected ',' or ')'" : "expected ',' or ']'");
	}
}

static char *parse_name(struct parser *ps)
{
	skip_ws(ps);
	const char *b = ps->p;
	if (!(isalpha((unsigned char)*b) || *b == '_'))
		return NULL;
	while (isalnum((unsigned char)*ps->p) || *ps->p == '_')
		ps->p++;
	char *n = strndup(b, (size_t)(ps->p - b));
	if (!n)
		ck_fail_sys(ps->err, ENOMEM, "expression");
	return n;
}

static struct ck_expr *parse_primary(struct parser *ps)
{
	skip_ws(ps);
	struct ck_expr *e = NULL;
	if (isdigit((unsigned char)*ps->p)) {
		int64_t v = 0;
		while (isdigit((unsigned char)*ps->p)) {
			if (__builtin_mul_overflow(v, 10, &v) ||
			    __builtin_add_overflow(v, *ps->p - '0', &v)) {
				perr(ps, "integer too large");
				return NULL;
			}
			ps->p++;
		}
		if ((e = mk(N_INT, ps)))
			e->i = v;
		return e;
	}
	if (accept(ps, "(")) {
		e = parse_expr(ps);
		if (e && !accept(ps, ")")) {
			perr(ps, "expected ')'");
			ck_expr_free(e);
			return NULL;
		}
		return e;
	}
	if (accept(ps, "[")) {
		if (!(e = mk(N_LIST, ps)))
			return NULL;
		if (parse_args(ps, e, "]") < 0) {
			ck_expr_free(e);
			return NULL;
		}
		return e;
	}
	char *name = parse_name(ps);
	if (!name) {
		perr(ps, *ps->p ? "unexpected character" : "unexpected end");
		return NULL;
	}
	if (accept(ps, "(")) {
		if (!(e = mk(N_CALL, ps))) {
			free(name);
			return NULL;
		}
		e->name = name;
		if (parse_args(ps, e, ")") < 0) {
			ck_expr_free(e);
			return NULL;
		}
		return e;
	}
	if (!(e = mk(N_NAME, ps))) {
		free(name);
		return NULL;
	}
	e->name = name;
	return e;
}

static struct ck_expr *parse_postfix(struct parser *ps)
{
	struct ck_expr *e = parse_primary(ps);
	while (e) {
		if (accept(ps, ".")) {
			char *name = parse_name(ps);
			if (!name) {
				perr(ps, "expected a name after '.'");
				ck_expr_free(e);
				return NULL;
			}
			int call = accept(ps, "(");
			struct ck_expr *c = mk(call ? N_CALL : N_ATTR, ps);
			if (!c) {
				free(name);
				ck_expr_free(e);
				return NULL;
			}
			c->name = name;
			if (add_arg(c, e, ps) < 0 || (call && parse_args(ps, c, ")") < 0)) {
				ck_expr_free(c);
				return NULL;
			}
			e = c;
		} else if (accept(ps, "[")) {
			struct ck_expr *c = mk(N_INDEX, ps), *i = NULL;
			if (!c || add_arg(c, e, ps) < 0) {
				if (!c)
					ck_expr_free(e);
				ck_expr_free(c);
				return NULL;
			}
			if (!(i = parse_expr(ps)) || add_arg(c, i, ps) < 0 || !accept(ps, "]")) {
				if (i && c->n == 2)
					perr(ps, "expected ']'");
				ck_expr_free(c);
				return NULL;
			}
			e = c;
		} else {
			break;
		}
	}
	return e;
}

static struct ck_expr *binary(struct parser *ps, const char *op, struct ck_expr *a,
			      struct ck_expr *b)
{
	struct ck_expr *e = mk(N_BIN, ps);
	if (!e || !(e->name = strdup(op))) {
		ck_expr_free(e);
		ck_expr_free(a);
		ck_expr_free(b);
		return NULL;
	}
	if (add_arg(e, a, ps) < 0) { /* add_arg frees a when it fails */
		ck_expr_free(e);
		ck_expr_free(b);
		return NULL;
	}
	if (add_arg(e, b, ps) < 0) {
		ck_expr_free(e);
		return NULL;
	}
	return e;
}

static struct ck_expr *parse_unary(struct parser *ps)
{
	if (++ps->depth > MAX_DEPTH) {
		perr(ps, "nested too deeply");
		return NULL;
	}
	struct ck_expr *e;
	const char *op = accept(ps, "-") ? "-" : accept(ps, "!") ? "!" : NULL;
	if (op) {
		struct ck_expr *a = parse_unary(ps);
		e = a ? mk(N_UN, ps) : NULL;
		if (!e || !(e->name = strdup(op))) {
			ck_expr_free(e);
			ck_expr_free(a);
			e = NULL;
		} else if (add_arg(e, a, ps) < 0) { /* a is freed */
			ck_expr_free(e);
			e = NULL;
		}
	} else {
		e = parse_postfix(ps);
	}
	ps->depth--;
	return e;
}

/* Binary levels, loosest first. */
static const char *const levels[][7] = {
	{"??", NULL},
	{"||", NULL},
	{"&&", NULL},
	{"==", "!=", "<=", ">=", "<", ">", NULL},
	{"+", "-", NULL},
	{"*", "//", "/", "%", NULL},
};
#define N_LEVELS ((int)(sizeof levels / sizeof *levels))

static struct ck_expr *parse_level(struct parser *ps, int lv)
{
	if (lv == N_LEVELS)
		return parse_unary(ps);
	if (++ps->depth > MAX_DEPTH) {
		perr(ps, "nested too deeply");
		return NULL;
	}
	struct ck_expr *e = parse_level(ps, lv + 1);
	while (e) {
		const char *op = NULL;
		for (int k = 0; levels[lv][k] && !op; k++)
			if (accept(ps, levels[lv][k]))
				op = levels[lv][k];
		if (!op)
			break;
		struct ck_expr *b = parse_level(ps, lv + 1);
		if (!b) {
			ck_expr_free(e);
			e = NULL;
			break;
		}
		e = binary(ps, op, e, b);
	}
	ps->depth--;
	return e;
}

static struct ck_expr *parse_expr(struct parser *ps)
{
	return parse_level(ps, 0);
}

struct ck_expr *ck_expr_parse(const char *text, struct ck_err *err)
{
	struct parser ps = {text, text, 0, err};
	struct ck_expr *e = parse_expr(&ps);
	skip_ws(&ps);
	if (e && *ps.p) {
		perr(&ps, "unexpected text");
		ck_expr_free(e);
		return NULL;
	}
	return e;
}

void ck_expr_names(const struct ck_expr *e, void (*fn)(void *, const char *), void *ctx)
{
	if (e->kind == N_NAME)
		fn(ctx, e->name);
	for (int i = 0; i < e->n; i++)
		ck_expr_names(e->args[i], fn, ctx);
}

/* ---- values ---- */

void ck_xval_free(struct ck_xval *v)
{
	if (v->kind == XV_TENSOR)
		ck_value_free(&v->t);
	for (int i = 0; i < v->n; i++)
		ck_xval_free(&v->items[i]);
	free(v->items);
	free(v->s);
	memset(v, 0, sizeof *v);
}

int ck_xval_copy(struct ck_xval *dst, const struct ck_xval *src, struct ck_err *err)
{
	memset(dst, 0, sizeof *dst);
	dst->kind = src->kind;
	dst->i = src->i;
	if (src->s && !(dst->s = strdup(src->s)))
		return ck_fail_sys(err, ENOMEM, "expression");
	if (src->kind == XV_TENSOR && ck_value_copy(&dst->t, &src->t, err) < 0) {
		ck_xval_free(dst);
		return -1;
	}
	if (src->n) {
		if (!(dst->items = calloc((size_t)src->n, sizeof *dst->items))) {
			ck_xval_free(dst);
			return ck_fail_sys(err, ENOMEM, "expression");
		}
		for (int i = 0; i < src->n; i++, dst->n++)
			if (ck_xval_copy(&dst->items[i], &src->items[i], err) < 0) {
				ck_xval_free(dst);
				return -1;
			}
	}
	return 0;
}

static const char *kind_name(enum ck_xkind k)
{
	static const char *const n[] = {"nothing", "integer", "tensor", "list", "dtype", "string"};
	return n[k];
}

/* ---- evaluation ---- */

struct ev {
	ck_xlookup lookup;
	void *ctx;
	struct ck_err *err;
	struct ck_lint *lint;
};

__attribute__((format(printf, 2, 3))) static void lint(struct ev *ev, const char *fmt, ...)
{
	if (!ev->lint || ev->lint->msg[0])
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(ev->lint->msg, sizeof ev->lint->msg, fmt, ap);
	va_end(ap);
}

/* A permutation that moves a dim onto another of the same size. */
static void lint_perm(struct ev *ev, const struct ck_value *t, const int *perm)
{
	for (int d = 0; d < t->ndim; d++)
		if (perm[d] != d && t->shape[perm[d]] == t->shape[d] && t->shape[d] > 1) {
			lint(ev, "transposes dims of equal size %lld: transposed or not, the shape is "
				 "the same",
			     (long long)t->shape[d]);
			return;
		}
}

/* Several parts of the same shape concatenated: another order fits too. */
static void lint_cat(struct ev *ev, const struct ck_value *vals, int n, int dim)
{
	for (int i = 0; i < n; i++)
		for (int j = i + 1; j < n; j++)
			if (vals[i].shape[dim] == vals[j].shape[dim] && vals[i].shape[dim] > 0) {
				lint(ev, "concatenates parts of equal size %lld along dim %d: another "
					 "order has the same shape",
				     (long long)vals[i].shape[dim], dim);
				return;
			}
}

/* A count that equals another dim's size: which dim was meant? */
static void lint_count(struct ev *ev, const char *fn, const struct ck_value *t, int64_t n, int d)
{
	for (int k = 0; k < t->ndim; k++)
		if (k != d && t->shape[k] == n && n > 1) {
			lint(ev, "%s into %lld, which is also the size of dim %d", fn, (long long)n, k);
			return;
		}
}

/* A reshape whose result has two equal dims > 1 that the input did not:
 * the order of the two factors cannot be told from the shape. */
static void lint_reshape(struct ev *ev, const int64_t *before, int nb, const struct ck_value *t)
{
	for (int i = 0; i < t->ndim; i++)
		for (int j = i + 1; j < t->ndim; j++) {
			int64_t s = t->shape[i];
			if (s <= 1 || t->shape[j] != s)
				continue;
			int had = 0, has = 0;
			for (int k = 0; k < nb; k++)
				had += before[k] == s;
			for (int k = 0; k < t->ndim; k++)
				has += t->shape[k] == s;
			if (has > had) {
				lint(ev, "reshapes into two dims of equal size %lld: their order cannot "
					 "be told from the shape",
				     (long long)s);
				return;
			}
		}
}

static int eval(struct ev *ev, const struct ck_expr *e, struct ck_xval *out);

static int want(struct ev *ev, const struct ck_xval *v, enum ck_xkind k, const char *fn, int argi)
{
	if (v->kind == k)
		return 0;
	return ck_fail(ev->err, CK_E_MAPPING, "%s: argument %d is a %s, expected a %s", fn, argi,
		       kind_name(v->kind), kind_name(k));
}

/* Normalise a possibly negative dim against ndim (extra allows ndim itself). */
static int dim_arg(struct ev *ev, const char *fn, int64_t d, int ndim, int extra, int *out)
{
	int64_t lim = ndim + extra;
	if (d < -lim || d >= lim)
		return ck_fail(ev->err, CK_E_MAPPING, "%s: dim %lld out of range for %d dims", fn,
			       (long long)d, ndim);
	*out = (int)(d < 0 ? d + lim : d);
	return 0;
}

/* Integers from args[from..] or from a single list argument. */
static int int_list(struct ev *ev, const char *fn, struct ck_xval *a, int na, int from,
		    int64_t *out, int *n)
{
	const struct ck_xval *items = a + from;
	int cnt = na - from;
	if (cnt == 1 && a[from].kind == XV_LIST) {
		items = a[from].items;
		cnt = a[from].n;
	}
	if (cnt > CK_MAX_DIMS)
		return ck_fail(ev->err, CK_E_MAPPING, "%s: more than %d sizes", fn, CK_MAX_DIMS);
	for (int k = 0; k < cnt; k++) {
		if (want(ev, &items[k], XV_INT, fn, from + k) < 0)
			return -1;
		out[k] = items[k].i;
	}
	*n = cnt;
	return 0;
}

static int tensor_list(struct ev *ev, const char *fn, struct ck_xval *a, struct ck_value **out,
		       int *n)
{
	if (a->kind != XV_LIST)
		return ck_fail(ev->err, CK_E_MAPPING, "%s: first argument must be a list of tensors",
			       fn);
	for (int k = 0; k < a->n; k++)
		if (a->items[k].kind != XV_TENSOR)
			return ck_fail(ev->err, CK_E_MAPPING, "%s: list item %d is a %s", fn, k,
				       kind_name(a->items[k].kind));
	*out = calloc(a->n > 0 ? (size_t)a->n : 1, sizeof **out);
	if (!*out)
		return ck_fail_sys(ev->err, ENOMEM, "expression");
	for (int k = 0; k < a->n; k++) { /* move the tensors out of the list */
		(*out)[k] = a->items[k].t;
		a->items[k].t.p = NULL;
		a->items[k].t.n = 0;
	}
	*n = a->n;
	return 0;
}

static int nargs(struct ev *ev, const char *fn, int na, int lo, int hi)
{
	if ((na < lo || na > hi) && hi > lo)
		return ck_fail(ev->err, CK_E_MAPPING, "%s: takes %d to %d arguments, got %d", fn, lo,
			       hi, na);
	if (na < lo || na > hi)
		return ck_fail(ev->err, CK_E_MAPPING, "%s: takes %d argument%s, got %d", fn, lo,
			       lo == 1 ? "" : "s", na);
	return 0;
}

/* chunk/split: build a list of narrowed copies of t along dim. */
static int pieces_list(struct ev *ev, struct ck_value *t, int dim, const int64_t *sizes, int cnt,
		       struct ck_xval *out)
{
	out->kind = XV_LIST;
	out->items = calloc((size_t)(cnt ? cnt : 1), sizeof *out->items);
	if (!out->items)
		return ck_fail_sys(ev->err, ENOMEM, "expression");
	int64_t off = 0;
	for (int k = 0; k < cnt; k++) {
		struct ck_xval *it = &out->items[out->n++];
		it->kind = XV_TENSOR;
		if (ck_value_copy(&it->t, t, ev->err) < 0 ||
		    ck_value_narrow(&it->t, dim, off, sizes[k], ev->err) < 0)
			return -1;
		off += sizes[k];
	}
	return 0;
}

/* The builtins. Each takes the evaluated arguments (a[0] first) and either
 * writes *out (a list, an integer, a new tensor) or, for the table's IN_PLACE
 * entries, transforms a[0]'s tensor, which the caller then moves to *out. */
#define BUILTIN(name)                                                                  \
	static int name(struct ev *ev, const char *fn, struct ck_xval *a, int na,      \
			struct ck_xval *out)

BUILTIN(fn_cat)
{
	(void)out;
	if (na == 2 && want(ev, &a[1], XV_INT, fn, 1) < 0)
		return -1;
	struct ck_value *vals;
	int n = 0, d = 0;
	if (tensor_list(ev, fn, &a[0], &vals, &n) < 0)
		return -1;
	int64_t dim = na == 2 ? a[1].i : 0;
	int stack = fn[0] == 's';
	int ndim = n ? vals[0].ndim : 0;
	int rc = dim_arg(ev, fn, dim, ndim, stack, &d);
	for (int k = 0; k < n && rc == 0 && stack; k++)
		rc = ck_value_unsqueeze(&vals[k], d, ev->err);
	if (rc < 0) {
		for (int k = 0; k < n; k++)
			ck_value_free(&vals[k]);
		free(vals);
		return -1;
	}
	if (!stack)
		lint_cat(ev, vals, n, d);
	out->kind = XV_TENSOR;
	rc = ck_value_cat(&out->t, vals, n, d, ev->err);
	free(vals);
	return rc;
}

BUILTIN(fn_len)
{
	(void)ev, (void)fn, (void)na;
	out->kind = XV_INT;
	out->i = a[0].n;
	return 0;
}

/* has(list, x): 1 when an item of the list equals the integer x
 * (`has(mlp_only_layers ?? [], L)`: Qwen-MoE's dense layers). */
BUILTIN(fn_has)
{
	(void)na;
	if (want(ev, &a[1], XV_INT, fn, 1) < 0)
		return -1;
	out->kind = XV_INT;
	out->i = 0;
	for (int k = 0; k < a[0].n; k++)
		if (a[0].items[k].kind == XV_INT && a[0].items[k].i == a[1].i)
			out->i = 1;
	return 0;
}

/* dequant(w, scale, block): w * scale of its block, in F32 (DeepSeek-V3
 * weight_scale_inv); quant divides. block: one size for every dim, or one
 * per dim. */
BUILTIN(fn_dequant)
{
	(void)out;
	struct ck_value *t = &a[0].t;
	int64_t ints[CK_MAX_DIMS], block[CK_MAX_DIMS];
	int ni = 0;
	if (na < 3 || a[1].kind != XV_TENSOR)
		return ck_fail(ev->err, CK_E_MAPPING, "%s: takes (weight, scale, block sizes)", fn);
	if (int_list(ev, fn, a, na, 2, ints, &ni) < 0)
		return -1;
	if (ni != 1 && ni != t->ndim)
		return ck_fail(ev->err, CK_E_MAPPING, "%s: %d block sizes for %d dims", fn, ni,
			       t->ndim);
	for (int k = 0; k < t->ndim; k++)
		block[k] = ni == 1 ? ints[0] : ints[k];
	return ck_value_block_scale(t, &a[1].t, block, fn[0] == 'q', ev->err);
}

/* mxfp4(blocks, scales): GPT-OSS's MXFP4 experts, E2M1 pairs in U8 blocks
 * [..., G, 16] times 2^(scale - 127) per 32 values, in F32 */
BUILTIN(fn_mxfp4)
{
	(void)na, (void)out;
	if (want(ev, &a[1], XV_TENSOR, fn, 1) < 0)
		return -1;
	return ck_value_mxfp4(&a[0].t, &a[1].t, ev->err);
}

BUILTIN(fn_view)
{
	(void)out;
	struct ck_value *t = &a[0].t;
	int64_t ints[CK_MAX_DIMS], before[CK_MAX_DIMS];
	int ni = 0, nb = t->ndim;
	memcpy(before, t->shape, sizeof before);
	if (int_list(ev, fn, a, na, 1, ints, &ni) < 0 || ck_value_reshape(t, ints, ni, ev->err) < 0)
		return -1;
	lint_reshape(ev, before, nb, t);
	return 0;
}

static int permute_linted(struct ev *ev, struct ck_value *t, const int *perm)
{
	lint_perm(ev, t, perm);
	return ck_value_permute(t, perm, ev->err);
}

BUILTIN(fn_transpose)
{
	(void)na, (void)out;
	struct ck_value *t = &a[0].t;
	int d0 = 0, d1 = 0, perm[CK_MAX_DIMS];
	if (want(ev, &a[1], XV_INT, fn, 1) < 0 || want(ev, &a[2], XV_INT, fn, 2) < 0 ||
	    dim_arg(ev, fn, a[1].i, t->ndim, 0, &d0) < 0 ||
	    dim_arg(ev, fn, a[2].i, t->ndim, 0, &d1) < 0)
		return -1;
	for (int k = 0; k < t->ndim; k++)
		perm[k] = k;
	perm[d0] = d1, perm[d1] = d0;
	return permute_linted(ev, t, perm);
}

BUILTIN(fn_t)
{
	(void)fn, (void)na, (void)out;
	int perm[2] = {1, 0};
	if (a[0].t.ndim != 2)
		return ck_fail(ev->err, CK_E_MAPPING, "t: tensor has %d dims, not 2", a[0].t.ndim);
	return permute_linted(ev, &a[0].t, perm);
}

BUILTIN(fn_permute)
{
	(void)out;
	struct ck_value *t = &a[0].t;
	int64_t ints[CK_MAX_DIMS];
	int ni = 0, perm[CK_MAX_DIMS];
	if (int_list(ev, fn, a, na, 1, ints, &ni) < 0)
		return -1;
	if (ni != t->ndim)
		return ck_fail(ev->err, CK_E_MAPPING, "permute: %d dims given for %d", ni, t->ndim);
	for (int k = 0; k < ni; k++)
		if (dim_arg(ev, fn, ints[k], t->ndim, 0, &perm[k]) < 0)
			return -1;
	return permute_linted(ev, t, perm);
}

/* The integer arguments after the tensor of f(x, dim, ...): ints[0] is the
 * dim, normalised into *d. */
static int dim_ints(struct ev *ev, const char *fn, struct ck_xval *a, int na, int64_t *ints,
		    int *d)
{
	int ni = 0;
	if (int_list(ev, fn, a, na, 1, ints, &ni) < 0)
		return -1;
	return dim_arg(ev, fn, ints[0], a[0].t.ndim, 0, d);
}

/* narrow(x, dim, start, length), and select(x, dim, index) (the dim goes) */
BUILTIN(fn_narrow)
{
	(void)out;
	struct ck_value *t = &a[0].t;
	int64_t ints[CK_MAX_DIMS];
	int d = 0;
	if (dim_ints(ev, fn, a, na, ints, &d) < 0)
		return -1;
	if (fn[0] == 'n')
		return ck_value_narrow(t, d, ints[1], ints[2], ev->err);
	if (ck_value_narrow(t, d, ints[1] < 0 ? ints[1] + t->shape[d] : ints[1], 1, ev->err) < 0)
		return -1;
	return ck_value_squeeze(t, d, ev->err);
}

/* pad(x, dim, size): zeros after the end of dim up to size (Megatron's
 * padded vocabulary); narrow takes them off again */
BUILTIN(fn_pad)
{
	(void)out;
	struct ck_value *t = &a[0].t;
	int64_t ints[CK_MAX_DIMS];
	int d = 0;
	if (dim_ints(ev, fn, a, na, ints, &d) < 0)
		return -1;
	if (ints[1] < t->shape[d])
		return ck_fail(ev->err, CK_E_MAPPING, "pad: size %lld is smaller than dim %d (%lld)",
			       (long long)ints[1], d, (long long)t->shape[d]);
	return ck_value_pad(t, d, ints[1], ev->err);
}

BUILTIN(fn_squeeze)
{
	(void)na, (void)out;
	struct ck_value *t = &a[0].t;
	int un = fn[0] == 'u', d = 0;
	if (want(ev, &a[1], XV_INT, fn, 1) < 0 || dim_arg(ev, fn, a[1].i, t->ndim, un, &d) < 0)
		return -1;
	return un ? ck_value_unsqueeze(t, d, ev->err) : ck_value_squeeze(t, d, ev->err);
}

BUILTIN(fn_flatten)
{
	(void)fn, (void)na, (void)out;
	int64_t m1 = -1;
	return ck_value_reshape(&a[0].t, &m1, 1, ev->err);
}

/* to(x, DTYPE[, saturate]): saturate clamps overflow to the largest finite
 * value instead of PyTorch's inf / NaN */
BUILTIN(fn_to)
{
	(void)out;
	if (want(ev, &a[1], XV_DTYPE, fn, 1) < 0 || (na == 3 && want(ev, &a[2], XV_INT, fn, 2) < 0))
		return -1;
	return ck_value_cast(&a[0].t, (enum ck_dtype)a[1].i, na == 3 && a[2].i, ev->err);
}

/* torch.chunk: pieces of ceil(size/n); the last may be smaller */
BUILTIN(fn_chunk)
{
	struct ck_value *t = &a[0].t;
	int64_t ints[CK_MAX_DIMS];
	int ni = 0, d = 0;
	if (int_list(ev, fn, a, na, 1, ints, &ni) < 0)
		return -1;
	int64_t n = ints[0];
	if (dim_arg(ev, fn, ni > 1 ? ints[1] : 0, t->ndim, 0, &d) < 0)
		return -1;
	if (n < 1 || n > CK_MAX_PIECES)
		return ck_fail(ev->err, CK_E_MAPPING, "chunk: %lld chunks", (long long)n);
	lint_count(ev, "chunk", t, n, d);
	int64_t sz = t->shape[d] / n + (t->shape[d] % n != 0), *sizes = malloc((size_t)n * sizeof *sizes);
	if (!sizes)
		return ck_fail_sys(ev->err, ENOMEM, "expression");
	int cnt = 0;
	for (int64_t off = 0; off < t->shape[d] || (cnt == 0 && off == 0); off += sz) {
		sizes[cnt++] = t->shape[d] - off < sz ? t->shape[d] - off : sz;
		if (sz == 0)
			break;
	}
	int rc = pieces_list(ev, t, d, sizes, cnt, out);
	free(sizes);
	return rc;
}

/* split(x, sizes, dim): torch.split with a list of sizes summing to the dim */
static int split_list(struct ev *ev, const char *fn, struct ck_xval *a, int d, struct ck_xval *out)
{
	struct ck_value *t = &a[0].t;
	int64_t sizes[MAX_ARGS], sum = 0;
	int ni = 0;
	if (int_list(ev, fn, a, 2, 1, sizes, &ni) < 0)
		return -1;
	for (int k = 0; k < ni; k++)
		if (sizes[k] < 0 || __builtin_add_overflow(sum, sizes[k], &sum))
			return ck_fail(ev->err, CK_E_MAPPING,
				       "split: size %lld (sizes are >= 0 and sum to the dim)",
				       (long long)sizes[k]);
	if (sum != t->shape[d])
		return ck_fail(ev->err, CK_E_MAPPING, "split: sizes sum to %lld, dim %d has %lld",
			       (long long)sum, d, (long long)t->shape[d]);
	return pieces_list(ev, t, d, sizes, ni, out);
}

/* torch.split: a size per piece, or a list of sizes */
BUILTIN(fn_split)
{
	struct ck_value *t = &a[0].t;
	int d = 0;
	if ((na == 3 && want(ev, &a[2], XV_INT, fn, 2) < 0) ||
	    dim_arg(ev, fn, na == 3 ? a[2].i : 0, t->ndim, 0, &d) < 0)
		return -1;
	if (a[1].kind == XV_LIST)
		return split_list(ev, fn, a, d, out);
	if (want(ev, &a[1], XV_INT, fn, 1) < 0)
		return -1;
	if (a[1].i < 1)
		return ck_fail(ev->err, CK_E_MAPPING, "split: size %lld", (long long)a[1].i);
	/* ceil without overflow: x.split(2**63-1) is one piece, as in torch */
	int64_t n = t->shape[d] / a[1].i + (t->shape[d] % a[1].i != 0);
	if (n > CK_MAX_PIECES)
		return ck_fail(ev->err, CK_E_MAPPING, "split: too many pieces");
	int64_t *sizes = malloc((size_t)(n ? n : 1) * sizeof *sizes);
	if (!sizes)
		return ck_fail_sys(ev->err, ENOMEM, "expression");
	int64_t left = t->shape[d];
	for (int64_t k = 0; k < n; k++) {
		sizes[k] = left < a[1].i ? left : a[1].i;
		left -= sizes[k];
	}
	int rc = pieces_list(ev, t, d, sizes, (int)n, out);
	free(sizes);
	return rc;
}

BUILTIN(fn_unbind)
{
	struct ck_value *t = &a[0].t;
	int d = 0;
	if ((na == 2 && want(ev, &a[1], XV_INT, fn, 1) < 0) ||
	    dim_arg(ev, fn, na == 2 ? a[1].i : 0, t->ndim, 0, &d) < 0)
		return -1;
	if (t->shape[d] > CK_MAX_PIECES)
		return ck_fail(ev->err, CK_E_MAPPING, "unbind: too many pieces");
	int64_t *ones = malloc((size_t)(t->shape[d] ? t->shape[d] : 1) * sizeof *ones);
	if (!ones)
		return ck_fail_sys(ev->err, ENOMEM, "expression");
	for (int64_t k = 0; k < t->shape[d]; k++)
		ones[k] = 1;
	int rc = pieces_list(ev, t, d, ones, (int)t->shape[d], out);
	free(ones);
	for (int k = 0; rc == 0 && k < out->n; k++)
		rc = ck_value_squeeze(&out->items[k].t, d, ev->err);
	return rc;
}

BUILTIN(fn_size)
{
	(void)na;
	int d = 0;
	if (want(ev, &a[1], XV_INT, fn, 1) < 0 || dim_arg(ev, fn, a[1].i, a[0].t.ndim, 0, &d) < 0)
		return -1;
	out->kind = XV_INT;
	out->i = a[0].t.shape[d];
	return 0;
}

#undef BUILTIN

enum { ANY_FIRST = 1, LIST_FIRST = 2, IN_PLACE = 4 }; /* else a tensor first */

static const struct builtin {
	const char *name;
	int lo, hi; /* argument counts (lo < 0: the builtin checks) */
	int flags;
	int (*fn)(struct ev *ev, const char *fn, struct ck_xval *a, int na, struct ck_xval *out);
} builtins[] = {
	{"cat", 1, 2, ANY_FIRST, fn_cat},
	{"stack", 1, 2, ANY_FIRST, fn_cat},
	{"len", 1, 1, LIST_FIRST, fn_len},
	{"has", 2, 2, LIST_FIRST, fn_has},
	{"dequant", -1, 0, IN_PLACE, fn_dequant},
	{"quant", -1, 0, IN_PLACE, fn_dequant},
	{"mxfp4", 2, 2, IN_PLACE, fn_mxfp4},
	{"view", -1, 0, IN_PLACE, fn_view},
	{"reshape", -1, 0, IN_PLACE, fn_view},
	{"transpose", 3, 3, IN_PLACE, fn_transpose},
	{"t", 1, 1, IN_PLACE, fn_t},
	{"permute", -1, 0, IN_PLACE, fn_permute},
	{"narrow", 4, 4, IN_PLACE, fn_narrow},
	{"select", 3, 3, IN_PLACE, fn_narrow},
	{"pad", 3, 3, IN_PLACE, fn_pad},
	{"unsqueeze", 2, 2, IN_PLACE, fn_squeeze},
	{"squeeze", 2, 2, IN_PLACE, fn_squeeze},
	{"flatten", 1, 1, IN_PLACE, fn_flatten},
	{"to", 2, 3, IN_PLACE, fn_to},
	{"cast", 2, 3, IN_PLACE, fn_to},
	{"chunk", 2, 3, 0, fn_chunk},
	{"split", 2, 3, 0, fn_split},
	{"unbind", 1, 2, 0, fn_unbind},
	{"size", 2, 2, 0, fn_size},
};

static int call(struct ev *ev, const char *fn, struct ck_xval *a, int na, struct ck_xval *out)
{
	const struct builtin *b = NULL;
	for (size_t k = 0; !b && k < sizeof builtins / sizeof *builtins; k++)
		if (!strcmp(fn, builtins[k].name))
			b = &builtins[k];
	enum ck_xkind first = b && (b->flags & LIST_FIRST) ? XV_LIST : XV_TENSOR;
	if (b && !(b->flags & ANY_FIRST) && (na < 1 || a[0].kind != first))
		return ck_fail(ev->err, CK_E_MAPPING, "unknown function \"%s\" for a %s", fn,
			       na ? kind_name(a[0].kind) : "call without arguments");
	if (!b)
		return ck_fail(ev->err, CK_E_MAPPING, "unknown function \"%s\"", fn);
	if ((b->lo >= 0 && nargs(ev, fn, na, b->lo, b->hi) < 0) || b->fn(ev, fn, a, na, out) < 0)
		return -1;
	if (b->flags & IN_PLACE) { /* tensor result: move a[0] out */
		out->kind = XV_TENSOR;
		out->t = a[0].t;
		a[0].t.p = NULL;
		a[0].t.n = 0;
	}
	return 0;
}

static int arith(struct ev *ev, const char *op, int64_t x, int64_t y, int64_t *r)
{
	int ovf = 0;
	if (!strcmp(op, "+"))
		ovf = __builtin_add_overflow(x, y, r);
	else if (!strcmp(op, "-"))
		ovf = __builtin_sub_overflow(x, y, r);
	else if (!strcmp(op, "*"))
		ovf = __builtin_mul_overflow(x, y, r);
	else if (!strcmp(op, "/") || !strcmp(op, "//") || !strcmp(op, "%")) {
		if (y == 0)
			return ck_fail(ev->err, CK_E_MAPPING, "division by zero (%lld %s 0)",
				       (long long)x, op);
		if (x == INT64_MIN && y == -1)
			return ck_fail(ev->err, CK_E_MAPPING, "integer overflow");
		if (op[0] == '%')
			*r = x % y;
		else if (op[1] == '/') /* floor division */
			*r = x / y - ((x % y != 0) && ((x < 0) != (y < 0)));
		else if (x % y)
			return ck_fail(ev->err, CK_E_MAPPING,
				       "%lld / %lld does not divide exactly (use // to floor)",
				       (long long)x, (long long)y);
		else
			*r = x / y;
	} else if (!strcmp(op, "=="))
		*r = x == y;
	else if (!strcmp(op, "!="))
		*r = x != y;
	else if (!strcmp(op, "<"))
		*r = x < y;
	else if (!strcmp(op, "<="))
		*r = x <= y;
	else if (!strcmp(op, ">"))
		*r = x > y;
	else if (!strcmp(op, ">="))
		*r = x >= y;
	else if (!strcmp(op, "&&"))
		*r = x && y;
	else if (!strcmp(op, "||"))
		*r = x || y;
	if (ovf)
		return ck_fail(ev->err, CK_E_MAPPING, "integer overflow in %lld %s %lld",
			       (long long)x, op, (long long)y);
	return 0;
}

/* x + c, c + x, x - c with x a tensor and c an integer constant: the
 * affine element op (Gemma's norm offsets); the tensor moves to out. */
static int shift_tensor(struct ev *ev, char op, struct ck_xval *x, struct ck_xval *y,
			struct ck_xval *out)
{
	int tensor_left = x->kind == XV_TENSOR;
	struct ck_xval *t = tensor_left ? x : y;
	int64_t c = tensor_left ? y->i : x->i;
	if (!tensor_left && op == '-')
		return ck_fail(ev->err, CK_E_MAPPING,
			       "%lld - tensor: only x + c, c + x and x - c are defined", (long long)c);
	if (c > (1 << 24) || c < -(1 << 24))
		return ck_fail(ev->err, CK_E_MAPPING,
			       "tensor %c %lld: the constant must be within 2^24 (exact in F32)", op,
			       (long long)c);
	if (ck_value_shift(&t->t, (float)(op == '-' ? -c : c), ev->err) < 0)
		return -1;
	*out = *t;
	memset(t, 0, sizeof *t);
	return 0;
}

static int eval(struct ev *ev, const struct ck_expr *e, struct ck_xval *out)
{
	memset(out, 0, sizeof *out);
	switch (e->kind) {
	case N_INT:
		out->kind = XV_INT;
		out->i = e->i;
		return 0;
	case N_NAME: {
		int r = ev->lookup(ev->ctx, e->name, out, ev->err);
		if (r <= 0)
			return r;
		int sub;
		enum ck_dtype dt = ck_dtype_parse(e->name, &sub);
		if (dt != CK_DT_INVALID) {
			out->kind = XV_DTYPE;
			out->i = dt;
			return 0;
		}
		return ck_fail(ev->err, CK_E_MAPPING, "unknown name \"%s\"", e->name);
	}
	case N_LIST:
		out->kind = XV_LIST;
		out->items = calloc((size_t)(e->n ? e->n : 1), sizeof *out->items);
		if (!out->items)
			return ck_fail_sys(ev->err, ENOMEM, "expression");
		for (int k = 0; k < e->n; k++, out->n++)
			if (eval(ev, e->args[k], &out->items[k]) < 0) {
				ck_xval_free(out);
				return -1;
			}
		return 0;
	case N_CALL: {
		/* arguments on the heap: a frame of this recursion stays small */
		struct ck_xval *a = calloc((size_t)(e->n ? e->n : 1), sizeof *a);
		if (!a)
			return ck_fail_sys(ev->err, ENOMEM, "expression");
		int n = 0, rc = 0;
		for (; n < e->n && rc == 0; n++)
			rc = eval(ev, e->args[n], &a[n]);
		if (rc == 0)
			rc = call(ev, e->name, a, e->n, out);
		for (int k = 0; k < n; k++)
			ck_xval_free(&a[k]);
		free(a);
		if (rc < 0) {
			ck_xval_free(out);
			ck_err_prefix(ev->err, "%s()", e->name);
		}
		return rc;
	}
	case N_ATTR: {
		struct ck_xval x;
		if (eval(ev, e->args[0], &x) < 0)
			return -1;
		int rc = 0;
		if (!strcmp(e->name, "shape") && x.kind == XV_TENSOR) {
			out->kind = XV_LIST;
			out->items = calloc((size_t)(x.t.ndim ? x.t.ndim : 1), sizeof *out->items);
			if (!out->items)
				rc = ck_fail_sys(ev->err, ENOMEM, "expression");
			for (int k = 0; rc == 0 && k < x.t.ndim; k++, out->n++)
				out->items[k].kind = XV_INT, out->items[k].i = x.t.shape[k];
		} else if (!strcmp(e->name, "T") && x.kind == XV_TENSOR && x.t.ndim == 2) {
			int perm[2] = {1, 0};
			lint_perm(ev, &x.t, perm);
			rc = ck_value_permute(&x.t, perm, ev->err);
			*out = x;
			return rc;
		} else {
			rc = ck_fail(ev->err, CK_E_MAPPING, "no attribute \"%s\" on a %s", e->name,
				     kind_name(x.kind));
		}
		ck_xval_free(&x);
		return rc;
	}
	case N_INDEX: {
		struct ck_xval x, i;
		if (eval(ev, e->args[0], &x) < 0)
			return -1;
		if (eval(ev, e->args[1], &i) < 0) {
			ck_xval_free(&x);
			return -1;
		}
		int rc = 0;
		if (i.kind != XV_INT) {
			rc = ck_fail(ev->err, CK_E_MAPPING, "index is a %s, not an integer",
				     kind_name(i.kind));
		} else if (x.kind == XV_LIST) {
			int64_t k = i.i < 0 ? i.i + x.n : i.i;
			if (k < 0 || k >= x.n)
				rc = ck_fail(ev->err, CK_E_MAPPING, "index %lld out of range for %d items",
					     (long long)i.i, x.n);
			else {
				*out = x.items[k];
				memset(&x.items[k], 0, sizeof x.items[k]);
			}
		} else if (x.kind == XV_TENSOR) { /* t[i]: select along dim 0 */
			struct ck_xval args[3] = {x, {.kind = XV_INT, .i = 0}, i};
			rc = call(ev, "select", args, 3, out);
			x = args[0];
		} else {
			rc = ck_fail(ev->err, CK_E_MAPPING, "cannot index a %s", kind_name(x.kind));
		}
		ck_xval_free(&x);
		ck_xval_free(&i); /* an index that is not an integer may own memory */
		return rc;
	}
	case N_UN: {
		if (eval(ev, e->args[0], out) < 0)
			return -1;
		if (out->kind != XV_INT) {
			ck_xval_free(out);
			return ck_fail(ev->err, CK_E_MAPPING, "'%s' needs an integer", e->name);
		}
		if (e->name[0] == '!')
			out->i = !out->i;
		else if (out->i == INT64_MIN)
			return ck_fail(ev->err, CK_E_MAPPING, "integer overflow");
		else
			out->i = -out->i;
		return 0;
	}
	case N_BIN: {
		if (!strcmp(e->name, "??")) {
			/* fallback: the left side if it evaluates (a config key may
			 * be absent), else the right */
			if (eval(ev, e->args[0], out) == 0)
				return 0;
			return eval(ev, e->args[1], out);
		}
		struct ck_xval x, y;
		if (eval(ev, e->args[0], &x) < 0)
			return -1;
		if (eval(ev, e->args[1], &y) < 0) {
			ck_xval_free(&x);
			return -1;
		}
		int rc;
		if ((x.kind == XV_TENSOR) != (y.kind == XV_TENSOR) &&
		    (x.kind == XV_INT || y.kind == XV_INT) && (e->name[0] == '+' || e->name[0] == '-') &&
		    !e->name[1])
			rc = shift_tensor(ev, e->name[0], &x, &y, out);
		else if (x.kind != XV_INT || y.kind != XV_INT)
			rc = ck_fail(ev->err, CK_E_MAPPING, "'%s' needs integers, got %s and %s",
				     e->name, kind_name(x.kind), kind_name(y.kind));
		else {
			out->kind = XV_INT;
			rc = arith(ev, e->name, x.i, y.i, &out->i);
		}
		ck_xval_free(&x);
		ck_xval_free(&y);
		return rc;
	}
	}
	return ck_fail(ev->err, CK_E_MAPPING, "bad expression node");
}

int ck_expr_eval(const struct ck_expr *e, ck_xlookup lookup, void *ctx, struct ck_xval *out,
		 struct ck_err *err)
{
	struct ev ev = {lookup, ctx, err, NULL};
	return eval(&ev, e, out);
}

int ck_expr_eval_lint(const struct ck_expr *e, ck_xlookup lookup, void *ctx, struct ck_xval *out,
		      struct ck_lint *lint, struct ck_err *err)
{
	struct ev ev = {lookup, ctx, err, lint};
	return eval(&ev, e, out);
}
