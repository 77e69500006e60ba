#include "stream_read.h"

#include <string.h>

#include "fileio.h"

/* Small enough that the caller's first wait is short, large enough that a
 * 12.7 MB header is a couple of dozen wake-ups. */
#define CHUNK (512u << 10)
#define AHEAD (64u << 10)

static void publish(struct ck_stream_read *s, uint64_t got, int rc)
{
	pthread_mutex_lock(&s->mu);
	s->avail = got;
	s->rc = rc;
	s->done = rc < 0 || got == s->len;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
}

static void *helper(void *v)
{
	struct ck_stream_read *s = v;
	uint64_t got = 0;
	int rc = 0;
	while (got < s->len && rc == 0) {
		uint64_t k = s->len - got < CHUNK ? s->len - got : CHUNK;
		rc = ck_pread_full(s->fd, s->buf + got, k, s->off + got);
		if (rc == 0)
			got += k;
		publish(s, got, rc);
	}
	return NULL;
}

void ck_stream_read_start(struct ck_stream_read *s, int fd, void *buf, uint64_t len, uint64_t off)
{
	*s = (struct ck_stream_read){.fd = fd, .buf = buf, .len = len, .off = off, .ahead = AHEAD};
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv, NULL);
	if (len == 0) {
		s->done = 1;
		return;
	}
	s->threaded = pthread_create(&s->th, NULL, helper, s) == 0;
	if (!s->threaded) {
		int rc = ck_pread_full(fd, buf, len, off);
		publish(s, rc == 0 ? len : 0, rc);
	}
}

void ck_stream_read_of(struct ck_stream_read *s, void *buf, const void *src, uint64_t len,
		       uint64_t step, uint64_t ahead)
{
	*s = (struct ck_stream_read){
	    .fd = -1, .buf = buf, .len = len, .ahead = ahead, .step = step ? step : 1, .src = src};
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv, NULL);
}

uint64_t ck_stream_read_wait(struct ck_stream_read *s, uint64_t need)
{
	if (s->step) {
		while (s->avail < need && s->avail < s->len) {
			uint64_t k = s->len - s->avail < s->step ? s->len - s->avail : s->step;
			memcpy(s->buf + s->avail, s->src + s->avail, k);
			s->avail += k;
		}
		return s->avail;
	}
	pthread_mutex_lock(&s->mu);
	while (s->avail < need && !s->done)
		pthread_cond_wait(&s->cv, &s->mu);
	uint64_t got = s->avail;
	pthread_mutex_unlock(&s->mu);
	return got;
}

int ck_stream_read_finish(struct ck_stream_read *s)
{
	if (s->threaded)
		pthread_join(s->th, NULL);
	s->threaded = 0;
	pthread_mutex_destroy(&s->mu);
	pthread_cond_destroy(&s->cv);
	return s->rc;
}
