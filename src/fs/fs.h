/* The FUSE front end (low-level API): the read-only virtual tree
 *   tensors/<key>        one file per target (C order, little endian)
 *   model.safetensors    every target as one safetensors file
 *   pytorch_model.bin    every target as a torch.save zip
 *   npy/<key>.npy        one NumPy file per target
 *   model-0000k-of-0000n.safetensors, model.safetensors.index.json
 *                        with max_shard_size
 *   model-rank-R-part-P.safetensors   on a per-rank view (vLLM sharded_state)
 *   .ckptfs/stats.json   live counters (direct_io, snapshot at open)
 *   .ckptfs/plan.json    targets, groups, sources
 * Reads are answered from the evaluation cache's completion callbacks, so no
 * FUSE worker thread ever waits for an evaluation. */
#ifndef CK_FS_H
#define CK_FS_H

#include "../exec/cache.h"
#include "../kern/device.h"
#include "../plan/flat.h"
#include "../plan/plan.h"

struct ck_fs_opts {
	struct ck_cache_opts cache;
	struct ck_device device; /* --device: cpu unless asked */
	int foreground;
	int fuse_threads; /* most FUSE worker threads */
	int direct_io;	  /* no kernel page cache for data files (readers that never mmap) */
	const char *log_path;
	uint64_t max_shard_size; /* >0: also serve model-0000k-of-0000n.safetensors + index */
	uint64_t part_size;	 /* per-rank views: model-rank-R-part-P.safetensors size */
	int zip_crc;		 /* compute pytorch_model.bin's CRC-32s before mounting */
	int npy_f32;		 /* npy/ serves BF16 and FP8 targets widened to F32 */
	int nonempty;		 /* the mount point may hold files */
	int gguf_bf16;		 /* quantized GGUF tensors served as BF16 (default F32) */
};

/* What the mount shows: one view (dir "") at the root, or several (dir
 * "rank3", ...) as subdirectories. A view's target i is target cache_idx[i]
 * (NULL: i) of the plan the shared cache evaluates. */
struct ck_fs_view {
	const struct ck_plan *plan;
	const uint32_t *cache_idx;
	int64_t rank; /* >= 0: a tensor-parallel rank (vLLM's per-rank files) */
	char dir[32];
};

/* Mount and serve until unmounted or signalled. ready_fd (or -1) gets "OK\n"
 * once FUSE_INIT has arrived and every start-up step succeeded, or an error
 * line. fuse_argv are options for libfuse ("-o", "allow_other", ...).
 * Returns 0 after a clean unmount. */
int ck_fs_run(const struct ck_plan *cache_plan, const struct ck_fs_view *views, size_t n_views,
	      const char *source, const char *mountpoint, const struct ck_fs_opts *o,
	      int fuse_argc, char **fuse_argv, int ready_fd, struct ck_err *err);

#endif
