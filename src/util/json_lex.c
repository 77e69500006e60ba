#include "json_lex.h"

#include "json_plain.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_NEST 1000 /* cJSON's nesting limit */


int ck_jlex_bad_byte(struct ck_jlex *p)
{
	const unsigned char *s = (const unsigned char *)p->s;
	if (p->i >= p->n)
		return 0;
	if (s[p->i] == 0)
		return ck_fail(p->err, CK_E_SOURCE, "%s: NUL byte at offset %zu", p->ctx, p->i);
	if (s[p->i] >= 0x80 && !ck_utf8_seq(s + p->i, p->n - p->i))
		return ck_fail(p->err, CK_E_SOURCE, "%s: invalid UTF-8 at offset %zu", p->ctx, p->i);
	return 0;
}

int ck_jlex_syntax(struct ck_jlex *p)
{
	if (ck_jlex_bad_byte(p) < 0)
		return -1;
	return ck_fail(p->err, CK_E_SOURCE, "%s: invalid JSON near offset %zu", p->ctx, p->i);
}

int ck_jlex_peek(struct ck_jlex *p, char c)
{
	ck_jlex_ws(p);
	return p->i < p->n && p->s[p->i] == c;
}

static int put(struct ck_jlex *p, const char *b, size_t k)
{
	if (p->str_len + k + 1 > p->str_cap) {
		size_t c = p->str_cap ? p->str_cap : 64;
		while (c < p->str_len + k + 1)
			c *= 2;
		char *ns = realloc(p->str, c);
		if (!ns)
			return ck_fail_sys(p->err, ENOMEM, "%s", p->what);
		p->str = ns;
		p->str_cap = c;
	}
	memcpy(p->str + p->str_len, b, k);
	p->str_len += k;
	p->str[p->str_len] = '\0';
	return 0;
}

static int hex4(struct ck_jlex *p, unsigned *v)
{
	if (p->n - p->i < 4)
		return -1;
	*v = 0;
	for (int k = 0; k < 4; k++) {
		char c = p->s[p->i++];
		*v <<= 4;
		if (c >= '0' && c <= '9')
			*v |= (unsigned)(c - '0');
		else if (c >= 'a' && c <= 'f')
			*v |= (unsigned)(c - 'a' + 10);
		else if (c >= 'A' && c <= 'F')
			*v |= (unsigned)(c - 'A' + 10);
		else
			return -1;
	}
	return 0;
}

/* A string at p->i (after whitespace) into p->str: escapes decoded, UTF-8
 * checked, control characters, NUL and "\u0000" refused. */
int ck_jlex_string(struct ck_jlex *p)
{
	ck_jlex_ws(p);
	if (p->i >= p->n || p->s[p->i] != '"')
		return ck_jlex_syntax(p);
	p->i++;
	p->str_len = 0; /* the first run's put terminates it, even when empty */
	for (;;) {
		size_t run = p->i;
		for (;;) { /* plain bytes and whole UTF-8 sequences */
			p->i += ck_json_plain_run(p->s + p->i, p->n - p->i);
			if (p->i >= p->n || (unsigned char)p->s[p->i] < 0x80)
				break;
			size_t l = ck_utf8_seq((const unsigned char *)p->s + p->i, p->n - p->i);
			if (!l)
				return ck_fail(p->err, CK_E_SOURCE, "%s: invalid UTF-8 at offset %zu",
					       p->ctx, p->i);
			p->i += l;
		}
		if (put(p, p->s + run, p->i - run) < 0)
			return -1;
		if (p->i >= p->n || (unsigned char)p->s[p->i] < 0x20)
			return ck_jlex_syntax(p);
		if (p->s[p->i++] == '"')
			return 0;
		if (p->i >= p->n)
			return ck_jlex_syntax(p);
		char e = p->s[p->i++], o[4], c;
		switch (e) {
		case '"': c = '"'; break;
		case '\\': c = '\\'; break;
		case '/': c = '/'; break;
		case 'b': c = '\b'; break;
		case 'f': c = '\f'; break;
		case 'n': c = '\n'; break;
		case 'r': c = '\r'; break;
		case 't': c = '\t'; break;
		case 'u': c = 0; break;
		default: /* found by fuzzing: "\<NUL>" once read past a table */
			p->i--; /* the error names the byte */
			return ck_jlex_syntax(p);
		}
		if (e != 'u') {
			if (put(p, &c, 1) < 0)
				return -1;
			continue;
		}
		unsigned cp, lo;
		size_t esc = p->i - 2;
		if (hex4(p, &cp) < 0)
			return ck_jlex_syntax(p);
		if (cp == 0)
			return ck_fail(p->err, CK_E_SOURCE,
				       "%s: string with \\u0000 at offset %zu (NUL would truncate the "
				       "name)",
				       p->ctx, esc);
		if (cp >= 0xD800 && cp <= 0xDBFF) { /* a surrogate pair */
			if (p->n - p->i < 2 || p->s[p->i] != '\\' || p->s[p->i + 1] != 'u')
				return ck_jlex_syntax(p);
			p->i += 2;
			if (hex4(p, &lo) < 0 || lo < 0xDC00 || lo > 0xDFFF)
				return ck_jlex_syntax(p);
			cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
		} else if (cp >= 0xDC00 && cp <= 0xDFFF) {
			return ck_jlex_syntax(p);
		}
		size_t k;
		if (cp < 0x80)
			o[0] = (char)cp, k = 1;
		else if (cp < 0x800)
			o[0] = (char)(0xC0 | cp >> 6), o[1] = (char)(0x80 | (cp & 0x3F)), k = 2;
		else if (cp < 0x10000)
			o[0] = (char)(0xE0 | cp >> 12), o[1] = (char)(0x80 | ((cp >> 6) & 0x3F)),
			o[2] = (char)(0x80 | (cp & 0x3F)), k = 3;
		else
			o[0] = (char)(0xF0 | cp >> 18), o[1] = (char)(0x80 | ((cp >> 12) & 0x3F)),
			o[2] = (char)(0x80 | ((cp >> 6) & 0x3F)), o[3] = (char)(0x80 | (cp & 0x3F)),
			k = 4;
		if (put(p, o, k) < 0)
			return -1;
	}
}

int ck_jlex_number_error(struct ck_jlex *p, size_t first, size_t k)
{
	const char *s = p->s;
	size_t start = first - (first > 0 && s[first - 1] == '-');
	if (s[first] == '0' && k - first > 1) {
		p->i = first + 1;
		return ck_jlex_syntax(p); /* leading zeros */
	}
	if (p->ints_only && k < p->n && (s[k] == '.' || s[k] == 'e' || s[k] == 'E'))
		return ck_fail(p->err, CK_E_SOURCE,
			       "%s: number at offset %zu is not an integer literal", p->ctx, start);
	return ck_fail(p->err, CK_E_SOURCE,
		       "%s: integer at offset %zu exceeds 2^53 and cannot be represented exactly",
		       p->ctx, start);
}

/* [v, v, ...] or {"k": v, ...}, values skipped */
static int skip_container(struct ck_jlex *p, char close, int depth)
{
	if (depth > MAX_NEST)
		return ck_jlex_syntax(p);
	if (ck_jlex_eat(p, close))
		return 0;
	do {
		if (close == '}' && ck_jlex_string(p) < 0)
			return -1;
		if (close == '}' && !ck_jlex_eat(p, ':'))
			return ck_jlex_syntax(p);
		if (ck_jlex_skip(p, depth + 1) < 0)
			return -1;
	} while (ck_jlex_eat(p, ','));
	return ck_jlex_eat(p, close) ? 0 : ck_jlex_syntax(p);
}

/* Any JSON number (with ints_only, an integer), consumed without its value:
 * -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? */
static int skip_number(struct ck_jlex *p)
{
	const char *s = p->s;
	size_t j = p->i, n = p->n;
	j += j < n && s[j] == '-';
	if (j >= n || s[j] < '0' || s[j] > '9')
		return ck_jlex_syntax(p);
	if (p->ints_only) {
		int64_t v;
		int isnum;
		return ck_jlex_int(p, &v, &isnum); /* a number: the digit is there */
	}
	if (s[j] == '0')
		j++;
	else
		while (j < n && s[j] >= '0' && s[j] <= '9')
			j++;
	if (j < n && s[j] == '.') {
		if (++j >= n || s[j] < '0' || s[j] > '9')
			return ck_jlex_syntax(p);
		while (j < n && s[j] >= '0' && s[j] <= '9')
			j++;
	}
	if (j < n && (s[j] == 'e' || s[j] == 'E')) {
		j++;
		j += j < n && (s[j] == '+' || s[j] == '-');
		if (j >= n || s[j] < '0' || s[j] > '9')
			return ck_jlex_syntax(p);
		while (j < n && s[j] >= '0' && s[j] <= '9')
			j++;
	}
	p->i = j;
	return 0;
}

int ck_jlex_skip(struct ck_jlex *p, int depth)
{
	ck_jlex_ws(p);
	if (p->i >= p->n)
		return ck_jlex_syntax(p);
	char c = p->s[p->i];
	if (c == '"')
		return ck_jlex_string(p);
	if (c == '{' || c == '[') {
		p->i++;
		return skip_container(p, c == '{' ? '}' : ']', depth);
	}
	static const char *const lit[] = {"true", "false", "null"};
	for (int k = 0; k < 3; k++) {
		size_t l = strlen(lit[k]);
		if (p->n - p->i >= l && !memcmp(p->s + p->i, lit[k], l)) {
			p->i += l;
			return 0;
		}
	}
	return skip_number(p);
}

int ck_jlex_key(struct ck_jlex *p, char **key)
{
	*key = NULL;
	if (ck_jlex_string(p) < 0)
		return -1;
	if (!(*key = strdup(p->str)))
		return ck_fail_sys(p->err, ENOMEM, "%s", p->what);
	if (ck_jlex_eat(p, ':'))
		return 0;
	free(*key);
	*key = NULL;
	return ck_jlex_syntax(p);
}

int ck_jlex_string_map(struct ck_jlex *p, int (*member)(void *ctx, char *key, const char *value),
		       void *ctx, const char *not_string)
{
	if (!ck_jlex_eat(p, '{'))
		return ck_jlex_syntax(p);
	if (ck_jlex_eat(p, '}'))
		return 0;
	do {
		char *key;
		if (ck_jlex_key(p, &key) < 0)
			return -1;
		if (!ck_jlex_peek(p, '"')) {
			if (ck_jlex_skip(p, 1) == 0) {
				char msg[sizeof p->err->msg];
				snprintf(msg, sizeof msg, not_string, key);
				ck_fail(p->err, CK_E_SOURCE, "%s: %s", p->what, msg);
			}
			free(key);
			return -1;
		}
		if (ck_jlex_string(p) < 0) {
			free(key);
			return -1;
		}
		if (member(ctx, key, p->str) < 0)
			return -1;
	} while (ck_jlex_eat(p, ','));
	return ck_jlex_eat(p, '}') ? 0 : ck_jlex_syntax(p);
}

void ck_jlex_free(struct ck_jlex *p)
{
	free(p->str);
	p->str = NULL;
	p->str_len = p->str_cap = 0;
}
