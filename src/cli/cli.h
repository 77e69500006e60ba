/* Command-line verbs. Each returns the process exit status. */
#ifndef CK_CLI_H
#define CK_CLI_H

#include "../ckpt/catalog.h"
#include "../map/mapping.h"
#include "../plan/plan.h"
#include "../util/error.h"

int ck_cmd_inspect(int argc, char **argv);
int ck_cmd_convert(int argc, char **argv);
int ck_cmd_mount(int argc, char **argv);
/* Print "ckptfs: <message>" and return the exit status for err's kind. */
int ck_cli_report(const struct ck_err *err);

/* A source opened and planned through its mappings. */
struct ck_view {
	int64_t rank; /* -1: not a per-rank view */
	struct ck_catalog *cat;
	struct ck_mapping *maps[16];
	int n_maps;
	struct ck_plan *plan;
};

#define CK_MAX_MAPPINGS 16

/* mesh (or NULL) and rank (-1: from OMPI_COMM_WORLD_RANK or RANK) select a
 * per-rank view through the last mapping that has partition rules. */
int ck_view_open(struct ck_view *v, const char *source, char **mappings, int n_mappings,
		 const char *mesh, int64_t rank, struct ck_err *err);
/* Replace {rank}, {local_rank} and each mesh axis {tp}, {dp}, ... in path. */
int ck_subst_rank(const char *path, const char *mesh, int64_t rank, char *out, size_t n,
		  struct ck_err *err);
/* The rank from --rank, or the launcher's environment; -1 if none. */
int64_t ck_env_rank(int64_t given);
void ck_view_close(struct ck_view *v);
/* Parse a size such as 5GB, 500MiB, 1e9 is not accepted; returns -1 if bad. */
int ck_parse_size(const char *s, uint64_t *out);

#endif
