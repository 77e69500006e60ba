#include "gguf_view.h"
#include "gguf_text_config.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "../ckpt/ggml_types.h"
#include "../ckpt/gguf_shapes.h"
#include "../util/json_strict.h"
#include "../util/size.h"
#include "gguf_imatrix.h"
#include "gguf_kmix.h"
#include "gguf_overrides.h"
#include "gguf_source_tok.h"
#include "open.h"

/* The architectures the view knows: HF class, llama.cpp's name, the
 * shipped mapping, whether SentencePiece comes first (llama family), for a
 * vision-language class the mapping that first takes its language model
 * out under the text class's names, and the shipped mapping that takes a
 * GGUF source of the class (a config made from its metadata names it) to
 * Hugging Face names, applied first when the user gives none. */
static const struct arch {
	const char *hf, *gguf, *mapping;
	int spm;
	const char *unwrap, *from_gguf;
} ARCHS[] = {
    {"LlamaForCausalLM", "llama", "hf-llama-to-gguf", 1, NULL, "gguf-llama-to-hf"},
    {"MistralForCausalLM", "llama", "hf-llama-to-gguf", 1, NULL, NULL},
    {"GraniteForCausalLM", "granite", "hf-llama-to-gguf", 0, NULL, "gguf-llama-to-hf"},
    {"Mistral3ForConditionalGeneration", "llama", "hf-llama-to-gguf", 1, "vlm-language-model",
     NULL},
    {"LlavaForConditionalGeneration", "llama", "hf-llama-to-gguf", 1, "vlm-language-model", NULL},
    {"MixtralForCausalLM", "llama", "hf-mixtral-to-gguf", 1, NULL, "gguf-mixtral-to-hf"},
    {"Qwen2ForCausalLM", "qwen2", "hf-qwen2-to-gguf", 0, NULL, "gguf-qwen2-to-hf"},
    {"Qwen2VLForConditionalGeneration", "qwen2vl", "hf-qwen2-to-gguf", 0, "vlm-language-model",
     NULL},
    {"Qwen2_5_VLForConditionalGeneration", "qwen2vl", "hf-qwen2-to-gguf", 0, "vlm-language-model",
     NULL},
    {"Qwen3ForCausalLM", "qwen3", "hf-qwen3-to-gguf", 0, NULL, "gguf-qwen3-to-hf"},
    {"Qwen3MoeForCausalLM", "qwen3moe", "hf-qwen3moe-to-gguf", 0, NULL, "gguf-qwen3moe-to-hf"},
    {"Qwen2MoeForCausalLM", "qwen2moe", "hf-qwen2moe-to-gguf", 0, NULL, "gguf-qwen2moe-to-hf"},
    {"GemmaForCausalLM", "gemma", "hf-gemma-to-gguf", 1, NULL, "gguf-gemma-to-hf"},
    {"Gemma2ForCausalLM", "gemma2", "hf-gemma2-to-gguf", 1, NULL, "gguf-gemma2-to-hf"},
    {"Gemma3ForCausalLM", "gemma3", "hf-gemma3-to-gguf", 1, NULL, "gguf-gemma3-to-hf"},
    {"Gemma3ForConditionalGeneration", "gemma3", "hf-gemma3-to-gguf", 1, "vlm-language-model",
     NULL},
    {"Phi3ForCausalLM", "phi3", "hf-phi3-to-gguf", 1, NULL, "gguf-phi3-to-hf"},
    {"GptOssForCausalLM", "gpt-oss", "hf-gpt-oss-to-gguf", 0, NULL, "gguf-gpt-oss-to-hf"},
    {"Olmo2ForCausalLM", "olmo2", "hf-olmo2-to-gguf", 0, NULL, "gguf-olmo2-to-hf"},
    {"SmolLM3ForCausalLM", "smollm3", "hf-llama-to-gguf", 0, NULL, "gguf-llama-to-hf"},
    {"CohereForCausalLM", "command-r", "hf-cohere-to-gguf", 0, NULL, "gguf-command-r-to-hf"},
    {"Starcoder2ForCausalLM", "starcoder2", "hf-starcoder2-to-gguf", 0, NULL, NULL},
};

/* The file types: name, ggml type of the matrices, general.file_type, the
 * element type the matrices are evaluated in, and for a llama-quantize mix
 * 1 (each matrix's type chosen as llama-quantize does: gguf_kmix.c; Q8_0
 * and the float types are the converter's, every matrix one type). */
static const struct ftype {
	const char *name;
	uint32_t ggml;
	uint32_t file_type;
	enum ck_dtype dt;
	int mix;
} FTYPES[] = {
    {"F32", CK_GGUF_F32, 0, CK_DT_F32, 0},
    {"F16", CK_GGUF_F16, 1, CK_DT_F16, 0},
    {"BF16", CK_GGUF_BF16, 32, CK_DT_BF16, 0},
    {"Q8_0", CK_GGML_Q8_0, 7, CK_DT_F32, 0},
    {"Q4_0", CK_GGML_Q4_0, CK_FTYPE_Q4_0, CK_DT_F32, 1},
    {"Q4_1", CK_GGML_Q4_1, CK_FTYPE_Q4_1, CK_DT_F32, 1},
    {"Q5_0", CK_GGML_Q5_0, CK_FTYPE_Q5_0, CK_DT_F32, 1},
    {"Q5_1", CK_GGML_Q5_1, CK_FTYPE_Q5_1, CK_DT_F32, 1},
    {"Q2_K", CK_GGML_Q2_K, CK_FTYPE_Q2_K, CK_DT_F32, 1},
    {"Q3_K_S", CK_GGML_Q3_K, CK_FTYPE_Q3_K_S, CK_DT_F32, 1},
    {"Q3_K_M", CK_GGML_Q3_K, CK_FTYPE_Q3_K_M, CK_DT_F32, 1},
    {"Q3_K_L", CK_GGML_Q3_K, CK_FTYPE_Q3_K_L, CK_DT_F32, 1},
    {"Q4_K_M", CK_GGML_Q4_K, CK_FTYPE_Q4_K_M, CK_DT_F32, 1},
    {"Q4_K_S", CK_GGML_Q4_K, CK_FTYPE_Q4_K_S, CK_DT_F32, 1},
    {"Q5_K_M", CK_GGML_Q5_K, CK_FTYPE_Q5_K_M, CK_DT_F32, 1},
    {"Q5_K_S", CK_GGML_Q5_K, CK_FTYPE_Q5_K_S, CK_DT_F32, 1},
    {"Q6_K", CK_GGML_Q6_K, CK_FTYPE_Q6_K, CK_DT_F32, 1},
    {"IQ4_NL", CK_GGML_IQ4_NL, CK_FTYPE_IQ4_NL, CK_DT_F32, 1},
    {"IQ4_XS", CK_GGML_IQ4_XS, CK_FTYPE_IQ4_XS, CK_DT_F32, 1},
    {"MXFP4_MOE", CK_GGML_MXFP4, CK_FTYPE_MXFP4_MOE, CK_DT_F32, 1},
};
#define TYPE_LIST                                                                                  \
	"F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K_S, Q3_K_M, Q3_K_L, Q4_K_M, "     \
	"Q4_K_S, Q5_K_M, Q5_K_S, Q6_K, IQ4_NL, IQ4_XS, MXFP4_MOE"

static const struct ftype *find_ftype(const char *name)
{
	for (size_t k = 0; k < sizeof FTYPES / sizeof *FTYPES; k++)
		if (!strcasecmp(name, FTYPES[k].name))
			return &FTYPES[k];
	return NULL;
}

int ck_gguf_check_type(const char *type, struct ck_err *err)
{
	if (type && !find_ftype(type))
		return ck_fail(err, CK_E_USAGE, "GGUF type \"%s\": one of " TYPE_LIST, type);
	return 0;
}

int ck_gguf_parse_format(const char *format, struct ck_gguf_opts *o, struct ck_err *err)
{
	if (!strcmp(format, "safetensors"))
		return 0;
	if (strncmp(format, "gguf", 4) || (format[4] && format[4] != ':'))
		return ck_fail(err, CK_E_USAGE, "--format %s: safetensors, gguf, gguf:TYPE, dcp or torch_dist", format);
	o->on = 1;
	o->type = format[4] ? format + 5 : NULL;
	if (o->type && !find_ftype(o->type))
		return ck_fail(err, CK_E_USAGE, "--format %s: the GGUF type is one of " TYPE_LIST,
			       format);
	return 0;
}

static const struct arch *find_arch(const cJSON *config, struct ck_err *err)
{
	const cJSON *a = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(config, "architectures"), 0);
	const char *name = cJSON_GetStringValue(a);
	if (!name)
		return ck_fail(err, CK_E_SOURCE, "config.json: no \"architectures\" entry: the GGUF "
						 "view needs the model's class"),
		       NULL;
	for (size_t k = 0; k < sizeof ARCHS / sizeof *ARCHS; k++) {
		if (strcmp(name, ARCHS[k].hf))
			continue;
		/* said before the mapping, which would only miss lm_head.weight */
		if ((!strcmp(ARCHS[k].gguf, "qwen2moe") || !strcmp(ARCHS[k].gguf, "gpt-oss") ||
		     !strcmp(ARCHS[k].gguf, "olmo2")) &&
		    cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(config, "tie_word_embeddings")))
			return ck_fail(err, CK_E_SOURCE,
				       "config.json: tie_word_embeddings is true: llama.cpp's "
				       "%s has no tied output (it needs lm_head.weight)",
				       ARCHS[k].gguf),
			       NULL;
		return &ARCHS[k];
	}
	char list[512] = "";
	for (size_t k = 0; k < sizeof ARCHS / sizeof *ARCHS; k++)
		snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", k ? ", " : "",
			 ARCHS[k].hf);
	ck_fail(err, CK_E_SOURCE, "config.json: architecture %s has no GGUF view (supported: %s)",
		name, list);
	return NULL;
}

/* A config.json number: *out, or the default when absent (def_ok), else an
 * error naming the field. */
static int cfg_num(const cJSON *config, const char *key, double def, int def_ok, double lo,
		   double hi, double *out, struct ck_err *err)
{
	const cJSON *j = cJSON_GetObjectItemCaseSensitive(config, key);
	if (!j || cJSON_IsNull(j)) {
		if (!def_ok)
			return ck_fail(err, CK_E_SOURCE, "config.json: \"%s\" is missing (the GGUF view "
							 "needs it)",
				       key);
		*out = def;
		return 0;
	}
	if (!cJSON_IsNumber(j) || j->valuedouble < lo || j->valuedouble > hi)
		return ck_fail(err, CK_E_SOURCE, "config.json: \"%s\" must be a number in [%g, %g]", key,
			       lo, hi);
	*out = j->valuedouble;
	return 0;
}

/* Where config.json keeps the rope. transformers 5 writes "rope_parameters":
 * one object ({"rope_type", "rope_theta", "factor", ...}) or one per
 * attention type ({"full_attention": {...}, "sliding_attention": {...}});
 * earlier versions rope_theta, rope_scaling and (Gemma 3)
 * rope_local_base_freq at the top. Reading only the old keys served a
 * version-5 checkpoint with rope_theta's default and no scaling. */
struct rope_src {
	const cJSON *theta;   /* the object holding "rope_theta" */
	const cJSON *scaling; /* the object holding the scaling's type, or NULL */
	const cJSON *local;   /* the sliding layers' base is its local_key */
	const char *local_key;
	int v5; /* rope_parameters */
};

static void rope_src_of(const cJSON *c, struct rope_src *r)
{
	const cJSON *rp = cJSON_GetObjectItemCaseSensitive(c, "rope_parameters");
	if (!cJSON_IsObject(rp)) {
		const cJSON *rs = cJSON_GetObjectItemCaseSensitive(c, "rope_scaling");
		*r = (struct rope_src){c, cJSON_IsNull(rs) ? NULL : rs, c, "rope_local_base_freq",
				       0};
		return;
	}
	const cJSON *full = cJSON_GetObjectItemCaseSensitive(rp, "full_attention");
	const cJSON *slide = cJSON_GetObjectItemCaseSensitive(rp, "sliding_attention");
	r->theta = r->scaling = cJSON_IsObject(full) ? full : rp;
	r->local = cJSON_IsObject(slide) ? slide : c;
	r->local_key = cJSON_IsObject(slide) ? "rope_theta" : "rope_local_base_freq";
	r->v5 = 1;
}

/* The scaling's type: "rope_type", else "type"; NULL when neither says. */
static const char *rope_type(const cJSON *rs)
{
	const char *t = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(rs, "rope_type"));
	return t ? t : cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(rs, "type"));
}

/* Whether rs scales the rope: a type but "default"; in rope_parameters no
 * type is the default too (an old rope_scaling without one is refused). */
static int rope_scaled(const struct rope_src *r, const cJSON *rs)
{
	const char *t = rs ? rope_type(rs) : NULL;
	return rs && (t ? strcmp(t, "default") != 0 : !r->v5);
}

/* A rope value transformers 5 keeps in rope_parameters (rs) and earlier
 * versions at the top of config.json (c): rs's when it has the key. */
static int rope_num(const cJSON *rs, const cJSON *c, const char *key, double def, int def_ok,
		    double lo, double hi, double *out, struct ck_err *err)
{
	const cJSON *in = rs && cJSON_GetObjectItemCaseSensitive(rs, key) ? rs : c;
	return cfg_num(in, key, def, def_ok, lo, hi, out, err);
}

/* A soft-capping value: Hugging Face's default when absent, but an explicit
 * null means "no capping", which llama.cpp's gemma2 cannot express (it
 * always divides by the cap and takes tanh), so that and a cap of 0 are
 * refused. */
static int gemma2_cap(const cJSON *c, const char *key, double def, double *out,
		      struct ck_err *err)
{
	if (cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(c, key)))
		return ck_fail(err, CK_E_SOURCE, "config.json: \"%s\" is null (no capping): llama.cpp's "
						 "gemma2 always caps",
			       key);
	return cfg_num(c, key, def, 1, 1e-6, 1e9, out, err);
}

/* llama.cpp's gemma2 and gemma3 read no query_pre_attn_scalar: queries are
 * scaled by 1/sqrt(head_dim), or by 1/sqrt(hidden/heads) for the 27B type
 * (big_layers layers). Any other value is refused rather than served as a
 * model that computes something else. */
static int query_scale_check(double qs, double H, double L, double nh, double hd,
			     double big_layers, const char *arch, struct ck_err *err)
{
	if (qs == hd || (L == big_layers && qs == (double)((int64_t)H / (int64_t)nh)))
		return 0;
	return ck_fail(err, CK_E_SOURCE, "config.json: query_pre_attn_scalar %g: llama.cpp's %s "
					 "scales queries by head_dim (%g) only",
		       qs, arch, hd);
}

/* Gemma 2's soft-capping and sliding window; the query scale checked. */
static int gemma2_meta(const cJSON *c, double H, double L, double nh, double hd,
		       struct ck_gguf_meta *m, struct ck_err *err)
{
	double qs, acap, fcap, swa;
	if (cfg_num(c, "query_pre_attn_scalar", hd, 1, 1, 1e9, &qs, err) < 0 ||
	    gemma2_cap(c, "attn_logit_softcapping", 50, &acap, err) < 0 ||
	    gemma2_cap(c, "final_logit_softcapping", 30, &fcap, err) < 0 ||
	    cfg_num(c, "sliding_window", 4096, 1, 1, UINT32_MAX, &swa, err) < 0)
		return -1;
	if (query_scale_check(qs, H, L, nh, hd, 46, "gemma2", err) < 0)
		return -1;
	ck_gguf_meta_f32(m, "gemma2.attn_logit_softcapping", (float)acap);
	ck_gguf_meta_f32(m, "gemma2.final_logit_softcapping", (float)fcap);
	ck_gguf_meta_u32(m, "gemma2.attention.sliding_window", (uint32_t)swa);
	return 0;
}

/* The experts of a MoE family: count, used per token, each one's width and
 * the shared expert's (0: none). Mixtral's (llama with experts) are
 * intermediate_size wide. Qwen3-MoE and Qwen2-MoE: llama.cpp runs every
 * layer's MLP as experts, qwen3moe renormalizes the top-k weights and
 * qwen2moe does not; a config that says otherwise (dense layers, the
 * other norm_topk_prob) is refused, not served as another model.
 * Qwen2MoeConfig's defaults are Qwen1.5-MoE-A2.7B's; Qwen3-MoE's fields
 * must be there. */
struct moe {
	double ne, nu, ff, shared;
};

static int qwen_moe(const cJSON *c, const char *arch, struct moe *x, struct ck_err *err)
{
	int q2 = !strcmp(arch, "qwen2moe");
	double step;
	if (cfg_num(c, "num_experts", 60, q2, 1, 65535, &x->ne, err) < 0 ||
	    cfg_num(c, "num_experts_per_tok", 4, q2, 1, x->ne, &x->nu, err) < 0 ||
	    cfg_num(c, "moe_intermediate_size", 1408, q2, 1, UINT32_MAX, &x->ff, err) < 0 ||
	    (q2 && cfg_num(c, "shared_expert_intermediate_size", 5632, 1, 1, UINT32_MAX, &x->shared,
			   err) < 0) ||
	    cfg_num(c, "decoder_sparse_step", 1, 1, 1, 65535, &step, err) < 0)
		return -1;
	const cJSON *dense = cJSON_GetObjectItemCaseSensitive(c, "mlp_only_layers");
	const cJSON *norm = cJSON_GetObjectItemCaseSensitive(c, "norm_topk_prob");
	if (step != 1 || cJSON_GetArraySize(dense) > 0)
		return ck_fail(err, CK_E_SOURCE,
			       "config.json: dense layers among the experts "
			       "(decoder_sparse_step %g, %d mlp_only_layers): llama.cpp's "
			       "%s makes every layer sparse",
			       step, cJSON_GetArraySize(dense), arch);
	if (norm && !cJSON_IsBool(norm))
		return ck_fail(err, CK_E_SOURCE,
			       "config.json: norm_topk_prob must be true or false");
	if (!q2 && !cJSON_IsTrue(norm)) /* absent: Qwen3MoeConfig's default, false */
		return ck_fail(err, CK_E_SOURCE,
			       "config.json: norm_topk_prob is not true (%s): llama.cpp's "
			       "qwen3moe always renormalizes the top-k weights",
			       norm ? "false" : "absent, Qwen3MoeConfig's default false");
	if (q2 && cJSON_IsTrue(norm))
		return ck_fail(err, CK_E_SOURCE,
			       "config.json: norm_topk_prob is true: llama.cpp's qwen2moe "
			       "never renormalizes the top-k weights");
	return 0;
}

static int moe_of(const cJSON *c, const struct arch *a, double ff, struct moe *x,
		  struct ck_err *err)
{
	memset(x, 0, sizeof *x);
	if (!strcmp(a->gguf, "qwen3moe") || !strcmp(a->gguf, "qwen2moe"))
		return qwen_moe(c, a->gguf, x, err);
	int oss = !strcmp(a->gguf, "gpt-oss");
	if (!strstr(a->hf, "Mixtral") && !oss)
		return 0;
	x->ff = ff; /* GptOssConfig: 32 experts, 4 per token (experts_per_token) */
	double per = 4;
	if (oss && cfg_num(c, "experts_per_token", 4, 1, 1, 65535, &per, err) < 0)
		return -1;
	if (cfg_num(c, "num_local_experts", 32, oss, 1, 65535, &x->ne, err) < 0 ||
	    cfg_num(c, "num_experts_per_tok", per, oss, 1, x->ne, &x->nu, err) < 0)
		return -1;
	return 0;
}

static void moe_meta(const struct arch *a, const struct moe *x, struct ck_gguf_meta *m)
{
	char k[128];
#define KEY(s) (snprintf(k, sizeof k, "%s." s, a->gguf), k)
	ck_gguf_meta_u32(m, KEY("expert_count"), (uint32_t)x->ne);
	ck_gguf_meta_u32(m, KEY("expert_used_count"), (uint32_t)x->nu);
	if (strcmp(a->gguf, "llama"))
		ck_gguf_meta_u32(m, KEY("expert_feed_forward_length"), (uint32_t)x->ff);
	if (x->shared)
		ck_gguf_meta_u32(m, KEY("expert_shared_feed_forward_length"), (uint32_t)x->shared);
#undef KEY
}

/* GPT-OSS: what llama.cpp's gpt-oss fixes instead of reading it, checked:
 * sliding-window attention on the even layers and full on the odd
 * (layer_types), the clamped SwiGLU's limit 7 (swiglu_limit); the window
 * (GptOssConfig's default 128) in the metadata. */
static int gpt_oss_meta(const cJSON *c, double L, struct ck_gguf_meta *m, struct ck_err *err)
{
	double swa, limit;
	if (cfg_num(c, "sliding_window", 128, 1, 1, UINT32_MAX, &swa, err) < 0 ||
	    cfg_num(c, "swiglu_limit", 7, 1, -1e9, 1e9, &limit, err) < 0)
		return -1;
	if (limit != 7)
		return ck_fail(err, CK_E_SOURCE,
			       "config.json: swiglu_limit %g: llama.cpp's gpt-oss "
			       "clamps at 7 only",
			       limit);
	const cJSON *types = cJSON_GetObjectItemCaseSensitive(c, "layer_types"), *e;
	int i = 0;
	if (types && (!cJSON_IsArray(types) || cJSON_GetArraySize(types) != (int)L))
		return ck_fail(err, CK_E_SOURCE, "config.json: layer_types must list the %g layers",
			       L);
	cJSON_ArrayForEach(e, types)
	{
		const char *want = i % 2 ? "full_attention" : "sliding_attention";
		if (!cJSON_IsString(e) || strcmp(e->valuestring, want))
			return ck_fail(
			    err, CK_E_SOURCE,
			    "config.json: layer_types[%d] is not \"%s\": llama.cpp's "
			    "gpt-oss alternates sliding and full attention, sliding first",
			    i, want);
		i++;
	}
	ck_gguf_meta_u32(m, "gpt-oss.attention.sliding_window", (uint32_t)swa);
	return 0;
}

/* SmolLM3: Llama with no rope on every fourth layer, which llama.cpp's
 * smollm3 fixes (n_no_rope_layer_step 4, no key) where Hugging Face reads
 * no_rope_layers (1: rope) or builds it from no_rope_layer_interval; a
 * config that says another pattern, or a sliding window, is refused. */
static int smollm3_check(const cJSON *c, double L, struct ck_err *err)
{
	double step;
	if (cfg_num(c, "no_rope_layer_interval", 4, 1, 1, 65535, &step, err) < 0)
		return -1;
	const cJSON *use = cJSON_GetObjectItemCaseSensitive(c, "no_rope_layers"), *e;
	if (!use && step != 4)
		return ck_fail(err, CK_E_SOURCE,
			       "config.json: no_rope_layer_interval %g: llama.cpp's "
			       "smollm3 leaves the rope out of every 4th layer only",
			       step);
	if (use && (!cJSON_IsArray(use) || cJSON_GetArraySize(use) != (int)L))
		return ck_fail(err, CK_E_SOURCE,
			       "config.json: no_rope_layers must list the %g layers", L);
	int i = 0;
	cJSON_ArrayForEach(e, use)
	{
		int want = (i + 1) % 4 != 0;
		if (!cJSON_IsNumber(e) || e->valuedouble != want)
			return ck_fail(err, CK_E_SOURCE,
				       "config.json: no_rope_layers[%d] is not %d: llama.cpp's "
				       "smollm3 leaves the rope out of every 4th layer only",
				       i, want);
		i++;
	}
	if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "use_sliding_window")))
		return ck_fail(err, CK_E_SOURCE,
			       "config.json: use_sliding_window: llama.cpp's smollm3 "
			       "attends to every position");
	return 0;
}

/* StarCoder2: llama.cpp's starcoder2 loads every bias (use_bias false is
 * refused) and attends to every position, where Hugging Face's keeps a
 * sliding window: the context is served as the window, within which the
 * two agree (--gguf-override-kv starcoder2.context_length=int:N asks for
 * more). */
static int starcoder2_check(const cJSON *c, double *ctx, struct ck_err *err)
{
	const cJSON *bias = cJSON_GetObjectItemCaseSensitive(c, "use_bias");
	if (bias && !cJSON_IsTrue(bias))
		return ck_fail(err, CK_E_SOURCE,
			       "config.json: use_bias is not true: llama.cpp's "
			       "starcoder2 needs every bias");
	double swa;
	if (cfg_num(c, "sliding_window", 0, 1, 0, UINT32_MAX, &swa, err) < 0)
		return -1;
	if (swa >= 1 && swa < *ctx)
		*ctx = swa;
	return 0;
}

/* How the view's architecture shapes attn_q_norm / attn_k_norm. */
static int qk_norm_of(const char *arch)
{
	return !strcmp(arch, "olmo2")	    ? CK_QK_NORM_WHOLE
	       : !strcmp(arch, "command-r") ? CK_QK_NORM_PER_HEAD
					    : 0;
}

/* Cohere Command R / R+: the logit scale (CohereConfig's default 1/16) in
 * the metadata. llama.cpp's command-r always ties the output to the
 * embedding and takes the per-head Q/K LayerNorms exactly when there are
 * 64 layers or more (Command R+): a config that says otherwise is
 * refused. */
static int command_r_meta(const cJSON *c, double L, struct ck_gguf_meta *m, struct ck_err *err)
{
	double scale;
	if (cfg_num(c, "logit_scale", 0.0625, 1, -1e9, 1e9, &scale, err) < 0)
		return -1;
	const cJSON *tie = cJSON_GetObjectItemCaseSensitive(c, "tie_word_embeddings");
	if (tie && !cJSON_IsTrue(tie))
		return ck_fail(err, CK_E_SOURCE,
			       "config.json: tie_word_embeddings is not true: "
			       "llama.cpp's command-r uses the embedding as the output");
	int qk = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "use_qk_norm"));
	if (qk != (L >= 64))
		return ck_fail(
		    err, CK_E_SOURCE,
		    "config.json: use_qk_norm is %s with %g layers: llama.cpp's command-r "
		    "takes the Q/K norms exactly when there are 64 layers or more",
		    qk ? "true" : "false", L);
	ck_gguf_meta_f32(m, "command-r.logit_scale", (float)scale);
	return 0;
}

/* IBM Granite (dense): Llama with four scalars, which llama.cpp reads from
 * the metadata. Hugging Face's default for each is 1, also the attention
 * multiplier, which replaces 1/sqrt(head_dim) (llama.cpp uses that when
 * the key is absent), so all four are written. */
static int granite_meta(const cJSON *c, struct ck_gguf_meta *m, struct ck_err *err)
{
	static const char *const hf[4] = {"attention_multiplier", "embedding_multiplier",
					  "residual_multiplier", "logits_scaling"};
	static const char *const key[4] = {"granite.attention.scale", "granite.embedding_scale",
					   "granite.residual_scale", "granite.logit_scale"};
	double v[4];
	for (int k = 0; k < 4; k++)
		if (cfg_num(c, hf[k], 1, 1, 1e-9, 1e9, &v[k], err) < 0)
			return -1;
	for (int k = 0; k < 4; k++)
		ck_gguf_meta_f32(m, key[k], (float)v[k]);
	return 0;
}

/* Qwen2-VL / Qwen2.5-VL's multimodal rope: the rotated pairs split into
 * sections for the temporal, height and width positions (mrope_section,
 * in rope_scaling or rope_parameters), which llama.cpp's qwen2vl takes as
 * rope.dimension_sections padded to four. For text the three positions
 * are equal, and the model is the 1-D rope's; the sections must cover the
 * pairs exactly (a pair outside them would turn by llama.cpp's fourth
 * position, 0). */
static int qwen2vl_meta(const cJSON *rs, double rd, struct ck_gguf_meta *m, struct ck_err *err)
{
	const cJSON *sec = cJSON_GetObjectItemCaseSensitive(rs, "mrope_section"), *e;
	int32_t v[4] = {0};
	int n = 0;
	double sum = 0;
	if (!cJSON_IsArray(sec) || cJSON_GetArraySize(sec) < 1 || cJSON_GetArraySize(sec) > 4)
		return ck_fail(err, CK_E_SOURCE,
			       "config.json: rope_scaling.mrope_section must be a list "
			       "of 1 to 4 section sizes");
	cJSON_ArrayForEach(e, sec)
	{
		if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble > 65536 ||
		    e->valuedouble != (int32_t)e->valuedouble)
			return ck_fail(err, CK_E_SOURCE,
				       "config.json: rope_scaling.mrope_section[%d] is "
				       "not a size",
				       n);
		sum += e->valuedouble;
		v[n++] = (int32_t)e->valuedouble;
	}
	if (sum != floor(rd / 2))
		return ck_fail(err, CK_E_SOURCE,
			       "config.json: rope_scaling.mrope_section covers %g rotated pairs, "
			       "the head has %g",
			       sum, floor(rd / 2));
	ck_gguf_meta_i32s(m, "qwen2vl.rope.dimension_sections", v, 4);
	return 0;
}

/* Phi-3: the sliding window (0 for none, as llama.cpp's converter writes
 * it; a null window is none) and the context the rope was trained on. */
static int phi3_meta(const cJSON *c, const struct rope_src *r, double ctx, struct ck_gguf_meta *m,
		     struct ck_err *err)
{
	double swa, orig;
	if (cfg_num(c, "sliding_window", 0, 1, 0, UINT32_MAX, &swa, err) < 0 ||
	    rope_num(r->scaling, c, "original_max_position_embeddings", ctx, 1, 1, UINT32_MAX,
		     &orig, err) < 0)
		return -1;
	ck_gguf_meta_u32(m, "phi3.attention.sliding_window", (uint32_t)swa);
	ck_gguf_meta_u32(m, "phi3.rope.scaling.original_context_length", (uint32_t)orig);
	return 0;
}

/* The dims of a head the rope turns: all of them, or for Phi-3 the first
 * int(head_dim * partial_rotary_factor) as Hugging Face takes them
 * (Phi-4-mini: 96 of 128), which llama.cpp's phi3 turns when
 * rope.dimension_count says so (the NeoX pairs within those dims, as
 * Hugging Face's rotate_half on them). */
static int rotary_dims(const cJSON *c, const struct rope_src *r, const struct arch *a, double hd,
		       double *rd, struct ck_err *err)
{
	double f;
	*rd = hd;
	if (strcmp(a->gguf, "phi3"))
		return 0;
	if (rope_num(r->scaling, c, "partial_rotary_factor", 1, 1, 0, 1, &f, err) < 0)
		return -1;
	double n = floor(hd * f);
	if (n < 2 || fmod(n, 2))
		return ck_fail(err, CK_E_SOURCE,
			       "config.json: partial_rotary_factor %g turns %g of the head's %g "
			       "dims: the rope needs an even number, at least 2",
			       f, n, hd);
	*rd = n;
	return 0;
}

/* Gemma 3: llama.cpp's gemma3 hard-codes what Hugging Face configures: a
 * sliding window on five layers of every six (each sixth is global), RoPE
 * base 10000 on the sliding layers, no soft-capping, and queries scaled as
 * for Gemma 2 (its 27B type has 62 layers). Only
 * the window's width travels in the metadata, so a config that differs in
 * any of the others is refused rather than served as another model. */
static int gemma3_meta(const cJSON *c, const struct rope_src *r, double H, double L, double nh,
		       double hd, struct ck_gguf_meta *m, struct ck_err *err)
{
	double qs, swa, pattern, local;
	if (cfg_num(c, "query_pre_attn_scalar", hd, 1, 1, 1e9, &qs, err) < 0 ||
	    cfg_num(c, "sliding_window", 4096, 1, 1, UINT32_MAX, &swa, err) < 0 ||
	    cfg_num(c, "sliding_window_pattern", 6, 1, 1, 65535, &pattern, err) < 0 ||
	    cfg_num(r->local, r->local_key, 10000, 1, 1e-6, 1e12, &local, err) < 0)
		return -1;
	if (r->local != c && rope_scaled(r, r->local))
		return ck_fail(err, CK_E_SOURCE,
			       "config.json: rope_parameters.sliding_attention is "
			       "scaled (%s): llama.cpp's gemma3 does not scale its "
			       "sliding-window layers",
			       rope_type(r->local));
	if (query_scale_check(qs, H, L, nh, hd, 62, "gemma3", err) < 0)
		return -1;
	if (pattern != 6)
		return ck_fail(err, CK_E_SOURCE, "config.json: sliding_window_pattern %g: llama.cpp's "
						 "gemma3 makes every 6th layer global",
			       pattern);
	if (local != 10000)
		return ck_fail(err, CK_E_SOURCE,
			       "config.json: %s %g: llama.cpp's gemma3 uses 10000 on "
			       "its sliding-window layers",
			       r->local == c ? "rope_local_base_freq"
					     : "rope_parameters.sliding_attention.rope_theta",
			       local);
	const cJSON *types = cJSON_GetObjectItemCaseSensitive(c, "layer_types");
	int listed = types && !cJSON_IsNull(types);
	if (listed && (!cJSON_IsArray(types) || cJSON_GetArraySize(types) != (int)L))
		return ck_fail(err, CK_E_SOURCE, "config.json: \"layer_types\" must list the %g layers", L);
	for (int i = 0; listed && i < (int)L; i++) {
		const char *t = cJSON_GetStringValue(cJSON_GetArrayItem(types, i));
		const char *want = (i + 1) % 6 ? "sliding_attention" : "full_attention";
		if (!t || strcmp(t, want))
			return ck_fail(err, CK_E_SOURCE, "config.json: layer_types[%d] is %s: llama.cpp's "
							 "gemma3 has %s there (every 6th layer global)",
				       i, t ? t : "not a string", want);
	}
	static const char *const caps[] = {"attn_logit_softcapping", "final_logit_softcapping"};
	for (int i = 0; i < 2; i++) {
		const cJSON *j = cJSON_GetObjectItemCaseSensitive(c, caps[i]);
		if (j && !cJSON_IsNull(j))
			return ck_fail(err, CK_E_SOURCE, "config.json: \"%s\" is set: llama.cpp's gemma3 "
							 "does not soft-cap",
				       caps[i]);
	}
	ck_gguf_meta_u32(m, "gemma3.attention.sliding_window", (uint32_t)swa);
	return 0;
}

/* The float type most of the matrices' bytes have (the default TYPE). */
static const struct ftype *source_ftype(const struct ck_plan *p)
{
	uint64_t by[3] = {0}; /* F32, F16, BF16 */
	for (size_t i = 0; i < p->n; i++) {
		const struct ck_target *t = &p->t[i];
		int k = t->v.dtype == CK_DT_F16 ? 1 : t->v.dtype == CK_DT_BF16 ? 2 : 0;
		if (t->v.ndim >= 2)
			by[k] += t->nbytes;
	}
	return &FTYPES[by[2] > by[0] && by[2] >= by[1] ? 2 : by[1] > by[0] ? 1 : 0];
}

/* The facts llama-quantize's choices for a K-quant mix depend on. */
static struct ck_gguf_kmix kmix_of(const struct ftype *ft, const struct arch *a, const cJSON *cfg,
				   const struct ck_plan *p)
{
	const cJSON *ne = cJSON_GetObjectItemCaseSensitive(cfg, "num_local_experts");
	if (!cJSON_IsNumber(ne))
		ne = cJSON_GetObjectItemCaseSensitive(cfg, "num_experts");
	double L = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(cfg, "num_hidden_layers"));
	double nh =
	    cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(cfg, "num_attention_heads"));
	const cJSON *kv = cJSON_GetObjectItemCaseSensitive(cfg, "num_key_value_heads");
	struct ck_gguf_kmix k = {
	    .ftype = (int)ft->file_type,
	    .base = ft->ggml,
	    .has_output = ck_plan_find(p, "output.weight") != NULL,
	    .n_layer = L >= 1 && L <= 65535 ? (int)L : 0,
	    .n_expert = cJSON_IsNumber(ne) && ne->valuedouble >= 1 && ne->valuedouble <= 65535
			    ? (int)ne->valuedouble
			: !strcmp(a->gguf, "qwen2moe")
			    ? 60 /* Qwen2MoeConfig's default, as qwen_moe */
			    : 0,
	};
	/* llama.cpp's LLM_TYPE_70B: 80 layers, and a Llama with grouped KV
	 * heads whose experts are not 8 (8 makes an 8x7B or 8x22B, any other
	 * count takes the dense sizes), or a Qwen2; not a Qwen2-VL (its type
	 * is left unknown) */
	k.n_gqa = cJSON_IsNumber(kv) && kv->valuedouble >= 1 && nh >= kv->valuedouble
		      ? (int)(nh / kv->valuedouble)
		      : 1;
	k.is_70b = k.n_layer == 80 && ((!strcmp(a->gguf, "llama") && k.n_expert != 8 &&
					cJSON_IsNumber(kv) && kv->valuedouble != nh) ||
				       !strcmp(a->gguf, "qwen2"));
	return k;
}

/* What decides a matrix's type before the --tensor-type patterns, in
 * llama.cpp's order: --leave-output-tensor (the source's float type), then
 * the embedding's and the output's named types; -1 if none does. */
static int64_t named_first(const struct ck_gguf_overrides *ov, const struct ck_target *t,
			   uint32_t source, struct ck_err *err)
{
	int64_t v = -1;
	if (!strcmp(t->name, "output.weight"))
		v = ov->leave_output ? (int64_t)source : ov->output;
	else if (!strcmp(t->name, "token_embd.weight"))
		v = ov->embd;
	if (v >= 0 && ck_gguf_named_type(t, (uint32_t)v, err) < 0)
		return -2;
	return v;
}

/* A quantized file's matrix (after named_first): a pattern's type (manual
 * >= 0), --pure's base type, the mix's rule, or the converter's Q8_0; a
 * tied embedding (no output.weight) takes --output-tensor-type unless
 * pure, as the mix's output rule reaches it in llama-quantize; then
 * llama.cpp's fallback for rows the blocks do not tile. */
static uint32_t quantized_type(const struct ftype *ft, const struct ck_gguf_kmix *k,
			       const struct ck_gguf_overrides *ov, const struct ck_plan *p,
			       size_t i, int64_t manual)
{
	const struct ck_target *t = &p->t[i];
	uint32_t q = ft->ggml;
	if (manual >= 0)
		q = (uint32_t)manual;
	else if (!ov->pure && ov->output >= 0 && !k->has_output &&
		 !strcmp(t->name, "token_embd.weight"))
		q = (uint32_t)ov->output;
	else if (ft->mix && !ov->pure)
		q = ck_gguf_kmix_type(k, p, i);
	return ck_gguf_fit_rows(q, t->v.shape[t->v.ndim - 1]);
}

/* F32 in every file type, as llama.cpp's converter and llama-quantize keep
 * them: vectors (norms, biases), the MoE router, and any tensor whose name
 * does not end in ".weight" (GPT-OSS's 2-D expert biases). */
static int stays_f32(const struct ck_target *t)
{
	size_t n = strlen(t->name);
	return t->v.ndim < 2 || strstr(t->name, ".ffn_gate_inp.") || n < 7 ||
	       strcmp(t->name + n - 7, ".weight");
}

/* The targets a --tensor-type pattern decides (llama.cpp's counts pass
 * them by): their types in types[], -1 for the others. */
static int manual_types(const struct ck_plan *p, const struct ck_gguf_overrides *ov,
			int64_t **types, unsigned char **manual, struct ck_err *err)
{
	*types = NULL;
	*manual = NULL;
	if (!ov->n_tt)
		return 0;
	*types = malloc(p->n * sizeof **types);
	*manual = calloc(p->n, 1);
	if (!*types || !*manual)
		return ck_fail_sys(err, ENOMEM, "tensor types");
	for (size_t i = 0; i < p->n; i++) {
		const struct ck_target *t = &p->t[i];
		(*types)[i] = -1;
		if (stays_f32(t))
			continue;
		int64_t first = named_first(ov, t, CK_GGUF_F32, err);
		(*types)[i] = first == -1 ? ck_gguf_tt_type(ov, t->name, err) : -1;
		if (first < -1 || (*types)[i] < -1)
			return -1;
		(*manual)[i] = (*types)[i] >= 0;
	}
	return 0;
}

/* Each target's type, as llama.cpp's converter chooses it, or for a
 * quantized type as llama-quantize does (with its overrides). */
static int assign_types(struct ck_plan *p, const struct ftype *ft, const struct arch *a,
			const cJSON *cfg, int has_imatrix, const struct ck_gguf_overrides *ov,
			struct ck_err *err)
{
	struct ck_gguf_kmix k = kmix_of(ft, a, cfg, p);
	k.has_imatrix = has_imatrix;
	k.pure = ov->pure;
	const uint32_t source = source_ftype(p)->ggml;
	int64_t *manual = NULL;
	unsigned char *is_manual = NULL;
	int rc = manual_types(p, ov, &manual, &is_manual, err);
	k.manual = is_manual;
	for (size_t i = 0; i < p->n && rc == 0; i++) {
		struct ck_target *t = &p->t[i];
		rc = -1;
		if (!ck_dtype_is_castable_float(t->v.dtype)) {
			ck_fail(err, CK_E_MAPPING, "\"%s\" is %s: the GGUF view holds floats only",
				t->name, ck_dtype_name(t->v.dtype));
			break;
		}
		uint32_t q = ft->ggml;
		if (stays_f32(t))
			q = CK_GGUF_F32;
		else if (ft->mix || ft->ggml == CK_GGML_Q8_0) {
			int64_t first = named_first(ov, t, source, err);
			if (first < -1)
				break;
			q = first >= 0 ? (uint32_t)first
				       : quantized_type(ft, &k, ov, p, i, manual ? manual[i] : -1);
		}
		enum ck_dtype dt = q == CK_GGUF_F16    ? CK_DT_F16
				   : q == CK_GGUF_BF16 ? CK_DT_BF16
						       : CK_DT_F32;
		rc = ck_value_cast(&t->v, dt, 0, err); /* quantized: from F32 values */
		t->qtype = q == CK_GGUF_F32 || q == CK_GGUF_F16 || q == CK_GGUF_BF16 ? 0 : q;
	}
	free(manual);
	free(is_manual);
	return rc < 0 ? -1 : ck_plan_refresh(p, err);
}

/* Llama 3's rope scaling as llama.cpp takes it: a tensor rope_freqs.weight
 * of head_dim / 2 divisors, one per rotary frequency f (ggml divides the
 * angle by it): 1 where the wavelength 2 pi / f is under
 * original_max_position_embeddings / high_freq_factor, factor where it is
 * over original / low_freq_factor, and between them 1 / ((1 - s) / factor +
 * s) with s = (original / wavelength - low) / (high - low), Hugging Face's
 * smooth interpolation (_compute_llama3_parameters); in float32, as both
 * compute it. */
static int llama3_freqs(const cJSON *c, const cJSON *rs, double theta, double hd,
			struct ck_gguf_view *g, struct ck_err *err)
{
	double factor, low, high, orig;
	if (cfg_num(rs, "factor", 0, 0, 1e-6, 1e6, &factor, err) < 0 ||
	    cfg_num(rs, "low_freq_factor", 1, 1, 1e-6, 1e6, &low, err) < 0 ||
	    cfg_num(rs, "high_freq_factor", 4, 1, 1e-6, 1e6, &high, err) < 0 ||
	    rope_num(rs, c, "original_max_position_embeddings", 8192, 1, 1, UINT32_MAX, &orig,
		     err) < 0)
		return -1;
	if (high <= low)
		return ck_fail(err, CK_E_SOURCE,
			       "config.json: rope_scaling llama3: high_freq_factor %g "
			       "must exceed low_freq_factor %g",
			       high, low);
	int64_t n = (int64_t)hd / 2;
	float *f = calloc((size_t)(n ? n : 1), sizeof *f);
	if (!f)
		return ck_fail_sys(err, ENOMEM, "rope_freqs");
	float lo_wave = (float)(orig / low), hi_wave = (float)(orig / high);
	for (int64_t i = 0; i < n; i++) {
		float freq = 1.0f / powf((float)theta, (float)(2 * i) / (float)hd);
		float wave = 2.0f * (float)M_PI / freq;
		float s = ((float)orig / wave - (float)low) / (float)(high - low);
		f[i] = wave < hi_wave	? 1.0f
		       : wave > lo_wave ? (float)factor
					: 1.0f / ((1.0f - s) / (float)factor + s);
		double bad = f[i];
		if (!isfinite(bad) || bad <= 0) { /* a rope_theta far out of range */
			free(f);
			return ck_fail(err, CK_E_SOURCE,
				       "config.json: rope_scaling llama3 gives "
				       "frequency %lld a divisor of %g",
				       (long long)i, bad);
		}
	}
	g->extra[g->n_extra++] = (struct ck_gguf_extra){"rope_freqs.weight", f, n, 0};
	return 0;
}

/* One of Phi-3's LongRoPE factor lists as a tensor: one number per rotated
 * pair (head_dim / 2, or the partial rope's dims / 2). */
static int longrope_list(const cJSON *rs, const char *key, const char *name, int64_t n,
			 struct ck_gguf_view *g, struct ck_err *err)
{
	const cJSON *l = cJSON_GetObjectItemCaseSensitive(rs, key), *e;
	if (!cJSON_IsArray(l) || cJSON_GetArraySize(l) != n)
		return ck_fail(err, CK_E_SOURCE,
			       "config.json: rope_scaling.%s must be a list of %lld "
			       "numbers (the rotated dims / 2)",
			       key, (long long)n);
	float *f = calloc((size_t)(n ? n : 1), sizeof *f);
	if (!f)
		return ck_fail_sys(err, ENOMEM, "%s", name);
	int64_t i = 0;
	cJSON_ArrayForEach(e, l)
	{
		if (!cJSON_IsNumber(e) || !isfinite(e->valuedouble) || e->valuedouble <= 0 ||
		    e->valuedouble > 1e9) {
			free(f);
			return ck_fail(err, CK_E_SOURCE,
				       "config.json: rope_scaling.%s[%lld] is not a "
				       "positive number",
				       key, (long long)i);
		}
		f[i++] = (float)e->valuedouble;
	}
	g->extra[g->n_extra++] = (struct ck_gguf_extra){name, f, n, 0};
	return 0;
}

/* Phi-3's LongRoPE (type longrope, or su before it): the long and short
 * per-frequency divisors as rope_factors_long / rope_factors_short (llama.cpp
 * takes the long ones when its context passes the original one, as Hugging
 * Face does when the sequence does), and the attention factor Hugging Face
 * scales cos and sin by: rope_scaling.attention_factor, else sqrt(1 +
 * ln(scale) / ln(original)) for scale = max / original positions > 1. */
static int phi3_longrope(const cJSON *c, const cJSON *rs, double ctx, double rd,
			 struct ck_gguf_view *g, struct ck_err *err)
{
	double orig, att, scale;
	/* Hugging Face's scale: max / original positions, else the scaling's
	 * factor when no original is given (the original is then the max) */
	if (rope_num(rs, c, "original_max_position_embeddings", 0, 1, 0, UINT32_MAX, &orig, err) <
		0 ||
	    (orig == 0 && cfg_num(rs, "factor", 1, 1, 1e-6, 1e6, &scale, err) < 0))
		return -1;
	if (orig > 0)
		scale = ctx / orig;
	else
		orig = ctx;
	double def = scale > 1 && orig > 1 ? sqrt(1 + log(scale) / log(orig)) : 1;
	if (cfg_num(rs, "attention_factor", def, 1, 1e-6, 1e6, &att, err) < 0 ||
	    longrope_list(rs, "long_factor", "rope_factors_long.weight", (int64_t)rd / 2, g, err) <
		0 ||
	    longrope_list(rs, "short_factor", "rope_factors_short.weight", (int64_t)rd / 2, g,
			  err) < 0)
		return -1;
	ck_gguf_meta_f32(&g->meta, "phi3.rope.scaling.attn_factor", (float)att);
	return 0;
}

/* rope_scaling: linear and yarn as metadata, llama3 (the llama family) as
 * the rope_freqs tensor, Phi-3's longrope as two factor tensors; another
 * type is refused. */
/* What llama.cpp's YaRN does not read from a GGUF: the correction range's
 * rotations (it takes 32 and 1, Hugging Face's defaults) and an attention
 * factor other than Hugging Face's default 0.1 ln(factor) + 1. A config
 * that sets them otherwise would be served as another model: refused.
 * (Hugging Face's "truncate": false, GPT-OSS's, has no GGUF key either:
 * llama.cpp rounds the range outwards, as its own converter's files do;
 * the README says what that changes.) */
static int yarn_defaults(const cJSON *rs, struct ck_err *err)
{
	static const char *const beta[2] = {"beta_fast", "beta_slow"};
	static const double def[2] = {32, 1};
	for (int k = 0; k < 2; k++) {
		double v;
		if (cfg_num(rs, beta[k], def[k], 1, -1e9, 1e9, &v, err) < 0)
			return -1;
		if (v != def[k])
			return ck_fail(err, CK_E_SOURCE,
				       "config.json: rope_scaling.%s %g: llama.cpp's yarn takes "
				       "%g only",
				       beta[k], v, def[k]);
	}
	static const char *const fixed[3] = {"attention_factor", "mscale", "mscale_all_dim"};
	for (int k = 0; k < 3; k++) {
		const cJSON *v = cJSON_GetObjectItemCaseSensitive(rs, fixed[k]);
		if (v && !cJSON_IsNull(v))
			return ck_fail(err, CK_E_SOURCE,
				       "config.json: rope_scaling.%s: the GGUF view serves yarn "
				       "with Hugging Face's default attention factor only",
				       fixed[k]);
	}
	return 0;
}

static int rope_scaling(const cJSON *c, const struct rope_src *r, const struct arch *a, double ctx,
			double theta, double rd, struct ck_gguf_view *g, struct ck_err *err)
{
	const cJSON *rs = r->scaling;
	if (!rope_scaled(r, rs))
		return 0;
	const char *type = rope_type(rs);
	if (type && !strcmp(type, "mrope") && !strcmp(a->gguf, "qwen2vl"))
		return 0; /* the sections: qwen2vl_meta */
	if (type && !strcmp(type, "llama3") && !strcmp(a->gguf, "llama"))
		return llama3_freqs(c, rs, theta, rd, g, err);
	if (type && (!strcmp(type, "longrope") || !strcmp(type, "su")) && !strcmp(a->gguf, "phi3"))
		return phi3_longrope(c, rs, ctx, rd, g, err);
	if (!type || (strcmp(type, "linear") && strcmp(type, "yarn")))
		return ck_fail(err, CK_E_SOURCE,
			       "config.json: rope_scaling type %s: the GGUF view "
			       "supports linear and yarn%s",
			       type ? type : "(none)",
			       !strcmp(a->gguf, "llama")  ? ", and llama3 for the llama family"
			       : !strcmp(a->gguf, "phi3") ? ", and longrope for Phi-3"
							  : "");
	double factor;
	if (cfg_num(rs, "factor", 0, 0, 1e-6, 1e6, &factor, err) < 0)
		return -1;
	char k[128];
	snprintf(k, sizeof k, "%s.rope.scaling.type", a->gguf);
	ck_gguf_meta_str(&g->meta, k, type);
	snprintf(k, sizeof k, "%s.rope.scaling.factor", a->gguf);
	ck_gguf_meta_f32(&g->meta, k, (float)factor);
	double orig;
	snprintf(k, sizeof k, "%s.rope.scaling.original_context_length", a->gguf);
	if (!strcmp(type, "yarn") &&
	    cfg_num(rs, "original_max_position_embeddings", ctx, 1, 1, UINT32_MAX, &orig, err) == 0)
		ck_gguf_meta_u32(&g->meta, k, (uint32_t)orig);
	return strcmp(type, "yarn") ? 0 : yarn_defaults(rs, err);
}

static void target_at(const void *ctx, size_t i, const char **name, int *ndim,
		      const int64_t **shape)
{
	const struct ck_target *t = &((const struct ck_plan *)ctx)->t[i];
	*name = t->name;
	*ndim = t->v.ndim;
	*shape = t->v.shape;
}

/* general.*, the architecture's hyper-parameters and rope. */
static int arch_meta(const cJSON *c, const struct arch *a, const struct ftype *ft, const char *name,
		     struct ck_gguf_view *g, struct ck_err *err)
{
	struct ck_gguf_meta *m = &g->meta;
	double ctx, H, ff, L, nh, nkv, theta, eps, hd, rd;
	struct moe x;
	/* GemmaConfig, Gemma2Config and Gemma3TextConfig default head_dim to 256
	 * (Gemma 7B: 16 heads of 256 on a 3072-wide model), the others to
	 * hidden / heads */
	int gemma = !strncmp(a->gguf, "gemma", 5), cohere = !strcmp(a->gguf, "command-r");
	int sc2 = !strcmp(a->gguf, "starcoder2"), layer_norm = cohere || sc2;
	struct rope_src r;
	rope_src_of(c, &r);
	if (cfg_num(c, "max_position_embeddings", 0, 0, 1, UINT32_MAX, &ctx, err) < 0 ||
	    cfg_num(c, "hidden_size", 0, 0, 1, UINT32_MAX, &H, err) < 0 ||
	    cfg_num(c, "intermediate_size", 0, 0, 1, UINT32_MAX, &ff, err) < 0 ||
	    cfg_num(c, "num_hidden_layers", 0, 0, 1, 65535, &L, err) < 0 ||
	    cfg_num(c, "num_attention_heads", 0, 0, 1, 65535, &nh, err) < 0 ||
	    cfg_num(c, "num_key_value_heads", nh, 1, 1, 65535, &nkv, err) < 0 ||
	    cfg_num(r.theta, "rope_theta", 10000, 1, 1e-6, 1e12, &theta, err) < 0 ||
	    cfg_num(c,
		    cohere ? "layer_norm_eps"
		    : sc2  ? "norm_epsilon"
			   : "rms_norm_eps",
		    1e-5, layer_norm, 0, 1, &eps, err) < 0 ||
	    (sc2 && starcoder2_check(c, &ctx, err) < 0) ||
	    cfg_num(c, "head_dim",
		    gemma			  ? 256
		    : !strcmp(a->gguf, "gpt-oss") ? 64
						  : (double)((int64_t)H / (int64_t)nh),
		    1, 1, 65535, &hd, err) < 0 ||
	    rotary_dims(c, &r, a, hd, &rd, err) < 0)
		return -1;
	if (moe_of(c, a, ff, &x, err) < 0)
		return -1;
	const int olmo2 = !strcmp(a->gguf, "olmo2");
	if (olmo2 && (int64_t)hd * (int64_t)nh != (int64_t)H)
		return ck_fail(err, CK_E_SOURCE,
			       "config.json: head_dim %g: llama.cpp's olmo2 takes hidden_size / "
			       "num_attention_heads (%g) only",
			       hd, H / nh);
	const struct ck_gguf_dims dims = {
	    (int64_t)H,	 (int64_t)L,	(int64_t)nh,   (int64_t)nkv,	  (int64_t)hd,
	    (int64_t)ff, (int64_t)x.ne, (int64_t)x.ff, (int64_t)x.shared, qk_norm_of(a->gguf)};
	if (ck_gguf_check_shapes(g->plan, g->plan->n, target_at, &dims, &ck_gguf_words_hf,
				 "config.json", err) < 0)
		return -1;
	char k[128];
#define KEY(s) (snprintf(k, sizeof k, "%s." s, a->gguf), k)
	ck_gguf_meta_str(m, "general.architecture", a->gguf);
	ck_gguf_meta_str(m, "general.name", name);
	ck_gguf_meta_u32(m, "general.file_type", ft->file_type);
	if (ft->mix || g->by_quantize) /* as llama-quantize writes it: ggml's block
					* layouts' version (the converter does not) */
		ck_gguf_meta_u32(m, "general.quantization_version", 2);
	ck_gguf_meta_u32(m, KEY("context_length"), (uint32_t)ctx);
	ck_gguf_meta_u32(m, KEY("embedding_length"), (uint32_t)H);
	ck_gguf_meta_u32(m, KEY("block_count"), (uint32_t)L);
	ck_gguf_meta_u32(m, KEY("feed_forward_length"), (uint32_t)ff);
	ck_gguf_meta_u32(m, KEY("attention.head_count"), (uint32_t)nh);
	ck_gguf_meta_u32(m, KEY("attention.head_count_kv"), (uint32_t)nkv);
	ck_gguf_meta_f32(m, KEY("rope.freq_base"), (float)theta);
	if (layer_norm) /* LayerNorm (mean and variance) */
		ck_gguf_meta_f32(m, KEY("attention.layer_norm_epsilon"), (float)eps);
	else
		ck_gguf_meta_f32(m, KEY("attention.layer_norm_rms_epsilon"), (float)eps);
	ck_gguf_meta_u32(m, KEY("rope.dimension_count"), (uint32_t)rd);
	if ((int64_t)hd * (int64_t)nh != (int64_t)H) { /* an explicit head_dim (Qwen3) */
		ck_gguf_meta_u32(m, KEY("attention.key_length"), (uint32_t)hd);
		ck_gguf_meta_u32(m, KEY("attention.value_length"), (uint32_t)hd);
	}
	if (x.ne)
		moe_meta(a, &x, m);
	if (!strcmp(a->gguf, "granite") && granite_meta(c, m, err) < 0)
		return -1;
	if (!strcmp(a->gguf, "gemma2") && gemma2_meta(c, H, L, nh, hd, m, err) < 0)
		return -1;
	if (!strcmp(a->gguf, "gemma3") && gemma3_meta(c, &r, H, L, nh, hd, m, err) < 0)
		return -1;
	if (!strcmp(a->gguf, "phi3") && phi3_meta(c, &r, ctx, m, err) < 0)
		return -1;
	if (!strcmp(a->gguf, "qwen2vl") && qwen2vl_meta(r.scaling, rd, m, err) < 0)
		return -1;
	if (!strcmp(a->gguf, "gpt-oss") && gpt_oss_meta(c, L, m, err) < 0)
		return -1;
	if (!strcmp(a->gguf, "smollm3") && smollm3_check(c, L, err) < 0)
		return -1;
	if (cohere && command_r_meta(c, L, m, err) < 0)
		return -1;
	if (!strncmp(a->gguf, "qwen", 4) &&
	    cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "use_sliding_window")))
		return ck_fail(err, CK_E_SOURCE,
			       "config.json: use_sliding_window: llama.cpp's %s attends to every "
			       "position",
			       a->gguf);
#undef KEY
	return rope_scaling(c, &r, a, ctx, theta, rd, g, err);
}

static void vocab_meta(const struct ck_vocab *v, struct ck_gguf_meta *m)
{
	ck_gguf_meta_str(m, "tokenizer.ggml.model", v->model);
	if (v->pre)
		ck_gguf_meta_str(m, "tokenizer.ggml.pre", v->pre);
	ck_gguf_meta_strs(m, "tokenizer.ggml.tokens", v->tokens, v->n);
	if (v->scores)
		ck_gguf_meta_f32s(m, "tokenizer.ggml.scores", v->scores, v->n);
	ck_gguf_meta_i32s(m, "tokenizer.ggml.token_type", v->types, v->n);
	if (!strcmp(v->model, "gpt2"))
		ck_gguf_meta_strs(m, "tokenizer.ggml.merges", v->merges, v->n_merges);
	static const char *const ids[] = {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
					  "tokenizer.ggml.unknown_token_id",
					  "tokenizer.ggml.padding_token_id"};
	const int64_t vals[] = {v->bos, v->eos, v->unk, v->pad};
	for (int k = 0; k < 4; k++)
		if (vals[k] >= 0)
			ck_gguf_meta_u32(m, ids[k], (uint32_t)vals[k]);
	if (v->add_bos >= 0)
		ck_gguf_meta_bool(m, "tokenizer.ggml.add_bos_token", v->add_bos);
	if (v->add_space_prefix >= 0)
		ck_gguf_meta_bool(m, "tokenizer.ggml.add_space_prefix", v->add_space_prefix);
	if (v->add_eos >= 0)
		ck_gguf_meta_bool(m, "tokenizer.ggml.add_eos_token", v->add_eos);
	if (v->chat_template)
		ck_gguf_meta_str(m, "tokenizer.chat_template", v->chat_template);
}

/* general.name: the config's _name_or_path, else a GGUF source's own
 * general.name, else the source's directory. */
static void model_name(const struct ck_catalog *cat, const cJSON *cfg, char *out, size_t n)
{
	const char *s =
	    cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cfg, "_name_or_path"));
	const char *own =
	    cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cat->meta, "general.name"));
	if ((!s || !*s) && own && *own) {
		snprintf(out, n, "%s", own);
		return;
	}
	if (!s || !*s)
		s = cat->dir ? cat->dir : cat->source;
	size_t len = strlen(s);
	while (len > 1 && s[len - 1] == '/')
		len--;
	const char *b = s + len;
	while (b > s && b[-1] != '/')
		b--;
	snprintf(out, n, "%.*s", (int)(s + len - b), b);
}

/* The vocabulary: placeholders (gguf_vocab=none), else the tokenizer files
 * beside the checkpoint (g->vocab), else a GGUF source's own tokenizer.*
 * records (into tok). */
static int load_vocab(const struct ck_catalog *cat, const cJSON *cfg, const struct arch *a,
		      const struct ck_gguf_opts *o, struct ck_gguf_view *g,
		      struct ck_gguf_meta *tok, struct ck_err *err)
{
	const struct ck_target *emb = ck_plan_find(g->plan, "token_embd.weight");
	if (!emb || emb->v.ndim != 2)
		return ck_fail(err, CK_E_MAPPING, "the GGUF view has no 2-D token_embd.weight");
	if (o->vocab_none)
		return ck_vocab_placeholder(emb->v.shape[0], &g->vocab, err);
	int r = cat->dir
		    ? ck_vocab_load(cat->dir, cfg, emb->v.shape[0], a->spm, o->pre, &g->vocab, err)
		    : 1;
	if (r == 1)
		r = ck_gguf_source_tokenizer(cat, emb->v.shape[0], o->pre, tok, err);
	if (r == 1)
		return ck_fail(err, CK_E_SOURCE, "%s: no tokenizer.json or tokenizer.model beside the "
						 "checkpoint (-o gguf_vocab=none serves placeholder "
						 "tokens, for token ids only)",
			       cat->dir ? cat->dir : cat->source);
	return r;
}

/* The mappings in the order they apply: a GGUF source's own to Hugging
 * Face names when the user gives none, the user's, a vision-language
 * class's unwrapping, the class's to llama.cpp's names. */
static int load_maps(const struct ck_catalog *cat, const struct arch *a,
		     struct ck_mapping *const *maps, int n_maps, struct ck_gguf_view *g,
		     struct ck_mapping **all, int *n_all, struct ck_err *err)
{
	char path[PATH_MAX];
	const char *from = n_maps == 0 && cat->meta ? a->from_gguf : NULL;
	if (n_maps > CK_MAX_MAPPINGS ||
	    (from && (ck_mapping_resolve(from, path, sizeof path, err) < 0 ||
		      ck_mapping_load(path, &g->source_map, err) < 0)) ||
	    ck_mapping_resolve(a->mapping, path, sizeof path, err) < 0 ||
	    ck_mapping_load(path, &g->arch_map, err) < 0 ||
	    (a->unwrap && (ck_mapping_resolve(a->unwrap, path, sizeof path, err) < 0 ||
			   ck_mapping_load(path, &g->unwrap_map, err) < 0)))
		return -1;
	int n = 0;
	if (g->source_map)
		all[n++] = g->source_map;
	for (int k = 0; k < n_maps; k++)
		all[n++] = maps[k];
	if (g->unwrap_map)
		all[n++] = g->unwrap_map;
	all[n++] = g->arch_map;
	*n_all = n;
	return 0;
}

int ck_gguf_opts_used(const struct ck_gguf_opts *o)
{
	return o->pre || o->vocab_none || o->imatrix || o->pure || o->output_type || o->embd_type ||
	       o->leave_output || o->n_tt || o->split_max_size || o->split_max_tensors || o->n_kv;
}

int ck_gguf_opts_add_kv(struct ck_gguf_opts *o, const char *arg, struct ck_err *err)
{
	struct ck_gguf_kv_set kv;
	if (ck_gguf_kv_parse(arg, &kv, err) < 0)
		return -1;
	if (o->n_kv == CK_GGUF_MAX_KV)
		return ck_fail(err, CK_E_USAGE, "--gguf-override-kv: at most %d", CK_GGUF_MAX_KV);
	o->kv[o->n_kv++] = arg;
	return 0;
}

/* The hyper-parameters as the final metadata says them, against the
 * tensors: an override of an architecture key that no longer describes
 * them (block_count, embedding_length, head counts, widths, expert counts)
 * would make a file llama.cpp refuses or runs as another model. */
static int check_overrides(const struct ck_gguf_view *g, const char *arch,
			   const struct ck_gguf_opts *o, struct ck_err *err)
{
	int touched = 0;
	size_t al = strlen(arch);
	for (int i = 0; i < o->n_kv; i++)
		touched |= !strncmp(o->kv[i], arch, al) && o->kv[i][al] == '.';
	if (!touched)
		return 0;
	static const char *const keys[9] = {"embedding_length",
					    "block_count",
					    "attention.head_count",
					    "attention.head_count_kv",
					    "attention.key_length",
					    "feed_forward_length",
					    "expert_count",
					    "expert_feed_forward_length",
					    "expert_shared_feed_forward_length"};
	double v[9];
	for (int k = 0; k < 9; k++) {
		char key[160];
		snprintf(key, sizeof key, "%s.%s", arch, keys[k]);
		if (!ck_gguf_meta_number(&g->meta, key, &v[k]) || v[k] < 0 || v[k] > UINT32_MAX)
			v[k] = k == 3		    ? v[2]
			       : k == 4 && v[2] > 0 ? floor(v[0] / v[2])
			       : k == 7		    ? v[5]
						    : 0;
	}
	if (!v[6]) /* no experts: their widths unchecked */
		v[7] = v[8] = 0;
	const struct ck_gguf_dims d = {(int64_t)v[0], (int64_t)v[1],   (int64_t)v[2], (int64_t)v[3],
				       (int64_t)v[4], (int64_t)v[5],   (int64_t)v[6], (int64_t)v[7],
				       (int64_t)v[8], qk_norm_of(arch)};
	if (ck_gguf_check_shapes(g->plan, g->plan->n, target_at, &d, &ck_gguf_words_gguf,
				 "--gguf-override-kv", err) < 0) {
		err->kind = CK_E_USAGE; /* the option's doing, not the checkpoint's */
		return -1;
	}
	return 0;
}

/* The overrides, in order, on the finished metadata. */
static int apply_overrides(struct ck_gguf_view *g, const char *arch, const struct ck_gguf_opts *o,
			   struct ck_err *err)
{
	if (!o->n_kv)
		return 0;
	struct ck_gguf_kv_set *kv = calloc((size_t)o->n_kv, sizeof *kv);
	if (!kv)
		return ck_fail_sys(err, ENOMEM, "--gguf-override-kv");
	int rc = 0;
	for (int i = 0; i < o->n_kv && rc == 0; i++)
		rc = ck_gguf_kv_parse(o->kv[i], &kv[i], err);
	if (rc == 0)
		rc = ck_gguf_kv_apply(&g->meta, kv, (size_t)o->n_kv, err);
	free(kv);
	return rc < 0 ? -1 : check_overrides(g, arch, o, err);
}

int ck_gguf_opts_split(struct ck_gguf_opts *o, int tensors, const char *val, const char *opt,
		       struct ck_err *err)
{
	uint64_t v = 0;
	if (!val || ck_parse_size(val, &v) < 0 || !v || (tensors && v > INT32_MAX) ||
	    (tensors && strspn(val, "0123456789") != strlen(val)))
		return ck_fail(err, CK_E_USAGE, "%s \"%s\": %s", opt, val ? val : "",
			       tensors ? "a count of tensors from 1 on"
				       : "a size above 0 (4G, 500MB, 2GiB)");
	if (tensors ? o->split_max_size != 0 : o->split_max_tensors != 0)
		return ck_fail(err, CK_E_USAGE,
			       "a GGUF split goes by size or by tensors, not both (as gguf-split)");
	*(tensors ? &o->split_max_tensors : &o->split_max_size) = v;
	return 0;
}

int ck_gguf_opts_add_tt(struct ck_gguf_opts *o, const char *arg, int file, struct ck_err *err)
{
	if (o->n_tt == CK_GGUF_MAX_TT)
		return ck_fail(err, CK_E_USAGE,
			       "more than %d tensor type options: put the patterns in a file "
			       "(--gguf-tensor-type-file, -o gguf_tensor_type_file)",
			       CK_GGUF_MAX_TT);
	o->tt[o->n_tt].arg = arg;
	o->tt[o->n_tt++].file = file;
	return 0;
}

/* The gguf-split pieces, when asked for, and the served files' names. */
static int split_files(const struct ck_gguf_opts *o, struct ck_gguf_view *g, struct ck_err *err)
{
	if ((o->split_max_size || o->split_max_tensors) &&
	    ck_gguf_build_split(g->plan, &g->meta, g->extra, g->n_extra, o->split_max_size,
				o->split_max_tensors, &g->split, &g->n_split, err) < 0)
		return -1;
	size_t n = ck_gguf_view_n_files(g);
	g->names = calloc(n, sizeof *g->names);
	g->split_names = calloc(n, sizeof *g->split_names);
	if (!g->names || !g->split_names)
		return ck_fail_sys(err, ENOMEM, "GGUF split");
	g->names[0] = "model.gguf";
	for (size_t k = 0; k < g->n_split; k++) { /* llama.cpp's llama_split_path */
		snprintf(g->split_names[k], sizeof g->split_names[k], "model-%05zu-of-%05zu.gguf",
			 k + 1, g->n_split);
		g->names[k] = g->split_names[k];
	}
	return 0;
}

size_t ck_gguf_view_n_files(const struct ck_gguf_view *g)
{
	return g->n_split ? g->n_split : 1;
}

const char *const *ck_gguf_view_names(const struct ck_gguf_view *g)
{
	return g->names;
}

const struct ck_vfile *ck_gguf_view_files(const struct ck_gguf_view *g)
{
	return g->n_split ? g->split : &g->file;
}

void ck_gguf_view_renumber(struct ck_gguf_view *g, const uint32_t *idx)
{
	ck_vfile_renumber(&g->file, idx);
	for (size_t k = 0; k < g->n_split; k++)
		ck_vfile_renumber(&g->split[k], idx);
}

int ck_gguf_view_open(const struct ck_catalog *cat, struct ck_mapping *const *maps, int n_maps,
		      const struct ck_gguf_opts *o, struct ck_gguf_view *g, struct ck_err *err)
{
	memset(g, 0, sizeof *g);
	if (ck_gguf_check_type(o->type, err) < 0)
		return -1;
	if (!cat->config)
		return ck_fail(err, CK_E_SOURCE, "%s: no config.json: the GGUF view needs the "
						 "architecture and its hyper-parameters",
			       cat->source);
	const cJSON *cfg;
	if (ck_gguf_text_config(cat->config, &cfg, &g->config, err) < 0)
		return -1;
	const struct arch *a = find_arch(cfg, err);
	struct ck_mapping *all[CK_MAX_MAPPINGS + 3];
	int n_all;
	struct ck_gguf_meta tok = {0}; /* a GGUF source's tokenizer records */
	/* the mappings read the class's hyper-parameters as the view does
	 * (a multimodal class's text model, with its defaults filled in) */
	if (!a || load_maps(cat, a, maps, n_maps, g, all, &n_all, err) < 0 ||
	    ck_plan_build_config(cat, cfg, all, n_all, &g->plan, err) < 0)
		goto fail;
	const struct ftype *ft = o->type ? find_ftype(o->type) : source_ftype(g->plan);
	g->arch = a->gguf;
	g->type = ft->name;
	char name[256];
	model_name(cat, cfg, name, sizeof name);
	struct ck_gguf_overrides ov;
	if (ck_gguf_overrides_parse(o, ft->name, ft->mix || ft->ggml == CK_GGML_Q8_0, &ov, err) < 0)
		goto fail;
	/* Q8_0 with llama-quantize's options is llama-quantize's file */
	g->by_quantize = ov.pure || ov.leave_output || ov.output >= 0 || ov.embd >= 0 || ov.n_tt ||
			 o->imatrix || o->n_kv;
	int typed = assign_types(g->plan, ft, a, cfg, o->imatrix != NULL, &ov, err);
	ck_gguf_overrides_free(&ov);
	if (typed < 0 ||
	    (o->imatrix && ck_gguf_imatrix_attach(g->plan, o->imatrix, ft->name, &g->imx,
						  &g->imx_used, err) < 0) ||
	    load_vocab(cat, cfg, a, o, g, &tok, err) < 0 || arch_meta(cfg, a, ft, name, g, err) < 0)
		goto fail;
	if (o->imatrix)
		ck_gguf_imatrix_meta(&g->imx, o->imatrix, &g->meta);
	if (tok.n)
		ck_gguf_meta_append(&g->meta, &tok);
	else
		vocab_meta(&g->vocab, &g->meta);
	if (apply_overrides(g, a->gguf, o, err) < 0)
		goto fail;
	if (ck_gguf_build(g->plan, &g->meta, g->extra, g->n_extra, &g->file, err) < 0 ||
	    split_files(o, g, err) < 0)
		goto fail;
	ck_gguf_meta_free(&tok);
	g->header_bytes = g->file.n ? g->file.parts[0].len : 0;
	return 0;
fail:
	ck_gguf_meta_free(&tok);
	ck_gguf_view_free(g);
	return -1;
}

void ck_gguf_view_free(struct ck_gguf_view *g)
{
	ck_plan_free(g->plan);
	ck_vfile_free(&g->file);
	ck_gguf_free_split(g->split, g->n_split);
	free(g->split_names);
	free(g->names);
	ck_gguf_meta_free(&g->meta);
	ck_vocab_free(&g->vocab);
	ck_mapping_free(g->arch_map);
	ck_mapping_free(g->source_map);
	ck_mapping_free(g->unwrap_map);
	cJSON_Delete(g->config);
	ck_imatrix_free(&g->imx);
	for (size_t k = 0; k < g->n_extra; k++)
		free(g->extra[k].data);
	memset(g, 0, sizeof *g);
}
