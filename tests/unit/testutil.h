/* Helpers shared by the unit tests: temp directories and fixture files. */
#ifndef CK_TESTUTIL_H
#define CK_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>

#include "ckpt/dtype.h"

/* Create a fresh temp directory; returns its path (static storage per call
 * slot is not shared: the result is malloc'd). */
char *tu_mkdtemp(void);
/* rm -rf path (no shell). */
void tu_rmtree(const char *path);
char *tu_path(const char *dir, const char *name); /* malloc'd dir/name */
void tu_write(const char *path, const void *data, size_t len);
void tu_write_str(const char *path, const char *s);
unsigned char *tu_read(const char *path, size_t *len); /* the whole file, malloc'd */

struct tu_tensor {
	const char *name;
	enum ck_dtype dtype;
	int ndim;
	int64_t shape[4];
};
/* Write a valid safetensors file; data bytes are byte index mod 251. */
void tu_write_st(const char *path, const struct tu_tensor *t, size_t n);

/* Run a suite in Check's normal mode; returns the process exit status. */
#include <check.h>
int tu_run_suite(Suite *s, int fork);

/* Check's ck_assert_msg, on which every ck_assert_* is built, records each
 * assertion that passes: a message through its pipe, read back when the
 * test ends with a memmove per message, quadratic in their number. Tests
 * that assert per element spent most of their time there (test_fpconv's
 * oracle cases 57% of 252 s under ASan, in punpack). Here a pass costs
 * nothing; a failure reports as before. What is lost is the "last passed
 * assertion" Check names when a test dies of a signal: the sanitizer
 * builds print the stack instead. */
#undef ck_assert_msg
#define ck_assert_msg(expr, ...)                                                                   \
	((expr) ? (void)0                                                                          \
		: _ck_assert_failed(__FILE__, __LINE__, "Assertion '" #expr "' failed",            \
				    ##__VA_ARGS__))

#endif
