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

#include "../view/open.h"
#include "../view/serve.h"

struct ck_fs_opts {
	struct ck_serve_opts serve; /* the cache, the device, the files served */
	int foreground;
	int fuse_threads; /* most FUSE worker threads */
	int direct_io;	  /* no kernel page cache for data files (readers that never mmap) */
	const char *log_path;
	int log_fd;   /* with log_path: the log, opened by ck_log_open before the fork */
	int nonempty; /* the mount point may hold files */
	unsigned max_read; /* -o max_read: largest READ request (0: FUSE's 1 MiB) */
};

/* Mount the prepared view s (ck_served_prepare; started here, after the
 * fork) and serve until unmounted or signalled. ready_fd (or -1) gets "OK\n"
 * once FUSE_INIT has arrived and every start-up step succeeded, or an error
 * line. fuse_argv are options for libfuse ("-o", "allow_other", ...).
 * Returns 0 after a clean unmount. */
int ck_fs_run(struct ck_served *s, const char *source, const char *mountpoint,
	      const struct ck_fs_opts *o, int fuse_argc, char **fuse_argv, int ready_fd,
	      struct ck_err *err);

#endif
