/* The mapping language and the planner: parsing errors, plan validation
 * errors (each naming the mapping, rule and key), and planned shapes. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/catalog.h"
#include "map/keyshape.h"
#include "map/mapping.h"
#include "plan/plan.h"
#include "plan/plan_int.h"
#include "testutil.h"

static char *dir;
static struct ck_catalog *cat;

/* A small model: 2 layers with q,k,v and 3 experts, plus config.json. */
static void setup(void)
{
	dir = tu_mkdtemp();
	static const struct tu_tensor t[] = {
		{"layers.0.q", CK_DT_F32, 2, {8, 4}},	  {"layers.0.k", CK_DT_F32, 2, {4, 4}},
		{"layers.0.v", CK_DT_F32, 2, {4, 4}},	  {"layers.1.q", CK_DT_F32, 2, {8, 4}},
		{"layers.1.k", CK_DT_F32, 2, {4, 4}},	  {"layers.1.v", CK_DT_F32, 2, {4, 4}},
		{"layers.0.experts.0.w", CK_DT_BF16, 2, {3, 4}},
		{"layers.0.experts.1.w", CK_DT_BF16, 2, {3, 4}},
		{"layers.0.experts.2.w", CK_DT_BF16, 2, {3, 4}},
		{"embed", CK_DT_F32, 2, {10, 4}},	  {"norm", CK_DT_F16, 1, {4}},
	};
	char *p = tu_path(dir, "model.safetensors");
	tu_write_st(p, t, sizeof t / sizeof *t);
	free(p);
	p = tu_path(dir, "config.json");
	tu_write_str(p, "{\"hidden_size\": 4, \"num_attention_heads\": 4, \"num_key_value_heads\": 2,"
			" \"tie\": true, \"text_config\": {\"head_dim\": 2}}");
	free(p);
	struct ck_err err;
	ck_assert_msg(ck_catalog_open(dir, &cat, &err) == 0, "%s", err.msg);
}

static void teardown(void)
{
	ck_catalog_free(cat);
	tu_rmtree(dir);
	free(dir);
}

/* Build a plan from mapping texts; returns the plan or NULL with err. */
static struct ck_plan *plan_of(const char *const *texts, int n, struct ck_err *err)
{
	struct ck_mapping *maps[4];
	int k = 0;
	struct ck_plan *p = NULL;
	for (; k < n; k++)
		if (ck_mapping_parse(texts[k], strlen(texts[k]), "m.json", &maps[k], err) < 0)
			goto out;
	ck_plan_build(cat, maps, n, &p, err);
out:
	for (int i = 0; i < k; i++)
		ck_mapping_free(maps[i]);
	return p;
}

static void expect_fail_as(const char *text, const char *want, enum ck_errkind kind)
{
	struct ck_err err;
	struct ck_plan *p = plan_of(&text, 1, &err);
	ck_assert_msg(p == NULL, "mapping accepted: %s", text);
	ck_assert_int_eq(err.kind, kind);
	ck_assert_msg(strstr(err.msg, want), "message \"%s\" lacks \"%s\"", err.msg, want);
	ck_assert_msg(strncmp(err.msg, "m.json", 6) == 0, "not named: %s", err.msg);
	ck_assert_ptr_null(strchr(err.msg, '\n'));
}

static void expect_fail(const char *text, const char *want)
{
	expect_fail_as(text, want, CK_E_MAPPING);
}

#define KEEP "\"unused\": \"keep\", "

START_TEST(parse_errors)
{
	expect_fail("{\"rules\": [{\"from\": \"a\"}]}", "rule 1: a rule needs");
	expect_fail("{\"rulez\": []}", "unknown field \"rulez\"");
	expect_fail("{\"rules\": [{\"from\": \"a\", \"to\": \"b\", \"bogus\": 1}]}",
		    "rule 1: unknown field \"bogus\"");
	expect_fail("{\"rules\": [{\"from\": \"a.{L\", \"to\": \"b\"}]}", "unterminated '{'");
	expect_fail("{\"rules\": [{\"from\": \"a.{L:float}\", \"to\": \"b\"}]}",
		    "unknown capture type");
	expect_fail("{\"rules\": [{\"from\": \"a\", \"to\": \"b.{L}\"}]}",
		    "output pattern uses {L}, which no input or let binds");
	expect_fail("{\"rules\": [{\"from\": \"a\", \"to\": \"b\", \"expr\": \"x.view(2,\"}]}",
		    "rule 1: \"expr\": expression");
	expect_fail("{\"rules\": [{\"from\": {\"a\": \"x\", \"b\": \"y\"}, \"to\": \"b\"}]}",
		    "several inputs need an \"expr\"");
	expect_fail("{\"unused\": \"maybe\"}", "\"unused\" must be");
	expect_fail("{\"ckptfs_mapping\": 2}", "\"ckptfs_mapping\" must be 1");
	expect_fail("[1]", "a mapping is a JSON object");
	/* found by fuzzing: a repeated field must not be parsed twice */
	expect_fail("{\"params\": {\"a\": 1}, \"params\": {\"b\": 2, \"c\": 3}}",
		    "field \"params\" given twice");
	expect_fail("{\"rules\": [{\"from\": \"a\", \"to\": \"b\", \"reduce\": \"Q\"}]}",
		    "\"reduce\" names {Q}");
	/* deep nesting and huge numbers are refused, not crashed on */
	char deep[600] = "{\"rules\": [{\"from\": \"embed\", \"to\": \"e\", \"expr\": \"";
	for (int i = 0; i < 100; i++)
		strcat(deep, "(");
	strcat(deep, "\"}]}");
	expect_fail(deep, "nested too deeply");
	expect_fail("{\"params\": {\"a\": \"99999999999999999999\"}}", "integer too large");
	/* select rules */
	expect_fail("{\"select\": {}}", "\"select\" must be a list");
	expect_fail("{\"select\": [{\"match\": \"a.{L}\"}]}",
		    "select rule 1: needs \"match\" (a pattern) and \"axis\"");
	expect_fail("{\"select\": [{\"match\": \"a.{L}\", \"axis\": \"pp\"}]}",
		    "needs exactly one of \"split\"");
	expect_fail("{\"select\": [{\"match\": \"a.{L}\", \"axis\": \"pp\", \"split\": \"E\"}]}",
		    "\"split\" must name a capture");
	expect_fail("{\"select\": [{\"match\": \"a\", \"axis\": \"pp\", \"stage\": \"middle\"}]}",
		    "\"stage\" must be \"first\" or \"last\"");
	expect_fail("{\"select\": [{\"match\": \"a\", \"axis\": \"pp\", \"stage\": \"first\", "
		    "\"renumber\": true}]}",
		    "go with \"split\"");
	expect_fail("{\"select\": [{\"match\": \"a.{L}\", \"axis\": \"pp\", \"split\": \"L\", "
		    "\"boundaries\": [0, 3, 2]}]}",
		    "non-decreasing");
	expect_fail("{\"select\": [{\"match\": \"a.{L}\", \"axis\": \"pp\", \"split\": \"L\", "
		    "\"boundaries\": [1, 3]}]}",
		    "must start at 0");
	expect_fail("{\"select\": [{\"match\": \"a.{L}\", \"axis\": \"pp\", \"split\": \"L\", "
		    "\"bogus\": 1}]}",
		    "select rule 1: unknown or repeated field \"bogus\"");
}
END_TEST

START_TEST(plan_errors)
{
	expect_fail("{\"rules\": [{\"from\": \"nothing.{x}\", \"to\": \"y.{x}\"}]}",
		    "rule 1 (\"nothing.{x}\" -> \"y.{x}\"): matches no");
	expect_fail("{" KEEP "\"rules\": [{\"from\": {\"q\": \"layers.{L}.q\", \"z\": \"layers.{L}.z\"},"
		    " \"to\": \"o.{L}\", \"expr\": \"q\"}]}",
		    "key \"layers.0.z\": missing source key");
	expect_fail("{" KEEP "\"rules\": [{\"from\": \"embed\", \"to\": \"out\"},"
		    " {\"from\": \"norm\", \"to\": \"out\"}]}",
		    "rule 2 (\"norm\" -> \"out\"): key \"out\": target produced twice (also by rule 1)");
	expect_fail("{" KEEP "\"rules\": [{\"from\": \"embed\", \"to\": \"a\"},"
		    " {\"from\": {\"n\": \"norm\", \"e\": \"embed\"}, \"to\": \"b\", \"expr\": \"n\"}]}",
		    "rule 2 (\"norm\" -> \"b\"): key \"embed\": already consumed by rule 1");
	expect_fail("{" KEEP "\"rules\": [{\"from\": {\"q\": \"layers.{L}.q\", \"k\": \"layers.{L}.k\"},"
		    " \"to\": \"o.{L}\", \"expr\": \"cat([q, k], 1)\"}]}",
		    "size 4 in dim 0, input 0 has 8");
	expect_fail("{" KEEP "\"rules\": [{\"from\": \"layers.{L}.q\", \"to\": \"o.{L}\","
		    " \"expr\": \"x.view(3, -1)\"}]}",
		    "do not divide");
	expect_fail("{" KEEP "\"rules\": [{\"from\": \"embed\", \"to\": \"e\", \"expr\": \"x.to(I32)\"}]}",
		    "casts are defined among");
	expect_fail("{\"rules\": [{\"from\": \"embed\", \"to\": \"e\"}]}",
		    "10 source keys are used by no rule, first \"layers.0.experts.0.w\"");
	/* a cycle: rule 1 consumes what rule 2 produces */
	expect_fail("{" KEEP "\"rules\": [{\"from\": \"~t\", \"to\": \"a\"},"
		    " {\"from\": \"embed\", \"to\": \"~t\"}]}",
		    "rule 1 (\"~t\" -> \"a\"): matches no");
	expect_fail("{" KEEP "\"rules\": [{\"from\": \"embed\", \"to\": \"~t\"}]}",
		    "intermediate \"~t\" is never used");
	expect_fail("{" KEEP "\"rules\": [{\"drop\": \"layers.0.experts.1.w\"},"
		    " {\"from\": \"layers.{L}.experts.{E}.w\", \"reduce\": \"E\","
		    " \"to\": \"s.{L}\", \"expr\": \"stack(x, 0)\"}]}",
		    "values must run 0..1 without gaps or repeats, found 2 at position 1");
}
END_TEST

/* The builtins table: a call is checked for its name, its first argument's
 * kind and its argument count before the builtin runs. */
#define EMBED_EXPR(x) "{" KEEP "\"rules\": [{\"from\": \"embed\", \"to\": \"e\", \"expr\": \"" x "\"}]}"
START_TEST(builtin_errors)
{
	expect_fail(EMBED_EXPR("frobnicate(x)"), "unknown function \"frobnicate\"");
	expect_fail(EMBED_EXPR("transpose(x, 0)"), "transpose: takes 3 arguments, got 2");
	expect_fail(EMBED_EXPR("x.narrow(0, 1)"), "narrow: takes 4 arguments, got 3");
	expect_fail(EMBED_EXPR("to(x, BF16, 1, 2)"), "to: takes 2 to 3 arguments, got 4");
	expect_fail(EMBED_EXPR("len(x)"), "unknown function \"len\" for a tensor");
	expect_fail(EMBED_EXPR("t([x])"), "unknown function \"t\" for a list");
	expect_fail(EMBED_EXPR("size(x, 2)"), "size");
	expect_fail(EMBED_EXPR("dequant(x, 2, 128)"), "dequant: takes (weight, scale, block sizes)");
	expect_fail(EMBED_EXPR("x.view(5, len(x.chunk(3)))"), "cannot view as [5,3]"); /* len: 3 */
}
END_TEST

static const struct ck_target *find(const struct ck_plan *p, const char *name)
{
	const struct ck_target *t = ck_plan_find(p, name);
	ck_assert_msg(t != NULL, "target %s missing", name);
	return t;
}

/* The shape memo may only skip keys the pattern does not match, and for a
 * shape-exact pattern its verdict is the real match's (the reference: the
 * matcher on the key itself). */
/* The key with each non-empty all-digit segment written "0", computed
 * character by character (the library works segment by segment). */
static void ref_shape(const char *key, char *out)
{
	size_t k = 0, seg = 0;
	int digits = 1;
	for (size_t i = 0;; i++) {
		char c = key[i];
		if (c == '.' || !c) {
			if (digits && k > seg)
				k = seg, out[k++] = '0';
			if (!c)
				break;
			out[k++] = '.';
			seg = k, digits = 1;
			continue;
		}
		digits &= c >= '0' && c <= '9';
		out[k++] = c;
	}
	out[k] = '\0';
}

START_TEST(key_shapes)
{
	static const char *pats[] = {
	    "model.layers.{L}.mlp.experts.{E}.{w}", "model.layers.{L:int}.{rest:path}",
	    "layers.0.{x}",	"mlp.linear_fc1.{w}", "{a:int}.b",	 "h.{L}.attn.c_attn.{w}",
	    "x.{p:path}",	"{a}1",		      "{a}.1b.{c}",	 "fc.{n:int}x",
	    "e{n:int}.w",	"{a}.{b}",	      "a..{b}",		 "{x:int}",
	    "w",		"0.{a}",	      "{p:path}.007",	 "t.{a}_{b:int}.z"};
	static const char *keys[] = {
	    "model.layers.3.mlp.experts.17.up_proj.weight", "model.layers.003.mlp.experts.0.w",
	    "layers.0.q", "layers.12.q", "mlp.linear_fc1.weight", "mlp.linear_fc12.weight",
	    "5.b", "05.b", "x.b", "h.11.attn.c_attn.bias", "x.1.2.3", "x.", "21", "2", "a1", "a.1b.c",
	    "a.12.c", "fc.3x", "fc.x", "e7.w", "e.w", "1.2", "a..b", "a..7", "7", "0", "w", "0.q",
	    "00.q", "9.007", "9.7", "t.q_5.z", "t.4_5.z", "t.q.z", "", ".", "..", "1..2",
	    "12", ".5", "5.", "a.5", "5.a.66.b.777", "a1.2b.33"};
	struct ck_keyshapes ks = {0};
	size_t npat = sizeof pats / sizeof *pats, nkey = sizeof keys / sizeof *keys;
	int exact = 0, skipped = 0;
	for (size_t i = 0; i < npat; i++) {
		struct ck_pattern p;
		struct ck_err err = {0};
		ck_assert_msg(ck_pattern_compile(pats[i], &p, &err) == 0, "%s: %s", pats[i], err.msg);
		exact += p.shape_exact;
		struct ck_shape_memo memo = {0};
		for (size_t k = 0; k < nkey; k++) {
			uint32_t id;
			ck_assert_int_eq(ck_keyshapes_id(&ks, keys[k], &id), 0);
			char want[64];
			ref_shape(keys[k], want);
			ck_assert_str_eq(ks.shape[id], want);
			struct ck_binding b;
			int real = ck_pattern_match(&p, keys[k], &b);
			ck_binding_clear(&b);
			int may = ck_shape_may_match(&p, &ks, id, &memo);
			ck_assert_int_ge(may, 0);
			if (!may)
				skipped++;
			ck_assert_msg(may || !real, "pattern %s, key %s: skipped a match", pats[i],
				      keys[k]);
			if (p.shape_exact)
				ck_assert_msg(may == real, "pattern %s, key %s: shape says %d, key %d",
					      pats[i], keys[k], may, real);
		}
		ck_shape_memo_free(&memo);
		ck_pattern_free(&p);
	}
	/* digit-only literal runs ("layers.0.", "{a}1", "0.{a}", ".007") are not shape-exact */
	ck_assert_int_eq(exact, (int)npat - 4);
	ck_assert_int_gt(skipped, 100);
	ck_keyshapes_free(&ks);
}
END_TEST

static const char *nth_key(const void *keys, size_t i)
{
	return ((const char *const *)keys)[i];
}

/* Shape ids found on threads (pieces with maps of their own, joined in
 * order) are the ids one thread gives, the shapes numbered in order of
 * first appearance, into a map that already holds some. */
START_TEST(key_shapes_on_threads)
{
	enum { N = 997 };
	static char buf[N][40];
	const char *keys[N];
	for (int i = 0; i < N; i++) { /* shapes first met all along the list */
		int a = (i * 7919) % 1009, b = i % 13;
		if (b < 4)
			snprintf(buf[i], sizeof buf[i], "layers.%d.experts.%d.w%d", a, b, i % 3);
		else if (b < 9)
			snprintf(buf[i], sizeof buf[i], "m%d.%d.x%d", i % 41, a, b);
		else
			snprintf(buf[i], sizeof buf[i], "%d.n%d", a, i / 50);
		keys[i] = buf[i];
	}
	struct ck_keyshapes one = {0};
	uint32_t want[N], got[N], id;
	ck_assert_int_eq(ck_keyshapes_id(&one, "embed", &id), 0);
	for (int i = 0; i < N; i++) {
		ck_assert_int_eq(ck_keyshapes_id(&one, keys[i], &want[i]), 0);
		char ref[64];
		ref_shape(keys[i], ref);
		ck_assert_str_eq(one.shape[want[i]], ref);
	}
	ck_assert_uint_gt(one.n, 40);
	for (int threads = 1; threads <= 6; threads++) {
		struct ck_keyshapes ks = {0};
		ck_assert_int_eq(ck_keyshapes_id(&ks, "embed", &id), 0);
		memset(got, 0xff, sizeof got);
		ck_assert_int_eq(ck_keyshapes_ids(&ks, N, nth_key, keys, got, threads), 0);
		ck_assert_uint_eq(ks.n, one.n);
		for (size_t s = 0; s < one.n; s++)
			ck_assert_str_eq(ks.shape[s], one.shape[s]);
		for (int i = 0; i < N; i++)
			ck_assert_uint_eq(got[i], want[i]);
		ck_keyshapes_free(&ks);
	}
	ck_keyshapes_free(&one);
}
END_TEST

/* Source keys are found in the catalog's own name map: one named like an
 * intermediate ("~t") is consumed as any key, and an intermediate of that
 * name is refused as produced twice, as with a map of the stage's own. */
START_TEST(source_key_named_like_an_intermediate)
{
	char *d = tu_mkdtemp(), *path = tu_path(d, "model.safetensors");
	static const struct tu_tensor t[] = {{"~t", CK_DT_F32, 1, {4}}, {"a", CK_DT_F32, 1, {2}}};
	tu_write_st(path, t, 2);
	struct ck_catalog *c;
	struct ck_err err;
	ck_assert_msg(ck_catalog_open(d, &c, &err) == 0, "%s", err.msg);
	const char *ok = "{\"ckptfs_mapping\": 1, \"rules\": [{\"from\": \"~t\", \"to\": \"x\"},"
			 " {\"from\": \"a\", \"to\": \"y\"}]}";
	const char *bad = "{\"ckptfs_mapping\": 1, \"rules\": [{\"from\": \"a\", \"to\": \"~t\"},"
			  " {\"from\": \"~t\", \"to\": \"b\"}]}";
	struct ck_mapping *m;
	struct ck_plan *p = NULL;
	ck_assert_msg(ck_mapping_parse(ok, strlen(ok), "m.json", &m, &err) == 0, "%s", err.msg);
	ck_assert_msg(ck_plan_build(c, &m, 1, &p, &err) == 0, "%s", err.msg);
	ck_assert_int_eq(ck_plan_find(p, "x")->v.shape[0], 4);
	ck_assert_int_eq(ck_plan_find(p, "y")->v.shape[0], 2);
	ck_plan_free(p);
	ck_mapping_free(m);
	ck_assert_msg(ck_mapping_parse(bad, strlen(bad), "m.json", &m, &err) == 0, "%s", err.msg);
	ck_assert_int_eq(ck_plan_build(c, &m, 1, &p, &err), -1);
	ck_assert_msg(strstr(err.msg, "target produced twice (also by the inputs of the stage"),
		      "%s", err.msg);
	ck_mapping_free(m);
	ck_catalog_free(c);
	tu_rmtree(d);
	free(path);
	free(d);
}
END_TEST

/* A plan of one mapping text over catalog c: NULL with err on failure. */
static struct ck_plan *plan_over(struct ck_catalog *c, const char *text, struct ck_err *err)
{
	struct ck_mapping *m;
	struct ck_plan *p = NULL;
	if (ck_mapping_parse(text, strlen(text), "m.json", &m, err) < 0)
		return NULL;
	ck_plan_build(c, &m, 1, &p, err);
	ck_mapping_free(m);
	return p;
}

static void expect_fail_over(struct ck_catalog *c, const char *text, const char *want)
{
	struct ck_err err;
	struct ck_plan *p = plan_over(c, text, &err);
	ck_assert_msg(p == NULL, "mapping accepted: %s", text);
	ck_assert_msg(strstr(err.msg, want), "message \"%s\" lacks \"%s\"", err.msg, want);
}

/* An input that its rule's expressions and lets name once, in a rule
 * without "for", is taken by the evaluation instead of copied; named twice
 * (in one expression, in a let and the expression, or by two outputs), or in
 * a "for" rule (its expression runs once per value), it is copied, and every
 * use sees the whole value. */
START_TEST(inputs_used_once_are_taken)
{
	static const struct tu_tensor t[] = {{"a.0", CK_DT_F32, 2, {2, 3}},
					     {"b.0", CK_DT_F32, 2, {2, 3}},
					     {"c.0", CK_DT_F32, 2, {2, 3}},
					     {"d.0", CK_DT_F32, 2, {2, 3}},
					     {"e.0", CK_DT_F32, 2, {2, 3}}};
	const char *text =
		"{\"rules\": ["
		"{\"from\": \"a.{n}\", \"to\": \"once.{n}\", \"expr\": \"x.t()\"},"
		"{\"from\": \"b.{n}\", \"to\": \"twice.{n}\", \"expr\": \"cat([x, x], 0)\"},"
		"{\"from\": \"c.{n}\", \"to\": \"let.{n}\", \"let\": {\"y\": \"x.t()\"},"
		" \"expr\": \"cat([y.t(), x], 1)\"},"
		"{\"from\": \"d.{n}\", \"to\": {\"p\": \"o1.{n}\", \"q\": \"o2.{n}\"},"
		" \"expr\": {\"p\": \"x\", \"q\": \"x.to(BF16)\"}},"
		"{\"from\": \"e.{n}\", \"for\": {\"i\": 2}, \"to\": \"row.{n}.{i}\","
		" \"expr\": \"x[i]\"}]}";
	struct ck_mapping *m;
	struct ck_err err;
	ck_assert_msg(ck_mapping_parse(text, strlen(text), "m.json", &m, &err) == 0, "%s", err.msg);
	const int want[] = {1, 0, 0, 0, 0};
	for (int k = 0; k < 5; k++)
		ck_assert_msg(m->rules[k].in[0].once == want[k], "rule %d", k + 1);
	ck_mapping_free(m);

	char *d = tu_mkdtemp();
	char *f = tu_path(d, "m.safetensors");
	tu_write_st(f, t, 5);
	struct ck_catalog *c;
	ck_assert_msg(ck_catalog_open(d, &c, &err) == 0, "%s", err.msg);
	struct ck_plan *p = plan_over(c, text, &err);
	ck_assert_msg(p, "%s", err.msg);
	const struct {
		const char *name, *src;
		int64_t rows, cols;
		size_t pieces;
	} out[] = {{"once.0", "a.0", 3, 2, 1}, {"twice.0", "b.0", 4, 3, 2}, {"let.0", "c.0", 2, 6, 2},
		   {"o1.0", "d.0", 2, 3, 1},   {"o2.0", "d.0", 2, 3, 1},    {"row.0.1", "e.0", 3, 0, 1}};
	for (size_t k = 0; k < sizeof out / sizeof *out; k++) {
		const struct ck_target *tg = ck_plan_find(p, out[k].name);
		ck_assert_msg(tg, "%s missing", out[k].name);
		ck_assert_int_eq(tg->v.shape[0], out[k].rows);
		if (out[k].cols)
			ck_assert_int_eq(tg->v.shape[1], out[k].cols);
		ck_assert_uint_eq(tg->v.n, out[k].pieces);
		uint32_t src = (uint32_t)(ck_catalog_find(c, out[k].src) - c->entries);
		for (size_t i = 0; i < tg->v.n; i++)
			ck_assert_uint_eq(tg->v.p[i].src, src);
	}
	ck_assert_int_eq(ck_plan_find(p, "o2.0")->v.dtype, CK_DT_BF16);
	ck_assert_ptr_nonnull(ck_plan_find(p, "row.0.0"));
	ck_plan_free(p);
	ck_catalog_free(c);
	tu_rmtree(d);
	free(f);
	free(d);
}
END_TEST

/* A rule's instances take their first input at the key its match found,
 * checked by name: a reduction stacks each group's keys in the order of the
 * reduced value, and a key whose capture does not spell that value ("p.01"
 * for 1) is missing, as a lookup finds it. Targets are indexed once all
 * rules ran: a name made twice, by one rule or two, tens of names apart, is
 * refused naming both rules, and so is a kept key a rule also makes. */
START_TEST(instances_take_matched_keys)
{
	enum { L = 2, E = 30 };
	static char names[L * E][24];
	struct tu_tensor t[L * E];
	for (int i = 0; i < L * E; i++) {
		snprintf(names[i], sizeof names[i], "l.%d.e.%d.w", i / E, i % E);
		t[i] = (struct tu_tensor){names[i], CK_DT_F32, 1, {2}};
	}
	static const struct tu_tensor pt[] = {{"p.0", CK_DT_F32, 1, {2}},
					      {"p.01", CK_DT_F32, 1, {2}}};
	char *d = tu_mkdtemp();
	char *f1 = tu_path(d, "a.safetensors"), *f2 = tu_path(d, "b.safetensors");
	tu_write_st(f1, t, L * E);
	tu_write_st(f2, pt, 2);
	struct ck_catalog *c;
	struct ck_err err;
	ck_assert_msg(ck_catalog_open(d, &c, &err) == 0, "%s", err.msg);
	struct ck_plan *p = plan_over(c, "{" KEEP "\"rules\": [{\"from\": \"l.{L}.e.{E}.w\", "
					 "\"reduce\": \"E\", \"to\": \"s.{L}\", "
					 "\"expr\": \"stack(x, 0)\"}]}", &err);
	ck_assert_msg(p, "%s", err.msg);
	for (int l = 0; l < L; l++) {
		char name[16];
		snprintf(name, sizeof name, "s.%d", l);
		const struct ck_target *tg = ck_plan_find(p, name);
		ck_assert_msg(tg && tg->v.n == E, "%s", name);
		for (int e = 0; e < E; e++) {
			const struct ck_catalog_entry *src = ck_catalog_find(c, names[l * E + e]);
			ck_assert_uint_eq(tg->v.p[e].src, (uint32_t)(src - c->entries));
		}
	}
	ck_plan_free(p);
	expect_fail_over(c, "{" KEEP "\"rules\": [{\"from\": \"p.{i}\", \"reduce\": \"i\", "
			    "\"to\": \"q\", \"expr\": \"stack(x, 0)\"}]}",
			 "key \"p.1\": missing source key");
	expect_fail_over(c,
			 "{" KEEP "\"rules\": [{\"from\": \"l.{L}.e.{E}.w\", \"to\": \"t.{E}\"}]}",
			 "rule 1 (\"l.{L}.e.{E}.w\" -> \"t.{E}\"): key \"t.0\": target produced "
			 "twice (also by rule 1)");
	expect_fail_over(c, "{" KEEP "\"rules\": [{\"from\": \"l.{L}.e.{E}.w\", "
			    "\"to\": \"a.{L}.{E}\"}, {\"from\": \"p.0\", \"to\": \"a.1.29\"}]}",
			 "rule 2 (\"p.0\" -> \"a.1.29\"): key \"a.1.29\": target produced twice "
			 "(also by rule 1)");
	expect_fail_over(c, "{" KEEP "\"rules\": [{\"from\": \"p.0\", \"to\": \"p.01\"}]}",
			 "unused key \"p.01\" is kept but rule 1 also produces it");
	ck_catalog_free(c);
	tu_rmtree(d);
	free(f1);
	free(f2);
	free(d);
}
END_TEST

START_TEST(plans)
{
	struct ck_err err;
	/* fused QKV with params from config.json (head_dim nested in text_config) */
	const char *m1 = "{" KEEP "\"params\": {\"H\": \"hidden_size\", \"ng\": \"num_key_value_heads\","
			 " \"hd\": \"head_dim\", \"seven\": \"missing_key ?? 7\"},"
			 "\"rules\": [{\"from\": {\"q\": \"layers.{L}.q\", \"k\": \"layers.{L}.k\","
			 " \"v\": \"layers.{L}.v\"}, \"to\": \"qkv.{L}\","
			 " \"expr\": \"cat([q.view(ng, -1, H), k.view(ng, -1, H), v.view(ng, -1, H)], 1)"
			 ".view(-1, H * hd / 2 + seven - 7)\"}]}";
	struct ck_plan *p = plan_of(&m1, 1, &err);
	ck_assert_msg(p != NULL, "%s", err.msg);
	const struct ck_target *t = find(p, "qkv.1");
	ck_assert_int_eq(t->v.ndim, 2);
	ck_assert_int_eq(t->v.shape[0], 16);
	ck_assert_int_eq(t->v.shape[1], 4);
	ck_assert_uint_eq(t->v.n, 6); /* 3 blocks per KV group */
	ck_assert_uint_eq(p->g[t->group].n_sources, 3);
	ck_assert_ptr_nonnull(find(p, "embed")); /* kept */
	ck_plan_free(p);

	/* reduce (stack) and its inverse (for + index), through an intermediate */
	const char *m2 = "{" KEEP "\"rules\": [{\"from\": \"layers.{L}.experts.{E}.w\", \"reduce\": \"E\","
			 " \"to\": \"~s.{L}\", \"expr\": \"stack(x, 0)\"},"
			 " {\"from\": \"~s.{L}\", \"to\": \"stacked.{L}\", \"expr\": \"x.to(F32)\","
			 " \"share\": true},"
			 " {\"from\": \"~s.{L}\", \"for\": {\"E\": 3}, \"to\": \"e.{L}.{E}\","
			 " \"expr\": \"x[E]\", \"share\": true}]}";
	p = plan_of(&m2, 1, &err);
	ck_assert_msg(p != NULL, "%s", err.msg);
	t = find(p, "stacked.0");
	ck_assert_int_eq(t->v.dtype, CK_DT_F32);
	ck_assert_int_eq(t->v.shape[0], 3);
	ck_assert_int_eq(t->v.shape[2], 4);
	t = find(p, "e.0.2");
	ck_assert_int_eq(t->v.dtype, CK_DT_BF16);
	ck_assert_int_eq(t->v.ndim, 2);
	ck_assert_uint_eq(t->v.n, 1);
	ck_assert_str_eq(cat->entries[t->v.p[0].src].t.name, "layers.0.experts.2.w");
	ck_assert_ptr_null(ck_plan_find(p, "~s.0")); /* intermediates are not exposed */
	ck_plan_free(p);

	/* conditions, shared sources (tied embeddings), chained stages; names
	 * wrapped by one stage and canonicalised by the next */
	const char *st1 = "{" KEEP "\"rules\": [{\"if\": \"tie\", \"from\": \"embed\", \"to\": \"lm_head\"},"
			  " {\"if\": \"tie && 1\", \"from\": \"embed\", \"to\": \"tok\", \"share\": true},"
			  " {\"if\": \"!tie\", \"from\": \"norm\", \"to\": \"never\"}]}";
	const char *st3 = "{\"rules\": [{\"from\": \"tok\", \"to\": \"final_tok\"}]}";
	const char *chain[] = {st1, st3};
	p = plan_of(chain, 2, &err);
	ck_assert_msg(p != NULL, "%s", err.msg);
	ck_assert_ptr_nonnull(find(p, "final_tok"));
	ck_assert_ptr_nonnull(find(p, "lm_head"));
	ck_assert_ptr_nonnull(find(p, "norm")); /* untouched keys pass through */
	ck_assert_ptr_null(ck_plan_find(p, "never"));
	ck_assert_uint_eq(p->g[find(p, "final_tok")->group].n_targets, 2); /* tied: one group */
	ck_assert_uint_eq(p->n, 12); /* lm_head, final_tok and 10 untouched keys */
	ck_plan_free(p);
	/* the prefixes added by a stage are removed by the canonicalising one */
	const char *wrap = "{\"add_prefix\": \"module._orig_mod.\", \"unused\": \"keep\","
			   " \"rules\": [{\"from\": \"module._orig_mod.layers.{L}.q\","
			   " \"to\": \"module._orig_mod.layers.{L}._fsdp_wrapped_module.q\"}]}";
	const char *canon = "{\"strip_prefixes\": [\"module.\", \"_orig_mod.\"],"
			    " \"strip_segments\": [\"_fsdp_wrapped_module\"]}";
	const char *chain2[] = {wrap, canon};
	p = plan_of(chain2, 2, &err);
	ck_assert_msg(p != NULL, "%s", err.msg);
	ck_assert_ptr_nonnull(find(p, "layers.1.q"));
	ck_assert_ptr_nonnull(find(p, "embed"));
	ck_assert_uint_eq(p->n, cat->n_entries);
	ck_plan_free(p);

	/* an integer let renumbers in an output name (DeepSeek's MTP layer
	 * num_hidden_layers + i becomes mtp.layers.i); with "for" it is
	 * evaluated per value, and a negative or non-integer let is refused */
	const char *renum = "{\"unused\": \"keep\", \"rules\": ["
			    " {\"from\": \"layers.{L}.q\", \"let\": {\"M\": \"L + 5\"},"
			    " \"to\": \"moved.{M}.q.{L}\"},"
			    " {\"from\": \"layers.{L}.experts.{E}.w\", \"reduce\": \"E\","
			    " \"to\": \"~s.{L}\", \"expr\": \"stack(x, 0)\"},"
			    " {\"from\": \"~s.{L}\", \"for\": {\"E\": 3}, \"let\": {\"F\": \"2 - E\"},"
			    " \"to\": \"rev.{F}\", \"expr\": \"x[E]\"}]}";
	p = plan_of(&renum, 1, &err);
	ck_assert_msg(p != NULL, "%s", err.msg);
	ck_assert_ptr_nonnull(find(p, "moved.5.q.0"));
	ck_assert_ptr_nonnull(find(p, "moved.6.q.1"));
	t = find(p, "rev.0"); /* E = 2 */
	ck_assert_str_eq(cat->entries[t->v.p[0].src].t.name, "layers.0.experts.2.w");
	t = find(p, "rev.2");
	ck_assert_str_eq(cat->entries[t->v.p[0].src].t.name, "layers.0.experts.0.w");
	ck_plan_free(p);
	expect_fail("{" KEEP "\"rules\": [{\"from\": \"layers.{L}.q\", \"let\": {\"M\": \"L - 1\"},"
		    " \"to\": \"m.{M}\"}]}",
		    "rule 1 (\"layers.{L}.q\" -> \"m.{M}\"): let \"M\" is used in an output name, so it "
		    "must be a non-negative integer");
	expect_fail("{" KEEP "\"rules\": [{\"from\": \"layers.{L}.q\", \"let\": {\"M\": \"x\"},"
		    " \"to\": \"m.{M}\"}]}",
		    "must be a non-negative integer");

	/* a condition naming a capture is decided per key: the keys it rejects
	 * stay for later rules (DeepSeek's dense first layers vs its MoE ones) */
	const char *perkey = "{\"params\": {\"first\": \"missing ?? 1\"}, \"rules\": ["
			     " {\"if\": \"L >= first\", \"from\": \"layers.{L}.q\", \"to\": \"late.{L}\"},"
			     " {\"from\": \"layers.{L}.q\", \"to\": \"early.{L}\"},"
			     " {\"if\": \"E != 1 && L == 0\", \"drop\": \"layers.{L}.experts.{E}.w\"}],"
			     " \"unused\": \"keep\"}";
	p = plan_of(&perkey, 1, &err);
	ck_assert_msg(p != NULL, "%s", err.msg);
	ck_assert_ptr_nonnull(find(p, "late.1"));
	ck_assert_ptr_nonnull(find(p, "early.0"));
	ck_assert_ptr_null(ck_plan_find(p, "late.0"));
	ck_assert_ptr_null(ck_plan_find(p, "early.1"));
	ck_assert_ptr_nonnull(find(p, "layers.0.experts.1.w")); /* the one the drop kept */
	ck_assert_ptr_null(ck_plan_find(p, "layers.0.experts.0.w"));
	ck_assert_ptr_null(ck_plan_find(p, "layers.0.experts.2.w"));
	ck_plan_free(p);
}
END_TEST

/* "rename": after the rules, before partition and select; the first entry
 * that matches wins; "if" reads config values; collisions and unbound
 * captures are errors naming the entry. */
START_TEST(renames)
{
	struct ck_err err;
	const char *m = "{" KEEP "\"rules\": [{\"from\": \"layers.{L}.{w}\", \"to\": \"dec.{L}.{w}\"}],"
			"\"rename\": [{\"match\": \"dec.{L:int}.q\", \"to\": \"dec.{L}.attn.q\"},"
			" {\"match\": \"dec.{L}.{w}\", \"to\": \"never.{w}\", \"if\": \"!tie\"},"
			" {\"match\": \"dec.1.{w}\", \"to\": \"last.{w}\", \"if\": \"tie && 1\"},"
			" {\"match\": \"dec.1.q\", \"to\": \"shadowed\"}]}";
	struct ck_plan *p = plan_of(&m, 1, &err);
	ck_assert_msg(p != NULL, "%s", err.msg);
	ck_assert_ptr_nonnull(find(p, "dec.0.attn.q"));
	ck_assert_ptr_nonnull(find(p, "dec.1.attn.q")); /* entry 1 first, not 3 or 4 */
	ck_assert_ptr_nonnull(find(p, "dec.0.k"));	 /* entry 2's "if" is false */
	ck_assert_ptr_nonnull(find(p, "last.k"));
	ck_assert_ptr_nonnull(find(p, "last.v"));
	ck_assert_ptr_null(ck_plan_find(p, "dec.1.k"));
	ck_assert_ptr_null(ck_plan_find(p, "shadowed"));
	ck_assert_ptr_nonnull(find(p, "embed")); /* kept keys pass through unrenamed */
	ck_assert_str_eq(cat->entries[find(p, "last.v")->v.p[0].src].t.name, "layers.1.v");
	ck_assert_uint_eq(p->n, 11);
	ck_plan_free(p);
	expect_fail("{" KEEP "\"rules\": [], \"rename\": [{\"match\": \"layers.{L}.{w}\","
		    " \"to\": \"l.{w}\"}]}",
		    "rename 1: makes a second target named \"l.");
	expect_fail("{" KEEP "\"rules\": [], \"rename\": [{\"match\": \"embed\", \"to\": \"norm\"}]}",
		    "rename 1: makes a second target named \"norm\"");
	expect_fail("{\"rules\": [], \"rename\": [{\"match\": \"a.{x}\", \"to\": \"b.{y}\"}]}",
		    "rename 1: \"to\" names {y}, which \"match\" does not capture");
	expect_fail("{\"rules\": [], \"rename\": [{\"match\": \"a\", \"to\": \"b\"},"
		    " {\"match\": \"a\", \"to\": \"b\", \"bogus\": 1}]}",
		    "rename 2: unknown or repeated field \"bogus\"");
	expect_fail("{\"rules\": [], \"rename\": {\"match\": \"a\"}}", "\"rename\" must be a list");
	expect_fail("{\"rules\": [], \"rename\": [{\"match\": \"a\"}]}",
		    "rename 1: needs \"match\" and \"to\"");
	expect_fail("{" KEEP "\"rules\": [], \"rename\": [{\"match\": \"a\", \"to\": \"b\","
		    " \"if\": \"no_such_value\"}]}",
		    "rename 1: \"if\": unknown name \"no_such_value\"");
	expect_fail("{" KEEP "\"rules\": [], \"rename\": [{\"match\": \"a\", \"to\": \"b\","
		    " \"if\": \"hidden_size / 0\"}]}",
		    "rename 1: \"if\"");
}
END_TEST

/* "each": every layer / expert a count names must be there, and no other. */
/* A reduction's values are checked whatever order they arrive in: "+1"
 * reads as 1 and sorts before "1", a repeat. */
START_TEST(reduction_refuses_repeats)
{
	char *d = tu_mkdtemp();
	static const struct tu_tensor t[] = {
		{"y.+1.w", CK_DT_BF16, 2, {3, 4}},
		{"y.1.w", CK_DT_BF16, 2, {3, 4}},
		{"y.0.w", CK_DT_BF16, 2, {3, 4}},
	};
	char *path = tu_path(d, "model.safetensors");
	tu_write_st(path, t, sizeof t / sizeof *t);
	free(path);
	struct ck_err err;
	struct ck_catalog *mine, *keep = cat;
	ck_assert_msg(ck_catalog_open(d, &mine, &err) == 0, "%s", err.msg);
	ck_assert_str_eq(mine->entries[0].t.name, "y.+1.w"); /* before "y.0.w" */
	cat = mine;
	const char *m = "{\"rules\": [{\"from\": \"y.{E}.w\", \"reduce\": \"E\", \"to\": \"s\","
			" \"expr\": \"stack(x, 0)\"}]}";
	ck_assert_ptr_null(plan_of(&m, 1, &err));
	ck_assert_msg(strstr(err.msg, "values must run 0..2 without gaps or repeats, found 1 at "
				      "position 2"),
		      "%s", err.msg);
	cat = keep;
	ck_catalog_free(mine);
	tu_rmtree(d);
	free(d);
}
END_TEST

/* "shape": what the parameters say an input is, checked against every key
 * the rule takes (the config does not describe the checkpoint otherwise:
 * k.view(kv_heads, -1, H) divides for a wrong head count too). */
#define QKV_SHAPE(s)                                                                               \
	"{" KEEP "\"rules\": [{\"from\": {\"q\": \"layers.{L}.q\", \"k\": \"layers.{L}.k\", "      \
	"\"v\": \"layers.{L}.v\"}, \"to\": \"o.{L}\", \"expr\": \"cat([q, k, v], 0)\", "           \
	"\"shape\": " s "}]}"
START_TEST(shape_declarations)
{
	struct ck_err err;
	const char *ok[] = {
	    QKV_SHAPE("{\"q\": [\"num_attention_heads * head_dim\", \"hidden_size\"],"
		      " \"k\": [\"num_key_value_heads * head_dim\", null], \"v\": [4, 4]}"),
	    /* a capture in a dim, and each tensor of a reduced input */
	    "{" KEEP "\"rules\": [{\"from\": \"layers.{L}.q\", \"to\": \"q.{L}\","
	    " \"shape\": {\"x\": [\"8 - 0 * L\", 4]}},"
	    " {\"from\": \"layers.{L}.experts.{E}.w\", \"reduce\": \"E\", \"to\": \"e.{L}\","
	    " \"expr\": \"stack(x, 0)\", \"shape\": {\"x\": [3, \"hidden_size\"]}}]}",
	};
	for (int k = 0; k < 2; k++) {
		struct ck_plan *p = plan_of(&ok[k], 1, &err);
		ck_assert_msg(p != NULL, "%s", err.msg);
		ck_plan_free(p);
	}
	/* the key-value heads taken for the query heads: k is [4, 4], not [8, 4]; the
	 * source's fault (exit 3), named by the mapping's rule and the key */
	expect_fail_as(
	    QKV_SHAPE("{\"k\": [\"num_attention_heads * head_dim\", \"hidden_size\"]}"),
	    "key \"layers.0.k\": is [4, 4], but the rule's \"shape\" of k says "
	    "[num_attention_heads * head_dim, hidden_size] = [8, 4]: the config does not "
	    "describe this checkpoint",
	    CK_E_SOURCE);
	expect_fail_as(
	    "{" KEEP "\"rules\": [{\"from\": \"layers.{L}.q\", \"to\": \"q.{L}\","
	    " \"shape\": {\"x\": [\"8 + L\", 4]}}]}",
	    "key \"layers.1.q\": is [8, 4], but the rule's \"shape\" of x says [8 + L, 4] = [9, 4]",
	    CK_E_SOURCE);
	expect_fail_as(
	    "{" KEEP "\"rules\": [{\"from\": \"embed\", \"to\": \"e\", \"shape\": {\"x\": [40]}}]}",
	    "key \"embed\": is [10, 4], but the rule's \"shape\" of x says [40]", CK_E_SOURCE);
	expect_fail_as(
	    "{" KEEP "\"rules\": [{\"from\": \"layers.{L}.experts.{E}.w\", \"reduce\": \"E\","
	    " \"to\": \"e.{L}\", \"expr\": \"stack(x, 0)\", \"shape\": {\"x\": [4, 4]}}]}",
	    "key \"layers.0.experts.0.w\": is [3, 4]", CK_E_SOURCE);
	expect_fail("{" KEEP "\"rules\": [{\"from\": \"embed\", \"to\": \"e\","
		    " \"shape\": {\"x\": [\"no_such_field\", 4]}}]}",
		    "key \"embed\": ");
	/* the declaration itself */
	expect_fail(QKV_SHAPE("{\"z\": [1]}"), "\"shape\" names \"z\", which is not an input");
	expect_fail(QKV_SHAPE("{\"q\": 8}"), "\"shape\" of \"q\" must be a list of 1 to 8 dims");
	expect_fail(QKV_SHAPE("{\"q\": []}"), "must be a list of 1 to 8 dims");
	expect_fail(QKV_SHAPE("{\"q\": [1, 2, 3, 4, 5, 6, 7, 8, 9]}"),
		    "must be a list of 1 to 8 dims");
	expect_fail(QKV_SHAPE("{\"q\": [\"k * 2\", 4]}"),
		    "\"shape\" of \"q\" names \"k\": a dim is decided from parameters");
	expect_fail(QKV_SHAPE("{\"q\": [{}, 4]}"), "a dim is an expression or null");
	expect_fail(QKV_SHAPE("{\"q\": [\"1 +\", 4]}"), "\"shape\"");
	expect_fail(QKV_SHAPE("[]"), "\"shape\" must be {\"INPUT\": [dim, ...], ...}");
	/* huge, negative and deeply nested dims */
	expect_fail(QKV_SHAPE("{\"q\": [\"99999999999999999999\", 4]}"), "integer too large");
	expect_fail_as(QKV_SHAPE("{\"q\": [\"0 - 8\", 4]}"), "says [0 - 8, 4] = [-8, 4]",
		       CK_E_SOURCE);
	expect_fail_as(QKV_SHAPE("{\"q\": [\"9223372036854775807 * 2\", 4]}"), "key \"layers.0.q\"",
		       CK_E_MAPPING);
	char deep[400] = QKV_SHAPE("{\"q\": [\"");
	deep[strlen(deep) - 3] = '\0'; /* cut the closing "}]} to nest inside */
	for (int i = 0; i < 100; i++)
		strcat(deep, "(");
	strcat(deep, "\"]}}]}");
	expect_fail(deep, "nested too deeply");
	expect_fail("{\"rules\": [{\"drop\": \"embed\", \"shape\": {\"x\": [10, 4]}}]}",
		    "takes no from/to/expr/let/reduce/for/shape");
	expect_fail("{" KEEP "\"rules\": [{\"from\": \"embed\", \"to\": \"e\", \"let\": {\"M\": 2},"
		    " \"shape\": {\"x\": [\"M\", 4]}}]}",
		    "names \"M\"");
}
END_TEST

START_TEST(each_counts)
{
	struct ck_err err;
	const char *ok[] = {
		"{" KEEP "\"rules\": [{\"from\": \"layers.{L}.q\", \"to\": \"q.{L}\","
		" \"each\": {\"L\": \"num_key_value_heads\"}},"
		" {\"from\": \"layers.{L}.experts.{E}.w\", \"reduce\": \"E\", \"to\": \"e.{L}\","
		" \"expr\": \"stack(x, 0)\", \"if\": \"L < 1\", \"each\": {\"L\": 2, \"E\": 3}},"
		" {\"from\": \"nothing.{L}\", \"to\": \"n.{L}\", \"optional\": true, \"each\": {\"L\": 5}},"
		/* has(): the layers a list names (Qwen-MoE's mlp_only_layers) split between rules */
		" {\"from\": \"layers.{L}.k\", \"to\": \"k.{L}\", \"if\": \"!has([1, 5], L)\", \"each\": {\"L\": 2}},"
		" {\"from\": \"layers.{L}.k\", \"to\": \"k1.{L}\", \"if\": \"has(no_such ?? [], L) || has([1, 5], L)\","
		" \"each\": {\"L\": 2}},"
		/* must match, but its "if" expects no combination (a model without dense layers) */
		" {\"from\": \"nothing.{L}\", \"to\": \"m.{L}\", \"if\": \"L > 3\", \"each\": {\"L\": 4}}]}",
	};
	struct ck_plan *p = plan_of(ok, 1, &err);
	ck_assert_msg(p != NULL, "%s", err.msg);
	ck_assert_int_eq(find(p, "e.0")->v.shape[0], 3);
	ck_assert_ptr_nonnull(find(p, "k.0"));
	ck_assert_ptr_nonnull(find(p, "k1.1"));
	ck_assert_ptr_null(ck_plan_find(p, "k.1"));
	ck_assert_ptr_null(ck_plan_find(p, "k1.0"));
	ck_plan_free(p);
#define Q(each) "{" KEEP "\"rules\": [{\"from\": \"layers.{L}.q\", \"to\": \"q.{L}\", \"each\": " each "}]}"
#define X(cond, each)                                                                          \
	"{" KEEP "\"rules\": [{\"from\": \"layers.{L}.experts.{E}.w\", \"reduce\": \"E\","      \
	" \"to\": \"e.{L}\", \"expr\": \"stack(x, 0)\", \"if\": \"" cond "\", \"each\": " each "}]}"
	expect_fail(Q("{\"L\": 3}"), "rule 1 (\"layers.{L}.q\" -> \"q.{L}\"): \"each\": no key for "
				     "{L} = 2 (each {L} below 3 = 3)");
	expect_fail(Q("{\"L\": \"hidden_size - 3\"}"),
		    "key \"layers.1.q\": \"each\": {L} = 1 is not below hidden_size - 3 = 1");
	expect_fail(Q("{\"L\": \"0 - 1\"}"), "\"each\": the count of {L}, 0 - 1, is -1");
	expect_fail(Q("{\"L\": 100000000}"), "\"each\": {L} below 100000000 = 100000000 makes more "
					     "than 1152 combinations for 2 keys");
	expect_fail(Q("{\"L\": \"no_such\"}"), "\"each\": the count of {L} (no_such): unknown name");
	expect_fail(X("1", "{\"E\": 4}"), "\"each\": no key for {E} = 3 (each {E} below 4 = 4)");
	expect_fail(X("1", "{\"L\": 2, \"E\": 3}"),
		    "no key for {L} = 1, {E} = 0 (each {L} below 2 = 2, {E} below 3 = 3)");
	expect_fail(X("L < 2", "{\"L\": 2, \"E\": 3}"), "no key for {L} = 1, {E} = 0");
	expect_fail(X("has([0, 1], L)", "{\"L\": 2, \"E\": 3}"), "no key for {L} = 1, {E} = 0");
	expect_fail(X("has(3, L)", "{\"L\": 2}"), "unknown function \"has\" for a integer");
	expect_fail(X("has([1], [1])", "{\"L\": 2}"), "has");
	expect_fail("{" KEEP "\"rules\": [{\"from\": \"nothing.{L}\", \"to\": \"m.{L}\", \"if\": \"L > 2\","
		    " \"each\": {\"L\": 4}}]}",
		    "rule 1 (\"nothing.{L}\" -> \"m.{L}\"): \"each\": no key for {L} = 3");
	/* every layer gives "q", only layer 0 "k": coverage holds, the k group is short */
	expect_fail("{" KEEP "\"rules\": [{\"from\": \"layers.{L}.q\", \"to\": \"~i.{L}.q\"},"
		    " {\"from\": \"layers.0.k\", \"to\": \"~i.0.k\"},"
		    " {\"from\": \"~i.{L}.{w}\", \"reduce\": \"L\", \"to\": \"s.{w}\","
		    " \"expr\": \"stack(x, 0)\", \"each\": {\"L\": 2}}]}",
		    "rule 3 (\"~i.{L}.{w}\" -> \"s.{w}\"): reduce over {L}: 1 values where \"each\" "
		    "asks for 2");
	expect_fail("{" KEEP "\"rules\": [{\"from\": \"layers.0.{w}\", \"to\": \"l.{w}\","
		    " \"each\": {\"w\": 3}}]}",
		    "\"each\": {w} = \"k\" is not an integer");
	/* the mapping itself */
	expect_fail(Q("{\"Z\": 3}"), "rule 1: \"each\" names {Z}, which the first input pattern "
				     "does not capture");
	expect_fail(Q("[\"L\"]"), "rule 1: \"each\" must be {\"CAPTURE\": count, ...}");
	expect_fail(Q("{}"), "rule 1: \"each\" must be {\"CAPTURE\": count, ...}");
	expect_fail(Q("{\"L\": [3]}"), "rule 1: \"each\": the count of {L} must be an expression");
	expect_fail(Q("{\"L\": \"L + 1\"}"), "rule 1: \"each\": the count of {L} names \"L\"");
	expect_fail(Q("{\"L\": \"x.shape[0]\"}"), "rule 1: \"each\": the count of {L} names \"x\"");
	expect_fail("{" KEEP "\"rules\": [{\"from\": \"layers.{L}.{w}\", \"to\": \"o.{L}.{w}\","
		    " \"if\": \"L < 1\", \"each\": {\"w\": 3}}]}",
		    "rule 1: \"if\" names {L}, which \"each\" does not count");
#undef Q
#undef X
}
END_TEST

/* A rule's instances on several threads (ck_plan_build_threads) give the
 * plan one thread gives: the same targets in the same order with the same
 * layouts, the same warnings, and on failure the error of the first
 * instance that fails. The model: 8 layers of 24 experts and attention. */
#define TL 8
#define TE 24
static char *threads_dir(void)
{
	char *d = tu_mkdtemp();
	static char names[TL * (TE * 3 + 2)][48];
	static struct tu_tensor t[TL * (TE * 3 + 2)];
	size_t n = 0;
	for (int l = 0; l < TL; l++) {
		for (int e = 0; e < TE; e++)
			for (int w = 1; w <= 3; w++) {
				snprintf(names[n], sizeof names[n], "layers.%d.experts.%d.w%d", l, e, w);
				t[n] = (struct tu_tensor){names[n], CK_DT_BF16, 2, {3, 4}};
				n++;
			}
		snprintf(names[n], sizeof names[n], "layers.%d.q", l);
		t[n] = (struct tu_tensor){names[n], CK_DT_F32, 2, {8, 4}};
		n++;
		snprintf(names[n], sizeof names[n], "layers.%d.norm", l);
		t[n] = (struct tu_tensor){names[n], CK_DT_F16, 1, {4}};
		n++;
	}
	char *p = tu_path(d, "model.safetensors");
	tu_write_st(p, t, n);
	free(p);
	p = tu_path(d, "config.json");
	tu_write_str(p, "{\"num_hidden_layers\": 8, \"num_local_experts\": 24, \"hidden_size\": 4}");
	free(p);
	return d;
}

static struct ck_plan *plan_threads(const struct ck_catalog *c, const char *text, int threads,
				    struct ck_err *err)
{
	struct ck_mapping *m;
	struct ck_plan *p = NULL;
	ck_assert_msg(ck_mapping_parse(text, strlen(text), "m.json", &m, err) == 0, "%s", err->msg);
	ck_plan_build_threads(c, &m, 1, threads, &p, err);
	ck_mapping_free(m);
	return p;
}

#define MOE_RULES                                                                                   \
	"{\"from\": {\"w1\": \"layers.{L}.experts.{E}.w1\", \"w3\": \"layers.{L}.experts.{E}.w3\"},"  \
	" \"reduce\": \"E\", \"each\": {\"L\": \"num_hidden_layers\", \"E\": \"num_local_experts\"}," \
	" \"to\": \"moe.{L}.w13\", \"expr\": \"cat([stack(w1, 0), stack(w3, 0)], 1)\"},"             \
	"{\"from\": \"layers.{L}.experts.{E}.w2\", \"reduce\": \"E\", \"to\": \"moe.{L}.w2\","         \
	" \"expr\": \"stack(x, 0).to(F32)\"}"

/* ... and with enough rules for the stage to find keys through their
 * shapes (CK_SHAPE_RULES_MIN more that match nothing): the same plan again,
 * on 1 to 5 threads. Without shapes every rule's candidates are the keys
 * ending in its pattern's last text; with them, the last rule's keys come
 * through a bitmap of two shapes, q's (taken) and the norms', and the rule
 * with a digit literal ("layers.1.") finds its keys without shapes. */
START_TEST(threads_plan_as_one_thread)
{
	char *d = threads_dir();
	struct ck_catalog *c;
	struct ck_err err;
	ck_assert_msg(ck_catalog_open(d, &c, &err) == 0, "%s", err.msg);
	const char *text = "{\"unused\": \"keep\", \"rules\": [" MOE_RULES ","
			   "{\"from\": {\"q\": \"layers.{L}.q\", \"n\": \"layers.0.norm\"},"
			   " \"to\": \"attn.{L}.q\","
			   " \"expr\": \"cat([q.view(hidden_size, -1), n.to(F32).view(4, 1)], 1)\"},"
			   "{\"from\": \"layers.1.{w}\", \"to\": \"one.{w}\"},"
			   "{\"from\": \"layers.{L}.{w}\", \"to\": \"n.{L}.{w}\"}]}";
	char padded[4096];
	size_t k = (size_t)snprintf(padded, sizeof padded, "%.*s", (int)strlen(text) - 2, text);
	for (int i = 0; i < CK_SHAPE_RULES_MIN; i++)
		k += (size_t)snprintf(padded + k, sizeof padded - k,
				      ",{\"from\": \"pad.x%c.{x}\", \"to\": \"p%c.{x}\", \"optional\": true}",
				      'a' + i, 'a' + i);
	snprintf(padded + k, sizeof padded - k, "]}");
	struct ck_plan *one = plan_threads(c, text, 1, &err);
	ck_assert_msg(one, "%s", err.msg);
	/* w13, w2, q and the norms but layer 0's, which every q instance takes
	 * (on several threads at once) */
	ck_assert_uint_eq(one->n, TL * 4 - 1);
	find(one, "one.norm");
	find(one, "n.7.norm");
	ck_assert_uint_eq(one->n_warnings, 1); /* cat of equal parts, unchecked */
	for (int run = 2; run <= 10; run++) {
		int threads = run <= 5 ? run : run - 5;
		struct ck_plan *p = plan_threads(c, run <= 5 ? text : padded, threads, &err);
		ck_assert_msg(p, "%d threads%s: %s", threads, run <= 5 ? "" : ", shapes", err.msg);
		ck_assert_uint_eq(p->n, one->n);
		for (size_t i = 0; i < one->n; i++) {
			ck_assert_str_eq(p->t[i].name, one->t[i].name);
			ck_assert_int_eq(p->t[i].rule, one->t[i].rule);
			ck_assert_uint_eq(p->t[i].group, one->t[i].group);
			ck_assert_msg(ck_value_equal(&p->t[i].v, &one->t[i].v), "%s: layout differs",
				      one->t[i].name);
		}
		ck_assert_uint_eq(p->n_warnings, one->n_warnings);
		ck_assert_str_eq(p->warnings[0], one->warnings[0]);
		ck_plan_free(p);
	}
	/* the layouts are the ones written: w13 of layer 5 stacks w1 then w3
	 * of experts 0..23 (pieces in order, each its own source key) */
	const struct ck_target *w13 = find(one, "moe.5.w13");
	ck_assert_int_eq(w13->v.shape[0], TE);
	ck_assert_int_eq(w13->v.shape[1], 6);
	ck_assert_uint_eq(w13->v.n, 2 * TE);
	for (int k = 0; k < 2 * TE; k++) {
		char want[48];
		snprintf(want, sizeof want, "layers.5.experts.%d.w%d", k % TE, k < TE ? 1 : 3);
		ck_assert_str_eq(c->entries[w13->v.p[k].src].t.name, want);
	}
	ck_plan_free(one);
	ck_catalog_free(c);
	tu_rmtree(d);
	free(d);
}
END_TEST

START_TEST(threads_fail_as_one_thread)
{
	char *d = threads_dir();
	struct ck_catalog *c;
	struct ck_err err;
	ck_assert_msg(ck_catalog_open(d, &c, &err) == 0, "%s", err.msg);
	/* instances of layers 2 and 5 fail (a negative narrow), and of a
	 * reduction layers 3 and 7: one thread stops at the first */
	const char *texts[][2] = {
	    {"{\"unused\": \"keep\", \"rules\": [{\"from\": \"layers.{L}.q\", \"to\": \"a.{L}\","
	     " \"expr\": \"x.narrow(0, 0, 8 - (L % 3) * 5)\"}]}",
	     "key \"a.2\""},
	    {"{\"unused\": \"keep\", \"rules\": [{\"from\": \"layers.{L}.experts.{E}.w2\","
	     " \"reduce\": \"E\", \"to\": \"s.{L}\","
	     " \"expr\": \"stack(x, 0).narrow(0, 0, 24 - (L % 4) * 9)\"}]}",
	     "key \"s.3\""},
	    /* a reduced capture that is no integer: the first match's */
	    {"{\"unused\": \"keep\", \"rules\": [{\"from\": \"layers.{L}.{w:path}\","
	     " \"reduce\": \"w\", \"to\": \"r.{L}\", \"expr\": \"x[0]\"}]}",
	     "{w} = \"experts.0.w1\" is not an integer"},
	    /* "each" counting fewer experts than every layer has: the
	     * first match past the count, though every piece meets some */
	    {"{\"unused\": \"keep\", \"rules\": [{\"from\": \"layers.{L}.experts.{E}.w2\","
	     " \"reduce\": \"E\", \"each\": {\"L\": \"8\", \"E\": \"20\"}, \"to\": \"s.{L}\","
	     " \"expr\": \"stack(x, 0)\"}]}",
	     "key \"layers.0.experts.20.w2\": \"each\": {E} = 20 is not below 20 = 20"},
	    /* "shape" failing from layer 5 on, and for a reduced input from 6 */
	    {"{\"unused\": \"keep\", \"rules\": [{\"from\": \"layers.{L}.experts.{E}.w2\","
	     " \"to\": \"w.{L}.{E}\", \"shape\": {\"x\": [\"3 + L // 5 * 2\", 4]}}]}",
	     "key \"layers.5.experts.0.w2\": is [3, 4], but the rule's \"shape\" of x says "
	     "[3 + L // 5 * 2, 4] = [5, 4]"},
	    {"{\"unused\": \"keep\", \"rules\": [{\"from\": \"layers.{L}.experts.{E}.w2\","
	     " \"reduce\": \"E\", \"to\": \"s.{L}\", \"expr\": \"stack(x, 0)\","
	     " \"shape\": {\"x\": [\"3 + L // 6\", \"hidden_size\"]}}]}",
	     "key \"layers.6.experts.0.w2\": is [3, 4]"},
	};
	for (size_t k = 0; k < sizeof texts / sizeof *texts; k++) {
		struct ck_err one;
		ck_assert_ptr_null(plan_threads(c, texts[k][0], 1, &one));
		ck_assert_msg(strstr(one.msg, texts[k][1]), "%s", one.msg);
		for (int threads = 2; threads <= 8; threads++) {
			ck_assert_ptr_null(plan_threads(c, texts[k][0], threads, &err));
			ck_assert_int_eq(err.kind, one.kind);
			ck_assert_str_eq(err.msg, one.msg);
		}
	}
	ck_catalog_free(c);
	tu_rmtree(d);
	free(d);
}
END_TEST

/* The source each piece of target name reads, against the catalog's index
 * of the key expected there. */
static void pieces_read(const struct ck_catalog *c, const struct ck_plan *p, const char *name,
			char keys[][48], size_t n)
{
	const struct ck_target *t = find(p, name);
	ck_assert_uint_eq(t->v.n, n);
	for (size_t k = 0; k < n; k++) {
		const struct ck_catalog_entry *e = ck_catalog_find(c, keys[k]);
		ck_assert_msg(e, "%s", keys[k]);
		ck_assert_msg(t->v.p[k].src == (uint32_t)(e - c->entries), "%s piece %zu is not %s",
			      name, k, keys[k]);
	}
}

/* A reduction's second input is found from guesses (w3 of the next expert
 * as far from this one's as w1's are apart) checked by name: keys spaced
 * irregularly (an extra key between w1 and w3 of some experts; between x
 * and y of some layers, for a rule without reduction) still give each
 * piece its own source. */
START_TEST(input_guesses_checked_by_name)
{
	char *d = tu_mkdtemp();
	static char names[4 * (6 * 3 + 4)][48];
	static struct tu_tensor t[4 * (6 * 3 + 4)];
	size_t n = 0;
	static const char *const pair[] = {"x", "xy", "y"};
	for (int l = 0; l < 4; l++) {
		/* w2 only of expert 2 in layer 1 and of expert 4 in layer 2 */
		for (int e = 0; e < 6; e++)
			for (int w = 1; w <= 3; w++)
				if (w != 2 || (l == 1 && e == 2) || (l == 2 && e == 4)) {
					snprintf(names[n], sizeof names[n],
						 "layers.%d.experts.%d.w%d", l, e, w);
					t[n] = (struct tu_tensor){names[n], CK_DT_F32, 1, {2}};
					n++;
				}
		for (int k = 0; k < 3; k++) /* x, y of every layer; xy of layers 1 and 3 */
			if (k != 1 || l % 2) {
				snprintf(names[n], sizeof names[n], "pair.%d.%s", l, pair[k]);
				t[n] = (struct tu_tensor){names[n], CK_DT_F32, 1, {2}};
				n++;
			}
	}
	char *path = tu_path(d, "model.safetensors");
	tu_write_st(path, t, n);
	free(path);
	struct ck_catalog *c;
	struct ck_err err;
	ck_assert_msg(ck_catalog_open(d, &c, &err) == 0, "%s", err.msg);
	const char *text =
		"{\"unused\": \"keep\", \"rules\": ["
		"{\"from\": {\"w1\": \"layers.{L}.experts.{E}.w1\","
		" \"w3\": \"layers.{L}.experts.{E}.w3\"}, \"reduce\": \"E\", \"to\": \"w13.{L}\","
		" \"expr\": \"cat([stack(w1, 0), stack(w3, 0)], 1)\"},"
		"{\"from\": {\"x\": \"pair.{L}.x\", \"y\": \"pair.{L}.y\"}, \"to\": \"xy.{L}\","
		" \"expr\": \"cat([x, y], 0)\"}]}";
	for (int threads = 1; threads <= 3; threads += 2) {
		struct ck_plan *p = plan_threads(c, text, threads, &err);
		ck_assert_msg(p, "%s", err.msg);
		for (int l = 0; l < 4; l++) {
			char keys[12][48], name[16];
			for (int e = 0; e < 6; e++) {
				snprintf(keys[e], sizeof keys[e], "layers.%d.experts.%d.w1", l, e);
				snprintf(keys[6 + e], sizeof keys[e], "layers.%d.experts.%d.w3", l,
					 e);
			}
			snprintf(name, sizeof name, "w13.%d", l);
			pieces_read(c, p, name, keys, 12);
			snprintf(keys[0], sizeof keys[0], "pair.%d.x", l);
			snprintf(keys[1], sizeof keys[1], "pair.%d.y", l);
			snprintf(name, sizeof name, "xy.%d", l);
			pieces_read(c, p, name, keys, 2);
		}
		ck_plan_free(p);
	}
	ck_catalog_free(c);
	tu_rmtree(d);
	free(d);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("mapping");
	TCase *tc = tcase_create("plan");
	tcase_set_timeout(tc, 60);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, parse_errors);
	tcase_add_test(tc, plan_errors);
	tcase_add_test(tc, builtin_errors);
	tcase_add_test(tc, plans);
	tcase_add_test(tc, source_key_named_like_an_intermediate);
	tcase_add_test(tc, instances_take_matched_keys);
	tcase_add_test(tc, inputs_used_once_are_taken);
	tcase_add_test(tc, renames);
	tcase_add_test(tc, shape_declarations);
	tcase_add_test(tc, each_counts);
	tcase_add_test(tc, reduction_refuses_repeats);
	tcase_add_test(tc, key_shapes);
	tcase_add_test(tc, key_shapes_on_threads);
	tcase_add_test(tc, threads_plan_as_one_thread);
	tcase_add_test(tc, threads_fail_as_one_thread);
	tcase_add_test(tc, input_guesses_checked_by_name);
	suite_add_tcase(s, tc);
	return tu_run_suite(s, 1);
}
