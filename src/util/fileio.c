#include "fileio.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <errno.h>
#include <sys/uio.h>
#include <unistd.h>

#define MAX_CHUNK (1u << 30) /* one pread at most; Linux caps reads near 2 GiB */

int ck_pread_full(int fd, void *buf, uint64_t len, uint64_t off)
{
	uint64_t got = 0;
	while (got < len) {
		size_t want = len - got > MAX_CHUNK ? MAX_CHUNK : (size_t)(len - got);
		ssize_t n = pread(fd, (char *)buf + got, want, (off_t)(off + got));
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -EIO;
		got += (uint64_t)n;
	}
	return 0;
}

int ck_preadv_full(int fd, struct iovec *iov, int n, uint64_t off)
{
	while (n > 0) {
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
	return 0;
}

char *ck_path_join(const char *dir, const char *name)
{
	size_t n = strlen(dir) + strlen(name) + 2;
	char *p = malloc(n);
	if (p)
		snprintf(p, n, "%s/%s", dir, name);
	return p;
}
