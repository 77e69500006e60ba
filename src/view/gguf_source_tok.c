#include "gguf_source_tok.h"

#include <string.h>

enum { T_I32 = 5, T_F32 = 6, T_STRING = 8, T_ARRAY = 9 }; /* GGUF's value types */

static uint64_t le(const unsigned char *p, int n)
{
	uint64_t v = 0;
	for (int i = n - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

/* The record of key among k's: its value type and, for an array, the
 * element type and count, read from the record's bytes as the file encodes
 * them (the parse that kept them checked every length). 0 when k has no
 * such key. */
static int record(const struct ck_gguf_kvs *k, const char *key, uint32_t *type, uint32_t *elem,
		  uint64_t *count)
{
	for (size_t i = 0; i < k->n; i++) {
		if (strcmp(k->kv[i].key, key))
			continue;
		const unsigned char *r = k->bytes + k->kv[i].off;
		size_t at = 8 + strlen(key);
		*type = (uint32_t)le(r + at, 4);
		*elem = 0;
		*count = 0;
		if (*type == T_ARRAY && k->kv[i].len >= at + 16) {
			*elem = (uint32_t)le(r + at + 4, 4);
			*count = le(r + at + 8, 8);
		}
		return 1;
	}
	return 0;
}

/* key, when k has it, must be an array of elem (count of them unless
 * count is -1). */
static int check_array(const struct ck_catalog *cat, const char *key, uint32_t elem, int64_t count,
		       int required, struct ck_err *err)
{
	static const char *const names[] = {
	    [T_I32] = "i32", [T_F32] = "f32", [T_STRING] = "strings"};
	uint32_t t, e;
	uint64_t n;
	if (!record(&cat->gguf_tok, key, &t, &e, &n))
		return required ? ck_fail(err, CK_E_SOURCE, "%s: %s is missing", cat->source, key)
				: 0;
	if (t != T_ARRAY || e != elem)
		return ck_fail(err, CK_E_SOURCE, "%s: %s is not an array of %s", cat->source, key,
			       names[elem]);
	if (count >= 0 && n != (uint64_t)count)
		return ck_fail(err, CK_E_SOURCE,
			       "%s: %s lists %llu entries, the view's token_embd.weight has %lld "
			       "rows (one per token)",
			       cat->source, key, (unsigned long long)n, (long long)count);
	return 0;
}

int ck_gguf_source_tokenizer(const struct ck_catalog *cat, int64_t n_vocab, const char *pre,
			     struct ck_gguf_meta *m, struct ck_err *err)
{
	const struct ck_gguf_kvs *k = &cat->gguf_tok;
	uint32_t t, e;
	uint64_t n;
	if (!record(k, "tokenizer.ggml.tokens", &t, &e, &n))
		return 1;
	/* what llama.cpp indexes by token id must have one per token */
	if (!record(k, "tokenizer.ggml.model", &t, &e, &n) || t != T_STRING)
		return ck_fail(err, CK_E_SOURCE,
			       "%s: tokenizer.ggml.model is missing or not a string: the GGUF "
			       "source's tokenizer cannot be served",
			       cat->source);
	if (check_array(cat, "tokenizer.ggml.tokens", T_STRING, n_vocab, 1, err) < 0 ||
	    check_array(cat, "tokenizer.ggml.scores", T_F32, n_vocab, 0, err) < 0 ||
	    check_array(cat, "tokenizer.ggml.token_type", T_I32, n_vocab, 0, err) < 0 ||
	    check_array(cat, "tokenizer.ggml.merges", T_STRING, -1, 0, err) < 0)
		return -1;
	for (size_t i = 0; i < k->n; i++)
		if (!pre || strcmp(k->kv[i].key, "tokenizer.ggml.pre"))
			ck_gguf_meta_record(m, k->bytes + k->kv[i].off, k->kv[i].len);
	if (pre)
		ck_gguf_meta_str(m, "tokenizer.ggml.pre", pre);
	return 0;
}
