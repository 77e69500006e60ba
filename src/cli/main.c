/* ckptfs: mount ML checkpoints through a mapping, inspect and convert them. */
#include <stdio.h>
#include <string.h>

#include "ckptfs_config.h"
#include "cli.h"
#include "opts.h"

/* Each verb's table: its options, synopsis and what it does. `ckptfs help`
 * prints every verb's synopsis, `ckptfs VERB --help` its own with its
 * options. */
static const struct ck_cli_verb *const verbs[] = {
	&ck_verb_inspect, &ck_verb_convert, &ck_verb_mount,
	&ck_verb_diff,	  &ck_verb_check_mapping, &ck_verb_mappings,
};

static void usage(FILE *f)
{
	fprintf(f, "usage: ckptfs COMMAND [ARGS]\ncommands:\n");
	for (size_t k = 0; k < sizeof verbs / sizeof *verbs; k++)
		ck_cli_print_help(f, verbs[k], 0);
	fprintf(f, "  inspect, convert and mount also take --mesh AXIS=N[,...] --rank R (a\n"
		   "  per-rank view) or --shard-groups [--world-size N --rank R] (whole groups\n"
		   "  per process); --mapping takes a file or a shipped mapping's name;\n"
		   "  --state params|optimizer|all keeps the parameters or the optimizer\n"
		   "  state only (default all); --set NAME=VALUE (repeatable) sets a\n"
		   "  config.json value as mappings see it (make_vocab_size_divisible_by=1024)\n"
		   "  version                   version and optional features built in\n"
		   "  help                      this text\n"
		   "exit status: 0 ok, 1 system error, 2 usage, 3 invalid source,\n"
		   "             4 invalid mapping, 5 --expect mismatch or checkpoints differ\n");
}

/* ckptfs VERB --help (or -h): the verb's own entry. */
static int verb_help(const char *cmd, int argc, char **argv)
{
	for (int i = 2; i < argc; i++)
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"))
			for (size_t k = 0; k < sizeof verbs / sizeof *verbs; k++)
				if (!strcmp(verbs[k]->name, cmd)) {
					printf("usage:\n");
					ck_cli_print_help(stdout, verbs[k], 1);
					return 1;
				}
	return 0;
}

int ck_cli_report(const struct ck_err *err)
{
	fprintf(stderr, "ckptfs: %s\n", err->msg);
	switch (err->kind) {
	case CK_E_USAGE: return 2;
	case CK_E_SOURCE: return 3;
	case CK_E_MAPPING: return 4;
	case CK_E_MISMATCH: return 5;
	default: return 1;
	}
}

int main(int argc, char **argv)
{
	ck_heap_tune();
	ck_raise_fd_limit();
	const char *self = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
	if (!strcmp(self, "mount.fuse.ckptfs") || !strcmp(self, "mount.ckptfs"))
		return ck_mount_helper(argc, argv); /* as mount(8)'s helper */
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	const char *cmd = argv[1];
	if (verb_help(cmd, argc, argv))
		return 0;
	if (!strcmp(cmd, "inspect"))
		return ck_cmd_inspect(argc - 1, argv + 1);
	if (!strcmp(cmd, "convert"))
		return ck_cmd_convert(argc - 1, argv + 1);
	if (!strcmp(cmd, "mount"))
		return ck_cmd_mount(argc - 1, argv + 1);
	if (!strcmp(cmd, "mappings"))
		return ck_cmd_mappings(argc - 1, argv + 1);
	if (!strcmp(cmd, "diff"))
		return ck_cmd_diff(argc - 1, argv + 1);
	if (!strcmp(cmd, "check-mapping"))
		return ck_cmd_check_mapping(argc - 1, argv + 1);
	if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
		printf("ckptfs %s (mpi: %s)\n", CKPTFS_VERSION, CKPTFS_HAVE_MPI ? "yes" : "no");
		return 0;
	}
	if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
		usage(stdout);
		return 0;
	}
	fprintf(stderr, "ckptfs: unknown command \"%s\" (see 'ckptfs help')\n", cmd);
	return 2;
}
