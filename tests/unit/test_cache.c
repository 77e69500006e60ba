/* The evaluation cache without FUSE: values through a cache far smaller
 * than the data, whole-group evaluation, one evaluation for concurrent
 * readers of a chunk, renames answered from the source file, a changed
 * source refused, reads evaluated into the caller's memory, and chunks
 * served whole dropped early with their memory recycled. Expected
 * bytes are computed here from the source file (transpose and column
 * halves by index arithmetic), never through the engine. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/catalog.h"
#include "exec/cache.h"
#include "map/mapping.h"
#include "plan/plan.h"
#include "testutil.h"

enum { R = 64, C = 4096 }; /* big and other: F32 [R, C], 1 MiB each */
enum { W = 1024, WP = 1536 }; /* wide: F32 [W, C], 16 MiB; padded to WP rows */
enum { NR = 4096, NC = 512 };  /* narrow: F32 [NR, NC], 8 MiB */

static char *dir, *path;
static struct ck_catalog *cat;
static struct ck_plan *plan;
static unsigned char *file;

/*   tr        = big.t()                 (evaluated, chunk by chunk)
 *   gate, up  = other.chunk(2, 1)       (column halves: one group of two)
 *   keep      = keep                    (a rename: read from the source)
 *   wt, pz    = wide.t(), pad(wide, 0, WP) (one group; pz ends in 8 MiB of zeros)
 *   zz        = wide2.t()               (its own group, after wt's in plan order)
 *   nt        = narrow.t()              (rows of 2 KiB: each chunk's runs merge) */
static const char *MAP =
	"{\"unused\": \"drop\", \"rules\": ["
	"{\"from\": \"big\", \"to\": \"tr\", \"expr\": \"x.t()\"},"
	"{\"from\": \"other\", \"to\": {\"gate\": \"gate\", \"up\": \"up\"},"
	" \"expr\": {\"gate\": \"x.chunk(2, 1)[0]\", \"up\": \"x.chunk(2, 1)[1]\"}},"
	"{\"from\": \"keep\", \"to\": \"keep\"},"
	"{\"from\": \"wide\", \"to\": {\"wt\": \"wt\", \"pz\": \"pz\"},"
	" \"expr\": {\"wt\": \"x.t()\", \"pz\": \"pad(x, 0, 1536)\"}},"
	"{\"from\": \"wide2\", \"to\": \"zz\", \"expr\": \"x.t()\"},"
	"{\"from\": \"narrow\", \"to\": \"nt\", \"expr\": \"x.t()\"}]}";

static void setup(void)
{
	dir = tu_mkdtemp();
	static const struct tu_tensor t[] = {{"big", CK_DT_F32, 2, {R, C}},
					     {"keep", CK_DT_F32, 2, {33, 77}},
					     {"other", CK_DT_F32, 2, {R, C}},
					     {"wide", CK_DT_F32, 2, {W, C}},
					     {"wide2", CK_DT_F32, 2, {W, C}},
					     {"narrow", CK_DT_F32, 2, {NR, NC}}};
	path = tu_path(dir, "model.safetensors");
	tu_write_st(path, t, 6);
	size_t len;
	file = tu_read(path, &len);
	struct ck_err err;
	struct ck_mapping *m;
	ck_assert_msg(ck_catalog_open(dir, &cat, &err) == 0, "%s", err.msg);
	ck_assert_msg(ck_mapping_parse(MAP, strlen(MAP), "t.json", &m, &err) == 0, "%s", err.msg);
	ck_assert_msg(ck_plan_build(cat, &m, 1, &plan, &err) == 0, "%s", err.msg);
	ck_mapping_free(m);
}

static void teardown(void)
{
	ck_plan_free(plan);
	ck_catalog_free(cat);
	tu_rmtree(dir);
	free(dir);
	free(path);
	free(file);
}

static uint32_t tidx(const char *name)
{
	const struct ck_target *t = ck_plan_find(plan, name);
	ck_assert_msg(t, "no target %s", name);
	return (uint32_t)(t - plan->t);
}

static const unsigned char *src(const char *name)
{
	return file + ck_catalog_find(cat, name)->t.offset;
}

/* Where a target's bytes come from in the source file, resolved once per
 * target: the checks compare every byte, and a name lookup per byte was
 * most of this test's time under ASan. */
enum ref_kind { REF_TR, REF_HALF, REF_WIDE_T, REF_NARROW_T, REF_PZ, REF_SRC };
struct ref {
	enum ref_kind kind;
	const unsigned char *s;
	uint64_t half; /* up: the second half of other's columns */
};

static struct ref ref_of(const char *name)
{
	if (!strcmp(name, "tr")) /* tr[k][r] = big[r][k] */
		return (struct ref){REF_TR, src("big"), 0};
	if (!strcmp(name, "gate") || !strcmp(name, "up")) /* [R, C/2] halves */
		return (struct ref){REF_HALF, src("other"), name[0] == 'u' ? C / 2 : 0};
	if (!strcmp(name, "wt") || !strcmp(name, "zz")) /* wt[k][r] = wide[r][k] */
		return (struct ref){REF_WIDE_T, src(name[0] == 'w' ? "wide" : "wide2"), 0};
	if (!strcmp(name, "nt")) /* nt[k][r] = narrow[r][k] */
		return (struct ref){REF_NARROW_T, src("narrow"), 0};
	if (!strcmp(name, "pz")) /* wide's rows, then zero rows */
		return (struct ref){REF_PZ, src("wide"), 0};
	return (struct ref){REF_SRC, src(name), 0};
}

/* Byte j of the target r describes, from the source file. */
static unsigned char ref_at(const struct ref *r, uint64_t j)
{
	uint64_t e = j / 4, b = j % 4;
	switch (r->kind) {
	case REF_TR: return r->s[((e % R) * C + e / R) * 4 + b];
	case REF_HALF: return r->s[((e / (C / 2)) * C + e % (C / 2) + r->half) * 4 + b];
	case REF_WIDE_T: return r->s[((e % W) * C + e / W) * 4 + b];
	case REF_NARROW_T: return r->s[((e % NR) * NC + e / NR) * 4 + b];
	case REF_PZ: return j < (uint64_t)W * C * 4 ? r->s[j] : 0;
	default: return r->s[j];
	}
}

/* The first byte of buf (target name's bytes from off) that differs. */
static void check_bytes(const char *name, const unsigned char *buf, uint64_t off, uint64_t len)
{
	struct ref r = ref_of(name);
	for (uint64_t j = 0; j < len; j++)
		if (buf[j] != ref_at(&r, off + j))
			ck_abort_msg("%s: byte %llu", name, (unsigned long long)(off + j));
}

/* A synchronous read through the cache's callback interface. */
struct sync_read {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int done, err;
	unsigned char *buf;
};

static void done_cb(void *arg, int err, const struct ck_seg *segs, size_t n)
{
	struct sync_read *s = arg;
	for (size_t k = 0; k < n; k++)
		memcpy(s->buf + segs[k].dst, segs[k].p, segs[k].len);
	pthread_mutex_lock(&s->mu);
	s->err = err;
	s->done = 1;
	pthread_cond_signal(&s->cv);
	pthread_mutex_unlock(&s->mu);
}

static int cache_read(struct ck_cache *c, uint32_t t, uint64_t off, uint64_t len,
		      unsigned char *buf)
{
	struct sync_read s = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, buf};
	struct ck_span sp = {t, off, len, 0, NULL};
	ck_assert_int_eq(ck_cache_read(c, &sp, 1, 1, done_cb, &s), 0);
	pthread_mutex_lock(&s.mu);
	while (!s.done)
		pthread_cond_wait(&s.cv, &s.mu);
	pthread_mutex_unlock(&s.mu);
	return s.err;
}

static void check_range(struct ck_cache *c, const char *name, uint64_t off, uint64_t len)
{
	unsigned char *buf = malloc(len);
	ck_assert_int_eq(cache_read(c, tidx(name), off, len, buf), 0);
	check_bytes(name, buf, off, len);
	free(buf);
}

static struct ck_cache *cache_of(struct ck_cache_opts o)
{
	struct ck_cache *c;
	struct ck_err err;
	o.use_uring = 1;
	ck_assert_msg(ck_cache_new(plan, &o, &c, &err) == 0, "%s", err.msg);
	return c;
}

/* 1 MiB of a transposed tensor through 64 KiB of cache in random ranges:
 * every byte right, entries evicted, the budget kept. */
START_TEST(values_through_a_small_cache)
{
	struct ck_cache *c = cache_of((struct ck_cache_opts){
		.cache_size = 64 << 10, .chunk = 4 << 10, .threads = 2});
	unsigned seed = 7;
	uint64_t size = plan->t[tidx("tr")].nbytes;
	for (int k = 0; k < 300; k++) {
		uint64_t off = (uint64_t)rand_r(&seed) % size;
		uint64_t len = 1 + (uint64_t)rand_r(&seed) % 20000;
		check_range(c, "tr", off, len < size - off ? len : size - off);
	}
	check_range(c, "tr", 100, 50); /* twice: the second is a hit */
	struct ck_cache_stats s1, s2;
	ck_cache_get_stats(c, &s1);
	check_range(c, "tr", 100, 50);
	ck_cache_get_stats(c, &s2);
	ck_assert_uint_eq(s2.cache_hits, s1.cache_hits + 1);
	ck_assert_uint_eq(s2.cache_misses, s1.cache_misses);
	ck_assert_uint_gt(s2.cache_evictions, 0);
	ck_assert_uint_le(s2.cache_bytes, 64 << 10);
	ck_assert_uint_eq(s2.groups_evaluated, 0); /* group_max 0: chunk by chunk */
	ck_cache_free(c);
}
END_TEST

/* A miss in a group that fits group_max evaluates the group once: the
 * sibling is then served from the cache without a miss. */
START_TEST(group_evaluated_whole)
{
	struct ck_cache *c = cache_of((struct ck_cache_opts){
		.cache_size = 4 << 20, .chunk = 64 << 10, .group_max = 2 << 20, .threads = 2,
		.no_prefetch = 1});
	check_range(c, "gate", 1000, 100);
	struct ck_cache_stats s1, s2;
	ck_cache_get_stats(c, &s1);
	ck_assert_uint_eq(s1.groups_evaluated, 1);
	ck_assert_uint_eq(s1.regions_evaluated, 0);
	check_range(c, "up", 0, plan->t[tidx("up")].nbytes);
	check_range(c, "gate", 0, plan->t[tidx("gate")].nbytes);
	ck_cache_get_stats(c, &s2);
	ck_assert_uint_eq(s2.groups_evaluated, 1);
	ck_assert_uint_eq(s2.cache_misses, s1.cache_misses);
	ck_cache_free(c);
}
END_TEST

struct reader {
	struct ck_cache *c;
	unsigned char buf[4096];
	int err;
};

static void *read_one_chunk(void *p)
{
	struct reader *r = p;
	r->err = cache_read(r->c, tidx("tr"), 8192, sizeof r->buf, r->buf);
	return NULL;
}

/* Readers of a chunk being evaluated wait for that one evaluation. */
START_TEST(concurrent_readers_share_one_evaluation)
{
	struct ck_cache *c = cache_of((struct ck_cache_opts){
		.cache_size = 1 << 20, .chunk = 4 << 10, .threads = 4, .delay_ms = 300,
		.no_prefetch = 1});
	struct reader rd[4];
	pthread_t tid[4];
	for (int k = 0; k < 4; k++) {
		rd[k].c = c;
		pthread_create(&tid[k], NULL, read_one_chunk, &rd[k]);
	}
	for (int k = 0; k < 4; k++) {
		pthread_join(tid[k], NULL);
		ck_assert_int_eq(rd[k].err, 0);
		check_bytes("tr", rd[k].buf, 8192, sizeof rd[k].buf);
	}
	struct ck_cache_stats s;
	ck_cache_get_stats(c, &s);
	ck_assert_uint_eq(s.regions_evaluated, 1);
	ck_assert_uint_eq(s.cache_misses, 1); /* the others waited on it (or hit, if late) */
	ck_assert_uint_eq(s.source_bytes_read, 4096);
	ck_cache_free(c);
}
END_TEST

/* A rename is answered from its source file (unless no_direct). */
START_TEST(renames_read_from_the_source)
{
	struct ck_cache *c = cache_of((struct ck_cache_opts){.cache_size = 1 << 20, .threads = 1});
	uint32_t t = tidx("keep");
	ck_assert_int_eq(ck_cache_is_direct(c, t), 1);
	ck_assert_int_eq(ck_cache_is_direct(c, tidx("tr")), 0);
	int fd;
	uint64_t pos;
	unsigned char buf[1000];
	ck_assert_int_eq(ck_cache_direct(c, t, 123, sizeof buf, &fd, &pos, NULL), 1);
	ck_assert_int_eq(pread(fd, buf, sizeof buf, (off_t)pos), (ssize_t)sizeof buf);
	check_bytes("keep", buf, 123, sizeof buf);
	ck_cache_free(c);
	c = cache_of((struct ck_cache_opts){.cache_size = 1 << 20, .threads = 1, .no_direct = 1});
	ck_assert_int_eq(ck_cache_is_direct(c, t), 0);
	check_range(c, "keep", 0, plan->t[t].nbytes); /* evaluated instead, same bytes */
	ck_cache_free(c);
}
END_TEST

/* A source whose mtime changed after the cache opened: evaluated and
 * direct reads fail with EIO (nothing stale is served). */
START_TEST(changed_source_refused)
{
	struct ck_cache *c = cache_of((struct ck_cache_opts){.cache_size = 1 << 20, .threads = 1});
	check_range(c, "tr", 0, 100);
	struct timespec ts[2] = {{1000000, 0}, {1000000, 0}};
	ck_assert_int_eq(utimensat(AT_FDCWD, path, ts, 0), 0);
	unsigned char buf[100];
	ck_assert_int_eq(cache_read(c, tidx("gate"), 0, sizeof buf, buf), -EIO);
	int fd;
	uint64_t pos;
	ck_assert_int_eq(ck_cache_direct(c, tidx("keep"), 0, 10, &fd, &pos, NULL), -EIO);
	ck_cache_free(c);
}
END_TEST

/* Evaluated straight into the caller's memory: no cache entry, and
 * padding written as zeros over whatever the memory held. */
START_TEST(eval_into_the_callers_buffer)
{
	struct ck_cache *c = cache_of((struct ck_cache_opts){.cache_size = 1 << 20, .threads = 1});
	uint64_t off = 333, len = 700000;
	unsigned char *buf = malloc(len);
	struct ck_err err;
	ck_assert_msg(ck_cache_eval_into(c, tidx("tr"), off, len, buf, &err) == 0, "%s", err.msg);
	check_bytes("tr", buf, off, len);
	/* padding is written too: the caller's memory is not zeroed for us */
	uint64_t pz = plan->t[tidx("pz")].nbytes, at = pz - len - 8;
	memset(buf, 0xAA, len);
	ck_assert_msg(ck_cache_eval_into(c, tidx("pz"), at, len, buf, &err) == 0, "%s", err.msg);
	check_bytes("pz", buf, at, len);
	struct ck_cache_stats s;
	ck_cache_get_stats(c, &s);
	ck_assert_uint_eq(s.streamed_reads, 2);
	ck_assert_uint_eq(s.cache_bytes, 0);
	free(buf);
	ck_cache_free(c);
}
END_TEST

/* Read front to back in 1 MiB reads, as the kernel's readahead asks. */
static void read_through(struct ck_cache *c, const char *name, uint64_t from, uint64_t to)
{
	for (uint64_t off = from; off < to; off += 1 << 20)
		check_range(c, name, off, to - off < (1 << 20) ? to - off : 1 << 20);
}

/* drop_served: chunks a reader has had whole (the kernel keeps them) go
 * first, beyond served_max (here max(cache_size / 8, 4 chunks) = 8 MiB)
 * and well before the 64 MiB budget; the next chunks reuse their memory:
 * chunks of 2 MiB (huge-page mappings) and, loop 1, of 512 KiB (pooled
 * mappings of a power-of-two size). Recycled memory shows nothing old:
 * pz's zero rows are evaluated into chunks that held wt's bytes. A dropped
 * chunk read again is evaluated again; a served chunk read again is kept
 * after all. Without drop_served nothing is dropped under budget and
 * nothing recycled. */
START_TEST(served_chunks_dropped_and_recycled)
{
	uint64_t chunk = _i ? 512 << 10 : 2 << 20;
	/* a paced job waits up to 5 s for its reader (50 ms by default): on a
	 * busy test machine a reader held longer than 50 ms let the evaluators
	 * run unpaced, into fresh memory, and fewer chunks were recycled */
	struct ck_cache_opts o = {.cache_size = 64 << 20,
				  .chunk = chunk,
				  .threads = 2,
				  .no_prefetch = 1,
				  .drop_served = 1,
				  .pace_wait_ms = 5000};
	struct ck_cache *c = cache_of(o);
	uint64_t n = plan->t[tidx("wt")].nbytes, npz = plan->t[tidx("pz")].nbytes;
	uint64_t kept = (8 << 20) / chunk, nw = n / chunk, np = npz / chunk;
	read_through(c, "wt", 0, n);
	struct ck_cache_stats s;
	ck_cache_get_stats(c, &s);
	ck_assert_uint_eq(s.cache_evictions, 0);
	ck_assert_uint_eq(s.cache_dropped, nw - kept); /* 2 MiB: 8 chunks served, 4 kept */
	ck_assert_uint_ge(s.cache_recycled, nw - kept - 2); /* 2 threads: 2 may run ahead */
	ck_assert_uint_eq(s.cache_bytes, 8 << 20);
	read_through(c, "pz", 0, npz);
	ck_cache_get_stats(c, &s);
	ck_assert_uint_eq(s.cache_dropped, nw + np - kept); /* the oldest go: wt's, then pz's */
	ck_assert_uint_ge(s.cache_recycled, nw - kept - 2 + np - kept - 2); /* pz: mostly recycled */
	/* pz's last chunk read again: a hit, and no longer a spare, so it
	 * stays while wt's first half is read (and evaluated) again */
	uint64_t misses = s.cache_misses;
	check_range(c, "pz", npz - 100, 100);
	read_through(c, "wt", 0, 8 << 20);
	ck_cache_get_stats(c, &s);
	ck_assert_uint_eq(s.cache_misses, misses + kept); /* wt's dropped chunks, again */
	check_range(c, "pz", npz - 100, 100);
	struct ck_cache_stats s2;
	ck_cache_get_stats(c, &s2);
	ck_assert_uint_eq(s2.cache_misses, s.cache_misses);
	ck_cache_free(c);

	o.drop_served = 0;
	c = cache_of(o);
	read_through(c, "wt", 0, n);
	ck_cache_get_stats(c, &s);
	ck_assert_uint_eq(s.cache_dropped, 0);
	ck_assert_uint_eq(s.cache_recycled, 0);
	ck_assert_uint_eq(s.cache_bytes, n);
	ck_cache_free(c);
}
END_TEST

/* Targets front to back in 1 MiB reads, 2 ms apart (the kernel copying
 * each reply out), one after the other as a loader reads them, then every
 * byte checked (checking in between would pause the reader). */
static void read_slowly(struct ck_cache *c, const char *const *names, int n)
{
	unsigned char *got[4];
	for (int i = 0; i < n; i++) {
		uint64_t len = plan->t[tidx(names[i])].nbytes;
		got[i] = malloc(len);
		for (uint64_t off = 0; off < len; off += 1 << 20) {
			uint64_t l = len - off < (1 << 20) ? len - off : 1 << 20;
			ck_assert_int_eq(cache_read(c, tidx(names[i]), off, l, got[i] + off), 0);
			usleep(2000);
		}
	}
	for (int i = 0; i < n; i++) {
		check_bytes(names[i], got[i], 0, plan->t[tidx(names[i])].nbytes);
		free(got[i]);
	}
}

/* Pacing (drop_served): a reader going through the wt+pz group (40 chunks
 * of 1 MiB) a read at a time, slower than the evaluator, keeps a few
 * chunks' memory (8 spares + 4 evaluated ahead, and slack), not the
 * group's 40 MiB, every byte right; without drop_served the whole group is
 * held. A reader that leaves a group after its first chunk does not hold
 * the evaluator: the rest is evaluated anyway and read back as hits. */
START_TEST(group_paced_to_its_reader)
{
	/* a paced job waits up to 5 s for its reader here (50 ms by default):
	 * a test machine busy with other tests may hold the reader that long */
	struct ck_cache_opts o = {.cache_size = 64 << 20, .chunk = 1 << 20, .threads = 1,
				  .group_max = 64 << 20, .no_prefetch = 1, .drop_served = 1,
				  .pace_wait_ms = 5000};
	uint64_t nw = plan->t[tidx("wt")].nbytes, np = plan->t[tidx("pz")].nbytes;
	for (int paced = 1; paced >= 0; paced--) {
		o.drop_served = paced;
		struct ck_cache *c = cache_of(o);
		read_slowly(c, (const char *[]){"wt", "pz"}, 2);
		struct ck_cache_stats s;
		ck_cache_get_stats(c, &s);
		ck_assert_uint_eq(s.groups_evaluated, 1);
		if (paced)
			ck_assert_msg(s.cache_peak_bytes <= (16u << 20), "peak %llu",
				      (unsigned long long)s.cache_peak_bytes);
		else
			ck_assert_uint_eq(s.cache_peak_bytes, nw + np);
		ck_cache_free(c);
	}
	o.drop_served = 1;
	o.pace_wait_ms = 0; /* the default: the reader below leaves for good */
	struct ck_cache *c = cache_of(o);
	check_range(c, "wt", 0, 100);
	struct ck_cache_stats s;
	for (int t = 0; t < 400; t++) { /* 2 s at most; PACE_WAIT_MS is 50 */
		ck_cache_get_stats(c, &s);
		if (!s.evaluations_in_flight)
			break;
		usleep(5000);
	}
	ck_assert_uint_eq(s.evaluations_in_flight, 0);
	check_range(c, "pz", np - (1 << 20), 1 << 20);
	struct ck_cache_stats s2;
	ck_cache_get_stats(c, &s2);
	ck_assert_uint_eq(s2.cache_misses, s.cache_misses); /* evaluated by the first job */
	ck_cache_free(c);
}
END_TEST

/* A group evaluated ahead of a reader still busy with the one before it (a
 * prefetch) is paced too: while the reader goes slowly through wt and pz,
 * zz's job keeps a few chunks (16 MiB of spares, 4-5 chunks ahead in each
 * job, tr's one: 27-29 MiB measured), not its whole 16 MiB (40), until the
 * reader gets there; every byte right. */
START_TEST(prefetch_paced_behind_a_busy_reader)
{
	struct ck_cache_opts o = {.cache_size = 256 << 20, .chunk = 1 << 20, .threads = 2,
				  .group_max = 64 << 20, .drop_served = 1, .pace_wait_ms = 5000};
	struct ck_cache *c = cache_of(o);
	read_slowly(c, (const char *[]){"wt", "pz", "zz"}, 3);
	struct ck_cache_stats s;
	ck_cache_get_stats(c, &s);
	ck_assert_uint_ge(s.prefetches, 1);
	ck_assert_uint_eq(s.groups_evaluated, 3); /* pz+wt, zz, tr */
	ck_assert_msg(s.cache_peak_bytes <= (34u << 20), "peak %llu",
		      (unsigned long long)s.cache_peak_bytes);
	ck_cache_free(c);
}
END_TEST

/* A group too big to evaluate whole (wt+pz: 40 MiB over a 4 MiB group_max)
 * is evaluated by region; a reader going through wt front to back finds
 * each next chunk already evaluated or being evaluated (read ahead): one
 * miss, the first. With no_prefetch every chunk is a miss. */
START_TEST(regions_read_ahead)
{
	struct ck_cache_opts o = {.cache_size = 64 << 20, .chunk = 1 << 20, .threads = 2,
				  .group_max = 4 << 20, .drop_served = 1};
	for (int ahead = 1; ahead >= 0; ahead--) {
		o.no_prefetch = !ahead;
		struct ck_cache *c = cache_of(o);
		read_slowly(c, (const char *[]){"wt"}, 1);
		struct ck_cache_stats s;
		ck_cache_get_stats(c, &s);
		uint64_t nw = plan->t[tidx("wt")].nbytes >> 20;
		ck_assert_uint_eq(s.groups_evaluated, 0);
		ck_assert_uint_ge(s.regions_evaluated, nw);
		ck_assert_uint_eq(s.cache_misses, ahead ? 1 : nw);
		if (ahead) /* and zz's first chunk, the next group in plan order */
			ck_assert_uint_ge(s.prefetches, nw - 1);
		else
			ck_assert_uint_eq(s.prefetches, 0);
		ck_cache_free(c);
	}
}
END_TEST

/* A transposed source larger than the engine's window, with rows short
 * enough that a chunk's runs merge into whole-window reads: every chunk
 * would read the whole source (128 chunks, 1 GiB for 8 MiB); consecutive
 * chunks of the group are evaluated in one read as far as a quarter of the
 * budget shared by the evaluators goes, at least a window's worth: with a
 * 64 MiB cache the source is read once, with 16 MiB and 2 evaluators (2 MiB
 * each) once per 32 chunks. Every byte right. */
START_TEST(large_transpose_read_in_batches)
{
	uint64_t cache = _i ? 16 << 20 : 64 << 20;
	int threads = _i ? 2 : 1;
	struct ck_cache *c = cache_of((struct ck_cache_opts){
		.cache_size = cache, .chunk = 64 << 10, .group_max = 64 << 20, .threads = threads,
		.no_prefetch = 1, .window_max = 1 << 20});
	check_range(c, "nt", 0, plan->t[tidx("nt")].nbytes);
	struct ck_cache_stats s;
	ck_cache_get_stats(c, &s);
	uint64_t src_bytes = (uint64_t)NR * NC * 4, reads = src_bytes / (cache / 4 / (uint64_t)threads);
	if (reads < 1)
		reads = 1;
	ck_assert_msg(s.source_bytes_read >= src_bytes && s.source_bytes_read <= reads * src_bytes,
		      "%llu source bytes read for an %llu-byte transpose (%llu reads of it at most)",
		      (unsigned long long)s.source_bytes_read, (unsigned long long)src_bytes,
		      (unsigned long long)reads);
	ck_cache_free(c);
}
END_TEST

/* The same transpose in a group above group_max, evaluated by region: the
 * first read's job takes the chunks after it as far as the budget's share
 * goes (here all 128: one read of the source, where a job per chunk read
 * all of it for each, 128x), and later reads find them. Every byte right. */
START_TEST(large_transpose_regions_batched)
{
	struct ck_cache *c = cache_of((struct ck_cache_opts){
		.cache_size = 64 << 20, .chunk = 64 << 10, .group_max = 1 << 20, .threads = 1,
		.no_prefetch = 1, .window_max = 1 << 20});
	check_range(c, "nt", 0, plan->t[tidx("nt")].nbytes);
	struct ck_cache_stats s;
	ck_cache_get_stats(c, &s);
	ck_assert_uint_eq(s.source_bytes_read, (uint64_t)NR * NC * 4);
	ck_assert_uint_eq(s.regions_evaluated, 1);
	ck_cache_free(c);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("cache");
	TCase *tc = tcase_create("cache");
	tcase_set_timeout(tc, 120);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, values_through_a_small_cache);
	tcase_add_test(tc, group_evaluated_whole);
	tcase_add_test(tc, concurrent_readers_share_one_evaluation);
	tcase_add_test(tc, renames_read_from_the_source);
	tcase_add_test(tc, changed_source_refused);
	tcase_add_test(tc, eval_into_the_callers_buffer);
	tcase_add_loop_test(tc, served_chunks_dropped_and_recycled, 0, 2);
	tcase_add_test(tc, group_paced_to_its_reader);
	tcase_add_test(tc, prefetch_paced_behind_a_busy_reader);
	tcase_add_test(tc, regions_read_ahead);
	tcase_add_loop_test(tc, large_transpose_read_in_batches, 0, 2);
	tcase_add_test(tc, large_transpose_regions_batched);
	suite_add_tcase(s, tc);
	return tu_run_suite(s, 1);
}
