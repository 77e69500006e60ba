/* The CUDA backend of the box kernels (box.h), bit for bit the CPU's.
 *
 * A device is opened once per process with a memory budget and split into
 * lanes, one per evaluator thread. A lane owns a stream, two staging slots
 * (pinned host + device buffers for source bytes and block scales) and a
 * device output buffer, all allocated at open: no allocation per read. One
 * evaluation on a lane:
 *     ck_gpu_begin(lane, out_bytes, zero)          device output, optionally zeroed
 *     repeat: ck_gpu_stage(...)                    a pinned slot to read source bytes into
 *             ck_gpu_submit(lane, box, ...)        host->device copy + kernel, async
 *     ck_gpu_end(lane, dst)                        device->host copy, wait
 * Staging alternates between the two slots, so reading the next box from
 * disk overlaps the copy and kernel of the previous one.
 *
 * Built without CUDA (no nvcc), ck_gpu_count says so and ck_gpu_open fails:
 * the rest of the API is never reached. */
#ifndef CK_GPU_H
#define CK_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "../util/error.h"
#include "box.h"

#ifdef __cplusplus
extern "C" {
#endif

struct ck_gpu;
struct ck_gpu_lane;

#define CK_GPU_MEM_DEFAULT (1ull << 30)

/* Usable CUDA devices; 0 with the reason in why (built without CUDA, no
 * driver, no device). */
int ck_gpu_count(char *why, size_t n);
/* Open device dev with `budget` bytes of device memory for `lanes` lanes
 * (the same again in pinned host memory, at most). */
int ck_gpu_open(int dev, uint64_t budget, int lanes, struct ck_gpu **out, struct ck_err *err);
void ck_gpu_close(struct ck_gpu *g);
/* "NVIDIA H100 80GB HBM3 (cuda:0)" */
const char *ck_gpu_name(const struct ck_gpu *g);
/* A free lane, or NULL when every lane is taken (the caller stays on CPU). */
struct ck_gpu_lane *ck_gpu_lane_take(struct ck_gpu *g);
void ck_gpu_lane_give(struct ck_gpu_lane *l);
/* Source bytes one slot stages; device output bytes one evaluation holds. */
size_t ck_gpu_lane_window(const struct ck_gpu_lane *l);
size_t ck_gpu_lane_out_cap(const struct ck_gpu_lane *l);

int ck_gpu_begin(struct ck_gpu_lane *l, size_t out_bytes, int zero, struct ck_err *err);
/* Pinned buffers for the next box: src_bytes <= window; scale_bytes any
 * (the slot grows, rarely). Waits until the slot's previous copy is done. */
int ck_gpu_stage(struct ck_gpu_lane *l, size_t src_bytes, size_t scale_bytes,
		 unsigned char **src, unsigned char **scale, struct ck_err *err);
/* Copy the staged bytes to the device and run box b: its source origin is
 * src_off bytes into the staged source, its scale origin scale_off bytes
 * into the staged scales, its output origin dst_off bytes into the output. */
int ck_gpu_submit(struct ck_gpu_lane *l, const struct ck_box *b, size_t src_off,
		  size_t scale_off, size_t dst_off, struct ck_err *err);
/* Copy the output to dst (NULL: discard) and wait for the lane. */
int ck_gpu_end(struct ck_gpu_lane *l, void *dst, struct ck_err *err);

/* Benchmark hook: run box b `iters` times on device-resident data (sized
 * from b) and a device-to-device copy of the same bytes read plus written;
 * seconds per kernel and per copy. */
int ck_gpu_bench_box(struct ck_gpu *g, const struct ck_box *b, int iters, double *kernel_s,
		     double *copy_s, struct ck_err *err);

#ifdef __cplusplus
}
#endif

#endif
