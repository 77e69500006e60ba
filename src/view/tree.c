#include "../view/tree.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "../exec/cache.h"
#include "../plan/npy.h"
#include "../util/jsonw.h"
#include "../util/parallel.h"
#include "names.h"

static int add_root(struct ck_tree *fs, const char *name, const struct ck_vfile *v)
{
	struct ck_tree_file *nr = realloc(fs->roots, (fs->n_roots + 1) * sizeof *nr);
	if (!nr)
		return -1;
	fs->roots = nr;
	if (!(nr[fs->n_roots].name = strdup(name)))
		return -1;
	nr[fs->n_roots++].v = v;
	return 0;
}

/* The files of the mount's root: model.safetensors, pytorch_model.bin
 * (both built already), and the optional shards and per-rank parts. */
static int build_roots(struct ck_tree *fs, const struct ck_tree_opts *o, struct ck_err *err)
{
	if (add_root(fs, "model.safetensors", &fs->flat.v) < 0 ||
	    add_root(fs, "pytorch_model.bin", &fs->zip.v) < 0)
		return ck_fail_sys(err, ENOMEM, "mount");
	for (size_t k = 0; k < o->n_extras; k++)
		if (add_root(fs, o->extra_names[k], &o->extras[k]) < 0)
			return ck_fail_sys(err, ENOMEM, "mount");
	if (fs->plan->cat->config_raw) { /* the source's bytes, verbatim (not --set's) */
		const struct ck_catalog *cat = fs->plan->cat;
		if (ck_vfile_lit(&fs->config, cat->config_raw, cat->config_len) < 0 ||
		    add_root(fs, "config.json", &fs->config) < 0)
			return ck_fail_sys(err, ENOMEM, "mount");
	}
	if (o->max_shard_size) {
		if (ck_flat_set_build(fs->plan, o->max_shard_size, NULL, &fs->shards, err) < 0)
			return -1;
		if (add_root(fs, "model.safetensors.index.json", &fs->shards.index) < 0)
			return ck_fail_sys(err, ENOMEM, "mount");
		for (size_t k = 0; k < fs->shards.n; k++)
			if (add_root(fs, fs->shards.names[k], &fs->shards.files[k].v) < 0)
				return ck_fail_sys(err, ENOMEM, "mount");
	}
	if (fs->rank >= 0) {
		if (ck_flat_split_build(fs->plan, o->part_size, &fs->parts, &fs->n_parts, err) < 0)
			return -1;
		for (size_t k = 0; k < fs->n_parts; k++) {
			char name[128];
			snprintf(name, sizeof name, "model-rank-%" PRId64 "-part-%zu.safetensors",
				 fs->rank, k);
			if (add_root(fs, name, &fs->parts[k].v) < 0)
				return ck_fail_sys(err, ENOMEM, "mount");
		}
	}
	return 0;
}

static char *build_plan_json(const struct ck_tree *fs, size_t *len)
{
	const struct ck_plan *p = fs->plan;
	char *buf = NULL;
	FILE *f = open_memstream(&buf, len);
	if (!f)
		return NULL;
	fprintf(f, "{\"source\": ");
	ck_json_fput_str(f, fs->plan_source);
	fprintf(f, ", \"format\": \"%s\", \"flat_header_bytes\": %" PRIu64 ", \"targets\": [",
		p->cat->format, fs->flat.header_len);
	for (size_t i = 0; i < p->n; i++) {
		const struct ck_target *t = &p->t[i];
		fprintf(f, "%s\n  {\"name\": ", i ? "," : "");
		ck_json_fput_str(f, t->name);
		fprintf(f, ", \"file\": ");
		char path[300];
		snprintf(path, sizeof path, "tensors/%s", fs->names[i]);
		ck_json_fput_str(f, path);
		fprintf(f, ", \"dtype\": \"%s\", \"shape\": [", ck_dtype_name(t->v.dtype));
		for (int d = 0; d < t->v.ndim; d++)
			fprintf(f, "%s%" PRId64, d ? ", " : "", t->v.shape[d]);
		int direct = !fs->plan_no_direct && ck_plan_direct_offset(fs->plan, (uint32_t)i) >= 0;
		int streamed = !direct && !fs->plan_no_stream && ck_plan_streamable(fs->plan, (uint32_t)i);
		fprintf(f, "], \"bytes\": %" PRIu64 ", \"group\": %" PRIu32 ", \"flat_offset\": %" PRIu64
			   ", \"direct\": %s, \"streamed\": %s}",
			t->nbytes, t->group, fs->flat.off[i], direct ? "true" : "false",
			streamed ? "true" : "false");
	}
	fprintf(f, "\n], \"pytorch_model_bin\": {\"crc32\": %s, \"omitted\": [",
		fs->plan_zip_crc ? "true" : "false");
	for (size_t k = 0; k < fs->zip.n_omitted; k++) {
		const struct ck_target *t = &p->t[fs->zip.omitted[k]];
		fprintf(f, "%s\n  {\"name\": ", k ? "," : "");
		ck_json_fput_str(f, t->name);
		fprintf(f, ", \"reason\": \"torch 1.13 has no typed storage for %s\"}",
			ck_dtype_name(t->v.dtype));
	}
	fprintf(f, "]}, \"files\": [");
	for (size_t k = 0; k < fs->n_roots; k++) {
		fprintf(f, "%s{\"name\": ", k ? ", " : "");
		ck_json_fput_str(f, fs->roots[k].name);
		fprintf(f, ", \"bytes\": %" PRIu64 "}", fs->roots[k].v->size);
	}
	fprintf(f, "\n], \"groups\": [");
	for (size_t g = 0; g < p->n_groups; g++) {
		const struct ck_group *gr = &p->g[g];
		fprintf(f, "%s\n  {\"id\": %zu, \"in_bytes\": %" PRIu64 ", \"out_bytes\": %" PRIu64
			   ", \"sources\": [",
			g ? "," : "", g, gr->in_bytes, gr->out_bytes);
		for (size_t k = 0; k < gr->n_sources; k++) {
			const struct ck_catalog_entry *e = &p->cat->entries[gr->sources[k]];
			fprintf(f, "%s{\"name\": ", k ? ", " : "");
			ck_json_fput_str(f, e->t.name);
			fprintf(f, ", \"file\": ");
			ck_json_fput_str(f, p->cat->files[e->file].name);
			fprintf(f, ", \"offset\": %" PRIu64 ", \"bytes\": %" PRIu64 "}", e->t.offset,
				e->t.nbytes);
		}
		fprintf(f, "]}");
	}
	fprintf(f, "\n]}\n");
	return fclose(f) == 0 ? buf : (free(buf), NULL);
}

static const char *name_at(const void *names, size_t i)
{
	return ((char *const *)names)[i];
}

/* Every target's file names, in one pool (a 92,000-target view made two
 * allocations of 256 bytes for each), then the two name maps, their slots
 * prefetched a few names ahead (each a cache miss otherwise). */
static int build_names(struct ck_tree *v, struct ck_err *err)
{
	const struct ck_plan *plan = v->plan;
	v->names = calloc(plan->n ? plan->n : 1, sizeof *v->names);
	v->npy_names = calloc(plan->n ? plan->n : 1, sizeof *v->npy_names);
	if (!v->names || !v->npy_names || ck_strmap_init(&v->by_name, plan->n) < 0 ||
	    ck_strmap_init(&v->npy_by_name, plan->n) < 0)
		return ck_fail_sys(err, ENOMEM, "mount");
	for (size_t i = 0; i < plan->n; i++) {
		char name[CK_NAME_MAX + 1];
		size_t len = ck_escape_name(plan->t[i].name, CK_NAME_MAX, name);
		if (!(v->names[i] = ck_strpool_add(&v->name_pool, name, len)))
			return ck_fail_sys(err, ENOMEM, "mount");
		/* the .npy name: the same unless it must be cut shorter */
		if (len > CK_NAME_MAX - 4)
			len = ck_escape_name(plan->t[i].name, CK_NAME_MAX - 4, name);
		memcpy(name + len, ".npy", 5);
		if (!(v->npy_names[i] = ck_strpool_add(&v->name_pool, name, len + 4)))
			return ck_fail_sys(err, ENOMEM, "mount");
	}
	struct ck_strmap_window wn, wp;
	for (size_t i = 0, n = plan->n; i < n; i++) {
		uint32_t other, hp, hn, k = (uint32_t)i;
		hp = ck_strmap_ahead(&v->npy_by_name, &wp, i, n, name_at, v->npy_names);
		hn = ck_strmap_ahead(&v->by_name, &wn, i, n, name_at, v->names);
		int rp = ck_strmap_put_h(&v->npy_by_name, v->npy_names[i], hp, k, NULL);
		int rn = rp ? 0 : ck_strmap_put_h(&v->by_name, v->names[i], hn, k, &other);
		if (rp < 0 || rn < 0)
			return ck_fail_sys(err, ENOMEM, "mount");
		if (rp == 1)
			return ck_fail(err, CK_E_MAPPING, "two keys map to one npy file name \"%s\"",
				       v->npy_names[i]);
		if (rn == 1)
			return ck_fail(err, CK_E_MAPPING,
				       "keys \"%s\" and \"%s\" map to one file name \"%s\"",
				       plan->t[other].name, plan->t[i].name, v->names[i]);
	}
	return 0;
}

/* The three builds over every target, each on its own (together 220 ms on
 * one core for the 671B preset's 92,000 targets): the tree's file names,
 * model.safetensors and pytorch_model.bin. */
struct files_job {
	struct ck_tree *v;
	struct ck_err err[3];
	int rc[3];
};

static void files_task(void *ctx, size_t i)
{
	struct files_job *j = ctx;
	struct ck_tree *v = j->v;
	if (i == 0)
		j->rc[0] = ck_torchzip_build(v->plan, "pytorch_model", &v->zip, &j->err[0]);
	else if (i == 1)
		j->rc[1] = ck_flat_build(v->plan, NULL, 0, &v->flat, &j->err[1]);
	else
		j->rc[2] = build_names(v, &j->err[2]);
}

#define FILES_PARALLEL_MIN 4096 /* fewer targets: a thread's start costs more */

static int build_files(struct ck_tree *v, int threads, struct ck_err *err)
{
	struct files_job j = {.v = v};
	if (!threads)
		threads = v->plan->n >= FILES_PARALLEL_MIN ? ck_cpu_count() : 1;
	ck_parallel_for(3, threads, files_task, &j);
	static const int order[] = {1, 0, 2}; /* the order a serial build met errors in */
	for (int k = 0; k < 3; k++)
		if (j.rc[order[k]] < 0) {
			*err = j.err[order[k]];
			return -1;
		}
	return 0;
}

/* dcp/'s layout over the tree's targets, put in the cache's numbering */
static int layout_dcp(struct ck_tree *v, struct ck_err *err)
{
	if (ck_dcp_out_build(v->plan, v->sub_torch_dist, v->rank, &v->dcp, err) < 0)
		return -1;
	const struct ck_vfile *files[] = {&v->dcp.metadata, &v->dcp.data[0], &v->dcp.megatron_json,
					  &v->dcp.common};
	for (size_t k = 0; k < v->n_sub; k++)
		v->sub[k].v = files[k];
	ck_vfile_renumber(&v->dcp.data[0], v->cache_idx);
	return 0;
}

/* dcp/'s names (known from the rank alone), and its layout unless lazy */
static int build_dcp(struct ck_tree *v, const struct ck_tree_opts *o, struct ck_err *err)
{
	v->sub_torch_dist = o->dcp == 2;
	v->sub_dir = v->sub_torch_dist ? "torch_dist" : "dcp";
	char data[32];
	snprintf(data, sizeof data, "__%lld_0.distcp", (long long)(v->rank < 0 ? 0 : v->rank));
	const char *names[] = {".metadata", data, "metadata.json", "common.pt"};
	for (size_t k = 0; k < (v->sub_torch_dist ? 4u : 2u); k++, v->n_sub++)
		if (!(v->sub[k].name = strdup(names[k])))
			return ck_fail_sys(err, ENOMEM, "%s/", v->sub_dir);
	if (o->dcp_lazy) {
		v->sub_lazy = 1;
		return pthread_mutex_init(&v->sub_mu, NULL) == 0 ? 0 : ck_fail_sys(err, EAGAIN, "dcp/");
	}
	return layout_dcp(v, err);
}

int ck_tree_sub_ready(const struct ck_tree *cv, struct ck_err *err)
{
	if (!cv->sub_lazy)
		return 0;
	struct ck_tree *v = (struct ck_tree *)cv; /* a tree made mutable, for dcp/ alone */
	pthread_mutex_lock(&v->sub_mu);
	if (v->sub_state == 0)
		v->sub_state = layout_dcp(v, &v->sub_err) < 0 ? -1 : 1;
	int rc = v->sub_state < 0 ? -1 : 0;
	if (rc < 0 && err)
		*err = v->sub_err;
	pthread_mutex_unlock(&v->sub_mu);
	return rc;
}

int ck_tree_plan_json(const struct ck_tree *cv, const char **json, size_t *len)
{
	struct ck_tree *v = (struct ck_tree *)cv; /* made mutable for plan.json alone */
	pthread_mutex_lock(&v->plan_mu);
	if (!v->plan_json)
		v->plan_json = build_plan_json(v, &v->plan_json_len);
	*json = v->plan_json;
	*len = v->plan_json ? v->plan_json_len : 0;
	pthread_mutex_unlock(&v->plan_mu);
	return *json ? 0 : -ENOMEM;
}

int ck_tree_build(struct ck_tree *v, const struct ck_tree_opts *o, struct ck_err *err)
{
	if (pthread_mutex_init(&v->plan_mu, NULL) != 0)
		return ck_fail_sys(err, ENOMEM, "mount");
	v->plan_mu_ok = 1;
	v->plan_zip_crc = o->zip_crc;
	v->plan_no_direct = o->no_direct;
	v->plan_no_stream = o->no_stream;
	if (!(v->plan_source = strdup(o->source ? o->source : "")))
		return ck_fail_sys(err, ENOMEM, "mount");
	if (build_files(v, o->threads, err) < 0 || build_roots(v, o, err) < 0 ||
	    (o->dcp && build_dcp(v, o, err) < 0))
		return -1;
	/* the files are laid out over the tree's targets; the cache reads the
	 * union plan's (plan.json, built on first use, reads the tree's
	 * targets, not the files' spans) */
	ck_vfile_renumber(&v->flat.v, v->cache_idx);
	ck_vfile_renumber(&v->zip.v, v->cache_idx);
	for (size_t k = 0; k < v->shards.n; k++)
		ck_vfile_renumber(&v->shards.files[k].v, v->cache_idx);
	for (size_t k = 0; k < v->n_parts; k++)
		ck_vfile_renumber(&v->parts[k].v, v->cache_idx);
	return 0;
}

int ck_tree_npy(const struct ck_tree *v, uint32_t i, struct ck_vfile *out)
{
	const struct ck_target *t = &v->plan->t[i];
	int wide = v->npy_wide && v->npy_wide[i] != UINT32_MAX;
	char head[1024]; /* 8 dims of 19 digits fit */
	size_t hl = ck_npy_header(wide ? CK_DT_F32 : t->v.dtype, t->v.ndim, t->v.shape, head,
				  sizeof head);
	uint64_t bytes = wide ? t->nbytes / ck_dtype_size(t->v.dtype) * 4 : t->nbytes;
	memset(out, 0, sizeof *out);
	if (ck_vfile_lit(out, head, hl) < 0 ||
	    ck_vfile_target(out, wide ? v->npy_wide[i] : ck_tree_cache_target(v, i), 0, bytes) < 0) {
		ck_vfile_free(out);
		return -ENOMEM;
	}
	return 0;
}

void ck_tree_free(struct ck_tree *v)
{
	free(v->names);
	ck_strmap_free(&v->by_name);
	free(v->npy_names);
	ck_strpool_free(&v->name_pool);
	ck_strmap_free(&v->npy_by_name);
	ck_flat_free(&v->flat);
	ck_torchzip_free(&v->zip);
	ck_flat_set_free(&v->shards);
	for (size_t k = 0; k < v->n_parts; k++)
		ck_flat_free(&v->parts[k]);
	free(v->parts);
	ck_vfile_free(&v->config);
	for (size_t k = 0; k < v->n_roots; k++)
		free(v->roots[k].name);
	free(v->roots);
	free(v->plan_json);
	free(v->plan_source);
	if (v->plan_mu_ok)
		pthread_mutex_destroy(&v->plan_mu);
	for (size_t k = 0; k < v->n_sub; k++)
		free(v->sub[k].name);
	ck_dcp_out_free(&v->dcp);
	if (v->sub_lazy)
		pthread_mutex_destroy(&v->sub_mu);
}
