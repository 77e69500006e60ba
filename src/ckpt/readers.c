#include "readers.h"

#include "gguf.h"
#include "safetensors.h"
#include "torchbin.h"

static int probe_zip(const unsigned char *head, size_t n, uint64_t size)
{
	(void)size;
	return n >= 4 && ck_is_zip(head);
}

static int probe_gguf(const unsigned char *head, size_t n, uint64_t size)
{
	(void)size;
	return ck_is_gguf(head, n);
}

static int probe_legacy(const unsigned char *head, size_t n, uint64_t size)
{
	(void)size;
	return ck_is_torch_legacy(head, n);
}

static int read_zip(struct ck_catalog *cat, const struct ck_source_file *f,
		    struct ck_file_tensors *out, struct ck_err *err)
{
	return ck_torchbin_read_fd(f->fd, f->size, f->path, out, &cat->left_out, err);
}

static int read_legacy(struct ck_catalog *cat, const struct ck_source_file *f,
		       struct ck_file_tensors *out, struct ck_err *err)
{
	return ck_torchbin_read_legacy(f->fd, f->size, f->path, out, &cat->left_out, err);
}

/* GGUF's metadata goes to cat->meta (inspect shows it, the GGUF config is
 * made from it) and its tokenizer.* records to cat->gguf_tok (the GGUF
 * view serves them): one GGUF file per source, or a split GGUF's files,
 * whose first holds those (gguf_split.h). */
static int read_gguf(struct ck_catalog *cat, const struct ck_source_file *f,
		     struct ck_file_tensors *out, struct ck_err *err)
{
	cJSON *meta;
	struct ck_gguf_kvs tok;
	if (ck_gguf_read_fd(f->fd, f->size, f->path, out, &meta, &tok, err) < 0)
		return -1;
	int later = ck_gguf_split_piece(&cat->gguf_split, meta, f->path, err);
	if (later) {
		cJSON_Delete(meta);
		ck_gguf_kvs_free(&tok);
		return later < 0 ? -1 : 0;
	}
	if (cat->meta) {
		cJSON_Delete(meta);
		ck_gguf_kvs_free(&tok);
		return ck_fail(err, CK_E_SOURCE,
			       "%s: a second GGUF file (split GGUF files are not supported)", f->path);
	}
	cat->meta = meta;
	cat->gguf_tok = tok;
	return 0;
}

static int read_st(struct ck_catalog *cat, const struct ck_source_file *f,
		   struct ck_file_tensors *out, struct ck_err *err)
{
	(void)cat;
	return ck_st_read_fd(f->fd, f->size, f->path, out, err);
}

static const struct ck_file_reader readers[] = {
	{"pytorch", probe_zip, read_zip, 0}, /* torch.save's zip (PyTorch >= 1.6) */
	{"gguf", probe_gguf, read_gguf, 0},
	{"pytorch-legacy", probe_legacy, read_legacy, 0}, /* torch.save before 1.6 */
	{"safetensors", ck_looks_safetensors, read_st, 1},
};

const struct ck_file_reader *ck_file_reader_for(const unsigned char *head, size_t n, uint64_t size,
						const char *path, struct ck_err *err)
{
	size_t count = sizeof readers / sizeof *readers;
	for (size_t k = 0; k < count; k++)
		if (readers[k].probe(head, n, size))
			return &readers[k];
	const char *other = ck_sniff_other(head, n);
	if (other) { /* a format ckptfs knows but does not read: say which */
		ck_fail(err, CK_E_SOURCE, "%s: %s", path, other);
		return NULL;
	}
	return &readers[count - 1]; /* its parser says what is wrong */
}
