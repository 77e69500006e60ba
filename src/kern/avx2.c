#include "avx2.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#include <string.h>

#include "fpconv.h"

int ck_avx2_usable(void)
{
	return __builtin_cpu_supports("avx2");
}

#define AVX2_TARGET __attribute__((target("avx2")))

/* 2^22, as kern/ggml.c's LANE_LIMIT: products below it round exactly. */
#define LANE_LIMIT 4194304.0f

AVX2_TARGET static inline int32_t hmax(__m256i v)
{
	__m128i m = _mm_max_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
	m = _mm_max_epi32(m, _mm_shuffle_epi32(m, _MM_SHUFFLE(1, 0, 3, 2)));
	m = _mm_max_epi32(m, _mm_shuffle_epi32(m, _MM_SHUFFLE(2, 3, 0, 1)));
	return _mm_cvtsi128_si32(m);
}

/* Eight products rounded half away from zero, low bytes only. */
AVX2_TARGET static inline __m256i round8(const float *x, __m256 id)
{
	__m256 v = _mm256_mul_ps(_mm256_loadu_ps(x), id);
	__m256i t = _mm256_cvttps_epi32(v);
	__m256 f = _mm256_sub_ps(v, _mm256_cvtepi32_ps(t));
	__m256i up = _mm256_castps_si256(_mm256_cmp_ps(f, _mm256_set1_ps(0.5f), _CMP_GE_OQ));
	__m256i down = _mm256_castps_si256(_mm256_cmp_ps(f, _mm256_set1_ps(-0.5f), _CMP_LE_OQ));
	__m256i q = _mm256_add_epi32(_mm256_sub_epi32(t, up), down); /* masks are -1 */
	return _mm256_and_si256(q, _mm256_set1_epi32(0xFF));
}

AVX2_TARGET int ck_avx2_q8_0(const float *x, unsigned char *y)
{
	const __m256i abs_mask = _mm256_set1_epi32(0x7FFFFFFF);
	__m256i m = _mm256_setzero_si256();
	for (int k = 0; k < 4; k++) {
		__m256i b = _mm256_loadu_si256((const __m256i *)(const void *)(x + 8 * k));
		m = _mm256_max_epi32(m, _mm256_and_si256(b, abs_mask));
	}
	int32_t mb = hmax(m);
	if (mb >= 0x7F800000)
		return 0;
	float amax;
	memcpy(&amax, &mb, sizeof amax);
	const float d = amax / 127, id = d != 0.0f ? 1.0f / d : 0.0f;
	if (!(amax * id < LANE_LIMIT))
		return 0;
	uint16_t h = ck_f32_to_f16(d, 0);
	memcpy(y, &h, 2);
	const __m256 vid = _mm256_set1_ps(id);
	/* packus works within 128-bit halves: the bytes come out in the order
	 * 0-3 8-11 16-19 24-27 4-7 12-15 20-23 28-31, put back by the permute */
	__m256i lo = _mm256_packus_epi32(round8(x, vid), round8(x + 8, vid));
	__m256i hi = _mm256_packus_epi32(round8(x + 16, vid), round8(x + 24, vid));
	__m256i bytes = _mm256_packus_epi16(lo, hi);
	bytes = _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
	_mm256_storeu_si256((__m256i *)(void *)(y + 2), bytes);
	return 1;
}

#else

int ck_avx2_usable(void)
{
	return 0;
}

int ck_avx2_q8_0(const float *x, unsigned char *y)
{
	(void)x, (void)y;
	return 0;
}

#endif
