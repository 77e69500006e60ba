#include "st_header.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../util/json_lex.h"
#include "../util/stream_read.h"
#include "../util/strmap.h"

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

/* The usual list, as writers put it ("[4096,11008]", after the '['):
 * integers of 1 to 15 digits (below 2^53), no sign, no leading zero, a ','
 * or the ']' right after each. Read in one pass (the general reader below
 * was 6% of planning a 100k-key checkpoint); anything else (spaces, a sign,
 * a 16th digit, a fraction, another kind of value) is left, from the '[',
 * to the general reader, which makes every check. 1: read whole. */
static int compact_ints(struct ck_jlex *p, int64_t *out, int cap, int *n)
{
	const char *s = p->s;
	size_t j = p->i, end = p->n;
	int k = 0;
	if (j < end && s[j] == ']') {
		p->i = j + 1;
		return 1;
	}
	for (;;) {
		size_t first = j;
		uint64_t x = 0;
		while (j < end && j - first < 15 && (unsigned)(s[j] - '0') < 10)
			x = x * 10 + (uint64_t)(s[j++] - '0');
		if (j == first || j >= end || (s[first] == '0' && j - first > 1))
			return 0;
		char c = s[j++];
		if (c != ',' && c != ']')
			return 0;
		if (k < cap)
			out[k] = (int64_t)x;
		k++;
		if (c == ']') {
			p->i = j;
			*n = k;
			return 1;
		}
	}
}

static int int_list(struct ck_jlex *p, int64_t *out, int cap, int *n, int *bad)
{
	*n = 0;
	*bad = 0;
	if (compact_ints(p, out, cap, n))
		return 0;
	if (ck_jlex_eat(p, ']'))
		return 0;
	do {
		int64_t v;
		int isnum;
		size_t at = p->i;
		if (ck_jlex_int(p, &v, &isnum) < 0)
			return -1;
		if (!isnum) {
			p->i = at;
			if (ck_jlex_skip(p, 1) < 0)
				return -1;
		}
		if ((!isnum || v < 0) && !*bad)
			*bad = *n + 1;
		if (*n < cap && isnum)
			out[*n] = v;
		(*n)++;
	} while (ck_jlex_eat(p, ','));
	return ck_jlex_eat(p, ']') ? 0 : ck_jlex_syntax(p);
}

/* An object member's key (into p->str) and its ':'. */
static int member_key(struct ck_jlex *p)
{
	if (ck_jlex_string(p) < 0)
		return -1;
	return ck_jlex_eat(p, ':') ? 0 : ck_jlex_syntax(p);
}

static const char *const field_name[] = {NULL, "dtype", "shape", "data_offsets"};

/* The next member's key and its ':': 1 dtype, 2 shape, 3 data_offsets, 0
 * another name (then in p->str). The three names are matched in the raw
 * text first, where they are written without escapes, as every writer does:
 * lexing 300,000 of them as strings was 4% of planning a 100k-key header.
 * Any other spelling ("dt\u0079pe") is read as a string and compared. */
static int field_key(struct ck_jlex *p)
{
	static const size_t len[] = {0, 5, 5, 12};
	ck_jlex_ws(p);
	const char *s = p->s + p->i;
	size_t left = p->n - p->i;
	int which = 0;
	if (left >= 8 && s[0] == '"') /* the shortest, "dtype" and its ':', is 8 bytes */
		which = s[1] == 's' ? 2 : s[1] == 'd' ? (s[2] == 't' ? 1 : 3) : 0;
	if (which && left > len[which] + 1 && !memcmp(s + 1, field_name[which], len[which]) &&
	    s[len[which] + 1] == '"') {
		p->i += len[which] + 2;
	} else {
		if (ck_jlex_string(p) < 0)
			return -1;
		which = 0;
		for (int k = 1; k <= 3; k++) /* a read string holds no NUL: its length is exact */
			if (p->str_len == len[k] && !memcmp(p->str, field_name[k], len[k]))
				which = k;
	}
	return ck_jlex_eat(p, ':') ? which : ck_jlex_syntax(p);
}

static int entry_fields(struct ck_jlex *p, const char *key, struct fields *f)
{
	memset(f, 0, sizeof *f);
	if (ck_jlex_eat(p, '}'))
		return 0;
	do {
		int which = field_key(p);
		if (which < 0)
			return -1;
		int *has = which == 1 ? &f->has_dt : which == 2 ? &f->has_shape : &f->has_offs;
		if (which && (*has)++)
			return ck_fail(p->err, CK_E_SOURCE, "%s: tensor \"%s\": duplicate field \"%s\"",
				       p->what, key, field_name[which]);
		ck_jlex_ws(p);
		char c = p->i < p->n ? p->s[p->i] : 0;
		if (which == 1 && c == '"') {
			if (ck_jlex_string(p) < 0)
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
		} else if (ck_jlex_skip(p, 1) < 0) {
			return -1;
		}
	} while (ck_jlex_eat(p, ','));
	return ck_jlex_eat(p, '}') ? 0 : ck_jlex_syntax(p);
}

/* The schema checks, in the order and words of the tree-based reader. */
static int check_entry(struct ck_jlex *p, const char *key, const struct fields *f,
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

struct meta_ctx {
	struct ck_jlex *p;
	struct ck_file_tensors *h;
	size_t *cap;
};

static int meta_member(void *vc, char *key, const char *value)
{
	struct meta_ctx *c = vc;
	struct ck_file_tensors *h = c->h;
	char *val = strdup(value);
	if (val && h->n_meta == *c->cap) {
		size_t n = *c->cap ? 2 * *c->cap : 8;
		struct ck_file_meta *nm = realloc(h->meta, n * sizeof *nm);
		if (nm)
			h->meta = nm, *c->cap = n;
		else
			free(val), val = NULL;
	}
	if (!val) {
		free(key);
		return ck_fail_sys(c->p->err, ENOMEM, "%s", c->p->what);
	}
	h->meta[h->n_meta].key = key;
	h->meta[h->n_meta++].value = val;
	return 0;
}

static int metadata(struct ck_jlex *p, struct ck_file_tensors *h, size_t *cap)
{
	if (!ck_jlex_peek(p, '{')) {
		if (ck_jlex_skip(p, 1) < 0)
			return -1;
		return ck_fail(p->err, CK_E_SOURCE, "%s: __metadata__ must be an object of strings",
			       p->what);
	}
	struct meta_ctx c = {p, h, cap};
	return ck_jlex_string_map(p, meta_member, &c,
				  "__metadata__ value for \"%s\" is not a string");
}

/* One tensor entry, its key just read (p->str): a new slot in h and
 * *spans (capacity *cap), the key unique, the value an object of fields. */
static int tensor_entry(struct ck_jlex *p, struct ck_file_tensors *h, struct ck_st_span **spans,
			size_t *cap, struct ck_strmap *seen)
{
	const char *what = p->what;
	struct ck_err *err = p->err;
	if (h->n_tensors == *cap) {
		/* first sized for the header at 100 bytes an entry (writers put 100
		 * to 130): a 100,000-key header's array is not regrown and copied
		 * a dozen times, each time into memory never touched before */
		size_t c = *cap ? 2 * *cap : p->n / 100 + 64;
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
	/* a read string holds no NUL: its length is exact */
	if (!(t->name = ck_strpool_add(&h->names, p->str, p->str_len)))
		return ck_fail_sys(err, ENOMEM, "%s", what);
	h->n_tensors++;
	int r = seen ? ck_strmap_put(seen, t->name, 0, NULL) : 0;
	if (r < 0)
		return ck_fail_sys(err, ENOMEM, "%s", what);
	if (r > 0)
		return ck_fail(err, CK_E_SOURCE, "%s: duplicate key \"%s\"", what, t->name);
	if (!ck_jlex_peek(p, '{')) {
		if (ck_jlex_skip(p, 1) == 0)
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

/* When the text arrives as it is read (in), a member is read once in->ahead
 * bytes past its start are in (64 KiB; a tensor entry is 100-130 bytes). A
 * longer member, or anything else that reaches the end of what is in,
 * fails as the end of the text would (inside the object every value is
 * followed by more), so no parse succeeds on less than the whole text; the
 * caller decides a failed parse again on the whole text. */
static void more_text(struct ck_jlex *p, struct ck_stream_read *in, size_t total)
{
	if (in && p->n < total && p->n - p->i < in->ahead)
		p->n = (size_t)ck_stream_read_wait(in, (uint64_t)p->i + in->ahead);
}

/* The header object's members: "__metadata__" once, tensor entries. */
static int header_members(struct ck_jlex *p, struct ck_stream_read *in, size_t total,
			  struct ck_file_tensors *h, struct ck_st_span **spans,
			  struct ck_strmap *seen)
{
	size_t cap = 0, mcap = 0;
	int have_meta = 0;
	if (ck_jlex_eat(p, '}'))
		return 0;
	do {
		more_text(p, in, total);
		if (member_key(p) < 0)
			return -1;
		if (p->str_len == 12 && !memcmp(p->str, "__metadata__", 12)) {
			if (have_meta++)
				return ck_fail(p->err, CK_E_SOURCE, "%s: duplicate key \"__metadata__\"",
					       p->what);
			if (metadata(p, h, &mcap) < 0)
				return -1;
		} else if (tensor_entry(p, h, spans, &cap, seen) < 0) {
			return -1;
		}
	} while (ck_jlex_eat(p, ','));
	if (!ck_jlex_eat(p, '}'))
		return ck_jlex_syntax(p);
	return 0;
}

int ck_st_header_json(const char *json, size_t n, struct ck_stream_read *in, const char *what,
		      int unique, struct ck_file_tensors *h, struct ck_st_span **spans,
		      struct ck_err *err)
{
	char ctx[600];
	snprintf(ctx, sizeof ctx, "%s: header", what);
	*spans = NULL;
	/* UTF-8, NUL bytes, \u0000 and integer-only numbers are the reader's
	 * own checks: the text is walked once */
	struct ck_jlex p = {.s = json, .n = n, .what = what, .ctx = ctx, .err = err, .ints_only = 1};
	if (in)
		p.n = 0, more_text(&p, in, n);
	err->msg[0] = '\0';
	struct ck_strmap seen = {0};
	int rc = -1;
	/* sized from the header (an entry takes 50 bytes or more), so a
	 * 100,000-key file is not rehashed a dozen times on the way up */
	if (unique && ck_strmap_init(&seen, n / 64 < (1u << 20) ? n / 64 : (1u << 20)) < 0) {
		ck_fail_sys(err, ENOMEM, "%s", what);
		goto out;
	}
	if (!ck_jlex_peek(&p, '{')) {
		if (ck_jlex_skip(&p, 0) < 0)
			goto out;
		ck_jlex_ws(&p);
		if (ck_jlex_bad_byte(&p) == 0)
			ck_fail(err, CK_E_SOURCE,
				p.i == n ? "%s: header is not a JSON object"
					 : "%s: header: trailing data after the JSON value at offset %zu",
				what, p.i);
		goto out;
	}
	p.i++;
	if (header_members(&p, in, n, h, spans, unique ? &seen : NULL) < 0)
		goto out;
	if (in) /* the rest: whitespace, which must end the text */
		p.n = (size_t)ck_stream_read_wait(in, n);
	ck_jlex_ws(&p);
	if (p.i != n) {
		if (ck_jlex_bad_byte(&p) == 0)
			ck_fail(err, CK_E_SOURCE,
				"%s: header: trailing data after the JSON value at offset %zu", what,
				p.i);
		goto out;
	}
	rc = 0;
out:
	ck_strmap_free(&seen);
	ck_jlex_free(&p);
	return rc;
}
