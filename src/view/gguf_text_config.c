#include "gguf_text_config.h"

#include <errno.h>
#include <string.h>

/* Gemma3TextConfig's defaults (transformers 4.50 to 5: the same numbers in
 * configuration_gemma3.py and modular_gemma3.py). rope_theta and
 * rope_local_base_freq are the flat form's; transformers 5's
 * rope_parameters get theirs below. The special token ids get none:
 * llama.cpp's converter reads those from the files as written. */
static const struct {
	const char *key;
	double value;
} GEMMA3_TEXT[] = {
    {"vocab_size", 262208},	 {"hidden_size", 2304},
    {"intermediate_size", 9216}, {"num_hidden_layers", 26},
    {"num_attention_heads", 8},	 {"num_key_value_heads", 4},
    {"head_dim", 256},		 {"max_position_embeddings", 131072},
    {"rms_norm_eps", 1e-6},	 {"query_pre_attn_scalar", 256},
    {"sliding_window", 4096},	 {"sliding_window_pattern", 6},
};

static int put_default(cJSON *o, const char *key, double value)
{
	if (cJSON_GetObjectItemCaseSensitive(o, key))
		return 0;
	return cJSON_AddNumberToObject(o, key, value) ? 0 : -1;
}

/* The rope bases: flat rope_theta 1e6 and rope_local_base_freq 10000, or
 * in rope_parameters the full-attention and sliding-attention bases. */
static int rope_defaults(cJSON *t)
{
	cJSON *rp = cJSON_GetObjectItemCaseSensitive(t, "rope_parameters");
	if (!cJSON_IsObject(rp))
		return put_default(t, "rope_theta", 1e6) |
		       put_default(t, "rope_local_base_freq", 1e4);
	cJSON *full = cJSON_GetObjectItemCaseSensitive(rp, "full_attention");
	cJSON *slide = cJSON_GetObjectItemCaseSensitive(rp, "sliding_attention");
	return put_default(cJSON_IsObject(full) ? full : rp, "rope_theta", 1e6) |
	       (cJSON_IsObject(slide) ? put_default(slide, "rope_theta", 1e4)
				      : put_default(t, "rope_local_base_freq", 1e4));
}

/* The multimodal class's text model: text_config (absent or null: all
 * defaults, as transformers makes it), with the class, the name and the
 * special token ids of the outer config where it does not say them. */
static cJSON *vlm_text(const cJSON *config, struct ck_err *err)
{
	const cJSON *tc = cJSON_GetObjectItemCaseSensitive(config, "text_config");
	if (tc && !cJSON_IsNull(tc) && !cJSON_IsObject(tc)) {
		ck_fail(err, CK_E_SOURCE, "config.json: \"text_config\" is not an object");
		return NULL;
	}
	cJSON *t = cJSON_IsObject(tc) ? cJSON_Duplicate(tc, 1) : cJSON_CreateObject();
	static const char *const outer[] = {"architectures", "_name_or_path", "bos_token_id",
					    "eos_token_id", "pad_token_id"};
	for (size_t k = 0; t && k < sizeof outer / sizeof *outer; k++) {
		const cJSON *v = cJSON_GetObjectItemCaseSensitive(config, outer[k]);
		if (!v || (k && cJSON_GetObjectItemCaseSensitive(t, outer[k])))
			continue;
		cJSON *copy = cJSON_Duplicate(v, 1);
		cJSON_DeleteItemFromObjectCaseSensitive(t, outer[k]);
		if (!copy || !cJSON_AddItemToObject(t, outer[k], copy)) {
			cJSON_Delete(copy);
			cJSON_Delete(t);
			t = NULL;
		}
	}
	if (!t)
		ck_fail_sys(err, ENOMEM, "config.json");
	return t;
}

/* Mistral3ForConditionalGeneration (Mistral Small 3.1 / 3.2): its
 * text_config as written. The planner reads the Q/K permutation's head
 * counts from text_config too, with the mapping's own default (the query
 * heads) for the key-value heads, where MistralConfig's is 8: a
 * text_config without them is refused, not permuted by another count. */
static int mistral3_text(const cJSON *config, const cJSON **use, cJSON **owned, struct ck_err *err)
{
	cJSON *t = vlm_text(config, err);
	if (!t)
		return -1;
	static const char *const need[] = {"hidden_size", "num_attention_heads",
					   "num_key_value_heads"};
	for (size_t k = 0; k < sizeof need / sizeof *need; k++)
		if (!cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(t, need[k]))) {
			cJSON_Delete(t);
			return ck_fail(err, CK_E_SOURCE,
				       "config.json: text_config has no \"%s\": the GGUF view "
				       "does not take it from MistralConfig's defaults",
				       need[k]);
		}
	*use = *owned = t;
	return 0;
}

/* Qwen2-VL / Qwen2.5-VL: the language model's fields at the top level
 * (transformers 4.49 and before) or under text_config (later). */
static int qwen2vl_text(const cJSON *config, const cJSON **use, cJSON **owned, struct ck_err *err)
{
	const cJSON *tc = cJSON_GetObjectItemCaseSensitive(config, "text_config");
	if (!cJSON_GetObjectItemCaseSensitive(tc, "hidden_size"))
		return 0;
	cJSON *t = vlm_text(config, err);
	if (!t)
		return -1;
	*use = *owned = t;
	return 0;
}

int ck_gguf_text_config(const cJSON *config, const cJSON **use, cJSON **owned, struct ck_err *err)
{
	*use = config;
	*owned = NULL;
	const char *cls = cJSON_GetStringValue(
	    cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(config, "architectures"), 0));
	if (cls && !strcmp(cls, "Mistral3ForConditionalGeneration"))
		return mistral3_text(config, use, owned, err);
	if (cls && (!strcmp(cls, "Qwen2VLForConditionalGeneration") ||
		    !strcmp(cls, "Qwen2_5_VLForConditionalGeneration")))
		return qwen2vl_text(config, use, owned, err);
	int vlm = cls && !strcmp(cls, "Gemma3ForConditionalGeneration");
	if (!cls || (!vlm && strcmp(cls, "Gemma3ForCausalLM")))
		return 0;
	cJSON *t = vlm ? vlm_text(config, err) : cJSON_Duplicate(config, 1);
	if (!t)
		return vlm ? -1 : ck_fail_sys(err, ENOMEM, "config.json");
	int bad = rope_defaults(t);
	for (size_t k = 0; k < sizeof GEMMA3_TEXT / sizeof *GEMMA3_TEXT; k++)
		bad |= put_default(t, GEMMA3_TEXT[k].key, GEMMA3_TEXT[k].value);
	if (bad) {
		cJSON_Delete(t);
		return ck_fail_sys(err, ENOMEM, "config.json");
	}
	*use = *owned = t;
	return 0;
}
