/* Sizes as users write them: 5GB, 500MiB, 4096 (no exponents, no
 * fractions, no overflow). */
#ifndef CK_SIZE_H
#define CK_SIZE_H

#include <stdint.h>

/* Returns 0, or -1 if s is not such a size. */
int ck_parse_size(const char *s, uint64_t *out);

#endif
