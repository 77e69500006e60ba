/* model.safetensors.index.json: {"metadata": {...}, "weight_map": {key: file}}.
 * File names are untrusted: each must be a plain name inside the directory. */
#ifndef CK_INDEX_H
#define CK_INDEX_H

#include <stddef.h>
#include <stdint.h>

#include "../util/error.h"

struct ck_index_entry {
	char *key;
	uint32_t file; /* index into files[] */
};

struct ck_index {
	char **files; /* unique file names, in order of first appearance */
	size_t n_files, cap_files;
	struct ck_index_entry *entries;
	size_t n_entries;
};

int ck_index_parse(const char *json, size_t len, const char *what, struct ck_index *out,
		   struct ck_err *err);
void ck_index_free(struct ck_index *idx);
/* 0 when name is a plain file name: non-empty, no '/', not "." or "..". */
int ck_plain_file_name(const char *name);

#endif
