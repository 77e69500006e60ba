#include "keyshape.h"

#include <stdlib.h>
#include <string.h>

#include "../util/parallel.h"

static int is_digit(char c)
{
	return c >= '0' && c <= '9';
}

/* key (len bytes) with each non-empty all-digit segment replaced by "0",
 * into s (room for len + 1); returns its length. Segment by segment: memchr
 * finds the dots and the text between numbers is copied whole (a 100k-key
 * plan shapes every key of every stage). */
static size_t shape_into(const char *key, size_t len, char *s)
{
	size_t k = 0, from = 0; /* key[from ..) is not copied yet */
	for (size_t seg = 0;;) {
		const char *dot = memchr(key + seg, '.', len - seg);
		size_t end = dot ? (size_t)(dot - key) : len, j = seg;
		while (j < end && is_digit(key[j]))
			j++;
		if (j == end && end > seg) { /* a number: one "0" */
			memcpy(s + k, key + from, seg - from);
			k += seg - from;
			s[k++] = '0';
			from = end;
		}
		if (!dot)
			break;
		seg = end + 1;
	}
	memcpy(s + k, key + from, len - from);
	s[k + len - from] = '\0';
	return k + len - from;
}

int ck_keyshapes_id(struct ck_keyshapes *ks, const char *key, uint32_t *id)
{
	if (!ks->map.cap && ck_strmap_init(&ks->map, 64) < 0)
		return -1;
	size_t len = strlen(key);
	char stack[256], *s = len < sizeof stack ? stack : malloc(len + 1);
	if (!s)
		return -1;
	uint32_t h = ck_strmap_hash_n(s, shape_into(key, len, s)), found;
	int rc = 0;
	if (ck_strmap_get_h(&ks->map, s, h, &found) == 0) {
		*id = found;
		goto out;
	}
	rc = -1;
	if (ks->n == ks->cap) {
		size_t c = ks->cap ? ks->cap * 2 : 64;
		char **n = realloc(ks->shape, c * sizeof *n);
		if (!n)
			goto out;
		ks->shape = n;
		ks->cap = c;
	}
	char *keep = strdup(s);
	if (!keep || ck_strmap_put_h(&ks->map, keep, h, (uint32_t)ks->n, NULL) < 0) {
		free(keep);
		goto out;
	}
	ks->shape[ks->n] = keep;
	*id = (uint32_t)ks->n++;
	rc = 0;
out:
	if (s != stack)
		free(s);
	return rc;
}

struct shape_piece {
	size_t a, b;
	struct ck_keyshapes local; /* the piece's shapes, numbered as it met them */
	int rc;
};

struct shape_job {
	const char *(*key)(const void *ctx, size_t i);
	const void *ctx;
	uint32_t *ids;
	struct shape_piece *p;
};

static void shape_piece(void *vj, size_t t)
{
	const struct shape_job *j = vj;
	struct shape_piece *p = &j->p[t];
	for (size_t i = p->a; i < p->b && p->rc == 0; i++)
		p->rc = ck_keyshapes_id(&p->local, j->key(j->ctx, i), &j->ids[i]);
}

/* Pieces per thread: a few, so that one slow to start costs little. */
#define SHAPE_PIECES 4

int ck_keyshapes_ids(struct ck_keyshapes *ks, size_t n, const char *(*key)(const void *ctx, size_t i),
		     const void *ctx, uint32_t *ids, int threads)
{
	if (threads <= 1 || n < 2) {
		for (size_t i = 0; i < n; i++)
			if (ck_keyshapes_id(ks, key(ctx, i), &ids[i]) < 0)
				return -1;
		return 0;
	}
	size_t np = ck_pieces(n, threads, SHAPE_PIECES);
	struct shape_piece *p = calloc(np, sizeof *p);
	if (!p)
		return -1;
	for (size_t t = 0; t < np; t++)
		p[t].a = ck_piece_start(n, np, t), p[t].b = ck_piece_start(n, np, t + 1);
	struct shape_job j = {key, ctx, ids, p};
	ck_parallel_for(np, threads, shape_piece, &j);
	int rc = 0;
	for (size_t t = 0; t < np; t++) {
		/* a piece's shapes in the order it met them: the order one
		 * thread meets them in, the pieces being in key order */
		uint32_t *to = rc == 0 ? malloc((p[t].local.n ? p[t].local.n : 1) * sizeof *to) : NULL;
		rc = rc == 0 && to && p[t].rc == 0 ? 0 : -1;
		for (size_t s = 0; rc == 0 && s < p[t].local.n; s++)
			rc = ck_keyshapes_id(ks, p[t].local.shape[s], &to[s]);
		for (size_t i = p[t].a; rc == 0 && i < p[t].b; i++)
			ids[i] = to[ids[i]];
		free(to);
		ck_keyshapes_free(&p[t].local);
	}
	free(p);
	return rc;
}

void ck_keyshapes_free(struct ck_keyshapes *ks)
{
	for (size_t i = 0; i < ks->n; i++)
		free(ks->shape[i]);
	free(ks->shape);
	ck_strmap_free(&ks->map);
	memset(ks, 0, sizeof *ks);
}

int ck_pattern_shape_exact(const struct ck_pattern *p)
{
	for (int t = 0; t < p->n; t++) {
		const char *l = p->tok[t].lit;
		for (size_t i = 0; l && l[i];) {
			size_t j = i;
			int digit = 0, other = 0;
			for (; l[j] && l[j] != '.'; j++)
				*(is_digit(l[j]) ? &digit : &other) = 1;
			if (digit && !other)
				return 0;
			i = l[j] ? j + 1 : j;
		}
	}
	return 1;
}

int ck_shape_memo_fill(const struct ck_pattern *p, const struct ck_keyshapes *ks,
		       struct ck_shape_memo *memo)
{
	for (size_t id = 0; p->shape_exact && id < ks->n; id++)
		if (ck_shape_may_match(p, ks, (uint32_t)id, memo) < 0)
			return -1;
	return 0;
}

int ck_shape_may_match(const struct ck_pattern *p, const struct ck_keyshapes *ks, uint32_t id,
		       struct ck_shape_memo *memo)
{
	if (!p->shape_exact || id >= ks->n)
		return 1;
	if (id >= memo->n) {
		size_t n = ks->n;
		uint8_t *v = realloc(memo->v, n);
		if (!v)
			return -1;
		memset(v + memo->n, 0, n - memo->n);
		memo->v = v;
		memo->n = n;
	}
	if (!memo->v[id]) {
		struct ck_binding b;
		int r = ck_pattern_match(p, ks->shape[id], &b);
		if (r < 0)
			return -1;
		ck_binding_clear(&b);
		memo->v[id] = r ? 2 : 1;
	}
	return memo->v[id] == 2;
}

void ck_shape_memo_free(struct ck_shape_memo *memo)
{
	free(memo->v);
	memo->v = NULL;
	memo->n = 0;
}
