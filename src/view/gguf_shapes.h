/* The GGUF view's metadata against the tensors it serves. The hyper-
 * parameters come from config.json (an untrusted file, filled in with a
 * class's defaults) and the tensors from the weights: a config that does
 * not describe the weights would make a model.gguf that llama.cpp refuses
 * to load, or worse, one whose permuted Q/K rows are silently another
 * model's (a wrong hidden_size can still divide the elements). The view
 * refuses it instead, naming the tensor and the fields. */
#ifndef CK_GGUF_SHAPES_H
#define CK_GGUF_SHAPES_H

#include <stdint.h>

#include "../plan/plan.h"
#include "../util/error.h"

struct ck_gguf_dims {
	int64_t hidden, layers, heads, kv_heads, head_dim, ff;
};

/* token_embd / output_norm / the blocks' norms: hidden wide; blk.N for
 * every N below layers and none beyond; attn_q / attn_k / attn_v /
 * attn_output / attn_qkv from the heads and head_dim; dense ffn_gate /
 * ffn_down from ff. 0, or -1 with err (CK_E_SOURCE). */
int ck_gguf_check_shapes(const struct ck_plan *p, const struct ck_gguf_dims *d, struct ck_err *err);

#endif
