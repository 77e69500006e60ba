/* Strict JSON on top of cJSON. cJSON is lenient where checkpoint headers must
 * not be: it accepts invalid UTF-8, stops at an embedded NUL, truncates keys
 * at "\u0000", and stores every number as a double (so "2.0", "1e3" and
 * integers above 2^53 look like integers). This module scans the raw text
 * first and refuses all of those, then lets cJSON build the tree. */
#ifndef CK_JSON_STRICT_H
#define CK_JSON_STRICT_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"

enum {
	/* Every number token must be an integer literal with |v| <= 2^53,
	 * so its double value is exact. */
	CK_JSON_INTEGERS_ONLY = 1 << 0,
};

#define CK_JSON_MAX_EXACT_INT ((int64_t)1 << 53)

/* Parse exactly buf[0..len) (whitespace may follow the value, nothing else).
 * `what` names the input in error messages ("header of x.safetensors").
 * Returns the tree (free with cJSON_Delete) or NULL with err set (CK_E_SOURCE
 * unless kind says otherwise). */
cJSON *ck_json_parse(const char *buf, size_t len, unsigned flags, enum ck_errkind kind,
		     const char *what, struct ck_err *err);

/* Only the raw-text checks of ck_json_parse (UTF-8, NUL, "\u0000", integer
 * literals with CK_JSON_INTEGERS_ONLY). The streaming reader (json_lex.h)
 * makes the same checks as it reads; the tests and fuzz targets hold it to
 * this scan. */
int ck_json_scan(const char *buf, size_t len, unsigned flags, enum ck_errkind kind,
		 const char *what, struct ck_err *err);

/* Read a JSON number that must be an exact integer in [lo, hi]. Returns 0 on
 * success, -1 if the item is not such a number. */
int ck_json_int(const cJSON *item, int64_t lo, int64_t hi, int64_t *out);

/* Read a whole file (at most max_bytes) into a NUL-terminated buffer. */
int ck_read_file(const char *path, size_t max_bytes, char **out, size_t *out_len,
		 enum ck_errkind kind, struct ck_err *err);

#endif
