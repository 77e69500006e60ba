/* The safetensors header's JSON, parsed in one pass straight into tensor
 * records: no tree, no allocation per value but each name. (A 100,000-key
 * header costs milliseconds instead of the ~70 MB of nodes a general JSON
 * tree takes.) The streaming reader refuses, as it reads, what cJSON would
 * let through (UTF-8, NUL, "\u0000", and numbers other than exact integers),
 * so the text is walked once; this enforces JSON syntax and the header
 * schema with the same messages as before: duplicate keys, duplicate known
 * fields, missing fields, wrong types. Tensor data offsets are left relative
 * (begin, end). */
#ifndef CK_ST_HEADER_H
#define CK_ST_HEADER_H

#include <stddef.h>
#include <stdint.h>

#include "safetensors.h"

struct ck_st_span {
	uint64_t begin, end;
};

struct ck_stream_read;

/* Fills h->tensors (unsorted; names owned), h->meta and *spans (malloc'd,
 * one per tensor). unique: refuse a tensor name given twice; 0 leaves that
 * to the caller (a catalog checks all its files' names in one map). in:
 * NULL, or the read bringing json's n bytes in as they are read: the parse
 * reads what is in, and a parse that fails may have failed for want of
 * text, so a failure is only decided by a parse of the whole text (in
 * NULL); a success is the whole text's. */
int ck_st_header_json(const char *json, size_t n, struct ck_stream_read *in, const char *what,
		      int unique, struct ck_file_tensors *h, struct ck_st_span **spans,
		      struct ck_err *err);

#endif
