#include "gguf_out.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

enum { T_U32 = 4, T_I32 = 5, T_F32 = 6, T_BOOL = 7, T_STR = 8, T_ARR = 9 };

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

int ck_gguf_build(const struct ck_plan *p, const struct ck_gguf_meta *m, struct ck_gguf_extra *x,
		  size_t n_x, struct ck_vfile *out, struct ck_err *err)
{
	memset(out, 0, sizeof *out);
	if (m->b.oom)
		return ck_fail_sys(err, ENOMEM, "GGUF metadata");
	struct ck_gguf_meta h = {0};
	put(&h, "GGUF", 4);
	put_u32(&h, 3);
	put_u64(&h, p->n + n_x);
	put_u64(&h, m->n);
	put(&h, m->b.p, m->b.n);
	uint64_t off = 0;
	for (size_t i = 0; i < p->n; i++) {
		const struct ck_target *t = &p->t[i];
		int64_t type = ck_gguf_type_of(t);
		if (strlen(t->name) > CK_GGUF_MAX_NAME || t->v.ndim > 4 || type < 0) {
			ck_gguf_meta_free(&h);
			return ck_fail(err, CK_E_MAPPING, "\"%s\": %s", t->name,
				       type < 0 ? "its dtype has no GGUF type"
				       : t->v.ndim > 4 ? "GGUF holds at most 4 dims"
						       : "GGUF names are at most 63 bytes");
		}
		put_info(&h, t->name, t->v.ndim, t->v.shape, (uint32_t)type, off);
		off += aligned(t->nbytes);
	}
	for (size_t k = 0; k < n_x; k++) {
		put_info(&h, x[k].name, 1, &x[k].n, CK_GGUF_F32, off);
		x[k].offset = off; /* the data section's: the header is added below */
		off += aligned((uint64_t)x[k].n * 4);
	}
	static const unsigned char zeros[CK_GGUF_ALIGN];
	put(&h, zeros, (CK_GGUF_ALIGN - h.b.n % CK_GGUF_ALIGN) % CK_GGUF_ALIGN);
	int r = h.b.oom ? -1 : ck_vfile_lit(out, h.b.p, h.b.n);
	for (size_t k = 0; k < n_x; k++)
		x[k].offset += h.b.n;
	ck_gguf_meta_free(&h);
	for (size_t i = 0; i < p->n && r == 0; i++) {
		uint64_t n = p->t[i].nbytes, pad = aligned(n) - n;
		r = ck_vfile_target(out, (uint32_t)i, 0, n);
		if (r == 0 && pad)
			r = ck_vfile_fill(out, 0, (size_t)pad);
	}
	for (size_t k = 0; k < n_x && r == 0; k++) {
		uint64_t n = (uint64_t)x[k].n * 4, pad = aligned(n) - n;
		r = ck_vfile_lit(out, x[k].data, (size_t)n); /* little-endian floats, as GGUF's */
		if (r == 0 && pad)
			r = ck_vfile_fill(out, 0, (size_t)pad);
	}
	if (r < 0) {
		ck_vfile_free(out);
		return ck_fail_sys(err, ENOMEM, "GGUF layout");
	}
	return 0;
}
