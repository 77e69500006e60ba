/* Natural order of key names ("layers.2" before "layers.10") and a sort of
 * records by it that stays fast at 100,000 keys. */
#ifndef CK_NATSORT_H
#define CK_NATSORT_H

#include <stddef.h>

/* Digit runs compare as numbers (leading zeros ignored), everything else
 * bytewise; <0, 0, >0. */
int ck_natural_cmp(const char *a, const char *b);

/* Sort n records of size bytes in place by ck_natural_cmp of name(record),
 * ties (equal as numbers, e.g. "07" and "7") by strcmp: a total order, so
 * the result does not depend on the input order. */
void ck_natural_sort(void *base, size_t n, size_t size, const char *(*name)(const void *rec));
/* The same on up to `threads` threads (ck_natural_sort: the CPUs, for
 * 16,384 records or more): the result does not depend on how many. */
void ck_natural_sort_threads(void *base, size_t n, size_t size,
			     const char *(*name)(const void *rec), int threads);

#endif
