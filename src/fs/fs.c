#define FUSE_USE_VERSION 312
#include "fs.h"

#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <inttypes.h>
#include <pthread.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "../kern/cpu.h"
#include "../util/crc32.h"
#include "../util/jsonw.h"
#include "../util/strmap.h"
#include "../plan/npy.h"
#include "../plan/shard.h"
#include "../plan/torchzip.h"
#include "bdi.h"
#include "names.h"

/* Inodes: the fixed ones, then target i at INO_FIRST + i, its npy file at
 * INO_FIRST + n + i, and root file k (model.safetensors, pytorch_model.bin,
 * shards, ...) at INO_FIRST + 2n + k. */
enum { INO_ROOT = 1, INO_TENSORS, INO_META, INO_STATS, INO_PLAN, INO_NPY, INO_FIRST = 16 };
#define TIMEOUT 86400.0 /* the view is immutable */
#define BLKSIZE (1u << 20)

struct ckfs {
	const struct ck_plan *plan;
	const char *source, *mountpoint;
	struct ck_fs_opts o;
	struct ck_flat flat;	 /* model.safetensors */
	struct ck_torchzip zip;	 /* pytorch_model.bin */
	struct ck_flat *shards;	 /* model-0000k-of-0000n.safetensors (-o max_shard_size) */
	struct ck_flat *parts;	 /* model-rank-R-part-P.safetensors (per-rank views) */
	size_t n_shards, n_parts;
	struct ck_vfile index_json; /* model.safetensors.index.json of the shards */
	struct ck_vfile config;	    /* the source's config.json, for from_pretrained(mount) */
	struct root_file *roots;
	size_t n_roots;
	struct ck_cache *cache;
	char **names; /* escaped file name per target */
	struct ck_strmap by_name;
	char **npy_names; /* "<escaped>.npy" per target */
	struct ck_strmap npy_by_name;
	char *plan_json;
	size_t plan_json_len;
	int ready_fd;
	FILE *log;
	pthread_mutex_t log_mu;
	time_t mounted_at;
};

struct root_file {
	char *name;
	const struct ck_vfile *v;
};

struct snapshot {
	char *data;
	size_t len;
};

static void fs_log(void *ctx, const char *msg)
{
	struct ckfs *fs = ctx;
	if (!fs->log)
		return;
	pthread_mutex_lock(&fs->log_mu);
	fprintf(fs->log, "ckptfs: %s\n", msg);
	fflush(fs->log);
	pthread_mutex_unlock(&fs->log_mu);
}

static int is_target(const struct ckfs *fs, fuse_ino_t ino)
{
	return ino >= INO_FIRST && ino - INO_FIRST < fs->plan->n;
}

/* npy/<name>.npy of target i is inode INO_FIRST + n + i */
static int is_npy(const struct ckfs *fs, fuse_ino_t ino)
{
	return ino >= INO_FIRST + fs->plan->n && ino - INO_FIRST - fs->plan->n < fs->plan->n;
}

static const struct root_file *root_file(const struct ckfs *fs, fuse_ino_t ino)
{
	uint64_t base = INO_FIRST + 2 * (uint64_t)fs->plan->n;
	return ino >= base && ino - base < fs->n_roots ? &fs->roots[ino - base] : NULL;
}

static int is_dir(fuse_ino_t ino)
{
	return ino == INO_ROOT || ino == INO_TENSORS || ino == INO_META || ino == INO_NPY;
}

/* -o npy_f32: BF16 and FP8 targets (no NumPy dtype) served widened to F32. */
static int npy_widens(const struct ckfs *fs, const struct ck_target *t)
{
	enum ck_dtype dt = t->v.dtype;
	return fs->o.npy_f32 && (dt == CK_DT_BF16 || dt == CK_DT_F8_E4M3 || dt == CK_DT_F8_E5M2);
}

static const struct ck_target *npy_target(const struct ckfs *fs, fuse_ino_t ino)
{
	return &fs->plan->t[ino - INO_FIRST - fs->plan->n];
}

static uint64_t npy_data_bytes(const struct ckfs *fs, const struct ck_target *t)
{
	return npy_widens(fs, t) ? t->nbytes / ck_dtype_size(t->v.dtype) * 4 : t->nbytes;
}

static size_t npy_header(const struct ckfs *fs, fuse_ino_t ino, char *buf)
{
	const struct ck_target *t = npy_target(fs, ino);
	return ck_npy_header(npy_widens(fs, t) ? CK_DT_F32 : t->v.dtype, t->v.ndim, t->v.shape,
			     buf, 256);
}

static void fill_attr(const struct ckfs *fs, fuse_ino_t ino, struct stat *st)
{
	memset(st, 0, sizeof *st);
	st->st_ino = ino;
	st->st_uid = getuid();
	st->st_gid = getgid();
	st->st_blksize = BLKSIZE;
	st->st_mtime = st->st_ctime = st->st_atime = fs->mounted_at;
	if (is_dir(ino)) {
		st->st_mode = S_IFDIR | 0555;
		st->st_nlink = 2;
		return;
	}
	st->st_mode = S_IFREG | 0444;
	st->st_nlink = 1;
	const struct root_file *rf = root_file(fs, ino);
	if (rf)
		st->st_size = (off_t)rf->v->size;
	else if (ino == INO_PLAN)
		st->st_size = (off_t)fs->plan_json_len;
	else if (is_target(fs, ino))
		st->st_size = (off_t)fs->plan->t[ino - INO_FIRST].nbytes;
	else if (is_npy(fs, ino)) {
		char h[256];
		st->st_size = (off_t)(npy_header(fs, ino, h) + npy_data_bytes(fs, npy_target(fs, ino)));
	}
	st->st_blocks = (st->st_size + 511) / 512;
}

static int valid_ino(const struct ckfs *fs, fuse_ino_t ino)
{
	return (ino >= INO_ROOT && ino <= INO_NPY) || is_target(fs, ino) || is_npy(fs, ino) ||
	       root_file(fs, ino);
}

static void reply_entry(fuse_req_t req, const struct ckfs *fs, fuse_ino_t ino)
{
	struct fuse_entry_param e;
	memset(&e, 0, sizeof e);
	e.ino = ino;
	e.attr_timeout = e.entry_timeout = ino == INO_STATS ? 0 : TIMEOUT;
	fill_attr(fs, ino, &e.attr);
	fuse_reply_entry(req, &e);
}

static void op_init(void *userdata, struct fuse_conn_info *conn)
{
	struct ckfs *fs = userdata;
	/* 1 MiB requests: libfuse 3.14 derives the kernel's max_pages from
	 * max_write (reference/fuse-performance.md) */
	conn->max_write = 1u << 20;
	conn->max_readahead = 1u << 20;
	if (conn->capable & FUSE_CAP_ASYNC_READ)
		conn->want |= FUSE_CAP_ASYNC_READ;
	if (ck_raise_bdi_readahead(fs->mountpoint, 1024) < 0)
		fs_log(fs, "could not raise the mount's bdi read_ahead_kb (reads stay at 128 KiB)");
	if (fs->ready_fd >= 0) {
		if (write(fs->ready_fd, "OK\n", 3) != 3)
			fs_log(fs, "could not report readiness");
		close(fs->ready_fd);
		fs->ready_fd = -1;
	}
	char msg[8400];
	snprintf(msg, sizeof msg, "mounted %s on %s (%zu tensors)", fs->source, fs->mountpoint,
		 fs->plan->n);
	fs_log(fs, msg);
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct ckfs *fs = fuse_req_userdata(req);
	fuse_ino_t ino = 0;
	if (parent == INO_ROOT) {
		ino = !strcmp(name, "tensors")	 ? INO_TENSORS
		      : !strcmp(name, ".ckptfs") ? INO_META
		      : !strcmp(name, "npy")	 ? INO_NPY
						 : 0;
		for (size_t k = 0; !ino && k < fs->n_roots; k++)
			if (!strcmp(name, fs->roots[k].name))
				ino = INO_FIRST + 2 * fs->plan->n + k;
	} else if (parent == INO_META) {
		ino = !strcmp(name, "stats.json") ? INO_STATS : !strcmp(name, "plan.json") ? INO_PLAN : 0;
	} else if (parent == INO_TENSORS) {
		uint32_t i;
		if (ck_strmap_get(&fs->by_name, name, &i) == 0)
			ino = INO_FIRST + i;
	} else if (parent == INO_NPY) {
		uint32_t i;
		if (ck_strmap_get(&fs->npy_by_name, name, &i) == 0)
			ino = INO_FIRST + fs->plan->n + i;
	}
	if (!ino)
		fuse_reply_err(req, ENOENT);
	else
		reply_entry(req, fs, ino);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)fi;
	struct ckfs *fs = fuse_req_userdata(req);
	if (!valid_ino(fs, ino)) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	struct stat st;
	fill_attr(fs, ino, &st);
	fuse_reply_attr(req, &st, ino == INO_STATS ? 0 : TIMEOUT);
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi)
{
	(void)fi;
	struct ckfs *fs = fuse_req_userdata(req);
	static const char *const root[] = {".", "..", "tensors", ".ckptfs", "npy"};
	static const fuse_ino_t root_ino[] = {INO_ROOT, INO_ROOT, INO_TENSORS, INO_META, INO_NPY};
	static const char *const meta[] = {".", "..", "stats.json", "plan.json"};
	static const fuse_ino_t meta_ino[] = {INO_META, INO_ROOT, INO_STATS, INO_PLAN};
	if (!is_dir(ino)) {
		fuse_reply_err(req, ENOTDIR);
		return;
	}
	char *buf = malloc(size);
	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	size_t used = 0;
	size_t count = ino == INO_ROOT ? 5 + fs->n_roots : ino == INO_META ? 4 : 2 + fs->plan->n;
	for (size_t i = (size_t)off; i < count; i++) {
		const char *name;
		fuse_ino_t e;
		if (ino == INO_ROOT && i < 5)
			name = root[i], e = root_ino[i];
		else if (ino == INO_ROOT)
			name = fs->roots[i - 5].name, e = INO_FIRST + 2 * fs->plan->n + (i - 5);
		else if (ino == INO_META)
			name = meta[i], e = meta_ino[i];
		else if (i < 2)
			name = i ? ".." : ".", e = i ? INO_ROOT : ino;
		else if (ino == INO_NPY)
			name = fs->npy_names[i - 2], e = INO_FIRST + fs->plan->n + (i - 2);
		else
			name = fs->names[i - 2], e = INO_FIRST + (i - 2);
		struct stat st;
		memset(&st, 0, sizeof st);
		st.st_ino = e;
		st.st_mode = is_dir(e) ? S_IFDIR : S_IFREG;
		size_t n = fuse_add_direntry(req, buf + used, size - used, name, &st, (off_t)(i + 1));
		if (n > size - used)
			break;
		used += n;
	}
	fuse_reply_buf(req, buf, used);
	free(buf);
}

static char *stats_json(struct ckfs *fs, size_t *len)
{
	struct ck_cache_stats s;
	ck_cache_get_stats(fs->cache, &s);
	char *buf = NULL;
	FILE *f = open_memstream(&buf, len);
	if (!f)
		return NULL;
	fprintf(f,
		"{\"source_bytes_read\": %" PRIu64 ", \"read_requests\": %" PRIu64
		", \"groups_evaluated\": %" PRIu64 ", \"regions_evaluated\": %" PRIu64
		", \"cache_hits\": %" PRIu64 ", \"cache_misses\": %" PRIu64
		", \"cache_bytes\": %" PRIu64 ", \"cache_size\": %" PRIu64
		", \"cache_evictions\": %" PRIu64 ", \"read_errors\": %" PRIu64
		", \"evaluations_in_flight\": %" PRIu64 ", \"io\": \"%s\"}\n",
		s.source_bytes_read, s.read_requests, s.groups_evaluated, s.regions_evaluated,
		s.cache_hits, s.cache_misses, s.cache_bytes, fs->o.cache.cache_size,
		s.cache_evictions, s.read_errors, s.evaluations_in_flight,
		fs->o.cache.use_uring && !ck_cache_uring_fell_back(fs->cache) ? "io_uring" : "pread");
	return fclose(f) == 0 ? buf : (free(buf), NULL);
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct ckfs *fs = fuse_req_userdata(req);
	if (!valid_ino(fs, ino)) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC)) {
		fuse_reply_err(req, EROFS);
		return;
	}
	if (ino == INO_STATS) { /* live: a snapshot per open, never a cached copy */
		struct snapshot *s = malloc(sizeof *s);
		if (!s || !(s->data = stats_json(fs, &s->len))) {
			free(s);
			fuse_reply_err(req, ENOMEM);
			return;
		}
		fi->fh = (uintptr_t)s;
		fi->direct_io = 1;
	} else if (fs->o.direct_io) {
		fi->direct_io = 1; /* every read reaches the daemon; mmap is not possible */
	} else {
		fi->keep_cache = 1;
	}
	fuse_reply_open(req, fi);
}

static void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	if (ino == INO_STATS && fi->fh) {
		struct snapshot *s = (struct snapshot *)(uintptr_t)fi->fh;
		free(s->data);
		free(s);
	}
	fuse_reply_err(req, 0);
}

struct pending {
	fuse_req_t req;
	uint64_t len;	      /* of the read */
	struct ck_span *spans; /* target spans and literal spans, in file order */
	size_t n;
	char npy_head[256];
	enum ck_dtype widen; /* npy_f32: the target span holds these, widen to F32 */
	uint64_t skip;	     /* bytes of the first widened element before the read */
};

/* npy_f32: convert the gathered narrow elements and reply from a buffer. */
static void reply_widened(struct pending *p, const struct ck_seg *segs, size_t n)
{
	const struct ck_span *t = &p->spans[p->n - 1];
	size_t es = ck_dtype_size(p->widen);
	unsigned char *narrow = malloc(t->len ? t->len : 1);
	unsigned char *out = malloc(p->len);
	float *wide = malloc((t->len / es) * 4 + 1);
	if (!narrow || !out || !wide) {
		fuse_reply_err(p->req, ENOMEM);
	} else {
		for (size_t i = 0; i < n; i++) /* segment dst offsets are relative to t->dst */
			memcpy(narrow + (segs[i].dst - t->dst), segs[i].p, segs[i].len);
		for (uint64_t i = 0; i < t->len / es; i++)
			wide[i] = ck_cpu_load_f32(narrow + i * es, p->widen);
		if (p->n == 2)
			memcpy(out, p->spans[0].lit, p->spans[0].len);
		memcpy(out + t->dst, (unsigned char *)wide + p->skip, p->len - t->dst);
		fuse_reply_buf(p->req, (const char *)out, p->len);
	}
	free(narrow);
	free(out);
	free(wide);
}

#define MAX_IOV 1024 /* UIO_MAXIOV: writev takes no more */

/* Reply straight from cache memory and literal bytes (fuse_reply_iov: no
 * copy here). segs (target bytes) and the literal spans are each in file
 * order; merge them by their offset in the result. */
static void read_done(void *arg, int err, const struct ck_seg *segs, size_t n)
{
	struct pending *p = arg;
	size_t n_lit = 0;
	for (size_t i = 0; i < p->n; i++)
		n_lit += p->spans[i].lit != NULL;
	size_t niov = n + n_lit;
	if (err) {
		fuse_reply_err(p->req, -err);
	} else if (p->widen) {
		reply_widened(p, segs, n);
	} else if (niov <= MAX_IOV) {
		struct iovec stack[16] = {{0}};
		struct iovec *iov = niov <= 16 ? stack : malloc(niov * sizeof *iov);
		if (!iov) {
			fuse_reply_err(p->req, ENOMEM);
		} else {
			size_t k = 0, s = 0, l = 0;
			while (k < niov) {
				while (l < p->n && !p->spans[l].lit)
					l++;
				if (l < p->n && (s == n || p->spans[l].dst < segs[s].dst)) {
					iov[k++] = (struct iovec){(void *)p->spans[l].lit, p->spans[l].len};
					l++;
				} else {
					iov[k++] = (struct iovec){(void *)segs[s].p, segs[s].len};
					s++;
				}
			}
			if (k)
				fuse_reply_iov(p->req, iov, (int)k);
			else
				fuse_reply_buf(p->req, NULL, 0);
			if (iov != stack)
				free(iov);
		}
	} else { /* very many small pieces in one read: gather into one buffer */
		unsigned char *buf = malloc(p->len);
		if (!buf) {
			fuse_reply_err(p->req, ENOMEM);
		} else {
			for (size_t i = 0; i < p->n; i++)
				if (p->spans[i].lit)
					memcpy(buf + p->spans[i].dst, p->spans[i].lit, p->spans[i].len);
			for (size_t i = 0; i < n; i++)
				memcpy(buf + segs[i].dst, segs[i].p, segs[i].len);
			fuse_reply_buf(p->req, (const char *)buf, p->len);
			free(buf);
		}
	}
	free(p->spans);
	free(p);
}

static void reply_slice(fuse_req_t req, const char *data, size_t len, size_t size, off_t off)
{
	if ((size_t)off >= len)
		fuse_reply_buf(req, NULL, 0);
	else
		fuse_reply_buf(req, data + off, len - (size_t)off < size ? len - (size_t)off : size);
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	struct ckfs *fs = fuse_req_userdata(req);
	if (ino == INO_STATS) {
		/* reply from a copy this thread owns: once the reply is written, the
		 * reader may close the file and release() frees the snapshot while
		 * this thread is still returning from fuse_reply_buf */
		struct snapshot *s = (struct snapshot *)(uintptr_t)fi->fh;
		size_t n = (size_t)off < s->len ? s->len - (size_t)off : 0;
		n = n < size ? n : size;
		char *copy = malloc(n ? n : 1);
		if (!copy) {
			fuse_reply_err(req, ENOMEM);
			return;
		}
		memcpy(copy, s->data + (n ? off : 0), n);
		fuse_reply_buf(req, copy, n);
		free(copy);
		return;
	}
	if (ino == INO_PLAN) {
		reply_slice(req, fs->plan_json, fs->plan_json_len, size, off);
		return;
	}
	struct pending *p = calloc(1, sizeof *p);
	if (!p) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	const struct root_file *rf = root_file(fs, ino);
	uint64_t total = 0, head = 0;
	if (rf) {
		total = rf->v->size;
	} else if (is_target(fs, ino)) {
		total = fs->plan->t[ino - INO_FIRST].nbytes;
	} else if (is_npy(fs, ino)) {
		head = npy_header(fs, ino, p->npy_head);
		total = head + npy_data_bytes(fs, npy_target(fs, ino));
	} else {
		free(p);
		fuse_reply_err(req, EISDIR);
		return;
	}
	if ((uint64_t)off >= total || size == 0) {
		free(p);
		fuse_reply_buf(req, NULL, 0);
		return;
	}
	uint64_t len = (uint64_t)size < total - (uint64_t)off ? size : total - (uint64_t)off;
	uint64_t end = (uint64_t)off + len;
	p->req = req;
	p->len = len;
	size_t n = rf ? ck_vfile_spans(rf->v, (uint64_t)off, len, NULL, 0) : 2;
	p->spans = calloc(n ? n : 1, sizeof *p->spans);
	if (p->spans && rf) {
		p->n = ck_vfile_spans(rf->v, (uint64_t)off, len, p->spans, n);
	} else if (p->spans && is_npy(fs, ino)) { /* the header, then the tensor */
		if ((uint64_t)off < head)
			p->spans[p->n++] = (struct ck_span){0, 0, (end < head ? end : head) - (uint64_t)off,
							    0, (unsigned char *)p->npy_head + off};
		uint32_t ti = (uint32_t)(ino - INO_FIRST - fs->plan->n);
		uint64_t a = (uint64_t)off > head ? (uint64_t)off : head;
		if (end > head && npy_widens(fs, &fs->plan->t[ti])) {
			/* whole narrow elements covering the F32 bytes [a, end) */
			uint64_t e0 = (a - head) / 4, e1 = (end - head + 3) / 4;
			size_t es = ck_dtype_size(fs->plan->t[ti].v.dtype);
			p->widen = fs->plan->t[ti].v.dtype;
			p->skip = (a - head) - e0 * 4;
			p->spans[p->n++] = (struct ck_span){ti, e0 * es, (e1 - e0) * es,
							    a - (uint64_t)off, NULL};
		} else if (end > head) {
			p->spans[p->n++] = (struct ck_span){ti, a - head, end - a, a - (uint64_t)off, NULL};
		}
	} else if (p->spans) {
		p->spans[p->n++] =
			(struct ck_span){(uint32_t)(ino - INO_FIRST), (uint64_t)off, len, 0, NULL};
	}
	if (!p->spans || ck_cache_read(fs->cache, p->spans, p->n, read_done, p) < 0) {
		free(p->spans);
		free(p);
		fuse_reply_err(req, ENOMEM);
	}
	/* the reply comes from read_done, possibly on an evaluator thread */
}

/* Extended attributes of tensor files: dtype, shape, group and its sources. */
static char *xattr_value(struct ckfs *fs, fuse_ino_t ino, const char *name, size_t *len)
{
	const struct ck_target *t = &fs->plan->t[ino - INO_FIRST];
	char *buf = NULL;
	FILE *f = open_memstream(&buf, len);
	if (!f)
		return NULL;
	int found = 1;
	if (!strcmp(name, "user.ckptfs.dtype"))
		fprintf(f, "%s", ck_dtype_name(t->v.dtype));
	else if (!strcmp(name, "user.ckptfs.shape")) {
		fputc('[', f);
		for (int d = 0; d < t->v.ndim; d++)
			fprintf(f, "%s%" PRId64, d ? ", " : "", t->v.shape[d]);
		fputc(']', f);
	} else if (!strcmp(name, "user.ckptfs.group"))
		fprintf(f, "%" PRIu32, t->group);
	else if (!strcmp(name, "user.ckptfs.sources")) {
		const struct ck_group *g = &fs->plan->g[t->group];
		fputc('[', f);
		for (size_t k = 0; k < g->n_sources; k++) {
			fprintf(f, "%s", k ? ", " : "");
			ck_json_fput_str(f, fs->plan->cat->entries[g->sources[k]].t.name);
		}
		fputc(']', f);
	} else if (t->shard && !strncmp(name, "user.ckptfs.", 12) &&
		   (!strcmp(name + 12, "global_shape") || !strcmp(name + 12, "fragments") ||
		    !strcmp(name + 12, "axis_fragmentations") || !strcmp(name + 12, "replica_id"))) {
		ck_shard_fput_json(f, t->shard, t->v.ndim, name + 12);
	} else if (t->shard && t->shard->global_name && !strcmp(name, "user.ckptfs.global_name")) {
		fputs(t->shard->global_name, f);
	} else
		found = 0;
	if (fclose(f) != 0 || !found) {
		free(buf);
		return NULL;
	}
	return buf;
}

static const char XATTRS[] = "user.ckptfs.dtype\0user.ckptfs.shape\0user.ckptfs.group\0"
			     "user.ckptfs.sources";
/* and on a per-rank view, Megatron's ShardedTensor description */
static const char SHARD_XATTRS[] = "user.ckptfs.global_shape\0user.ckptfs.fragments\0"
				   "user.ckptfs.axis_fragmentations\0user.ckptfs.replica_id";

static void reply_sized(fuse_req_t req, const char *data, size_t len, size_t size)
{
	if (size == 0)
		fuse_reply_xattr(req, len);
	else if (size < len)
		fuse_reply_err(req, ERANGE);
	else
		fuse_reply_buf(req, data, len);
}

static void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
	struct ckfs *fs = fuse_req_userdata(req);
	size_t len;
	char *v = is_target(fs, ino) ? xattr_value(fs, ino, name, &len) : NULL;
	if (!v) {
		fuse_reply_err(req, ENODATA);
		return;
	}
	reply_sized(req, v, len, size);
	free(v);
}

static void op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	struct ckfs *fs = fuse_req_userdata(req);
	if (!is_target(fs, ino)) {
		reply_sized(req, "", 0, size);
	} else if (!fs->plan->t[ino - INO_FIRST].shard) {
		reply_sized(req, XATTRS, sizeof XATTRS, size);
	} else {
		static const char GLOBAL[] = "user.ckptfs.global_name";
		int g = fs->plan->t[ino - INO_FIRST].shard->global_name != NULL;
		char all[sizeof XATTRS + sizeof SHARD_XATTRS + sizeof GLOBAL];
		memcpy(all, XATTRS, sizeof XATTRS);
		memcpy(all + sizeof XATTRS, SHARD_XATTRS, sizeof SHARD_XATTRS);
		memcpy(all + sizeof XATTRS + sizeof SHARD_XATTRS, GLOBAL, sizeof GLOBAL);
		reply_sized(req, all, sizeof XATTRS + sizeof SHARD_XATTRS + (g ? sizeof GLOBAL : 0),
			    size);
	}
}

static void op_statfs(fuse_req_t req, fuse_ino_t ino)
{
	(void)ino;
	struct ckfs *fs = fuse_req_userdata(req);
	struct statvfs s;
	memset(&s, 0, sizeof s);
	s.f_bsize = s.f_frsize = 4096;
	uint64_t bytes = 2 * fs->plan->total_bytes; /* tensors/ and npy/ */
	for (size_t k = 0; k < fs->n_roots; k++)
		bytes += fs->roots[k].v->size;
	s.f_blocks = (bytes + 4095) / 4096;
	s.f_files = 2 * fs->plan->n + fs->n_roots + 7;
	s.f_namemax = 255;
	s.f_flag = ST_RDONLY;
	fuse_reply_statfs(req, &s);
}

/* Every write-side operation: the view is read-only. */
static void erofs_entry(fuse_req_t req)
{
	fuse_reply_err(req, EROFS);
}
static void op_mknod(fuse_req_t r, fuse_ino_t p, const char *n, mode_t m, dev_t d)
{
	(void)p, (void)n, (void)m, (void)d;
	erofs_entry(r);
}
static void op_mkdir(fuse_req_t r, fuse_ino_t p, const char *n, mode_t m)
{
	(void)p, (void)n, (void)m;
	erofs_entry(r);
}
static void op_unlink(fuse_req_t r, fuse_ino_t p, const char *n)
{
	(void)p, (void)n;
	erofs_entry(r);
}
static void op_symlink(fuse_req_t r, const char *l, fuse_ino_t p, const char *n)
{
	(void)l, (void)p, (void)n;
	erofs_entry(r);
}
static void op_rename(fuse_req_t r, fuse_ino_t p, const char *n, fuse_ino_t np, const char *nn,
		      unsigned f)
{
	(void)p, (void)n, (void)np, (void)nn, (void)f;
	erofs_entry(r);
}
static void op_link(fuse_req_t r, fuse_ino_t i, fuse_ino_t p, const char *n)
{
	(void)i, (void)p, (void)n;
	erofs_entry(r);
}
static void op_setattr(fuse_req_t r, fuse_ino_t i, struct stat *a, int s, struct fuse_file_info *f)
{
	(void)i, (void)a, (void)s, (void)f;
	erofs_entry(r);
}
static void op_write(fuse_req_t r, fuse_ino_t i, const char *b, size_t s, off_t o,
		     struct fuse_file_info *f)
{
	(void)i, (void)b, (void)s, (void)o, (void)f;
	erofs_entry(r);
}
static void op_create(fuse_req_t r, fuse_ino_t p, const char *n, mode_t m, struct fuse_file_info *f)
{
	(void)p, (void)n, (void)m, (void)f;
	erofs_entry(r);
}
static void op_setxattr(fuse_req_t r, fuse_ino_t i, const char *n, const char *v, size_t s, int f)
{
	(void)i, (void)n, (void)v, (void)s, (void)f;
	erofs_entry(r);
}
static void op_removexattr(fuse_req_t r, fuse_ino_t i, const char *n)
{
	(void)i, (void)n;
	erofs_entry(r);
}

static const struct fuse_lowlevel_ops ops = {
	.init = op_init,
	.lookup = op_lookup,
	.getattr = op_getattr,
	.readdir = op_readdir,
	.open = op_open,
	.release = op_release,
	.read = op_read,
	.getxattr = op_getxattr,
	.listxattr = op_listxattr,
	.statfs = op_statfs,
	.mknod = op_mknod,
	.mkdir = op_mkdir,
	.unlink = op_unlink,
	.rmdir = op_unlink,
	.symlink = op_symlink,
	.rename = op_rename,
	.link = op_link,
	.setattr = op_setattr,
	.write = op_write,
	.create = op_create,
	.setxattr = op_setxattr,
	.removexattr = op_removexattr,
};

static char *build_plan_json(const struct ckfs *fs, size_t *len)
{
	const struct ck_plan *p = fs->plan;
	char *buf = NULL;
	FILE *f = open_memstream(&buf, len);
	if (!f)
		return NULL;
	fprintf(f, "{\"source\": ");
	ck_json_fput_str(f, fs->source);
	fprintf(f, ", \"format\": \"%s\", \"flat_header_bytes\": %" PRIu64 ", \"targets\": [",
		p->cat->format, fs->flat.header_len);
	for (size_t i = 0; i < p->n; i++) {
		const struct ck_target *t = &p->t[i];
		fprintf(f, "%s\n  {\"name\": ", i ? "," : "");
		ck_json_fput_str(f, t->name);
		fprintf(f, ", \"file\": ");
		char path[300];
		snprintf(path, sizeof path, "tensors/%s", fs->names[i]);
		ck_json_fput_str(f, path);
		fprintf(f, ", \"dtype\": \"%s\", \"shape\": [", ck_dtype_name(t->v.dtype));
		for (int d = 0; d < t->v.ndim; d++)
			fprintf(f, "%s%" PRId64, d ? ", " : "", t->v.shape[d]);
		fprintf(f, "], \"bytes\": %" PRIu64 ", \"group\": %" PRIu32 ", \"flat_offset\": %" PRIu64
			   "}",
			t->nbytes, t->group, fs->flat.off[i]);
	}
	fprintf(f, "\n], \"pytorch_model_bin\": {\"crc32\": %s, \"omitted\": [",
		fs->o.zip_crc ? "true" : "false");
	for (size_t k = 0; k < fs->zip.n_omitted; k++) {
		const struct ck_target *t = &p->t[fs->zip.omitted[k]];
		fprintf(f, "%s\n  {\"name\": ", k ? "," : "");
		ck_json_fput_str(f, t->name);
		fprintf(f, ", \"reason\": \"torch 1.13 has no typed storage for %s\"}",
			ck_dtype_name(t->v.dtype));
	}
	fprintf(f, "]}, \"files\": [");
	for (size_t k = 0; k < fs->n_roots; k++) {
		fprintf(f, "%s{\"name\": ", k ? ", " : "");
		ck_json_fput_str(f, fs->roots[k].name);
		fprintf(f, ", \"bytes\": %" PRIu64 "}", fs->roots[k].v->size);
	}
	fprintf(f, "\n], \"groups\": [");
	for (size_t g = 0; g < p->n_groups; g++) {
		const struct ck_group *gr = &p->g[g];
		fprintf(f, "%s\n  {\"id\": %zu, \"in_bytes\": %" PRIu64 ", \"out_bytes\": %" PRIu64
			   ", \"sources\": [",
			g ? "," : "", g, gr->in_bytes, gr->out_bytes);
		for (size_t k = 0; k < gr->n_sources; k++) {
			const struct ck_catalog_entry *e = &p->cat->entries[gr->sources[k]];
			fprintf(f, "%s{\"name\": ", k ? ", " : "");
			ck_json_fput_str(f, e->t.name);
			fprintf(f, ", \"file\": ");
			ck_json_fput_str(f, p->cat->files[e->file].name);
			fprintf(f, ", \"offset\": %" PRIu64 ", \"bytes\": %" PRIu64 "}", e->t.offset,
				e->t.nbytes);
		}
		fprintf(f, "]}");
	}
	fprintf(f, "\n]}\n");
	return fclose(f) == 0 ? buf : (free(buf), NULL);
}

static void free_fs(struct ckfs *fs)
{
	ck_cache_free(fs->cache);
	for (size_t i = 0; fs->names && i < fs->plan->n; i++)
		free(fs->names[i]);
	free(fs->names);
	ck_strmap_free(&fs->by_name);
	for (size_t i = 0; fs->npy_names && i < fs->plan->n; i++)
		free(fs->npy_names[i]);
	free(fs->npy_names);
	ck_strmap_free(&fs->npy_by_name);
	ck_flat_free(&fs->flat);
	ck_torchzip_free(&fs->zip);
	for (size_t k = 0; k < fs->n_shards; k++)
		ck_flat_free(&fs->shards[k]);
	free(fs->shards);
	for (size_t k = 0; k < fs->n_parts; k++)
		ck_flat_free(&fs->parts[k]);
	free(fs->parts);
	ck_vfile_free(&fs->index_json);
	ck_vfile_free(&fs->config);
	for (size_t k = 0; k < fs->n_roots; k++)
		free(fs->roots[k].name);
	free(fs->roots);
	free(fs->plan_json);
	if (fs->log && fs->log != stderr)
		fclose(fs->log);
	pthread_mutex_destroy(&fs->log_mu);
}

static int add_root(struct ckfs *fs, const char *name, const struct ck_vfile *v)
{
	struct root_file *nr = realloc(fs->roots, (fs->n_roots + 1) * sizeof *nr);
	if (!nr)
		return -1;
	fs->roots = nr;
	if (!(nr[fs->n_roots].name = strdup(name)))
		return -1;
	nr[fs->n_roots++].v = v;
	return 0;
}

/* Targets first[k] .. first[k+1]-1 as one safetensors file. */
static int build_run(struct ckfs *fs, const size_t *first, size_t runs, size_t k,
		     struct ck_flat *out, struct ck_err *err)
{
	size_t a = first[k], b = k + 1 < runs ? first[k + 1] : fs->plan->n;
	uint32_t *ids = malloc((b - a ? b - a : 1) * sizeof *ids);
	if (!ids)
		return ck_fail_sys(err, ENOMEM, "mount");
	for (size_t i = a; i < b; i++)
		ids[i - a] = (uint32_t)i;
	int r = ck_flat_build(fs->plan, ids, b - a, out, err);
	free(ids);
	return r;
}

/* model.safetensors.index.json for the shards, as HF writes it. */
static int build_index_json(struct ckfs *fs, const size_t *first, size_t runs)
{
	char *buf = NULL;
	size_t len;
	FILE *f = open_memstream(&buf, &len);
	if (!f)
		return -1;
	fprintf(f, "{\n  \"metadata\": {\"total_size\": %" PRIu64 "},\n  \"weight_map\": {",
		fs->plan->total_bytes);
	for (size_t k = 0, i = 0; k < runs; k++)
		for (; i < (k + 1 < runs ? first[k + 1] : fs->plan->n); i++) {
			fprintf(f, "%s\n    ", i ? "," : "");
			ck_json_fput_str(f, fs->plan->t[i].name);
			fprintf(f, ": \"model-%05zu-of-%05zu.safetensors\"", k + 1, runs);
		}
	fprintf(f, "\n  }\n}\n");
	if (fclose(f) != 0) {
		free(buf);
		return -1;
	}
	int r = ck_vfile_lit(&fs->index_json, buf, len);
	free(buf);
	return r;
}

/* Split the plan into files of at most `size` bytes of tensors. */
static int build_split(struct ckfs *fs, uint64_t size, struct ck_flat **out, size_t *n_out,
		       size_t **first_out, struct ck_err *err)
{
	size_t *first;
	size_t runs = ck_flat_split(fs->plan, size, &first);
	if (!runs || !(*out = calloc(runs, sizeof **out))) {
		if (runs)
			free(first);
		return ck_fail_sys(err, ENOMEM, "mount");
	}
	for (size_t k = 0; k < runs; k++) {
		if (build_run(fs, first, runs, k, &(*out)[k], err) < 0) {
			*n_out = k;
			free(first);
			return -1;
		}
	}
	*n_out = runs;
	*first_out = first;
	return 0;
}

/* The files of the mount's root: model.safetensors, pytorch_model.bin, and
 * the optional shards and per-rank parts. */
static int build_roots(struct ckfs *fs, struct ck_err *err)
{
	if (ck_flat_build(fs->plan, NULL, 0, &fs->flat, err) < 0 ||
	    ck_torchzip_build(fs->plan, "pytorch_model", &fs->zip, err) < 0)
		return -1;
	if (add_root(fs, "model.safetensors", &fs->flat.v) < 0 ||
	    add_root(fs, "pytorch_model.bin", &fs->zip.v) < 0)
		return ck_fail_sys(err, ENOMEM, "mount");
	for (size_t k = 0; k < fs->zip.n_omitted; k++) {
		const struct ck_target *t = &fs->plan->t[fs->zip.omitted[k]];
		char msg[600];
		snprintf(msg, sizeof msg,
			 "pytorch_model.bin leaves out %s: torch 1.13 has no typed storage for %s "
			 "(tensors/, npy/ and model.safetensors have it)",
			 t->name, ck_dtype_name(t->v.dtype));
		fs_log(fs, msg);
	}
	if (fs->plan->cat->config) {
		char *txt = cJSON_Print(fs->plan->cat->config);
		int r = txt ? ck_vfile_lit(&fs->config, txt, strlen(txt)) : -1;
		if (r == 0)
			r = ck_vfile_lit(&fs->config, "\n", 1);
		cJSON_free(txt);
		if (r < 0 || add_root(fs, "config.json", &fs->config) < 0)
			return ck_fail_sys(err, ENOMEM, "mount");
	}
	char name[128];
	size_t *first;
	if (fs->o.max_shard_size) {
		if (build_split(fs, fs->o.max_shard_size, &fs->shards, &fs->n_shards, &first, err) < 0)
			return -1;
		int r = build_index_json(fs, first, fs->n_shards);
		free(first);
		if (r < 0 || add_root(fs, "model.safetensors.index.json", &fs->index_json) < 0)
			return ck_fail_sys(err, ENOMEM, "mount");
		for (size_t k = 0; k < fs->n_shards; k++) {
			snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", k + 1,
				 fs->n_shards);
			if (add_root(fs, name, &fs->shards[k].v) < 0)
				return ck_fail_sys(err, ENOMEM, "mount");
		}
	}
	if (fs->o.rank >= 0) {
		if (build_split(fs, fs->o.part_size, &fs->parts, &fs->n_parts, &first, err) < 0)
			return -1;
		free(first);
		for (size_t k = 0; k < fs->n_parts; k++) {
			snprintf(name, sizeof name, "model-rank-%" PRId64 "-part-%zu.safetensors",
				 fs->o.rank, k);
			if (add_root(fs, name, &fs->parts[k].v) < 0)
				return ck_fail_sys(err, ENOMEM, "mount");
		}
	}
	return 0;
}

/* -o zip_crc: evaluate every tensor of pytorch_model.bin once, through the
 * cache, and fill in its CRC-32 fields before the mount goes live. */
struct crc_wait {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int done, err;
	uint32_t crc;
};

static void crc_done(void *arg, int err, const struct ck_seg *segs, size_t n)
{
	struct crc_wait *w = arg;
	uint32_t c = w->crc;
	for (size_t i = 0; !err && i < n; i++)
		c = ck_crc32(c, segs[i].p, segs[i].len);
	pthread_mutex_lock(&w->mu);
	w->crc = c;
	w->err = err;
	w->done = 1;
	pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&w->mu);
}

static int zip_crcs(struct ckfs *fs, struct ck_err *err)
{
	const uint64_t step = 16u << 20;
	struct crc_wait w = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
	int rc = 0;
	for (size_t k = 0; rc == 0 && k < fs->zip.n_included; k++) {
		uint32_t t = fs->zip.included[k];
		w.crc = 0;
		for (uint64_t off = 0; rc == 0 && off < fs->plan->t[t].nbytes; off += step) {
			uint64_t len = fs->plan->t[t].nbytes - off;
			struct ck_span sp = {t, off, len < step ? len : step, 0, NULL};
			w.done = 0;
			if (ck_cache_read(fs->cache, &sp, 1, crc_done, &w) < 0) {
				rc = ck_fail_sys(err, ENOMEM, "zip_crc");
				break;
			}
			pthread_mutex_lock(&w.mu);
			while (!w.done)
				pthread_cond_wait(&w.cv, &w.mu);
			pthread_mutex_unlock(&w.mu);
			if (w.err)
				rc = ck_fail_sys(err, -w.err, "zip_crc: evaluating %s",
						 fs->plan->t[t].name);
		}
		if (rc == 0)
			ck_torchzip_set_crc(&fs->zip, k, w.crc);
	}
	pthread_mutex_destroy(&w.mu);
	pthread_cond_destroy(&w.cv);
	return rc;
}

static int report(int *ready_fd, struct ck_err *err)
{
	if (*ready_fd >= 0) {
		dprintf(*ready_fd, "%s\n", err->msg);
		close(*ready_fd);
		*ready_fd = -1;
	}
	return -1;
}

int ck_fs_run(const struct ck_plan *plan, const char *source, const char *mountpoint,
	      const struct ck_fs_opts *o, int fuse_argc, char **fuse_argv, int ready_fd,
	      struct ck_err *err)
{
	struct ckfs fs;
	memset(&fs, 0, sizeof fs);
	fs.plan = plan;
	fs.source = source;
	fs.mountpoint = mountpoint;
	fs.o = *o;
	fs.ready_fd = ready_fd;
	fs.mounted_at = time(NULL);
	fs.log = stderr;
	pthread_mutex_init(&fs.log_mu, NULL);
	int rc = -1;
	struct fuse_session *se = NULL;
	struct fuse_loop_config *cfg = NULL;
	struct fuse_args args = FUSE_ARGS_INIT(fuse_argc, fuse_argv);
	if (o->log_path && !(fs.log = fopen(o->log_path, "a"))) {
		fs.log = stderr;
		ck_fail_sys(err, errno, "%s: cannot open the log", o->log_path);
		goto out;
	}
	if (build_roots(&fs, err) < 0)
		goto out;
	fs.names = calloc(plan->n ? plan->n : 1, sizeof *fs.names);
	fs.npy_names = calloc(plan->n ? plan->n : 1, sizeof *fs.npy_names);
	if (!fs.names || !fs.npy_names || ck_strmap_init(&fs.by_name, plan->n) < 0 ||
	    ck_strmap_init(&fs.npy_by_name, plan->n) < 0) {
		ck_fail_sys(err, ENOMEM, "mount");
		goto out;
	}
	for (size_t i = 0; i < plan->n; i++) {
		uint32_t other;
		if (!(fs.names[i] = ck_escape_name(plan->t[i].name))) {
			ck_fail_sys(err, ENOMEM, "mount");
			goto out;
		}
		char *npy = ck_escape_name_max(plan->t[i].name, 251);
		if (!npy || !(fs.npy_names[i] = malloc(strlen(npy) + 5))) {
			free(npy);
			ck_fail_sys(err, ENOMEM, "mount");
			goto out;
		}
		sprintf(fs.npy_names[i], "%s.npy", npy);
		free(npy);
		if (ck_strmap_put(&fs.npy_by_name, fs.npy_names[i], (uint32_t)i, NULL) == 1) {
			ck_fail(err, CK_E_MAPPING, "two keys map to one npy file name \"%s\"",
				fs.npy_names[i]);
			goto out;
		}
		if (ck_strmap_put(&fs.by_name, fs.names[i], (uint32_t)i, &other) == 1) {
			ck_fail(err, CK_E_MAPPING, "keys \"%s\" and \"%s\" map to one file name \"%s\"",
				plan->t[other].name, plan->t[i].name, fs.names[i]);
			goto out;
		}
	}
	if (!(fs.plan_json = build_plan_json(&fs, &fs.plan_json_len))) {
		ck_fail_sys(err, ENOMEM, "plan.json");
		goto out;
	}
	struct ck_cache_opts co = o->cache;
	co.log = fs_log;
	co.log_ctx = &fs;
	if (ck_cache_new(plan, &co, &fs.cache, err) < 0 || (o->zip_crc && zip_crcs(&fs, err) < 0))
		goto out;
	se = fuse_session_new(&args, &ops, sizeof ops, &fs);
	if (!se) {
		ck_fail(err, CK_E_USAGE, "cannot start the FUSE session (see the options above)");
		goto out;
	}
	if (fuse_set_signal_handlers(se) != 0) {
		ck_fail(err, CK_E_SYS, "cannot install signal handlers");
		goto out_session;
	}
	if (fuse_session_mount(se, mountpoint) != 0) {
		ck_fail(err, CK_E_SYS, "%s: cannot mount (is it an empty directory, and is /dev/fuse "
				       "usable?)",
			mountpoint);
		goto out_signals;
	}
	if (!o->foreground) { /* detach stdio; messages go to the log, if any */
		int null = open("/dev/null", O_RDWR | O_CLOEXEC);
		if (null >= 0) {
			dup2(null, 0);
			dup2(null, 1);
			if (!o->log_path)
				dup2(null, 2);
			close(null);
		}
		if (chdir("/") != 0)
			fs_log(&fs, "cannot chdir to /");
	}
	cfg = fuse_loop_cfg_create();
	if (!cfg) {
		ck_fail_sys(err, ENOMEM, "FUSE loop");
		goto out_unmount;
	}
	fuse_loop_cfg_set_max_threads(cfg, (unsigned)(o->fuse_threads > 0 ? o->fuse_threads : 10));
	fuse_loop_cfg_set_clone_fd(cfg, 0);
	rc = fuse_session_loop_mt(se, cfg) == 0 ? 0 : -1;
	if (rc < 0)
		ck_fail(err, CK_E_SYS, "the FUSE loop failed");
	fuse_loop_cfg_destroy(cfg);
out_unmount:
	/* evaluators may still be answering requests (kernel readahead): let
	 * them finish and join them before the session goes away */
	ck_cache_free(fs.cache);
	fs.cache = NULL;
	fuse_session_unmount(se);
out_signals:
	fuse_remove_signal_handlers(se);
out_session:
	fuse_session_destroy(se);
out:
	if (rc < 0)
		report(&fs.ready_fd, err);
	fuse_opt_free_args(&args);
	free_fs(&fs);
	return rc;
}
