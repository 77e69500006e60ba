/* tokenizer.json's SentencePiece-style BPE as GGUF's "llama" vocabulary.
 *
 * A model trained with SentencePiece and saved by Hugging Face's fast
 * tokenizer (Llama 2, Mistral, TinyLlama, ...) is a BPE over U+2581-marked
 * words with byte fallback. Repositories that ship only tokenizer.json have
 * no tokenizer.model, and GGUF's llama vocabulary wants SentencePiece's
 * per-piece scores, which tokenizer.json does not keep: llama.cpp merges the
 * adjacent pair whose merged piece scores highest. The merges list holds the
 * same order (Hugging Face's converter writes it sorted by the merged piece's
 * score), so a piece scores minus the rank of the first merge that makes it:
 * the highest-ranked merge then wins in llama.cpp as in the fast tokenizer.
 * (llama.cpp's own converter writes -1000 for every piece, which merges left
 * to right instead.) */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../util/strmap.h"
#include "tokenizer_int.h"

#define SPACE_MARK "\xe2\x96\x81" /* U+2581, SentencePiece's word mark */

/* A Metaspace anywhere in the pre-tokenizer or decoder, or NULL. */
static const cJSON *metaspace(const cJSON *o)
{
	if (!cJSON_IsObject(o))
		return NULL;
	if (ck_tok_is_type(o, "Metaspace"))
		return o;
	static const char *const seqs[] = {"pretokenizers", "decoders"};
	for (int k = 0; k < 2; k++) {
		const cJSON *e;
		cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(o, seqs[k]))
		{
			const cJSON *m = metaspace(e);
			if (m)
				return m;
		}
	}
	return NULL;
}

/* A normalizer that puts the mark before the text: Prepend("\u2581"). */
static int prepends_mark(const cJSON *o)
{
	if (!cJSON_IsObject(o))
		return 0;
	const char *p = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "prepend"));
	if (ck_tok_is_type(o, "Prepend") && p && !strcmp(p, SPACE_MARK))
		return 1;
	const cJSON *e;
	cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(o, "normalizers"))
	{
		if (prepends_mark(e))
			return 1;
	}
	return 0;
}

int ck_tok_spm_style(const cJSON *root)
{
	const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
	return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "byte_fallback")) ||
	       metaspace(cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer")) ||
	       metaspace(cJSON_GetObjectItemCaseSensitive(root, "decoder")) ||
	       prepends_mark(cJSON_GetObjectItemCaseSensitive(root, "normalizer"));
}

/* Whether text gets a leading mark (GGUF's add_space_prefix): a Prepend
 * normalizer, or a Metaspace pre-tokenizer that prepends ("first" or
 * "always"; before prepend_scheme, add_prefix_space, default true).
 * Returns -1 with err for a Metaspace whose mark is not U+2581: llama.cpp
 * knows no other. */
static int space_prefix(const cJSON *root, const char *path, struct ck_err *err)
{
	const cJSON *ms = metaspace(cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"));
	const char *rep = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(ms, "replacement"));
	if (rep && strcmp(rep, SPACE_MARK))
		return ck_fail(err, CK_E_SOURCE,
			       "%s: Metaspace replacement \"%.40s\" is not U+2581 "
			       "(llama.cpp's SentencePiece vocabulary knows no other)",
			       path, rep);
	if (prepends_mark(cJSON_GetObjectItemCaseSensitive(root, "normalizer")))
		return 1;
	if (!ms)
		return 0;
	const char *scheme =
	    cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(ms, "prepend_scheme"));
	if (scheme)
		return strcmp(scheme, "never") != 0;
	const cJSON *add = cJSON_GetObjectItemCaseSensitive(ms, "add_prefix_space");
	return cJSON_IsBool(add) ? cJSON_IsTrue(add) : 1;
}

/* Merge rank r ("a b" or ["a", "b"]) makes piece a+b: its id, or -1 with
 * err (the fast tokenizer refuses a merge whose result is not a piece). */
static int64_t merged_id(const cJSON *m, size_t r, const struct ck_strmap *ids, const char *path,
			 struct ck_err *err)
{
	const char *a = NULL, *b = NULL, *sp = NULL;
	size_t la = 0;
	if (cJSON_IsString(m) && (sp = strchr(m->valuestring, ' ')) && !strchr(sp + 1, ' ')) {
		a = m->valuestring;
		la = (size_t)(sp - a);
		b = sp + 1;
	} else if (cJSON_GetArraySize(m) == 2 &&
		   (a = cJSON_GetStringValue(cJSON_GetArrayItem(m, 0))) &&
		   (b = cJSON_GetStringValue(cJSON_GetArrayItem(m, 1)))) {
		la = strlen(a);
	} else {
		return ck_fail(err, CK_E_SOURCE, "%s: merge %zu is neither \"a b\" nor [a, b]",
			       path, r);
	}
	size_t lb = strlen(b);
	char *both = malloc(la + lb + 1);
	if (!both)
		return ck_fail_sys(err, ENOMEM, "%s", path);
	memcpy(both, a, la);
	memcpy(both + la, b, lb + 1);
	uint32_t id;
	int found = ck_strmap_get(ids, both, &id) == 0;
	if (!found)
		ck_fail(err, CK_E_SOURCE,
			"%s: merge %zu makes \"%.100s\", which is not in the "
			"vocabulary",
			path, r, both);
	free(both);
	return found ? (int64_t)id : -1;
}

/* Characters (code points) in UTF-8 text. */
static size_t chars(const char *t)
{
	size_t n = 0;
	for (; *t; t++)
		n += ((unsigned char)*t & 0xC0) != 0x80;
	return n;
}

/* "<0xHH>": byte fallback's piece for one byte. */
static int byte_piece(const char *t)
{
	return strlen(t) == 6 && !strncmp(t, "<0x", 3) && isxdigit((unsigned char)t[3]) &&
	       isxdigit((unsigned char)t[4]) && t[5] == '>';
}

/* Scores from the merges (see the top); types of byte and unknown pieces. */
static int scores_types(const cJSON *model, const char *path, struct ck_vocab *v,
			struct ck_err *err)
{
	const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
	if (merges && !cJSON_IsArray(merges))
		return ck_fail(err, CK_E_SOURCE, "%s: model.merges is not an array", path);
	size_t n_merges = (size_t)cJSON_GetArraySize(merges), r = 0;
	struct ck_strmap ids;
	unsigned char *made = calloc(v->n, 1);
	if (!made || ck_strmap_init(&ids, v->n) < 0) {
		free(made);
		return ck_fail_sys(err, ENOMEM, "%s", path);
	}
	int rc = 0;
	for (size_t i = v->n; i-- > 0 && rc == 0;) /* the lowest id wins a repeated text */
		if (v->tokens[i] && ck_strmap_put(&ids, v->tokens[i], (uint32_t)i, NULL) < 0)
			rc = ck_fail_sys(err, ENOMEM, "%s", path);
	const cJSON *m;
	cJSON_ArrayForEach(m, merges)
	{
		int64_t id = rc == 0 ? merged_id(m, r, &ids, path, err) : -1;
		if (id < 0) {
			rc = -1;
			break;
		}
		if (!made[id]) /* the first merge that makes it ranks it */
			v->scores[id] = -(float)(r + 1);
		made[id] = 1;
		r++;
	}
	const char *unk =
	    cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(model, "unk_token"));
	int fallback = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "byte_fallback"));
	for (size_t i = 0; rc == 0 && i < v->n; i++) {
		const char *t = v->tokens[i];
		if (t && unk && !strcmp(t, unk)) { /* an added special token too, usually */
			v->types[i] = CK_TOK_UNKNOWN;
			if (v->unk < 0)
				v->unk = (int64_t)i;
		} else if (!t || v->types[i] != CK_TOK_NORMAL) {
			continue;
		} else if (fallback && byte_piece(t)) {
			v->types[i] = CK_TOK_BYTE;
		} else if (!made[i] && chars(t) > 1) {
			/* a piece no merge makes: the fast tokenizer never
			 * reaches it; llama.cpp merges it last */
			v->scores[i] = -(float)(n_merges + 1);
		}
	}
	ck_strmap_free(&ids);
	free(made);
	return rc;
}

int ck_tok_load_spm_json(const cJSON *root, const char *path, int64_t vocab_size,
			 struct ck_vocab *v, struct ck_err *err)
{
	const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
	int prefix = space_prefix(root, path, err);
	if (prefix < 0 || ck_tok_alloc(v, vocab_size, 1, err) < 0)
		return -1;
	v->model = "llama";
	v->add_space_prefix = prefix;
	if (ck_tok_vocab_added(root, model, path, v, err) < 0 ||
	    scores_types(model, path, v, err) < 0)
		return -1;
	return ck_tok_pad(v, err);
}
