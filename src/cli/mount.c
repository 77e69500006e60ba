/* ckptfs mount: plan first, then fork the daemon (before any thread, ring or
 * GPU context exists), and return only when the mount is live: the child
 * reports through a pipe once FUSE_INIT has arrived, or sends its error. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../fs/fs.h"
#include "cli.h"
#include "mpi_sync.h"

#define MAX_FUSE_ARGS 64

static void mount_help(FILE *f)
{
	fprintf(f,
		"usage: ckptfs mount SOURCE MOUNTPOINT [--mapping MAP]...\n"
		"                    [--mesh AXES (--rank R | --ranks LIST) | --shard-groups]\n"
		"                    [--device cpu|cuda|cuda:N|auto] [--state params|optimizer|all]\n"
		"                    [--set NAME=VALUE]...\n"
		"                    [-f] [-o OPT[,OPT...]]\n"
		"  --ranks 0-7        with --mesh: one daemon serving rank0/ ... rank7/ (also 0,2,5\n"
		"                     or all), one cache and one evaluation of every replicated or\n"
		"                     shared byte; --ranks local: this node's ranks (mpirun or\n"
		"                     torchrun numbering), mounted by its local rank 0 only\n"
		"  --mesh tp=8 --rank R  serve rank R's shard ({rank}, {tp}, ... in MOUNTPOINT are\n"
		"                     replaced; the rank may come from OMPI_COMM_WORLD_RANK or RANK;\n"
		"                     under mpirun, returns once every rank's mount is live)\n"
		"  --state params     serve the parameters only (optimizer: only the optimizer\n"
		"                     state that follows them; default all)\n"
		"  --set NAME=VALUE   a config.json value as the mappings see it (an integer or\n"
		"                     true/false; repeatable)\n"
		"  -f                 stay in the foreground (messages on stderr)\n"
		"  -o cache_size=SIZE evaluated bytes kept (default: 1/4 of the cgroup's\n"
		"                     memory.max, else of RAM, at least 64MiB; never less than\n"
		"                     4 chunks)\n"
		"  -o threads=N       evaluator threads, each with its own io_uring ring\n"
		"                     (default: one per core)\n"
		"  -o fuse_threads=N  most FUSE worker threads (default 10)\n"
		"  -o chunk=SIZE      bytes of a tensor per cache entry (default 4MiB; 4KiB to\n"
		"                     256MiB)\n"
		"  -o group_max=SIZE  dependency groups up to this size are evaluated whole on\n"
		"                     first read (default: cache_size/8, at most 256MiB)\n"
		"  -o log=FILE        append daemon messages to FILE\n"
		"  -o no_uring        read sources with pread instead of io_uring\n"
		"  -o direct_io       bypass the kernel page cache for data files (one copy less;\n"
		"                     no mmap)\n"
		"  -o max_shard_size=SIZE  also serve model-0000k-of-0000n.safetensors shards\n"
		"                     of at most SIZE and model.safetensors.index.json\n"
		"  -o part_size=SIZE  per-rank views: size of model-rank-R-part-P.safetensors\n"
		"                     (vLLM's sharded_state layout; default 5GiB)\n"
		"  -o zip_crc         fill in pytorch_model.bin's CRC-32 fields (evaluates every\n"
		"                     tensor before the mount is live; default: CRCs are 0)\n"
		"  -o no_direct       evaluate renamed tensors through the cache too (default:\n"
		"                     they are read straight from their source file)\n"
		"  -o no_prefetch     do not evaluate the next group ahead of a reader that\n"
		"                     starts a tensor (default: one group ahead, within half\n"
		"                     the cache)\n"
		"  -o npy_f32         npy/ serves BF16 and FP8 tensors widened to float32\n"
		"                     (default: raw '<V2' / '|V1' elements)\n"
		"  --device cpu|cuda|cuda:N|auto  where casts, transposes and block scales run\n"
		"                     (default cpu; cuda: the local rank's GPU; the GPU is opened\n"
		"                     by the daemon and a failure leaves nothing mounted; also\n"
		"                     -o device=DEV)\n"
		"  -o gpu_mem=SIZE    device memory for the CUDA lanes (default 1GiB)\n"
		"  -o gpu_min=SIZE    smaller reads stay on the CPU (default 256KiB)\n"
		"  -o nonempty        mount over a directory that is not empty\n"
		"  -o gguf_dequant=F32|BF16  quantized GGUF tensors decoded to (default F32)\n"
		"  -o gguf[=TYPE]     also serve model.gguf for llama.cpp: Llama, Mistral, Mixtral,\n"
		"                     Qwen2, Qwen3; TYPE F32, F16, BF16, Q8_0 or Q4_0 (default:\n"
		"                     the source's float type; quantized on read)\n"
		"  -o gguf_pre=NAME   the BPE pre-tokenizer llama.cpp should use (default: from\n"
		"                     tokenizer.json's split pattern)\n"
		"  -o gguf_vocab=none placeholder tokens when there is no tokenizer file (token\n"
		"                     ids only)\n"
		"  -o dcp             also serve dcp/: the view as a PyTorch Distributed\n"
		"                     Checkpoint (.metadata, __0_0.distcp; whole tensors)\n"
		"  -o torch_dist      also serve torch_dist/: the same for Megatron-core (with\n"
		"                     metadata.json and common.pt; stacked layers come from\n"
		"                     --mapping llama-hf-to-megatron-torch-dist)\n"
		"  -o eval_delay_ms=N testing: delay every evaluation\n"
		"  FUSE and mount options passed on: allow_other, allow_root, auto_unmount,\n"
		"                     default_permissions, debug, fsname=, subtype=, max_read=,\n"
		"                     max_background=, max_threads=, noatime, nodev, nosuid, ...\n"
		"  any other -o option is refused\n"
		"Unmount with `fusermount3 -u MOUNTPOINT`, or SIGINT/SIGTERM to the daemon.\n");
}

static int bad(struct ck_err *err, const char *opt, const char *want)
{
	return ck_fail(err, CK_E_USAGE, "mount: bad option -o %s (%s; see ckptfs mount --help)",
		       opt, want);
}

/* The FUSE and mount(8) options passed on to libfuse; anything else is
 * refused here with one line instead of two from libfuse after the fork. */
static int fuse_option(const char *opt, size_t klen)
{
	static const char *const flags[] = {
		"allow_other", "allow_root", "auto_unmount", "default_permissions", "debug",
		"ro", "noatime", "nodiratime", "relatime", "nodev", "nosuid", "noexec", "dev",
		"suid", "exec", "async_read", "sync_read", "clone_fd"};
	static const char *const valued[] = {"fsname", "subtype", "max_read", "max_background",
					     "congestion_threshold", "max_idle_threads",
					     "max_threads"};
	int has_val = opt[klen] == '=';
	for (size_t k = 0; !has_val && k < sizeof flags / sizeof *flags; k++)
		if (klen == strlen(flags[k]) && !strncmp(opt, flags[k], klen))
			return 1;
	for (size_t k = 0; has_val && k < sizeof valued / sizeof *valued; k++)
		if (klen == strlen(valued[k]) && !strncmp(opt, valued[k], klen))
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
		char line[8192];
		int mounted = 0;
		while (!mounted && fgets(line, sizeof line, mi)) {
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

/* Split one -o list into ckptfs options and FUSE options. */
static int parse_opts(char *list, struct ck_fs_opts *o, char **fuse_argv, int *fuse_argc,
		      struct ck_err *err)
{
	for (char *save, *opt = strtok_r(list, ",", &save); opt; opt = strtok_r(NULL, ",", &save)) {
		char *eq = strchr(opt, '=');
		const char *val = eq ? eq + 1 : NULL;
		size_t klen = eq ? (size_t)(eq - opt) : strlen(opt);
#define KEY(k) (klen == strlen(k) && !strncmp(opt, k, klen))
		int r = ck_serve_option(&o->serve, "-o ", opt, err);
		if (r < 0) {
			ck_err_prefix(err, "mount");
			return -1;
		}
		if (r == 1)
			continue;
		if (val && (KEY("direct_io") || KEY("nonempty"))) {
			return bad(err, opt, "a flag takes no value");
		} else if (KEY("fuse_threads")) {
			char *end;
			long v = val ? strtol(val, &end, 10) : -1;
			if (!val || !*val || *end || v < 1 || v > 64)
				return bad(err, opt, "1 to 64");
			o->fuse_threads = (int)v;
		} else if (KEY("log")) {
			if (!val || !*val)
				return bad(err, opt, "a file name");
			o->log_path = val;
		} else if (KEY("direct_io")) {
			o->direct_io = 1;
		} else if (KEY("nonempty")) {
			o->nonempty = 1;
		} else if (fuse_option(opt, klen)) {
			if (*fuse_argc + 2 >= MAX_FUSE_ARGS)
				return ck_fail(err, CK_E_USAGE, "mount: too many options");
			fuse_argv[(*fuse_argc)++] = "-o";
			fuse_argv[(*fuse_argc)++] = opt;
		} else {
			return ck_fail(err, CK_E_USAGE,
				       "mount: unknown option -o %s (see ckptfs mount --help)", opt);
		}
#undef KEY
	}
	return 0;
}

/* The served files first (they point into the view), then the view. */
static void close_view(struct ck_served *srv, struct ck_view *v)
{
	ck_served_close(srv);
	ck_view_close(v);
}

/* *synced: whether the MPI agreement has been made (or must not be: -f) */
static int mount_main(int argc, char **argv, int *synced)
{
	const char *source = NULL, *mnt_arg = NULL;
	struct ck_view_args va = {.rank = -1};
	int r;
	struct ck_fs_opts o;
	memset(&o, 0, sizeof o);
	ck_serve_opts_init(&o.serve);
	char *fuse_argv[MAX_FUSE_ARGS] = {"ckptfs", "-o", "ro,fsname=ckptfs,subtype=ckptfs"};
	int fuse_argc = 3;
	struct ck_err err;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			mount_help(stdout);
			return 0;
		} else if ((r = ck_view_arg(&va, argc, argv, &i, &err)) != 0) {
			if (r < 0)
				return ck_cli_report(&err);		} else if (!strcmp(a, "-f")) {
			o.foreground = 1;
		} else if ((!strcmp(a, "--device") || !strcmp(a, "-o")) && i + 1 >= argc) {
			return ck_cli_report((ck_fail(&err, CK_E_USAGE, "%s needs a value", a), &err));
		} else if (!strcmp(a, "--device")) {
			if (ck_device_parse(argv[++i], &o.serve.device, &err) < 0)
				return ck_cli_report(&err);
		} else if (!strcmp(a, "-o")) {
			if (parse_opts(argv[++i], &o, fuse_argv, &fuse_argc, &err) < 0)
				return ck_cli_report(&err);
		} else if (a[0] == '-' && a[1]) {
			return ck_cli_report((ck_fail(&err, CK_E_USAGE, "mount: unknown option %s", a), &err));
		} else if (!source) {
			source = a;
		} else if (!mnt_arg) {
			mnt_arg = a;
		} else {
			return ck_cli_report((ck_fail(&err, CK_E_USAGE, "mount: too many arguments"), &err));
		}
	}
	if (!source || !mnt_arg) {
		mount_help(stderr);
		return 2;
	}
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
	int pipefd[2] = {-1, -1};
	if (!o.foreground) {
		if (pipe(pipefd) < 0) {
			close_view(&srv, &v);
			return ck_cli_report((ck_fail_sys(&err, errno, "pipe"), &err));
		}
		pid_t pid = fork();
		if (pid < 0) {
			close_view(&srv, &v);
			return ck_cli_report((ck_fail_sys(&err, errno, "fork"), &err));
		}
		if (pid > 0) { /* parent: wait for the child's word */
			close(pipefd[1]);
			char msg[2048];
			size_t got = 0;
			ssize_t r;
			while (got < sizeof msg - 1 &&
			       (r = read(pipefd[0], msg + got, sizeof msg - 1 - got)) != 0) {
				if (r < 0 && errno == EINTR)
					continue;
				if (r < 0)
					break;
				got += (size_t)r;
			}
			msg[got] = '\0';
			close(pipefd[0]);
			close_view(&srv, &v);
			int ok = !strncmp(msg, "OK\n", 3);
			/* under mpirun: return once every rank's mount is live; if one
			 * failed, the others unmount, so nothing half-mounted remains */
			/* mpirun terminates the job when a rank exits non-zero:
			 * finish the unmount below before taking its signal */
			sigset_t block, old;
			sigemptyset(&block);
			sigaddset(&block, SIGTERM);
			sigaddset(&block, SIGINT);
			sigaddset(&block, SIGHUP);
			sigprocmask(SIG_BLOCK, &block, &old);
			int all = ck_mpi_agree(ok);
			*synced = 1;
			if (ok && all == 0) { /* unmount before MPI ends (see ck_mpi_agree) */
				kill(pid, SIGTERM);
				int st;
				waitpid(pid, &st, 0);
			}
			if (all >= 0)
				ck_mpi_finish();
			if (ok && all == 0) {
				fprintf(stderr, "ckptfs: another rank failed to mount; %s unmounted\n",
					mountpoint);
				return 1;
			}
			sigprocmask(SIG_SETMASK, &old, NULL);
			if (ok)
				return 0;
			int st;
			waitpid(pid, &st, 0);
			char *nl = strchr(msg, '\n');
			if (nl)
				*nl = '\0';
			fprintf(stderr, "ckptfs: %s\n",
				got ? msg : "the daemon exited before the mount was live");
			return 1;
		}
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
