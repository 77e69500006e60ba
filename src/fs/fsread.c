/* The read path: a read of any file of the tree becomes literal spans
 * (headers, pickles, zip directories), direct spans (renamed tensors, read
 * from their source file) and cache spans (evaluated tensors); the reply
 * goes out from where the bytes are, possibly on an evaluator thread. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "../exec/io.h"
#include "../util/fileio.h"
#include "fs_int.h"

struct pending {
	fuse_req_t req;
	struct ckfs *fs;
	uint64_t len;	      /* of the read */
	struct ck_span *spans; /* target spans and literal spans, in file order */
	size_t n;
	struct ck_vfile npy; /* an npy/ file, built for this read (spans point into it) */
	/* direct spans (renames, read from the source file): fd >= 0 */
	int *dfd;
	uint64_t *dpos;
	int *dodir; /* its fd is an O_DIRECT twin (-o odirect) */
	size_t n_direct, n_odirect;
};

static void pending_free(struct pending *p)
{
	free(p->spans);
	ck_vfile_free(&p->npy);
	free(p->dfd);
	free(p->dpos);
	free(p->dodir);
	free(p);
}

/* The most pieces one reply may have: writev takes UIO_MAXIOV (1024), and
 * fuse_reply_iov puts the reply's header in front of ours. A reply of 1024
 * pieces was refused (EINVAL): its reader waited for good. */
#define MAX_IOV (1024 - 1)

/* Where the O_DIRECT spans of one reply are read: `dio`, a pooled buffer
 * they are read into aligned and answered from (no copy), and `bounce`, a
 * second one taken only for spans that no longer fit, read through it and
 * copied into the reply buffer. */
struct dio_room {
	unsigned char *dio, *bounce;
	size_t used, cap;
};

/* Read direct span i of p; *at: where its bytes are then. zero_copy: an
 * O_DIRECT span may stay in d->dio (else it is copied to buf + dst). 0 or
 * an errno. */
static int read_span(struct ck_bufpool *pool, const struct pending *p, size_t i,
		     unsigned char *buf, struct dio_room *d, int zero_copy, const unsigned char **at)
{
	const struct ck_span *sp = &p->spans[i];
	*at = buf + sp->dst;
	if (!p->dodir[i]) /* shorter than catalogued: changed under us */
		return ck_pread_full(p->dfd[i], buf + sp->dst, sp->len, p->dpos[i]) < 0 ? EIO : 0;
	uint64_t room = ck_io_direct_room(p->dpos[i], sp->len);
	if (zero_copy && d->used + room <= d->cap) {
		long in = ck_io_pread_around(p->dfd[i], d->dio + d->used, sp->len, p->dpos[i]);
		if (in < 0)
			return EIO;
		*at = d->dio + d->used + in;
		d->used += room; /* a multiple of CK_DIO_ALIGN: the next stays aligned */
		return 0;
	}
	if (!d->bounce && !(d->bounce = ck_bufpool_get(pool, d->cap)))
		return ENOMEM;
	return ck_io_pread_direct(p->dfd[i], buf + sp->dst, sp->len, p->dpos[i], d->bounce, d->cap) < 0
		   ? EIO
		   : 0;
}

/* Reply with literal, direct (file) and cache bytes in file order: the file
 * ranges are read into one pooled buffer (at their offsets in the reply) or,
 * read with O_DIRECT, into a second one at aligned places; everything else
 * goes out straight from where it is (fuse_reply_iov). A reply of more
 * pieces than writev takes is gathered into the first buffer instead: a
 * reply the kernel refuses would leave its reader waiting for good. segs:
 * the cache's bytes for the other target spans, in order. */
static void reply_direct(struct ckfs *fs, struct pending *p, const struct ck_seg *segs, size_t n)
{
	size_t cnt = n;
	for (size_t i = 0; i < p->n; i++)
		cnt += p->spans[i].lit || p->dfd[i] >= 0;
	int gather = cnt > MAX_IOV;
	unsigned char *buf = ck_bufpool_get(&fs->pool, p->len);
	struct dio_room d = {NULL, NULL, 0, fs->pool.size};
	if (p->n_odirect && !gather)
		d.dio = ck_bufpool_get(&fs->pool, d.cap);
	struct iovec stack[16];
	struct iovec *iov = gather ? NULL : cnt <= 16 ? stack : malloc(cnt * sizeof *iov);
	int err = !buf || (!gather && !iov) || (p->n_odirect && !gather && !d.dio) ? ENOMEM : 0;
	size_t k = 0, s = 0;
	for (size_t i = 0; i < p->n && !err; i++) {
		const struct ck_span *sp = &p->spans[i];
		const unsigned char *at = sp->lit;
		if (p->dfd[i] >= 0)
			err = read_span(&fs->pool, p, i, buf, &d, !gather, &at);
		if (at && gather && at != buf + sp->dst)
			memcpy(buf + sp->dst, at, sp->len); /* a literal */
		else if (at && !gather)
			iov[k++] = (struct iovec){(void *)at, sp->len};
		for (; !at && s < n && segs[s].dst < sp->dst + sp->len; s++)
			if (gather)
				memcpy(buf + segs[s].dst, segs[s].p, segs[s].len);
			else
				iov[k++] = (struct iovec){(void *)segs[s].p, segs[s].len};
	}
	if (err)
		fuse_reply_err(p->req, err);
	else if (gather)
		fuse_reply_buf(p->req, (const char *)buf, p->len);
	else
		fuse_reply_iov(p->req, iov, (int)k);
	if (iov != stack)
		free(iov);
	ck_bufpool_put(&fs->pool, buf, p->len);
	ck_bufpool_put(&fs->pool, d.dio, d.cap);
	ck_bufpool_put(&fs->pool, d.bounce, d.cap);
}

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

/* A read whose evaluated spans are all streamable (ck_cache_streamable) is
 * answered on this FUSE thread: each span is evaluated straight into one
 * pooled reply buffer, beside the file and literal bytes. Its window reads
 * about its own bytes of source, where the cache would evaluate the whole
 * group first (a random 4 KiB read: 0.04 ms instead of 4.4), and nothing is
 * held. The thread works for one request's bytes, as a direct read does; it
 * never waits for another evaluation. */
static int all_streamable(struct ckfs *fs, const struct pending *p, const struct ck_span *rest,
			  size_t nr)
{
	if (p->n_odirect)
		return 0;
	for (size_t i = 0; i < nr; i++)
		if (!ck_cache_streamable(fs->cache, rest[i].target, 0))
			return 0;
	return 1;
}

static void reply_streamed(struct ckfs *fs, struct pending *p)
{
	unsigned char *buf = ck_bufpool_get(&fs->pool, p->len);
	int err = buf ? 0 : ENOMEM;
	for (size_t i = 0; i < p->n && !err; i++) {
		const struct ck_span *sp = &p->spans[i];
		struct ck_err e;
		if (sp->lit)
			memcpy(buf + sp->dst, sp->lit, sp->len);
		else if (p->dfd[i] >= 0) /* short: the file shrank under the mount */
			err = ck_pread_full(p->dfd[i], buf + sp->dst, sp->len, p->dpos[i]) < 0 ? EIO : 0;
		else if (ck_cache_eval_into(fs->cache, sp->target, sp->off, sp->len, buf + sp->dst,
					    &e) < 0)
			err = e.sys_errno == ENOMEM ? ENOMEM : EIO;
	}
	if (err)
		fuse_reply_err(p->req, err);
	else
		fuse_reply_buf(p->req, (const char *)buf, p->len);
	ck_bufpool_put(&fs->pool, buf, p->len);
}

void fs_reply_slice(fuse_req_t req, const char *data, size_t len, size_t size, off_t off)
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
	p->dodir = calloc(p->n ? p->n : 1, sizeof *p->dodir);
	*rest = malloc((p->n ? p->n : 1) * sizeof **rest);
	if (!p->dfd || !p->dpos || !p->dodir || !*rest)
		return -ENOMEM;
	long k = 0;
	for (size_t i = 0; i < p->n; i++) {
		const struct ck_span *s = &p->spans[i];
		int r = 0;
		p->dfd[i] = -1;
		if (!s->lit)
			r = ck_cache_direct(fs->cache, s->target, s->off, s->len, &p->dfd[i],
					    &p->dpos[i], &p->dodir[i]);
		p->n_odirect += r == 1 && p->dodir[i];
		if (r < 0)
			return r;
		p->n_direct += r == 1;
		if (!s->lit && r == 0)
			(*rest)[k++] = *s;
	}
	return k;
}

void fs_op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	struct ckfs *fs = fuse_req_userdata(req);
	struct node nd = fs_decode(fs, ino);
	if (nd.k == N_STATS && !fi->fh) { /* opened by the kernel alone: a fresh snapshot */
		size_t len = 0;
		char *snap = fs_stats_json(fs, &len);
		if (!snap) {
			fuse_reply_err(req, ENOMEM);
			return;
		}
		fs_reply_slice(req, snap, len, size, off);
		free(snap);
		return;
	}
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
		const char *json;
		size_t n;
		if (ck_tree_plan_json(nd.v, &json, &n) < 0)
			fuse_reply_err(req, ENOMEM);
		else
			fs_reply_slice(req, json, n, size, off);
		return;
	}
	if (nd.k != N_FILE && nd.k != N_TOPFILE && nd.k != N_TARGET && nd.k != N_NPY) {
		fuse_reply_err(req, fs_is_dir(nd.k) ? EISDIR : ENOENT);
		return;
	}
	if (nd.k == N_FILE && nd.i >= nd.v->n_roots && ck_tree_sub_ready(nd.v, NULL) < 0) {
		fuse_reply_err(req, EIO); /* a lazy dcp/ that could not be laid out (logged) */
		return;
	}
	struct pending *p = calloc(1, sizeof *p);
	if (!p) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	const struct ck_vfile *vf = nd.k == N_FILE	  ? fs_file(&nd)->v
				    : nd.k == N_TOPFILE ? fs->srv->top_files[nd.i].v
							: NULL;
	if (nd.k == N_NPY) {
		if (ck_tree_npy(nd.v, nd.i, &p->npy) < 0) {
			pending_free(p);
			fuse_reply_err(req, ENOMEM);
			return;
		}
		vf = &p->npy;
	}
	uint32_t ct = vf ? 0 : ck_tree_cache_target(nd.v, nd.i);
	uint64_t total = vf ? vf->size : nd.v->plan->t[nd.i].nbytes;
	if ((uint64_t)off >= total || size == 0) {
		pending_free(p);
		fuse_reply_buf(req, NULL, 0);
		return;
	}
	uint64_t len = (uint64_t)size < total - (uint64_t)off ? size : total - (uint64_t)off;
	p->req = req;
	p->fs = fs;
	p->len = len;
	size_t n = vf ? ck_vfile_spans(vf, (uint64_t)off, len, NULL, 0) : 1;
	p->spans = calloc(n ? n : 1, sizeof *p->spans);
	if (p->spans && vf)
		p->n = ck_vfile_spans(vf, (uint64_t)off, len, p->spans, n);
	else if (p->spans)
		p->spans[p->n++] = (struct ck_span){ct, (uint64_t)off, len, 0, NULL};
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
	if (all_streamable(fs, p, rest, (size_t)nr)) {
		reply_streamed(fs, p);
		free(rest);
		pending_free(p);
		return;
	}
	int r = ck_cache_read(fs->cache, rest, (size_t)nr, 1, read_done, p);
	free(rest);
	if (r < 0) {
		pending_free(p);
		fuse_reply_err(req, ENOMEM);
	}
	/* the reply comes from read_done, possibly on an evaluator thread */
}

