#include "explain.h"

#include <inttypes.h>
#include <string.h>

#include "../util/jsonw.h"

/* A flat source element as an index into its tensor. */
static void unravel(const struct ck_tensor_info *s, int64_t flat, int64_t *idx)
{
	for (int d = s->ndim - 1; d >= 0; d--) {
		int64_t n = s->shape[d] > 0 ? s->shape[d] : 1;
		idx[d] = flat % n;
		flat /= n;
	}
}

static void put_ints(FILE *f, const int64_t *v, int n)
{
	fputc('[', f);
	for (int d = 0; d < n; d++)
		fprintf(f, "%s%" PRId64, d ? ", " : "", v[d]);
	fputc(']', f);
}

static void put_casts(FILE *f, const struct ck_piece *q, int json)
{
	for (int k = 0; k < q->n_casts; k++)
		fprintf(f, json ? "%s\"%s\"" : "%s%s", k ? (json ? ", " : " -> ") : "",
			ck_dtype_name(q->casts[k]));
}

void ck_explain_json(FILE *f, const struct ck_plan *p, const struct ck_target *t, size_t max)
{
	fputc('[', f);
	for (size_t i = 0; i < t->v.n && i < max; i++) {
		const struct ck_piece *q = &t->v.p[i];
		const struct ck_tensor_info *s = &p->cat->entries[q->src].t;
		int64_t start[CK_MAX_DIMS];
		unravel(s, q->base >> q->fp4, start); /* MXFP4: base counts nibbles */
		fprintf(f, "%s{\"box\": [", i ? ", " : "");
		for (int d = 0; d < t->v.ndim; d++)
			fprintf(f, "%s[%" PRId64 ", %" PRId64 "]", d ? ", " : "", q->lo[d], q->hi[d]);
		fprintf(f, "], \"source\": ");
		ck_json_fput_str(f, s->name);
		fprintf(f, ", \"source_dtype\": \"%s\", \"start\": ",
			ck_dtype_name(q->fp4 ? CK_DT_F4_E2M1 : s->dtype));
		put_ints(f, start, s->ndim);
		fprintf(f, ", \"strides\": ");
		put_ints(f, q->stride, t->v.ndim);
		fprintf(f, ", \"casts\": [");
		put_casts(f, q, 1);
		fputc(']', f);
		if (q->sc) {
			fprintf(f, ", \"scale\": {\"source\": ");
			ck_json_fput_str(f, p->cat->entries[q->sc->src].t.name);
			fprintf(f, ", \"op\": \"%s\", \"dims\": [", q->sc->divide ? "divide" : "multiply");
			for (int k = 0; k < q->sc->n; k++)
				fprintf(f, "%s%d", k ? ", " : "", q->sc->dim[k]);
			fprintf(f, "], \"blocks\": ");
			put_ints(f, q->sc->block, q->sc->n);
			fputc('}', f);
		}
		if (q->shifted)
			fprintf(f, ", \"add\": %.9g", (double)q->shift);
		fputc('}', f);
	}
	fputc(']', f);
}

void ck_explain_text(FILE *f, const struct ck_plan *p, const struct ck_target *t)
{
	ck_fput_safe(f, t->name);
	fprintf(f, ": %s ", ck_dtype_name(t->v.dtype));
	put_ints(f, t->v.shape, t->v.ndim);
	fprintf(f, ", %zu piece%s%s\n", t->v.n, t->v.n == 1 ? "" : "s",
		t->holes ? " (elements no piece covers are zeros)" : "");
	for (size_t i = 0; i < t->v.n; i++) {
		const struct ck_piece *q = &t->v.p[i];
		const struct ck_tensor_info *s = &p->cat->entries[q->src].t;
		int64_t start[CK_MAX_DIMS];
		unravel(s, q->base >> q->fp4, start);
		fputs("  [", f);
		for (int d = 0; d < t->v.ndim; d++)
			fprintf(f, "%s%" PRId64 ":%" PRId64, d ? ", " : "", q->lo[d], q->hi[d]);
		fputs("] <- ", f);
		ck_fput_safe(f, s->name);
		put_ints(f, start, s->ndim);
		fprintf(f, " onwards%s, source elements per step ",
			q->fp4 && (q->base & 1) ? " (its high nibble)" : "");
		put_ints(f, q->stride, t->v.ndim);
		fprintf(f, ", %s", q->fp4 ? "U8 read as E2M1 pairs" : ck_dtype_name(s->dtype));
		if (q->n_casts) {
			fputs(" -> ", f);
			put_casts(f, q, 0);
		}
		if (q->sc) {
			fprintf(f, ", %s by ", q->sc->divide ? "divided" : "multiplied");
			ck_fput_safe(f, p->cat->entries[q->sc->src].t.name);
			fprintf(f, " per block ");
			put_ints(f, q->sc->block, q->sc->n);
		}
		if (q->shifted)
			fprintf(f, ", %+.9g in F32 before the casts", (double)q->shift);
		fputc('\n', f);
	}
}

int ck_explain_index(FILE *f, const struct ck_plan *p, const struct ck_target *t,
		     const int64_t *idx, int n, struct ck_err *err)
{
	if (n != t->v.ndim)
		return ck_fail(err, CK_E_USAGE, "%s: %d indices for %d dims", t->name, n, t->v.ndim);
	for (int d = 0; d < n; d++)
		if (idx[d] < 0 || idx[d] >= t->v.shape[d])
			return ck_fail(err, CK_E_USAGE, "%s: index %" PRId64 " outside dim %d of size %" PRId64,
				       t->name, idx[d], d, t->v.shape[d]);
	ck_fput_safe(f, t->name);
	put_ints(f, idx, n);
	for (size_t i = 0; i < t->v.n; i++) {
		const struct ck_piece *q = &t->v.p[i];
		int in = 1;
		for (int d = 0; d < n && in; d++)
			in = idx[d] >= q->lo[d] && idx[d] < q->hi[d];
		if (!in)
			continue;
		const struct ck_tensor_info *s = &p->cat->entries[q->src].t;
		int64_t flat = q->base, at[CK_MAX_DIMS];
		for (int d = 0; d < n; d++)
			flat += q->stride[d] * (idx[d] - q->lo[d]);
		unravel(s, flat >> q->fp4, at);
		fputs(" = ", f);
		ck_fput_safe(f, s->name);
		put_ints(f, at, s->ndim);
		if (q->fp4)
			fprintf(f, " (its %s nibble, E2M1", flat & 1 ? "high" : "low");
		else
			fprintf(f, " (%s", ck_dtype_name(s->dtype));
		if (q->n_casts) {
			fputs(" -> ", f);
			put_casts(f, q, 0);
		}
		if (q->sc) {
			fprintf(f, ", %s by its block of ", q->sc->divide ? "divided" : "multiplied");
			ck_fput_safe(f, p->cat->entries[q->sc->src].t.name);
		}
		if (q->shifted)
			fprintf(f, ", %+.9g", (double)q->shift);
		fputs(")\n", f);
		return 0;
	}
	fputs(" = 0 (padding: no source element)\n", f);
	return 0;
}
