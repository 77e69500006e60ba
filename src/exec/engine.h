/* The evaluation engine: any byte range of any target is pushed back through
 * its layout to the source elements it needs, which are read (io_uring
 * batches, coalescing only gaps under a page) into a bounded window and
 * converted by the kernels. Memory per evaluation is bounded by
 * CK_WINDOW_MAX plus the output; a huge target streams in pieces. */
#ifndef CK_ENGINE_H
#define CK_ENGINE_H

#include <stdatomic.h>
#include <stdint.h>

#include "../kern/device.h"
#include "../kern/gpu.h"
#include "../plan/plan.h"
#include "io.h"

#define CK_WINDOW_MAX (32u << 20) /* source bytes staged per read step */
#define CK_COALESCE_GAP 4096	  /* merge source runs closer than a page */
/* With O_DIRECT every request goes to the device, whose per-request cost is
 * about that of moving 64 KiB: runs closer than that are read through. */
#define CK_COALESCE_GAP_DIRECT (64u << 10)

struct ck_engine {
	const struct ck_plan *plan;
	int use_uring;
	uint64_t window_max; /* CK_WINDOW_MAX unless a test lowers it */
	int dry_run;	     /* plan and count the reads, do not read or convert */
	atomic_uint_fast64_t source_bytes_read; /* bytes requested from source files */
	atomic_uint_fast64_t read_requests;
	/* The CUDA backend (NULL: CPU only). A read goes to the GPU when its
	 * evaluator holds a lane, it is at least gpu_min bytes and some piece has
	 * work worth a PCIe round trip: a cast, a block scale or a transpose.
	 * Copy-only work (renames, slices, concatenation) stays on the CPU. */
	struct ck_gpu *gpu;
	uint64_t gpu_min;
	atomic_uint_fast64_t gpu_reads, gpu_bytes;
	/* O_DIRECT descriptors per catalog file (-1: that file is read
	 * buffered); NULL unless ck_engine_open_direct ran */
	int *dfd;
};


/* A staging buffer that remembers which file bytes it holds when it was
 * read whole ([off, off + len) of catalog file `file`): a later step whose
 * bytes overlap it by half or more (the two halves of an interleave, GPT-OSS
 * gate/up rows; [q; k; v] of one tensor) reads only what is missing. The
 * mount refuses reads of targets whose source files changed, so bytes kept
 * across reads stay the files' bytes. `spare`: where the next window is
 * assembled before the two swap. */
struct ck_window {
	unsigned char *buf, *spare;
	size_t cap, spare_cap;
	int valid; /* buf holds bytes [off, off + len) of file as stored */
	const void *cat;
	uint32_t file;
	uint64_t off, len;
	/* or, not valid: buf holds the F32 values of elements [e0, e1) of this
	 * GGUF-quantized catalog entry, decoded for a box (read_box_window) */
	const void *decoded;
	int64_t e0, e1;
};

/* A run of source bytes [off, off + len) of the file of catalog entry src,
 * and where it goes. */
struct ck_run {
	const struct ck_catalog_entry *src;
	uint64_t off, len;
	unsigned char *dst;
};

/* Per-thread scratch: the I/O ring and the staging window. */
struct ck_eval_ctx {
	struct ck_engine *eng;
	struct ck_io io;
	struct ck_window win; /* source bytes of the current step */
	struct ck_window scw; /* its block scales */
	unsigned char *qwin; /* quantized GGUF blocks before decoding */
	size_t qwin_cap;
	unsigned char *fwin; /* GGUF view: the values (F32, BF16 or F16) before quantizing */
	size_t fwin_cap;
	/* GGUF view of a BF16 or F16 source: the last quantized target read, as
	 * the 2-byte value its F32 cast widens (qstage_ok 1), or not that kind
	 * (qstage_ok -1); 0: none yet. Its pieces are owned here. */
	struct ck_target qstage;
	uint32_t qstage_ti;
	int qstage_ok;
	struct ck_io_req *reqs;
	size_t reqs_cap;
	struct ck_run *runs; /* a box's runs read straight into the output (read_box_scatter) */
	size_t runs_cap;
	unsigned char *sink;	  /* CK_COALESCE_GAP bytes: the gaps those reads pass through */
	struct ck_gpu_lane *lane; /* this evaluator's GPU lane, if any */
	int on_gpu;		  /* the read being evaluated runs on the lane */
	int uring_fell_back; /* io_uring was asked for but is unavailable */
};

void ck_engine_init(struct ck_engine *e, const struct ck_plan *plan, int use_uring);
/* Read the sources with O_DIRECT from now on: every catalog file is opened
 * again (through /proc/self/fd, so the very file the catalog checked) with
 * O_DIRECT and probed with one aligned read. A file whose file system
 * refuses that (tmpfs, alignments above CK_DIO_ALIGN) stays buffered.
 * Returns how many stayed buffered (*first: the first of them) or -1 with
 * err. Before evaluators start; ck_engine_fini closes them. */
long ck_engine_open_direct(struct ck_engine *e, uint32_t *first, struct ck_err *err);
void ck_engine_fini(struct ck_engine *e);
void ck_eval_ctx_init(struct ck_eval_ctx *c, struct ck_engine *e);
void ck_eval_ctx_free(struct ck_eval_ctx *c);

/* The GPU policy: whether t has work worth a PCIe round trip (a piece
 * casts, scales or transposes); copies, slices and concatenation do not. */
int ck_engine_gpu_worth(const struct ck_target *t);

/* Bytes of t worth evaluating in one ck_engine_read, 0 for no preference.
 * A piece that transposes a source tensor larger than the window re-reads
 * the source for every read (each needs a few columns of every row, and the
 * window cannot hold them all): several cache chunks read at once divide
 * that by their number. */
uint64_t ck_engine_read_span(const struct ck_engine *e, uint32_t t);
/* Such a target read whole in blocks along this dim, every other dim whole
 * (ck_engine_read_box), reads each source byte once: the dim whose step
 * is the source's largest (its rows). -1 when linear reads do as well
 * (no such piece, or that dim is the first). */
int ck_engine_block_dim(const struct ck_engine *e, uint32_t t);
/* Blocks of target t along dim, every other dim whole, k steps of dim each
 * (the last fewer): rows is the product of the dims before dim, inner the
 * elements of one step (of the dims after), n dim's extent. A block, box
 * [lo, hi) dense in C order, is rows segments of (k1 - k0) * inner
 * elements; segment r is at flat element (r * n + k0) * inner. */
struct ck_blocks {
	int dim;
	uint64_t rows, n, inner, k;
	uint64_t k0, k1; /* the block's steps */
	int64_t lo[CK_MAX_DIMS], hi[CK_MAX_DIMS];
};
void ck_blocks_init(struct ck_blocks *b, const struct ck_target *t, int dim);
/* The next block (k set by the caller): 1, or 0 when there is none. */
int ck_blocks_next(struct ck_blocks *b);
/* The box [lo, hi) of target t (not quantized, not a scalar), dense in C
 * order, into dst, on the CPU. Returns 0, or -1 with err. */
int ck_engine_read_box(struct ck_eval_ctx *c, uint32_t t, const int64_t *lo, const int64_t *hi,
		       void *dst, struct ck_err *err);

/* Fill dst with bytes [off, off+len) of target t (C order, little endian).
 * Returns 0, or -1 with err (a source read failure is CK_E_SYS with errno). */
int ck_engine_read(struct ck_eval_ctx *c, uint32_t t, uint64_t off, uint64_t len, void *dst,
		   struct ck_err *err);

#endif
