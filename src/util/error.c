#include "error.h"

#include <stdio.h>
#include <string.h>

static void vset(struct ck_err *err, enum ck_errkind kind, const char *fmt, va_list ap)
{
	err->kind = kind;
	err->sys_errno = 0;
	vsnprintf(err->msg, sizeof err->msg, fmt, ap);
}

int ck_fail(struct ck_err *err, enum ck_errkind kind, const char *fmt, ...)
{
	if (err) {
		va_list ap;
		va_start(ap, fmt);
		vset(err, kind, fmt, ap);
		va_end(ap);
	}
	return -1;
}

int ck_fail_sys(struct ck_err *err, int errnum, const char *fmt, ...)
{
	if (err) {
		va_list ap;
		va_start(ap, fmt);
		vset(err, CK_E_SYS, fmt, ap);
		va_end(ap);
		size_t n = strlen(err->msg);
		snprintf(err->msg + n, sizeof err->msg - n, ": %s", strerror(errnum));
		err->sys_errno = errnum;
	}
	return -1;
}

void ck_err_prefix(struct ck_err *err, const char *fmt, ...)
{
	if (!err)
		return;
	char head[512], old[sizeof err->msg];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(head, sizeof head, fmt, ap);
	va_end(ap);
	memcpy(old, err->msg, sizeof old);
	snprintf(err->msg, sizeof err->msg, "%s: %s", head, old);
}

void ck_err_clear(struct ck_err *err)
{
	if (err) {
		err->kind = CK_OK;
		err->sys_errno = 0;
		err->msg[0] = '\0';
	}
}
