/* The tokenizer beside a Hugging Face checkpoint, as GGUF needs it
 * (tokenizer.ggml.*): from SentencePiece's tokenizer.model ("llama": pieces,
 * scores, types; the protobuf parsed here), from tokenizer.json's
 * byte-level BPE ("gpt2": tokens, types, merges, and the pre-tokenizer named
 * from its split pattern) or its SentencePiece-style BPE ("llama", scores
 * from the merges' ranks), with the special tokens and chat template of
 * tokenizer_config.json, generation_config.json and config.json. Every
 * file is untrusted: ids are checked against the model's vocabulary size,
 * sizes are bounded, and an error names the file and what is wrong. */
#ifndef CK_TOKENIZER_H
#define CK_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "../util/error.h"

/* llama.cpp's token types */
enum { CK_TOK_NORMAL = 1, CK_TOK_UNKNOWN = 2, CK_TOK_CONTROL = 3, CK_TOK_USER = 4,
       CK_TOK_UNUSED = 5, CK_TOK_BYTE = 6 };

struct ck_vocab {
	const char *model; /* "gpt2", "llama" */
	char *pre;	   /* gpt2: the pre-tokenizer llama.cpp knows it by */
	char **tokens;	   /* n of them: the model's vocabulary size */
	size_t n;
	float *scores; /* llama: per token; NULL for gpt2 */
	int32_t *types;
	char **merges; /* gpt2: "a b" per merge */
	size_t n_merges;
	int64_t bos, eos, unk, pad; /* -1: none */
	int add_bos, add_eos;	    /* -1: not said */
	int add_space_prefix;	    /* llama: -1 not said (llama.cpp's default: yes) */
	char *chat_template;
	const char *from; /* the file the tokens came from (messages) */
	int placeholder;  /* gguf_vocab=none: token i is "<tok_i>" */
};

/* Load the tokenizer of the checkpoint in dir for a model with vocab_size
 * token embeddings: tokenizer.model if prefer_spm and it exists, else
 * tokenizer.json. Returns 0, 1 when dir has neither (v untouched), or -1
 * with err. pre (may be NULL) overrides the pre-tokenizer name. */
int ck_vocab_load(const char *dir, const cJSON *config, int64_t vocab_size, int prefer_spm,
		  const char *pre, struct ck_vocab *v, struct ck_err *err);
/* gguf_vocab=none: vocab_size placeholder tokens, usable for token ids only. */
int ck_vocab_placeholder(int64_t vocab_size, struct ck_vocab *v, struct ck_err *err);
void ck_vocab_free(struct ck_vocab *v);

#endif
