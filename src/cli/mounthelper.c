/* ckptfs as mount(8)'s helper: installed as mount.fuse.ckptfs (and
 * mount.ckptfs), `mount -t fuse.ckptfs SRC MNT -o OPTS` and an /etc/fstab
 * line run it as
 *     mount.fuse.ckptfs SRC MNT [-n] [-s] [-f] [-v] [-o OPTS]
 * OPTS mix ckptfs's view options (mapping=NAME, several allowed; mesh=tp=8
 * with ':' between axes, mesh=tp=2:dp=2; rank=R; ranks=LIST; device=DEV),
 * fstab's own (defaults, auto, noauto, user, users, nofail, _netdev,
 * x-systemd.*, comment=..., which mount(8) or systemd read and FUSE helpers
 * ignore) and mount options for `ckptfs mount -o`. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static int fstab_only(const char *o)
{
	static const char *const names[] = {"defaults", "auto", "noauto", "user", "users",
					    "nouser", "nofail", "_netdev", "owner", "group",
					    "rw", "ro", "sync", "async"};
	for (size_t k = 0; k < sizeof names / sizeof *names; k++)
		if (!strcmp(o, names[k]))
			return 1;
	return !strncmp(o, "x-", 2) || !strncmp(o, "comment=", 8);
}

int ck_mount_helper(int argc, char **argv)
{
	struct ck_err err;
	char *src = NULL, *mnt = NULL, *opts = NULL;
	int foreground = 0;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "-o") && i + 1 < argc)
			opts = argv[++i];
		else if (!strcmp(argv[i], "-f"))
			foreground = 1;
		else if (!strcmp(argv[i], "-n") || !strcmp(argv[i], "-s") || !strcmp(argv[i], "-v"))
			continue; /* no mtab; sloppy; verbose: nothing to do */
		else if (argv[i][0] == '-')
			return ck_cli_report((ck_fail(&err, CK_E_USAGE, "mount.ckptfs: unknown option %s",
						      argv[i]),
					      &err));
		else if (!src)
			src = argv[i];
		else if (!mnt)
			mnt = argv[i];
		else
			return ck_cli_report(
				(ck_fail(&err, CK_E_USAGE, "mount.ckptfs: too many arguments"), &err));
	}
	if (!src || !mnt)
		return ck_cli_report((ck_fail(&err, CK_E_USAGE,
					      "usage: mount.ckptfs SOURCE MOUNTPOINT [-o "
					      "mapping=NAME,mesh=tp=8,rank=R,...]"),
				      &err));
	/* sized from OPTS: every option adds at most two arguments, and what
	 * goes on as -o is never longer than OPTS (nothing is cut short) */
	size_t olen = opts ? strlen(opts) : 0;
	char *copy = strdup(opts ? opts : ""), *rest = calloc(1, olen + 1);
	char **av = calloc(olen + 16, sizeof *av);
	if (!copy || !rest || !av) {
		free(copy);
		free(rest);
		free(av);
		return ck_cli_report((ck_fail_sys(&err, ENOMEM, "mount.ckptfs"), &err));
	}
	int ac = 0;
	av[ac++] = "mount";
	av[ac++] = src;
	av[ac++] = mnt;
	if (foreground)
		av[ac++] = "-f";
	for (char *save, *o = strtok_r(copy, ",", &save); o; o = strtok_r(NULL, ",", &save)) {
		static const char *const views[] = {"mapping=", "mesh=", "rank=", "ranks=", "device="};
		static const char *const flags[] = {"--mapping", "--mesh", "--rank", "--ranks",
						    "--device"};
		size_t k = 0;
		while (k < sizeof views / sizeof *views && strncmp(o, views[k], strlen(views[k])))
			k++;
		if (k < sizeof views / sizeof *views) {
			char *val = strchr(o, '=') + 1;
			for (char *c = val; k == 1 && *c; c++)
				if (*c == ':') /* mesh: axes joined with ':' inside one option */
					*c = ',';
			av[ac++] = (char *)flags[k];
			av[ac++] = val;
		} else if (!fstab_only(o)) {
			if (rest[0])
				strcat(rest, ",");
			strcat(rest, o);
		}
	}
	if (rest[0]) {
		av[ac++] = "-o";
		av[ac++] = rest;
	}
	av[ac] = NULL;
	int rc = ck_cmd_mount(ac, av);
	free(copy);
	free(rest);
	free(av);
	return rc;
}
