/* Malformed safetensors files, one generator per failure class (in the
 * manner of llama.cpp's gguf tests). Each class names the validation rule it
 * breaks and a fragment the error message must contain. Used by the unit
 * tests, the CLI tests (via mkmalformed) and to seed the replay corpus. */
#ifndef CK_TEST_MALFORMED_H
#define CK_TEST_MALFORMED_H

#include <stddef.h>

struct malformed_class {
	const char *name;
	const char *expect; /* substring of the error message */
	/* Returns a malloc'd file image; *len gets its size. */
	unsigned char *(*make)(size_t *len);
};

extern const struct malformed_class malformed_classes[];
extern const size_t n_malformed_classes;

/* A well-formed file image: 8-byte length + header JSON (padded) + data_len
 * zero bytes. The building block of the generators, exported for tests. */
unsigned char *st_image(const char *json, size_t data_len, size_t *len);

#endif
