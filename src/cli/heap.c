/* Process-wide allocator settings, made once at the top of main.
 *
 * Planning a checkpoint touches about 1 KB of small records per key (catalog
 * entries, layout pieces, names): ~100 MB for a 100,000-key MoE. Each first
 * touch of a 4 KiB page is a fault, and on the VMs this runs on a fault
 * costs ~8 us, more than the planning work itself. So the main heap gets its
 * head-room up front, as one region advised onto transparent huge pages (one
 * fault per 2 MiB), and glibc is told to keep it: no trimming (a trimmed and
 * regrown heap loses the advice) and no separate mappings for the mid-sized
 * arrays that grow with the key count. Untouched head-room is address space
 * only; resident memory grows with use, as before. */
#include "cli.h"

#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#define HEAP_HEADROOM (256u << 20)
#define HUGE_PAGE (2u << 20)

void ck_heap_tune(void)
{
	if (!mallopt(M_MMAP_THRESHOLD, 32 << 20) || !mallopt(M_TRIM_THRESHOLD, HEAP_HEADROOM) ||
	    !mallopt(M_TOP_PAD, HEAP_HEADROOM))
		return;
	/* a block larger than the initial heap's top makes glibc extend the
	 * heap with sbrk, by the block plus the head-room */
	uintptr_t before = (uintptr_t)sbrk(0);
	void *grow = malloc(1 << 20);
	uintptr_t after = (uintptr_t)sbrk(0);
	free(grow);
	mallopt(M_TOP_PAD, 1 << 20); /* later growth: the usual small steps */
	/* only if the heap really is the sbrk region (a sanitizer's allocator
	 * is not: the break does not move, and nothing is advised) */
	uintptr_t lo = (before + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1);
	if (grow && after >= before + HEAP_HEADROOM && after > lo)
		madvise((void *)lo, after - lo, MADV_HUGEPAGE); /* advice: failure is harmless */
}
