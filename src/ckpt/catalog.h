/* The source catalog: every tensor of a checkpoint, key -> {file, dtype,
 * shape, byte offset, byte length}, plus the source's config.json. Built from
 * headers only; tensor data is never read here. File descriptors are opened
 * once and held, so later reads never re-resolve paths (a file replaced after
 * opening keeps serving the bytes that were catalogued). */
#ifndef CK_CATALOG_H
#define CK_CATALOG_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "../util/error.h"
#include "../util/strmap.h"
#include "safetensors.h"

struct ck_source_file {
	char *name; /* as listed (file name inside the source directory) */
	char *path; /* path used to open it */
	int fd;
	uint64_t size;
	struct timespec mtime;
	uint64_t header_len;
};

struct ck_catalog_entry {
	struct ck_tensor_info t;
	uint32_t file;
};

struct ck_catalog {
	char *source;	    /* as given by the user */
	const char *format; /* "safetensors" */
	struct ck_source_file *files;
	size_t n_files;
	struct ck_catalog_entry *entries; /* natural name order */
	size_t n_entries;
	struct ck_strmap by_name;
	cJSON *config; /* config.json beside the weights, or NULL */
	uint64_t total_bytes;
};

/* Open a source: a .safetensors file, or a directory of them with or without
 * model.safetensors.index.json. */
int ck_catalog_open(const char *source, struct ck_catalog **out, struct ck_err *err);
void ck_catalog_free(struct ck_catalog *cat);
const struct ck_catalog_entry *ck_catalog_find(const struct ck_catalog *cat, const char *name);

/* Natural order: digit runs compare as numbers ("layers.2" < "layers.10"). */
int ck_natural_cmp(const char *a, const char *b);

#endif
