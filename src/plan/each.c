#include "each.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_COMBOS (1ull << 24)

int ck_each_seen_init(struct ck_each_seen *s, const struct ck_each *each, int n,
		      const int64_t *counts, size_t n_keys, struct ck_err *err)
{
	*s = (struct ck_each_seen){.each = each, .n = n, .total = 1};
	uint64_t limit = 1024 + 64 * (uint64_t)n_keys;
	if (limit > MAX_COMBOS)
		limit = MAX_COMBOS;
	for (int k = 0; k < n; k++) {
		if (counts[k] < 0)
			return ck_fail(err, CK_E_MAPPING, "\"each\": the count of {%s}, %s, is %lld",
				       each[k].name, each[k].text, (long long)counts[k]);
		s->count[k] = counts[k];
		if (counts[k] && s->total > limit / (uint64_t)counts[k])
			return ck_fail(err, CK_E_MAPPING,
				       "\"each\": {%s} below %s = %lld makes more than %llu "
				       "combinations for %zu keys (is the config value right?)",
				       each[k].name, each[k].text, (long long)counts[k],
				       (unsigned long long)limit, n_keys);
		s->total *= (uint64_t)counts[k];
	}
	if (!(s->bits = calloc(s->total / 8 + 1, 1)))
		return ck_fail_sys(err, ENOMEM, "planning");
	return 0;
}

int ck_each_seen_add(struct ck_each_seen *s, const struct ck_binding *b, struct ck_err *err)
{
	uint64_t pos = 0;
	for (int k = 0; k < s->n; k++) {
		const char *v = ck_binding_get(b, s->each[k].name);
		int64_t x = 0;
		size_t len = v ? strlen(v) : 0;
		for (size_t i = 0; i < len && x >= 0; i++)
			x = v[i] >= '0' && v[i] <= '9' && len <= 18 ? x * 10 + (v[i] - '0') : -1;
		if (!len || x < 0)
			return ck_fail(err, CK_E_MAPPING, "\"each\": {%s} = \"%s\" is not an integer",
				       s->each[k].name, v ? v : "");
		if (x >= s->count[k])
			return ck_fail(err, CK_E_MAPPING,
				       "\"each\": {%s} = %lld is not below %s = %lld",
				       s->each[k].name, (long long)x, s->each[k].text,
				       (long long)s->count[k]);
		pos = pos * (uint64_t)s->count[k] + (uint64_t)x;
	}
	/* atomic: a rule's matches are marked on several threads */
	__atomic_fetch_or(&s->bits[pos / 8], (uint8_t)(1u << (pos % 8)), __ATOMIC_RELAXED);
	return 0;
}

int ck_each_seen_gap(const struct ck_each_seen *s, uint64_t *pos, int64_t *vals)
{
	uint64_t p = *pos;
	while (p < s->total) {
		if (p % 8 == 0 && s->bits[p / 8] == 0xff) {
			p += 8;
			continue;
		}
		if (!(s->bits[p / 8] & (1u << (p % 8))))
			break;
		p++;
	}
	if (p >= s->total)
		return 0;
	*pos = p;
	for (int k = s->n - 1; k >= 0; k--) {
		vals[k] = (int64_t)(p % (uint64_t)s->count[k]);
		p /= (uint64_t)s->count[k];
	}
	return 1;
}

void ck_each_describe(const struct ck_each_seen *s, const int64_t *vals, char *buf, size_t cap)
{
	size_t o = 0;
	buf[0] = '\0';
	for (int k = 0; k < s->n && o < cap; k++)
		o += (size_t)snprintf(buf + o, cap - o, "%s{%s} = %lld", k ? ", " : "",
				      s->each[k].name, (long long)vals[k]);
	for (int k = 0; k < s->n && o < cap; k++)
		o += (size_t)snprintf(buf + o, cap - o, "%s{%s} below %s = %lld%s",
				      k ? ", " : " (each ", s->each[k].name, s->each[k].text,
				      (long long)s->count[k], k == s->n - 1 ? ")" : "");
}

void ck_each_seen_free(struct ck_each_seen *s)
{
	free(s->bits);
	s->bits = NULL;
}
