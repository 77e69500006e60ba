#include "imatrix.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "../util/fileio.h"
#include "gguf.h"

/* GGML_MAX_NAME: llama.cpp's tensor names are shorter */
#define MAX_NAME 64
#define MAX_ENTRIES (1u << 20)

static int entry_cmp(const void *a, const void *b)
{
	return strcmp(((const struct ck_imatrix_entry *)a)->name,
		      ((const struct ck_imatrix_entry *)b)->name);
}

/* A slot for a new entry named name[0..len) with n values; NULL with err. */
static struct ck_imatrix_entry *add_entry(struct ck_imatrix *m, size_t *cap, const char *path,
					  const char *name, size_t len, uint64_t n,
					  struct ck_err *err)
{
	if (len < 1 || len > MAX_NAME || memchr(name, 0, len)) {
		ck_fail(err, CK_E_SOURCE, "%s: entry %zu: a tensor name is 1 to %d bytes, no NUL",
			path, m->n + 1, MAX_NAME);
		return NULL;
	}
	if (m->n == *cap) {
		size_t nc = *cap ? *cap * 2 : 64;
		void *p = realloc(m->e, nc * sizeof *m->e);
		if (!p) {
			ck_fail_sys(err, ENOMEM, "%s", path);
			return NULL;
		}
		m->e = p, *cap = nc;
	}
	struct ck_imatrix_entry *e = &m->e[m->n];
	e->name = strndup(name, len);
	e->v = malloc(n * sizeof *e->v);
	e->n = n;
	if (!e->name || !e->v) {
		free(e->name);
		free(e->v);
		ck_fail_sys(err, ENOMEM, "%s", path);
		return NULL;
	}
	m->n++;
	return e;
}

static int get_i32(int fd, uint64_t size, uint64_t *pos, int32_t *v, const char *path,
		   const char *what, struct ck_err *err)
{
	if (size - *pos < 4)
		return ck_fail(err, CK_E_SOURCE, "%s: the file ends inside %s", path, what);
	int rc = ck_pread_full(fd, v, 4, *pos);
	if (rc < 0)
		return ck_fail_sys(err, -rc, "%s", path);
	*pos += 4;
	return 0;
}

/* The legacy format; values divided by ncall as llama-quantize does. */
static int load_legacy(int fd, uint64_t size, const char *path, struct ck_imatrix *m,
		       struct ck_err *err)
{
	uint64_t pos = 0;
	size_t cap = 0;
	int32_t n;
	if (get_i32(fd, size, &pos, &n, path, "the entry count", err) < 0)
		return -1;
	if (n < 1 || (uint32_t)n > MAX_ENTRIES)
		return ck_fail(err, CK_E_SOURCE, "%s: %d entries (1 to %u): not an imatrix file",
			       path, n, MAX_ENTRIES);
	for (int32_t i = 0; i < n; i++) {
		int32_t len, ncall, nval;
		char name[MAX_NAME];
		if (get_i32(fd, size, &pos, &len, path, "a name length", err) < 0)
			return -1;
		if (len < 1 || len > MAX_NAME || (uint64_t)len > size - pos)
			return ck_fail(
			    err, CK_E_SOURCE,
			    "%s: entry %d: a name of %d bytes (1 to %d, within the file)", path,
			    i + 1, len, MAX_NAME);
		int rc = ck_pread_full(fd, name, (uint64_t)len, pos);
		if (rc < 0)
			return ck_fail_sys(err, -rc, "%s", path);
		pos += (uint64_t)len;
		if (get_i32(fd, size, &pos, &ncall, path, "a call count", err) < 0 ||
		    get_i32(fd, size, &pos, &nval, path, "a value count", err) < 0)
			return -1;
		if (ncall < 0 || nval < 1 || (uint64_t)nval * 4 > size - pos)
			return ck_fail(err, CK_E_SOURCE,
				       "%s: entry %d (\"%.*s\"): %d calls, %d values (a count >= 0 "
				       "and at least one value, within the file)",
				       path, i + 1, len, name, ncall, nval);
		struct ck_imatrix_entry *e =
		    add_entry(m, &cap, path, name, (size_t)len, (uint64_t)nval, err);
		if (!e)
			return -1;
		if ((rc = ck_pread_full(fd, e->v, (uint64_t)nval * 4, pos)) < 0)
			return ck_fail_sys(err, -rc, "%s", path);
		pos += (uint64_t)nval * 4;
		for (int32_t k = 0; k < nval && ncall > 0; k++)
			e->v[k] /= (float)ncall;
	}
	if (pos == size)
		return 0;
	int32_t chunks, dlen; /* the newest legacy files end with these */
	if (get_i32(fd, size, &pos, &chunks, path, "the chunk count", err) < 0 ||
	    get_i32(fd, size, &pos, &dlen, path, "the dataset's name", err) < 0)
		return -1;
	if (chunks < 0 || dlen < 0 || (uint64_t)dlen != size - pos)
		return ck_fail(
		    err, CK_E_SOURCE,
		    "%s: after the entries, %d chunks and a dataset name of %d bytes where "
		    "%llu remain",
		    path, chunks, dlen, (unsigned long long)(size - pos));
	m->chunks = chunks;
	if (!(m->dataset = calloc(1, (size_t)dlen + 1)))
		return ck_fail_sys(err, ENOMEM, "%s", path);
	int rc = ck_pread_full(fd, m->dataset, (uint64_t)dlen, pos);
	return rc < 0 ? ck_fail_sys(err, -rc, "%s", path) : 0;
}

/* A tensor of the GGUF format by name, F32 and unquantized; NULL if absent. */
static const struct ck_tensor_info *gguf_tensor(const struct ck_file_tensors *ft, const char *name)
{
	for (size_t i = 0; i < ft->n_tensors; i++)
		if (!strcmp(ft->tensors[i].name, name))
			return &ft->tensors[i];
	return NULL;
}

/* One NAME.in_sum2 with its NAME.counts into an entry. */
static int gguf_entry(int fd, const struct ck_file_tensors *ft, const struct ck_tensor_info *sums,
		      size_t base_len, const char *path, struct ck_imatrix *m, size_t *cap,
		      struct ck_err *err)
{
	char cname[MAX_NAME + 16];
	snprintf(cname, sizeof cname, "%.*s.counts", (int)base_len, sums->name);
	const struct ck_tensor_info *counts = base_len <= MAX_NAME ? gguf_tensor(ft, cname) : NULL;
	const int64_t ne0 = sums->ndim ? sums->shape[sums->ndim - 1] : 0;
	const int64_t ne1 = sums->ndim == 2 ? sums->shape[0] : 1;
	if (!counts)
		return ck_fail(err, CK_E_SOURCE, "%s: %s has no %.*s.counts", path, sums->name,
			       (int)base_len, sums->name);
	if (sums->dtype != CK_DT_F32 || sums->quant || counts->dtype != CK_DT_F32 ||
	    counts->quant || sums->ndim < 1 || sums->ndim > 2 || ne0 < 1 || ne1 < 1 ||
	    counts->numel != (uint64_t)ne1)
		return ck_fail(err, CK_E_SOURCE,
			       "%s: %.*s: in_sum2 must be F32 [matrices, columns] and counts F32, "
			       "one per matrix",
			       path, (int)base_len, sums->name);
	struct ck_imatrix_entry *e =
	    add_entry(m, cap, path, sums->name, base_len, sums->numel, err);
	float *c = e ? malloc(counts->numel * sizeof *c) : NULL;
	int rc = !e ? -EINVAL : !c ? -ENOMEM : ck_pread_full(fd, e->v, sums->nbytes, sums->offset);
	if (rc == 0)
		rc = ck_pread_full(fd, c, counts->nbytes, counts->offset);
	for (int64_t j = 0; rc == 0 && j < ne1; j++)
		for (int64_t i = 0; i < ne0; i++) /* never counted: weight 1 */
			e->v[j * ne0 + i] = c[j] > 0.0f ? e->v[j * ne0 + i] / c[j] : 1;
	free(c);
	if (rc == -EINVAL)
		return -1;
	return rc < 0 ? ck_fail_sys(err, -rc, "%s", path) : 0;
}

static int load_gguf(int fd, uint64_t size, const char *path, struct ck_imatrix *m,
		     struct ck_err *err)
{
	struct ck_file_tensors ft;
	cJSON *meta;
	if (ck_gguf_read_fd(fd, size, path, &ft, &meta, NULL, err) < 0)
		return -1;
	int rc = -1;
	const cJSON *ds = cJSON_GetObjectItemCaseSensitive(meta, "imatrix.datasets");
	const cJSON *cc = cJSON_GetObjectItemCaseSensitive(meta, "imatrix.chunk_count");
	if (!ds || !cJSON_IsNumber(cc) ||
	    !cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(meta, "imatrix.chunk_size"))) {
		ck_fail(err, CK_E_SOURCE,
			"%s: a GGUF without imatrix.datasets, imatrix.chunk_count and "
			"imatrix.chunk_size: not an importance matrix",
			path);
		goto out;
	}
	m->chunks = (int64_t)cc->valuedouble;
	const cJSON *d0 = cJSON_IsArray(ds) ? cJSON_GetArrayItem(ds, 0) : ds;
	if (cJSON_IsString(d0) && !(m->dataset = strdup(d0->valuestring))) {
		ck_fail_sys(err, ENOMEM, "%s", path);
		goto out;
	}
	size_t cap = 0;
	static const char sfx[] = ".in_sum2";
	for (size_t i = 0; i < ft.n_tensors; i++) {
		const struct ck_tensor_info *t = &ft.tensors[i];
		size_t len = strlen(t->name);
		if (len > sizeof sfx - 1 && !strcmp(t->name + len - (sizeof sfx - 1), sfx) &&
		    gguf_entry(fd, &ft, t, len - (sizeof sfx - 1), path, m, &cap, err) < 0)
			goto out;
	}
	for (size_t i = 0; i < ft.n_tensors; i++) { /* counts without sums */
		const char *nm = ft.tensors[i].name;
		size_t len = strlen(nm);
		char sname[MAX_NAME + 16];
		if (len > 7 && !strcmp(nm + len - 7, ".counts") && len - 7 <= MAX_NAME) {
			snprintf(sname, sizeof sname, "%.*s.in_sum2", (int)(len - 7), nm);
			if (!gguf_tensor(&ft, sname)) {
				ck_fail(err, CK_E_SOURCE, "%s: %s has no %s", path, nm, sname);
				goto out;
			}
		}
	}
	rc = 0;
out:
	cJSON_Delete(meta);
	ck_file_tensors_free(&ft);
	return rc;
}

/* Sorted, each name once, every value finite. */
static int check(struct ck_imatrix *m, const char *path, struct ck_err *err)
{
	if (!m->n)
		return ck_fail(err, CK_E_SOURCE, "%s: no entries", path);
	qsort(m->e, m->n, sizeof *m->e, entry_cmp);
	for (size_t i = 0; i < m->n; i++) {
		if (i && !strcmp(m->e[i].name, m->e[i - 1].name))
			return ck_fail(err, CK_E_SOURCE, "%s: \"%s\" appears twice", path,
				       m->e[i].name);
		for (uint64_t k = 0; k < m->e[i].n; k++)
			if (!isfinite(m->e[i].v[k]))
				return ck_fail(err, CK_E_SOURCE,
					       "%s: \"%s\" value %llu is not finite (%g)", path,
					       m->e[i].name, (unsigned long long)k,
					       (double)m->e[i].v[k]);
	}
	return 0;
}

int ck_imatrix_load(const char *path, struct ck_imatrix *m, struct ck_err *err)
{
	memset(m, 0, sizeof *m);
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return ck_fail_sys(err, errno, "%s: cannot open the importance matrix", path);
	struct stat st;
	int rc = -1;
	unsigned char magic[4] = {0};
	if (fstat(fd, &st) < 0) {
		ck_fail_sys(err, errno, "%s: cannot stat", path);
	} else if (!S_ISREG(st.st_mode)) {
		ck_fail(err, CK_E_SOURCE, "%s: not a regular file", path);
	} else {
		fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
		const uint64_t size = (uint64_t)st.st_size;
		if (size >= 4 && ck_pread_full(fd, magic, 4, 0) < 0)
			ck_fail_sys(err, errno, "%s", path);
		else if ((m->gguf = ck_is_gguf(magic, 4)))
			rc = load_gguf(fd, size, path, m, err);
		else
			rc = load_legacy(fd, size, path, m, err);
		if (rc == 0)
			rc = check(m, path, err);
	}
	close(fd);
	if (rc < 0)
		ck_imatrix_free(m);
	return rc;
}

const struct ck_imatrix_entry *ck_imatrix_find(const struct ck_imatrix *m, const char *name)
{
	const struct ck_imatrix_entry key = {.name = (char *)name};
	return m->n ? bsearch(&key, m->e, m->n, sizeof *m->e, entry_cmp) : NULL;
}

void ck_imatrix_free(struct ck_imatrix *m)
{
	for (size_t i = 0; i < m->n; i++) {
		free(m->e[i].name);
		free(m->e[i].v);
	}
	free(m->e);
	free(m->dataset);
	memset(m, 0, sizeof *m);
}
