/* Partition and select rules without a mount: over a pp=2 x tp=2 mesh each
 * rank holds its pipeline stage's layers, renumbered from 0 (global names
 * kept), the first and last stage's own tensors, and its tensor-parallel
 * slice of each split target with Megatron's ShardedTensor description;
 * the bytes, read through the engine, equal the source's slice computed
 * here by index arithmetic; a copy of the plan sharded for a rank is that
 * rank's own plan. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/catalog.h"
#include "exec/engine.h"
#include "map/mapping.h"
#include "plan/plan.h"
#include "plan/shard.h"
#include "testutil.h"

static char *dir;
static struct ck_catalog *cat;
static unsigned char *file;

static const char *MAP =
	"{\"unused\": \"keep\","
	" \"partition\": ["
	"  {\"match\": \"layers.{L}.w\", \"spec\": [\"tp\", null]},"
	"  {\"match\": \"layers.{L}.b\", \"spec\": [\"tp\"]},"
	"  {\"match\": \"head\", \"spec\": [null, \"tp\"]}],"
	" \"select\": ["
	"  {\"match\": \"layers.{L}.{rest:path}\", \"axis\": \"pp\", \"split\": \"L\", \"renumber\": true},"
	"  {\"match\": \"emb\", \"axis\": \"pp\", \"stage\": \"first\"},"
	"  {\"match\": \"head\", \"axis\": \"pp\", \"stage\": \"last\"}]}";

static void setup(void)
{
	dir = tu_mkdtemp();
	static const struct tu_tensor t[] = {
		{"emb", CK_DT_F32, 2, {10, 6}},	     {"head", CK_DT_F32, 2, {10, 6}},
		{"layers.0.b", CK_DT_F32, 1, {8}},   {"layers.0.w", CK_DT_F32, 2, {8, 6}},
		{"layers.1.b", CK_DT_F32, 1, {8}},   {"layers.1.w", CK_DT_F32, 2, {8, 6}},
		{"layers.2.b", CK_DT_F32, 1, {8}},   {"layers.2.w", CK_DT_F32, 2, {8, 6}},
		{"layers.3.b", CK_DT_F32, 1, {8}},   {"layers.3.w", CK_DT_F32, 2, {8, 6}},
	};
	char *p = tu_path(dir, "model.safetensors");
	tu_write_st(p, t, sizeof t / sizeof *t);
	size_t len;
	file = tu_read(p, &len);
	free(p);
	struct ck_err err;
	ck_assert_msg(ck_catalog_open(dir, &cat, &err) == 0, "%s", err.msg);
}

static void teardown(void)
{
	ck_catalog_free(cat);
	tu_rmtree(dir);
	free(dir);
	free(file);
}

/* The plan of rank r of mesh, or NULL with err. */
static struct ck_plan *rank_plan(const char *mesh, int64_t r, struct ck_err *err)
{
	struct ck_mapping *m;
	struct ck_plan *p;
	struct ck_mesh me;
	ck_assert_msg(ck_mapping_parse(MAP, strlen(MAP), "t.json", &m, err) == 0, "%s", err->msg);
	ck_assert_msg(ck_mesh_parse(mesh, &me, err) == 0, "%s", err->msg);
	ck_assert_msg(ck_plan_build(cat, &m, 1, &p, err) == 0, "%s", err->msg);
	int rc = ck_plan_shard(p, m, &me, r, err);
	ck_mapping_free(m);
	if (rc < 0) {
		ck_plan_free(p);
		return NULL;
	}
	return p;
}

/* Element (i, j) of source tensor name ([rows, cols] F32), as raw bits. */
static uint32_t src_elem(const char *name, int64_t i, int64_t j, int64_t cols)
{
	uint32_t v;
	memcpy(&v, file + ck_catalog_find(cat, name)->t.offset + (uint64_t)(i * cols + j) * 4, 4);
	return v;
}

/* Target t's bytes equal rows [r0, r0+nr) x cols [c0, c0+nc) of source. */
static void check_slice(const struct ck_plan *p, const char *target, const char *source,
			int64_t r0, int64_t nr, int64_t c0, int64_t nc, int64_t cols)
{
	const struct ck_target *t = ck_plan_find(p, target);
	ck_assert_msg(t, "no target %s", target);
	struct ck_engine e;
	ck_engine_init(&e, p, 0);
	struct ck_eval_ctx c;
	ck_eval_ctx_init(&c, &e);
	struct ck_err err;
	uint32_t *buf = malloc(t->nbytes);
	ck_assert_msg(ck_engine_read(&c, (uint32_t)(t - p->t), 0, t->nbytes, buf, &err) == 0, "%s",
		      err.msg);
	ck_assert_uint_eq(t->nbytes, (uint64_t)(nr * nc * 4));
	for (int64_t i = 0; i < nr; i++)
		for (int64_t j = 0; j < nc; j++)
			ck_assert_msg(buf[i * nc + j] == src_elem(source, r0 + i, c0 + j, cols),
				      "%s (%lld, %lld)", target, (long long)i, (long long)j);
	free(buf);
	ck_eval_ctx_free(&c);
}

START_TEST(pp_tp_ranks)
{
	int64_t r = _i, pp = r / 2, tp = r % 2; /* row-major: tp varies fastest */
	struct ck_err err;
	struct ck_plan *p = rank_plan("pp=2,tp=2", r, &err);
	ck_assert_msg(p, "%s", err.msg);
	ck_assert_uint_eq(p->n, 5); /* 2 layers x (w, b), and emb or head */
	ck_assert_int_eq(ck_plan_find(p, "emb") != NULL, pp == 0);
	ck_assert_int_eq(ck_plan_find(p, "head") != NULL, pp == 1);
	ck_assert_ptr_null(ck_plan_find(p, "layers.2.w")); /* renumbered from 0 on each stage */
	for (int j = 0; j < 2; j++) {
		char local[32], global[32], gb[32], lb[32];
		snprintf(local, sizeof local, "layers.%d.w", j);
		snprintf(global, sizeof global, "layers.%lld.w", (long long)(2 * pp + j));
		snprintf(lb, sizeof lb, "layers.%d.b", j);
		snprintf(gb, sizeof gb, "layers.%lld.b", (long long)(2 * pp + j));
		const struct ck_target *t = ck_plan_find(p, local);
		ck_assert_ptr_nonnull(t);
		const struct ck_shard_info *s = t->shard;
		ck_assert_str_eq(s->global_name, global);
		ck_assert_int_eq(t->v.shape[0], 4);
		ck_assert_int_eq(t->v.shape[1], 6);
		ck_assert_int_eq(s->global_shape[0], 8);
		ck_assert_int_eq(s->global_shape[1], 6);
		ck_assert_int_eq(s->axis_frag[0], 2);
		ck_assert_int_eq(s->axis_frag[1], 1);
		ck_assert_int_eq(s->n_frag, 1);
		ck_assert_int_eq(s->frag[0].global_off[0], 4 * tp);
		ck_assert_int_eq(s->frag[0].global_off[1], 0);
		ck_assert_int_eq(s->n_replica, 0); /* split on tp, placed on pp */
		ck_assert_int_eq(s->partition_rule, 1);
		check_slice(p, local, global, 4 * tp, 4, 0, 6, 6);
		check_slice(p, lb, gb, 4 * tp, 4, 0, 1, 1);
	}
	if (pp == 0) { /* replicated over tp: its tp coordinate is its replica id */
		const struct ck_shard_info *s = ck_plan_find(p, "emb")->shard;
		ck_assert_int_eq(s->partition_rule, 0);
		ck_assert_int_eq(s->n_replica, 1);
		ck_assert_int_eq(s->replica_id[0], tp);
		check_slice(p, "emb", "emb", 0, 10, 0, 6, 6);
	} else { /* split on dim 1: a column block */
		const struct ck_target *t = ck_plan_find(p, "head");
		ck_assert_int_eq(t->v.shape[1], 3);
		ck_assert_int_eq(t->shard->frag[0].global_off[1], 3 * tp);
		check_slice(p, "head", "head", 0, 10, 3 * tp, 3, 6);
	}
	ck_plan_free(p);
}
END_TEST

/* What a mesh cannot mean is refused, naming the cause. */
START_TEST(bad_meshes_refused)
{
	struct ck_err err;
	ck_assert_ptr_null(rank_plan("ep=2", 0, &err));
	ck_assert_msg(strstr(err.msg, "axis ep is used by no partition or select rule"), "%s",
		      err.msg);
	ck_assert_ptr_null(rank_plan("tp=3", 0, &err)); /* 8 rows over 3 ranks */
	ck_assert_msg(err.kind == CK_E_MAPPING && strstr(err.msg, "layers."), "%s", err.msg);
	ck_assert_ptr_null(rank_plan("pp=3", 0, &err)); /* 4 layers over 3 stages */
	ck_assert_msg(strstr(err.msg, "do not split evenly"), "%s", err.msg);
	ck_assert_ptr_null(rank_plan("tp=2", 2, &err));
	ck_assert_msg(strstr(err.msg, "outside the mesh"), "%s", err.msg);
}
END_TEST

/* Two plans alike: targets (name, value, bytes, group, shard description),
 * groups and warnings. */
static void assert_same_plan(const struct ck_plan *a, const struct ck_plan *b)
{
	ck_assert_uint_eq(a->n, b->n);
	for (size_t i = 0; i < a->n; i++) {
		const struct ck_target *x = &a->t[i], *y = &b->t[i];
		ck_assert_str_eq(x->name, y->name);
		ck_assert_msg(ck_value_equal(&x->v, &y->v), "%s", x->name);
		ck_assert_uint_eq(x->nbytes, y->nbytes);
		ck_assert_uint_eq(x->group, y->group);
		ck_assert_int_eq(!x->shard, !y->shard);
		if (!x->shard)
			continue;
		const struct ck_shard_info *u = x->shard, *w = y->shard;
		ck_assert_int_eq(memcmp(u->global_shape, w->global_shape, sizeof u->global_shape),
				 0);
		ck_assert_int_eq(u->n_frag, w->n_frag);
		ck_assert_int_eq(memcmp(u->frag, w->frag, (size_t)u->n_frag * sizeof *u->frag), 0);
		ck_assert_int_eq(u->n_replica, w->n_replica);
		ck_assert_int_eq(memcmp(u->replica_id, w->replica_id, sizeof u->replica_id), 0);
		ck_assert_int_eq(!u->global_name, !w->global_name);
		if (u->global_name)
			ck_assert_str_eq(u->global_name, w->global_name);
	}
	ck_assert_uint_eq(a->n_groups, b->n_groups);
	for (size_t g = 0; g < a->n_groups; g++) {
		ck_assert_uint_eq(a->g[g].n_targets, b->g[g].n_targets);
		ck_assert_uint_eq(a->g[g].n_sources, b->g[g].n_sources);
		ck_assert_int_eq(memcmp(a->g[g].targets, b->g[g].targets,
					a->g[g].n_targets * sizeof *a->g[g].targets),
				 0);
		ck_assert_int_eq(memcmp(a->g[g].sources, b->g[g].sources,
					a->g[g].n_sources * sizeof *a->g[g].sources),
				 0);
	}
	ck_assert_uint_eq(a->n_warnings, b->n_warnings);
	for (size_t k = 0; k < a->n_warnings; k++)
		ck_assert_str_eq(a->warnings[k], b->warnings[k]);
}

/* --ranks plans the mapping once, then each rank copies the targets it
 * keeps and shards them: every rank's plan is the one a plan of its own
 * gives (the pp split's count, which the mapping leaves to the keys, comes
 * from the whole plan: rank 0 keeps only layers 0 and 1), a whole copy
 * sharded is the same, and the plan they came from stays as it was. */
START_TEST(sharded_copies_are_rank_plans)
{
	struct ck_err err;
	struct ck_mapping *m;
	struct ck_plan *base, *fresh;
	struct ck_mesh me;
	struct ck_shard_prep prep;
	ck_assert_msg(ck_mapping_parse(MAP, strlen(MAP), "t.json", &m, &err) == 0, "%s", err.msg);
	ck_assert_msg(ck_mesh_parse("pp=2,tp=2", &me, &err) == 0, "%s", err.msg);
	ck_assert_msg(ck_plan_build(cat, &m, 1, &base, &err) == 0, "%s", err.msg);
	ck_assert_msg(ck_plan_build(cat, &m, 1, &fresh, &err) == 0, "%s", err.msg);
	ck_assert_msg(ck_shard_prepare(base, m, &me, &prep, &err) == 0, "%s", err.msg);
	for (int64_t r = 0; r < 4; r++) {
		struct ck_plan *copy, *part, *own = rank_plan("pp=2,tp=2", r, &err);
		ck_assert_msg(own, "%s", err.msg);
		ck_assert_msg(ck_plan_copy_some(base, NULL, &copy, &err) == 0, "%s", err.msg);
		assert_same_plan(copy, base);
		ck_assert_msg(ck_plan_shard(copy, m, &me, r, &err) == 0, "%s", err.msg);
		assert_same_plan(copy, own);
		ck_assert_msg(ck_plan_shard_copy(base, &prep, m, &me, r, &part, &err) == 0, "%s",
			      err.msg);
		ck_assert_uint_lt(part->n, base->n);
		assert_same_plan(part, own);
		assert_same_plan(base, fresh);
		ck_plan_free(copy);
		ck_plan_free(part);
		ck_plan_free(own);
	}
	ck_shard_prep_free(&prep);
	ck_plan_free(base);
	ck_plan_free(fresh);
	ck_mapping_free(m);
}
END_TEST

/* A mesh the mapping cannot shard fails the same way either way. */
START_TEST(sharded_copies_fail_as_rank_plans)
{
	static const char *meshes[] = {"ep=2", "tp=3", "pp=3", "tp=2"};
	static const int64_t ranks[] = {0, 0, 0, 2};
	struct ck_err err, own_err;
	struct ck_mapping *m;
	struct ck_plan *base;
	ck_assert_msg(ck_mapping_parse(MAP, strlen(MAP), "t.json", &m, &err) == 0, "%s", err.msg);
	ck_assert_msg(ck_plan_build(cat, &m, 1, &base, &err) == 0, "%s", err.msg);
	for (size_t i = 0; i < sizeof meshes / sizeof *meshes; i++) {
		struct ck_mesh me;
		struct ck_shard_prep prep;
		struct ck_plan *part;
		ck_assert_ptr_null(rank_plan(meshes[i], ranks[i], &own_err));
		ck_assert_msg(ck_mesh_parse(meshes[i], &me, &err) == 0, "%s", err.msg);
		ck_assert_msg(ck_shard_prepare(base, m, &me, &prep, &err) == 0, "%s", err.msg);
		ck_assert_int_eq(ck_plan_shard_copy(base, &prep, m, &me, ranks[i], &part, &err),
				 -1);
		ck_assert_str_eq(err.msg, own_err.msg);
		ck_assert_int_eq(err.kind, own_err.kind);
		ck_plan_free(part);
		ck_shard_prep_free(&prep);
	}
	ck_plan_free(base);
	ck_mapping_free(m);
}
END_TEST

/* A later select rule sees the name an earlier one renumbered, not the
 * key's: on stage 1, layers.2 becomes layers.0 and meets the ep rule for
 * layers.0 (held on ep rank 0 only), and layers.3, now layers.1, no longer
 * meets the rule for layers.3 (which would drop it from ep rank 0). The
 * same plans whether each rank plans alone or copies from a shared plan. */
static const char *MAP_RENAMED =
    "{\"unused\": \"keep\","
    " \"select\": ["
    "  {\"match\": \"layers.{L}.{rest:path}\", \"axis\": \"pp\", \"split\": \"L\", \"renumber\": "
    "true},"
    "  {\"match\": \"layers.0.{rest:path}\", \"axis\": \"ep\", \"stage\": \"first\"},"
    "  {\"match\": \"layers.3.{rest:path}\", \"axis\": \"ep\", \"stage\": \"last\"},"
    "  {\"match\": \"emb\", \"axis\": \"pp\", \"stage\": \"first\"},"
    "  {\"match\": \"head\", \"axis\": \"pp\", \"stage\": \"last\"}]}";

static void assert_renamed_rank(const struct ck_plan *p, int64_t r)
{
	int64_t pp = r / 2, ep = r % 2; /* row-major: ep varies fastest */
	char want[8][32];
	size_t n = 0;
	for (int64_t l = ep == 0 ? 0 : 1; l < 2; l++) {
		snprintf(want[n++], sizeof *want, "layers.%lld.b", (long long)l);
		snprintf(want[n++], sizeof *want, "layers.%lld.w", (long long)l);
	}
	snprintf(want[n++], sizeof *want, "%s", pp == 0 ? "emb" : "head");
	ck_assert_uint_eq(p->n, n);
	for (size_t i = 0; i < n; i++) {
		const struct ck_target *t = ck_plan_find(p, want[i]);
		ck_assert_msg(t, "rank %lld lacks %s", (long long)r, want[i]);
		if (strncmp(want[i], "layers.", 7) != 0)
			continue;
		char global[32]; /* the key it came from: layer 2 * pp + l */
		snprintf(global, sizeof global, "layers.%d.%c", (int)(2 * pp + (want[i][7] - '0')),
			 want[i][9]);
		ck_assert_ptr_nonnull(t->shard); /* renumbered, if only 0 to 0 */
		ck_assert_ptr_nonnull(t->shard->global_name);
		ck_assert_str_eq(t->shard->global_name, global);
	}
}

START_TEST(renamed_targets_meet_later_rules)
{
	struct ck_err err;
	struct ck_mapping *m;
	struct ck_plan *base;
	struct ck_mesh me;
	struct ck_shard_prep prep;
	ck_assert_msg(ck_mapping_parse(MAP_RENAMED, strlen(MAP_RENAMED), "t.json", &m, &err) == 0,
		      "%s", err.msg);
	ck_assert_msg(ck_mesh_parse("pp=2,ep=2", &me, &err) == 0, "%s", err.msg);
	ck_assert_msg(ck_plan_build(cat, &m, 1, &base, &err) == 0, "%s", err.msg);
	ck_assert_msg(ck_shard_prepare(base, m, &me, &prep, &err) == 0, "%s", err.msg);
	for (int64_t r = 0; r < 4; r++) {
		struct ck_plan *own, *part;
		ck_assert_msg(ck_plan_copy_some(base, NULL, &own, &err) == 0, "%s", err.msg);
		ck_assert_msg(ck_plan_shard(own, m, &me, r, &err) == 0, "%s", err.msg);
		assert_renamed_rank(own, r);
		ck_assert_msg(ck_plan_shard_copy(base, &prep, m, &me, r, &part, &err) == 0, "%s",
			      err.msg);
		assert_renamed_rank(part, r);
		assert_same_plan(part, own);
		ck_plan_free(own);
		ck_plan_free(part);
	}
	ck_shard_prep_free(&prep);
	ck_plan_free(base);
	ck_mapping_free(m);
}
END_TEST

/* Renumbering inside a segment changes a name's key shape ("e.w3" becomes
 * "e.w1"): a later rule that the key's shape misses may match the new
 * name, and does. ep rank c holds e.w{2c}, e.w{2c+1} as e.w0, e.w1; the
 * rule for {a}.w1 then keeps e.w1 on the last pp stage only. */
START_TEST(renumbering_inside_a_segment)
{
	static const char *map =
	    "{\"unused\": \"keep\", \"select\": ["
	    " {\"match\": \"e.w{E:int}\", \"axis\": \"ep\", \"split\": \"E\","
	    "  \"renumber\": true},"
	    " {\"match\": \"{a}.w1\", \"axis\": \"pp\", \"stage\": \"last\"}]}";
	static const struct tu_tensor ts[] = {{"e.w0", CK_DT_F32, 1, {2}},
					      {"e.w1", CK_DT_F32, 1, {2}},
					      {"e.w2", CK_DT_F32, 1, {2}},
					      {"e.w3", CK_DT_F32, 1, {2}}};
	char *d = tu_mkdtemp(), *path = tu_path(d, "model.safetensors");
	tu_write_st(path, ts, 4);
	struct ck_err err;
	struct ck_catalog *c;
	struct ck_mapping *m;
	struct ck_plan *base;
	struct ck_mesh me;
	struct ck_shard_prep prep;
	ck_assert_msg(ck_catalog_open(d, &c, &err) == 0, "%s", err.msg);
	ck_assert_msg(ck_mapping_parse(map, strlen(map), "t.json", &m, &err) == 0, "%s", err.msg);
	ck_assert_msg(ck_mesh_parse("pp=2,ep=2", &me, &err) == 0, "%s", err.msg);
	ck_assert_msg(ck_plan_build(c, &m, 1, &base, &err) == 0, "%s", err.msg);
	ck_assert_msg(ck_shard_prepare(base, m, &me, &prep, &err) == 0, "%s", err.msg);
	for (int64_t r = 0; r < 4; r++) {
		int64_t pp = r / 2, ep = r % 2;
		struct ck_plan *own, *part;
		ck_assert_msg(ck_plan_copy_some(base, NULL, &own, &err) == 0, "%s", err.msg);
		ck_assert_msg(ck_plan_shard(own, m, &me, r, &err) == 0, "%s", err.msg);
		ck_assert_msg(ck_plan_shard_copy(base, &prep, m, &me, r, &part, &err) == 0, "%s",
			      err.msg);
		assert_same_plan(part, own);
		ck_assert_uint_eq(own->n, pp == 1 ? 2 : 1);
		for (int l = 0; l <= pp; l++) {
			char name[8], global[8];
			snprintf(name, sizeof name, "e.w%d", l);
			snprintf(global, sizeof global, "e.w%d", (int)(2 * ep + l));
			const struct ck_target *t = ck_plan_find(own, name);
			ck_assert_msg(t, "rank %lld lacks %s", (long long)r, name);
			ck_assert_str_eq(t->shard->global_name, global);
		}
		ck_plan_free(own);
		ck_plan_free(part);
	}
	ck_shard_prep_free(&prep);
	ck_plan_free(base);
	ck_mapping_free(m);
	ck_catalog_free(c);
	tu_rmtree(d);
	free(d);
	free(path);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("shard");
	TCase *tc = tcase_create("shard");
	tcase_set_timeout(tc, 60);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_loop_test(tc, pp_tp_ranks, 0, 4);
	tcase_add_test(tc, bad_meshes_refused);
	tcase_add_test(tc, sharded_copies_are_rank_plans);
	tcase_add_test(tc, sharded_copies_fail_as_rank_plans);
	tcase_add_test(tc, renamed_targets_meet_later_rules);
	tcase_add_test(tc, renumbering_inside_a_segment);
	suite_add_tcase(s, tc);
	return tu_run_suite(s, 1);
}
