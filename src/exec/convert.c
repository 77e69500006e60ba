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

struct shard {
	char name[64];
	char *tmp, *final;
	int fd;
	size_t first, count; /* targets [first, first+count) */
	uint64_t header_len;
};

struct job {
	const struct ck_plan *plan;
	struct ck_engine eng;
	struct shard *shards;
	uint32_t *shard_of;
	uint64_t *file_off;
	const unsigned char *in_file; /* NULL: every target; else only those set */
	atomic_size_t next;
	atomic_uint_fast64_t done;
	atomic_int failed;
	pthread_mutex_t err_lock;
	struct ck_err err;
};

static void *worker(void *arg)
{
	struct job *j = arg;
	struct ck_eval_ctx c;
	ck_eval_ctx_init(&c, &j->eng);
	unsigned char *buf = malloc(CHUNK);
	struct ck_err err;
	if (!buf) {
		ck_fail_sys(&err, ENOMEM, "convert buffer");
		goto fail;
	}
	for (;;) {
		size_t t = atomic_fetch_add(&j->next, 1);
		if (t >= j->plan->n || atomic_load(&j->failed))
			break;
		if (j->in_file && !j->in_file[t])
			continue;
		const struct ck_target *tg = &j->plan->t[t];
		int fd = j->shards[j->shard_of[t]].fd;
		for (uint64_t off = 0; off < tg->nbytes; off += CHUNK) {
			uint64_t len = tg->nbytes - off < CHUNK ? tg->nbytes - off : CHUNK;
			if (ck_engine_read(&c, (uint32_t)t, off, len, buf, &err) < 0)
				goto fail;
			uint64_t w = 0;
			while (w < len) {
				ssize_t r = pwrite(fd, buf + w, len - w, (off_t)(j->file_off[t] + off + w));
				if (r < 0 && errno == EINTR)
					continue;
				if (r <= 0) {
					ck_fail_sys(&err, r < 0 ? errno : EIO, "%s: write failed",
						    j->shards[j->shard_of[t]].final);
					goto fail;
				}
				w += (uint64_t)r;
			}
			atomic_fetch_add(&j->done, len);
		}
	}
	free(buf);
	ck_eval_ctx_free(&c);
	return NULL;
fail:
	pthread_mutex_lock(&j->err_lock);
	if (!atomic_exchange(&j->failed, 1))
		j->err = err;
	pthread_mutex_unlock(&j->err_lock);
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

static char *index_json(const struct ck_plan *p, const struct shard *sh, int nsh, size_t *len)
{
	size_t n = p->n, k = 0;
	const char **names = malloc((n ? n : 1) * sizeof *names);
	uint64_t *of = malloc((n ? n : 1) * sizeof *of);
	char *buf = NULL;
	if (names && of) {
		for (int s = 0; s < nsh; s++)
			for (size_t i = sh[s].first; i < sh[s].first + sh[s].count; i++)
				names[k] = p->t[i].name, of[k++] = (uint64_t)s + 1;
		buf = ck_st_index_json(names, of, k, (uint64_t)nsh, p->total_bytes, len);
	}
	free(names);
	free(of);
	return buf;
}

int ck_write_file_atomic(const char *dir, const char *name, const void *data, size_t len,
			 struct ck_err *err)
{
	char *tmp = path2(dir, ".ckptfs-tmp-", name), *final = path2(dir, "", name);
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

/* Evaluate every target of j->plan into its file (j->shards, j->file_off)
 * with the option's threads, drawing progress if asked. */
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
			if (nx >= j->plan->n + (size_t)started)
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

static void job_init(struct job *j, const struct ck_plan *plan, const struct ck_convert_opts *o)
{
	memset(j, 0, sizeof *j);
	j->plan = plan;
	pthread_mutex_init(&j->err_lock, NULL);
	ck_engine_init(&j->eng, plan, o->use_uring);
	j->eng.gpu = o->gpu;
	if (o->gpu_min)
		j->eng.gpu_min = o->gpu_min;
}

int ck_convert_vfile(const struct ck_plan *plan, const struct ck_vfile *vf, const char *outdir,
		     const char *name, const struct ck_convert_opts *o,
		     struct ck_convert_stats *stats, struct ck_err *err)
{
	struct job j;
	job_init(&j, plan, o);
	struct shard sh = {.fd = -1};
	snprintf(sh.name, sizeof sh.name, "%s", name);
	char tmpname[128];
	snprintf(tmpname, sizeof tmpname, ".ckptfs-tmp-%d-", (int)getpid());
	sh.tmp = path2(outdir, tmpname, name);
	sh.final = path2(outdir, "", name);
	j.shards = &sh;
	j.shard_of = calloc(plan->n ? plan->n : 1, sizeof *j.shard_of);
	j.file_off = calloc(plan->n ? plan->n : 1, sizeof *j.file_off);
	unsigned char *in_file = calloc(plan->n ? plan->n : 1, 1);
	j.in_file = in_file;
	int rc = -1;
	if (!sh.tmp || !sh.final || !j.shard_of || !j.file_off || !in_file) {
		ck_fail_sys(err, ENOMEM, "convert");
		goto out;
	}
	if (ck_mkdirs(outdir, err) < 0)
		goto out;
	sh.fd = open(sh.tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (sh.fd < 0 || ftruncate(sh.fd, (off_t)vf->size) < 0) {
		ck_fail_sys(err, errno, "%s: cannot write", sh.tmp);
		goto out;
	}
	/* literal parts now; each target is one whole span, evaluated in place */
	uint64_t total = 0;
	for (size_t k = 0; k < vf->n; k++) {
		const struct ck_vpart *pt = &vf->parts[k];
		if (pt->target != CK_VLIT) {
			j.file_off[pt->target] = pt->off - pt->src;
			in_file[pt->target] = 1;
			total += pt->len;
			continue;
		}
		if (pwrite(sh.fd, vf->blob + pt->src, pt->len, (off_t)pt->off) != (ssize_t)pt->len) {
			ck_fail_sys(err, errno ? errno : EIO, "%s: write failed", sh.tmp);
			goto out;
		}
	}
	if (run_workers(&j, o, total, err) < 0)
		goto out;
	if (fsync(sh.fd) < 0 || close(sh.fd) < 0) {
		sh.fd = -1;
		ck_fail_sys(err, errno, "%s", sh.tmp);
		goto out;
	}
	sh.fd = -1;
	if (rename(sh.tmp, sh.final) < 0) {
		ck_fail_sys(err, errno, "%s", sh.final);
		goto out;
	}
	fsync_dir(outdir);
	if (stats) {
		stats->bytes_written = vf->size;
		stats->source_bytes_read = atomic_load(&j.eng.source_bytes_read);
		stats->n_files = 1;
	}
	rc = 0;
out:
	if (sh.fd >= 0)
		close(sh.fd);
	if (rc < 0 && sh.tmp)
		unlink(sh.tmp);
	free(sh.tmp);
	free(sh.final);
	free(j.shard_of);
	free(j.file_off);
	free(in_file);
	pthread_mutex_destroy(&j.err_lock);
	return rc;
}

int ck_convert(const struct ck_plan *plan, const char *outdir, const struct ck_convert_opts *o,
	       struct ck_convert_stats *stats, struct ck_err *err)
{
	int rc = -1, nsh = 0;
	struct job j;
	job_init(&j, plan, o);
	struct shard *sh = calloc(plan->n ? plan->n : 1, sizeof *sh);
	j.shards = sh;
	j.shard_of = calloc(plan->n ? plan->n : 1, sizeof *j.shard_of);
	j.file_off = calloc(plan->n ? plan->n : 1, sizeof *j.file_off);
	char *idx_tmp = NULL, *idx_final = NULL, *cfg_tmp = NULL, *cfg_final = NULL;
	if (!sh || !j.shard_of || !j.file_off) {
		ck_fail_sys(err, ENOMEM, "convert");
		goto out;
	}
	if (ck_mkdirs(outdir, err) < 0)
		goto out;
	/* shards: targets in plan order, a new file when the next would overflow */
	uint64_t cur = 0;
	for (size_t i = 0; i < plan->n; i++) {
		if (nsh == 0 || (o->max_shard_size && !o->file_name && sh[nsh - 1].count &&
				 cur + plan->t[i].nbytes > o->max_shard_size)) {
			sh[nsh].first = i;
			sh[nsh].fd = -1;
			nsh++;
			cur = 0;
		}
		sh[nsh - 1].count++;
		j.shard_of[i] = (uint32_t)(nsh - 1);
		cur += plan->t[i].nbytes;
	}
	if (nsh == 0) { /* an empty plan still writes an (empty) checkpoint */
		sh[0].fd = -1;
		nsh = 1;
	}
	pid_t pid = getpid();
	for (int s = 0; s < nsh; s++) {
		if (o->file_name)
			snprintf(sh[s].name, sizeof sh[s].name, "%s", o->file_name);
		else if (nsh == 1)
			snprintf(sh[s].name, sizeof sh[s].name, "model.safetensors");
		else
			ck_st_shard_name(sh[s].name, sizeof sh[s].name, (uint64_t)s + 1, (uint64_t)nsh);
		char tmpname[128];
		snprintf(tmpname, sizeof tmpname, ".ckptfs-tmp-%d-", (int)pid);
		sh[s].tmp = path2(outdir, tmpname, sh[s].name);
		sh[s].final = path2(outdir, "", sh[s].name);
		if (!sh[s].tmp || !sh[s].final) {
			ck_fail_sys(err, ENOMEM, "convert");
			goto out;
		}
		struct ck_st_out *so = calloc(sh[s].count ? sh[s].count : 1, sizeof *so);
		uint64_t *doff = calloc(sh[s].count ? sh[s].count : 1, sizeof *doff);
		char *hdr = NULL;
		size_t hl = 0;
		uint64_t data = 0;
		if (!so || !doff) {
			free(so);
			free(doff);
			ck_fail_sys(err, ENOMEM, "convert");
			goto out;
		}
		for (size_t k = 0; k < sh[s].count; k++) {
			const struct ck_target *t = &plan->t[sh[s].first + k];
			so[k] = (struct ck_st_out){t->name, t->v.dtype, t->v.ndim, t->v.shape, t->nbytes};
			data += t->nbytes;
		}
		const char *mk[] = {"format"}, *mv[] = {"pt"};
		int r = ck_st_build_header(so, sh[s].count, mk, mv, 1, &hdr, &hl, doff, err);
		for (size_t k = 0; r == 0 && k < sh[s].count; k++)
			j.file_off[sh[s].first + k] = hl + doff[k];
		free(so);
		free(doff);
		if (r < 0)
			goto out;
		sh[s].header_len = hl;
		sh[s].fd = open(sh[s].tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
		if (sh[s].fd < 0 || write_all(sh[s].fd, hdr, hl) < 0 ||
		    ftruncate(sh[s].fd, (off_t)(hl + data)) < 0) {
			ck_fail_sys(err, errno, "%s: cannot write", sh[s].tmp);
			free(hdr);
			goto out;
		}
		free(hdr);
	}
	if (run_workers(&j, o, plan->total_bytes, err) < 0)
		goto out;
	for (int s = 0; s < nsh; s++) {
		if (fsync(sh[s].fd) < 0 || close(sh[s].fd) < 0) {
			sh[s].fd = -1;
			ck_fail_sys(err, errno, "%s", sh[s].tmp);
			goto out;
		}
		sh[s].fd = -1;
	}
	if (nsh > 1) {
		size_t len;
		char *txt = index_json(plan, sh, nsh, &len);
		idx_tmp = path2(outdir, ".ckptfs-tmp-", "model.safetensors.index.json");
		idx_final = path2(outdir, "", "model.safetensors.index.json");
		if (!txt || !idx_tmp || !idx_final) {
			free(txt);
			ck_fail_sys(err, ENOMEM, "index");
			goto out;
		}
		int r = write_small(idx_tmp, txt, len, err);
		free(txt);
		if (r < 0)
			goto out;
	}
	if (o->config) {
		cfg_tmp = path2(outdir, ".ckptfs-tmp-", "config.json");
		cfg_final = path2(outdir, "", "config.json");
		if (!cfg_tmp || !cfg_final) {
			ck_fail_sys(err, ENOMEM, "convert");
			goto out;
		}
		if (write_small(cfg_tmp, o->config, o->config_len, err) < 0)
			goto out;
	}
	/* commit: every temp file is complete and synced */
	for (int s = 0; s < nsh; s++)
		if (rename(sh[s].tmp, sh[s].final) < 0) {
			ck_fail_sys(err, errno, "%s", sh[s].final);
			goto out;
		}
	if ((idx_tmp && rename(idx_tmp, idx_final) < 0) ||
	    (cfg_tmp && rename(cfg_tmp, cfg_final) < 0)) {
		ck_fail_sys(err, errno, "%s", outdir);
		goto out;
	}
	fsync_dir(outdir);
	if (stats) {
		stats->bytes_written = plan->total_bytes;
		stats->source_bytes_read = atomic_load(&j.eng.source_bytes_read);
		stats->n_files = nsh;
	}
	rc = 0;
out:
	for (int s = 0; s < nsh; s++) {
		if (sh[s].fd >= 0)
			close(sh[s].fd);
		if (rc < 0 && sh[s].tmp)
			unlink(sh[s].tmp);
		free(sh[s].tmp);
		free(sh[s].final);
	}
	if (rc < 0 && idx_tmp)
		unlink(idx_tmp);
	if (rc < 0 && cfg_tmp)
		unlink(cfg_tmp);
	free(idx_tmp);
	free(idx_final);
	free(cfg_tmp);
	free(cfg_final);
	free(sh);
	free(j.shard_of);
	free(j.file_off);
	pthread_mutex_destroy(&j.err_lock);
	return rc;
}
