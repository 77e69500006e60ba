#include "safetensors.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../util/fileio.h"
#include "../util/json_strict.h"
#include "../util/strmap.h"

int ck_shape_numel(const int64_t *shape, int ndim, uint64_t *numel)
{
	uint64_t n = 1;
	for (int i = 0; i < ndim; i++) {
		if (shape[i] < 0 || __builtin_mul_overflow(n, (uint64_t)shape[i], &n))
			return -1;
	}
	*numel = n;
	return 0;
}

int ck_shape_bytes(const int64_t *shape, int ndim, enum ck_dtype dt, uint64_t *bytes)
{
	uint64_t n;
	if (ck_shape_numel(shape, ndim, &n) < 0)
		return -1;
	return __builtin_mul_overflow(n, (uint64_t)ck_dtype_size(dt), bytes) ? -1 : 0;
}

void ck_st_header_free(struct ck_st_header *h)
{
	for (size_t i = 0; i < h->n_tensors; i++)
		free(h->tensors[i].name);
	for (size_t i = 0; i < h->n_meta; i++) {
		free(h->meta[i].key);
		free(h->meta[i].value);
	}
	free(h->tensors);
	free(h->meta);
	memset(h, 0, sizeof *h);
}

static int parse_metadata(const cJSON *obj, const char *what, struct ck_st_header *h,
			  struct ck_err *err)
{
	if (!cJSON_IsObject(obj))
		return ck_fail(err, CK_E_SOURCE, "%s: __metadata__ must be an object of strings",
			       what);
	size_t n = (size_t)cJSON_GetArraySize(obj);
	h->meta = calloc(n ? n : 1, sizeof *h->meta);
	if (!h->meta)
		return ck_fail_sys(err, ENOMEM, "%s", what);
	for (const cJSON *c = obj->child; c; c = c->next) {
		if (!cJSON_IsString(c))
			return ck_fail(err, CK_E_SOURCE,
				       "%s: __metadata__ value for \"%s\" is not a string", what,
				       c->string);
		struct ck_st_meta *m = &h->meta[h->n_meta++];
		m->key = strdup(c->string);
		m->value = strdup(c->valuestring);
		if (!m->key || !m->value)
			return ck_fail_sys(err, ENOMEM, "%s", what);
	}
	return 0;
}

/* Parse one tensor entry {"dtype", "shape", "data_offsets"}; unknown fields
 * are ignored as safetensors does, duplicated known fields are refused. */
static int parse_entry(const cJSON *e, const char *what, struct ck_tensor_info *t,
		       uint64_t *begin, uint64_t *end, struct ck_err *err)
{
	const char *key = e->string;
	if (!cJSON_IsObject(e))
		return ck_fail(err, CK_E_SOURCE, "%s: tensor \"%s\": entry is not an object", what,
			       key);
	const cJSON *dt = NULL, *shape = NULL, *offs = NULL;
	for (const cJSON *f = e->child; f; f = f->next) {
		const cJSON **slot = strcmp(f->string, "dtype") == 0	    ? &dt
				     : strcmp(f->string, "shape") == 0	    ? &shape
				     : strcmp(f->string, "data_offsets") == 0 ? &offs
									      : NULL;
		if (!slot)
			continue;
		if (*slot)
			return ck_fail(err, CK_E_SOURCE, "%s: tensor \"%s\": duplicate field \"%s\"",
				       what, key, f->string);
		*slot = f;
	}
	if (!dt || !shape || !offs)
		return ck_fail(err, CK_E_SOURCE, "%s: tensor \"%s\": missing field \"%s\"", what,
			       key, !dt ? "dtype" : !shape ? "shape" : "data_offsets");
	if (!cJSON_IsString(dt))
		return ck_fail(err, CK_E_SOURCE, "%s: tensor \"%s\": dtype is not a string", what,
			       key);
	int subbyte;
	t->dtype = ck_dtype_parse(dt->valuestring, &subbyte);
	if (t->dtype == CK_DT_INVALID)
		return ck_fail(err, CK_E_SOURCE,
			       subbyte ? "%s: tensor \"%s\": sub-byte dtype %s is not supported"
				       : "%s: tensor \"%s\": unknown dtype \"%s\"",
			       what, key, dt->valuestring);
	if (!cJSON_IsArray(shape))
		return ck_fail(err, CK_E_SOURCE, "%s: tensor \"%s\": shape is not a list", what,
			       key);
	int nd = cJSON_GetArraySize(shape);
	if (nd > CK_MAX_DIMS)
		return ck_fail(err, CK_E_SOURCE,
			       "%s: tensor \"%s\": %d dimensions, more than the supported %d", what,
			       key, nd, CK_MAX_DIMS);
	t->ndim = nd;
	int i = 0;
	for (const cJSON *d = shape->child; d; d = d->next, i++) {
		int64_t v;
		if (ck_json_int(d, 0, CK_JSON_MAX_EXACT_INT, &v) < 0)
			return ck_fail(err, CK_E_SOURCE,
				       "%s: tensor \"%s\": shape[%d] is not a non-negative integer",
				       what, key, i);
		t->shape[i] = v;
	}
	if (ck_shape_numel(t->shape, nd, &t->numel) < 0 ||
	    ck_shape_bytes(t->shape, nd, t->dtype, &t->nbytes) < 0)
		return ck_fail(err, CK_E_SOURCE,
			       "%s: tensor \"%s\": shape product overflows 64 bits", what, key);
	if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2)
		return ck_fail(err, CK_E_SOURCE,
			       "%s: tensor \"%s\": data_offsets is not a list of two integers",
			       what, key);
	int64_t b, en;
	if (ck_json_int(offs->child, 0, CK_JSON_MAX_EXACT_INT, &b) < 0 ||
	    ck_json_int(offs->child->next, 0, CK_JSON_MAX_EXACT_INT, &en) < 0)
		return ck_fail(err, CK_E_SOURCE,
			       "%s: tensor \"%s\": data_offsets are not non-negative integers",
			       what, key);
	if (en < b)
		return ck_fail(err, CK_E_SOURCE,
			       "%s: tensor \"%s\": data_offsets end %lld before begin %lld", what,
			       key, (long long)en, (long long)b);
	if ((uint64_t)(en - b) != t->nbytes)
		return ck_fail(err, CK_E_SOURCE,
			       "%s: tensor \"%s\": data_offsets span %lld bytes but %s%s needs "
			       "%llu",
			       what, key, (long long)(en - b), ck_dtype_name(t->dtype),
			       nd ? " of that shape" : " scalar", (unsigned long long)t->nbytes);
	*begin = (uint64_t)b;
	*end = (uint64_t)en;
	return 0;
}

struct span {
	uint64_t begin, end;
	size_t idx;
};

static int cmp_span(const void *a, const void *b)
{
	const struct span *x = a, *y = b;
	if (x->begin != y->begin)
		return x->begin < y->begin ? -1 : 1;
	if (x->end != y->end)
		return x->end < y->end ? -1 : 1;
	return 0;
}

/* Validate the JSON header text (N bytes) of a file whose data section is
 * data_size bytes long. */
static int parse_header_json(const char *json, uint64_t n, uint64_t data_size, const char *what,
			     struct ck_st_header *h, struct ck_err *err)
{
	memset(h, 0, sizeof *h);
	h->header_len = n;
	char ctx[600];
	snprintf(ctx, sizeof ctx, "%s: header", what);
	cJSON *root = ck_json_parse(json, (size_t)n, CK_JSON_INTEGERS_ONLY, CK_E_SOURCE, ctx, err);
	if (!root)
		return -1;
	int rc = -1;
	struct span *spans = NULL;
	struct ck_strmap seen = {0};
	if (!cJSON_IsObject(root)) {
		ck_fail(err, CK_E_SOURCE, "%s: header is not a JSON object", what);
		goto out;
	}
	size_t count = (size_t)cJSON_GetArraySize(root);
	h->tensors = calloc(count ? count : 1, sizeof *h->tensors);
	spans = calloc(count ? count : 1, sizeof *spans);
	if (!h->tensors || !spans || ck_strmap_init(&seen, count) < 0) {
		ck_fail_sys(err, ENOMEM, "%s", what);
		goto out;
	}
	int have_meta = 0;
	for (const cJSON *e = root->child; e; e = e->next) {
		if (strcmp(e->string, "__metadata__") == 0) {
			if (have_meta++) {
				ck_fail(err, CK_E_SOURCE, "%s: duplicate key \"__metadata__\"", what);
				goto out;
			}
			if (parse_metadata(e, what, h, err) < 0)
				goto out;
			continue;
		}
		int r = ck_strmap_put(&seen, e->string, 0, NULL);
		if (r != 0) {
			if (r < 0)
				ck_fail_sys(err, ENOMEM, "%s", what);
			else
				ck_fail(err, CK_E_SOURCE, "%s: duplicate key \"%s\"", what, e->string);
			goto out;
		}
		struct ck_tensor_info *t = &h->tensors[h->n_tensors];
		struct span *sp = &spans[h->n_tensors];
		if (parse_entry(e, what, t, &sp->begin, &sp->end, err) < 0)
			goto out;
		sp->idx = h->n_tensors++;
		if (!(t->name = strdup(e->string))) {
			ck_fail_sys(err, ENOMEM, "%s", what);
			goto out;
		}
	}
	/* Spans sorted by offset must tile [0, data_size) exactly. */
	qsort(spans, h->n_tensors, sizeof *spans, cmp_span);
	uint64_t pos = 0;
	for (size_t i = 0; i < h->n_tensors; i++) {
		const char *key = h->tensors[spans[i].idx].name;
		if (spans[i].begin != pos) {
			ck_fail(err, CK_E_SOURCE,
				"%s: tensor \"%s\": data_offsets begin at %llu but the previous "
				"tensor ends at %llu (%s)",
				what, key, (unsigned long long)spans[i].begin,
				(unsigned long long)pos, spans[i].begin > pos ? "gap" : "overlap");
			goto out;
		}
		pos = spans[i].end;
	}
	if (pos != data_size) {
		ck_fail(err, CK_E_SOURCE,
			"%s: tensors cover %llu data bytes but the file holds %llu after the "
			"header (%s)",
			what, (unsigned long long)pos, (unsigned long long)data_size,
			pos < data_size ? "trailing bytes" : "file truncated");
		goto out;
	}
	/* Reorder tensors by offset and make offsets absolute. */
	struct ck_tensor_info *sorted = calloc(h->n_tensors ? h->n_tensors : 1, sizeof *sorted);
	if (!sorted) {
		ck_fail_sys(err, ENOMEM, "%s", what);
		goto out;
	}
	for (size_t i = 0; i < h->n_tensors; i++) {
		sorted[i] = h->tensors[spans[i].idx];
		sorted[i].offset = 8 + n + spans[i].begin;
	}
	free(h->tensors);
	h->tensors = sorted;
	rc = 0;
out:
	if (rc < 0)
		ck_st_header_free(h);
	ck_strmap_free(&seen);
	free(spans);
	cJSON_Delete(root);
	return rc;
}

/* Check the 8-byte length prefix against the file size; returns N. */
static int check_prefix(const unsigned char *p8, uint64_t file_size, const char *what,
			uint64_t *n_out, struct ck_err *err)
{
	if (file_size < 8)
		return ck_fail(err, CK_E_SOURCE,
			       "%s: file is %llu bytes, too small for the 8-byte header length",
			       what, (unsigned long long)file_size);
	uint64_t n = 0;
	for (int i = 7; i >= 0; i--)
		n = (n << 8) | p8[i];
	if (n > CK_ST_MAX_HEADER)
		return ck_fail(err, CK_E_SOURCE,
			       "%s: header length %llu exceeds the limit of %llu bytes", what,
			       (unsigned long long)n, CK_ST_MAX_HEADER);
	if (n > file_size - 8)
		return ck_fail(err, CK_E_SOURCE,
			       "%s: header length %llu runs past the end of the %llu-byte file",
			       what, (unsigned long long)n, (unsigned long long)file_size);
	*n_out = n;
	return 0;
}

int ck_st_parse_buffer(const unsigned char *buf, size_t len, const char *what,
		       struct ck_st_header *out, struct ck_err *err)
{
	memset(out, 0, sizeof *out);
	uint64_t n;
	if (check_prefix(buf, len, what, &n, err) < 0)
		return -1;
	return parse_header_json((const char *)buf + 8, n, len - 8 - n, what, out, err);
}

int ck_st_read_fd(int fd, uint64_t file_size, const char *what, struct ck_st_header *out,
		  struct ck_err *err)
{
	memset(out, 0, sizeof *out);
	unsigned char p8[8] = {0};
	uint64_t n;
	int r = file_size >= 8 ? ck_pread_full(fd, p8, 8, 0) : 0;
	if (r < 0)
		return ck_fail_sys(err, -r, "%s: cannot read header length", what);
	if (check_prefix(p8, file_size, what, &n, err) < 0)
		return -1;
	char *json = malloc(n + 1);
	if (!json)
		return ck_fail_sys(err, ENOMEM, "%s", what);
	if ((r = ck_pread_full(fd, json, n, 8)) < 0) {
		free(json);
		return ck_fail_sys(err, -r, "%s: cannot read header", what);
	}
	json[n] = '\0';
	r = parse_header_json(json, n, file_size - 8 - n, what, out, err);
	free(json);
	return r;
}
