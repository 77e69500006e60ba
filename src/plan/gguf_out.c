#include "gguf_out.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

enum { T_U16 = 2, T_U32 = 4, T_I32 = 5, T_F32 = 6, T_BOOL = 7, T_STR = 8, T_ARR = 9 };

static void put(struct ck_gguf_meta *m, const void *p, size_t n)
{
	ck_buf_put(&m->b, p, n);
}

static void put_u32(struct ck_gguf_meta *m, uint32_t v)
{
	ck_buf_le(&m->b, v, 4);
}

static void put_u64(struct ck_gguf_meta *m, uint64_t v)
{
	ck_buf_le(&m->b, v, 8);
}

static void put_str(struct ck_gguf_meta *m, const char *s)
{
	size_t n = strlen(s);
	put_u64(m, n);
	put(m, s, n);
}

static void key(struct ck_gguf_meta *m, const char *k, uint32_t type)
{
	put_str(m, k);
	put_u32(m, type);
	m->n++;
}

void ck_gguf_meta_str(struct ck_gguf_meta *m, const char *k, const char *val)
{
	key(m, k, T_STR);
	put_str(m, val);
}

void ck_gguf_meta_u32(struct ck_gguf_meta *m, const char *k, uint32_t val)
{
	key(m, k, T_U32);
	put_u32(m, val);
}

void ck_gguf_meta_u16(struct ck_gguf_meta *m, const char *k, uint16_t val)
{
	key(m, k, T_U16);
	ck_buf_le(&m->b, val, 2);
}

void ck_gguf_meta_i32(struct ck_gguf_meta *m, const char *k, int32_t val)
{
	key(m, k, T_I32);
	put_u32(m, (uint32_t)val);
}

void ck_gguf_meta_f32(struct ck_gguf_meta *m, const char *k, float val)
{
	uint32_t bits;
	memcpy(&bits, &val, 4);
	key(m, k, T_F32);
	put_u32(m, bits);
}

void ck_gguf_meta_bool(struct ck_gguf_meta *m, const char *k, int val)
{
	unsigned char b = val != 0;
	key(m, k, T_BOOL);
	put(m, &b, 1);
}

void ck_gguf_meta_record(struct ck_gguf_meta *m, const void *rec, size_t len)
{
	put(m, rec, len);
	m->n++;
}

void ck_gguf_meta_append(struct ck_gguf_meta *m, const struct ck_gguf_meta *from)
{
	put(m, from->b.p, from->b.n);
	m->b.oom |= from->b.oom;
	m->n += from->n;
}

static void array(struct ck_gguf_meta *m, const char *k, uint32_t type, size_t n)
{
	key(m, k, T_ARR);
	put_u32(m, type);
	put_u64(m, n);
}

void ck_gguf_meta_strs(struct ck_gguf_meta *m, const char *k, char *const *v, size_t n)
{
	array(m, k, T_STR, n);
	for (size_t i = 0; i < n; i++)
		put_str(m, v[i]);
}

void ck_gguf_meta_f32s(struct ck_gguf_meta *m, const char *k, const float *v, size_t n)
{
	array(m, k, T_F32, n);
	for (size_t i = 0; i < n; i++) {
		uint32_t bits;
		memcpy(&bits, &v[i], 4);
		put_u32(m, bits);
	}
}

void ck_gguf_meta_i32s(struct ck_gguf_meta *m, const char *k, const int32_t *v, size_t n)
{
	array(m, k, T_I32, n);
	for (size_t i = 0; i < n; i++)
		put_u32(m, (uint32_t)v[i]);
}

void ck_gguf_meta_free(struct ck_gguf_meta *m)
{
	ck_buf_free(&m->b);
	m->n = 0;
}

int64_t ck_gguf_type_of(const struct ck_target *t)
{
	if (t->qtype)
		return t->qtype;
	switch (t->v.dtype) {
	case CK_DT_F32: return CK_GGUF_F32;
	case CK_DT_F16: return CK_GGUF_F16;
	case CK_DT_BF16: return CK_GGUF_BF16;
	default: return -1;
	}
}

/* One tensor info: name, dims (fastest-varying first), type, offset. */
static void put_info(struct ck_gguf_meta *h, const char *name, int ndim, const int64_t *shape,
		     uint32_t type, uint64_t off)
{
	put_str(h, name);
	put_u32(h, (uint32_t)(ndim ? ndim : 1));
	for (int d = ndim - 1; d >= 0; d--)
		put_u64(h, (uint64_t)shape[d]);
	if (!ndim)
		put_u64(h, 1);
	put_u32(h, type);
	put_u64(h, off);
}

static uint64_t aligned(uint64_t n)
{
	return (n + CK_GGUF_ALIGN - 1) / CK_GGUF_ALIGN * CK_GGUF_ALIGN;
}

/* Tensor j of the file's order: target j, then the extras. */
static uint64_t tensor_bytes(const struct ck_plan *p, const struct ck_gguf_extra *x, size_t j)
{
	return j < p->n ? p->t[j].nbytes : (uint64_t)x[j - p->n].n * 4;
}

/* Header and infos of tensors [lo, hi), padded to the alignment, into h;
 * x's offsets (in the file) set when it is the whole file. */
static int header(const struct ck_plan *p, const struct ck_gguf_meta *m, struct ck_gguf_extra *x,
		  size_t n_x, size_t lo, size_t hi, struct ck_gguf_meta *h, struct ck_err *err)
{
	put(h, "GGUF", 4);
	put_u32(h, 3);
	put_u64(h, hi - lo);
	put_u64(h, m->n);
	put(h, m->b.p, m->b.n);
	uint64_t off = 0;
	const int whole = lo == 0 && hi == p->n + n_x;
	for (size_t j = lo; j < hi; off += aligned(tensor_bytes(p, x, j)), j++) {
		if (j >= p->n) {
			put_info(h, x[j - p->n].name, 1, &x[j - p->n].n, CK_GGUF_F32, off);
			if (whole) /* the data section's: the header is added below */
				x[j - p->n].offset = off;
			continue;
		}
		const struct ck_target *t = &p->t[j];
		int64_t type = ck_gguf_type_of(t);
		if (strlen(t->name) > CK_GGUF_MAX_NAME || t->v.ndim > 4 || type < 0)
			return ck_fail(err, CK_E_MAPPING, "\"%s\": %s", t->name,
				       type < 0 ? "its dtype has no GGUF type"
				       : t->v.ndim > 4 ? "GGUF holds at most 4 dims"
						       : "GGUF names are at most 63 bytes");
		put_info(h, t->name, t->v.ndim, t->v.shape, (uint32_t)type, off);
	}
	static const unsigned char zeros[CK_GGUF_ALIGN];
	put(h, zeros, (CK_GGUF_ALIGN - h->b.n % CK_GGUF_ALIGN) % CK_GGUF_ALIGN);
	if (h->b.oom)
		return ck_fail_sys(err, ENOMEM, "GGUF layout");
	for (size_t k = 0; k < n_x && whole; k++)
		x[k].offset += h->b.n;
	return 0;
}

/* One file of tensors [lo, hi) with metadata m. */
static int build_range(const struct ck_plan *p, const struct ck_gguf_meta *m,
		       struct ck_gguf_extra *x, size_t n_x, size_t lo, size_t hi,
		       struct ck_vfile *out, struct ck_err *err)
{
	memset(out, 0, sizeof *out);
	if (m->b.oom)
		return ck_fail_sys(err, ENOMEM, "GGUF metadata");
	struct ck_gguf_meta h = {0};
	if (header(p, m, x, n_x, lo, hi, &h, err) < 0) {
		ck_gguf_meta_free(&h);
		return -1;
	}
	int r = ck_vfile_lit(out, h.b.p, h.b.n);
	ck_gguf_meta_free(&h);
	for (size_t j = lo; j < hi && r == 0; j++) {
		uint64_t n = tensor_bytes(p, x, j), pad = aligned(n) - n;
		r = j < p->n ? ck_vfile_target(out, (uint32_t)j, 0, n)
			     /* little-endian floats, as GGUF's */
			     : ck_vfile_lit(out, x[j - p->n].data, (size_t)n);
		if (r == 0 && pad)
			r = ck_vfile_fill(out, 0, (size_t)pad);
	}
	if (r < 0) {
		ck_vfile_free(out);
		return ck_fail_sys(err, ENOMEM, "GGUF layout");
	}
	return 0;
}

int ck_gguf_build(const struct ck_plan *p, const struct ck_gguf_meta *m, struct ck_gguf_extra *x,
		  size_t n_x, struct ck_vfile *out, struct ck_err *err)
{
	return build_range(p, m, x, n_x, 0, p->n + n_x, out, err);
}

/* Where each file after the first starts (cut[1..n-1]; cut[0] 0, cut[n]
 * the count): gguf-split's rule, a new file when the next tensor would
 * take the file's tensor bytes (each padded) past max_bytes, or every
 * max_tensors tensors; a tensor over max_bytes alone in its file. */
static size_t cuts(const struct ck_plan *p, const struct ck_gguf_extra *x, size_t n,
		   uint64_t max_bytes, uint64_t max_tensors, size_t *cut)
{
	size_t k = 0;
	uint64_t cur = 0;
	cut[k++] = 0;
	for (size_t j = 0; j < n; j++) {
		uint64_t b = aligned(tensor_bytes(p, x, j));
		int next =
		    max_tensors ? j > 0 && j % max_tensors == 0 : cur > 0 && cur + b > max_bytes;
		if (next) {
			cut[k++] = j;
			cur = 0;
		}
		cur += b;
	}
	cut[k] = n;
	return k;
}

int ck_gguf_build_split(const struct ck_plan *p, const struct ck_gguf_meta *m,
			struct ck_gguf_extra *x, size_t n_x, uint64_t max_bytes,
			uint64_t max_tensors, struct ck_vfile **out, size_t *n_out,
			struct ck_err *err)
{
	*out = NULL;
	*n_out = 0;
	size_t n = p->n + n_x, *cut = calloc(n + 2, sizeof *cut);
	if (!cut)
		return ck_fail_sys(err, ENOMEM, "GGUF split");
	size_t files = cuts(p, x, n, max_bytes, max_tensors, cut);
	if (files > UINT16_MAX || n > INT32_MAX) {
		free(cut);
		return ck_fail(err, CK_E_USAGE,
			       "%zu GGUF files of %zu tensors: gguf-split numbers "
			       "at most 65,535",
			       files, n);
	}
	if (!(*out = calloc(files, sizeof **out))) {
		free(cut);
		return ck_fail_sys(err, ENOMEM, "GGUF split");
	}
	int r = 0;
	for (size_t k = 0; k < files && r == 0; k++, ++*n_out) {
		struct ck_gguf_meta sm = {0}; /* all of m in the first file only */
		if (k == 0)
			ck_gguf_meta_append(&sm, m);
		ck_gguf_meta_u16(&sm, "split.no", (uint16_t)k);
		ck_gguf_meta_u16(&sm, "split.count", (uint16_t)files);
		ck_gguf_meta_i32(&sm, "split.tensors.count", (int32_t)n);
		r = build_range(p, &sm, x, n_x, cut[k], cut[k + 1], &(*out)[k], err);
		ck_gguf_meta_free(&sm);
	}
	free(cut);
	if (r < 0) {
		ck_gguf_free_split(*out, *n_out);
		*out = NULL;
		*n_out = 0;
	}
	return r;
}

void ck_gguf_free_split(struct ck_vfile *v, size_t n)
{
	for (size_t k = 0; k < n && v; k++)
		ck_vfile_free(&v[k]);
	free(v);
}
