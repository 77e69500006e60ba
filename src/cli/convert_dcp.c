#include "convert_dcp.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int ck_cli_dcp_make(const struct ck_view *v, int torch_dist, int64_t rank, struct ck_dcp_out *d,
		    struct ck_err *err)
{
	if (!v->n_ranks)
		return ck_dcp_out_build(v->plan, torch_dist, rank, d, err);
	if (ck_dcp_out_build_ranks((const struct ck_plan *const *)v->rank_plans, v->ranks,
				   v->n_ranks, torch_dist, d, err) < 0)
		return -1;
	for (size_t k = 0; k < d->n_data; k++)
		ck_vfile_renumber(&d->data[k], v->rank_idx[k]);
	return 0;
}

int ck_cli_dcp_write(const struct ck_plan *p, const struct ck_dcp_out *d, int torch_dist,
		     int data_only, const char *stage, struct ck_convert_opts *o,
		     struct ck_convert_stats *stats, struct ck_err *err)
{
	size_t n = 0;
	struct ck_out_file *f = calloc(d->n_data + 3, sizeof *f);
	if (!f)
		return ck_fail_sys(err, ENOMEM, "convert");
	for (size_t k = 0; k < d->n_data; k++)
		f[n++] = (struct ck_out_file){d->data_name[k], &d->data[k]};
	if (!data_only) {
		f[n++] = (struct ck_out_file){".metadata", &d->metadata};
		if (torch_dist) {
			f[n++] = (struct ck_out_file){"metadata.json", &d->megatron_json};
			f[n++] = (struct ck_out_file){"common.pt", &d->common};
		}
	}
	int rc = ck_convert_files(p, f, n, stage, o, stats, err);
	free(f);
	return rc;
}

/* A file made of literal bytes only (.metadata, metadata.json, common.pt)
 * written in place atomically. */
static int write_literal(const char *dir, const char *name, const struct ck_vfile *v,
			 struct ck_err *err)
{
	char *buf = malloc(v->size ? v->size : 1);
	if (!buf)
		return ck_fail_sys(err, ENOMEM, "%s", name);
	size_t at = 0;
	for (size_t k = 0; k < v->n; k++) {
		if (v->parts[k].target != CK_VLIT) {
			free(buf);
			return ck_fail_sys(err, EINVAL, "%s: not made of literal bytes", name);
		}
		memcpy(buf + at, v->blob + v->parts[k].src, v->parts[k].len);
		at += v->parts[k].len;
	}
	int rc = ck_write_file_atomic(dir, name, buf, at, err);
	free(buf);
	return rc;
}

int ck_cli_dcp_group_metadata(const char *source, const struct ck_view_args *va, int64_t world,
			      enum ck_dtype cast, int torch_dist, const char *outdir,
			      struct ck_err *err)
{
	struct ck_view *views = calloc((size_t)world, sizeof *views);
	const struct ck_plan **plans = calloc((size_t)world, sizeof *plans);
	int64_t *ranks = calloc((size_t)world, sizeof *ranks);
	int64_t opened = 0;
	int rc = -1;
	struct ck_dcp_out d;
	if (!views || !plans || !ranks) {
		ck_fail_sys(err, ENOMEM, "convert");
		goto out;
	}
	for (; opened < world; opened++) { /* each rank's share, as that rank planned it */
		struct ck_view_args a = *va;
		a.rank = opened;
		a.world = world;
		if (ck_view_open(&views[opened], source, &a, err) < 0)
			goto out;
		if (cast != CK_DT_INVALID && ck_plan_cast_all(views[opened].plan, cast, err) < 0) {
			opened++;
			goto out;
		}
		plans[opened] = views[opened].plan;
		ranks[opened] = opened;
	}
	if (ck_dcp_out_build_ranks(plans, ranks, (size_t)world, torch_dist, &d, err) < 0)
		goto out;
	rc = 0;
	if (torch_dist)
		rc = write_literal(outdir, "metadata.json", &d.megatron_json, err) < 0 ||
				     write_literal(outdir, "common.pt", &d.common, err) < 0
			     ? -1
			     : 0;
	if (rc == 0)
		rc = write_literal(outdir, ".metadata", &d.metadata, err);
	ck_dcp_out_free(&d);
out:
	for (int64_t r = 0; r < opened; r++)
		ck_view_close(&views[r]);
	free(views);
	free(plans);
	free(ranks);
	return rc;
}
