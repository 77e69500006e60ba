/* The options that select a process's part of the view, as every verb
 * takes them (--mapping, --mesh, --rank, --ranks, --shard-groups,
 * --world-size, --state, --set). */
#include <stdlib.h>
#include <string.h>

#include "cli.h"

int ck_view_arg(struct ck_view_args *a, int argc, char **argv, int *i, struct ck_err *err)
{
	const char *o = argv[*i];
	int has = *i + 1 < argc;
	if (!strcmp(o, "--shard-groups")) {
		a->shard_groups = 1;
		return 1;
	}
	static const char *const valued[] = {"--mapping", "--mesh", "--ranks", "--rank",
					     "--world-size", "--state", "--set"};
	if (!has) {
		for (size_t k = 0; k < sizeof valued / sizeof *valued; k++)
			if (!strcmp(o, valued[k]))
				return ck_fail(err, CK_E_USAGE, "%s needs a value", o);
		return 0;
	}
	if (!strcmp(o, "--mapping")) {
		if (a->n_maps == CK_MAX_MAPPINGS)
			return ck_fail(err, CK_E_USAGE, "at most %d --mapping files", CK_MAX_MAPPINGS);
		a->maps[a->n_maps++] = argv[++*i];
		return 1;
	}
	if (!strcmp(o, "--set"))
		return ck_view_add_set(a, argv[++*i], err) < 0 ? -1 : 1;
	if (!strcmp(o, "--state")) {
		if ((a->state = ck_state_parse(argv[++*i])) < 0)
			return ck_fail(err, CK_E_USAGE, "--state: params, optimizer or all, not \"%s\"",
				       argv[*i]);
		return 1;
	}
	if (!strcmp(o, "--mesh")) {
		a->mesh = argv[++*i];
		return 1;
	}
	if (!strcmp(o, "--ranks")) {
		a->ranks = argv[++*i];
		return 1;
	}
	if (!strcmp(o, "--rank") || !strcmp(o, "--world-size")) {
		char *end;
		long long v = strtoll(argv[++*i], &end, 10);
		int world = o[2] == 'w';
		if (*end || !argv[*i][0] || v < (world ? 1 : 0) || v > (1 << 24))
			return ck_fail(err, CK_E_USAGE, "%s: not a %s: %s", o,
				       world ? "world size" : "rank", argv[*i]);
		*(world ? &a->world : &a->rank) = v;
		return 1;
	}
	return 0;
}
