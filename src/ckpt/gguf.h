/* GGUF files (llama.cpp) as sources (../shared/reference/gguf.md): the
 * header's metadata and tensor infos are read, tensors become catalog
 * entries in torch order (GGUF lists dims fastest first) served in place.
 * Element types read: F32, F16, BF16, F64, I8, I16, I32, I64 in place;
 * the quantized types of ggml_types.h (Q4_0 ... Q6_K, IQ4_NL, IQ4_XS, TQ1_0,
 * TQ2_0, MXFP4) decoded to F32 on read (the engine reads whole blocks);
 * others are refused with their type named.
 * Everything in the header is untrusted: counts, lengths, dims, the
 * alignment and every offset are bounded by the file. */
#ifndef CK_GGUF_H
#define CK_GGUF_H

#include <cjson/cJSON.h>
#include <stdint.h>

#include "../util/error.h"
#include "tensors.h"

/* Whether the first bytes are GGUF's magic. */
int ck_is_gguf(const unsigned char *p, size_t n);

/* Metadata records as the file encodes them (key, type, value), copied
 * after the header parsed and validated them: a GGUF source's tokenizer.*
 * records, which the GGUF view of that source serves as they are. */
struct ck_gguf_kv {
	char *key;
	size_t off, len; /* the record in bytes */
};
struct ck_gguf_kvs {
	unsigned char *bytes;
	struct ck_gguf_kv *kv;
	size_t n, cap;
};
void ck_gguf_kvs_free(struct ck_gguf_kvs *k);

/* Read the header of an open GGUF file: out->tensors with absolute offsets,
 * *meta a JSON object of the metadata (arrays longer than 64 elements are
 * summarised as {"type": ..., "count": N}); tok (may be NULL) the
 * tokenizer.* records in file order. */
int ck_gguf_read_fd(int fd, uint64_t size, const char *what, struct ck_file_tensors *out,
		    cJSON **meta, struct ck_gguf_kvs *tok, struct ck_err *err);
/* The rope divisors a GGUF keeps as tensors (each NULL when absent):
 * Llama 3.1's rope_freqs.weight, Phi-3's rope_factors_long/short.weight. */
struct ck_gguf_rope {
	const float *freqs, *longf, *shortf;
	size_t n_freqs, n_long, n_short;
};

/* A Hugging Face config.json for the architecture the metadata names
 * (llama, with experts Mixtral; qwen2; qwen3; qwen3moe; phi3): hidden size,
 * head_dim and experts where given, layers, heads, rope, epsilon, the
 * vocabulary size (vocab: the rows of token_embd.weight, or -1) and tied
 * embeddings (tied: no output.weight). The rope divisors go into
 * rope_scaling as type longrope, which Hugging Face computes as llama.cpp
 * does: Phi-3's long and short lists with its attention factor, and
 * rope_freqs (Llama 3.1's scaling, baked) as both lists with attention
 * factor 1. A Phi-3 that rotates part of the head (rope.dimension_count)
 * gets partial_rotary_factor. *out NULL for an architecture without a
 * Hugging Face counterpart; -1 with err for metadata that is incomplete or
 * that config.json cannot say (a partial rope outside Phi-3, divisor lists
 * of another length than the rotated pairs). */
int ck_gguf_hf_config(const cJSON *meta, int64_t vocab, int tied, const struct ck_gguf_rope *rope,
		      const char *what, cJSON **out, struct ck_err *err);

#endif
