/* Fuzz target: a DCP directory's .metadata (the Metadata pickle, its
 * TensorStorageMetadata, chunks and storage_data) through the catalog, with
 * a small .distcp file beside it. The directory is made once per process. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt/catalog.h"
#include "fuzz_scratch.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const FILES[] = {".metadata", "__0_0.distcp", NULL};
static const char *dir;

static int write_file(const char *name, const uint8_t *data, size_t size)
{
	char p[128];
	snprintf(p, sizeof p, "%s/%s", dir, name);
	FILE *f = fopen(p, "wb");
	if (!f)
		return -1;
	size_t w = fwrite(data, 1, size, f);
	return fclose(f) == 0 && w == size ? 0 : -1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!dir) {
		if (!(dir = scratch("fuzz-dcp", FILES)))
			return 0;
		static const uint8_t blob[256] = {'P', 'K', 3, 4};
		write_file("__0_0.distcp", blob, sizeof blob);
	}
	if (write_file(".metadata", data, size) < 0)
		return 0;
	struct ck_catalog *cat;
	struct ck_err err;
	if (ck_catalog_open(dir, &cat, &err) == 0)
		ck_catalog_free(cat);
	return 0;
}
