/* Materialise virtual files (a safetensors checkpoint, model.gguf, a DCP
 * directory) on disk. Target bytes stream through the engine in bounded
 * chunks into temporary files, which are renamed into place only when
 * everything succeeded: a failed convert leaves no partial output. */
#ifndef CK_CONVERT_H
#define CK_CONVERT_H

#include <stdatomic.h>
#include <stdint.h>

#include "../kern/gpu.h"
#include "../plan/flat.h"
#include "../plan/plan.h"
#include "../plan/vfile.h"

struct ck_convert_opts {
	uint64_t max_shard_size; /* 0: one model.safetensors */
	int threads;		 /* 0: one per core */
	int use_uring;
	int odirect;  /* read sources with O_DIRECT (ck_engine_open_direct) */
	int progress; /* draw a progress bar on stderr */
	const char *config; /* config.json's bytes to write verbatim, or NULL */
	size_t config_len;
	const char *file_name;	/* one file of this name, no index (group-sharded
				 * converts: the index is written by rank 0) */
	struct ck_gpu *gpu;	/* CUDA backend with a lane per thread, or NULL */
	uint64_t gpu_min;	/* reads from this size go to the GPU */
	/* the directory messages name a file in (the OUTDIR that the staging
	 * directory written to stands for), or NULL: the one written to */
	const char *shown_dir;
	/* non-zero: stop at the next chunk and fail ("interrupted"), leaving
	 * no temp file (the CLI's signal watcher sets it); or NULL */
	const atomic_int *cancel;
	/* test hooks (0: the defaults): the engine's window, output bytes per
	 * engine call and per block of a large transpose */
	uint64_t window_max, chunk, block;
};

struct ck_convert_stats {
	uint64_t bytes_written, source_bytes_read;
	int n_files;
	long odirect_buffered; /* odirect: source files read buffered all the same */
};

/* Write dir/name through a temp file, fsync, rename, fsync the directory. */
int ck_write_file_atomic(const char *dir, const char *name, const void *data, size_t len,
			 struct ck_err *err);

/* The files of an output directory, each laid out over plan's targets as
 * a vfile (target spans anywhere, literal bytes between them). */
struct ck_out_file {
	const char *name;
	const struct ck_vfile *v;
};

/* Write the files into outdir: each under a temp name, target spans
 * evaluated by o's threads (targets no file holds are not evaluated), every
 * file synced, then all renamed into place in order and the directory
 * synced. On failure no temp file is left. */
int ck_convert_files(const struct ck_plan *plan, const struct ck_out_file *files, size_t n,
		     const char *outdir, const struct ck_convert_opts *o,
		     struct ck_convert_stats *stats, struct ck_err *err);

/* The plan as a Hugging Face checkpoint (ck_flat_set: model.safetensors, or
 * shards and their index with max_shard_size; o->file_name: one file of that
 * name) plus o->config as config.json. */
int ck_convert(const struct ck_plan *plan, const char *outdir, const struct ck_convert_opts *o,
	       struct ck_convert_stats *stats, struct ck_err *err);
/* One file (model.gguf, a DCP data file) through ck_convert_files. */
int ck_convert_vfile(const struct ck_plan *plan, const struct ck_vfile *vf, const char *outdir,
		     const char *name, const struct ck_convert_opts *o,
		     struct ck_convert_stats *stats, struct ck_err *err);

#endif
