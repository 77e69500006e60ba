#include "bufpool.h"

#include <stdlib.h>
#include <sys/mman.h>

#define HUGE (2u << 20)

void ck_bufpool_init(struct ck_bufpool *bp, size_t size, size_t keep)
{
	pthread_mutex_init(&bp->mu, NULL);
	bp->free = calloc(keep ? keep : 1, sizeof *bp->free);
	bp->n_free = 0;
	bp->keep = bp->free ? keep : 0;
	bp->size = (size + HUGE - 1) / HUGE * HUGE;
}

void ck_bufpool_destroy(struct ck_bufpool *bp)
{
	for (size_t i = 0; i < bp->n_free; i++)
		free(bp->free[i]);
	free(bp->free);
	pthread_mutex_destroy(&bp->mu);
}

void *ck_bufpool_get(struct ck_bufpool *bp, size_t len)
{
	if (len > bp->size)
		return malloc(len);
	pthread_mutex_lock(&bp->mu);
	void *p = bp->n_free ? bp->free[--bp->n_free] : NULL;
	pthread_mutex_unlock(&bp->mu);
	if (p || posix_memalign(&p, HUGE, bp->size) != 0)
		return p;
	madvise(p, bp->size, MADV_HUGEPAGE);
#ifdef MADV_POPULATE_WRITE
	madvise(p, bp->size, MADV_POPULATE_WRITE);
#endif
	return p;
}

void ck_bufpool_put(struct ck_bufpool *bp, void *p, size_t len)
{
	if (!p)
		return;
	if (len <= bp->size) {
		pthread_mutex_lock(&bp->mu);
		if (bp->n_free < bp->keep) {
			bp->free[bp->n_free++] = p;
			p = NULL;
		}
		pthread_mutex_unlock(&bp->mu);
	}
	free(p);
}
