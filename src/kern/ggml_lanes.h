/* Vector lanes for the K-quants' scale searches (ggml_kquant.c,
 * ggml_kquant23.c): eight sub-blocks fitted side by side, lane j sub-block
 * j, each lane ggml's scalar steps in the same order, so the same floats.
 * Static inline helpers for those two files only. */
#ifndef CK_GGML_LANES_H
#define CK_GGML_LANES_H

#include <stdint.h>

#if defined(__GNUC__) && !defined(__clang__)
/* 32-byte vectors passed by value between the including file's static
 * functions only: GCC's note that an AVX build would pass them differently
 * does not concern calls that never leave the file */
#pragma GCC diagnostic ignored "-Wpsabi"
#endif
typedef float v8f __attribute__((vector_size(32)));
/* The lanes' functions are inlined twice, into an AVX2 function (no FMA:
 * the same roundings) and a baseline one, chosen per call (ifunc clones
 * would choose at load time, before ThreadSanitizer's runtime is up): AVX2
 * fits eight lanes in one register (Q4_K: 3.7x the scalar loops they
 * replaced); the baseline build, lanes as SSE pairs, is slower than those
 * loops were (1.6 s against 1.1 for 8 Mi floats of Q4_K). */
#define LANE_FN static inline __attribute__((always_inline))
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_AVX2_LANES 1
#define AVX2_LANES __attribute__((target("avx2")))
#endif
typedef int32_t v8i __attribute__((vector_size(32)));

LANE_FN v8f sel(v8i m, v8f a, v8f b)
{
	return (v8f)(((v8i)a & m) | ((v8i)b & ~m));
}

LANE_FN v8i seli(v8i m, v8i a, v8i b)
{
	return (a & m) | (b & ~m);
}

/* nearest_int in each lane, clamped to lo..hi */
LANE_FN v8i levels8(v8f v, int lo, int hi)
{
	const v8i z = {0}, l = z + lo, h = z + hi;
	v8i i = ((v8i)(v + 12582912.f) & 0x007fffff) - 0x00400000;
	i = seli(i < l, l, i);
	return seli(i > h, h, i);
}

LANE_FN v8f tof(v8i v)
{
	return __builtin_convertvector(v, v8f);
}

#endif
