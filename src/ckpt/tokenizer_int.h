/* What tokenizer.c and tokenizer_spm_json.c share: the vocabulary's storage
 * and tokenizer.json's structure. Not part of the ckpt interface. */
#ifndef CK_TOKENIZER_INT_H
#define CK_TOKENIZER_INT_H

#include "tokenizer.h"

/* n tokens (1 to 2^24), with a score each if scores; every special id -1. */
int ck_tok_alloc(struct ck_vocab *v, int64_t n, int scores, struct ck_err *err);
/* Ids no file named: "[PADn]", unused. */
int ck_tok_pad(struct ck_vocab *v, struct ck_err *err);
/* text at the id idj says: the id, or -1 with err (dup_ok: an added token
 * may restate a vocab entry). */
int64_t ck_tok_put(struct ck_vocab *v, const cJSON *idj, const char *text, int dup_ok,
		   const char *path, struct ck_err *err);
int ck_tok_is_type(const cJSON *o, const char *type);
/* Whether o (a normalizer, pre-tokenizer or decoder, or a Sequence of them)
 * has a part of this type; *split (may be NULL) gets the last Split's regex. */
int ck_tok_has_part(const cJSON *o, const char *type, const char **split);
/* model.vocab then added_tokens (special: control, else user-defined). */
int ck_tok_vocab_added(const cJSON *root, const cJSON *model, const char *path, struct ck_vocab *v,
		       struct ck_err *err);

/* tokenizer_spm_json.c: a BPE converted from SentencePiece (Metaspace,
 * byte_fallback, a Prepend of U+2581), as GGUF's "llama" vocabulary. */
int ck_tok_spm_style(const cJSON *root);
int ck_tok_load_spm_json(const cJSON *root, const char *path, int64_t vocab_size,
			 struct ck_vocab *v, struct ck_err *err);

#endif
