#include "dcp_out.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ckpt/pickle_w.h"
#include "../ckpt/torchbin.h"
#include "shard.h"
#include "torchzip.h"

#define META "torch.distributed.checkpoint.metadata"

/* The pickle of .metadata, protocol 2: dataclasses as NEWOBJ + BUILD with
 * their field dict, torch.Size as REDUCE(torch.Size, (tuple,)), dtypes and
 * torch.strided as globals. */
static void op(struct ck_buf *b, unsigned char c)
{
	ck_buf_byte(b, c);
}

/* torch.Size(dims) */
static void size(struct ck_buf *b, const int64_t *d, int n)
{
	ck_pk_global(b, "torch", "Size");
	op(b, '(');
	op(b, '(');
	for (int i = 0; i < n; i++)
		ck_pk_int(b, (uint64_t)d[i]);
	op(b, 't');
	op(b, 't');
	op(b, 'R');
}

/* cls.__new__(cls), then its state dict is built from the caller's
 * key/value pushes up to obj_end. */
static void obj_begin(struct ck_buf *b, const char *mod, const char *cls)
{
	ck_pk_global(b, mod, cls);
	op(b, ')');
	op(b, 0x81); /* NEWOBJ */
	op(b, '}');
	op(b, '(');
}

static void obj_end(struct ck_buf *b)
{
	op(b, 'u'); /* SETITEMS */
	op(b, 'b'); /* BUILD */
}

/* A chunk of a target: a whole target, or one fragment of a per-rank
 * target (its global offset and shape, contiguous in the local tensor). */
struct chunk {
	uint32_t t;
	int64_t goff[CK_MAX_DIMS], shape[CK_MAX_DIMS];
	uint64_t off, bytes; /* in the target */
	uint64_t at, len;    /* its archive in the data file */
};

static void tensor_meta(struct ck_buf *b, const struct ck_target *t, const struct chunk *c,
			size_t n)
{
	int nd = t->v.ndim;
	obj_begin(b, META, "TensorStorageMetadata");
	ck_pk_str(b, "properties");
	/* TensorProperties: its state is PyTorch 2.x's tuple (dtype, layout,
	 * requires_grad, memory format as _MEM_FORMAT_ENCODING, pin_memory) */
	ck_pk_global(b, META, "TensorProperties");
	op(b, ')');
	op(b, 0x81);
	op(b, '(');
	ck_pk_global(b, "torch", ck_dtype_torch_name(t->v.dtype));
	ck_pk_global(b, "torch", "strided");
	op(b, 0x89); /* False */
	ck_pk_global(b, META, "_MEM_FORMAT_ENCODING");
	ck_pk_int(b, 0); /* TORCH_CONTIGUOUS_FORMAT */
	op(b, 0x85);	 /* TUPLE1 */
	op(b, 'R');
	op(b, 0x89);
	op(b, 't');
	op(b, 'b');
	ck_pk_str(b, "size");
	size(b, t->shard ? t->shard->global_shape : t->v.shape, nd);
	ck_pk_str(b, "chunks");
	op(b, ']');
	op(b, '(');
	for (size_t k = 0; k < n; k++) {
		obj_begin(b, META, "ChunkStorageMetadata");
		ck_pk_str(b, "offsets");
		size(b, c[k].goff, nd);
		ck_pk_str(b, "sizes");
		size(b, c[k].shape, nd);
		obj_end(b);
	}
	op(b, 'e'); /* APPENDS */
	obj_end(b);
}

static void storage_entry(struct ck_buf *b, const char *fqn, int nd, const struct chunk *c,
			  size_t index, const char *file)
{
	obj_begin(b, META, "MetadataIndex");
	ck_pk_str(b, "fqn");
	ck_pk_str(b, fqn);
	ck_pk_str(b, "offset");
	size(b, c->goff, nd);
	ck_pk_str(b, "index");
	ck_pk_int(b, index);
	obj_end(b);
	obj_begin(b, "torch.distributed.checkpoint.filesystem", "_StorageInfo");
	ck_pk_str(b, "relative_path");
	ck_pk_str(b, file);
	ck_pk_str(b, "offset");
	ck_pk_int(b, c->at);
	ck_pk_str(b, "length");
	ck_pk_int(b, c->len);
	ck_pk_str(b, "transform_descriptors"); /* PyTorch 2.6 and later read it */
	op(b, 'N');
	obj_end(b);
}

/* The chunks of target t (appended to *c): the whole target, or each
 * fragment of a per-rank one, which must be contiguous in the local tensor
 * (leading dims of size 1, then one partial dim, then whole dims). */
static int chunks_of(const struct ck_plan *p, uint32_t i, struct chunk **c, size_t *n,
		     size_t *cap, struct ck_err *err)
{
	const struct ck_target *t = &p->t[i];
	int nd = t->v.ndim, nf = t->shard ? t->shard->n_frag : 1;
	size_t es = ck_dtype_size(t->v.dtype);
	for (int f = 0; f < nf; f++) {
		if (*n == *cap) {
			size_t nc = *cap ? *cap * 2 : 64;
			struct chunk *x = realloc(*c, nc * sizeof *x);
			if (!x)
				return ck_fail_sys(err, ENOMEM, "DCP view");
			*c = x;
			*cap = nc;
		}
		struct chunk *ch = &(*c)[(*n)++];
		memset(ch, 0, sizeof *ch);
		ch->t = i;
		const struct ck_fragment *fr = t->shard ? &t->shard->frag[f] : NULL;
		uint64_t numel = 1, lin = 0, stride = 1;
		int k = 0;
		while (fr && k < nd && fr->shape[k] == 1)
			k++;
		for (int d = nd - 1; d >= 0; d--) {
			ch->goff[d] = fr ? fr->global_off[d] : 0;
			ch->shape[d] = fr ? fr->shape[d] : t->v.shape[d];
			if (fr && d > k && (fr->shape[d] != t->v.shape[d] || fr->local_off[d]))
				return ck_fail(err, CK_E_MAPPING, "\"%s\": a fragment of this rank is not "
								  "contiguous: no DCP chunk for it",
					       t->name);
			lin += (uint64_t)(fr ? fr->local_off[d] : 0) * stride;
			stride *= (uint64_t)t->v.shape[d];
			numel *= (uint64_t)ch->shape[d];
		}
		ch->off = lin * es;
		ch->bytes = numel * es;
	}
	return 0;
}

/* Append src's parts to dst (an archive inside the .distcp file). */
static int append(struct ck_vfile *dst, const struct ck_vfile *src)
{
	for (size_t k = 0; k < src->n; k++) {
		const struct ck_vpart *p = &src->parts[k];
		int r = p->target == CK_VLIT ? ck_vfile_lit(dst, src->blob + p->src, p->len)
					     : ck_vfile_target(dst, p->target, p->src, p->len);
		if (r < 0)
			return -1;
	}
	return 0;
}

/* Megatron-core's CONFIG_FNAME contents for a torch_dist checkpoint */
#define MEGATRON_JSON                                                                              \
	"{\"sharded_backend\": \"torch_dist\", \"sharded_backend_version\": 1, "                        \
	"\"common_backend\": \"torch\", \"common_backend_version\": 1}\n"

static int torch_dist_files(struct ck_dcp_out *o, struct ck_err *err)
{
	struct ck_plan empty;
	memset(&empty, 0, sizeof empty);
	struct ck_torchzip z;
	if (ck_torchzip_build(&empty, "common", &z, err) < 0)
		return -1;
	int r = append(&o->common, &z.v);
	ck_torchzip_free(&z);
	if (r < 0 || ck_vfile_lit(&o->megatron_json, MEGATRON_JSON, strlen(MEGATRON_JSON)) < 0)
		return ck_fail_sys(err, ENOMEM, "torch_dist view");
	return 0;
}

int ck_dcp_out_build(const struct ck_plan *p, int torch_dist, int64_t rank, struct ck_dcp_out *o,
		     struct ck_err *err)
{
	memset(o, 0, sizeof *o);
	snprintf(o->data_name, sizeof o->data_name, "__%lld_0.distcp", (long long)(rank < 0 ? 0 : rank));
	o->omitted = calloc(p->n ? p->n : 1, sizeof *o->omitted);
	size_t *first = calloc(p->n + 1, sizeof *first); /* target i's chunks: [first[i], first[i+1]) */
	struct chunk *c = NULL;
	size_t n = 0, cap = 0;
	struct ck_buf b = {0};
	if (!o->omitted || !first)
		goto oom;
	for (size_t i = 0; i < p->n; i++) {
		first[i] = n;
		if (!ck_torch_storage(p->t[i].v.dtype) || !ck_dtype_torch_name(p->t[i].v.dtype))
			o->omitted[o->n_omitted++] = (uint32_t)i;
		else if (chunks_of(p, (uint32_t)i, &c, &n, &cap, err) < 0)
			goto fail;
	}
	first[p->n] = n;
	for (size_t k = 0; k < n; k++) {
		struct ck_zchunk zc = {p->t[c[k].t].v.ndim, c[k].shape, c[k].off, c[k].bytes};
		struct ck_torchzip z;
		if (ck_torchzip_build_one(p, c[k].t, "archive", &zc, &z, err) < 0)
			goto fail;
		c[k].at = o->data.size;
		int r = append(&o->data, &z.v);
		c[k].len = z.v.size;
		ck_torchzip_free(&z);
		if (r < 0)
			goto oom;
	}
	op(&b, 0x80);
	op(&b, 2);
	obj_begin(&b, META, "Metadata");
	ck_pk_str(&b, "state_dict_metadata");
	op(&b, '}');
	op(&b, '(');
	for (size_t i = 0; i < p->n; i++) {
		if (first[i + 1] == first[i])
			continue;
		const struct ck_target *t = &p->t[i];
		ck_pk_str(&b, t->shard && t->shard->global_name ? t->shard->global_name : t->name);
		tensor_meta(&b, t, c + first[i], first[i + 1] - first[i]);
	}
	op(&b, 'u');
	ck_pk_str(&b, "planner_data");
	op(&b, 'N');
	ck_pk_str(&b, "storage_data");
	op(&b, '}');
	op(&b, '(');
	for (size_t i = 0; i < p->n; i++) {
		const struct ck_target *t = &p->t[i];
		const char *fqn = t->shard && t->shard->global_name ? t->shard->global_name : t->name;
		for (size_t k = first[i]; k < first[i + 1]; k++)
			storage_entry(&b, fqn, t->v.ndim, &c[k], k - first[i], o->data_name);
	}
	op(&b, 'u');
	obj_end(&b);
	op(&b, '.');
	if (b.oom || ck_vfile_lit(&o->metadata, b.p, b.n) < 0)
		goto oom;
	if (torch_dist && torch_dist_files(o, err) < 0)
		goto fail;
	ck_buf_free(&b);
	free(first);
	free(c);
	return 0;
oom:
	ck_fail_sys(err, ENOMEM, "DCP view");
fail:
	ck_buf_free(&b);
	free(first);
	free(c);
	ck_dcp_out_free(o);
	return -1;
}

void ck_dcp_out_free(struct ck_dcp_out *o)
{
	ck_vfile_free(&o->metadata);
	ck_vfile_free(&o->data);
	ck_vfile_free(&o->megatron_json);
	ck_vfile_free(&o->common);
	free(o->omitted);
	memset(o, 0, sizeof *o);
}
