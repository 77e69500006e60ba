/* Serving a view: the trees of files it shows, the evaluation cache behind
 * them and the device that evaluates. One implementation for every reader:
 * the FUSE daemon answers kernel requests from it (asynchronously, straight
 * from cache memory), libckptfs answers a caller's reads into its buffer
 * (ck_served_read). Their shared options are parsed here, so `mount -o` and
 * the library take the same names, values and limits. */
#ifndef CK_SERVE_H
#define CK_SERVE_H

#include <stddef.h>
#include <stdint.h>

#include "../exec/cache.h"
#include "../kern/device.h"
#include "gguf_view.h"
#include "open.h"
#include "tree.h"

struct ck_serve_opts {
	struct ck_cache_opts cache;
	struct ck_device device;
	uint64_t max_shard_size; /* >0: also model-0000k-of-0000n.safetensors + index */
	uint64_t part_size;	 /* per-rank views: model-rank-R-part-P.safetensors */
	int zip_crc;		 /* fill in pytorch_model.bin's CRC-32s at start */
	int npy_f32;		 /* npy/ widens BF16 and FP8 to F32 */
	int gguf_bf16;		 /* quantized GGUF tensors as BF16 (default F32) */
	struct ck_gguf_opts gguf; /* -o gguf[=TYPE]: also model.gguf */
	int dcp;		  /* -o dcp: also dcp/ (1); -o torch_dist: torch_dist/ (2) */
	/* without either: dcp/ anyway, laid out on its first use (the mount's
	 * default; not for --ranks or --shard-groups) */
	int dcp_lazy;
};

/* Defaults: io_uring, one evaluator per core, 5 GiB parts, the CPU. */
void ck_serve_opts_init(struct ck_serve_opts *o);
/* The serving options as one table: ck_serve_option parses them, `ckptfs
 * mount --help` and the README list them, libckptfs takes them as open
 * options (a test checks that README and ckptfs.h name each). */
struct ck_serve_optdef {
	int id;		  /* > 0; 0 ends a table */
	const char *name; /* "cache_size" */
	const char *arg;  /* "SIZE"; "[TYPE]": optional; NULL: a flag */
	const char *help; /* one sentence, wrapped when printed */
};
extern const struct ck_serve_optdef ck_serve_optdefs[];
/* The entry of table t named by opt's first klen bytes, or NULL. */
const struct ck_serve_optdef *ck_serve_optdef_find(const struct ck_serve_optdef *t, const char *opt,
						   size_t klen);
/* One option of ck_serve_optdefs, "key" or "key=value". Returns 1 (taken),
 * 0 (not one of these: err untouched) or -1 (bad value; err says "bad
 * option HOW OPT (what it takes)", how: "-o " for mount). */
int ck_serve_option(struct ck_serve_opts *o, const char *how, const char *opt, struct ck_err *err);
/* Fill in what depends on the rest: the cache size (a quarter of the
 * cgroup's or the machine's memory, at least 64 MiB) and group_max
 * (cache/8, at most 256 MiB); refuse a cache smaller than 4 chunks. */
int ck_serve_opts_finish(struct ck_serve_opts *o, struct ck_err *err);
/* -o gguf_dequant=BF16: every plan of the view, alike. Call before
 * ck_served_open. */
int ck_serve_cast_view(const struct ck_serve_opts *o, struct ck_view *v, struct ck_err *err);

struct ck_served {
	const struct ck_plan *plan; /* the cache's: the view's, the union of its ranks', or
				     * of the view and its GGUF view */
	struct ck_tree *trees;	    /* one, or one per rank of --ranks ("rank3") */
	size_t n_trees;
	struct ck_cache *cache;
	struct ck_gpu *gpu;
	/* -o gguf: model.gguf's plan and file, and the union plan the cache reads */
	struct ck_gguf_view *gguf;
	struct ck_plan *with_gguf;
	uint32_t **gguf_idx; /* [0]: the view's targets in with_gguf, [1]: the GGUF view's */
	/* -o npy_f32: each tree's F32 copies (ck_plan_widen), the union the
	 * cache reads with them, each tree's numbering in it and its copies' */
	struct ck_plan **wide, *with_npy;
	uint32_t **npy_idx, **npy_wide;
	/* -o dcp (torch_dist) with --ranks: one directory for all the ranks,
	 * beside their rankR/ (each rank's data file, one .metadata) */
	struct ck_dcp_out *dcp;
	const char *top_dir; /* "dcp" or "torch_dist"; NULL: none */
	struct ck_tree_file *top_files;
	size_t n_top_files;
};

/* Everything that can fail on the input, with no thread started (so a
 * mount does it before its daemon forks): refuse what a per-rank view cannot
 * show (model.gguf; dcp/ for --shard-groups), build the GGUF view and the
 * union plan beside v's, and lay out the files of every tree (and, for
 * --ranks, the one dcp/ of them all). v must outlive s. */
int ck_served_prepare(struct ck_served *s, const struct ck_view *v, int per_rank,
		      const char *source, const struct ck_serve_opts *o, struct ck_err *err);
/* Open the device and start the cache's evaluators (after any fork), then
 * fill in the zip CRCs if asked. log (may be NULL) gets notes: tensors
 * pytorch_model.bin leaves out, the device chosen by auto. */
int ck_served_start(struct ck_served *s, const struct ck_serve_opts *o,
		    void (*log)(void *, const char *), void *log_ctx, struct ck_err *err);
/* Stop the evaluators (pending reads complete first) and the device; the
 * trees stay readable as metadata. */
void ck_served_stop(struct ck_served *s);
void ck_served_close(struct ck_served *s);

/* Spans of evaluated targets from this size are evaluated straight into
 * the caller's buffer on its thread (no cache entry, no copy): a reader of
 * large ranges consumes them once, and fresh cache memory costs page
 * faults. Smaller spans do too when their target is streamable (a window
 * reads its own source bytes: ck_cache_streamable); the rest go through the
 * cache (shared, reused). */
#define CK_STREAM_MIN (1u << 20)

/* Bytes of a read into buf: literal spans are copied, direct spans read
 * from their source file, large and streamable spans evaluated into buf, the rest through
 * the cache, at most batch bytes (> 0) of it in flight at once; the caller
 * waits. spans in ck_vfile_spans' format, dst relative to buf. large: the
 * read continues a large one (a sequential reader's last piece of a file):
 * read it as one (no prefetch; in-order spans evaluated into buf), however
 * small. Returns 0 or -1 with err (CK_E_SYS: a failed source read, errno
 * kept). Thread-safe. */
int ck_served_read(struct ck_served *s, const struct ck_span *spans, size_t n, unsigned char *buf,
		   uint64_t batch, int large, struct ck_err *err);

#endif
