/* Kernels written for x86's vector instructions (AVX2, and F16C for the F16
 * casts), used where the CPU has them (checked on every call), each giving
 * the portable code's bytes exactly: kern/cpu.c and kern/ggml.c call them
 * first and do what they leave; test_fpconv runs both paths. */
#ifndef CK_KERN_AVX2_H
#define CK_KERN_AVX2_H

#include <stddef.h>
#include <stdint.h>

/* Whether this CPU runs the AVX2 kernels (0 on other architectures). */
int ck_avx2_usable(void);

/* Q8_0 (q4 0) or Q4_0 (q4 1) blocks of 32 elements of type from (ggml.h's
 * CK_QSRC_F32, _BF16 or _F16) at x into y (34 or 18 bytes a block), as
 * kern/ggml.c's lanes do them on the elements widened to F32: the largest magnitude found on the
 * absolute values' bits, each product rounded as its truncation plus the fraction's test. Returns
 * how many of the n blocks are done: it stops before the first block the lanes also leave to ggml's
 * steps (a NaN or infinity, or a product at or above 2^22), and does none where the CPU has no AVX2
 * (or, for F16, where ck_f16c_usable says no). */
size_t ck_avx2_quant(int q4, int from, const void *x, size_t n, unsigned char *y);

/* F32 elements to BF16 as kern/cpu.c's ck_cpu_f32_to_bf16_run: whole
 * blocks of eight, their length returned (0 where the CPU has no AVX2). */
int64_t ck_avx2_f32_to_bf16(const unsigned char *src, unsigned char *dst, int64_t n);

/* F8_E4M3 elements times (or, divide, over) sv, to F32 or BF16, as
 * kern/cpu.c's ck_cpu_e4m3_scaled_run: the longest prefix of whole blocks of eight,
 * its length returned (0 where the CPU has no AVX2). */
int64_t ck_avx2_e4m3_scaled(const unsigned char *src, float sv, int divide, int to_bf16,
			    unsigned char *dst, int64_t n);

/* F4_E2M1 elements (MXFP4: two a byte, the low nibble first, from bytes'
 * first) times (or over) sv, to F32 or BF16, as kern/cpu.c's
 * ck_cpu_fp4_scaled_run: whole blocks of eight, their length returned. */
int64_t ck_avx2_fp4_scaled(const unsigned char *bytes, float sv, int divide, int to_bf16,
			   unsigned char *dst, int64_t n);

/* The F16 casts with F16C's instructions (VCVTPS2PH, VCVTPH2PS: eight
 * elements each), where the CPU has F16C and AVX2 and the calling thread
 * has flush-to-zero and denormals-are-zero clear in MXCSR (a process that
 * set them may make these instructions flush where the element path does
 * not). Each converts the longest prefix of whole blocks of eight and
 * returns its length in elements; 0: nothing done. The hardware rounds to
 * nearest even as the element path (fpconv.h) does; NaNs are rewritten as
 * it writes them. */
int ck_f16c_usable(void);
/* BF16 (from_bf16) or F32 elements to F16. */
int64_t ck_f16c_to_f16(const unsigned char *src, int from_bf16, unsigned char *dst, int64_t n);
/* F16 elements to F32, or to BF16 (to_bf16) through F32 as the element path
 * rounds. */
int64_t ck_f16c_from_f16(const unsigned char *src, int to_bf16, unsigned char *dst, int64_t n);

#endif
