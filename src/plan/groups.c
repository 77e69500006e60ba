/* Group sharding (d9d's Shard): whole dependency groups per process,
 * balanced by output bytes. */
#include <errno.h>
#include <stdlib.h>

#include "shard.h"

/* qsort_r order: output bytes descending, then group index */
static int cmp_group_size(const void *a, const void *b, void *ctx)
{
	const struct ck_plan *p = ctx;
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	uint64_t bx = p->g[x].out_bytes, by = p->g[y].out_bytes;
	return bx != by ? (bx < by ? 1 : -1) : (x > y) - (x < y);
}

int ck_groups_assign(const struct ck_plan *p, int64_t world, uint32_t **rank_of,
		     struct ck_err *err)
{
	if (world < 1 || world > (1 << 20))
		return ck_fail(err, CK_E_USAGE, "--shard-groups: world size %lld is not 1..%d",
			       (long long)world, 1 << 20);
	size_t ng = p->n_groups;
	uint32_t *order = malloc((ng ? ng : 1) * sizeof *order);
	uint64_t *load = calloc((size_t)world, sizeof *load);
	*rank_of = malloc((ng ? ng : 1) * sizeof **rank_of);
	if (!order || !load || !*rank_of) {
		free(order);
		free(load);
		free(*rank_of);
		*rank_of = NULL;
		return ck_fail_sys(err, ENOMEM, "group sharding");
	}
	for (size_t g = 0; g < ng; g++)
		order[g] = (uint32_t)g;
	/* largest first; equal sizes in group order (a total order: the same
	 * assignment on every process) */
	qsort_r(order, ng, sizeof *order, cmp_group_size, (void *)p);
	for (size_t i = 0; i < ng; i++) {
		int64_t best = 0;
		for (int64_t r = 1; r < world; r++)
			if (load[r] < load[best])
				best = r;
		(*rank_of)[order[i]] = (uint32_t)best;
		load[best] += p->g[order[i]].out_bytes;
	}
	free(order);
	free(load);
	return 0;
}

int ck_plan_shard_groups(struct ck_plan *p, int64_t world, int64_t rank, struct ck_err *err)
{
	if (rank < 0 || rank >= world)
		return ck_fail(err, CK_E_USAGE, "rank %lld is outside the world (size %lld)",
			       (long long)rank, (long long)world);
	uint32_t *rank_of;
	if (ck_groups_assign(p, world, &rank_of, err) < 0)
		return -1;
	unsigned char *keep = malloc(p->n ? p->n : 1);
	if (!keep) {
		free(rank_of);
		return ck_fail_sys(err, ENOMEM, "group sharding");
	}
	for (size_t i = 0; i < p->n; i++)
		keep[i] = rank_of[p->t[i].group] == (uint32_t)rank;
	free(rank_of);
	int r = ck_plan_retain(p, keep, err);
	free(keep);
	return r;
}

