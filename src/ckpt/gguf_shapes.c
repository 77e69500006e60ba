#include "gguf_shapes.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const struct ck_gguf_dim_words ck_gguf_words_hf = {{"hidden_size", "num_hidden_layers",
						    "num_attention_heads", "num_key_value_heads",
						    "head_dim", "intermediate_size"},
						   "the config does not describe this checkpoint"};
const struct ck_gguf_dim_words ck_gguf_words_gguf = {
    {"embedding_length", "block_count", "attention.head_count", "attention.head_count_kv",
     "head dim", "feed_forward_length"},
    "its metadata does not describe its tensors"};

enum { HIDDEN, LAYERS, HEADS, KV_HEADS, HEAD_DIM, FF };

/* One rule: a tensor's name after "blk.N." (or the whole name), the rows
 * (0: any) and columns (0: a vector) it must have in torch order. */
struct want {
	const char *name;
	int64_t rows, cols;
};

static void shape_text(char *out, size_t cap, int ndim, int64_t rows, int64_t cols)
{
	if (ndim == 2)
		snprintf(out, cap, "[%" PRId64 ", %" PRId64 "]", rows, cols);
	else if (ndim == 1)
		snprintf(out, cap, "[%" PRId64 "]", rows);
	else
		snprintf(out, cap, "%d-D", ndim);
}

static int check_one(const char *name, const char *short_name, int ndim, const int64_t *shape,
		     const struct want *w, size_t n, const struct ck_gguf_dims *d,
		     const struct ck_gguf_dim_words *words, const char *where, struct ck_err *err)
{
	for (size_t k = 0; k < n; k++) {
		if (strcmp(short_name, w[k].name))
			continue;
		int64_t rows = ndim >= 1 ? shape[0] : 1, cols = ndim >= 2 ? shape[1] : 0;
		int64_t want_rows = w[k].rows ? w[k].rows : rows;
		if (ndim == (w[k].cols ? 2 : 1) && rows == want_rows &&
		    (!w[k].cols || cols == w[k].cols))
			return 0;
		char got[64], need[64];
		shape_text(got, sizeof got, ndim, rows, cols);
		shape_text(need, sizeof need, w[k].cols ? 2 : 1, want_rows, w[k].cols);
		const char *const *f = words->field;
		return ck_fail(err, CK_E_SOURCE,
			       "%s: %s %" PRId64 ", %s %" PRId64 ", %s %" PRId64 ", %s %" PRId64
			       ", %s %" PRId64 " make %s %s, but it is %s: %s",
			       where, f[HIDDEN], d->hidden, f[HEADS], d->heads, f[KV_HEADS],
			       d->kv_heads, f[HEAD_DIM], d->head_dim, f[FF], d->ff, name, need, got,
			       words->verdict);
	}
	return 0;
}

/* blk.N.rest: N (below 2^31) and rest, or -1 */
static int64_t block_of(const char *name, const char **rest)
{
	if (strncmp(name, "blk.", 4) || name[4] < '0' || name[4] > '9')
		return -1;
	char *end;
	errno = 0;
	long long n = strtoll(name + 4, &end, 10);
	if (errno || *end != '.' || n > INT32_MAX)
		return -1;
	*rest = end + 1;
	return n;
}

int ck_gguf_check_shapes(const void *ctx, size_t n, ck_gguf_tensor_at at,
			 const struct ck_gguf_dims *d, const struct ck_gguf_dim_words *w,
			 const char *where, struct ck_err *err)
{
	if (n == 0) /* a vocabulary-only file (llama.cpp's ggml-vocab-*.gguf) */
		return 0;
	/* each at most u32 and the head at most 2^20: the products below fit */
	const int64_t dims[6] = {d->hidden, d->layers, d->heads, d->kv_heads, d->head_dim, d->ff};
	for (int k = 0; k < 6; k++)
		if (dims[k] < 0 || dims[k] > (k == HEAD_DIM ? 1 << 20 : (int64_t)UINT32_MAX))
			return ck_fail(err, CK_E_SOURCE, "%s: %s %" PRId64 " is out of range: %s",
				       where, w->field[k], dims[k], w->verdict);
	if (d->layers < 1 || d->layers > 65535)
		return ck_fail(err, CK_E_SOURCE, "%s: %s %" PRId64 ": from 1 to 65535", where,
			       w->field[LAYERS], d->layers);
	const int64_t H = d->hidden, q = d->heads * d->head_dim, kv = d->kv_heads * d->head_dim;
	const struct want top[] = {
	    {"token_embd.weight", 0, H}, /* its rows: the vocabulary's */
	    {"output.weight", 0, H},
	    {"output_norm.weight", H, 0},
	};
	const struct want blk[] = {
	    {"attn_norm.weight", H, 0},
	    {"ffn_norm.weight", H, 0},
	    {"attn_q.weight", q, H},
	    {"attn_k.weight", kv, H},
	    {"attn_v.weight", kv, H},
	    {"attn_output.weight", H, q},
	    {"attn_qkv.weight", q + 2 * kv, H},
	    {"ffn_gate.weight", d->ff, H},
	    {"ffn_down.weight", H, d->ff},
	    {"attn_q_norm.weight", d->head_dim, 0},
	    {"attn_k_norm.weight", d->head_dim, 0},
	};
	unsigned char *seen = calloc((size_t)d->layers, 1);
	if (!seen)
		return ck_fail_sys(err, ENOMEM, "%s", where);
	int rc = 0;
	const char *name, *rest;
	int ndim;
	const int64_t *shape;
	/* the embedding first: a wrong hidden size can still reshape the
	 * blocks' permuted Q/K rows into something of the right size */
	for (size_t i = 0; i < n && rc == 0; i++) {
		at(ctx, i, &name, &ndim, &shape);
		if (block_of(name, &rest) < 0)
			rc = check_one(name, name, ndim, shape, top, sizeof top / sizeof *top, d, w,
				       where, err);
	}
	for (size_t i = 0; i < n && rc == 0; i++) {
		at(ctx, i, &name, &ndim, &shape);
		int64_t b = block_of(name, &rest);
		if (b < 0)
			continue;
		if (b >= d->layers)
			rc = ck_fail(err, CK_E_SOURCE, "%s: %s %" PRId64 ", but there is %s: %s",
				     where, w->field[LAYERS], d->layers, name, w->verdict);
		else {
			seen[b] = 1;
			rc = check_one(name, rest, ndim, shape, blk, sizeof blk / sizeof *blk, d, w,
				       where, err);
		}
	}
	for (int64_t b = 0; b < d->layers && rc == 0; b++)
		if (!seen[b])
			rc = ck_fail(err, CK_E_SOURCE,
				     "%s: %s %" PRId64 ", but there is no blk.%" PRId64 ".*: %s",
				     where, w->field[LAYERS], d->layers, b, w->verdict);
	free(seen);
	return rc;
}

int ck_gguf_check_hf_config(const cJSON *c, const void *ctx, size_t n, ck_gguf_tensor_at at,
			    const char *where, struct ck_err *err)
{
	static const char *const keys[6] = {
	    "hidden_size",	   "num_hidden_layers", "num_attention_heads",
	    "num_key_value_heads", "head_dim",		"intermediate_size"};
	double v[6];
	for (int k = 0; k < 6; k++) {
		const cJSON *j = cJSON_GetObjectItemCaseSensitive(c, keys[k]);
		v[k] = cJSON_IsNumber(j) ? j->valuedouble : -1;
	}
	if (v[HEAD_DIM] < 0 && v[HEADS] > 0) /* no attention.key_length: the hidden size's share */
		v[HEAD_DIM] = floor(v[HIDDEN] / v[HEADS]);
	struct ck_gguf_dims d;
	int64_t *out[6] = {&d.hidden, &d.layers, &d.heads, &d.kv_heads, &d.head_dim, &d.ff};
	for (int k = 0; k < 6; k++) /* up to 2^53 as they are (refused above u32), else -1 */
		*out[k] = v[k] >= 0 && v[k] <= 9007199254740992.0 ? (int64_t)v[k] : -1;
	return ck_gguf_check_shapes(ctx, n, at, &d, &ck_gguf_words_gguf, where, err);
}
