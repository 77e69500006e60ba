/* Deterministic HF-style test checkpoints (llama, gpt2, mixtral).
 *
 * Values are a documented function of (key, flat index i), so any test can
 * recompute any element independently (README: "Test checkpoints"):
 *     v(key, i) = ((splitmix64(fnv1a64(key) + i) mod 255) - 127) / 64
 * Every such value is exact in F32, F16 and BF16 (at most 7 significant
 * bits), so the same formula holds for every dtype the tool writes. */
#ifndef CK_CKGEN_H
#define CK_CKGEN_H

#include <stdint.h>

#include "../ckpt/dtype.h"
#include "../util/error.h"

struct ckgen_spec {
	char arch[16]; /* llama | gpt2 | mixtral | qwen2 | qwen3 | qwen3-moe | ... */
	int64_t hidden, intermediate, layers, heads, kv_heads, vocab, experts, positions;
	int64_t head_dim; /* 0: hidden / heads, and not written to config.json */
	int tie;	  /* tie_word_embeddings: no lm_head.weight */
	enum ck_dtype dtype;
	int shards; /* 1: model.safetensors; >1: model-0000k-of-0000n + index */
	int sparse; /* headers only, data left as file holes */
	char prefix[64]; /* prepended to every key (e.g. "module." for wrapper tests) */
	/* > 0: DeepSeek-V3-style FP8 checkpoint. Every 2-D weight of a layer is
	 * F8_E4M3, element i = E4M3(v(key, i)) (round to nearest even), with a
	 * F32 `...weight_scale_inv` of ceil(rows/B) x ceil(cols/B) blocks, scale j
	 * = ((splitmix64(fnv1a64(scale key) + j) mod 255) + 1) / 64; config.json
	 * gets quantization_config.weight_block_size [B, B]. */
	int64_t fp8_block;
	/* MoE: per-expert intermediate size (qwen3-moe, deepseek-v3), shared
	 * experts, dense first layers, multi-token-prediction layers */
	int64_t moe_intermediate, shared_experts, first_dense, mtp_layers;
	/* DeepSeek's MLA: q_lora 0 means a plain q_proj (V2-Lite) */
	int64_t q_lora, kv_lora, qk_nope, qk_rope, v_head;
	/* GPT-OSS: experts as MXFP4 `*_blocks` (U8 [E, rows, cols/32, 16]) and
	 * `*_scales` (U8 [E, rows, cols/32]). Block byte i = splitmix64(fnv1a64(key)
	 * + i) & 0xFF (every E2M1 pair occurs); scale j = 120 + splitmix64(
	 * fnv1a64(key) + j) % 9, i.e. 2^-7 .. 2^1. 0: BF16 experts as
	 * transformers keeps them dequantised (gate_up_proj [E, H, 2I],
	 * down_proj [E, I, H]). */
	int mxfp4;
};

uint64_t ckgen_splitmix64(uint64_t x);
uint64_t ckgen_fnv1a64(const char *s);
/* The value of element i of tensor `key`, as a double (exact in every dtype). */
double ckgen_value(const char *key, uint64_t i);

/* Fill spec with a preset ("tiny", "small", "1b", "8b", "70b", "124m",
 * "8x7b"); returns -1 with err for an unknown arch/preset pair. */
int ckgen_preset(struct ckgen_spec *spec, const char *arch, const char *preset,
		 struct ck_err *err);
/* Write the checkpoint and config.json into outdir (created if missing). */
int ckgen_write(const struct ckgen_spec *spec, const char *outdir, struct ck_err *err);

#endif
