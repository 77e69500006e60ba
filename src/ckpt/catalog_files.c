/* A directory's weight files opened and their headers read, in order, or
 * on threads: a sharded checkpoint's headers (163 files for DeepSeek-V3)
 * each cost an open and a few reads, which on a network or cold disk are
 * round trips that threads overlap, and safetensors headers parse on any
 * thread. Whatever the threads did, the files are then taken in order, so
 * the catalog, and the error a broken directory gets, are those of reading
 * the files one by one: the first file in order that fails names itself. */
#include "catalog.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../util/fileio.h"
#include "../util/parallel.h"
#include "readers.h"

/* Open dir/name into *f, following links (the Hugging Face cache keeps
 * snapshots as links into blobs/); a regular file. f->name and f->path are
 * set unless allocating them failed; fd is -1 until the open succeeds. */
static int open_source(struct ck_source_file *f, int dirfd, const char *dir, const char *name,
		       struct ck_err *err)
{
	memset(f, 0, sizeof *f);
	f->fd = -1;
	const char *base = strrchr(name, '/');
	f->name = strdup(dir || !base ? name : base + 1);
	f->path = dir ? ck_path_join(dir, name) : strdup(name);
	if (!f->name || !f->path) {
		free(f->name);
		free(f->path);
		f->name = f->path = NULL;
		return ck_fail_sys(err, ENOMEM, "%s", name);
	}
	f->fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (f->fd < 0)
		return errno == ENOENT ? ck_fail(err, CK_E_SOURCE, "%s: file does not exist", f->path)
				       : ck_fail_sys(err, errno, "%s: cannot open%s", f->path,
						     errno == EMFILE ? " (one descriptor per source "
								       "file: raise ulimit -n)"
								     : "");
	struct stat st;
	if (fstat(f->fd, &st) < 0)
		return ck_fail_sys(err, errno, "%s: cannot stat", f->path);
	if (!S_ISREG(st.st_mode))
		return ck_fail(err, CK_E_SOURCE, "%s: not a regular file", f->path);
	/* O_NONBLOCK only guarded the open against FIFOs; reads must block. */
	fcntl(f->fd, F_SETFL, fcntl(f->fd, F_GETFL) & ~O_NONBLOCK);
	f->size = (uint64_t)st.st_size;
	f->mtime = st.st_mtim;
	return 0;
}

int ck_catalog_open_file(struct ck_catalog *cat, int dirfd, const char *dir, const char *name,
			 struct ck_err *err)
{
	struct ck_source_file *f = &cat->files[cat->n_files];
	int r = open_source(f, dirfd, dir, name, err);
	if (f->name)
		cat->n_files++; /* the catalog closes and frees it */
	return r;
}

#define HEAD_BYTES 512

/* The reader of an open file, by its first bytes (head: room for
 * HEAD_BYTES, zero-filled past the file's end); NULL with err set. */
static const struct ck_file_reader *reader_of(const struct ck_source_file *f,
					      unsigned char *head, struct ck_err *err)
{
	memset(head, 0, HEAD_BYTES);
	size_t nh = f->size < HEAD_BYTES ? (size_t)f->size : HEAD_BYTES;
	if (ck_pread_full(f->fd, head, nh, 0) < 0) {
		ck_fail_sys(err, EIO, "%s: cannot read", f->path);
		return NULL;
	}
	return ck_file_reader_for(head, nh, f->size, f->path, err);
}

/* A file read by rd into hdr: the catalog's format, counts and its header
 * length; skipped_before: cat->left_out.total before the read. */
static void note_file(struct ck_catalog *cat, struct ck_source_file *f,
		      const struct ck_file_reader *rd, const struct ck_file_tensors *hdr,
		      size_t skipped_before)
{
	cat->n_skipped += cat->left_out.total - skipped_before;
	if (!cat->format)
		cat->format = rd->format;
	else if (strcmp(cat->format, rd->format))
		cat->format = "mixed";
	f->header_len = hdr->header_len;
}

/* One file after the other. */
static int read_in_order(struct ck_catalog *cat, int dirfd, const char *dir,
			 char *const *names, size_t n, struct ck_err *err)
{
	for (size_t i = 0; i < n; i++) {
		struct ck_file_tensors hdr = {0};
		const struct ck_file_reader *rd = NULL;
		unsigned char head[HEAD_BYTES];
		size_t before = cat->left_out.total;
		int r = ck_catalog_open_file(cat, dirfd, dir, names[i], err);
		struct ck_source_file *f = r == 0 ? &cat->files[cat->n_files - 1] : NULL;
		if (f && (!(rd = reader_of(f, head, err)) || rd->read(cat, f, &hdr, err) < 0))
			r = -1;
		if (r == 0) {
			note_file(cat, f, rd, &hdr, before);
			r = ck_catalog_add_entries(cat, &hdr, (uint32_t)i, err);
		}
		ck_file_tensors_free(&hdr);
		if (r < 0)
			return -1;
	}
	return 0;
}

/* A file as a thread left it: opened, its reader found and, when that
 * reader may run on any thread, its header read. */
struct ahead {
	struct ck_source_file f;
	const struct ck_file_reader *rd;
	struct ck_file_tensors hdr;
	int rc, read; /* rc -1: failed (err); read: hdr holds the header */
	struct ck_err err;
};

struct ahead_job {
	struct ahead *a;
	char *const *names;
	int dirfd;
	const char *dir;
};

/* Headers larger than this are read in order, one at a time: a thread
 * each would hold up to 16 of them at once, and a header may be 100 MB (a
 * 100,000-key one is 12.7 MB, a shard's well under 1 MB). */
#define AHEAD_MAX_HEADER (16u << 20)

/* A safetensors file's header length (its first 8 bytes, little endian). */
static uint64_t st_header_len(const unsigned char *head)
{
	uint64_t n = 0;
	for (int b = 7; b >= 0; b--)
		n = n << 8 | head[b];
	return n;
}

static void read_ahead(void *ctx, size_t i)
{
	const struct ahead_job *j = ctx;
	struct ahead *a = &j->a[i];
	unsigned char head[HEAD_BYTES];
	a->rc = open_source(&a->f, j->dirfd, j->dir, j->names[i], &a->err);
	if (a->rc == 0 && !(a->rd = reader_of(&a->f, head, &a->err)))
		a->rc = -1;
	if (a->rc == 0 && a->rd->any_thread && st_header_len(head) <= AHEAD_MAX_HEADER) {
		a->rc = a->rd->read(NULL, &a->f, &a->hdr, &a->err);
		a->read = 1;
	}
}

static void ahead_free(struct ahead *a)
{
	if (a->f.fd >= 0)
		close(a->f.fd);
	free(a->f.name);
	free(a->f.path);
	ck_file_tensors_free(&a->hdr);
}

/* File i as read ahead, taken into the catalog as read_in_order would. */
static int take(struct ck_catalog *cat, struct ahead *a, size_t i, struct ck_err *err)
{
	struct ck_source_file *f = &cat->files[cat->n_files];
	*f = a->f;
	if (f->name)
		cat->n_files++;
	a->f = (struct ck_source_file){.fd = -1}; /* the catalog's now */
	if (a->rc < 0) {
		*err = a->err;
		return -1;
	}
	size_t before = cat->left_out.total;
	if (!a->read && a->rd->read(cat, f, &a->hdr, err) < 0)
		return -1;
	note_file(cat, f, a->rd, &a->hdr, before);
	return ck_catalog_add_entries(cat, &a->hdr, (uint32_t)i, err);
}

int ck_catalog_read_files(struct ck_catalog *cat, int dirfd, const char *dir, char *const *names,
			  size_t n, int threads, struct ck_err *err)
{
	struct ahead *a = threads > 1 && n > 1 ? calloc(n, sizeof *a) : NULL;
	if (!a)
		return read_in_order(cat, dirfd, dir, names, n, err);
	struct ahead_job j = {a, names, dirfd, dir};
	ck_parallel_for(n, threads, read_ahead, &j);
	/* Out of descriptors, which file failed depends on which thread came
	 * first (later files may hold an earlier one's): open again in order,
	 * so that the one named is the one that fails in order. */
	int again = 0;
	for (size_t i = 0; i < n; i++)
		again |= a[i].rc < 0 && (a[i].err.sys_errno == EMFILE || a[i].err.sys_errno == ENFILE);
	int rc = 0;
	for (size_t i = 0; i < n; i++) {
		if (rc == 0 && !again)
			rc = take(cat, &a[i], i, err);
		ahead_free(&a[i]);
	}
	free(a);
	return again ? read_in_order(cat, dirfd, dir, names, n, err) : rc;
}

int ck_catalog_read_threads(size_t n_files)
{
	/* twice the CPUs: the reads are round trips as much as parsing */
	size_t t = 2 * (size_t)ck_cpu_count();
	t = t < 16 ? t : 16;
	return (int)(t < n_files ? t : n_files);
}
