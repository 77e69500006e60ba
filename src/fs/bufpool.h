/* Reply buffers for direct reads, reused: a fresh 1 MiB buffer per FUSE
 * read costs 256 page faults (expensive on VMs) before the first byte is
 * copied, which made reading a file through the daemon slower than through
 * the cache. Buffers are 2 MiB-aligned on transparent huge pages, faulted in
 * once, and kept on a free list (at most `keep` of them). */
#ifndef CK_BUFPOOL_H
#define CK_BUFPOOL_H

#include <pthread.h>
#include <stddef.h>

struct ck_bufpool {
	pthread_mutex_t mu;
	void **free;
	size_t n_free, keep, size;
};

void ck_bufpool_init(struct ck_bufpool *bp, size_t size, size_t keep);
void ck_bufpool_destroy(struct ck_bufpool *bp);
/* A buffer of at least len bytes (len > size: a one-off allocation). */
void *ck_bufpool_get(struct ck_bufpool *bp, size_t len);
void ck_bufpool_put(struct ck_bufpool *bp, void *p, size_t len);

#endif
