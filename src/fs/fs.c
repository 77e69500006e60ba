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

#include "../kern/cpu.h"
#include "../util/crc32.h"
#include "../util/jsonw.h"
#include "../plan/npy.h"
#include "../plan/shard.h"
#include "../util/fileio.h"
#include "bdi.h"
#include "bufpool.h"
#include "fsview.h"

/* Inodes. A one-view mount puts its view's root at FUSE's root inode (1);
 * a --ranks mount lists rank directories at 1 and gives each view a range
 * from 2 on. Within a view's range (from its base):
 *   +0 its root, +1 tensors/, +2 .ckptfs/, +3 stats.json, +4 plan.json,
 *   +5 npy/, +8+i target i, +8+n+i its npy file, +8+2n+k root file k. */
enum { V_ROOT, V_TENSORS, V_META, V_STATS, V_PLAN, V_NPY, V_FIRST = 8 };
#define INO_TOP 1
#define TIMEOUT 86400.0 /* the view is immutable */
#define BLKSIZE (1u << 20)

struct ckfs {
	const struct ck_plan *cache_plan;
	struct fs_view *views;
	size_t n_views;
	int multi; /* rank directories at the top */
	const char *source, *mountpoint;
	struct ck_fs_opts o;
	struct ck_cache *cache;
	struct ck_bufpool pool; /* reply buffers of direct reads */
	int ready_fd;
	FILE *log;
	pthread_mutex_t log_mu;
	time_t mounted_at;
};

enum kind { N_NONE, N_TOP, N_ROOT, N_TENSORS, N_META, N_STATS, N_PLAN, N_NPYDIR, N_TARGET, N_NPY,
	    N_FILE };

/* An inode, decoded. */
struct node {
	enum kind k;
	const struct fs_view *v;
	uint32_t i; /* target index (N_TARGET, N_NPY) or root file index (N_FILE) */
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

static uint64_t view_size(const struct fs_view *v)
{
	return V_FIRST + 2 * (uint64_t)v->plan->n + v->n_roots;
}

static struct node decode(const struct ckfs *fs, fuse_ino_t ino)
{
	struct node nd = {N_NONE, NULL, 0};
	if (fs->multi && ino == INO_TOP) {
		nd.k = N_TOP;
		return nd;
	}
	size_t lo = 0, hi = fs->n_views; /* last view whose base <= ino */
	while (hi - lo > 1) {
		size_t m = lo + (hi - lo) / 2;
		if (fs->views[m].base <= ino)
			lo = m;
		else
			hi = m;
	}
	const struct fs_view *v = &fs->views[lo];
	if (ino < v->base || ino - v->base >= view_size(v))
		return nd;
	uint64_t off = ino - v->base, n = v->plan->n;
	static const enum kind fixed[V_FIRST] = {N_ROOT, N_TENSORS, N_META,  N_STATS,
						 N_PLAN, N_NPYDIR,  N_NONE, N_NONE};
	nd.v = v;
	if (off < V_FIRST)
		nd.k = fixed[off];
	else if (off < V_FIRST + n)
		nd.k = N_TARGET, nd.i = (uint32_t)(off - V_FIRST);
	else if (off < V_FIRST + 2 * n)
		nd.k = N_NPY, nd.i = (uint32_t)(off - V_FIRST - n);
	else
		nd.k = N_FILE, nd.i = (uint32_t)(off - V_FIRST - 2 * n);
	return nd;
}

static fuse_ino_t ino_of(const struct fs_view *v, enum kind k, uint32_t i)
{
	switch (k) {
	case N_ROOT: return v->base + V_ROOT;
	case N_TENSORS: return v->base + V_TENSORS;
	case N_META: return v->base + V_META;
	case N_STATS: return v->base + V_STATS;
	case N_PLAN: return v->base + V_PLAN;
	case N_NPYDIR: return v->base + V_NPY;
	case N_TARGET: return v->base + V_FIRST + i;
	case N_NPY: return v->base + V_FIRST + v->plan->n + i;
	case N_FILE: return v->base + V_FIRST + 2 * v->plan->n + i;
	default: return INO_TOP;
	}
}

static int is_dir(enum kind k)
{
	return k == N_TOP || k == N_ROOT || k == N_TENSORS || k == N_META || k == N_NPYDIR;
}

/* -o npy_f32: BF16 and FP8 targets (no NumPy dtype) served widened to F32. */
static int npy_widens(const struct ckfs *fs, const struct ck_target *t)
{
	enum ck_dtype dt = t->v.dtype;
	return fs->o.npy_f32 && (dt == CK_DT_BF16 || dt == CK_DT_F8_E4M3 || dt == CK_DT_F8_E5M2);
}

static uint64_t npy_data_bytes(const struct ckfs *fs, const struct ck_target *t)
{
	return npy_widens(fs, t) ? t->nbytes / ck_dtype_size(t->v.dtype) * 4 : t->nbytes;
}

static size_t npy_header(const struct ckfs *fs, const struct ck_target *t, char *buf)
{
	return ck_npy_header(npy_widens(fs, t) ? CK_DT_F32 : t->v.dtype, t->v.ndim, t->v.shape,
			     buf, 256);
}

static void fill_attr(const struct ckfs *fs, fuse_ino_t ino, struct node nd, struct stat *st)
{
	memset(st, 0, sizeof *st);
	st->st_ino = ino;
	st->st_uid = getuid();
	st->st_gid = getgid();
	st->st_blksize = BLKSIZE;
	st->st_mtime = st->st_ctime = st->st_atime = fs->mounted_at;
	if (is_dir(nd.k)) {
		st->st_mode = S_IFDIR | 0555;
		st->st_nlink = 2;
		return;
	}
	st->st_mode = S_IFREG | 0444;
	st->st_nlink = 1;
	if (nd.k == N_FILE)
		st->st_size = (off_t)nd.v->roots[nd.i].v->size;
	else if (nd.k == N_PLAN)
		st->st_size = (off_t)nd.v->plan_json_len;
	else if (nd.k == N_TARGET)
		st->st_size = (off_t)nd.v->plan->t[nd.i].nbytes;
	else if (nd.k == N_NPY) {
		char h[256];
		const struct ck_target *t = &nd.v->plan->t[nd.i];
		st->st_size = (off_t)(npy_header(fs, t, h) + npy_data_bytes(fs, t));
	}
	st->st_blocks = (st->st_size + 511) / 512;
}

static void reply_entry(fuse_req_t req, const struct ckfs *fs, fuse_ino_t ino)
{
	struct fuse_entry_param e;
	memset(&e, 0, sizeof e);
	struct node nd = decode(fs, ino);
	e.ino = ino;
	e.attr_timeout = e.entry_timeout = nd.k == N_STATS ? 0 : TIMEOUT;
	fill_attr(fs, ino, nd, &e.attr);
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
	size_t n = 0;
	for (size_t k = 0; k < fs->n_views; k++)
		n += fs->views[k].plan->n;
	char msg[8400];
	if (fs->multi)
		snprintf(msg, sizeof msg, "mounted %s on %s (%zu ranks, %zu tensors, %zu evaluated "
					  "once for all)",
			 fs->source, fs->mountpoint, fs->n_views, n, fs->cache_plan->n);
	else
		snprintf(msg, sizeof msg, "mounted %s on %s (%zu tensors)", fs->source,
			 fs->mountpoint, n);
	fs_log(fs, msg);
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct ckfs *fs = fuse_req_userdata(req);
	struct node p = decode(fs, parent);
	fuse_ino_t ino = 0;
	uint32_t i;
	if (p.k == N_TOP) {
		for (size_t k = 0; !ino && k < fs->n_views; k++)
			if (!strcmp(name, fs->views[k].dir))
				ino = ino_of(&fs->views[k], N_ROOT, 0);
	} else if (p.k == N_ROOT) {
		enum kind k = !strcmp(name, "tensors")	 ? N_TENSORS
			      : !strcmp(name, ".ckptfs") ? N_META
			      : !strcmp(name, "npy")	 ? N_NPYDIR
							 : N_NONE;
		if (k != N_NONE)
			ino = ino_of(p.v, k, 0);
		for (size_t r = 0; !ino && r < p.v->n_roots; r++)
			if (!strcmp(name, p.v->roots[r].name))
				ino = ino_of(p.v, N_FILE, (uint32_t)r);
	} else if (p.k == N_META) {
		ino = !strcmp(name, "stats.json")  ? ino_of(p.v, N_STATS, 0)
		      : !strcmp(name, "plan.json") ? ino_of(p.v, N_PLAN, 0)
						   : 0;
	} else if (p.k == N_TENSORS) {
		if (ck_strmap_get(&p.v->by_name, name, &i) == 0)
			ino = ino_of(p.v, N_TARGET, i);
	} else if (p.k == N_NPYDIR) {
		if (ck_strmap_get(&p.v->npy_by_name, name, &i) == 0)
			ino = ino_of(p.v, N_NPY, i);
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
	struct node nd = decode(fs, ino);
	if (nd.k == N_NONE) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	struct stat st;
	fill_attr(fs, ino, nd, &st);
	fuse_reply_attr(req, &st, nd.k == N_STATS ? 0 : TIMEOUT);
}

/* Entry i of a directory: name, inode, whether a directory. */
static int dir_entry(const struct ckfs *fs, fuse_ino_t ino, struct node d, size_t i,
		     const char **name, fuse_ino_t *e)
{
	static const char *const root[] = {"tensors", ".ckptfs", "npy"};
	static const enum kind root_k[] = {N_TENSORS, N_META, N_NPYDIR};
	static const char *const meta[] = {"stats.json", "plan.json"};
	static const enum kind meta_k[] = {N_STATS, N_PLAN};
	if (i < 2) { /* . and .. */
		*name = i ? ".." : ".";
		/* a view's root has the top (or, alone, itself: inode 1) above it */
		*e = i == 0 ? ino : d.k == N_TOP || d.k == N_ROOT ? INO_TOP : ino_of(d.v, N_ROOT, 0);
		return 1;
	}
	i -= 2;
	switch (d.k) {
	case N_TOP:
		if (i >= fs->n_views)
			return 0;
		*name = fs->views[i].dir;
		*e = ino_of(&fs->views[i], N_ROOT, 0);
		return 1;
	case N_ROOT:
		if (i < 3) {
			*name = root[i];
			*e = ino_of(d.v, root_k[i], 0);
			return 1;
		}
		if (i - 3 >= d.v->n_roots)
			return 0;
		*name = d.v->roots[i - 3].name;
		*e = ino_of(d.v, N_FILE, (uint32_t)(i - 3));
		return 1;
	case N_META:
		if (i >= 2)
			return 0;
		*name = meta[i];
		*e = ino_of(d.v, meta_k[i], 0);
		return 1;
	case N_TENSORS:
	case N_NPYDIR:
		if (i >= d.v->plan->n)
			return 0;
		*name = d.k == N_TENSORS ? d.v->names[i] : d.v->npy_names[i];
		*e = ino_of(d.v, d.k == N_TENSORS ? N_TARGET : N_NPY, (uint32_t)i);
		return 1;
	default:
		return 0;
	}
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi)
{
	(void)fi;
	struct ckfs *fs = fuse_req_userdata(req);
	struct node d = decode(fs, ino);
	if (!is_dir(d.k)) {
		fuse_reply_err(req, d.k == N_NONE ? ENOENT : ENOTDIR);
		return;
	}
	char *buf = malloc(size);
	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	size_t used = 0;
	const char *name;
	fuse_ino_t e;
	for (size_t i = (size_t)off; dir_entry(fs, ino, d, i, &name, &e); i++) {
		struct stat st;
		memset(&st, 0, sizeof st);
		st.st_ino = e;
		st.st_mode = is_dir(decode(fs, e).k) ? S_IFDIR : S_IFREG;
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
		", \"evaluations_in_flight\": %" PRIu64 ", \"direct_reads\": %" PRIu64
		", \"prefetches\": %" PRIu64 ", \"io\": \"%s\"}\n",
		s.source_bytes_read, s.read_requests, s.groups_evaluated, s.regions_evaluated,
		s.cache_hits, s.cache_misses, s.cache_bytes, fs->o.cache.cache_size,
		s.cache_evictions, s.read_errors, s.evaluations_in_flight, s.direct_reads, s.prefetches,
		fs->o.cache.use_uring && !ck_cache_uring_fell_back(fs->cache) ? "io_uring" : "pread");
	return fclose(f) == 0 ? buf : (free(buf), NULL);
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct ckfs *fs = fuse_req_userdata(req);
	struct node nd = decode(fs, ino);
	if (nd.k == N_NONE) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC)) {
		fuse_reply_err(req, EROFS);
		return;
	}
	if (nd.k == N_STATS) { /* live: a snapshot per open, never a cached copy */
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
	struct ckfs *fs = fuse_req_userdata(req);
	if (decode(fs, ino).k == N_STATS && fi->fh) {
		struct snapshot *s = (struct snapshot *)(uintptr_t)fi->fh;
		free(s->data);
		free(s);
	}
	fuse_reply_err(req, 0);
}

struct pending {
	fuse_req_t req;
	struct ckfs *fs;
	uint64_t len;	      /* of the read */
	struct ck_span *spans; /* target spans and literal spans, in file order */
	size_t n;
	char npy_head[256];
	enum ck_dtype widen; /* npy_f32: the target span holds these, widen to F32 */
	uint64_t skip;	     /* bytes of the first widened element before the read */
	/* direct spans (renames, read from the source file): fd >= 0 */
	int *dfd;
	uint64_t *dpos;
	size_t n_direct;
};

static void pending_free(struct pending *p)
{
	free(p->spans);
	free(p->dfd);
	free(p->dpos);
	free(p);
}

/* Reply with literal, direct (file) and cache bytes in file order: the file
 * ranges are read into one pooled buffer (at their offsets in the reply),
 * everything else goes out straight from where it is (fuse_reply_iov). segs:
 * the cache's bytes for the other target spans, in order. */
static void reply_direct(struct ckfs *fs, struct pending *p, const struct ck_seg *segs, size_t n)
{
	unsigned char *buf = ck_bufpool_get(&fs->pool, p->len);
	size_t cnt = n;
	for (size_t i = 0; i < p->n; i++)
		cnt += p->spans[i].lit || p->dfd[i] >= 0;
	struct iovec stack[16];
	struct iovec *iov = cnt <= 16 ? stack : malloc(cnt * sizeof *iov);
	int err = !buf || !iov ? ENOMEM : 0;
	size_t k = 0, s = 0;
	for (size_t i = 0; i < p->n && !err; i++) {
		const struct ck_span *sp = &p->spans[i];
		if (sp->lit) {
			iov[k++] = (struct iovec){(void *)sp->lit, sp->len};
		} else if (p->dfd[i] >= 0) {
			int r = ck_pread_full(p->dfd[i], buf + sp->dst, sp->len, p->dpos[i]);
			if (r < 0)
				err = EIO; /* shorter than catalogued: changed under us */
			iov[k++] = (struct iovec){buf + sp->dst, sp->len};
		} else {
			for (; s < n && segs[s].dst < sp->dst + sp->len; s++)
				iov[k++] = (struct iovec){(void *)segs[s].p, segs[s].len};
		}
	}
	if (err)
		fuse_reply_err(p->req, err);
	else
		fuse_reply_iov(p->req, iov, (int)k);
	if (iov != stack)
		free(iov);
	ck_bufpool_put(&fs->pool, buf, p->len);
}

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
	} else if (p->n_direct) {
		reply_direct(p->fs, p, segs, n);
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
	pending_free(p);
}

static void reply_slice(fuse_req_t req, const char *data, size_t len, size_t size, off_t off)
{
	if ((size_t)off >= len)
		fuse_reply_buf(req, NULL, 0);
	else
		fuse_reply_buf(req, data + off, len - (size_t)off < size ? len - (size_t)off : size);
}

/* Target spans of renamed tensors (one contiguous, cast-free source range)
 * are answered from the source files themselves, not the cache. Returns the
 * number of spans left for the cache (copied to *rest), or -errno. */
static long split_direct(struct ckfs *fs, struct pending *p, struct ck_span **rest)
{
	p->dfd = malloc((p->n ? p->n : 1) * sizeof *p->dfd);
	p->dpos = malloc((p->n ? p->n : 1) * sizeof *p->dpos);
	*rest = malloc((p->n ? p->n : 1) * sizeof **rest);
	if (!p->dfd || !p->dpos || !*rest)
		return -ENOMEM;
	long k = 0;
	for (size_t i = 0; i < p->n; i++) {
		const struct ck_span *s = &p->spans[i];
		int r = 0;
		p->dfd[i] = -1;
		if (!s->lit && !p->widen)
			r = ck_cache_direct(fs->cache, s->target, s->off, s->len, &p->dfd[i],
					    &p->dpos[i]);
		if (r < 0)
			return r;
		p->n_direct += r == 1;
		if (!s->lit && r == 0)
			(*rest)[k++] = *s;
	}
	return k;
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	struct ckfs *fs = fuse_req_userdata(req);
	struct node nd = decode(fs, ino);
	if (nd.k == N_STATS) {
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
	if (nd.k == N_PLAN) {
		reply_slice(req, nd.v->plan_json, nd.v->plan_json_len, size, off);
		return;
	}
	if (nd.k != N_FILE && nd.k != N_TARGET && nd.k != N_NPY) {
		fuse_reply_err(req, is_dir(nd.k) ? EISDIR : ENOENT);
		return;
	}
	struct pending *p = calloc(1, sizeof *p);
	if (!p) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	const struct ck_vfile *vf = nd.k == N_FILE ? nd.v->roots[nd.i].v : NULL;
	const struct ck_target *t = nd.k == N_FILE ? NULL : &nd.v->plan->t[nd.i];
	uint32_t ct = nd.k == N_FILE ? 0 : fs_view_cache_target(nd.v, nd.i);
	uint64_t total, head = 0;
	if (vf) {
		total = vf->size;
	} else if (nd.k == N_TARGET) {
		total = t->nbytes;
	} else {
		head = npy_header(fs, t, p->npy_head);
		total = head + npy_data_bytes(fs, t);
	}
	if ((uint64_t)off >= total || size == 0) {
		free(p);
		fuse_reply_buf(req, NULL, 0);
		return;
	}
	uint64_t len = (uint64_t)size < total - (uint64_t)off ? size : total - (uint64_t)off;
	uint64_t end = (uint64_t)off + len;
	p->req = req;
	p->fs = fs;
	p->len = len;
	size_t n = vf ? ck_vfile_spans(vf, (uint64_t)off, len, NULL, 0) : 2;
	p->spans = calloc(n ? n : 1, sizeof *p->spans);
	if (p->spans && vf) {
		p->n = ck_vfile_spans(vf, (uint64_t)off, len, p->spans, n);
	} else if (p->spans && nd.k == N_NPY) { /* the header, then the tensor */
		if ((uint64_t)off < head)
			p->spans[p->n++] = (struct ck_span){0, 0, (end < head ? end : head) - (uint64_t)off,
							    0, (unsigned char *)p->npy_head + off};
		uint64_t a = (uint64_t)off > head ? (uint64_t)off : head;
		if (end > head && npy_widens(fs, t)) {
			/* whole narrow elements covering the F32 bytes [a, end) */
			uint64_t e0 = (a - head) / 4, e1 = (end - head + 3) / 4;
			size_t es = ck_dtype_size(t->v.dtype);
			p->widen = t->v.dtype;
			p->skip = (a - head) - e0 * 4;
			p->spans[p->n++] = (struct ck_span){ct, e0 * es, (e1 - e0) * es,
							    a - (uint64_t)off, NULL};
		} else if (end > head) {
			p->spans[p->n++] = (struct ck_span){ct, a - head, end - a, a - (uint64_t)off, NULL};
		}
	} else if (p->spans) {
		p->spans[p->n++] = (struct ck_span){ct, (uint64_t)off, len, 0, NULL};
	}
	struct ck_span *rest = NULL;
	long nr = p->spans ? split_direct(fs, p, &rest) : -ENOMEM;
	if (nr < 0) {
		fuse_reply_err(req, (int)-nr);
		free(rest);
		pending_free(p);
		return;
	}
	if (nr == 0 && p->n_direct) { /* all from the source files, and literals */
		reply_direct(fs, p, NULL, 0);
		free(rest);
		pending_free(p);
		return;
	}
	int r = ck_cache_read(fs->cache, rest, (size_t)nr, read_done, p);
	free(rest);
	if (r < 0) {
		pending_free(p);
		fuse_reply_err(req, ENOMEM);
	}
	/* the reply comes from read_done, possibly on an evaluator thread */
}

/* Extended attributes of tensor files: dtype, shape, group and its sources. */
static char *xattr_value(const struct ck_plan *plan, const struct ck_target *t, const char *name,
			 size_t *len)
{
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
		const struct ck_group *g = &plan->g[t->group];
		fputc('[', f);
		for (size_t k = 0; k < g->n_sources; k++) {
			fprintf(f, "%s", k ? ", " : "");
			ck_json_fput_str(f, plan->cat->entries[g->sources[k]].t.name);
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
	struct node nd = decode(fs, ino);
	size_t len;
	char *v = nd.k == N_TARGET ? xattr_value(nd.v->plan, &nd.v->plan->t[nd.i], name, &len) : NULL;
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
	struct node nd = decode(fs, ino);
	const struct ck_target *t = nd.k == N_TARGET ? &nd.v->plan->t[nd.i] : NULL;
	if (!t) {
		reply_sized(req, "", 0, size);
	} else if (!t->shard) {
		reply_sized(req, XATTRS, sizeof XATTRS, size);
	} else {
		static const char GLOBAL[] = "user.ckptfs.global_name";
		int g = t->shard->global_name != NULL;
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
	uint64_t bytes = 0, files = 7;
	for (size_t k = 0; k < fs->n_views; k++) {
		const struct fs_view *v = &fs->views[k];
		bytes += 2 * v->plan->total_bytes; /* tensors/ and npy/ */
		for (size_t r = 0; r < v->n_roots; r++)
			bytes += v->roots[r].v->size;
		files += view_size(v);
	}
	s.f_bsize = s.f_frsize = 4096;
	s.f_blocks = (bytes + 4095) / 4096;
	s.f_files = files;
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
	for (size_t vi = 0; vi < fs->n_views; vi++) {
	struct fs_view *v = &fs->views[vi];
	for (size_t k = 0; rc == 0 && k < v->zip.n_included; k++) {
		uint32_t t = fs_view_cache_target(v, v->zip.included[k]);
		w.crc = 0;
		for (uint64_t off = 0; rc == 0 && off < fs->cache_plan->t[t].nbytes; off += step) {
			uint64_t len = fs->cache_plan->t[t].nbytes - off;
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
						 fs->cache_plan->t[t].name);
		}
		if (rc == 0)
			ck_torchzip_set_crc(&v->zip, k, w.crc);
	}
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

static void free_fs(struct ckfs *fs)
{
	ck_cache_free(fs->cache);
	for (size_t k = 0; k < fs->n_views; k++)
		fs_view_free(&fs->views[k]);
	free(fs->views);
	ck_bufpool_destroy(&fs->pool);
	if (fs->log && fs->log != stderr)
		fclose(fs->log);
	pthread_mutex_destroy(&fs->log_mu);
}

int ck_fs_run(const struct ck_plan *cache_plan, const struct ck_fs_view *views, size_t n_views,
	      const char *source, const char *mountpoint, const struct ck_fs_opts *o,
	      int fuse_argc, char **fuse_argv, int ready_fd, struct ck_err *err)
{
	struct ckfs fs;
	memset(&fs, 0, sizeof fs);
	fs.cache_plan = cache_plan;
	fs.source = source;
	fs.mountpoint = mountpoint;
	fs.o = *o;
	fs.ready_fd = ready_fd;
	fs.mounted_at = time(NULL);
	fs.log = stderr;
	fs.multi = n_views != 1 || views[0].dir[0];
	pthread_mutex_init(&fs.log_mu, NULL);
	/* one reply buffer per FUSE worker, kept: requests are at most 1 MiB */
	ck_bufpool_init(&fs.pool, 1u << 20, (size_t)(o->fuse_threads > 0 ? o->fuse_threads : 10));
	int rc = -1;
	struct fuse_session *se = NULL;
	struct fuse_loop_config *cfg = NULL;
	struct fuse_args args = FUSE_ARGS_INIT(fuse_argc, fuse_argv);
	if (o->log_path && !(fs.log = fopen(o->log_path, "a"))) {
		fs.log = stderr;
		ck_fail_sys(err, errno, "%s: cannot open the log", o->log_path);
		goto out;
	}
	if (!(fs.views = calloc(n_views ? n_views : 1, sizeof *fs.views))) {
		ck_fail_sys(err, ENOMEM, "mount");
		goto out;
	}
	struct fs_view_opts vo = {source,	    o->max_shard_size, o->part_size, o->zip_crc,
				  o->cache.no_direct, fs_log,		   &fs};
	uint64_t base = fs.multi ? INO_TOP + 1 : INO_TOP;
	for (size_t k = 0; k < n_views; k++, fs.n_views++) {
		struct fs_view *v = &fs.views[k];
		v->plan = views[k].plan;
		v->cache_idx = views[k].cache_idx;
		v->rank = views[k].rank;
		snprintf(v->dir, sizeof v->dir, "%s", views[k].dir);
		v->base = base;
		if (fs_view_build(v, &vo, err) < 0) {
			fs.n_views++;
			goto out;
		}
		base += view_size(v);
	}
	struct ck_cache_opts co = o->cache;
	co.log = fs_log;
	co.log_ctx = &fs;
	if (ck_cache_new(cache_plan, &co, &fs.cache, err) < 0 ||
	    (o->zip_crc && zip_crcs(&fs, err) < 0))
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
