/* ck_natural_sort encodes each name once so that plain strcmp gives the
 * natural order, then sorts (encoded name, position) pairs and moves the
 * records along the permutation's cycles: O(n log n) strcmp (vectorised in
 * libc) instead of O(n log n) digit-aware walks, and no copy of the records.
 *
 * Encoding: every digit run becomes '0' (any digit compares like any other
 * with a non-digit byte, which is all the natural order does there), its
 * length without leading zeros as four bytes in 1..255, big-endian (longer
 * numbers are larger), then those digits; other bytes are copied. Two names
 * encode equal exactly when ck_natural_cmp calls them equal. */
#include "natsort.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int is_digit(char c)
{
	return c >= '0' && c <= '9';
}

int ck_natural_cmp(const char *a, const char *b)
{
	/* Keys share long prefixes ("model.layers.12.mlp.experts."): skip the
	 * common bytes, back to the start of a digit run they end in; up to
	 * there both walks below would have kept in step. */
	size_t i = 0;
	while (a[i] && a[i] == b[i])
		i++;
	while (i > 0 && is_digit(a[i - 1]))
		i--;
	a += i, b += i;
	while (*a && *b) {
		if (is_digit(*a) && is_digit(*b)) {
			while (*a == '0' && is_digit(a[1]))
				a++;
			while (*b == '0' && is_digit(b[1]))
				b++;
			size_t la = 0, lb = 0;
			while (is_digit(a[la]))
				la++;
			while (is_digit(b[lb]))
				lb++;
			if (la != lb)
				return la < lb ? -1 : 1;
			int c = memcmp(a, b, la);
			if (c)
				return c;
			a += la, b += lb;
			continue;
		}
		if (*a != *b)
			return (unsigned char)*a < (unsigned char)*b ? -1 : 1;
		a++, b++;
	}
	if (*a || *b)
		return *a ? 1 : -1;
	return 0;
}

/* writes at most 6 * strlen(s) + 1 bytes (a one-digit run: 6); returns the
 * end of the encoding, past its NUL */
static char *encode(const char *s, char *o)
{
	for (;;) {
		/* the bytes up to the next digit, found by libc's vectorised scan
		 * (a key is mostly letters and dots: byte by byte, this loop was
		 * 5% of planning a 100k-key checkpoint) */
		size_t plain = strcspn(s, "0123456789");
		memcpy(o, s, plain);
		o += plain, s += plain;
		if (!*s)
			break;
		while (*s == '0' && is_digit(s[1]))
			s++;
		size_t len = 0;
		while (is_digit(s[len]))
			len++;
		*o++ = '0';
		size_t v = len;
		for (int k = 3; k >= 0; k--) {
			o[k] = (char)(1 + v % 255);
			v /= 255;
		}
		o += 4;
		memcpy(o, s, len);
		o += len, s += len;
	}
	*o++ = '\0';
	return o;
}

struct enc {
	const char *key, *name;
	size_t pos;
};

static int cmp_enc(const void *x, const void *y)
{
	const struct enc *a = x, *b = y;
	int c = strcmp(a->key, b->key);
	return c ? c : strcmp(a->name, b->name);
}

/* Sort e by cmp_enc. Records that arrive as a few ascending runs (a plan's
 * targets come out rule by rule, each rule's in source order) are merged run
 * by run, about n log2(runs) compares where a merge sort spends n log2(n);
 * counting stops, and qsort sorts, once there are more than MAX_RUNS. */
#define MAX_RUNS 1024

/* start[0..runs): where each run begins, start[runs] == n; the result ends
 * in e (t: room for n) */
static void merge_runs(struct enc *e, struct enc *t, size_t n, size_t *start, size_t runs)
{
	struct enc *from = e, *to = t;
	while (runs > 1) {
		size_t k = 0;
		for (size_t r = 0; r < runs; r += 2) { /* runs r and r + 1 (if any) */
			size_t a = start[r], m = start[r + 1], b = r + 2 <= runs ? start[r + 2] : n;
			size_t i = a, j = m, o = a;
			while (i < m && j < b) /* ties from the left: stable */
				to[o++] = cmp_enc(&from[j], &from[i]) < 0 ? from[j++] : from[i++];
			while (i < m)
				to[o++] = from[i++];
			while (j < b)
				to[o++] = from[j++];
			start[k++] = a;
		}
		start[k] = n;
		runs = k;
		struct enc *x = from;
		from = to, to = x;
	}
	if (from != e)
		memcpy(e, from, n * sizeof *e);
}

static void sort_enc(struct enc *e, size_t n)
{
	size_t start[MAX_RUNS + 1], runs = 1;
	start[0] = 0;
	for (size_t i = 1; i < n && runs <= MAX_RUNS; i++)
		if (cmp_enc(&e[i - 1], &e[i]) > 0) {
			if (runs < MAX_RUNS)
				start[runs] = i;
			runs++;
		}
	if (runs == 1)
		return;
	struct enc *t = runs <= MAX_RUNS ? malloc(n * sizeof *t) : NULL;
	if (!t) {
		qsort(e, n, sizeof *e, cmp_enc);
		return;
	}
	start[runs] = n;
	merge_runs(e, t, n, start, runs);
	free(t);
}

static int cmp_plain(const void *x, const void *y, void *name)
{
	const char *(*nm)(const void *) = *(const char *(**)(const void *))name;
	const char *a = nm(x), *b = nm(y);
	int c = ck_natural_cmp(a, b);
	return c ? c : strcmp(a, b);
}

void ck_natural_sort(void *base, size_t n, size_t size, const char *(*name)(const void *rec))
{
	if (n < 2)
		return;
	unsigned char *r = base;
	struct enc *e = malloc(n * sizeof *e);
	size_t cap = 0, used = 0;
	char *buf = NULL;
	for (size_t i = 0; e && i < n; i++) {
		const char *nm = name(r + i * size);
		size_t len = strlen(nm);
		if (used > (SIZE_MAX - 1) / 6 || len > (SIZE_MAX - 1) / 6 - used) {
			free(buf);
			buf = NULL;
			break;
		}
		if (used + 6 * len + 1 > cap) {
			size_t c = cap ? cap : 4096;
			while (c < used + 6 * len + 1)
				c = c > SIZE_MAX / 2 ? used + 6 * len + 1 : 2 * c;
			char *nb = realloc(buf, c);
			if (!nb) {
				free(buf);
				buf = NULL;
				break;
			}
			buf = nb, cap = c;
		}
		e[i] = (struct enc){NULL, nm, used}; /* key: an offset until buf stops moving */
		used = (size_t)(encode(nm, buf + used) - buf);
	}
	unsigned char *tmp = buf ? malloc(size) : NULL;
	if (!tmp) { /* no memory for the fast way: compare in place */
		free(e);
		free(buf);
		qsort_r(base, n, size, cmp_plain, &name);
		return;
	}
	for (size_t i = 0; i < n; i++) {
		e[i].key = buf + e[i].pos;
		e[i].pos = i;
	}
	sort_enc(e, n);
	/* record e[i].pos goes to slot i: follow each cycle once */
	for (size_t i = 0; i < n; i++) {
		if (e[i].pos == i || e[i].pos == SIZE_MAX)
			continue;
		memcpy(tmp, r + i * size, size);
		size_t j = i;
		while (e[j].pos != i) {
			size_t from = e[j].pos;
			memcpy(r + j * size, r + from * size, size);
			e[j].pos = SIZE_MAX;
			j = from;
		}
		memcpy(r + j * size, tmp, size);
		e[j].pos = SIZE_MAX;
	}
	free(tmp);
	free(buf);
	free(e);
}
