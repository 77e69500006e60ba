/* The tokenizer of a GGUF source, carried into the GGUF view of it: the
 * source's tokenizer.* metadata records served as the file encodes them
 * (what llama.cpp wrote, whatever keys it holds), so a GGUF requantized
 * through a mount tokenizes as the original does. */
#ifndef CK_GGUF_SOURCE_TOK_H
#define CK_GGUF_SOURCE_TOK_H

#include "../ckpt/catalog.h"
#include "../plan/gguf_out.h"

/* Append cat's tokenizer.* records to m. n_vocab: the rows of the view's
 * token_embd.weight, which tokenizer.ggml.tokens must count; pre (may be
 * NULL, gguf_pre=NAME) replaces tokenizer.ggml.pre. Returns 0, 1 when cat
 * holds no tokenizer (m untouched), or -1 with err. */
int ck_gguf_source_tokenizer(const struct ck_catalog *cat, int64_t n_vocab, const char *pre,
			     struct ck_gguf_meta *m, struct ck_err *err);

#endif
