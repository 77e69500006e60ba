/* One block of F32 quantized as ggml's reference quantizers do it (no
 * importance matrix): Q2_K, Q3_K, Q4_K, Q5_K, Q6_K (256 elements) and Q5_0,
 * Q5_1 (32), the types the GGUF view's K-quant mixes serve. */
#ifndef CK_GGML_KQUANT_H
#define CK_GGML_KQUANT_H

#include <stdint.h>

#include "../ckpt/ggml_types.h"

/* x: the block's elements (ck_ggml_block's count); y: its bytes. Returns
 * -1 for another type. */
int ck_kquant_block(uint32_t type, const float *x, unsigned char *y);
/* Q2_K and Q3_K (kern/ggml_kquant23.c): one 256-element block. */
void ck_quant_q2_k(const float *x, unsigned char *y);
void ck_quant_q3_k(const float *x, unsigned char *y);

#endif
