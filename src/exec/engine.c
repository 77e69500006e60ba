#include "engine.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "../kern/cpu.h"
#include "../kern/ggml.h"
#include "../util/fileio.h"

void ck_engine_init(struct ck_engine *e, const struct ck_plan *plan, int use_uring)
{
	memset(e, 0, sizeof *e);
	e->plan = plan;
	e->use_uring = use_uring;
	e->window_max = CK_WINDOW_MAX;
	e->gpu_min = CK_GPU_MIN_DEFAULT;
}

void ck_eval_ctx_init(struct ck_eval_ctx *c, struct ck_engine *e)
{
	memset(c, 0, sizeof *c);
	c->eng = e;
	ck_io_init(&c->io, e->use_uring, 64, &c->uring_fell_back);
	if (e->gpu)
		c->lane = ck_gpu_lane_take(e->gpu); /* none left: this evaluator stays on CPU */
}

void ck_eval_ctx_free(struct ck_eval_ctx *c)
{
	ck_io_close(&c->io);
	ck_gpu_lane_give(c->lane);
	free(c->win.buf);
	free(c->win.spare);
	free(c->scw.buf);
	free(c->scw.spare);
	free(c->qwin);
	free(c->fwin);
	ck_value_free(&c->qstage.v);
	free(c->reqs);
	free(c->runs);
	free(c->sink);
	memset(c, 0, sizeof *c);
}

/* What one evaluation step needs: a piece restricted to a sub-box. */
struct step {
	const struct ck_piece *p;
	const struct ck_catalog_entry *src;
	int ndim;
	int64_t lo[CK_MAX_DIMS], hi[CK_MAX_DIMS];
	const int64_t *cstride; /* C-order strides of the target, elements */
	const int64_t *shape;	/* the target's shape */
	int64_t e0;		/* first target element of the output buffer */
	unsigned char *out;
	enum ck_dtype tdt;
};

static int64_t src_at(const struct step *s, const int64_t *idx)
{
	int64_t o = s->p->base;
	for (int d = 0; d < s->ndim; d++)
		o += s->p->stride[d] * (idx[d] - s->p->lo[d]);
	return o;
}

struct reqlist {
	struct ck_io_req *r;
	size_t n, cap;
};

/* A read of catalog file `file`: through its O_DIRECT descriptor when the
 * engine opened one (ck_engine_open_direct), else the catalog's. */
static struct ck_io_req src_req(const struct ck_eval_ctx *c, uint32_t file, uint64_t off,
				uint64_t len, void *buf)
{
	const struct ck_engine *e = c->eng;
	if (e->dfd && e->dfd[file] >= 0)
		return (struct ck_io_req){e->dfd[file], off, len, buf, CK_DIO_ALIGN};
	return (struct ck_io_req){e->plan->cat->files[file].fd, off, len, buf, 0};
}

/* Room in l for one more request (c->reqs keeps the grown array). */
static int reqlist_room(struct ck_eval_ctx *c, struct reqlist *l, struct ck_err *err)
{
	if (l->n < l->cap)
		return 0;
	size_t nc = l->cap ? l->cap * 2 : 64;
	struct ck_io_req *nr = realloc(l->r, nc * sizeof *nr);
	if (!nr)
		return ck_fail_sys(err, ENOMEM, "read requests");
	l->r = c->reqs = nr;
	l->cap = c->reqs_cap = nc;
	return 0;
}

static int push_req(struct ck_eval_ctx *c, struct reqlist *l, uint32_t file, uint64_t off,
		    uint64_t len, unsigned char *buf, struct ck_err *err)
{
	struct ck_io_req r = src_req(c, file, off, len, buf);
	if (l->n && l->r[l->n - 1].fd == r.fd) {
		struct ck_io_req *last = &l->r[l->n - 1];
		uint64_t end = last->off + last->len;
		/* the next run, at most a small gap on (MXFP4 runs of odd nibbles
		 * share their boundary byte): coalesce, gap included */
		if (off >= last->off &&
		    off < end + (r.align ? CK_COALESCE_GAP_DIRECT : CK_COALESCE_GAP) &&
		    buf == (unsigned char *)last->buf + (off - last->off)) {
			if (off + len > end)
				last->len = off + len - last->off;
			return 0;
		}
	}
	if (reqlist_room(c, l, err) < 0)
		return -1;
	l->r[l->n++] = r;
	return 0;
}

static int cmp_dim_stride(const void *a, const void *b, void *ctx)
{
	const int64_t *st = ctx;
	int64_t x = st[*(const int *)a], y = st[*(const int *)b];
	return x < y ? -1 : x > y;
}

static int grow(unsigned char **buf, size_t *cap, size_t need, const char *what,
		struct ck_err *err);

/* A quantized GGUF source: reads the whole blocks that hold elements
 * [wlo, whi) (blocks run along the fastest dim, so the tensor is one
 * sequence of them) into c->qwin, the first being block *b0. 1: read; 0: a
 * dry run, nothing read. */
static int read_quant_blocks(struct ck_eval_ctx *c, const struct step *s, int64_t wlo, int64_t whi,
			     uint64_t *b0, struct ck_err *err)
{
	const struct ck_tensor_info *t = &s->src->t;
	size_t qk, qb;
	ck_ggml_block(t->quant, &qk, &qb);
	*b0 = (uint64_t)wlo / qk;
	uint64_t b1 = ((uint64_t)whi + qk - 1) / qk;
	size_t nbytes = (size_t)(b1 - *b0) * qb;
	if (grow(&c->qwin, &c->qwin_cap, nbytes, "quantized blocks", err) < 0)
		return -1;
	struct ck_io_req r = src_req(c, s->src->file, t->offset + *b0 * qb, nbytes, c->qwin);
	atomic_fetch_add(&c->eng->source_bytes_read, r.len);
	atomic_fetch_add(&c->eng->read_requests, 1);
	if (c->eng->dry_run)
		return 0;
	int rc = ck_io_read(&c->io, &r, 1);
	if (rc < 0)
		return ck_fail_sys(err, -rc, "%s: reading tensor \"%s\"",
				   c->eng->plan->cat->files[s->src->file].path, t->name);
	return 1;
}

/* Elements [lo, hi) of quantized tensor t, whose blocks from b0 on are at
 * q, as F32 into out: the blocks that lie whole in the range decoded in
 * place, the one or two it cuts (and every block, where out is not aligned
 * for floats: a library caller's buffer may not be) through a block of
 * their own. */
static void decode_quant(const struct ck_tensor_info *t, const unsigned char *q, uint64_t b0,
			 int64_t lo, int64_t hi, unsigned char *out)
{
	size_t qk, qb;
	ck_ggml_block(t->quant, &qk, &qb);
	uint64_t f0 = ((uint64_t)lo + qk - 1) / qk, f1 = (uint64_t)hi / qk;
	uint64_t c0 = (uint64_t)lo / qk, c1 = ((uint64_t)hi + qk - 1) / qk;
	if ((uintptr_t)out % _Alignof(float))
		f1 = f0;
	if (f0 < f1)
		ck_ggml_dequant(t->quant, q + (f0 - b0) * qb, (size_t)(f1 - f0),
				(float *)(void *)(out + (size_t)((int64_t)(f0 * qk) - lo) * 4));
	float block[256];
	for (uint64_t b = c0; b < c1; b++) {
		if (b == f0 && f0 < f1)
			b = f1; /* past the whole ones */
		if (b == c1)
			break;
		ck_ggml_dequant(t->quant, q + (b - b0) * qb, 1, block);
		int64_t e0 = (int64_t)(b * qk), l = e0 > lo ? e0 : lo;
		int64_t h = e0 + (int64_t)qk < hi ? e0 + (int64_t)qk : hi;
		memcpy(out + (size_t)(l - lo) * 4, block + (l - e0), (size_t)(h - l) * 4);
	}
}

/* Source elements [wlo, whi) of a quantized GGUF source decoded to F32
 * into the window (or, for a cast-free run, the output). */
static int read_quant(struct ck_eval_ctx *c, const struct step *s, int64_t wlo, int64_t whi,
		      unsigned char *win, struct ck_err *err)
{
	uint64_t b0;
	int r = read_quant_blocks(c, s, wlo, whi, &b0, err);
	if (r > 0)
		decode_quant(&s->src->t, c->qwin, b0, wlo, whi, win);
	return r < 0 ? -1 : 0;
}

/* The same run cast on its way (gguf_dequant=BF16, a mapping's .to(BF16)):
 * decoded a slab at a time into a buffer that stays in the cache, each
 * slab cast into the output (dst: element wlo's place there). */
#define QCAST_SLAB 4096
static int read_quant_cast(struct ck_eval_ctx *c, const struct step *s, int64_t wlo, int64_t whi,
			   unsigned char *dst, struct ck_err *err)
{
	uint64_t b0;
	int r = read_quant_blocks(c, s, wlo, whi, &b0, err);
	if (r <= 0)
		return r;
	const struct ck_piece *p = s->p;
	enum ck_dtype casts[CK_MAX_CASTS];
	for (int k = 0; k < p->n_casts; k++)
		casts[k] = (enum ck_dtype)p->casts[k];
	size_t des = ck_dtype_size(s->tdt);
	float slab[QCAST_SLAB];
	for (int64_t lo = wlo; lo < whi; lo += QCAST_SLAB) {
		int64_t hi = whi - lo > QCAST_SLAB ? lo + QCAST_SLAB : whi;
		decode_quant(&s->src->t, c->qwin, b0, lo, hi, (unsigned char *)slab);
		ck_cpu_convert_run((const unsigned char *)slab, 1, CK_DT_F32, casts, p->n_casts,
				   p->saturate, dst + (size_t)(lo - wlo) * des, hi - lo);
	}
	return 0;
}

/* How a step's source elements lie: dims with more than one index, sorted
 * by source stride; the innermost contiguous run (dims[0..k)) and how many
 * runs; whether the window is read whole, in one request. */
struct wshape {
	int dims[CK_MAX_DIMS], nd, k, whole;
	int64_t run, nruns;
};

/* Whether every gap between the runs is under gap (push_req's), so that
 * read_window's requests would merge into one read of the whole window
 * anyway. Read whole, the window is kept (window_get) and the next step of
 * the same source finds it: a transpose evaluated chunk by chunk (a few
 * source columns per chunk, every row) read the whole source tensor again
 * for every chunk, 5x its bytes for Llama's gate_proj as an EasyDeL kernel. */
static int runs_coalesce(const struct step *s, const struct wshape *w, size_t ses, uint64_t gap)
{
	int64_t reach = w->run; /* elements from a run's start to its block's end */
	for (int j = w->k; j < w->nd; j++) {
		int64_t st = s->p->stride[w->dims[j]], n = s->hi[w->dims[j]] - s->lo[w->dims[j]];
		if ((uint64_t)(st - reach) * ses >> s->p->fp4 >= gap)
			return 0;
		reach += st * (n - 1);
	}
	return w->nd > w->k;
}

static void window_shape(const struct step *s, int64_t wlo, int64_t whi, uint64_t gap,
			 struct wshape *w)
{
	size_t ses = ck_dtype_size(s->src->t.dtype);
	w->nd = 0;
	for (int d = 0; d < s->ndim; d++)
		if (s->hi[d] - s->lo[d] > 1)
			w->dims[w->nd++] = d;
	qsort_r(w->dims, (size_t)w->nd, sizeof *w->dims, cmp_dim_stride, (void *)s->p->stride);
	w->run = 1;
	w->k = 0;
	while (w->k < w->nd && s->p->stride[w->dims[w->k]] == w->run) {
		w->run *= s->hi[w->dims[w->k]] - s->lo[w->dims[w->k]];
		w->k++;
	}
	w->nruns = 1;
	for (int j = w->k; j < w->nd; j++)
		w->nruns *= s->hi[w->dims[j]] - s->lo[w->dims[j]];
	/* Many runs, or small runs that fill most of the window anyway: one
	 * read of the whole window beats thousands of requests. */
	int dense = (uint64_t)(whi - wlo) <= (uint64_t)w->nruns * (uint64_t)w->run * 2;
	w->whole = w->nruns == 1 || w->nruns > 65536 ||
		   (dense && ((uint64_t)w->run * ses >> s->p->fp4) < gap) ||
		   runs_coalesce(s, w, ses, gap);
}

/* The file bytes [*b0, *b0 + *n) of source elements [wlo, whi). */
static void window_bytes(const struct step *s, int64_t wlo, int64_t whi, uint64_t *b0, uint64_t *n)
{
	size_t ses = ck_dtype_size(s->src->t.dtype);
	if (s->p->fp4) { /* nibbles of a U8 entry */
		*b0 = s->src->t.offset + (uint64_t)(wlo >> 1);
		*n = (uint64_t)(((whi + 1) >> 1) - (wlo >> 1));
	} else {
		*b0 = s->src->t.offset + (uint64_t)wlo * ses;
		*n = (uint64_t)(whi - wlo) * ses;
	}
}

/* Read the source elements of the step into the window (window[0] is source
 * element wlo), as runs in source order, coalescing small gaps. */
static int read_window(struct ck_eval_ctx *c, const struct step *s, int64_t wlo, int64_t whi,
		       const struct wshape *w, unsigned char *win, struct ck_err *err)
{
	if (s->src->t.quant)
		return read_quant(c, s, wlo, whi, win, err);
	const struct ck_catalog *cat = c->eng->plan->cat;
	size_t ses = ck_dtype_size(s->src->t.dtype);
	uint32_t file = s->src->file;
	uint64_t fbase = s->src->t.offset;
	/* MXFP4 pieces count nibbles (the entry is U8): element e is in byte
	 * e >> nib, and the window starts at the byte of wlo */
	int nib = s->p->fp4;
	int64_t wb = wlo >> nib;
	const int *dims = w->dims;
	int nd = w->nd, k = w->k;
	int64_t run = w->run;
	struct reqlist l = {c->reqs, 0, c->reqs_cap};
	if (w->whole && w->nruns > 1) {
		uint64_t b0, wbytes;
		window_bytes(s, wlo, whi, &b0, &wbytes);
		if (push_req(c, &l, file, b0, wbytes, win, err) < 0)
			return -1;
	} else {
		int64_t idx[CK_MAX_DIMS];
		for (int d = 0; d < s->ndim; d++)
			idx[d] = s->lo[d];
		/* enumerate outer dims, outermost (largest stride) varying slowest */
		for (;;) {
			int64_t so = src_at(s, idx);
			int64_t b0 = so >> nib, b1 = nib ? (so + run + 1) >> 1 : so + run;
			if (push_req(c, &l, file, fbase + (uint64_t)b0 * ses, (uint64_t)(b1 - b0) * ses,
				     win + (uint64_t)(b0 - wb) * ses, err) < 0)
				return -1;
			int j = k;
			while (j < nd && ++idx[dims[j]] == s->hi[dims[j]]) {
				idx[dims[j]] = s->lo[dims[j]];
				j++;
			}
			if (j == nd)
				break;
		}
	}
	uint64_t total = 0;
	for (size_t i = 0; i < l.n; i++)
		total += l.r[i].len;
	atomic_fetch_add(&c->eng->source_bytes_read, total);
	atomic_fetch_add(&c->eng->read_requests, l.n);
	int r = c->eng->dry_run ? 0 : ck_io_read(&c->io, l.r, l.n);
	if (r < 0)
		return ck_fail_sys(err, -r, "%s: reading tensor \"%s\"",
				   cat->files[s->src->file].path, s->src->t.name);
	return 0;
}

/* A cast-free sub-box that is one contiguous run in the source and in the
 * output (renames, row slices, cat along dim 0) is read straight into the
 * output, with no staging copy (try_direct): its elements, else 0. A
 * GGUF-quantized source's run is decoded straight into it, casts and all
 * (the only element operations a quantized source's piece takes there). */
static int64_t direct_run(const struct ck_eval_ctx *c, const struct step *s)
{
	const struct ck_piece *p = s->p;
	int quant_cast = s->src->t.quant && !p->sc && !p->shifted && !p->fp4;
	if ((!ck_piece_plain(p) && !quant_cast) || c->on_gpu)
		return 0;
	int first = 0;
	while (first < s->ndim && s->hi[first] - s->lo[first] == 1)
		first++;
	int64_t run = 1;
	for (int d = s->ndim - 1; d >= first; d--) {
		int64_t ext = s->hi[d] - s->lo[d];
		if (d > first && (s->lo[d] != 0 || s->hi[d] != s->shape[d]))
			return 0; /* the output would not be contiguous */
		if (ext > 1 && s->p->stride[d] != run)
			return 0; /* nor the source */
		run *= ext;
	}
	return run;
}

static int try_direct(struct ck_eval_ctx *c, const struct step *s, struct ck_err *err)
{
	int64_t run = direct_run(c, s);
	if (!run)
		return 0;
	size_t es = ck_dtype_size(s->src->t.dtype);
	int64_t so = src_at(s, s->lo), lin = 0;
	for (int d = 0; d < s->ndim; d++)
		lin += s->lo[d] * s->cstride[d];
	if (s->src->t.quant) {
		/* its blocks staged at most window_max bytes at a time, as the
		 * window path stages them */
		size_t qk, qb, des = ck_dtype_size(s->tdt);
		ck_ggml_block(s->src->t.quant, &qk, &qb);
		int64_t seg =
		    (int64_t)((c->eng->window_max / qb > 0 ? c->eng->window_max / qb : 1) * qk);
		for (int64_t at = 0; at < run; at += seg) {
			int64_t n = run - at < seg ? run - at : seg;
			unsigned char *dst = s->out + (size_t)(lin + at - s->e0) * des;
			int r = s->p->n_casts
				    ? read_quant_cast(c, s, so + at, so + at + n, dst, err)
				    : read_quant(c, s, so + at, so + at + n, dst, err);
			if (r < 0)
				return -1;
		}
		return 1;
	}
	unsigned char *dst = s->out + (size_t)(lin - s->e0) * es;
	const struct ck_catalog *cat = c->eng->plan->cat;
	struct ck_io_req r =
	    src_req(c, s->src->file, s->src->t.offset + (uint64_t)so * es, (uint64_t)run * es, dst);
	atomic_fetch_add(&c->eng->source_bytes_read, r.len);
	atomic_fetch_add(&c->eng->read_requests, 1);
	int rc = c->eng->dry_run ? 0 : ck_io_read(&c->io, &r, 1);
	if (rc < 0)
		return ck_fail_sys(err, -rc, "%s: reading tensor \"%s\"",
				   cat->files[s->src->file].path, s->src->t.name);
	return 1;
}

/* The kernel box of a step (see box.h); *sc_lo and *sc_n: the scale
 * elements it reaches (sc_lo is its origin). */
static void step_box(const struct ck_catalog *cat, const struct step *s, struct ck_box *b,
		     int64_t *sc_lo, int64_t *sc_n)
{
	const struct ck_piece *p = s->p;
	memset(b, 0, sizeof *b);
	b->ndim = s->ndim;
	b->sdt = p->fp4 ? CK_DT_F4_E2M1 : s->src->t.dtype;
	b->ddt = s->tdt;
	b->nc = p->n_casts;
	_Static_assert(CK_BOX_CASTS >= CK_MAX_CASTS, "a box holds a piece's casts");
	for (int k = 0; k < p->n_casts; k++)
		b->casts[k] = (enum ck_dtype)p->casts[k];
	b->saturate = p->saturate;
	b->shifted = p->shifted;
	b->shift = p->shift;
	for (int d = 0; d < s->ndim; d++) {
		b->ext[d] = s->hi[d] - s->lo[d];
		b->sstride[d] = p->stride[d];
		b->dstride[d] = s->cstride[d];
		b->sblock[d] = 1;
	}
	*sc_lo = 0;
	*sc_n = 0;
	if (!p->sc)
		return;
	b->scaled = 1;
	b->divide = p->sc->divide;
	/* MXFP4 scales are U8 entries read as E8M0 exponents */
	b->scdt = p->fp4 ? CK_DT_F8_E8M0 : cat->entries[p->sc->src].t.dtype;
	int64_t lo = p->sc->base, span = 0;
	for (int k = 0; k < p->sc->n; k++) {
		int d = p->sc->dim[k];
		int64_t pos = s->lo[d] - p->lo[d] + p->sc->phase[k];
		lo += p->sc->stride[k] * (pos / p->sc->block[k]);
		b->sblock[d] = p->sc->block[k];
		b->sphase[d] = pos % p->sc->block[k];
		b->scstride[d] = p->sc->stride[k];
		span += b->scstride[d] * ((b->ext[d] - 1 + b->sphase[d]) / b->sblock[d]);
	}
	*sc_lo = lo;
	*sc_n = span + 1;
}

static int grow(unsigned char **buf, size_t *cap, size_t need, const char *what,
		struct ck_err *err)
{
	if (need <= *cap)
		return 0;
	unsigned char *w = realloc(*buf, need);
	if (!w)
		return ck_fail_sys(err, ENOMEM, "%s", what);
	*buf = w;
	*cap = need;
	return 0;
}

/* Bytes [a0, a1) of catalog file `file` into da and [e0, e1) into de
 * (either may be empty), for window_get. */
static int read_spans(struct ck_eval_ctx *c, uint32_t file, uint64_t a0, uint64_t a1,
		      unsigned char *da, uint64_t e0, uint64_t e1, unsigned char *de,
		      const char *what, const char *tname, struct ck_err *err)
{
	const struct ck_catalog *cat = c->eng->plan->cat;
	struct reqlist l = {c->reqs, 0, c->reqs_cap};
	if ((a1 > a0 && push_req(c, &l, file, a0, a1 - a0, da, err) < 0) ||
	    (e1 > e0 && push_req(c, &l, file, e0, e1 - e0, de, err) < 0))
		return -1;
	atomic_fetch_add(&c->eng->source_bytes_read, (a1 - a0) + (e1 - e0));
	atomic_fetch_add(&c->eng->read_requests, l.n);
	int r = c->eng->dry_run ? 0 : ck_io_read(&c->io, l.r, l.n);
	if (r < 0)
		return ck_fail_sys(err, -r, "%s: reading %s \"%s\"", cat->files[file].path,
				   what, tname);
	return 1;
}

/* Bytes [b0, b0 + n) of catalog file `file` into the window w (*at: where
 * they start). What w already holds is not read again: contained, *at points
 * into it; starting inside it and reaching past its end, the window is
 * extended in place up to window_max (a transpose evaluated
 * chunk by chunk reads a few more source columns of every row per step: its
 * windows overlap all but a few bytes, and the window held shrank to each
 * step's, so Llama's gate_proj as an EasyDeL kernel read 8x its bytes);
 * overlapping by half or more otherwise, the overlap is copied into the
 * spare and only the rest read. Otherwise all n bytes are read here when
 * whole is set; when not, nothing is read (returns 0: the caller reads its
 * runs into *at) and w forgets what it held. */
static int window_get(struct ck_eval_ctx *c, struct ck_window *w, uint32_t file, uint64_t b0,
		      size_t n, int whole, unsigned char **at, const char *what,
		      const char *tname, struct ck_err *err)
{
	const struct ck_catalog *cat = c->eng->plan->cat;
	uint64_t b1 = b0 + n, wend = w->off + w->len;
	w->decoded = NULL; /* buf is about to hold bytes as stored */
	int same = w->valid && w->cat == cat && w->file == file;
	uint64_t o0 = same && w->off > b0 ? w->off : b0;
	uint64_t o1 = same && wend < b1 ? wend : b1;
	if (same && whole && o0 == b0 && o1 == b1) {
		*at = w->buf + (b0 - w->off);
		return 1;
	}
	if (same && whole && b0 >= w->off && b0 < wend && b1 - w->off <= c->eng->window_max) {
		size_t len = (size_t)(b1 - w->off), room = len + len / 8; /* room to extend again */
		if (room > c->eng->window_max)
			room = (size_t)c->eng->window_max; /* >= len */
		if (len > w->cap && grow(&w->buf, &w->cap, room, what, err) < 0)
			return -1;
		w->len = len;
		*at = w->buf + (b0 - w->off);
		int r = read_spans(c, file, wend, b1, w->buf + (wend - w->off), 0, 0, NULL, what,
				   tname, err);
		w->valid = r > 0; /* a failed read leaves nothing to find again */
		return r;
	}
	int reuse = same && whole && o1 > o0 && (o1 - o0) * 2 >= n;
	if (!reuse)
		o0 = o1 = b0; /* nothing kept */
	unsigned char **dst = reuse ? &w->spare : &w->buf;
	size_t *cap = reuse ? &w->spare_cap : &w->cap;
	if (grow(dst, cap, n, what, err) < 0)
		return -1;
	if (reuse && !c->eng->dry_run)
		memcpy(w->spare + (o0 - b0), w->buf + (o0 - w->off), (size_t)(o1 - o0));
	if (reuse) {
		unsigned char *t = w->buf;
		size_t tc = w->cap;
		w->buf = w->spare, w->cap = w->spare_cap;
		w->spare = t, w->spare_cap = tc;
	}
	w->valid = whole;
	w->cat = cat, w->file = file, w->off = b0, w->len = n;
	*at = w->buf;
	if (!whole)
		return 0;
	int r = read_spans(c, file, b0, o0, w->buf, o1, b1, w->buf + (o1 - b0), what, tname, err);
	w->valid = r > 0;
	return r;
}

/* The source elements [*wlo, *whi) a step's sub-box spans (strides are
 * never negative); returns the dim it spans widest along (-1: one element). */
static int step_span(const struct step *s, int64_t *wlo, int64_t *whi)
{
	int split = -1;
	int64_t widest = 0;
	*wlo = src_at(s, s->lo);
	*whi = *wlo + 1;
	for (int d = 0; d < s->ndim; d++) {
		int64_t span = s->p->stride[d] * (s->hi[d] - s->lo[d] - 1);
		*whi += span;
		if (s->hi[d] - s->lo[d] > 1 && span >= widest)
			widest = span, split = d;
	}
	return split;
}

/* Where the window holds step s's source, read for its box
 * (read_box_window): bytes [fb0, fb0 + need) as stored, or a quantized
 * source's elements [wlo, whi) decoded; NULL when it does not. */
static unsigned char *held_for_step(const struct ck_eval_ctx *c, const struct step *s, int64_t wlo,
				    int64_t whi, uint64_t fb0, size_t need)
{
	const struct ck_window *w = &c->win;
	if (w->cat != c->eng->plan->cat)
		return NULL;
	if (s->src->t.quant)
		return w->decoded == s->src && wlo >= w->e0 && whi <= w->e1
			   ? w->buf + (size_t)(wlo - w->e0) * 4
			   : NULL;
	return w->valid && w->file == s->src->file && fb0 >= w->off && fb0 + need <= w->off + w->len
		   ? w->buf + (fb0 - w->off)
		   : NULL;
}

static int run_step(struct ck_eval_ctx *c, struct step *s, struct ck_err *err)
{
	int direct = try_direct(c, s, err);
	if (direct != 0)
		return direct < 0 ? -1 : 0;
	size_t ses = ck_dtype_size(s->src->t.dtype);
	int nib = s->p->fp4; /* MXFP4: elements are nibbles of U8 bytes */
	int64_t wlo, whi;
	int split = step_span(s, &wlo, &whi);
	uint64_t wmax = c->eng->window_max;
	if (c->on_gpu && ck_gpu_lane_window(c->lane) < wmax)
		wmax = ck_gpu_lane_window(c->lane);
	if (((uint64_t)(whi - wlo) * ses >> nib) > wmax && split >= 0) {
		/* too wide for the window: halve along the widest dim */
		int64_t lo = s->lo[split], hi = s->hi[split], mid = lo + (hi - lo) / 2;
		s->hi[split] = mid;
		int r = run_step(c, s, err);
		s->hi[split] = hi;
		if (r < 0)
			return r;
		s->lo[split] = mid;
		r = run_step(c, s, err);
		s->lo[split] = lo;
		return r;
	}
	struct ck_box b;
	int64_t sc_lo, sc_n;
	step_box(c->eng->plan->cat, s, &b, &sc_lo, &sc_n);
	uint64_t fb0, need64;
	window_bytes(s, wlo, whi, &fb0, &need64);
	size_t need = (size_t)need64;
	const struct ck_catalog_entry *sce =
		b.scaled ? &c->eng->plan->cat->entries[s->p->sc->src] : NULL;
	size_t scs = sce ? ck_dtype_size(sce->t.dtype) : 0, scneed = (size_t)sc_n * scs;
	struct wshape w;
	const struct ck_engine *eng = c->eng;
	window_shape(
	    s, wlo, whi,
	    eng->dfd && eng->dfd[s->src->file] >= 0 ? CK_COALESCE_GAP_DIRECT : CK_COALESCE_GAP, &w);
	unsigned char *win, *scales = NULL;
	if (c->on_gpu) {
		if (ck_gpu_stage(c->lane, need, scneed, &win, &scales, err) < 0 ||
		    read_window(c, s, wlo, whi, &w, win, err) < 0)
			return -1;
		if (sce) { /* into the lane's pinned staging, read as it is */
			struct ck_io_req r = src_req(c, sce->file, sce->t.offset + (uint64_t)sc_lo * scs,
						     scneed, scales);
			atomic_fetch_add(&c->eng->source_bytes_read, r.len);
			atomic_fetch_add(&c->eng->read_requests, 1);
			int rc = c->eng->dry_run ? 0 : ck_io_read(&c->io, &r, 1);
			if (rc < 0)
				return ck_fail_sys(err, -rc, "%s: reading scales \"%s\"",
						   c->eng->plan->cat->files[sce->file].path, sce->t.name);
		}
	} else if ((win = held_for_step(c, s, wlo, whi, fb0, need)) != NULL) {
		if (sce && window_get(c, &c->scw, sce->file, sce->t.offset + (uint64_t)sc_lo * scs,
				      scneed, 1, &scales, "scales", sce->t.name, err) < 0)
			return -1;
	} else {
		/* a GGUF-quantized source is decoded into the window: never kept */
		int got = window_get(c, &c->win, s->src->file, fb0, need, w.whole && !s->src->t.quant,
				     &win, "tensor", s->src->t.name, err);
		if (got < 0 || (!got && read_window(c, s, wlo, whi, &w, win, err) < 0))
			return -1;
		if (s->src->t.quant)
			c->win.valid = 0;
		if (sce && window_get(c, &c->scw, sce->file, sce->t.offset + (uint64_t)sc_lo * scs, scneed,
				      1, &scales, "scales", sce->t.name, err) < 0)
			return -1;
	}
	if (c->eng->dry_run)
		return 0;
	int64_t lin = 0;
	for (int d = 0; d < s->ndim; d++)
		lin += s->lo[d] * s->cstride[d];
	size_t src_off = (size_t)(src_at(s, s->lo) - wlo) * ses;
	if (nib) { /* the box counts nibbles from the window's first byte */
		b.snib = src_at(s, s->lo) - ((wlo >> 1) << 1);
		src_off = 0;
	}
	size_t dst_off = (size_t)(lin - s->e0) * ck_dtype_size(s->tdt);
	if (c->on_gpu)
		return ck_gpu_submit(c->lane, &b, src_off, 0, dst_off, err);
	ck_box_normalise(&b);
	ck_cpu_convert_box(&b, win + src_off, b.scaled ? scales : NULL, s->out + dst_off);
	return 0;
}

/* Piece i of t restricted to the box [lo, hi) into *s; 0 when they do not
 * meet. */
static int clip_step(const struct ck_catalog *cat, const struct ck_target *t, size_t i,
		     const int64_t *lo, const int64_t *hi, const int64_t *cstride, int64_t e0,
		     unsigned char *out, struct step *s)
{
	const struct ck_piece *p = &t->v.p[i];
	*s = (struct step){
	    p,	       &cat->entries[p->src], t->v.ndim, {0}, {0}, cstride, t->v.shape, e0, out,
	    t->v.dtype};
	for (int d = 0; d < t->v.ndim; d++) {
		s->lo[d] = lo[d] > p->lo[d] ? lo[d] : p->lo[d];
		s->hi[d] = hi[d] < p->hi[d] ? hi[d] : p->hi[d];
		if (s->lo[d] >= s->hi[d])
			return 0;
	}
	return 1;
}

/* Runs under this many bytes are not worth an iovec of their own: such a box
 * reads its union into the window (read_box_window) or step by step. */
#define SCATTER_RUN_MIN 512u
#define SCATTER_RUNS_MAX 65536 /* runs of one box */
#define SCATTER_IOV 256 /* iovecs of one preadv (IOV_MAX: 1024; this stack holds 4 KiB of them) */

/* Append the runs of plain step s to c->runs[*n]: each a block of elements
 * contiguous in the source and in the output (its innermost dims merged
 * while both strides continue the block). Returns 0, 1 when a run is under
 * SCATTER_RUN_MIN bytes or there are too many, -1 on error. */
static int step_runs(struct ck_eval_ctx *c, const struct step *s, size_t *n, struct ck_err *err)
{
	const struct ck_engine *e = c->eng;
	if (!ck_piece_plain(s->p) || s->tdt != s->src->t.dtype || s->src->t.quant ||
	    (e->dfd && e->dfd[s->src->file] >= 0))
		return 1; /* converted, or read aligned: through the window */
	size_t es = ck_dtype_size(s->src->t.dtype);
	int k = s->ndim; /* dims [k, ndim) form a run */
	int64_t run = 1;
	for (int d = s->ndim - 1; d >= 0; d--) {
		int64_t ext = s->hi[d] - s->lo[d];
		if (ext > 1 && (s->p->stride[d] != run || s->cstride[d] != run))
			break;
		run *= ext;
		k = d;
	}
	if ((uint64_t)run * es < SCATTER_RUN_MIN)
		return 1;
	int64_t idx[CK_MAX_DIMS];
	for (int d = 0; d < s->ndim; d++)
		idx[d] = s->lo[d];
	for (;;) {
		if (*n == SCATTER_RUNS_MAX)
			return 1;
		if (*n == c->runs_cap) {
			size_t nc = c->runs_cap ? c->runs_cap * 2 : 256;
			struct ck_run *nr = realloc(c->runs, nc * sizeof *nr);
			if (!nr)
				return ck_fail_sys(err, ENOMEM, "read runs");
			c->runs = nr;
			c->runs_cap = nc;
		}
		int64_t lin = 0;
		for (int d = 0; d < s->ndim; d++)
			lin += idx[d] * s->cstride[d];
		c->runs[(*n)++] =
		    (struct ck_run){s->src, s->src->t.offset + (uint64_t)src_at(s, idx) * es,
				    (uint64_t)run * es, s->out + (size_t)(lin - s->e0) * es};
		int j = k - 1; /* the next run: outer dims, the last fastest */
		while (j >= 0 && ++idx[j] == s->hi[j]) {
			idx[j] = s->lo[j];
			j--;
		}
		if (j < 0)
			return 0;
	}
}

static int cmp_run(const void *a, const void *b)
{
	const struct ck_run *x = a, *y = b;
	if (x->src->file != y->src->file)
		return x->src->file < y->src->file ? -1 : 1;
	return x->off < y->off ? -1 : x->off > y->off;
}

/* The reads of a box's runs from one source tensor (read_box_scatter): a
 * run on its own (far from the others) is a request of the batch, straight
 * into its place in the output; runs under CK_COALESCE_GAP apart are one
 * preadv, the gaps into the sink. */
struct scatter {
	struct iovec iov[SCATTER_IOV];
	int k;
	uint64_t off, at; /* the stretch being gathered: [off, at) of the file */
	struct reqlist l;
};

static int scatter_flush(struct ck_eval_ctx *c, const struct ck_catalog_entry *src,
			 struct scatter *g, int batch, struct ck_err *err)
{
	const struct ck_catalog *cat = c->eng->plan->cat;
	int r = 0;
	if (g->k == 1) { /* one run: a request of the batch */
		if (reqlist_room(c, &g->l, err) < 0)
			return -1;
		g->l.r[g->l.n++] =
		    src_req(c, src->file, g->off, g->iov[0].iov_len, g->iov[0].iov_base);
	} else if (g->k) {
		atomic_fetch_add(&c->eng->read_requests, 1);
		if (!c->eng->dry_run)
			r = ck_preadv_full(cat->files[src->file].fd, g->iov, g->k, g->off);
	}
	atomic_fetch_add(&c->eng->source_bytes_read, g->at - g->off);
	g->k = 0;
	g->off = g->at;
	if (r == 0 && batch && g->l.n) {
		atomic_fetch_add(&c->eng->read_requests, g->l.n);
		r = c->eng->dry_run ? 0 : ck_io_read(&c->io, g->l.r, g->l.n);
		g->l.n = 0;
	}
	if (r < 0)
		return ck_fail_sys(err, -r, "%s: reading tensor \"%s\"", cat->files[src->file].path,
				   src->t.name);
	return 0;
}

/* The steps of a box that copy buffered sources as stored (no cast) but not
 * as one block each (direct_run) read their runs straight into the output:
 * Llama's rope permutation for GGUF (a piece per pair of output rows),
 * tensor-parallel shards joined along their rows (Megatron's row-parallel
 * o_proj and down_proj from a tp checkpoint, a piece per shard) and a tp
 * rank's column slice of such a weight (a run per row). Sorted by file and
 * offset, runs under CK_COALESCE_GAP apart are one preadv (the gaps read into
 * a sink, as the window's requests read them) and a run further from the
 * others is a request of an io_uring batch: the window's bytes and requests,
 * but one copy out of the page cache instead of its two (attn_q of the
 * hidden-2048 Llama as a BF16 GGUF went at 3 GB/s, a plain tensor at 6).
 * Returns 1 when it read every such step, 0 when the box does not qualify (a
 * step that converts or reads an O_DIRECT source, whose reads are aligned;
 * runs under SCATTER_RUN_MIN bytes, too many, or overlapping), -1 on error. */
static int read_box_scatter(struct ck_eval_ctx *c, const struct ck_target *t, const int64_t *lo,
			    const int64_t *hi, const int64_t *cstride, int64_t e0,
			    unsigned char *out, struct ck_err *err)
{
	const struct ck_catalog *cat = c->eng->plan->cat;
	size_t n = 0;
	for (size_t i = 0; i < t->v.n; i++) {
		struct step s;
		if (!clip_step(cat, t, i, lo, hi, cstride, e0, out, &s) || direct_run(c, &s))
			continue;
		int r = step_runs(c, &s, &n, err);
		if (r != 0)
			return r < 0 ? -1 : 0;
	}
	if (!n)
		return 0;
	struct ck_run *runs = c->runs;
	qsort(runs, n, sizeof *runs, cmp_run); /* by file, then offset */
	for (size_t i = 1; i < n; i++)
		if (runs[i].src->file == runs[i - 1].src->file &&
		    runs[i].off < runs[i - 1].off + runs[i - 1].len)
			return 0; /* two steps read the same bytes */
	if (!c->sink && !(c->sink = malloc(CK_COALESCE_GAP)))
		return ck_fail_sys(err, ENOMEM, "read sink");
	struct scatter g = {.l = {c->reqs, 0, c->reqs_cap}};
	for (size_t i = 0; i < n; i++) {
		const struct ck_run *r = &runs[i];
		/* a new tensor's runs (sorted by offset: entries are disjoint):
		 * what is gathered is read, a failure naming its tensor */
		int fresh = i && r->src != runs[i - 1].src;
		if (g.k && (fresh || r->off - g.at >= CK_COALESCE_GAP || g.k + 2 > SCATTER_IOV) &&
		    scatter_flush(c, runs[i - 1].src, &g, fresh, err) < 0)
			return -1;
		if (!g.k)
			g.off = g.at = r->off;
		if (r->off > g.at)
			g.iov[g.k++] = (struct iovec){c->sink, (size_t)(r->off - g.at)};
		g.iov[g.k++] = (struct iovec){r->dst, (size_t)r->len};
		g.at = r->off + r->len;
	}
	return scatter_flush(c, runs[n - 1].src, &g, 1, err) < 0 ? -1 : 1;
}

/* Pieces of one source whose rows interleave (Llama's rope permutation for
 * GGUF: output rows alternate between the two halves of a head, a piece per
 * pair of rows) each read their runs a row at a time, a few KiB per
 * request: 3x slower than a plain copy, 8x with O_DIRECT; from a quantized
 * GGUF source each decoded its window's blocks, about twice its rows. Together
 * they cover a window of their source. When the steps of this box all read
 * one source (as stored, or GGUF-quantized), their own windows overlap or
 * leave gaps (together they span over 9/8 of their union: read one by one
 * they would read or decode bytes twice, or in many small requests) and
 * they need at least 7/8 of the union's elements, the union is read (and
 * decoded) once into the window, where each step then finds its elements
 * (held_for_step). Steps that each read their own dense rows (row blocks
 * with a cast) read as before. A box of one piece, or of a few rows of many, reads as
 * before: only what it needs; so do steps read straight into the output
 * (direct_run). */
#define BOX_MIN (64u << 10) /* output bytes of a box worth looking for one */
static int read_box_window(struct ck_eval_ctx *c, const struct ck_target *t, const int64_t *lo,
			   const int64_t *hi, struct ck_err *err)
{
	const struct ck_catalog *cat = c->eng->plan->cat;
	struct step first = {0};
	int64_t e0 = INT64_MAX, e1 = 0, need = 0, own = 0; /* source elements */
	size_t steps = 0;
	for (size_t i = 0; i < t->v.n; i++) {
		struct step s;
		if (!clip_step(cat, t, i, lo, hi, NULL, 0, NULL, &s) || direct_run(c, &s))
			continue; /* a direct step reads into the output, not the window */
		if (s.p->sc || s.p->fp4 || (steps && s.src != first.src))
			return 0;
		if (!steps)
			first = s;
		int64_t wlo, whi, n = 1;
		step_span(&s, &wlo, &whi);
		for (int d = 0; d < s.ndim; d++)
			n *= s.hi[d] - s.lo[d];
		e0 = wlo < e0 ? wlo : e0;
		e1 = whi > e1 ? whi : e1;
		need += n;
		own += whi - wlo;
		steps++;
	}
	if (!steps)
		return 0;
	const struct ck_catalog_entry *src = first.src;
	uint64_t es = ck_dtype_size(src->t.dtype), span = (uint64_t)(e1 - e0) * es;
	if (steps < 2 || span > c->eng->window_max ||
	    (uint64_t)need * 8 < (uint64_t)(e1 - e0) * 7 ||
	    (uint64_t)own * 8 <= (uint64_t)(e1 - e0) * 9)
		return 0;
	if (!src->t.quant) {
		unsigned char *at;
		uint64_t b0, n;
		window_bytes(&first, e0, e1, &b0, &n);
		return window_get(c, &c->win, src->file, b0, (size_t)n, 1, &at, "tensor", src->t.name,
				  err);
	}
	struct ck_window *w = &c->win;
	w->valid = 0;
	w->decoded = NULL;
	if (grow(&w->buf, &w->cap, (size_t)span, "tensor", err) < 0 ||
	    read_quant(c, &first, e0, e1, w->buf, err) < 0)
		return -1;
	w->cat = cat;
	w->decoded = src;
	w->e0 = e0;
	w->e1 = e1;
	return 1;
}

/* Evaluate one box of the target into out (out[0] is element e0). */
static int eval_box(struct ck_eval_ctx *c, const struct ck_target *t, const int64_t *lo,
		    const int64_t *hi, const int64_t *cstride, int64_t e0, unsigned char *out,
		    struct ck_err *err)
{
	const struct ck_catalog *cat = c->eng->plan->cat;
	int64_t elems = 1;
	for (int d = 0; d < t->v.ndim; d++)
		elems *= hi[d] - lo[d];
	/* a small box (a random 4 KiB read) gains little from one shared read,
	 * and looking for it would visit every piece once more */
	int held = 0; /* 1: the steps not read straight into out are in it already */
	if (!c->on_gpu && (uint64_t)elems * ck_dtype_size(t->v.dtype) >= BOX_MIN &&
	    ((held = read_box_scatter(c, t, lo, hi, cstride, e0, out, err)) < 0 ||
	     (!held && t->v.n > 1 && read_box_window(c, t, lo, hi, err) < 0)))
		return -1;
	for (size_t i = 0; i < t->v.n; i++) {
		struct step s;
		if (clip_step(cat, t, i, lo, hi, cstride, e0, out, &s) &&
		    (!held || direct_run(c, &s)) && run_step(c, &s, err) < 0)
			return -1;
	}
	return 0;
}

/* Split the linear element range [p0, p1) into boxes and evaluate each. */
static int eval_range(struct ck_eval_ctx *c, const struct ck_target *t, int dim, int64_t *lo,
		      int64_t *hi, int64_t p0, int64_t p1, const int64_t *cstride, int64_t e0,
		      unsigned char *out, struct ck_err *err)
{
	const int64_t *shape = t->v.shape;
	int nd = t->v.ndim;
	if (p0 >= p1)
		return 0;
	int64_t inner = cstride[dim];
	if (dim == nd - 1 || (p0 % inner == 0 && p1 % inner == 0)) {
		lo[dim] = p0 / inner;
		hi[dim] = p1 / inner;
		for (int d = dim + 1; d < nd; d++)
			lo[d] = 0, hi[d] = shape[d];
		return eval_box(c, t, lo, hi, cstride, e0, out, err);
	}
	int64_t h = (p0 + inner - 1) / inner * inner, tl = p1 / inner * inner;
	if (h > p1)
		h = p1;
	if (p0 < h) {
		int64_t o = p0 / inner;
		lo[dim] = o, hi[dim] = o + 1;
		if (eval_range(c, t, dim + 1, lo, hi, p0 - o * inner, h - o * inner, cstride, e0, out,
			       err) < 0)
			return -1;
	}
	if (h < tl && eval_range(c, t, dim, lo, hi, h, tl, cstride, e0, out, err) < 0)
		return -1;
	if (tl >= h && tl < p1) {
		int64_t o = tl / inner;
		lo[dim] = o, hi[dim] = o + 1;
		if (eval_range(c, t, dim + 1, lo, hi, 0, p1 - tl, cstride, e0, out, err) < 0)
			return -1;
	}
	return 0;
}

int ck_engine_gpu_worth(const struct ck_target *t)
{
	int last = t->v.ndim - 1;
	for (size_t i = 0; i < t->v.n; i++) {
		const struct ck_piece *p = &t->v.p[i];
		if (!ck_piece_plain(p) ||
		    (last >= 0 && p->hi[last] - p->lo[last] > 1 && p->stride[last] != 1))
			return 1;
	}
	return 0;
}

/* A piece of t that transposes (its last dim strided) a source larger than
 * the window, or NULL. */
static const struct ck_piece *large_transpose(const struct ck_engine *e, const struct ck_target *t)
{
	int last = t->v.ndim - 1;
	for (size_t i = 0; i < t->v.n && !t->qtype; i++) {
		const struct ck_piece *p = &t->v.p[i];
		if (last >= 0 && p->hi[last] - p->lo[last] > 1 && p->stride[last] != 1 &&
		    e->plan->cat->entries[p->src].t.nbytes > e->window_max)
			return p;
	}
	return NULL;
}

uint64_t ck_engine_read_span(const struct ck_engine *e, uint32_t ti)
{
	return large_transpose(e, &e->plan->t[ti]) ? e->window_max : 0;
}

int ck_engine_block_dim(const struct ck_engine *e, uint32_t ti)
{
	const struct ck_target *t = &e->plan->t[ti];
	const struct ck_piece *p = large_transpose(e, t);
	int best = -1;
	for (int d = 0; p && d < t->v.ndim; d++)
		if (p->hi[d] - p->lo[d] > 1 && (best < 0 || p->stride[d] > p->stride[best]))
			best = d;
	return best > 0 ? best : -1; /* dim 0: linear reads are such blocks */
}

void ck_blocks_init(struct ck_blocks *b, const struct ck_target *t, int dim)
{
	memset(b, 0, sizeof *b);
	b->dim = dim;
	b->rows = b->inner = 1;
	b->n = (uint64_t)t->v.shape[dim];
	for (int d = 0; d < dim; d++)
		b->rows *= (uint64_t)t->v.shape[d];
	for (int d = dim + 1; d < t->v.ndim; d++)
		b->inner *= (uint64_t)t->v.shape[d];
	memcpy(b->hi, t->v.shape, sizeof b->hi);
}

int ck_blocks_next(struct ck_blocks *b)
{
	b->k0 = b->k1;
	if (b->k0 >= b->n || b->k == 0)
		return 0;
	b->k1 = b->n - b->k0 < b->k ? b->n : b->k0 + b->k;
	b->lo[b->dim] = (int64_t)b->k0;
	b->hi[b->dim] = (int64_t)b->k1;
	return 1;
}

int ck_engine_read_box(struct ck_eval_ctx *c, uint32_t ti, const int64_t *lo, const int64_t *hi,
		       void *dst, struct ck_err *err)
{
	const struct ck_target *t = &c->eng->plan->t[ti];
	int nd = t->v.ndim;
	int64_t cs[CK_MAX_DIMS], e0 = 0, n = 1;
	for (int d = nd - 1; d >= 0; d--) {
		if (lo[d] < 0 || lo[d] >= hi[d] || hi[d] > t->v.shape[d])
			return ck_fail(err, CK_E_USAGE, "box outside \"%s\"", t->name);
		cs[d] = n;
		e0 += lo[d] * n;
		n *= hi[d] - lo[d];
	}
	if (t->qtype || nd == 0)
		return ck_fail(err, CK_E_USAGE, "\"%s\": no boxes of a quantized or scalar target",
			       t->name);
	if (t->holes) /* padding: what no piece covers reads as zeros */
		memset(dst, 0, (size_t)n * ck_dtype_size(t->v.dtype));
	c->on_gpu = 0;
	return eval_box(c, t, lo, hi, cs, e0, dst, err);
}

/* Elements [e0, e1) of t into buf (buf[0] is element e0). */
static int eval_elems(struct ck_eval_ctx *c, const struct ck_target *t, int64_t e0, int64_t e1,
		      unsigned char *buf, struct ck_err *err)
{
	int64_t cstride[CK_MAX_DIMS] = {0}, lo[CK_MAX_DIMS] = {0}, hi[CK_MAX_DIMS] = {0};
	int64_t s = 1;
	for (int d = t->v.ndim - 1; d >= 0; d--) {
		cstride[d] = s;
		s *= t->v.shape[d];
	}
	if (t->v.ndim == 0)
		return eval_box(c, t, lo, hi, cstride, 0, buf, err);
	return eval_range(c, t, 0, lo, hi, e0, e1, cstride, e0, buf, err);
}

/* The same on the GPU lane, in pieces of the lane's output buffer. */
static int eval_elems_gpu(struct ck_eval_ctx *c, const struct ck_target *t, int64_t e0,
			  int64_t e1, unsigned char *buf, struct ck_err *err)
{
	size_t es = ck_dtype_size(t->v.dtype);
	int64_t step = (int64_t)(ck_gpu_lane_out_cap(c->lane) / es);
	int rc = 0;
	c->on_gpu = 1;
	for (int64_t a = e0; a < e1 && rc == 0; a += step) {
		int64_t b = e1 - a < step ? e1 : a + step;
		if (ck_gpu_begin(c->lane, (size_t)(b - a) * es, t->holes, err) < 0) {
			rc = -1;
			break;
		}
		rc = eval_elems(c, t, a, b, NULL, err);
		struct ck_err e2;
		if (ck_gpu_end(c->lane, rc == 0 ? buf + (size_t)(a - e0) * es : NULL,
			       rc == 0 ? err : &e2) < 0)
			rc = -1;
	}
	c->on_gpu = 0;
	if (rc == 0) {
		atomic_fetch_add(&c->eng->gpu_reads, 1);
		atomic_fetch_add(&c->eng->gpu_bytes, (uint64_t)(e1 - e0) * es);
	}
	return rc;
}

/* Elements [e0, e1) of t's value into buf, on the GPU lane when it is
 * worth it (len: the bytes asked for, for the GPU threshold). */
static int eval_value(struct ck_eval_ctx *c, const struct ck_target *t, int64_t e0, int64_t e1,
		      uint64_t len, unsigned char *buf, struct ck_err *err)
{
	if (c->lane && !c->eng->dry_run && len >= c->eng->gpu_min && t->v.ndim > 0 &&
	    ck_engine_gpu_worth(t))
		return eval_elems_gpu(c, t, e0, e1, buf, err);
	if (t->holes) /* padding: what no piece covers reads as zeros */
		memset(buf, 0, (size_t)(e1 - e0) * ck_dtype_size(t->v.dtype));
	return eval_elems(c, t, e0, e1, buf, err);
}

/* The 2-byte float type (BF16 or F16) whose source elements the pieces of
 * t only widen to F32 (a BF16 or F16 checkpoint's GGUF view, permuted or
 * not), or CK_DT_INVALID when they do anything else. */
static enum ck_dtype widened_from(const struct ck_catalog *cat, const struct ck_target *t)
{
	enum ck_dtype from = CK_DT_INVALID;
	for (size_t i = 0; i < t->v.n; i++) {
		const struct ck_piece *p = &t->v.p[i];
		const struct ck_catalog_entry *src = &cat->entries[p->src];
		if (p->n_casts != 1 || p->casts[0] != CK_DT_F32 || p->sc || p->shifted || p->fp4 ||
		    src->t.quant || (src->t.dtype != CK_DT_BF16 && src->t.dtype != CK_DT_F16) ||
		    (i && src->t.dtype != from))
			return CK_DT_INVALID;
		from = src->t.dtype;
	}
	return from;
}

/* Quantized target ti's value as the BF16 or F16 elements it widens, or t
 * itself when its pieces do more than that: quantized from those (exact,
 * as the cast is), the view makes no F32 copy of its values. Kept in the
 * context for the next read of the same target. */
static const struct ck_target *quant_source(struct ck_eval_ctx *c, uint32_t ti,
					    const struct ck_target *t)
{
	if (c->qstage_ok && c->qstage_ti == ti)
		return c->qstage_ok > 0 ? &c->qstage : t;
	ck_value_free(&c->qstage.v);
	c->qstage_ti = ti;
	c->qstage_ok = -1;
	struct ck_err e;
	enum ck_dtype from = widened_from(c->eng->plan->cat, t);
	/* with a GPU lane the F32 value stays the lane's work, as before (its
	 * 2-byte-out boxes are not what the GPU tests cover) */
	if (c->lane || from == CK_DT_INVALID || ck_value_copy(&c->qstage.v, &t->v, &e) < 0)
		return t; /* out of memory: through F32, as any other */
	c->qstage.name = t->name;
	c->qstage.holes = t->holes;
	c->qstage.v.dtype = from;
	for (size_t i = 0; i < c->qstage.v.n; i++)
		c->qstage.v.p[i].n_casts = 0;
	c->qstage_ok = 1;
	return &c->qstage;
}

/* Blocks [b, e) of a quantized target, their elements at x (of type from:
 * CK_QSRC_*), into dst, which holds its bytes [off, off + len): the blocks
 * whole in that range straight into it, a block cut by either end through
 * a block of its own (only the first and the last block of a read can be
 * cut). */
static void quant_into(uint32_t type, int from, const unsigned char *x, uint64_t b, uint64_t e,
		       uint64_t off, uint64_t len, unsigned char *dst)
{
	size_t qk, qb;
	ck_ggml_block(type, &qk, &qb);
	const size_t xs = qk * (from == CK_QSRC_F32 ? 4 : 2);
	const uint64_t end = off + len;
	uint64_t w0 = (off + qb - 1) / qb, w1 = end / qb; /* the whole blocks */
	w0 = w0 > b ? w0 : b;
	w1 = w1 < e ? w1 : e;
	if (w0 < w1)
		ck_ggml_quant(type, from, x + (w0 - b) * xs, (size_t)(w1 - w0),
			      dst + (w0 * qb - off), 1);
	const uint64_t edge[2] = {b, e - 1};
	for (int i = 0; i < (e - 1 > b ? 2 : 1); i++) {
		uint64_t k = edge[i];
		if (k >= w0 && k < w1)
			continue;
		unsigned char q[256]; /* a block: Q6_K's 210 bytes the most */
		ck_ggml_quant(type, from, x + (k - b) * xs, 1, q, 1);
		uint64_t lo = k * qb > off ? k * qb : off;
		uint64_t hi = (k + 1) * qb < end ? (k + 1) * qb : end;
		memcpy(dst + (lo - off), q + (lo - k * qb), (size_t)(hi - lo));
	}
}

/* Elements a quantized read evaluates at a time (2 MiB of F32). */
#define QSTEP_ELEMS (16384 * 32)

/* Blocks of a quantized target with importance weights (-o gguf_imatrix),
 * evaluated in whole rows (Q4_0, Q4_1, Q5_0, Q5_1 weigh by the row's mean
 * square), each block of the read quantized with its columns' weights
 * (t->qw: per matrix of a stacked tensor, one weight per column). */
static int read_quantized_imx(struct ck_eval_ctx *c, const struct ck_target *t,
			      const struct ck_target *v, int from, uint64_t off, uint64_t len,
			      unsigned char *dst, struct ck_err *err)
{
	size_t qk, qb;
	ck_ggml_block(t->qtype, &qk, &qb);
	const int nd = t->v.ndim;
	const uint64_t ncols = (uint64_t)t->v.shape[nd - 1];
	const uint64_t per_mat = nd >= 2 ? (uint64_t)t->v.shape[nd - 2] : 1, bpr = ncols / qk;
	const size_t es = from == CK_QSRC_F32 ? 4 : 2;
	const uint64_t end = off + len, b0 = off / qb, b1 = (end + qb - 1) / qb;
	const uint64_t r1 = (b1 + bpr - 1) / bpr;
	const uint64_t rstep = QSTEP_ELEMS / ncols ? QSTEP_ELEMS / ncols : 1;
	/* the types whose weights take the row's mean square (IQ4_NL's, like
	 * the K-quants', come from its own block) */
	const int by_row = t->qtype == CK_GGML_Q4_0 || t->qtype == CK_GGML_Q4_1 ||
			   t->qtype == CK_GGML_Q5_0 || t->qtype == CK_GGML_Q5_1;
	if (grow(&c->fwin, &c->fwin_cap, rstep * ncols * es, "quantization", err) < 0)
		return -1;
	for (uint64_t r = b0 / bpr; r < r1; r += rstep) {
		const uint64_t re = r1 - r < rstep ? r1 : r + rstep;
		if (eval_value(c, v, (int64_t)(r * ncols), (int64_t)(re * ncols),
			       (re - r) * ncols * es, c->fwin, err) < 0)
			return -1;
		const uint64_t kb = b0 > r * bpr ? b0 : r * bpr, ke = b1 < re * bpr ? b1 : re * bpr;
		float sigma2 = 0;
		for (uint64_t k = kb, m; k < ke && !c->eng->dry_run; k += m) {
			const uint64_t row = k / bpr, col = k % bpr * qk;
			const unsigned char *xr = c->fwin + (row - r) * ncols * es;
			if (by_row && (k == kb || col == 0))
				sigma2 = ck_row_sigma2(from, xr, ncols);
			/* a run of the row's blocks, 256 elements at most (IQ4_NL
			 * quantizes eight side by side): Q6_K's 210 bytes or eight
			 * Q5_1 blocks' 192 at most */
			unsigned char q[256];
			m = 256 / qk * qb <= sizeof q ? 256 / qk : sizeof q / qb;
			m = m < bpr - k % bpr ? m : bpr - k % bpr;
			m = m < ke - k ? m : ke - k;
			if (ck_ggml_quant_imx(t->qtype, from, xr + col * es,
					      t->qw + row / per_mat * ncols + col, sigma2, (int)m,
					      q) < 0)
				return ck_fail(err, CK_E_MAPPING,
					       "\"%s\": %s takes no importance matrix", t->name,
					       ck_ggml_type_name(t->qtype));
			const uint64_t lo = k * qb > off ? k * qb : off;
			const uint64_t hi = (k + m) * qb < end ? (k + m) * qb : end;
			memcpy(dst + (lo - off), q + (lo - k * qb), (size_t)(hi - lo));
		}
	}
	return 0;
}

/* A quantized target (the GGUF view): bytes [off, off+len) of its blocks.
 * The blocks touched are evaluated (as F32, or as the BF16 or F16 source
 * elements their cast would widen) and quantized, QSTEP_ELEMS elements
 * (2 MiB of F32) at a time. */
static int read_quantized(struct ck_eval_ctx *c, uint32_t ti, uint64_t off, uint64_t len,
			  unsigned char *dst, struct ck_err *err)
{
	const struct ck_target *t = &c->eng->plan->t[ti];
	size_t qk, qb;
	if (!ck_ggml_block(t->qtype, &qk, &qb) || t->v.dtype != CK_DT_F32 || qb > 256)
		return ck_fail(err, CK_E_MAPPING, "\"%s\": cannot quantize to %s", t->name,
			       ck_ggml_type_name(t->qtype));
	const struct ck_target *v = quant_source(c, ti, t);
	const int from = v == t			    ? CK_QSRC_F32
			 : v->v.dtype == CK_DT_BF16 ? CK_QSRC_BF16
						    : CK_QSRC_F16;
	if (t->qw)
		return read_quantized_imx(c, t, v, from, off, len, dst, err);
	const size_t es = from == CK_QSRC_F32 ? 4 : 2;
	uint64_t b0 = off / qb, b1 = (off + len + qb - 1) / qb;
	/* scratch kept in the context: fresh pages per read cost page faults */
	const uint64_t step = QSTEP_ELEMS / qk;
	if (grow(&c->fwin, &c->fwin_cap, step * qk * es, "quantization", err) < 0)
		return -1;
	int rc = 0;
	for (uint64_t b = b0; b < b1 && rc == 0; b += step) {
		uint64_t e = b1 - b < step ? b1 : b + step;
		rc = eval_value(c, v, (int64_t)(b * qk), (int64_t)(e * qk), (e - b) * qk * es,
				c->fwin, err);
		if (rc == 0 && !c->eng->dry_run)
			quant_into(t->qtype, from, c->fwin, b, e, off, len, dst);
	}
	return rc;
}

int ck_engine_read(struct ck_eval_ctx *c, uint32_t ti, uint64_t off, uint64_t len, void *dst,
		   struct ck_err *err)
{
	const struct ck_target *t = &c->eng->plan->t[ti];
	if (off > t->nbytes || len > t->nbytes - off)
		return ck_fail(err, CK_E_USAGE, "read past the end of \"%s\"", t->name);
	if (len == 0)
		return 0;
	if (t->qtype)
		return read_quantized(c, ti, off, len, dst, err);
	size_t es = ck_dtype_size(t->v.dtype);
	int64_t e0 = (int64_t)(off / es), e1 = (int64_t)((off + len + es - 1) / es);
	int aligned = off % es == 0 && len % es == 0;
	unsigned char *buf = aligned ? dst : malloc((size_t)(e1 - e0) * es);
	if (!buf)
		return ck_fail_sys(err, ENOMEM, "evaluation");
	int r = eval_value(c, t, e0, e1, len, buf, err);
	if (!aligned) {
		if (r == 0)
			memcpy(dst, buf + (off - (uint64_t)e0 * es), len);
		free(buf);
	}
	return r;
}
