/* O_DIRECT reads (see io.h). A checkpoint's tensors start wherever its
 * header put them, so each request is read as the aligned pieces around it
 * into bounce buffers and trimmed on the way out. The page cache is not
 * touched: a checkpoint larger than memory is read once from the disk
 * instead of evicting everything else (and itself) on the way. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "io.h"

static uint64_t align_down(uint64_t x, unsigned a)
{
	return x - x % a;
}

static uint64_t align_up(uint64_t x, unsigned a)
{
	return x + (a - x % a) % a;
}

/* The bounce buffers, allocated on first use and registered with the ring
 * (fixed buffers spare the kernel pinning pages per read; a ring that
 * cannot register them reads into them unregistered). */
static int bounce_get(struct ck_io *io)
{
	if (io->bounce)
		return 0;
	void *p = NULL;
	if (posix_memalign(&p, CK_DIO_ALIGN, (size_t)CK_DIO_SLOTS * CK_DIO_PIECE) != 0)
		return -ENOMEM;
	io->bounce = p;
	if (io->uring_ok) {
		struct iovec iov[CK_DIO_SLOTS];
		for (unsigned i = 0; i < CK_DIO_SLOTS; i++)
			iov[i] =
			    (struct iovec){io->bounce + (size_t)i * CK_DIO_PIECE, CK_DIO_PIECE};
		io->bounce_fixed = io_uring_register_buffers(&io->ring, iov, CK_DIO_SLOTS) == 0;
	}
	return 0;
}

/* One read in flight: the aligned file range [a, a + asked) for bytes
 * [pos, end) of request r. */
struct piece {
	const struct ck_io_req *r;
	uint64_t a, pos, end;
	unsigned asked;
	int busy;
};

static void piece_at(struct piece *p, const struct ck_io_req *r, uint64_t pos)
{
	uint64_t rend = r->off + r->len;
	p->r = r;
	p->pos = pos;
	p->a = align_down(pos, r->align);
	uint64_t lim = p->a + CK_DIO_PIECE;
	p->end = rend < lim ? rend : lim;
	p->asked = (unsigned)(align_up(p->end, r->align) - p->a);
}

/* A read of the piece returned res bytes: copy out what it covers. Returns 1
 * when the piece is complete, 0 when the rest must be read (the piece now
 * describes it), -EIO when the file ends before the bytes asked for. */
static int piece_done(struct piece *p, const unsigned char *buf, int res)
{
	uint64_t got = p->a + (uint64_t)res;
	if (got <= p->pos)
		return -EIO;
	uint64_t e = got < p->end ? got : p->end;
	memcpy((unsigned char *)p->r->buf + (p->pos - p->r->off), buf + (p->pos - p->a),
	       e - p->pos);
	if (e == p->end)
		return 1;
	p->pos = e;
	p->a = align_down(e, p->r->align);
	p->asked = (unsigned)(align_up(p->end, p->r->align) - p->a);
	return 0;
}

int ck_io_pread_direct(int fd, void *dst, uint64_t len, uint64_t off, unsigned char *bounce,
		       size_t cap)
{
	struct ck_io_req r = {fd, off, len, dst, CK_DIO_ALIGN};
	for (uint64_t pos = off; pos < off + len;) {
		struct piece p;
		piece_at(&p, &r, pos);
		if (p.end > p.a + cap) /* what the bounce buffer holds (cap: aligned) */
			p.end = p.a + cap;
		p.asked = (unsigned)(align_up(p.end, CK_DIO_ALIGN) - p.a);
		int d = 0;
		while (d == 0) {
			ssize_t got = pread(fd, bounce, p.asked, (off_t)p.a);
			if (got < 0 && (errno == EINTR || errno == EAGAIN))
				continue;
			if (got < 0)
				return -errno;
			if ((d = piece_done(&p, bounce, (int)got)) < 0)
				return d;
		}
		pos = p.end;
	}
	return 0;
}

uint64_t ck_io_direct_room(uint64_t off, uint64_t len)
{
	return align_up(off + len, CK_DIO_ALIGN) - align_down(off, CK_DIO_ALIGN);
}

long ck_io_pread_around(int fd, unsigned char *dst, uint64_t len, uint64_t off)
{
	uint64_t a = align_down(off, CK_DIO_ALIGN), need = off + len - a;
	uint64_t asked = ck_io_direct_room(off, len), have = 0;
	while (have < need) {
		/* only the file's end makes a read short, so a read that
		 * stops before the bytes asked for, or mid-block, is EIO */
		if (have % CK_DIO_ALIGN)
			return -EIO;
		ssize_t got = pread(fd, dst + have, asked - have, (off_t)(a + have));
		if (got < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (got < 0)
			return -errno;
		if (got == 0)
			return -EIO;
		have += (uint64_t)got;
	}
	return (long)(off - a);
}

static void submit(struct ck_io *io, struct piece *p, unsigned slot)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&io->ring);
	unsigned char *buf = io->bounce + (size_t)slot * CK_DIO_PIECE;
	if (io->bounce_fixed)
		io_uring_prep_read_fixed(sqe, p->r->fd, buf, p->asked, p->a, (int)slot);
	else
		io_uring_prep_read(sqe, p->r->fd, buf, p->asked, p->a);
	io_uring_sqe_set_data(sqe, p);
	p->busy = 1;
}

/* The next piece of the batch, from request *i at *pos; 0 when none is left. */
static int next_piece(const struct ck_io_req *reqs, size_t n, size_t *i, uint64_t *pos,
		      struct piece *p)
{
	while (*i < n && *pos >= reqs[*i].off + reqs[*i].len)
		if (++*i < n)
			*pos = reqs[*i].off;
	if (*i == n)
		return 0;
	piece_at(p, &reqs[*i], *pos);
	*pos = p->end;
	return 1;
}

int ck_io_read_direct(struct ck_io *io, const struct ck_io_req *reqs, size_t n)
{
	if (!n)
		return 0;
	if (bounce_get(io) < 0)
		return -ENOMEM;
	if (!io->uring_ok) { /* no ring: one synchronous read after the other */
		int r = 0;
		for (size_t i = 0; i < n && r == 0; i++)
			r = ck_io_pread_direct(reqs[i].fd, reqs[i].buf, reqs[i].len, reqs[i].off,
					       io->bounce, CK_DIO_PIECE);
		return r;
	}
	struct piece pc[CK_DIO_SLOTS];
	memset(pc, 0, sizeof pc);
	size_t i = 0;
	uint64_t pos = reqs[0].off, accepted = 0, completed = 0;
	unsigned active = 0;
	int err = 0;
	for (;;) {
		for (unsigned s = 0; s < CK_DIO_SLOTS && !err; s++)
			if (!pc[s].busy && next_piece(reqs, n, &i, &pos, &pc[s])) {
				submit(io, &pc[s], s);
				active++;
			}
		if (!active)
			break;
		int r = ck_io_submit_wait(io, &accepted, completed);
		if (r < 0)
			return r;
		struct io_uring_cqe *cqe;
		unsigned head, seen = 0;
		io_uring_for_each_cqe(&io->ring, head, cqe)
		{
			struct piece *p = io_uring_cqe_get_data(cqe);
			unsigned slot = (unsigned)(p - pc);
			int res = cqe->res, d = 0;
			seen++;
			completed++;
			if (res == -EAGAIN || res == -EINTR)
				d = 0;
			else if (res < 0)
				d = res;
			else
				d = piece_done(p, io->bounce + (size_t)slot * CK_DIO_PIECE, res);
			if (d < 0 && !err)
				err = d;
			if (d == 0 && !err) {
				submit(io, p, slot); /* the rest, or the same again */
			} else {
				p->busy = 0;
				active--;
			}
		}
		io_uring_cq_advance(&io->ring, seen);
	}
	return err;
}
