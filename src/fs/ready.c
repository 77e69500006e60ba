/* Readiness: "mounted" once the kernel has accepted the mount (see ready.h). */
#include "ready.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static void report_ready(struct ckfs *fs)
{
	if (fs->ready_msg) /* NULL: out of memory for it */
		fs_log(fs, fs->ready_msg);
	if (fs->ready_fd >= 0) {
		if (write(fs->ready_fd, "OK\n", 3) != 3)
			fs_log(fs, "could not report readiness");
		close(fs->ready_fd);
		fs->ready_fd = -1;
	}
}

/* A stat of the mount point is a GETATTR of its root: the kernel holds it
 * until the INIT is answered, then sends it (the daemon answers) or, when
 * the INIT was refused, fails it (ECONNREFUSED) while the loop still runs.
 * When the daemon stops first (a signal, the INIT unanswered) the kernel
 * fails it as the device closes, with ENOTCONN or, on some kernels,
 * ECONNREFUSED too (the aborted INIT marks the connection refused): so
 * which of the two happened is told by whether the loop had ended, not by
 * the errno. A stat that starts after the unmount sees the directory
 * beneath, whose device is the one noted before mounting. */
static void *confirm(void *arg)
{
	struct ckfs *fs = arg;
	struct stat st;
	int r;
	do
		r = stat(fs->mountpoint, &st);
	while (r < 0 && errno == EINTR);
	int ended = atomic_load(&fs->loop_ended);
	if (r == 0 && !(fs->under_known && st.st_dev == fs->under_dev)) {
		report_ready(fs);
		return NULL;
	}
	fs->ready_errno = r == 0 ? ENOTCONN : errno;
	fs->ready_refused = !ended;
	/* The loop ends on a signal. libfuse's workers block every signal
	 * (and this thread, started from one, too), so the main thread,
	 * waiting in the loop, takes it; again each second until the loop
	 * has ended, since one that lands between its check and its wait is
	 * lost on it. */
	while (!atomic_load(&fs->loop_ended)) {
		kill(getpid(), SIGTERM);
		for (int k = 0; k < 100 && !atomic_load(&fs->loop_ended); k++)
			nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
	}
	return NULL;
}

void fs_ready_note_under(struct ckfs *fs)
{
	struct stat st;
	if (stat(fs->mountpoint, &st) == 0) {
		fs->under_known = 1;
		fs->under_dev = st.st_dev;
	}
}

void fs_ready_start(struct ckfs *fs, const char *msg)
{
	fs->ready_msg = strdup(msg);
	if (fs->ready_msg && pthread_create(&fs->ready_thread, NULL, confirm, fs) == 0) {
		fs->ready_started = 1;
		return;
	}
	/* no check: say so, and report as libfuse is about to answer */
	fs_log(fs, "could not start the readiness check: mounted, unconfirmed");
	report_ready(fs);
}

int fs_ready_join(struct ckfs *fs)
{
	if (fs->ready_started) {
		pthread_join(fs->ready_thread, NULL);
		fs->ready_started = 0;
	}
	free(fs->ready_msg);
	fs->ready_msg = NULL;
	return fs->ready_errno;
}
