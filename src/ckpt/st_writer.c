#include "st_writer.h"

#include "../util/jsonw.h"
#include "../util/numfmt.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct buf {
	char *p;
	size_t len, cap;
	int oom;
};

/* Room for n more bytes at b->p + b->len, or NULL (b->oom set). */
static char *room(struct buf *b, size_t n)
{
	if (b->oom)
		return NULL;
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		while (b->len + n + 1 > cap)
			cap *= 2;
		char *p = realloc(b->p, cap);
		if (!p) {
			b->oom = 1;
			return NULL;
		}
		b->p = p;
		b->cap = cap;
	}
	return b->p + b->len;
}

static void put(struct buf *b, const char *s, size_t n)
{
	char *w = room(b, n);
	if (w) {
		memcpy(w, s, n);
		b->len += n;
	}
}

static void puts_(struct buf *b, const char *s)
{
	put(b, s, strlen(s));
}

/* Room for the worst case, \u00XX a byte, saves a pass over a short name;
 * a long one is measured (its worst case could be 6 times a huge key). */
static void put_json_string(struct buf *b, const char *s)
{
	size_t n = strlen(s);
	char *w = room(b, n < 4096 ? 6 * n + 2 : ck_json_str_len(s));
	if (w)
		b->len += (size_t)(ck_json_put_str(w, s, n) - w);
}

/* One tensor's member: "name":{"dtype":..,"shape":[..],"data_offsets":[..]}
 * (a 92,000-tensor view writes one per tensor at mount: no printf) */
static void put_member(struct buf *b, const struct ck_st_out *t, uint64_t off)
{
	put_json_string(b, t->name);
	const char *dt = ck_dtype_name(t->dtype);
	size_t dl = strlen(dt);
	/* the fixed text, the dtype, and 21 characters a number */
	char *w = room(b, 48 + dl + (size_t)(t->ndim + 2) * (CK_FMT_INT_MAX + 1));
	if (!w)
		return;
	char *s = w;
	memcpy(w, ":{\"dtype\":\"", 11);
	w += 11;
	memcpy(w, dt, dl);
	w += dl;
	memcpy(w, "\",\"shape\":[", 11);
	w += 11;
	for (int d = 0; d < t->ndim; d++) {
		if (d)
			*w++ = ',';
		w += ck_fmt_i64(w, t->shape[d]);
	}
	memcpy(w, "],\"data_offsets\":[", 18);
	w += 18;
	w += ck_fmt_u64(w, off);
	*w++ = ',';
	w += ck_fmt_u64(w, off + t->nbytes);
	memcpy(w, "]}", 2);
	w += 2;
	b->len += (size_t)(w - s);
}

int ck_st_build_header(const struct ck_st_out *t, size_t n, const char *const *meta_keys,
		       const char *const *meta_vals, size_t n_meta, char **out, size_t *header_len,
		       uint64_t *data_off, struct ck_err *err)
{
	struct buf b = {0};
	put(&b, "\0\0\0\0\0\0\0\0{", 9);
	int first = 1;
	if (n_meta) {
		puts_(&b, "\"__metadata__\":{");
		for (size_t i = 0; i < n_meta; i++) {
			if (i)
				puts_(&b, ",");
			put_json_string(&b, meta_keys[i]);
			puts_(&b, ":");
			put_json_string(&b, meta_vals[i]);
		}
		puts_(&b, "}");
		first = 0;
	}
	uint64_t off = 0;
	for (size_t i = 0; i < n; i++) {
		if (!first)
			puts_(&b, ",");
		first = 0;
		put_member(&b, &t[i], off);
		data_off[i] = off;
		off += t[i].nbytes;
	}
	puts_(&b, "}");
	while (!b.oom && (b.len - 8) % 8)
		puts_(&b, " ");
	if (b.oom) {
		free(b.p);
		return ck_fail_sys(err, ENOMEM, "safetensors header");
	}
	uint64_t jl = b.len - 8;
	for (int i = 0; i < 8; i++)
		b.p[i] = (char)((jl >> (8 * i)) & 0xFF);
	*out = b.p;
	*header_len = b.len;
	return 0;
}

void ck_st_shard_name(char *buf, size_t cap, uint64_t k, uint64_t n)
{
	snprintf(buf, cap, "model-%05llu-of-%05llu.safetensors", (unsigned long long)k,
		 (unsigned long long)n);
}

/* (no stdio: the index of a 92,000-tensor view is written at mount) */
char *ck_st_index_json(const char *const *names, const uint64_t *shard_of, size_t n,
		       uint64_t n_shards, uint64_t total_size, size_t *len)
{
	struct buf b = {0};
	char num[CK_FMT_INT_MAX], shard[64];
	puts_(&b, "{\n  \"metadata\": {\n    \"total_size\": ");
	put(&b, num, (size_t)ck_fmt_u64(num, total_size));
	puts_(&b, "\n  },\n  \"weight_map\": {");
	uint64_t named = 0; /* the shard whose name is in shard (none: 0) */
	for (size_t i = 0; i < n; i++) {
		if (shard_of[i] != named || !named) {
			ck_st_shard_name(shard, sizeof shard, shard_of[i], n_shards);
			named = shard_of[i];
		}
		puts_(&b, i ? ",\n    " : "\n    ");
		put_json_string(&b, names[i]);
		puts_(&b, ": \"");
		puts_(&b, shard);
		puts_(&b, "\"");
	}
	puts_(&b, "\n  }\n}\n");
	if (b.oom) {
		free(b.p);
		return NULL;
	}
	b.p[b.len] = '\0'; /* room always leaves a byte past len */
	*len = b.len;
	return b.p;
}
