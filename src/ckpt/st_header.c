#include "st_header.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../util/json_strict.h"
#include "../util/strmap.h"

#define MAX_NEST 1000 /* cJSON's nesting limit */

struct p {
	const char *s;
	size_t n, i;
	const char *what;
	struct ck_err *err;
	char *str; /* the last string, decoded */
	size_t str_len, str_cap;
};

static int syntax(struct p *p)
{
	return ck_fail(p->err, CK_E_SOURCE, "%s: header: invalid JSON near offset %zu", p->what, p->i);
}

static void ws(struct p *p)
{
	while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' ||
			       p->s[p->i] == '\r'))
		p->i++;
}

static int eat(struct p *p, char c)
{
	ws(p);
	if (p->i < p->n && p->s[p->i] == c) {
		p->i++;
		return 1;
	}
	return 0;
}

static int put(struct p *p, const char *b, size_t k)
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

static int hex4(struct p *p, unsigned *v)
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

/* A string at p->i (after whitespace) into p->str. The scan has checked
 * UTF-8 and NUL; here: escapes and control characters. */
static int string(struct p *p)
{
	ws(p);
	if (p->i >= p->n || p->s[p->i] != '"')
		return syntax(p);
	p->i++;
	p->str_len = 0;
	if (put(p, "", 0) < 0)
		return -1;
	for (;;) {
		size_t run = p->i;
		while (p->i < p->n && p->s[p->i] != '"' && p->s[p->i] != '\\' &&
		       (unsigned char)p->s[p->i] >= 0x20)
			p->i++;
		if (put(p, p->s + run, p->i - run) < 0)
			return -1;
		if (p->i >= p->n || (unsigned char)p->s[p->i] < 0x20)
			return syntax(p);
		if (p->s[p->i++] == '"')
			return 0;
		if (p->i >= p->n)
			return syntax(p);
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
		default: return syntax(p); /* found by fuzzing: "\<NUL>" once read past a table */
		}
		if (e != 'u') {
			if (put(p, &c, 1) < 0)
				return -1;
			continue;
		}
		unsigned cp, lo;
		if (e != 'u' || hex4(p, &cp) < 0)
			return syntax(p);
		if (cp >= 0xD800 && cp <= 0xDBFF) { /* a surrogate pair */
			if (p->n - p->i < 2 || p->s[p->i] != '\\' || p->s[p->i + 1] != 'u')
				return syntax(p);
			p->i += 2;
			if (hex4(p, &lo) < 0 || lo < 0xDC00 || lo > 0xDFFF)
				return syntax(p);
			cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
		} else if (cp >= 0xDC00 && cp <= 0xDFFF) {
			return syntax(p);
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

/* An integer token (the scan allowed no other numbers); *is_num = 0 when the
 * value is not a number at all (the caller decides what that means). */
static int number(struct p *p, int64_t *v, int *is_num)
{
	ws(p);
	size_t j = p->i;
	int neg = j < p->n && p->s[j] == '-';
	j += (size_t)neg;
	if (j >= p->n || p->s[j] < '0' || p->s[j] > '9') {
		*is_num = 0;
		return 0;
	}
	if (p->s[j] == '0' && j + 1 < p->n && p->s[j + 1] >= '0' && p->s[j + 1] <= '9')
		return syntax(p); /* leading zeros */
	int64_t x = 0;
	while (j < p->n && p->s[j] >= '0' && p->s[j] <= '9')
		x = x * 10 + (p->s[j++] - '0'); /* at most 2^53: the scan said so */
	p->i = j;
	*v = neg ? -x : x;
	*is_num = 1;
	return 0;
}

static int skip_value(struct p *p, int depth);

/* [v, v, ...] or {"k": v, ...}, values skipped */
static int skip_container(struct p *p, char close, int depth)
{
	if (depth > MAX_NEST)
		return syntax(p);
	if (eat(p, close))
		return 0;
	do {
		if (close == '}' && (string(p) < 0 || !eat(p, ':')))
			return p->err->msg[0] ? -1 : syntax(p);
		if (skip_value(p, depth + 1) < 0)
			return -1;
	} while (eat(p, ','));
	return eat(p, close) ? 0 : syntax(p);
}

static int skip_value(struct p *p, int depth)
{
	ws(p);
	if (p->i >= p->n)
		return syntax(p);
	char c = p->s[p->i];
	if (c == '"')
		return string(p);
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
	int64_t v;
	int isnum;
	if (number(p, &v, &isnum) < 0)
		return -1;
	return isnum ? 0 : syntax(p);
}

/* What one tensor entry held, checked after its closing brace in the order
 * (and with the messages) of the schema. */
struct fields {
	int has_dt, has_shape, has_offs;
	int dt_string;
	char dt[32];
	int dt_long;
	int shape_list, shape_n, shape_bad; /* shape_bad: first bad index + 1 */
	int64_t shape[CK_MAX_DIMS];
	int offs_ok, offs_n, offs_bad;
	int64_t offs[2];
};

static int int_list(struct p *p, int64_t *out, int cap, int *n, int *bad)
{
	*n = 0;
	*bad = 0;
	if (eat(p, ']'))
		return 0;
	do {
		int64_t v;
		int isnum;
		size_t at = p->i;
		if (number(p, &v, &isnum) < 0)
			return -1;
		if (!isnum) {
			p->i = at;
			if (skip_value(p, 1) < 0)
				return -1;
		}
		if ((!isnum || v < 0) && !*bad)
			*bad = *n + 1;
		if (*n < cap && isnum)
			out[*n] = v;
		(*n)++;
	} while (eat(p, ','));
	return eat(p, ']') ? 0 : syntax(p);
}

/* An object member's key (into p->str) and its ':'. */
static int member_key(struct p *p)
{
	if (string(p) < 0)
		return -1;
	return eat(p, ':') ? 0 : syntax(p);
}

static int entry_fields(struct p *p, const char *key, struct fields *f)
{
	memset(f, 0, sizeof *f);
	if (eat(p, '}'))
		return 0;
	do {
		if (member_key(p) < 0)
			return -1;
		int which = !strcmp(p->str, "dtype")	     ? 1
			    : !strcmp(p->str, "shape")	     ? 2
			    : !strcmp(p->str, "data_offsets") ? 3
							      : 0;
		int *has = which == 1 ? &f->has_dt : which == 2 ? &f->has_shape : &f->has_offs;
		if (which && (*has)++)
			return ck_fail(p->err, CK_E_SOURCE, "%s: tensor \"%s\": duplicate field \"%s\"",
				       p->what, key, p->str);
		ws(p);
		char c = p->i < p->n ? p->s[p->i] : 0;
		if (which == 1 && c == '"') {
			if (string(p) < 0)
				return -1;
			f->dt_string = 1;
			f->dt_long = p->str_len >= sizeof f->dt;
			size_t k = f->dt_long ? sizeof f->dt - 1 : p->str_len; /* truncated copy */
			memcpy(f->dt, p->str, k);
			f->dt[k] = '\0';
		} else if ((which == 2 || which == 3) && c == '[') {
			p->i++;
			if (which == 2) {
				f->shape_list = 1;
				if (int_list(p, f->shape, CK_MAX_DIMS, &f->shape_n, &f->shape_bad) < 0)
					return -1;
			} else {
				f->offs_ok = 1;
				if (int_list(p, f->offs, 2, &f->offs_n, &f->offs_bad) < 0)
					return -1;
			}
		} else if (skip_value(p, 1) < 0) {
			return -1;
		}
	} while (eat(p, ','));
	return eat(p, '}') ? 0 : syntax(p);
}

/* The schema checks, in the order and words of the tree-based reader. */
static int check_entry(struct p *p, const char *key, const struct fields *f,
		       struct ck_tensor_info *t, struct ck_st_span *sp)
{
	const char *what = p->what;
	struct ck_err *err = p->err;
	if (!f->has_dt || !f->has_shape || !f->has_offs)
		return ck_fail(err, CK_E_SOURCE, "%s: tensor \"%s\": missing field \"%s\"", what, key,
			       !f->has_dt ? "dtype" : !f->has_shape ? "shape" : "data_offsets");
	if (!f->dt_string)
		return ck_fail(err, CK_E_SOURCE, "%s: tensor \"%s\": dtype is not a string", what, key);
	int subbyte;
	t->dtype = f->dt_long ? CK_DT_INVALID : ck_dtype_parse(f->dt, &subbyte);
	if (t->dtype == CK_DT_INVALID)
		return ck_fail(err, CK_E_SOURCE,
			       !f->dt_long && subbyte
				       ? "%s: tensor \"%s\": sub-byte dtype %s is not supported"
				       : "%s: tensor \"%s\": unknown dtype \"%s\"",
			       what, key, f->dt);
	if (!f->shape_list)
		return ck_fail(err, CK_E_SOURCE, "%s: tensor \"%s\": shape is not a list", what, key);
	if (f->shape_n > CK_MAX_DIMS)
		return ck_fail(err, CK_E_SOURCE,
			       "%s: tensor \"%s\": %d dimensions, more than the supported %d", what,
			       key, f->shape_n, CK_MAX_DIMS);
	if (f->shape_bad)
		return ck_fail(err, CK_E_SOURCE,
			       "%s: tensor \"%s\": shape[%d] is not a non-negative integer", what, key,
			       f->shape_bad - 1);
	t->ndim = f->shape_n;
	memcpy(t->shape, f->shape, sizeof t->shape);
	if (ck_shape_numel(t->shape, t->ndim, &t->numel) < 0 ||
	    ck_shape_bytes(t->shape, t->ndim, t->dtype, &t->nbytes) < 0)
		return ck_fail(err, CK_E_SOURCE, "%s: tensor \"%s\": shape product overflows 64 bits",
			       what, key);
	if (!f->offs_ok || f->offs_n != 2)
		return ck_fail(err, CK_E_SOURCE,
			       "%s: tensor \"%s\": data_offsets is not a list of two integers", what,
			       key);
	if (f->offs_bad)
		return ck_fail(err, CK_E_SOURCE,
			       "%s: tensor \"%s\": data_offsets are not non-negative integers", what,
			       key);
	int64_t b = f->offs[0], en = f->offs[1];
	if (en < b)
		return ck_fail(err, CK_E_SOURCE,
			       "%s: tensor \"%s\": data_offsets end %lld before begin %lld", what, key,
			       (long long)en, (long long)b);
	if ((uint64_t)(en - b) != t->nbytes)
		return ck_fail(err, CK_E_SOURCE,
			       "%s: tensor \"%s\": data_offsets span %lld bytes but %s%s needs %llu",
			       what, key, (long long)(en - b), ck_dtype_name(t->dtype),
			       t->ndim ? " of that shape" : " scalar", (unsigned long long)t->nbytes);
	sp->begin = (uint64_t)b;
	sp->end = (uint64_t)en;
	return 0;
}

static int metadata(struct p *p, struct ck_file_tensors *h, size_t *cap)
{
	ws(p);
	if (p->i >= p->n || p->s[p->i] != '{') {
		if (skip_value(p, 1) < 0)
			return -1;
		return ck_fail(p->err, CK_E_SOURCE, "%s: __metadata__ must be an object of strings",
			       p->what);
	}
	p->i++;
	if (eat(p, '}'))
		return 0;
	do {
		if (string(p) < 0)
			return -1;
		char *key = strdup(p->str);
		if (!key)
			return ck_fail_sys(p->err, ENOMEM, "%s", p->what);
		ws(p);
		if (!eat(p, ':')) {
			free(key);
			return syntax(p);
		}
		ws(p);
		if (p->i >= p->n || p->s[p->i] != '"') {
			int r = skip_value(p, 1);
			if (r == 0)
				ck_fail(p->err, CK_E_SOURCE,
					"%s: __metadata__ value for \"%s\" is not a string", p->what, key);
			free(key);
			return -1;
		}
		char *val = string(p) == 0 ? strdup(p->str) : NULL;
		if (!val) {
			free(key);
			return p->err->msg[0] ? -1 : ck_fail_sys(p->err, ENOMEM, "%s", p->what);
		}
		if (h->n_meta == *cap) {
			size_t c = *cap ? 2 * *cap : 8;
			struct ck_file_meta *nm = realloc(h->meta, c * sizeof *nm);
			if (!nm) {
				free(key);
				free(val);
				return ck_fail_sys(p->err, ENOMEM, "%s", p->what);
			}
			h->meta = nm;
			*cap = c;
		}
		h->meta[h->n_meta].key = key;
		h->meta[h->n_meta++].value = val;
	} while (eat(p, ','));
	return eat(p, '}') ? 0 : syntax(p);
}

/* One tensor entry, its key just read (p->str): a new slot in h and
 * *spans (capacity *cap), the key unique, the value an object of fields. */
static int tensor_entry(struct p *p, struct ck_file_tensors *h, struct ck_st_span **spans,
			size_t *cap, struct ck_strmap *seen)
{
	const char *what = p->what;
	struct ck_err *err = p->err;
	if (h->n_tensors == *cap) {
		size_t c = *cap ? 2 * *cap : 64;
		struct ck_tensor_info *nt = realloc(h->tensors, c * sizeof *nt);
		struct ck_st_span *ns = nt ? realloc(*spans, c * sizeof *ns) : NULL;
		if (nt)
			h->tensors = nt;
		if (!ns)
			return ck_fail_sys(err, ENOMEM, "%s", what);
		*spans = ns;
		*cap = c;
	}
	struct ck_tensor_info *t = &h->tensors[h->n_tensors];
	memset(t, 0, sizeof *t);
	if (!(t->name = strdup(p->str)))
		return ck_fail_sys(err, ENOMEM, "%s", what);
	h->n_tensors++;
	int r = ck_strmap_put(seen, t->name, 0, NULL);
	if (r < 0)
		return ck_fail_sys(err, ENOMEM, "%s", what);
	if (r > 0)
		return ck_fail(err, CK_E_SOURCE, "%s: duplicate key \"%s\"", what, t->name);
	ws(p);
	if (p->i >= p->n || p->s[p->i] != '{') {
		if (skip_value(p, 1) == 0)
			ck_fail(err, CK_E_SOURCE, "%s: tensor \"%s\": entry is not an object", what,
				t->name);
		return -1;
	}
	p->i++;
	struct fields f;
	if (entry_fields(p, t->name, &f) < 0 ||
	    check_entry(p, t->name, &f, t, &(*spans)[h->n_tensors - 1]) < 0)
		return -1;
	return 0;
}

/* The header object's members: "__metadata__" once, tensor entries. */
static int header_members(struct p *p, struct ck_file_tensors *h, struct ck_st_span **spans,
			  struct ck_strmap *seen)
{
	size_t cap = 0, mcap = 0;
	int have_meta = 0;
	if (eat(p, '}'))
		return 0;
	do {
		if (member_key(p) < 0)
			return -1;
		if (!strcmp(p->str, "__metadata__")) {
			if (have_meta++)
				return ck_fail(p->err, CK_E_SOURCE, "%s: duplicate key \"__metadata__\"",
					       p->what);
			if (metadata(p, h, &mcap) < 0)
				return -1;
		} else if (tensor_entry(p, h, spans, &cap, seen) < 0) {
			return -1;
		}
	} while (eat(p, ','));
	if (!eat(p, '}'))
		return syntax(p);
	return 0;
}

int ck_st_header_json(const char *json, size_t n, const char *what, struct ck_file_tensors *h,
		      struct ck_st_span **spans, struct ck_err *err)
{
	char ctx[600];
	snprintf(ctx, sizeof ctx, "%s: header", what);
	*spans = NULL;
	/* UTF-8, NUL bytes, \u0000, integer-only numbers: the shared raw scan */
	if (ck_json_scan(json, n, CK_JSON_INTEGERS_ONLY, CK_E_SOURCE, ctx, err) < 0)
		return -1;
	struct p p = {json, n, 0, what, err, NULL, 0, 0};
	err->msg[0] = '\0';
	struct ck_strmap seen = {0};
	int rc = -1;
	if (ck_strmap_init(&seen, 64) < 0) {
		ck_fail_sys(err, ENOMEM, "%s", what);
		goto out;
	}
	ws(&p);
	if (p.i >= n || json[p.i] != '{') {
		if (skip_value(&p, 0) == 0) {
			ws(&p);
			ck_fail(err, CK_E_SOURCE,
				p.i == n ? "%s: header is not a JSON object"
					 : "%s: header: trailing data after the JSON value at offset %zu",
				what, p.i);
		}
		goto out;
	}
	p.i++;
	if (header_members(&p, h, spans, &seen) < 0)
		goto out;
	ws(&p);
	if (p.i != n) {
		ck_fail(err, CK_E_SOURCE, "%s: header: trailing data after the JSON value at offset %zu",
			what, p.i);
		goto out;
	}
	rc = 0;
out:
	ck_strmap_free(&seen);
	free(p.str);
	return rc;
}
