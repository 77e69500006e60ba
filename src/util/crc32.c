#include "crc32.h"

#include <pthread.h>
#include <string.h>

/* Written once under pthread_once, read-only afterwards. */
static uint32_t table[8][256];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void make_table(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;
		for (int k = 0; k < 8; k++)
			c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
		table[0][i] = c;
	}
	for (uint32_t i = 0; i < 256; i++)
		for (int s = 1; s < 8; s++)
			table[s][i] = (table[s - 1][i] >> 8) ^ table[0][table[s - 1][i] & 0xff];
}

uint32_t ck_crc32(uint32_t crc, const void *p, size_t n)
{
	pthread_once(&table_once, make_table);
	const unsigned char *b = p;
	uint32_t c = ~crc;
	while (n >= 8) {
		uint32_t lo, hi;
		memcpy(&lo, b, 4); /* little-endian hosts only, like the rest of ckptfs */
		memcpy(&hi, b + 4, 4);
		lo ^= c;
		c = table[7][lo & 0xff] ^ table[6][(lo >> 8) & 0xff] ^ table[5][(lo >> 16) & 0xff] ^
		    table[4][lo >> 24] ^ table[3][hi & 0xff] ^ table[2][(hi >> 8) & 0xff] ^
		    table[1][(hi >> 16) & 0xff] ^ table[0][hi >> 24];
		b += 8;
		n -= 8;
	}
	while (n--)
		c = table[0][(c ^ *b++) & 0xff] ^ (c >> 8);
	return ~c;
}
