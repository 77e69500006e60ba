/* Kernels written for x86's AVX2, used where the CPU has it (checked on
 * every call), each giving the portable code's bytes exactly; tests run
 * both. */
#ifndef CK_KERN_AVX2_H
#define CK_KERN_AVX2_H

/* Whether this CPU runs the kernels below (0 on other architectures). */
int ck_avx2_usable(void);

/* One Q8_0 block of 32 floats into y (34 bytes), as kern/ggml.c's lanes
 * do: the largest magnitude found on the absolute values' bits, each
 * product rounded half away from zero as its truncation plus the fraction's
 * test. Returns 0, writing nothing, for the blocks the lanes also leave to
 * ggml's steps (a NaN or infinity, or a product at or above 2^22). */
int ck_avx2_q8_0(const float *x, unsigned char *y);

#endif
