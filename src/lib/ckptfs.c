/* libckptfs: the public API over view/ (open, serve, read). Everything the
 * FUSE daemon shows is built by the same code; this file only checks the
 * caller's arguments, turns errors into ckptfs_error and bounds the cache
 * memory one read holds. */
#include "ckptfs.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckptfs_config.h"
#include "../view/open.h"
#include "../view/serve.h"

struct ckptfs {
	struct ck_view view;
	struct ck_served srv;
	struct ck_tree *tree; /* srv's one tree */
	uint64_t batch;	      /* most cache bytes one read holds at once */
	char *source;
	/* the files: the root's, dcp/'s (or torch_dist/'s) as "dcp/NAME", then
	 * "npy/NAME.npy" per target (n_laid_out: the first two kinds) */
	char **names;
	size_t n_files, n_laid_out;
	/* where the last large read of each file, then of each target, ended
	 * (0: none): a small read starting there continues a sequential
	 * reader's large reads and is evaluated like them (sequel_of) */
	_Atomic uint64_t *seq_end;
};

/* Whether a read of len bytes at off of file or target k continues a large
 * read (see ck_served_read's `large`), and where the next would. Readers on
 * several threads race here harmlessly: either answer gives the same bytes. */
static int sequel_of(ckptfs *h, size_t k, uint64_t off, size_t len)
{
	int sequel = off && atomic_load_explicit(&h->seq_end[k], memory_order_relaxed) == off;
	if (sequel || len >= CK_STREAM_MIN)
		atomic_store_explicit(&h->seq_end[k], off + len, memory_order_relaxed);
	return sequel;
}

static int list_files(ckptfs *h)
{
	const struct ck_tree *t = h->tree;
	h->n_laid_out = t->n_roots + t->n_sub;
	h->n_files = h->n_laid_out + t->plan->n;
	if (!(h->names = calloc(h->n_files ? h->n_files : 1, sizeof *h->names)) ||
	    !(h->seq_end = calloc(h->n_files + t->plan->n + 1, sizeof *h->seq_end)))
		return -1;
	for (size_t k = 0; k < h->n_files; k++) {
		const char *n = k < t->n_roots		? t->roots[k].name
				: k < h->n_laid_out ? t->sub[k - t->n_roots].name
						    : t->npy_names[k - h->n_laid_out];
		const char *dir = k < t->n_roots ? "" : k < h->n_laid_out ? t->sub_dir : "npy";
		size_t len = strlen(dir) + strlen(n) + 2;
		if (!(h->names[k] = malloc(len)))
			return -1;
		snprintf(h->names[k], len, "%s%s%s", dir, *dir ? "/" : "", n);
	}
	return 0;
}

/* File k's layout: a laid-out file's, or npy/'s built into *tmp (free it
 * with ck_vfile_free when *built). NULL: no memory. */
static const struct ck_vfile *layout_of(const ckptfs *h, size_t k, struct ck_vfile *tmp, int *built)
{
	const struct ck_tree *t = h->tree;
	*built = k >= h->n_laid_out;
	if (k < t->n_roots)
		return t->roots[k].v;
	if (k < h->n_laid_out)
		return t->sub[k - t->n_roots].v;
	return ck_tree_npy(t, (uint32_t)(k - h->n_laid_out), tmp) < 0 ? NULL : tmp;
}

/* Enum values are the CLI's exit statuses; keep them in step. */
_Static_assert((int)CKPTFS_E_SYSTEM == (int)CK_E_SYS && (int)CKPTFS_E_USAGE == (int)CK_E_USAGE &&
		       (int)CKPTFS_E_SOURCE == (int)CK_E_SOURCE &&
		       (int)CKPTFS_E_MAPPING == (int)CK_E_MAPPING,
	       "ckptfs_code and ck_errkind differ");

static void put_err(struct ckptfs_error *out, const struct ck_err *e)
{
	if (!out)
		return;
	out->code = (int)e->kind;
	out->sys_errno = e->sys_errno;
	snprintf(out->message, sizeof out->message, "%s", e->msg);
}

static int usage(struct ckptfs_error *out, const char *fmt, const char *arg)
{
	struct ck_err e;
	ck_fail(&e, CK_E_USAGE, fmt, arg);
	put_err(out, &e);
	return -1;
}

const char *ckptfs_version(void)
{
	return CKPTFS_VERSION;
}

/* The options that choose the view (mapping, mesh, rank, shard_groups,
 * world_size, state, set): 1 taken, 0 not one of these, -1 bad. */
static int view_option(struct ck_view_args *a, const char *opt, struct ck_err *e)
{
	const char *val = strchr(opt, '=');
	size_t klen = val ? (size_t)(val - opt) : strlen(opt);
	val = val ? val + 1 : NULL;
#define KEY(k) (klen == strlen(k) && !strncmp(opt, k, klen))
	if (KEY("shard_groups")) {
		if (val)
			return ck_fail(e, CK_E_USAGE, "bad option %s (a flag takes no value)", opt);
		a->shard_groups = 1;
		return 1;
	}
	if (!KEY("mapping") && !KEY("mesh") && !KEY("rank") && !KEY("world_size") &&
	    !KEY("state") && !KEY("set"))
		return KEY("ranks") ? ck_fail(e, CK_E_USAGE, "option ranks: a handle serves one "
							     "rank; open one per rank")
				    : 0;
	if (!val || !*val)
		return ck_fail(e, CK_E_USAGE, "bad option %s (needs a value)", opt);
	if (KEY("mapping")) {
		if (a->n_maps == CK_MAX_MAPPINGS)
			return ck_fail(e, CK_E_USAGE, "at most %d mapping options", CK_MAX_MAPPINGS);
		a->maps[a->n_maps++] = (char *)val;
	} else if (KEY("mesh")) {
		a->mesh = val;
	} else if (KEY("set")) {
		if (ck_view_add_set(a, val, e) < 0)
			return -1;
	} else if (KEY("state")) {
		if ((a->state = ck_state_parse(val)) < 0)
			return ck_fail(e, CK_E_USAGE, "bad option %s (params, optimizer or all)", opt);
	} else {
		char *end;
		long long v = strtoll(val, &end, 10);
		int world = KEY("world_size");
		if (*end || v < (world ? 1 : 0) || v > (1 << 24))
			return ck_fail(e, CK_E_USAGE, "bad option %s (a %s)", opt,
				       world ? "world size of 1 or more" : "rank of 0 or more");
		*(world ? &a->world : &a->rank) = v;
	}
#undef KEY
	return 1;
}

int ckptfs_open(ckptfs **out, const char *source, const char *const *options,
		struct ckptfs_error *err)
{
	if (!out)
		return usage(err, "ckptfs_open: %s is NULL", "out");
	*out = NULL;
	if (!source)
		return usage(err, "ckptfs_open: %s is NULL", "source");
	struct ck_err e;
	struct ck_view_args va = {.rank = -1};
	struct ck_serve_opts so;
	ck_serve_opts_init(&so);
	for (size_t i = 0; options && options[i]; i++) {
		int r = view_option(&va, options[i], &e);
		if (r == 0)
			r = ck_serve_option(&so, "", options[i], &e);
		if (r == 0)
			ck_fail(&e, CK_E_USAGE, "unknown option %s", options[i]);
		if (r != 1) {
			put_err(err, &e);
			return -1;
		}
	}
	if (ck_serve_opts_finish(&so, &e) < 0) {
		put_err(err, &e);
		return -1;
	}
	ckptfs *h = calloc(1, sizeof *h);
	if (!h || !(h->source = strdup(source))) {
		free(h);
		ck_fail_sys(&e, ENOMEM, "ckptfs_open");
		put_err(err, &e);
		return -1;
	}
	if (ck_view_open(&h->view, source, &va, &e) < 0) {
		free(h->source);
		free(h);
		put_err(err, &e);
		return -1;
	}
	if (ck_serve_cast_view(&so, &h->view, &e) < 0 ||
	    ck_served_prepare(&h->srv, &h->view, va.mesh != NULL, h->source, &so, &e) < 0 ||
	    ck_served_start(&h->srv, &so, NULL, NULL, &e) < 0) {
		put_err(err, &e);
		ckptfs_close(h);
		return -1;
	}
	h->tree = &h->srv.trees[0];
	if (list_files(h) < 0) {
		ck_fail_sys(&e, ENOMEM, "ckptfs_open");
		put_err(err, &e);
		ckptfs_close(h);
		return -1;
	}
	/* a read holds at most a quarter of the cache before its bytes are
	 * copied out, so readers on other threads keep room */
	h->batch = so.cache.cache_size / 4;
	if (h->batch > (64u << 20))
		h->batch = 64u << 20;
	*out = h;
	return 0;
}

void ckptfs_close(ckptfs *h)
{
	if (!h)
		return;
	ck_served_close(&h->srv);
	ck_view_close(&h->view);
	for (size_t k = 0; h->names && k < h->n_files; k++)
		free(h->names[k]);
	free(h->names);
	free((void *)h->seq_end);
	free(h->source);
	free(h);
}

size_t ckptfs_count(const ckptfs *h)
{
	return h ? h->tree->plan->n : 0;
}

long ckptfs_find(const ckptfs *h, const char *name)
{
	uint32_t i;
	if (!h || !name || ck_strmap_get(&h->tree->plan->by_name, name, &i) != 0)
		return -1;
	return (long)i;
}

static const struct ck_target *target(const ckptfs *h, size_t i)
{
	return h && i < h->tree->plan->n ? &h->tree->plan->t[i] : NULL;
}

const char *ckptfs_tensor_name(const ckptfs *h, size_t i)
{
	const struct ck_target *t = target(h, i);
	return t ? t->name : NULL;
}

const char *ckptfs_tensor_dtype(const ckptfs *h, size_t i)
{
	const struct ck_target *t = target(h, i);
	return t ? ck_dtype_name(t->v.dtype) : NULL;
}

int ckptfs_tensor_ndim(const ckptfs *h, size_t i)
{
	const struct ck_target *t = target(h, i);
	return t ? t->v.ndim : -1;
}

const int64_t *ckptfs_tensor_shape(const ckptfs *h, size_t i)
{
	const struct ck_target *t = target(h, i);
	return t ? t->v.shape : NULL;
}

uint64_t ckptfs_tensor_bytes(const ckptfs *h, size_t i)
{
	const struct ck_target *t = target(h, i);
	return t ? t->nbytes : 0;
}

long ckptfs_tensor_group(const ckptfs *h, size_t i)
{
	const struct ck_target *t = target(h, i);
	return t ? (long)t->group : -1;
}

/* The length of a read of [off, off+len) from something of size bytes. */
static size_t clip(uint64_t size, uint64_t off, size_t len)
{
	return off >= size ? 0 : (size - off < len ? (size_t)(size - off) : len);
}

int64_t ckptfs_read(ckptfs *h, size_t i, uint64_t off, void *buf, size_t len,
		    struct ckptfs_error *err)
{
	const struct ck_target *t = target(h, i);
	if (!t)
		return usage(err, "ckptfs_read: %s", h ? "no such target" : "handle is NULL");
	size_t n = clip(t->nbytes, off, len);
	if (n && !buf)
		return usage(err, "ckptfs_read: %s is NULL", "buf");
	struct ck_span sp = {ck_tree_cache_target(h->tree, (uint32_t)i), off, n, 0, NULL};
	struct ck_err e;
	int large = sequel_of(h, h->n_files + i, off, n);
	if (n && ck_served_read(&h->srv, &sp, 1, buf, h->batch, large, &e) < 0) {
		put_err(err, &e);
		return -1;
	}
	return (int64_t)n;
}

size_t ckptfs_file_count(const ckptfs *h)
{
	return h ? h->n_files : 0;
}

long ckptfs_file_find(const ckptfs *h, const char *name)
{
	uint32_t i;
	if (h && name && !strncmp(name, "npy/", 4))
		return ck_strmap_get(&h->tree->npy_by_name, name + 4, &i) == 0
			       ? (long)(h->n_laid_out + i)
			       : -1;
	for (size_t k = 0; h && name && k < h->n_laid_out; k++)
		if (!strcmp(h->names[k], name))
			return (long)k;
	return -1;
}

const char *ckptfs_file_name(const ckptfs *h, size_t k)
{
	return h && k < h->n_files ? h->names[k] : NULL;
}

uint64_t ckptfs_file_size(const ckptfs *h, size_t k)
{
	if (!h || k >= h->n_files)
		return 0;
	struct ck_vfile tmp;
	int built;
	const struct ck_vfile *vf = layout_of(h, k, &tmp, &built);
	uint64_t size = vf ? vf->size : 0;
	if (vf && built)
		ck_vfile_free(&tmp);
	return size;
}

int64_t ckptfs_file_read(ckptfs *h, size_t k, uint64_t off, void *buf, size_t len,
			 struct ckptfs_error *err)
{
	if (!h || k >= h->n_files)
		return usage(err, "ckptfs_file_read: %s", h ? "no such file" : "handle is NULL");
	struct ck_err e;
	struct ck_vfile tmp;
	int built;
	const struct ck_vfile *vf = layout_of(h, k, &tmp, &built);
	size_t n = vf ? clip(vf->size, off, len) : 0, ns = 0;
	struct ck_span *sp = NULL;
	if (vf && n && !buf) {
		if (built)
			ck_vfile_free(&tmp);
		return usage(err, "ckptfs_file_read: %s is NULL", "buf");
	}
	if (vf) {
		ns = ck_vfile_spans(vf, off, n, NULL, 0);
		if ((sp = malloc((ns ? ns : 1) * sizeof *sp)))
			ck_vfile_spans(vf, off, n, sp, ns);
	}
	/* literal spans point into the layout: free it after the read */
	int r = sp ? ck_served_read(&h->srv, sp, ns, buf, h->batch, sequel_of(h, k, off, n), &e)
		   : ck_fail_sys(&e, ENOMEM, "ckptfs_file_read");
	free(sp);
	if (vf && built)
		ck_vfile_free(&tmp);
	if (r < 0) {
		ck_err_prefix(&e, "%s", h->names[k]);
		put_err(err, &e);
		return -1;
	}
	return (int64_t)n;
}

const char *ckptfs_plan_json(const ckptfs *h, size_t *len)
{
	const char *json = NULL;
	size_t n = 0;
	if (h)
		ck_tree_plan_json(h->tree, &json, &n); /* NULL when out of memory */
	if (len)
		*len = n;
	return json;
}

void ckptfs_get_stats(ckptfs *h, struct ckptfs_stats *s, size_t size)
{
	if (!h || !s)
		return;
	struct ck_cache_stats cs;
	ck_cache_get_stats(h->srv.cache, &cs);
	struct ckptfs_stats all = {
		.source_bytes_read = cs.source_bytes_read,
		.read_requests = cs.read_requests,
		.groups_evaluated = cs.groups_evaluated,
		.regions_evaluated = cs.regions_evaluated,
		.cache_hits = cs.cache_hits,
		.cache_misses = cs.cache_misses,
		.cache_bytes = cs.cache_bytes,
		.cache_evictions = cs.cache_evictions,
		.direct_reads = cs.direct_reads,
		.gpu_reads = cs.gpu_reads,
		.gpu_bytes = cs.gpu_bytes,
		.streamed_reads = cs.streamed_reads,
		.cache_dropped = cs.cache_dropped,
		.cache_recycled = cs.cache_recycled,
	};
	memcpy(s, &all, size < sizeof all ? size : sizeof all);
}
