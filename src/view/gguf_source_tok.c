#include "gguf_source_tok.h"

#include <string.h>

/* The number of tokens the metadata lists: a kept array's size, or the
 * count of a summarised one; -1 when it is not an array of strings. */
static int64_t token_count(const cJSON *meta)
{
	const cJSON *t = cJSON_GetObjectItemCaseSensitive(meta, "tokenizer.ggml.tokens");
	if (cJSON_IsArray(t)) {
		for (const cJSON *e = t->child; e; e = e->next)
			if (!cJSON_IsString(e))
				return -1;
		return cJSON_GetArraySize(t);
	}
	const char *type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(t, "type"));
	const cJSON *n = cJSON_GetObjectItemCaseSensitive(t, "count");
	return type && !strcmp(type, "string") && cJSON_IsNumber(n) ? (int64_t)n->valuedouble : -1;
}

int ck_gguf_source_tokenizer(const struct ck_catalog *cat, int64_t n_vocab, const char *pre,
			     struct ck_gguf_meta *m, struct ck_err *err)
{
	const struct ck_gguf_kvs *k = &cat->gguf_tok;
	if (!cat->meta || !cJSON_GetObjectItemCaseSensitive(cat->meta, "tokenizer.ggml.tokens"))
		return 1;
	if (!cJSON_IsString(cJSON_GetObjectItemCaseSensitive(cat->meta, "tokenizer.ggml.model")))
		return ck_fail(err, CK_E_SOURCE,
			       "%s: tokenizer.ggml.model is missing or not a string: the GGUF "
			       "source's tokenizer cannot be served",
			       cat->source);
	int64_t n = token_count(cat->meta);
	if (n < 0)
		return ck_fail(err, CK_E_SOURCE,
			       "%s: tokenizer.ggml.tokens is not an array of strings", cat->source);
	if (n != n_vocab)
		return ck_fail(err, CK_E_SOURCE,
			       "%s: tokenizer.ggml.tokens lists %lld tokens, the view's "
			       "token_embd.weight has %lld rows",
			       cat->source, (long long)n, (long long)n_vocab);
	for (size_t i = 0; i < k->n; i++)
		if (!pre || strcmp(k->kv[i].key, "tokenizer.ggml.pre"))
			ck_gguf_meta_record(m, k->bytes + k->kv[i].off, k->kv[i].len);
	if (pre)
		ck_gguf_meta_str(m, "tokenizer.ggml.pre", pre);
	return 0;
}
