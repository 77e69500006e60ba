/* The signal watcher of a command that writes (see interrupt.h). */
#include "interrupt.h"

#include <stdio.h>

/* ck_interrupt_stop's wake-up of the watcher, sent to it alone: not a
 * signal a user sends to stop a command */
#define WAKE SIGRTMIN

static void *watch(void *arg)
{
	struct ck_interrupt *in = arg;
	for (;;) {
		int sig = 0;
		if (sigwait(&in->set, &sig) != 0)
			continue;
		if (atomic_load(&in->done))
			return NULL;
		if (sig == WAKE)
			continue;
		int none = 0; /* keep the first: a second ^C does not change it */
		atomic_compare_exchange_strong(&in->sig, &none, sig);
	}
}

void ck_interrupt_signals(sigset_t *set)
{
	sigemptyset(set);
	/* a signal the caller ignores stays ignored (nohup's SIGHUP; a
	 * shell's background job's SIGINT): blocked, it would be taken */
	static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
	for (size_t k = 0; k < sizeof sigs / sizeof *sigs; k++) {
		struct sigaction sa;
		if (sigaction(sigs[k], NULL, &sa) == 0 && sa.sa_handler != SIG_IGN)
			sigaddset(set, sigs[k]);
	}
}

int ck_interrupt_start(struct ck_interrupt *in)
{
	atomic_init(&in->sig, 0);
	atomic_init(&in->done, 0);
	in->started = 0;
	ck_interrupt_signals(&in->set);
	sigaddset(&in->set, WAKE);
	if (pthread_sigmask(SIG_BLOCK, &in->set, &in->old) != 0)
		return -1;
	if (pthread_create(&in->th, NULL, watch, in) != 0) {
		pthread_sigmask(SIG_SETMASK, &in->old, NULL);
		return -1;
	}
	in->started = 1;
	return 0;
}

int ck_interrupt_stop(struct ck_interrupt *in)
{
	if (!in->started)
		return 0;
	atomic_store(&in->done, 1);
	pthread_kill(in->th, WAKE);
	pthread_join(in->th, NULL);
	in->started = 0;
	pthread_sigmask(SIG_SETMASK, &in->old, NULL);
	return atomic_load(&in->sig);
}

const char *ck_interrupt_name(int sig, char *buf, size_t cap)
{
	switch (sig) {
	case SIGINT: return "SIGINT";
	case SIGTERM: return "SIGTERM";
	case SIGHUP: return "SIGHUP";
	default: snprintf(buf, cap, "signal %d", sig); return buf;
	}
}
