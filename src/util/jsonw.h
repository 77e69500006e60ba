/* Writing JSON text: string escaping shared by every JSON the project emits. */
#ifndef CK_JSONW_H
#define CK_JSONW_H

#include <stddef.h>
#include <stdio.h>

/* Write s as a JSON string literal (quotes included). */
void ck_json_fput_str(FILE *f, const char *s);
/* The same into memory: the bytes it takes, and the writer of s's n bytes
 * (dst has room for ck_json_str_len(s) bytes; returns the end of what it
 * wrote). */
size_t ck_json_str_len(const char *s);
char *ck_json_put_str(char *dst, const char *s, size_t n);

#endif
