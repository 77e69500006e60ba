#include "f16c.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define MXCSR_DAZ 0x0040u
#define MXCSR_FTZ 0x8000u

/* Checked on every call: MXCSR is per thread and a host process (libckptfs)
 * may change it at any time. */
int ck_f16c_usable(void)
{
	return __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx2") &&
	       !(_mm_getcsr() & (MXCSR_DAZ | MXCSR_FTZ));
}

#define F16C_TARGET __attribute__((target("avx2,f16c")))

/* Lanes of eight F32 bit patterns that hold a NaN. */
F16C_TARGET static inline __m256i nan_lanes(__m256i u)
{
	return _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF)),
				  _mm256_set1_epi32(0x7F800000));
}

/* Eight 32-bit lanes, each at most 0xFFFF, to eight 16-bit ones. */
F16C_TARGET static inline __m128i pack16(__m256i v)
{
	return _mm_packus_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
}

/* Eight F32 bit patterns to F16: VCVTPS2PH rounding to nearest even, a NaN
 * made sign | 0x7E00 (the hardware keeps some of its payload). */
F16C_TARGET static inline __m128i narrow8(__m256i u)
{
	__m128i h = _mm256_cvtps_ph(_mm256_castsi256_ps(u), _MM_FROUND_TO_NEAREST_INT);
	__m256i canon =
	    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x8000)),
			    _mm256_set1_epi32(0x7E00));
	return _mm_blendv_epi8(h, pack16(canon), pack16(_mm256_srli_epi32(nan_lanes(u), 16)));
}

F16C_TARGET static int64_t to_f16_avx(const unsigned char *src, int from_bf16, unsigned char *dst,
				      int64_t n)
{
	int64_t i = 0;
	if (from_bf16)
		for (; i + 8 <= n; i += 8) {
			__m128i h = _mm_loadu_si128((const __m128i *)(const void *)(src + 2 * i));
			__m256i u = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
			_mm_storeu_si128((__m128i *)(void *)(dst + 2 * i), narrow8(u));
		}
	else
		for (; i + 8 <= n; i += 8) {
			__m256i u =
			    _mm256_loadu_si256((const __m256i *)(const void *)(src + 4 * i));
			_mm_storeu_si128((__m128i *)(void *)(dst + 2 * i), narrow8(u));
		}
	return i;
}

/* Eight F16 codes to F32 bit patterns: VCVTPH2PS (exact), a NaN rebuilt as
 * sign | 0x7F800000 | payload << 13 (the hardware quiets a signalling one). */
F16C_TARGET static inline __m256i widen8(__m128i h)
{
	__m256i f = _mm256_castps_si256(_mm256_cvtph_ps(h));
	__m256i w = _mm256_cvtepu16_epi32(h);
	__m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(w, _mm256_set1_epi32(0x7FFF)),
					 _mm256_set1_epi32(0x7C00));
	__m256i sign = _mm256_slli_epi32(_mm256_and_si256(w, _mm256_set1_epi32(0x8000)), 16);
	__m256i man = _mm256_slli_epi32(_mm256_and_si256(w, _mm256_set1_epi32(0x3FF)), 13);
	__m256i bits = _mm256_or_si256(_mm256_or_si256(sign, man), _mm256_set1_epi32(0x7F800000));
	return _mm256_blendv_epi8(f, bits, nan);
}

/* Eight F32 bit patterns to BF16 as ck_f32_to_bf16(f, 0): round to nearest
 * even, every NaN 0x7FC0. */
F16C_TARGET static inline __m128i bf16_8(__m256i u)
{
	__m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
	__m256i r = _mm256_add_epi32(u, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7FFF)));
	r = _mm256_blendv_epi8(_mm256_srli_epi32(r, 16), _mm256_set1_epi32(0x7FC0), nan_lanes(u));
	return pack16(r);
}

F16C_TARGET static int64_t from_f16_avx(const unsigned char *src, int to_bf16, unsigned char *dst,
					int64_t n)
{
	int64_t i = 0;
	for (; i + 8 <= n; i += 8) {
		__m128i h = _mm_loadu_si128((const __m128i *)(const void *)(src + 2 * i));
		__m256i u = widen8(h);
		if (to_bf16)
			_mm_storeu_si128((__m128i *)(void *)(dst + 2 * i), bf16_8(u));
		else
			_mm256_storeu_si256((__m256i *)(void *)(dst + 4 * i), u);
	}
	return i;
}

int64_t ck_f16c_to_f16(const unsigned char *src, int from_bf16, unsigned char *dst, int64_t n)
{
	return n >= 8 && ck_f16c_usable() ? to_f16_avx(src, from_bf16, dst, n) : 0;
}

int64_t ck_f16c_from_f16(const unsigned char *src, int to_bf16, unsigned char *dst, int64_t n)
{
	return n >= 8 && ck_f16c_usable() ? from_f16_avx(src, to_bf16, dst, n) : 0;
}

#else /* no F16C here: the portable loops convert everything */

int ck_f16c_usable(void)
{
	return 0;
}

int64_t ck_f16c_to_f16(const unsigned char *src, int from_bf16, unsigned char *dst, int64_t n)
{
	(void)src, (void)from_bf16, (void)dst, (void)n;
	return 0;
}

int64_t ck_f16c_from_f16(const unsigned char *src, int to_bf16, unsigned char *dst, int64_t n)
{
	(void)src, (void)to_bf16, (void)dst, (void)n;
	return 0;
}

#endif
