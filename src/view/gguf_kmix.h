/* The llama-quantize mixes of the GGUF view (-o gguf=Q4_0, Q4_1, Q5_0,
 * Q5_1, Q2_K, Q3_K_S, Q3_K_M, Q3_K_L, Q4_K_M, Q4_K_S, Q5_K_M, Q5_K_S, Q6_K,
 * IQ4_NL, IQ4_XS, MXFP4_MOE: the stacked experts MXFP4, every other matrix
 * and the output Q8_0): which ggml type each matrix gets, as llama-quantize's
 * llama_tensor_get_type chooses it (an importance matrix changes only
 * ffn_down's: the IQ4 mixes' and, in the first eighth of the layers, Q4_0's
 * and Q5_0's, which take Q4_1 and Q5_1 there). The base type for most
 * matrices; Q6_K for the output
 * (or the tied embedding); more bits for attn_v (Phi-3's fused attn_qkv
 * counts as one), ffn_down and attn_output by the mix's own rules (the _M
 * mixes: the first and last eighth of the layers and every third between;
 * the _S mixes: the first layers), for a 70B's attn_v and an 8-expert
 * model's attention; rows that are not whole super-blocks fall back to
 * Q4_0 (Q2_K, Q3_K: what node-llama-cpp 3.22.1's llama.cpp writes; other
 * versions take IQ4_NL), IQ4_NL (IQ4_XS), Q5_0 (Q4_K), Q5_1 (Q5_K) or
 * Q8_0, and rows that are not whole 32-blocks to F16. */
#ifndef CK_GGUF_KMIX_H
#define CK_GGUF_KMIX_H

#include <stdint.h>

#include "../plan/plan.h"

/* llama_ftype's numbers for the mixes (general.file_type) */
enum {
	CK_FTYPE_Q4_0 = 2,
	CK_FTYPE_Q4_1 = 3,
	CK_FTYPE_Q5_0 = 8,
	CK_FTYPE_Q5_1 = 9,
	CK_FTYPE_Q2_K = 10,
	CK_FTYPE_Q3_K_S = 11,
	CK_FTYPE_Q3_K_M = 12,
	CK_FTYPE_Q3_K_L = 13,
	CK_FTYPE_Q4_K_S = 14,
	CK_FTYPE_Q4_K_M = 15,
	CK_FTYPE_Q5_K_S = 16,
	CK_FTYPE_Q5_K_M = 17,
	CK_FTYPE_Q6_K = 18,
	CK_FTYPE_IQ4_NL = 25,
	CK_FTYPE_IQ4_XS = 30,
	CK_FTYPE_MXFP4_MOE = 38
};

struct ck_gguf_kmix {
	int ftype;
	uint32_t base;	/* the mix's type for most matrices */
	int has_output; /* output.weight is there (else token_embd is the output) */
	int n_layer;	/* blocks */
	int n_expert;	/* experts per layer (0: dense) */
	int is_70b;	/* llama.cpp's LLM_TYPE_70B (kmix_of says which models) */
	int n_gqa;	/* query heads per KV head */
	int has_imatrix; /* an importance matrix is given (ffn_down's rules) */
	int pure;	 /* llama-quantize --pure: the base type for every matrix */
	/* per plan target, or NULL: a --tensor-type pattern chose its type,
	 * so llama.cpp's running counts of attn_v and ffn_down pass it by */
	const unsigned char *manual;
};

/* The ggml type of plan target i (a matrix: two or more dims, quantized),
 * CK_GGUF_F16 where rows are not whole 32-blocks. The running counts
 * llama.cpp keeps are the target's rank among the plan's attn_v or
 * ffn_down tensors in llama.cpp's order (by layer, then by name). */
uint32_t ck_gguf_kmix_type(const struct ck_gguf_kmix *k, const struct ck_plan *p, size_t i);
/* A float type (F32, F16, BF16) or blocks that tile rows of nx: the type
 * itself; else llama.cpp's fallback (Q4_0 for Q2_K and Q3_K, IQ4_NL for
 * IQ4_XS, Q5_0 for Q4_K, Q5_1 for Q5_K, Q8_0 for Q6_K), CK_GGUF_F16 where
 * even 32-element blocks do not tile them. */
uint32_t ck_gguf_fit_rows(uint32_t type, int64_t nx);

#endif
