#include "cache.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>

#define HT_BITS 16
#define SERVED_MAX (16u << 20)

enum { LOADING, READY };
enum { STREAM_ALWAYS = 1, STREAM_LARGE = 2 };

struct waiter {
	struct waiter *next;
	struct op *op;
	size_t part;
};

struct entry {
	uint32_t target;
	uint64_t chunk;
	int state, failed;
	unsigned char *data;
	uint64_t len;
	size_t mapped; /* data's mapping (alloc_chunk), 0: malloc'ed */
	int refs;
	int served_whole; /* every byte handed to a reader (see drop_served) */
	uint64_t served;
	struct entry *hnext, *lprev, *lnext;
	struct waiter *waiters;
};

/* One chunk's share of a read: a reference on e is held while `held`. */
struct part {
	struct entry *e;
	uint64_t off, len, dst; /* off within the chunk, dst within the result */
	int held;
};

struct op {
	struct ck_cache *c;
	atomic_int pending;
	atomic_int err;
	ck_done_cb cb;
	void *arg;
	struct part *parts;
	size_t n;
};

struct job {
	struct job *next;
	struct entry **ents;
	size_t n;
	int group;
	size_t released; /* entries its reader has had, let go early (pace) */
	size_t front;	 /* entries before this one: the reader is past them (pace) */
};

struct ck_cache {
	const struct ck_plan *plan;
	struct ck_cache_opts o;
	struct ck_engine eng;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	pthread_cond_t pace_cv; /* a chunk served whole, or a reader waiting (see pace) */
	int pacing;		/* evaluators waiting on pace_cv */
	uint64_t activity;	/* chunks served whole or evaluated so far (pace) */
	struct entry *ht[1 << HT_BITS];
	struct entry lru;    /* sentinel: lnext is the most recent */
	struct entry served; /* sentinel: chunks served whole (drop_served), lnext the newest */
	struct job *qhead, *qtail;
	int stop, nth, fell_back;
	pthread_t th[64];
	uint64_t bytes, hits, misses, evictions, groups, regions, errors, in_flight, prefetches;
	uint64_t odirect_files; /* source files the evaluators read with O_DIRECT */
	atomic_uchar *file_changed; /* per source file, set once and logged */
	atomic_int logged_errors;
	int64_t *direct; /* per target: file offset of its bytes, or -1 (see ck_cache_direct) */
	/* per target: STREAM_ALWAYS (ck_plan_streamable), STREAM_LARGE (only
	 * in order: ck_plan_in_order) or 0; NULL: none is */
	unsigned char *stream;
	uint32_t *next_eval; /* per target: the next evaluated target of another group, or n */
	atomic_uint_fast64_t direct_reads;
	/* contexts of callers evaluating into their own memory (ck_cache_eval_into) */
	struct spare_ctx *spare;
	atomic_uint_fast64_t streamed;
	/* bytes on the served list (drop_served) */
	uint64_t served_bytes, served_max, dropped;
	/* evicted chunk mappings kept for reuse (lock order: mu, then pool_mu) */
	pthread_mutex_t pool_mu;
	struct pooled *pool;
	uint64_t pool_bytes;
	atomic_uint_fast64_t recycled;
	atomic_uint_fast64_t live, peak; /* chunk memory held (mapped or malloc'ed) now, at most */
};

/* A free chunk mapping, the list node written into the chunk itself. */
struct pooled {
	struct pooled *next;
	size_t n; /* mapped bytes */
};

struct spare_ctx {
	struct spare_ctx *next;
	struct ck_eval_ctx ctx;
};

static size_t hslot(uint32_t t, uint64_t k)
{
	uint64_t h = ((uint64_t)t * 0x9E3779B97F4A7C15ULL) ^ (k * 0xC2B2AE3D27D4EB4FULL);
	return (size_t)(h >> (64 - HT_BITS));
}

static struct entry *find(struct ck_cache *c, uint32_t t, uint64_t k)
{
	for (struct entry *e = c->ht[hslot(t, k)]; e; e = e->hnext)
		if (e->target == t && e->chunk == k)
			return e;
	return NULL;
}

static void lru_unlink(struct entry *e)
{
	if (e->lprev) {
		e->lprev->lnext = e->lnext;
		e->lnext->lprev = e->lprev;
		e->lprev = e->lnext = NULL;
	}
}

static void lru_front(struct ck_cache *c, struct entry *e)
{
	lru_unlink(e);
	e->lnext = c->lru.lnext;
	e->lprev = &c->lru;
	c->lru.lnext->lprev = e;
	c->lru.lnext = e;
}

static void ht_remove(struct ck_cache *c, struct entry *e)
{
	struct entry **p = &c->ht[hslot(e->target, e->chunk)];
	while (*p && *p != e)
		p = &(*p)->hnext;
	if (*p)
		*p = e->hnext;
}

static uint64_t chunk_len(const struct ck_cache *c, uint32_t t, uint64_t k)
{
	uint64_t n = c->plan->t[t].nbytes - k * c->o.chunk;
	return n < c->o.chunk ? n : c->o.chunk;
}

/* Chunks of 64 KiB and more are mappings of their own, kept in a pool when
 * evicted (alloc_chunk): a fresh chunk otherwise costs its page faults
 * before the first byte lands (on this VM freed memory goes back to the
 * host, and a page that comes back costs a host fault), and an evicted
 * chunk's memory goes back to the system rather than staying in the heap
 * (the daemon's RSS is documented against cache_size). From 2 MiB they are
 * 2 MiB multiples on transparent huge pages; below, a power of two from
 * 64 KiB, so the chunks of `-o chunk=1MiB` and tensors' short last chunks
 * find pooled mappings of their size (at most twice the chunk's bytes).
 * Smaller chunks (norms, biases) come from malloc. */
#define HUGE_PAGE (2u << 20)
#define SMALL_CHUNK (64u << 10)

static size_t mapped_len(uint64_t len)
{
	if (len >= HUGE_PAGE)
		return (len + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
	size_t n = SMALL_CHUNK;
	while (n < len)
		n <<= 1;
	return n;
}

static unsigned char *map_chunk(size_t n)
{
	if (n < HUGE_PAGE) {
		unsigned char *m = mmap(NULL, n, PROT_READ | PROT_WRITE,
					MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (m == MAP_FAILED)
			return NULL;
#ifdef MADV_POPULATE_WRITE
		madvise(m, n, MADV_POPULATE_WRITE); /* one call, not a fault per page */
#endif
		return m;
	}
	/* over-map by one huge page and trim, so the chunk is 2 MiB aligned */
	unsigned char *m = mmap(NULL, n + HUGE_PAGE, PROT_READ | PROT_WRITE,
				MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		return NULL;
	uintptr_t a = ((uintptr_t)m + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1);
	unsigned char *p = (unsigned char *)a;
	if (p > m)
		munmap(m, (size_t)(p - m));
	if (p + n < m + n + HUGE_PAGE)
		munmap(p + n, (size_t)(m + n + HUGE_PAGE - (p + n)));
	madvise(p, n, MADV_HUGEPAGE);
#ifdef MADV_POPULATE_WRITE
	madvise(p, n, MADV_POPULATE_WRITE); /* fault it in at once, not page by page */
#endif
	return p;
}

static void live_add(struct ck_cache *c, uint64_t n)
{
	uint64_t now = atomic_fetch_add(&c->live, n) + n;
	uint64_t p = atomic_load(&c->peak);
	while (now > p && !atomic_compare_exchange_weak(&c->peak, &p, now))
		;
}

/* A chunk's memory, outside the cache lock: the smallest pooled mapping
 * that holds it and is at most twice its size (no page faults: fresh memory
 * is what this VM is slowest at; a tensor's shorter last chunk takes a
 * full-size chunk's mapping), else a new mapping. *mapped: the mapping's
 * size (0: from malloc), for free_chunk. Pooled mappings stay while the
 * cache and the pool fit cache_size (free_chunk, pool_trim). Every byte is
 * written by the evaluation (the engine fills holes itself), so old
 * contents never show. */
static unsigned char *alloc_chunk(struct ck_cache *c, uint64_t len, size_t *mapped)
{
	*mapped = 0;
	if (len < SMALL_CHUNK) {
		unsigned char *p = malloc(len ? len : 1);
		if (p)
			live_add(c, len);
		return p;
	}
	size_t n = mapped_len(len);
	struct pooled **best = NULL;
	pthread_mutex_lock(&c->pool_mu);
	for (struct pooled **q = &c->pool; *q; q = &(*q)->next)
		if ((*q)->n >= n && (*q)->n <= 2 * n && (!best || (*q)->n < (*best)->n))
			best = q;
	struct pooled *hit = best ? *best : NULL;
	if (hit) {
		*best = hit->next;
		c->pool_bytes -= hit->n;
	}
	pthread_mutex_unlock(&c->pool_mu);
	if (hit) {
		atomic_fetch_add(&c->recycled, 1);
		*mapped = hit->n;
		live_add(c, hit->n);
		return (unsigned char *)hit;
	}
	unsigned char *p = map_chunk(n);
	*mapped = p ? n : 0;
	if (p)
		live_add(c, n);
	return p;
}

/* Under the lock, when the cache grew: pooled mappings beyond what
 * cache_size leaves next to the cache, newest first, taken off the pool for
 * the caller to unmap once it has let go of the lock. */
static struct pooled *pool_trim(struct ck_cache *c)
{
	struct pooled *out = NULL;
	pthread_mutex_lock(&c->pool_mu);
	while (c->pool && c->bytes + c->pool_bytes > c->o.cache_size) {
		struct pooled *x = c->pool;
		c->pool = x->next;
		c->pool_bytes -= x->n;
		x->next = out;
		out = x;
	}
	pthread_mutex_unlock(&c->pool_mu);
	return out;
}

static void unmap_all(struct pooled *x)
{
	while (x) {
		struct pooled *next = x->next;
		munmap(x, x->n);
		x = next;
	}
}

/* Under the lock: a chunk mapping goes to the pool while the cache and the
 * pool together stay within cache_size (the documented memory bound is
 * unchanged), else back to the system. mapped: from alloc_chunk. */
static void free_chunk(struct ck_cache *c, unsigned char *p, uint64_t len, size_t mapped)
{
	if (!p)
		return;
	atomic_fetch_sub(&c->live, mapped ? mapped : len);
	if (!mapped) {
		free(p);
		return;
	}
	size_t n = mapped;
	pthread_mutex_lock(&c->pool_mu);
	int keep = !c->stop && c->bytes + c->pool_bytes + n <= c->o.cache_size;
	if (keep) {
		struct pooled *f = (struct pooled *)(void *)p;
		*f = (struct pooled){c->pool, n};
		c->pool = f;
		c->pool_bytes += n;
	}
	pthread_mutex_unlock(&c->pool_mu);
	if (!keep)
		munmap(p, n);
}

static void drop(struct ck_cache *c, struct entry *e, int over_budget)
{
	if (over_budget)
		c->evictions++;
	else
		c->dropped++;
	lru_unlink(e);
	ht_remove(c, e);
	c->bytes -= e->len;
	if (e->served_whole)
		c->served_bytes -= e->len;
	free_chunk(c, e->data, e->len, e->mapped);
	free(e);
}

/* Drop unreferenced entries until under budget: spare copies of served
 * chunks first (oldest first; and while there are more than served_max bytes
 * of them, even under budget), then the least recently used. */
static void evict(struct ck_cache *c)
{
	for (struct entry *e = c->served.lprev, *prev; e != &c->served; e = prev) {
		prev = e->lprev;
		if (c->bytes <= c->o.cache_size && c->served_bytes <= c->served_max)
			return;
		if (e->refs == 0 && e->state == READY)
			drop(c, e, c->bytes > c->o.cache_size);
	}
	for (struct entry *e = c->lru.lprev, *prev; e != &c->lru && c->bytes > c->o.cache_size;
	     e = prev) {
		prev = e->lprev;
		if (e->refs == 0 && e->state == READY)
			drop(c, e, 1);
	}
}

/* Under the lock, with drop_served (the kernel keeps the pages it was
 * given): once every byte of a chunk has been handed to a reader, the
 * kernel's page cache holds them and this copy is a spare. It moves to the
 * served list, and beyond served_max such bytes the oldest is dropped and
 * its memory recycled, so a sequential read of a view bigger than that
 * touches a bounded working set instead of fresh memory for every byte.
 * Read again, it is an ordinary entry once more (see ck_cache_read). */
static void note_served(struct ck_cache *c, struct entry *e, uint64_t len)
{
	if (e->served_whole || (e->served += len) < e->len)
		return;
	e->served_whole = 1;
	c->served_bytes += e->len;
	c->activity++;
	if (c->pacing)
		pthread_cond_broadcast(&c->pace_cv);
	lru_unlink(e);
	e->lnext = c->served.lnext;
	e->lprev = &c->served;
	c->served.lnext->lprev = e;
	c->served.lnext = e;
}

static struct entry *new_entry(struct ck_cache *c, uint32_t t, uint64_t k)
{
	struct entry *e = calloc(1, sizeof *e);
	if (!e)
		return NULL;
	e->target = t;
	e->chunk = k;
	e->state = LOADING;
	e->len = chunk_len(c, t, k);
	size_t s = hslot(t, k);
	e->hnext = c->ht[s];
	c->ht[s] = e;
	return e;
}

/* Bytes of a large transpose's chunks one engine read takes: a quarter of
 * the budget shared by the evaluators. */
static uint64_t transpose_share(const struct ck_cache *c)
{
	return c->o.cache_size / 4 / (uint64_t)c->o.threads;
}

/* The chunks from k on of a target evaluated by region that one job
 * evaluates: a large transpose's (ck_engine_read_span) as many as a
 * quarter of the budget shared by the evaluators holds, one read of its
 * source for them all (batch_len), where a job per chunk reads all of it
 * for each; else 1. */
static size_t transpose_run(const struct ck_cache *c, uint32_t t, uint64_t k)
{
	if (!ck_engine_read_span(&c->eng, t))
		return 1;
	uint64_t nk = (c->plan->t[t].nbytes + c->o.chunk - 1) / c->o.chunk;
	uint64_t run = transpose_share(c) / c->o.chunk;
	if (run > nk - k)
		run = nk - k;
	return run ? (size_t)run : 1;
}

/* Under the lock: create the loading entries and queue their job. */
static struct entry *schedule(struct ck_cache *c, uint32_t t, uint64_t k)
{
	const struct ck_plan *p = c->plan;
	const struct ck_group *g = &p->g[p->t[t].group];
	struct job *j = calloc(1, sizeof *j);
	if (!j)
		return NULL;
	int whole = g->out_bytes <= c->o.group_max;
	size_t cap = 1;
	if (whole) {
		cap = 0;
		for (size_t i = 0; i < g->n_targets; i++)
			cap += (p->t[g->targets[i]].nbytes + c->o.chunk - 1) / c->o.chunk;
	} else {
		cap = transpose_run(c, t, k);
	}
	j->ents = malloc((cap ? cap : 1) * sizeof *j->ents);
	struct entry *mine = j->ents ? new_entry(c, t, k) : NULL;
	if (!mine) {
		free(j->ents);
		free(j);
		return NULL;
	}
	j->ents[j->n++] = mine;
	j->group = whole;
	for (uint64_t q = k + 1; !whole && q < k + cap && !find(c, t, q); q++) {
		struct entry *e = new_entry(c, t, q);
		if (!e)
			break;
		j->ents[j->n++] = e;
	}
	for (size_t i = 0; whole && i < g->n_targets; i++) {
		uint32_t u = g->targets[i];
		/* a member read straight from its file (a rename beside a
		 * transformed copy of the same source: the GGUF view, npy_f32) has
		 * nothing to evaluate: reads of it never come to the cache */
		if (u != t && ck_cache_is_direct(c, u))
			continue;
		uint64_t nk = (p->t[u].nbytes + c->o.chunk - 1) / c->o.chunk;
		for (uint64_t q = 0; q < nk; q++) {
			if (find(c, u, q))
				continue;
			struct entry *e = new_entry(c, u, q);
			if (e && j->n < cap)
				j->ents[j->n++] = e;
			else if (e) { /* cannot happen: cap counts every chunk */
				ht_remove(c, e);
				free(e);
			}
		}
	}
	if (c->qtail)
		c->qtail->next = j;
	else
		c->qhead = j;
	c->qtail = j;
	pthread_cond_signal(&c->cv);
	return mine;
}

static void op_done(struct op *op)
{
	if (atomic_fetch_sub(&op->pending, 1) != 1)
		return;
	struct ck_cache *c = op->c;
	int err = atomic_load(&op->err);
	struct ck_seg *segs = err ? NULL : malloc((op->n ? op->n : 1) * sizeof *segs);
	if (!err && !segs)
		err = -ENOMEM;
	for (size_t i = 0; !err && i < op->n; i++)
		segs[i] = (struct ck_seg){op->parts[i].e->data + op->parts[i].off, op->parts[i].len,
					  op->parts[i].dst};
	op->cb(op->arg, err, segs, err ? 0 : op->n);
	free(segs);
	pthread_mutex_lock(&c->mu);
	for (size_t i = 0; i < op->n; i++)
		if (op->parts[i].held) {
			op->parts[i].e->refs--;
			if (c->o.drop_served && !err)
				note_served(c, op->parts[i].e, op->parts[i].len);
		}
	evict(c);
	pthread_mutex_unlock(&c->mu);
	free(op->parts);
	free(op);
}

static void log_msg(struct ck_cache *c, const char *msg)
{
	if (c->o.log)
		c->o.log(c->o.log_ctx, msg);
}

/* Has source file f changed size or mtime since the catalog? Logged once. */
static int file_changed(struct ck_cache *c, uint32_t f)
{
	if (atomic_load(&c->file_changed[f]))
		return 1;
	struct stat st;
	const struct ck_source_file *sf = &c->plan->cat->files[f];
	if (fstat(sf->fd, &st) == 0 && (uint64_t)st.st_size == sf->size &&
	    st.st_mtim.tv_sec == sf->mtime.tv_sec && st.st_mtim.tv_nsec == sf->mtime.tv_nsec)
		return 0;
	if (!atomic_exchange(&c->file_changed[f], 1)) {
		char m[4200];
		snprintf(m, sizeof m,
			 "%s: changed after mount (size or mtime); reads that need it fail with EIO",
			 sf->path);
		log_msg(c, m);
	}
	return 1;
}

/* Has a source file of target t (its block scales' too) changed? */
static int target_sources_changed(struct ck_cache *c, uint32_t t)
{
	const struct ck_catalog *cat = c->plan->cat;
	const struct ck_value *v = &c->plan->t[t].v;
	for (size_t i = 0; i < v->n; i++) {
		uint32_t f = cat->entries[v->p[i].src].file;
		if (v->p[i].sc && file_changed(c, cat->entries[v->p[i].sc->src].file))
			return 1;
		if (i && cat->entries[v->p[i - 1].src].file == f && !atomic_load(&c->file_changed[f]))
			continue; /* checked for the previous piece */
		if (file_changed(c, f))
			return 1;
	}
	return 0;
}

/* Publish one evaluated (or failed) entry of a job: its waiters take their
 * references and complete outside the lock (their callbacks reply straight
 * from the chunk). The job keeps its own reference until the whole job is
 * over: a completing read may evict. A failed entry is unhashed (a later read
 * tries again) and, its waiters done, freed here: nobody else can reach it. */
static void publish(struct ck_cache *c, struct job *j, size_t i)
{
	struct entry *e = j->ents[i];
	pthread_mutex_lock(&c->mu);
	struct waiter *ws = e->waiters;
	e->waiters = NULL;
	if (e->failed) {
		c->errors++;
		c->bytes -= e->len;
		ht_remove(c, e);
		free_chunk(c, e->data, e->len, e->mapped);
		e->data = NULL;
	} else {
		e->state = READY;
		lru_front(c, e);
		e->refs++; /* the job's */
		c->activity++;
		if (c->pacing)
			pthread_cond_broadcast(&c->pace_cv);
	}
	for (struct waiter *w = ws; w; w = w->next) {
		if (e->failed) {
			atomic_store(&w->op->err, e->failed);
		} else {
			e->refs++;
			w->op->parts[w->part].held = 1;
		}
	}
	pthread_mutex_unlock(&c->mu);
	for (struct waiter *w = ws, *next; w; w = next) {
		next = w->next;
		op_done(w->op);
		free(w);
	}
	if (e->failed) {
		free(e);
		j->ents[i] = NULL;
	}
}

/* Pacing (drop_served only): a group's chunks are evaluated at most
 * PACE_AHEAD chunks ahead of its reader, and those the reader has had whole
 * are let go at once (not when the whole group is done), so reading a big
 * group faults in a few chunks' memory and recycles it, instead of all of
 * the group's while the kernel copies out the first chunks (fresh memory is
 * what this VM is slowest at). A reader waiting for a later chunk of the
 * job or a stop ends the wait; PACE_WAIT_MS without progress (pace_progress:
 * a reader that went elsewhere after reading some of the job, or no reader
 * reading anything) and the job runs unpaced to its end, so an evaluator is
 * held only while some reader is busy. */
#define PACE_AHEAD 4
#define PACE_WAIT_MS 50 /* the default of opts.pace_wait_ms */

static void deadline_in(struct timespec *ts, long ms)
{
	clock_gettime(CLOCK_MONOTONIC, ts);
	ts->tv_nsec += ms * 1000000L;
	ts->tv_sec += ts->tv_nsec / 1000000000L;
	ts->tv_nsec %= 1000000000L;
}

static void reverse(struct entry **a, size_t lo, size_t hi)
{
	for (; lo + 1 < hi; lo++, hi--) {
		struct entry *t = a[lo];
		a[lo] = a[hi - 1];
		a[hi - 1] = t;
	}
}

/* Under the lock: the first entry at or after i that a reader waits for is
 * moved to i, the ones after it in the job (its tensor's next chunks) with
 * it, so the job follows its reader; 1 if there was one. */
static int follow_reader(struct job *j, size_t i)
{
	size_t w = i;
	while (w < j->n && !(j->ents[w] && j->ents[w]->waiters))
		w++;
	if (w == j->n)
		return 0;
	/* rotate [i, n) left by w - i: reverse both parts, then the whole */
	reverse(j->ents, i, w);
	reverse(j->ents, w, j->n);
	reverse(j->ents, i, j->n);
	return 1;
}

/* What a paced job waits on: its own chunks served, once its reader has had
 * one; before that (a group evaluated ahead of a reader still busy with the
 * one before, or waiting for its evaluation) any chunk served or evaluated. */
static uint64_t pace_progress(const struct ck_cache *c, const struct job *j)
{
	return j->released ? j->released : c->activity;
}

static void pace(struct ck_cache *c, struct job *j, size_t i, int *unpaced)
{
	pthread_mutex_lock(&c->mu);
	long wait_ms = c->o.pace_wait_ms ? (long)c->o.pace_wait_ms : PACE_WAIT_MS;
	struct timespec deadline;
	deadline_in(&deadline, wait_ms);
	uint64_t seen = pace_progress(c, j);
	for (int timed_out = 0;;) {
		for (size_t k = 0; k < i; k++) {
			struct entry *e = j->ents[k];
			if (e && e->served_whole) { /* the reader has it: the job lets go */
				e->refs--;
				j->ents[k] = NULL;
				j->released++;
				if (k + 1 > j->front)
					j->front = k + 1;
			}
		}
		if (follow_reader(j, i)) {
			j->front = i;
			break;
		}
		if (i < j->front + PACE_AHEAD || c->stop)
			break;
		if (pace_progress(c, j) != seen) {
			seen = pace_progress(c, j);
			deadline_in(&deadline, wait_ms);
		} else if (timed_out) {
			*unpaced = 1;
			break;
		}
		c->pacing++;
		timed_out = pthread_cond_timedwait(&c->pace_cv, &c->mu, &deadline) == ETIMEDOUT;
		c->pacing--;
	}
	evict(c);
	pthread_mutex_unlock(&c->mu);
}

/* How many of a job's entries from i on to evaluate in one engine read:
 * the consecutive chunks of one target that ck_engine_read_span asks to
 * read together (a large transposed source is read once per read), else 1.
 * Such a read takes as many chunks as a quarter of the budget shared by the
 * evaluators holds, at least the window's worth: a 131 MB lm_head kernel
 * under a 6 GiB cache is one read of its source, not eight. */
static size_t batch_len(const struct ck_cache *c, const struct job *j, size_t i)
{
	const struct entry *e = j->ents[i];
	uint64_t span = ck_engine_read_span(&c->eng, e->target), bytes = e->len;
	uint64_t share = transpose_share(c);
	if (span && share > span)
		span = share;
	size_t k = 1;
	while (i + k < j->n && j->ents[i + k]->target == e->target &&
	       j->ents[i + k]->chunk == e->chunk + k && bytes + j->ents[i + k]->len <= span)
		bytes += j->ents[i + k++]->len;
	return k;
}

/* Bytes [off, off + len) of target t into dst; a failure logged. */
static int eval_span(struct ck_cache *c, struct ck_eval_ctx *ctx, uint32_t t, uint64_t off,
		     uint64_t len, unsigned char *dst)
{
	struct ck_err err;
	if (target_sources_changed(c, t))
		return -EIO;
	if (ck_engine_read(ctx, t, off, len, dst, &err) == 0)
		return 0;
	if (atomic_fetch_add(&c->logged_errors, 1) < 16)
		log_msg(c, err.msg);
	return err.sys_errno ? -err.sys_errno : -EIO;
}

/* Entries i .. i+k-1 of a job (batch_len) evaluated into their chunks: one
 * by one, or in one read through a staging buffer copied out. */
static void eval_entries(struct ck_cache *c, struct ck_eval_ctx *ctx, struct job *j, size_t i,
			 size_t k)
{
	uint64_t total = 0;
	int failed = 0;
	for (size_t b = 0; b < k; b++) {
		struct entry *e = j->ents[i + b];
		total += e->len;
		if (!(e->data = alloc_chunk(c, e->len, &e->mapped)))
			failed = -ENOMEM;
	}
	unsigned char *stage = k > 1 && !failed ? malloc(total) : NULL;
	struct entry *e0 = j->ents[i];
	if (stage)
		failed = eval_span(c, ctx, e0->target, e0->chunk * c->o.chunk, total, stage);
	for (size_t b = 0, at = 0; b < k; at += j->ents[i + b]->len, b++) {
		struct entry *e = j->ents[i + b];
		if (failed)
			e->failed = failed;
		else if (stage)
			memcpy(e->data, stage + at, e->len);
		else if ((e->failed = eval_span(c, ctx, e->target, e->chunk * c->o.chunk, e->len,
						e->data)) < 0 && k > 1)
			failed = e->failed; /* the rest of the batch fails alike */
	}
	free(stage);
}

/* Evaluate a job's entries in order (the chunk that was asked for first),
 * each published as soon as it is ready: a reader of the first chunk of a
 * group is answered while the rest of the group is still being evaluated. */
static void run_job(struct ck_cache *c, struct ck_eval_ctx *ctx, struct job *j)
{
	uint64_t total = 0;
	for (size_t i = 0; i < j->n; i++)
		total += j->ents[i]->len;
	pthread_mutex_lock(&c->mu);
	c->bytes += total; /* working buffers count against the budget */
	c->in_flight++;
	if (j->group)
		c->groups++;
	else
		c->regions++;
	evict(c);
	struct pooled *trimmed = pool_trim(c);
	pthread_mutex_unlock(&c->mu);
	unmap_all(trimmed);
	if (c->o.delay_ms) { /* test hook: a slow evaluation, already in flight */
		struct timespec ts = {c->o.delay_ms / 1000, (long)(c->o.delay_ms % 1000) * 1000000L};
		nanosleep(&ts, NULL);
	}
	int unpaced = !c->o.drop_served;
	for (size_t i = 0; i < j->n;) {
		if (!unpaced && i >= PACE_AHEAD)
			pace(c, j, i, &unpaced);
		size_t k = batch_len(c, j, i);
		eval_entries(c, ctx, j, i, k);
		for (size_t b = 0; b < k; b++)
			publish(c, j, i + b);
		i += k;
	}
	pthread_mutex_lock(&c->mu);
	c->in_flight--;
	for (size_t i = 0; i < j->n; i++)
		if (j->ents[i])
			j->ents[i]->refs--;
	evict(c);
	pthread_mutex_unlock(&c->mu);
	free(j->ents);
	free(j);
}

static void *evaluator(void *arg)
{
	struct ck_cache *c = arg;
	struct ck_eval_ctx ctx;
	ck_eval_ctx_init(&ctx, &c->eng);
	if (ctx.uring_fell_back) {
		pthread_mutex_lock(&c->mu);
		if (!c->fell_back++)
			log_msg(c, "io_uring is unavailable; reading with pread");
		pthread_mutex_unlock(&c->mu);
	}
	for (;;) {
		pthread_mutex_lock(&c->mu);
		while (!c->qhead && !c->stop)
			pthread_cond_wait(&c->cv, &c->mu);
		struct job *j = c->qhead;
		if (!j) {
			pthread_mutex_unlock(&c->mu);
			break;
		}
		c->qhead = j->next;
		if (!c->qhead)
			c->qtail = NULL;
		pthread_mutex_unlock(&c->mu);
		run_job(c, &ctx, j);
	}
	ck_eval_ctx_free(&ctx);
	return NULL;
}

int ck_cache_direct(struct ck_cache *c, uint32_t t, uint64_t off, uint64_t len, int *fd,
		    uint64_t *pos, int *odirect)
{
	if (!c->direct || c->direct[t] < 0)
		return 0;
	if (target_sources_changed(c, t)) {
		pthread_mutex_lock(&c->mu);
		c->errors++;
		pthread_mutex_unlock(&c->mu);
		return -EIO;
	}
	const struct ck_catalog *cat = c->plan->cat;
	uint32_t file = cat->entries[c->plan->t[t].v.p[0].src].file;
	int dfd = odirect && c->eng.dfd ? c->eng.dfd[file] : -1;
	*fd = dfd >= 0 ? dfd : cat->files[file].fd;
	if (odirect)
		*odirect = dfd >= 0;
	*pos = (uint64_t)c->direct[t] + off;
	atomic_fetch_add(&c->eng.source_bytes_read, len);
	atomic_fetch_add(&c->eng.read_requests, 1);
	atomic_fetch_add(&c->direct_reads, 1);
	return 1;
}

int ck_cache_eval_into(struct ck_cache *c, uint32_t t, uint64_t off, uint64_t len, void *dst,
		       struct ck_err *err)
{
	if (target_sources_changed(c, t)) {
		pthread_mutex_lock(&c->mu);
		c->errors++;
		pthread_mutex_unlock(&c->mu);
		return ck_fail_sys(err, EIO, "%s: a source file changed after open", c->plan->t[t].name);
	}
	pthread_mutex_lock(&c->mu);
	struct spare_ctx *x = c->spare;
	if (x)
		c->spare = x->next;
	pthread_mutex_unlock(&c->mu);
	if (!x) {
		if (!(x = calloc(1, sizeof *x)))
			return ck_fail_sys(err, ENOMEM, "evaluating %s", c->plan->t[t].name);
		ck_eval_ctx_init(&x->ctx, &c->eng);
	}
	if (c->o.delay_ms)
		usleep(c->o.delay_ms * 1000u);
	int r = ck_engine_read(&x->ctx, t, off, len, dst, err);
	if (r < 0)
		log_msg(c, err->msg);
	pthread_mutex_lock(&c->mu);
	x->next = c->spare;
	c->spare = x;
	if (r < 0)
		c->errors++;
	pthread_mutex_unlock(&c->mu);
	atomic_fetch_add(&c->streamed, 1);
	return r;
}

int ck_cache_batched(const struct ck_cache *c, uint32_t t)
{
	return ck_engine_read_span(&c->eng, t) != 0;
}

int ck_cache_streamable(const struct ck_cache *c, uint32_t t, int large)
{
	return c->stream && (c->stream[t] == STREAM_ALWAYS || (large && c->stream[t]));
}

uint64_t ck_cache_held(struct ck_cache *c, uint32_t t, uint64_t off, uint64_t len)
{
	uint64_t k = off / c->o.chunk, end = off;
	pthread_mutex_lock(&c->mu);
	while (end < off + len && find(c, t, k))
		end = ++k * c->o.chunk;
	pthread_mutex_unlock(&c->mu);
	return (end < off + len ? end : off + len) - off;
}

int ck_cache_is_direct(const struct ck_cache *c, uint32_t t)
{
	return c->direct && c->direct[t] >= 0;
}

/* next_eval[t] for prefetch_after, computed once: a backwards sweep keeps
 * the nearest evaluated target after t, and the nearest one of a group other
 * than that one's (t's own group is evaluated with t). */
static int build_next_eval(struct ck_cache *c)
{
	const struct ck_plan *p = c->plan;
	if (!(c->next_eval = malloc((p->n ? p->n : 1) * sizeof *c->next_eval)))
		return -1;
	uint32_t a = (uint32_t)p->n, b = (uint32_t)p->n; /* nearest, and nearest of another group */
	for (size_t i = p->n; i-- > 0;) {
		c->next_eval[i] = a < p->n && p->t[a].group != p->t[i].group ? a : b;
		if (p->t[i].nbytes && !ck_cache_is_direct(c, (uint32_t)i)) {
			if (a < p->n && p->t[a].group != p->t[i].group)
				b = a;
			a = (uint32_t)i;
		}
	}
	return 0;
}

/* O_DIRECT descriptors for the evaluators; files whose file system refuses
 * them are read buffered, and the log says so once. */
static int open_direct(struct ck_cache *c, struct ck_err *err)
{
	uint32_t first = 0;
	long buffered = ck_engine_open_direct(&c->eng, &first, err);
	if (buffered < 0)
		return -1;
	c->odirect_files = c->plan->cat->n_files - (uint64_t)buffered;
	if (buffered && c->o.log) {
		char msg[512];
		snprintf(msg, sizeof msg,
			 "odirect: %ld of %zu source files cannot be read with O_DIRECT (first: %s); "
			 "they are read through the page cache",
			 buffered, c->plan->cat->n_files, c->plan->cat->files[first].path);
		c->o.log(c->o.log_ctx, msg);
	}
	return 0;
}

int ck_cache_new(const struct ck_plan *plan, const struct ck_cache_opts *o, struct ck_cache **out,
		 struct ck_err *err)
{
	struct ck_cache *c = calloc(1, sizeof *c);
	if (!c || !(c->file_changed = calloc(plan->cat->n_files + 1, sizeof *c->file_changed))) {
		free(c);
		return ck_fail_sys(err, ENOMEM, "cache");
	}
	c->plan = plan;
	c->o = *o;
	if (!o->no_direct) {
		if (!(c->direct = malloc((plan->n ? plan->n : 1) * sizeof *c->direct))) {
			free(c->file_changed);
			free(c);
			return ck_fail_sys(err, ENOMEM, "cache");
		}
		for (size_t t = 0; t < plan->n; t++)
			c->direct[t] = ck_plan_direct_offset(plan, (uint32_t)t);
	}
	if (!o->no_stream && !o->gpu) {
		if (!(c->stream = malloc(plan->n ? plan->n : 1))) {
			free(c->direct);
			free(c->file_changed);
			free(c);
			return ck_fail_sys(err, ENOMEM, "cache");
		}
		for (size_t t = 0; t < plan->n; t++)
			c->stream[t] = ck_plan_streamable(plan, (uint32_t)t) ? STREAM_ALWAYS
				       : ck_plan_in_order(plan, (uint32_t)t) ? STREAM_LARGE
									     : 0;
	}
	if (build_next_eval(c) < 0) {
		free(c->stream);
		free(c->direct);
		free(c->file_changed);
		free(c);
		return ck_fail_sys(err, ENOMEM, "cache");
	}
	if (!c->o.chunk)
		c->o.chunk = 4u << 20;
	if (c->o.threads < 1)
		c->o.threads = 1;
	if (c->o.threads > 64)
		c->o.threads = 64;
	c->lru.lnext = c->lru.lprev = &c->lru;
	c->served.lnext = c->served.lprev = &c->served;
	ck_engine_init(&c->eng, plan, o->use_uring);
	if (o->window_max)
		c->eng.window_max = o->window_max;
	c->eng.gpu = o->gpu;
	if (o->gpu_min)
		c->eng.gpu_min = o->gpu_min;
	/* spare copies of served bytes (the kernel holds them too): a few
	 * chunks, so a sequential reader recycles memory soon (see pace) */
	c->served_max = c->o.cache_size / 8 < SERVED_MAX ? c->o.cache_size / 8 : SERVED_MAX;
	if (c->served_max < 4 * c->o.chunk)
		c->served_max = 4 * c->o.chunk;
	pthread_mutex_init(&c->mu, NULL);
	pthread_mutex_init(&c->pool_mu, NULL);
	pthread_cond_init(&c->cv, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&c->pace_cv, &ca);
	pthread_condattr_destroy(&ca);
	if (o->odirect && open_direct(c, err) < 0) {
		ck_cache_free(c);
		return -1;
	}
	for (; c->nth < c->o.threads; c->nth++)
		if (pthread_create(&c->th[c->nth], NULL, evaluator, c) != 0)
			break;
	if (c->nth == 0) {
		ck_cache_free(c);
		return ck_fail_sys(err, EAGAIN, "cache: cannot start evaluator threads");
	}
	*out = c;
	return 0;
}

void ck_cache_free(struct ck_cache *c)
{
	if (!c)
		return;
	pthread_mutex_lock(&c->mu);
	c->stop = 1;
	pthread_cond_broadcast(&c->cv);
	pthread_cond_broadcast(&c->pace_cv);
	pthread_mutex_unlock(&c->mu);
	for (int i = 0; i < c->nth; i++)
		pthread_join(c->th[i], NULL);
	for (size_t s = 0; s < (1u << HT_BITS); s++)
		for (struct entry *e = c->ht[s], *n; e; e = n) {
			n = e->hnext;
			free_chunk(c, e->data, e->len, e->mapped);
			free(e);
		}
	for (struct pooled *f = c->pool, *n; f; f = n) {
		n = f->next;
		munmap(f, f->n);
	}
	pthread_mutex_destroy(&c->pool_mu);
	while (c->spare) {
		struct spare_ctx *x = c->spare;
		c->spare = x->next;
		ck_eval_ctx_free(&x->ctx);
		free(x);
	}
	pthread_mutex_destroy(&c->mu);
	pthread_cond_destroy(&c->cv);
	pthread_cond_destroy(&c->pace_cv);
	ck_engine_fini(&c->eng);
	free(c->file_changed);
	free(c->direct);
	free(c->stream);
	free(c->next_eval);
	free(c);
}

/* Under the lock: a read has just touched the start of target t, as a
 * reader going through the files in order does; evaluate the next evaluated
 * group in plan order now, on an idle evaluator, so its bytes are ready when
 * the reader gets there. One group ahead of the reader, and only while the
 * cache is under half its budget. */
static void prefetch_after(struct ck_cache *c, uint32_t t)
{
	const struct ck_plan *p = c->plan;
	uint32_t u = c->next_eval[t];
	if (u >= p->n)
		return;
	uint64_t need = p->g[p->t[u].group].out_bytes;
	if (need > c->o.group_max)
		need = c->o.chunk;
	if (!find(c, u, 0) && c->bytes + need <= c->o.cache_size / 2 && schedule(c, u, 0))
		c->prefetches++;
}

/* Under the lock: a read reached chunk k of target t, whose group is too big
 * to evaluate whole (an embedding cast to F32): evaluate the next
 * READ_AHEAD chunks now, each a job of its own, so the evaluators work while
 * the kernel copies this chunk out, as readahead does along a file. Only
 * while the cache is under half its budget. */
#define READ_AHEAD 2

static void read_ahead(struct ck_cache *c, uint32_t t, uint64_t k)
{
	const struct ck_plan *p = c->plan;
	if (p->g[p->t[t].group].out_bytes <= c->o.group_max)
		return; /* evaluated whole, or being */
	uint64_t nk = (p->t[t].nbytes + c->o.chunk - 1) / c->o.chunk;
	for (uint64_t q = k + 1; q <= k + READ_AHEAD && q < nk; q++)
		if (!find(c, t, q) && c->bytes + c->o.chunk <= c->o.cache_size / 2 &&
		    schedule(c, t, q))
			c->prefetches++;
}

int ck_cache_read(struct ck_cache *c, const struct ck_span *spans, size_t n, int ahead,
		  ck_done_cb cb, void *arg)
{
	struct op *op = calloc(1, sizeof *op);
	size_t cap = 0;
	for (size_t i = 0; i < n; i++)
		if (spans[i].len && !spans[i].lit)
			cap += (spans[i].off + spans[i].len - 1) / c->o.chunk - spans[i].off / c->o.chunk + 1;
	if (op)
		op->parts = calloc(cap ? cap : 1, sizeof *op->parts);
	if (!op || !op->parts) {
		if (op)
			free(op->parts);
		free(op);
		return -ENOMEM;
	}
	op->c = c;
	op->cb = cb;
	op->arg = arg;
	atomic_store(&op->pending, 1); /* held by this call until the end */
	pthread_mutex_lock(&c->mu);
	int64_t started = -1; /* a target whose first chunk this read missed */
	for (size_t i = 0; i < n; i++) {
		const struct ck_span *s = &spans[i];
		if (s->lit) /* literal bytes are the caller's */
			continue;
		for (uint64_t pos = s->off; pos < s->off + s->len;) {
			uint64_t k = pos / c->o.chunk, in = pos - k * c->o.chunk;
			uint64_t len = c->o.chunk - in;
			if (len > s->off + s->len - pos)
				len = s->off + s->len - pos;
			struct part *pt = &op->parts[op->n];
			*pt = (struct part){NULL, in, len, s->dst + (pos - s->off), 0};
			struct entry *e = find(c, s->target, k);
			if (k == 0)
				started = s->target;
			if (e && e->state == READY) {
				c->hits++;
				if (e->served_whole) { /* asked for again: keep it after all */
					e->served_whole = 0;
					e->served = 0;
					c->served_bytes -= e->len;
				}
				e->refs++;
				lru_front(c, e);
				pt->e = e;
				pt->held = 1;
				op->n++;
			} else {
				struct waiter *w = malloc(sizeof *w);
				if (!e)
					c->misses++;
				if (w && !e)
					e = schedule(c, s->target, k);
				if (!w || !e) {
					free(w);
					atomic_store(&op->err, -ENOMEM);
				} else {
					pt->e = e;
					*w = (struct waiter){e->waiters, op, op->n++};
					e->waiters = w;
					if (c->pacing) /* a paced evaluator may have this chunk to do */
						pthread_cond_broadcast(&c->pace_cv);
					atomic_fetch_add(&op->pending, 1);
				}
			}
			pos += len;
		}
	}
	ahead = ahead && !c->o.no_prefetch;
	if (started >= 0 && ahead)
		prefetch_after(c, (uint32_t)started);
	for (size_t i = 0; i < n && ahead; i++)
		if (spans[i].len && !spans[i].lit)
			read_ahead(c, spans[i].target, (spans[i].off + spans[i].len - 1) / c->o.chunk);
	pthread_mutex_unlock(&c->mu);
	op_done(op);
	return 0;
}

void ck_cache_get_stats(struct ck_cache *c, struct ck_cache_stats *s)
{
	pthread_mutex_lock(&c->mu);
	s->groups_evaluated = c->groups;
	s->regions_evaluated = c->regions;
	s->cache_hits = c->hits;
	s->cache_misses = c->misses;
	s->prefetches = c->prefetches;
	s->odirect_files = c->odirect_files;
	s->cache_bytes = c->bytes;
	s->cache_evictions = c->evictions;
	s->cache_dropped = c->dropped;
	s->read_errors = c->errors;
	s->evaluations_in_flight = c->in_flight;
	pthread_mutex_unlock(&c->mu);
	s->source_bytes_read = atomic_load(&c->eng.source_bytes_read);
	s->gpu_reads = atomic_load(&c->eng.gpu_reads);
	s->gpu_bytes = atomic_load(&c->eng.gpu_bytes);
	s->direct_reads = atomic_load(&c->direct_reads);
	s->streamed_reads = atomic_load(&c->streamed);
	s->cache_recycled = atomic_load(&c->recycled);
	s->cache_peak_bytes = atomic_load(&c->peak);
	s->read_requests = atomic_load(&c->eng.read_requests);
}

int ck_cache_uring_fell_back(struct ck_cache *c)
{
	pthread_mutex_lock(&c->mu);
	int r = c->fell_back;
	pthread_mutex_unlock(&c->mu);
	return r;
}
