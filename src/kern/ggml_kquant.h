/* One block of F32 quantized as ggml's reference quantizers do it (no
 * importance matrix): Q2_K, Q3_K, Q4_K, Q5_K, Q6_K (256 elements) and Q5_0,
 * Q5_1 (32), the types the GGUF view's K-quant mixes serve. */
#ifndef CK_GGML_KQUANT_H
#define CK_GGML_KQUANT_H

#include <stdint.h>

#include "../ckpt/ggml_types.h"

/* x: n blocks' elements (ck_ggml_block's count each, 256 in all at most);
 * y: their bytes. Returns -1 for another type (the K-quants, Q4_1, Q5_0,
 * Q5_1, IQ4_NL, IQ4_XS and MXFP4). */
int ck_kquant_blocks(uint32_t type, const float *x, int n, unsigned char *y);
/* IQ4_NL: nb (1..8) consecutive blocks of 32, quantized side by side;
 * IQ4_XS: one block of 256 (kern/ggml_iq4.c). qw: the importance weights
 * of the elements' columns, or NULL. */
void ck_quant_iq4_nl(const float *x, const float *qw, int nb, unsigned char *y);
void ck_quant_iq4_xs(const float *x, const float *qw, unsigned char *y);
/* Q4_1, Q5_0 or Q5_1 (kern/ggml_legacy.c): n blocks of 32. */
void ck_quant_legacy(uint32_t type, const float *x, int n, unsigned char *y);
/* MXFP4 (kern/ggml_mxfp4.c): one block of 32. */
void ck_quant_mxfp4(const float *x, unsigned char *y);
/* Q2_K and Q3_K (kern/ggml_kquant23.c): one 256-element block. */
void ck_quant_q2_k(const float *x, unsigned char *y);
void ck_quant_q3_k(const float *x, unsigned char *y);

/* n blocks of one row (256 elements at most) quantized as ggml's
 * quantize_<type> does it given an importance matrix (kern/ggml_imx.c,
 * llama-quantize --imatrix): qw, the weights of the blocks' columns (the
 * matrix's imatrix values from the first block's first column on);
 * row_sigma2, the mean square of the row (Q4_0, Q4_1, Q5_0 and Q5_1 weigh
 * by it; the K-quants by their super-block's). Q2_K, Q3_K, Q4_K, Q5_K, Q6_K,
 * Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, IQ4_XS; -1 for another type (Q8_0 takes no weights). */
int ck_kquant_blocks_imx(uint32_t type, const float *x, const float *qw, float row_sigma2, int n,
			 unsigned char *y);

/* The steps after the fit that the quantizers with and without an
 * importance matrix share. L: the fit's levels, recomputed in place from
 * the quantized scales where a scale is not zero; y: the block. */
/* Q4_K / Q5_K (nmax 15 / 31): 6-bit scales ls and mins lm, F16 factors. */
void ck_k45_finish(const float *x, int nmax, const uint8_t *ls, const uint8_t *lm, float d,
		   float dmin, uint8_t *L, unsigned char *y);
/* Q6_K: the 16 fitted scales. */
void ck_q6_k_finish(const float *x, const float *scales, int8_t *L, unsigned char *y);
/* Q2_K / Q3_K: the scales and d (and Q2_K's dmin) already in y. */
void ck_q2_k_finish(const float *x, uint8_t *L, unsigned char *y);
void ck_q3_k_finish(const float *x, int8_t *L, unsigned char *y);
/* Q5_0 / Q5_1: the 32 five-bit codes into qh and qs. */
void ck_pack5(const uint8_t *c, unsigned char *qh, unsigned char *qs);

#endif
