/* The GPU API when ckptfs is built without nvcc: no device, ever. */
#include "gpu.h"

#include <errno.h>
#include <stdio.h>

int ck_gpu_count(char *why, size_t n)
{
	snprintf(why, n, "ckptfs was built without CUDA (nvcc was not found at build time)");
	return 0;
}

int ck_gpu_open(int dev, uint64_t budget, int lanes, struct ck_gpu **out, struct ck_err *err)
{
	(void)budget, (void)lanes;
	*out = NULL;
	return ck_fail(err, CK_E_USAGE,
		       "cuda:%d: ckptfs was built without CUDA (nvcc was not found at build time)",
		       dev);
}

void ck_gpu_close(struct ck_gpu *g)
{
	(void)g;
}

const char *ck_gpu_name(const struct ck_gpu *g)
{
	(void)g;
	return "none";
}

struct ck_gpu_lane *ck_gpu_lane_take(struct ck_gpu *g)
{
	(void)g;
	return NULL;
}

void ck_gpu_lane_give(struct ck_gpu_lane *l)
{
	(void)l;
}

size_t ck_gpu_lane_window(const struct ck_gpu_lane *l)
{
	(void)l;
	return 0;
}

size_t ck_gpu_lane_out_cap(const struct ck_gpu_lane *l)
{
	(void)l;
	return 0;
}

int ck_gpu_begin(struct ck_gpu_lane *l, size_t out_bytes, int zero, struct ck_err *err)
{
	(void)l, (void)out_bytes, (void)zero;
	return ck_fail_sys(err, ENODEV, "no CUDA backend");
}

int ck_gpu_stage(struct ck_gpu_lane *l, size_t src_bytes, size_t scale_bytes,
		 unsigned char **src, unsigned char **scale, struct ck_err *err)
{
	(void)l, (void)src_bytes, (void)scale_bytes, (void)src, (void)scale;
	return ck_fail_sys(err, ENODEV, "no CUDA backend");
}

int ck_gpu_submit(struct ck_gpu_lane *l, const struct ck_box *b, size_t src_off,
		  size_t scale_off, size_t dst_off, struct ck_err *err)
{
	(void)l, (void)b, (void)src_off, (void)scale_off, (void)dst_off;
	return ck_fail_sys(err, ENODEV, "no CUDA backend");
}

int ck_gpu_end(struct ck_gpu_lane *l, void *dst, struct ck_err *err)
{
	(void)l, (void)dst;
	return ck_fail_sys(err, ENODEV, "no CUDA backend");
}

int ck_gpu_bench_box(struct ck_gpu *g, const struct ck_box *b, int iters, double *kernel_s,
		     double *copy_s, struct ck_err *err)
{
	(void)g, (void)b, (void)iters, (void)kernel_s, (void)copy_s;
	return ck_fail_sys(err, ENODEV, "no CUDA backend");
}
