#include "outdir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int has_suffix(const char *s, const char *suf)
{
	size_t n = strlen(s), m = strlen(suf);
	return n >= m && !strcmp(s + n - m, suf);
}

int ck_outdir_owned(const char *name)
{
	if (!strncmp(name, ".ckptfs-", 8)) /* another writer's temporary file */
		return 0;
	static const char *const suffixes[] = {".safetensors", ".index.json", ".bin", ".pt",
					       ".pth", ".gguf", ".distcp"};
	for (size_t k = 0; k < sizeof suffixes / sizeof *suffixes; k++)
		if (has_suffix(name, suffixes[k]))
			return 1;
	return !strcmp(name, ".metadata") || !strcmp(name, "config.json");
}

/* ---- aliasing with the source ---- */

struct id {
	dev_t dev;
	ino_t ino;
};

static void dir_of(const char *path, char *out, size_t n)
{
	snprintf(out, n, "%s", path);
	char *slash = strrchr(out, '/');
	if (!slash)
		snprintf(out, n, ".");
	else if (slash == out)
		out[1] = '\0';
	else
		*slash = '\0';
}

/* The existing part of path, made absolute and free of links: path itself
 * if it exists, else its deepest existing ancestor. */
static int existing_real(const char *path, char *out, int *exists)
{
	char p[PATH_MAX];
	snprintf(p, sizeof p, "%s", path);
	*exists = 1;
	for (;;) {
		if (realpath(p, out))
			return 0;
		if (errno != ENOENT)
			return -1;
		*exists = 0;
		char up[PATH_MAX];
		dir_of(p, up, sizeof up);
		if (!strcmp(up, p))
			return -1;
		snprintf(p, sizeof p, "%s", up);
	}
}

/* Is dir (dev/ino) path itself or one of its ancestors? path is real. */
static int is_self_or_ancestor(const struct id *dir, const char *real)
{
	char p[PATH_MAX];
	snprintf(p, sizeof p, "%s", real);
	for (;;) {
		struct stat st;
		if (stat(p, &st) == 0 && st.st_dev == dir->dev && st.st_ino == dir->ino)
			return 1;
		if (!strcmp(p, "/"))
			return 0;
		char up[PATH_MAX];
		dir_of(p, up, sizeof up);
		snprintf(p, sizeof p, "%s", up);
	}
}

static int add_dir(struct id *ids, size_t *n, const char *dir)
{
	struct stat st;
	if (stat(dir, &st) < 0)
		return 0;
	ids[(*n)++] = (struct id){st.st_dev, st.st_ino};
	return 0;
}

int ck_outdir_check_source(const char *outdir, const char *source, const struct ck_catalog *cat,
			   struct ck_err *err)
{
	char out_real[PATH_MAX];
	int exists;
	if (existing_real(outdir, out_real, &exists) < 0)
		return ck_fail(err, CK_E_USAGE, "%s: output directory: %s", outdir, strerror(errno));
	/* every directory a source file lives in, as named and as resolved */
	size_t cap = 2 * cat->n_files + 2, n = 0;
	struct id *dirs = malloc(cap * sizeof *dirs);
	if (!dirs)
		return ck_fail_sys(err, ENOMEM, "convert");
	struct stat st;
	char d[PATH_MAX];
	/* a directory source: nothing may be written in it or below it (its
	 * files may be links elsewhere, a Hugging Face cache's blobs: those
	 * directories too). A single-file source: only containing the file is
	 * refused (below), so `convert dl/model.gguf dl/hf` stays possible. */
	if (stat(source, &st) == 0 && S_ISDIR(st.st_mode)) {
		add_dir(dirs, &n, source);
		for (size_t i = 0; i < cat->n_files; i++) {
			char real[PATH_MAX];
			dir_of(cat->files[i].path, d, sizeof d);
			add_dir(dirs, &n, d);
			if (realpath(cat->files[i].path, real)) {
				dir_of(real, d, sizeof d);
				add_dir(dirs, &n, d);
			}
		}
	}
	int rc = 0;
	for (size_t k = 0; k < n && rc == 0; k++) {
		/* OUTDIR is a source directory or lies inside one */
		if (is_self_or_ancestor(&dirs[k], out_real))
			rc = ck_fail(err, CK_E_USAGE,
				     "%s: the output directory is or lies inside the source's "
				     "directory: refusing to write over the source",
				     outdir);
	}
	/* OUTDIR holds a source file or a source directory (at any depth) */
	for (size_t i = 0; rc == 0 && exists && i < cat->n_files; i++) {
		char real[PATH_MAX];
		struct stat ost;
		if (!realpath(cat->files[i].path, real) || stat(out_real, &ost) < 0)
			continue;
		struct id od = {ost.st_dev, ost.st_ino};
		dir_of(real, d, sizeof d);
		if (is_self_or_ancestor(&od, d))
			rc = ck_fail(err, CK_E_USAGE,
				     "%s: the output directory contains the source file %s: refusing "
				     "to write over the source",
				     outdir, cat->files[i].path);
	}
	free(dirs);
	return rc;
}

/* Is directory `dir` (named as given, or resolved) where the log's
 * directory `real` is (a single-file source), or one of its ancestors (a
 * directory source)? */
static int log_in_dir(const char *dir, const char *real, int below)
{
	struct stat st, rst;
	char r[PATH_MAX];
	for (int k = 0; k < 2; k++) {
		if (k && !realpath(dir, r))
			return 0;
		if (stat(k ? r : dir, &st) < 0)
			continue;
		struct id id = {st.st_dev, st.st_ino};
		if (below ? is_self_or_ancestor(&id, real)
			  : stat(real, &rst) == 0 && rst.st_dev == id.dev && rst.st_ino == id.ino)
			return 1;
	}
	return 0;
}

static int same_file(const struct stat *a, const struct stat *b)
{
	return a->st_dev == b->st_dev && a->st_ino == b->st_ino;
}

int ck_log_open(const char *path, const char *source, const struct ck_catalog *cat,
		char *const *maps, int n_maps, struct ck_err *err)
{
	struct stat st, f;
	char d[PATH_MAX], real[PATH_MAX], target[PATH_MAX];
	if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
		return ck_fail(err, CK_E_USAGE, "-o log=%s: not a regular file", path);
	/* where a link leads is where the lines go (open follows it, and would
	 * create a missing target) */
	int linked = lstat(path, &f) == 0 && S_ISLNK(f.st_mode);
	if (linked && !realpath(path, target))
		return ck_fail(err, CK_E_USAGE, "-o log=%s: a symbolic link to nothing", path);
	dir_of(linked ? target : path, d, sizeof d);
	if (!realpath(d, real))
		return ck_fail(err, CK_E_USAGE, "-o log=%s: %s: %s", path, d, strerror(errno));
	int below = stat(source, &st) == 0 && S_ISDIR(st.st_mode);
	const char *near = below && log_in_dir(source, real, 1) ? source : NULL;
	for (size_t i = 0; !near && i < cat->n_files; i++) {
		char r[PATH_MAX]; /* the file's directory, and that of the file it links to */
		dir_of(cat->files[i].path, d, sizeof d);
		int in = log_in_dir(d, real, below);
		if (!in && realpath(cat->files[i].path, r)) {
			dir_of(r, d, sizeof d);
			in = log_in_dir(d, real, below);
		}
		if (in)
			near = cat->files[i].path;
	}
	if (near)
		return ck_fail(err, CK_E_USAGE,
			       "-o log=%s: lies %s the checkpoint (%s): refusing to write there",
			       path, below ? "in the directory of" : "beside", near);
	int fd =
	    open(path, O_WRONLY | O_APPEND | O_CREAT | O_NONBLOCK | O_NOCTTY | O_CLOEXEC, 0644);
	if (fd < 0)
		return ck_fail_sys(err, errno, "-o log=%s: cannot open the log", path);
	const char *is = fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) ? "not a regular file" : NULL;
	for (size_t i = 0; !is && i < cat->n_files; i++)
		if (fstat(cat->files[i].fd, &f) == 0 && same_file(&st, &f))
			is = "the source file";
	for (int k = 0; !is && k < n_maps; k++)
		if (stat(maps[k], &f) == 0 && same_file(&st, &f))
			is = "a mapping";
	if (is) {
		close(fd);
		return ck_fail(err, CK_E_USAGE, "-o log=%s: %s: refusing to write to it", path, is);
	}
	fcntl(fd, F_SETFL, O_APPEND); /* a regular file: blocking writes */
	return fd;
}

/* ---- staging and committing ---- */

int ck_mkdirs(const char *path, struct ck_err *err)
{
	char p[PATH_MAX];
	if (snprintf(p, sizeof p, "%s", path) >= (int)sizeof p)
		return ck_fail(err, CK_E_USAGE, "%s: path too long", path);
	for (char *s = p + 1; *s; s++)
		if (*s == '/') {
			*s = '\0';
			if (mkdir(p, 0755) < 0 && errno != EEXIST)
				return ck_fail_sys(err, errno, "%s: cannot create", p);
			*s = '/';
		}
	if (mkdir(p, 0755) < 0 && errno != EEXIST)
		return ck_fail_sys(err, errno, "%s: cannot create", p);
	return 0;
}

static void sync_dir(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd >= 0) {
		fsync(fd);
		close(fd);
	}
}

/* The first checkpoint file in dir that is not in keep[], or "" if none. */
static int find_owned(const char *dir, const char *const *keep, int n_keep, char *found,
		      size_t n, struct ck_err *err)
{
	found[0] = '\0';
	DIR *d = opendir(dir);
	if (!d)
		return ck_fail_sys(err, errno, "%s: cannot list", dir);
	struct dirent *e;
	while (!found[0] && (e = readdir(d))) {
		if (!ck_outdir_owned(e->d_name))
			continue;
		int kept = 0;
		for (int k = 0; k < n_keep && !kept; k++)
			kept = !strcmp(keep[k], e->d_name);
		if (!kept)
			snprintf(found, n, "%s", e->d_name);
	}
	closedir(d);
	return 0;
}

int ck_outdir_begin(struct ck_outdir *o, const char *outdir, int overwrite, int shared,
		    const char *const *shared_names, int n_shared, struct ck_err *err)
{
	memset(o, 0, sizeof *o);
	if (!outdir[0])
		return ck_fail(err, CK_E_USAGE, "empty output directory name");
	/* an absolute spelling of OUTDIR, its parent created */
	char parent[PATH_MAX], name[PATH_MAX], rp[PATH_MAX];
	char trimmed[PATH_MAX];
	snprintf(trimmed, sizeof trimmed, "%s", outdir);
	for (size_t l = strlen(trimmed); l > 1 && trimmed[l - 1] == '/'; l--)
		trimmed[l - 1] = '\0';
	dir_of(trimmed, parent, sizeof parent);
	const char *base = strrchr(trimmed, '/') ? strrchr(trimmed, '/') + 1 : trimmed;
	snprintf(name, sizeof name, "%s", base);
	if (ck_mkdirs(parent, err) < 0)
		return -1;
	if (!realpath(parent, rp))
		return ck_fail_sys(err, errno, "%s", parent);
	struct stat st;
	int exists = 0;
	if (!strcmp(name, ".") || !strcmp(name, "..") || !strcmp(name, "/")) {
		if (!realpath(trimmed, o->final))
			return ck_fail_sys(err, errno, "%s", outdir);
		exists = 1;
	} else if (snprintf(o->final, sizeof o->final, "%s/%s", strcmp(rp, "/") ? rp : "", name) >=
		   (int)sizeof o->final) {
		return ck_fail(err, CK_E_USAGE, "%s: path too long", outdir);
	} else if (lstat(o->final, &st) == 0) {
		/* a link to a directory: operate on the directory it names */
		if (S_ISLNK(st.st_mode) && !realpath(trimmed, o->final))
			return ck_fail_sys(err, errno, "%s", outdir);
		exists = 1;
	}
	if (exists && (stat(o->final, &st) < 0 || !S_ISDIR(st.st_mode)))
		return ck_fail(err, CK_E_USAGE, "%s: exists and is not a directory", outdir);
	char found[512];
	if (exists && find_owned(o->final, shared ? shared_names : NULL, shared ? n_shared : 0,
				 found, sizeof found, err) < 0)
		return -1;
	if (shared) {
		/* each rank renames its own file into place; the index comes last */
		if (!exists && ck_mkdirs(o->final, err) < 0)
			return -1;
		if (exists && found[0] && !overwrite)
			return ck_fail(err, CK_E_USAGE,
				       "%s: already holds a checkpoint (%s) that this run would not "
				       "replace: remove it, or --overwrite",
				       outdir, found);
		o->mode = CK_OUT_SHARED;
		snprintf(o->stage, sizeof o->stage, "%s", o->final);
		return 0;
	}
	if (exists && found[0] && !overwrite)
		return ck_fail(err, CK_E_USAGE,
			       "%s: already holds a checkpoint (%s): choose a new directory, or "
			       "--overwrite to replace it",
			       outdir, found);
	char fdir[PATH_MAX];
	dir_of(o->final, fdir, sizeof fdir);
	o->mode = !exists ? CK_OUT_NEW : found[0] ? CK_OUT_REPLACE : CK_OUT_INTO;
	int r = o->mode == CK_OUT_INTO
			? snprintf(o->stage, sizeof o->stage, "%s/" CK_STAGE_TAG "%d", o->final,
				   (int)getpid())
			: snprintf(o->stage, sizeof o->stage, "%s/.%s" CK_STAGE_TAG "%d",
				   strcmp(fdir, "/") ? fdir : "", strrchr(o->final, '/') + 1,
				   (int)getpid());
	if (r >= (int)sizeof o->stage)
		return ck_fail(err, CK_E_USAGE, "%s: path too long", outdir);
	if (mkdir(o->stage, 0755) < 0)
		return ck_fail_sys(err, errno, "%s: cannot create the staging directory", o->stage);
	return 0;
}

/* Order of the move into an existing directory: weights first, then the
 * index, then config.json, so a loader never finds an index whose shards
 * are not there yet. */
static int move_rank(const char *name)
{
	return has_suffix(name, ".index.json") ? 1 : !strcmp(name, "config.json") ? 2 : 0;
}

static int move_in(struct ck_outdir *o, struct ck_err *err)
{
	for (int pass = 0; pass < 3; pass++) {
		DIR *d = opendir(o->stage);
		if (!d)
			return ck_fail_sys(err, errno, "%s", o->stage);
		struct dirent *e;
		int rc = 0;
		while (rc == 0 && (e = readdir(d))) {
			if (e->d_name[0] == '.' || move_rank(e->d_name) != pass)
				continue;
			char from[PATH_MAX + 256], to[PATH_MAX + 256];
			snprintf(from, sizeof from, "%s/%s", o->stage, e->d_name);
			snprintf(to, sizeof to, "%s/%s", o->final, e->d_name);
			if (rename(from, to) < 0)
				rc = ck_fail_sys(err, errno, "%s", to);
		}
		closedir(d);
		if (rc < 0)
			return -1;
	}
	if (rmdir(o->stage) < 0)
		return ck_fail_sys(err, errno, "%s", o->stage);
	sync_dir(o->final);
	return 0;
}

/* REPLACE: give the staged directory every entry of the old one that the
 * old checkpoint does not own. moved[] records subdirectories moved, so a
 * failure can put them back. */
static int carry_over(struct ck_outdir *o, char ***moved, size_t *n_moved, struct ck_err *err)
{
	DIR *d = opendir(o->final);
	if (!d)
		return ck_fail_sys(err, errno, "%s", o->final);
	struct dirent *e;
	int rc = 0;
	size_t cap = 0;
	while (rc == 0 && (e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") || ck_outdir_owned(e->d_name))
			continue;
		char from[PATH_MAX + 256], to[PATH_MAX + 256];
		snprintf(from, sizeof from, "%s/%s", o->final, e->d_name);
		snprintf(to, sizeof to, "%s/%s", o->stage, e->d_name);
		struct stat st;
		if (lstat(from, &st) < 0) {
			rc = ck_fail_sys(err, errno, "%s", from);
		} else if (S_ISREG(st.st_mode)) {
			if (link(from, to) < 0)
				rc = ck_fail_sys(err, errno, "%s: cannot keep it beside the new "
							     "checkpoint",
						 from);
		} else if (S_ISLNK(st.st_mode)) {
			char target[PATH_MAX];
			ssize_t l = readlink(from, target, sizeof target - 1);
			if (l < 0 || (target[l] = '\0', symlink(target, to) < 0))
				rc = ck_fail_sys(err, errno, "%s", from);
		} else { /* directories and the rest move; put back on failure */
			if (*n_moved == cap) {
				cap = cap ? 2 * cap : 8;
				char **nm = realloc(*moved, cap * sizeof *nm);
				if (!nm) {
					rc = ck_fail_sys(err, ENOMEM, "convert");
					break;
				}
				*moved = nm;
			}
			char *name = strdup(e->d_name);
			if (!name || rename(from, to) < 0) {
				free(name);
				rc = ck_fail_sys(err, errno ? errno : ENOMEM, "%s", from);
			} else {
				(*moved)[(*n_moved)++] = name;
			}
		}
	}
	closedir(d);
	return rc;
}

static void put_back(struct ck_outdir *o, char **moved, size_t n_moved)
{
	for (size_t k = 0; k < n_moved; k++) {
		char from[PATH_MAX + 256], to[PATH_MAX + 256];
		snprintf(from, sizeof from, "%s/%s", o->stage, moved[k]);
		snprintf(to, sizeof to, "%s/%s", o->final, moved[k]);
		rename(from, to);
	}
}

/* Empty a flat directory we made (staged files, links) and remove it. */
static void remove_flat(const char *dir)
{
	DIR *d = opendir(dir);
	if (!d)
		return;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		char p[PATH_MAX + 256];
		snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
		unlink(p);
	}
	closedir(d);
	rmdir(dir);
}

static int exchange(struct ck_outdir *o, struct ck_err *err)
{
	char **moved = NULL;
	size_t n_moved = 0;
	int rc = carry_over(o, &moved, &n_moved, err);
	if (rc == 0 && renameat2(AT_FDCWD, o->stage, AT_FDCWD, o->final, RENAME_EXCHANGE) < 0)
		rc = ck_fail_sys(err, errno,
				 "%s: cannot swap in the new checkpoint (the old one is untouched)",
				 o->final);
	if (rc < 0) {
		put_back(o, moved, n_moved);
		for (size_t k = 0; k < n_moved; k++)
			free(moved[k]);
		free(moved);
		return -1;
	}
	for (size_t k = 0; k < n_moved; k++)
		free(moved[k]);
	free(moved);
	char fdir[PATH_MAX];
	dir_of(o->final, fdir, sizeof fdir);
	sync_dir(fdir);
	/* the old directory now sits at the staging path: it holds the old
	 * checkpoint's files and links to what was carried over */
	remove_flat(o->stage);
	return 0;
}

int ck_outdir_commit(struct ck_outdir *o, struct ck_err *err)
{
	char fdir[PATH_MAX];
	switch (o->mode) {
	case CK_OUT_NEW:
		if (rename(o->stage, o->final) < 0)
			return ck_fail_sys(err, errno, "%s", o->final);
		dir_of(o->final, fdir, sizeof fdir);
		sync_dir(fdir);
		return 0;
	case CK_OUT_INTO:
		return move_in(o, err);
	case CK_OUT_REPLACE:
		return exchange(o, err);
	case CK_OUT_SHARED:
		sync_dir(o->final);
		return 0;
	}
	return 0;
}

void ck_outdir_abort(struct ck_outdir *o)
{
	if (o->mode != CK_OUT_SHARED && o->stage[0])
		remove_flat(o->stage);
}

int ck_outdir_remove_others(const struct ck_outdir *o, const char *const *keep, int n_keep,
			    struct ck_err *err)
{
	char found[512];
	for (;;) {
		if (find_owned(o->final, keep, n_keep, found, sizeof found, err) < 0)
			return -1;
		if (!found[0])
			break;
		char p[PATH_MAX + 600];
		snprintf(p, sizeof p, "%s/%s", o->final, found);
		if (unlink(p) < 0)
			return ck_fail_sys(err, errno, "%s: cannot remove the old checkpoint file", p);
	}
	sync_dir(o->final);
	return 0;
}
