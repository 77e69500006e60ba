/* O_DIRECT descriptors for an engine's source files (see engine.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine.h"

/* fd of the catalog reopened with O_DIRECT, or -1 when its file system
 * will not read it so (open or an aligned probe read fails) or the reopened
 * file is not the same one; -2 when the process is out of descriptors. */
static int reopen_direct(int fd, unsigned char *probe)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
	int d = open(path, O_RDONLY | O_DIRECT | O_CLOEXEC);
	if (d < 0)
		return errno == EMFILE || errno == ENFILE ? -2 : -1;
	struct stat a, b;
	ssize_t got;
	do
		got = pread(d, probe, CK_DIO_ALIGN, 0);
	while (got < 0 && errno == EINTR);
	if (got < 0 || fstat(fd, &a) < 0 || fstat(d, &b) < 0 || a.st_ino != b.st_ino ||
	    a.st_dev != b.st_dev) {
		close(d);
		return -1;
	}
	return d;
}

long ck_engine_open_direct(struct ck_engine *e, uint32_t *first, struct ck_err *err)
{
	const struct ck_catalog *cat = e->plan->cat;
	void *probe = NULL;
	if (e->dfd)
		return ck_fail(err, CK_E_USAGE, "O_DIRECT descriptors are open already");
	e->dfd = malloc((cat->n_files ? cat->n_files : 1) * sizeof *e->dfd);
	if (!e->dfd || posix_memalign(&probe, CK_DIO_ALIGN, CK_DIO_ALIGN) != 0) {
		free(e->dfd);
		e->dfd = NULL;
		return ck_fail_sys(err, ENOMEM, "O_DIRECT descriptors");
	}
	long buffered = 0;
	for (uint32_t i = 0; i < cat->n_files; i++)
		e->dfd[i] = -1;
	for (uint32_t i = 0; i < cat->n_files; i++) {
		e->dfd[i] = reopen_direct(cat->files[i].fd, probe);
		if (e->dfd[i] == -2) {
			free(probe);
			ck_engine_fini(e); /* closes the ones opened */
			return ck_fail_sys(
			    err, EMFILE,
			    "%s: no descriptor left for its O_DIRECT twin (%zu source "
			    "files need two each: raise ulimit -n)",
			    cat->files[i].path, cat->n_files);
		}
		if (e->dfd[i] < 0 && buffered++ == 0 && first)
			*first = i;
	}
	free(probe);
	return buffered;
}

void ck_engine_fini(struct ck_engine *e)
{
	if (!e->dfd)
		return;
	for (uint32_t i = 0; i < e->plan->cat->n_files; i++)
		if (e->dfd[i] >= 0)
			close(e->dfd[i]);
	free(e->dfd);
	e->dfd = NULL;
}
