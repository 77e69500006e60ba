/* GPT-OSS checkpoints as OpenAI published them on Hugging Face: attention
 * with Q/K/V/O biases and one learned sink logit per head
 * (`self_attn.sinks`), a router with a bias, and MoE experts whose weights
 * are MXFP4 (`gate_up_proj_blocks` / `_scales` with gate and up rows
 * interleaved, `down_proj_blocks` / `_scales`) beside BF16 biases. Every
 * layer is MoE; the model is BF16 apart from the experts. */
#include <inttypes.h>

#include "ckgen_int.h"

/* An expert weight of `rows` x `cols` per expert (rows, cols as nn.Linear:
 * out, in): MXFP4 blocks + scales, or the dequantised BF16 tensor in
 * transformers' [E, in, out] layout. */
static int experts(const struct ckgen_spec *s, struct glist *l, int64_t L, const char *name,
		   int64_t rows, int64_t cols)
{
	const char *p = s->prefix, *e = "model.layers.%" PRId64 ".mlp.experts.%s%s";
	int64_t E = s->experts;
	if (!s->mxfp4) {
		int64_t sh[3] = {E, cols, rows};
		return ckgen_add_nd(l, p, 3, sh, G_PLAIN, e, L, name, "");
	}
	int64_t b[4] = {E, rows, cols / 32, 16}, sc[3] = {E, rows, cols / 32};
	return ckgen_add_nd(l, p, 4, b, G_MXBLOCKS, e, L, name, "_blocks") ||
	       ckgen_add_nd(l, p, 3, sc, G_MXSCALES, e, L, name, "_scales");
}

int ckgen_build_gptoss(const struct ckgen_spec *s, struct glist *l)
{
	const char *p = s->prefix;
	int64_t H = s->hidden, I = s->intermediate, E = s->experts;
	int64_t hd = s->head_dim ? s->head_dim : H / s->heads, q = s->heads * hd,
		kv = s->kv_heads * hd;
	int r = ckgen_add(l, p, 2, s->vocab, H, "model.embed_tokens.weight");
	for (int64_t L = 0; L < s->layers && !r; L++) {
		const char *a = "model.layers.%" PRId64 ".self_attn.%s";
		r |= ckgen_add(l, p, 1, H, 0, "model.layers.%" PRId64 ".input_layernorm.weight", L);
		r |= ckgen_add(l, p, 2, q, H, a, L, "q_proj.weight");
		r |= ckgen_add(l, p, 1, q, 0, a, L, "q_proj.bias");
		r |= ckgen_add(l, p, 2, kv, H, a, L, "k_proj.weight");
		r |= ckgen_add(l, p, 1, kv, 0, a, L, "k_proj.bias");
		r |= ckgen_add(l, p, 2, kv, H, a, L, "v_proj.weight");
		r |= ckgen_add(l, p, 1, kv, 0, a, L, "v_proj.bias");
		r |= ckgen_add(l, p, 2, H, q, a, L, "o_proj.weight");
		r |= ckgen_add(l, p, 1, H, 0, a, L, "o_proj.bias");
		r |= ckgen_add(l, p, 1, s->heads, 0, a, L, "sinks");
		r |= ckgen_add(l, p, 1, H, 0, "model.layers.%" PRId64 ".post_attention_layernorm.weight",
			       L);
		r |= ckgen_add(l, p, 2, E, H, "model.layers.%" PRId64 ".mlp.router.weight", L);
		r |= ckgen_add(l, p, 1, E, 0, "model.layers.%" PRId64 ".mlp.router.bias", L);
		r |= experts(s, l, L, "gate_up_proj", 2 * I, H);
		r |= ckgen_add(l, p, 2, E, 2 * I, "model.layers.%" PRId64 ".mlp.experts.gate_up_proj_bias",
			       L);
		r |= experts(s, l, L, "down_proj", H, I);
		r |= ckgen_add(l, p, 2, E, H, "model.layers.%" PRId64 ".mlp.experts.down_proj_bias", L);
	}
	r |= ckgen_add(l, p, 1, H, 0, "model.norm.weight");
	if (!s->tie)
		r |= ckgen_add(l, p, 2, s->vocab, H, "lm_head.weight");
	return r;
}

void ckgen_gptoss_config(const struct ckgen_spec *s, FILE *f)
{
	int64_t hd = s->head_dim ? s->head_dim : s->hidden / s->heads;
	fprintf(f,
		"{\n  \"architectures\": [\"GptOssForCausalLM\"],\n  \"model_type\": \"gpt_oss\",\n"
		"  \"hidden_size\": %" PRId64 ",\n  \"intermediate_size\": %" PRId64
		",\n  \"num_hidden_layers\": %" PRId64 ",\n  \"num_attention_heads\": %" PRId64
		",\n  \"num_key_value_heads\": %" PRId64 ",\n  \"head_dim\": %" PRId64
		",\n  \"num_local_experts\": %" PRId64 ",\n  \"num_experts_per_tok\": %d"
		",\n  \"experts_per_token\": %d,\n  \"vocab_size\": %" PRId64
		",\n  \"rms_norm_eps\": 1e-05,\n  \"rope_theta\": 150000,\n"
		"  \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 32.0, \"beta_fast\": 32.0, "
		"\"beta_slow\": 1.0, \"truncate\": false, \"original_max_position_embeddings\": "
		"4096},\n  \"max_position_embeddings\": 131072,\n  \"sliding_window\": 128,\n"
		"  \"layer_types\": [",
		s->hidden, s->intermediate, s->layers, s->heads, s->kv_heads, hd, s->experts,
		s->experts >= 4 ? 4 : 2, s->experts >= 4 ? 4 : 2, s->vocab);
	for (int64_t L = 0; L < s->layers; L++)
		fprintf(f, "%s\"%s\"", L ? ", " : "", L % 2 ? "full_attention" : "sliding_attention");
	fprintf(f, "],\n  \"swiglu_limit\": 7.0,\n  \"attention_bias\": true,\n"
		   "  \"attention_dropout\": 0.0,\n  \"hidden_act\": \"silu\",\n"
		   "  \"tie_word_embeddings\": %s,\n  \"torch_dtype\": \"bfloat16\"",
		s->tie ? "true" : "false");
	if (s->mxfp4)
		fprintf(f, ",\n  \"quantization_config\": {\"quant_method\": \"mxfp4\", "
			   "\"modules_to_not_convert\": [\"model.layers.*.self_attn\", "
			   "\"model.layers.*.mlp.router\", \"model.embed_tokens\", \"lm_head\"]}");
	fprintf(f, "\n}\n");
}
