/* The FUSE ceiling for the benchmarks: a trivial read-only passthrough of one
 * flat directory that preads the real files, with the same tuning as ckptfs
 * (low-level API, 1 MiB requests, raised bdi readahead, keep_cache, long
 * timeouts, a multi-threaded loop, reply buffers reused from the same pool
 * as ckptfs' direct reads). Whatever it costs is the cost of FUSE alone.
 * --delay-us N makes every lookup, open and read wait N us first: a network
 * filesystem's round trip, for timing what ckptfs does on one.
 *   passthrough SRCDIR MOUNTPOINT [-f] [--delay-us N]            */
#define FUSE_USE_VERSION 312
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../src/fs/bdi.h"
#include "../src/fs/bufpool.h"

/* The daemon's top-level context: the directory and its files by inode. */
struct pt {
	char src[PATH_MAX], mnt[PATH_MAX];
	char **names;
	size_t n;
	struct ck_bufpool pool;
	unsigned delay_us; /* before each lookup, open and read */
};

static void round_trip(const struct pt *pt)
{
	if (pt->delay_us)
		usleep(pt->delay_us);
}

static int path_of(const struct pt *pt, fuse_ino_t ino, char *out)
{
	if (ino < 2 || ino - 2 >= pt->n)
		return -1;
	snprintf(out, PATH_MAX, "%s/%s", pt->src, pt->names[ino - 2]);
	return 0;
}

static void pt_init(void *ud, struct fuse_conn_info *conn)
{
	struct pt *pt = ud;
	conn->max_write = 1u << 20;
	conn->max_readahead = 1u << 20;
	if (conn->capable & FUSE_CAP_ASYNC_READ)
		conn->want |= FUSE_CAP_ASYNC_READ;
	ck_raise_bdi_readahead(pt->mnt, 1024);
}

static int attr_of(const struct pt *pt, fuse_ino_t ino, struct stat *st)
{
	char full[PATH_MAX];
	if (ino == FUSE_ROOT_ID) {
		memset(st, 0, sizeof *st);
		st->st_ino = ino;
		st->st_mode = S_IFDIR | 0555;
		st->st_nlink = 2;
		return 0;
	}
	if (path_of(pt, ino, full) < 0 || stat(full, st) < 0)
		return -1;
	st->st_ino = ino;
	st->st_blksize = 1u << 20;
	return 0;
}

static void pt_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct pt *pt = fuse_req_userdata(req);
	struct fuse_entry_param e;
	memset(&e, 0, sizeof e);
	round_trip(pt);
	for (size_t i = 0; parent == FUSE_ROOT_ID && i < pt->n; i++)
		if (!strcmp(pt->names[i], name)) {
			e.ino = i + 2;
			e.attr_timeout = e.entry_timeout = 86400;
			if (attr_of(pt, e.ino, &e.attr) == 0) {
				fuse_reply_entry(req, &e);
				return;
			}
		}
	fuse_reply_err(req, ENOENT);
}

static void pt_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)fi;
	struct stat st;
	if (attr_of(fuse_req_userdata(req), ino, &st) < 0)
		fuse_reply_err(req, ENOENT);
	else
		fuse_reply_attr(req, &st, 86400);
}

static void pt_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi)
{
	(void)fi;
	struct pt *pt = fuse_req_userdata(req);
	if (ino != FUSE_ROOT_ID) {
		fuse_reply_err(req, ENOTDIR);
		return;
	}
	char *buf = malloc(size);
	size_t used = 0;
	for (size_t i = (size_t)off; buf && i < pt->n; i++) {
		struct stat st = {.st_ino = i + 2, .st_mode = S_IFREG};
		size_t k = fuse_add_direntry(req, buf + used, size - used, pt->names[i], &st,
					     (off_t)(i + 1));
		if (k > size - used)
			break;
		used += k;
	}
	fuse_reply_buf(req, buf, used);
	free(buf);
}

static void pt_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	char full[PATH_MAX];
	round_trip(fuse_req_userdata(req));
	if ((fi->flags & O_ACCMODE) != O_RDONLY) {
		fuse_reply_err(req, EROFS);
		return;
	}
	int fd = path_of(fuse_req_userdata(req), ino, full) < 0 ? -1 : open(full, O_RDONLY);
	if (fd < 0) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	fi->fh = (uint64_t)fd;
	fi->keep_cache = 1;
	fuse_reply_open(req, fi);
}

static void pt_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	(void)ino;
	struct pt *pt = fuse_req_userdata(req);
	round_trip(pt);
	char *buf = ck_bufpool_get(&pt->pool, size);
	ssize_t n = buf ? pread((int)fi->fh, buf, size, off) : -1;
	if (n < 0)
		fuse_reply_err(req, buf ? errno : ENOMEM);
	else
		fuse_reply_buf(req, buf, (size_t)n);
	ck_bufpool_put(&pt->pool, buf, size);
}

static void pt_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino;
	close((int)fi->fh);
	fuse_reply_err(req, 0);
}

static const struct fuse_lowlevel_ops ops = {
	.init = pt_init,
	.lookup = pt_lookup,
	.getattr = pt_getattr,
	.readdir = pt_readdir,
	.open = pt_open,
	.read = pt_read,
	.release = pt_release,
};

int main(int argc, char **argv)
{
	static struct pt pt; /* lives for the whole process: the daemon's context */
	int fg = 0, bad = argc < 3 || !realpath(argv[1], pt.src) || !realpath(argv[2], pt.mnt);
	for (int i = 3; !bad && i < argc; i++) {
		char *end = NULL;
		if (!strcmp(argv[i], "-f"))
			fg = 1;
		else if (!strcmp(argv[i], "--delay-us") && i + 1 < argc && argv[i + 1][0] >= '0' &&
			 argv[i + 1][0] <= '9') {
			unsigned long us = strtoul(argv[++i], &end, 10);
			bad = *end || us > 10000000; /* at most 10 s */
			pt.delay_us = (unsigned)us;
		}
		else
			bad = 1;
	}
	if (bad) {
		fprintf(stderr, "usage: passthrough SRCDIR MOUNTPOINT [-f] [--delay-us N]\n");
		return 2;
	}
	DIR *d = opendir(pt.src);
	struct dirent *de;
	while (d && (de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		char **nn = realloc(pt.names, (pt.n + 1) * sizeof *nn);
		if (!nn || !(nn[pt.n] = strdup(de->d_name)))
			return 1;
		pt.names = nn;
		pt.n++;
	}
	if (d)
		closedir(d);
	ck_bufpool_init(&pt.pool, 1u << 20, 10);
	char *fargv[] = {argv[0], "-o", "ro,fsname=passthrough", NULL};
	struct fuse_args args = FUSE_ARGS_INIT(3, fargv);
	struct fuse_session *se = fuse_session_new(&args, &ops, sizeof ops, &pt);
	if (!se || fuse_set_signal_handlers(se) != 0 || fuse_session_mount(se, pt.mnt) != 0)
		return 1;
	if (fuse_daemonize(fg) != 0)
		return 1;
	struct fuse_loop_config *cfg = fuse_loop_cfg_create();
	fuse_loop_cfg_set_max_threads(cfg, 10);
	int rc = fuse_session_loop_mt(se, cfg);
	fuse_loop_cfg_destroy(cfg);
	fuse_session_unmount(se);
	fuse_remove_signal_handlers(se);
	fuse_session_destroy(se);
	ck_bufpool_destroy(&pt.pool);
	for (size_t i = 0; i < pt.n; i++)
		free(pt.names[i]);
	free(pt.names);
	return rc ? 1 : 0;
}
