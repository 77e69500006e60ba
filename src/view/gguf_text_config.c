#include "gguf_text_config.h"

#include <errno.h>
#include <string.h>

/* Gemma3TextConfig's defaults (transformers 4.50 to 5: the same numbers in
 * configuration_gemma3.py and modular_gemma3.py). rope_theta and
 * rope_local_base_freq are the flat form's; transformers 5's
 * rope_parameters get theirs below. The special token ids get none:
 * llama.cpp's converter reads those from the files as written. */
struct text_default {
	const char *key;
	double value;
};
static const struct text_default GEMMA3_TEXT[] = {
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

/* The defaults of the text classes a LLaVA or Mistral3 checkpoint's
 * text_config names by its model_type (transformers' LlamaConfig and
 * MistralConfig, 4.x to 5: the same numbers). head_dim is hidden_size /
 * num_attention_heads when absent, as the view takes it anyway, and
 * rope_theta 10000, the view's own default for these classes. */
static const struct text_default LLAMA_TEXT[] = {
    {"vocab_size", 32000},     {"hidden_size", 4096},	    {"intermediate_size", 11008},
    {"num_hidden_layers", 32}, {"num_attention_heads", 32}, {"max_position_embeddings", 2048},
    {"rms_norm_eps", 1e-6},
};
static const struct text_default MISTRAL_TEXT[] = {
    {"vocab_size", 32000},
    {"hidden_size", 4096},
    {"intermediate_size", 14336},
    {"num_hidden_layers", 32},
    {"num_attention_heads", 32},
    {"num_key_value_heads", 8},
    {"max_position_embeddings", 131072},
    {"rms_norm_eps", 1e-6},
};
/* Mistral3Config with no text_config at all: Mistral Small 3.1's model */
static const struct text_default MISTRAL3_NONE[] = {
    {"vocab_size", 131072},
    {"hidden_size", 5120},
    {"intermediate_size", 32768},
    {"num_hidden_layers", 40},
    {"num_attention_heads", 32},
    {"num_key_value_heads", 8},
    {"head_dim", 128},
    {"max_position_embeddings", 131072},
    {"rms_norm_eps", 1e-5},
    {"rope_theta", 1e9},
};

static int put_defaults(cJSON *t, const struct text_default *d, size_t n)
{
	int bad = 0;
	for (size_t k = 0; k < n; k++)
		bad |= put_default(t, d[k].key, d[k].value);
	return bad;
}

/* LlavaForConditionalGeneration (LLaVA 1.5, Pixtral 12B) and
 * Mistral3ForConditionalGeneration (Mistral Small 3.1 / 3.2): the text
 * model as transformers builds it, its text_config over the defaults of
 * the class its model_type names (the outer class's default type when it
 * names none), or the outer class's whole default model without one. Only
 * a llama or mistral text model is served: llama.cpp reads these classes'
 * language model as llama, and another type's fields would be read as
 * llama's. */
static int llama_text(const cJSON *config, const char *outer_type, const struct text_default *none,
		      size_t n_none, const cJSON **use, cJSON **owned, struct ck_err *err)
{
	const cJSON *tc = cJSON_GetObjectItemCaseSensitive(config, "text_config");
	int absent = !cJSON_IsObject(tc);
	cJSON *t = vlm_text(config, err);
	if (!t)
		return -1;
	const cJSON *mt = cJSON_GetObjectItemCaseSensitive(t, "model_type");
	const char *type = mt ? cJSON_GetStringValue(mt) : outer_type;
	int bad = 0;
	if (!type || (strcmp(type, "llama") && strcmp(type, "mistral"))) {
		if (type) /* before t, which holds it, goes */
			ck_fail(
			    err, CK_E_SOURCE,
			    "config.json: text_config's model_type \"%s\": the GGUF view serves "
			    "this class's language model when it is llama or mistral",
			    type);
		else
			ck_fail(err, CK_E_SOURCE,
				"config.json: text_config's \"model_type\" is not a string");
		cJSON_Delete(t);
		return -1;
	}
	if (absent && none)
		bad |= put_defaults(t, none, n_none);
	if (!strcmp(type, "mistral"))
		bad |= put_defaults(t, MISTRAL_TEXT, sizeof MISTRAL_TEXT / sizeof *MISTRAL_TEXT);
	else
		bad |= put_defaults(t, LLAMA_TEXT, sizeof LLAMA_TEXT / sizeof *LLAMA_TEXT);
	/* LlamaConfig's key-value heads: the query heads (MistralConfig's
	 * absent ones are 8, set above; a null one is the query heads too, as
	 * the view and the mapping read a null) */
	const cJSON *heads = cJSON_GetObjectItemCaseSensitive(t, "num_attention_heads");
	if (cJSON_IsNumber(heads))
		bad |= put_default(t, "num_key_value_heads", heads->valuedouble);
	if (bad) {
		cJSON_Delete(t);
		return ck_fail_sys(err, ENOMEM, "config.json");
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
		return llama_text(config, "mistral", MISTRAL3_NONE,
				  sizeof MISTRAL3_NONE / sizeof *MISTRAL3_NONE, use, owned, err);
	if (cls && !strcmp(cls, "LlavaForConditionalGeneration"))
		return llama_text(config, "llama", NULL, 0, use, owned, err);
	if (cls && (!strcmp(cls, "Qwen2VLForConditionalGeneration") ||
		    !strcmp(cls, "Qwen2_5_VLForConditionalGeneration")))
		return qwen2vl_text(config, use, owned, err);
	int vlm = cls && !strcmp(cls, "Gemma3ForConditionalGeneration");
	if (!cls || (!vlm && strcmp(cls, "Gemma3ForCausalLM")))
		return 0;
	cJSON *t = vlm ? vlm_text(config, err) : cJSON_Duplicate(config, 1);
	if (!t)
		return vlm ? -1 : ck_fail_sys(err, ENOMEM, "config.json");
	int bad = rope_defaults(t) |
		  put_defaults(t, GEMMA3_TEXT, sizeof GEMMA3_TEXT / sizeof *GEMMA3_TEXT);
	if (bad) {
		cJSON_Delete(t);
		return ck_fail_sys(err, ENOMEM, "config.json");
	}
	*use = *owned = t;
	return 0;
}
