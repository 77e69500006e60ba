/* Reading source byte ranges. One ck_io per thread: an io_uring ring when the
 * kernel allows it, else pread. A batch is submitted at once (split at the
 * ring's depth); short reads are continued, -EAGAIN/-EINTR resubmitted, and no
 * buffer is released before its read has completed.
 *
 * A request with `align` set reads an O_DIRECT descriptor: the device is read
 * in aligned pieces of at most CK_DIO_PIECE bytes into the ring's registered
 * bounce buffers (CK_DIO_SLOTS of them in flight, so a cold disk sees that
 * queue depth per reader) and the requested bytes are copied out. */
#ifndef CK_IO_H
#define CK_IO_H

#include <liburing.h>
#include <stddef.h>
#include <stdint.h>

#include "../util/error.h"

#define CK_DIO_ALIGN 4096u	 /* offsets, lengths and buffers of O_DIRECT reads */
#define CK_DIO_PIECE (1u << 20) /* bytes of one O_DIRECT read */
#define CK_DIO_SLOTS 8u		 /* O_DIRECT reads in flight per ck_io */

struct ck_io_req {
	int fd;
	uint64_t off, len;
	void *buf;
	unsigned align; /* 0: a buffered descriptor; else fd is O_DIRECT with this alignment */
};

struct ck_io {
	int uring_ok;
	unsigned depth;
	struct io_uring ring;
	unsigned char *bounce; /* CK_DIO_SLOTS x CK_DIO_PIECE, allocated on the first O_DIRECT read */
	int bounce_fixed;      /* registered with the ring */
};

/* use_uring: 1 try io_uring (falling back to pread if setup fails), 0 pread.
 * *fell_back is set when io_uring was asked for but is unavailable. */
void ck_io_init(struct ck_io *io, int use_uring, unsigned depth, int *fell_back);
void ck_io_close(struct ck_io *io);
/* Read every request completely. A read past the end of file is EIO (the
 * source changed size). Returns 0 or a negative errno. */
int ck_io_read(struct ck_io *io, const struct ck_io_req *reqs, size_t n);
/* A synchronous read of [off, off + len) through O_DIRECT descriptor fd:
 * the aligned blocks around it pass through bounce (cap bytes, aligned to
 * and a multiple of CK_DIO_ALIGN). For the direct reads of renamed tensors,
 * which the kernel's readahead already keeps several of in flight. Returns
 * 0, or -EIO past the end of the file, or a negative errno. */
int ck_io_pread_direct(int fd, void *dst, uint64_t len, uint64_t off, unsigned char *bounce,
		       size_t cap);
/* The same read without the copy: the aligned blocks around [off, off + len)
 * are read into dst (aligned to CK_DIO_ALIGN, with room for
 * ck_io_direct_room(off, len) bytes), and the wanted bytes start at the
 * returned offset in dst; or -EIO past the end of the file, or -errno. The
 * FUSE daemon answers from there (its reply takes a pointer, not a copy). */
uint64_t ck_io_direct_room(uint64_t off, uint64_t len);
long ck_io_pread_around(int fd, unsigned char *dst, uint64_t len, uint64_t off);
/* Submit what is queued and wait for one completion, counting the SQEs the
 * kernel took in *accepted. A ring that fails for good is drained of the
 * `*accepted - completed` reads it holds and closed (pread from then on);
 * returns 0 or that negative errno. For the readers of io.c and io_direct.c. */
int ck_io_submit_wait(struct ck_io *io, uint64_t *accepted, uint64_t completed);
/* The O_DIRECT requests (every one has align set); ck_io_read's contract. */
int ck_io_read_direct(struct ck_io *io, const struct ck_io_req *reqs, size_t n);

#endif
