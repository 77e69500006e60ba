/* A GGUF model's hyper-parameters against its tensors, both ways: the GGUF
 * view's metadata (from config.json, an untrusted file, filled in with a
 * class's defaults) against the tensors it serves, and a GGUF source's
 * metadata against the tensors in the file, before a config.json is made
 * from it. Hyper-parameters that do not describe the tensors would make a
 * file llama.cpp refuses to load or a config transformers refuses, or
 * worse, Q/K rows permuted as another shape's (a wrong hidden size can
 * still divide the elements): refused instead, naming the tensor, the
 * fields and both shapes. */
#ifndef CK_GGUF_SHAPES_H
#define CK_GGUF_SHAPES_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "../util/error.h"

/* experts, ff_exp (each routed expert's width) and ff_shexp (the shared
 * expert's): 0 where the model has none, and their tensors unchecked. */
enum { CK_QK_NORM_WHOLE = 1, CK_QK_NORM_PER_HEAD = 2 };

struct ck_gguf_dims {
	int64_t hidden, layers, heads, kv_heads, head_dim, ff, experts, ff_exp, ff_shexp;
	/* attn_q_norm / attn_k_norm: 0 one head's [head_dim], CK_QK_NORM_WHOLE
	 * every head's as one vector (OLMo 2), CK_QK_NORM_PER_HEAD a [heads,
	 * head_dim] matrix (Command R+) */
	int qk_norm;
};

/* What the message calls the fields (in ck_gguf_dims' order) and what
 * does not describe what. */
struct ck_gguf_dim_words {
	const char *field[9];
	const char *verdict;
};
extern const struct ck_gguf_dim_words ck_gguf_words_hf, ck_gguf_words_gguf;

/* Tensor i of n, with its GGUF name and torch-order shape. */
typedef void (*ck_gguf_tensor_at)(const void *ctx, size_t i, const char **name, int *ndim,
				  const int64_t **shape);

/* token_embd / output / output_norm / the blocks' norms: hidden wide;
 * blk.N for every N below layers and none beyond; attn_q / attn_k / attn_v
 * / attn_output / attn_qkv from the heads and head_dim, the per-head
 * attn_q_norm / attn_k_norm head_dim wide; dense ffn_gate / ffn_down from
 * ff; with experts, the stacked ffn_{gate,up,down}_exps [experts, ff_exp,
 * hidden] / [experts, hidden, ff_exp]; with a shared expert,
 * ffn_{gate,up,down}_shexp from ff_shexp and its gate ffn_gate_inp_shexp
 * hidden wide. Other tensors are not looked at, and no tensors at
 * all (a vocabulary-only file) is nothing to contradict. where: what the
 * message starts with (config.json, the GGUF file). 0, or -1 with err
 * (CK_E_SOURCE). */
int ck_gguf_check_shapes(const void *ctx, size_t n, ck_gguf_tensor_at at,
			 const struct ck_gguf_dims *d, const struct ck_gguf_dim_words *w,
			 const char *where, struct ck_err *err);

/* The same for a config.json made from a GGUF's metadata
 * (ck_gguf_hf_config), in the metadata's words: its hidden size, layers,
 * heads, key-value heads, head_dim (else hidden / heads), intermediate
 * size and the experts' counts and widths against the file's tensors. */
int ck_gguf_check_hf_config(const cJSON *c, const void *ctx, size_t n, ck_gguf_tensor_at at,
			    const char *where, struct ck_err *err);

#endif
