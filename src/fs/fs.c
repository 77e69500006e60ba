#include "fs_int.h"

#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../plan/explain.h"
#include "../plan/shard.h"
#include "../util/crc32.h"
#include "../util/jsonw.h"
#include "../view/tree.h"
#include "bdi.h"
#include "bufpool.h"
#include "ready.h"

void fs_log(void *ctx, const char *msg)
{
	struct ckfs *fs = ctx;
	if (!fs->log)
		return;
	pthread_mutex_lock(&fs->log_mu);
	fputs("ckptfs: ", fs->log);
	ck_fput_safe(fs->log, msg); /* keys and paths: one line each, no raw ESC */
	fputc('\n', fs->log);
	fflush(fs->log);
	pthread_mutex_unlock(&fs->log_mu);
}

uint64_t fs_ino_count(const struct ck_tree *v)
{
	return V_FIRST + 2 * (uint64_t)v->plan->n + v->n_roots + v->n_sub;
}

struct node fs_decode(const struct ckfs *fs, fuse_ino_t ino)
{
	struct node nd = {N_NONE, NULL, 0};
	if (fs->multi && ino == INO_TOP) {
		nd.k = N_TOP;
		return nd;
	}
	size_t nt = fs->srv->n_top_files;
	if (fs->multi && nt && ino > INO_TOP && ino <= INO_TOP + 1 + nt) {
		nd.k = ino == INO_TOP + 1 ? N_TOPDIR : N_TOPFILE;
		nd.i = (uint32_t)(ino - INO_TOP - 2);
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
	const struct ck_tree *v = &fs->views[lo];
	if (ino < v->base || ino - v->base >= fs_ino_count(v))
		return nd;
	uint64_t off = ino - v->base, n = v->plan->n;
	const enum kind fixed[V_FIRST] = {N_ROOT, N_TENSORS, N_META, N_STATS,
					  N_PLAN, N_NPYDIR,  v->n_sub ? N_SUBDIR : N_NONE, N_NONE};
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

fuse_ino_t fs_ino_of(const struct ck_tree *v, enum kind k, uint32_t i)
{
	switch (k) {
	case N_ROOT: return v->base + V_ROOT;
	case N_TENSORS: return v->base + V_TENSORS;
	case N_META: return v->base + V_META;
	case N_STATS: return v->base + V_STATS;
	case N_PLAN: return v->base + V_PLAN;
	case N_NPYDIR: return v->base + V_NPY;
	case N_SUBDIR: return v->base + V_SUB;
	case N_TARGET: return v->base + V_FIRST + i;
	case N_NPY: return v->base + V_FIRST + v->plan->n + i;
	case N_FILE: return v->base + V_FIRST + 2 * v->plan->n + i;
	case N_TOPDIR: return INO_TOP + 1;
	case N_TOPFILE: return INO_TOP + 2 + i;
	default: return INO_TOP;
	}
}

int fs_is_dir(enum kind k)
{
	return k == N_TOP || k == N_ROOT || k == N_TENSORS || k == N_META || k == N_NPYDIR ||
	       k == N_SUBDIR || k == N_TOPDIR;
}

/* A file of a lazy dcp/ is laid out when first looked at: its size
 * needs it. 0, or -EIO (logged: why the directory cannot be built). */
static int sub_ready(const struct ckfs *fs, struct node nd)
{
	struct ck_err e;
	if (nd.k != N_FILE || nd.i < nd.v->n_roots || ck_tree_sub_ready(nd.v, &e) == 0)
		return 0;
	char msg[1200];
	snprintf(msg, sizeof msg, "%s%s%s/: %s", nd.v->dir, nd.v->dir[0] ? "/" : "", nd.v->sub_dir,
		 e.msg);
	fs_log((struct ckfs *)fs, msg);
	return -EIO;
}

static void fill_attr(const struct ckfs *fs, fuse_ino_t ino, struct node nd, struct stat *st)
{
	memset(st, 0, sizeof *st);
	st->st_ino = ino;
	st->st_uid = getuid();
	st->st_gid = getgid();
	st->st_blksize = BLKSIZE;
	st->st_mtime = st->st_ctime = st->st_atime = fs->mounted_at;
	if (fs_is_dir(nd.k)) {
		st->st_mode = S_IFDIR | 0555;
		st->st_nlink = 2;
		return;
	}
	st->st_mode = S_IFREG | 0444;
	st->st_nlink = 1;
	if (nd.k == N_STATS) { /* a new snapshot at every read: see op_init */
		st->st_size = STATS_LEN;
		clock_gettime(CLOCK_REALTIME, &st->st_mtim);
	} else if (nd.k == N_FILE)
		st->st_size = (off_t)fs_file(&nd)->v->size;
	else if (nd.k == N_TOPFILE)
		st->st_size = (off_t)fs->srv->top_files[nd.i].v->size;
	else if (nd.k == N_PLAN) {
		const char *json;
		size_t len = 0;
		ck_tree_plan_json(nd.v, &json, &len); /* else size 0: ENOMEM */
		st->st_size = (off_t)len;
	} else if (nd.k == N_TARGET)
		st->st_size = (off_t)nd.v->plan->t[nd.i].nbytes;
	else if (nd.k == N_NPY) {
		struct ck_vfile npy;
		if (ck_tree_npy(nd.v, nd.i, &npy) == 0) /* else size 0: ENOMEM */
			st->st_size = (off_t)npy.size;
		ck_vfile_free(&npy);
	}
	st->st_blocks = (st->st_size + 511) / 512;
}

static void reply_entry(fuse_req_t req, const struct ckfs *fs, fuse_ino_t ino)
{
	struct fuse_entry_param e;
	memset(&e, 0, sizeof e);
	struct node nd = fs_decode(fs, ino);
	if (sub_ready(fs, nd) < 0) {
		fuse_reply_err(req, EIO);
		return;
	}
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
	/* libfuse refuses the INIT (EPROTO, after this returns) unless this
	 * repeats -o max_read */
	conn->max_read = fs->o.max_read;
	if (conn->capable & FUSE_CAP_ASYNC_READ)
		conn->want |= FUSE_CAP_ASYNC_READ;
	/* Every file is immutable, so opens need no answer: an OPEN and a
	 * RELEASE round trip per file were most of a cached re-read of many
	 * small files (0.37 of the passthrough's re-read of two big ones, 1.0
	 * without them). The kernel then keeps cached pages across opens. stats.json
	 * stays live without its open: its mtime moves on every GETATTR (its
	 * attribute timeout is 0), and with auto_inval_data the kernel drops its
	 * page before each read. -o direct_io keeps opens (it is per open). */
	if ((conn->capable & FUSE_CAP_NO_OPEN_SUPPORT) && (conn->capable & FUSE_CAP_AUTO_INVAL_DATA) &&
	    !fs->o.direct_io) {
		conn->want |= FUSE_CAP_AUTO_INVAL_DATA;
		fs->no_open = 1;
	}
	if (ck_raise_bdi_readahead(fs->mountpoint, 1024) < 0)
		fs_log(fs, "could not raise the mount's bdi read_ahead_kb (reads stay at 128 KiB)");
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
	fs_ready_start(fs, msg); /* logs it once the kernel has taken the answer */
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct ckfs *fs = fuse_req_userdata(req);
	struct node p = fs_decode(fs, parent);
	fuse_ino_t ino = 0;
	uint32_t i;
	__atomic_fetch_add(&fs->lookup_requests, 1, __ATOMIC_RELAXED);
	if (p.k == N_TOP) {
		for (size_t k = 0; !ino && k < fs->n_views; k++)
			if (!strcmp(name, fs->views[k].dir))
				ino = fs_ino_of(&fs->views[k], N_ROOT, 0);
		if (!ino && fs->srv->top_dir && !strcmp(name, fs->srv->top_dir))
			ino = fs_ino_of(NULL, N_TOPDIR, 0);
	} else if (p.k == N_TOPDIR) {
		for (size_t r = 0; !ino && r < fs->srv->n_top_files; r++)
			if (!strcmp(name, fs->srv->top_files[r].name))
				ino = fs_ino_of(NULL, N_TOPFILE, (uint32_t)r);
	} else if (p.k == N_ROOT) {
		enum kind k = !strcmp(name, "tensors")			   ? N_TENSORS
			      : !strcmp(name, ".ckptfs")		   ? N_META
			      : !strcmp(name, "npy")			   ? N_NPYDIR
			      : p.v->n_sub && !strcmp(name, p.v->sub_dir) ? N_SUBDIR
									   : N_NONE;
		if (k != N_NONE)
			ino = fs_ino_of(p.v, k, 0);
		for (size_t r = 0; !ino && r < p.v->n_roots; r++)
			if (!strcmp(name, p.v->roots[r].name))
				ino = fs_ino_of(p.v, N_FILE, (uint32_t)r);
	} else if (p.k == N_SUBDIR) {
		for (size_t r = 0; !ino && r < p.v->n_sub; r++)
			if (!strcmp(name, p.v->sub[r].name))
				ino = fs_ino_of(p.v, N_FILE, (uint32_t)(p.v->n_roots + r));
	} else if (p.k == N_META) {
		ino = !strcmp(name, "stats.json")  ? fs_ino_of(p.v, N_STATS, 0)
		      : !strcmp(name, "plan.json") ? fs_ino_of(p.v, N_PLAN, 0)
						   : 0;
	} else if (p.k == N_TENSORS) {
		if (ck_strmap_get(&p.v->by_name, name, &i) == 0)
			ino = fs_ino_of(p.v, N_TARGET, i);
	} else if (p.k == N_NPYDIR) {
		if (ck_strmap_get(&p.v->npy_by_name, name, &i) == 0)
			ino = fs_ino_of(p.v, N_NPY, i);
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
	struct node nd = fs_decode(fs, ino);
	if (nd.k == N_NONE) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	if (sub_ready(fs, nd) < 0) {
		fuse_reply_err(req, EIO);
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
		*e = i == 0			? ino
		     : d.k == N_TOP || d.k == N_ROOT || d.k == N_TOPDIR ? INO_TOP
									 : fs_ino_of(d.v, N_ROOT, 0);
		return 1;
	}
	i -= 2;
	switch (d.k) {
	case N_TOP:
		if (i == fs->n_views && fs->srv->top_dir) {
			*name = fs->srv->top_dir;
			*e = fs_ino_of(NULL, N_TOPDIR, 0);
			return 1;
		}
		if (i >= fs->n_views)
			return 0;
		*name = fs->views[i].dir;
		*e = fs_ino_of(&fs->views[i], N_ROOT, 0);
		return 1;
	case N_TOPDIR:
		if (i >= fs->srv->n_top_files)
			return 0;
		*name = fs->srv->top_files[i].name;
		*e = fs_ino_of(NULL, N_TOPFILE, (uint32_t)i);
		return 1;
	case N_ROOT:
		if (i < 3) {
			*name = root[i];
			*e = fs_ino_of(d.v, root_k[i], 0);
			return 1;
		}
		i -= 3;
		if (d.v->n_sub && i == 0) {
			*name = d.v->sub_dir;
			*e = fs_ino_of(d.v, N_SUBDIR, 0);
			return 1;
		}
		i -= d.v->n_sub ? 1 : 0;
		if (i >= d.v->n_roots)
			return 0;
		*name = d.v->roots[i].name;
		*e = fs_ino_of(d.v, N_FILE, (uint32_t)i);
		return 1;
	case N_SUBDIR:
		if (i >= d.v->n_sub)
			return 0;
		*name = d.v->sub[i].name;
		*e = fs_ino_of(d.v, N_FILE, (uint32_t)(d.v->n_roots + i));
		return 1;
	case N_META:
		if (i >= 2)
			return 0;
		*name = meta[i];
		*e = fs_ino_of(d.v, meta_k[i], 0);
		return 1;
	case N_TENSORS:
	case N_NPYDIR:
		if (i >= d.v->plan->n)
			return 0;
		*name = d.k == N_TENSORS ? d.v->names[i] : d.v->npy_names[i];
		*e = fs_ino_of(d.v, d.k == N_TENSORS ? N_TARGET : N_NPY, (uint32_t)i);
		return 1;
	default:
		return 0;
	}
}

/* One entry of a READDIRPLUS reply: with its attributes, so the kernel keeps
 * the entry and needs no LOOKUP when the file is opened (one round trip per
 * file of a reader that lists, then reads every file). npy/ files answer
 * without (ino 0: the kernel looks them up if they are opened), since their
 * sizes need each file's header built, and so do dcp/'s, whose sizes need
 * the subdirectory laid out, and plan.json, built on first use: done on
 * their LOOKUP, not on a listing. */
static size_t add_plus(fuse_req_t req, const struct ckfs *fs, char *buf, size_t room,
		       const char *name, fuse_ino_t e, off_t next)
{
	struct fuse_entry_param p;
	memset(&p, 0, sizeof p);
	struct node nd = fs_decode(fs, e);
	p.attr.st_ino = e;
	p.attr.st_mode = fs_is_dir(nd.k) ? S_IFDIR : S_IFREG;
	if (nd.k != N_NPY && nd.k != N_PLAN && !(nd.k == N_FILE && nd.i >= nd.v->n_roots)) {
		p.ino = e;
		p.attr_timeout = p.entry_timeout = nd.k == N_STATS ? 0 : TIMEOUT;
		fill_attr(fs, e, nd, &p.attr);
	}
	return fuse_add_direntry_plus(req, buf, room, name, &p, next);
}

static void list_dir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, int plus)
{
	struct ckfs *fs = fuse_req_userdata(req);
	struct node d = fs_decode(fs, ino);
	if (!fs_is_dir(d.k)) {
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
		st.st_mode = fs_is_dir(fs_decode(fs, e).k) ? S_IFDIR : S_IFREG;
		size_t n = plus ? add_plus(req, fs, buf + used, size - used, name, e, (off_t)(i + 1))
				: fuse_add_direntry(req, buf + used, size - used, name, &st, (off_t)(i + 1));
		if (n > size - used)
			break;
		used += n;
	}
	fuse_reply_buf(req, buf, used);
	free(buf);
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi)
{
	(void)fi;
	list_dir(req, ino, size, off, 0);
}

static void op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
			   struct fuse_file_info *fi)
{
	(void)fi;
	list_dir(req, ino, size, off, 1);
}

char *fs_stats_json(struct ckfs *fs, size_t *len)
{
	struct ck_cache_stats s;
	ck_cache_get_stats(fs->cache, &s);
	char *buf = malloc(STATS_LEN);
	if (!buf)
		return NULL;
	int n = snprintf(
		buf, STATS_LEN,
		"{\"source_bytes_read\": %" PRIu64 ", \"read_requests\": %" PRIu64
		", \"groups_evaluated\": %" PRIu64 ", \"regions_evaluated\": %" PRIu64
		", \"cache_hits\": %" PRIu64 ", \"cache_misses\": %" PRIu64 ", \"cache_bytes\": %" PRIu64
		", \"cache_size\": %" PRIu64 ", \"cache_evictions\": %" PRIu64
		", \"cache_dropped\": %" PRIu64 ", \"cache_recycled\": %" PRIu64
		", \"cache_peak_bytes\": %" PRIu64 ", \"read_errors\": %" PRIu64 ", \"evaluations_in_flight\": %" PRIu64
		", \"direct_reads\": %" PRIu64 ", \"streamed_reads\": %" PRIu64 ", \"prefetches\": %" PRIu64
		", \"odirect_files\": %" PRIu64
		", \"open_requests\": %" PRIu64 ", \"lookup_requests\": %" PRIu64 ", \"io\": \"%s\", \"device\": \"%.100s\""
		", \"gpu_reads\": %" PRIu64 ", \"gpu_bytes\": %" PRIu64 "}",
		s.source_bytes_read, s.read_requests, s.groups_evaluated, s.regions_evaluated,
		s.cache_hits, s.cache_misses, s.cache_bytes, fs->o.serve.cache.cache_size,
		s.cache_evictions, s.cache_dropped, s.cache_recycled, s.cache_peak_bytes, s.read_errors,
		s.evaluations_in_flight, s.direct_reads, s.streamed_reads, s.prefetches, s.odirect_files,
		__atomic_load_n(&fs->open_requests, __ATOMIC_RELAXED),
		__atomic_load_n(&fs->lookup_requests, __ATOMIC_RELAXED),
		fs->o.serve.cache.use_uring && !ck_cache_uring_fell_back(fs->cache) ? "io_uring" : "pread",
		fs->srv->gpu ? ck_gpu_name(fs->srv->gpu) : "cpu", s.gpu_reads, s.gpu_bytes);
	/* 22 numbers of at most 20 digits and a 100-byte name fit with room (995 bytes) */
	if (n < 0 || n >= STATS_LEN - 1) {
		free(buf);
		return NULL;
	}
	memset(buf + n, ' ', STATS_LEN - 1 - (size_t)n);
	buf[STATS_LEN - 1] = '\n';
	*len = STATS_LEN;
	return buf;
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct ckfs *fs = fuse_req_userdata(req);
	struct node nd = fs_decode(fs, ino);
	if (nd.k == N_NONE) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC)) {
		fuse_reply_err(req, EROFS);
		return;
	}
	__atomic_fetch_add(&fs->open_requests, 1, __ATOMIC_RELAXED);
	if (fs->no_open) { /* the kernel opens every file itself from now on */
		fuse_reply_err(req, ENOSYS);
		return;
	}
	if (nd.k == N_STATS) { /* live: a snapshot per open, never a cached copy */
		struct snapshot *s = malloc(sizeof *s);
		if (!s || !(s->data = fs_stats_json(fs, &s->len))) {
			free(s);
			fuse_reply_err(req, ENOMEM);
			return;
		}
		pthread_mutex_lock(&fs->snap_mu);
		s->prev = NULL;
		s->next = fs->snaps;
		if (fs->snaps)
			fs->snaps->prev = s;
		fs->snaps = s;
		pthread_mutex_unlock(&fs->snap_mu);
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
	if (fs_decode(fs, ino).k == N_STATS && fi->fh) {
		struct snapshot *s = (struct snapshot *)(uintptr_t)fi->fh;
		pthread_mutex_lock(&fs->snap_mu);
		if (s->prev)
			s->prev->next = s->next;
		else
			fs->snaps = s->next;
		if (s->next)
			s->next->prev = s->prev;
		pthread_mutex_unlock(&fs->snap_mu);
		free(s->data);
		free(s);
	}
	fuse_reply_err(req, 0);
}

#define XATTR_MAX 65536 /* XATTR_SIZE_MAX: the most a getxattr(2) can return */

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
		if (fflush(f) == 0 && *len > XATTR_MAX) {
			/* past the kernel's 64 KiB xattr limit the value could be
			 * listed but never read: say how many, name those that fit */
			rewind(f);
			fprintf(f, "{\"n_sources\": %zu, \"truncated\": true, \"first\": [",
				g->n_sources);
			long room = XATTR_MAX - 64;
			for (size_t k = 0; k < g->n_sources; k++) {
				const char *n = plan->cat->entries[g->sources[k]].t.name;
				if (fflush(f) != 0 || ftell(f) + 8 * (long)strlen(n) + 8 > room)
					break;
				fprintf(f, "%s", k ? ", " : "");
				ck_json_fput_str(f, n);
			}
			fputs("]}", f);
			fflush(f);
			*len = (size_t)ftell(f);
		}
	} else if (t->shard && !strncmp(name, "user.ckptfs.", 12) &&
		   (!strcmp(name + 12, "global_shape") || !strcmp(name + 12, "fragments") ||
		    !strcmp(name + 12, "axis_fragmentations") || !strcmp(name + 12, "replica_id"))) {
		ck_shard_fput_json(f, t->shard, t->v.ndim, name + 12);
	} else if (!strcmp(name, "user.ckptfs.pieces")) {
		ck_explain_json(f, plan, t, t->v.n);
		if (fflush(f) == 0 && *len > XATTR_MAX) { /* the pieces that fit, and how many */
			rewind(f);
			size_t fit = (XATTR_MAX - 128) / (*len / (t->v.n ? t->v.n : 1) + 1);
			fprintf(f, "{\"n_pieces\": %zu, \"truncated\": true, \"first\": ", t->v.n);
			ck_explain_json(f, plan, t, fit);
			fputc('}', f);
		}
	} else if (t->shard && t->shard->global_name && !strcmp(name, "user.ckptfs.global_name")) {
		fputs(t->shard->global_name, f);
	} else
		found = 0;
	long end = ftell(f);
	if (fclose(f) != 0 || !found || end < 0) {
		free(buf);
		return NULL;
	}
	*len = (size_t)end; /* after a rewind the stream's buffer may be longer */
	return buf;
}

static const char XATTRS[] = "user.ckptfs.dtype\0user.ckptfs.shape\0user.ckptfs.group\0"
			     "user.ckptfs.sources\0user.ckptfs.pieces";
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
	struct node nd = fs_decode(fs, ino);
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
	struct node nd = fs_decode(fs, ino);
	const struct ck_target *t = nd.k == N_TARGET ? &nd.v->plan->t[nd.i] : NULL;
	static const char GLOBAL[] = "user.ckptfs.global_name";
	char all[sizeof XATTRS + sizeof SHARD_XATTRS + sizeof GLOBAL];
	size_t n = 0;
	/* only names whose value can be read back (the kernel's 64 KiB limit) */
	const char *lists[] = {XATTRS, t && t->shard ? SHARD_XATTRS : "",
			       t && t->shard ? GLOBAL : ""};
	size_t sizes[] = {sizeof XATTRS, t && t->shard ? sizeof SHARD_XATTRS : 1,
			  t && t->shard ? sizeof GLOBAL : 1};
	for (int l = 0; t && l < 3; l++)
		for (const char *a = lists[l]; a < lists[l] + sizes[l] && *a; a += strlen(a) + 1) {
			size_t len;
			char *v = xattr_value(nd.v->plan, t, a, &len);
			if (v && len <= XATTR_MAX) {
				memcpy(all + n, a, strlen(a) + 1);
				n += strlen(a) + 1;
			}
			free(v);
		}
	reply_sized(req, all, n, size);
}

static void op_statfs(fuse_req_t req, fuse_ino_t ino)
{
	(void)ino;
	struct ckfs *fs = fuse_req_userdata(req);
	struct statvfs s;
	memset(&s, 0, sizeof s);
	uint64_t bytes = 0, files = 7;
	for (size_t k = 0; k < fs->n_views; k++) {
		const struct ck_tree *v = &fs->views[k];
		bytes += 2 * v->plan->total_bytes; /* tensors/ and npy/ */
		for (size_t r = 0; r < v->n_roots; r++)
			bytes += v->roots[r].v->size;
		files += fs_ino_count(v);
	}
	for (size_t r = 0; r < fs->srv->n_top_files; r++)
		bytes += fs->srv->top_files[r].v->size;
	files += fs->srv->n_top_files;
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
	.readdirplus = op_readdirplus,
	.open = op_open,
	.release = op_release,
	.read = fs_op_read,
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

static int report(int *ready_fd, struct ck_err *err)
{
	if (*ready_fd >= 0) {
		dprintf(*ready_fd, "%s\n", err->msg);
		close(*ready_fd);
		*ready_fd = -1;
	}
	return -1;
}

/* A background daemon lets go of the caller's stdio: the caller's pipes
 * must see their end (a script's $(ckptfs mount ...) returns); stderr
 * (libfuse's own messages) goes to the log, if any. */
static void detach_stdio(struct ckfs *fs)
{
	int null = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (null >= 0) {
		dup2(null, 0);
		dup2(null, 1);
		dup2(fs->o.log_path ? fileno(fs->log) : null, 2);
		close(null);
	}
	if (chdir("/") != 0)
		fs_log(fs, "cannot chdir to /");
}

static void free_fs(struct ckfs *fs)
{
	ck_served_stop(fs->srv); /* the caller closes it */
	ck_bufpool_destroy(&fs->pool);
	if (fs->log && fs->log != stderr)
		fclose(fs->log);
	pthread_mutex_destroy(&fs->log_mu);
	while (fs->snaps) {
		struct snapshot *s = fs->snaps;
		fs->snaps = s->next;
		free(s->data);
		free(s);
	}
	pthread_mutex_destroy(&fs->snap_mu);
}

int ck_fs_run(struct ck_served *srv, const char *source, const char *mountpoint,
	      const struct ck_fs_opts *o, int fuse_argc, char **fuse_argv, int ready_fd,
	      struct ck_err *err)
{
	struct ckfs fs;
	memset(&fs, 0, sizeof fs);
	fs.source = source;
	fs.mountpoint = mountpoint;
	fs.o = *o;
	fs.ready_fd = ready_fd;
	fs.mounted_at = time(NULL);
	fs.log = stderr;
	pthread_mutex_init(&fs.log_mu, NULL);
	pthread_mutex_init(&fs.snap_mu, NULL);
	/* one reply buffer per FUSE worker, kept: requests are at most 1 MiB */
	/* (two per worker with -o odirect: the reply and an aligned bounce) */
	ck_bufpool_init(&fs.pool, 1u << 20,
			(size_t)(o->fuse_threads > 0 ? o->fuse_threads : 10) *
				(o->serve.cache.odirect ? 2 : 1));
	int rc = -1;
	struct fuse_session *se = NULL;
	struct fuse_loop_config *cfg = NULL;
	struct fuse_args args = FUSE_ARGS_INIT(fuse_argc, fuse_argv);
	if (o->log_path && !(fs.log = fdopen(o->log_fd, "a"))) {
		close(o->log_fd);
		fs.log = stderr;
		ck_fail_sys(err, errno, "%s: cannot open the log", o->log_path);
		goto out;
	}
	fs.srv = srv;
	/* the kernel keeps what it was given in its page cache unless
	 * direct_io: the daemon's copy of a chunk served whole is a spare (with
	 * direct_io too when -o read_once says the readers keep what they read) */
	fs.o.serve.cache.drop_served |= !o->direct_io;
	if (ck_served_start(srv, &fs.o.serve, fs_log, &fs, err) < 0)
		goto out;
	fs.cache_plan = srv->plan;
	fs.views = srv->trees;
	fs.n_views = srv->n_trees;
	fs.cache = srv->cache;
	fs.multi = fs.n_views != 1 || fs.views[0].dir[0];
	uint64_t base = fs.multi ? INO_TOP + 1 + (srv->n_top_files ? 1 + srv->n_top_files : 0)
				 : INO_TOP;
	for (size_t k = 0; k < fs.n_views; k++) {
		fs.views[k].base = base;
		base += fs_ino_count(&fs.views[k]);
	}
	se = fuse_session_new(&args, &ops, sizeof ops, &fs);
	if (!se) {
		ck_fail(err, CK_E_USAGE, "cannot start the FUSE session (see the options above)");
		goto out;
	}
	if (fuse_set_signal_handlers(se) != 0) {
		ck_fail(err, CK_E_SYS, "cannot install signal handlers");
		goto out_session;
	}
	fs_ready_note_under(&fs);
	if (fuse_session_mount(se, mountpoint) != 0) {
		ck_fail(err, CK_E_SYS, "%s: cannot mount (is it an empty directory, and is /dev/fuse "
				       "usable?)",
			mountpoint);
		goto out_signals;
	}
	if (!o->foreground)
		detach_stdio(&fs);
	cfg = fuse_loop_cfg_create();
	if (!cfg) {
		ck_fail_sys(err, ENOMEM, "FUSE loop");
		goto out_unmount;
	}
	fuse_loop_cfg_set_max_threads(cfg, (unsigned)(o->fuse_threads > 0 ? o->fuse_threads : 10));
	fuse_loop_cfg_set_clone_fd(cfg, 0);
	/* the loop answers the signal that ended it (SIGINT, SIGTERM, SIGHUP:
	 * the handlers fuse_set_signal_handlers installs): a clean stop */
	int loop = fuse_session_loop_mt(se, cfg);
	atomic_store(&fs.loop_ended, 1);
	rc = loop == 0 || loop == SIGINT || loop == SIGTERM || loop == SIGHUP ? 0 : -1;
	if (rc < 0)
		ck_fail(err, CK_E_SYS, "the FUSE loop failed");
	fuse_loop_cfg_destroy(cfg);
out_unmount:
	/* evaluators may still be answering requests (kernel readahead): let
	 * them finish and join them before the session goes away */
	ck_served_stop(srv);
	fs.cache = NULL;
	fuse_session_unmount(se); /* closes the device: a check still waiting fails */
	int refused = fs_ready_join(&fs);
	if (refused && rc == 0)
		rc = fs.ready_refused
			 ? ck_fail_sys(err, refused,
				       "%s: the kernel refused the mount's answer to its INIT (a "
				       "stat of its root failed), nothing mounted",
				       mountpoint)
			 : ck_fail_sys(err, refused,
				       "%s: the mount ended before it answered its first request "
				       "(a stat of its root), nothing mounted",
				       mountpoint);
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
