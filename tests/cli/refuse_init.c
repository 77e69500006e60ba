/* LD_PRELOAD shim for tests/cli/mount_sanity.py: the daemon's first reply
 * on /dev/fuse, its answer to the kernel's INIT, goes out as an EPROTO error
 * instead, as libfuse sends when its own checks of the filesystem's init
 * answer fail (it runs them after the init operation has returned). The
 * kernel then fails every request of the mount. With REFUSE_INIT_DROP set
 * in the environment the answer is not sent at all: the kernel holds every
 * request of the mount.
 *
 * REFUSE_INIT_STAT (with REFUSE_INIT_DROP) plays the two things the daemon's
 * readiness check (src/fs/ready.c) may meet when the daemon is stopped with
 * its INIT unanswered, whichever this machine's kernel does:
 *   "refused": a stat of the mount point that fails with ENOTCONN fails
 *              with ECONNREFUSED instead, as kernels that mark an aborted
 *              INIT as refused answer it;
 *   "late":    a stat of a mount point waits until it is unmounted, then
 *              stats the directory beneath (the check's thread ran late). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* RTLD_NEXT */
#endif
#include <dlfcn.h>
#include <errno.h>
#include <linux/fuse.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <time.h>

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

/* whether path is a mount point now (field 5 of /proc/self/mountinfo; the
 * tests' paths need no unescaping) */
static int is_mounted(const char *path)
{
	FILE *f = fopen("/proc/self/mountinfo", "r");
	if (!f)
		return 0;
	char line[4096];
	int found = 0;
	size_t n = strlen(path);
	while (!found && fgets(line, sizeof line, f)) {
		char *p = line;
		for (int field = 0; field < 4 && p; field++)
			if ((p = strchr(p, ' ')))
				p++;
		found = p && strncmp(p, path, n) == 0 && p[n] == ' ';
	}
	fclose(f);
	return found;
}

/* glibc 2.33 and later export stat itself */
int stat(const char *path, struct stat *st)
{
	int (*real)(const char *, struct stat *) = dlsym(RTLD_NEXT, "stat");
	if (!real) {
		errno = ENOSYS;
		return -1;
	}
	const char *how = getenv("REFUSE_INIT_STAT");
	if (!how || !getenv("REFUSE_INIT_DROP") || !is_mounted(path))
		return real(path, st);
	if (strcmp(how, "late") == 0) {
		for (int k = 0; k < 6000 && is_mounted(path); k++) /* a minute at most */
			nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
		return real(path, st);
	}
	int r = real(path, st);
	if (r < 0 && errno == ENOTCONN && strcmp(how, "refused") == 0)
		errno = ECONNREFUSED;
	return r;
}
