/* CRC-32 (the zip / zlib polynomial, reflected 0xEDB88320), slicing by 8.
 * ck_crc32(0, p, n) starts a checksum; pass the previous value to continue. */
#ifndef CK_CRC32_H
#define CK_CRC32_H

#include <stddef.h>
#include <stdint.h>

uint32_t ck_crc32(uint32_t crc, const void *p, size_t n);

#endif
