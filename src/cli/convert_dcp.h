/* convert --format dcp|torch_dist: the DCP directory of a view (whole, one
 * --mesh rank's, or one for all of --ranks), and the share of it a
 * --shard-groups process writes: its data file, rank 0 then .metadata. */
#ifndef CK_CLI_CONVERT_DCP_H
#define CK_CLI_CONVERT_DCP_H

#include "../exec/convert.h"
#include "../plan/dcp_out.h"
#include "../view/open.h"

/* The view's DCP directory: one rank's (rank >= 0) or the whole view's, or
 * with --ranks one for all its ranks, their data files in the numbering of
 * the view's plan (their union). */
int ck_cli_dcp_make(const struct ck_view *v, int torch_dist, int64_t rank, struct ck_dcp_out *d,
		    struct ck_err *err);
/* Write d's data files, then .metadata and torch_dist's two (a reader that
 * finds .metadata finds every file it names); data_only: the data files. */
int ck_cli_dcp_write(const struct ck_plan *p, const struct ck_dcp_out *d, int torch_dist,
		     int data_only, const char *stage, struct ck_convert_opts *o,
		     struct ck_convert_stats *stats, struct ck_err *err);
/* Rank 0 of a --shard-groups run, once every rank has written its data
 * file: .metadata naming them all (and torch_dist's two), laid out from
 * every rank's share of the view (va as given, each rank's planned alike;
 * cast: --dtype or CK_DT_INVALID). */
int ck_cli_dcp_group_metadata(const char *source, const struct ck_view_args *va, int64_t world,
			      enum ck_dtype cast, int torch_dist, const char *outdir,
			      struct ck_err *err);

#endif
