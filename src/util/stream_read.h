/* A file range read into the caller's buffer by a helper thread, a chunk at
 * a time, while the caller works on what is already in: a 100,000-key
 * safetensors header (12.7 MB) is parsed as it arrives instead of after a
 * read that took a third as long as the parse (the copy out of the page
 * cache, and the fresh pages it lands in, are the helper's). The caller
 * waits only for the bytes it asks for. */
#ifndef CK_STREAM_READ_H
#define CK_STREAM_READ_H

#include <pthread.h>
#include <stdint.h>

struct ck_stream_read {
	int fd;
	char *buf;
	uint64_t len, off;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	uint64_t avail; /* bytes in, from buf[0] on; under mu */
	int rc;		/* 0, or the read's negative errno; under mu */
	int done;	/* no more will come: all in, or the read failed */
	int threaded;	/* 0: start read it all itself (no thread could start) */
	pthread_t th;
	/* How far past its position a reader of the text wants it in before
	 * reading on: 64 KiB from start, more than a header's member takes. */
	uint64_t ahead;
	uint64_t step;	 /* ck_stream_read_of: bytes copied in per step */
	const char *src; /* and where from */
};

/* Starts reading len bytes at off of fd into buf (len bytes of room). Never
 * fails: where no thread can start, the read is made here and now. Every
 * start is ended by ck_stream_read_finish. */
void ck_stream_read_start(struct ck_stream_read *s, int fd, void *buf, uint64_t len, uint64_t off);
/* For tests of readers: a stream of src's len bytes into buf, copied in
 * step bytes at a time, only as they are waited for (a read that is always
 * behind, cutting the text at every step; what a reader reads past them is
 * whatever buf held); ahead as a test wants it. */
void ck_stream_read_of(struct ck_stream_read *s, void *buf, const void *src, uint64_t len,
		       uint64_t step, uint64_t ahead);
/* Blocks until at least need bytes are in (need above len: all of them),
 * or the read failed; returns how many are in, buf[0, that) readable. */
uint64_t ck_stream_read_wait(struct ck_stream_read *s, uint64_t need);
/* Waits for the helper to end; 0 when all len bytes are in, else the
 * negative errno of the read (-EIO: the file ended first). */
int ck_stream_read_finish(struct ck_stream_read *s);

#endif
