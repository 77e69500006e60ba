#include "gguf_kv.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* GGUF's value types */
enum { G_U8, G_I8, G_U16, G_I16, G_U32, G_I32, G_F32, G_BOOL, G_STR, G_ARR, G_U64, G_I64, G_F64 };

static const char *type_name(uint32_t t)
{
	static const char *const n[] = {"u8",	"i8",	  "u16",   "i16", "u32", "i32", "f32",
					"bool", "string", "array", "u64", "i64", "f64"};
	return t < sizeof n / sizeof *n ? n[t] : "an unknown type";
}

static int bad(const char *arg, const char *why, struct ck_err *err)
{
	return ck_fail(err, CK_E_USAGE, "--gguf-override-kv \"%s\": %s", arg, why);
}

static int parse_value(const char *arg, const char *v, struct ck_gguf_kv_set *kv,
		       struct ck_err *err)
{
	char *end;
	if (kv->tag == 'i') { /* digits only: llama-quantize's atol would take "-5" as 5 */
		errno = 0;
		unsigned long long u = strtoull(v, &end, 10);
		if (!*v || *v < '0' || *v > '9' || *end || errno || u > UINT32_MAX)
			return bad(arg, "int: a whole number from 0 to 4294967295 (written as u32)",
				   err);
		kv->u = (uint32_t)u;
	} else if (kv->tag == 'f') {
		errno = 0;
		double d = strtod(v, &end);
		if (!*v || *end || errno || !isfinite((float)d))
			return bad(arg, "float: a number that is finite in F32", err);
		kv->f = (float)d;
	} else if (kv->tag == 'b') {
		if (strcmp(v, "true") && strcmp(v, "false"))
			return bad(arg, "bool: true or false", err);
		kv->b = !strcmp(v, "true");
	} else {
		if (strlen(v) > 127)
			return bad(arg, "str: 127 bytes at most (llama-quantize's limit)", err);
		memcpy(kv->s, v, strlen(v) + 1);
	}
	return 0;
}

int ck_gguf_kv_parse(const char *arg, struct ck_gguf_kv_set *kv, struct ck_err *err)
{
	memset(kv, 0, sizeof *kv);
	const char *eq = strchr(arg, '=');
	if (!eq || eq == arg || eq - arg > 127)
		return bad(arg, "KEY=TYPE:VALUE, a key of 1 to 127 bytes", err);
	memcpy(kv->key, arg, (size_t)(eq - arg));
	static const struct {
		const char *prefix;
		char tag;
	} T[] = {{"int:", 'i'}, {"float:", 'f'}, {"bool:", 'b'}, {"str:", 's'}};
	for (size_t k = 0; k < sizeof T / sizeof *T; k++) {
		size_t n = strlen(T[k].prefix);
		if (!strncmp(eq + 1, T[k].prefix, n)) {
			kv->tag = T[k].tag;
			return parse_value(arg, eq + 1 + n, kv, err);
		}
	}
	return bad(arg, "TYPE is int, float, bool or str", err);
}

/* A cursor over m's records; every length checked against the buffer. */
struct rec {
	size_t start, end; /* the record */
	size_t val;	   /* its value */
	const char *key;
	size_t klen;
	uint32_t type;
};

static int get(const struct ck_gguf_meta *m, size_t at, size_t n, uint64_t *v)
{
	if (at > m->b.n || m->b.n - at < n)
		return -1;
	*v = 0;
	for (size_t i = 0; i < n; i++)
		*v |= (uint64_t)m->b.p[at + i] << (8 * i);
	return 0;
}

/* The bytes of one value of type t at `at`, or 0 if it runs past m. */
static size_t value_len(const struct ck_gguf_meta *m, size_t at, uint32_t t, int depth)
{
	static const unsigned char fixed[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
	uint64_t n, et;
	if (t < sizeof fixed && fixed[t])
		return get(m, at, fixed[t], &n) < 0 ? 0 : fixed[t];
	if (t == G_STR)
		return get(m, at, 8, &n) < 0 || n > m->b.n - at - 8 ? 0 : (size_t)n + 8;
	if (t != G_ARR || depth > 1 || get(m, at, 4, &et) < 0 || get(m, at + 4, 8, &n) < 0)
		return 0;
	size_t len = 12;
	for (uint64_t i = 0; i < n; i++) {
		size_t e = value_len(m, at + len, (uint32_t)et, depth + 1);
		if (!e)
			return 0;
		len += e;
	}
	return len;
}

/* The record at r->start; -1 if it runs past m (not one the view wrote). */
static int read_rec(const struct ck_gguf_meta *m, struct rec *r)
{
	uint64_t kl, t;
	if (get(m, r->start, 8, &kl) < 0 || kl > m->b.n - r->start - 8 ||
	    get(m, r->start + 8 + (size_t)kl, 4, &t) < 0)
		return -1;
	r->key = (const char *)m->b.p + r->start + 8;
	r->klen = (size_t)kl;
	r->type = (uint32_t)t;
	r->val = r->start + 12 + (size_t)kl;
	size_t vl = value_len(m, r->val, r->type, 0);
	if (!vl)
		return -1;
	r->end = r->val + vl;
	return 0;
}

/* key's record in m: 1 (and *r), 0 when m has none, -1 when m is torn (a
 * record past the end, or bytes after the last). */
static int find(const struct ck_gguf_meta *m, const char *key, struct rec *r)
{
	r->start = 0;
	for (uint64_t i = 0; i < m->n; i++, r->start = r->end) {
		if (read_rec(m, r) < 0)
			return -1;
		if (r->klen == strlen(key) && !memcmp(r->key, key, r->klen))
			return 1;
	}
	return r->start == m->b.n ? 0 : -1;
}

int ck_gguf_meta_number(const struct ck_gguf_meta *m, const char *key, double *out)
{
	struct rec r;
	uint64_t v = 0;
	if (find(m, key, &r) != 1 || r.type == G_STR || r.type == G_ARR || r.type > G_F64 ||
	    get(m, r.val, value_len(m, r.val, r.type, 0), &v) < 0)
		return 0;
	float f;
	double d;
	uint32_t v32 = (uint32_t)v;
	switch (r.type) {
	case G_I8: *out = (int8_t)v; break;
	case G_I16: *out = (int16_t)v; break;
	case G_I32: *out = (int32_t)v32; break;
	case G_I64: *out = (double)(int64_t)v; break;
	case G_F32: memcpy(&f, &v32, 4), *out = f; break;
	case G_F64: memcpy(&d, &v, 8), *out = d; break;
	default: *out = (double)v; break;
	}
	return 1;
}

/* The GGUF type an override is written as (int: u32, as llama-quantize). */
static uint32_t type_of(const struct ck_gguf_kv_set *kv)
{
	return kv->tag == 'i' ? G_U32 : kv->tag == 'f' ? G_F32 : kv->tag == 'b' ? G_BOOL : G_STR;
}

static void put_record(struct ck_buf *b, const struct ck_gguf_kv_set *kv)
{
	size_t kl = strlen(kv->key);
	ck_buf_le(b, kl, 8);
	ck_buf_put(b, kv->key, kl);
	ck_buf_le(b, type_of(kv), 4);
	uint32_t bits;
	switch (kv->tag) {
	case 'i': ck_buf_le(b, kv->u, 4); break;
	case 'f': memcpy(&bits, &kv->f, 4), ck_buf_le(b, bits, 4); break;
	case 'b': ck_buf_byte(b, (unsigned)kv->b); break;
	default: ck_buf_le(b, strlen(kv->s), 8), ck_buf_put(b, kv->s, strlen(kv->s)); break;
	}
}

static int reserved(const char *key)
{
	return !strcmp(key, "general.alignment") || !strcmp(key, "general.architecture") ||
	       !strncmp(key, "split.", 6);
}

/* One pair: its record replaces the key's, or follows the others. */
static int apply_one(struct ck_gguf_meta *m, const struct ck_gguf_kv_set *kv, struct ck_err *err)
{
	uint32_t want = type_of(kv);
	if (reserved(kv->key))
		return ck_fail(err, CK_E_USAGE,
			       "--gguf-override-kv %s: the view writes this key itself (the "
			       "alignment, the split keys, and the architecture every other key "
			       "and tensor is named after)",
			       kv->key);
	struct rec r;
	int found = find(m, kv->key, &r);
	if (found < 0)
		return ck_fail(err, CK_E_SYS, "GGUF metadata: its records do not fill it");
	if (found && r.type != want)
		return ck_fail(err, CK_E_USAGE,
			       "--gguf-override-kv %s: the file holds it as %s, and llama.cpp "
			       "reads it as that: %s would make a file it refuses",
			       kv->key, r.type == G_ARR ? "an array" : type_name(r.type),
			       type_name(want));
	struct ck_buf b = {0};
	if (found)
		ck_buf_put(&b, m->b.p, r.start);
	else
		ck_buf_put(&b, m->b.p, m->b.n);
	put_record(&b, kv);
	if (found)
		ck_buf_put(&b, m->b.p + r.end, m->b.n - r.end);
	if (b.oom) {
		ck_buf_free(&b);
		return ck_fail_sys(err, ENOMEM, "GGUF metadata");
	}
	ck_buf_free(&m->b);
	m->b = b;
	m->n += !found;
	return 0;
}

int ck_gguf_kv_apply(struct ck_gguf_meta *m, const struct ck_gguf_kv_set *kv, size_t n,
		     struct ck_err *err)
{
	for (size_t i = 0; i < n; i++)
		for (size_t j = 0; j < i; j++)
			if (!strcmp(kv[i].key, kv[j].key))
				return ck_fail(err, CK_E_USAGE,
					       "--gguf-override-kv %s: given twice", kv[i].key);
	for (size_t i = 0; i < n; i++)
		if (apply_one(m, &kv[i], err) < 0)
			return -1;
	return 0;
}
