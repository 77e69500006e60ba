#include "torchbin.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../util/fileio.h"
#include "../util/strmap.h"
#include "leftout.h"
#include "pickle.h"
#include "zipread.h"

#define MAX_PICKLE (1u << 30)
#define MAX_NEST 64

int ck_is_zip(const unsigned char *p)
{
	return p[0] == 'P' && p[1] == 'K' && p[2] == 3 && p[3] == 4;
}

const char *ck_torch_storage(enum ck_dtype dt)
{
	switch (dt) {
	case CK_DT_F64: return "DoubleStorage";
	case CK_DT_F32: return "FloatStorage";
	case CK_DT_F16: return "HalfStorage";
	case CK_DT_BF16: return "BFloat16Storage";
	case CK_DT_I64: return "LongStorage";
	case CK_DT_I32: return "IntStorage";
	case CK_DT_I16: return "ShortStorage";
	case CK_DT_I8: return "CharStorage";
	case CK_DT_U8: return "ByteStorage";
	case CK_DT_BOOL: return "BoolStorage";
	case CK_DT_C64: return "ComplexFloatStorage";
	default: return NULL;
	}
}

static enum ck_dtype storage_dtype(const char *name)
{
	for (int dt = 1; dt < CK_DT_COUNT; dt++) {
		const char *s = ck_torch_storage((enum ck_dtype)dt);
		if (s && !strcmp(s, name))
			return (enum ck_dtype)dt;
	}
	return CK_DT_INVALID;
}

struct ctx {
	int fd;
	const char *what;
	struct ck_zip zip;
	char *dir; /* the archive's top-level directory */
	struct ck_file_tensors *h;
	size_t cap;
	struct ck_leftout *lo;
	/* dict items the walk may visit: shared dicts (one object reached
	 * through the memo from several places) are walked each time, so a
	 * chain of them would expand exponentially without a bound */
	size_t visits_left;
	struct ck_strmap seen;
	struct ck_err *err;
	/* a legacy (pre-1.6, non-zip) file: storage key -> its run of bytes */
	int legacy;
	struct ck_strmap runs;
	uint64_t *run_off, *run_bytes;
};

static int int_tuple(const struct ck_pk *t, int64_t *out, int *n)
{
	if (!t || t->k != CK_PK_TUPLE || t->n > CK_MAX_DIMS)
		return -1;
	for (size_t i = 0; i < t->n; i++) {
		if (t->items[i]->k != CK_PK_INT || t->items[i]->i < 0)
			return -1;
		out[i] = t->items[i]->i;
	}
	*n = (int)t->n;
	return 0;
}

/* Where the bytes of storage skey (snumel elements of es bytes) start: its
 * zip record, or its run in a legacy stream. */
static int storage_at(struct ctx *c, const char *key, const char *skey, uint64_t snumel,
		      size_t es, uint64_t *data)
{
	uint64_t need;
	if (__builtin_mul_overflow(snumel, (uint64_t)es, &need))
		return ck_fail(c->err, CK_E_SOURCE, "%s: tensor \"%s\": storage size overflows",
			       c->what, key);
	if (c->legacy) {
		uint32_t k;
		if (ck_strmap_get(&c->runs, skey, &k) < 0)
			return ck_fail(c->err, CK_E_SOURCE,
				       "%s: tensor \"%s\": storage %s is not in the file's storage list",
				       c->what, key, skey);
		if (c->run_bytes[k] < need)
			return ck_fail(c->err, CK_E_SOURCE,
				       "%s: tensor \"%s\": storage %s holds %llu bytes, it needs %llu",
				       c->what, key, skey, (unsigned long long)c->run_bytes[k],
				       (unsigned long long)need);
		*data = c->run_off[k];
		return 0;
	}
	char rec[4200];
	snprintf(rec, sizeof rec, "%s/data/%s", c->dir, skey);
	const struct ck_zip_entry *e = ck_zip_find(&c->zip, rec);
	if (!e)
		return ck_fail(c->err, CK_E_SOURCE, "%s: tensor \"%s\": record %s is missing",
			       c->what, key, rec);
	if (e->size < need)
		return ck_fail(c->err, CK_E_SOURCE,
			       "%s: tensor \"%s\": record %s holds %llu bytes, its storage needs "
			       "%llu",
			       c->what, key, rec, (unsigned long long)e->size,
			       (unsigned long long)need);
	return ck_zip_data_offset(&c->zip, c->fd, e, c->what, data, c->err);
}

/* _rebuild_tensor_v2(storage, storage_offset, size, stride, ...) */
static int add_tensor(struct ctx *c, const char *key, const struct ck_pk *args)
{
	const struct ck_pk *pid = args->n >= 4 ? args->items[0] : NULL;
	const struct ck_pk *t = pid && pid->k == CK_PK_PERSID ? pid->items[0] : NULL;
	if (!t || t->k != CK_PK_TUPLE || t->n < 5 || t->items[0]->k != CK_PK_STR ||
	    strcmp(t->items[0]->s, "storage") || t->items[1]->k != CK_PK_GLOBAL ||
	    t->items[2]->k != CK_PK_STR || t->items[4]->k != CK_PK_INT || t->items[4]->i < 0 ||
	    args->items[1]->k != CK_PK_INT || args->items[1]->i < 0)
		return ck_fail(c->err, CK_E_SOURCE,
			       "%s: tensor \"%s\": not a ('storage', type, key, location, numel) "
			       "reference",
			       c->what, key);
	const char *sname = t->items[1]->s2, *skey = t->items[2]->s;
	enum ck_dtype dt = storage_dtype(sname);
	if (dt == CK_DT_INVALID)
		return ck_fail(c->err, CK_E_SOURCE, "%s: tensor \"%s\": storage type %s.%s is not "
						    "supported",
			       c->what, key, t->items[1]->s, sname);
	struct ck_tensor_info ti;
	memset(&ti, 0, sizeof ti);
	ti.dtype = dt;
	int nd, ns, strided = 0;
	int64_t stride[CK_MAX_DIMS];
	if (int_tuple(args->items[2], ti.shape, &nd) < 0 ||
	    int_tuple(args->items[3], stride, &ns) < 0 || nd != ns)
		return ck_fail(c->err, CK_E_SOURCE,
			       "%s: tensor \"%s\": size and stride are not tuples of as many "
			       "non-negative integers (at most %d)",
			       c->what, key, CK_MAX_DIMS);
	ti.ndim = nd;
	size_t es = ck_dtype_size(dt);
	if (ck_shape_numel(ti.shape, nd, &ti.numel) < 0 ||
	    ck_shape_bytes(ti.shape, nd, dt, &ti.nbytes) < 0)
		return ck_fail(c->err, CK_E_SOURCE, "%s: tensor \"%s\": shape product overflows",
			       c->what, key);
	/* the view must stay inside its storage: offset + sum (size-1)*stride */
	uint64_t snumel = (uint64_t)t->items[4]->i, last = (uint64_t)args->items[1]->i;
	int bad = 0;
	int64_t expect = 1;
	for (int d = nd - 1; d >= 0; d--) {
		if (ti.shape[d] > 1 && stride[d] != expect)
			strided = 1;
		expect *= ti.shape[d] ? ti.shape[d] : 1;
		uint64_t span;
		bad |= ti.shape[d] > 0 &&
		       (__builtin_mul_overflow((uint64_t)(ti.shape[d] - 1), (uint64_t)stride[d],
					       &span) ||
			__builtin_add_overflow(last, span, &last));
	}
	if (ti.numel && (bad || last >= snumel))
		return ck_fail(c->err, CK_E_SOURCE,
			       "%s: tensor \"%s\": view reaches element %llu of a %llu-element "
			       "storage",
			       c->what, key, (unsigned long long)last, (unsigned long long)snumel);
	uint64_t data;
	if (storage_at(c, key, skey, snumel, es, &data) < 0)
		return -1;
	ti.offset = data + (uint64_t)args->items[1]->i * es;
	if (c->h->n_tensors == c->cap) {
		size_t cap = c->cap ? 2 * c->cap : 64;
		struct ck_tensor_info *nt = realloc(c->h->tensors, cap * sizeof *nt);
		if (!nt)
			return ck_fail_sys(c->err, ENOMEM, "%s", c->what);
		c->h->tensors = nt;
		c->cap = cap;
	}
	if (!(ti.name = strdup(key)) ||
	    (strided && !(ti.stride = malloc((size_t)(nd ? nd : 1) * sizeof *ti.stride)))) {
		free(ti.name);
		return ck_fail_sys(c->err, ENOMEM, "%s", c->what);
	}
	if (strided)
		memcpy(ti.stride, stride, (size_t)nd * sizeof *stride);
	c->h->tensors[c->h->n_tensors++] = ti;
	if (ck_strmap_put(&c->seen, ti.name, 0, NULL) == 1)
		return ck_fail(c->err, CK_E_SOURCE, "%s: duplicate key \"%s\"", c->what, key);
	return 0;
}

static int is_tensor_call(const struct ck_pk *v)
{
	return v->k == CK_PK_CALL &&
	       ck_pk_is_global(v->items[0], "torch._utils", "_rebuild_tensor_v2");
}

/* What a left-out value is, for `inspect`: "int", "call of os.system", ... */
static void describe(const struct ck_pk *v, char *buf, size_t n)
{
	static const char *const kind[] = {"None", "bool",  "int",    "float",  "str",
					   "bytes", "tuple", "list",  "dict",   "global",
					   "call",  "persistent id"};
	const struct ck_pk *fn = v->k == CK_PK_CALL ? v->items[0] : v;
	if (fn->k == CK_PK_GLOBAL)
		snprintf(buf, n, "%s %s.%s", v->k == CK_PK_CALL ? "call of" : "global", fn->s,
			 fn->s2);
	else
		snprintf(buf, n, "%s", kind[v->k]);
}

static int left_out(struct ctx *c, const char *key, const struct ck_pk *v)
{
	char what[600];
	if (v)
		describe(v, what, sizeof what);
	else
		snprintf(what, sizeof what, "a dict item whose key is not a string");
	if (c->lo && ck_leftout_add(c->lo, key, what) < 0)
		return ck_fail_sys(c->err, ENOMEM, "%s", c->what);
	return 0;
}

static int walk(struct ctx *c, const struct ck_pk *d, const char *prefix, int depth)
{
	if (depth > MAX_NEST)
		return ck_fail(c->err, CK_E_SOURCE, "%s: dicts nested deeper than %d", c->what,
			       MAX_NEST);
	for (size_t i = 0; i + 1 < d->n; i += 2) {
		const struct ck_pk *k = d->items[i], *v = d->items[i + 1];
		if (c->visits_left-- == 0)
			return ck_fail(c->err, CK_E_SOURCE,
				       "%s: dicts shared through the pickle's memo expand to more "
				       "entries than the pickle holds (a hostile pickle)",
				       c->what);
		if (k->k != CK_PK_STR) {
			if (left_out(c, prefix, NULL) < 0)
				return -1;
			continue;
		}
		size_t len = strlen(prefix) + k->len + 2;
		char *key = malloc(len);
		if (!key)
			return ck_fail_sys(c->err, ENOMEM, "%s", c->what);
		snprintf(key, len, "%s%s%s", prefix, *prefix ? "." : "", k->s);
		/* nn.Parameter: _rebuild_parameter(tensor, requires_grad, hooks) */
		if (v->k == CK_PK_CALL && ck_pk_is_global(v->items[0], "torch._utils",
							  "_rebuild_parameter") &&
		    v->items[1]->n >= 1)
			v = v->items[1]->items[0];
		int r = 0;
		if (is_tensor_call(v))
			r = add_tensor(c, key, v->items[1]);
		else if (v->k == CK_PK_DICT)
			r = walk(c, v, key, depth + 1);
		else
			r = left_out(c, key, v);
		free(key);
		if (r < 0)
			return -1;
	}
	return 0;
}

int ck_torchbin_read_fd(int fd, uint64_t size, const char *what, struct ck_file_tensors *out,
			struct ck_leftout *lo, struct ck_err *err)
{
	return ck_torchbin_read_at(fd, 0, size, what, NULL, out, lo, err);
}

int ck_torchbin_read_at(int fd, uint64_t base, uint64_t size, const char *what,
			const char *single_name, struct ck_file_tensors *out, struct ck_leftout *lo,
			struct ck_err *err)
{
	memset(out, 0, sizeof *out);
	struct ctx c = {.fd = fd, .what = what, .h = out, .lo = lo, .err = err};
	struct ck_pickle pk = {0};
	unsigned char *buf = NULL;
	int rc = -1;
	if (ck_zip_open(fd, base, size, what, &c.zip, err) < 0)
		return -1;
	if (!c.zip.n) {
		ck_fail(err, CK_E_SOURCE, "%s: empty zip archive", what);
		goto out;
	}
	/* the top-level directory: the first entry's name up to its first '/' */
	const char *slash = strchr(c.zip.e[0].name, '/');
	if (!slash) {
		ck_fail(err, CK_E_SOURCE, "%s: not a torch.save archive (no top-level directory)",
			what);
		goto out;
	}
	if (!(c.dir = strndup(c.zip.e[0].name, (size_t)(slash - c.zip.e[0].name)))) {
		ck_fail_sys(err, ENOMEM, "%s", what);
		goto out;
	}
	char name[4200];
	snprintf(name, sizeof name, "%s/data.pkl", c.dir);
	const struct ck_zip_entry *pe = ck_zip_find(&c.zip, name);
	uint64_t off;
	if (!pe) {
		ck_fail(err, CK_E_SOURCE, "%s: not a torch.save archive (no %s)", what, name);
		goto out;
	}
	if (pe->size > MAX_PICKLE) {
		ck_fail(err, CK_E_SOURCE, "%s: data.pkl is larger than %u bytes", what, MAX_PICKLE);
		goto out;
	}
	if (ck_zip_data_offset(&c.zip, fd, pe, what, &off, err) < 0)
		goto out;
	if (!(buf = malloc(pe->size ? pe->size : 1))) {
		ck_fail_sys(err, ENOMEM, "%s", what);
		goto out;
	}
	int r = ck_pread_full(fd, buf, pe->size, off);
	if (r < 0) {
		ck_fail_sys(err, -r, "%s: cannot read data.pkl", what);
		goto out;
	}
	char pwhat[4300];
	snprintf(pwhat, sizeof pwhat, "%s: data.pkl", what);
	if (ck_pickle_parse(buf, pe->size, pwhat, &pk, err) < 0)
		goto out;
	if (ck_strmap_init(&c.seen, pk.root->n / 2 + 1) < 0) {
		ck_fail_sys(err, ENOMEM, "%s", what);
		goto out;
	}
	if (single_name && is_tensor_call(pk.root)) {
		rc = add_tensor(&c, single_name, pk.root->items[1]);
		goto out;
	}
	if (pk.root->k != CK_PK_DICT) {
		ck_fail(err, CK_E_SOURCE, "%s: data.pkl does not hold a dict of tensors", what);
		goto out;
	}
	/* each node's items once, and again for legitimate sharing (a dict
	 * saved under two names), but not exponentially */
	c.visits_left = 4 * pk.n_nodes + 4096;
	rc = walk(&c, pk.root, "", 0);
out:
	if (rc < 0)
		ck_file_tensors_free(out);
	ck_strmap_free(&c.seen);
	ck_pickle_free(&pk);
	free(buf);
	free(c.dir);
	ck_zip_free(&c.zip);
	return rc;
}

/* ---- legacy torch.save (before 1.6, or _use_new_zipfile_serialization=False) ----
 * Back to back: pickle(MAGIC_NUMBER), pickle(1001), pickle(sys_info),
 * the object pickle (tensors refer to storages by persistent id
 * ('storage', type, key, location, numel, view_metadata)), pickle(sorted
 * storage keys); then, for each key in that order, its element count as a
 * little-endian int64 and its bytes. */

static const unsigned char LEGACY_MAGIC[] = {0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20,
					     0x6a, 0xa8, 0x50, 0x19, 0x2e};

int ck_is_torch_legacy(const unsigned char *p, size_t n)
{
	return n >= 2 + sizeof LEGACY_MAGIC && p[0] == 0x80 && p[1] >= 2 && p[1] <= 5 &&
	       !memcmp(p + 2, LEGACY_MAGIC, sizeof LEGACY_MAGIC);
}

struct elsizes {
	struct ck_strmap map; /* storage key -> element size */
	const char *conflict, *view;
	int oom;
};

static void note_storage(const struct ck_pk *n, void *arg)
{
	struct elsizes *es = arg;
	const struct ck_pk *t = n->k == CK_PK_PERSID ? n->items[0] : NULL;
	if (!t || t->k != CK_PK_TUPLE || t->n < 5 || t->items[0]->k != CK_PK_STR ||
	    strcmp(t->items[0]->s, "storage") || t->items[1]->k != CK_PK_GLOBAL ||
	    t->items[2]->k != CK_PK_STR)
		return;
	if (t->n > 5 && t->items[5]->k != CK_PK_NONE)
		es->view = t->items[2]->s; /* a storage view (torch < 1.0) */
	uint32_t size = (uint32_t)ck_dtype_size(storage_dtype(t->items[1]->s2)), prev;
	int r = ck_strmap_put(&es->map, t->items[2]->s, size, &prev);
	if (r < 0)
		es->oom = 1;
	else if (r == 1 && prev != size)
		es->conflict = t->items[2]->s;
}

/* The storages' runs after the pickles, from the sorted key list. */
static int legacy_runs(struct ctx *c, const struct ck_pickle *obj, const struct ck_pk *keys,
		       uint64_t pos, uint64_t size)
{
	struct elsizes es = {0};
	int rc = -1;
	if (keys->k != CK_PK_LIST || ck_strmap_init(&es.map, keys->n + 1) < 0 ||
	    ck_strmap_init(&c->runs, keys->n + 1) < 0 ||
	    !(c->run_off = calloc(keys->n + 1, sizeof *c->run_off)) ||
	    !(c->run_bytes = calloc(keys->n + 1, sizeof *c->run_bytes))) {
		if (keys->k != CK_PK_LIST)
			ck_fail(c->err, CK_E_SOURCE, "%s: the storage key list is not a list",
				c->what);
		else
			ck_fail_sys(c->err, ENOMEM, "%s", c->what);
		goto out;
	}
	ck_pickle_each(obj, note_storage, &es);
	if (es.oom || es.conflict || es.view) {
		if (es.oom)
			ck_fail_sys(c->err, ENOMEM, "%s", c->what);
		else
			ck_fail(c->err, CK_E_SOURCE,
				"%s: storage %s %s", c->what, es.conflict ? es.conflict : es.view,
				es.conflict ? "is referred to with two element types"
					    : "is a legacy storage view (torch < 1.0), not supported");
		goto out;
	}
	for (size_t k = 0; k < keys->n; k++) {
		const struct ck_pk *key = keys->items[k];
		uint32_t elsize;
		unsigned char num[8];
		if (key->k != CK_PK_STR || ck_strmap_get(&es.map, key->s, &elsize) < 0 || !elsize) {
			ck_fail(c->err, CK_E_SOURCE,
				"%s: storage list entry %zu is not a storage a tensor refers to", c->what,
				k);
			goto out;
		}
		uint64_t numel = 0, bytes;
		if (size - pos < 8 || ck_pread_full(c->fd, num, 8, pos) < 0) {
			ck_fail(c->err, CK_E_SOURCE, "%s: storage %s: the file ends before it", c->what,
				key->s);
			goto out;
		}
		for (int b = 7; b >= 0; b--)
			numel = numel << 8 | num[b];
		pos += 8;
		if (__builtin_mul_overflow(numel, (uint64_t)elsize, &bytes) || bytes > size - pos) {
			ck_fail(c->err, CK_E_SOURCE,
				"%s: storage %s: %llu elements run past the end of the file", c->what,
				key->s, (unsigned long long)numel);
			goto out;
		}
		c->run_off[k] = pos;
		c->run_bytes[k] = bytes;
		if (ck_strmap_put(&c->runs, key->s, (uint32_t)k, NULL) != 0) {
			ck_fail(c->err, CK_E_SOURCE, "%s: storage %s is listed twice", c->what, key->s);
			goto out;
		}
		pos += bytes;
	}
	rc = 0;
out:
	ck_strmap_free(&es.map);
	return rc;
}

/* The five pickles from the start of buf; pk[3] is the object, pk[4] the keys. */
static int legacy_pickles(const unsigned char *buf, size_t len, const char *what,
			  struct ck_pickle pk[5], size_t *end, struct ck_err *err)
{
	size_t pos = 0, used;
	for (int i = 0; i < 5; i++) {
		char pw[4300];
		static const char *const part[] = {"magic number", "protocol version", "system info",
						   "object", "storage key list"};
		snprintf(pw, sizeof pw, "%s: legacy torch.save %s", what, part[i]);
		if (i == 0) { /* an integer wider than the reader's: compared as bytes */
			pos = 2 + sizeof LEGACY_MAGIC;
			continue;
		}
		if (ck_pickle_parse_prefix(buf + pos, len - pos, pw, &pk[i], &used, err) < 0)
			return -1;
		pos += used;
		if (i == 1 && (pk[1].root->k != CK_PK_INT || pk[1].root->i != 1001))
			return ck_fail(err, CK_E_SOURCE,
				       "%s: legacy torch.save protocol version is not 1001", what);
	}
	*end = pos;
	return 0;
}

int ck_torchbin_read_legacy(int fd, uint64_t size, const char *what, struct ck_file_tensors *out,
			    struct ck_leftout *lo, struct ck_err *err)
{
	memset(out, 0, sizeof *out);
	struct ctx c = {.fd = fd, .what = what, .h = out, .lo = lo, .err = err, .legacy = 1};
	struct ck_pickle pk[5];
	memset(pk, 0, sizeof pk);
	unsigned char *buf = NULL;
	int rc = -1;
	size_t end = 0;
	/* the pickles come first and are small beside the data: read a prefix,
	 * more if they do not fit in it */
	uint64_t cap = size < MAX_PICKLE ? size : MAX_PICKLE;
	for (uint64_t n = cap < (16u << 20) ? cap : (16u << 20);; n = n * 8 < cap ? n * 8 : cap) {
		free(buf);
		for (int i = 0; i < 5; i++)
			ck_pickle_free(&pk[i]);
		if (!(buf = malloc(n ? n : 1))) {
			ck_fail_sys(err, ENOMEM, "%s", what);
			goto out;
		}
		int r = ck_pread_full(fd, buf, n, 0);
		if (r < 0) {
			ck_fail_sys(err, -r, "%s: cannot read", what);
			goto out;
		}
		if (legacy_pickles(buf, n, what, pk, &end, err) == 0)
			break;
		if (n == cap)
			goto out;
	}
	if (legacy_runs(&c, &pk[3], pk[4].root, end, size) < 0 ||
	    ck_strmap_init(&c.seen, 64) < 0)
		goto out;
	if (pk[3].root->k != CK_PK_DICT) {
		ck_fail(err, CK_E_SOURCE, "%s: the legacy torch.save object is not a dict of tensors",
			what);
		goto out;
	}
	c.visits_left = 4 * pk[3].n_nodes + 4096;
	rc = walk(&c, pk[3].root, "", 0);
out:
	if (rc < 0)
		ck_file_tensors_free(out);
	ck_strmap_free(&c.seen);
	ck_strmap_free(&c.runs);
	free(c.run_off);
	free(c.run_bytes);
	for (int i = 0; i < 5; i++)
		ck_pickle_free(&pk[i]);
	free(buf);
	return rc;
}
