/* ckptfs convert: write the target view as a safetensors checkpoint. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../exec/convert.h"
#include "cli.h"

int ck_cmd_convert(int argc, char **argv)
{
	const char *source = NULL, *outdir = NULL, *dtype = NULL, *mesh = NULL;
	int64_t rank = -1;
	char outbuf[4096];
	char *maps[CK_MAX_MAPPINGS];
	int n_maps = 0;
	struct ck_convert_opts o = {0, 0, 1, isatty(2), NULL};
	struct ck_err err;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		int has = i + 1 < argc;
		if (!strcmp(a, "--mapping") && has) {
			if (n_maps == CK_MAX_MAPPINGS)
				return ck_cli_report((ck_fail(&err, CK_E_USAGE, "too many --mapping"), &err));
			maps[n_maps++] = argv[++i];
		} else if (!strcmp(a, "--max-shard-size") && has) {
			if (ck_parse_size(argv[++i], &o.max_shard_size) < 0 || !o.max_shard_size)
				return ck_cli_report((ck_fail(&err, CK_E_USAGE,
							      "--max-shard-size: not a size: %s",
							      argv[i]),
						      &err));
		} else if (!strcmp(a, "--dtype") && has) {
			dtype = argv[++i];
		} else if (!strcmp(a, "--threads") && has) {
			o.threads = atoi(argv[++i]);
			if (o.threads < 1 || o.threads > 64)
				return ck_cli_report(
					(ck_fail(&err, CK_E_USAGE, "--threads: 1..64"), &err));
		} else if (!strcmp(a, "--mesh") && has) {
			mesh = argv[++i];
		} else if (!strcmp(a, "--rank") && has) {
			char *end;
			rank = strtoll(argv[++i], &end, 10);
			if (*end || rank < 0)
				return ck_cli_report((ck_fail(&err, CK_E_USAGE, "--rank: not a rank"), &err));
		} else if (!strcmp(a, "--no-uring")) {
			o.use_uring = 0;
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
					      "[--max-shard-size SIZE] [--dtype DTYPE] [--threads N] [--mesh AXES --rank R]"),
				      &err));
	enum ck_dtype dt = CK_DT_INVALID;
	if (dtype && !ck_dtype_is_castable_float(dt = ck_dtype_parse(dtype, NULL)))
		return ck_cli_report((ck_fail(&err, CK_E_USAGE,
					      "--dtype must be F32, F16, BF16, F8_E4M3 or F8_E5M2"),
				      &err));
	struct ck_view v;
	if (ck_view_open(&v, source, maps, n_maps, mesh, rank, &err) < 0 ||
	    ck_subst_rank(outdir, mesh, v.rank, outbuf, sizeof outbuf, &err) < 0) {
		if (v.cat)
			ck_view_close(&v);
		return ck_cli_report(&err);
	}
	outdir = outbuf;
	if (dtype && ck_plan_cast_all(v.plan, dt, &err) < 0) {
		ck_view_close(&v);
		return ck_cli_report(&err);
	}
	/* the source's config.json travels with the converted weights */
	struct stat st;
	char cfg[4096];
	const char *dir = source;
	char tmp[4096];
	if (stat(source, &st) == 0 && !S_ISDIR(st.st_mode)) {
		snprintf(tmp, sizeof tmp, "%s", source);
		char *slash = strrchr(tmp, '/');
		if (slash)
			*slash = '\0';
		dir = slash ? tmp : ".";
	}
	snprintf(cfg, sizeof cfg, "%s/config.json", dir);
	if (v.cat->config)
		o.config_src = cfg;
	struct ck_convert_stats stats;
	int rc = ck_convert(v.plan, outdir, &o, &stats, &err);
	if (rc < 0) {
		ck_view_close(&v);
		return ck_cli_report(&err);
	}
	fprintf(stderr, "ckptfs: wrote %zu tensors, %llu bytes in %d file%s to %s (read %llu source "
			"bytes)\n",
		v.plan->n, (unsigned long long)stats.bytes_written, stats.n_files,
		stats.n_files == 1 ? "" : "s", outdir, (unsigned long long)stats.source_bytes_read);
	ck_view_close(&v);
	return 0;
}
