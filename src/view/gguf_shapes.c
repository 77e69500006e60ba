#include "gguf_shapes.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* One rule: a tensor's name after "blk.N." (or the whole name), the rows
 * (0: any) and columns (0: a vector) it must have in torch order, and the
 * config fields that say so, for the message. */
struct want {
	const char *name;
	int64_t rows, cols;
	const char *says;
};

static int check_one(const struct ck_target *t, const char *short_name, const struct want *w,
		     size_t n, const struct ck_gguf_dims *d, struct ck_err *err)
{
	for (size_t k = 0; k < n; k++) {
		if (strcmp(short_name, w[k].name))
			continue;
		int64_t rows = t->v.ndim >= 1 ? t->v.shape[0] : 1;
		int64_t cols = t->v.ndim >= 2 ? t->v.shape[1] : 0;
		int64_t want_rows = w[k].rows ? w[k].rows : rows;
		int ok = t->v.ndim == (w[k].cols ? 2 : 1) && rows == want_rows &&
			 (!w[k].cols || cols == w[k].cols);
		if (ok)
			return 0;
		char got[64];
		if (t->v.ndim == 2)
			snprintf(got, sizeof got, "[%" PRId64 ", %" PRId64 "]", rows, cols);
		else if (t->v.ndim == 1)
			snprintf(got, sizeof got, "[%" PRId64 "]", rows);
		else
			snprintf(got, sizeof got, "%d-D", t->v.ndim);
		char need[64];
		if (w[k].cols)
			snprintf(need, sizeof need, "[%" PRId64 ", %" PRId64 "]", want_rows,
				 w[k].cols);
		else
			snprintf(need, sizeof need, "[%" PRId64 "]", want_rows);
		return ck_fail(err, CK_E_SOURCE,
			       "config.json: %s (hidden_size %" PRId64
			       ", num_attention_heads %" PRId64 ", num_key_value_heads %" PRId64
			       ", head_dim %" PRId64 ", intermediate_size %" PRId64
			       ") make %s %s, but the weights give it "
			       "%s: the config does not describe these weights",
			       w[k].says, d->hidden, d->heads, d->kv_heads, d->head_dim, d->ff,
			       t->name, need, got);
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

int ck_gguf_check_shapes(const struct ck_plan *p, const struct ck_gguf_dims *d, struct ck_err *err)
{
	const int64_t H = d->hidden, q = d->heads * d->head_dim, kv = d->kv_heads * d->head_dim;
	const struct want top[] = {
	    {"token_embd.weight", 0, H, "hidden_size"}, /* its rows: the vocabulary's */
	    {"output_norm.weight", H, 0, "hidden_size"},
	};
	const struct want blk[] = {
	    {"attn_norm.weight", H, 0, "hidden_size"},
	    {"ffn_norm.weight", H, 0, "hidden_size"},
	    {"attn_q.weight", q, H, "num_attention_heads * head_dim and hidden_size"},
	    {"attn_k.weight", kv, H, "num_key_value_heads * head_dim and hidden_size"},
	    {"attn_v.weight", kv, H, "num_key_value_heads * head_dim and hidden_size"},
	    {"attn_output.weight", H, q, "hidden_size and num_attention_heads * head_dim"},
	    {"attn_qkv.weight", q + 2 * kv, H,
	     "(num_attention_heads + 2 * num_key_value_heads) * head_dim and hidden_size"},
	    {"ffn_gate.weight", d->ff, H, "intermediate_size and hidden_size"},
	    {"ffn_down.weight", H, d->ff, "hidden_size and intermediate_size"},
	};
	unsigned char *seen = calloc((size_t)d->layers, 1);
	if (!seen)
		return ck_fail_sys(err, ENOMEM, "the GGUF view's shape check");
	int rc = 0;
	const char *rest;
	/* the embedding first: a wrong hidden_size can still reshape the
	 * blocks' permuted Q/K rows into something of the right size */
	for (size_t i = 0; i < p->n && rc == 0; i++)
		if (block_of(p->t[i].name, &rest) < 0)
			rc = check_one(&p->t[i], p->t[i].name, top, sizeof top / sizeof *top, d,
				       err);
	for (size_t i = 0; i < p->n && rc == 0; i++) {
		const struct ck_target *t = &p->t[i];
		int64_t b = block_of(t->name, &rest);
		if (b < 0)
			continue;
		if (b >= d->layers) {
			rc = ck_fail(err, CK_E_SOURCE,
				     "config.json: num_hidden_layers %" PRId64 ", but the weights "
				     "have %s: the config does not describe these weights",
				     d->layers, t->name);
			break;
		}
		seen[b] = 1;
		rc = check_one(t, rest, blk, sizeof blk / sizeof *blk, d, err);
	}
	for (int64_t b = 0; b < d->layers && rc == 0; b++)
		if (!seen[b])
			rc =
			    ck_fail(err, CK_E_SOURCE,
				    "config.json: num_hidden_layers %" PRId64 ", but the weights "
				    "have no layer %" PRId64 ": the config does not describe these "
				    "weights",
				    d->layers, b);
	free(seen);
	return rc;
}
