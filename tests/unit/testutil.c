#include "testutil.h"

#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/safetensors.h"
#include "ckpt/st_writer.h"

char *tu_mkdtemp(void)
{
	const char *base = getenv("TMPDIR");
	char *p = tu_path(base && *base ? base : "/tmp", "ckptfs-test-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(p));
	return p;
}

void tu_rmtree(const char *path)
{
	struct stat st;
	if (lstat(path, &st) < 0)
		return;
	if (S_ISDIR(st.st_mode)) {
		DIR *d = opendir(path);
		struct dirent *de;
		while (d && (de = readdir(d))) {
			if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
				continue;
			char *c = tu_path(path, de->d_name);
			tu_rmtree(c);
			free(c);
		}
		if (d)
			closedir(d);
		rmdir(path);
	} else {
		unlink(path);
	}
}

char *tu_path(const char *dir, const char *name)
{
	size_t n = strlen(dir) + strlen(name) + 2;
	char *p = malloc(n);
	ck_assert_ptr_nonnull(p);
	snprintf(p, n, "%s/%s", dir, name);
	return p;
}

void tu_write(const char *path, const void *data, size_t len)
{
	FILE *f = fopen(path, "wb");
	ck_assert_msg(f != NULL, "cannot create %s", path);
	ck_assert_uint_eq(fwrite(data, 1, len, f), len);
	ck_assert_int_eq(fclose(f), 0);
}

unsigned char *tu_read(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	ck_assert_msg(f != NULL, "cannot open %s", path);
	ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
	long n = ftell(f);
	ck_assert_int_ge(n, 0);
	rewind(f);
	unsigned char *buf = malloc(n ? (size_t)n : 1);
	ck_assert_ptr_nonnull(buf);
	ck_assert_uint_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	*len = (size_t)n;
	return buf;
}

void tu_write_str(const char *path, const char *s)
{
	tu_write(path, s, strlen(s));
}

void tu_write_st(const char *path, const struct tu_tensor *t, size_t n)
{
	struct ck_st_out *o = calloc(n ? n : 1, sizeof *o);
	uint64_t *off = calloc(n ? n : 1, sizeof *off), total = 0;
	ck_assert(o && off);
	for (size_t i = 0; i < n; i++) {
		o[i].name = t[i].name;
		o[i].dtype = t[i].dtype;
		o[i].ndim = t[i].ndim;
		o[i].shape = t[i].shape;
		ck_assert_int_eq(ck_shape_bytes(t[i].shape, t[i].ndim, t[i].dtype, &o[i].nbytes), 0);
		total += o[i].nbytes;
	}
	char *hdr;
	size_t hl;
	struct ck_err err;
	ck_assert_int_eq(ck_st_build_header(o, n, NULL, NULL, 0, &hdr, &hl, off, &err), 0);
	unsigned char *img = malloc(hl + total + 1);
	ck_assert_ptr_nonnull(img);
	memcpy(img, hdr, hl);
	for (uint64_t i = 0; i < total; i++)
		img[hl + i] = (unsigned char)(i % 251);
	tu_write(path, img, hl + total);
	free(img);
	free(hdr);
	free(o);
	free(off);
}

int tu_run_suite(Suite *s, int fork)
{
	SRunner *sr = srunner_create(s);
	if (!fork)
		srunner_set_fork_status(sr, CK_NOFORK);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
