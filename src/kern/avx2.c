#include "avx2.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "fpconv.h"
#include "ggml.h" /* CK_QSRC_* */

int ck_avx2_usable(void)
{
	return __builtin_cpu_supports("avx2");
}

#define AVX2_TARGET __attribute__((target("avx2")))
#define AVX2_F16C __attribute__((target("avx2,f16c")))

/* 2^22, as kern/ggml.c's LANE_LIMIT: products below it round exactly. */
#define LANE_LIMIT 4194304.0f

AVX2_TARGET static inline int32_t hmax(__m256i v)
{
	__m128i m = _mm_max_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
	m = _mm_max_epi32(m, _mm_shuffle_epi32(m, _MM_SHUFFLE(1, 0, 3, 2)));
	m = _mm_max_epi32(m, _mm_shuffle_epi32(m, _MM_SHUFFLE(2, 3, 0, 1)));
	return _mm_cvtsi128_si32(m);
}

/* The loops over a block's four vectors are unrolled (GCC's -O2 kept them
 * as loops, their vectors in memory: each stored and loaded again, a
 * store-forwarding stall a block, 12% of Q4_0's time). */

/* A block's 32 elements as four vectors of F32: from F32, from BF16
 * (exact: its bits are the F32's top half), or from F16 (load_f16). */
AVX2_TARGET static inline void load_f32(const void *x, __m256 *v)
{
#pragma GCC unroll 4
	for (int k = 0; k < 4; k++)
		v[k] = _mm256_loadu_ps((const float *)x + 8 * k);
}

AVX2_TARGET static inline void load_bf16(const void *x, __m256 *v)
{
#pragma GCC unroll 4
	for (int k = 0; k < 4; k++) {
		__m128i h = _mm_loadu_si128((const __m128i *)x + k);
		v[k] = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
	}
}

/* The block's 32 absolute values' bits into a, and the largest (as the
 * lanes of kern/ggml.c find it: the bits order as the magnitudes do). */
AVX2_TARGET static inline int32_t abs_bits_max(const __m256 *v, __m256i *a)
{
	__m256i m = _mm256_setzero_si256();
#pragma GCC unroll 4
	for (int k = 0; k < 4; k++) {
		a[k] = _mm256_and_si256(_mm256_castps_si256(v[k]), _mm256_set1_epi32(0x7FFFFFFF));
		m = _mm256_max_epi32(m, a[k]);
	}
	return hmax(m);
}

/* Eight products rounded half away from zero, low bytes only. */
AVX2_TARGET static inline __m256i round8(__m256 x, __m256 id)
{
	__m256 v = _mm256_mul_ps(x, id);
	__m256i t = _mm256_cvttps_epi32(v);
	__m256 f = _mm256_sub_ps(v, _mm256_cvtepi32_ps(t));
	__m256i up = _mm256_castps_si256(_mm256_cmp_ps(f, _mm256_set1_ps(0.5f), _CMP_GE_OQ));
	__m256i down = _mm256_castps_si256(_mm256_cmp_ps(f, _mm256_set1_ps(-0.5f), _CMP_LE_OQ));
	__m256i q = _mm256_add_epi32(_mm256_sub_epi32(t, up), down); /* masks are -1 */
	return _mm256_and_si256(q, _mm256_set1_epi32(0xFF));
}

/* The lanes of kern/ggml.c's q8_0_lanes over the block v. */
AVX2_TARGET static inline int q8_0_avx2(const __m256 *v, unsigned char *y)
{
	__m256i a[4];
	int32_t mb = abs_bits_max(v, a);
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
	__m256i lo = _mm256_packus_epi32(round8(v[0], vid), round8(v[1], vid));
	__m256i hi = _mm256_packus_epi32(round8(v[2], vid), round8(v[3], vid));
	__m256i bytes = _mm256_packus_epi16(lo, hi);
	bytes = _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
	_mm256_storeu_si256((__m256i *)(void *)(y + 2), bytes);
	return 1;
}

/* The lanes of kern/ggml.c's q4_0_lanes: the signed value at the first
 * largest magnitude sets the scale (max / -8), each product plus 8.5
 * truncated, its low byte taken as ggml's int8_t, capped at 15, and the
 * nibbles of elements j and 16 + j paired as that code pairs them. */
AVX2_TARGET static inline int q4_0_avx2(const __m256 *v, unsigned char *y)
{
	__m256i a[4];
	int32_t mb = abs_bits_max(v, a);
	if (mb >= 0x7F800000)
		return 0;
	/* the first lane holding it, found without a branch (where it lies is
	 * random: a loop that stops there mispredicts once a block) */
	uint32_t at = 0;
#pragma GCC unroll 4
	for (int k = 0; k < 4; k++) {
		__m256i eq = _mm256_cmpeq_epi32(a[k], _mm256_set1_epi32(mb));
		at |= (uint32_t)_mm256_movemask_ps(_mm256_castsi256_ps(eq)) << (8 * k);
	}
	float lane[32];
#pragma GCC unroll 4
	for (int k = 0; k < 4; k++)
		_mm256_storeu_ps(lane + 8 * k, v[k]);
	/* +0 when all are zeros (ggml's running max never moved) */
	const float max = mb ? lane[__builtin_ctz(at)] : 0.0f;
	float amax;
	memcpy(&amax, &mb, sizeof amax);
	const float d = max / -8, id = d != 0.0f ? 1.0f / d : 0.0f;
	if (!(amax * fabsf(id) < LANE_LIMIT))
		return 0;
	uint16_t h = ck_f32_to_f16(d, 0);
	memcpy(y, &h, 2);
	const __m256 vid = _mm256_set1_ps(id), half = _mm256_set1_ps(8.5f);
	__m256i c[4];
#pragma GCC unroll 4
	for (int k = 0; k < 4; k++) {
		__m256i t = _mm256_cvttps_epi32(_mm256_add_ps(_mm256_mul_ps(v[k], vid), half));
		__m256i i8 = _mm256_srai_epi32(_mm256_slli_epi32(t, 24), 24); /* the int8_t */
		c[k] = _mm256_min_epi32(i8, _mm256_set1_epi32(15));
	}
	const __m256i lo8 = _mm256_set1_epi32(0xFF), lo4 = _mm256_set1_epi32(0x0F);
	__m256i r0 = _mm256_or_si256(_mm256_and_si256(c[0], lo8),
				     _mm256_slli_epi32(_mm256_and_si256(c[2], lo4), 4));
	__m256i r1 = _mm256_or_si256(_mm256_and_si256(c[1], lo8),
				     _mm256_slli_epi32(_mm256_and_si256(c[3], lo4), 4));
	/* values 0..255: packed to 16 bits (in 128-bit halves, put back in
	 * order by the permute), then to bytes */
	__m256i w = _mm256_permute4x64_epi64(_mm256_packus_epi32(r0, r1), 0xD8);
	__m128i bytes = _mm_packus_epi16(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
	_mm_storeu_si128((__m128i *)(void *)(y + 2), bytes);
	return 1;
}

AVX2_F16C static inline void load_f16(const void *x, __m256 *v)
{
#pragma GCC unroll 4
	for (int k = 0; k < 4; k++) /* VCVTPH2PS: exact */
		v[k] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)x + k));
}

/* A block of elements of type from (ggml.h's CK_QSRC_*) as four vectors of
 * F32. */
AVX2_F16C static inline void load_block(int from, const unsigned char *x, __m256 *v)
{
	if (from == CK_QSRC_BF16)
		load_bf16(x, v);
	else if (from == CK_QSRC_F16)
		load_f16(x, v);
	else
		load_f32(x, v);
}

/* n blocks of elements of type from into y; the number done, stopping at
 * the first block the lanes leave to ggml's steps. */
AVX2_F16C static size_t quant_avx2(int q4, int from, const unsigned char *x, size_t n,
				   unsigned char *y)
{
	const size_t xs = from == CK_QSRC_F32 ? 128 : 64, ys = q4 ? 18 : 34;
	size_t i = 0;
	for (; i < n; i++) {
		__m256 v[4];
		load_block(from, x + i * xs, v);
		if (!(q4 ? q4_0_avx2(v, y + i * ys) : q8_0_avx2(v, y + i * ys)))
			break;
	}
	return i;
}

size_t ck_avx2_quant(int q4, int from, const void *x, size_t n, unsigned char *y)
{
	if (from == CK_QSRC_F16 ? !ck_f16c_usable() : !ck_avx2_usable())
		return 0;
	return quant_avx2(q4, from, x, n, y);
}

#define MXCSR_DAZ 0x0040u
#define MXCSR_FTZ 0x8000u

/* Checked on every call: MXCSR is per thread and a host process (libckptfs)
 * may change it at any time. */
int ck_f16c_usable(void)
{
	return __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx2") &&
	       !(_mm_getcsr() & (MXCSR_DAZ | MXCSR_FTZ));
}

/* Lanes of eight F32 bit patterns that hold a NaN. */
AVX2_TARGET static inline __m256i nan_lanes(__m256i u)
{
	return _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF)),
				  _mm256_set1_epi32(0x7F800000));
}

/* Eight 32-bit lanes, each at most 0xFFFF, to eight 16-bit ones. */
AVX2_TARGET static inline __m128i pack16(__m256i v)
{
	return _mm_packus_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
}

/* Eight F32 bit patterns to F16: VCVTPS2PH rounding to nearest even, a NaN
 * made sign | 0x7E00 (the hardware keeps some of its payload). */
AVX2_F16C static inline __m128i narrow8(__m256i u)
{
	__m128i h = _mm256_cvtps_ph(_mm256_castsi256_ps(u), _MM_FROUND_TO_NEAREST_INT);
	__m256i canon =
	    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x8000)),
			    _mm256_set1_epi32(0x7E00));
	return _mm_blendv_epi8(h, pack16(canon), pack16(_mm256_srli_epi32(nan_lanes(u), 16)));
}

AVX2_F16C static int64_t to_f16_avx(const unsigned char *src, int from_bf16, unsigned char *dst,
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
AVX2_F16C static inline __m256i widen8(__m128i h)
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
AVX2_TARGET static inline __m128i bf16_8(__m256i u)
{
	__m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
	__m256i r = _mm256_add_epi32(u, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7FFF)));
	r = _mm256_blendv_epi8(_mm256_srli_epi32(r, 16), _mm256_set1_epi32(0x7FC0), nan_lanes(u));
	return pack16(r);
}

AVX2_TARGET static int64_t f32_to_bf16_avx2(const unsigned char *src, unsigned char *dst, int64_t n)
{
	int64_t i = 0;
	for (; i + 8 <= n; i += 8) {
		__m256i u = _mm256_loadu_si256((const __m256i *)(const void *)(src + 4 * i));
		_mm_storeu_si128((__m128i *)(void *)(dst + 2 * i), bf16_8(u));
	}
	return i;
}

int64_t ck_avx2_f32_to_bf16(const unsigned char *src, unsigned char *dst, int64_t n)
{
	return n >= 8 && ck_avx2_usable() ? f32_to_bf16_avx2(src, dst, n) : 0;
}

AVX2_F16C static int64_t from_f16_avx(const unsigned char *src, int to_bf16, unsigned char *dst,
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

/* Eight F32 values times (or over) s, stored at dst as BF16 or as F32 with
 * every NaN 0x7FC00000 (the element path's scale and rounding). */
AVX2_TARGET static inline void scale_store8(__m256 v, __m256 s, int divide, int to_bf16,
					    unsigned char *dst)
{
	__m256i u = _mm256_castps_si256(divide ? _mm256_div_ps(v, s) : _mm256_mul_ps(v, s));
	if (to_bf16) {
		_mm_storeu_si128((__m128i *)(void *)dst, bf16_8(u));
	} else {
		u = _mm256_blendv_epi8(u, _mm256_set1_epi32(0x7FC00000), nan_lanes(u));
		_mm256_storeu_si256((__m256i *)(void *)dst, u);
	}
}

/* Eight F8_E4M3 codes (low bytes of x) to F32 bit patterns: normal, subnormal
 * (m * 2^-9, exact in F32), NaN (0x7F | sign) as sign | 0x7FC00000. */
AVX2_TARGET static inline __m256i e4m3_bits8(__m256i x)
{
	const __m256i seven = _mm256_set1_epi32(7);
	__m256i sign = _mm256_slli_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x80)), 24);
	__m256i man = _mm256_and_si256(x, seven);
	__m256i e = _mm256_and_si256(_mm256_srli_epi32(x, 3), _mm256_set1_epi32(0xF));
	__m256 subf = _mm256_mul_ps(_mm256_cvtepi32_ps(man), _mm256_set1_ps(1.0f / 512.0f));
	__m256i sub = _mm256_xor_si256(_mm256_castps_si256(subf), sign);
	__m256i norm = _mm256_or_si256(
	    _mm256_or_si256(sign,
			    _mm256_slli_epi32(_mm256_add_epi32(e, _mm256_set1_epi32(120)), 23)),
	    _mm256_slli_epi32(man, 20));
	__m256i b = _mm256_blendv_epi8(norm, sub, _mm256_cmpeq_epi32(e, _mm256_setzero_si256()));
	__m256i nan = _mm256_cmpeq_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x7F)),
					 _mm256_set1_epi32(0x7F));
	return _mm256_blendv_epi8(b, _mm256_or_si256(sign, _mm256_set1_epi32(0x7FC00000)), nan);
}

AVX2_TARGET static int64_t e4m3_scaled_avx2(const unsigned char *src, float sv, int divide,
					    int to_bf16, unsigned char *dst, int64_t n)
{
	const __m256 s = _mm256_set1_ps(sv);
	int64_t i = 0;
	for (; i + 8 <= n; i += 8) {
		__m128i c = _mm_loadl_epi64((const __m128i *)(const void *)(src + i));
		__m256 v = _mm256_castsi256_ps(e4m3_bits8(_mm256_cvtepu8_epi32(c)));
		scale_store8(v, s, divide, to_bf16, dst + i * (to_bf16 ? 2 : 4));
	}
	return i;
}

int64_t ck_avx2_e4m3_scaled(const unsigned char *src, float sv, int divide, int to_bf16,
			    unsigned char *dst, int64_t n)
{
	return n >= 8 && ck_avx2_usable() ? e4m3_scaled_avx2(src, sv, divide, to_bf16, dst, n) : 0;
}

/* Eight E2M1 codes (nibbles of 4 bytes, the low one first) to F32: the
 * magnitude from the table by the code's low three bits, the sign bit
 * from its fourth. */
AVX2_TARGET static inline __m256 e2m1_8(const unsigned char *p)
{
	int32_t w;
	memcpy(&w, p, 4);
	__m128i b = _mm_cvtsi32_si128(w);
	__m256i x = _mm256_cvtepu8_epi32(_mm_unpacklo_epi8(b, b)); /* b0 b0 b1 b1 ... */
	__m256i c = _mm256_and_si256(
	    _mm256_srlv_epi32(x, _mm256_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4)), _mm256_set1_epi32(15));
	const __m256 mag = _mm256_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f);
	__m256i sign = _mm256_slli_epi32(_mm256_and_si256(c, _mm256_set1_epi32(8)), 28);
	return _mm256_or_ps(_mm256_permutevar8x32_ps(mag, c), _mm256_castsi256_ps(sign));
}

AVX2_TARGET static int64_t fp4_scaled_avx2(const unsigned char *bytes, float sv, int divide,
					   int to_bf16, unsigned char *dst, int64_t n)
{
	const __m256 s = _mm256_set1_ps(sv);
	int64_t i = 0;
	for (; i + 8 <= n; i += 8) {
		scale_store8(e2m1_8(bytes + i / 2), s, divide, to_bf16,
			     dst + i * (to_bf16 ? 2 : 4));
	}
	return i;
}

int64_t ck_avx2_fp4_scaled(const unsigned char *bytes, float sv, int divide, int to_bf16,
			   unsigned char *dst, int64_t n)
{
	return n >= 8 && ck_avx2_usable() ? fp4_scaled_avx2(bytes, sv, divide, to_bf16, dst, n) : 0;
}

#else

int ck_avx2_usable(void)
{
	return 0;
}

size_t ck_avx2_quant(int q4, int from, const void *x, size_t n, unsigned char *y)
{
	(void)q4, (void)from, (void)x, (void)n, (void)y;
	return 0;
}

int64_t ck_avx2_f32_to_bf16(const unsigned char *src, unsigned char *dst, int64_t n)
{
	(void)src, (void)dst, (void)n;
	return 0;
}

int64_t ck_avx2_e4m3_scaled(const unsigned char *src, float sv, int divide, int to_bf16,
			    unsigned char *dst, int64_t n)
{
	(void)src, (void)sv, (void)divide, (void)to_bf16, (void)dst, (void)n;
	return 0;
}

int64_t ck_avx2_fp4_scaled(const unsigned char *bytes, float sv, int divide, int to_bf16,
			   unsigned char *dst, int64_t n)
{
	(void)bytes, (void)sv, (void)divide, (void)to_bf16, (void)dst, (void)n;
	return 0;
}

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
