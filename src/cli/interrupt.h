/* Interrupting a command that writes (convert). SIGINT, SIGTERM and SIGHUP
 * (those the caller does not ignore) are blocked in the calling thread, and
 * so in every thread it starts after, and taken by one watcher thread
 * (sigwait) that records the first.
 * The writer checks the record between chunks and takes its partial output
 * back, and the command exits 128 + the signal, as a shell reports a death
 * by it. Dying at once, the default, left the staging directory behind: as
 * large as the output, hidden beside it. */
#ifndef CK_CLI_INTERRUPT_H
#define CK_CLI_INTERRUPT_H

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>

struct ck_interrupt {
	atomic_int sig;	 /* the first signal taken, or 0 */
	atomic_int done; /* the watcher is asked to end */
	sigset_t set, old;
	pthread_t th;
	int started;
};

/* The signals that stop a command: SIGINT, SIGTERM and SIGHUP, but for
 * those the caller ignores. */
void ck_interrupt_signals(sigset_t *set);
/* Block the signals and start the watcher. Returns 0, or -1 when no thread
 * could be started (the signals then keep their default action). */
int ck_interrupt_start(struct ck_interrupt *in);
/* End the watcher and restore the signal mask (a signal that comes after
 * the watcher ended takes its default action then). Returns the signal it
 * recorded, or 0. */
int ck_interrupt_stop(struct ck_interrupt *in);
/* "SIGINT", "SIGTERM", "SIGHUP" or "signal N" */
const char *ck_interrupt_name(int sig, char *buf, size_t cap);

#endif
