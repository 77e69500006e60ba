#include "error.h"

#include <stdio.h>
#include <string.h>

/* Messages quote keys, paths and mapping text, all of which may come from an
 * untrusted file: a newline would forge a second "ckptfs:" line and an ESC
 * would reach the terminal raw. Control bytes are written as \xNN (messages
 * are for people; JSON output stays exact). */
static void escape_controls(char *msg, size_t cap)
{
	size_t n = strlen(msg), ctl = 0;
	for (size_t i = 0; i < n; i++)
		ctl += (unsigned char)msg[i] < 0x20 || (unsigned char)msg[i] == 0x7f;
	if (!ctl)
		return;
	char tmp[sizeof ((struct ck_err *)0)->msg];
	size_t w = 0;
	for (size_t i = 0; i < n && w + 5 < sizeof tmp; i++) {
		unsigned char c = (unsigned char)msg[i];
		if (c < 0x20 || c == 0x7f)
			w += (size_t)snprintf(tmp + w, sizeof tmp - w, "\\x%02x", c);
		else
			tmp[w++] = (char)c;
	}
	tmp[w] = '\0';
	snprintf(msg, cap, "%s", tmp);
}

static void vset(struct ck_err *err, enum ck_errkind kind, const char *fmt, va_list ap)
{
	err->kind = kind;
	err->sys_errno = 0;
	vsnprintf(err->msg, sizeof err->msg, fmt, ap);
	escape_controls(err->msg, sizeof err->msg);
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
	escape_controls(head, sizeof head);
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

size_t ck_escape_controls(const char *s, char *out, size_t cap)
{
	size_t w = 0;
	if (!cap)
		return 0;
	for (; *s && w + 1 < cap; s++) {
		unsigned char c = (unsigned char)*s;
		if (c < 0x20 || c == 0x7f) {
			if (w + 5 > cap)
				break;
			w += (size_t)snprintf(out + w, cap - w, "\\x%02x", c);
		} else {
			out[w++] = (char)c;
		}
	}
	out[w] = '\0';
	return w;
}

void ck_fput_safe(FILE *f, const char *s)
{
	while (*s) {
		size_t n = 0; /* a run of printable bytes goes out in one write */
		while (s[n] && (unsigned char)s[n] >= 0x20 && (unsigned char)s[n] != 0x7f)
			n++;
		fwrite(s, 1, n, f);
		s += n;
		if (*s)
			fprintf(f, "\\x%02x", (unsigned char)*s++);
	}
}
