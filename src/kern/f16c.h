/* F16 casts with x86's F16C instructions (VCVTPS2PH, VCVTPH2PS: eight
 * elements per instruction), used by kern/cpu.c's cast runs where the CPU
 * has F16C and AVX2. Each function converts the longest prefix of whole
 * blocks of eight it can and returns its length in elements; the caller
 * converts the rest (and everything, when 0 comes back: another CPU, or a
 * process that set flush-to-zero or denormals-are-zero in MXCSR, which these
 * instructions might honour where the element path does not). The results
 * are the element path's (fpconv.h) to the bit: hardware rounding is to
 * nearest even like it, and NaNs are rewritten as it writes them. */
#ifndef CK_KERN_F16C_H
#define CK_KERN_F16C_H

#include <stdint.h>

/* Whether the functions below convert anything in this process now. */
int ck_f16c_usable(void);

/* BF16 (from_bf16) or F32 elements to F16. */
int64_t ck_f16c_to_f16(const unsigned char *src, int from_bf16, unsigned char *dst, int64_t n);

/* F16 elements to F32, or to BF16 (to_bf16) through F32 as the element path
 * rounds. */
int64_t ck_f16c_from_f16(const unsigned char *src, int to_bf16, unsigned char *dst, int64_t n);

#endif
