#include "torchzip.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ckpt/pickle_w.h"
#include "../ckpt/torchbin.h"
#include "../util/crc32.h"

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
		char key[24];
		snprintf(key, sizeof key, "%zu", k);
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

struct entry {
	uint64_t hdr_off, size;
	uint32_t crc;
	char *name;
};

/* The local header of an entry whose data follows it, aligned to `align`.
 * Returns the blob offset of its CRC field, or -1 on allocation failure. */
static int64_t local_header(struct ck_vfile *v, struct entry *e, uint64_t align)
{
	size_t nl = strlen(e->name);
	int z64 = e->size >= U32_MAX_ZIP;
	uint64_t fixed = 30 + nl + (z64 ? 20 : 0) + 4; /* + the "FB" padding field */
	uint64_t pad = (align - (v->size + fixed) % align) % align;
	struct ck_buf b = {0};
	e->hdr_off = v->size;
	ck_buf_le(&b, 0x04034b50, 4);
	ck_buf_le(&b, z64 ? 45 : 20, 2); /* version needed */
	ck_buf_le(&b, 0, 2);	      /* flags */
	ck_buf_le(&b, 0, 2);	      /* stored */
	ck_buf_le(&b, 0, 2);	      /* time */
	ck_buf_le(&b, 0x21, 2);	      /* date: 1980-01-01 */
	size_t crc_at = b.n;
	ck_buf_le(&b, e->crc, 4);
	ck_buf_le(&b, z64 ? U32_MAX_ZIP : e->size, 4);
	ck_buf_le(&b, z64 ? U32_MAX_ZIP : e->size, 4);
	ck_buf_le(&b, nl, 2);
	ck_buf_le(&b, (z64 ? 20 : 0) + 4 + pad, 2);
	ck_buf_put(&b, e->name, nl);
	if (z64) {
		ck_buf_le(&b, 1, 2);
		ck_buf_le(&b, 16, 2);
		ck_buf_le(&b, e->size, 8);
		ck_buf_le(&b, e->size, 8);
	}
	ck_buf_put(&b, "FB", 2);
	ck_buf_le(&b, pad, 2);
	int64_t at = -1;
	if (!b.oom) {
		at = (int64_t)(v->blob_len + crc_at);
		if (ck_vfile_lit(v, b.p, b.n) < 0 || ck_vfile_fill(v, 'Z', pad) < 0)
			at = -1;
	}
	free(b.p);
	return at;
}

/* Central directory entry; returns the offset of its CRC field in b. */
static size_t central_entry(struct ck_buf *b, const struct entry *e)
{
	size_t nl = strlen(e->name);
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
	ck_buf_put(b, e->name, nl);
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

static char *entry_name(const char *dir, const char *rest)
{
	char *s = malloc(strlen(dir) + strlen(rest) + 2);
	if (s)
		sprintf(s, "%s/%s", dir, rest);
	return s;
}

static int build(const struct ck_plan *p, const char *dir, int64_t one, const struct ck_zchunk *c,
		 struct ck_torchzip *z, struct ck_err *err)
{
	memset(z, 0, sizeof *z);
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
	*pe = (struct entry){0, pk.n, ck_crc32(0, pk.p, pk.n), entry_name(dir, "data.pkl")};
	if (!pe->name || local_header(&z->v, pe, ALIGN) < 0 || ck_vfile_lit(&z->v, pk.p, pk.n) < 0)
		goto oom;
	/* data/<k>: the tensors, served from the cache */
	for (size_t k = 0; k < z->n_included; k++) {
		uint32_t ti = z->included[k];
		char rest[32];
		snprintf(rest, sizeof rest, "data/%zu", k);
		struct entry *te = &e[n_entries++];
		uint64_t off = c ? c->off : 0, len = c ? c->bytes : p->t[ti].nbytes;
		*te = (struct entry){0, len, 0, entry_name(dir, rest)};
		/* a whole file keeps tensor pages apart from metadata; a DCP chunk
		 * (one tensor) aligns as torch.save does */
		int64_t at = te->name ? local_header(&z->v, te, k || one >= 0 ? ALIGN : PAGE_ALIGN) : -1;
		if (at < 0)
			goto oom;
		z->crc_at[2 * k] = (uint64_t)at;
		if (ck_vfile_target(&z->v, ti, off, len) < 0)
			goto oom;
	}
	/* version, then the directory: no tensor byte in their pages */
	struct entry *ve = &e[n_entries++];
	*ve = (struct entry){0, 2, ck_crc32(0, "3\n", 2), entry_name(dir, "version")};
	if (!ve->name || local_header(&z->v, ve, one >= 0 ? ALIGN : PAGE_ALIGN) < 0 ||
	    ck_vfile_lit(&z->v, "3\n", 2) < 0)
		goto oom;
	uint64_t cd_off = z->v.size;
	for (size_t k = 0; k < n_entries; k++) {
		size_t at = central_entry(&cd, &e[k]);
		if (k >= 1 && k <= z->n_included)
			z->crc_at[2 * (k - 1) + 1] = z->v.blob_len + at;
	}
	uint64_t cd_size = cd.n;
	end_records(&cd, n_entries, cd_off, cd_size);
	if (cd.oom || ck_vfile_lit(&z->v, cd.p, cd.n) < 0)
		goto oom;
	for (size_t k = 0; k < n_entries; k++)
		free(e[k].name);
	free(e);
	free(pk.p);
	free(cd.p);
	return 0;
oom:
	for (size_t k = 0; e && k < n_entries; k++)
		free(e[k].name);
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
