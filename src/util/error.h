/* Error reporting for the core library: every fallible function fills a
 * struct ck_err and returns a negative value; only the CLI prints and exits. */
#ifndef CK_ERROR_H
#define CK_ERROR_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

/* Error classes; the CLI maps each to its documented exit status. */
enum ck_errkind {
	CK_OK = 0,
	CK_E_SYS = 1,     /* I/O or allocation failure of the system */
	CK_E_USAGE = 2,   /* bad command line */
	CK_E_SOURCE = 3,  /* malformed or inconsistent checkpoint */
	CK_E_MAPPING = 4, /* malformed mapping or a plan that cannot be built */
	CK_E_MISMATCH = 5 /* --expect comparison found differences */
};

struct ck_err {
	enum ck_errkind kind;
	int sys_errno; /* errno for CK_E_SYS, else 0 */
	char msg[1024];
};

/* Fill err (if non-NULL) and return -1, so callers can `return ck_fail(...)`. */
int ck_fail(struct ck_err *err, enum ck_errkind kind, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Same, appending ": strerror(errnum)" and recording errnum. */
int ck_fail_sys(struct ck_err *err, int errnum, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Prefix an existing message: "prefix: old message". */
void ck_err_prefix(struct ck_err *err, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
void ck_err_clear(struct ck_err *err);
/* Untrusted text (keys, paths) for a terminal or a log: control bytes as
 * \xNN. Every error message is escaped this way when it is made; tables
 * and log lines that print names use these. */
size_t ck_escape_controls(const char *s, char *out, size_t cap);
void ck_fput_safe(FILE *f, const char *s);

#endif
