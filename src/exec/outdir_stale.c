/* What an earlier, killed convert left where this one writes (see outdir.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "outdir.h"

/* The pid in name after prefix: digits, then the end (a staging directory)
 * or '-' (a temp file); 0 if name is not such an entry. */
static long pid_after(const char *name, const char *prefix)
{
	size_t n = strlen(prefix);
	if (strncmp(name, prefix, n) != 0 || name[n] < '1' || name[n] > '9')
		return 0;
	char *end;
	errno = 0;
	long pid = strtol(name + n, &end, 10);
	if (errno || pid <= 0 || pid > INT_MAX || (*end && *end != '-'))
		return 0; /* not a pid_t: not one of ours */
	return pid;
}

/* Gone: no process of that pid (one of another user's is EPERM, alive). */
static int gone(long pid)
{
	return pid != (long)getpid() && kill((pid_t)pid, 0) < 0 && errno == ESRCH;
}

/* Bytes in a staging directory (one level: it is flat, but for what
 * --overwrite carried over) and its entries that are not checkpoint files. */
static void measure(const char *path, const struct stat *st, uint64_t *bytes, int *foreign)
{
	if (!S_ISDIR(st->st_mode)) {
		*bytes += (uint64_t)st->st_blocks * 512;
		return;
	}
	DIR *d = opendir(path);
	if (!d)
		return;
	for (struct dirent *e; (e = readdir(d));) {
		const char *n = e->d_name;
		struct stat es;
		if (!strcmp(n, ".") || !strcmp(n, ".."))
			continue;
		if (fstatat(dirfd(d), n, &es, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(es.st_mode))
			*bytes += (uint64_t)es.st_blocks * 512;
		if (!ck_outdir_owned(n) && strncmp(n, CK_TMP_TAG, strlen(CK_TMP_TAG)) != 0)
			(*foreign)++;
	}
	closedir(d);
}

static void scan(const char *dir, const char *prefix, struct ck_outdir_stale *s)
{
	DIR *d = opendir(dir);
	if (!d)
		return;
	struct dirent *e;
	while ((e = readdir(d))) {
		long pid = pid_after(e->d_name, prefix);
		if (!pid || !gone(pid))
			continue;
		char p[PATH_MAX + 256];
		struct stat st;
		snprintf(p, sizeof p, "%s/%s", strcmp(dir, "/") ? dir : "", e->d_name);
		if (lstat(p, &st) < 0 || (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode)))
			continue;
		int foreign = 0;
		measure(p, &st, &s->bytes, &foreign);
		/* named: the first, or the first that holds the user's entries */
		if (s->n++ == 0 || (foreign && !s->foreign)) {
			snprintf(s->path, sizeof s->path, "%s", p);
			s->pid = pid;
			s->foreign = foreign;
		}
	}
	closedir(d);
}

void ck_outdir_stale(const struct ck_outdir *o, struct ck_outdir_stale *s)
{
	memset(s, 0, sizeof *s);
	char parent[PATH_MAX], prefix[PATH_MAX + 32];
	snprintf(parent, sizeof parent, "%s", o->final);
	char *slash = strrchr(parent, '/');
	if (!slash)
		return;
	snprintf(prefix, sizeof prefix, ".%s" CK_STAGE_TAG, slash + 1);
	if (slash == parent)
		slash[1] = '\0';
	else
		*slash = '\0';
	scan(parent, prefix, s);	     /* beside OUTDIR: a new one, --overwrite */
	scan(o->final, CK_STAGE_TAG, s); /* inside it: into a directory */
	scan(o->final, CK_TMP_TAG, s);   /* --shard-groups' files */
}
