/* The mapping expression language. Parsed once per rule into an AST and
 * evaluated at plan time for each binding of the rule's captures: integers
 * (parameters, captures, arithmetic) are computed, tensor operations become
 * layout-algebra operations on piece lists, so nothing is read.
 *
 *   expr    := or ( '??' or )*                    fallback when the left is absent
 *   or      := and ('||' and)* ;  and := cmp ('&&' cmp)*
 *   cmp     := sum (('=='|'!='|'<'|'<='|'>'|'>=') sum)?
 *   sum     := prod (('+'|'-') prod)* ;  prod := unary (('*'|'/'|'//'|'%') unary)*
 *   unary   := ('-'|'!') unary | postfix
 *   postfix := primary ( '.' NAME ( '(' args ')' )? | '[' expr ']' )*
 *   primary := INT | NAME | NAME '(' args ')' | '[' args ']' | '(' expr ')'
 * `x.f(a, b)` is `f(x, a, b)`; `x.shape` is the list of x's sizes.
 * `/` is exact integer division (an error if it does not divide). */
#ifndef CK_EXPR_H
#define CK_EXPR_H

#include <stdint.h>

#include "../layout/layout.h"
#include "../util/error.h"

struct ck_expr; /* AST */

enum ck_xkind { XV_NONE, XV_INT, XV_TENSOR, XV_LIST, XV_DTYPE, XV_STR };

struct ck_xval {
	enum ck_xkind kind;
	int64_t i;	    /* XV_INT; XV_DTYPE holds an enum ck_dtype */
	char *s;	    /* XV_STR */
	struct ck_value t;  /* XV_TENSOR */
	struct ck_xval *items; /* XV_LIST */
	int n;
};

/* Name lookup during evaluation: fill *out (a copy the evaluator owns) and
 * return 0, or return 1 when the name is unknown. */
typedef int (*ck_xlookup)(void *ctx, const char *name, struct ck_xval *out, struct ck_err *err);

/* Layout choices that a shape cannot confirm (a square block transposed or
 * not, equal-size parts concatenated in some order, a split count equal to
 * another dimension): the evaluator notes the first one here, so reviewers
 * learn where a mapping needs a numerical test. */
struct ck_lint {
	char msg[256];
};

struct ck_expr *ck_expr_parse(const char *text, struct ck_err *err);
void ck_expr_free(struct ck_expr *e);
int ck_expr_eval(const struct ck_expr *e, ck_xlookup lookup, void *ctx, struct ck_xval *out,
		 struct ck_err *err);
/* The same, noting the first ambiguity in *lint (if lint->msg is empty). */
int ck_expr_eval_lint(const struct ck_expr *e, ck_xlookup lookup, void *ctx, struct ck_xval *out,
		      struct ck_lint *lint, struct ck_err *err);
void ck_xval_free(struct ck_xval *v);
int ck_xval_copy(struct ck_xval *dst, const struct ck_xval *src, struct ck_err *err);
/* Names an expression refers to (identifiers not called as functions),
 * for dependency checks. Calls fn for each. */
void ck_expr_names(const struct ck_expr *e, void (*fn)(void *, const char *), void *ctx);

#endif
