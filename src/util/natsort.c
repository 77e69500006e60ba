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

#include "parallel.h"

static int is_digit(char c)
{
	return c >= '0' && c <= '9';
}

/* The length of the bytes a and b share: eight at a time within the
 * shorter (the first differing byte is the lowest set byte of the words'
 * xor), libc's vectorised strlen giving the lengths. */
static size_t common_prefix(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b), m = la < lb ? la : lb, i = 0;
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	for (; i + 8 <= m; i += 8) {
		uint64_t x, y;
		memcpy(&x, a + i, 8);
		memcpy(&y, b + i, 8);
		if (x != y)
			return i + (size_t)__builtin_ctzll(x ^ y) / 8;
	}
#endif
	while (i < m && a[i] == b[i])
		i++;
	return i;
}

int ck_natural_cmp(const char *a, const char *b)
{
	/* Keys share long prefixes ("model.layers.12.mlp.experts."): skip the
	 * common bytes, back to the start of a digit run they end in; up to
	 * there both walks below would have kept in step. */
	size_t i = common_prefix(a, b);
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

/* Copies the bytes of s[0, n) before its first digit to o; returns how
 * many. Eight at a time: a word's bytes are copied whole (o has 8 bytes of
 * room past any encoding, see slice_buf) and the lowest digit in it found
 * by the carry trick: a byte b - '0' below 10 borrows, and a false alarm
 * from a borrow only ever lies above a real digit. */
static size_t copy_plain(const char *s, size_t n, char *o)
{
	const uint64_t ones = 0x0101010101010101ull, high = 0x8080808080808080ull;
	size_t i = 0;
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	for (; i + 8 <= n; i += 8) {
		uint64_t w, t;
		memcpy(&w, s + i, 8);
		memcpy(o + i, &w, 8);
		t = w ^ (ones * '0');
		uint64_t digit = (t - ones * 10) & ~t & high;
		if (digit)
			return i + (size_t)__builtin_ctzll(digit) / 8;
	}
#endif
	for (; i < n && !is_digit(s[i]); i++)
		o[i] = s[i];
	return i;
}

/* writes at most 6 * strlen(s) + 1 bytes (a one-digit run: 6), and may
 * write 8 past them; returns the end of the encoding, past its NUL */
static char *encode(const char *s, char *o)
{
	const char *end = s + strlen(s);
	for (;;) {
		/* a key is mostly letters and dots (byte by byte, this loop was
		 * 5% of planning a 100k-key checkpoint; with strcspn, 2%) */
		size_t plain = copy_plain(s, (size_t)(end - s), o);
		o += plain, s += plain;
		if (s == end)
			break;
		while (*s == '0' && is_digit(s[1]))
			s++;
		size_t len = 0;
		while (is_digit(s[len]))
			len++;
		*o++ = '0';
		if (len < 255) { /* every number of a real key */
			o[0] = o[1] = o[2] = 1;
			o[3] = (char)(1 + len);
		} else {
			size_t v = len;
			for (int k = 3; k >= 0; k--) {
				o[k] = (char)(1 + v % 255);
				v /= 255;
			}
		}
		o += 4;
		for (size_t k = 0; k < len; k++) /* mostly 1 to 3 digits: no call */
			o[k] = s[k];
		o += len, s += len;
	}
	*o++ = '\0';
	return o;
}

struct enc {
	const char *key, *name;
	size_t pos;
};

static int cmp_enc(const struct enc *a, const struct enc *b)
{
	int c = strcmp(a->key, b->key);
	return c ? c : strcmp(a->name, b->name);
}

/* Sorting is a natural merge sort: the ascending runs the records arrive in
 * (a catalog's names come file by file, each file's in its writer's order;
 * a plan's targets rule by rule) are merged pairwise, level by level, about
 * n log2(runs) compares. Each level's merges are tasks for ck_parallel_for;
 * a level with fewer merges than threads cuts each merge into pieces at the
 * output positions where both inputs can be split (its co-ranks), so the
 * last level, one merge of everything, runs on every thread too. */
struct merge {
	const struct enc *a, *b; /* the two sorted inputs */
	size_t na, nb;
	struct enc *out;
	size_t k0, k1; /* this piece: out[k0, k1) */
};

/* How many of out[0, k) come from a: the i with a[0, i) and b[0, k - i)
 * the first k of a stable merge (ties from a). */
static size_t co_rank(const struct merge *m, size_t k)
{
	size_t lo = k > m->nb ? k - m->nb : 0, hi = k < m->na ? k : m->na;
	while (lo < hi) { /* i < hi <= na and j = k - i >= 1 */
		size_t i = lo + (hi - lo) / 2, j = k - i;
		if (cmp_enc(&m->b[j - 1], &m->a[i]) >= 0)
			lo = i + 1;
		else
			hi = i;
	}
	return lo;
}

static void merge_piece(void *ctx, size_t t)
{
	const struct merge *m = (const struct merge *)ctx + t;
	size_t i = co_rank(m, m->k0), ie = co_rank(m, m->k1);
	size_t j = m->k0 - i, je = m->k1 - ie, o = m->k0;
	while (i < ie && j < je) /* ties from a: stable */
		m->out[o++] = cmp_enc(&m->b[j], &m->a[i]) < 0 ? m->b[j++] : m->a[i++];
	while (i < ie)
		m->out[o++] = m->a[i++];
	while (j < je)
		m->out[o++] = m->b[j++];
}

/* Pieces smaller than this are not worth a thread's time. */
#define MIN_PIECE 4096

/* start[0..runs): where each run begins; the result ends in e (t: room for
 * n, ms: room for runs + threads merges). One level: runs r and r + 1 merge
 * into run r / 2. */
static void merge_runs(struct enc *e, struct enc *t, size_t n, size_t *start, size_t runs,
		       struct merge *ms, int threads)
{
	struct enc *from = e, *to = t;
	while (runs > 1) {
		size_t pairs = (runs + 1) / 2, nm = 0, k = 0;
		size_t cut = pairs < (size_t)threads ? ((size_t)threads + pairs - 1) / pairs : 1;
		for (size_t r = 0; r < runs; r += 2) {
			size_t a = start[r], mid = r + 1 < runs ? start[r + 1] : n,
			       b = r + 2 <= runs ? start[r + 2] : n;
			struct merge m = {from + a, from + mid, mid - a, b - mid, to + a, 0, 0};
			size_t len = b - a, pieces = len / cut >= MIN_PIECE ? cut : 1;
			for (size_t p = 0; p < pieces; p++) {
				ms[nm] = m;
				ms[nm].k0 = len * p / pieces;
				ms[nm++].k1 = len * (p + 1) / pieces;
			}
			start[k++] = a;
		}
		ck_parallel_for(nm, threads, merge_piece, ms);
		start[k] = n;
		runs = k;
		struct enc *x = from;
		from = to, to = x;
	}
	if (from != e)
		memcpy(e, from, n * sizeof *e);
}

/* -1: no memory (e unchanged) */
static int sort_enc(struct enc *e, size_t n, int threads)
{
	size_t runs = 1;
	for (size_t i = 1; i < n; i++)
		runs += cmp_enc(&e[i - 1], &e[i]) > 0;
	if (runs == 1)
		return 0;
	size_t *start = malloc((runs + 1) * sizeof *start);
	struct enc *t = malloc(n * sizeof *t);
	struct merge *ms = malloc((runs + (size_t)threads) * sizeof *ms);
	int rc = -1;
	if (start && t && ms) {
		size_t k = 0;
		start[k++] = 0;
		for (size_t i = 1; i < n; i++)
			if (cmp_enc(&e[i - 1], &e[i]) > 0)
				start[k++] = i;
		start[runs] = n;
		merge_runs(e, t, n, start, runs, ms, threads);
		rc = 0;
	}
	free(start);
	free(t);
	free(ms);
	return rc;
}

static int cmp_plain(const void *x, const void *y, void *name)
{
	const char *(*nm)(const void *) = *(const char *(**)(const void *))name;
	const char *a = nm(x), *b = nm(y);
	int c = ck_natural_cmp(a, b);
	return c ? c : strcmp(a, b);
}

/* Records [lo, hi) encoded into a buffer of their own, so that slices are
 * encoded on threads of their own. The buffers are allocated by the
 * caller's thread: another thread allocates from an arena of its own,
 * whose first touches fault page by page. */
struct slice {
	size_t lo, hi;
	char *buf; /* room for every encoding; NULL: no memory */
};

struct sort_job {
	const unsigned char *r;
	size_t size;
	const char *(*name)(const void *rec);
	struct enc *e;
	struct slice *s;
};

static void encode_slice(void *ctx, size_t k)
{
	const struct sort_job *j = ctx;
	char *o = j->s[k].buf;
	for (size_t i = j->s[k].lo; i < j->s[k].hi; i++) {
		const char *nm = j->name(j->r + i * j->size);
		j->e[i] = (struct enc){o, nm, i};
		o = encode(nm, o);
	}
}

/* A slice's buffer: 6 bytes per name byte and a NUL, and 8 for the last
 * encoding's word-wide copies (see encode). */
static char *slice_buf(const struct sort_job *j, const struct slice *s)
{
	size_t need = 0;
	for (size_t i = s->lo; i < s->hi; i++) {
		size_t len = strlen(j->name(j->r + i * j->size));
		if (len > (SIZE_MAX - 1) / 6 || 6 * len + 1 > SIZE_MAX - need)
			return NULL;
		need += 6 * len + 1;
	}
	return need <= SIZE_MAX - 8 ? malloc(need + 8) : NULL;
}

/* The record a few steps on along a cycle from slot `from`, fetched into
 * the cache now: the records are visited in the sorted order's, which is to
 * say random, order (a 100,000-key catalog's are 13.6 MB), so each source
 * is a cache miss, and this overlaps them with the copies (4.3-8.5 -> 2.4-3.3
 * ms for that catalog). */
#define PERMUTE_AHEAD 3

static void fetch_ahead(const unsigned char *r, size_t size, const struct enc *e, size_t from)
{
	size_t a = from;
	for (int k = 0; k < PERMUTE_AHEAD && a != SIZE_MAX; k++)
		a = e[a].pos;
	if (a == SIZE_MAX)
		return;
	const unsigned char *p = r + a * size;
	for (size_t o = 0; o < size; o += 64)
		__builtin_prefetch(p + o);
	__builtin_prefetch(p + size - 1);
}

/* Move record e[i].pos to slot i for every i: each cycle once. */
static void permute(unsigned char *r, size_t size, struct enc *e, size_t n, unsigned char *tmp)
{
	for (size_t i = 0; i < n; i++) {
		if (e[i].pos == i || e[i].pos == SIZE_MAX)
			continue;
		memcpy(tmp, r + i * size, size);
		size_t j = i;
		while (e[j].pos != i) {
			size_t from = e[j].pos;
			fetch_ahead(r, size, e, from);
			memcpy(r + j * size, r + from * size, size);
			e[j].pos = SIZE_MAX;
			j = from;
		}
		memcpy(r + j * size, tmp, size);
		e[j].pos = SIZE_MAX;
	}
}

#define MAX_SLICES 64

/* Whether the records are in order already (a plan's targets often are:
 * the catalog's order, kept): compared in place, which stops at the first
 * pair out of order, before anything is encoded. */
static int in_order(const unsigned char *r, size_t n, size_t size,
		    const char *(*name)(const void *rec))
{
	for (size_t i = 1; i < n; i++)
		if (cmp_plain(r + (i - 1) * size, r + i * size, &name) > 0)
			return 0;
	return 1;
}

void ck_natural_sort_threads(void *base, size_t n, size_t size,
			     const char *(*name)(const void *rec), int threads)
{
	if (n < 2 || in_order(base, n, size, name))
		return;
	if (threads < 1)
		threads = 1;
	if (threads > MAX_SLICES)
		threads = MAX_SLICES;
	size_t ns = (size_t)threads < n ? (size_t)threads : n;
	struct slice s[MAX_SLICES] = {{0}};
	for (size_t k = 0; k < ns; k++)
		s[k] = (struct slice){n * k / ns, n * (k + 1) / ns, NULL};
	struct sort_job j = {base, size, name, malloc(n * sizeof *j.e), s};
	int ok = j.e != NULL;
	for (size_t k = 0; k < ns; k++)
		ok = ok && (s[k].buf = slice_buf(&j, &s[k])) != NULL;
	if (ok)
		ck_parallel_for(ns, threads, encode_slice, &j);
	unsigned char *tmp = ok ? malloc(size) : NULL;
	if (tmp && sort_enc(j.e, n, threads) == 0)
		permute(base, size, j.e, n, tmp);
	else /* no memory for the fast way: compare in place */
		qsort_r(base, n, size, cmp_plain, &name);
	free(tmp);
	for (size_t k = 0; k < ns; k++)
		free(s[k].buf);
	free(j.e);
}

/* Below this many records a thread costs more than it saves. */
#define MIN_THREADED 16384

void ck_natural_sort(void *base, size_t n, size_t size, const char *(*name)(const void *rec))
{
	ck_natural_sort_threads(base, n, size, name, n >= MIN_THREADED ? ck_cpu_count() : 1);
}
