/* A strict streaming JSON reader for large documents read once (safetensors
 * headers, weight-map indexes): values are read in place or skipped, no tree
 * is built. It refuses by itself what cJSON would let through (the checks of
 * ck_json_scan, made as the bytes are read, so the text is walked once):
 * invalid UTF-8, NUL bytes, "\u0000" in a string, and with ints_only any
 * number that is not an integer literal of at most 2^53. Everything it
 * accepts was looked at by one of those rules: a document is accepted only
 * when it was read to its end. Errors go to err; a syntax error reads
 * "CTX: invalid JSON near offset N". */
#ifndef CK_JSON_LEX_H
#define CK_JSON_LEX_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

struct ck_jlex {
	const char *s;
	size_t n, i;	  /* text, length, position */
	const char *what; /* the document, for the caller's messages */
	const char *ctx;  /* prefix of syntax errors */
	struct ck_err *err;
	char *str; /* the last string read, decoded and NUL-terminated */
	size_t str_len, str_cap;
	int ints_only; /* numbers: integer literals, |v| <= 2^53 */
};

int ck_jlex_syntax(struct ck_jlex *p); /* -1, err set */
/* -1 with the scan's message ("NUL byte", "invalid UTF-8") when the byte at
 * p->i is one the scan refuses, else 0: for errors at an unexpected byte, so
 * they name what is wrong with it. */
int ck_jlex_bad_byte(struct ck_jlex *p);

/* Inline: a 100k-key header calls these a few million times, and as calls
 * they were 5% of planning over it. */
static inline void ck_jlex_ws(struct ck_jlex *p)
{
	for (; p->i < p->n; p->i++) {
		char c = p->s[p->i];
		if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
			return;
	}
}

/* 1 and consumed when the next token (after whitespace) is c */
static inline int ck_jlex_eat(struct ck_jlex *p, char c)
{
	ck_jlex_ws(p);
	if (p->i < p->n && p->s[p->i] == c) {
		p->i++;
		return 1;
	}
	return 0;
}
/* 1 when the next token (after whitespace) is c, not consumed */
int ck_jlex_peek(struct ck_jlex *p, char c);
/* The string at p->i (after whitespace) into p->str. 0 or -1. */
int ck_jlex_string(struct ck_jlex *p);
/* An object member's key, copied (*key: free it), and its ':'. 0 or -1. */
int ck_jlex_key(struct ck_jlex *p, char **key);
/* An object whose values must all be strings, its '{' next: member(ctx,
 * key, value) for each, the key handed over (member frees it, also when it
 * fails; value is p->str). A value of another kind fails with
 * "WHAT: " not_string, not_string a format taking the key. 0 or -1. */
int ck_jlex_string_map(struct ck_jlex *p, int (*member)(void *ctx, char *key, const char *value),
		       void *ctx, const char *not_string);
/* The error of the number whose digits (after any '-') run first..k:
 * leading zeros, a fraction or exponent with ints_only, or above 2^53. -1. */
int ck_jlex_number_error(struct ck_jlex *p, size_t first, size_t k);

/* An integer, |v| <= 2^53 (a fraction or exponent fails with ints_only);
 * *is_num = 0, nothing consumed, when the next value is not a number. 0 or
 * -1. Inline, like the steps above: a 100k-key header holds 500k numbers. */
static inline int ck_jlex_int(struct ck_jlex *p, int64_t *v, int *is_num)
{
	ck_jlex_ws(p);
	const char *s = p->s;
	size_t j = p->i, n = p->n;
	int neg = j < n && s[j] == '-';
	j += (size_t)neg;
	if (j >= n || (unsigned)(s[j] - '0') > 9) {
		*is_num = 0;
		return 0;
	}
	/* 16 digits cannot wrap 64 bits, and a longer run (whose value
	 * wrapped, harmlessly: unsigned) is too big anyway */
	size_t first = j;
	uint64_t x = 0;
	while (j < n && (unsigned)(s[j] - '0') < 10)
		x = x * 10 + (uint64_t)(s[j++] - '0');
	if ((s[first] == '0' && j - first > 1) || j - first > 16 || x > ((uint64_t)1 << 53) ||
	    (p->ints_only && j < n && (s[j] == '.' || (s[j] | 0x20) == 'e'))) {
		ck_jlex_number_error(p, first, j);
		return -1;
	}
	p->i = j;
	*v = neg ? -(int64_t)x : (int64_t)x;
	*is_num = 1;
	return 0;
}
/* Skip one value of any kind; depth: the nesting so far (1000 at most). */
int ck_jlex_skip(struct ck_jlex *p, int depth);
void ck_jlex_free(struct ck_jlex *p);

#endif
