#include "dcp.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../util/json_strict.h"
#include "index.h"
#include "pickle.h"
#include "torchbin.h"

#define MAX_METADATA (1u << 30)
#define MAX_CHUNKS_PER_KEY 65536

struct dctx {
	struct ck_catalog *cat;
	const char *dir, *mpath;
	int dirfd;
	struct ck_err *err;
	struct ck_strmap files; /* relative path -> file index */
	struct ck_strmap items; /* "fqn|o1,o2,..." -> storage_data value index */
	char **item_keys;
	const struct ck_pk **item_vals;
	size_t n_items;
};

/* An attribute of a pickled object (its BUILD state dict). */
static const struct ck_pk *attr(const struct ck_pk *o, const char *name)
{
	const struct ck_pk *st = o ? o->state : NULL;
	if (st && st->k == CK_PK_TUPLE && st->n >= 1) /* (dict, slots) */
		st = st->items[0];
	if (!st || st->k != CK_PK_DICT)
		return NULL;
	for (size_t i = 0; i + 1 < st->n; i += 2)
		if (st->items[i]->k == CK_PK_STR && !strcmp(st->items[i]->s, name))
			return st->items[i + 1];
	return NULL;
}

static int is_obj(const struct ck_pk *o, const char *cls)
{
	return o && o->k == CK_PK_CALL && o->items[0]->k == CK_PK_GLOBAL &&
	       !strcmp(o->items[0]->s2, cls);
}

/* torch.Size((a, b, ...)) or a plain tuple of non-negative ints */
static int size_of(const struct ck_pk *s, int64_t *out, int *n)
{
	if (s && s->k == CK_PK_CALL && ck_pk_is_global(s->items[0], "torch", "Size") &&
	    s->items[1]->n == 1)
		s = s->items[1]->items[0];
	if (!s || (s->k != CK_PK_TUPLE && s->k != CK_PK_LIST) || s->n > CK_MAX_DIMS)
		return -1;
	for (size_t i = 0; i < s->n; i++) {
		if (s->items[i]->k != CK_PK_INT || s->items[i]->i < 0)
			return -1;
		out[i] = s->items[i]->i;
	}
	*n = (int)s->n;
	return 0;
}

static enum ck_dtype torch_dtype(const struct ck_pk *g)
{
	if (!g || g->k != CK_PK_GLOBAL || strcmp(g->s, "torch"))
		return CK_DT_INVALID;
	return ck_dtype_from_torch(g->s2);
}

/* TensorProperties: __getstate__ is (dtype, layout, requires_grad,
 * memory_format, pin_memory); older versions pickle a dict with "dtype". */
static const struct ck_pk *props_dtype(const struct ck_pk *props)
{
	const struct ck_pk *st = props ? props->state : NULL;
	if (st && st->k == CK_PK_TUPLE && st->n >= 1 && st->items[0]->k == CK_PK_GLOBAL)
		return st->items[0];
	return attr(props, "dtype");
}

static int item_key(char *buf, size_t cap, const char *fqn, const int64_t *off, int n)
{
	size_t k = (size_t)snprintf(buf, cap, "%s|", fqn);
	for (int d = 0; d < n && k < cap; d++)
		k += (size_t)snprintf(buf + k, cap - k, "%s%lld", d ? "," : "", (long long)off[d]);
	return k < cap ? 0 : -1;
}

static int fail(struct dctx *c, const char *fmt, const char *a, const char *b)
{
	char msg[900];
	snprintf(msg, sizeof msg, fmt, a, b);
	return ck_fail(c->err, CK_E_SOURCE, "%s: %s", c->mpath, msg);
}

/* storage_data: MetadataIndex(fqn, offset, index) -> _StorageInfo(path, offset, length) */
static int index_items(struct dctx *c, const struct ck_pk *sd)
{
	size_t n = sd->n / 2;
	c->item_keys = calloc(n ? n : 1, sizeof *c->item_keys);
	c->item_vals = calloc(n ? n : 1, sizeof *c->item_vals);
	if (!c->item_keys || !c->item_vals || ck_strmap_init(&c->items, n) < 0)
		return ck_fail_sys(c->err, ENOMEM, "%s", c->mpath);
	for (size_t i = 0; i + 1 < sd->n; i += 2) {
		const struct ck_pk *mi = sd->items[i], *fqn = attr(mi, "fqn");
		int64_t off[CK_MAX_DIMS];
		int nd = 0;
		const struct ck_pk *o = attr(mi, "offset");
		if (!fqn || fqn->k != CK_PK_STR)
			return fail(c, "storage_data key %s%s is not a MetadataIndex", "", "");
		if (o && o->k != CK_PK_NONE && size_of(o, off, &nd) < 0)
			return fail(c, "storage_data offset of \"%s\" is not a size%s", fqn->s, "");
		char key[4400];
		if (item_key(key, sizeof key, fqn->s, off, nd) < 0)
			return fail(c, "key \"%s\" is too long%s", fqn->s, "");
		if (!(c->item_keys[c->n_items] = strdup(key)))
			return ck_fail_sys(c->err, ENOMEM, "%s", c->mpath);
		/* counted as soon as it is allocated: the error paths below free it */
		size_t k = c->n_items++;
		c->item_vals[k] = sd->items[i + 1];
		int r = ck_strmap_put(&c->items, c->item_keys[k], (uint32_t)k, NULL);
		if (r < 0)
			return ck_fail_sys(c->err, ENOMEM, "%s", c->mpath);
		if (r == 1)
			return fail(c, "storage_data lists \"%s\" twice%s", key, "");
	}
	return 0;
}

static int file_of(struct dctx *c, const char *rel, uint32_t *out)
{
	uint32_t f;
	if (ck_strmap_get(&c->files, rel, &f) == 0) {
		*out = f;
		return 0;
	}
	if (ck_plain_file_name(rel) != 0)
		return fail(c, "storage file \"%s\" is not a plain file name%s", rel, "");
	if (ck_catalog_open_file(c->cat, c->dirfd, c->dir, rel, c->err) < 0)
		return -1;
	*out = (uint32_t)(c->cat->n_files - 1);
	return ck_strmap_put(&c->files, c->cat->files[*out].name, *out, NULL) < 0
		       ? ck_fail_sys(c->err, ENOMEM, "%s", c->mpath)
		       : 0;
}

#define MAX_GRID_CELLS ((uint64_t)1 << 26)

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

/* index of v in the sorted, unique cuts[0..n) (v is one of them) */
static size_t cut_index(const int64_t *cuts, size_t n, int64_t v)
{
	size_t lo = 0, hi = n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (cuts[mid] < v)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* Overlap check in O(cells + n log n): every chunk edge cuts its dim; the
 * cuts make a grid whose cells lie each inside one chunk or none, and a cell
 * claimed twice is an overlap. 1: overlap, 0: none, -1: grid too large or
 * no memory (*big set when too large). */
static int grid_overlap(const struct ck_logical *l, const int64_t (*sizes)[CK_MAX_DIMS],
			int *big)
{
	int nd = l->ndim, rc = -1;
	size_t n = l->n_chunks, ncut[CK_MAX_DIMS] = {0};
	int64_t *cuts[CK_MAX_DIMS] = {0};
	uint8_t *claimed = NULL;
	uint64_t cells = 1;
	*big = 0;
	for (int d = 0; d < nd; d++) {
		if (!(cuts[d] = malloc((2 * n + 2) * sizeof **cuts)))
			goto out;
		size_t k = 0;
		cuts[d][k++] = 0;
		cuts[d][k++] = l->shape[d];
		for (size_t c = 0; c < n; c++) {
			cuts[d][k++] = l->chunks[c].off[d];
			cuts[d][k++] = l->chunks[c].off[d] + sizes[c][d];
		}
		qsort(cuts[d], k, sizeof **cuts, cmp_i64);
		size_t u = 0;
		for (size_t i = 0; i < k; i++)
			if (!u || cuts[d][i] != cuts[d][u - 1])
				cuts[d][u++] = cuts[d][i];
		ncut[d] = u;
		if (__builtin_mul_overflow(cells, (uint64_t)(u - 1), &cells) || cells > MAX_GRID_CELLS) {
			*big = 1;
			goto out;
		}
	}
	if (!(claimed = calloc(cells / 8 + 1, 1)))
		goto out;
	rc = 0;
	for (size_t c = 0; c < n && rc == 0; c++) {
		size_t lo[CK_MAX_DIMS], hi[CK_MAX_DIMS], at[CK_MAX_DIMS];
		int empty = 0;
		for (int d = 0; d < nd; d++) {
			lo[d] = cut_index(cuts[d], ncut[d], l->chunks[c].off[d]);
			hi[d] = cut_index(cuts[d], ncut[d], l->chunks[c].off[d] + sizes[c][d]);
			empty |= lo[d] == hi[d];
			at[d] = lo[d];
		}
		if (empty)
			continue;
		for (;;) { /* every cell of the chunk, odometer order */
			uint64_t cell = 0;
			for (int d = 0; d < nd; d++)
				cell = cell * (ncut[d] - 1) + at[d];
			if (claimed[cell / 8] >> (cell % 8) & 1) {
				rc = 1;
				break;
			}
			claimed[cell / 8] |= (uint8_t)(1u << (cell % 8));
			int d = nd - 1;
			while (d >= 0 && ++at[d] == hi[d])
				at[d] = lo[d], d--;
			if (d < 0)
				break;
		}
	}
out:
	for (int d = 0; d < nd; d++)
		free(cuts[d]);
	free(claimed);
	return rc;
}

/* Chunks must lie inside the tensor, not overlap, and cover it. */
int ck_dcp_check_tiling(const char *what, const struct ck_logical *l,
			const int64_t (*sizes)[CK_MAX_DIMS], struct ck_err *err)
{
	uint64_t total = 0, numel = 1;
	for (int d = 0; d < l->ndim; d++)
		if (__builtin_mul_overflow(numel, (uint64_t)l->shape[d], &numel))
			return ck_fail(err, CK_E_SOURCE, "%s: \"%s\": the size overflows", what, l->name);
	for (size_t k = 0; k < l->n_chunks; k++) {
		uint64_t vol = 1;
		for (int d = 0; d < l->ndim; d++) {
			if (l->chunks[k].off[d] > l->shape[d] ||
			    sizes[k][d] > l->shape[d] - l->chunks[k].off[d])
				return ck_fail(err, CK_E_SOURCE, "%s: a chunk of \"%s\" lies outside the tensor",
					       what, l->name);
			vol *= (uint64_t)sizes[k][d]; /* <= numel: the chunk is inside */
		}
		if (__builtin_add_overflow(total, vol, &total))
			return ck_fail(err, CK_E_SOURCE, "%s: chunks of \"%s\" overlap", what, l->name);
	}
	if (l->ndim == 0 || l->n_chunks < 2) {
		/* a scalar or a single chunk: nothing can overlap */
	} else {
		int big, r = grid_overlap(l, sizes, &big);
		if (r < 0 && !big)
			return ck_fail_sys(err, ENOMEM, "%s", what);
		if (r < 0)
			return ck_fail(err, CK_E_SOURCE,
				       "%s: the chunks of \"%s\" cut it into more than 2^26 cells; "
				       "such a fragmented tensor is not supported",
				       what, l->name);
		if (r > 0)
			return ck_fail(err, CK_E_SOURCE, "%s: chunks of \"%s\" overlap", what, l->name);
	}
	if (total != numel)
		return ck_fail(err, CK_E_SOURCE, "%s: the chunks of \"%s\" do not cover the tensor",
			       what, l->name);
	return 0;
}

/* One tensor key: its chunks become entries "fqn#k" (resolved to indices
 * after the catalog sorts its entries). */
static int add_key(struct dctx *c, const char *fqn, const struct ck_pk *meta)
{
	struct ck_catalog *cat = c->cat;
	struct ck_logical *l = &cat->logical[cat->n_logical];
	memset(l, 0, sizeof *l);
	if (!(l->name = strdup(fqn)))
		return ck_fail_sys(c->err, ENOMEM, "%s", c->mpath);
	cat->n_logical++;
	const struct ck_pk *dt = props_dtype(attr(meta, "properties"));
	l->dtype = torch_dtype(dt);
	if (l->dtype == CK_DT_INVALID)
		return fail(c, "\"%s\": dtype %s is not supported", fqn,
			    dt && dt->k == CK_PK_GLOBAL ? dt->s2 : "(missing)");
	if (size_of(attr(meta, "size"), l->shape, &l->ndim) < 0)
		return fail(c, "\"%s\": size is not a torch.Size%s", fqn, "");
	const struct ck_pk *chunks = attr(meta, "chunks");
	if (!chunks || chunks->k != CK_PK_LIST || chunks->n > MAX_CHUNKS_PER_KEY)
		return fail(c, "\"%s\": chunks is not a list%s", fqn, "");
	l->chunks = calloc(chunks->n ? chunks->n : 1, sizeof *l->chunks);
	int64_t(*sizes)[CK_MAX_DIMS] = calloc(chunks->n ? chunks->n : 1, sizeof *sizes);
	if (!l->chunks || !sizes) {
		free(sizes);
		return ck_fail_sys(c->err, ENOMEM, "%s", c->mpath);
	}
	int rc = 0;
	for (size_t k = 0; k < chunks->n && rc == 0; k++) {
		const struct ck_pk *ch = chunks->items[k];
		int no, ns;
		if (size_of(attr(ch, "offsets"), l->chunks[k].off, &no) < 0 ||
		    size_of(attr(ch, "sizes"), sizes[k], &ns) < 0 || no != l->ndim || ns != l->ndim) {
			rc = fail(c, "\"%s\": a chunk's offsets and sizes do not match its size%s",
				  fqn, "");
			break;
		}
		l->n_chunks++;
		char key[4400];
		uint32_t it;
		if (item_key(key, sizeof key, fqn, l->chunks[k].off, no) < 0 ||
		    ck_strmap_get(&c->items, key, &it) < 0) {
			rc = fail(c, "\"%s\": a chunk has no storage_data entry%s", fqn, "");
			break;
		}
		const struct ck_pk *si = c->item_vals[it], *rel = attr(si, "relative_path"),
				   *off = attr(si, "offset"), *len = attr(si, "length");
		uint32_t file = 0;
		if (!rel || rel->k != CK_PK_STR || !off || off->k != CK_PK_INT || off->i < 0 ||
		    !len || len->k != CK_PK_INT || len->i < 0) {
			rc = fail(c, "\"%s\": a storage_data entry is not a _StorageInfo%s", fqn, "");
			break;
		}
		if ((rc = file_of(c, rel->s, &file)) < 0)
			break;
		const struct ck_source_file *f = &cat->files[file];
		if ((uint64_t)off->i > f->size || (uint64_t)len->i > f->size - (uint64_t)off->i) {
			rc = ck_fail(c->err, CK_E_SOURCE,
				     "%s: \"%s\": a chunk's item runs past the end of the file", f->path,
				     fqn);
			break;
		}
		char cname[4400], what[4600];
		snprintf(cname, sizeof cname, "%s#%zu", fqn, k);
		snprintf(what, sizeof what, "%s (item of \"%s\" at %lld)", f->path, fqn,
			 (long long)off->i);
		struct ck_file_tensors h;
		if ((rc = ck_torchbin_read_at(f->fd, (uint64_t)off->i, (uint64_t)len->i, what, cname,
					      &h, NULL, c->err)) < 0)
			break;
		const struct ck_tensor_info *t = h.n_tensors == 1 ? &h.tensors[0] : NULL;
		int same = t && t->dtype == l->dtype && t->ndim == l->ndim;
		for (int d = 0; same && d < l->ndim; d++)
			same = t->shape[d] == sizes[k][d];
		if (!same)
			rc = ck_fail(c->err, CK_E_SOURCE,
				     "%s: the item is not one %s tensor of the chunk's size", what,
				     ck_dtype_name(l->dtype));
		else
			rc = ck_catalog_add_entries(cat, &h, file, c->err);
		ck_file_tensors_free(&h);
	}
	if (rc == 0)
		rc = ck_dcp_check_tiling(c->mpath, l, sizes, c->err);
	free(sizes);
	return rc;
}

int ck_dcp_detect(const char *dir)
{
	char p[4200];
	struct stat st;
	snprintf(p, sizeof p, "%s/.metadata", dir);
	return stat(p, &st) == 0;
}

/* Megatron's metadata.json: which backend wrote the shards. */
static int check_megatron(struct ck_catalog *cat, const char *dir, struct ck_err *err)
{
	char p[4200], *buf;
	size_t len;
	struct stat st;
	snprintf(p, sizeof p, "%s/metadata.json", dir);
	if (stat(p, &st) < 0) {
		cat->format = "dcp";
		return 0;
	}
	if (ck_read_file(p, 1u << 20, &buf, &len, CK_E_SOURCE, err) < 0)
		return -1;
	cJSON *j = ck_json_parse(buf, len, 0, CK_E_SOURCE, p, err);
	free(buf);
	if (!j)
		return -1;
	const cJSON *b = cJSON_GetObjectItemCaseSensitive(j, "sharded_backend");
	int ok = cJSON_IsString(b) && !strcmp(b->valuestring, "torch_dist");
	int rc = ok ? 0
		    : ck_fail(err, CK_E_SOURCE, "%s: sharded_backend %s%s%s is not supported (only "
						"torch_dist)",
			      p, cJSON_IsString(b) ? "\"" : "", cJSON_IsString(b) ? b->valuestring : "missing",
			      cJSON_IsString(b) ? "\"" : "");
	cJSON_Delete(j);
	cat->format = "torch_dist";
	return rc;
}

int ck_dcp_open(struct ck_catalog *cat, const char *dir, struct ck_err *err)
{
	char mpath[4200];
	snprintf(mpath, sizeof mpath, "%s/.metadata", dir);
	struct dctx c = {cat, dir, mpath, -1, err, {0}, {0}, NULL, NULL, 0};
	struct ck_pickle pk = {0};
	char *buf = NULL;
	size_t len;
	int rc = -1;
	if (check_megatron(cat, dir, err) < 0)
		return -1;
	if (ck_read_file(mpath, MAX_METADATA, &buf, &len, CK_E_SOURCE, err) < 0)
		return -1;
	if (ck_pickle_parse((const unsigned char *)buf, len, mpath, &pk, err) < 0)
		goto out;
	const struct ck_pk *sdm = attr(pk.root, "state_dict_metadata"),
			   *sd = attr(pk.root, "storage_data");
	if (!is_obj(pk.root, "Metadata") || !sdm || sdm->k != CK_PK_DICT || !sd ||
	    sd->k != CK_PK_DICT) {
		ck_fail(err, CK_E_SOURCE, "%s: not a DCP Metadata (state_dict_metadata, storage_data)",
			mpath);
		goto out;
	}
	if ((c.dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
		ck_fail_sys(err, errno, "%s: cannot open directory", dir);
		goto out;
	}
	size_t nkeys = sdm->n / 2;
	cat->logical = calloc(nkeys ? nkeys : 1, sizeof *cat->logical);
	/* at most one file per storage item */
	cat->files = calloc(sd->n / 2 + 1, sizeof *cat->files);
	if (!cat->logical || !cat->files || ck_strmap_init(&c.files, 16) < 0) {
		ck_fail_sys(err, ENOMEM, "%s", mpath);
		goto out;
	}
	if (index_items(&c, sd) < 0)
		goto out;
	for (size_t i = 0; i + 1 < sdm->n; i += 2) {
		const struct ck_pk *k = sdm->items[i], *v = sdm->items[i + 1];
		if (k->k != CK_PK_STR) {
			fail(&c, "a state_dict_metadata key is not a string%s%s", "", "");
			goto out;
		}
		if (is_obj(v, "BytesStorageMetadata")) {
			cat->n_skipped++;
			if (ck_leftout_add(&cat->left_out, k->s, "bytes item (BytesStorageMetadata)") <
			    0) {
				ck_fail_sys(err, ENOMEM, "%s", mpath);
				goto out;
			}
			continue;
		}
		if (!is_obj(v, "TensorStorageMetadata")) {
			fail(&c, "\"%s\": neither TensorStorageMetadata nor BytesStorageMetadata%s", k->s,
			     "");
			goto out;
		}
		if (add_key(&c, k->s, v) < 0)
			goto out;
	}
	if (ck_catalog_index(cat, err) < 0)
		goto out;
	/* chunk entries were sorted: resolve each chunk to its index */
	for (size_t i = 0; i < cat->n_logical; i++)
		for (size_t k = 0; k < cat->logical[i].n_chunks; k++) {
			char cname[4400];
			snprintf(cname, sizeof cname, "%s#%zu", cat->logical[i].name, k);
			const struct ck_catalog_entry *e = ck_catalog_find(cat, cname);
			cat->logical[i].chunks[k].entry = (uint32_t)(e - cat->entries);
		}
	rc = 0;
out:
	for (size_t i = 0; i < c.n_items; i++)
		free(c.item_keys[i]);
	free(c.item_keys);
	free(c.item_vals);
	ck_strmap_free(&c.items);
	ck_strmap_free(&c.files);
	ck_pickle_free(&pk);
	free(buf);
	if (c.dirfd >= 0)
		close(c.dirfd);
	return rc;
}
