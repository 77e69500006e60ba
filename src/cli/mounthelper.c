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

#define MAX_ARGS 96

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
	char *av[MAX_ARGS], rest[4096] = "", *copy = strdup(opts ? opts : "");
	char meshbuf[256];
	int ac = 0;
	if (!copy)
		return ck_cli_report((ck_fail_sys(&err, ENOMEM, "mount.ckptfs"), &err));
	av[ac++] = "mount";
	av[ac++] = src;
	av[ac++] = mnt;
	if (foreground)
		av[ac++] = "-f";
	int rc = 0;
	for (char *save, *o = strtok_r(copy, ",", &save); o && rc == 0; o = strtok_r(NULL, ",", &save)) {
		static const char *const views[] = {"mapping=", "mesh=", "rank=", "ranks=", "device="};
		size_t k = 0;
		while (k < sizeof views / sizeof *views && strncmp(o, views[k], strlen(views[k])))
			k++;
		if (k < sizeof views / sizeof *views) {
			if (ac + 2 >= MAX_ARGS)
				rc = ck_fail(&err, CK_E_USAGE, "mount.ckptfs: too many options");
			char *val = strchr(o, '=') + 1;
			if (k == 1) { /* axes joined with ':' inside one mount option */
				snprintf(meshbuf, sizeof meshbuf, "%s", val);
				for (char *c = meshbuf; *c; c++)
					if (*c == ':')
						*c = ',';
				val = meshbuf;
			}
			static const char *const flags[] = {"--mapping", "--mesh", "--rank", "--ranks",
							    "--device"};
			av[ac++] = (char *)flags[k];
			av[ac++] = val;
		} else if (!fstab_only(o)) {
			size_t n = strlen(rest);
			snprintf(rest + n, sizeof rest - n, "%s%s", n ? "," : "", o);
		}
	}
	if (rc == 0 && rest[0]) {
		av[ac++] = "-o";
		av[ac++] = rest;
	}
	av[ac] = NULL;
	if (rc < 0) {
		free(copy);
		return ck_cli_report(&err);
	}
	rc = ck_cmd_mount(ac, av);
	free(copy);
	return rc;
}
