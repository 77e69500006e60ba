#include "dcp_out.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ckpt/dcp.h"
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
	uint32_t k, t; /* plan (rank) k's target t */
	const char *fqn;
	int main;     /* a main replica: replica id 0 on every axis it is not split on */
	int keep;     /* written (not a second copy of a replicated piece) */
	size_t index; /* its place in its key's chunk list */
	int64_t goff[CK_MAX_DIMS], shape[CK_MAX_DIMS];
	uint64_t off, bytes; /* in the target */
	uint64_t at, len;    /* its archive in the data file */
};

static void tensor_meta(struct ck_buf *b, const struct ck_target *t, struct chunk *const *c,
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
		size(b, c[k]->goff, nd);
		ck_pk_str(b, "sizes");
		size(b, c[k]->shape, nd);
		obj_end(b);
	}
	op(b, 'e'); /* APPENDS */
	obj_end(b);
}

static void storage_entry(struct ck_buf *b, int nd, const struct chunk *c, const char *file)
{
	obj_begin(b, META, "MetadataIndex");
	ck_pk_str(b, "fqn");
	ck_pk_str(b, c->fqn);
	ck_pk_str(b, "offset");
	size(b, c->goff, nd);
	ck_pk_str(b, "index");
	ck_pk_int(b, c->index);
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

/* The chunks of plan k's target i (appended to *c): the whole target, or
 * each fragment of a per-rank one, which must be contiguous in the local
 * tensor (leading dims of size 1, then one partial dim, then whole dims). */
static int chunks_of(const struct ck_plan *p, uint32_t pk, uint32_t i, struct chunk **c, size_t *n,
		     size_t *cap, struct ck_err *err)
{
	const struct ck_target *t = &p->t[i];
	int nd = t->v.ndim, nf = t->shard ? t->shard->n_frag : 1;
	size_t es = ck_dtype_size(t->v.dtype);
	int main = 1;
	for (int a = 0; t->shard && a < t->shard->n_replica; a++)
		main &= t->shard->replica_id[a] == 0;
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
		ch->k = pk;
		ch->t = i;
		ch->fqn = t->shard && t->shard->global_name ? t->shard->global_name : t->name;
		ch->main = main;
		ch->keep = 1;
		ch->index = (size_t)f;
		const struct ck_fragment *fr = t->shard ? &t->shard->frag[f] : NULL;
		uint64_t numel = 1, lin = 0, stride = 1;
		int k = 0;
		while (fr && k < nd && fr->shape[k] == 1)
			k++;
		for (int d = nd - 1; d >= 0; d--) {
			ch->goff[d] = fr ? fr->global_off[d] : 0;
			ch->shape[d] = fr ? fr->shape[d] : t->v.shape[d];
			if (fr && d > k && (fr->shape[d] != t->v.shape[d] || fr->local_off[d]))
				return ck_fail(err, CK_E_MAPPING,
					       "\"%s\": a fragment of this rank is not "
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
	"{\"sharded_backend\": \"torch_dist\", \"sharded_backend_version\": 1, "                   \
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

/* A key's chunks in .metadata: by offset; a piece held by several ranks
 * first by its main replica, then by the lowest rank. */
static int by_key(const void *a, const void *b)
{
	const struct chunk *x = *(struct chunk *const *)a, *y = *(struct chunk *const *)b;
	int r = strcmp(x->fqn, y->fqn);
	if (r)
		return r;
	for (int d = 0; d < CK_MAX_DIMS; d++)
		if (x->goff[d] != y->goff[d])
			return x->goff[d] < y->goff[d] ? -1 : 1;
	if (x->main != y->main)
		return x->main ? -1 : 1;
	if (x->k != y->k)
		return x->k < y->k ? -1 : 1;
	return x->index < y->index ? -1 : x->index > y->index;
}

/* One key's chunks from several ranks (c[0..n), sorted): one copy of each
 * piece, all of one dtype and global shape, tiling the tensor. Returns the
 * chunks kept, moved to the front. */
static long one_key(const struct ck_plan *const *plans, struct chunk **c, size_t n,
		    struct ck_err *err)
{
	const struct ck_target *t0 = &plans[c[0]->k]->t[c[0]->t];
	const int64_t *gs = t0->shard ? t0->shard->global_shape : t0->v.shape;
	size_t kept = 0;
	for (size_t j = 0; j < n; j++) {
		const struct ck_target *t = &plans[c[j]->k]->t[c[j]->t];
		const int64_t *s = t->shard ? t->shard->global_shape : t->v.shape;
		if (t->v.dtype != t0->v.dtype || t->v.ndim != t0->v.ndim ||
		    memcmp(s, gs, (size_t)t->v.ndim * sizeof *s))
			return ck_fail(err, CK_E_MAPPING,
				       "DCP view: the ranks' views of \"%s\" differ "
				       "in dtype or global shape",
				       c[0]->fqn);
		if (kept && !memcmp(c[j]->goff, c[kept - 1]->goff, sizeof c[j]->goff)) {
			c[j]->keep = 0; /* a replica of the piece kept */
			continue;
		}
		c[j]->index = kept;
		c[kept++] = c[j];
	}
	struct ck_logical l = {.name = (char *)c[0]->fqn, .dtype = t0->v.dtype, .ndim = t0->v.ndim};
	memcpy(l.shape, gs, sizeof l.shape);
	l.chunks = calloc(kept, sizeof *l.chunks);
	int64_t(*sizes)[CK_MAX_DIMS] = calloc(kept, sizeof *sizes);
	int rc = -1;
	if (!l.chunks || !sizes) {
		ck_fail_sys(err, ENOMEM, "DCP view");
	} else {
		for (size_t j = 0; j < kept; j++) {
			memcpy(l.chunks[j].off, c[j]->goff, sizeof c[j]->goff);
			memcpy(sizes[j], c[j]->shape, sizeof sizes[j]);
		}
		l.n_chunks = kept;
		struct ck_err e;
		rc = ck_dcp_check_tiling("DCP view", &l, (const int64_t(*)[CK_MAX_DIMS])sizes, &e);
		if (rc < 0)
			ck_fail(err, CK_E_USAGE,
				"%s: the ranks served hold only part of it (add the "
				"others, or --ranks all)",
				e.msg);
	}
	free(l.chunks);
	free(sizes);
	return rc < 0 ? -1 : (long)kept;
}

/* The order of .metadata: one rank's keys as its targets come; with
 * merge (--ranks), by key, each piece once, each key's chunks checked to
 * tile it. ord[0..*n) are the chunks kept. */
static int order(const struct ck_plan *const *plans, int merge, struct chunk *c, size_t n,
		 struct chunk **ord, size_t *n_ord, struct ck_err *err)
{
	for (size_t j = 0; j < n; j++)
		ord[j] = &c[j];
	*n_ord = n;
	if (!merge)
		return 0;
	qsort(ord, n, sizeof *ord, by_key);
	size_t out = 0;
	for (size_t j = 0, e; j < n; j = e) {
		for (e = j + 1; e < n && !strcmp(ord[e]->fqn, ord[j]->fqn); e++)
			;
		long kept = one_key(plans, ord + j, e - j, err);
		if (kept < 0)
			return -1;
		memmove(ord + out, ord + j, (size_t)kept * sizeof *ord);
		out += (size_t)kept;
	}
	*n_ord = out;
	return 0;
}

/* Each kept chunk's torch.save archive, appended to its rank's data file. */
static int write_data(const struct ck_plan *const *plans, struct chunk *c, size_t n,
		      struct ck_dcp_out *o, struct ck_err *err)
{
	for (size_t j = 0; j < n; j++) {
		if (!c[j].keep)
			continue;
		const struct ck_plan *p = plans[c[j].k];
		struct ck_zchunk zc = {p->t[c[j].t].v.ndim, c[j].shape, c[j].off, c[j].bytes};
		struct ck_torchzip z;
		if (ck_torchzip_build_one(p, c[j].t, "archive", &zc, &z, err) < 0)
			return -1;
		struct ck_vfile *d = &o->data[c[j].k];
		c[j].at = d->size;
		int r = append(d, &z.v);
		c[j].len = z.v.size;
		ck_torchzip_free(&z);
		if (r < 0)
			return ck_fail_sys(err, ENOMEM, "DCP view");
	}
	return 0;
}

/* .metadata: Metadata(state_dict_metadata, planner_data=None, storage_data) */
static int write_metadata(const struct ck_plan *const *plans, struct chunk **ord, size_t n,
			  struct ck_dcp_out *o, struct ck_err *err)
{
	struct ck_buf b = {0};
	op(&b, 0x80);
	op(&b, 2);
	obj_begin(&b, META, "Metadata");
	ck_pk_str(&b, "state_dict_metadata");
	op(&b, '}');
	op(&b, '(');
	for (size_t j = 0, e; j < n; j = e) {
		for (e = j + 1; e < n && !strcmp(ord[e]->fqn, ord[j]->fqn); e++)
			;
		ck_pk_str(&b, ord[j]->fqn);
		tensor_meta(&b, &plans[ord[j]->k]->t[ord[j]->t], ord + j, e - j);
		o->n_keys++;
	}
	op(&b, 'u');
	ck_pk_str(&b, "planner_data");
	op(&b, 'N');
	ck_pk_str(&b, "storage_data");
	op(&b, '}');
	op(&b, '(');
	for (size_t j = 0; j < n; j++)
		storage_entry(&b, plans[ord[j]->k]->t[ord[j]->t].v.ndim, ord[j],
			      o->data_name[ord[j]->k]);
	op(&b, 'u');
	obj_end(&b);
	op(&b, '.');
	int r = b.oom || ck_vfile_lit(&o->metadata, b.p, b.n) < 0 ? -1 : 0;
	ck_buf_free(&b);
	return r < 0 ? ck_fail_sys(err, ENOMEM, "DCP view") : 0;
}

/* Every plan's chunks, in plan and target order; targets without a torch
 * storage type are counted and left out. */
static int collect(const struct ck_plan *const *plans, size_t n_plans, struct ck_dcp_out *o,
		   struct chunk **c, size_t *n, struct ck_err *err)
{
	size_t cap = 0;
	for (size_t k = 0; k < n_plans; k++)
		for (size_t i = 0; i < plans[k]->n; i++) {
			const struct ck_target *t = &plans[k]->t[i];
			if (!ck_torch_storage(t->v.dtype) || !ck_dtype_torch_name(t->v.dtype)) {
				if (!o->n_omitted++)
					o->first_omitted = t->name;
			} else if (chunks_of(plans[k], (uint32_t)k, (uint32_t)i, c, n, &cap, err) <
				   0) {
				return -1;
			}
		}
	return 0;
}

static int build(const struct ck_plan *const *plans, const int64_t *ranks, size_t n_plans,
		 int merge, int torch_dist, struct ck_dcp_out *o, struct ck_err *err)
{
	memset(o, 0, sizeof *o);
	struct chunk *c = NULL, **ord = NULL;
	size_t n = 0, n_ord = 0;
	o->data = calloc(n_plans, sizeof *o->data);
	o->data_name = calloc(n_plans, sizeof *o->data_name);
	if (!o->data || !o->data_name) {
		ck_fail_sys(err, ENOMEM, "DCP view");
		goto fail;
	}
	o->n_data = n_plans;
	for (size_t k = 0; k < n_plans; k++)
		snprintf(o->data_name[k], sizeof o->data_name[k], "__%lld_0.distcp",
			 (long long)ranks[k]);
	if (collect(plans, n_plans, o, &c, &n, err) < 0)
		goto fail;
	if (!(ord = calloc(n ? n : 1, sizeof *ord))) {
		ck_fail_sys(err, ENOMEM, "DCP view");
		goto fail;
	}
	if (order(plans, merge, c, n, ord, &n_ord, err) < 0 ||
	    write_data(plans, c, n, o, err) < 0 || write_metadata(plans, ord, n_ord, o, err) < 0 ||
	    (torch_dist && torch_dist_files(o, err) < 0))
		goto fail;
	free(ord);
	free(c);
	return 0;
fail:
	free(ord);
	free(c);
	ck_dcp_out_free(o);
	return -1;
}

int ck_dcp_out_build(const struct ck_plan *p, int torch_dist, int64_t rank, struct ck_dcp_out *o,
		     struct ck_err *err)
{
	int64_t r = rank < 0 ? 0 : rank;
	return build(&p, &r, 1, 0, torch_dist, o, err);
}

int ck_dcp_out_build_ranks(const struct ck_plan *const *plans, const int64_t *ranks, size_t n,
			   int torch_dist, struct ck_dcp_out *o, struct ck_err *err)
{
	return build(plans, ranks, n, 1, torch_dist, o, err);
}

void ck_dcp_out_free(struct ck_dcp_out *o)
{
	ck_vfile_free(&o->metadata);
	for (size_t k = 0; o->data && k < o->n_data; k++)
		ck_vfile_free(&o->data[k]);
	free(o->data);
	free(o->data_name);
	ck_vfile_free(&o->megatron_json);
	ck_vfile_free(&o->common);
	memset(o, 0, sizeof *o);
}
