/* LD_PRELOAD shim for tests/cli/mount_sanity.py: the daemon's first reply
 * on /dev/fuse, its answer to the kernel's INIT, goes out as an EPROTO error
 * instead, as libfuse sends when its own checks of the filesystem's init
 * answer fail (it runs them after the init operation has returned). The
 * kernel then fails every request of the mount. With REFUSE_INIT_DROP set
 * in the environment the answer is not sent at all: the kernel holds every
 * request of the mount. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* RTLD_NEXT */
#endif
#include <dlfcn.h>
#include <errno.h>
#include <linux/fuse.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>

static int is_fuse_device(int fd)
{
	struct stat st;
	/* /dev/fuse: character device 10, 229 (Documentation/admin-guide/devices.txt) */
	return fstat(fd, &st) == 0 && S_ISCHR(st.st_mode) && major(st.st_rdev) == 10 &&
	       minor(st.st_rdev) == 229;
}

ssize_t writev(int fd, const struct iovec *iov, int n)
{
	static atomic_int refused;
	ssize_t (*real)(int, const struct iovec *, int) = dlsym(RTLD_NEXT, "writev");
	if (!real) {
		errno = ENOSYS;
		return -1;
	}
	if (n < 1 || iov[0].iov_len != sizeof(struct fuse_out_header) || atomic_load(&refused) ||
	    !is_fuse_device(fd) || atomic_exchange(&refused, 1))
		return real(fd, iov, n);
	if (!getenv("REFUSE_INIT_DROP")) {
		struct fuse_out_header h = *(const struct fuse_out_header *)iov[0].iov_base;
		h.len = sizeof h;
		h.error = -EPROTO;
		struct iovec one = {&h, sizeof h};
		ssize_t r = real(fd, &one, 1);
		if (r < 0)
			return r;
	}
	size_t all = 0; /* what the caller asked to write: it was "written" */
	for (int i = 0; i < n; i++)
		all += iov[i].iov_len;
	return (ssize_t)all;
}
