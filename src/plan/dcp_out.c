#include "dcp_out.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../ckpt/pickle_w.h"
#include "../ckpt/torchbin.h"
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

static void tensor_meta(struct ck_buf *b, const struct ck_target *t)
{
	static const int64_t zeros[CK_MAX_DIMS];
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
	op(b, 0x85);   /* TUPLE1 */
	op(b, 'R');
	op(b, 0x89);
	op(b, 't');
	op(b, 'b');
	ck_pk_str(b, "size");
	size(b, t->v.shape, t->v.ndim);
	ck_pk_str(b, "chunks");
	op(b, ']');
	op(b, '(');
	obj_begin(b, META, "ChunkStorageMetadata");
	ck_pk_str(b, "offsets");
	size(b, zeros, t->v.ndim);
	ck_pk_str(b, "sizes");
	size(b, t->v.shape, t->v.ndim);
	obj_end(b);
	op(b, 'e'); /* APPENDS */
	obj_end(b);
}

static void storage_entry(struct ck_buf *b, const struct ck_target *t, uint64_t off, uint64_t len)
{
	static const int64_t zeros[CK_MAX_DIMS];
	obj_begin(b, META, "MetadataIndex");
	ck_pk_str(b, "fqn");
	ck_pk_str(b, t->name);
	ck_pk_str(b, "offset");
	size(b, zeros, t->v.ndim);
	ck_pk_str(b, "index");
	ck_pk_int(b, 0);
	obj_end(b);
	obj_begin(b, "torch.distributed.checkpoint.filesystem", "_StorageInfo");
	ck_pk_str(b, "relative_path");
	ck_pk_str(b, CK_DCP_DATA_FILE);
	ck_pk_str(b, "offset");
	ck_pk_int(b, off);
	ck_pk_str(b, "length");
	ck_pk_int(b, len);
	ck_pk_str(b, "transform_descriptors"); /* PyTorch 2.6 and later read it */
	op(b, 'N');
	obj_end(b);
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

int ck_dcp_out_build(const struct ck_plan *p, int torch_dist, struct ck_dcp_out *o,
		     struct ck_err *err)
{
	memset(o, 0, sizeof *o);
	uint64_t *at = calloc(p->n ? p->n : 1, sizeof *at), *len = calloc(p->n ? p->n : 1, sizeof *len);
	o->omitted = calloc(p->n ? p->n : 1, sizeof *o->omitted);
	struct ck_buf b = {0};
	if (!at || !len || !o->omitted)
		goto oom;
	for (size_t i = 0; i < p->n; i++) {
		if (!ck_torch_storage(p->t[i].v.dtype) || !ck_dtype_torch_name(p->t[i].v.dtype)) {
			o->omitted[o->n_omitted++] = (uint32_t)i;
			continue;
		}
		struct ck_torchzip z;
		if (ck_torchzip_build_one(p, (uint32_t)i, "archive", &z, err) < 0)
			goto fail;
		at[i] = o->data.size;
		int r = append(&o->data, &z.v);
		len[i] = z.v.size;
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
	size_t k = 0;
	for (size_t i = 0; i < p->n; i++) {
		if (k < o->n_omitted && o->omitted[k] == i) {
			k++;
			continue;
		}
		ck_pk_str(&b, p->t[i].name);
		tensor_meta(&b, &p->t[i]);
	}
	op(&b, 'u');
	ck_pk_str(&b, "planner_data");
	op(&b, 'N');
	ck_pk_str(&b, "storage_data");
	op(&b, '}');
	op(&b, '(');
	k = 0;
	for (size_t i = 0; i < p->n; i++) {
		if (k < o->n_omitted && o->omitted[k] == i) {
			k++;
			continue;
		}
		storage_entry(&b, &p->t[i], at[i], len[i]);
	}
	op(&b, 'u');
	obj_end(&b);
	op(&b, '.');
	if (b.oom || ck_vfile_lit(&o->metadata, b.p, b.n) < 0)
		goto oom;
	if (torch_dist && torch_dist_files(o, err) < 0)
		goto fail;
	ck_buf_free(&b);
	free(at);
	free(len);
	return 0;
oom:
	ck_fail_sys(err, ENOMEM, "DCP view");
fail:
	ck_buf_free(&b);
	free(at);
	free(len);
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
