#include "io.h"

#include "../util/fileio.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_CHUNK (1u << 30) /* one SQE reads at most this much */

void ck_io_init(struct ck_io *io, int use_uring, unsigned depth, int *fell_back)
{
	memset(io, 0, sizeof *io);
	io->depth = depth ? depth : 64;
	if (fell_back)
		*fell_back = 0;
	if (!use_uring)
		return;
	if (io_uring_queue_init(io->depth, &io->ring, 0) == 0)
		io->uring_ok = 1;
	else if (fell_back)
		*fell_back = 1;
}

void ck_io_close(struct ck_io *io)
{
	if (io->uring_ok)
		io_uring_queue_exit(&io->ring); /* unregisters the bounce buffers too */
	io->uring_ok = 0;
	free(io->bounce);
	io->bounce = NULL;
	io->bounce_fixed = 0;
}

int ck_io_submit_wait(struct ck_io *io, uint64_t *accepted, uint64_t completed)
{
	int r = io_uring_submit_and_wait(&io->ring, 1);
	if (r > 0)
		*accepted += (uint64_t)r;
	if (r >= 0 || r == -EINTR || r == -EAGAIN || r == -EBUSY)
		return 0;
	/* the ring is unusable: drain what the kernel holds (it writes into
	 * our buffers), then drop the ring (and its unsubmitted SQEs) for pread */
	struct io_uring_cqe *cqe;
	while (completed < *accepted && io_uring_wait_cqe(&io->ring, &cqe) == 0) {
		io_uring_cqe_seen(&io->ring, cqe);
		completed++;
	}
	ck_io_close(io);
	return r;
}

/* In-flight state of one request: how much is done. */
struct slot {
	const struct ck_io_req *r;
	uint64_t done;
	unsigned inflight; /* bytes asked in the outstanding SQE */
};

static void queue(struct io_uring *ring, struct slot *s)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
	uint64_t left = s->r->len - s->done;
	s->inflight = left > MAX_CHUNK ? MAX_CHUNK : (unsigned)left;
	io_uring_prep_read(sqe, s->r->fd, (char *)s->r->buf + s->done, s->inflight,
			   s->r->off + s->done);
	io_uring_sqe_set_data(sqe, s);
}

static int read_buffered(struct ck_io *io, const struct ck_io_req *reqs, size_t n)
{
	if (!io->uring_ok) {
		for (size_t i = 0; i < n; i++) {
			int r = ck_pread_full(reqs[i].fd, reqs[i].buf, reqs[i].len, reqs[i].off);
			if (r < 0)
				return r;
		}
		return 0;
	}
	struct slot *slots = calloc(n ? n : 1, sizeof *slots);
	if (!slots)
		return -ENOMEM;
	size_t next = 0, active = 0; /* active: queued and not yet completed */
	uint64_t accepted = 0, completed = 0;
	int err = 0;
	for (size_t i = 0; i < n; i++)
		slots[i].r = &reqs[i];
	/* Keep up to depth SQEs outstanding; on error stop queueing but reap
	 * everything the kernel accepted before returning, so no buffer is
	 * released while a read into it is in flight. */
	while (next < n || active) {
		while (!err && next < n && active < io->depth) {
			if (slots[next].r->len == 0) {
				next++;
				continue;
			}
			queue(&io->ring, &slots[next++]);
			active++;
		}
		if (!active)
			break;
		int r = ck_io_submit_wait(io, &accepted, completed);
		if (r < 0) {
			free(slots);
			return r;
		}
		struct io_uring_cqe *cqe;
		unsigned head, seen = 0;
		io_uring_for_each_cqe(&io->ring, head, cqe)
		{
			struct slot *s = io_uring_cqe_get_data(cqe);
			int res = cqe->res;
			seen++;
			completed++;
			active--;
			if (res == -EAGAIN || res == -EINTR) {
				if (!err) {
					queue(&io->ring, s);
					active++;
				}
				continue;
			}
			if (res < 0 || (res == 0 && s->inflight)) {
				err = err ? err : (res < 0 ? res : -EIO);
				continue;
			}
			s->done += (uint64_t)res;
			if (s->done < s->r->len && !err) { /* short read: continue it */
				queue(&io->ring, s);
				active++;
			}
		}
		io_uring_cq_advance(&io->ring, seen);
		/* after an error, requeued work was skipped: stop once the
		 * kernel holds nothing more of ours */
		if (err && completed == accepted)
			break;
	}
	if (active) /* SQEs queued but never accepted must not run later */
		ck_io_close(io);
	free(slots);
	return err;
}

int ck_io_read(struct ck_io *io, const struct ck_io_req *reqs, size_t n)
{
	size_t nd = 0;
	for (size_t i = 0; i < n; i++)
		nd += reqs[i].align != 0;
	if (nd == 0)
		return read_buffered(io, reqs, n);
	if (nd == n)
		return ck_io_read_direct(io, reqs, n);
	/* both kinds in one batch (files of which some refused O_DIRECT) */
	struct ck_io_req *part = malloc(n * sizeof *part);
	if (!part)
		return -ENOMEM;
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		if (!reqs[i].align)
			part[k++] = reqs[i];
	for (size_t i = 0; i < n; i++)
		if (reqs[i].align)
			part[k++] = reqs[i];
	int r = read_buffered(io, part, n - nd);
	if (r == 0)
		r = ck_io_read_direct(io, part + (n - nd), nd);
	free(part);
	return r;
}
