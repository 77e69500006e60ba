#include "st_writer.h"

#include "../util/jsonw.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct buf {
	char *p;
	size_t len, cap;
	int oom;
};

static void put(struct buf *b, const char *s, size_t n)
{
	if (b->oom)
		return;
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		while (b->len + n + 1 > cap)
			cap *= 2;
		char *p = realloc(b->p, cap);
		if (!p) {
			b->oom = 1;
			return;
		}
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
}

static void puts_(struct buf *b, const char *s)
{
	put(b, s, strlen(s));
}

static void put_json_string(struct buf *b, const char *s)
{
	size_t n = ck_json_str_len(s);
	char tmp[256]; /* most keys; longer ones through the heap */
	if (n <= sizeof tmp) {
		put(b, tmp, (size_t)(ck_json_put_str(tmp, s) - tmp));
		return;
	}
	char *big = malloc(n);
	if (!big) {
		b->oom = 1;
		return;
	}
	put(b, big, (size_t)(ck_json_put_str(big, s) - big));
	free(big);
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
	char num[64];
	for (size_t i = 0; i < n; i++) {
		if (!first)
			puts_(&b, ",");
		first = 0;
		put_json_string(&b, t[i].name);
		puts_(&b, ":{\"dtype\":\"");
		puts_(&b, ck_dtype_name(t[i].dtype));
		puts_(&b, "\",\"shape\":[");
		for (int d = 0; d < t[i].ndim; d++) {
			snprintf(num, sizeof num, "%s%" PRId64, d ? "," : "", t[i].shape[d]);
			puts_(&b, num);
		}
		snprintf(num, sizeof num, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}", off,
			 off + t[i].nbytes);
		puts_(&b, num);
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

char *ck_st_index_json(const char *const *names, const uint64_t *shard_of, size_t n,
		       uint64_t n_shards, uint64_t total_size, size_t *len)
{
	char *buf = NULL;
	FILE *f = open_memstream(&buf, len);
	if (!f)
		return NULL;
	fprintf(f, "{\n  \"metadata\": {\n    \"total_size\": %" PRIu64 "\n  },\n  \"weight_map\": {",
		total_size);
	for (size_t i = 0; i < n; i++) {
		char shard[64];
		ck_st_shard_name(shard, sizeof shard, shard_of[i], n_shards);
		fprintf(f, "%s\n    ", i ? "," : "");
		ck_json_fput_str(f, names[i]);
		fprintf(f, ": \"%s\"", shard);
	}
	fprintf(f, "\n  }\n}\n");
	if (fclose(f) != 0) {
		free(buf);
		return NULL;
	}
	return buf;
}
