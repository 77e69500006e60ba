#include "zipread.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../util/fileio.h"

#define EOCD_SIG 0x06054b50u
#define Z64_LOC_SIG 0x07064b50u
#define Z64_EOCD_SIG 0x06064b50u
#define CD_SIG 0x02014b50u
#define LH_SIG 0x04034b50u
#define MAX_CD_BYTES (1ull << 30)

static uint64_t le(const unsigned char *p, int n)
{
	uint64_t v = 0;
	for (int i = n - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static int bad(struct ck_err *err, const char *what, const char *msg)
{
	return ck_fail(err, CK_E_SOURCE, "%s: not a valid zip archive: %s", what, msg);
}

/* The ZIP64 extra field: the fields whose 32-bit value is 0xFFFFFFFF, in
 * order (size, compressed size, local header offset). */
static int zip64_extra(const unsigned char *x, size_t xl, struct ck_zip_entry *e, int need_size,
		       int need_csize, int need_off)
{
	size_t p = 0;
	while (p + 4 <= xl) {
		uint16_t id = (uint16_t)le(x + p, 2), len = (uint16_t)le(x + p + 2, 2);
		if (p + 4 + len > xl)
			return -1;
		if (id == 1) {
			const unsigned char *f = x + p + 4;
			size_t k = 0;
			if (need_size && (k += 8) <= len)
				e->size = le(f + k - 8, 8);
			if (need_csize && (k += 8) <= len)
				e->csize = le(f + k - 8, 8);
			if (need_off && (k += 8) <= len)
				e->header_off = le(f + k - 8, 8);
			return k <= len ? 0 : -1;
		}
		p += 4 + (size_t)len;
	}
	return need_size || need_csize || need_off ? -1 : 0;
}

/* The central directory's place and entry count, from the end record
 * (within the last 64 KiB + 22 bytes: the comment) or its ZIP64 form. */
static int find_directory(int fd, uint64_t base, uint64_t size, const char *what, uint64_t *n,
			  uint64_t *cd_size, uint64_t *cd_off, struct ck_err *err)
{
	uint64_t tail = size < 65557 ? size : 65557;
	unsigned char *t = malloc(tail ? tail : 1);
	if (!t)
		return ck_fail_sys(err, ENOMEM, "%s", what);
	int r = ck_pread_full(fd, t, tail, base + size - tail);
	if (r < 0) {
		free(t);
		return ck_fail_sys(err, -r, "%s: cannot read", what);
	}
	int64_t at = -1;
	for (int64_t i = (int64_t)tail - 22; i >= 0; i--)
		if (le(t + i, 4) == EOCD_SIG && (uint64_t)i + 22 + le(t + i + 20, 2) == tail) {
			at = i;
			break;
		}
	if (at < 0) {
		free(t);
		return bad(err, what, "no end of central directory record");
	}
	uint64_t eocd = size - tail + (uint64_t)at;
	*n = le(t + at + 10, 2), *cd_size = le(t + at + 12, 4), *cd_off = le(t + at + 16, 4);
	if (at >= 20 && le(t + at - 20, 4) == Z64_LOC_SIG) { /* ZIP64 */
		uint64_t z64 = le(t + at - 20 + 8, 8);
		unsigned char rec[56];
		if (z64 > eocd || eocd - z64 < 56 || ck_pread_full(fd, rec, 56, base + z64) < 0 ||
		    le(rec, 4) != Z64_EOCD_SIG) {
			free(t);
			return bad(err, what, "broken ZIP64 end record");
		}
		*n = le(rec + 32, 8);
		*cd_size = le(rec + 40, 8);
		*cd_off = le(rec + 48, 8);
		eocd = z64;
	}
	free(t);
	if (*cd_off > eocd || *cd_size > eocd - *cd_off || *cd_size > MAX_CD_BYTES ||
	    *n > *cd_size / 46)
		return bad(err, what, "central directory outside the file");
	return 0;
}

/* Entry i of the directory at *p (advanced past it) into z: NULL, or what
 * is wrong with it ("" for no memory). */
static const char *read_entry(struct ck_zip *z, const unsigned char *cd, uint64_t cd_size,
			      uint64_t cd_off, uint64_t *p, uint64_t i)
{
	if (*p + 46 > cd_size || le(cd + *p, 4) != CD_SIG)
		return "bad central directory entry";
	const unsigned char *h = cd + *p;
	size_t nl = le(h + 28, 2), xl = le(h + 30, 2), cl = le(h + 32, 2);
	if (*p + 46 + nl + xl + cl > cd_size)
		return "central directory entry runs past its end";
	struct ck_zip_entry *e = &z->e[z->n];
	e->method = (uint16_t)le(h + 10, 2);
	e->csize = le(h + 20, 4);
	e->size = le(h + 24, 4);
	e->header_off = le(h + 42, 4);
	if (zip64_extra(h + 46 + nl, xl, e, e->size == 0xFFFFFFFFu, e->csize == 0xFFFFFFFFu,
			e->header_off == 0xFFFFFFFFu) < 0)
		return "bad ZIP64 extra field";
	if (memchr(h + 46, 0, nl))
		return "a name holds a NUL byte";
	if (!(e->name = malloc(nl + 1)))
		return "";
	memcpy(e->name, h + 46, nl);
	e->name[nl] = '\0';
	z->n++;
	if (e->header_off > cd_off || e->csize > cd_off - e->header_off)
		return "an entry lies outside the file";
	if (ck_strmap_put(&z->by_name, e->name, (uint32_t)i, NULL) == 1)
		return "two entries share a name";
	*p += 46 + nl + xl + cl;
	return NULL;
}

int ck_zip_open(int fd, uint64_t base, uint64_t size, const char *what, struct ck_zip *z,
		struct ck_err *err)
{
	memset(z, 0, sizeof *z);
	z->base = base;
	z->size = size;
	uint64_t n = 0, cd_size = 0, cd_off = 0;
	if (find_directory(fd, base, size, what, &n, &cd_size, &cd_off, err) < 0)
		return -1;
	unsigned char *cd = malloc(cd_size ? cd_size : 1);
	z->e = calloc(n ? n : 1, sizeof *z->e);
	if (!cd || !z->e || ck_strmap_init(&z->by_name, n) < 0) {
		free(cd);
		ck_zip_free(z);
		return ck_fail_sys(err, ENOMEM, "%s", what);
	}
	int r = ck_pread_full(fd, cd, cd_size, base + cd_off);
	if (r < 0) {
		free(cd);
		ck_zip_free(z);
		return ck_fail_sys(err, -r, "%s: cannot read the zip directory", what);
	}
	uint64_t p = 0;
	const char *msg = NULL;
	for (uint64_t i = 0; i < n && !msg; i++)
		msg = read_entry(z, cd, cd_size, cd_off, &p, i);
	free(cd);
	if (msg) {
		ck_zip_free(z);
		return *msg ? bad(err, what, msg) : ck_fail_sys(err, ENOMEM, "%s", what);
	}
	return 0;
}

void ck_zip_free(struct ck_zip *z)
{
	for (size_t i = 0; i < z->n; i++)
		free(z->e[i].name);
	free(z->e);
	ck_strmap_free(&z->by_name);
	memset(z, 0, sizeof *z);
}

const struct ck_zip_entry *ck_zip_find(const struct ck_zip *z, const char *name)
{
	uint32_t i;
	return ck_strmap_get(&z->by_name, name, &i) == 0 ? &z->e[i] : NULL;
}

int ck_zip_data_offset(const struct ck_zip *z, int fd, const struct ck_zip_entry *e,
		       const char *what, uint64_t *off, struct ck_err *err)
{
	uint64_t size = z->size;
	if (e->method != 0 || e->csize != e->size)
		return ck_fail(err, CK_E_SOURCE,
			       "%s: entry \"%s\" is compressed (method %u): ckptfs reads stored "
			       "entries only, as torch.save writes them",
			       what, e->name, e->method);
	unsigned char h[30];
	int r;
	if (e->header_off > size || size - e->header_off < 30 ||
	    (r = ck_pread_full(fd, h, 30, z->base + e->header_off)) < 0 || le(h, 4) != LH_SIG)
		return bad(err, what, "an entry's local header is missing");
	uint64_t data = e->header_off + 30 + le(h + 26, 2) + le(h + 28, 2);
	if (data > size || e->size > size - data)
		return ck_fail(err, CK_E_SOURCE, "%s: entry \"%s\" runs past the end of the file",
			       what, e->name);
	*off = z->base + data;
	return 0;
}
