/* Safetensors header parsing and validation (reference/formats.md §1).
 * Everything in a header is untrusted: every offset, size and shape product
 * is checked, and a header that safetensors' own reader would refuse is
 * refused here too, with one line naming the file, the key and the rule. */
#ifndef CK_SAFETENSORS_H
#define CK_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "../util/error.h"
#include "dtype.h"
#include "tensors.h"

#define CK_ST_MAX_HEADER 100000000ULL /* safetensors' MAX_HEADER_SIZE */

/* Validate a whole safetensors file held in memory (the fuzz/replay entry). */
int ck_st_parse_buffer(const unsigned char *buf, size_t len, const char *what,
		       struct ck_file_tensors *out, struct ck_err *err);
/* Read and validate the header of an open file of the given size; tensor
 * data is never read. A name given twice is refused only where its entries
 * cover the same bytes: the catalog refuses every repeated name when it
 * indexes all files' names at once (ck_catalog_index). */
int ck_st_read_fd(int fd, uint64_t file_size, const char *what, struct ck_file_tensors *out,
		  struct ck_err *err);

#endif
