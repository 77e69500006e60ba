#include "fileio.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <errno.h>
#include <sys/uio.h>
#include <unistd.h>

int ck_pread_full(int fd, void *buf, uint64_t len, uint64_t off)
{
	struct iovec v = {buf, (size_t)len};
	return ck_preadv_full(fd, &v, 1, off);
}

int ck_preadv_full(int fd, struct iovec *iov, int n, uint64_t off)
{
	for (;;) {
		while (n > 0 && iov->iov_len == 0) /* nothing to read into */
			iov++, n--;
		if (n == 0)
			return 0;
		ssize_t got = preadv(fd, iov, n, (off_t)off);
		if (got < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (got < 0)
			return -errno;
		if (got == 0)
			return -EIO;
		off += (uint64_t)got;
		/* past the buffers it filled, into the one it stopped in */
		for (; n > 0 && (size_t)got >= iov->iov_len; iov++, n--)
			got -= (ssize_t)iov->iov_len;
		if (n > 0) {
			iov->iov_base = (char *)iov->iov_base + got;
			iov->iov_len -= (size_t)got;
		}
	}
}

char *ck_path_join(const char *dir, const char *name)
{
	size_t n = strlen(dir) + strlen(name) + 2;
	char *p = malloc(n);
	if (p)
		snprintf(p, n, "%s/%s", dir, name);
	return p;
}
