/* Open a source, load its mappings and build the plan (and the per-rank
 * selection): shared by the CLI verbs, the FUSE daemon and libckptfs. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../plan/shard.h"
#include "../util/launcher.h"
#include "../util/parallel.h"
#include "open.h"

int64_t ck_env_rank(int64_t given)
{
	return given >= 0 ? given : ck_launcher_get(CK_RANK);
}

int64_t ck_env_local(int size)
{
	return ck_launcher_get(size ? CK_LOCAL_SIZE : CK_LOCAL_RANK);
}

int64_t ck_env_world(int64_t given)
{
	if (given > 0)
		return given;
	int64_t w = ck_launcher_get(CK_WORLD);
	return w > 0 ? w : 0;
}

int ck_subst_rank(const char *path, const char *mesh, int64_t rank, char *out, size_t n,
		  struct ck_err *err)
{
	struct ck_mesh m = {0};
	int64_t coord[CK_MAX_AXES] = {0};
	if (mesh && ck_mesh_parse(mesh, &m, err) < 0)
		return -1;
	for (int a = m.n - 1, r = (int)(rank < 0 ? 0 : rank); a >= 0; a--) {
		coord[a] = r % m.size[a];
		r /= (int)m.size[a];
	}
	int64_t local = ck_launcher_get(CK_LOCAL_RANK);
	size_t k = 0;
	for (const char *s = path; *s;) {
		const char *close = *s == '{' ? strchr(s, '}') : NULL;
		char name[32], val[32];
		int found = 0;
		if (close && (size_t)(close - s - 1) < sizeof name) {
			memcpy(name, s + 1, (size_t)(close - s - 1));
			name[close - s - 1] = '\0';
			if (!strcmp(name, "rank") && rank >= 0)
				found = snprintf(val, sizeof val, "%lld", (long long)rank) > 0;
			else if (!strcmp(name, "local_rank"))
				found = snprintf(val, sizeof val, "%lld",
						 (long long)(local >= 0 ? local : 0)) > 0;
			for (int a = 0; a < m.n && !found; a++)
				if (!strcmp(name, m.name[a]))
					found = snprintf(val, sizeof val, "%lld", (long long)coord[a]) > 0;
		}
		if (found) {
			size_t l = strlen(val);
			if (k + l >= n)
				return ck_fail(err, CK_E_USAGE, "path too long: %s", path);
			memcpy(out + k, val, l);
			k += l;
			s = close + 1;
		} else {
			if (k + 1 >= n)
				return ck_fail(err, CK_E_USAGE, "path too long: %s", path);
			out[k++] = *s++;
		}
	}
	out[k] = '\0';
	return 0;
}

/* "0-7", "0,2,5", "1-3,6" or "all": ascending, no repeats, inside the world. */
static int parse_ranks(const char *text, int64_t world, int64_t **out, size_t *n,
		       struct ck_err *err)
{
	*out = calloc((size_t)world, sizeof **out);
	*n = 0;
	if (!*out)
		return ck_fail_sys(err, ENOMEM, "--ranks");
	if (!strcmp(text, "local")) { /* this node's ranks, as the launcher numbers them */
		int64_t r = ck_env_rank(-1), lr = ck_env_local(0), ls = ck_env_local(1);
		if (r < 0 || lr < 0 || ls < 1 || lr > r)
			return ck_fail(err, CK_E_USAGE, "--ranks local needs the launcher's RANK, "
							"LOCAL_RANK and LOCAL_WORLD_SIZE (or "
							"OMPI_COMM_WORLD_*)");
		for (int64_t k = 0; k < ls; k++) { /* r - lr + k: no sum past int64 */
			if (k >= world - (r - lr))
				return ck_fail(err, CK_E_USAGE,
					       "--ranks local: rank %lld is outside the "
					       "mesh (world size %lld)",
					       (long long)(r - lr + k), (long long)world);
			(*out)[(*n)++] = r - lr + k;
		}
		return 0;
	}
	if (!strcmp(text, "all")) {
		for (int64_t r = 0; r < world; r++)
			(*out)[(*n)++] = r;
		return 0;
	}
	const char *s = text;
	while (*s) {
		char *end;
		long long a = strtoll(s, &end, 10), b;
		if (end == s || a < 0)
			goto bad;
		b = a;
		if (*end == '-') {
			s = end + 1;
			b = strtoll(s, &end, 10);
			if (end == s || b < a)
				goto bad;
		}
		if (*end && *end != ',')
			goto bad;
		for (long long r = a; r <= b; r++) {
			if (r >= world)
				return ck_fail(err, CK_E_USAGE, "--ranks: rank %lld is outside the mesh "
								"(world size %lld)",
					       r, (long long)world);
			if (*n && (*out)[*n - 1] >= r)
				goto bad;
			(*out)[(*n)++] = r;
		}
		s = *end ? end + 1 : end;
	}
	if (*n)
		return 0;
bad:
	return ck_fail(err, CK_E_USAGE, "--ranks \"%s\": expected ascending ranks such as 0-7, "
					"0,2,5 or all",
		       text);
}

int ck_state_parse(const char *text)
{
	return !strcmp(text, "all")	    ? 0
	       : !strcmp(text, "params")    ? 1
	       : !strcmp(text, "optimizer") ? 2
					    : -1;
}

/* NAME=VALUE: NAME a config key, VALUE an integer (exact in the double a
 * JSON number is) or true/false. 0 ok, -1 not of that form. */
static int split_set(const char *text, struct ck_view_set *out)
{
	const char *eq = strchr(text, '=');
	if (!eq || eq == text || (size_t)(eq - text) >= sizeof out->name)
		return -1;
	for (const char *c = text; c < eq; c++)
		if (!(*c == '_' || (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
		      (c > text && *c >= '0' && *c <= '9')))
			return -1;
	memcpy(out->name, text, (size_t)(eq - text));
	out->name[eq - text] = '\0';
	out->is_bool = !strcmp(eq + 1, "true") || !strcmp(eq + 1, "false");
	if (out->is_bool) {
		out->val = eq[1] == 't';
		return 0;
	}
	char *end;
	errno = 0;
	out->val = strtoll(eq + 1, &end, 10);
	return !eq[1] || *end || errno || out->val > (1LL << 53) || out->val < -(1LL << 53) ? -1 : 0;
}

int ck_view_add_set(struct ck_view_args *a, const char *assignment, struct ck_err *err)
{
	if (a->n_sets == CK_MAX_SETS)
		return ck_fail(err, CK_E_USAGE, "at most %d --set values", CK_MAX_SETS);
	if (split_set(assignment, &a->sets[a->n_sets]) < 0)
		return ck_fail(err, CK_E_USAGE, "--set \"%s\": expected NAME=INTEGER (|INTEGER| <= 2^53) or "
				       "NAME=true|false",
			       assignment);
	a->n_sets++;
	return 0;
}

/* --set values replace config.json's as every expression sees them (the
 * served config.json keeps the source's bytes). */
static int apply_sets(struct ck_catalog *cat, const struct ck_view_args *a, struct ck_err *err)
{
	for (int i = 0; i < a->n_sets; i++) {
		const struct ck_view_set *s = &a->sets[i];
		if (!cat->config && !(cat->config = cJSON_CreateObject()))
			return ck_fail_sys(err, ENOMEM, "--set");
		cJSON *item = s->is_bool ? cJSON_CreateBool((int)s->val) : cJSON_CreateNumber((double)s->val);
		if (!item)
			return ck_fail_sys(err, ENOMEM, "--set");
		if (cJSON_GetObjectItemCaseSensitive(cat->config, s->name))
			cJSON_ReplaceItemInObjectCaseSensitive(cat->config, s->name, item);
		else
			cJSON_AddItemToObject(cat->config, s->name, item);
	}
	return 0;
}

/* Each rank's plan: what the rank keeps of the one plan, copied and
 * sharded. */
struct ranks_job {
	struct ck_view *v;
	const struct ck_plan *base;
	const struct ck_shard_prep *prep;
	const struct ck_mapping *rules;
	const struct ck_mesh *m;
	struct ck_err *errs;
	int *rc;
};

static void rank_task(void *ctx, size_t k)
{
	struct ranks_job *j = ctx;
	struct ck_view *v = j->v;
	j->rc[k] = ck_plan_shard_copy(j->base, j->prep, j->rules, j->m, v->ranks[k],
				      &v->rank_plans[k], &j->errs[k]);
}

/* One plan per rank of --ranks, and their union for the shared cache. The
 * mapping is planned once (it was planned again for every rank: 64 ranks
 * of the 671B preset took 27-34 s), and each rank copies only the targets
 * it keeps (an ep=8 rank: 1/8 of them), the ranks on the cores. */
static int open_ranks(struct ck_view *v, const struct ck_view_args *a, const struct ck_mesh *m,
		      const struct ck_mapping *rules, struct ck_err *err)
{
	if (parse_ranks(a->ranks, ck_mesh_world(m), &v->ranks, &v->n_ranks, err) < 0)
		return -1;
	if (!(v->rank_plans = calloc(v->n_ranks, sizeof *v->rank_plans)))
		return ck_fail_sys(err, ENOMEM, "--ranks");
	struct ck_plan *base = NULL;
	struct ck_shard_prep prep;
	if (ck_plan_build(v->cat, v->maps, v->n_maps, &base, err) < 0 ||
	    ck_plan_keep_state(base, a->state, err) < 0 ||
	    ck_shard_prepare(base, rules, m, &prep, err) < 0) {
		ck_plan_free(base);
		return -1;
	}
	struct ranks_job j = {.v = v, .base = base, .prep = &prep, .rules = rules, .m = m};
	j.errs = calloc(v->n_ranks, sizeof *j.errs);
	j.rc = calloc(v->n_ranks, sizeof *j.rc);
	int rc = j.errs && j.rc ? 0 : ck_fail_sys(err, ENOMEM, "--ranks");
	if (rc == 0)
		ck_parallel_for(v->n_ranks, ck_cpu_count(), rank_task, &j);
	for (size_t k = 0; rc == 0 && k < v->n_ranks; k++) /* the first rank's error */
		if (j.rc[k] < 0) {
			*err = j.errs[k];
			rc = -1;
		}
	free(j.errs);
	free(j.rc);
	ck_shard_prep_free(&prep);
	ck_plan_free(base);
	if (rc < 0)
		return -1;
	return ck_plan_merge((const struct ck_plan *const *)v->rank_plans, v->n_ranks, &v->plan,
			     &v->rank_idx, err);
}

int ck_view_open(struct ck_view *v, const char *source, const struct ck_view_args *a,
		 struct ck_err *err)
{
	memset(v, 0, sizeof *v);
	v->rank = -1;
	const char *mesh = a->mesh;
	char **mappings = (char **)a->maps;
	int n_mappings = a->n_maps;
	int64_t rank = a->rank, world = 0;
	struct ck_mesh m;
	if (mesh && a->shard_groups)
		return ck_fail(err, CK_E_USAGE, "--mesh and --shard-groups do not go together");
	if (a->ranks && !mesh)
		return ck_fail(err, CK_E_USAGE, "--ranks needs --mesh");
	/* a rank that selects nothing would silently give the whole view */
	if (a->rank >= 0 && !mesh && !a->shard_groups)
		return ck_fail(err, CK_E_USAGE, "--rank needs --mesh (a per-rank view) or "
						"--shard-groups");
	if (a->world > 0 && !a->shard_groups)
		return ck_fail(err, CK_E_USAGE, "--world-size goes with --shard-groups");
	if (a->shard_groups) {
		world = ck_env_world(a->world);
		if (!world || (rank = ck_env_rank(rank)) < 0)
			return ck_fail(err, CK_E_USAGE, "--shard-groups needs the world size and rank "
							"(--world-size N --rank R, or mpirun/torchrun's "
							"environment)");
	}
	if (mesh) {
		if (ck_mesh_parse(mesh, &m, err) < 0)
			return -1;
		if (!a->ranks && (rank = ck_env_rank(rank)) < 0)
			return ck_fail(err, CK_E_USAGE, "--mesh needs --rank (or OMPI_COMM_WORLD_RANK "
							"or RANK in the environment)");
	}
	if (n_mappings > CK_MAX_MAPPINGS)
		return ck_fail(err, CK_E_USAGE, "at most %d --mapping files", CK_MAX_MAPPINGS);
	if (ck_catalog_open(source, &v->cat, err) < 0)
		return -1;
	if (apply_sets(v->cat, a, err) < 0) {
		ck_view_close(v);
		return -1;
	}
	for (int i = 0; i < n_mappings; i++, v->n_maps++) {
		char path[4096];
		if (ck_mapping_resolve(mappings[i], path, sizeof path, err) < 0 ||
		    ck_mapping_load(path, &v->maps[i], err) < 0) {
			ck_view_close(v);
			return -1;
		}
	}
	const struct ck_mapping *rules = NULL;
	for (int i = 0; i < v->n_maps; i++)
		if (v->maps[i]->n_parts || v->maps[i]->n_sels)
			rules = v->maps[i];
	if (a->ranks) {
		if (open_ranks(v, a, &m, rules, err) < 0) {
			ck_view_close(v);
			return -1;
		}
		return 0;
	}
	if (ck_plan_build(v->cat, v->maps, v->n_maps, &v->plan, err) < 0 ||
	    ck_plan_keep_state(v->plan, a->state, err) < 0 ||
	    (!mesh && ck_plan_pad(v->plan, rules, err) < 0)) {
		ck_view_close(v);
		return -1;
	}
	if (mesh) {
		if (ck_plan_shard(v->plan, rules, &m, rank, err) < 0) {
			ck_view_close(v);
			return -1;
		}
		v->rank = rank;
	}
	if (world) {
		if (ck_plan_shard_groups(v->plan, world, rank, err) < 0) {
			ck_view_close(v);
			return -1;
		}
		v->rank = rank;
		v->world = world;
	}
	return 0;
}

void ck_view_close(struct ck_view *v)
{
	ck_plan_free(v->plan);
	for (size_t k = 0; v->rank_plans && k < v->n_ranks; k++)
		ck_plan_free(v->rank_plans[k]);
	free(v->rank_plans);
	free(v->ranks);
	ck_plan_merge_free_idx(v->rank_idx, v->n_ranks);
	for (int i = 0; i < v->n_maps; i++)
		ck_mapping_free(v->maps[i]);
	ck_catalog_free(v->cat);
	memset(v, 0, sizeof *v);
}

