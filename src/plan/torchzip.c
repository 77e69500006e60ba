#include "torchzip.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ckpt/pickle_w.h"
#include "../ckpt/torchbin.h"
#include "../util/crc32.h"
#include "../util/numfmt.h"

#define U32_MAX_ZIP 0xFFFFFFFFu
#define ALIGN 64
#define PAGE_ALIGN 4096

static void pk_tuple(struct ck_buf *b, const uint64_t *v, int n)
{
	if (n == 0) {
		ck_buf_byte(b, ')');
		return;
	}
	ck_buf_byte(b, '(');
	for (int i = 0; i < n; i++)
		ck_pk_int(b, v[i]);
	ck_buf_byte(b, 't');
}

/* single: the archive holds one tensor as its top-level object (what
 * torch.save(tensor) writes: a DCP chunk), not a dict of them. */
static void build_pickle(const struct ck_plan *p, const struct ck_torchzip *z, int single,
			 const struct ck_zchunk *c, struct ck_buf *b)
{
	ck_buf_byte(b, 0x80);
	ck_buf_byte(b, 2);
	if (!single) {
		ck_pk_global(b, "collections", "OrderedDict");
		ck_buf_byte(b, ')');
		ck_buf_byte(b, 'R');
		ck_buf_byte(b, '(');
	}
	for (size_t k = 0; k < z->n_included; k++) {
		const struct ck_target *t = &p->t[z->included[k]];
		uint64_t size[CK_MAX_DIMS], stride[CK_MAX_DIMS], numel = 1, step = 1;
		int ndim = c ? c->ndim : t->v.ndim;
		const int64_t *shape = c ? c->shape : t->v.shape;
		for (int d = ndim - 1; d >= 0; d--) { /* torch's contiguous strides */
			size[d] = (uint64_t)shape[d];
			stride[d] = step;
			step *= size[d] ? size[d] : 1;
			numel *= size[d];
		}
		char key[CK_FMT_INT_MAX];
		ck_fmt_u64(key, k);
		if (!single)
			ck_pk_str(b, t->name);
		ck_pk_global(b, "torch._utils", "_rebuild_tensor_v2");
		ck_buf_byte(b, '(');
		ck_buf_byte(b, '('); /* the persistent id */
		ck_pk_str(b, "storage");
		ck_pk_global(b, "torch", ck_torch_storage(t->v.dtype));
		ck_pk_str(b, key);
		ck_pk_str(b, "cpu");
		ck_pk_int(b, numel);
		ck_buf_byte(b, 't');
		ck_buf_byte(b, 'Q'); /* BINPERSID */
		ck_pk_int(b, 0);  /* storage offset */
		pk_tuple(b, size, ndim);
		pk_tuple(b, stride, ndim);
		ck_buf_byte(b, 0x89); /* requires_grad=False */
		ck_pk_global(b, "collections", "OrderedDict");
		ck_buf_byte(b, ')');
		ck_buf_byte(b, 'R');
		ck_buf_byte(b, 't');
		ck_buf_byte(b, 'R');
	}
	if (!single)
		ck_buf_byte(b, 'u'); /* SETITEMS */
	ck_buf_byte(b, '.');
}

#define NAME_CAP 96 /* "<dir>/data/<k>": dir is one of the callers' short names */

/* An entry's name is made where it is written (twice: local header and
 * directory), not kept: a view of 92,000 tensors made 92,000 of them. */
struct entry {
	uint64_t hdr_off, size;
	uint32_t crc;
	int64_t k; /* data/<k>, or PICKLE or VERSION */
};

enum { PICKLE = -1, VERSION = -2 };

static size_t entry_name(char *out, const char *dir, int64_t k)
{
	size_t dl = strlen(dir);
	memcpy(out, dir, dl);
	const char *rest = k == PICKLE ? "/data.pkl" : k == VERSION ? "/version" : "/data/";
	size_t rl = strlen(rest);
	memcpy(out + dl, rest, rl + 1);
	return dl + rl + (k >= 0 ? (size_t)ck_fmt_u64(out + dl + rl, (uint64_t)k) : 0);
}

static unsigned char *le(unsigned char *w, uint64_t v, int bytes)
{
	for (int i = 0; i < bytes; i++)
		*w++ = (unsigned char)(v >> (8 * i));
	return w;
}

/* The local header of an entry whose data follows it, aligned to `align`.
 * Returns the blob offset of its CRC field, or -1 on allocation failure. */
static int64_t local_header(struct ck_vfile *v, const char *dir, struct entry *e, uint64_t align)
{
	unsigned char h[30 + NAME_CAP + 20 + 4], *w = h;
	char name[NAME_CAP];
	size_t nl = entry_name(name, dir, e->k);
	int z64 = e->size >= U32_MAX_ZIP;
	uint64_t fixed = 30 + nl + (z64 ? 20 : 0) + 4; /* + the "FB" padding field */
	uint64_t pad = (align - (v->size + fixed) % align) % align;
	e->hdr_off = v->size;
	w = le(w, 0x04034b50, 4);
	w = le(w, z64 ? 45 : 20, 2); /* version needed */
	w = le(w, 0, 2);	     /* flags */
	w = le(w, 0, 2);	     /* stored */
	w = le(w, 0, 2);	     /* time */
	w = le(w, 0x21, 2);	     /* date: 1980-01-01 */
	size_t crc_at = (size_t)(w - h);
	w = le(w, e->crc, 4);
	w = le(w, z64 ? U32_MAX_ZIP : e->size, 4);
	w = le(w, z64 ? U32_MAX_ZIP : e->size, 4);
	w = le(w, nl, 2);
	w = le(w, (z64 ? 20 : 0) + 4 + pad, 2);
	memcpy(w, name, nl);
	w += nl;
	if (z64) {
		w = le(w, 1, 2);
		w = le(w, 16, 2);
		w = le(w, e->size, 8);
		w = le(w, e->size, 8);
	}
	memcpy(w, "FB", 2);
	w = le(w + 2, pad, 2);
	int64_t at = (int64_t)(v->blob_len + crc_at);
	if (ck_vfile_lit(v, h, (size_t)(w - h)) < 0 || ck_vfile_fill(v, 'Z', pad) < 0)
		return -1;
	return at;
}

/* Central directory entry; returns the offset of its CRC field in b. */
static size_t central_entry(struct ck_buf *b, const char *dir, const struct entry *e)
{
	char name[NAME_CAP];
	size_t nl = entry_name(name, dir, e->k);
	int z64 = e->size >= U32_MAX_ZIP || e->hdr_off >= U32_MAX_ZIP;
	ck_buf_le(b, 0x02014b50, 4);
	ck_buf_le(b, 45, 2); /* made by */
	ck_buf_le(b, z64 ? 45 : 20, 2);
	ck_buf_le(b, 0, 2);
	ck_buf_le(b, 0, 2);
	ck_buf_le(b, 0, 2);
	ck_buf_le(b, 0x21, 2);
	size_t crc_at = b->n;
	ck_buf_le(b, e->crc, 4);
	ck_buf_le(b, z64 ? U32_MAX_ZIP : e->size, 4);
	ck_buf_le(b, z64 ? U32_MAX_ZIP : e->size, 4);
	ck_buf_le(b, nl, 2);
	ck_buf_le(b, z64 ? 28 : 0, 2);
	ck_buf_le(b, 0, 2); /* comment */
	ck_buf_le(b, 0, 2); /* disk */
	ck_buf_le(b, 0, 2); /* internal attributes */
	ck_buf_le(b, 0, 4); /* external attributes */
	ck_buf_le(b, z64 ? U32_MAX_ZIP : e->hdr_off, 4);
	ck_buf_put(b, name, nl);
	if (z64) { /* every field that reads 0xFFFFFFFF, in order */
		ck_buf_le(b, 1, 2);
		ck_buf_le(b, 24, 2);
		ck_buf_le(b, e->size, 8);
		ck_buf_le(b, e->size, 8);
		ck_buf_le(b, e->hdr_off, 8);
	}
	return crc_at;
}

static void end_records(struct ck_buf *b, uint64_t entries, uint64_t cd_off, uint64_t cd_size)
{
	uint64_t z64_off = cd_off + cd_size;
	ck_buf_le(b, 0x06064b50, 4); /* ZIP64 end of central directory */
	ck_buf_le(b, 44, 8);
	ck_buf_le(b, 45, 2);
	ck_buf_le(b, 45, 2);
	ck_buf_le(b, 0, 4);
	ck_buf_le(b, 0, 4);
	ck_buf_le(b, entries, 8);
	ck_buf_le(b, entries, 8);
	ck_buf_le(b, cd_size, 8);
	ck_buf_le(b, cd_off, 8);
	ck_buf_le(b, 0x07064b50, 4); /* its locator */
	ck_buf_le(b, 0, 4);
	ck_buf_le(b, z64_off, 8);
	ck_buf_le(b, 1, 4);
	ck_buf_le(b, 0x06054b50, 4); /* end of central directory */
	ck_buf_le(b, 0, 2);
	ck_buf_le(b, 0, 2);
	ck_buf_le(b, entries < 0xFFFF ? entries : 0xFFFF, 2);
	ck_buf_le(b, entries < 0xFFFF ? entries : 0xFFFF, 2);
	ck_buf_le(b, cd_size < U32_MAX_ZIP ? cd_size : U32_MAX_ZIP, 4);
	ck_buf_le(b, cd_off < U32_MAX_ZIP ? cd_off : U32_MAX_ZIP, 4);
	ck_buf_le(b, 0, 2);
}

static int build(const struct ck_plan *p, const char *dir, int64_t one, const struct ck_zchunk *c,
		 struct ck_torchzip *z, struct ck_err *err)
{
	memset(z, 0, sizeof *z);
	if (strlen(dir) > NAME_CAP - 32) /* the callers' names are short */
		return ck_fail(err, CK_E_USAGE, "zip directory name \"%s\" is too long", dir);
	size_t n = p->n ? p->n : 1;
	z->included = calloc(n, sizeof *z->included);
	z->omitted = calloc(n, sizeof *z->omitted);
	z->crc_at = calloc(2 * n, sizeof *z->crc_at);
	size_t n_entries = 0;
	struct entry *e = calloc(n + 2, sizeof *e);
	struct ck_buf pk = {0}, cd = {0};
	if (!z->included || !z->omitted || !z->crc_at || !e)
		goto oom;
	for (size_t i = one >= 0 ? (size_t)one : 0; i < (one >= 0 ? (size_t)one + 1 : p->n); i++) {
		if (ck_torch_storage(p->t[i].v.dtype))
			z->included[z->n_included++] = (uint32_t)i;
		else
			z->omitted[z->n_omitted++] = (uint32_t)i;
	}
	build_pickle(p, z, one >= 0, c, &pk);
	if (pk.oom)
		goto oom;
	/* data.pkl */
	struct entry *pe = &e[n_entries++];
	*pe = (struct entry){0, pk.n, ck_crc32(0, pk.p, pk.n), PICKLE};
	if (ck_vfile_reserve(&z->v, 2 * (size_t)z->n_included + 6) < 0 ||
	    local_header(&z->v, dir, pe, ALIGN) < 0 || ck_vfile_lit(&z->v, pk.p, pk.n) < 0)
		goto oom;
	/* data/<k>: the tensors, served from the cache */
	for (size_t k = 0; k < z->n_included; k++) {
		uint32_t ti = z->included[k];
		struct entry *te = &e[n_entries++];
		uint64_t off = c ? c->off : 0, len = c ? c->bytes : p->t[ti].nbytes;
		*te = (struct entry){0, len, 0, (int64_t)k};
		/* a whole file keeps tensor pages apart from metadata; a DCP chunk
		 * (one tensor) aligns as torch.save does */
		int64_t at = local_header(&z->v, dir, te, k || one >= 0 ? ALIGN : PAGE_ALIGN);
		if (at < 0)
			goto oom;
		z->crc_at[2 * k] = (uint64_t)at;
		if (ck_vfile_target(&z->v, ti, off, len) < 0)
			goto oom;
	}
	/* version, then the directory: no tensor byte in their pages */
	struct entry *ve = &e[n_entries++];
	*ve = (struct entry){0, 2, ck_crc32(0, "3\n", 2), VERSION};
	if (local_header(&z->v, dir, ve, one >= 0 ? ALIGN : PAGE_ALIGN) < 0 ||
	    ck_vfile_lit(&z->v, "3\n", 2) < 0)
		goto oom;
	uint64_t cd_off = z->v.size;
	for (size_t k = 0; k < n_entries; k++) {
		size_t at = central_entry(&cd, dir, &e[k]);
		if (k >= 1 && k <= z->n_included)
			z->crc_at[2 * (k - 1) + 1] = z->v.blob_len + at;
	}
	uint64_t cd_size = cd.n;
	end_records(&cd, n_entries, cd_off, cd_size);
	if (cd.oom || ck_vfile_lit(&z->v, cd.p, cd.n) < 0)
		goto oom;
	free(e);
	free(pk.p);
	free(cd.p);
	return 0;
oom:
	free(e);
	free(pk.p);
	free(cd.p);
	ck_torchzip_free(z);
	return ck_fail_sys(err, ENOMEM, "pytorch_model.bin view");
}

int ck_torchzip_build(const struct ck_plan *p, const char *dir, struct ck_torchzip *z,
		      struct ck_err *err)
{
	return build(p, dir, -1, NULL, z, err);
}

int ck_torchzip_build_one(const struct ck_plan *p, uint32_t t, const char *dir,
			  const struct ck_zchunk *c, struct ck_torchzip *z, struct ck_err *err)
{
	return build(p, dir, t, c, z, err);
}

void ck_torchzip_set_crc(struct ck_torchzip *z, size_t k, uint32_t crc)
{
	for (int i = 0; i < 2; i++)
		for (int b = 0; b < 4; b++)
			z->v.blob[z->crc_at[2 * k + i] + (uint64_t)b] = (unsigned char)(crc >> (8 * b));
}

void ck_torchzip_free(struct ck_torchzip *z)
{
	ck_vfile_free(&z->v);
	free(z->included);
	free(z->omitted);
	free(z->crc_at);
	memset(z, 0, sizeof *z);
}
