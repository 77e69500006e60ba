#include "gguf_shapes.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const struct ck_gguf_dim_words ck_gguf_words_hf = {
    {"hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
     "intermediate_size", "num_experts", "moe_intermediate_size",
     "shared_expert_intermediate_size"},
    "the config does not describe this checkpoint"};
const struct ck_gguf_dim_words ck_gguf_words_gguf = {
    {"embedding_length", "block_count", "attention.head_count", "attention.head_count_kv",
     "head dim", "feed_forward_length", "expert_count", "expert_feed_forward_length",
     "expert_shared_feed_forward_length"},
    "its metadata does not describe its tensors"};

enum { HIDDEN, LAYERS, HEADS, KV_HEADS, HEAD_DIM, FF, EXPERTS, FF_EXP, FF_SHEXP, N_FIELDS };
#define BIT(f) (1u << (f))
/* what a dense tensor's message names */
#define DENSE (BIT(HIDDEN) | BIT(HEADS) | BIT(KV_HEADS) | BIT(HEAD_DIM) | BIT(FF))

/* One rule: a tensor's name after "blk.N." (or the whole name), the
 * experts it stacks (0: not a stack), the rows (0: any) and columns (0: a
 * vector) it must have in torch order, the fields that decide them, and
 * for a vector whether [1, rows] will do (llama.cpp loads either; older
 * converters squeezed a [1, n] weight, newer ones do not). */
struct want {
	const char *name;
	int64_t lead, rows, cols;
	unsigned fields;
	int row_ok;
};

static void shape_text(char *out, size_t cap, int ndim, int64_t lead, int64_t rows, int64_t cols)
{
	if (ndim == 3)
		snprintf(out, cap, "[%" PRId64 ", %" PRId64 ", %" PRId64 "]", lead, rows, cols);
	else if (ndim == 2)
		snprintf(out, cap, "[%" PRId64 ", %" PRId64 "]", rows, cols);
	else if (ndim == 1)
		snprintf(out, cap, "[%" PRId64 "]", rows);
	else
		snprintf(out, cap, "%d-D", ndim);
}

static int mismatch(const char *name, int ndim, const int64_t *shape, const struct want *w,
		    const struct ck_gguf_dims *d, const struct ck_gguf_dim_words *words,
		    const char *where, struct ck_err *err)
{
	const int64_t v[N_FIELDS] = {d->hidden, d->layers,  d->heads,  d->kv_heads, d->head_dim,
				     d->ff,	d->experts, d->ff_exp, d->ff_shexp};
	char fields[512] = "", got[96], need[96];
	size_t len = 0;
	for (int f = 0; f < N_FIELDS; f++)
		if ((w->fields & BIT(f)) && len < sizeof fields)
			len += (size_t)snprintf(fields + len, sizeof fields - len, "%s%s %" PRId64,
						len ? ", " : "", words->field[f], v[f]);
	int at = ndim == 3; /* a stack's rows and columns follow its experts */
	shape_text(got, sizeof got, ndim, ndim == 3 ? shape[0] : 0, ndim > at ? shape[at] : 1,
		   ndim > at + 1 ? shape[at + 1] : 0);
	int want_ndim = w->lead ? 3 : w->cols ? 2 : 1;
	shape_text(need, sizeof need, want_ndim, w->lead,
		   w->rows ? w->rows : (ndim > at ? shape[at] : 1), w->cols);
	return ck_fail(err, CK_E_SOURCE, "%s: %s make %s %s, but it is %s: %s", where, fields, name,
		       need, got, words->verdict);
}

static int check_one(const char *name, const char *short_name, int ndim, const int64_t *shape,
		     const struct want *w, size_t n, const struct ck_gguf_dims *d,
		     const struct ck_gguf_dim_words *words, const char *where, struct ck_err *err)
{
	for (size_t k = 0; k < n; k++) {
		if (!w[k].name || strcmp(short_name, w[k].name))
			continue;
		int want_ndim = w[k].lead ? 3 : w[k].cols ? 2 : 1, at = want_ndim == 3;
		if (w[k].row_ok && ndim == 2 && shape[0] == 1 && shape[1] == w[k].rows)
			return 0;
		if (ndim == want_ndim && (!w[k].lead || shape[0] == w[k].lead) &&
		    (!w[k].rows || shape[at] == w[k].rows) &&
		    (!w[k].cols || shape[at + 1] == w[k].cols))
			return 0;
		return mismatch(name, ndim, shape, &w[k], d, words, where, err);
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
	const int64_t dims[N_FIELDS] = {d->hidden, d->layers,  d->heads,  d->kv_heads, d->head_dim,
					d->ff,	   d->experts, d->ff_exp, d->ff_shexp};
	for (int k = 0; k < N_FIELDS; k++)
		if (dims[k] < 0 || dims[k] > (k == HEAD_DIM ? 1 << 20 : (int64_t)UINT32_MAX))
			return ck_fail(err, CK_E_SOURCE, "%s: %s %" PRId64 " is out of range: %s",
				       where, w->field[k], dims[k], w->verdict);
	if (d->layers < 1 || d->layers > 65535)
		return ck_fail(err, CK_E_SOURCE, "%s: %s %" PRId64 ": from 1 to 65535", where,
			       w->field[LAYERS], d->layers);
	const int64_t H = d->hidden, q = d->heads * d->head_dim, kv = d->kv_heads * d->head_dim;
	const struct want top[] = {
	    {"token_embd.weight", 0, 0, H, DENSE, 0}, /* its rows: the vocabulary's */
	    {"output.weight", 0, 0, H, DENSE, 0},
	    {"output_norm.weight", 0, H, 0, DENSE, 0},
	};
	const int64_t E = d->experts, fe = d->ff_exp, fs = d->ff_shexp;
	const int ph = d->qk_norm == CK_QK_NORM_PER_HEAD;
	const unsigned MOE = BIT(HIDDEN) | BIT(EXPERTS) | BIT(FF_EXP),
		       SH = BIT(HIDDEN) | BIT(FF_SHEXP);
	const struct want blk[] = {
	    {"attn_norm.weight", 0, H, 0, DENSE, 0},
	    {"ffn_norm.weight", 0, H, 0, DENSE, 0},
	    {"attn_q.weight", 0, q, H, DENSE, 0},
	    {"attn_k.weight", 0, kv, H, DENSE, 0},
	    {"attn_v.weight", 0, kv, H, DENSE, 0},
	    {"attn_output.weight", 0, H, q, DENSE, 0},
	    {"attn_qkv.weight", 0, q + 2 * kv, H, DENSE, 0},
	    {"ffn_gate.weight", 0, d->ff, H, DENSE, 0},
	    {"ffn_down.weight", 0, H, d->ff, DENSE, 0},
	    {"attn_q_norm.weight", 0,
	     !d->qk_norm ? d->head_dim
	     : ph	 ? d->heads
			 : q,
	     ph ? d->head_dim : 0, DENSE, 0},
	    {"attn_k_norm.weight", 0,
	     !d->qk_norm ? d->head_dim
	     : ph	 ? d->kv_heads
			 : kv,
	     ph ? d->head_dim : 0, DENSE, 0},
	    {"post_ffw_norm.weight", 0, H, 0, DENSE, 0},
	    {"post_attention_norm.weight", 0, H, 0, DENSE, 0},
	    {"attn_sinks.weight", 0, d->heads, 0, DENSE, 0},
	    {E && fe ? "ffn_gate_exps.weight" : NULL, E, fe, H, MOE, 0},
	    {E && fe ? "ffn_up_exps.weight" : NULL, E, fe, H, MOE, 0},
	    {E && fe ? "ffn_down_exps.weight" : NULL, E, H, fe, MOE, 0},
	    {fs ? "ffn_gate_shexp.weight" : NULL, 0, fs, H, SH, 0},
	    {fs ? "ffn_up_shexp.weight" : NULL, 0, fs, H, SH, 0},
	    {fs ? "ffn_down_shexp.weight" : NULL, 0, H, fs, SH, 0},
	    {fs ? "ffn_gate_inp_shexp.weight" : NULL, 0, H, 0, SH, 1},
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
	/* in ck_gguf_dims' order; Mixtral's experts are intermediate_size wide */
	static const char *const keys[N_FIELDS] = {"hidden_size",
						   "num_hidden_layers",
						   "num_attention_heads",
						   "num_key_value_heads",
						   "head_dim",
						   "intermediate_size",
						   "num_experts",
						   "moe_intermediate_size",
						   "shared_expert_intermediate_size"};
	double v[N_FIELDS];
	for (int k = 0; k < N_FIELDS; k++) {
		const cJSON *j = cJSON_GetObjectItemCaseSensitive(c, keys[k]);
		v[k] = cJSON_IsNumber(j) ? j->valuedouble : -1;
	}
	if (v[HEAD_DIM] < 0 && v[HEADS] > 0) /* no attention.key_length: the hidden size's share */
		v[HEAD_DIM] = floor(v[HIDDEN] / v[HEADS]);
	if (v[EXPERTS] < 0) {
		const cJSON *j = cJSON_GetObjectItemCaseSensitive(c, "num_local_experts");
		v[EXPERTS] = cJSON_IsNumber(j) ? j->valuedouble : -1;
		v[FF_EXP] = v[EXPERTS] > 0 ? v[FF] : -1;
	}
	const char *cls = cJSON_GetStringValue(
	    cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(c, "architectures"), 0));
	struct ck_gguf_dims d = {.qk_norm = !cls			       ? 0
					    : !strcmp(cls, "Olmo2ForCausalLM") ? CK_QK_NORM_WHOLE
					    : !strcmp(cls, "CohereForCausalLM")
						? CK_QK_NORM_PER_HEAD
						: 0};
	int64_t *out[N_FIELDS] = {&d.hidden, &d.layers,	 &d.heads,  &d.kv_heads, &d.head_dim,
				  &d.ff,     &d.experts, &d.ff_exp, &d.ff_shexp};
	for (int k = 0; k < N_FIELDS; k++) /* up to 2^53 as they are (refused above u32), else -1 */
		*out[k] = v[k] >= 0 && v[k] <= 9007199254740992.0 ? (int64_t)v[k] : -1;
	for (int k = EXPERTS; k < N_FIELDS; k++) /* the experts' fields: absent, none */
		if (v[k] < 0)
			*out[k] = 0;
	return ck_gguf_check_shapes(ctx, n, at, &d, &ck_gguf_words_gguf, where, err);
}
