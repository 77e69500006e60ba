/* LD_PRELOAD shim for tests/cli/convert_interrupt.py: a process stops
 * itself (SIGSTOP, the whole process) right after its first mkdtemp
 * succeeds, so the test can send a signal at a known point, with the
 * temporary directory on disk: check-mapping --model's run of a few
 * milliseconds leaves no window to hit otherwise. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* RTLD_NEXT */
#endif
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>

char *mkdtemp(char *tmpl)
{
	static atomic_int stopped;
	char *(*real)(char *) = dlsym(RTLD_NEXT, "mkdtemp");
	if (!real) {
		errno = ENOSYS;
		return NULL;
	}
	char *r = real(tmpl);
	if (r && !atomic_exchange(&stopped, 1))
		raise(SIGSTOP);
	return r;
}
