/* A source holds one descriptor per file open for as long as it is mounted
 * or converted, and sharded or DCP checkpoints can have thousands of files,
 * while the usual soft limit is 1024 (select()'s). ckptfs does not use
 * select(), so the soft limit is raised to the hard one once, at the top of
 * main: what systemd advises programs that need more descriptors. */
#include "cli.h"

#include <sys/resource.h>

void ck_raise_fd_limit(void)
{
	struct rlimit r;
	if (getrlimit(RLIMIT_NOFILE, &r) < 0)
		return;
	/* "unlimited" is above what the kernel allows (fs.nr_open, 2^20 unless
	 * raised): ask for that much */
	rlim_t want = r.rlim_max == RLIM_INFINITY ? (rlim_t)1 << 20 : r.rlim_max;
	if (r.rlim_cur < want) {
		r.rlim_cur = want;
		setrlimit(RLIMIT_NOFILE, &r); /* refused: the limit stays as it was */
	}
}
