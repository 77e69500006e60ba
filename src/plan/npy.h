/* NumPy .npy headers for target tensors (format 1.0, reference/formats.md
 * §3): "\x93NUMPY", version, little-endian header length, then a dict
 * {'descr': ..., 'fortran_order': False, 'shape': (...), } padded with spaces
 * and a newline so the data starts on a multiple of 64. BF16 is served as
 * raw '<V2' (the ml_dtypes / MLX convention), FP8 as raw '|V1'. */
#ifndef CK_NPY_H
#define CK_NPY_H

#include <stddef.h>
#include <stdint.h>

#include "../ckpt/dtype.h"

/* Write the header into buf (cap bytes); returns its length, or 0 if cap is
 * too small. 256 bytes always suffice for CK_MAX_DIMS dims. */
size_t ck_npy_header(enum ck_dtype dt, int ndim, const int64_t *shape, char *buf, size_t cap);
const char *ck_npy_descr(enum ck_dtype dt);

#endif
