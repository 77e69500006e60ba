/* File names for tensor keys. A key that is a safe file name is used as it
 * is. Otherwise these bytes are written %XX (uppercase hex): '%', '/', control
 * characters (0x01-0x1F, 0x7F); "." and ".." become "%2E" and "%2E%2E", the
 * empty key "%00"; a name longer than 255 bytes keeps its first 237 bytes
 * (cut at a UTF-8 boundary) and ends in "%~" and 16 hex digits of the key's
 * FNV-1a hash. Escaping never yields '/', "." or "..", so a name can never
 * point outside tensors/. */
#ifndef CK_NAMES_H
#define CK_NAMES_H

#include <stddef.h>

#define CK_NAME_MAX 255 /* a file name's bytes */

/* key's file name, within max bytes (CK_NAME_MAX; less for names that get a
 * suffix: npy/<name>.npy), into out (room for CK_NAME_MAX + 1 bytes),
 * NUL-terminated; returns its length. */
size_t ck_escape_name(const char *key, size_t max, char *out);

#endif
