/* CUDA backend of the box kernels: the element pipeline is elem.h compiled
 * for the device (never CUDA's conversion intrinsics, whose NaN payloads and
 * saturation differ), so every output bit equals the CPU's.
 *
 * Two kernels:
 * - rows: output rows (the innermost dim) spread over the threads of a block,
 *   several short rows per block; coalesced writes, and coalesced reads when
 *   the source is contiguous along the row (copies, casts, slices, concat);
 * - tile: a transpose, when the row is strided in the source but another dim
 *   is contiguous there: 32x32 tiles through shared memory, read along the
 *   source's contiguous dim and written along the output's. */
#include <cuda_runtime.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "../ckpt/dtype.h"
#include "../util/error.h"
#include "box.h"
}
#include "elem.h"
#include "gpu.h"

/* ---- device side ---- */

struct kargs {
	struct ck_box b;
	const unsigned char *src, *scale;
	unsigned char *dst;
	int ses, des, scs;
};

__device__ __forceinline__ int64_t qdiv(int64_t a, int64_t b)
{
	/* 32-bit division is several times cheaper; indices usually fit */
	if (a < 0x7FFFFFFF && b < 0x7FFFFFFF)
		return (int64_t)((uint32_t)a / (uint32_t)b);
	return a / b;
}

/* Element access with the element's own width: every element offset is a
 * multiple of its size and every buffer is aligned, so a load is one
 * instruction (memcpy through unsigned char would be byte by byte). The
 * conversions themselves are elem.h's, shared with the CPU. */
__device__ __forceinline__ float ld(const unsigned char *p, enum ck_dtype dt)
{
	switch (dt) {
	case CK_DT_F16:
		return ck_f16_to_f32(*(const uint16_t *)p);
	case CK_DT_BF16:
		return ck_bf16_to_f32(*(const uint16_t *)p);
	case CK_DT_F8_E4M3:
		return ck_e4m3_to_f32(*p);
	case CK_DT_F8_E5M2:
		return ck_e5m2_to_f32(*p);
	case CK_DT_F8_E8M0:
		return ck_e8m0_to_f32(*p);
	default:
		return *(const float *)p;
	}
}

__device__ __forceinline__ void st(unsigned char *p, enum ck_dtype dt, float v, int sat)
{
	switch (dt) {
	case CK_DT_F16:
		*(uint16_t *)p = ck_f32_to_f16(v, sat);
		break;
	case CK_DT_BF16:
		*(uint16_t *)p = ck_f32_to_bf16(v, sat);
		break;
	case CK_DT_F8_E4M3:
		*p = ck_f32_to_e4m3(v, sat);
		break;
	case CK_DT_F8_E5M2:
		*p = ck_f32_to_e5m2(v, sat);
		break;
	default:
		*(float *)p = v;
	}
}

/* An element copied as it is (size 1, 2, 4 or 8 bytes). */
__device__ __forceinline__ void copy_elem(unsigned char *d, const unsigned char *s, int size)
{
	switch (size) {
	case 1:
		*d = *s;
		break;
	case 2:
		*(uint16_t *)d = *(const uint16_t *)s;
		break;
	case 4:
		*(uint32_t *)d = *(const uint32_t *)s;
		break;
	default:
		*(uint64_t *)d = *(const uint64_t *)s;
	}
}

/* Source element `off` (nibbles past snib for MXFP4's packed E2M1), scale
 * element k (when scaled), output at d. */
__device__ __forceinline__ void elem(const struct kargs &a, int64_t off, int64_t k,
				     unsigned char *d)
{
	const struct ck_box &b = a.b;
	float v;
	if (b.sdt == CK_DT_F4_E2M1) {
		int64_t n = b.snib + off;
		v = ck_e2m1_to_f32((unsigned)(a.src[n >> 1] >> ((n & 1) * 4)) & 15);
	} else {
		const unsigned char *s = a.src + off * a.ses;
		if (!(b.nc > 0 || b.scaled || b.shifted)) {
			copy_elem(d, s, a.ses);
			return;
		}
		v = ld(s, b.sdt);
	}
	if (b.scaled)
		v = ck_elem_scaled(v, ld(a.scale + k * a.scs, b.scdt), b.divide);
	if (b.shifted)
		v = ck_elem_shift(v, b.shift);
	if (b.nc == 0) {
		*(float *)d = v;
		return;
	}
	for (int c = 0; c < b.nc - 1; c++) { /* as ck_elem_finish: round through each cast */
		unsigned char tmp[4];
		ck_elem_store(tmp, b.casts[c], v, (b.saturate >> c) & 1);
		v = ck_elem_load(tmp, b.casts[c]);
	}
	st(d, b.casts[b.nc - 1], v, (b.saturate >> (b.nc - 1)) & 1);
}

/* Offsets of row r (all dims but the last; skip: a dim to leave out). */
__device__ __forceinline__ void outer_offsets(const struct ck_box &b, int64_t r, int skip,
					      int64_t *so, int64_t *dof, int64_t *sco)
{
	*so = *dof = *sco = 0;
	for (int d = b.ndim - 2; d >= 0; d--) {
		if (d == skip)
			continue;
		int64_t e = b.ext[d], i = r - qdiv(r, e) * e;
		r = qdiv(r, e);
		*so += i * b.sstride[d];
		*dof += i * b.dstride[d];
		if (b.scaled)
			*sco += b.scstride[d] * qdiv(i + b.sphase[d], b.sblock[d]);
	}
}

/* The pipeline with the dtypes known at compile time, so the dtype switches
 * of elem.h fold away: one cast (or none after a scale, F32 out). SDT < 0:
 * the generic path, everything read from the box. */
template <int SDT, int DDT, int SCALED>
__device__ __forceinline__ void elem_t(const struct kargs &a, int64_t off, int64_t k,
				       unsigned char *d)
{
	if (SDT < 0) {
		elem(a, off, k, d);
		return;
	}
	float v = ld(a.src + off * a.ses, (enum ck_dtype)SDT);
	if (SCALED)
		v = ck_elem_scaled(v, ld(a.scale + k * a.scs, a.b.scdt), a.b.divide);
	st(d, (enum ck_dtype)DDT, v, (int)(a.b.saturate & 1));
}

#define VEC 4 /* consecutive elements per thread */

/* tpr threads per row (a power of two, >= 32), 256 / tpr rows per block;
 * sshift: log2 of the row's scale block when it is a power of two, else -1. */
template <int SDT, int DDT, int SCALED>
__global__ void k_rows(struct kargs a, int64_t nrows, int tpr, int sshift)
{
	const struct ck_box &b = a.b;
	int last = b.ndim - 1;
	int64_t n = last >= 0 ? b.ext[last] : 1;
	int64_t ss = last >= 0 ? b.sstride[last] : 1, ds = last >= 0 ? b.dstride[last] : 1;
	int64_t scs = last >= 0 ? b.scstride[last] : 0, ph = last >= 0 ? b.sphase[last] : 0;
	int64_t blk = last >= 0 ? b.sblock[last] : 1;
	int rpb = blockDim.x / tpr, lane = threadIdx.x % tpr;
	int64_t first = (int64_t)blockIdx.y * rpb + threadIdx.x / tpr;
	int64_t rstep = (int64_t)gridDim.y * rpb;
	for (int64_t r = first; r < nrows; r += rstep) {
		int64_t so, dof, sco;
		outer_offsets(b, r, -1, &so, &dof, &sco);
		unsigned char *dst = a.dst + dof * a.des;
		/* VEC elements per thread, a warp-wide stride apart: every access
		 * instruction of a warp is contiguous */
		for (int64_t i0 = (int64_t)blockIdx.x * tpr * VEC + lane; i0 < n;
		     i0 += (int64_t)gridDim.x * tpr * VEC) {
#pragma unroll
			for (int u = 0; u < VEC; u++) {
				int64_t i = i0 + (int64_t)u * tpr;
				if (i >= n)
					break;
				int64_t k = sco;
				if (SCALED || (SDT < 0 && b.scaled))
					k += scs * (sshift >= 0 ? (i + ph) >> sshift : qdiv(i + ph, blk));
				elem_t<SDT, DDT, SCALED>(a, so + i * ss, k, dst + i * ds * a.des);
			}
		}
	}
}

#define TILE 32
#define TROWS 8

/* Transpose: dim kd is contiguous in the source, the last dim in the output. */
__global__ void k_tile(struct kargs a, int kd, int64_t nrest)
{
	__shared__ uint64_t tile[TILE][TILE + 1];
	const struct ck_box &b = a.b;
	int last = b.ndim - 1;
	int64_t K = b.ext[kd], N = b.ext[last];
	int64_t ktiles = (K + TILE - 1) / TILE, ntiles = (N + TILE - 1) / TILE;
	for (int64_t r = blockIdx.z; r < nrest; r += gridDim.z) {
		int64_t so, dof, sco;
		outer_offsets(b, r, kd, &so, &dof, &sco);
		for (int64_t ty = blockIdx.y; ty < ktiles; ty += gridDim.y)
			for (int64_t tx = blockIdx.x; tx < ntiles; tx += gridDim.x) {
				int64_t k0 = ty * TILE, n0 = tx * TILE;
				/* read: threadIdx.x runs along k, contiguous in the source */
				for (int j = threadIdx.y; j < TILE; j += TROWS) {
					int64_t k = k0 + threadIdx.x, n = n0 + j;
					if (k < K && n < N) {
						int64_t sc = sco;
						if (b.scaled)
							sc += b.scstride[kd] * qdiv(k + b.sphase[kd], b.sblock[kd]) +
							      b.scstride[last] * qdiv(n + b.sphase[last], b.sblock[last]);
						uint64_t out = 0;
						elem(a, so + k * b.sstride[kd] + n * b.sstride[last], sc,
						     (unsigned char *)&out);
						tile[j][threadIdx.x] = out;
					}
				}
				__syncthreads();
				/* write: threadIdx.x runs along n, contiguous in the output */
				for (int j = threadIdx.y; j < TILE; j += TROWS) {
					int64_t k = k0 + j, n = n0 + threadIdx.x;
					if (k < K && n < N) {
						uint64_t v = tile[threadIdx.x][j]; /* little endian: low bytes first */
						copy_elem(a.dst + (dof + k * b.dstride[kd] + n * b.dstride[last]) * a.des,
							  (const unsigned char *)&v, a.des);
					}
				}
				__syncthreads();
			}
	}
}

static int dt_size(enum ck_dtype dt)
{
	return (int)ck_dtype_size(dt);
}

/* The dim contiguous in the source that a transpose should tile with the
 * last dim, or -1 when the rows kernel reads well enough. */
static int tile_dim(const struct ck_box *b)
{
	int last = b->ndim - 1;
	if (last < 1 || b->sstride[last] == 1 || b->dstride[last] != 1 || b->ext[last] < 8)
		return -1;
	for (int d = 0; d < last; d++)
		if (b->sstride[d] == 1 && b->ext[d] >= 8)
			return d;
	return -1;
}

static void launch(const struct ck_box *box, const unsigned char *src, const unsigned char *scale,
		   unsigned char *dst, cudaStream_t st)
{
	struct kargs a;
	a.b = *box;
	ck_box_normalise(&a.b);
	a.src = src;
	a.scale = scale;
	a.dst = dst;
	a.ses = dt_size(a.b.sdt);
	a.des = dt_size(a.b.ddt);
	a.scs = a.b.scaled ? dt_size(a.b.scdt) : 0;
	const struct ck_box &b = a.b;
	int last = b.ndim - 1;
	int kd = tile_dim(&b);
	if (kd >= 0) {
		int64_t nrest = 1;
		for (int d = 0; d < last; d++)
			if (d != kd)
				nrest *= b.ext[d];
		int64_t kt = (b.ext[kd] + TILE - 1) / TILE, nt = (b.ext[last] + TILE - 1) / TILE;
		dim3 grid((unsigned)(nt < 65535 ? nt : 65535), (unsigned)(kt < 65535 ? kt : 65535),
			  (unsigned)(nrest < 65535 ? nrest : 65535));
		k_tile<<<grid, dim3(TILE, TROWS), 0, st>>>(a, kd, nrest);
		return;
	}
	int64_t n = last >= 0 ? b.ext[last] : 1, nrows = 1;
	for (int d = 0; d < last; d++)
		nrows *= b.ext[d];
	int tpr = 32;
	while (tpr < 256 && (int64_t)tpr * VEC < n)
		tpr *= 2;
	int rpb = 256 / tpr;
	int64_t gx = (n + (int64_t)tpr * VEC - 1) / ((int64_t)tpr * VEC),
		gy = (nrows + rpb - 1) / rpb;
	/* enough blocks to fill the device; threads loop over the rest */
	if (gx > 4096)
		gx = 4096;
	if (gy > 65535)
		gy = 65535;
	int sshift = -1;
	if (last >= 0 && b.sblock[last] > 0 && !(b.sblock[last] & (b.sblock[last] - 1)))
		sshift = __builtin_ctzll((unsigned long long)b.sblock[last]);
	dim3 grid((unsigned)gx, (unsigned)gy);
	/* one cast, or a scale with F32 out: a specialised kernel if common */
	/* (a shift takes the generic kernel) */
	int one = b.shifted ? 0
		  : b.nc == 1 ? b.casts[0] == b.ddt
			      : b.nc == 0 && b.scaled && b.ddt == CK_DT_F32;
	int sc = b.scaled;
#define ROWS(S, D, SC)                                                                             \
	if (one && b.sdt == (S) && b.ddt == (D) && sc == (SC)) {                                   \
		k_rows<S, D, SC><<<grid, 256, 0, st>>>(a, nrows, tpr, sshift);                       \
		return;                                                                            \
	}
	ROWS(CK_DT_BF16, CK_DT_F32, 0)
	ROWS(CK_DT_F16, CK_DT_F32, 0)
	ROWS(CK_DT_F32, CK_DT_BF16, 0)
	ROWS(CK_DT_F32, CK_DT_F16, 0)
	ROWS(CK_DT_BF16, CK_DT_F16, 0)
	ROWS(CK_DT_F16, CK_DT_BF16, 0)
	ROWS(CK_DT_F32, CK_DT_F8_E4M3, 0)
	ROWS(CK_DT_BF16, CK_DT_F8_E4M3, 0)
	ROWS(CK_DT_F8_E4M3, CK_DT_BF16, 1)
	ROWS(CK_DT_F8_E4M3, CK_DT_F32, 1)
	ROWS(CK_DT_F8_E4M3, CK_DT_F16, 1)
	ROWS(CK_DT_BF16, CK_DT_F8_E4M3, 1)
	ROWS(CK_DT_F32, CK_DT_F8_E4M3, 1)
#undef ROWS
	k_rows<-1, -1, 0><<<grid, 256, 0, st>>>(a, nrows, tpr, sshift);
}

/* ---- host side ---- */

struct slot {
	unsigned char *hsrc, *dsrc;
	unsigned char *hsc, *dsc;
	size_t sccap;
	cudaEvent_t done; /* the last copy out of this slot's host buffers */
	int used;
};

struct ck_gpu_lane {
	struct ck_gpu *g;
	int taken;
	cudaStream_t st;
	struct slot s[2];
	int cur;
	unsigned char *dout;
	size_t out_bytes;
};

struct ck_gpu {
	int dev;
	char name[300];
	size_t win, out; /* per lane */
	int nlanes;
	struct ck_gpu_lane *lanes;
	pthread_mutex_t mu;
};

static int cuda_fail(struct ck_err *err, cudaError_t e, const char *what)
{
	return ck_fail_sys(err, EIO, "CUDA: %s: %s", what, cudaGetErrorString(e));
}

#define CK_CUDA(call, what)                                                                        \
	do {                                                                                       \
		cudaError_t e_ = (call);                                                           \
		if (e_ != cudaSuccess)                                                             \
			return cuda_fail(err, e_, what);                                           \
	} while (0)

extern "C" int ck_gpu_count(char *why, size_t n)
{
	int c = 0;
	cudaError_t e = cudaGetDeviceCount(&c);
	if (e != cudaSuccess) {
		snprintf(why, n, "no usable CUDA device (%s)", cudaGetErrorString(e));
		return 0;
	}
	if (c == 0)
		snprintf(why, n, "no CUDA device");
	return c;
}

static void lane_free(struct ck_gpu_lane *l)
{
	for (int k = 0; k < 2; k++) {
		struct slot *s = &l->s[k];
		cudaFreeHost(s->hsrc);
		cudaFree(s->dsrc);
		cudaFreeHost(s->hsc);
		cudaFree(s->dsc);
		if (s->done)
			cudaEventDestroy(s->done);
	}
	cudaFree(l->dout);
	if (l->st)
		cudaStreamDestroy(l->st);
}

static int lane_init(struct ck_gpu *g, struct ck_gpu_lane *l, struct ck_err *err)
{
	l->g = g;
	CK_CUDA(cudaStreamCreateWithFlags(&l->st, cudaStreamNonBlocking), "stream");
	for (int k = 0; k < 2; k++) {
		struct slot *s = &l->s[k];
		CK_CUDA(cudaHostAlloc((void **)&s->hsrc, g->win, cudaHostAllocDefault),
			"pinned staging window");
		CK_CUDA(cudaMalloc((void **)&s->dsrc, g->win), "device staging window");
		s->sccap = 64 << 10;
		CK_CUDA(cudaHostAlloc((void **)&s->hsc, s->sccap, cudaHostAllocDefault),
			"pinned scale window");
		CK_CUDA(cudaMalloc((void **)&s->dsc, s->sccap), "device scale window");
		CK_CUDA(cudaEventCreateWithFlags(&s->done, cudaEventDisableTiming), "event");
	}
	CK_CUDA(cudaMalloc((void **)&l->dout, g->out), "device output");
	return 0;
}

extern "C" int ck_gpu_open(int dev, uint64_t budget, int lanes, struct ck_gpu **out,
			   struct ck_err *err)
{
	*out = NULL;
	char why[200];
	int count = ck_gpu_count(why, sizeof why);
	if (count == 0)
		return ck_fail(err, CK_E_USAGE, "cuda:%d: %s", dev, why);
	if (dev < 0 || dev >= count)
		return ck_fail(err, CK_E_USAGE, "cuda:%d: this machine has %d CUDA device%s", dev,
			       count, count == 1 ? "" : "s");
	if (lanes < 1)
		lanes = 1;
	/* per lane: two staging windows and an output of two windows */
	uint64_t win = budget / ((uint64_t)lanes * 4);
	if (win > (32u << 20))
		win = 32u << 20;
	win &= ~(uint64_t)((1u << 20) - 1);
	if (win < (1u << 20))
		return ck_fail(err, CK_E_USAGE,
			       "gpu_mem=%llu is too small for %d evaluator lanes (4 MiB each at "
			       "least)",
			       (unsigned long long)budget, lanes);
	CK_CUDA(cudaSetDevice(dev), "selecting the device");
	struct cudaDeviceProp prop;
	CK_CUDA(cudaGetDeviceProperties(&prop, dev), "device properties");
	struct ck_gpu *g = (struct ck_gpu *)calloc(1, sizeof *g);
	if (!g)
		return ck_fail_sys(err, ENOMEM, "GPU context");
	g->dev = dev;
	snprintf(g->name, sizeof g->name, "%s (cuda:%d)", prop.name, dev);
	g->win = win;
	g->out = 2 * win;
	g->nlanes = lanes;
	pthread_mutex_init(&g->mu, NULL);
	g->lanes = (struct ck_gpu_lane *)calloc((size_t)lanes, sizeof *g->lanes);
	if (!g->lanes) {
		ck_gpu_close(g);
		return ck_fail_sys(err, ENOMEM, "GPU context");
	}
	for (int i = 0; i < lanes; i++)
		if (lane_init(g, &g->lanes[i], err) < 0) {
			ck_gpu_close(g);
			return -1;
		}
	*out = g;
	return 0;
}

extern "C" void ck_gpu_close(struct ck_gpu *g)
{
	if (!g)
		return;
	cudaSetDevice(g->dev);
	for (int i = 0; g->lanes && i < g->nlanes; i++)
		lane_free(&g->lanes[i]);
	free(g->lanes);
	pthread_mutex_destroy(&g->mu);
	free(g);
}

extern "C" const char *ck_gpu_name(const struct ck_gpu *g)
{
	return g->name;
}

extern "C" struct ck_gpu_lane *ck_gpu_lane_take(struct ck_gpu *g)
{
	struct ck_gpu_lane *l = NULL;
	pthread_mutex_lock(&g->mu);
	for (int i = 0; i < g->nlanes && !l; i++)
		if (!g->lanes[i].taken) {
			l = &g->lanes[i];
			l->taken = 1;
		}
	pthread_mutex_unlock(&g->mu);
	return l;
}

extern "C" void ck_gpu_lane_give(struct ck_gpu_lane *l)
{
	if (!l)
		return;
	pthread_mutex_lock(&l->g->mu);
	l->taken = 0;
	pthread_mutex_unlock(&l->g->mu);
}

extern "C" size_t ck_gpu_lane_window(const struct ck_gpu_lane *l)
{
	return l->g->win;
}

extern "C" size_t ck_gpu_lane_out_cap(const struct ck_gpu_lane *l)
{
	return l->g->out;
}

extern "C" int ck_gpu_begin(struct ck_gpu_lane *l, size_t out_bytes, int zero,
			    struct ck_err *err)
{
	if (out_bytes > l->g->out)
		return ck_fail_sys(err, EINVAL, "GPU output of %zu bytes exceeds the lane's %zu",
				   out_bytes, l->g->out);
	CK_CUDA(cudaSetDevice(l->g->dev), "selecting the device");
	l->out_bytes = out_bytes;
	if (zero)
		CK_CUDA(cudaMemsetAsync(l->dout, 0, out_bytes, l->st), "zeroing the output");
	return 0;
}

extern "C" int ck_gpu_stage(struct ck_gpu_lane *l, size_t src_bytes, size_t scale_bytes,
			    unsigned char **src, unsigned char **scale, struct ck_err *err)
{
	struct slot *s = &l->s[l->cur];
	if (src_bytes > l->g->win)
		return ck_fail_sys(err, EINVAL, "GPU staging of %zu bytes exceeds the window %zu",
				   src_bytes, l->g->win);
	if (s->used)
		CK_CUDA(cudaEventSynchronize(s->done), "waiting for a staging slot");
	if (scale_bytes > s->sccap) {
		size_t cap = s->sccap;
		while (cap < scale_bytes)
			cap *= 2;
		cudaFreeHost(s->hsc);
		cudaFree(s->dsc);
		s->hsc = s->dsc = NULL;
		s->sccap = 0;
		CK_CUDA(cudaHostAlloc((void **)&s->hsc, cap, cudaHostAllocDefault),
			"pinned scale window");
		CK_CUDA(cudaMalloc((void **)&s->dsc, cap), "device scale window");
		s->sccap = cap;
	}
	*src = s->hsrc;
	*scale = s->hsc;
	return 0;
}

extern "C" int ck_gpu_submit(struct ck_gpu_lane *l, const struct ck_box *b, size_t src_off,
			     size_t scale_off, size_t dst_off, struct ck_err *err)
{
	struct slot *s = &l->s[l->cur];
	/* bytes the box reaches in the source and the scales */
	size_t need = (size_t)ck_box_src_bytes(b), scneed = (size_t)ck_box_scale_bytes(b);
	CK_CUDA(cudaMemcpyAsync(s->dsrc, s->hsrc, src_off + need, cudaMemcpyHostToDevice, l->st),
		"copying source bytes to the device");
	if (b->scaled)
		CK_CUDA(cudaMemcpyAsync(s->dsc, s->hsc, scale_off + scneed, cudaMemcpyHostToDevice,
					l->st),
			"copying scales to the device");
	CK_CUDA(cudaEventRecord(s->done, l->st), "event");
	s->used = 1;
	launch(b, s->dsrc + src_off, b->scaled ? s->dsc + scale_off : NULL, l->dout + dst_off,
	       l->st);
	CK_CUDA(cudaGetLastError(), "launching a kernel");
	l->cur ^= 1;
	return 0;
}

extern "C" int ck_gpu_end(struct ck_gpu_lane *l, void *dst, struct ck_err *err)
{
	if (dst && l->out_bytes)
		CK_CUDA(cudaMemcpyAsync(dst, l->dout, l->out_bytes, cudaMemcpyDeviceToHost, l->st),
			"copying the output to the host");
	CK_CUDA(cudaStreamSynchronize(l->st), "evaluation on the device");
	return 0;
}

extern "C" int ck_gpu_bench_box(struct ck_gpu *g, const struct ck_box *b, int iters,
				double *kernel_s, double *copy_s, struct ck_err *err)
{
	CK_CUDA(cudaSetDevice(g->dev), "selecting the device");
	size_t des = ck_dtype_size(b->ddt);
	size_t in = (size_t)ck_box_src_bytes(b), out = des, sc = (size_t)ck_box_scale_bytes(b);
	for (int d = 0; d < b->ndim; d++)
		out += (size_t)(b->dstride[d] * (b->ext[d] - 1)) * des;
	/* the copy moves as many bytes as the kernel: (in + out) / 2 read and written */
	size_t cb = (in + out) / 2;
	unsigned char *din = NULL, *dout = NULL, *dsc = NULL, *ca = NULL, *cbuf = NULL;
	cudaEvent_t e0 = NULL, e1 = NULL;
	int rc = -1;
	cudaError_t e;
	float ms = 0;
	if ((e = cudaMalloc((void **)&din, in)) || (e = cudaMalloc((void **)&dout, out)) ||
	    (e = cudaMalloc((void **)&dsc, sc ? sc : 4)) || (e = cudaMalloc((void **)&ca, cb)) ||
	    (e = cudaMalloc((void **)&cbuf, cb)) || (e = cudaMemset(din, 0x3c, in)) ||
	    (e = cudaMemset(dsc, 0x3f, sc ? sc : 4)) || (e = cudaEventCreate(&e0)) ||
	    (e = cudaEventCreate(&e1))) {
		cuda_fail(err, e, "benchmark buffers");
		goto out;
	}
	launch(b, din, dsc, dout, 0); /* warm up */
	cudaEventRecord(e0, 0);
	for (int i = 0; i < iters; i++)
		launch(b, din, dsc, dout, 0);
	cudaEventRecord(e1, 0);
	if ((e = cudaEventSynchronize(e1)) || (e = cudaGetLastError())) {
		cuda_fail(err, e, "benchmark kernel");
		goto out;
	}
	cudaEventElapsedTime(&ms, e0, e1);
	*kernel_s = ms / 1e3 / iters;
	cudaMemcpyAsync(cbuf, ca, cb, cudaMemcpyDeviceToDevice, 0);
	cudaEventRecord(e0, 0);
	for (int i = 0; i < iters; i++)
		cudaMemcpyAsync(cbuf, ca, cb, cudaMemcpyDeviceToDevice, 0);
	cudaEventRecord(e1, 0);
	if ((e = cudaEventSynchronize(e1))) {
		cuda_fail(err, e, "benchmark copy");
		goto out;
	}
	cudaEventElapsedTime(&ms, e0, e1);
	*copy_s = ms / 1e3 / iters;
	rc = 0;
out:
	cudaFree(din);
	cudaFree(dout);
	cudaFree(dsc);
	cudaFree(ca);
	cudaFree(cbuf);
	if (e0)
		cudaEventDestroy(e0);
	if (e1)
		cudaEventDestroy(e1);
	return rc;
}
