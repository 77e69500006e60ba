/* Fuzz target: the mapping parser (patterns and expressions included) and
 * the planner, run against a fixed in-memory Llama-like catalog. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/catalog.h"
#include "map/mapping.h"
#include "plan/plan.h"
#include "util/json_strict.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct ck_catalog *fixed_catalog(void)
{
	static struct ck_catalog cat;
	static struct ck_catalog_entry ents[32];
	static struct ck_source_file file = {"model.safetensors", "model.safetensors", -1, 0,
					     {0, 0}, 0};
	static char names[32][96];
	if (cat.n_entries)
		return &cat;
	const char *kinds[] = {"self_attn.q_proj.weight", "self_attn.k_proj.weight",
			       "self_attn.v_proj.weight", "mlp.gate_proj.weight",
			       "mlp.up_proj.weight", "input_layernorm.weight"};
	const int64_t shapes[][2] = {{8, 8}, {4, 8}, {4, 8}, {12, 8}, {12, 8}, {8, 0}};
	size_t n = 0;
	for (int L = 0; L < 2; L++)
		for (int k = 0; k < 6; k++, n++) {
			snprintf(names[n], sizeof names[n], "model.layers.%d.%s", L, kinds[k]);
			ents[n].t.name = names[n];
			ents[n].t.dtype = k == 5 ? CK_DT_BF16 : CK_DT_F32;
			ents[n].t.ndim = shapes[k][1] ? 2 : 1;
			ents[n].t.shape[0] = shapes[k][0];
			ents[n].t.shape[1] = shapes[k][1];
		}
	snprintf(names[n], sizeof names[n], "model.embed_tokens.weight");
	ents[n].t.name = names[n];
	ents[n].t.dtype = CK_DT_F16;
	ents[n].t.ndim = 2;
	ents[n].t.shape[0] = 16;
	ents[n].t.shape[1] = 8;
	n++;
	cat.entries = ents;
	cat.n_entries = n;
	cat.files = &file;
	cat.n_files = 1;
	cat.format = "safetensors";
	const char *cfg = "{\"hidden_size\": 8, \"num_attention_heads\": 4, "
			  "\"num_key_value_heads\": 2, \"tie_word_embeddings\": false}";
	cat.config = cJSON_Parse(cfg);
	ck_strmap_init(&cat.by_name, n);
	for (size_t i = 0; i < n; i++)
		ck_strmap_put(&cat.by_name, ents[i].t.name, (uint32_t)i, NULL);
	return &cat;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ck_catalog *cat = fixed_catalog();
	struct ck_mapping *m;
	struct ck_err err;
	if (ck_mapping_parse((const char *)data, size, "fuzz.json", &m, &err) < 0)
		return 0;
	struct ck_plan *p;
	if (ck_plan_build(cat, &m, 1, &p, &err) == 0)
		ck_plan_free(p);
	ck_mapping_free(m);
	return 0;
}
