/* ckread: the libckptfs example. Opens a checkpoint through mappings and
 * reads it in-process, no FUSE:
 *   ckread SOURCE [-o OPT]...              read every target, print throughput
 *          [-j N]                          with N reader threads (default 1)
 *          --list                          name, dtype, shape, bytes, group; reads nothing
 *          --dump DIR                      DIR/<i>.bin per target, DIR/index.tsv
 *          --file NAME OUT                 copy a served flat file (model.safetensors, ...),
 *                                          in 8 MiB reads as a loader would; prints its bytes,
 *                                          seconds, source bytes read and peak RSS
 * OPT is a libckptfs option (mapping=NAME, mesh=tp=8, rank=3, cache_size=1G, ...).
 * Built against the installed library: cc ckread.c $(pkg-config --cflags --libs ckptfs) */
#include <ckptfs.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BUF (8u << 20)

/* An error of this program's own (a file it writes), in libckptfs' form. */
static int sys_err(struct ckptfs_error *e, const char *path, const char *what)
{
	e->code = CKPTFS_E_SYSTEM;
	e->sys_errno = errno;
	snprintf(e->message, sizeof e->message, "%.900s: %s", path, what);
	return -1;
}

static int fail(const struct ckptfs_error *e)
{
	fprintf(stderr, "ckread: %s\n", e->message);
	return e->code ? e->code : 1;
}

/* Write n bytes of h's target i (or file i, if file) to path, in BUF pieces. */
static int copy_out(ckptfs *h, size_t i, int file, const char *path, struct ckptfs_error *e)
{
	FILE *f = fopen(path, "wb");
	char *buf = malloc(BUF);
	int rc = 0;
	if (!f || !buf)
		rc = sys_err(e, path, strerror(errno));
	for (uint64_t off = 0; rc == 0;) {
		int64_t n = file ? ckptfs_file_read(h, i, off, buf, BUF, e)
				 : ckptfs_read(h, i, off, buf, BUF, e);
		if (n < 0)
			rc = -1;
		if (n <= 0)
			break;
		if (fwrite(buf, 1, (size_t)n, f) != (size_t)n)
			rc = sys_err(e, path, "write failed");
		off += (uint64_t)n;
	}
	free(buf);
	if (f && fclose(f) != 0 && rc == 0)
		rc = sys_err(e, path, strerror(errno));
	return rc;
}

static double seconds(struct timespec t0, struct timespec t1)
{
	return (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
}

/* This process's peak resident set, KiB (VmHWM: since its exec; getrusage's
 * ru_maxrss also counts the image a launcher forked before it), or -1. */
static long peak_rss_kib(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long kib = -1;
	while (f && fgets(line, sizeof line, f))
		if (!strncmp(line, "VmHWM:", 6))
			kib = strtol(line + 6, NULL, 10);
	if (f)
		fclose(f);
	return kib;
}

static void print_shape(FILE *f, const ckptfs *h, size_t i)
{
	const int64_t *s = ckptfs_tensor_shape(h, i);
	fputc('[', f);
	for (int d = 0; d < ckptfs_tensor_ndim(h, i); d++)
		fprintf(f, "%s%" PRId64, d ? "," : "", s[d]);
	fputc(']', f);
}

static int dump(ckptfs *h, const char *dir, struct ckptfs_error *e)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/index.tsv", dir);
	FILE *idx = fopen(path, "w");
	if (!idx)
		return sys_err(e, path, strerror(errno));
	int rc = 0;
	for (size_t i = 0; rc == 0 && i < ckptfs_count(h); i++) {
		snprintf(path, sizeof path, "%s/%zu.bin", dir, i);
		rc = copy_out(h, i, 0, path, e);
		fprintf(idx, "%zu\t%s\t%s\t", i, ckptfs_tensor_name(h, i), ckptfs_tensor_dtype(h, i));
		print_shape(idx, h, i);
		fputc('\n', idx);
	}
	fclose(idx);
	return rc;
}

/* Readers take targets from a shared counter and read each in BUF pieces. */
struct pool {
	ckptfs *h;
	pthread_mutex_t mu;
	size_t next;
	uint64_t bytes;
	int failed;
	struct ckptfs_error err;
};

static void *reader(void *arg)
{
	struct pool *p = arg;
	char *buf = malloc(BUF);
	struct ckptfs_error e = {0};
	uint64_t got = 0;
	int bad = !buf;
	for (;;) {
		pthread_mutex_lock(&p->mu);
		size_t i = p->next++;
		pthread_mutex_unlock(&p->mu);
		if (bad || i >= ckptfs_count(p->h))
			break;
		for (uint64_t off = 0;;) {
			int64_t n = ckptfs_read(p->h, i, off, buf, BUF, &e);
			if (n < 0)
				bad = 1;
			if (n <= 0)
				break;
			off += (uint64_t)n;
			got += (uint64_t)n;
		}
	}
	pthread_mutex_lock(&p->mu);
	p->bytes += got;
	if (bad && !p->failed) {
		p->failed = 1;
		p->err = buf ? e : (struct ckptfs_error){1, ENOMEM, "out of memory"};
	}
	pthread_mutex_unlock(&p->mu);
	free(buf);
	return NULL;
}

int main(int argc, char **argv)
{
	const char *opts[64], *source = NULL, *dump_dir = NULL, *file = NULL, *file_out = NULL;
	int n_opts = 0, list = 0, threads = 1;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "-o") && i + 1 < argc && n_opts < 63) {
			opts[n_opts++] = argv[++i];
		} else if (!strcmp(a, "-j") && i + 1 < argc) {
			threads = atoi(argv[++i]);
		} else if (!strcmp(a, "--list")) {
			list = 1;
		} else if (!strcmp(a, "--dump") && i + 1 < argc) {
			dump_dir = argv[++i];
		} else if (!strcmp(a, "--file") && i + 2 < argc) {
			file = argv[++i];
			file_out = argv[++i];
		} else if (a[0] != '-' && !source) {
			source = a;
		} else {
			fprintf(stderr, "usage: ckread SOURCE [-o OPT]... [-j N] [--list | --dump DIR | "
					"--file NAME OUT]\n");
			return 2;
		}
	}
	if (!source || threads < 1 || threads > 64) {
		fprintf(stderr, "usage: ckread SOURCE [-o OPT]... [-j 1..64] [--list | --dump DIR | "
				"--file NAME OUT]\n");
		return 2;
	}
	opts[n_opts] = NULL;
	ckptfs *h;
	struct ckptfs_error e;
	if (ckptfs_open(&h, source, opts, &e) != 0)
		return fail(&e);
	int rc = 0;
	if (list) {
		for (size_t i = 0; i < ckptfs_count(h); i++) {
			printf("%s\t%s\t", ckptfs_tensor_name(h, i), ckptfs_tensor_dtype(h, i));
			print_shape(stdout, h, i);
			printf("\t%" PRIu64 "\t%ld\n", ckptfs_tensor_bytes(h, i), ckptfs_tensor_group(h, i));
		}
	} else if (dump_dir) {
		rc = dump(h, dump_dir, &e) < 0 ? fail(&e) : 0;
	} else if (file) {
		long k = ckptfs_file_find(h, file);
		if (k < 0) {
			fprintf(stderr, "ckread: no file %s in this view\n", file);
			rc = 2;
		} else {
			struct timespec t0, t1;
			clock_gettime(CLOCK_MONOTONIC, &t0);
			rc = copy_out(h, (size_t)k, 1, file_out, &e) < 0 ? fail(&e) : 0;
			clock_gettime(CLOCK_MONOTONIC, &t1);
			struct ckptfs_stats st;
			ckptfs_get_stats(h, &st, sizeof st);
			if (rc == 0)
				printf("{\"bytes\": %" PRIu64
				       ", \"seconds\": %.6f, \"source_bytes_read\": %" PRIu64
				       ", \"max_rss_kib\": %ld}\n",
				       ckptfs_file_size(h, (size_t)k), seconds(t0, t1),
				       st.source_bytes_read, peak_rss_kib());
		}
	} else {
		struct pool p = {.h = h, .mu = PTHREAD_MUTEX_INITIALIZER};
		pthread_t tid[64];
		struct timespec t0, t1;
		clock_gettime(CLOCK_MONOTONIC, &t0);
		for (int t = 0; t < threads; t++)
			pthread_create(&tid[t], NULL, reader, &p);
		for (int t = 0; t < threads; t++)
			pthread_join(tid[t], NULL);
		clock_gettime(CLOCK_MONOTONIC, &t1);
		double s = seconds(t0, t1);
		struct ckptfs_stats st;
		ckptfs_get_stats(h, &st, sizeof st);
		if (p.failed)
			rc = fail(&p.err);
		else
			printf("{\"targets\": %zu, \"bytes\": %" PRIu64 ", \"seconds\": %.6f, "
			       "\"source_bytes_read\": %" PRIu64 ", \"direct_reads\": %" PRIu64 "}\n",
			       ckptfs_count(h), p.bytes, s, st.source_bytes_read, st.direct_reads);
		pthread_mutex_destroy(&p.mu);
	}
	ckptfs_close(h);
	return rc;
}
