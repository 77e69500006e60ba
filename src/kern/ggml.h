/* ggml's quantized blocks (GGUF sources), decoded to F32 exactly as ggml's
 * reference dequantize_row_* do (the tests compare with the prebuilt
 * library's own, bit for bit): Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL and
 * MXFP4 (32 weights a block), Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS and the
 * ternary TQ1_0 and TQ2_0 (256 a super-block); and quantized from F32,
 * BF16 or F16 for the GGUF view (Q8_0, Q4_0; the other types of
 * llama-quantize's mixes in ggml_kquant.c). Blocks run along the fastest
 * dim. */
#ifndef CK_GGML_H
#define CK_GGML_H

#include <stddef.h>
#include <stdint.h>

#include "../ckpt/ggml_types.h"

/* The element types the block quantizers read: each widens to F32
 * exactly. */
enum { CK_QSRC_F32, CK_QSRC_BF16, CK_QSRC_F16 };

/* Decode n blocks of type into out (n * elems floats). */
void ck_ggml_dequant(uint32_t type, const unsigned char *blocks, size_t n, float *out);
/* Quantize n blocks of elements of type from (CK_QSRC_F32, _BF16 or _F16)
 * to Q8_0 or Q4_0, or to Q4_1, Q5_0, Q5_1, the K-quants and the IQ4 types
 * (the GGUF view's mixes, kern/ggml_kquant.c), exactly as ggml's reference
 * quantizers do the F32 they widen to (the GGUF view of a BF16 or F16
 * checkpoint makes no F32 copy of its values). vector 0: the portable code
 * only, never the CPU's vector kernels (tests compare the two). Returns -1
 * for another type or another from. */
int ck_ggml_quant(uint32_t type, int from, const void *x, size_t n, unsigned char *out, int vector);
/* n consecutive blocks of one row (256 elements at most) given an
 * importance matrix (kern/ggml_imx.c): qw, the weights of their columns;
 * row_sigma2, the row's mean square (ck_row_sigma2; Q4_0, Q4_1, Q5_0, Q5_1
 * take it). -1 for a type without weights. */
int ck_ggml_quant_imx(uint32_t type, int from, const void *x, const float *qw, float row_sigma2,
		      int n, unsigned char *out);
/* The mean square of a row of n elements (a multiple of 32), summed in
 * order in F32 as ggml's quantizers sum it. */
float ck_row_sigma2(int from, const void *x, uint64_t n);

#endif
