/* sched_getaffinity and CPU_COUNT: _GNU_SOURCE, set for the whole build */
#include "parallel.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

int ck_cpu_count(void)
{
	cpu_set_t set;
	if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
		return CPU_COUNT(&set);
	return 1;
}

struct job {
	atomic_size_t next;
	size_t n;
	void (*task)(void *ctx, size_t i);
	void *ctx;
};

static void *worker(void *arg)
{
	struct job *j = arg;
	for (size_t i; (i = atomic_fetch_add(&j->next, 1)) < j->n;)
		j->task(j->ctx, i);
	return NULL;
}

#define MAX_THREADS 64

void ck_parallel_for(size_t n, int threads, void (*task)(void *ctx, size_t i), void *ctx)
{
	struct job j = {.n = n, .task = task, .ctx = ctx};
	atomic_init(&j.next, 0);
	size_t extra = threads > 1 ? (size_t)threads - 1 : 0;
	if (extra > n - (n > 0))
		extra = n - (n > 0); /* no thread without a task to take */
	if (extra > MAX_THREADS)
		extra = MAX_THREADS;
	pthread_t t[MAX_THREADS];
	size_t started = 0;
	while (started < extra && pthread_create(&t[started], NULL, worker, &j) == 0)
		started++;
	worker(&j);
	for (size_t k = 0; k < started; k++)
		pthread_join(t[k], NULL);
}
