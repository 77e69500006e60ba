#include "tensors.h"

#include <stdlib.h>
#include <string.h>

int ck_shape_numel(const int64_t *shape, int ndim, uint64_t *numel)
{
	uint64_t n = 1;
	for (int i = 0; i < ndim; i++) {
		if (shape[i] < 0 || __builtin_mul_overflow(n, (uint64_t)shape[i], &n))
			return -1;
	}
	*numel = n;
	return 0;
}

int ck_shape_bytes(const int64_t *shape, int ndim, enum ck_dtype dt, uint64_t *bytes)
{
	uint64_t n;
	if (ck_shape_numel(shape, ndim, &n) < 0)
		return -1;
	return __builtin_mul_overflow(n, (uint64_t)ck_dtype_size(dt), bytes) ? -1 : 0;
}

void ck_file_tensors_free(struct ck_file_tensors *h)
{
	for (size_t i = 0; i < h->n_tensors; i++) {
		if (!h->names.n)
			free(h->tensors[i].name);
		free(h->tensors[i].stride);
	}
	ck_strpool_free(&h->names);
	for (size_t i = 0; i < h->n_meta; i++) {
		free(h->meta[i].key);
		free(h->meta[i].value);
	}
	free(h->tensors);
	free(h->meta);
	memset(h, 0, sizeof *h);
}
