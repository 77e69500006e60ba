/* A verb's command line as one table: parsing, its one-line usage and
 * `ckptfs VERB --help` (and `ckptfs help`) come from the same entries, so
 * the help cannot drift from what is parsed. */
#ifndef CK_CLI_OPTS_H
#define CK_CLI_OPTS_H

#include <stdio.h>

#include "../util/error.h"
#include "../view/open.h"

struct ck_cli_opt {
	int id;		  /* the verb's code for it (> 0); 0 ends a table */
	const char *name; /* "--max-shard-size" */
	const char *arg;  /* "SIZE"; NULL: a flag */
	const char *help; /* one line */
};

struct ck_cli_verb {
	const char *name;     /* "convert" */
	const char *operands; /* "SOURCE OUTDIR" */
	const char *what;     /* what it does, a few short lines */
	const struct ck_cli_opt *opts;
	int view; /* the view options it takes: CK_CLI_VIEW_ALL or _MAPS */
	const struct ck_cli_opt *gguf; /* ck_cli_gguf_opts, or NULL */
	void (*more_help)(FILE *f);    /* what --help prints after the options */
};

enum { CK_CLI_END = 0, CK_CLI_OPERAND = -1, CK_CLI_VIEW = -2, CK_CLI_ERROR = -3 };
/* CK_CLI_VIEW_ALL: --mapping, --mesh, --rank, ... (a process's part of the
 * view); CK_CLI_VIEW_MAPS: --mapping and --set only (the whole view). */
enum { CK_CLI_VIEW_NONE = 0, CK_CLI_VIEW_ALL = 1, CK_CLI_VIEW_MAPS = 2 };

/* The argument at *i (advanced past it and its value): an option of the
 * verb's table (its id; *val its value, NULL for a flag), a view option
 * applied to va (CK_CLI_VIEW), an operand (CK_CLI_OPERAND, *val), the end
 * (CK_CLI_END) or an unknown option, a missing or bad value (CK_CLI_ERROR,
 * err set). */
int ck_cli_next(const struct ck_cli_verb *v, int argc, char **argv, int *i,
		struct ck_view_args *va, const char **val, struct ck_err *err);
/* The name of option id in table t ("--atol"). */
const char *ck_cli_opt_name(const struct ck_cli_opt *t, int id);
/* err: "usage: ckptfs VERB OPERANDS [OPTIONS] (ckptfs VERB --help)"; -1. */
int ck_cli_usage_error(const struct ck_cli_verb *v, struct ck_err *err);
/* The verb's synopsis and what it does (`ckptfs help`), or with its
 * options one a line (`ckptfs VERB --help`). */
void ck_cli_print_help(FILE *f, const struct ck_cli_verb *v, int options);

/* The view options every view-taking verb shares. */
extern const struct ck_cli_opt ck_cli_view_opts[];

/* --gguf-pre, --gguf-vocab, --gguf-imatrix, --gguf-pure,
 * --gguf-output-type and --gguf-embd-type, shared by the verbs that show
 * or write the GGUF view (ids CK_CLI_GGUF_*). */
enum {
	CK_CLI_GGUF_PRE = 100,
	CK_CLI_GGUF_VOCAB,
	CK_CLI_GGUF_IMATRIX,
	CK_CLI_GGUF_PURE,
	CK_CLI_GGUF_OUTPUT_TYPE,
	CK_CLI_GGUF_EMBD_TYPE,
	CK_CLI_GGUF_LEAVE_OUTPUT,
	CK_CLI_GGUF_TENSOR_TYPE,
	CK_CLI_GGUF_TENSOR_TYPE_FILE,
	CK_CLI_GGUF_SPLIT_MAX_SIZE,
	CK_CLI_GGUF_SPLIT_MAX_TENSORS,
	CK_CLI_GGUF_OVERRIDE_KV,
	CK_CLI_GGUF_END
};
extern const struct ck_cli_opt ck_cli_gguf_opts[];
struct ck_gguf_opts;
/* Apply one of them to g: 1, 0 (id is not one of them) or -1 (err). */
int ck_cli_gguf_opt(int id, const char *val, struct ck_gguf_opts *g, struct ck_err *err);

/* "    HEAD  HELP" with HELP wrapped at 78 columns under column 26. */
void ck_cli_print_wrapped(FILE *f, const char *head, const char *help);

#endif
