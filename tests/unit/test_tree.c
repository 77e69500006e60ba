/* The tree of served files without FUSE (view/tree.c): every file is laid
 * out from shapes alone, so here each target's bytes are a pattern written
 * into the spans, and the files are checked against the safetensors format
 * as its description has it (parsed with cJSON, not the project's parser):
 * model.safetensors, the shards and their index, vLLM's per-rank parts,
 * plan.json's offsets, escaped names and npy/ headers. */
#include <check.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/catalog.h"
#include "plan/plan.h"
#include "view/tree.h"
#include "testutil.h"

static char *dir;
static struct ck_catalog *cat;
static struct ck_plan *plan;

static void setup(void)
{
	dir = tu_mkdtemp();
	static const struct tu_tensor t[] = {
		{"a.weight", CK_DT_F32, 2, {100, 30}}, {"b/c", CK_DT_BF16, 1, {50}},
		{"big", CK_DT_F32, 2, {300, 100}},     {"e", CK_DT_F16, 2, {3, 3}},
		{"z.bias", CK_DT_I64, 1, {7}},	       {"scalar", CK_DT_F32, 0, {0}},
	};
	char *p = tu_path(dir, "model.safetensors");
	tu_write_st(p, t, sizeof t / sizeof *t);
	free(p);
	struct ck_err err;
	ck_assert_msg(ck_catalog_open(dir, &cat, &err) == 0, "%s", err.msg);
	ck_assert_msg(ck_plan_build(cat, NULL, 0, &plan, &err) == 0, "%s", err.msg);
}

static void teardown(void)
{
	ck_plan_free(plan);
	ck_catalog_free(cat);
	tu_rmtree(dir);
	free(dir);
}

/* The bytes we pretend target t holds. */
static unsigned char pattern(uint32_t t, uint64_t j)
{
	return (unsigned char)(t * 131u + j * 7u + (j >> 8));
}

/* A virtual file's bytes: literals as laid out, target spans the pattern. */
static unsigned char *materialize(const struct ck_vfile *v)
{
	unsigned char *b = malloc(v->size ? v->size : 1);
	size_t n = ck_vfile_spans(v, 0, v->size, NULL, 0);
	struct ck_span *sp = malloc((n ? n : 1) * sizeof *sp);
	ck_vfile_spans(v, 0, v->size, sp, n);
	for (size_t k = 0; k < n; k++)
		for (uint64_t j = 0; j < sp[k].len; j++)
			b[sp[k].dst + j] = sp[k].lit ? sp[k].lit[sp[k].off + j]
						     : pattern(sp[k].target, sp[k].off + j);
	free(sp);
	return b;
}

static const char *dtype_name(enum ck_dtype d)
{
	switch (d) { /* the safetensors names, from the format's description */
	case CK_DT_F32: return "F32";
	case CK_DT_BF16: return "BF16";
	case CK_DT_F16: return "F16";
	case CK_DT_I64: return "I64";
	default: return "?";
	}
}

/* Check one safetensors file against the plan: its header (8-byte length,
 * JSON, data offsets packed in order from 0), each tensor's dtype, shape
 * and bytes. Adds each tensor's name to seen (a cJSON object name ->
 * file offset) and returns how many it holds. */
static int check_st(const struct ck_vfile *v, cJSON *seen)
{
	unsigned char *f = materialize(v);
	uint64_t hl = 0;
	for (int b = 7; b >= 0; b--)
		hl = hl << 8 | f[b];
	ck_assert_uint_le(8 + hl, v->size);
	ck_assert_uint_eq((8 + hl) % 8, 0); /* data aligned for every dtype */
	cJSON *root = cJSON_ParseWithLength((char *)f + 8, hl);
	ck_assert_ptr_nonnull(root);
	uint64_t next = 0;
	int n = 0;
	for (cJSON *e = root->child; e; e = e->next) {
		if (!strcmp(e->string, "__metadata__"))
			continue;
		const struct ck_target *t = ck_plan_find(plan, e->string);
		ck_assert_msg(t, "%s: not a target", e->string);
		uint32_t ti = (uint32_t)(t - plan->t);
		ck_assert_str_eq(cJSON_GetObjectItem(e, "dtype")->valuestring, dtype_name(t->v.dtype));
		cJSON *shape = cJSON_GetObjectItem(e, "shape");
		ck_assert_int_eq(cJSON_GetArraySize(shape), t->v.ndim);
		for (int d = 0; d < t->v.ndim; d++)
			ck_assert_int_eq((int64_t)cJSON_GetArrayItem(shape, d)->valuedouble,
					 t->v.shape[d]);
		cJSON *off = cJSON_GetObjectItem(e, "data_offsets");
		uint64_t b = (uint64_t)cJSON_GetArrayItem(off, 0)->valuedouble;
		uint64_t en = (uint64_t)cJSON_GetArrayItem(off, 1)->valuedouble;
		ck_assert_uint_eq(b, next);
		ck_assert_uint_eq(en - b, t->nbytes);
		next = en;
		for (uint64_t j = 0; j < t->nbytes; j++)
			if (f[8 + hl + b + j] != pattern(ti, j))
				ck_abort_msg("%s byte %llu", e->string, (unsigned long long)j);
		ck_assert_ptr_null(cJSON_GetObjectItem(seen, e->string)); /* in one file only */
		cJSON_AddNumberToObject(seen, e->string, (double)(8 + hl + b));
		n++;
	}
	ck_assert_uint_eq(8 + hl + next, v->size);
	cJSON_Delete(root);
	free(f);
	return n;
}

static const struct ck_vfile *root_file(const struct ck_tree *t, const char *name)
{
	for (size_t k = 0; k < t->n_roots; k++)
		if (!strcmp(t->roots[k].name, name))
			return t->roots[k].v;
	return NULL;
}

static void build(struct ck_tree *t, int64_t rank, uint64_t max_shard, uint64_t part)
{
	memset(t, 0, sizeof *t);
	t->plan = plan;
	t->rank = rank;
	struct ck_tree_opts o = {.source = dir, .max_shard_size = max_shard, .part_size = part};
	struct ck_err err;
	ck_assert_msg(ck_tree_build(t, &o, &err) == 0, "%s", err.msg);
}

/* model.safetensors holds every target; plan.json's flat offsets are where
 * the file has them. */
START_TEST(flat_file_and_plan_json)
{
	struct ck_tree t;
	build(&t, -1, 0, 0);
	cJSON *seen = cJSON_CreateObject();
	ck_assert_int_eq(check_st(root_file(&t, "model.safetensors"), seen), (int)plan->n);
	ck_assert_ptr_nonnull(root_file(&t, "pytorch_model.bin"));
	ck_assert_ptr_null(root_file(&t, "model.safetensors.index.json")); /* not asked for */
	ck_assert_ptr_null(t.plan_json); /* built on first use, not with the tree */
	const char *json = NULL;
	size_t len = 0;
	ck_assert_int_eq(ck_tree_plan_json(&t, &json, &len), 0);
	const char *again = NULL;
	ck_assert_int_eq(ck_tree_plan_json(&t, &again, &len), 0);
	ck_assert_ptr_eq(again, json); /* once */
	cJSON *pj = cJSON_ParseWithLength(json, len);
	ck_assert_ptr_nonnull(pj);
	cJSON *targets = cJSON_GetObjectItem(pj, "targets");
	ck_assert_int_eq(cJSON_GetArraySize(targets), (int)plan->n);
	for (cJSON *e = targets->child; e; e = e->next) {
		const char *name = cJSON_GetObjectItem(e, "name")->valuestring;
		ck_assert_double_eq(cJSON_GetObjectItem(e, "flat_offset")->valuedouble,
				    cJSON_GetObjectItem(seen, name)->valuedouble);
		ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(e, "direct"))); /* identity view */
	}
	cJSON_Delete(pj);
	cJSON_Delete(seen);
	ck_tree_free(&t);
}
END_TEST

/* Shards of at most 50 KiB of data (a bigger tensor alone) and an index
 * whose weight_map names the shard that holds each tensor. */
START_TEST(shards_and_their_index)
{
	struct ck_tree t;
	build(&t, -1, 50 << 10, 0);
	const struct ck_vfile *iv = root_file(&t, "model.safetensors.index.json");
	ck_assert_ptr_nonnull(iv);
	unsigned char *ib = materialize(iv);
	cJSON *index = cJSON_ParseWithLength((char *)ib, iv->size);
	ck_assert_ptr_nonnull(index);
	uint64_t total = 0;
	for (size_t i = 0; i < plan->n; i++)
		total += plan->t[i].nbytes;
	ck_assert_double_eq(
		cJSON_GetObjectItem(cJSON_GetObjectItem(index, "metadata"), "total_size")->valuedouble,
		(double)total);
	cJSON *wm = cJSON_GetObjectItem(index, "weight_map");
	ck_assert_int_eq(cJSON_GetArraySize(wm), (int)plan->n);
	size_t n_shards = 0;
	for (size_t k = 0; k < t.n_roots; k++)
		n_shards += !strncmp(t.roots[k].name, "model-", 6);
	ck_assert_uint_ge(n_shards, 3); /* 120 KB of "big" alone, the rest in 50 KiB runs */
	cJSON *seen = cJSON_CreateObject();
	int held = 0;
	for (size_t s = 1; s <= n_shards; s++) {
		char name[64];
		snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", s, n_shards);
		const struct ck_vfile *v = root_file(&t, name);
		ck_assert_msg(v, "no %s", name);
		cJSON *mine = cJSON_CreateObject();
		int n = check_st(v, mine);
		held += n;
		uint64_t bytes = 0;
		for (cJSON *e = mine->child; e; e = e->next) {
			ck_assert_str_eq(cJSON_GetObjectItem(wm, e->string)->valuestring, name);
			bytes += ck_plan_find(plan, e->string)->nbytes;
			cJSON_AddNumberToObject(seen, e->string, 0);
		}
		ck_assert(n == 1 || bytes <= 50 << 10);
		cJSON_Delete(mine);
	}
	ck_assert_int_eq(held, (int)plan->n);
	cJSON_Delete(seen);
	cJSON_Delete(index);
	free(ib);
	ck_tree_free(&t);
}
END_TEST

/* A per-rank tree adds vLLM's model-rank-R-part-P.safetensors. */
START_TEST(per_rank_parts)
{
	struct ck_tree t;
	build(&t, 3, 0, 40 << 10);
	ck_assert_uint_ge(t.n_parts, 3);
	cJSON *seen = cJSON_CreateObject();
	int held = 0;
	for (size_t k = 0; k < t.n_parts; k++) {
		char name[64];
		snprintf(name, sizeof name, "model-rank-3-part-%zu.safetensors", k);
		const struct ck_vfile *v = root_file(&t, name);
		ck_assert_msg(v, "no %s", name);
		held += check_st(v, seen);
	}
	ck_assert_int_eq(held, (int)plan->n);
	cJSON_Delete(seen);
	ck_tree_free(&t);
}
END_TEST

/* File names: "/" escaped, each found by name; npy/ headers as NumPy 1.0
 * describes them (descr from the dtype, the shape as a tuple). */
START_TEST(names_and_npy_headers)
{
	struct ck_tree t;
	build(&t, -1, 0, 0);
	static const struct {
		const char *key, *descr, *shape;
	} want[] = {{"a.weight", "<f4", "(100, 30)"}, {"b/c", "<V2", "(50,)"},
		    {"e", "<f2", "(3, 3)"},	       {"z.bias", "<i8", "(7,)"},
		    {"scalar", "<f4", "()"}};
	for (size_t k = 0; k < sizeof want / sizeof *want; k++) {
		uint32_t i = (uint32_t)(ck_plan_find(plan, want[k].key) - plan->t), got;
		ck_assert_ptr_null(strchr(t.names[i], '/'));
		ck_assert_int_eq(ck_strmap_get(&t.by_name, t.names[i], &got), 0);
		ck_assert_uint_eq(got, i);
		ck_assert_int_eq(ck_strmap_get(&t.npy_by_name, t.npy_names[i], &got), 0);
		ck_assert_uint_eq(got, i);
		struct ck_vfile v;
		ck_assert_int_eq(ck_tree_npy(&t, i, &v), 0);
		unsigned char *f = materialize(&v);
		ck_assert(!memcmp(f, "\x93NUMPY\x01\x00", 8));
		size_t hl = (size_t)f[8] | (size_t)f[9] << 8;
		ck_assert_uint_eq((10 + hl) % 64, 0);
		ck_assert_uint_eq(v.size, 10 + hl + plan->t[i].nbytes);
		char head[256];
		snprintf(head, sizeof head, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }",
			 want[k].descr, want[k].shape);
		ck_assert_msg(!strncmp((char *)f + 10, head, strlen(head)), "%s: %.*s", want[k].key,
			      (int)hl, (char *)f + 10);
		for (uint64_t j = 0; j < plan->t[i].nbytes; j++)
			ck_assert_uint_eq(f[10 + hl + j], pattern(i, j));
		free(f);
		ck_vfile_free(&v);
	}
	ck_tree_free(&t);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("tree");
	TCase *tc = tcase_create("tree");
	tcase_set_timeout(tc, 60);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, flat_file_and_plan_json);
	tcase_add_test(tc, shards_and_their_index);
	tcase_add_test(tc, per_rank_parts);
	tcase_add_test(tc, names_and_npy_headers);
	suite_add_tcase(s, tc);
	return tu_run_suite(s, 1);
}
