/* The FUSE ceiling for the benchmarks: a trivial read-only passthrough of one
 * directory that preads the real files, with the same tuning as ckptfs
 * (1 MiB requests, raised bdi readahead, keep_cache, long timeouts, a
 * multi-threaded loop). Whatever it costs is the cost of FUSE alone.
 *   passthrough SRCDIR MOUNTPOINT [-f]            */
#define FUSE_USE_VERSION 312
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fuse.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../src/fs/bdi.h"

static char src[PATH_MAX], mnt[PATH_MAX];

static void path_of(char *out, const char *p)
{
	snprintf(out, PATH_MAX, "%s%s", src, p);
}

static void *pt_init(struct fuse_conn_info *conn, struct fuse_config *cfg)
{
	conn->max_write = 1u << 20;
	conn->max_readahead = 1u << 20;
	cfg->kernel_cache = 1;
	cfg->entry_timeout = cfg->attr_timeout = 86400;
	ck_raise_bdi_readahead(mnt, 1024);
	return NULL;
}

static int pt_getattr(const char *p, struct stat *st, struct fuse_file_info *fi)
{
	(void)fi;
	char full[PATH_MAX];
	path_of(full, p);
	if (stat(full, st) < 0)
		return -errno;
	st->st_blksize = 1u << 20;
	return 0;
}

static int pt_readdir(const char *p, void *buf, fuse_fill_dir_t fill, off_t off,
		      struct fuse_file_info *fi, enum fuse_readdir_flags fl)
{
	(void)off, (void)fi, (void)fl;
	char full[PATH_MAX];
	path_of(full, p);
	DIR *d = opendir(full);
	if (!d)
		return -errno;
	struct dirent *de;
	while ((de = readdir(d)))
		fill(buf, de->d_name, NULL, 0, 0);
	closedir(d);
	return 0;
}

static int pt_open(const char *p, struct fuse_file_info *fi)
{
	char full[PATH_MAX];
	path_of(full, p);
	if ((fi->flags & O_ACCMODE) != O_RDONLY)
		return -EROFS;
	int fd = open(full, O_RDONLY);
	if (fd < 0)
		return -errno;
	fi->fh = (uint64_t)fd;
	fi->keep_cache = 1;
	return 0;
}

static int pt_read(const char *p, char *buf, size_t size, off_t off, struct fuse_file_info *fi)
{
	(void)p;
	ssize_t n = pread((int)fi->fh, buf, size, off);
	return n < 0 ? -errno : (int)n;
}

static int pt_release(const char *p, struct fuse_file_info *fi)
{
	(void)p;
	close((int)fi->fh);
	return 0;
}

static const struct fuse_operations ops = {
	.init = pt_init,
	.getattr = pt_getattr,
	.readdir = pt_readdir,
	.open = pt_open,
	.read = pt_read,
	.release = pt_release,
};

int main(int argc, char **argv)
{
	if (argc < 3 || !realpath(argv[1], src) || !realpath(argv[2], mnt)) {
		fprintf(stderr, "usage: passthrough SRCDIR MOUNTPOINT [-f]\n");
		return 2;
	}
	char *fargv[] = {argv[0], mnt, "-o", "ro,fsname=passthrough", argc > 3 ? argv[3] : NULL,
			 NULL};
	return fuse_main(argc > 3 ? 5 : 4, fargv, &ops, NULL);
}
