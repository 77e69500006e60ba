/* DeepSeek-V3 / R1 checkpoints as Hugging Face stores them: multi-head
 * latent attention (q_a/q_b, kv_a_proj_with_mqa/kv_b with their latent
 * norms), first_k_dense_replace dense layers, then MoE layers with a router
 * (gate.weight + F32 e_score_correction_bias), routed and shared experts,
 * and num_nextn_predict_layers multi-token-prediction layers numbered after
 * the last decoder layer (model.layers.61 on the real model), whose
 * embed_tokens and shared_head.head hold the main embedding's and lm_head's
 * values (DeepSeek's README_WEIGHTS: they share those parameters). */
#include <inttypes.h>

#include "ckgen_int.h"

static int attention(const struct ckgen_spec *s, struct glist *l, int64_t L)
{
	const char *p = s->prefix, *a = "model.layers.%" PRId64 ".self_attn.%s.weight";
	int64_t H = s->hidden, nh = s->heads, B = s->fp8_block;
	int64_t qk = s->qk_nope + s->qk_rope;
	int r = 0;
	if (s->q_lora) {
		r |= ckgen_add(l, p, 2, s->q_lora, H, a, L, "q_a_proj") || ckgen_make_fp8(l, B);
		r |= ckgen_add(l, p, 1, s->q_lora, 0, a, L, "q_a_layernorm");
		r |= ckgen_add(l, p, 2, nh * qk, s->q_lora, a, L, "q_b_proj") || ckgen_make_fp8(l, B);
	} else {
		r |= ckgen_add(l, p, 2, nh * qk, H, a, L, "q_proj") || ckgen_make_fp8(l, B);
	}
	r |= ckgen_add(l, p, 2, s->kv_lora + s->qk_rope, H, a, L, "kv_a_proj_with_mqa") ||
	     ckgen_make_fp8(l, B);
	r |= ckgen_add(l, p, 1, s->kv_lora, 0, a, L, "kv_a_layernorm");
	r |= ckgen_add(l, p, 2, nh * (s->qk_nope + s->v_head), s->kv_lora, a, L, "kv_b_proj") ||
	     ckgen_make_fp8(l, B);
	r |= ckgen_add(l, p, 2, H, nh * s->v_head, a, L, "o_proj") || ckgen_make_fp8(l, B);
	return r;
}

/* gate_proj, up_proj, down_proj of intermediate size I under `mlp` */
static int gated_mlp(const struct ckgen_spec *s, struct glist *l, const char *mlp, int64_t I)
{
	const char *p = s->prefix;
	int64_t H = s->hidden, B = s->fp8_block;
	int r = ckgen_add(l, p, 2, I, H, "%s.gate_proj.weight", mlp) || ckgen_make_fp8(l, B);
	r |= ckgen_add(l, p, 2, I, H, "%s.up_proj.weight", mlp) || ckgen_make_fp8(l, B);
	r |= ckgen_add(l, p, 2, H, I, "%s.down_proj.weight", mlp) || ckgen_make_fp8(l, B);
	return r;
}

int ckgen_build_deepseek(const struct ckgen_spec *s, struct glist *l)
{
	const char *p = s->prefix;
	int64_t H = s->hidden, V = s->vocab;
	int r = ckgen_add(l, p, 2, V, H, "model.embed_tokens.weight");
	for (int64_t L = 0; L < s->layers + s->mtp_layers && !r; L++) {
		int mtp = L >= s->layers;
		char mlp[96];
		snprintf(mlp, sizeof mlp, "model.layers.%" PRId64 ".mlp", L);
		if (mtp) { /* its own embedding, the two norms and the projection of [h; e] */
			r |= ckgen_add(l, p, 2, V, H, "model.layers.%" PRId64 ".embed_tokens.weight", L);
			if (!r) /* "shares parameters with the main model's embedding" */
				ckgen_copy_values(l, p, "model.embed_tokens.weight");
			r |= ckgen_add(l, p, 1, H, 0, "model.layers.%" PRId64 ".enorm.weight", L);
			r |= ckgen_add(l, p, 1, H, 0, "model.layers.%" PRId64 ".hnorm.weight", L);
			r |= ckgen_add(l, p, 2, H, 2 * H, "model.layers.%" PRId64 ".eh_proj.weight", L);
		}
		r |= ckgen_add(l, p, 1, H, 0, "model.layers.%" PRId64 ".input_layernorm.weight", L);
		r |= attention(s, l, L);
		r |= ckgen_add(l, p, 1, H, 0, "model.layers.%" PRId64 ".post_attention_layernorm.weight",
			       L);
		if (L < s->first_dense) {
			r |= gated_mlp(s, l, mlp, s->intermediate);
		} else {
			r |= ckgen_add(l, p, 2, s->experts, H, "%s.gate.weight", mlp);
			r |= ckgen_add(l, p, 1, s->experts, 0, "%s.gate.e_score_correction_bias", mlp);
			l->t[l->n - 1].kind = G_F32;
			for (int64_t e = 0; e < s->experts && !r; e++) {
				char ex[128];
				snprintf(ex, sizeof ex, "%s.experts.%" PRId64, mlp, e);
				r |= gated_mlp(s, l, ex, s->moe_intermediate);
			}
			char sh[128];
			snprintf(sh, sizeof sh, "%s.shared_experts", mlp);
			if (s->shared_experts)
				r |= gated_mlp(s, l, sh, s->shared_experts * s->moe_intermediate);
		}
		if (mtp) {
			r |= ckgen_add(l, p, 1, H, 0, "model.layers.%" PRId64 ".shared_head.norm.weight",
				       L);
			r |= ckgen_add(l, p, 2, V, H, "model.layers.%" PRId64 ".shared_head.head.weight",
				       L);
			if (!r) /* and with its output head */
				ckgen_copy_values(l, p, "lm_head.weight");
		}
	}
	r |= ckgen_add(l, p, 1, H, 0, "model.norm.weight");
	r |= ckgen_add(l, p, 2, V, H, "lm_head.weight");
	return r;
}

void ckgen_deepseek_config(const struct ckgen_spec *s, FILE *f)
{
	const char *tdt = s->dtype == CK_DT_BF16  ? "bfloat16"
			  : s->dtype == CK_DT_F16 ? "float16"
						  : "float32";
	fprintf(f,
		"{\n  \"architectures\": [\"DeepseekV3ForCausalLM\"],\n"
		"  \"model_type\": \"deepseek_v3\",\n  \"hidden_size\": %" PRId64
		",\n  \"intermediate_size\": %" PRId64 ",\n  \"moe_intermediate_size\": %" PRId64
		",\n  \"num_hidden_layers\": %" PRId64 ",\n  \"num_nextn_predict_layers\": %" PRId64
		",\n  \"num_attention_heads\": %" PRId64 ",\n  \"num_key_value_heads\": %" PRId64
		",\n  \"n_routed_experts\": %" PRId64 ",\n  \"n_shared_experts\": %" PRId64
		",\n  \"num_experts_per_tok\": %d,\n  \"first_k_dense_replace\": %" PRId64
		",\n  \"moe_layer_freq\": 1,\n  \"n_group\": %d,\n  \"topk_group\": %d,\n"
		"  \"routed_scaling_factor\": 2.5,\n  \"scoring_func\": \"sigmoid\",\n"
		"  \"topk_method\": \"noaux_tc\",\n  \"norm_topk_prob\": true,\n",
		s->hidden, s->intermediate, s->moe_intermediate, s->layers, s->mtp_layers, s->heads,
		s->kv_heads, s->experts, s->shared_experts, s->experts >= 8 ? 8 : 2, s->first_dense,
		s->experts >= 256 ? 8 : 1, s->experts >= 256 ? 4 : 1);
	if (s->q_lora)
		fprintf(f, "  \"q_lora_rank\": %" PRId64 ",\n", s->q_lora);
	else
		fprintf(f, "  \"q_lora_rank\": null,\n");
	fprintf(f,
		"  \"kv_lora_rank\": %" PRId64 ",\n  \"qk_nope_head_dim\": %" PRId64
		",\n  \"qk_rope_head_dim\": %" PRId64 ",\n  \"v_head_dim\": %" PRId64
		",\n  \"vocab_size\": %" PRId64 ",\n  \"rms_norm_eps\": 1e-06,\n"
		"  \"rope_theta\": 10000,\n  \"max_position_embeddings\": 163840,\n"
		"  \"tie_word_embeddings\": false,\n  \"torch_dtype\": \"%s\"",
		s->kv_lora, s->qk_nope, s->qk_rope, s->v_head, s->vocab, tdt);
	ckgen_quant_config(s, f);
	fprintf(f, "\n}\n");
}
