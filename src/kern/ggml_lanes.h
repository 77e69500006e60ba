/* Vector lanes for the K-quants' and IQ4's scale searches (ggml_kquant.c,
 * ggml_kquant23.c, ggml_imx.c, ggml_iq4.c): eight sub-blocks fitted side by
 * side, lane j sub-block j, each lane ggml's scalar steps in the same
 * order, so the same floats. Static inline helpers for those files only. */
#ifndef CK_GGML_LANES_H
#define CK_GGML_LANES_H

#include <stdint.h>

#include "avx2.h"

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

/* static void NAME PARAMS, which runs NAME_body ARGS (a LANE_FN) compiled
 * for AVX2 where the CPU has it, else compiled for the baseline. PARAMS
 * and ARGS in parentheses: LANES_DISPATCH(fit, (const float *x, int n),
 * (x, n)). */
#ifdef HAVE_AVX2_LANES
#define LANES_DISPATCH(name, params, args)                                                         \
	AVX2_LANES static void name##_avx2 params                                                  \
	{                                                                                          \
		name##_body args;                                                                  \
	}                                                                                          \
	static void name params                                                                    \
	{                                                                                          \
		if (ck_avx2_usable())                                                              \
			name##_avx2 args;                                                          \
		else                                                                               \
			name##_body args;                                                          \
	}
#else
#define LANES_DISPATCH(name, params, args)                                                         \
	static void name params                                                                    \
	{                                                                                          \
		name##_body args;                                                                  \
	}
#endif

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

/* ggml's make_qkx2_quants for 8 sub-blocks of n (16 or 32) at once, lane
 * j sub-block j (xt[i], wt[i]: element i of each, and its weight): levels
 * 0..nmax, the scale (returned) and min (min <= 0, *neg_min its negation)
 * minimising the weighted squared error, or with mad the weighted absolute
 * error; the first guess from the range, then nstep + 1 scales around
 * nmax / range, each refined by least squares. min and the range move with
 * each better fit, as in ggml; every sum runs over i in order, as ggml's
 * loop. n and mad are constants at each call, so each inlined copy keeps
 * one error form. */
LANE_FN v8f ck_qkx2_lanes(int n, int mad, int nmax, const v8f *xt, const v8f *wt, v8i *lt,
			  v8f *neg_min, float rmin, float rdelta, int nstep)
{
	const v8f zero = {0};
	const v8i abs_mask = (v8i){0} + 0x7FFFFFFF;
	v8f mn = xt[0], mx = xt[0], sum_w = wt[0], sum_x = wt[0] * xt[0];
	for (int i = 1; i < n; i++) {
		mn = sel(xt[i] < mn, xt[i], mn);
		mx = sel(xt[i] > mx, xt[i], mx);
		sum_w += wt[i];
		sum_x += wt[i] * xt[i];
	}
	mn = sel(mn > zero, zero, mn);
	const v8i flat = mx == mn; /* ggml returns early: levels 0, scale 0 */
	const v8f mn0 = mn, iscale = (float)nmax / (mx - mn);
	v8f scale = 1 / iscale, best = zero;
	for (int i = 0; i < n; i++) {
		lt[i] = levels8(iscale * (xt[i] - mn), 0, nmax);
		const v8f diff = scale * tof(lt[i]) + mn - xt[i];
		best += wt[i] * (mad ? (v8f)((v8i)diff & abs_mask) : diff * diff);
	}
	v8i aux[32];
	for (int is = 0; is <= nstep; is++) {
		const v8f isc = (rmin + rdelta * (float)is + (float)nmax) / (mx - mn);
		v8f sl = zero, sl2 = zero, sxl = zero;
		for (int i = 0; i < n; i++) {
			aux[i] = levels8(isc * (xt[i] - mn), 0, nmax);
			const v8f l = tof(aux[i]);
			sl += wt[i] * l;
			sl2 += wt[i] * l * l;
			sxl += wt[i] * l * xt[i];
		}
		const v8f D = sum_w * sl2 - sl * sl;
		v8f ts = (sum_w * sxl - sum_x * sl) / D, tm = (sl2 * sum_x - sl * sxl) / D;
		const v8i pos = tm > zero;
		tm = sel(pos, zero, tm);
		ts = sel(pos, sxl / sl2, ts);
		v8f err = zero;
		for (int i = 0; i < n; i++) {
			const v8f diff = ts * tof(aux[i]) + tm - xt[i];
			err += wt[i] * (mad ? (v8f)((v8i)diff & abs_mask) : diff * diff);
		}
		const v8i take = (D > zero) & (err < best) & ~flat;
		for (int i = 0; i < n; i++)
			lt[i] = seli(take, aux[i], lt[i]);
		best = sel(take, err, best);
		scale = sel(take, ts, scale);
		mn = sel(take, tm, mn);
	}
	const v8i z = {0};
	for (int i = 0; i < n; i++)
		lt[i] = seli(flat, z, lt[i]);
	*neg_min = -sel(flat, mn0, mn);
	return sel(flat, zero, scale);
}

/* The largest magnitude among each lane's n elements, and in *max the
 * first element of that magnitude with its sign, as ggml's loops take it
 * (ax > amax, from 0: NaN never). */
LANE_FN v8f ck_amax_lanes(int n, const v8f *xt, v8f *max)
{
	const v8i abs_mask = (v8i){0} + 0x7FFFFFFF;
	v8f amax = {0}, mx = {0};
	for (int i = 0; i < n; i++) {
		const v8f ax = (v8f)((v8i)xt[i] & abs_mask);
		const v8i m = ax > amax;
		amax = sel(m, ax, amax);
		mx = sel(m, xt[i], mx);
	}
	*max = mx;
	return amax;
}

/* Signed levels -nmax..nmax-1 (stored + nmax) of n (16 or 32) values with
 * weights wt (NULL: x^2) and the scale that fits them best over 19 trial
 * scales (ggml's make_qx_quants, rmse_type 1), for 8 sub-blocks at once,
 * lane j sub-block j (xt[i], wt[i]: element i of each, its weight). Sums
 * run over i in order, as ggml's. */
LANE_FN v8f ck_qx_lanes(int n, int nmax, const v8f *xt, const v8f *wt, v8i *lt)
{
	const v8f zero = {0};
	v8f max;
	const v8f amax = ck_amax_lanes(n, xt, &max);
	const v8i small = amax < CK_GROUP_MAX_EPS; /* ggml: levels 0, scale 0 */
	v8f iscale = (float)-nmax / max, sumlx = zero, suml2 = zero;
	for (int i = 0; i < n; i++) {
		const v8i l = levels8(iscale * xt[i], -nmax, nmax - 1);
		lt[i] = l + nmax;
		const v8f w = wt ? wt[i] : xt[i] * xt[i], lf = tof(l);
		sumlx += w * xt[i] * lf;
		suml2 += w * lf * lf;
	}
	v8f scale = sel(suml2 != zero, sumlx / suml2, zero), best = scale * sumlx;
	for (int is = -9; is <= 9; is++) {
		if (is == 0)
			continue;
		iscale = -((float)nmax + 0.1f * (float)is) / max;
		v8i aux[32];
		sumlx = suml2 = zero;
		for (int i = 0; i < n; i++) {
			aux[i] = levels8(iscale * xt[i], -nmax, nmax - 1);
			const v8f w = wt ? wt[i] : xt[i] * xt[i], lf = tof(aux[i]);
			sumlx += w * xt[i] * lf;
			suml2 += w * lf * lf;
		}
		const v8i take = (suml2 > zero) & (sumlx * sumlx > best * suml2);
		for (int i = 0; i < n; i++)
			lt[i] = seli(take, aux[i] + nmax, lt[i]);
		scale = sel(take, sumlx / suml2, scale);
		best = sel(take, scale * sumlx, best);
	}
	const v8i z = {0};
	for (int i = 0; i < n; i++)
		lt[i] = seli(small, z, lt[i]);
	return sel(small, zero, scale);
}

#endif
