#include "catalog.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../util/fileio.h"
#include "../util/json_strict.h"
#include "../util/natsort.h"
#include "dcp.h"
#include "gguf.h"
#include "gguf_shapes.h"
#include "index.h"

#define INDEX_NAME "model.safetensors.index.json"
#define TORCH_INDEX_NAME "pytorch_model.bin.index.json"
#define MAX_INDEX_BYTES (256u << 20)
#define MAX_CONFIG_BYTES (16u << 20)

static const char *entry_name(const void *rec)
{
	return ((const struct ck_catalog_entry *)rec)->t.name;
}

void ck_catalog_free(struct ck_catalog *cat)
{
	if (!cat)
		return;
	for (size_t i = 0; i < cat->n_files; i++) {
		if (cat->files[i].fd >= 0)
			close(cat->files[i].fd);
		free(cat->files[i].name);
		free(cat->files[i].path);
	}
	for (size_t i = 0; i < cat->n_entries; i++) {
		if (!cat->entries[i].pooled)
			free(cat->entries[i].t.name);
		free(cat->entries[i].t.stride);
	}
	ck_strpool_free(&cat->names);
	for (size_t i = 0; i < cat->n_logical; i++) {
		free(cat->logical[i].name);
		free(cat->logical[i].chunks);
	}
	free(cat->logical);
	free(cat->files);
	free(cat->entries);
	ck_strmap_free(&cat->by_name);
	cJSON_Delete(cat->config);
	free(cat->config_raw);
	free(cat->dir);
	cJSON_Delete(cat->meta);
	ck_gguf_kvs_free(&cat->gguf_tok);
	ck_leftout_free(&cat->left_out);
	free(cat->source);
	free(cat);
}

const struct ck_catalog_entry *ck_catalog_find(const struct ck_catalog *cat, const char *name)
{
	uint32_t i;
	return ck_strmap_get(&cat->by_name, name, &i) == 0 ? &cat->entries[i] : NULL;
}

/* A safetensors file begins with its header length (8 bytes, little
 * endian) and the header's '{' (whitespace allowed before it). */
int ck_looks_safetensors(const unsigned char *p, size_t n, uint64_t size)
{
	if (n < 9)
		return n < 8 || size < 8; /* too short for anything: the parser says why */
	uint64_t len = 0;
	for (int b = 7; b >= 0; b--)
		len = len << 8 | p[b];
	size_t k = 8;
	while (k < n && (p[k] == ' ' || p[k] == '\t' || p[k] == '\n' || p[k] == '\r'))
		k++;
	return k < n && p[k] == '{' && len > 0;
}

/* What a file that ckptfs does not read as a source is, by its content. */
const char *ck_sniff_other(const unsigned char *p, size_t n)
{
	if (n >= 262 && !memcmp(p + 257, "ustar", 5))
		return "a tar archive: the legacy torch.save tar format (torch < 0.4) is not "
		       "supported (load and re-save it with torch.save)";
	if (n >= 6 && !memcmp(p, "\x93NUMPY", 6))
		return "a numpy .npy array, not a checkpoint";
	if (n >= 8 && !memcmp(p, "\x89HDF\r\n\x1a\n", 8))
		return "an HDF5 file (Keras/TF .h5): not supported";
	if (n >= 2 && p[0] == 0x80 && p[1] >= 2 && p[1] <= 5)
		return "a plain pickle, not a torch.save checkpoint: not supported";
	if (n >= 1 && p[0] == 0x08)
		return "possibly an ONNX or TensorFlow protobuf: not supported";
	return NULL;
}

/* The first file's records become the catalog's entries where they lie,
 * each widened in place by its file number, last first: entry i starts at
 * or after record i, and records after i have moved already. The header
 * reader sized the array for more records than it holds, so the array
 * stays where it is (a 100,000-key header's copy into a second array was
 * 13.6 MB of memory touched for the first time, a fault per page). */
static int adopt_entries(struct ck_catalog *cat, struct ck_file_tensors *hdr, uint32_t file,
			 struct ck_err *err)
{
	size_t n = hdr->n_tensors;
	uint32_t pooled = hdr->names.n > 0;
	if (ck_strpool_take(&cat->names, &hdr->names) < 0)
		return ck_fail_sys(err, ENOMEM, "catalog");
	struct ck_catalog_entry *e = realloc(hdr->tensors, n * sizeof *e);
	if (!e) { /* the names are the catalog's now; the records still hdr's */
		for (size_t i = 0; i < n; i++)
			hdr->tensors[i].name = NULL;
		return ck_fail_sys(err, ENOMEM, "catalog");
	}
	hdr->tensors = NULL;
	hdr->n_tensors = 0;
	const unsigned char *rec = (const unsigned char *)e;
	for (size_t i = n; i-- > 0;) {
		struct ck_tensor_info t;
		memcpy(&t, rec + i * sizeof t, sizeof t);
		e[i] = (struct ck_catalog_entry){.t = t, .file = file, .pooled = pooled};
		cat->total_bytes += t.nbytes;
	}
	free(cat->entries);
	cat->entries = e;
	cat->n_entries = cat->cap_entries = n;
	return 0;
}

/* Move a file's tensors into the catalog (ck_catalog_index refuses a key
 * given twice). */
int ck_catalog_add_entries(struct ck_catalog *cat, struct ck_file_tensors *hdr, uint32_t file,
			   struct ck_err *err)
{
	if (cat->n_entries == 0 && hdr->n_tensors > 0)
		return adopt_entries(cat, hdr, file, err);
	size_t need = cat->n_entries + hdr->n_tensors;
	uint32_t pooled = hdr->names.n > 0;
	if (need > cat->cap_entries || !cat->entries) {
		/* geometric growth: DCP adds one chunk at a time */
		size_t cap = cat->cap_entries * 2 > need ? cat->cap_entries * 2 : need;
		struct ck_catalog_entry *e = realloc(cat->entries, (cap ? cap : 1) * sizeof *e);
		if (!e)
			return ck_fail_sys(err, ENOMEM, "catalog");
		cat->entries = e;
		cat->cap_entries = cap;
	}
	if (ck_strpool_take(&cat->names, &hdr->names) < 0)
		return ck_fail_sys(err, ENOMEM, "catalog");
	for (size_t i = 0; i < hdr->n_tensors; i++) {
		struct ck_catalog_entry *ent = &cat->entries[cat->n_entries];
		ent->t = hdr->tensors[i];
		ent->file = file;
		ent->pooled = pooled;
		hdr->tensors[i].name = NULL; /* ownership moved */
		hdr->tensors[i].stride = NULL;
		cat->n_entries++;
		cat->total_bytes += ent->t.nbytes;
	}
	return 0;
}

static const char *entry_key(const void *cat, size_t i)
{
	return ((const struct ck_catalog *)cat)->entries[i].t.name;
}

/* The name map, its slots prefetched a few names ahead: the slots of a
 * 100,000-name map are a cache miss each, and these overlap. */
int ck_catalog_index(struct ck_catalog *cat, struct ck_err *err)
{
	ck_natural_sort(cat->entries, cat->n_entries, sizeof *cat->entries, entry_name);
	if (ck_strmap_init(&cat->by_name, cat->n_entries) < 0)
		return ck_fail_sys(err, ENOMEM, "catalog");
	struct ck_strmap_window w;
	for (size_t i = 0; i < cat->n_entries; i++) {
		uint32_t h = ck_strmap_ahead(&cat->by_name, &w, i, cat->n_entries, entry_key, cat);
		uint32_t other;
		int r = ck_strmap_put_h(&cat->by_name, cat->entries[i].t.name, h, (uint32_t)i,
					&other);
		if (r < 0)
			return ck_fail_sys(err, ENOMEM, "catalog");
		if (r == 1 && cat->entries[other].file == cat->entries[i].file)
			return ck_fail(err, CK_E_SOURCE, "%s: duplicate key \"%s\"",
				       cat->files[cat->entries[i].file].path, cat->entries[i].t.name);
		if (r == 1)
			return ck_fail(err, CK_E_SOURCE, "key \"%s\" is in both %s and %s",
				       cat->entries[i].t.name,
				       cat->files[cat->entries[other].file].path,
				       cat->files[cat->entries[i].file].path);
	}
	return 0;
}

static int load_config(struct ck_catalog *cat, const char *dir, struct ck_err *err)
{
	char *path = ck_path_join(dir, "config.json");
	free(cat->dir);
	cat->dir = strdup(dir);
	if (!path || !cat->dir) {
		free(path);
		return ck_fail_sys(err, ENOMEM, "config.json");
	}
	struct stat st;
	if (stat(path, &st) < 0) {
		free(path);
		return 0; /* optional */
	}
	char *buf;
	size_t len;
	int rc = ck_read_file(path, MAX_CONFIG_BYTES, &buf, &len, CK_E_SOURCE, err);
	if (rc == 0) {
		cat->config = ck_json_parse(buf, len, 0, CK_E_SOURCE, path, err);
		cat->config_raw = buf;
		cat->config_len = len;
		if (!cat->config)
			rc = -1;
		else if (!cJSON_IsObject(cat->config))
			rc = ck_fail(err, CK_E_SOURCE, "%s: not a JSON object", path);
	}
	free(path);
	return rc;
}

static int has_suffix(const char *s, const char *suf)
{
	size_t n = strlen(s), m = strlen(suf);
	return n >= m && strcmp(s + n - m, suf) == 0;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A directory without an index: every *.safetensors in it, else every
 * *.bin (torch.save files). */
static int list_weight_files(const char *dir, const char *suffix, char ***names, size_t *n,
			     struct ck_err *err)
{
	DIR *d = opendir(dir);
	if (!d)
		return ck_fail_sys(err, errno, "%s: cannot list directory", dir);
	size_t cap = 16;
	*n = 0;
	*names = malloc(cap * sizeof **names);
	struct dirent *de = NULL;
	while (*names && (de = readdir(d))) {
		if (de->d_name[0] == '.' || !has_suffix(de->d_name, suffix))
			continue;
		if (*n == cap) {
			char **nn = realloc(*names, (cap *= 2) * sizeof **names);
			if (!nn)
				break;
			*names = nn;
		}
		if (!((*names)[*n] = strdup(de->d_name)))
			break;
		(*n)++;
	}
	int failed = !*names || de != NULL;
	closedir(d);
	if (failed)
		return ck_fail_sys(err, ENOMEM, "%s", dir);
	qsort(*names, *n, sizeof **names, cmp_str);
	return 0;
}

static const char *index_key(const void *idx, size_t i)
{
	return ((const struct ck_index *)idx)->entries[i].key;
}

/* With an index, every listed key must be in the file it names, listed once,
 * and every key of those files must be listed, mapped to that file. */
static int check_against_index(const struct ck_catalog *cat, const struct ck_index *idx,
			       const char *what, struct ck_err *err)
{
	uint8_t *seen = calloc(cat->n_entries / 8 + 1, 1);
	if (!seen)
		return ck_fail_sys(err, ENOMEM, "%s", what);
	int rc = -1;
	struct ck_strmap_window w; /* the lookups' misses overlap */
	for (size_t i = 0; i < idx->n_entries; i++) {
		uint32_t k, h = ck_strmap_ahead(&cat->by_name, &w, i, idx->n_entries, index_key,
						idx);
		const char *key = idx->entries[i].key;
		const struct ck_catalog_entry *e =
			ck_strmap_get_h(&cat->by_name, key, h, &k) == 0 ? &cat->entries[k] : NULL;
		const char *want = idx->files[idx->entries[i].file];
		if (!e) {
			ck_fail(err, CK_E_SOURCE, "%s: key \"%s\" is listed in %s but not in it", what,
				idx->entries[i].key, want);
			goto out;
		}
		if (seen[k / 8] >> (k % 8) & 1) {
			ck_fail(err, CK_E_SOURCE, "%s: key \"%s\" listed twice in weight_map", what,
				idx->entries[i].key);
			goto out;
		}
		seen[k / 8] |= (uint8_t)(1u << (k % 8));
		if (strcmp(cat->files[e->file].name, want) != 0) {
			ck_fail(err, CK_E_SOURCE, "%s: key \"%s\" is listed in %s but stored in %s",
				what, idx->entries[i].key, want, cat->files[e->file].name);
			goto out;
		}
	}
	for (size_t k = 0; k < cat->n_entries; k++)
		if (!(seen[k / 8] >> (k % 8) & 1)) { /* name the first key not listed */
			ck_fail(err, CK_E_SOURCE, "%s: key \"%s\" in %s is not listed in the index",
				what, cat->entries[k].t.name, cat->files[cat->entries[k].file].name);
			goto out;
		}
	rc = 0;
out:
	free(seen);
	return rc;
}

static int open_dir(struct ck_catalog *cat, const char *dir, struct ck_err *err)
{
	int rc = -1;
	struct ck_index idx = {0};
	char **names = NULL;
	size_t n_names = 0;
	int have_index = 0;
	char *index_path = ck_path_join(dir, INDEX_NAME);
	struct stat st;
	if (index_path && stat(index_path, &st) < 0) { /* torch's index, if that is what there is */
		char *tp = ck_path_join(dir, TORCH_INDEX_NAME);
		if (tp && stat(tp, &st) == 0) {
			free(index_path);
			index_path = tp;
		} else {
			free(tp);
		}
	}
	int dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (!index_path) {
		ck_fail_sys(err, ENOMEM, "%s", dir);
		goto out;
	}
	if (dirfd < 0) {
		ck_fail_sys(err, errno, "%s: cannot open directory", dir);
		goto out;
	}
	if (stat(index_path, &st) == 0) {
		char *buf;
		size_t len;
		if (ck_read_file(index_path, MAX_INDEX_BYTES, &buf, &len, CK_E_SOURCE, err) < 0)
			goto out;
		rc = ck_index_parse(buf, len, index_path, &idx, err);
		free(buf);
		if (rc < 0)
			goto out;
		rc = -1;
		have_index = 1;
		names = idx.files;
		n_names = idx.n_files;
		/* room for every listed key at once: no regrowth of ~200 B entries */
		if (!(cat->entries = malloc((idx.n_entries ? idx.n_entries : 1) *
					    sizeof *cat->entries))) {
			ck_fail_sys(err, ENOMEM, "%s", dir);
			goto out;
		}
		cat->cap_entries = idx.n_entries;
		if (n_names == 0) {
			ck_fail(err, CK_E_SOURCE, "%s: weight_map is empty", index_path);
			goto out;
		}
	} else if (list_weight_files(dir, ".safetensors", &names, &n_names, err) < 0) {
		goto out;
	} else if (n_names == 0) {
		free(names);
		names = NULL;
		if (list_weight_files(dir, ".bin", &names, &n_names, err) < 0)
			goto out;
		if (n_names == 0) {
			ck_fail(err, CK_E_SOURCE,
				"%s: no *.safetensors (or torch.save *.bin) files in the directory",
				dir);
			goto out;
		}
	}
	cat->files = calloc(n_names, sizeof *cat->files);
	if (!cat->files) {
		ck_fail_sys(err, ENOMEM, "%s", dir);
		goto out;
	}
	int threads = cat->read_threads ? cat->read_threads : ck_catalog_read_threads(n_names);
	if (ck_catalog_read_files(cat, dirfd, dir, names, n_names, threads, err) < 0)
		goto out;
	if (ck_catalog_index(cat, err) < 0)
		goto out;
	if (have_index && check_against_index(cat, &idx, index_path, err) < 0)
		goto out;
	rc = load_config(cat, dir, err);
out:
	if (!have_index && names) {
		for (size_t i = 0; i < n_names; i++)
			free(names[i]);
		free(names);
	}
	ck_index_free(&idx);
	free(index_path);
	if (dirfd >= 0)
		close(dirfd);
	return rc;
}

/* A file, or a split GGUF's files (named by the first). */
static int read_file_or_split(struct ck_catalog *cat, const char *path, struct ck_err *err)
{
	char **split, *const one[] = {(char *)path};
	size_t n;
	if (ck_gguf_split_names(path, &split, &n, err) < 0)
		return -1;
	cat->gguf_split.count = (int)n;
	cat->files = calloc(n ? n : 1, sizeof *cat->files);
	int r = cat->files
		    ? ck_catalog_read_files(cat, AT_FDCWD, NULL, n ? split : one, n ? n : 1, 1, err)
		    : ck_fail_sys(err, ENOMEM, "%s", path);
	ck_gguf_split_names_free(split, n);
	if (r == 0)
		r = ck_catalog_index(cat, err);
	if (r == 0 && n && cat->n_entries != (size_t)cat->gguf_split.tensors)
		r = ck_fail(err, CK_E_SOURCE,
			    "%s: split.tensors.count is %lld, the %zu files hold %zu tensors", path,
			    (long long)cat->gguf_split.tensors, n, cat->n_entries);
	return r;
}

static int open_file(struct ck_catalog *cat, const char *path, struct ck_err *err)
{
	int r = read_file_or_split(cat, path, err);
	if (r == 0) {
		/* config.json beside a single weights file, as in an HF repo */
		char *dir = strdup(path);
		if (!dir)
			return ck_fail_sys(err, ENOMEM, "%s", path);
		char *slash = strrchr(dir, '/');
		if (slash)
			*slash = '\0';
		r = load_config(cat, slash ? (dir[0] ? dir : "/") : ".", err);
		free(dir);
	}
	return r;
}

/* A rope divisor tensor of the GGUF (rope_freqs, rope_factors_long/short):
 * 1-D F32, positive and finite, at most cap of them read into buf. *n is 0
 * when the file has none. */
static int gguf_divisors(const struct ck_catalog *cat, const char *name, float *buf, size_t cap,
			 size_t *n, struct ck_err *err)
{
	const struct ck_catalog_entry *e = ck_catalog_find(cat, name);
	*n = 0;
	if (!e)
		return 0;
	if (e->t.dtype != CK_DT_F32 || e->t.ndim != 1 || e->t.quant || !e->t.numel ||
	    e->t.numel > cap)
		return ck_fail(err, CK_E_SOURCE, "%s: %s must be F32, 1 to %zu numbers",
			       cat->source, name, cap);
	int r = ck_pread_full(cat->files[e->file].fd, buf, e->t.numel * 4, e->t.offset);
	if (r < 0)
		return ck_fail_sys(err, -r, "%s: %s", cat->source, name);
	for (size_t i = 0; i < e->t.numel; i++)
		if (!isfinite(buf[i]) || buf[i] <= 0)
			return ck_fail(err, CK_E_SOURCE,
				       "%s: %s[%zu] is %g, not a positive divisor", cat->source,
				       name, i, (double)buf[i]);
	*n = (size_t)e->t.numel;
	return 0;
}

static void entry_at(const void *ctx, size_t i, const char **name, int *ndim, const int64_t **shape)
{
	const struct ck_tensor_info *t = &((const struct ck_catalog *)ctx)->entries[i].t;
	*name = t->name;
	*ndim = t->ndim;
	*shape = t->shape;
}

/* A GGUF without a config.json beside it: one made from its metadata and
 * its rope divisors, so mappings to Hugging Face names get their
 * parameters (not an error when the architecture has none: the tensors
 * are there under GGUF names; an error when one that has is described by
 * metadata config.json cannot say, rather than a config of another
 * model). */
static int gguf_config(struct ck_catalog *cat, struct ck_err *err)
{
	enum { CAP = 4096 }; /* head_dim / 2 divisors each */
	static const char *const names[3] = {"rope_freqs.weight", "rope_factors_long.weight",
					     "rope_factors_short.weight"};
	float *d = malloc(3 * CAP * sizeof *d);
	size_t nd[3];
	if (!d)
		return ck_fail_sys(err, ENOMEM, "%s", cat->source);
	for (int k = 0; k < 3; k++)
		if (gguf_divisors(cat, names[k], d + k * CAP, CAP, &nd[k], err) < 0) {
			free(d);
			return -1;
		}
	struct ck_gguf_rope rope = {nd[0] ? d : NULL,
				    nd[1] ? d + CAP : NULL,
				    nd[2] ? d + 2 * CAP : NULL,
				    nd[0],
				    nd[1],
				    nd[2]};
	const struct ck_catalog_entry *emb = ck_catalog_find(cat, "token_embd.weight");
	cJSON *c;
	int r = ck_gguf_hf_config(cat->meta, emb ? emb->t.shape[0] : -1,
				  ck_catalog_find(cat, "output.weight") == NULL, &rope, cat->source,
				  &c, err);
	free(d);
	if (r < 0 || !c)
		return r;
	if (ck_gguf_check_hf_config(c, cat, cat->n_entries, entry_at, cat->source, err) < 0) {
		cJSON_Delete(c);
		return -1;
	}
	char *txt = cJSON_Print(c);
	size_t n = txt ? strlen(txt) : 0;
	char *raw = txt ? malloc(n + 2) : NULL;
	if (!raw) {
		cJSON_free(txt);
		cJSON_Delete(c);
		return ck_fail_sys(err, ENOMEM, "%s", cat->source);
	}
	memcpy(raw, txt, n);
	raw[n] = '\n';
	raw[n + 1] = '\0';
	cJSON_free(txt);
	cat->config = c;
	cat->config_raw = raw;
	cat->config_len = n + 1;
	return 0;
}

static int open_dcp(struct ck_catalog *cat, const char *dir, struct ck_err *err)
{
	return ck_dcp_open(cat, dir, err) < 0 ? -1 : load_config(cat, dir, err);
}

static int any_dir(const char *dir)
{
	(void)dir;
	return 1;
}

/* A directory of GGUF files only (no *.safetensors, *.bin or index). */
static int gguf_dir(const char *dir)
{
	int gguf = 0, other = 0;
	DIR *d = opendir(dir);
	for (struct dirent *de; d && (de = readdir(d));) {
		gguf |= de->d_name[0] != '.' && has_suffix(de->d_name, ".gguf");
		other |= has_suffix(de->d_name, ".safetensors") || has_suffix(de->d_name, ".bin") ||
			 has_suffix(de->d_name, ".index.json");
	}
	if (d)
		closedir(d);
	return gguf && !other;
}

/* Its one GGUF, or its one split GGUF (read from the first file). */
static int open_gguf_dir(struct ck_catalog *cat, const char *dir, struct ck_err *err)
{
	char **names = NULL, *path = NULL;
	size_t n = 0;
	int r = list_weight_files(dir, ".gguf", &names, &n, err);
	if (r == 0 && ck_gguf_dir_pick(dir, names, n, &path, err) == 0)
		r = open_file(cat, path, err);
	else
		r = -1;
	free(path);
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
	return r;
}

/* The directory formats, tried in order: a DCP / torch_dist checkpoint (its
 * .metadata), a directory of one GGUF (or one split GGUF), else a Hugging
 * Face directory of files the file readers (readers.c) read, with or
 * without an index. */
static int open_any_dir(struct ck_catalog *cat, const char *dir, struct ck_err *err)
{
	static const struct {
		int (*detect)(const char *dir);
		int (*open)(struct ck_catalog *cat, const char *dir, struct ck_err *err);
	} dirs[] = {{ck_dcp_detect, open_dcp}, {gguf_dir, open_gguf_dir}, {any_dir, open_dir}};
	size_t k = 0;
	while (!dirs[k].detect(dir))
		k++;
	return dirs[k].open(cat, dir, err);
}

int ck_catalog_open(const char *source, struct ck_catalog **out, struct ck_err *err)
{
	return ck_catalog_open_threads(source, 0, out, err);
}

int ck_catalog_open_threads(const char *source, int threads, struct ck_catalog **out,
			    struct ck_err *err)
{
	*out = NULL;
	struct ck_catalog *cat = calloc(1, sizeof *cat);
	if (!cat || !(cat->source = strdup(source))) {
		free(cat);
		return ck_fail_sys(err, ENOMEM, "%s", source);
	}
	cat->read_threads = threads;
	struct stat st;
	int r;
	if (stat(source, &st) < 0)
		r = errno == ENOENT ? ck_fail(err, CK_E_SOURCE, "%s: no such file or directory", source)
				    : ck_fail_sys(err, errno, "%s: cannot stat", source);
	else if (S_ISDIR(st.st_mode))
		r = open_any_dir(cat, source, err);
	else
		r = open_file(cat, source, err);
	if (r == 0 && cat->meta && !cat->config)
		r = gguf_config(cat, err);
	if (r < 0) {
		ck_catalog_free(cat);
		return -1;
	}
	*out = cat;
	return 0;
}
