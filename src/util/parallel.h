/* A fork-join loop for start-up work that splits into independent pieces
 * (parsing one large header in parts, sorting 100,000 names): a checkpoint
 * is planned on the same cores that will serve it, and before any other
 * thread of the process is busy. */
#ifndef CK_PARALLEL_H
#define CK_PARALLEL_H

#include <stddef.h>

/* The CPUs this process may run on (its affinity mask), at least 1. */
int ck_cpu_count(void);

/* task(ctx, i) for every i in [0, n), on up to `threads` threads counting
 * the caller, which takes part; returns when all are done. Tasks take the
 * next index as they finish, so uneven ones balance. Where a thread cannot
 * be started the others do its share: this never fails. */
void ck_parallel_for(size_t n, int threads, void (*task)(void *ctx, size_t i), void *ctx);

/* n items cut into `per` pieces for each of `threads` threads (at most n
 * pieces): how many, and where piece t of np starts (piece t ends where
 * t + 1 starts). */
static inline size_t ck_pieces(size_t n, int threads, size_t per)
{
	size_t np = (size_t)threads * per;
	return np < n ? np : n;
}

static inline size_t ck_piece_start(size_t n, size_t np, size_t t)
{
	return n * t / np;
}

#endif
