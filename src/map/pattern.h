/* Key patterns with named captures, anchored at both ends:
 *   model.layers.{L}.self_attn.q_proj.weight
 * {name}       one dot-free segment (at least one character)
 * {name:int}   a decimal integer (sorts numerically)
 * {name:path}  any non-empty text, dots included (for prefixes)
 * Everything else is literal; "{{" and "}}" stand for braces. A capture
 * appears at most once in a pattern (a name is bound once). */
#ifndef CK_PATTERN_H
#define CK_PATTERN_H

#include <stdint.h>

#include "../util/error.h"

#define CK_MAX_CAPTURES 8

enum ck_cap_type { CK_CAP_SEG, CK_CAP_INT, CK_CAP_PATH };

struct ck_ptok {
	char *lit;  /* literal text, or NULL for a capture */
	size_t lit_len;
	char *name; /* capture name */
	enum ck_cap_type type;
};

struct ck_pattern {
	char *text;
	struct ck_ptok *tok;
	int n;
	size_t min_len; /* the shortest key it can match: its literals, a byte per capture */
	int shape_exact; /* matches a key iff it matches the key's shape (keyshape.h) */
	int lit_filter;	 /* keys are first checked for its literals, in order */
};

struct ck_binding {
	int n;
	const char *name[CK_MAX_CAPTURES]; /* points into a pattern */
	char *val[CK_MAX_CAPTURES];
	/* a match's values share one allocation (a plan makes hundreds of
	 * thousands); own: bit i set when val[i] is an allocation of its own */
	char *block;
	uint8_t own;
};

int ck_pattern_compile(const char *text, struct ck_pattern *p, struct ck_err *err);
void ck_pattern_free(struct ck_pattern *p);
/* 1 on match (b filled: free with ck_binding_clear), 0 otherwise, -1 ENOMEM.
 * The first match in order of longest captures first; polynomial in the key
 * length and the pattern size (failed states are remembered once plain
 * backtracking has taken more than a few steps per byte). */
int ck_pattern_match(const struct ck_pattern *p, const char *key, struct ck_binding *b);
/* The same match without copying the captures: where capture `name` lies
 * in key (*pos, *len bytes). 1 when p matches key and binds name (name
 * NULL: when p matches key), 0 otherwise, -1 ENOMEM. */
int ck_pattern_match_at(const struct ck_pattern *p, const char *key, const char *name, size_t *pos,
			size_t *len);
/* 0 when key (len bytes) is too short for p or does not end with the text p
 * ends with: the first check of ck_pattern_match, which refuses most keys;
 * 1 when key may match. */
int ck_pattern_may_match(const struct ck_pattern *p, const char *key, size_t len);
/* Substitute b into p. Returns -1 with err naming the capture if unbound. */
int ck_pattern_subst(const struct ck_pattern *p, const struct ck_binding *b, char **out,
		     struct ck_err *err);
/* The same into buf (cap bytes) when the key fits there (*out == buf), else
 * into a new allocation: a plan builds a key per input of each instance. */
int ck_pattern_subst_in(const struct ck_pattern *p, const struct ck_binding *b, char *buf,
			size_t cap, char **out, struct ck_err *err);
int ck_pattern_has_capture(const struct ck_pattern *p, const char *name);
const char *ck_binding_get(const struct ck_binding *b, const char *name);
int ck_binding_set(struct ck_binding *b, const char *name, const char *val);
/* dst: src's captures plus name = val, all borrowed (src and val must
 * outlive it; never ck_binding_clear it). -1 when there is no room. */
int ck_binding_borrow(struct ck_binding *dst, const struct ck_binding *src, const char *name,
		      char *val);
void ck_binding_clear(struct ck_binding *b);

#endif
