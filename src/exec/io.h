/* Reading source byte ranges. One ck_io per thread: an io_uring ring when the
 * kernel allows it, else pread. A batch is submitted at once (split at the
 * ring's depth); short reads are continued, -EAGAIN/-EINTR resubmitted, and no
 * buffer is released before its read has completed. */
#ifndef CK_IO_H
#define CK_IO_H

#include <liburing.h>
#include <stddef.h>
#include <stdint.h>

#include "../util/error.h"

struct ck_io_req {
	int fd;
	uint64_t off, len;
	void *buf;
};

struct ck_io {
	int uring_ok;
	unsigned depth;
	struct io_uring ring;
};

/* use_uring: 1 try io_uring (falling back to pread if setup fails), 0 pread.
 * *fell_back is set when io_uring was asked for but is unavailable. */
void ck_io_init(struct ck_io *io, int use_uring, unsigned depth, int *fell_back);
void ck_io_close(struct ck_io *io);
/* Read every request completely. A read past the end of file is EIO (the
 * source changed size). Returns 0 or a negative errno. */
int ck_io_read(struct ck_io *io, const struct ck_io_req *reqs, size_t n);

#endif
