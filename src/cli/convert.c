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
#include "../util/jsonw.h"
#include "../util/error.h"
#include "../plan/dcp_out.h"
#include "../view/gguf_view.h"
#include "cli.h"
#include "mpi_sync.h"

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

/* The files a group-sharded run of `world` processes writes together. */
static char **group_names(int64_t world, int *n)
{
	*n = 0;
	char **names = calloc((size_t)world + 2, sizeof *names);
	if (!names)
		return NULL;
	for (int64_t r = 0; r < world; r++) {
		char buf[64];
		ck_st_shard_name(buf, sizeof buf, (uint64_t)r + 1, (uint64_t)world);
		if (!(names[(*n)++] = strdup(buf)))
			goto fail;
	}
	if (!(names[(*n)++] = strdup("model.safetensors.index.json")) ||
	    !(names[(*n)++] = strdup("config.json")))
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

/* *synced: whether the MPI agreement (ck_mpi_all_ok) has been made */
static int convert_main(int argc, char **argv, int *synced)
{
	const char *source = NULL, *outdir = NULL, *dtype = NULL, *format = NULL;
	struct ck_gguf_opts gopt = {0};
	struct ck_view_args va = {.rank = -1};
	char outbuf[4096];
	int r;
	struct ck_convert_opts o = {.use_uring = 1, .progress = isatty(2)};
	int overwrite = 0;
	struct ck_device dev;
	ck_device_init(&dev);
	struct ck_err err;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		int has = i + 1 < argc;
		static const char *const valued[] = {"--max-shard-size", "--dtype", "--threads",
						     "--device", "--gpu-mem", "--gpu-min", "--format",
						     "--gguf-pre", "--gguf-vocab"};
		for (size_t k = 0; !has && k < sizeof valued / sizeof *valued; k++)
			if (!strcmp(a, valued[k]))
				return ck_cli_report(
					(ck_fail(&err, CK_E_USAGE, "%s needs a value", a), &err));
		if ((r = ck_view_arg(&va, argc, argv, &i, &err)) != 0) {
			if (r < 0)
				return ck_cli_report(&err);
		} else if (!strcmp(a, "--max-shard-size") && has) {
			if (ck_parse_size(argv[++i], &o.max_shard_size) < 0 || !o.max_shard_size)
				return ck_cli_report((ck_fail(&err, CK_E_USAGE,
							      "--max-shard-size: not a size: %s",
							      argv[i]),
						      &err));
		} else if (!strcmp(a, "--dtype") && has) {
			dtype = argv[++i];
		} else if (!strcmp(a, "--format") && has) {
			format = argv[++i];
		} else if (!strcmp(a, "--gguf-pre") && has) {
			gopt.pre = argv[++i];
		} else if (!strcmp(a, "--gguf-vocab") && has) {
			if (strcmp(argv[++i], "none"))
				return ck_cli_report((ck_fail(&err, CK_E_USAGE, "--gguf-vocab: only none "
										"(placeholder tokens)"),
						      &err));
			gopt.vocab_none = 1;
		} else if (!strcmp(a, "--threads") && has) {
			o.threads = atoi(argv[++i]);
			if (o.threads < 1 || o.threads > 64)
				return ck_cli_report(
					(ck_fail(&err, CK_E_USAGE, "--threads: 1..64"), &err));
		} else if (!strcmp(a, "--no-uring")) {
			o.use_uring = 0;
		} else if (!strcmp(a, "--device") && has) {
			if (ck_device_parse(argv[++i], &dev, &err) < 0)
				return ck_cli_report(&err);
		} else if ((!strcmp(a, "--gpu-mem") || !strcmp(a, "--gpu-min")) && has) {
			uint64_t *to = a[6] == 'e' ? &dev.gpu_mem : &dev.gpu_min;
			if (ck_parse_size(argv[++i], to) < 0 || (to == &dev.gpu_mem && !*to))
				return ck_cli_report((ck_fail(&err, CK_E_USAGE, "%s: not a size: %s",
							      a, argv[i]),
						      &err));
		} else if (!strcmp(a, "--overwrite")) {
			overwrite = 1;
		} else if (!strcmp(a, "--progress")) {
			o.progress = 1;
		} else if (!strcmp(a, "--quiet")) {
			o.progress = 0;
		} else if (a[0] == '-' && a[1]) {
			return ck_cli_report(
				(ck_fail(&err, CK_E_USAGE, "convert: unknown option %s", a), &err));
		} else if (!source) {
			source = a;
		} else if (!outdir) {
			outdir = a;
		} else {
			return ck_cli_report(
				(ck_fail(&err, CK_E_USAGE, "convert: too many arguments"), &err));
		}
	}
	if (!source || !outdir)
		return ck_cli_report((ck_fail(&err, CK_E_USAGE,
					      "usage: ckptfs convert SOURCE OUTDIR [--mapping MAP]... "
					      "[--max-shard-size SIZE] [--dtype DTYPE] [--overwrite] [--threads N] "
					      "[--device cpu|cuda|cuda:N|auto] [--mesh AXES --rank R | "
					      "--shard-groups] [--state params|optimizer|all] "
					      "[--format safetensors|gguf[:TYPE]|dcp|torch_dist]"),
				      &err));
	enum ck_dtype dt = CK_DT_INVALID;
	if (dtype && !ck_dtype_is_castable_float(dt = ck_dtype_parse_user(dtype)))
		return ck_cli_report((ck_fail(&err, CK_E_USAGE,
					      "--dtype %s: must be F32, F16, BF16, F8_E4M3 or F8_E5M2 "
					      "(any case, or torch's float32, float16, bfloat16, "
					      "float8_e4m3fn, float8_e5m2)",
					      dtype),
				      &err));
	if (va.ranks)
		return ck_cli_report((ck_fail(&err, CK_E_USAGE, "--ranks is for mount (use --rank)"),
				      &err));
	int dcp = format && !strcmp(format, "dcp") ? 1 : format && !strcmp(format, "torch_dist") ? 2 : 0;
	if (format && !dcp && ck_gguf_parse_format(format, &gopt, &err) < 0)
		return ck_cli_report(&err);
	if (dcp && (va.shard_groups || o.max_shard_size))
		return ck_cli_report((ck_fail(&err, CK_E_USAGE,
					      "--format %s: one DCP directory (no --shard-groups or "
					      "--max-shard-size)",
					      format),
				      &err));
	if (gopt.on && (va.mesh || va.shard_groups || dtype || o.max_shard_size))
		return ck_cli_report((ck_fail(&err, CK_E_USAGE,
					      "--format gguf: one model.gguf (no --mesh, "
					      "--shard-groups, --dtype or --max-shard-size; the type "
					      "goes after the colon: gguf:Q8_0)"),
				      &err));
	if (!gopt.on && (gopt.pre || gopt.vocab_none))
		return ck_cli_report((ck_fail(&err, CK_E_USAGE,
					      "--gguf-pre and --gguf-vocab go with --format gguf"),
				      &err));
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
		if (o.max_shard_size) {
			ck_view_close(&v);
			return ck_cli_report((ck_fail(&err, CK_E_USAGE, "--max-shard-size does not go "
								       "with --shard-groups (one file "
								       "per rank)"),
					      &err));
		}
		ck_st_shard_name(fname, sizeof fname, (uint64_t)v.rank + 1, (uint64_t)v.world);
		o.file_name = fname;
	}
	if (va.mesh && dp_replica(va.mesh, v.rank)) {
		fprintf(stderr, "ckptfs: rank %lld is a dp replica: only main replicas (dp=0) write\n",
			(long long)v.rank);
		ck_view_close(&v);
		*synced = 1;
		return ck_mpi_all_ok(1) == 0 ? 1 : 0;
	}
	if (dtype && ck_plan_cast_all(v.plan, dt, &err) < 0) {
		ck_view_close(&v);
		return ck_cli_report(&err);
	}
	/* the source's config.json travels with the converted weights, verbatim */
	if (v.cat->config_raw && (!va.shard_groups || v.rank == 0)) { /* not --set's object */
		o.config = v.cat->config_raw;
		o.config_len = v.cat->config_len;
	}
	/* the output: never over the source, never mixed with an old checkpoint */
	struct ck_outdir od;
	char **own = NULL;
	int n_own = 0;
	if (va.shard_groups && !(own = group_names(v.world, &n_own))) {
		ck_view_close(&v);
		return ck_cli_report((ck_fail_sys(&err, ENOMEM, "convert"), &err));
	}
	if (va.shard_groups && overwrite && !ck_mpi_launched()) {
		free_names(own, n_own);
		ck_view_close(&v);
		return ck_cli_report((ck_fail(&err, CK_E_USAGE,
					      "--overwrite with --shard-groups needs mpirun (the "
					      "ranks must all succeed before the old checkpoint "
					      "goes)"),
				      &err));
	}
	if (ck_outdir_check_source(outdir, source, v.cat, &err) < 0 ||
	    ck_outdir_begin(&od, outdir, overwrite, va.shard_groups, (const char *const *)own,
			    n_own, &err) < 0) {
		free_names(own, n_own);
		ck_view_close(&v);
		return ck_cli_report(&err);
	}
	struct ck_gguf_view g;
	struct ck_dcp_out d;
	if ((gopt.on && ck_gguf_view_open(v.cat, v.maps, v.n_maps, &gopt, &g, &err) < 0) ||
	    (dcp && ck_dcp_out_build(v.plan, dcp == 2, va.mesh ? v.rank : -1, &d, &err) < 0)) {
		ck_outdir_abort(&od);
		ck_view_close(&v);
		return ck_cli_report(&err);
	}
	struct ck_convert_stats stats;
	/* the GPU opens last: every input error has been reported by now */
	int lanes = o.threads > 0 ? o.threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
	char note[400];
	int rc = ck_device_open(&dev, lanes < 1 ? 1 : lanes > 64 ? 64 : lanes, &o.gpu, note,
				sizeof note, &err);
	if (rc == 0 && note[0] && o.progress >= 0)
		fprintf(stderr, "ckptfs: %s\n", note);
	o.gpu_min = dev.gpu_min;
	if (rc == 0 && gopt.on) {
		rc = ck_convert_vfile(g.plan, &g.file, od.stage, "model.gguf", &o, &stats, &err);
	} else if (rc == 0 && dcp) { /* the data file, then .metadata */
		struct ck_out_file f[] = {{d.data_name, &d.data},
					  {".metadata", &d.metadata},
					  {"metadata.json", &d.megatron_json},
					  {"common.pt", &d.common}};
		rc = ck_convert_files(v.plan, f, dcp == 2 ? 4 : 2, od.stage, &o, &stats, &err);
	} else if (rc == 0) {
		rc = ck_convert(v.plan, od.stage, &o, &stats, &err);
	}
	size_t n_written = gopt.on ? g.plan->n : dcp ? v.plan->n - d.n_omitted : v.plan->n;
	if (dcp && d.n_omitted && rc == 0)
		fprintf(stderr, "ckptfs: %zu tensors left out of the DCP directory (no torch storage "
				"type for their dtype), the first: %s\n",
			d.n_omitted, v.plan->t[d.omitted[0]].name);
	if (gopt.on)
		ck_gguf_view_free(&g);
	if (dcp)
		ck_dcp_out_free(&d);
	ck_gpu_close(o.gpu);
	/* under mpirun every rank learns whether all succeeded; only then does
	 * any rank put its output in place (rank 0 of a group-sharded convert
	 * writes the index; without MPI it does so after its own part: check
	 * every rank's exit status) */
	int all = ck_mpi_all_ok(rc == 0);
	*synced = 1;
	if (rc == 0 && all != 0 && va.shard_groups && v.rank == 0) {
		if (overwrite) /* the old checkpoint's other files go before the new index */
			rc = ck_outdir_remove_others(&od, (const char *const *)own, n_own, &err);
		if (rc == 0)
			rc = write_group_index(source, &va, v.world, od.final, &err);
	}
	if (rc == 0 && all != 0 && !va.shard_groups)
		rc = ck_outdir_commit(&od, &err);
	if (rc < 0 || all == 0)
		ck_outdir_abort(&od);
	free_names(own, n_own);
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
	ck_escape_controls(od.final, shown, sizeof shown);
	fprintf(stderr, "ckptfs: wrote %zu tensors, %llu bytes in %d file%s to %s (read %llu source "
			"bytes)\n",
		n_written, (unsigned long long)stats.bytes_written, stats.n_files,
		stats.n_files == 1 ? "" : "s", shown, (unsigned long long)stats.source_bytes_read);
	ck_view_close(&v);
	return 0;
}

int ck_cmd_convert(int argc, char **argv)
{
	return ck_mpi_run_verb(convert_main, argc, argv);
}
