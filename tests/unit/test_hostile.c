/* Hostile inputs, one test per class (issue #15): long expression chains,
 * counts set before bounds checks, signed overflow in split/narrow/dequant,
 * adversarial key patterns (checked against POSIX regular expressions),
 * capture rebinding, quadratic params/reduce/DCP tiling at 200k / 65k, and
 * control bytes in error messages. Slow (exponential or quadratic) code
 * fails here through the test case's timeout, not a timed assertion. */
#include <check.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/catalog.h"
#include "ckpt/dcp.h"
#include "map/expr.h"
#include "map/mapping.h"
#include "map/pattern.h"
#include "plan/plan.h"
#include "testutil.h"

/* ---- expressions ---- */

static int lookup(void *ctx, const char *name, struct ck_xval *out, struct ck_err *err)
{
	(void)ctx;
	memset(out, 0, sizeof *out);
	static const int64_t w_shape[] = {10, 4}, s_shape[] = {1, 1};
	if (!strcmp(name, "x") || !strcmp(name, "s")) {
		out->kind = XV_TENSOR;
		int s = name[0] == 's';
		return ck_value_leaf(&out->t, (uint32_t)s, CK_DT_F32, 2, s ? s_shape : w_shape, err);
	}
	return 1;
}

/* Evaluate text; returns 0 with *out set, or -1 with err. */
static int eval_text(const char *text, struct ck_xval *out, struct ck_err *err)
{
	struct ck_expr *e = ck_expr_parse(text, err);
	if (!e)
		return -1;
	int rc = ck_expr_eval(e, lookup, NULL, out, err);
	ck_expr_free(e);
	return rc;
}

static char *repeat(const char *head, const char *unit, int n, const char *tail)
{
	size_t len = strlen(head) + strlen(unit) * (size_t)n + strlen(tail) + 1;
	char *s = malloc(len);
	ck_assert_ptr_nonnull(s);
	strcpy(s, head);
	for (int i = 0; i < n; i++)
		strcat(s, unit);
	strcat(s, tail);
	return s;
}

START_TEST(expression_chains)
{
	/* a thousand-long chain of each recursive production is refused with a
	 * message, not a stack overflow (ASan's stack is small enough to show it) */
	struct {
		const char *head, *unit, *tail;
	} chains[] = {{"1", "+1", ""},	   {"x", ".T", ""},	  {"[x]", "[0]", ""},
		      {"", "-", "1"},	   {"", "(", "1"},	  {"x", ".view(10, 4)", ""},
		      {"1", "*1", ""},	   {"", "!", "1"},	  {"1", " ?? 1", ""}};
	for (size_t c = 0; c < sizeof chains / sizeof *chains; c++) {
		char *text = repeat(chains[c].head, chains[c].unit, 1000, chains[c].tail);
		struct ck_xval v;
		struct ck_err err;
		ck_assert_msg(eval_text(text, &v, &err) < 0, "chain %zu accepted", c);
		ck_assert_msg(strstr(err.msg, "nested too deeply"), "chain %zu: %s", c, err.msg);
		free(text);
	}
	/* chains of real length still work, and compute the right value */
	char *sum = repeat("1", "+1", 199, "");
	struct ck_xval v;
	struct ck_err err;
	ck_assert_msg(eval_text(sum, &v, &err) == 0, "%s", err.msg);
	ck_assert_int_eq(v.kind, XV_INT);
	ck_assert_int_eq(v.i, 200);
	free(sum);
	char *tt = repeat("x", ".T", 100, ".shape[0]"); /* an even number of transposes */
	ck_assert_msg(eval_text(tt, &v, &err) == 0, "%s", err.msg);
	ck_assert_int_eq(v.i, 10);
	free(tt);
}
END_TEST

static void expect_int(const char *text, int64_t want)
{
	struct ck_xval v;
	struct ck_err err;
	ck_assert_msg(eval_text(text, &v, &err) == 0, "%s: %s", text, err.msg);
	ck_assert_int_eq(v.kind, XV_INT);
	ck_assert_msg(v.i == want, "%s = %lld, want %lld", text, (long long)v.i, (long long)want);
}

static void expect_error(const char *text, const char *want)
{
	struct ck_xval v;
	struct ck_err err;
	ck_assert_msg(eval_text(text, &v, &err) < 0, "%s accepted", text);
	ck_assert_msg(strstr(err.msg, want), "%s: \"%s\" lacks \"%s\"", text, err.msg, want);
}

START_TEST(overflow)
{
	/* torch: x.split(2**63-1, 0) is one piece holding the whole dim */
	expect_int("len(x.split(9223372036854775807, 0))", 1);
	expect_int("x.split(9223372036854775807, 0)[0].size(0)", 10);
	expect_int("len(x.split(3, 0))", 4);
	expect_int("x.split(3, 0)[3].size(0)", 1);
	expect_int("len(x.chunk(3, 0))", 3);
	/* sizes whose sum wraps around to the dim (2^64 + 10) */
	expect_error("x.split([9223372036854775807, 9223372036854775807, 12], 0)", "split");
	expect_error("x.split([-2, 12], 0)", "split");
	expect_error("x.narrow(0, 9223372036854775807, 9223372036854775807)", "narrow");
	expect_error("x.narrow(0, 2, 9223372036854775807)", "narrow");
	expect_error("9223372036854775807 + 1", "overflow");
	expect_error("-9223372036854775807 - 2", "overflow");
	/* one block of 2^63-1 covers the whole weight: a 1x1 scale */
	expect_int("dequant(x, s, 9223372036854775807).size(0)", 10);
	expect_error("dequant(x, s, 3)", "blocks");
}
END_TEST

/* ---- mapping parsing ---- */

static void mapping_refused(const char *text, const char *want)
{
	struct ck_mapping *m = NULL;
	struct ck_err err;
	ck_assert_msg(ck_mapping_parse(text, strlen(text), "m.json", &m, &err) < 0, "accepted: %s",
		      text);
	ck_assert_msg(strstr(err.msg, want), "\"%s\" lacks \"%s\"", err.msg, want);
	ck_assert_ptr_null(strchr(err.msg, '\n'));
}

START_TEST(mapping_bounds_and_bindings)
{
	/* a spec longer than 8 dims: the count must not be set before the check
	 * (freeing spec[0..9) ran past the array) */
	char spec[512] = "{\"partition\": [{\"match\": \"a\", \"spec\": [";
	for (int d = 0; d < 40; d++)
		strcat(spec, d ? ", \"tp\"" : "\"tp\"");
	strcat(spec, "]}]}");
	mapping_refused(spec, "more than 8 dims");
	/* a name is bound once */
	mapping_refused("{\"rules\": [{\"from\": \"a.{L}.w\", \"to\": \"t.{L}\", \"for\": {\"L\": 1}}]}",
			"\"for\" binds {L}");
	mapping_refused("{\"rules\": [{\"from\": \"a.{L}.{L}\", \"to\": \"t.{L}\"}]}",
			"names capture {L} twice");
	mapping_refused("{\"rules\": [{\"from\": {\"x\": \"a.{L}\"}, \"to\": \"t.{L}\", "
			"\"expr\": \"x\", \"let\": {\"L\": \"1\"}}]}",
			"\"let\" binds \"L\"");
	mapping_refused("{\"rules\": [{\"from\": {\"x\": \"a.{L}\"}, \"to\": \"t.{L}\", "
			"\"expr\": \"x\", \"let\": {\"x\": \"1\"}}]}",
			"\"let\" binds \"x\"");
	mapping_refused("{\"rules\": [{\"from\": \"a.{L}\", \"to\": \"t.{L}\", "
			"\"let\": {\"k\": \"1\", \"k\": \"2\"}}]}",
			"binds \"k\" twice");
	/* "if" is decided before any input is read: naming one crashed the planner */
	mapping_refused("{\"rules\": [{\"from\": \"a\", \"to\": \"t\", \"if\": \"x\"}]}",
			"\"if\" names \"x\"");
	mapping_refused("{\"rules\": [{\"from\": \"a\", \"to\": \"t\", \"if\": \"k > 1\", "
			"\"let\": {\"k\": \"2\"}}]}",
			"\"if\" names \"k\"");
	mapping_refused("{\"rules\": [{\"from\": \"a\", \"to\": \"t{E}\", \"for\": {\"E\": 2}, "
			"\"if\": \"E\", \"expr\": \"x\"}]}",
			"\"if\" names \"E\"");
	mapping_refused("{\"rules\": [{\"drop\": \"a\", \"if\": \"x.size(0)\"}]}",
			"\"if\" names \"x\"");
	mapping_refused("{\"params\": {\"n\": 1, \"n\": 2}}", "param \"n\" given twice");
	mapping_refused("{\"partition\": [{\"match\": \"{a}.{a}\", \"spec\": [\"tp\"]}]}",
			"names capture {a} twice");
	/* on the target side too: a name is bound once */
	mapping_refused("{\"rules\": [{\"from\": \"a.{L}\", \"to\": \"t.{L}.{L}\"}]}",
			"names capture {L} twice");
}
END_TEST

/* ---- key patterns ---- */

/* The reference: the same pattern as an anchored POSIX ERE. */
static void to_regex(const char *pat, char *out, size_t n)
{
	size_t k = 0;
	out[k++] = '^';
	for (const char *s = pat; *s && k + 16 < n;) {
		if ((s[0] == '{' && s[1] == '{') || (s[0] == '}' && s[1] == '}')) {
			k += (size_t)snprintf(out + k, n - k, "\\%c", s[0]);
			s += 2;
		} else if (*s == '{') {
			const char *e = strchr(s, '}');
			const char *colon = memchr(s, ':', (size_t)(e - s));
			const char *re = !colon			     ? "([^.]+)"
					 : !strncmp(colon, ":int", 4) ? "([0-9]+)"
								      : "(.+)";
			k += (size_t)snprintf(out + k, n - k, "%s", re);
			s = e + 1;
		} else {
			if (strchr(".[]()*+?^$|\\{}", *s))
				out[k++] = '\\';
			out[k++] = *s++;
		}
	}
	out[k++] = '$';
	out[k] = '\0';
}

static unsigned long long rng_state = 88172645463325252ull;
static unsigned rnd(unsigned n)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return (unsigned)(rng_state % n);
}

START_TEST(patterns_against_regex)
{
	static const char *const caps[] = {"{a}", "{b:int}", "{c:path}", "{d}", "{e:path}"};
	static const char *const lits[] = {".", "x", ".x.", "1", "..", "a"};
	static const char alphabet[] = "x.1a";
	for (int trial = 0; trial < 20000; trial++) {
		char pat[256] = "", key[64], re[1024];
		int ncap = 1 + (int)rnd(5), first = (int)rnd(5); /* any kind may lead */
		if (rnd(2))
			strcat(pat, lits[rnd(6)]);
		for (int c = 0; c < ncap; c++) {
			strcat(pat, caps[(first + c) % 5]);
			if (c + 1 < ncap || rnd(2))
				strcat(pat, lits[rnd(6)]);
		}
		int klen = (int)rnd(14);
		for (int i = 0; i < klen; i++)
			key[i] = alphabet[rnd(4)];
		key[klen] = '\0';
		struct ck_pattern p;
		struct ck_err err;
		ck_assert_msg(ck_pattern_compile(pat, &p, &err) == 0, "%s: %s", pat, err.msg);
		to_regex(pat, re, sizeof re);
		regex_t rx;
		ck_assert_int_eq(regcomp(&rx, re, REG_EXTENDED | REG_NOSUB), 0);
		int want = regexec(&rx, key, 0, NULL, 0) == 0;
		regfree(&rx);
		struct ck_binding b = {0};
		int got = ck_pattern_match(&p, key, &b);
		ck_assert_msg(got == want, "pattern %s key \"%s\": %d, regex %s says %d", pat, key, got,
			      re, want);
		size_t pos = 0, len = 0;
		ck_assert_int_eq(ck_pattern_match_at(&p, key, NULL, &pos, &len), want);
		if (got == 1) { /* the captures describe the key */
			char *back;
			ck_assert_int_eq(ck_pattern_subst(&p, &b, &back, &err), 0);
			ck_assert_str_eq(back, key);
			free(back);
			for (int c = 0; c < b.n; c++) { /* and lie where match_at says */
				ck_assert_int_eq(
				    ck_pattern_match_at(&p, key, b.name[c], &pos, &len), 1);
				ck_assert_uint_le(pos + len, strlen(key));
				ck_assert_uint_eq(len, strlen(b.val[c]));
				ck_assert_int_eq(memcmp(key + pos, b.val[c], len), 0);
			}
			ck_assert_int_eq(ck_pattern_match_at(&p, key, "z", &pos, &len), 0);
			ck_binding_clear(&b);
		}
		ck_pattern_free(&p);
	}
}
END_TEST

START_TEST(patterns_adversarial)
{
	/* eight path captures against keys of 60, 200 and 2000 bytes that almost
	 * match: exponential backtracking took seconds at 60 bytes and never
	 * ended at 200 */
	const char *pats[] = {
		"{a:path}.{b:path}.{c:path}.{d:path}.{e:path}.{f:path}.{g:path}.{h:path}!",
		"{a:path}x{b:path}x{c:path}x{d:path}x{e:path}x{f:path}x{g:path}x{h:path}y",
		"{a}.{b}.{c}.{d}.{e}.{f}.{g}.{h}", /* segments: must match exactly 8 */
	};
	static const int lens[] = {60, 200, 2000};
	for (size_t k = 0; k < 3; k++)
		for (int li = 0; li < 3; li++) {
			int len = lens[li];
			char *key = malloc((size_t)len + 2);
			for (int i = 0; i < len; i++)
				key[i] = k == 1 ? 'x' : (i % 2 ? '.' : 'x');
			key[len] = '\0';
			struct ck_pattern p;
			struct ck_err err;
			ck_assert_int_eq(ck_pattern_compile(pats[k], &p, &err), 0);
			struct ck_binding b = {0};
			ck_assert_int_eq(ck_pattern_match(&p, key, &b), 0);
			/* and the same key made to match: the longest captures first */
			key[len] = k == 1 ? 'y' : '!';
			key[len + 1] = '\0';
			int r = ck_pattern_match(&p, key, &b);
			ck_assert_int_eq(r, k == 2 ? 0 : 1);
			if (r == 1) {
				ck_assert_int_eq(b.n, 8);
				ck_binding_clear(&b);
			}
			ck_pattern_free(&p);
			free(key);
		}
}
END_TEST

/* ---- quadratic paths at scale ---- */

static char *dir;
static struct ck_catalog *cat;

#define N_GROUPS 200000

/* A safetensors file of N_GROUPS one-element F16 tensors g.I.e.0.w and
 * embed [10, 4] F32 (the format: 8-byte header length, JSON, data). */
static void big_setup(void)
{
	dir = tu_mkdtemp();
	size_t cap = 96u * N_GROUPS + 256, k = 0;
	char *h = malloc(cap);
	k += (size_t)snprintf(h + k, cap - k, "{\"embed\":{\"dtype\":\"F32\",\"shape\":[10,4],"
					      "\"data_offsets\":[0,160]}");
	uint64_t off = 160;
	for (int i = 0; i < N_GROUPS; i++, off += 2)
		k += (size_t)snprintf(h + k, cap - k,
				      ",\"g.%d.e.0.w\":{\"dtype\":\"F16\",\"shape\":[1],"
				      "\"data_offsets\":[%llu,%llu]}",
				      i, (unsigned long long)off, (unsigned long long)off + 2);
	k += (size_t)snprintf(h + k, cap - k, "}");
	while (k % 8)
		h[k++] = ' ';
	size_t total = 8 + k + off;
	unsigned char *img = calloc(1, total);
	for (int b = 0; b < 8; b++)
		img[b] = (unsigned char)((uint64_t)k >> (8 * b));
	memcpy(img + 8, h, k);
	char *p = tu_path(dir, "model.safetensors");
	tu_write(p, img, total);
	free(p);
	free(img);
	free(h);
	struct ck_err err;
	ck_assert_msg(ck_catalog_open(dir, &cat, &err) == 0, "%s", err.msg);
}

static void big_teardown(void)
{
	ck_catalog_free(cat);
	tu_rmtree(dir);
	free(dir);
}

static struct ck_plan *plan_text(const char *text, struct ck_err *err)
{
	struct ck_mapping *m;
	if (ck_mapping_parse(text, strlen(text), "m.json", &m, err) < 0)
		return NULL;
	struct ck_plan *p = NULL;
	ck_plan_build(cat, &m, 1, &p, err);
	ck_mapping_free(m);
	return p;
}

START_TEST(params_200k)
{
	/* every param refers to the first: the lookup scanned all earlier ones */
	size_t cap = 64u * N_GROUPS;
	char *text = malloc(cap);
	size_t k = (size_t)snprintf(text, cap, "{\"unused\": \"drop\", \"params\": {\"p0\": \"10\"");
	for (int i = 1; i < N_GROUPS; i++)
		k += (size_t)snprintf(text + k, cap - k, ", \"p%d\": \"p0 + %d - %d\"", i, i, i);
	snprintf(text + k, cap - k, "}, \"rules\": [{\"from\": \"embed\", \"to\": \"out\", "
				    "\"expr\": \"x.view(p%d, -1)\"}]}",
		 N_GROUPS - 1);
	struct ck_err err;
	struct ck_plan *p = plan_text(text, &err);
	ck_assert_msg(p != NULL, "%s", err.msg);
	ck_assert_int_eq(p->n, 1);
	ck_assert_int_eq(p->t[0].v.shape[0], 10);
	ck_assert_int_eq(p->t[0].v.shape[1], 4);
	ck_plan_free(p);
	free(text);
}
END_TEST

START_TEST(reduce_200k_groups)
{
	const char *text = "{\"unused\": \"keep\", \"rules\": [{\"from\": \"g.{G}.e.{E}.w\", "
			   "\"to\": \"g.{G}.w\", \"reduce\": \"E\", \"expr\": \"stack(x, 0)\"}]}";
	struct ck_err err;
	struct ck_plan *p = plan_text(text, &err);
	ck_assert_msg(p != NULL, "%s", err.msg);
	ck_assert_int_eq(p->n, N_GROUPS + 1);
	size_t stacked = 0;
	for (size_t i = 0; i < p->n; i++)
		if (!strncmp(p->t[i].name, "g.", 2)) {
			ck_assert_int_eq(p->t[i].v.ndim, 2);
			ck_assert_int_eq(p->t[i].v.shape[0], 1);
			stacked++;
		}
	ck_assert_int_eq(stacked, N_GROUPS);
	ck_plan_free(p);
}
END_TEST

START_TEST(cat_growth_bounded)
{
	/* lets that each cat 64 copies of the one before: 10 * 64^11 rows would
	 * overflow the shape and element counts: refused, never wrapped */
	char text[8192];
	size_t k = (size_t)snprintf(text, sizeof text,
				    "{\"unused\": \"drop\", \"rules\": [{\"from\": {\"a0\": "
				    "\"embed\"}, \"to\": \"out\", \"let\": {");
	for (int l = 1; l <= 11; l++) {
		k += (size_t)snprintf(text + k, sizeof text - k, "%s\"a%d\": \"cat([", l > 1 ? ", " : "",
				      l);
		for (int c = 0; c < 64; c++)
			k += (size_t)snprintf(text + k, sizeof text - k, "%sa%d", c ? ", " : "", l - 1);
		k += (size_t)snprintf(text + k, sizeof text - k, "], 0)\"");
	}
	snprintf(text + k, sizeof text - k, "}, \"expr\": \"a11\"}]}");
	struct ck_err err;
	struct ck_plan *p = plan_text(text, &err);
	ck_assert_msg(p == NULL, "a 10 * 64^11-row tensor was planned");
	/* the piece bound stops it first; the shape bound stands behind it */
	ck_assert_msg(strstr(err.msg, "65536 pieces") || strstr(err.msg, "2^56"), "%s", err.msg);
}
END_TEST

/* ---- DCP tiling ---- */

/* Brute force: every element claimed exactly once. */
static int tiles_brute(const struct ck_logical *l, const int64_t (*sizes)[CK_MAX_DIMS])
{
	int64_t n = l->shape[0] * l->shape[1];
	int *claim = calloc((size_t)n, sizeof *claim);
	for (size_t k = 0; k < l->n_chunks; k++) {
		const int64_t *o = l->chunks[k].off;
		if (o[0] + sizes[k][0] > l->shape[0] || o[1] + sizes[k][1] > l->shape[1]) {
			free(claim);
			return 0;
		}
		for (int64_t i = o[0]; i < o[0] + sizes[k][0]; i++)
			for (int64_t j = o[1]; j < o[1] + sizes[k][1]; j++)
				claim[i * l->shape[1] + j]++;
	}
	int ok = 1;
	for (int64_t i = 0; i < n; i++)
		ok &= claim[i] == 1;
	free(claim);
	return ok;
}

START_TEST(dcp_tiling)
{
	/* random 2-D tilings, broken at random, against the brute force */
	for (int trial = 0; trial < 3000; trial++) {
		struct ck_logical l = {.name = "w", .dtype = CK_DT_F32, .ndim = 2};
		l.shape[0] = 1 + rnd(9);
		l.shape[1] = 1 + rnd(9);
		int64_t rows[10], cols[10], nr = 0, nc = 0;
		for (int64_t i = 0; i < l.shape[0]; i += 1 + rnd(3))
			rows[nr++] = i;
		for (int64_t j = 0; j < l.shape[1]; j += 1 + rnd(3))
			cols[nc++] = j;
		static struct ck_chunk ch[128];
		static int64_t sizes[128][CK_MAX_DIMS];
		size_t n = 0;
		for (int a = 0; a < nr; a++)
			for (int b = 0; b < nc; b++, n++) {
				memset(&ch[n], 0, sizeof ch[n]);
				ch[n].off[0] = rows[a];
				ch[n].off[1] = cols[b];
				sizes[n][0] = (a + 1 < nr ? rows[a + 1] : l.shape[0]) - rows[a];
				sizes[n][1] = (b + 1 < nc ? cols[b + 1] : l.shape[1]) - cols[b];
			}
		int how = (int)rnd(4); /* 0: intact, 1: shift, 2: grow, 3: drop */
		size_t v = rnd((unsigned)n);
		if (how == 1)
			ch[v].off[rnd(2)] += rnd(2) ? 1 : -1;
		else if (how == 2)
			sizes[v][rnd(2)] += 1;
		else if (how == 3)
			ch[v] = ch[--n], memcpy(sizes[v], sizes[n], sizeof sizes[v]);
		int neg = ch[v].off[0] < 0 || ch[v].off[1] < 0;
		l.chunks = ch;
		l.n_chunks = n;
		struct ck_err err;
		int want = !neg && tiles_brute(&l, (const int64_t(*)[CK_MAX_DIMS])sizes);
		if (neg)
			continue; /* offsets are read as non-negative: not a case here */
		int got = ck_dcp_check_tiling("t", &l, (const int64_t(*)[CK_MAX_DIMS])sizes, &err) == 0;
		ck_assert_msg(got == want, "trial %d (%d): got %d want %d: %s", trial, how, got, want,
			      got ? "" : err.msg);
	}
	/* 65,536 chunks of one key (a 256 x 256 grid): the pairwise overlap
	 * check took seconds to minutes */
	struct ck_logical l = {.name = "big", .dtype = CK_DT_F32, .ndim = 2, .shape = {1024, 1024}};
	l.n_chunks = 65536;
	l.chunks = calloc(l.n_chunks, sizeof *l.chunks);
	int64_t(*sizes)[CK_MAX_DIMS] = calloc(l.n_chunks, sizeof *sizes);
	for (size_t k = 0; k < l.n_chunks; k++) {
		l.chunks[k].off[0] = (int64_t)(k / 256) * 4;
		l.chunks[k].off[1] = (int64_t)(k % 256) * 4;
		sizes[k][0] = sizes[k][1] = 4;
	}
	struct ck_err err;
	ck_assert_msg(ck_dcp_check_tiling("t", &l, (const int64_t(*)[CK_MAX_DIMS])sizes, &err) == 0,
		      "%s", err.msg);
	l.chunks[65535].off[1] -= 1; /* one chunk shifted: an overlap and a gap */
	ck_assert_int_eq(ck_dcp_check_tiling("t", &l, (const int64_t(*)[CK_MAX_DIMS])sizes, &err),
			 -1);
	ck_assert_msg(strstr(err.msg, "overlap"), "%s", err.msg);
	free(l.chunks);
	free(sizes);
}
END_TEST

/* ---- messages ---- */

START_TEST(messages_escape_controls)
{
	struct ck_err err;
	ck_fail(&err, CK_E_SOURCE, "key \"%s\": bad", "evil\nckptfs: forged\x1b[31mred\x7f");
	ck_assert_ptr_null(strchr(err.msg, '\n'));
	ck_assert_ptr_null(strchr(err.msg, '\x1b'));
	ck_assert_ptr_null(strchr(err.msg, '\x7f'));
	ck_assert_str_eq(err.msg, "key \"evil\\x0ackptfs: forged\\x1b[31mred\\x7f\": bad");
	ck_err_prefix(&err, "in \"%s\"", "a\rb");
	ck_assert_ptr_null(strchr(err.msg, '\r'));
	const char *head = "in \"a\\x0db\": key";
	ck_assert_msg(!strncmp(err.msg, head, strlen(head)), "%s", err.msg);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("hostile");
	TCase *tc = tcase_create("small");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, expression_chains);
	tcase_add_test(tc, overflow);
	tcase_add_test(tc, mapping_bounds_and_bindings);
	tcase_add_test(tc, patterns_against_regex);
	tcase_add_test(tc, patterns_adversarial);
	tcase_add_test(tc, dcp_tiling);
	tcase_add_test(tc, messages_escape_controls);
	suite_add_tcase(s, tc);
	TCase *big = tcase_create("scale");
	tcase_set_timeout(big, 120);
	tcase_add_checked_fixture(big, big_setup, big_teardown);
	tcase_add_test(big, params_200k);
	tcase_add_test(big, reduce_200k_groups);
	tcase_add_test(big, cat_growth_bounded);
	suite_add_tcase(s, big);
	return tu_run_suite(s, 1);
}
