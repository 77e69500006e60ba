#include "size.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

int ck_parse_size(const char *s, uint64_t *out)
{
	char *end;
	if (!isdigit((unsigned char)*s))
		return -1;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno == ERANGE)
		return -1;
	static const struct {
		const char *suf;
		uint64_t mul;
	} units[] = {{"", 1},		 {"B", 1},	     {"K", 1000},	   {"KB", 1000},
		     {"KiB", 1ULL << 10}, {"M", 1000000},     {"MB", 1000000},	   {"MiB", 1ULL << 20},
		     {"G", 1000000000},	 {"GB", 1000000000}, {"GiB", 1ULL << 30}, {"T", 1000000000000},
		     {"TB", 1000000000000}, {"TiB", 1ULL << 40}};
	for (size_t i = 0; i < sizeof units / sizeof *units; i++)
		if (!strcmp(end, units[i].suf)) {
			if (__builtin_mul_overflow((uint64_t)v, units[i].mul, out))
				return -1;
			return 0;
		}
	return -1;
}
