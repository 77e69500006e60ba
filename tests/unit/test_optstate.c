/* Optimizer state follows its parameters (issue #20): keys recognised in
 * both conventions, each state tensor laid out exactly as its parameter
 * (piece by piece, the state's own tensor in place of the parameter's),
 * scalars renamed with their parameter, and every inconsistency refused
 * with a message naming the keys. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/catalog.h"
#include "map/mapping.h"
#include "plan/optstate.h"
#include "plan/plan.h"
#include "testutil.h"

static char *dir;

/* A source of q, k, v (+ a norm) with Adam state in the flattened form. */
static struct ck_catalog *open_source(const struct tu_tensor *t, size_t n)
{
	dir = tu_mkdtemp();
	char *p = tu_path(dir, "model.safetensors");
	tu_write_st(p, t, n);
	free(p);
	struct ck_catalog *cat;
	struct ck_err err;
	ck_assert_msg(ck_catalog_open(dir, &cat, &err) == 0, "%s", err.msg);
	return cat;
}

static void close_source(struct ck_catalog *cat)
{
	ck_catalog_free(cat);
	tu_rmtree(dir);
	free(dir);
}

static const char *fuse_qkv =
	"{\"ckptfs_mapping\": 1, %s \"rules\": ["
	"{\"from\": {\"q\": \"m.{L}.q\", \"k\": \"m.{L}.k\", \"v\": \"m.{L}.v\"},"
	" \"to\": \"d.{L}.qkv\", \"expr\": \"cat([q.view(2, -1, 4), k.view(2, -1, 4),"
	" v.view(2, -1, 4)], 1).view(-1, 4)\"},"
	"{\"from\": \"m.{L}.norm\", \"to\": \"d.{L}.ln\"}]}";

static struct ck_plan *plan_with(struct ck_catalog *cat, const char *setting, struct ck_err *err)
{
	char text[2048];
	snprintf(text, sizeof text, fuse_qkv, setting);
	struct ck_mapping *m;
	ck_assert_msg(ck_mapping_parse(text, strlen(text), "m.json", &m, err) == 0, "%s", err->msg);
	struct ck_plan *p = NULL;
	ck_plan_build(cat, &m, 1, &p, err);
	ck_mapping_free(m);
	return p;
}

static const struct tu_tensor adam[] = {
	{"m.0.q", CK_DT_BF16, 2, {8, 4}},
	{"m.0.k", CK_DT_BF16, 2, {4, 4}},
	{"m.0.v", CK_DT_BF16, 2, {4, 4}},
	{"m.0.norm", CK_DT_BF16, 1, {4}},
	{"state.m.0.q.exp_avg", CK_DT_F32, 2, {8, 4}},
	{"state.m.0.k.exp_avg", CK_DT_F32, 2, {4, 4}},
	{"state.m.0.v.exp_avg", CK_DT_F32, 2, {4, 4}},
	{"state.m.0.norm.exp_avg", CK_DT_F32, 1, {4}},
	{"state.m.0.q.step", CK_DT_F32, 0, {0}},
	{"state.m.0.k.step", CK_DT_F32, 0, {0}},
	{"state.m.0.v.step", CK_DT_F32, 0, {0}},
	{"state.m.0.norm.step", CK_DT_F32, 0, {0}},
};

START_TEST(classify)
{
	static const struct {
		const char *key, *param, *state;
		enum ck_opt_form form;
	} cases[] = {
		{"state.model.layers.0.q_proj.weight.exp_avg", "model.layers.0.q_proj.weight",
		 "exp_avg", CK_OPTF_FLAT},
		{"optimizer.state.model.norm.weight.step", "model.norm.weight", "step",
		 CK_OPTF_NESTED},
		{"optimizer.state.exp_avg_sq.decoder.layers.self_attention.linear_qkv.weight",
		 "decoder.layers.self_attention.linear_qkv.weight", "exp_avg_sq", CK_OPTF_MEGATRON},
		{"optimizer.state.fp32_param.embedding.word_embeddings.weight",
		 "embedding.word_embeddings.weight", "fp32_param", CK_OPTF_MEGATRON},
		{"model.layers.0.state.weight", NULL, NULL, CK_OPTF_NONE},
		{"state.x", NULL, NULL, CK_OPTF_NONE}, /* no parameter name */
		{"state..exp_avg", NULL, NULL, CK_OPTF_NONE},
		{"optimizer.state.exp_avg.", "", NULL, CK_OPTF_NONE},
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		struct ck_opt_key k;
		struct ck_err err;
		int r = ck_opt_classify(cases[i].key, &k, &err);
		ck_assert_msg(r == (cases[i].state != NULL), "%s: %d", cases[i].key, r);
		if (r != 1)
			continue;
		ck_assert_int_eq(k.form, cases[i].form);
		ck_assert_int_eq(k.param_len, strlen(cases[i].param));
		ck_assert(!strncmp(k.param, cases[i].param, k.param_len));
		ck_assert_int_eq(k.state_len, strlen(cases[i].state));
		ck_assert(!strncmp(k.state, cases[i].state, k.state_len));
	}
	struct ck_opt_key k;
	struct ck_err err;
	ck_assert_int_eq(ck_opt_classify("optimizer.distributed.dp_group_idx_0.gbuf_idx_0."
					 "dtype_(torch.bfloat16, torch.bfloat16).bucket_idx_0."
					 "exp_avg",
					 &k, &err),
			 -1);
	ck_assert_ptr_nonnull(strstr(err.msg, "fully_sharded_model_space"));
	/* per_bucket_numel anywhere in a key, after other 'p's and '_'s too */
	static const char *const buckets[] = {"per_bucket_numel", "optimizer.per_bucket_numel",
					      "x.pper_bucket_numel_unpadded", "sparse.pp.per_bucket_numel",
					      "a_b_per_bucket_numel", "_per_bucket_numel", "p_r.per_bucket_numel"};
	for (size_t i = 0; i < sizeof buckets / sizeof *buckets; i++)
		ck_assert_msg(ck_opt_classify(buckets[i], &k, &err) == -1, "%s", buckets[i]);
	ck_assert_int_eq(ck_opt_classify("model.per_bucket_nume", &k, &err), 0);
	ck_assert_int_eq(ck_opt_classify("er_bucket_numel", &k, &err), 0);
	ck_assert_int_eq(ck_opt_classify("optimizer.distributed", &k, &err), 0); /* no "." after it */
	char *n = ck_opt_name("optimizer.state.{state}.{param}", "d.0.qkv", "exp_avg");
	ck_assert_str_eq(n, "optimizer.state.exp_avg.d.0.qkv");
	free(n);
}
END_TEST

/* The state target of each parameter target has the parameter's pieces with
 * the state's tensor in place of the parameter's: the layout is the same. */
START_TEST(follows_layout)
{
	struct ck_catalog *cat = open_source(adam, sizeof adam / sizeof *adam);
	struct ck_err err;
	struct ck_plan *p = plan_with(cat, "\"optimizer_state\": \"opt.{state}.{param}\",", &err);
	ck_assert_msg(p != NULL, "%s", err.msg);
	ck_assert_str_eq(p->opt_template, "opt.{state}.{param}");
	ck_assert_int_eq(p->n, 2 + 2 * 2); /* qkv, ln; exp_avg and step of each */
	static const char *const params[] = {"d.0.qkv", "d.0.ln"};
	for (int i = 0; i < 2; i++) {
		const struct ck_target *w = ck_plan_find(p, params[i]);
		char name[64];
		snprintf(name, sizeof name, "opt.exp_avg.%s", params[i]);
		const struct ck_target *s = ck_plan_find(p, name);
		ck_assert_ptr_nonnull(w);
		ck_assert_msg(s != NULL, "no %s", name);
		ck_assert_ptr_null(w->param);
		ck_assert_str_eq(s->param, params[i]);
		ck_assert_str_eq(s->state, "exp_avg");
		ck_assert_int_eq(s->v.dtype, CK_DT_F32); /* the state's own dtype */
		ck_assert_int_eq(s->v.ndim, w->v.ndim);
		ck_assert_mem_eq(s->v.shape, w->v.shape, (size_t)w->v.ndim * sizeof *w->v.shape);
		ck_assert_uint_eq(s->v.n, w->v.n);
		for (size_t k = 0; k < w->v.n; k++) {
			const struct ck_piece *a = &w->v.p[k], *b = &s->v.p[k];
			char want[128];
			snprintf(want, sizeof want, "state.%s.exp_avg", cat->entries[a->src].t.name);
			ck_assert_str_eq(cat->entries[b->src].t.name, want);
			ck_assert_mem_eq(a->lo, b->lo, (size_t)w->v.ndim * sizeof *a->lo);
			ck_assert_mem_eq(a->hi, b->hi, (size_t)w->v.ndim * sizeof *a->hi);
			ck_assert_mem_eq(a->stride, b->stride, (size_t)w->v.ndim * sizeof *a->stride);
			ck_assert_int_eq(a->base, b->base);
		}
		/* the step: a scalar from the first source, never split */
		snprintf(name, sizeof name, "opt.step.%s", params[i]);
		s = ck_plan_find(p, name);
		ck_assert_msg(s != NULL, "no %s", name);
		ck_assert_int_eq(s->scalar, 1);
		ck_assert_int_eq(s->v.ndim, 0);
		ck_assert_str_eq(cat->entries[s->v.p[0].src].t.name,
				 i == 0 ? "state.m.0.q.step" : "state.m.0.norm.step");
	}
	ck_assert_int_eq(ck_plan_keep_state(p, 1, &err), 0);
	ck_assert_int_eq(p->n, 2);
	ck_plan_free(p);
	/* the default names follow the source's convention */
	p = plan_with(cat, "", &err);
	ck_assert_msg(p != NULL, "%s", err.msg);
	ck_assert_ptr_nonnull(ck_plan_find(p, "state.d.0.qkv.exp_avg"));
	ck_assert_int_eq(ck_plan_keep_state(p, 2, &err), 0);
	ck_assert_int_eq(p->n, 4);
	ck_plan_free(p);
	/* "drop": parameters only; "none": state keys are parameters (unused here) */
	p = plan_with(cat, "\"optimizer_state\": \"drop\",", &err);
	ck_assert_msg(p != NULL, "%s", err.msg);
	ck_assert_int_eq(p->n, 2);
	ck_assert_ptr_null(p->opt_template);
	ck_plan_free(p);
	p = plan_with(cat, "\"optimizer_state\": \"none\",", &err);
	ck_assert_ptr_null(p);
	ck_assert_msg(strstr(err.msg, "used by no rule"), "%s", err.msg);
	close_source(cat);
}
END_TEST

static void expect_plan_fail(const struct tu_tensor *t, size_t n, const char *want1,
			     const char *want2)
{
	struct ck_catalog *cat = open_source(t, n);
	struct ck_err err;
	struct ck_plan *p = plan_with(cat, "", &err);
	ck_assert_msg(p == NULL, "accepted");
	ck_assert_int_eq(err.kind, CK_E_MAPPING);
	ck_assert_msg(strstr(err.msg, want1) && strstr(err.msg, want2), "message: %s", err.msg);
	ck_assert_ptr_null(strchr(err.msg, '\n'));
	close_source(cat);
}

START_TEST(refusals)
{
	/* k has no exp_avg: the fused target's sources disagree */
	struct tu_tensor t[16];
	size_t n = 0;
	for (size_t i = 0; i < sizeof adam / sizeof *adam; i++)
		if (strcmp(adam[i].name, "state.m.0.k.exp_avg"))
			t[n++] = adam[i];
	expect_plan_fail(t, n, "\"d.0.qkv\"", "\"m.0.k\" (step)");
	/* a state whose parameter is not in the source */
	memcpy(t, adam, sizeof adam);
	t[7].name = "state.m.0.gone.exp_avg";
	expect_plan_fail(t, sizeof adam / sizeof *adam, "state.m.0.gone.exp_avg",
			 "parameter \"m.0.gone\", which is not in the source");
	/* a state of another shape that is not a scalar (Adafactor's factors) */
	memcpy(t, adam, sizeof adam);
	t[4] = (struct tu_tensor){"state.m.0.q.exp_avg", CK_DT_F32, 1, {8}};
	expect_plan_fail(t, sizeof adam / sizeof *adam, "has shape [8]", "has [8, 4]");
	/* Megatron's distributed-optimizer buckets */
	memcpy(t, adam, sizeof adam);
	t[8].name = "optimizer.distributed.dp_group_idx_0.gbuf_idx_0.bucket_idx_0.exp_avg";
	expect_plan_fail(t, sizeof adam / sizeof *adam, "distributed-optimizer",
			 "optimizer.distributed.dp_group_idx_0");
	/* more state names than any optimizer has: refused, not planned 65 times */
	struct ck_err err;
	static char names[65][32];
	struct tu_tensor many[66] = {{"m.0.norm", CK_DT_F32, 1, {4}}};
	for (int i = 0; i < 65; i++) {
		snprintf(names[i], sizeof names[i], "state.m.0.norm.s%d", i);
		many[i + 1] = (struct tu_tensor){names[i], CK_DT_F32, 1, {4}};
	}
	dir = tu_mkdtemp(); /* a file holds at most 64 tensors here: two files */
	char *f1 = tu_path(dir, "a.safetensors"), *f2 = tu_path(dir, "b.safetensors");
	tu_write_st(f1, many, 33);
	tu_write_st(f2, many + 33, 33);
	free(f1);
	free(f2);
	struct ck_catalog *cat;
	ck_assert_msg(ck_catalog_open(dir, &cat, &err) == 0, "%s", err.msg);
	const char *norm_only = "{\"ckptfs_mapping\": 1, \"rules\": [{\"from\": \"m.{L}.norm\", "
				"\"to\": \"d.{L}.ln\"}]}";
	struct ck_mapping *nm;
	ck_assert_int_eq(ck_mapping_parse(norm_only, strlen(norm_only), "m.json", &nm, &err), 0);
	struct ck_plan *p = NULL;
	ck_assert_int_eq(ck_plan_build(cat, &nm, 1, &p, &err), -1);
	ck_assert_msg(strstr(err.msg, "more than 64 names of optimizer state"), "%s", err.msg);
	ck_mapping_free(nm);
	close_source(cat);
	/* a bad template is a mapping error */
	struct ck_mapping *m;
	const char *bad[] = {"{\"ckptfs_mapping\": 1, \"optimizer_state\": \"x.{param}\"}",
			     "{\"ckptfs_mapping\": 1, \"optimizer_state\": \"{state}{state}.{param}\"}",
			     "{\"ckptfs_mapping\": 1, \"optimizer_state\": \"{state}.{param}.{L}\"}",
			     "{\"ckptfs_mapping\": 1, \"optimizer_state\": 3}"};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		ck_assert_int_eq(ck_mapping_parse(bad[i], strlen(bad[i]), "m.json", &m, &err), -1);
		ck_assert_msg(strstr(err.msg, "m.json: \"optimizer_state\" must be"), "%s", err.msg);
	}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("optstate");
	TCase *tc = tcase_create("optstate");
	tcase_add_test(tc, classify);
	tcase_add_test(tc, follows_layout);
	tcase_add_test(tc, refusals);
	suite_add_tcase(s, tc);
	return tu_run_suite(s, 1);
}
