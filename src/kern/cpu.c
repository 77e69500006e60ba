#include "cpu.h"

#include <string.h>

#include "avx2.h"
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#include "elem.h"

float ck_cpu_load_f32(const unsigned char *p, enum ck_dtype dt)
{
	return ck_elem_load(p, dt);
}

void ck_cpu_store_f32(unsigned char *p, enum ck_dtype dt, float v, int saturate)
{
	ck_elem_store(p, dt, v, saturate);
}

static void copy_strided(const unsigned char *src, int64_t ss, size_t es, unsigned char *dst,
			 int64_t n)
{
	if (ss == 1) {
		memcpy(dst, src, (size_t)n * es);
		return;
	}
	int64_t step = ss * (int64_t)es;
	switch (es) { /* fixed sizes let the compiler use plain loads */
	case 1:
		for (int64_t i = 0; i < n; i++)
			dst[i] = src[i * step];
		break;
	case 2:
		for (int64_t i = 0; i < n; i++)
			memcpy(dst + 2 * i, src + i * step, 2);
		break;
	case 4:
		for (int64_t i = 0; i < n; i++)
			memcpy(dst + 4 * i, src + i * step, 4);
		break;
	case 8:
		for (int64_t i = 0; i < n; i++)
			memcpy(dst + 8 * i, src + i * step, 8);
		break;
	default:
		for (int64_t i = 0; i < n; i++)
			memcpy(dst + (size_t)i * es, src + i * step, es);
	}
}

/* Elements at a time in the casts below: a loop of a fixed count the
 * compiler vectorises at -O2 (GCC 12's cheap cost model leaves a loop of
 * unknown count scalar: BF16 -> F32 ran at 5 GB/s of output, blocked at 20). */
#define CAST_BLOCK 8

static void bf16_to_f32_run(const unsigned char *src, unsigned char *dst, int64_t n)
{
	int64_t i = 0;
	for (; i + CAST_BLOCK <= n; i += CAST_BLOCK) {
		uint16_t h[CAST_BLOCK];
		uint32_t u[CAST_BLOCK];
		memcpy(h, src + 2 * i, sizeof h);
		for (int k = 0; k < CAST_BLOCK; k++)
			u[k] = (uint32_t)h[k] << 16;
		memcpy(dst + 4 * i, u, sizeof u);
	}
	for (; i < n; i++) {
		uint16_t h;
		memcpy(&h, src + 2 * i, 2);
		uint32_t u = (uint32_t)h << 16;
		memcpy(dst + 4 * i, &u, 4);
	}
}

/* Round to nearest even, NaN to the quiet NaN: ck_f32_to_bf16 without
 * saturation, branch-free so that a block of them vectorises. */
static inline uint16_t f32_bits_to_bf16(uint32_t u)
{
	uint16_t r = (uint16_t)((u + ((u >> 16) & 1) + 0x7FFF) >> 16);
	return (u & 0x7FFFFFFFu) > 0x7F800000u ? (uint16_t)0x7FC0 : r;
}

/* A block of F32 bit patterns stored at dst: as BF16 (ck_f32_to_bf16, every
 * NaN 0x7FC0), or as F32, every NaN made 0x7FC00000 when canon (the scaled
 * element path's) and kept as it is otherwise (a widening's). */
static inline void store_block(uint32_t *bits, int to_bf16, int canon, unsigned char *dst)
{
	if (to_bf16) {
		uint16_t h[CAST_BLOCK];
		for (int k = 0; k < CAST_BLOCK; k++)
			h[k] = f32_bits_to_bf16(bits[k]);
		memcpy(dst, h, sizeof h);
		return;
	}
	if (canon)
		for (int k = 0; k < CAST_BLOCK; k++)
			bits[k] = (bits[k] & 0x7FFFFFFFu) > 0x7F800000u ? 0x7FC00000u : bits[k];
	memcpy(dst, bits, CAST_BLOCK * sizeof *bits);
}

void ck_cpu_f32_to_bf16_run(const unsigned char *src, unsigned char *dst, int64_t n, int vector)
{
	/* SSE2 has no unsigned 32-to-16 pack: GCC's lanes for the blocks below
	 * were a third of decoding a GGUF source to BF16; AVX2 packs them */
	int64_t i = vector ? ck_avx2_f32_to_bf16(src, dst, n) : 0;
	for (; i + CAST_BLOCK <= n; i += CAST_BLOCK) {
		uint32_t u[CAST_BLOCK];
		uint16_t h[CAST_BLOCK];
		memcpy(u, src + 4 * i, sizeof u);
		for (int k = 0; k < CAST_BLOCK; k++)
			h[k] = f32_bits_to_bf16(u[k]);
		memcpy(dst + 2 * i, h, sizeof h);
	}
	for (; i < n; i++) {
		uint32_t u;
		memcpy(&u, src + 4 * i, 4);
		uint16_t h = f32_bits_to_bf16(u);
		memcpy(dst + 2 * i, &h, 2);
	}
}

/* F16 to F32 bits (ck_f16_to_f32) for a block of eight, every case computed
 * and selected: normal, subnormal (m * 2^-24, exact in F32), infinity and
 * NaN with its payload kept. */
static void f16_block_bits(const unsigned char *src, uint32_t *bits)
{
	uint16_t h[CAST_BLOCK];
	uint32_t sub[CAST_BLOCK];
	float m[CAST_BLOCK];
	memcpy(h, src, sizeof h);
	for (int k = 0; k < CAST_BLOCK; k++)
		m[k] = (float)(int32_t)(h[k] & 0x3FF) * 0x1p-24f;
	memcpy(sub, m, sizeof sub);
	for (int k = 0; k < CAST_BLOCK; k++) {
		uint32_t x = h[k], sign = (x & 0x8000) << 16, e = (x >> 10) & 0x1F;
		uint32_t man = (x & 0x3FF) << 13;
		uint32_t b = e ? sign | ((e + 112) << 23) | man : sign | sub[k];
		bits[k] = e == 0x1F ? sign | 0x7F800000u | man : b;
	}
}

/* F16 to F32 or (through F32, as the element path) to BF16. */
static void f16_run(const unsigned char *src, int to_bf16, unsigned char *dst, int64_t n)
{
	int64_t i = 0;
	for (; i + CAST_BLOCK <= n; i += CAST_BLOCK) {
		uint32_t bits[CAST_BLOCK];
		f16_block_bits(src + 2 * i, bits);
		store_block(bits, to_bf16, 0, dst + i * (to_bf16 ? 2 : 4));
	}
	for (; i < n; i++) {
		uint16_t h;
		memcpy(&h, src + 2 * i, 2);
		float f = ck_f16_to_f32(h);
		if (to_bf16) {
			uint16_t o = ck_f32_to_bf16(f, 0);
			memcpy(dst + 2 * i, &o, 2);
		} else {
			memcpy(dst + 4 * i, &f, 4);
		}
	}
}

/* ck_f32_to_f16(f, 0) from the bits u of f, a = u & 0x7FFFFFFF and t the
 * bits of |f| + 0.5f (the subnormal result's rounding, as there), with every
 * case computed and selected: a block of these vectorises. a has its sign
 * bit clear, so the compares are signed ones (SSE2 has no unsigned ones). */
static inline uint16_t f16_select(uint32_t u, uint32_t a, uint32_t t)
{
	int32_t x = (int32_t)a;
	int32_t v = (int32_t)((a + 0x0FFF + ((a >> 13) & 1) - (112u << 23)) >> 13); /* normal */
	v = x >= 0x38800000 ? v : (int32_t)(t - 0x3F000000u); /* below 2^-14: subnormal */
	v = x >= 0x477FF000 ? 0x7C00 : v;		       /* 65520 and up: infinity */
	v = x > 0x7F800000 ? 0x7E00 : v;		       /* NaN */
	return (uint16_t)(((u >> 16) & 0x8000) | (uint32_t)v);
}

/* BF16 or F32 to F16 (the GGUF view's F16): blocks of f16_select, 1.7-1.9x
 * the element function's speed; the tail by the element function. */
static void to_f16_run(const unsigned char *src, int from_bf16, unsigned char *dst, int64_t n)
{
	int64_t i = 0;
	for (; i + CAST_BLOCK <= n; i += CAST_BLOCK) {
		uint32_t u[CAST_BLOCK], a[CAST_BLOCK], t[CAST_BLOCK];
		float fa[CAST_BLOCK], ft[CAST_BLOCK];
		uint16_t o[CAST_BLOCK];
		if (from_bf16) {
			uint16_t h[CAST_BLOCK];
			memcpy(h, src + 2 * i, sizeof h);
			for (int k = 0; k < CAST_BLOCK; k++)
				u[k] = (uint32_t)h[k] << 16;
		} else {
			memcpy(u, src + 4 * i, sizeof u);
		}
		for (int k = 0; k < CAST_BLOCK; k++)
			a[k] = u[k] & 0x7FFFFFFFu;
		memcpy(fa, a, sizeof fa);
		for (int k = 0; k < CAST_BLOCK; k++)
			ft[k] = fa[k] + 0.5f;
		memcpy(t, ft, sizeof t);
		for (int k = 0; k < CAST_BLOCK; k++)
			o[k] = f16_select(u[k], a[k], t[k]);
		memcpy(dst + 2 * i, o, sizeof o);
	}
	for (; i < n; i++) {
		float f;
		if (from_bf16) {
			uint16_t h;
			memcpy(&h, src + 2 * i, 2);
			f = ck_bits_f32((uint32_t)h << 16);
		} else {
			memcpy(&f, src + 4 * i, 4);
		}
		uint16_t o = ck_f32_to_f16(f, 0);
		memcpy(dst + 2 * i, &o, 2);
	}
}

/* The common single casts, as tight loops the compiler can vectorise. */
static int fast_cast(const unsigned char *src, enum ck_dtype s, enum ck_dtype d,
		     unsigned char *dst, int64_t n)
{
	if (s == CK_DT_BF16 && d == CK_DT_F32) {
		bf16_to_f32_run(src, dst, n);
		return 1;
	}
	if (s == CK_DT_F32 && d == CK_DT_BF16) {
		ck_cpu_f32_to_bf16_run(src, dst, n, 1);
		return 1;
	}
	/* F16 both ways: F16C's instructions first where this CPU has them
	 * (kern/avx2.h: 7.6x the blocks below on BF16 -> F16), the rest here */
	if (s == CK_DT_F16 && (d == CK_DT_F32 || d == CK_DT_BF16)) {
		int64_t k = ck_f16c_from_f16(src, d == CK_DT_BF16, dst, n);
		f16_run(src + 2 * k, d == CK_DT_BF16, dst + k * (d == CK_DT_BF16 ? 2 : 4), n - k);
		return 1;
	}
	if ((s == CK_DT_BF16 || s == CK_DT_F32) && d == CK_DT_F16) {
		int64_t k = ck_f16c_to_f16(src, s == CK_DT_BF16, dst, n);
		to_f16_run(src + k * (s == CK_DT_BF16 ? 2 : 4), s == CK_DT_BF16, dst + 2 * k,
			   n - k);
		return 1;
	}
	return 0;
}

void ck_cpu_convert_run(const unsigned char *src, int64_t sstride, enum ck_dtype sdt,
			const enum ck_dtype *casts, int nc, unsigned saturate, unsigned char *dst,
			int64_t n)
{
	size_t ses = ck_dtype_size(sdt);
	if (nc == 0) {
		copy_strided(src, sstride, ses, dst, n);
		return;
	}
	if (nc == 1 && !saturate && sstride == 1 && fast_cast(src, sdt, casts[0], dst, n))
		return;
	size_t des = ck_dtype_size(casts[nc - 1]);
	for (int64_t i = 0; i < n; i++)
		ck_elem_finish(ck_elem_load(src + i * sstride * (int64_t)ses, sdt), casts, nc,
			       saturate, dst + (size_t)i * des);
}

/* Load, scale (sv) and shift one element. */
static inline float elem_in(const struct ck_box *b, const unsigned char *p, float sv)
{
	float v = ck_elem_load(p, b->sdt);
	if (b->scaled)
		v = ck_elem_scaled(v, sv, b->divide);
	return b->shifted ? ck_elem_shift(v, b->shift) : v;
}

/* F8_E4M3 elements times (or over) one scale, to F32 or BF16: a block of
 * eight decodes every case (normal, subnormal m * 2^-9, NaN) and selects,
 * scales, and rounds, which GCC vectorises; the tail by the element path.
 * DeepSeek-V3's FP8 weights dequantised this way ran at ~0.17 GB/s of
 * output per core one element at a time (each through a dtype switch). The
 * results are the element path's to the bit: the same F32 operations, and
 * NaN made canonical before the store (to_bf16 maps every NaN to 0x7FC0). */
void ck_cpu_e4m3_scaled_run(const unsigned char *src, float sv, int divide, int to_bf16,
			    unsigned char *dst, int64_t n, int vector)
{
	/* in AVX2 first where the CPU has it (kern/avx2.h) */
	int64_t i = vector ? ck_avx2_e4m3_scaled(src, sv, divide, to_bf16, dst, n) : 0;
	for (; i + CAST_BLOCK <= n; i += CAST_BLOCK) {
		uint32_t sign[CAST_BLOCK], bits[CAST_BLOCK], sub[CAST_BLOCK];
		float m[CAST_BLOCK], v[CAST_BLOCK];
		for (int k = 0; k < CAST_BLOCK; k++) {
			sign[k] = (uint32_t)(src[i + k] & 0x80) << 24;
			m[k] = (float)(int32_t)(src[i + k] & 7) * (1.0f / 512.0f); /* subnormal */
		}
		memcpy(sub, m, sizeof sub);
		for (int k = 0; k < CAST_BLOCK; k++) {
			uint32_t x = src[i + k], e = (x >> 3) & 0xF;
			uint32_t b = e ? sign[k] | ((e + 120) << 23) | ((x & 7) << 20) : sub[k] ^ sign[k];
			bits[k] = (x & 0x7F) == 0x7F ? sign[k] | 0x7FC00000u : b;
		}
		memcpy(v, bits, sizeof v);
		if (divide)
			for (int k = 0; k < CAST_BLOCK; k++)
				v[k] = v[k] / sv;
		else
			for (int k = 0; k < CAST_BLOCK; k++)
				v[k] = v[k] * sv;
		memcpy(bits, v, sizeof bits);
		store_block(bits, to_bf16, 1, dst + i * (to_bf16 ? 2 : 4));
	}
	const enum ck_dtype out = to_bf16 ? CK_DT_BF16 : CK_DT_F32;
	for (; i < n; i++)
		ck_elem_finish(ck_elem_scaled(ck_e4m3_to_f32(src[i]), sv, divide), &out, 1, 0,
			       dst + (size_t)i * (to_bf16 ? 2 : 4));
}

/* Whether box_row's scaled runs take ck_cpu_e4m3_scaled_run: F8_E4M3 read and
 * written contiguously, no shift, at most one cast (to F32 or BF16), not
 * saturating. 1 to BF16, 2 to F32, 0 no. */
static int e4m3_fast(const struct ck_box *b, int64_t ss, int64_t ds)
{
	if (b->sdt != CK_DT_F8_E4M3 || !b->scaled || b->shifted || ss != 1 || ds != 1 ||
	    b->nc > 1 || (b->saturate & 1))
		return 0;
	if (b->nc == 0 || b->casts[0] == CK_DT_F32)
		return 2;
	return b->casts[0] == CK_DT_BF16 ? 1 : 0;
}

/* One row of a box: n elements, source stride ss, output stride ds. */
static void box_row(const struct ck_box *b, const unsigned char *src, int64_t ss,
		    const unsigned char *scale, unsigned char *dst, int64_t ds,
		    int64_t n)
{
	size_t ses = ck_dtype_size(b->sdt), des = ck_dtype_size(b->ddt);
	if (!b->scaled && !b->shifted && ds == 1) {
		ck_cpu_convert_run(src, ss, b->sdt, b->casts, b->nc, b->saturate, dst, n);
		return;
	}
	if (!ck_box_is_float(b)) {
		for (int64_t i = 0; i < n; i++)
			memcpy(dst + i * ds * (int64_t)des, src + i * ss * (int64_t)ses, ses);
		return;
	}
	/* the row in runs that share one scale element (unscaled: one run) */
	int last = b->ndim - 1;
	int64_t blk = last >= 0 ? b->sblock[last] : 1, ph = last >= 0 ? b->sphase[last] : 0;
	int64_t scst = last >= 0 && b->scaled ? b->scstride[last] : 0;
	if (scst == 0)
		blk = n + ph; /* one scale for the whole row */
	size_t scs = b->scaled ? ck_dtype_size(b->scdt) : 0;
	int fast = e4m3_fast(b, ss, ds);
	for (int64_t i = 0; i < n;) {
		int64_t q = (i + ph) / blk, end = (q + 1) * blk - ph;
		if (end > n)
			end = n;
		float sv = b->scaled ? ck_elem_load(scale + scst * q * (int64_t)scs, b->scdt) : 1.0f;
		if (fast) {
			ck_cpu_e4m3_scaled_run(src + i, sv, b->divide, fast == 1,
					       dst + i * (int64_t)des, end - i, 1);
			i = end;
		}
		for (; i < end; i++)
			ck_elem_finish(elem_in(b, src + i * ss * (int64_t)ses, sv), b->casts, b->nc,
				       b->saturate, dst + i * ds * (int64_t)des);
	}
}

/* E2M1's sixteen values (fpconv.h's ck_e2m1_to_f32), for the runs below. */
static const float E2M1[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,	 4.0f,	6.0f,
			       -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

static void fp4_elem(const unsigned char *src, int64_t k, float sv, int divide, int to_bf16,
		     unsigned char *dst)
{
	const enum ck_dtype out = to_bf16 ? CK_DT_BF16 : CK_DT_F32;
	float v = ck_e2m1_to_f32((unsigned)(src[k >> 1] >> ((k & 1) * 4)) & 15);
	ck_elem_finish(ck_elem_scaled(v, sv, divide), &out, 1, 0, dst);
}

void ck_cpu_fp4_scaled_run(const unsigned char *src, int64_t n0, float sv, int divide, int to_bf16,
			   unsigned char *dst, int64_t n, int vector)
{
	size_t des = to_bf16 ? 2 : 4;
	int64_t i = 0;
	if (n > 0 && (n0 & 1)) /* an odd first nibble alone: then whole bytes */
		fp4_elem(src, n0, sv, divide, to_bf16, dst), i = 1;
	const unsigned char *bytes = src + ((n0 + i) >> 1); /* element i's, low nibble */
	if (vector)
		i += ck_avx2_fp4_scaled(bytes, sv, divide, to_bf16, dst + (size_t)i * des, n - i);
	for (; i + CAST_BLOCK <= n; i += CAST_BLOCK) {
		const unsigned char *p = src + ((n0 + i) >> 1);
		uint32_t bits[CAST_BLOCK];
		float v[CAST_BLOCK];
		for (int k = 0; k < CAST_BLOCK; k++) {
			float r = E2M1[(p[k >> 1] >> ((k & 1) * 4)) & 15];
			v[k] = divide ? r / sv : r * sv;
		}
		memcpy(bits, v, sizeof bits);
		store_block(bits, to_bf16, 1, dst + i * (int64_t)des);
	}
	for (; i < n; i++)
		fp4_elem(src, n0 + i, sv, divide, to_bf16, dst + (size_t)i * des);
}

/* Whether box_row_fp4's runs take ck_cpu_fp4_scaled_run: as e4m3_fast. */
static int fp4_fast(const struct ck_box *b, int64_t ss, int64_t ds)
{
	if (b->shifted || ss != 1 || ds != 1 || b->nc > 1 || (b->saturate & 1))
		return 0;
	if (b->nc == 0 || b->casts[0] == CK_DT_F32)
		return 2;
	return b->casts[0] == CK_DT_BF16 ? 1 : 0;
}

/* MXFP4: element i of the row is nibble n0 + i * ss of src. */
static void box_row_fp4(const struct ck_box *b, const unsigned char *src, int64_t n0, int64_t ss,
			const unsigned char *scale, unsigned char *dst, int64_t ds, int64_t n)
{
	size_t des = ck_dtype_size(b->ddt), scs = ck_dtype_size(b->scdt);
	int last = b->ndim - 1;
	int64_t blk = last >= 0 ? b->sblock[last] : 1, ph = last >= 0 ? b->sphase[last] : 0;
	int64_t scst = last >= 0 ? b->scstride[last] : 0;
	if (scst == 0)
		blk = n + ph;
	int fast = fp4_fast(b, ss, ds);
	for (int64_t i = 0; i < n;) {
		int64_t q = (i + ph) / blk, end = (q + 1) * blk - ph;
		if (end > n)
			end = n;
		float sv = ck_elem_load(scale + scst * q * (int64_t)scs, b->scdt);
		if (fast) {
			ck_cpu_fp4_scaled_run(src, n0 + i, sv, b->divide, fast == 1,
					      dst + i * (int64_t)des, end - i, 1);
			i = end;
		}
		for (; i < end; i++) {
			int64_t k = n0 + i * ss;
			float v = ck_e2m1_to_f32((unsigned)(src[k >> 1] >> ((k & 1) * 4)) & 15);
			v = ck_elem_scaled(v, sv, b->divide);
			if (b->shifted)
				v = ck_elem_shift(v, b->shift);
			ck_elem_finish(v, b->casts, b->nc, b->saturate, dst + i * ds * (int64_t)des);
		}
	}
}

/* A transposing box (the source contiguous along the output's second-last
 * dim, strided along its last) read row by row touches a new cache line,
 * often a new page, for every element: GPT-2's Conv1D weights as Linear ran
 * at less than half the identity view's speed. Such a box goes in tiles: a
 * tile's source lines (TILE_LINE bytes along the second-last dim, for
 * TILE_COLS elements of the last) are gathered into a scratch block once,
 * then each of its output rows is cast from there as a contiguous run:
 * 1.5-5x faster on this VM's 2-core EPYC from 768x3072 F32 to 4096x4096 and
 * 2048x8192 BF16 (with or without a cast). Source rows of 2 KiB or less
 * stay on the row path, whose lines the next rows reuse from L2 (256x256
 * and 512x512 F32 were 10-40% slower tiled). Unscaled boxes only (a scaled
 * row's blocks would need its position). */
#define TILE_LINE 64
#define TILE_COLS 256
#define TILE_MIN_STRIDE 2048

static int tiles_apply(const struct ck_box *b)
{
	int last = b->ndim - 1;
	return last >= 1 && !b->scaled && !b->shifted && b->sdt != CK_DT_F4_E2M1 &&
	       b->dstride[last] == 1 && b->sstride[last - 1] == 1 && b->ext[last - 1] > 1 &&
	       b->sstride[last] * (int64_t)ck_dtype_size(b->sdt) > TILE_MIN_STRIDE;
}

/* rows x cols elements of es bytes: element (t, k) of the tile from
 * src[t + k * ss] to tile[t * TILE_COLS + k]. es a constant in each call, so
 * the copies are single moves. Each row's line lies in a page of its own,
 * which the hardware does not prefetch: the line TILE_AHEAD rows on and,
 * when another tile follows (more), the next tile's line beside this one
 * are (without them 2-3x slower; with the first, 32000 rows 4 KiB apart
 * (an lm_head) 2x faster than with the second alone). */
#define TILE_AHEAD 8

static inline void gather(unsigned char *tile, const unsigned char *src, int64_t ss,
			  size_t es, int64_t rows, int64_t cols, int more)
{
	for (int64_t k = 0; k < cols; k++) {
		if (k + TILE_AHEAD < cols)
			__builtin_prefetch(src + (size_t)((k + TILE_AHEAD) * ss) * es);
		if (more)
			__builtin_prefetch(src + (size_t)(k * ss) * es + TILE_LINE);
		for (int64_t t = 0; t < rows; t++)
			memcpy(tile + (size_t)(t * TILE_COLS + k) * es, src + (size_t)(t + k * ss) * es,
			       es);
	}
}

#if defined(__SSE2__)
/* 2- and 4-byte elements in blocks of 8 x 8 and 4 x 4, transposed in
 * registers (SSE2, every x86-64 has it): 8 or 4 source lines loaded once
 * and interleaved, where gather moves one element at a time (90% of a
 * transposing view's tiles; the interleave is the textbook one of
 * unpacklo/hi at 16, 32 and 64 bits). Rows and columns past the last whole
 * block go through gather. */
static inline void block8x16(unsigned char *tile, const unsigned char *src, int64_t ss)
{
	__m128i r[8], a[8], b[8];
	for (int k = 0; k < 8; k++)
		r[k] = _mm_loadu_si128((const __m128i *)(const void *)(src + (size_t)(k * ss) * 2));
	for (int k = 0; k < 8; k += 2) {
		a[k / 2] = _mm_unpacklo_epi16(r[k], r[k + 1]);
		a[4 + k / 2] = _mm_unpackhi_epi16(r[k], r[k + 1]);
	}
	/* a[0..3]: elements 0-3 of line pairs 01 23 45 67; a[4..7]: 4-7 */
	for (int h = 0; h < 2; h++) {
		b[4 * h + 0] = _mm_unpacklo_epi32(a[4 * h + 0], a[4 * h + 1]);
		b[4 * h + 1] = _mm_unpackhi_epi32(a[4 * h + 0], a[4 * h + 1]);
		b[4 * h + 2] = _mm_unpacklo_epi32(a[4 * h + 2], a[4 * h + 3]);
		b[4 * h + 3] = _mm_unpackhi_epi32(a[4 * h + 2], a[4 * h + 3]);
	}
	/* b[4h + j]: elements 4h + 2(j & 1), +1 of lines 0-3 (j < 2) or 4-7 */
	for (int h = 0; h < 2; h++)
		for (int j = 0; j < 2; j++) {
			__m128i lo = b[4 * h + j], hi = b[4 * h + 2 + j];
			int t = 4 * h + 2 * j;
			_mm_storeu_si128((__m128i *)(void *)(tile + (size_t)(t * TILE_COLS) * 2),
					 _mm_unpacklo_epi64(lo, hi));
			_mm_storeu_si128(
			    (__m128i *)(void *)(tile + (size_t)((t + 1) * TILE_COLS) * 2),
			    _mm_unpackhi_epi64(lo, hi));
		}
}

static inline void block4x32(unsigned char *tile, const unsigned char *src, int64_t ss)
{
	__m128i r[4];
	for (int k = 0; k < 4; k++)
		r[k] = _mm_loadu_si128((const __m128i *)(const void *)(src + (size_t)(k * ss) * 4));
	__m128i a0 = _mm_unpacklo_epi32(r[0], r[1]), a1 = _mm_unpackhi_epi32(r[0], r[1]);
	__m128i a2 = _mm_unpacklo_epi32(r[2], r[3]), a3 = _mm_unpackhi_epi32(r[2], r[3]);
	__m128i out[4] = {_mm_unpacklo_epi64(a0, a2), _mm_unpackhi_epi64(a0, a2),
			  _mm_unpacklo_epi64(a1, a3), _mm_unpackhi_epi64(a1, a3)};
	for (int t = 0; t < 4; t++)
		_mm_storeu_si128((__m128i *)(void *)(tile + (size_t)(t * TILE_COLS) * 4), out[t]);
}

/* gather for es 2 (n 8) or 4 (n 4) in n x n blocks, the prefetches as there */
static void gather_blocks(unsigned char *tile, const unsigned char *src, int64_t ss, size_t es,
			  int64_t rows, int64_t cols, int more)
{
	int64_t n = es == 2 ? 8 : 4, k0 = 0, whole = rows / n * n;
	for (; k0 + n <= cols; k0 += n) {
		for (int64_t k = k0; k < k0 + n; k++) {
			if (k + TILE_AHEAD < cols)
				__builtin_prefetch(src + (size_t)((k + TILE_AHEAD) * ss) * es);
			if (more)
				__builtin_prefetch(src + (size_t)(k * ss) * es + TILE_LINE);
		}
		for (int64_t t0 = 0; t0 < whole; t0 += n) {
			unsigned char *to = tile + (size_t)(t0 * TILE_COLS + k0) * es;
			const unsigned char *from = src + (size_t)(t0 + k0 * ss) * es;
			if (es == 2)
				block8x16(to, from, ss);
			else
				block4x32(to, from, ss);
		}
		for (int64_t t = whole; t < rows; t++)
			for (int64_t k = k0; k < k0 + n; k++)
				memcpy(tile + (size_t)(t * TILE_COLS + k) * es,
				       src + (size_t)(t + k * ss) * es, es);
	}
	if (k0 < cols)
		gather(tile + (size_t)k0 * es, src + (size_t)(k0 * ss) * es, ss, es, rows,
		       cols - k0, more);
}
#endif

static void gather_any(unsigned char *tile, const unsigned char *src, int64_t ss, size_t es,
		       int64_t rows, int64_t cols, int more)
{
	switch (es) {
	case 1: gather(tile, src, ss, 1, rows, cols, more); break;
#if defined(__SSE2__)
	case 2: gather_blocks(tile, src, ss, 2, rows, cols, more); break;
	case 4: gather_blocks(tile, src, ss, 4, rows, cols, more); break;
#else
	case 2: gather(tile, src, ss, 2, rows, cols, more); break;
	case 4: gather(tile, src, ss, 4, rows, cols, more); break;
#endif
	default: gather(tile, src, ss, es, rows, cols, more); break;
	}
}

/* The box's last two dims in tiles (src and dst already at the outer index). */
static void tiles_2d(const struct ck_box *b, const unsigned char *src, unsigned char *dst)
{
	unsigned char tile[TILE_LINE * TILE_COLS];
	int last = b->ndim - 1;
	size_t ses = ck_dtype_size(b->sdt), des = ck_dtype_size(b->ddt);
	int64_t rows_max = (int64_t)(TILE_LINE / ses), ss = b->sstride[last];
	int64_t nr = b->ext[last - 1], nk = b->ext[last], drow = b->dstride[last - 1];
	for (int64_t i0 = 0; i0 < nr; i0 += rows_max) {
		int64_t rows = nr - i0 < rows_max ? nr - i0 : rows_max;
		for (int64_t k0 = 0; k0 < nk; k0 += TILE_COLS) {
			int64_t cols = nk - k0 < TILE_COLS ? nk - k0 : TILE_COLS;
			gather_any(tile, src + (size_t)(i0 + k0 * ss) * ses, ss, ses, rows, cols,
				   i0 + rows < nr);
			for (int64_t t = 0; t < rows; t++)
				ck_cpu_convert_run(tile + (size_t)(t * TILE_COLS) * ses, 1, b->sdt,
						   b->casts, b->nc, b->saturate,
						   dst + (size_t)((i0 + t) * drow + k0) * des, cols);
		}
	}
}

void ck_cpu_convert_box(const struct ck_box *b, const unsigned char *src,
			const unsigned char *scale, unsigned char *dst)
{
	int fp4 = b->sdt == CK_DT_F4_E2M1;
	size_t ses = ck_dtype_size(b->sdt), des = ck_dtype_size(b->ddt);
	size_t scs = b->scaled ? ck_dtype_size(b->scdt) : 0;
	int last = b->ndim - 1;
	if (last < 0) {
		if (fp4)
			box_row_fp4(b, src, b->snib, 1, scale, dst, 1, 1);
		else
			box_row(b, src, 1, scale, dst, 1, 1);
		return;
	}
	int tiles = tiles_apply(b), inner = tiles ? last - 1 : last; /* dims walked here */
	int64_t idx[CK_MAX_DIMS] = {0};
	for (;;) {
		int64_t so = 0, dof = 0, sco = 0;
		for (int d = 0; d < inner; d++) {
			so += b->sstride[d] * idx[d];
			dof += b->dstride[d] * idx[d];
			if (b->scaled)
				sco += b->scstride[d] * ((idx[d] + b->sphase[d]) / b->sblock[d]);
		}
		if (tiles)
			tiles_2d(b, src + so * (int64_t)ses, dst + dof * (int64_t)des);
		else if (fp4)
			box_row_fp4(b, src, b->snib + so, b->sstride[last], scale + sco * (int64_t)scs,
				    dst + dof * (int64_t)des, b->dstride[last], b->ext[last]);
		else
			box_row(b, src + so * (int64_t)ses, b->sstride[last],
				scale ? scale + sco * (int64_t)scs : NULL, dst + dof * (int64_t)des,
				b->dstride[last], b->ext[last]);
		int d = inner - 1;
		while (d >= 0 && ++idx[d] == b->ext[d]) {
			idx[d] = 0;
			d--;
		}
		if (d < 0)
			break;
	}
}
