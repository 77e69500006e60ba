/* The config.json the GGUF view reads a model's hyper-parameters from.
 * Most classes: the file's own object. Gemma 3 leaves fields out and lets
 * transformers' Gemma3TextConfig fill them in (rope_theta 1e6, not the
 * 10000 of the other families), and its multimodal class,
 * Gemma3ForConditionalGeneration, keeps its text model's fields under
 * "text_config" (the 4B's lists only five of them); the view reads those
 * with the defaults filled in, as transformers and llama.cpp's converter
 * (which loads the config through transformers) do. LLaVA's and
 * Mistral3's text_config get the defaults of the text class its model_type
 * names (LlamaConfig, MistralConfig): LLaVA 1.5's lists a handful of
 * fields. The view's plan reads the same object (ck_plan_build_config). */
#ifndef CK_GGUF_TEXT_CONFIG_H
#define CK_GGUF_TEXT_CONFIG_H

#include <cjson/cJSON.h>

#include "../util/error.h"

/* *use: the object to read (config itself, or *owned); *owned: a copy to
 * free with cJSON_Delete, or NULL. -1 with err for a text_config that is
 * not an object, or of a text class the view does not serve. */
int ck_gguf_text_config(const cJSON *config, const cJSON **use, cJSON **owned, struct ck_err *err);

#endif
