#include "tokenizer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../util/fileio.h"
#include "../util/json_strict.h"
#include "../util/strmap.h"
#include "tokenizer_int.h"

#define MAX_TOKENIZER_BYTES ((size_t)256 << 20)
#define MAX_SIDE_BYTES ((size_t)16 << 20) /* tokenizer_config.json, generation_config.json */
#define MAX_VOCAB ((int64_t)1 << 24)

/* Read dir/name: 0 (*buf), 1 absent, -1 error. */
static int read_side(const char *dir, const char *name, size_t max, char **buf, size_t *len,
		     char **path, struct ck_err *err)
{
	*path = ck_path_join(dir, name);
	if (!*path)
		return ck_fail_sys(err, ENOMEM, "%s", name);
	struct stat st;
	if (lstat(*path, &st) < 0 && errno == ENOENT)
		return 1;
	return ck_read_file(*path, max, buf, len, CK_E_SOURCE, err);
}

static int read_json(const char *dir, const char *name, size_t max, cJSON **out,
		     struct ck_err *err)
{
	char *buf = NULL, *path = NULL;
	size_t len;
	int r = read_side(dir, name, max, &buf, &len, &path, err);
	*out = NULL;
	if (r == 0) {
		*out = ck_json_parse(buf, len, 0, CK_E_SOURCE, path, err);
		if (!*out)
			r = -1;
		else if (!cJSON_IsObject(*out))
			r = ck_fail(err, CK_E_SOURCE, "%s: not a JSON object", path);
	}
	free(buf);
	free(path);
	return r;
}

int ck_tok_alloc(struct ck_vocab *v, int64_t n, int scores, struct ck_err *err)
{
	if (n < 1 || n > MAX_VOCAB)
		return ck_fail(err, CK_E_SOURCE, "a vocabulary of %lld tokens (1 to %lld)",
			       (long long)n, (long long)MAX_VOCAB);
	v->n = (size_t)n;
	v->tokens = calloc(v->n, sizeof *v->tokens);
	v->types = calloc(v->n, sizeof *v->types);
	v->scores = scores ? calloc(v->n, sizeof *v->scores) : NULL;
	v->bos = v->eos = v->unk = v->pad = -1;
	v->add_bos = v->add_eos = v->add_space_prefix = -1;
	if (!v->tokens || !v->types || (scores && !v->scores))
		return ck_fail_sys(err, ENOMEM, "vocabulary");
	return 0;
}

/* Ids the tokenizer files do not cover: "[PADn]", unused (as llama.cpp's
 * converter pads a vocabulary to the embedding's rows). */
int ck_tok_pad(struct ck_vocab *v, struct ck_err *err)
{
	for (size_t i = 0; i < v->n; i++) {
		if (v->tokens[i])
			continue;
		char name[32];
		snprintf(name, sizeof name, "[PAD%zu]", i);
		if (!(v->tokens[i] = strdup(name)))
			return ck_fail_sys(err, ENOMEM, "vocabulary");
		v->types[i] = CK_TOK_UNUSED;
		if (v->scores)
			v->scores[i] = -1000.0f;
	}
	return 0;
}

/* ---- SentencePiece tokenizer.model (protobuf) ---- */

struct pb {
	const unsigned char *p, *end;
};

static int pb_varint(struct pb *b, uint64_t *out)
{
	*out = 0;
	for (int shift = 0; shift < 64; shift += 7) {
		if (b->p >= b->end)
			return -1;
		unsigned char c = *b->p++;
		*out |= (uint64_t)(c & 0x7F) << shift;
		if (!(c & 0x80))
			return 0;
	}
	return -1;
}

enum { PB_VARINT = 0, PB_I64 = 1, PB_LEN = 2, PB_I32 = 5 };

/* One field: its number and wire type (*wire); a length-delimited one's
 * bytes in *sub, a varint's value or a fixed32's bits in *val. */
static int pb_field(struct pb *b, uint32_t *field, int *wire, struct pb *sub, uint64_t *val)
{
	uint64_t key, n;
	if (pb_varint(b, &key) < 0 || (key >> 3) == 0 || (key >> 3) > UINT32_MAX)
		return -1;
	*field = (uint32_t)(key >> 3);
	*wire = (int)(key & 7);
	*val = 0;
	switch (key & 7) {
	case 0:
		return pb_varint(b, val);
	case 1:
		if (b->end - b->p < 8)
			return -1;
		b->p += 8;
		return 0;
	case 2:
		if (pb_varint(b, &n) < 0 || n > (uint64_t)(b->end - b->p))
			return -1;
		sub->p = b->p;
		sub->end = b->p + n;
		b->p += n;
		return 0;
	case 5:
		if (b->end - b->p < 4)
			return -1;
		*val = (uint64_t)b->p[0] | (uint64_t)b->p[1] << 8 | (uint64_t)b->p[2] << 16 |
		       (uint64_t)b->p[3] << 24;
		b->p += 4;
		return 0;
	default:
		return -1;
	}
}

/* SentencePiece { string piece = 1; float score = 2; Type type = 3; } */
static int spm_piece(struct pb sub, struct ck_vocab *v, size_t id, const char *path,
		     struct ck_err *err)
{
	v->types[id] = CK_TOK_NORMAL;
	while (sub.p < sub.end) {
		uint32_t f;
		int w;
		struct pb s = {0};
		uint64_t val;
		if (pb_field(&sub, &f, &w, &s, &val) < 0)
			return ck_fail(err, CK_E_SOURCE, "%s: piece %zu: malformed", path, id);
		if (f == 1 && w == PB_LEN) {
			if (memchr(s.p, 0, (size_t)(s.end - s.p))) /* GGUF strings would lose the rest */
				return ck_fail(err, CK_E_SOURCE, "%s: piece %zu holds a NUL byte", path, id);
			free(v->tokens[id]);
			if (!(v->tokens[id] = strndup((const char *)s.p, (size_t)(s.end - s.p))))
				return ck_fail_sys(err, ENOMEM, "%s", path);
		} else if (f == 2 && w == PB_I32) {
			uint32_t bits = (uint32_t)val;
			memcpy(&v->scores[id], &bits, 4);
		} else if (f == 3 && w == PB_VARINT) {
			if (val < CK_TOK_NORMAL || val > CK_TOK_BYTE)
				return ck_fail(err, CK_E_SOURCE, "%s: piece %zu: type %llu is not one of "
								 "SentencePiece's (1-6)",
					       path, id, (unsigned long long)val);
			v->types[id] = (int32_t)val;
		}
	}
	if (!v->tokens[id])
		return ck_fail(err, CK_E_SOURCE, "%s: piece %zu has no text", path, id);
	return 0;
}

/* TrainerSpec's unk_id (40), bos_id (41), eos_id (42), pad_id (43). */
static void spm_trainer(struct pb sub, struct ck_vocab *v)
{
	while (sub.p < sub.end) {
		uint32_t f;
		int w;
		struct pb s;
		uint64_t val;
		if (pb_field(&sub, &f, &w, &s, &val) < 0)
			return;
		int64_t id = (int32_t)(uint32_t)val;
		if (w != PB_VARINT || f < 40 || f > 43)
			continue;
		if (id < 0 || (uint64_t)id >= v->n)
			id = -1;
		*(f == 40 ? &v->unk : f == 41 ? &v->bos : f == 42 ? &v->eos : &v->pad) = id;
	}
}

static int load_spm(const char *buf, size_t len, const char *path, int64_t vocab_size,
		    struct ck_vocab *v, struct ck_err *err)
{
	if (ck_tok_alloc(v, vocab_size, 1, err) < 0)
		return -1;
	v->model = "llama";
	struct pb b = {(const unsigned char *)buf, (const unsigned char *)buf + len};
	size_t n = 0;
	while (b.p < b.end) {
		uint32_t f;
		int w;
		struct pb sub = {0};
		uint64_t val;
		if (pb_field(&b, &f, &w, &sub, &val) < 0)
			return ck_fail(err, CK_E_SOURCE, "%s: not a SentencePiece model (malformed "
							 "protobuf at byte %zu)",
				       path, (size_t)(b.p - (const unsigned char *)buf));
		if (f == 1 && w == PB_LEN) {
			if (n == v->n)
				return ck_fail(err, CK_E_SOURCE, "%s: more pieces than the model's %zu "
								 "token embeddings",
					       path, v->n);
			if (spm_piece(sub, v, n++, path, err) < 0)
				return -1;
		} else if (f == 2 && w == PB_LEN) {
			spm_trainer(sub, v);
		}
	}
	if (!n)
		return ck_fail(err, CK_E_SOURCE, "%s: no pieces", path);
	for (size_t i = 0; i < n && v->unk < 0; i++)
		if (v->types[i] == CK_TOK_UNKNOWN)
			v->unk = (int64_t)i;
	return ck_tok_pad(v, err);
}

/* ---- tokenizer.json: byte-level BPE (SentencePiece-style: tokenizer_spm_json.c) ---- */

int ck_tok_is_type(const cJSON *o, const char *type)
{
	const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "type");
	return cJSON_IsString(t) && !strcmp(t->valuestring, type);
}

/* Whether o (a normalizer, pre-tokenizer or decoder, possibly a Sequence)
 * has a part of this type; *split gets the last Split's regex. */
int ck_tok_has_part(const cJSON *o, const char *type, const char **split)
{
	if (!cJSON_IsObject(o))
		return 0;
	if (ck_tok_is_type(o, "Split")) {
		const cJSON *re = cJSON_GetObjectItemCaseSensitive(
			cJSON_GetObjectItemCaseSensitive(o, "pattern"), "Regex");
		if (split && cJSON_IsString(re))
			*split = re->valuestring;
	}
	int found = ck_tok_is_type(o, type);
	const cJSON *seq = cJSON_GetObjectItemCaseSensitive(o, "pretokenizers");
	if (!seq)
		seq = cJSON_GetObjectItemCaseSensitive(o, "decoders");
	if (!seq)
		seq = cJSON_GetObjectItemCaseSensitive(o, "normalizers");
	const cJSON *e;
	cJSON_ArrayForEach(e, seq) found |= ck_tok_has_part(e, type, split);
	return found;
}

/* The name llama.cpp knows a pre-tokenizer by, from its split pattern (the
 * converter hashes the tokenizer's output instead; these are the patterns
 * of the families the GGUF view supports). */
static const char *pre_name(const char *split)
{
	static const struct {
		const char *name, *re;
	} known[] = {
	    {"llama-bpe", "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
			  "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
	    {"qwen2", "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
		      "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
	    /* o200k (GPT-4o, GPT-OSS) */
	    {"gpt-4o",
	     "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}"
	     "\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}"
	     "\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|"
	     "'ll|'d)?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!"
	     "\\S)|\\s+"},
	};
	if (!split)
		return "gpt-2"; /* ByteLevel's own regex */
	for (size_t k = 0; k < sizeof known / sizeof *known; k++)
		if (!strcmp(split, known[k].re))
			return known[k].name;
	return "default";
}

/* Token text at the id idj says: returns the id, or -1 with err. A vocab
 * entry (dup_ok 0) may not take an id twice; an added token may restate one. */
int64_t ck_tok_put(struct ck_vocab *v, const cJSON *idj, const char *text, int dup_ok,
		   const char *path, struct ck_err *err)
{
	int64_t id;
	if (ck_json_int(idj, 0, (int64_t)v->n - 1, &id) < 0)
		return ck_fail(err, CK_E_SOURCE, "%s: token \"%.200s\": id outside the model's %zu "
						 "token embeddings",
			       path, text, v->n);
	if (v->tokens[id] && !dup_ok)
		return ck_fail(err, CK_E_SOURCE, "%s: tokens \"%.100s\" and \"%.100s\" share id %lld",
			       path, v->tokens[id], text, (long long)id);
	free(v->tokens[id]);
	if (!(v->tokens[id] = strdup(text)))
		return ck_fail_sys(err, ENOMEM, "%s", path);
	return id;
}

static int load_merges(const cJSON *merges, const char *path, struct ck_vocab *v,
		       struct ck_err *err)
{
	int n = cJSON_GetArraySize(merges);
	if (merges && !cJSON_IsArray(merges))
		return ck_fail(err, CK_E_SOURCE, "%s: model.merges is not an array", path);
	if (n && !(v->merges = calloc((size_t)n, sizeof *v->merges)))
		return ck_fail_sys(err, ENOMEM, "%s", path);
	const cJSON *m;
	cJSON_ArrayForEach(m, merges)
	{
		const cJSON *a = cJSON_GetArrayItem(m, 0), *b = cJSON_GetArrayItem(m, 1);
		char *s = NULL;
		if (cJSON_IsString(m)) {
			s = strdup(m->valuestring);
		} else if (cJSON_GetArraySize(m) == 2 && cJSON_IsString(a) && cJSON_IsString(b)) {
			size_t len = strlen(a->valuestring) + strlen(b->valuestring) + 2;
			if ((s = malloc(len)))
				snprintf(s, len, "%s %s", a->valuestring, b->valuestring);
		} else {
			return ck_fail(err, CK_E_SOURCE, "%s: merge %zu is neither \"a b\" nor [a, b]",
				       path, v->n_merges);
		}
		if (!s)
			return ck_fail_sys(err, ENOMEM, "%s", path);
		v->merges[v->n_merges++] = s;
	}
	return 0;
}

int ck_tok_vocab_added(const cJSON *root, const cJSON *model, const char *path, struct ck_vocab *v,
		       struct ck_err *err)
{
	const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab"), *e;
	if (!cJSON_IsObject(vocab))
		return ck_fail(err, CK_E_SOURCE, "%s: model.vocab is not an object", path);
	cJSON_ArrayForEach(e, vocab)
	{
		int64_t id = ck_tok_put(v, e, e->string, 0, path, err);
		if (id < 0)
			return -1;
		v->types[id] = CK_TOK_NORMAL;
	}
	const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
	cJSON_ArrayForEach(e, added)
	{
		const cJSON *c = cJSON_GetObjectItemCaseSensitive(e, "content");
		const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id");
		if (!cJSON_IsString(c))
			return ck_fail(err, CK_E_SOURCE, "%s: an added token without content", path);
		int64_t k = ck_tok_put(v, id, c->valuestring, 1, path, err);
		if (k < 0)
			return -1;
		v->types[k] = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "special")) ? CK_TOK_CONTROL
											   : CK_TOK_USER;
	}
	return 0;
}

static int load_bpe(const cJSON *root, const char *path, int64_t vocab_size, struct ck_vocab *v,
		    struct ck_err *err)
{
	const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
	if (!ck_tok_is_type(model, "BPE"))
		return ck_fail(err, CK_E_SOURCE,
			       "%s: model.type is not \"BPE\" (GGUF's vocabularies "
			       "from tokenizer.json are byte-level or SentencePiece-"
			       "style BPE; a Unigram model needs tokenizer.model)",
			       path);
	const char *split = NULL;
	int bytelevel =
	    ck_tok_has_part(cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"), "ByteLevel",
			    &split) |
	    ck_tok_has_part(cJSON_GetObjectItemCaseSensitive(root, "decoder"), "ByteLevel", NULL);
	if (!bytelevel && ck_tok_spm_style(root))
		return ck_tok_load_spm_json(root, path, vocab_size, v, err);
	if (!bytelevel)
		return ck_fail(err, CK_E_SOURCE,
			       "%s: a BPE neither byte-level (no ByteLevel "
			       "pre-tokenizer) nor SentencePiece-style (no Metaspace, "
			       "no byte_fallback): GGUF has no vocabulary for it",
			       path);
	if (ck_tok_alloc(v, vocab_size, 0, err) < 0)
		return -1;
	v->model = "gpt2";
	if (ck_tok_vocab_added(root, model, path, v, err) < 0)
		return -1;
	if (!v->pre && !(v->pre = strdup(pre_name(split))))
		return ck_fail_sys(err, ENOMEM, "%s", path);
	if (load_merges(cJSON_GetObjectItemCaseSensitive(model, "merges"), path, v, err) < 0)
		return -1;
	return ck_tok_pad(v, err);
}

/* ---- special tokens and the chat template ---- */

/* A special token given as text ("<s>" or {"content": "<s>"}), by id. */
static int64_t find_text(const struct ck_vocab *v, const struct ck_strmap *ids, const cJSON *tok)
{
	const cJSON *c = cJSON_IsObject(tok) ? cJSON_GetObjectItemCaseSensitive(tok, "content") : tok;
	uint32_t id;
	if (!cJSON_IsString(c) || ck_strmap_get(ids, c->valuestring, &id) != 0)
		return -1;
	return id < v->n ? (int64_t)id : -1;
}

/* An id given as a number, or the first of a list (generation_config's eos). */
static int64_t find_id(const struct ck_vocab *v, const cJSON *j)
{
	int64_t id;
	if (cJSON_IsArray(j))
		j = cJSON_GetArrayItem(j, 0);
	if (ck_json_int(j, 0, INT64_MAX, &id) < 0 || (uint64_t)id >= v->n)
		return -1;
	return id;
}

static int load_specials(const char *dir, const cJSON *config, struct ck_vocab *v,
			 struct ck_err *err)
{
	cJSON *tc = NULL, *gc = NULL;
	struct ck_strmap ids = {0};
	int rc = read_json(dir, "tokenizer_config.json", MAX_SIDE_BYTES, &tc, err);
	if (rc >= 0)
		rc = read_json(dir, "generation_config.json", MAX_SIDE_BYTES, &gc, err);
	if (rc < 0 || ck_strmap_init(&ids, v->n) < 0)
		goto out;
	for (size_t i = v->n; i-- > 0;) /* the lowest id wins a repeated text */
		ck_strmap_put(&ids, v->tokens[i], (uint32_t)i, NULL);
	static const char *const names[] = {"bos", "eos", "unk", "pad"};
	int64_t *slot[] = {&v->bos, &v->eos, &v->unk, &v->pad};
	for (int k = 0; k < 4; k++) {
		char key[32];
		snprintf(key, sizeof key, "%s_token", names[k]);
		int64_t id = find_text(v, &ids, cJSON_GetObjectItemCaseSensitive(tc, key));
		snprintf(key, sizeof key, "%s_token_id", names[k]);
		if (id < 0)
			id = find_id(v, cJSON_GetObjectItemCaseSensitive(gc, key));
		if (id < 0)
			id = find_id(v, cJSON_GetObjectItemCaseSensitive(config, key));
		if (id >= 0)
			*slot[k] = id;
	}
	const cJSON *b = cJSON_GetObjectItemCaseSensitive(tc, "add_bos_token");
	const cJSON *e = cJSON_GetObjectItemCaseSensitive(tc, "add_eos_token");
	v->add_bos = cJSON_IsBool(b) ? cJSON_IsTrue(b) : -1;
	v->add_eos = cJSON_IsBool(e) ? cJSON_IsTrue(e) : -1;
	const cJSON *t = cJSON_GetObjectItemCaseSensitive(tc, "chat_template"), *x;
	const cJSON *list = cJSON_IsArray(t) ? t : NULL;
	cJSON_ArrayForEach(x, list) /* [{"name", "template"}]: the default one */
	{
		const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(x, "name"));
		if (name && !strcmp(name, "default"))
			t = cJSON_GetObjectItemCaseSensitive(x, "template");
	}
	if (cJSON_IsString(t) && !(v->chat_template = strdup(t->valuestring)))
		rc = ck_fail_sys(err, ENOMEM, "chat template");
out:
	ck_strmap_free(&ids);
	cJSON_Delete(tc);
	cJSON_Delete(gc);
	return rc < 0 ? -1 : 0;
}

int ck_vocab_load(const char *dir, const cJSON *config, int64_t vocab_size, int prefer_spm,
		  const char *pre, struct ck_vocab *v, struct ck_err *err)
{
	memset(v, 0, sizeof *v);
	char *buf = NULL, *path = NULL;
	size_t len;
	int r = 1;
	if (prefer_spm) {
		r = read_side(dir, "tokenizer.model", MAX_TOKENIZER_BYTES, &buf, &len, &path, err);
		if (r == 0) {
			v->from = "tokenizer.model";
			r = load_spm(buf, len, path, vocab_size, v, err);
		}
		free(buf);
		free(path);
		buf = path = NULL;
	}
	if (r == 1) {
		r = read_side(dir, "tokenizer.json", MAX_TOKENIZER_BYTES, &buf, &len, &path, err);
		if (r == 0) {
			cJSON *root = ck_json_parse(buf, len, 0, CK_E_SOURCE, path, err);
			v->from = "tokenizer.json";
			if (pre && !(v->pre = strdup(pre)))
				r = ck_fail_sys(err, ENOMEM, "vocabulary");
			else
				r = root ? load_bpe(root, path, vocab_size, v, err) : -1;
			cJSON_Delete(root);
		}
		free(buf);
		free(path);
	}
	if (r == 0 && pre && !v->pre && !(v->pre = strdup(pre)))
		r = ck_fail_sys(err, ENOMEM, "vocabulary");
	if (r == 0)
		r = load_specials(dir, config, v, err);
	if (r != 0)
		ck_vocab_free(v);
	return r;
}

int ck_vocab_placeholder(int64_t vocab_size, struct ck_vocab *v, struct ck_err *err)
{
	memset(v, 0, sizeof *v);
	if (ck_tok_alloc(v, vocab_size, 0, err) < 0) {
		ck_vocab_free(v);
		return -1;
	}
	v->model = "gpt2";
	v->from = "none";
	v->placeholder = 1;
	for (size_t i = 0; i < v->n; i++) {
		char name[32];
		snprintf(name, sizeof name, "<tok_%zu>", i);
		v->types[i] = CK_TOK_NORMAL;
		if (!(v->tokens[i] = strdup(name))) {
			ck_vocab_free(v);
			return ck_fail_sys(err, ENOMEM, "vocabulary");
		}
	}
	if (!(v->pre = strdup("default"))) {
		ck_vocab_free(v);
		return ck_fail_sys(err, ENOMEM, "vocabulary");
	}
	return 0;
}

void ck_vocab_free(struct ck_vocab *v)
{
	for (size_t i = 0; v->tokens && i < v->n; i++)
		free(v->tokens[i]);
	free(v->tokens);
	free(v->types);
	free(v->scores);
	for (size_t i = 0; i < v->n_merges; i++)
		free(v->merges[i]);
	free(v->merges);
	free(v->pre);
	free(v->chat_template);
	memset(v, 0, sizeof *v);
}
