/* ckptfs mount: plan first, then fork the daemon (before any thread, ring or
 * GPU context exists), and return only when the mount is live: the child
 * reports through a pipe once FUSE_INIT has arrived, or sends its error. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../exec/outdir.h"
#include "../fs/fs.h"
#include "cli.h"
#include "interrupt.h"
#include "mpi_sync.h"
#include "opts.h"

#define MAX_FUSE_ARGS 64

/* -o options of the mount alone (the serving options are the library's
 * too: ck_serve_optdefs). */
enum { MO_FUSE_THREADS = 1, MO_LOG, MO_DIRECT_IO, MO_NONEMPTY, MO_MAX_READ };
static const struct ck_serve_optdef mount_o_opts[] = {
	{MO_FUSE_THREADS, "fuse_threads", "N", "most FUSE worker threads (default 10; 1 to 64)"},
	{MO_MAX_READ, "max_read", "BYTES",
	 "largest read request the kernel sends (4096 to 1048576; default 1 MiB)"},
	{MO_LOG, "log", "FILE", "append daemon messages to FILE"},
	{MO_DIRECT_IO, "direct_io", NULL,
	 "bypass the kernel page cache for data files (one copy less; no mmap)"},
	{MO_NONEMPTY, "nonempty", NULL, "mount over a directory that is not empty"},
	{0, NULL, NULL, NULL},
};

/* The FUSE and mount(8) options passed on to libfuse: those a low-level
 * session of libfuse 3.14 takes (it refuses max_background, max_threads,
 * clone_fd, relatime, ... as unknown). Anything else is refused here with
 * one line instead of two from libfuse after the fork. */
static const char *const fuse_flags[] = {
	"allow_other", "allow_root", "auto_unmount", "default_permissions", "debug", "ro",
	"noatime", "nodev", "nosuid", "noexec", "dev", "suid", "exec"};
static const char *const fuse_valued[] = {"fsname", "subtype"};

static void print_o_opts(FILE *f, const struct ck_serve_optdef *d)
{
	for (; d->id; d++) {
		char head[96];
		int opt = d->arg && d->arg[0] == '[';
		snprintf(head, sizeof head, "-o %s%s%s%s", d->name, d->arg && !opt ? "=" : "",
			 opt ? "[=" : "", d->arg ? d->arg + opt : "");
		ck_cli_print_wrapped(f, head, d->help);
	}
}

static void mount_more_help(FILE *f)
{
	fprintf(f, "serving options (-o OPT[,OPT...]; libckptfs takes the same as open options):\n");
	print_o_opts(f, ck_serve_optdefs);
	fprintf(f, "mount options:\n");
	print_o_opts(f, mount_o_opts);
	fprintf(f, "FUSE and mount(8) options passed on (-o):\n   ");
	size_t nf = sizeof fuse_flags / sizeof *fuse_flags, col = 3;
	for (size_t k = 0; k < nf + sizeof fuse_valued / sizeof *fuse_valued; k++) {
		const char *name = k < nf ? fuse_flags[k] : fuse_valued[k - nf];
		size_t len = strlen(name) + (k >= nf ? 2 : 0);
		if (col + 1 + len > 78) {
			fprintf(f, "\n   ");
			col = 3;
		}
		col += (size_t)fprintf(f, " %s%s", name, k >= nf ? "=V" : "");
	}
	fprintf(f, "\n  any other -o option is refused\n"
		   "Unmount with `fusermount3 -u MOUNTPOINT`, or SIGINT/SIGTERM to the daemon.\n");
}

enum { M_DEVICE = 1, M_FOREGROUND, M_OPTIONS };
static const struct ck_cli_opt mount_opts[] = {
	{M_DEVICE, "--device", "cpu|cuda|cuda:N|auto",
	 "where transforms run (default cpu; also -o device=DEV)"},
	{M_FOREGROUND, "-f", NULL, "stay in the foreground (messages on stderr)"},
	{M_OPTIONS, "-o", "OPT[,OPT...]", "serving, mount and FUSE options (below; repeatable)"},
	{0, NULL, NULL, NULL},
};

const struct ck_cli_verb ck_verb_mount = {
	"mount", "SOURCE MOUNTPOINT",
	"      serve the target view as files; returns once the mount is live. --mesh\n"
	"      tp=8 --rank R serves rank R's shard ({rank}, {tp}, ... in MOUNTPOINT are\n"
	"      replaced; the rank may come from OMPI_COMM_WORLD_RANK or RANK; under\n"
	"      mpirun it returns once every rank's mount is live); --ranks 0-7 serves\n"
	"      rank0/ ... rank7/ from one daemon and one cache (--ranks local: this\n"
	"      node's ranks, mounted by its local rank 0 only)\n",
	mount_opts, CK_CLI_VIEW_ALL, NULL, mount_more_help};

static int bad(struct ck_err *err, const char *opt, const char *want)
{
	return ck_fail(err, CK_E_USAGE, "mount: bad option -o %s (%s; see ckptfs mount --help)",
		       opt, want);
}

static int fuse_option(const char *opt, size_t klen)
{
	int has_val = opt[klen] == '=';
	for (size_t k = 0; !has_val && k < sizeof fuse_flags / sizeof *fuse_flags; k++)
		if (klen == strlen(fuse_flags[k]) && !strncmp(opt, fuse_flags[k], klen))
			return 1;
	for (size_t k = 0; has_val && k < sizeof fuse_valued / sizeof *fuse_valued; k++)
		if (klen == strlen(fuse_valued[k]) && !strncmp(opt, fuse_valued[k], klen))
			return 1;
	return 0;
}

/* The mount point: an existing directory, not already a mount point (two
 * daemons stacked on one path), and empty unless -o nonempty. */
static int check_mountpoint(const char *path, int nonempty, struct ck_err *err)
{
	struct stat st;
	if (stat(path, &st) < 0)
		return ck_fail(err, CK_E_USAGE, "%s: mount point: %s", path, strerror(errno));
	if (!S_ISDIR(st.st_mode))
		return ck_fail(err, CK_E_USAGE, "%s: mount point is not a directory", path);
	FILE *mi = fopen("/proc/self/mountinfo", "r");
	if (mi) {
		char *line = NULL; /* whole lines: an overlay's can pass 8 KiB */
		size_t cap = 0;
		int mounted = 0;
		while (!mounted && getline(&line, &cap, mi) > 0) {
			/* "id parent major:minor root MOUNTPOINT ...", octal escapes */
			char *f = line;
			for (int k = 0; k < 4 && f; k++)
				f = strchr(f, ' ') ? strchr(f, ' ') + 1 : NULL;
			if (!f)
				continue;
			char mp[4096];
			size_t n = 0;
			for (; *f && *f != ' ' && n + 1 < sizeof mp; f++) {
				if (f[0] == '\\' && f[1] >= '0' && f[1] <= '3' && f[2] && f[3]) {
					mp[n++] = (char)((f[1] - '0') * 64 + (f[2] - '0') * 8 + (f[3] - '0'));
					f += 3;
				} else {
					mp[n++] = *f;
				}
			}
			mp[n] = '\0';
			mounted = !strcmp(mp, path);
		}
		free(line);
		fclose(mi);
		if (mounted)
			return ck_fail(err, CK_E_USAGE,
				       "%s: already a mount point (unmount it first: fusermount3 -u %s)",
				       path, path);
	}
	if (!nonempty) {
		DIR *d = opendir(path);
		if (!d)
			return ck_fail(err, CK_E_USAGE, "%s: mount point: %s", path, strerror(errno));
		struct dirent *e;
		int empty = 1;
		while (empty && (e = readdir(d)))
			empty = !strcmp(e->d_name, ".") || !strcmp(e->d_name, "..");
		closedir(d);
		if (!empty)
			return ck_fail(err, CK_E_USAGE,
				       "%s: mount point is not empty (-o nonempty mounts over it)", path);
	}
	return 0;
}

/* One mount option of mount_o_opts, its value checked. */
static int mount_o_opt(int id, const char *opt, const char *val, struct ck_fs_opts *o,
		       struct ck_err *err)
{
	switch (id) {
	case MO_FUSE_THREADS: {
		char *end;
		long v = val ? strtol(val, &end, 10) : -1;
		if (!val || !*val || *end || v < 1 || v > 64)
			return bad(err, opt, "1 to 64");
		o->fuse_threads = (int)v;
		return 0;
	}
	case MO_LOG:
		if (!val || !*val)
			return bad(err, opt, "a file name");
		o->log_path = val;
		return 0;
	case MO_MAX_READ: {
		char *end;
		long v = val ? strtol(val, &end, 10) : -1;
		if (!val || !*val || *end || v < 4096 || v > (1 << 20))
			return bad(err, opt, "4096 to 1048576 bytes: a request is at most 1 MiB");
		o->max_read = (unsigned)v;
		return 0;
	}
	case MO_DIRECT_IO: o->direct_io = 1; return 0;
	default: o->nonempty = 1; return 0; /* MO_NONEMPTY */
	}
}

/* The next option of an -o list, up to a comma; a backslash before a
 * comma or a backslash makes it part of the value (a --tensor-type
 * pattern's {1,3}, an override's string), the list rewritten in place;
 * empty options are skipped. */
static char *next_opt(char **at)
{
	for (;;) {
		char *s = *at, *r = s, *w = s;
		if (!s)
			return NULL;
		for (; *r && *r != ','; r++, w++) {
			if (r[0] == '\\' && (r[1] == ',' || r[1] == '\\'))
				r++;
			*w = *r;
		}
		*at = *r ? r + 1 : NULL;
		*w = 0;
		if (*s)
			return s;
	}
}

/* Split one -o list into ckptfs options and FUSE options. */
static int parse_opts(char *list, struct ck_fs_opts *o, char **fuse_argv, int *fuse_argc,
		      struct ck_err *err)
{
	for (char *at = list, *opt = next_opt(&at); opt; opt = next_opt(&at)) {
		char *eq = strchr(opt, '=');
		size_t klen = eq ? (size_t)(eq - opt) : strlen(opt);
		int r = ck_serve_option(&o->serve, "-o ", opt, err);
		if (r < 0) {
			ck_err_prefix(err, "mount");
			return -1;
		}
		if (r == 1)
			continue;
		const struct ck_serve_optdef *d = ck_serve_optdef_find(mount_o_opts, opt, klen);
		if (d && !d->arg && eq)
			return bad(err, opt, "a flag takes no value");
		if (d && mount_o_opt(d->id, opt, eq ? eq + 1 : NULL, o, err) < 0)
			return -1;
		/* max_read is the kernel's too: FUSE_INIT's answer must repeat it */
		if (!d || d->id == MO_MAX_READ) {
			if (!d && !fuse_option(opt, klen))
				return ck_fail(
				    err, CK_E_USAGE,
				    "mount: unknown option -o %s (see ckptfs mount --help)", opt);
			if (!d && eq && !eq[1]) /* the kernel refuses fsname= */
				return bad(err, opt, "a value after '='");
			if (*fuse_argc + 2 >= MAX_FUSE_ARGS)
				return ck_fail(err, CK_E_USAGE, "mount: too many options");
			fuse_argv[(*fuse_argc)++] = "-o";
			fuse_argv[(*fuse_argc)++] = opt;
		}
	}
	return 0;
}

/* The served files first (they point into the view), then the view. */
static void close_view(struct ck_served *srv, struct ck_view *v)
{
	ck_served_close(srv);
	ck_view_close(v);
}

/* The daemon's word, read from fd into msg. A stop signal that comes
 * first (the set `stop`, blocked since before the fork) is passed on to the
 * daemon as SIGTERM, so that it does not mount after the command died: the
 * word then read is its end. Returns the signal taken, or 0. */
static int read_word(int fd, pid_t pid, const sigset_t *stop, char *msg, size_t cap, size_t *got)
{
	int sfd = signalfd(-1, stop, SFD_CLOEXEC), sig = 0;
	*got = 0;
	for (;;) {
		struct pollfd p[2] = {{fd, POLLIN, 0}, {sfd, POLLIN, 0}};
		/* told to stop, the daemon is told again each second until it
		 * ends: libfuse's loop checks whether to end, then waits, and a
		 * signal that lands between the two is lost on it */
		int n = poll(p, sfd >= 0 ? 2 : 1, sig ? 1000 : -1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			break;
		if (n == 0) {
			kill(pid, SIGTERM);
			continue;
		}
		struct signalfd_siginfo si;
		if (sfd >= 0 && (p[1].revents & POLLIN) && read(sfd, &si, sizeof si) == sizeof si &&
		    !sig) {
			sig = (int)si.ssi_signo;
			kill(pid, SIGTERM);
		}
		if (!(p[0].revents & (POLLIN | POLLHUP | POLLERR)))
			continue;
		ssize_t r = *got < cap - 1 ? read(fd, msg + *got, cap - 1 - *got) : 0;
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		*got += (size_t)r;
	}
	msg[*got] = '\0';
	if (sfd >= 0)
		close(sfd);
	return sig;
}

/* The parent after the fork: wait for the daemon's word ("OK" once
 * the kernel took the INIT answer, or its error) and, under mpirun, for every rank's. */
static int parent_wait(pid_t pid, int pipefd[2], const char *mountpoint, int *synced,
		       const sigset_t *stop)
{
	close(pipefd[1]);
	char msg[2048];
	size_t got = 0;
	int sig = read_word(pipefd[0], pid, stop, msg, sizeof msg, &got), st;
	close(pipefd[0]);
	if (sig) { /* the daemon was told to stop: it unmounts, if it mounted */
		char name[32], shown[PATH_MAX + 64];
		waitpid(pid, &st, 0);
		*synced = 1;
		ck_mpi_all_ok(0);
		ck_escape_controls(mountpoint, shown, sizeof shown);
		fprintf(stderr, "ckptfs: %s: interrupted by %s: not mounted\n", shown,
			ck_interrupt_name(sig, name, sizeof name));
		return 128 + sig;
	}
	int ok = !strncmp(msg, "OK\n", 3);
	/* under mpirun: return once every rank's mount is live; if one failed,
	 * the others unmount, so nothing half-mounted remains. mpirun
	 * terminates the job when a rank exits non-zero: the stop signals,
	 * blocked since before the fork, wait until the unmount below is done */
	int all = ck_mpi_agree(ok);
	*synced = 1;
	if (ok && all == 0) { /* unmount before MPI ends (see ck_mpi_agree) */
		kill(pid, SIGTERM);
		waitpid(pid, &st, 0);
	}
	if (all >= 0)
		ck_mpi_finish();
	if (ok && all == 0) {
		fprintf(stderr, "ckptfs: another rank failed to mount; %s unmounted\n", mountpoint);
		return 1;
	}
	if (ok)
		return 0;
	waitpid(pid, &st, 0);
	char *nl = strchr(msg, '\n');
	if (nl)
		*nl = '\0';
	fprintf(stderr, "ckptfs: %s\n", got ? msg : "the daemon exited before the mount was live");
	return 1;
}

/* *synced: whether the MPI agreement has been made (or must not be: -f) */
static int mount_main(int argc, char **argv, int *synced)
{
	const char *source = NULL, *mnt_arg = NULL;
	struct ck_view_args va = {.rank = -1};
	struct ck_fs_opts o;
	memset(&o, 0, sizeof o);
	ck_serve_opts_init(&o.serve);
	o.serve.dcp_lazy = 1; /* dcp/ on every mount, laid out when first used */
	char *fuse_argv[MAX_FUSE_ARGS] = {"ckptfs", "-o", "ro,fsname=ckptfs,subtype=ckptfs"};
	int fuse_argc = 3;
	struct ck_err err;
	const char *val;
	for (int i = 1, id; (id = ck_cli_next(&ck_verb_mount, argc, argv, &i, &va, &val, &err));) {
		if (id == CK_CLI_ERROR)
			return ck_cli_report(&err);
		if (id == CK_CLI_OPERAND && !source)
			source = val;
		else if (id == CK_CLI_OPERAND && !mnt_arg)
			mnt_arg = val;
		else if (id == CK_CLI_OPERAND)
			return ck_cli_report((ck_fail(&err, CK_E_USAGE, "mount: too many arguments"), &err));
		else if ((id == M_DEVICE && ck_device_parse(val, &o.serve.device, &err) < 0) ||
			 (id == M_OPTIONS && parse_opts((char *)val, &o, fuse_argv, &fuse_argc, &err) < 0))
			return ck_cli_report(&err);
		o.foreground |= id == M_FOREGROUND;
	}
	if (!source || !mnt_arg)
		return ck_cli_report((ck_cli_usage_error(&ck_verb_mount, &err), &err));
	if (ck_serve_opts_finish(&o.serve, &err) < 0) {
		ck_err_prefix(&err, "mount");
		return ck_cli_report(&err);
	}
	/* --ranks local: local rank 0 of each node mounts one daemon for the
	 * node's ranks; the node's other processes only take part in the
	 * agreement that every mount is live */
	if (va.ranks && !strcmp(va.ranks, "local") && ck_env_local(0) > 0) {
		*synced = 1;
		return ck_mpi_all_ok(1) == 0 ? 1 : 0;
	}
	/* Everything that can fail on the input fails here, before mounting. */
	struct ck_view v;
	if (ck_view_open(&v, source, &va, &err) < 0)
		return ck_cli_report(&err);
	struct ck_served srv = {0};
	if (ck_serve_cast_view(&o.serve, &v, &err) < 0 ||
	    ck_served_prepare(&srv, &v, va.mesh != NULL, source, &o.serve, &err) < 0) {
		close_view(&srv, &v);
		return ck_cli_report(&err);
	}
	char mountpoint[PATH_MAX], mnt_sub[PATH_MAX];
	if (ck_subst_rank(mnt_arg, va.mesh, v.rank, mnt_sub, sizeof mnt_sub, &err) < 0 ||
	    (!realpath(mnt_sub, mountpoint) &&
	     ck_fail(&err, CK_E_USAGE, "%s: mount point: %s", mnt_sub, strerror(errno)) < 0) ||
	    check_mountpoint(mountpoint, o.nonempty, &err) < 0) {
		close_view(&srv, &v);
		return ck_cli_report(&err);
	}
	/* the log last (nothing is created for a mount refused above), before
	 * the fork: a refusal is this command's one line */
	char *map_paths[CK_MAX_MAPPINGS];
	for (int k = 0; k < v.n_maps; k++)
		map_paths[k] = v.maps[k]->path;
	if (o.log_path &&
	    (o.log_fd = ck_log_open(o.log_path, source, v.cat, map_paths, v.n_maps, &err)) < 0) {
		close_view(&srv, &v);
		return ck_cli_report(&err);
	}
	int pipefd[2] = {-1, -1};
	if (!o.foreground) {
		/* close-on-exec: a helper libfuse starts (fusermount3 for
		 * -o auto_unmount lives as long as the mount) must not hold the
		 * write end, or the parent would wait for its end for good */
		if (pipe2(pipefd, O_CLOEXEC) < 0) {
			close_view(&srv, &v);
			return ck_cli_report((ck_fail_sys(&err, errno, "pipe"), &err));
		}
		/* a stop signal before the daemon's word is passed on to it
		 * (read_word): blocked from before the fork, so none is lost */
		sigset_t stop, old;
		ck_interrupt_signals(&stop);
		sigprocmask(SIG_BLOCK, &stop, &old);
		pid_t pid = fork();
		if (pid <= 0) /* the daemon takes signals as libfuse sets them */
			sigprocmask(SIG_SETMASK, &old, NULL);
		if (pid < 0) {
			close_view(&srv, &v);
			return ck_cli_report((ck_fail_sys(&err, errno, "fork"), &err));
		}
		/* The parent ends once the daemon's word is in. It holds the
		 * plan's pages copy-on-write with the daemon, and freeing them
		 * would write to most of them, each write copying a page (75-115
		 * ms for the 671B preset's 92k targets, before the command
		 * returned). exit() here, with the plan still reachable from
		 * this frame: the kernel takes the pages back whole, and leak
		 * checkers see memory in use, not lost. The daemon frees its
		 * copy when it unmounts. */
		if (pid > 0)
			exit(parent_wait(pid, pipefd, mountpoint, synced, &stop));
		close(pipefd[0]);
		setsid();
	}
	*synced = 1; /* the daemon (or -f) never takes part in MPI */
	int rc = ck_fs_run(&srv, source, mountpoint, &o, fuse_argc, fuse_argv, pipefd[1], &err);
	if (rc < 0 && o.foreground)
		fprintf(stderr, "ckptfs: %s\n", err.msg);
	close_view(&srv, &v);
	return rc < 0 ? 1 : 0;
}

int ck_cmd_mount(int argc, char **argv)
{
	return ck_mpi_run_verb(mount_main, argc, argv);
}
