/* ggml's tensor types as GGUF files name them: which ckptfs decodes (their
 * block geometry) and their names for messages. The decoding itself is an
 * element operation (kern/ggml.h). */
#ifndef CK_GGML_TYPES_H
#define CK_GGML_TYPES_H

#include <stddef.h>
#include <stdint.h>

enum {
	CK_GGML_Q4_0 = 2,
	CK_GGML_Q4_1 = 3,
	CK_GGML_Q5_0 = 6,
	CK_GGML_Q5_1 = 7,
	CK_GGML_Q8_0 = 8,
	CK_GGML_Q2_K = 10,
	CK_GGML_Q3_K = 11,
	CK_GGML_Q4_K = 12,
	CK_GGML_Q5_K = 13,
	CK_GGML_Q6_K = 14,
	CK_GGML_IQ4_NL = 20,
	CK_GGML_IQ4_XS = 23,
	CK_GGML_TQ1_0 = 34,
	CK_GGML_TQ2_0 = 35,
	CK_GGML_MXFP4 = 39
};

/* Elements and bytes per block of a quantized type (ggml-common.h's
 * block_* structs: F16 scales, packed arrays, so the size is the sum of the
 * fields); 0 when ckptfs cannot decode it. */
int ck_ggml_block(uint32_t type, size_t *elems, size_t *bytes);
const char *ck_ggml_type_name(uint32_t type);

#endif
