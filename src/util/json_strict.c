#include "json_strict.h"

#include "fileio.h"
#include "json_plain.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Scan the raw text: UTF-8, no NUL byte, no "\u0000" escape, and (with
 * CK_JSON_INTEGERS_ONLY) only exact integer number tokens. */
static int scan(const char *buf, size_t len, unsigned flags, enum ck_errkind kind,
		const char *what, struct ck_err *err)
{
	const unsigned char *s = (const unsigned char *)buf;
	size_t i = 0;
	while (i < len) {
		unsigned char c = s[i];
		if (c == 0)
			return ck_fail(err, kind, "%s: NUL byte at offset %zu", what, i);
		if (c == '"') {
			i++;
			while (i < len && s[i] != '"') {
				i += ck_json_plain_run(buf + i, len - i);
				if (i >= len || s[i] == '"')
					break;
				if (s[i] > 0 && s[i] < 0x80 && s[i] != '\\') { /* control bytes */
					i++;
					continue;
				}
				if (s[i] == 0)
					return ck_fail(err, kind, "%s: NUL byte at offset %zu", what, i);
				if (s[i] == '\\') {
					if (i + 1 >= len)
						break;
					if (s[i + 1] == 0)
						return ck_fail(err, kind, "%s: NUL byte at offset %zu",
							       what, i + 1);
					if (s[i + 1] == 'u' && i + 5 < len &&
					    memcmp(s + i + 2, "0000", 4) == 0)
						return ck_fail(err, kind,
							       "%s: string with \\u0000 at offset %zu "
							       "(NUL would truncate the name)",
							       what, i);
					i += 2;
					continue;
				}
				size_t l = ck_utf8_seq(s + i, len - i);
				if (!l)
					return ck_fail(err, kind, "%s: invalid UTF-8 at offset %zu",
						       what, i);
				i += l;
			}
			i++; /* closing quote (or end: cJSON reports the unterminated string) */
			continue;
		}
		if ((c == '-' || (c >= '0' && c <= '9')) && (flags & CK_JSON_INTEGERS_ONLY)) {
			size_t start = i;
			if (c == '-')
				i++;
			uint64_t v = 0;
			int big = 0;
			while (i < len && s[i] >= '0' && s[i] <= '9') {
				v = v * 10 + (uint64_t)(s[i] - '0');
				if (v > (uint64_t)CK_JSON_MAX_EXACT_INT)
					big = 1, v = (uint64_t)CK_JSON_MAX_EXACT_INT + 1;
				i++;
			}
			if (i < len && (s[i] == '.' || s[i] == 'e' || s[i] == 'E'))
				return ck_fail(err, kind,
					       "%s: number at offset %zu is not an integer literal",
					       what, start);
			if (big)
				return ck_fail(err, kind,
					       "%s: integer at offset %zu exceeds 2^53 and cannot be "
					       "represented exactly",
					       what, start);
			continue;
		}
		size_t l = c < 0x80 ? 1 : ck_utf8_seq(s + i, len - i);
		if (!l)
			return ck_fail(err, kind, "%s: invalid UTF-8 at offset %zu", what, i);
		i += l;
	}
	return 0;
}

int ck_json_scan(const char *buf, size_t len, unsigned flags, enum ck_errkind kind,
		 const char *what, struct ck_err *err)
{
	return scan(buf, len, flags, kind, what, err);
}

cJSON *ck_json_parse(const char *buf, size_t len, unsigned flags, enum ck_errkind kind,
		     const char *what, struct ck_err *err)
{
	if (scan(buf, len, flags, kind, what, err) < 0)
		return NULL;
	const char *end = NULL;
	cJSON *root = cJSON_ParseWithLengthOpts(buf, len, &end, 0);
	if (!root) {
		size_t off = end ? (size_t)(end - buf) : 0;
		if (!end) {
			const char *e = cJSON_GetErrorPtr();
			off = (e && e >= buf && e <= buf + len) ? (size_t)(e - buf) : 0;
		}
		ck_fail(err, kind, "%s: invalid JSON near offset %zu", what, off);
		return NULL;
	}
	size_t pos = (size_t)(end - buf);
	while (pos < len && (buf[pos] == ' ' || buf[pos] == '\t' || buf[pos] == '\n' ||
			     buf[pos] == '\r'))
		pos++;
	if (pos != len) {
		cJSON_Delete(root);
		ck_fail(err, kind, "%s: trailing data after the JSON value at offset %zu", what, pos);
		return NULL;
	}
	return root;
}

int ck_json_int(const cJSON *item, int64_t lo, int64_t hi, int64_t *out)
{
	if (!cJSON_IsNumber(item))
		return -1;
	double d = item->valuedouble;
	if (!isfinite(d) || d != floor(d) || fabs(d) > (double)CK_JSON_MAX_EXACT_INT)
		return -1;
	int64_t v = (int64_t)d;
	if (v < lo || v > hi)
		return -1;
	*out = v;
	return 0;
}

int ck_read_file(const char *path, size_t max_bytes, char **out, size_t *out_len,
		 enum ck_errkind kind, struct ck_err *err)
{
	/* O_NONBLOCK: a FIFO or a device named config.json must not hang the
	 * open; whatever it is, it is refused below unless a regular file */
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	if (fd < 0) {
		int e = errno;
		/* a file that is not there (or not reachable) is the input's fault,
		 * in the class of what was asked for (a mapping, a source) */
		if (e == ENOENT || e == ENOTDIR || e == ELOOP || e == ENAMETOOLONG || e == EACCES ||
		    e == EISDIR || e == ENXIO)
			return ck_fail(err, kind, "%s: cannot open: %s", path, strerror(e));
		return ck_fail_sys(err, e, "%s: cannot open", path);
	}
	struct stat st;
	if (fstat(fd, &st) < 0) {
		int e = errno;
		close(fd);
		return ck_fail_sys(err, e, "%s: cannot stat", path);
	}
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		return ck_fail(err, kind, "%s: not a regular file", path);
	}
	if ((uint64_t)st.st_size > max_bytes) {
		close(fd);
		return ck_fail(err, kind, "%s: %lld bytes, more than the limit of %zu", path,
			       (long long)st.st_size, max_bytes);
	}
	size_t n = (size_t)st.st_size;
	char *buf = malloc(n + 1);
	if (!buf) {
		close(fd);
		return ck_fail_sys(err, ENOMEM, "%s", path);
	}
	int r = ck_pread_full(fd, buf, n, 0);
	if (r < 0) {
		free(buf);
		close(fd);
		return ck_fail_sys(err, -r, "%s: read failed", path);
	}
	close(fd);
	buf[n] = '\0';
	*out = buf;
	*out_len = n;
	return 0;
}
