#include "convert.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../ckpt/st_writer.h"
#include "../util/json_strict.h"
#include "../util/jsonw.h"
#include "engine.h"
#include "outdir.h"

#define CHUNK (16u << 20) /* output bytes per engine call */
/* Most bytes of a block of a large transpose (write_blocks), and the row
 * segment a block aims at: whole pages per pwrite. */
#define BLOCK_MAX (64u << 20)
#define BLOCK_SEG 4096

/* One output file: its vfile, written under a temp name until commit. */
struct outf {
	const struct ck_vfile *v;
	char *tmp, *final;
	char *shown; /* in messages: where the user will look for it */
	int fd;
};

/* A target span of some file: the unit of work the threads share. */
struct item {
	uint32_t file;
	uint32_t part;
};

struct job {
	const struct ck_plan *plan;
	uint64_t chunk, block_max; /* CHUNK and BLOCK_MAX unless a test lowers them */
	struct ck_engine eng;
	struct outf *files;
	struct item *items;
	size_t n_items;
	atomic_size_t next;
	atomic_uint_fast64_t done;
	atomic_int failed;
	const atomic_int *cancel; /* the options' */
	const char *shown_dir;	  /* the options' */
	pthread_mutex_t err_lock;
	struct ck_err err;
};

static int interrupted(const struct job *j, struct ck_err *err)
{
	if (j->cancel && atomic_load(j->cancel))
		return ck_fail(err, CK_E_SYS, "convert: interrupted");
	return 0;
}

static int pwrite_all(int fd, const void *buf, size_t len, uint64_t off)
{
	size_t w = 0;
	while (w < len) {
		ssize_t r = pwrite(fd, (const char *)buf + w, len - w, (off_t)(off + w));
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			if (r == 0)
				errno = EIO;
			return -1;
		}
		w += (size_t)r;
	}
	return 0;
}

/* A whole target that transposes a source larger than the engine's window
 * (ck_engine_block_dim: dim D), in blocks along D, every other dim whole:
 * each block reads its source rows once, where each linear chunk would read
 * the whole source again (a 32000 x 2048 lm_head.t(): 15x its bytes). A
 * block's rows go to their places in the file, a pwrite each. 1: not such
 * a target (the caller reads linearly), 0 done, -1 err. */
static int write_blocks(struct job *j, struct ck_eval_ctx *c, const struct outf *f,
			const struct ck_vpart *pt, struct ck_err *err)
{
	const struct ck_target *t = &j->plan->t[pt->target];
	int dim = ck_engine_block_dim(&j->eng, pt->target);
	if (dim < 0 || pt->src != 0 || pt->len != t->nbytes)
		return 1;
	uint64_t es = ck_dtype_size(t->v.dtype);
	struct ck_blocks b;
	ck_blocks_init(&b, t, dim);
	/* a row segment of a page or more, as many as a chunk holds, within
	 * the block bound */
	uint64_t row = b.inner * es, k = j->chunk / (b.rows * row);
	if (k * row < BLOCK_SEG)
		k = (BLOCK_SEG + row - 1) / row;
	if (k * b.rows * row > j->block_max)
		k = j->block_max / (b.rows * row);
	if (k == 0)
		return 1;
	b.k = k < b.n ? k : b.n;
	unsigned char *buf = malloc(b.k * b.rows * row);
	if (!buf)
		return ck_fail_sys(err, ENOMEM, "convert: a block of \"%s\"", t->name);
	int rc = 0;
	while (rc == 0 && (rc = interrupted(j, err)) == 0 && ck_blocks_next(&b)) {
		uint64_t seg = (b.k1 - b.k0) * row;
		rc = ck_engine_read_box(c, pt->target, b.lo, b.hi, buf, err);
		for (uint64_t r = 0; r < b.rows && rc == 0; r++)
			if (pwrite_all(f->fd, buf + r * seg, seg, pt->off + (r * b.n + b.k0) * row) < 0)
				rc = ck_fail_sys(err, errno, "%s: write failed", f->shown);
		if (rc == 0)
			atomic_fetch_add(&j->done, b.rows * seg);
	}
	free(buf);
	return rc;
}

/* Evaluate one target span into its file in bounded chunks. */
static int write_item(struct job *j, struct ck_eval_ctx *c, const struct item *it,
		      unsigned char *buf, struct ck_err *err)
{
	const struct outf *f = &j->files[it->file];
	const struct ck_vpart *pt = &f->v->parts[it->part];
	int r = write_blocks(j, c, f, pt, err);
	if (r <= 0)
		return r;
	for (uint64_t off = 0; off < pt->len; off += j->chunk) {
		uint64_t len = pt->len - off < j->chunk ? pt->len - off : j->chunk;
		if (interrupted(j, err) < 0 ||
		    ck_engine_read(c, pt->target, pt->src + off, len, buf, err) < 0)
			return -1;
		if (pwrite_all(f->fd, buf, len, pt->off + off) < 0)
			return ck_fail_sys(err, errno, "%s: write failed", f->shown);
		atomic_fetch_add(&j->done, len);
	}
	return 0;
}

static void *worker(void *arg)
{
	struct job *j = arg;
	struct ck_eval_ctx c;
	ck_eval_ctx_init(&c, &j->eng);
	unsigned char *buf = malloc(j->chunk);
	struct ck_err err;
	int rc = buf ? 0 : ck_fail_sys(&err, ENOMEM, "convert buffer");
	while (rc == 0) {
		size_t k = atomic_fetch_add(&j->next, 1);
		if (k >= j->n_items || atomic_load(&j->failed))
			break;
		rc = write_item(j, &c, &j->items[k], buf, &err);
	}
	if (rc < 0) {
		pthread_mutex_lock(&j->err_lock);
		if (!atomic_exchange(&j->failed, 1))
			j->err = err;
		pthread_mutex_unlock(&j->err_lock);
	}
	free(buf);
	ck_eval_ctx_free(&c);
	return NULL;
}

static void progress(struct job *j, uint64_t total, struct timespec *t0, int final)
{
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	double dt = (double)(now.tv_sec - t0->tv_sec) + (double)(now.tv_nsec - t0->tv_nsec) / 1e9;
	uint64_t done = atomic_load(&j->done);
	double rate = dt > 0 ? (double)done / dt : 0;
	double eta = rate > 0 ? (double)(total - done) / rate : 0;
	int w = 30, fill = total ? (int)((double)done / (double)total * w) : w;
	char bar[64];
	for (int i = 0; i < w; i++)
		bar[i] = i < fill ? '#' : '.';
	bar[w] = '\0';
	fprintf(stderr, "\r[%s] %.2f/%.2f GiB  %.0f MiB/s  ETA %d:%02d%s", bar,
		(double)done / (1 << 30), (double)total / (1 << 30), rate / (1 << 20),
		(int)eta / 60, (int)eta % 60, final ? "\n" : "");
}

/* A rename is durable once its directory is synced. */
static void fsync_dir(const char *dir)
{
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd >= 0) {
		fsync(dfd);
		close(dfd);
	}
}

static char *path2(const char *dir, const char *a, const char *b)
{
	size_t n = strlen(dir) + strlen(a) + strlen(b) + 2;
	char *p = malloc(n);
	if (p)
		snprintf(p, n, "%s/%s%s", dir, a, b);
	return p;
}

static int write_all(int fd, const void *buf, size_t len)
{
	size_t w = 0;
	while (w < len) {
		ssize_t r = write(fd, (const char *)buf + w, len - w);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		w += (size_t)r;
	}
	return 0;
}

/* Write a small file through a temp name; the rename happens in commit. */
static int write_small(const char *tmp, const char *data, size_t len, struct ck_err *err)
{
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return ck_fail_sys(err, errno, "%s", tmp);
	if (write_all(fd, data, len) < 0 || fsync(fd) < 0) {
		int e = errno;
		close(fd);
		return ck_fail_sys(err, e, "%s: write failed", tmp);
	}
	return close(fd) < 0 ? ck_fail_sys(err, errno, "%s", tmp) : 0;
}

int ck_write_file_atomic(const char *dir, const char *name, const void *data, size_t len,
			 struct ck_err *err)
{
	char *tmp = path2(dir, CK_TMP_TAG, name), *final = path2(dir, "", name);
	int rc = -1;
	if (!tmp || !final)
		ck_fail_sys(err, ENOMEM, "%s", name);
	else if (write_small(tmp, data, len, err) == 0) {
		if (rename(tmp, final) < 0) {
			ck_fail_sys(err, errno, "%s", final);
			unlink(tmp);
		} else {
			fsync_dir(dir);
			rc = 0;
		}
	}
	free(tmp);
	free(final);
	return rc;
}

/* Evaluate every target span of the files with the option's threads,
 * drawing progress if asked. */
static int run_workers(struct job *j, const struct ck_convert_opts *o, uint64_t total,
		       struct ck_err *err)
{
	int nth = o->threads > 0 ? o->threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
	if (nth < 1)
		nth = 1;
	if (nth > 64)
		nth = 64;
	pthread_t th[64];
	struct timespec t0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	int started = 0;
	for (; started < nth; started++)
		if (pthread_create(&th[started], NULL, worker, j) != 0)
			break;
	if (started == 0)
		return ck_fail_sys(err, EAGAIN, "convert: cannot start threads");
	if (o->progress) {
		while (atomic_load(&j->done) < total && !atomic_load(&j->failed)) {
			progress(j, total, &t0, 0);
			struct timespec ts = {0, 200 * 1000 * 1000};
			nanosleep(&ts, NULL);
			size_t nx = atomic_load(&j->next);
			if (nx >= j->n_items + (size_t)started)
				break;
		}
	}
	for (int i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	if (o->progress)
		progress(j, total, &t0, 1);
	if (atomic_load(&j->failed)) {
		*err = j->err;
		return -1;
	}
	return 0;
}

/* Open every file under its temp name at its final size with its literal
 * bytes in place, and list the target spans left to evaluate. */
static int prepare(struct job *j, const struct ck_out_file *in, size_t n, const char *outdir,
		   uint64_t *total, struct ck_err *err)
{
	size_t n_items = 0;
	for (size_t k = 0; k < n; k++)
		for (size_t p = 0; p < in[k].v->n; p++)
			n_items += in[k].v->parts[p].target != CK_VLIT;
	if (!(j->items = calloc(n_items ? n_items : 1, sizeof *j->items)))
		return ck_fail_sys(err, ENOMEM, "convert");
	char tmpname[64];
	snprintf(tmpname, sizeof tmpname, CK_TMP_TAG "%d-", (int)getpid());
	for (size_t k = 0; k < n; k++) {
		struct outf *f = &j->files[k];
		const struct ck_vfile *v = f->v = in[k].v;
		if (!(f->tmp = path2(outdir, tmpname, in[k].name)) ||
		    !(f->final = path2(outdir, "", in[k].name)) ||
		    !(f->shown = path2(j->shown_dir ? j->shown_dir : outdir, "", in[k].name)))
			return ck_fail_sys(err, ENOMEM, "convert");
		f->fd = open(f->tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
		if (f->fd < 0 || ftruncate(f->fd, (off_t)v->size) < 0)
			return ck_fail_sys(err, errno, "%s: cannot write", f->shown);
		for (size_t p = 0; p < v->n; p++) {
			const struct ck_vpart *pt = &v->parts[p];
			if (pt->target != CK_VLIT) {
				j->items[j->n_items++] = (struct item){(uint32_t)k, (uint32_t)p};
				*total += pt->len;
			} else if (pwrite_all(f->fd, v->blob + pt->src, pt->len, pt->off) < 0) {
				return ck_fail_sys(err, errno, "%s: write failed", f->shown);
			}
		}
	}
	return 0;
}

/* Every file complete: sync, then rename into place in the given order. */
static int commit(struct job *j, size_t n, const char *outdir, struct ck_err *err)
{
	for (size_t k = 0; k < n; k++) {
		struct outf *f = &j->files[k];
		int bad = fsync(f->fd) < 0;
		bad |= close(f->fd) < 0;
		f->fd = -1;
		if (bad)
			return ck_fail_sys(err, errno, "%s: write failed", f->shown);
	}
	for (size_t k = 0; k < n; k++)
		if (rename(j->files[k].tmp, j->files[k].final) < 0)
			return ck_fail_sys(err, errno, "%s: cannot put it in place",
					   j->files[k].shown);
	fsync_dir(outdir);
	return 0;
}

int ck_convert_files(const struct ck_plan *plan, const struct ck_out_file *files, size_t n,
		     const char *outdir, const struct ck_convert_opts *o,
		     struct ck_convert_stats *stats, struct ck_err *err)
{
	struct job j;
	memset(&j, 0, sizeof j);
	j.plan = plan;
	j.cancel = o->cancel;
	j.shown_dir = o->shown_dir;
	pthread_mutex_init(&j.err_lock, NULL);
	ck_engine_init(&j.eng, plan, o->use_uring);
	j.chunk = o->chunk ? o->chunk : CHUNK;
	j.block_max = o->block ? o->block : BLOCK_MAX;
	if (o->window_max)
		j.eng.window_max = o->window_max;
	j.eng.gpu = o->gpu;
	if (o->gpu_min)
		j.eng.gpu_min = o->gpu_min;
	int rc = -1;
	uint64_t total = 0;
	long buffered = o->odirect ? ck_engine_open_direct(&j.eng, NULL, err) : 0;
	if (buffered < 0)
		goto out;
	if (!(j.files = calloc(n ? n : 1, sizeof *j.files))) {
		ck_fail_sys(err, ENOMEM, "convert");
		goto out;
	}
	for (size_t k = 0; k < n; k++)
		j.files[k].fd = -1;
	if (ck_mkdirs(outdir, err) < 0 || prepare(&j, files, n, outdir, &total, err) < 0 ||
	    run_workers(&j, o, total, err) < 0 || interrupted(&j, err) < 0 ||
	    commit(&j, n, outdir, err) < 0)
		goto out;
	if (stats) {
		stats->bytes_written = 0;
		for (size_t k = 0; k < n; k++)
			stats->bytes_written += files[k].v->size;
		stats->source_bytes_read = atomic_load(&j.eng.source_bytes_read);
		stats->n_files = (int)n;
		stats->odirect_buffered = buffered;
	}
	rc = 0;
out:
	ck_engine_fini(&j.eng);
	for (size_t k = 0; j.files && k < n; k++) {
		struct outf *f = &j.files[k];
		if (f->fd >= 0)
			close(f->fd);
		if (rc < 0 && f->tmp) /* already renamed: ENOENT */
			unlink(f->tmp);
		free(f->tmp);
		free(f->final);
		free(f->shown);
	}
	free(j.files);
	free(j.items);
	pthread_mutex_destroy(&j.err_lock);
	return rc;
}

int ck_convert_vfile(const struct ck_plan *plan, const struct ck_vfile *vf, const char *outdir,
		     const char *name, const struct ck_convert_opts *o,
		     struct ck_convert_stats *stats, struct ck_err *err)
{
	struct ck_out_file f = {name, vf};
	return ck_convert_files(plan, &f, 1, outdir, o, stats, err);
}

int ck_convert(const struct ck_plan *plan, const char *outdir, const struct ck_convert_opts *o,
	       struct ck_convert_stats *stats, struct ck_err *err)
{
	struct ck_flat_set set;
	uint64_t max = o->file_name ? 0 : o->max_shard_size;
	if (ck_flat_set_build(plan, max, o->file_name ? o->file_name : "model.safetensors", &set,
			      err) < 0)
		return -1;
	struct ck_vfile config = {0};
	struct ck_out_file *f = calloc(set.n + 2, sizeof *f);
	int rc = -1;
	size_t n = 0;
	if (!f || (o->config && ck_vfile_lit(&config, o->config, o->config_len) < 0)) {
		ck_fail_sys(err, ENOMEM, "convert");
		goto out;
	}
	for (size_t k = 0; k < set.n; k++)
		f[n++] = (struct ck_out_file){set.names[k], &set.files[k].v};
	if (set.index.size)
		f[n++] = (struct ck_out_file){"model.safetensors.index.json", &set.index};
	if (o->config)
		f[n++] = (struct ck_out_file){"config.json", &config};
	rc = ck_convert_files(plan, f, n, outdir, o, stats, err);
out:
	free(f);
	ck_vfile_free(&config);
	ck_flat_set_free(&set);
	return rc;
}
