/* Materialise a plan as an HF-style safetensors checkpoint. Targets stream
 * through the engine in bounded chunks into temporary files, which are
 * renamed into place only when everything succeeded: a failed convert leaves
 * no partial output. */
#ifndef CK_CONVERT_H
#define CK_CONVERT_H

#include <stdint.h>

#include "../kern/gpu.h"
#include "../plan/plan.h"
#include "../plan/vfile.h"

struct ck_convert_opts {
	uint64_t max_shard_size; /* 0: one model.safetensors */
	int threads;		 /* 0: one per core */
	int use_uring;
	int progress; /* draw a progress bar on stderr */
	const char *config; /* config.json's bytes to write verbatim, or NULL */
	size_t config_len;
	const char *file_name;	/* one file of this name, no index (group-sharded
				 * converts: the index is written by rank 0) */
	struct ck_gpu *gpu;	/* CUDA backend with a lane per thread, or NULL */
	uint64_t gpu_min;	/* reads from this size go to the GPU */
};

struct ck_convert_stats {
	uint64_t bytes_written, source_bytes_read;
	int n_files;
};

/* Write dir/name through a temp file, fsync, rename, fsync the directory. */
int ck_write_file_atomic(const char *dir, const char *name, const void *data, size_t len,
			 struct ck_err *err);

int ck_convert(const struct ck_plan *plan, const char *outdir, const struct ck_convert_opts *o,
	       struct ck_convert_stats *stats, struct ck_err *err);
/* Write a virtual file laid out over plan's targets (each target in it one
 * whole span, such as the GGUF view's model.gguf; targets it does not hold
 * are not evaluated) as outdir/name, through a temp
 * file renamed into place when complete. o's threads, uring, GPU and
 * progress apply; config and max_shard_size do not. */
int ck_convert_vfile(const struct ck_plan *plan, const struct ck_vfile *vf, const char *outdir,
		     const char *name, const struct ck_convert_opts *o,
		     struct ck_convert_stats *stats, struct ck_err *err);

#endif
