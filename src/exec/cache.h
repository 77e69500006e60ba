/* The evaluation cache behind the mount. Target bytes are cached in chunks
 * (target, chunk index) under a byte budget with LRU eviction. A read never
 * blocks its caller on an evaluation: it takes what is cached, registers as a
 * waiter on the chunks that are not, and its callback runs when the last one
 * arrives (on an evaluator thread). A miss in a dependency group whose output
 * fits `group_max` evaluates the whole group once (siblings included);
 * bigger groups are evaluated chunk by chunk. Concurrent readers of a chunk
 * being evaluated wait for that one evaluation: no duplicate I/O.
 *
 * Memory bound: cache_size, plus the chunks being evaluated (at most
 * `threads` jobs of at most max(group_max, chunk) bytes each) and each
 * evaluator's staging window (CK_WINDOW_MAX) and buffer for a large
 * transpose's chunks (max(CK_WINDOW_MAX, cache_size / 4 / threads)), plus
 * in-flight read buffers. */
#ifndef CK_CACHE_H
#define CK_CACHE_H

#include <stdint.h>

#include "../plan/flat.h"
#include "../plan/plan.h"
#include "engine.h"

struct ck_cache_opts {
	uint64_t cache_size;
	uint64_t chunk;	    /* bytes of a target per cache entry */
	uint64_t group_max; /* groups with at most this many output bytes evaluate whole */
	int threads;	    /* evaluator threads */
	int use_uring;
	unsigned delay_ms; /* test hook: sleep before each evaluation */
	uint64_t window_max; /* test hook: the engine's window (0: CK_WINDOW_MAX) */
	unsigned pace_wait_ms; /* how long a paced job waits for its reader to progress; 0: 50 ms */
	int no_direct;	   /* evaluate every target, renames too (see ck_cache_direct) */
	int odirect;	   /* read sources with O_DIRECT (ck_engine_open_direct), renames
			      included (see ck_cache_direct) */
	int no_prefetch;   /* do not evaluate the next group ahead of a reader */
	int no_stream;	   /* no target is streamable (see ck_cache_streamable) */
	int drop_served;   /* readers keep what they were given (a kernel page cache):
			      chunks served whole go first (see note_served) */
	struct ck_gpu *gpu; /* CUDA backend, a lane per evaluator (NULL: CPU) */
	uint64_t gpu_min;   /* reads from this size go to the GPU */
	void (*log)(void *ctx, const char *msg);
	void *log_ctx;
};

struct ck_cache_stats {
	uint64_t source_bytes_read, read_requests, groups_evaluated, regions_evaluated;
	uint64_t cache_hits, cache_misses, cache_bytes, cache_evictions, read_errors;
	uint64_t evaluations_in_flight;
	uint64_t direct_reads; /* reads answered from the source file itself */
	uint64_t prefetches;   /* groups, and chunks of region-evaluated tensors, evaluated ahead of a sequential reader */
	uint64_t gpu_reads, gpu_bytes; /* evaluations run on the GPU, and their bytes */
	uint64_t streamed_reads;       /* ck_cache_eval_into: evaluated into the caller's memory */
	uint64_t cache_dropped;	       /* chunks served whole, dropped before the budget forced it */
	uint64_t cache_recycled;       /* chunk memory reused from evicted chunks, not faulted anew */
	uint64_t cache_peak_bytes;     /* the most chunk memory held at once (pooled memory aside) */
	uint64_t odirect_files;	       /* source files read with O_DIRECT */
};

/* A piece of a read's result, in cache memory that stays valid (referenced)
 * until the callback returns: replies can be written straight from it. */
struct ck_seg {
	const unsigned char *p;
	uint64_t len, dst; /* dst: offset in the read's result */
};

/* err is 0 or a negative errno (then n is 0). Called exactly once per
 * ck_cache_read, possibly before it returns, possibly on an evaluator. */
typedef void (*ck_done_cb)(void *arg, int err, const struct ck_seg *segs, size_t n);

struct ck_cache;

int ck_cache_new(const struct ck_plan *plan, const struct ck_cache_opts *o, struct ck_cache **out,
		 struct ck_err *err);
/* Stops the evaluators (pending reads complete first) and frees. */
void ck_cache_free(struct ck_cache *c);
/* Read the target spans (ck_vfile_spans' format; literal spans are skipped);
 * cb gets the bytes as segments in span order. ahead: the read may start
 * evaluating what a sequential reader asks for next (the next group, the
 * next chunks; not with no_prefetch); a reader that evaluates its large
 * reads itself (libckptfs) would never take those. Returns 0 (cb will be or
 * was called) or -ENOMEM (cb is not called). */
int ck_cache_read(struct ck_cache *c, const struct ck_span *spans, size_t n, int ahead,
		  ck_done_cb cb, void *arg);
/* Targets that are one contiguous, cast-free range of a source file (renames,
 * the identity view) are never evaluated: a read of [off, off+len) is
 * answered from the file at *pos of *fd (after the same source-change check
 * as evaluations; counted in the stats). With odirect, a caller that can
 * read O_DIRECT (ck_io_pread_direct) passes `odirect` and gets the file's
 * O_DIRECT descriptor where it has one (*odirect 1); a NULL `odirect` always
 * gets the buffered one. Returns 1, 0 when t is not such a
 * target (or no_direct), or -EIO when its source changed. */
int ck_cache_direct(struct ck_cache *c, uint32_t t, uint64_t off, uint64_t len, int *fd,
		    uint64_t *pos, int *odirect);
int ck_cache_is_direct(const struct ck_cache *c, uint32_t t);
/* 1 when a read of target t is best evaluated on its own into the reader's
 * buffer (ck_cache_eval_into) rather than through cache chunks: its window
 * reads about its own bytes of source (ck_plan_streamable), and the CPU
 * evaluates (-o no_stream and the CUDA backend turn it off). large: the
 * span is part of a large read (1 MiB or more), whose neighbouring spans
 * are evaluated that way anyway; then a target that is only in order
 * (padded, quantized: ck_plan_in_order) is too, rather than its whole
 * group going through the cache for a few bytes at the read's edge. */
int ck_cache_streamable(const struct ck_cache *c, uint32_t t, int large);
/* 1 when t is a large transpose (ck_engine_read_span): a read of its own
 * evaluates every row of a source too big for one window, so the cache
 * evaluates its chunks in batches, one read of the source for many. A
 * reader taking it in pieces, however large, is best served from there. */
int ck_cache_batched(const struct ck_cache *c, uint32_t t);
/* How many bytes of [off, off+len) of t, from off, lie in chunks that are
 * cached or being evaluated (prefetched ahead of a reader), one after the
 * other: a reader takes those from the cache, or they would be evaluated
 * twice. */
uint64_t ck_cache_held(struct ck_cache *c, uint32_t t, uint64_t off, uint64_t len);
/* Evaluate [off, off+len) of t straight into dst on the caller's thread
 * (a context from the cache's spares), after the same source-change check:
 * no cache entry and no copy, for a reader that consumes large ranges once
 * (libckptfs). Returns 0, or -1 with err. */
int ck_cache_eval_into(struct ck_cache *c, uint32_t t, uint64_t off, uint64_t len, void *dst,
		       struct ck_err *err);
void ck_cache_get_stats(struct ck_cache *c, struct ck_cache_stats *s);
/* Whether io_uring could not be set up and pread is used. */
int ck_cache_uring_fell_back(struct ck_cache *c);

#endif
