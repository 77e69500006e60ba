#include "compare.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../kern/elem.h"
#include "engine.h"

static int is_float(enum ck_dtype dt)
{
	return dt == CK_DT_F32 || dt == CK_DT_F16 || dt == CK_DT_BF16 || dt == CK_DT_F8_E4M3 ||
	       dt == CK_DT_F8_E5M2 || dt == CK_DT_F64 || dt == CK_DT_C64;
}

int ck_cmp_comparable(enum ck_dtype a, enum ck_dtype b)
{
	if (a == b)
		return 1;
	/* numbers of different widths compare by value; complex only with itself */
	return a != CK_DT_C64 && b != CK_DT_C64 && ck_dtype_size(a) && ck_dtype_size(b) &&
	       a != CK_DT_F8_E8M0 && b != CK_DT_F8_E8M0 && a != CK_DT_F8_E4M3FNUZ &&
	       b != CK_DT_F8_E4M3FNUZ && a != CK_DT_F8_E5M2FNUZ && b != CK_DT_F8_E5M2FNUZ;
}

/* Element i (a C64 counts as two: real, imaginary) as a double. */
static double load(const unsigned char *p, enum ck_dtype dt, uint64_t i)
{
	int64_t s;
	uint64_t u;
	switch (dt) {
	case CK_DT_F64: {
		double d;
		memcpy(&d, p + 8 * i, 8);
		return d;
	}
	case CK_DT_F32:
	case CK_DT_C64:
		return ck_elem_load(p + 4 * i, CK_DT_F32);
	case CK_DT_F16:
	case CK_DT_BF16:
		return ck_elem_load(p + 2 * i, dt);
	case CK_DT_F8_E4M3:
	case CK_DT_F8_E5M2:
		return ck_elem_load(p + i, dt);
	case CK_DT_BOOL:
	case CK_DT_U8:
		return p[i];
	case CK_DT_I8:
		return (int8_t)p[i];
	case CK_DT_I16: {
		int16_t v;
		memcpy(&v, p + 2 * i, 2);
		return v;
	}
	case CK_DT_U16: {
		uint16_t v;
		memcpy(&v, p + 2 * i, 2);
		return v;
	}
	case CK_DT_I32: {
		int32_t v;
		memcpy(&v, p + 4 * i, 4);
		return v;
	}
	case CK_DT_U32: {
		uint32_t v;
		memcpy(&v, p + 4 * i, 4);
		return v;
	}
	case CK_DT_I64:
		memcpy(&s, p + 8 * i, 8);
		return (double)s;
	case CK_DT_U64:
		memcpy(&u, p + 8 * i, 8);
		return (double)u;
	default:
		return p[i];
	}
}

/* The element's bits as an integer ordered like the float values, for ulp
 * distances (same float dtype only). */
static int64_t ordered(const unsigned char *p, enum ck_dtype dt, uint64_t i)
{
	size_t w = dt == CK_DT_C64 ? 4 : ck_dtype_size(dt);
	uint64_t bits = 0;
	memcpy(&bits, p + w * i, w);
	uint64_t sign = 1ull << (8 * w - 1);
	int64_t mag = (int64_t)(bits & (sign - 1));
	return bits & sign ? -mag : mag;
}

struct job {
	const struct ck_plan *pa, *pb;
	const uint32_t *ia, *ib;
	size_t n;
	const struct ck_cmp_opts *o;
	struct ck_cmp_result *r;
	struct ck_engine ea, eb;
	uint64_t chunk; /* bytes per read: CK_CMP_CHUNK unless a test lowers it */
	atomic_size_t next;
	atomic_int failed;
	pthread_mutex_t mu;
	struct ck_err err;
};

/* Compare count elements starting at flat index e0 of buffers x (dtype da) and y (db). */
static void compare_run(const struct ck_cmp_opts *o, struct ck_cmp_result *r,
			const unsigned char *x, enum ck_dtype da, const unsigned char *y,
			enum ck_dtype db, uint64_t e0, uint64_t count)
{
	int same = da == db;
	size_t w = ck_dtype_size(da);
	if (same && !memcmp(x, y, count * w))
		return; /* the common case: nothing to look at */
	int cplx = da == CK_DT_C64;
	uint64_t nv = cplx ? 2 * count : count; /* C64: two floats each */
	int fl = is_float(da) || is_float(db);
	r->ulp_valid = same && fl;
	for (uint64_t i = 0; i < nv; i++) {
		if (same && !memcmp(x + (w / (cplx ? 2 : 1)) * i, y + (w / (cplx ? 2 : 1)) * i,
				    w / (cplx ? 2 : 1)))
			continue;
		double a = load(x, da, i), b = load(y, db, i);
		int differs;
		double d = fabs(a - b);
		uint64_t ulp = 0;
		if (isnan(a) || isnan(b)) {
			d = isnan(a) && isnan(b) ? 0 : INFINITY;
			differs = o->bytes || d != 0;
		} else {
			if (same && fl) {
				int64_t oa = ordered(x, da, i), ob = ordered(y, db, i);
				ulp = oa > ob ? (uint64_t)(oa - ob) : (uint64_t)(ob - oa);
			}
			differs = o->bytes ? 1
					   : !(d <= o->atol + o->rtol * fabs(b) ||
					       (r->ulp_valid && o->ulp && ulp <= o->ulp) || a == b);
			if (isinf(a) || isinf(b))
				d = a == b ? 0 : INFINITY;
		}
		if (d > r->max_abs)
			r->max_abs = d;
		if (ulp > r->max_ulp)
			r->max_ulp = ulp;
		if (differs) {
			/* blocks of a transpose come out of flat order: the
			 * first is the lowest index */
			if (!r->n_diff || e0 + (cplx ? i / 2 : i) < r->first) {
				r->first = e0 + (cplx ? i / 2 : i);
				r->first_a = a;
				r->first_b = b;
			}
			r->n_diff++;
		}
	}
}

/* Target pair k when one side transposes a source larger than the window
 * (ck_engine_block_dim): read in blocks along that dim, every other dim
 * whole, each compared row segment by row segment, so that the source is
 * read once (as convert writes such a target). 1: not such a pair, 0, -1. */
static int compare_blocks(struct job *j, size_t k, struct ck_eval_ctx *ca, struct ck_eval_ctx *cb,
			  unsigned char *x, unsigned char *y, struct ck_err *err)
{
	const struct ck_target *ta = &j->pa->t[j->ia[k]], *tb = &j->pb->t[j->ib[k]];
	int dim = ck_engine_block_dim(&j->ea, j->ia[k]);
	if (dim < 0)
		dim = ck_engine_block_dim(&j->eb, j->ib[k]);
	if (dim < 0 || ta->qtype || tb->qtype || ta->v.ndim != tb->v.ndim ||
	    memcmp(ta->v.shape, tb->v.shape, (size_t)ta->v.ndim * sizeof *ta->v.shape))
		return 1;
	size_t wa = ck_dtype_size(ta->v.dtype), wb = ck_dtype_size(tb->v.dtype);
	struct ck_blocks b;
	ck_blocks_init(&b, ta, dim);
	b.k = j->chunk / (b.rows * b.inner * (wa > wb ? wa : wb));
	if (b.k == 0)
		return 1;
	int rc = 0;
	while (rc == 0 && ck_blocks_next(&b)) {
		uint64_t seg = (b.k1 - b.k0) * b.inner;
		rc = ck_engine_read_box(ca, j->ia[k], b.lo, b.hi, x, err);
		if (rc == 0)
			rc = ck_engine_read_box(cb, j->ib[k], b.lo, b.hi, y, err);
		for (uint64_t r = 0; r < b.rows && rc == 0; r++)
			compare_run(j->o, &j->r[k], x + r * seg * wa, ta->v.dtype, y + r * seg * wb,
				    tb->v.dtype, (r * b.n + b.k0) * b.inner, seg);
	}
	return rc;
}

static void *worker(void *arg)
{
	struct job *j = arg;
	struct ck_eval_ctx ca, cb;
	ck_eval_ctx_init(&ca, &j->ea);
	ck_eval_ctx_init(&cb, &j->eb);
	unsigned char *x = malloc(j->chunk), *y = malloc(j->chunk);
	struct ck_err err;
	int rc = x && y ? 0 : ck_fail_sys(&err, ENOMEM, "compare");
	for (;;) {
		size_t k = atomic_fetch_add(&j->next, 1);
		if (rc < 0 || k >= j->n || atomic_load(&j->failed))
			break;
		struct ck_cmp_result *r = &j->r[k];
		const struct ck_target *ta = &j->pa->t[j->ia[k]], *tb = &j->pb->t[j->ib[k]];
		size_t wa = ck_dtype_size(ta->v.dtype), wb = ck_dtype_size(tb->v.dtype);
		size_t wmax = wa > wb ? wa : wb;
		uint64_t numel = ck_value_numel(&ta->v), per = j->chunk / wmax;
		int blocks = compare_blocks(j, k, &ca, &cb, x, y, &err);
		if (blocks <= 0)
			rc = blocks;
		for (uint64_t e = 0; rc == 0 && blocks > 0 && e < numel; e += per) {
			uint64_t cnt = numel - e < per ? numel - e : per;
			rc = ck_engine_read(&ca, j->ia[k], e * wa, cnt * wa, x, &err);
			if (rc == 0)
				rc = ck_engine_read(&cb, j->ib[k], e * wb, cnt * wb, y, &err);
			if (rc == 0)
				compare_run(j->o, r, x, ta->v.dtype, y, tb->v.dtype, e, cnt);
		}
	}
	if (rc < 0) {
		pthread_mutex_lock(&j->mu);
		if (!atomic_exchange(&j->failed, 1))
			j->err = err;
		pthread_mutex_unlock(&j->mu);
	}
	free(x);
	free(y);
	ck_eval_ctx_free(&ca);
	ck_eval_ctx_free(&cb);
	return NULL;
}

int ck_compare(const struct ck_plan *a, const struct ck_plan *b, const uint32_t *ia,
	       const uint32_t *ib, size_t n, const struct ck_cmp_opts *o, struct ck_cmp_report *out,
	       struct ck_err *err)
{
	memset(out, 0, sizeof *out);
	struct job j;
	memset(&j, 0, sizeof j);
	j.pa = a, j.pb = b, j.ia = ia, j.ib = ib, j.n = n, j.o = o;
	if (!(j.r = calloc(n ? n : 1, sizeof *j.r)))
		return ck_fail_sys(err, ENOMEM, "compare");
	for (size_t k = 0; k < n; k++) {
		j.r[k].a = ia[k];
		j.r[k].b = ib[k];
		out->bytes_a += a->t[ia[k]].nbytes;
		out->bytes_b += b->t[ib[k]].nbytes;
	}
	ck_engine_init(&j.ea, a, o->use_uring);
	ck_engine_init(&j.eb, b, o->use_uring);
	if (o->window_max)
		j.ea.window_max = j.eb.window_max = o->window_max;
	j.chunk = o->chunk ? o->chunk : CK_CMP_CHUNK;
	pthread_mutex_init(&j.mu, NULL);
	int nth = o->threads > 0 ? o->threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
	nth = nth < 1 ? 1 : nth > 64 ? 64 : nth;
	pthread_t th[64];
	int started = 0;
	for (; started < nth; started++)
		if (pthread_create(&th[started], NULL, worker, &j) != 0)
			break;
	if (started == 0)
		worker(&j); /* no thread to spare: do it here */
	for (int i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	pthread_mutex_destroy(&j.mu);
	if (atomic_load(&j.failed)) {
		*err = j.err;
		free(j.r);
		return -1;
	}
	out->r = j.r;
	out->n = n;
	out->read_a = atomic_load(&j.ea.source_bytes_read);
	out->read_b = atomic_load(&j.eb.source_bytes_read);
	return 0;
}

void ck_cmp_report_free(struct ck_cmp_report *r)
{
	free(r->r);
	memset(r, 0, sizeof *r);
}
