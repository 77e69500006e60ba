#include "pattern.h"

#include "keyshape.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

void ck_pattern_free(struct ck_pattern *p)
{
	for (int i = 0; i < p->n; i++) {
		free(p->tok[i].lit);
		free(p->tok[i].name);
	}
	free(p->tok);
	free(p->text);
	memset(p, 0, sizeof *p);
}

static int add_tok(struct ck_pattern *p, char *lit, char *name, enum ck_cap_type t)
{
	struct ck_ptok *n = realloc(p->tok, (size_t)(p->n + 1) * sizeof *n);
	if (!n)
		return -1;
	p->tok = n;
	p->tok[p->n++] = (struct ck_ptok){lit, lit ? strlen(lit) : 0, name, t};
	p->min_len += lit ? strlen(lit) : 1;
	return 0;
}

/* The capture between '{' at s - 1 and '}' at e, the pattern's ncap-th:
 * its name (malloc'd) and type. 0, -ENOMEM, or -1 with err. */
static int capture(const char *text, const char *s, const char *e, int ncap, char **out,
		   enum ck_cap_type *t, struct ck_err *err)
{
	char *name = strndup(s, (size_t)(e - s));
	if (!name)
		return -ENOMEM;
	*t = CK_CAP_SEG;
	char *colon = strchr(name, ':');
	if (colon) {
		*colon = '\0';
		if (!strcmp(colon + 1, "int"))
			*t = CK_CAP_INT;
		else if (!strcmp(colon + 1, "path"))
			*t = CK_CAP_PATH;
		else {
			ck_fail(err, CK_E_MAPPING, "pattern \"%s\": unknown capture type \"%s\"", text,
				colon + 1);
			free(name);
			return -1;
		}
	}
	int ok = name[0] && (isalpha((unsigned char)name[0]) || name[0] == '_');
	for (char *c = name; *c && ok; c++)
		ok = isalnum((unsigned char)*c) || *c == '_';
	if (!ok || ncap > CK_MAX_CAPTURES) {
		ck_fail(err, CK_E_MAPPING,
			ok ? "pattern \"%s\": more than %d captures"
			   : "pattern \"%s\": capture names are identifiers (%d max)",
			text, CK_MAX_CAPTURES);
		free(name);
		return -1;
	}
	*out = name;
	return 0;
}

/* Whether to run literals_fit first: a pattern that starts with a path
 * capture ("{layer:path}.mlp.linear_fc1.weight") tries the capture at
 * every length a key allows, and most keys lack its later text; one that
 * starts with a literal is refused by its first compare anyway. */
static int literals_first(const struct ck_pattern *p)
{
	return p->n > 2 && !p->tok[0].lit && p->tok[0].type == CK_CAP_PATH;
}

int ck_pattern_compile(const char *text, struct ck_pattern *p, struct ck_err *err)
{
	memset(p, 0, sizeof *p);
	size_t len = strlen(text);
	char *lit = malloc(len + 1);
	size_t ll = 0;
	int ncap = 0;
	if (!lit || !(p->text = strdup(text)))
		goto nomem;
	for (const char *s = text; *s;) {
		if ((s[0] == '{' && s[1] == '{') || (s[0] == '}' && s[1] == '}')) {
			lit[ll++] = *s;
			s += 2;
			continue;
		}
		if (*s == '}') {
			ck_fail(err, CK_E_MAPPING, "pattern \"%s\": unmatched '}'", text);
			goto fail;
		}
		if (*s != '{') {
			lit[ll++] = *s++;
			continue;
		}
		const char *e = strchr(s, '}');
		if (!e) {
			ck_fail(err, CK_E_MAPPING, "pattern \"%s\": unterminated '{'", text);
			goto fail;
		}
		char *name;
		enum ck_cap_type t;
		int c = capture(text, s + 1, e, ++ncap, &name, &t, err);
		if (c == -ENOMEM)
			goto nomem;
		if (c < 0)
			goto fail;
		if (ll) {
			char *l = strndup(lit, ll);
			if (!l || add_tok(p, l, NULL, 0) < 0) {
				free(l);
				free(name);
				goto nomem;
			}
			ll = 0;
		} else if (p->n && !p->tok[p->n - 1].lit) {
			ck_fail(err, CK_E_MAPPING, "pattern \"%s\": two captures must be separated by "
					       "literal text", text);
			free(name);
			goto fail;
		}
		for (int k = 0; k < p->n; k++)
			if (!p->tok[k].lit && !strcmp(p->tok[k].name, name)) {
				/* a back-reference would make matching exponential */
				ck_fail(err, CK_E_MAPPING,
					"pattern \"%s\" names capture {%s} twice (a name is bound "
					"once)",
					text, name);
				free(name);
				goto fail;
			}
		if (add_tok(p, NULL, name, t) < 0) {
			free(name);
			goto nomem;
		}
		s = e + 1;
	}
	if (ll) {
		char *l = strndup(lit, ll);
		if (!l || add_tok(p, l, NULL, 0) < 0) {
			free(l);
			goto nomem;
		}
	}
	free(lit);
	p->shape_exact = ck_pattern_shape_exact(p);
	p->lit_filter = literals_first(p);
	return 0;
nomem:
	ck_fail_sys(err, ENOMEM, "pattern");
fail:
	free(lit);
	ck_pattern_free(p);
	return -1;
}

int ck_pattern_has_capture(const struct ck_pattern *p, const char *name)
{
	for (int i = 0; i < p->n; i++)
		if (!p->tok[i].lit && !strcmp(p->tok[i].name, name))
			return 1;
	return 0;
}

const char *ck_binding_get(const struct ck_binding *b, const char *name)
{
	/* the first byte first: capture names are short and mostly differ
	 * there, and a plan looks up hundreds of thousands */
	for (int i = 0; i < b->n; i++)
		if (b->name[i][0] == name[0] && !strcmp(b->name[i], name))
			return b->val[i];
	return NULL;
}

int ck_binding_borrow(struct ck_binding *dst, const struct ck_binding *src, const char *name,
		      char *val)
{
	*dst = *src;
	dst->block = NULL, dst->own = 0; /* owns nothing: clearing it frees nothing */
	for (int i = 0; i < dst->n; i++)
		if (!strcmp(dst->name[i], name)) {
			dst->val[i] = val;
			return 0;
		}
	if (dst->n == CK_MAX_CAPTURES)
		return -1;
	dst->name[dst->n] = name;
	dst->val[dst->n++] = val;
	return 0;
}

int ck_binding_set(struct ck_binding *b, const char *name, const char *val)
{
	for (int i = 0; i < b->n; i++)
		if (!strcmp(b->name[i], name)) {
			char *v = strdup(val);
			if (!v)
				return -1;
			if (b->own & (1u << i))
				free(b->val[i]);
			b->val[i] = v;
			b->own |= (uint8_t)(1u << i);
			return 0;
		}
	if (b->n == CK_MAX_CAPTURES)
		return -1;
	if (!(b->val[b->n] = strdup(val)))
		return -1;
	b->own |= (uint8_t)(1u << b->n);
	b->name[b->n++] = name;
	return 0;
}

void ck_binding_clear(struct ck_binding *b)
{
	for (int i = 0; i < b->n; i++)
		if (b->own & (1u << i))
			free(b->val[i]);
	free(b->block);
	b->block = NULL;
	b->own = 0;
	b->n = 0;
}

static int cap_char_ok(enum ck_cap_type t, char c)
{
	if (t == CK_CAP_INT)
		return c >= '0' && c <= '9';
	if (t == CK_CAP_SEG)
		return c != '.';
	return 1;
}

struct mstate {
	const struct ck_pattern *p;
	const char *key;
	size_t len;
	/* the captures bound so far, as spans of the key: nothing is copied
	 * until the whole key has matched */
	int n_cap;
	const char *cap_name[CK_MAX_CAPTURES];
	size_t cap_pos[CK_MAX_CAPTURES], cap_len[CK_MAX_CAPTURES];
	size_t steps, budget;
	uint8_t *failed; /* bit (ti, pos): tokens ti.. cannot match key+pos */
};

static int known_failed(const struct mstate *m, int ti, size_t pos)
{
	size_t bit = (size_t)ti * (m->len + 1) + pos;
	return m->failed && (m->failed[bit / 8] >> (bit % 8) & 1);
}

static int note_failed(struct mstate *m, int ti, size_t pos)
{
	if (m->failed) {
		size_t bit = (size_t)ti * (m->len + 1) + pos;
		m->failed[bit / 8] |= (uint8_t)(1u << (bit % 8));
	}
	return 0;
}

/* Backtracking matcher; captures are noted as spans as they bind. 1 match,
 * 0 none. A capture appears once in a pattern, so the outcome of (ti, pos)
 * does not depend on the bindings made before it: a failed state never needs
 * a second try. */
static int match_from(struct mstate *m, int ti, size_t pos)
{
	const struct ck_pattern *p = m->p;
	const char *s = m->key + pos;
	if (ti == p->n)
		return *s == '\0';
	if (known_failed(m, ti, pos))
		return 0;
	if (++m->steps > m->budget && !m->failed) {
		size_t bits = (size_t)(p->n + 1) * (m->len + 1);
		if (!(m->failed = calloc(bits / 8 + 1, 1)))
			return -1;
	}
	const struct ck_ptok *t = &p->tok[ti];
	if (t->lit) {
		if (m->len - pos < t->lit_len || memcmp(s, t->lit, t->lit_len) != 0)
			return 0;
		int r = match_from(m, ti + 1, pos + t->lit_len);
		return r ? r : note_failed(m, ti, pos);
	}
	size_t max = 0;
	while (s[max] && cap_char_ok(t->type, s[max]))
		max++;
	const char *next = ti + 1 < p->n ? p->tok[ti + 1].lit : NULL;
	for (size_t len = max; len >= 1; len--) {
		/* only lengths after which the next literal (or the end) follows */
		if (next ? s[len] != next[0] : (ti + 1 == p->n && s[len] != '\0'))
			continue;
		if (known_failed(m, ti + 1, pos + len))
			continue;
		if (m->n_cap == CK_MAX_CAPTURES)
			return -1;
		int k = m->n_cap++;
		m->cap_name[k] = t->name;
		m->cap_pos[k] = pos;
		m->cap_len[k] = len;
		int r = match_from(m, ti + 1, pos + len);
		if (r != 0)
			return r;
		m->n_cap = k;
	}
	return note_failed(m, ti, pos);
}

int ck_pattern_may_match(const struct ck_pattern *p, const char *key, size_t len)
{
	return len >= p->min_len &&
	       !(p->n && p->tok[p->n - 1].lit &&
		 memcmp(key + len - p->tok[p->n - 1].lit_len, p->tok[p->n - 1].lit,
			p->tok[p->n - 1].lit_len) != 0);
}

/* 0 when key cannot hold p's literals in order, a byte for each capture
 * around them: leftmost occurrences leave the most room after each, so a
 * key they do not fit fits no other way. */
static int literals_fit(const struct ck_pattern *p, const char *key, size_t len)
{
	size_t pos = 0;
	for (int i = 0; i < p->n; i++) {
		const struct ck_ptok *t = &p->tok[i];
		if (!t->lit) {
			pos++;
			continue;
		}
		if (pos > len)
			return 0;
		const char *at = memmem(key + pos, len - pos, t->lit, t->lit_len);
		if (!at || (i == 0 && at != key))
			return 0;
		pos = (size_t)(at - key) + t->lit_len;
	}
	return pos <= len;
}

/* Match key, its captures left as spans in m: 1, 0 or -1 as ck_pattern_match. */
static int match_spans(const struct ck_pattern *p, const char *key, struct mstate *m)
{
	size_t len = strlen(key);
	/* most keys are ruled out by the literal text the pattern ends with */
	if (!ck_pattern_may_match(p, key, len) || (p->lit_filter && !literals_fit(p, key, len)))
		return 0;
	/* the capture arrays are written before they are read */
	m->p = p, m->key = key, m->len = len, m->n_cap = 0, m->steps = 0, m->failed = NULL;
	/* plain backtracking first: almost every key settles in a few steps */
	m->budget = 4 * ((size_t)p->n + m->len) + 64;
	int r = match_from(m, 0, 0);
	free(m->failed);
	return r;
}

int ck_pattern_match_at(const struct ck_pattern *p, const char *key, const char *name, size_t *pos,
			size_t *len)
{
	struct mstate m;
	int r = match_spans(p, key, &m);
	for (int k = 0; r > 0 && name && k < m.n_cap; k++)
		if (!strcmp(m.cap_name[k], name)) {
			*pos = m.cap_pos[k];
			*len = m.cap_len[k];
			return 1;
		}
	return r > 0 && name ? 0 : r;
}

int ck_pattern_match(const struct ck_pattern *p, const char *key, struct ck_binding *b)
{
	b->n = 0, b->block = NULL, b->own = 0;
	struct mstate m;
	int r = match_spans(p, key, &m);
	if (r <= 0 || !m.n_cap)
		return r;
	size_t total = 0;
	for (int k = 0; k < m.n_cap; k++)
		total += m.cap_len[k] + 1;
	if (!(b->block = malloc(total)))
		return -1;
	char *o = b->block;
	for (int k = 0; k < m.n_cap; k++) {
		memcpy(o, key + m.cap_pos[k], m.cap_len[k]);
		o[m.cap_len[k]] = '\0';
		b->val[k] = o;
		b->name[k] = m.cap_name[k];
		o += m.cap_len[k] + 1;
	}
	b->n = m.n_cap;
	return r;
}

int ck_pattern_subst(const struct ck_pattern *p, const struct ck_binding *b, char **out,
		     struct ck_err *err)
{
	return ck_pattern_subst_in(p, b, NULL, 0, out, err);
}

int ck_pattern_subst_in(const struct ck_pattern *p, const struct ck_binding *b, char *buf,
			size_t cap, char **out, struct ck_err *err)
{
	/* each token's text and length once: keys are built per rule instance */
	const char *part[2 * CK_MAX_CAPTURES + 1];
	size_t plen[2 * CK_MAX_CAPTURES + 1], len = 1;
	int n = p->n;
	if (n > 2 * CK_MAX_CAPTURES + 1) /* compile allows no more: captures alternate with text */
		return ck_fail(err, CK_E_MAPPING, "pattern \"%s\": too many tokens", p->text);
	for (int i = 0; i < n; i++) {
		const char *v = p->tok[i].lit ? p->tok[i].lit : ck_binding_get(b, p->tok[i].name);
		if (!v)
			return ck_fail(err, CK_E_MAPPING, "pattern \"%s\": capture {%s} is not bound",
				       p->text, p->tok[i].name);
		part[i] = v;
		len += plen[i] = p->tok[i].lit ? p->tok[i].lit_len : strlen(v);
	}
	char *s = len <= cap ? buf : malloc(len), *o = s;
	if (!s)
		return ck_fail_sys(err, ENOMEM, "pattern");
	for (int i = 0; i < n; i++) {
		memcpy(o, part[i], plen[i]);
		o += plen[i];
	}
	*o = '\0';
	*out = s;
	return 0;
}
