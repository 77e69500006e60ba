/* ckptfs convert: write the target view as a safetensors checkpoint. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../ckpt/st_writer.h"
#include "../exec/convert.h"
#include "../exec/outdir.h"
#include "../kern/device.h"
#include "../plan/shard.h"
#include "../util/error.h"
#include "../util/jsonw.h"
#include "../view/gguf_view.h"
#include "cli.h"
#include "convert_dcp.h"
#include "interrupt.h"
#include "mpi_sync.h"
#include "opts.h"

/* Rank 0 of a group-sharded convert: model.safetensors.index.json for
 * every rank's file, from the same assignment every rank computed. */
static int write_group_index(const char *source, const struct ck_view_args *va, int64_t world,
			     const char *outdir, struct ck_err *err)
{
	struct ck_view_args whole = *va;
	whole.shard_groups = 0;
	whole.rank = -1;
	whole.world = 0;
	struct ck_view v;
	uint32_t *rank_of = NULL;
	if (ck_view_open(&v, source, &whole, err) < 0)
		return -1;
	int rc = -1;
	char *buf = NULL;
	size_t len = 0;
	if (ck_groups_assign(v.plan, world, &rank_of, err) < 0)
		goto out;
	const char **names = malloc((v.plan->n ? v.plan->n : 1) * sizeof *names);
	uint64_t *of = malloc((v.plan->n ? v.plan->n : 1) * sizeof *of);
	for (size_t i = 0; names && of && i < v.plan->n; i++)
		names[i] = v.plan->t[i].name, of[i] = (uint64_t)rank_of[v.plan->t[i].group] + 1;
	if (names && of)
		buf = ck_st_index_json(names, of, v.plan->n, (uint64_t)world, v.plan->total_bytes, &len);
	free(names);
	free(of);
	if (!buf) {
		ck_fail_sys(err, ENOMEM, "index");
		goto out;
	}
	rc = ck_write_file_atomic(outdir, "model.safetensors.index.json", buf, len, err);
out:
	free(buf);
	free(rank_of);
	ck_view_close(&v);
	return rc;
}

/* A rank whose dp coordinate is not 0 holds a copy of a dp-0 rank's shard:
 * only main replicas write (as Megatron saves). */
static int dp_replica(const char *mesh, int64_t rank)
{
	struct ck_mesh m;
	struct ck_err e;
	if (!mesh || ck_mesh_parse(mesh, &m, &e) < 0)
		return 0;
	for (int a = m.n - 1; a >= 0; a--) {
		if (!strcmp(m.name[a], "dp"))
			return rank % m.size[a] != 0;
		rank /= m.size[a];
	}
	return 0;
}

/* The files a group-sharded run of `world` processes writes together:
 * model-0000R-of-0000N.safetensors each, the index and config.json; or
 * with dcp __R_0.distcp each, .metadata (and torch_dist's two). */
static char **group_names(int64_t world, int dcp, int *n)
{
	*n = 0;
	char **names = calloc((size_t)world + 3, sizeof *names);
	if (!names)
		return NULL;
	for (int64_t r = 0; r < world; r++) {
		char buf[64];
		if (dcp)
			snprintf(buf, sizeof buf, "__%lld_0.distcp", (long long)r);
		else
			ck_st_shard_name(buf, sizeof buf, (uint64_t)r + 1, (uint64_t)world);
		if (!(names[(*n)++] = strdup(buf)))
			goto fail;
	}
	static const char *const st[] = {"model.safetensors.index.json", "config.json"},
				 *const dc[] = {".metadata", "metadata.json", "common.pt"};
	const char *const *more = dcp ? dc : st;
	size_t n_more = dcp == 2 ? 3 : dcp ? 1 : 2;
	for (size_t k = 0; k < n_more; k++)
		if (!(names[(*n)++] = strdup(more[k])))
			goto fail;
	return names;
fail:
	for (int k = 0; k < *n; k++)
		free(names[k]);
	free(names);
	return NULL;
}

static void free_names(char **names, int n)
{
	for (int k = 0; names && k < n; k++)
		free(names[k]);
	free(names);
}

enum {
	O_MAX_SHARD = 1, O_DTYPE, O_FORMAT, O_THREADS, O_NO_URING, O_ODIRECT,
	O_DEVICE, O_GPU_MEM, O_GPU_MIN, O_OVERWRITE, O_PROGRESS, O_QUIET
};

static const struct ck_cli_opt convert_opts[] = {
    {O_FORMAT, "--format", "safetensors|gguf[:TYPE]|dcp|torch_dist",
     "what to write (default safetensors; gguf: F32 F16 BF16 Q8_0, llama-quantize's mixes Q4_0 "
     "Q4_1 Q5_0 Q5_1 Q2_K Q3_K_S Q3_K_M Q3_K_L Q4_K_M Q4_K_S Q5_K_M Q5_K_S Q6_K IQ4_NL IQ4_XS "
     "MXFP4_MOE)"},
    {O_MAX_SHARD, "--max-shard-size", "SIZE",
     "shards of at most SIZE and their index (5GB, 500MiB)"},
    {O_DTYPE, "--dtype", "DTYPE", "cast floating-point targets (F32 F16 BF16 F8_E4M3 F8_E5M2)"},
    {O_OVERWRITE, "--overwrite", NULL, "replace a checkpoint already in OUTDIR"},
    {O_THREADS, "--threads", "N", "evaluator threads, 1..64 (default: one per core)"},
    {O_NO_URING, "--no-uring", NULL, "read with pread, not io_uring"},
    {O_ODIRECT, "--odirect", NULL,
     "read the source with O_DIRECT, past the page cache (a checkpoint read once from disk)"},
    {O_DEVICE, "--device", "cpu|cuda|cuda:N|auto", "where transforms run (default cpu)"},
    {O_GPU_MEM, "--gpu-mem", "SIZE", "device memory the CUDA backend may use"},
    {O_GPU_MIN, "--gpu-min", "SIZE", "reads from this size go to the GPU"},
    {O_PROGRESS, "--progress", NULL, "draw a progress bar (default on a terminal)"},
    {O_QUIET, "--quiet", NULL, "no progress bar"},
    {0, NULL, NULL, NULL},
};

const struct ck_cli_verb ck_verb_convert = {
	"convert", "SOURCE OUTDIR",
	"      write the target view as files: a safetensors checkpoint (config.json\n"
	"      beside it), model.gguf or a DCP directory; never over the source, never\n"
	"      mixed with an old checkpoint (--overwrite replaces it only on success)\n",
	convert_opts, CK_CLI_VIEW_ALL, ck_cli_gguf_opts, NULL};

struct convert_args {
	const char *source, *outdir, *dtype, *format;
	struct ck_gguf_opts gopt;
	struct ck_view_args va;
	struct ck_convert_opts o;
	int overwrite;
	struct ck_device dev;
};

static int size_arg(const char *name, const char *val, uint64_t *to, struct ck_err *err)
{
	if (ck_parse_size(val, to) < 0 || !*to)
		return ck_fail(err, CK_E_USAGE, "%s: not a size: %s", name, val);
	return 0;
}

/* One option of convert_opts. */
static int convert_opt(struct convert_args *c, int id, const char *val, struct ck_err *err)
{
	if (id >= CK_CLI_GGUF_PRE && id < CK_CLI_GGUF_END)
		return ck_cli_gguf_opt(id, val, &c->gopt, err) < 0 ? -1 : 0;
	switch (id) {
	case O_MAX_SHARD: return size_arg("--max-shard-size", val, &c->o.max_shard_size, err);
	case O_DTYPE: c->dtype = val; return 0;
	case O_FORMAT: c->format = val; return 0;
	case O_THREADS:
		c->o.threads = atoi(val);
		return c->o.threads < 1 || c->o.threads > 64
			       ? ck_fail(err, CK_E_USAGE, "--threads: 1..64")
			       : 0;
	case O_NO_URING: c->o.use_uring = 0; return 0;
	case O_ODIRECT: c->o.odirect = 1; return 0;
	case O_DEVICE: return ck_device_parse(val, &c->dev, err);
	case O_GPU_MEM: return size_arg("--gpu-mem", val, &c->dev.gpu_mem, err);
	case O_GPU_MIN:
		return ck_parse_size(val, &c->dev.gpu_min) < 0
			       ? ck_fail(err, CK_E_USAGE, "--gpu-min: not a size: %s", val)
			       : 0;
	case O_OVERWRITE: c->overwrite = 1; return 0;
	case O_PROGRESS: c->o.progress = 1; return 0;
	default: c->o.progress = 0; return 0; /* O_QUIET */
	}
}

static int convert_args(struct convert_args *c, int argc, char **argv, struct ck_err *err)
{
	memset(c, 0, sizeof *c);
	c->va.rank = -1;
	c->o.use_uring = 1;
	c->o.progress = isatty(2);
	ck_device_init(&c->dev);
	const char *val;
	for (int i = 1, id; (id = ck_cli_next(&ck_verb_convert, argc, argv, &i, &c->va, &val, err));) {
		if (id == CK_CLI_ERROR)
			return -1;
		if (id == CK_CLI_OPERAND && !c->source)
			c->source = val;
		else if (id == CK_CLI_OPERAND && !c->outdir)
			c->outdir = val;
		else if (id == CK_CLI_OPERAND)
			return ck_fail(err, CK_E_USAGE, "convert: too many arguments");
		else if (id > 0 && convert_opt(c, id, val, err) < 0)
			return -1;
	}
	if (!c->source || !c->outdir)
		return ck_cli_usage_error(&ck_verb_convert, err);
	return 0;
}

/* Options that do not go together, and the values parsed: *dt the --dtype
 * cast, *dcp 1 (dcp) or 2 (torch_dist), c->gopt the GGUF format. */
static int check_args(struct convert_args *c, enum ck_dtype *dt, int *dcp, struct ck_err *err)
{
	const struct ck_view_args *va = &c->va;
	if (c->dtype && !ck_dtype_is_castable_float(*dt = ck_dtype_parse_user(c->dtype)))
		return ck_fail(err, CK_E_USAGE,
			       "--dtype %s: must be F32, F16, BF16, F8_E4M3 or F8_E5M2 (any case, or "
			       "torch's float32, float16, bfloat16, float8_e4m3fn, float8_e5m2)",
			       c->dtype);
	const char *f = c->format;
	*dcp = f && !strcmp(f, "dcp") ? 1 : f && !strcmp(f, "torch_dist") ? 2 : 0;
	if (va->ranks && !*dcp)
		return ck_fail(err, CK_E_USAGE, "--ranks: one directory for several ranks is a DCP "
						"one (--format dcp|torch_dist); else use --rank");
	if (va->ranks && ck_mpi_launched())
		return ck_fail(err, CK_E_USAGE, "--ranks: one process writes every rank's files; run "
						"it without mpirun (or each rank with --rank)");
	if (va->ranks && strchr(c->outdir, '{'))
		return ck_fail(err, CK_E_USAGE, "--ranks: one directory for all the ranks, so OUTDIR "
						"takes no {rank} or {AXIS} placeholder");
	if (f && !*dcp && ck_gguf_parse_format(f, &c->gopt, err) < 0)
		return -1;
	if (*dcp && c->o.max_shard_size)
		return ck_fail(err, CK_E_USAGE, "--format %s: one DCP directory (no --max-shard-size)",
			       f);
	if (c->gopt.on && (va->mesh || va->shard_groups || c->dtype || c->o.max_shard_size))
		return ck_fail(err, CK_E_USAGE,
			       "--format gguf: one model.gguf (no --mesh, --shard-groups, --dtype or "
			       "--max-shard-size; the type goes after the colon: gguf:Q8_0)");
	if (!c->gopt.on && ck_gguf_opts_used(&c->gopt))
		return ck_fail(err, CK_E_USAGE, "the --gguf-* options go with --format gguf");
	if (va->shard_groups && c->o.max_shard_size)
		return ck_fail(err, CK_E_USAGE,
			       "--max-shard-size does not go with --shard-groups (one file per rank)");
	return 0;
}

/* Write the view in its format into stage: model.gguf, a DCP directory or
 * safetensors. The GPU opens last: every input error has been reported by
 * then. */
static int write_view(const struct ck_view *v, struct convert_args *c, int dcp,
		      struct ck_convert_opts *o, const char *stage, size_t *n_written,
		      struct ck_convert_stats *stats, struct ck_err *err)
{
	struct ck_gguf_view g;
	struct ck_dcp_out d;
	const struct ck_gguf_opts *gopt = &c->gopt;
	if (gopt->on && ck_gguf_view_open(v->cat, v->maps, v->n_maps, gopt, &g, err) < 0)
		return -1;
	if (dcp && ck_cli_dcp_make(v, dcp == 2, c->va.mesh || v->world ? v->rank : -1, &d, err) < 0)
		return -1;
	int lanes = o->threads > 0 ? o->threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
	char note[400];
	int rc = ck_device_open(&c->dev, lanes < 1 ? 1 : lanes > 64 ? 64 : lanes, &o->gpu, note,
				sizeof note, err);
	if (rc == 0 && note[0] && o->progress >= 0)
		fprintf(stderr, "ckptfs: %s\n", note);
	o->gpu_min = c->dev.gpu_min;
	if (rc == 0 && gopt->on) { /* model.gguf, or its gguf-split pieces */
		size_t n = ck_gguf_view_n_files(&g);
		struct ck_out_file *f = calloc(n, sizeof *f);
		rc = f ? 0 : ck_fail_sys(err, ENOMEM, "convert");
		for (size_t k = 0; k < n && f; k++)
			f[k] = (struct ck_out_file){ck_gguf_view_names(&g)[k],
						    &ck_gguf_view_files(&g)[k]};
		if (rc == 0)
			rc = ck_convert_files(g.plan, f, n, stage, o, stats, err);
		free(f);
	} else if (rc == 0 && dcp) { /* the data file, then .metadata */
		rc = ck_cli_dcp_write(v->plan, &d, dcp == 2, v->world > 0, stage, o, stats, err);
	} else if (rc == 0) {
		rc = ck_convert(v->plan, stage, o, stats, err);
	}
	*n_written = gopt->on ? g.plan->n + g.n_extra : dcp ? d.n_keys : v->plan->n;
	if (dcp && d.n_omitted && rc == 0)
		fprintf(stderr, "ckptfs: %zu tensors left out of the DCP directory (no torch storage "
				"type for their dtype), the first: %s\n",
			d.n_omitted, d.first_omitted);
	if (gopt->on)
		ck_gguf_view_free(&g);
	if (dcp)
		ck_dcp_out_free(&d);
	ck_gpu_close(o->gpu);
	o->gpu = NULL;
	return rc;
}

/* The output directory: never over the source, never mixed with an old
 * checkpoint (with --shard-groups, the files of every group are its own). */
struct output {
	struct ck_outdir od;
	char **own;
	int n_own;
};

static int begin_output(struct output *out, const char *outdir, const char *source,
			const struct ck_view *v, const struct ck_view_args *va, int overwrite, int dcp,
			struct ck_err *err)
{
	out->own = NULL;
	out->n_own = 0;
	if (va->shard_groups &&
	    !(out->own = group_names(v->world, dcp, &out->n_own)))
		return ck_fail_sys(err, ENOMEM, "convert");
	int r = 0;
	if (va->shard_groups && overwrite && !ck_mpi_launched())
		r = ck_fail(err, CK_E_USAGE,
			    "--overwrite with --shard-groups needs mpirun (the ranks must all "
			    "succeed before the old checkpoint goes)");
	if (r == 0 && (ck_outdir_check_source(outdir, source, v->cat, err) < 0 ||
		       ck_outdir_begin(&out->od, outdir, overwrite, va->shard_groups,
				       (const char *const *)out->own, out->n_own, err) < 0))
		r = -1;
	if (r < 0)
		free_names(out->own, out->n_own);
	return r;
}

/* Say what a killed convert into the same place left (ck_outdir_stale):
 * the space it holds is hidden, and after --overwrite's swap was cut short
 * it may hold the user's subdirectories. */
static void warn_stale(const struct ck_outdir *od)
{
	struct ck_outdir_stale s;
	ck_outdir_stale(od, &s);
	if (!s.n)
		return;
	char shown[PATH_MAX + 64], more[64] = "";
	ck_escape_controls(s.path, shown, sizeof shown);
	if (s.n > 1)
		snprintf(more, sizeof more, " (and %d more)", s.n - 1);
	char out[PATH_MAX + 64];
	ck_escape_controls(od->final, out, sizeof out);
	if (s.foreign)
		fprintf(stderr,
			"ckptfs: warning: %s%s: left by a convert that was killed (process %ld is "
			"gone; %.1f MB in all); it holds %d entr%s of %s, moved there for "
			"--overwrite's swap: move %s back into %s before removing it\n",
			shown, more, s.pid, (double)s.bytes / 1e6, s.foreign,
			s.foreign == 1 ? "y" : "ies", out, s.foreign == 1 ? "it" : "them", out);
	else
		fprintf(stderr,
			"ckptfs: warning: %s%s: left by a convert that was killed (process %ld is "
			"gone; %.1f MB of partial output in all): remove %s to free the space\n",
			shown, more, s.pid, (double)s.bytes / 1e6, s.n == 1 ? "it" : "them");
}

/* Put the output in place if every rank succeeded (all), else take it
 * back: rank 0 of a group-sharded convert writes the index, or DCP's
 * .metadata (without MPI it does so after its own part: check every rank's
 * exit status). */
static int end_output(struct output *out, int rc, int all, const char *source,
		      const struct ck_view *v, const struct ck_view_args *va, int overwrite,
		      int dcp, enum ck_dtype cast, struct ck_err *err)
{
	if (rc == 0 && all != 0 && va->shard_groups && v->rank == 0) {
		if (overwrite) /* the old checkpoint's other files go before the new index */
			rc = ck_outdir_remove_others(&out->od, (const char *const *)out->own,
						     out->n_own, err);
		if (rc == 0 && dcp)
			rc = ck_cli_dcp_group_metadata(source, va, v->world, cast, dcp == 2,
						       out->od.final, err);
		else if (rc == 0)
			rc = write_group_index(source, va, v->world, out->od.final, err);
	}
	if (rc == 0 && all != 0 && !va->shard_groups)
		rc = ck_outdir_commit(&out->od, err);
	if (rc < 0 || all == 0)
		ck_outdir_abort(&out->od);
	free_names(out->own, out->n_own);
	return rc;
}

/* --dtype: the view's plan and, with --ranks, each rank's alike (the DCP
 * files are laid out over those). */
static int cast_view(struct ck_view *v, enum ck_dtype dt, struct ck_err *err)
{
	for (size_t k = 0; k < v->n_ranks; k++)
		if (ck_plan_cast_all(v->rank_plans[k], dt, err) < 0)
			return -1;
	return ck_plan_cast_all(v->plan, dt, err);
}

/* *synced: whether the MPI agreement (ck_mpi_all_ok) has been made */
static int convert_main(int argc, char **argv, int *synced)
{
	struct convert_args ca;
	char outbuf[4096];
	struct ck_err err;
	if (convert_args(&ca, argc, argv, &err) < 0)
		return ck_cli_report(&err);
	const char *source = ca.source, *outdir = ca.outdir, *dtype = ca.dtype;
	struct ck_view_args va = ca.va;
	struct ck_convert_opts o = ca.o;
	int overwrite = ca.overwrite;
	enum ck_dtype dt = CK_DT_INVALID;
	int dcp = 0;
	if (check_args(&ca, &dt, &dcp, &err) < 0)
		return ck_cli_report(&err);
	struct ck_view v;
	if (ck_view_open(&v, source, &va, &err) < 0 ||
	    ck_subst_rank(outdir, va.mesh, v.rank, outbuf, sizeof outbuf, &err) < 0) {
		if (v.cat)
			ck_view_close(&v);
		return ck_cli_report(&err);
	}
	outdir = outbuf;
	char fname[64];
	if (va.shard_groups) {
		ck_st_shard_name(fname, sizeof fname, (uint64_t)v.rank + 1, (uint64_t)v.world);
		o.file_name = fname;
	}
	if (va.mesh && !v.n_ranks && dp_replica(va.mesh, v.rank)) {
		fprintf(stderr, "ckptfs: rank %lld is a dp replica: only main replicas (dp=0) write\n",
			(long long)v.rank);
		ck_view_close(&v);
		*synced = 1;
		return ck_mpi_all_ok(1) == 0 ? 1 : 0;
	}
	if (dtype && cast_view(&v, dt, &err) < 0) {
		ck_view_close(&v);
		return ck_cli_report(&err);
	}
	/* the source's config.json travels with the converted weights, verbatim */
	if (v.cat->config_raw && (!va.shard_groups || v.rank == 0)) { /* not --set's object */
		o.config = v.cat->config_raw;
		o.config_len = v.cat->config_len;
	}
	/* from here a signal takes the partial output back (interrupt.h) */
	struct ck_interrupt intr;
	if (ck_interrupt_start(&intr) == 0)
		o.cancel = &intr.sig;
	struct output out;
	if (begin_output(&out, outdir, source, &v, &va, overwrite, dcp, &err) < 0) {
		ck_interrupt_stop(&intr);
		ck_view_close(&v);
		return ck_cli_report(&err);
	}
	warn_stale(&out.od);
	o.shown_dir = out.od.final; /* messages name OUTDIR, not the staging directory */
	struct ck_convert_stats stats = {0};
	size_t n_written = 0;
	int rc = write_view(&v, &ca, dcp, &o, out.od.stage, &n_written, &stats, &err);
	if (rc == 0 && atomic_load(&intr.sig)) /* after the last chunk's check */
		rc = ck_fail(&err, CK_E_SYS, "convert: interrupted");
	/* under mpirun every rank learns whether all succeeded; only then does
	 * any rank put its output in place */
	int all = ck_mpi_all_ok(rc == 0);
	*synced = 1;
	rc = end_output(&out, rc, all, source, &v, &va, overwrite, dcp, dtype ? dt : CK_DT_INVALID,
			&err);
	int sig = ck_interrupt_stop(&intr);
	if (rc < 0 && sig) {
		char name[32], shown[600];
		ck_escape_controls(outdir, shown, sizeof shown);
		fprintf(stderr,
			"ckptfs: %s: interrupted by %s: nothing written (the partial output is "
			"removed)\n",
			shown, ck_interrupt_name(sig, name, sizeof name));
		ck_view_close(&v);
		return 128 + sig;
	}
	if (rc < 0) {
		ck_view_close(&v);
		return ck_cli_report(&err);
	}
	if (all == 0) {
		ck_view_close(&v);
		fprintf(stderr, "ckptfs: another rank failed%s\n",
			va.shard_groups ? ": no index written" : ": nothing written");
		return 1;
	}
	char shown[600];
	ck_escape_controls(out.od.final, shown, sizeof shown);
	fprintf(stderr, "ckptfs: wrote %zu tensors, %llu bytes in %d file%s to %s (read %llu source "
			"bytes)\n",
		n_written, (unsigned long long)stats.bytes_written, stats.n_files,
		stats.n_files == 1 ? "" : "s", shown, (unsigned long long)stats.source_bytes_read);
	if (stats.odirect_buffered)
		fprintf(stderr, "ckptfs: --odirect: %ld source file%s on a file system without "
				"O_DIRECT: read through the page cache\n",
			stats.odirect_buffered, stats.odirect_buffered == 1 ? " is" : "s are");
	ck_view_close(&v);
	return 0;
}

int ck_cmd_convert(int argc, char **argv)
{
	return ck_mpi_run_verb(convert_main, argc, argv);
}
