/* ckptfs diff and ckptfs check-mapping: prove a mapping right, or show
 * where it is wrong, without writing a converted copy. */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../exec/compare.h"
#include "../gen/ckgen.h"
#include "../util/jsonw.h"
#include "cli.h"
#include "interrupt.h"
#include "opts.h"

static void put_index(FILE *f, const struct ck_target *t, uint64_t flat)
{
	int64_t idx[CK_MAX_DIMS];
	for (int d = t->v.ndim - 1; d >= 0; d--) {
		uint64_t n = (uint64_t)t->v.shape[d];
		idx[d] = n ? (int64_t)(flat % n) : 0;
		flat = n ? flat / n : 0;
	}
	fputc('[', f);
	for (int d = 0; d < t->v.ndim; d++)
		fprintf(f, "%s%" PRId64, d ? ", " : "", idx[d]);
	fputc(']', f);
}

static void put_shape(FILE *f, const struct ck_target *t)
{
	fputc('[', f);
	for (int d = 0; d < t->v.ndim; d++)
		fprintf(f, "%s%" PRId64, d ? ", " : "", t->v.shape[d]);
	fputc(']', f);
}

static int same_shape(const struct ck_target *a, const struct ck_target *b)
{
	if (a->v.ndim != b->v.ndim)
		return 0;
	for (int d = 0; d < a->v.ndim; d++)
		if (a->v.shape[d] != b->v.shape[d])
			return 0;
	return 1;
}

/* What two views hold in common, and what differs before any value is read. */
struct pairing {
	uint32_t *ia, *ib;
	size_t n;
	size_t only_a, only_b, dtype, shape;
};

static void report_key(int json, int *first, const char *kind, const char *name,
		       const struct ck_target *a, const struct ck_target *b)
{
	if (json) {
		printf("%s\n  {\"kind\": \"%s\", \"key\": ", *first ? "" : ",", kind);
		ck_json_fput_str(stdout, name);
		if (a)
			printf(", \"a_dtype\": \"%s\"", ck_dtype_name(a->v.dtype));
		if (b)
			printf(", \"b_dtype\": \"%s\"", ck_dtype_name(b->v.dtype));
		if (a) {
			printf(", \"a_shape\": ");
			put_shape(stdout, a);
		}
		if (b) {
			printf(", \"b_shape\": ");
			put_shape(stdout, b);
		}
		printf("}");
		*first = 0;
		return;
	}
	printf("%s: ", kind);
	ck_fput_safe(stdout, name);
	const struct ck_target *one = a ? a : b;
	if (!a || !b) {
		printf(" (%s ", ck_dtype_name(one->v.dtype));
		put_shape(stdout, one);
		printf(")\n");
	} else if (!strcmp(kind, "dtype differs")) {
		printf(": A %s, B %s\n", ck_dtype_name(a->v.dtype), ck_dtype_name(b->v.dtype));
	} else {
		printf(": A ");
		put_shape(stdout, a);
		printf(", B ");
		put_shape(stdout, b);
		printf("\n");
	}
}

static int pair_up(const struct ck_plan *a, const struct ck_plan *b, int json, int *first,
		   struct pairing *p, struct ck_err *err)
{
	memset(p, 0, sizeof *p);
	p->ia = malloc((a->n ? a->n : 1) * sizeof *p->ia);
	p->ib = malloc((a->n ? a->n : 1) * sizeof *p->ib);
	if (!p->ia || !p->ib)
		return ck_fail_sys(err, ENOMEM, "diff");
	for (size_t i = 0; i < a->n; i++) {
		const struct ck_target *ta = &a->t[i], *tb = ck_plan_find(b, ta->name);
		if (!tb) {
			report_key(json, first, "only in A", ta->name, ta, NULL);
			p->only_a++;
			continue;
		}
		int dt = ta->v.dtype != tb->v.dtype;
		if (dt) {
			report_key(json, first, "dtype differs", ta->name, ta, tb);
			p->dtype++;
		}
		if (!same_shape(ta, tb)) {
			report_key(json, first, "shape differs", ta->name, ta, tb);
			p->shape++;
			continue;
		}
		if (dt && !ck_cmp_comparable(ta->v.dtype, tb->v.dtype))
			continue;
		p->ia[p->n] = (uint32_t)i;
		p->ib[p->n++] = (uint32_t)(tb - b->t);
	}
	for (size_t i = 0; i < b->n; i++)
		if (!ck_plan_find(a, b->t[i].name)) {
			report_key(json, first, "only in B", b->t[i].name, NULL, &b->t[i]);
			p->only_b++;
		}
	return 0;
}

/* One line (or JSON object) per tensor whose values differ; the count. */
static size_t report_values(const struct ck_plan *a, const struct ck_cmp_report *rep, int json,
			    int *first)
{
	size_t n = 0;
	for (size_t k = 0; k < rep->n; k++) {
		const struct ck_cmp_result *r = &rep->r[k];
		if (!r->n_diff)
			continue;
		n++;
		const struct ck_target *t = &a->t[r->a];
		uint64_t numel = ck_value_numel(&t->v);
		if (json) {
			printf("%s\n  {\"kind\": \"values differ\", \"key\": ", *first ? "" : ",");
			ck_json_fput_str(stdout, t->name);
			printf(", \"differing\": %" PRIu64 ", \"elements\": %" PRIu64
			       ", \"max_abs\": %.17g, \"max_ulp\": ",
			       r->n_diff, numel, isinf(r->max_abs) ? 1e308 : r->max_abs);
			if (r->ulp_valid)
				printf("%" PRIu64, r->max_ulp);
			else
				printf("null");
			printf(", \"first\": ");
			put_index(stdout, t, r->first);
			printf(", \"a\": %.17g, \"b\": %.17g}", isfinite(r->first_a) ? r->first_a : 0,
			       isfinite(r->first_b) ? r->first_b : 0);
			*first = 0;
			continue;
		}
		printf("values differ: ");
		ck_fput_safe(stdout, t->name);
		printf(": %" PRIu64 " of %" PRIu64 " elements (max abs %.6g", r->n_diff, numel,
		       r->max_abs);
		if (r->ulp_valid)
			printf(", max ulp %" PRIu64, r->max_ulp);
		printf("), first at ");
		put_index(stdout, t, r->first);
		printf(": A %.9g, B %.9g\n", r->first_a, r->first_b);
	}
	return n;
}

/* Pair the views' tensors, report what differs before reading, compare the
 * values and report those: returns the number of differences, or -1. */
static long compare_views(const struct ck_plan *a, const struct ck_plan *b,
			  const struct ck_cmp_opts *o, int json, struct pairing *p,
			  struct ck_cmp_report *rep, size_t *values, struct ck_err *err)
{
	int first = 1;
	memset(rep, 0, sizeof *rep);
	if (pair_up(a, b, json, &first, p, err) < 0 ||
	    ck_compare(a, b, p->ia, p->ib, p->n, o, rep, err) < 0)
		return -1;
	*values = report_values(a, rep, json, &first);
	return (long)(p->only_a + p->only_b + p->dtype + p->shape + *values);
}

static void release(struct pairing *p, struct ck_cmp_report *rep, struct ck_view *a,
		    struct ck_view *b)
{
	ck_cmp_report_free(rep);
	free(p->ia);
	free(p->ib);
	ck_view_close(a);
	ck_view_close(b);
}

static int parse_double(const char *s, double *out)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (!*s || *end || errno || !isfinite(v) || v < 0)
		return -1;
	*out = v;
	return 0;
}

enum { D_ATOL = 1, D_RTOL, D_ULP, D_THREADS, D_JSON, D_NO_URING };
static const struct ck_cli_opt diff_opts[] = {
	{D_ATOL, "--atol", "X", "values differ when |a-b| > X + Y*|a| (default 0: exact)"},
	{D_RTOL, "--rtol", "Y", "the relative part of that tolerance (default 0)"},
	{D_ULP, "--ulp", "N", "or when they are more than N units in the last place apart"},
	{D_THREADS, "--threads", "N", "comparison threads, 1..64 (default: one per core)"},
	{D_JSON, "--json", NULL, "one JSON document: every difference and the totals"},
	{D_NO_URING, "--no-uring", NULL, "read with pread, not io_uring"},
	{0, NULL, NULL, NULL},
};

const struct ck_cli_verb ck_verb_diff = {
	"diff", "A B",
	"      compare two checkpoints tensor by tensor (B through the mappings); exit 5\n"
	"      if they differ\n",
	diff_opts, CK_CLI_VIEW_MAPS, NULL, NULL};

/* One option of diff_opts. */
static int diff_opt(int id, const char *name, const char *val, struct ck_cmp_opts *o,
		    struct ck_err *err)
{
	if (id == D_ATOL || id == D_RTOL) {
		if (parse_double(val, id == D_ATOL ? &o->atol : &o->rtol) < 0)
			return ck_fail(err, CK_E_USAGE, "%s: not a non-negative number: %s", name, val);
		return 0;
	}
	if (id == D_ULP || id == D_THREADS) {
		char *end;
		long long v = strtoll(val, &end, 10);
		if (*end || !val[0] || v < 0 || (id == D_THREADS && (v < 1 || v > 64)))
			return ck_fail(err, CK_E_USAGE, "%s: bad value %s", name, val);
		if (id == D_ULP)
			o->ulp = (uint64_t)v;
		else
			o->threads = (int)v;
	}
	o->use_uring &= id != D_NO_URING;
	return 0;
}

int ck_cmd_diff(int argc, char **argv)
{
	const char *pa = NULL, *pb = NULL, *val;
	struct ck_view_args va = {.rank = -1};
	struct ck_cmp_opts o = {.use_uring = 1};
	int json = 0;
	struct ck_err err;
	for (int i = 1, id; (id = ck_cli_next(&ck_verb_diff, argc, argv, &i, &va, &val, &err));) {
		if (id == CK_CLI_ERROR)
			return ck_cli_report(&err);
		if (id == CK_CLI_OPERAND && !pa)
			pa = val;
		else if (id == CK_CLI_OPERAND && !pb)
			pb = val;
		else if (id == CK_CLI_OPERAND)
			return ck_cli_report((ck_fail(&err, CK_E_USAGE, "diff: too many arguments"), &err));
		else if (id > 0 && diff_opt(id, ck_cli_opt_name(diff_opts, id), val, &o, &err) < 0)
			return ck_cli_report(&err);
		json |= id == D_JSON;
	}
	if (!pa || !pb)
		return ck_cli_report((ck_cli_usage_error(&ck_verb_diff, &err), &err));
	struct ck_view_args none = {.rank = -1};
	struct ck_view A, B;
	if (ck_view_open(&A, pa, &none, &err) < 0)
		return ck_cli_report(&err);
	if (ck_view_open(&B, pb, &va, &err) < 0) {
		ck_view_close(&A);
		return ck_cli_report(&err);
	}
	if (json)
		printf("{\"differences\": [");
	struct pairing p;
	struct ck_cmp_report rep;
	size_t nv = 0;
	long total = compare_views(A.plan, B.plan, &o, json, &p, &rep, &nv, &err);
	int rc;
	if (total < 0) {
		rc = ck_cli_report(&err);
	} else {
		if (json)
			printf("\n], \"compared\": %zu, \"bytes_a\": %" PRIu64 ", \"bytes_b\": %" PRIu64
			       ", \"values_differ\": %zu, \"only_in_a\": %zu, \"only_in_b\": %zu, "
			       "\"dtype_differs\": %zu, \"shape_differs\": %zu, \"equal\": %s}\n",
			       p.n, rep.bytes_a, rep.bytes_b, nv, p.only_a, p.only_b, p.dtype, p.shape,
			       total ? "false" : "true");
		else
			printf("diff: %zu tensors compared (%" PRIu64 " bytes in A, %" PRIu64
			       " in B): %zu differ in values, %zu in dtype, %zu in shape; %zu only in "
			       "A, %zu only in B\n",
			       p.n, rep.bytes_a, rep.bytes_b, nv, p.dtype, p.shape, p.only_a, p.only_b);
		rc = total ? 5 : 0;
	}
	release(&p, &rep, &A, &B);
	if (fflush(stdout) != 0 && rc == 0)
		rc = 1;
	return rc;
}

/* --model: a tiny generated checkpoint in a fresh temporary directory. */
static int generate(const char *model, int64_t fp8_block, char *dir, size_t n,
		    struct ck_err *err)
{
	struct ckgen_spec spec;
	if (ckgen_preset(&spec, model, "tiny", err) < 0)
		return -1;
	spec.fp8_block = fp8_block;
	const char *tmp = getenv("TMPDIR");
	snprintf(dir, n, "%s/ckptfs-check-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(dir)) {
		int e = errno;
		ck_fail_sys(err, e, "%s", dir);
		dir[0] = '\0'; /* nothing of ours to remove */
		return -1;
	}
	if (ckgen_write(&spec, dir, err) < 0)
		return -1;
	return 0;
}

static void remove_generated(const char *dir)
{
	DIR *d = opendir(dir); /* the generator writes a flat directory */
	struct dirent *e;
	while (d && (e = readdir(d))) {
		char p[4400];
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
			snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
			unlink(p);
		}
	}
	if (d)
		closedir(d);
	rmdir(dir);
}

/* MAP then INVERSE over the checkpoint at src against src itself. A
 * recorded signal (stop) withholds the verdict. */
static int prove(const char *map, const char *inverse, const char *src, struct ck_view_args *both,
		 const atomic_int *stop)
{
	struct ck_err err;
	struct ck_view_args none = {.rank = -1};
	both->maps[both->n_maps++] = (char *)map;
	both->maps[both->n_maps++] = (char *)inverse;
	struct ck_view A, B;
	if (ck_view_open(&A, src, &none, &err) < 0)
		return ck_cli_report(&err);
	if (ck_view_open(&B, src, both, &err) < 0) {
		ck_view_close(&A);
		return ck_cli_report(&err);
	}
	struct pairing p;
	struct ck_cmp_report rep;
	struct ck_cmp_opts o = {.bytes = 1, .use_uring = 1};
	size_t nv = 0;
	long bad = compare_views(A.plan, B.plan, &o, 0, &p, &rep, &nv, &err);
	int rc;
	if (bad < 0)
		rc = ck_cli_report(&err);
	else if (stop && atomic_load(stop))
		rc = 1;
	else {
		if (bad)
			printf(
			    "check-mapping: %s then %s does NOT reproduce the source: %ld of %zu "
			    "tensors differ\n",
			    map, inverse, bad, A.plan->n);
		else
			printf("check-mapping: %s then %s reproduces all %zu tensors of the source "
			       "byte for byte (%" PRIu64 " bytes)\n",
			       map, inverse, A.plan->n, rep.bytes_a);
		rc = bad ? 5 : 0;
	}
	release(&p, &rep, &A, &B);
	return rc;
}

enum { C_INVERSE = 1, C_MODEL, C_SOURCE, C_FP8_BLOCK, C_SET };
static const struct ck_cli_opt check_opts[] = {
	{C_INVERSE, "--inverse", "MAP2", "the mapping that should undo MAP (required)"},
	{C_MODEL, "--model", "llama|gpt2|mixtral|...", "a tiny generated checkpoint of this model"},
	{C_SOURCE, "--source", "SRC", "or a checkpoint of your own"},
	{C_FP8_BLOCK, "--fp8-block", "B", "--model: FP8 weights with B x B scale blocks (1..4096)"},
	{C_SET, "--set", "NAME=VALUE", "a config.json value as both mappings see it (repeatable)"},
	{0, NULL, NULL, NULL},
};

const struct ck_cli_verb ck_verb_check_mapping = {
	"check-mapping", "MAP",
	"      prove MAP then --inverse MAP2 gives the source (--model or --source)\n"
	"      back byte for byte; exit 5 if not\n",
	check_opts, CK_CLI_VIEW_NONE, NULL, NULL};

int ck_cmd_check_mapping(int argc, char **argv)
{
	const char *map = NULL, *inverse = NULL, *source = NULL, *model = NULL, *val;
	int64_t fp8_block = 0;
	struct ck_err err;
	struct ck_view_args both = {.rank = -1};
	for (int i = 1, id; (id = ck_cli_next(&ck_verb_check_mapping, argc, argv, &i, NULL, &val,
					       &err));) {
		if (id == CK_CLI_ERROR || (id == C_SET && ck_view_add_set(&both, val, &err) < 0))
			return ck_cli_report(&err);
		if (id == CK_CLI_OPERAND && map)
			return ck_cli_report(
				(ck_fail(&err, CK_E_USAGE, "check-mapping: too many arguments"), &err));
		map = id == CK_CLI_OPERAND ? val : map;
		inverse = id == C_INVERSE ? val : inverse;
		model = id == C_MODEL ? val : model;
		source = id == C_SOURCE ? val : source;
		if (id == C_FP8_BLOCK) {
			char *end;
			fp8_block = strtoll(val, &end, 10);
			if (*end || !val[0] || fp8_block < 1 || fp8_block > 4096)
				return ck_cli_report((ck_fail(&err, CK_E_USAGE,
							      "--fp8-block: 1..4096, not %s", val),
						      &err));
		}
	}
	if (!map || !inverse || (!source == !model))
		return ck_cli_report((ck_fail(&err, CK_E_USAGE,
					      "usage: ckptfs check-mapping MAP --inverse MAP2 "
					      "(--model NAME [--fp8-block B] | --source SRC)"),
				      &err));
	/* --model writes a checkpoint to a temporary directory: a signal waits
	 * until it is removed (interrupt.h) */
	struct ck_interrupt intr;
	int watched = model && ck_interrupt_start(&intr) == 0;
	char gen[4096] = "";
	int rc;
	if (model && generate(model, fp8_block, gen, sizeof gen, &err) < 0)
		rc = ck_cli_report(&err);
	else
		rc = prove(map, inverse, model ? gen : source, &both, watched ? &intr.sig : NULL);
	if (gen[0])
		remove_generated(gen);
	int sig = watched ? ck_interrupt_stop(&intr) : 0;
	if (sig) {
		char name[32];
		fprintf(stderr,
			"ckptfs: check-mapping: interrupted by %s: no result (the generated "
			"checkpoint is removed)\n",
			ck_interrupt_name(sig, name, sizeof name));
		return 128 + sig;
	}
	if (fflush(stdout) != 0 && rc == 0)
		rc = 1;
	return rc;
}
