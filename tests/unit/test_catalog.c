/* Opening sources: directories with and without an index, index rules,
 * symlinks (the Hugging Face cache layout), config.json. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/catalog.h"
#include "ckpt/safetensors.h"
#include "util/natsort.h"
#include "util/strpool.h"
#include "testutil.h"

static char *dir;

static void setup(void)
{
	dir = tu_mkdtemp();
}

static void teardown(void)
{
	tu_rmtree(dir);
	free(dir);
}

static void put_st(const char *name, const struct tu_tensor *t, size_t n)
{
	char *p = tu_path(dir, name);
	tu_write_st(p, t, n);
	free(p);
}

static void put_str(const char *name, const char *s)
{
	char *p = tu_path(dir, name);
	tu_write_str(p, s);
	free(p);
}

static const struct tu_tensor A[] = {{"layers.10.w", CK_DT_F32, 2, {3, 4}},
				     {"layers.2.w", CK_DT_BF16, 1, {5}}};
static const struct tu_tensor B[] = {{"embed", CK_DT_F16, 2, {6, 2}},
				     {"layers.9.w", CK_DT_I64, 0, {0}}};

/* Open dir and expect failure with a message containing `want`. */
static void expect_refused(const char *src, const char *want)
{
	struct ck_catalog *cat;
	struct ck_err err;
	ck_assert_int_eq(ck_catalog_open(src, &cat, &err), -1);
	ck_assert_msg(strstr(err.msg, want), "message \"%s\" lacks \"%s\"", err.msg, want);
	ck_assert_int_eq(err.kind, CK_E_SOURCE);
	ck_assert_ptr_null(strchr(err.msg, '\n'));
}

START_TEST(dir_without_index_merges_files)
{
	put_st("a.safetensors", A, 2);
	put_st("b.safetensors", B, 2);
	put_str("notes.txt", "ignored");
	struct ck_catalog *cat;
	struct ck_err err;
	ck_assert_msg(ck_catalog_open(dir, &cat, &err) == 0, "%s", err.msg);
	ck_assert_uint_eq(cat->n_files, 2);
	ck_assert_uint_eq(cat->n_entries, 4);
	const char *order[] = {"embed", "layers.2.w", "layers.9.w", "layers.10.w"};
	for (int i = 0; i < 4; i++)
		ck_assert_str_eq(cat->entries[i].t.name, order[i]);
	const struct ck_catalog_entry *e = ck_catalog_find(cat, "embed");
	ck_assert_ptr_nonnull(e);
	ck_assert_str_eq(cat->files[e->file].name, "b.safetensors");
	ck_assert_uint_eq(e->t.nbytes, 24);
	ck_assert_uint_eq(cat->total_bytes, 48 + 10 + 24 + 8);
	ck_assert_ptr_null(ck_catalog_find(cat, "EMBED"));
	ck_assert_ptr_null(cat->config);
	ck_catalog_free(cat);
}
END_TEST

START_TEST(key_in_two_files_refused)
{
	put_st("a.safetensors", A, 2);
	put_st("c.safetensors", A, 1);
	expect_refused(dir, "key \"layers.10.w\" is in both");
}
END_TEST

/* The name index hashes names ahead of the one it inserts (its slot
 * prefetched): each of many names, from two files, is found by a lookup
 * that hashes it afresh, and a repeat, in another file or the same, is
 * refused. */
START_TEST(index_of_many_names)
{
	enum { N = 120 }; /* tu_write_st writes at most 64 per file */
	static char names[N + 1][16];
	struct tu_tensor t[N + 1];
	for (int i = 0; i <= N; i++) {
		snprintf(names[i], sizeof names[i], "k.%d", i % N);
		t[i] = (struct tu_tensor){names[i], CK_DT_F32, 1, {1 + i % 7}};
	}
	put_st("a.safetensors", t, N / 2);
	put_st("b.safetensors", t + N / 2, N - N / 2);
	struct ck_catalog *cat;
	struct ck_err err;
	ck_assert_msg(ck_catalog_open(dir, &cat, &err) == 0, "%s", err.msg);
	ck_assert_uint_eq(cat->n_entries, N);
	for (int i = 0; i < N; i++) {
		const struct ck_catalog_entry *e = ck_catalog_find(cat, names[i]);
		ck_assert_msg(e && !strcmp(e->t.name, names[i]), "%s", names[i]);
		ck_assert_int_eq(e->t.shape[0], 1 + i % 7);
		ck_assert_str_eq(cat->files[e->file].name,
				 i < N / 2 ? "a.safetensors" : "b.safetensors");
	}
	ck_assert_ptr_null(ck_catalog_find(cat, "k.120"));
	ck_catalog_free(cat);
	/* an index over them, checked with the same look-ahead: accepted as
	 * written, refused with one key (listed late, in JSON order) misplaced */
	static char json[N * 40];
	for (int bad = 0; bad < 2; bad++) {
		int o = snprintf(json, sizeof json, "{\"weight_map\": {");
		for (int i = N - 1; i >= 0; i--)
			o += snprintf(json + o, sizeof json - (size_t)o,
				      "%s\"%s\": \"%s.safetensors\"", i == N - 1 ? "" : ", ", names[i],
				      (i < N / 2) != (bad && i == 3) ? "a" : "b");
		snprintf(json + o, sizeof json - (size_t)o, "}}");
		put_str("model.safetensors.index.json", json);
		if (bad) {
			expect_refused(dir, "key \"k.3\" is listed in b.safetensors but stored in "
					    "a.safetensors");
			continue;
		}
		ck_assert_msg(ck_catalog_open(dir, &cat, &err) == 0, "%s", err.msg);
		ck_assert_uint_eq(cat->n_entries, N);
		ck_catalog_free(cat);
	}
	char *ix = tu_path(dir, "model.safetensors.index.json");
	unlink(ix);
	free(ix);
	/* names[N] is "k.0" again */
	put_st("b.safetensors", t + N / 2, N - N / 2 + 1);
	expect_refused(dir, "key \"k.0\" is in both");
	char *p = tu_path(dir, "b.safetensors");
	unlink(p);
	free(p);
	t[N / 2] = t[N];
	put_st("a.safetensors", t, N / 2 + 1);
	expect_refused(dir, "a.safetensors: duplicate key \"k.0\"");
}
END_TEST

START_TEST(empty_dir_refused)
{
	expect_refused(dir, "no *.safetensors (or torch.save *.bin) files");
}
END_TEST

START_TEST(missing_source_refused)
{
	char *p = tu_path(dir, "nope");
	expect_refused(p, "no such file or directory");
	free(p);
}
END_TEST

static const char *IDX = "{\"metadata\":{\"total_size\":90},\"weight_map\":{"
			 "\"layers.10.w\":\"a.safetensors\",\"layers.2.w\":\"a.safetensors\","
			 "\"embed\":\"b.safetensors\",\"layers.9.w\":\"b.safetensors\"}}";

START_TEST(index_valid)
{
	put_st("a.safetensors", A, 2);
	put_st("b.safetensors", B, 2);
	put_st("stray.safetensors", B, 1); /* not listed: not part of the source */
	put_str("model.safetensors.index.json", IDX);
	struct ck_catalog *cat;
	struct ck_err err;
	ck_assert_msg(ck_catalog_open(dir, &cat, &err) == 0, "%s", err.msg);
	ck_assert_uint_eq(cat->n_files, 2);
	ck_assert_uint_eq(cat->n_entries, 4);
	ck_catalog_free(cat);
}
END_TEST

static void with_index(const char *json, const char *want)
{
	put_st("a.safetensors", A, 2);
	put_st("b.safetensors", B, 2);
	put_str("model.safetensors.index.json", json);
	expect_refused(dir, want);
}

START_TEST(index_rules)
{
	with_index("{\"weight_map\":{\"embed\":\"sub/b.safetensors\"}}", "not a plain file name");
	with_index("{\"weight_map\":{\"embed\":\"..\"}}", "not a plain file name");
	with_index("{\"weight_map\":{\"embed\":\"/etc/passwd\"}}", "not a plain file name");
	with_index("{\"weight_map\":{\"embed\":\"\"}}", "not a plain file name");
	with_index("{\"weight_map\":{\"embed\":\"gone.safetensors\"}}", "file does not exist");
	with_index("{\"weight_map\":{\"embed\":7}}", "is not a string");
	with_index("{\"metadata\":{}}", "no \"weight_map\"");
	with_index("{\"weight_map\":[]}", "\"weight_map\" is not an object");
	with_index("{\"weight_map\":{}}", "weight_map is empty");
	with_index("{\"weight_map\":{\"embed\":\"b.safetensors\"", "invalid JSON");
	with_index("[]", "not a JSON object");
	with_index("{\"weight_map\":{\"embed\":\"b.safetensors\",\"embed\":\"b.safetensors\"}}",
		   "listed twice");
	/* listed key absent from its file */
	with_index("{\"weight_map\":{\"embed\":\"b.safetensors\",\"ghost\":\"b.safetensors\","
		   "\"layers.9.w\":\"b.safetensors\"}}",
		   "key \"ghost\" is listed in b.safetensors but not in it");
	/* key of a listed file not listed */
	with_index("{\"weight_map\":{\"embed\":\"b.safetensors\"}}",
		   "key \"layers.9.w\" in b.safetensors is not listed in the index");
	/* key listed under the wrong file */
	with_index("{\"weight_map\":{\"embed\":\"a.safetensors\",\"layers.9.w\":\"b.safetensors\","
		   "\"layers.10.w\":\"a.safetensors\",\"layers.2.w\":\"a.safetensors\"}}",
		   "key \"embed\" is listed in a.safetensors but stored in b.safetensors");
}
END_TEST

/* The index is read in one pass without a tree: every JSON number form and
 * value kind is skipped in "metadata", escapes in keys are decoded, and
 * malformed numbers, deep nesting and a second weight_map are refused. */
#define WM "\"weight_map\":{\"layers.10.w\":\"a.safetensors\",\"layers.2.w\":\"a.safetensors\"," \
	   "\"emb\\u0065d\":\"b.safetensors\",\"layers.9.w\":\"b.safetensors\"}"

static void index_opens(const char *json, size_t want_entries)
{
	put_st("a.safetensors", A, 2);
	put_st("b.safetensors", B, 2);
	put_str("model.safetensors.index.json", json);
	struct ck_catalog *cat;
	struct ck_err err;
	ck_assert_msg(ck_catalog_open(dir, &cat, &err) == 0, "%s: %s", json, err.msg);
	ck_assert_uint_eq(cat->n_entries, want_entries);
	uint32_t i;
	ck_assert_int_eq(ck_strmap_get(&cat->by_name, "embed", &i), 0); /* \u0065 is 'e' */
	ck_catalog_free(cat);
}

START_TEST(index_streaming_reader)
{
	index_opens("{\"metadata\":{\"total_size\":1.5e3,\"x\":[true,false,null,-0.25E+2,0,{},[]],"
		    "\"s\":\"q\\\"\\u00e9\"}," WM ",\"extra\":{\"a\":[1,{\"b\":null}]}}",
		    4);
	index_opens(" { " WM " , \"metadata\" : { } } \n", 4);
	/* numbers beyond any integer or double are skipped by their grammar
	 * alone: no arithmetic, so nothing overflows and nothing is refused */
	index_opens("{\"metadata\":{\"total_size\":99999999999999999999999999999,\"a\":-1e999,"
		    "\"b\":1E+99999999999999999999,\"c\":-0.0000000000000000000001e-999,"
		    "\"d\":[18446744073709551616,-9223372036854775809]}," WM "}",
		    4);
	static const char *const bad_num[] = {"01", "1.", "-", ".5", "1e", "1e+", "+1", "0x10", "NaN",
					      "Infinity", "tru", "nul"};
	for (size_t k = 0; k < sizeof bad_num / sizeof *bad_num; k++) {
		char json[512];
		snprintf(json, sizeof json, "{\"metadata\":{\"total_size\":%s}," WM "}", bad_num[k]);
		with_index(json, "invalid JSON");
	}
	char deep[3000] = "{\"metadata\":";
	size_t at = strlen(deep);
	for (int d = 0; d < 1100; d++)
		deep[at++] = '[';
	deep[at] = '\0';
	with_index(deep, "invalid JSON");
	with_index("{" WM "," WM "}", "duplicate \"weight_map\"");
	with_index("{" WM "} {}", "trailing data");
	with_index("{" WM ",}", "invalid JSON");
	with_index("{\"weight_map\":{\"embed\" \"b.safetensors\"}}", "invalid JSON");
	with_index("{\"weight_map\":{\"embed\":[\"b.safetensors\"]}}", "is not a string");
	with_index("{\"weight_map\":7}", "\"weight_map\" is not an object");
	with_index("", "invalid JSON");
}
END_TEST

/* snapshots/REV/x.safetensors are symlinks into ../../blobs/ */
START_TEST(hf_cache_symlinks_followed)
{
	char *blobs = tu_path(dir, "blobs"), *snaps = tu_path(dir, "snapshots");
	char *rev = tu_path(snaps, "0123abcd");
	ck_assert_int_eq(mkdir(blobs, 0755), 0);
	ck_assert_int_eq(mkdir(snaps, 0755), 0);
	ck_assert_int_eq(mkdir(rev, 0755), 0);
	char *b1 = tu_path(blobs, "9f86d081884c7d65"), *b2 = tu_path(blobs, "60303ae22b998861");
	char *b3 = tu_path(blobs, "fd61a03af4f77d87");
	tu_write_st(b1, A, 2);
	tu_write_st(b2, B, 2);
	tu_write_str(b3, IDX);
	const char *links[][2] = {{"../../blobs/9f86d081884c7d65", "a.safetensors"},
				  {"../../blobs/60303ae22b998861", "b.safetensors"},
				  {"../../blobs/fd61a03af4f77d87", "model.safetensors.index.json"}};
	for (int i = 0; i < 3; i++) {
		char *l = tu_path(rev, links[i][1]);
		ck_assert_int_eq(symlink(links[i][0], l), 0);
		free(l);
	}
	struct ck_catalog *cat;
	struct ck_err err;
	ck_assert_msg(ck_catalog_open(rev, &cat, &err) == 0, "%s", err.msg);
	ck_assert_uint_eq(cat->n_entries, 4);
	ck_catalog_free(cat);
	free(b1), free(b2), free(b3), free(blobs), free(snaps), free(rev);
}
END_TEST

START_TEST(non_regular_refused)
{
	put_st("a.safetensors", A, 2);
	char *sub = tu_path(dir, "sub"), *l = tu_path(dir, "z.safetensors");
	ck_assert_int_eq(mkdir(sub, 0755), 0);
	ck_assert_int_eq(symlink("sub", l), 0); /* a link to a directory */
	expect_refused(dir, "z.safetensors: not a regular file");
	unlink(l);
	ck_assert_int_eq(mkfifo(l, 0644), 0); /* must not block on open */
	expect_refused(dir, "z.safetensors: not a regular file");
	unlink(l);
	ck_assert_int_eq(symlink("missing-target", l), 0);
	expect_refused(dir, "z.safetensors: file does not exist");
	free(sub);
	free(l);
}
END_TEST

START_TEST(config_loaded_and_validated)
{
	put_st("model.safetensors", A, 2);
	put_str("config.json", "{\"hidden_size\": 64, \"text_config\": {\"head_dim\": 16}}");
	struct ck_catalog *cat;
	struct ck_err err;
	char *file = tu_path(dir, "model.safetensors");
	ck_assert_msg(ck_catalog_open(file, &cat, &err) == 0, "%s", err.msg);
	ck_assert_ptr_nonnull(cat->config);
	ck_assert_int_eq(cJSON_GetObjectItemCaseSensitive(cat->config, "hidden_size")->valueint,
			 64);
	ck_catalog_free(cat);
	put_str("config.json", "{\"hidden_size\": 64,}");
	expect_refused(file, "config.json: invalid JSON");
	put_str("config.json", "[1]");
	expect_refused(dir, "config.json: not a JSON object");
	free(file);
}
END_TEST

START_TEST(natural_order)
{
	ck_assert_int_lt(ck_natural_cmp("layers.2.w", "layers.10.w"), 0);
	ck_assert_int_gt(ck_natural_cmp("layers.10", "layers.9"), 0);
	ck_assert_int_eq(ck_natural_cmp("a.007", "a.7"), 0); /* ties broken by strcmp */
	ck_assert_int_lt(ck_natural_cmp("a", "a.0"), 0);
	ck_assert_int_lt(ck_natural_cmp("A", "a"), 0);
}
END_TEST

struct named {
	char name[48];
	int payload; /* moves with its name */
};

static const char *named_name(const void *r)
{
	return ((const struct named *)r)->name;
}

/* the order ck_natural_sort must give: natural, ties by bytes */
static int natural_ref(const char *a, const char *b)
{
	int c = ck_natural_cmp(a, b);
	return c ? c : strcmp(a, b);
}

static int cmp_named_ref(const void *x, const void *y)
{
	return natural_ref(((const struct named *)x)->name, ((const struct named *)y)->name);
}

/* a as sorted by ck_natural_sort, b by qsort with the reference comparator:
 * the same names, and each record with its payload */
static void same_order(const struct named *a, const struct named *b, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		ck_assert_str_eq(a[i].name, b[i].name);
		if ((i && !strcmp(a[i].name, a[i - 1].name)) ||
		    (i + 1 < n && !strcmp(a[i].name, a[i + 1].name)))
			continue; /* equal names: either payload order */
		ck_assert_int_eq(a[i].payload, b[i].payload);
	}
}

/* The encoded sort against qsort with the comparator, on names built to hit
 * the edges: digit runs with leading zeros, runs longer than 8 digits, runs
 * next to letters, dots and bytes above 0x7f, prefixes of each other, names
 * up to 39 bytes with digits from rare (runs of letters longer than the
 * encoder's 8-byte words, digits at every place in a word) to most bytes. */
START_TEST(natural_sort_matches_comparator)
{
	static const char digits[] = {'0', '0', '1', '7', '9', '5'};
	static const char other[] = {'a', 'z', '.', '_', (char)0xc3, '/', 'A'};
	static const unsigned digit_in_100[] = {3, 20, 40, 70};
	unsigned seed = 12345;
	for (int round = 0; round < 400; round++) {
		size_t n = 1 + (size_t)(round * 7 % 300);
		struct named *a = calloc(n, sizeof *a), *b = calloc(n, sizeof *b);
		ck_assert_ptr_nonnull(a);
		ck_assert_ptr_nonnull(b);
		for (size_t i = 0; i < n; i++) {
			seed = seed * 1103515245u + 12345u;
			int len = (int)(seed >> 16) % 40;
			for (int k = 0; k < len; k++) {
				seed = seed * 1103515245u + 12345u;
				unsigned r = seed >> 16;
				a[i].name[k] = r % 100 < digit_in_100[round % 4]
						       ? digits[(r / 100) % sizeof digits]
						       : other[(r / 100) % sizeof other];
			}
			if (i > 0 && seed % 5 == 0) /* a prefix of an earlier name */
				memcpy(a[i].name, a[i - 1].name, (size_t)len), a[i].name[len / 2] = 0;
			if (round % 5 == 4) { /* keys: long shared prefixes, numbers in them */
				static const char *const pre[] = {"l.", "layers.", "model.layers.",
								  "model.decoder.layers."};
				unsigned r = seed >> 8;
				snprintf(a[i].name, sizeof a[i].name, "%s%0*u.mlp.%u.w",
					 pre[r % 4], (int)(r / 4 % 4), r / 16 % 1200, r / 19200 % 30);
			}
			a[i].payload = (int)i;
		}
		memcpy(b, a, n * sizeof *a);
		qsort(b, n, sizeof *b, cmp_named_ref);
		ck_natural_sort(a, n, sizeof *a, named_name);
		same_order(a, b, n);
		free(a);
		free(b);
	}
}
END_TEST

/* Records that arrive as ascending runs are merged run by run: run counts
 * from one to every record (runs of 3 here; 1024 was once a limit). */
START_TEST(natural_sort_of_runs)
{
	static const size_t runs[] = {1, 2, 3, 17, 1023, 1024, 1025, 3000};
	for (size_t ri = 0; ri < sizeof runs / sizeof *runs; ri++) {
		size_t k = runs[ri], n = k * 3;
		struct named *a = calloc(n, sizeof *a), *b = calloc(n, sizeof *b);
		ck_assert_ptr_nonnull(a);
		ck_assert_ptr_nonnull(b);
		for (size_t i = 0; i < n; i++) { /* k runs of 3 */
			size_t run = i / 3, at = i % 3;
			/* each run ascends (l.K-R, l.2K-R, l.3K-R), the next one
			 * starts below where this one ended */
			snprintf(a[i].name, sizeof a[i].name, "l.%zu.%c", (k - run % k) + at * k,
				 (char)('a' + (int)(run % 3)));
			a[i].payload = (int)i;
		}
		memcpy(b, a, n * sizeof *a);
		qsort(b, n, sizeof *b, cmp_named_ref);
		ck_natural_sort(a, n, sizeof *a, named_name);
		same_order(a, b, n);
		free(a);
		free(b);
	}
}
END_TEST

static const char *ptr_name(const void *r)
{
	return *(char *const *)r;
}

static int cmp_ptr_ref(const void *x, const void *y)
{
	return natural_ref(*(char *const *)x, *(char *const *)y);
}

/* Numbers of every length around the encoding's one-byte and two-byte
 * length limits (255 digits, 255 * 255), with leading zeros, all nines and
 * a one then zeros: sorted as the comparator orders them. */
START_TEST(natural_sort_long_numbers)
{
	static const size_t lens[] = {1, 2, 8, 9, 253, 254, 255, 256, 300, 509, 510, 511, 65025, 65026};
	enum { NL = sizeof lens / sizeof *lens, PER = 4 };
	char *a[NL * PER], *b[NL * PER];
	size_t n = 0;
	for (size_t l = 0; l < NL; l++)
		for (int kind = 0; kind < PER; kind++, n++) {
			char *nm = malloc(lens[l] + 8);
			ck_assert_ptr_nonnull(nm);
			memcpy(nm, "k.", 2);
			memset(nm + 2, kind == 1 ? '9' : '0', lens[l]);
			if (kind == 0 || kind == 3)
				nm[2] = '1'; /* 10...0 */
			if (kind == 3)
				nm[2 + lens[l] - 1] = '7'; /* 10...7 */
			if (kind == 2)
				nm[2 + lens[l] - 1] = '5'; /* 0...05: the number 5 */
			memcpy(nm + 2 + lens[l], ".w", 3);
			a[(n * 5) % (NL * PER)] = nm; /* shuffled */
		}
	memcpy(b, a, sizeof a);
	qsort(b, n, sizeof *b, cmp_ptr_ref);
	ck_natural_sort(a, n, sizeof *a, ptr_name);
	for (size_t i = 0; i < n; i++)
		ck_assert_str_eq(a[i], b[i]);
	for (size_t i = 0; i < n; i++)
		free(a[i]);
}
END_TEST

/* On threads: names that arrive as runs of every length (one record to
 * thousands), with repeats and leading zeros, sorted on 1..6 threads, each
 * against qsort with the reference comparator. 40,000 records: merges long
 * enough to be cut into pieces at their co-ranks, so every thread count
 * splits the last merges differently; ties must stay in input order. */
START_TEST(natural_sort_on_threads)
{
	size_t n = 40000;
	struct named *in = calloc(n, sizeof *in), *a = calloc(n, sizeof *a),
		     *b = calloc(n, sizeof *b);
	ck_assert_ptr_nonnull(in);
	ck_assert_ptr_nonnull(a);
	ck_assert_ptr_nonnull(b);
	unsigned seed = 777;
	size_t run_left = 0, base = 0;
	for (size_t i = 0; i < n; i++) {
		seed = seed * 1103515245u + 12345u;
		if (!run_left) { /* a new ascending run, of 1 to ~8000 records */
			run_left = 1 + (seed >> 8) % (i % 3 ? 40 : 8000);
			base = (seed >> 4) % 5000;
		}
		run_left--;
		base += (seed >> 20) % 3; /* steps of 0: repeated names */
		snprintf(in[i].name, sizeof in[i].name, "l.%s%zu.%c", seed % 7 ? "" : "0", base,
			 (char)('a' + (int)((seed >> 12) % 2)));
		in[i].payload = (int)i;
	}
	memcpy(b, in, n * sizeof *in);
	qsort(b, n, sizeof *b, cmp_named_ref);
	for (int threads = 1; threads <= 6; threads++) {
		memcpy(a, in, n * sizeof *in);
		ck_natural_sort_threads(a, n, sizeof *a, named_name, threads);
		same_order(a, b, n);
		for (size_t i = 1; i < n; i++) /* ties: a stable sort keeps input order */
			if (!strcmp(a[i].name, a[i - 1].name))
				ck_assert_int_lt(a[i - 1].payload, a[i].payload);
	}
	free(in);
	free(a);
	free(b);
}
END_TEST

/* Two catalogs of the same source: the same files, entries and format. */
static void same_catalog(const struct ck_catalog *a, const struct ck_catalog *b)
{
	ck_assert_uint_eq(a->n_files, b->n_files);
	for (size_t i = 0; i < a->n_files; i++) {
		ck_assert_str_eq(a->files[i].name, b->files[i].name);
		ck_assert_uint_eq(a->files[i].size, b->files[i].size);
		ck_assert_uint_eq(a->files[i].header_len, b->files[i].header_len);
	}
	ck_assert_uint_eq(a->n_entries, b->n_entries);
	for (size_t i = 0; i < a->n_entries; i++) {
		const struct ck_catalog_entry *x = &a->entries[i], *y = &b->entries[i];
		ck_assert_str_eq(x->t.name, y->t.name);
		ck_assert_uint_eq(x->file, y->file);
		ck_assert_uint_eq(x->t.offset, y->t.offset);
		ck_assert_uint_eq(x->t.nbytes, y->t.nbytes);
		ck_assert_int_eq(x->t.dtype, y->t.dtype);
	}
	ck_assert_str_eq(a->format, b->format);
	ck_assert_uint_eq(a->total_bytes, b->total_bytes);
}

#define SHARDS 12

/* shard i of SHARDS: three tensors of its own */
static void put_shard(int i)
{
	char n[3][24], file[40];
	for (int k = 0; k < 3; k++)
		snprintf(n[k], sizeof n[k], "layers.%d.w%d", i, k);
	const struct tu_tensor t[3] = {{n[0], CK_DT_F32, 2, {i + 1, 3}},
				       {n[1], CK_DT_BF16, 1, {7}},
				       {n[2], CK_DT_U8, 0, {0}}};
	snprintf(file, sizeof file, "s%02d.safetensors", i);
	put_st(file, t, 3);
}

static char *shard_path(int i)
{
	char file[40];
	snprintf(file, sizeof file, "s%02d.safetensors", i);
	return tu_path(dir, file);
}

/* Ways a shard can be broken, each refused by a different check (open,
 * stat, the format sniff, the header parse, a key in two files). */
static void break_shard(int i, int how)
{
	char *p = shard_path(i);
	remove(p); /* a file, or the directory an earlier break made */
	switch (how) {
	case 0: { /* a header cut short */
		static const char cut[] = "\x13\0\0\0\0\0\0\0{\"x\":{\"dtype\":\"F32\"";
		tu_write(p, cut, sizeof cut - 1);
		break;
	}
	case 1:
		ck_assert_int_eq(mkfifo(p, 0600), 0);
		break;
	case 2:
		ck_assert_int_eq(symlink("nowhere.safetensors", p), 0);
		break;
	case 3: {
		static const char npy[] = "\x93NUMPY\x01\x00 not a checkpoint, an array";
		tu_write(p, npy, sizeof npy - 1);
		break;
	}
	case 4: /* a directory under the name */
		ck_assert_int_eq(mkdir(p, 0700), 0);
		break;
	default: { /* a key of shard 0 again */
		const struct tu_tensor t[1] = {{"layers.0.w1", CK_DT_BF16, 1, {7}}};
		tu_write_st(p, t, 1);
	}
	}
	free(p);
}

/* Opening a directory of shards with its headers read on threads gives the
 * catalog of reading them one by one, and a broken directory the same
 * error (the first broken file in order): directories with 0, 1 and 2
 * broken shards in every way, with and without an index. */
START_TEST(headers_on_threads_read_as_in_order)
{
	unsigned seed = 99;
	for (int round = 0; round < 40; round++) {
		tu_rmtree(dir);
		ck_assert_int_eq(mkdir(dir, 0700), 0);
		for (int i = 0; i < SHARDS; i++)
			put_shard(i);
		if (round % 2) { /* an index that lists every shard's keys */
			char idx[8192];
			size_t o = (size_t)snprintf(idx, sizeof idx, "{\"weight_map\":{");
			for (int i = 0; i < SHARDS; i++)
				for (int k = 0; k < 3; k++)
					o += (size_t)snprintf(idx + o, sizeof idx - o,
							      "%s\"layers.%d.w%d\":\"s%02d.safetensors\"",
							      i || k ? "," : "", i, k, i);
			snprintf(idx + o, sizeof idx - o, "}}");
			put_str("model.safetensors.index.json", idx);
		}
		int broken = round < 2 ? 0 : 1 + (int)(rand_r(&seed) % 2);
		for (int b = 0; b < broken; b++)
			break_shard(1 + (int)(rand_r(&seed) % (SHARDS - 1)), rand_r(&seed) % 6);
		struct ck_catalog *one, *many;
		struct ck_err e1, e2;
		int r1 = ck_catalog_open_threads(dir, 1, &one, &e1);
		for (int threads = 2; threads <= 8; threads *= 2) {
			int r2 = ck_catalog_open_threads(dir, threads, &many, &e2);
			ck_assert_msg(r1 == r2, "round %d, %d threads: %s / %s", round, threads,
				      r1 ? e1.msg : "ok", r2 ? e2.msg : "ok");
			if (r1 == 0) {
				same_catalog(one, many);
				ck_catalog_free(many);
			} else {
				ck_assert_str_eq(e1.msg, e2.msg);
			}
		}
		ck_assert_msg((r1 == 0) == (broken == 0), "round %d: %s", round, r1 ? e1.msg : "ok");
		if (r1 == 0)
			ck_catalog_free(one);
	}
}
END_TEST

/* Out of file descriptors: threads that opened later files must not take
 * the descriptors an earlier file would have had, so the file named is the
 * one that fails in order, every time. */
START_TEST(out_of_descriptors_names_the_file_in_order)
{
	for (int i = 0; i < 700; i++) /* past the fd table's growth at 256 and 512 */
		put_shard(i);
	struct rlimit was;
	ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &was), 0);
	struct rlimit low = {600, was.rlim_max};
	ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &low), 0);
	struct ck_catalog *cat;
	struct ck_err want, got;
	ck_assert_int_eq(ck_catalog_open_threads(dir, 1, &cat, &want), -1);
	ck_assert_msg(strstr(want.msg, "Too many open files"), "%s", want.msg);
	for (int round = 0; round < 30; round++) {
		ck_assert_int_eq(ck_catalog_open_threads(dir, 8, &cat, &got), -1);
		ck_assert_str_eq(got.msg, want.msg);
	}
	ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &was), 0);
}
END_TEST

/* A shard whose header is larger than threads read (16 MiB: a 17 MiB
 * metadata string) is read in order among shards read on threads: the same
 * catalog; cut short, the same error. */
START_TEST(large_header_among_shards)
{
	for (int i = 0; i < SHARDS; i++)
		put_shard(i);
	size_t pad = 17u << 20;
	const char *entry = "},\"big.w\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}";
	size_t json = strlen("{\"__metadata__\":{\"pad\":\"") + pad + 1 + strlen(entry);
	unsigned char *img = malloc(8 + json + 2);
	ck_assert_ptr_nonnull(img);
	for (int b = 0; b < 8; b++)
		img[b] = (unsigned char)((uint64_t)json >> (8 * b));
	size_t o = 8;
	o += (size_t)sprintf((char *)img + o, "{\"__metadata__\":{\"pad\":\"");
	memset(img + o, 'p', pad);
	o += pad;
	img[o++] = '"';
	memcpy(img + o, entry, strlen(entry));
	o += strlen(entry);
	img[o++] = 1, img[o++] = 2;
	char *big = tu_path(dir, "s05b.safetensors");
	for (int cut = 0; cut < 2; cut++) {
		tu_write(big, img, cut ? o - 20 : o); /* cut: the header runs past the end */
		struct ck_catalog *one, *many;
		struct ck_err e1, e2;
		int r1 = ck_catalog_open_threads(dir, 1, &one, &e1);
		int r2 = ck_catalog_open_threads(dir, 4, &many, &e2);
		ck_assert_int_eq(r1, cut ? -1 : 0);
		ck_assert_int_eq(r2, r1);
		if (cut) {
			ck_assert_str_eq(e1.msg, e2.msg);
			continue;
		}
		ck_assert_ptr_nonnull(ck_catalog_find(many, "big.w"));
		same_catalog(one, many);
		ck_catalog_free(one);
		ck_catalog_free(many);
	}
	free(big);
	free(img);
}
END_TEST

/* The string pool keeps every string as given: across blocks, at and past
 * a block's size (a string of its own block), and after its blocks moved
 * to another pool. A string written over by a later one fails. */
START_TEST(strpool_keeps_every_string)
{
	enum { N = 3000, SRC = 300000 };
	char *src = malloc(SRC);
	ck_assert_ptr_nonnull(src);
	for (size_t i = 0; i < SRC; i++)
		src[i] = (char)('a' + i * 7 % 26);
	static const size_t edge[] = {65534, 65535, 65536, 65537, 0, 1, 200000};
	struct ck_strpool a = {0}, b = {0};
	const char **got = malloc(N * sizeof *got);
	size_t *off = malloc(N * sizeof *off), *len = malloc(N * sizeof *len);
	ck_assert(got && off && len);
	unsigned seed = 99;
	for (int i = 0; i < N; i++) {
		len[i] = i % 400 == 5 ? edge[i / 400 % 7] : (size_t)rand_r(&seed) % 300;
		off[i] = (size_t)rand_r(&seed) % (SRC - len[i]);
		got[i] = ck_strpool_add(i % 3 ? &a : &b, src + off[i], len[i]);
		ck_assert_ptr_nonnull(got[i]);
	}
	size_t blocks = a.n + b.n;
	ck_assert_int_eq(ck_strpool_take(&a, &b), 0);
	ck_assert_uint_eq(a.n, blocks);
	ck_assert_uint_eq(b.n, 0);
	ck_assert_ptr_null(b.blocks);
	ck_assert_int_eq(ck_strpool_take(&a, &b), 0); /* an empty pool moves nothing */
	ck_assert_uint_eq(a.n, blocks);
	ck_assert_ptr_nonnull(ck_strpool_add(&b, "after", 5)); /* b is a pool again */
	for (int i = 0; i < N; i++)
		ck_assert_msg(!memcmp(got[i], src + off[i], len[i]) && got[i][len[i]] == '\0',
			      "string %d (%zu bytes)", i, len[i]);
	ck_assert_str_eq(b.blocks[0], "after");
	/* a block filled to its last byte, then one string more; a string one
	 * byte too long for what is left (its NUL would land past the block) */
	struct ck_strpool c = {0};
	const char *x = ck_strpool_add(&c, src, 100);
	const char *y = ck_strpool_add(&c, src + 1, CK_STRPOOL_BLOCK - 101 - 1);
	const char *z = ck_strpool_add(&c, src, 0);
	ck_assert(x && y && z && c.n == 2 && c.left == CK_STRPOOL_BLOCK - 1);
	const char *u = ck_strpool_add(&c, src + 2, c.left);
	ck_assert(u && c.n == 3 && !memcmp(u, src + 2, CK_STRPOOL_BLOCK - 1));
	ck_assert(!memcmp(x, src, 100) && !x[100] && !memcmp(y, src + 1, CK_STRPOOL_BLOCK - 102));
	ck_assert(!y[CK_STRPOOL_BLOCK - 102] && !z[0] && !u[CK_STRPOOL_BLOCK - 1]);
	ck_strpool_free(&c);
	ck_strpool_free(&a);
	ck_strpool_free(&b);
	ck_assert_uint_eq(a.n, 0);
	free(got);
	free(off);
	free(len);
	free(src);
}
END_TEST

/* A safetensors header's names live in a pool the catalog takes; another
 * reader's tensors own theirs. Both kinds in one catalog, in either order
 * (the first file's records become the entries): every name found, each
 * freed once (freeing a pooled name aborts, and ASan sees a leak). */
START_TEST(pooled_and_owned_names_in_one_catalog)
{
	put_st("p.safetensors", A, 2);
	char *path = tu_path(dir, "p.safetensors");
	size_t len;
	unsigned char *img = tu_read(path, &len);
	for (int pooled_first = 0; pooled_first < 2; pooled_first++) {
		struct ck_catalog *cat = calloc(1, sizeof *cat);
		ck_assert_ptr_nonnull(cat);
		cat->files = calloc(2, sizeof *cat->files);
		cat->files[0].fd = cat->files[1].fd = -1;
		cat->n_files = 2;
		struct ck_file_tensors st, own = {0};
		struct ck_err err;
		ck_assert_int_eq(ck_st_parse_buffer(img, len, "p", &st, &err), 0);
		ck_assert_uint_gt(st.names.n, 0);
		own.n_tensors = 2;
		own.tensors = calloc(2, sizeof *own.tensors);
		own.tensors[0] = (struct ck_tensor_info){.name = strdup("own.1"), .dtype = CK_DT_U8};
		own.tensors[1] = (struct ck_tensor_info){.name = strdup("own.0"), .dtype = CK_DT_U8};
		struct ck_file_tensors *first = pooled_first ? &st : &own;
		struct ck_file_tensors *second = pooled_first ? &own : &st;
		ck_assert_int_eq(ck_catalog_add_entries(cat, first, 0, &err), 0);
		ck_assert_int_eq(ck_catalog_add_entries(cat, second, 1, &err), 0);
		ck_file_tensors_free(&st);
		ck_file_tensors_free(&own);
		ck_assert_int_eq(ck_catalog_index(cat, &err), 0);
		ck_assert_uint_eq(cat->n_entries, 4);
		const char *names[] = {"layers.10.w", "layers.2.w", "own.0", "own.1"};
		for (int k = 0; k < 4; k++) {
			const struct ck_catalog_entry *e = ck_catalog_find(cat, names[k]);
			ck_assert_msg(e != NULL, "%s", names[k]);
			ck_assert_uint_eq(e->pooled, k < 2);
		}
		ck_catalog_free(cat);
	}
	free(img);
	free(path);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("catalog");
	TCase *tc = tcase_create("sources");
	tcase_set_timeout(tc, 60);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, dir_without_index_merges_files);
	tcase_add_test(tc, strpool_keeps_every_string);
	tcase_add_test(tc, pooled_and_owned_names_in_one_catalog);
	tcase_add_test(tc, key_in_two_files_refused);
	tcase_add_test(tc, index_of_many_names);
	tcase_add_test(tc, empty_dir_refused);
	tcase_add_test(tc, missing_source_refused);
	tcase_add_test(tc, index_valid);
	tcase_add_test(tc, index_rules);
	tcase_add_test(tc, index_streaming_reader);
	tcase_add_test(tc, hf_cache_symlinks_followed);
	tcase_add_test(tc, non_regular_refused);
	tcase_add_test(tc, config_loaded_and_validated);
	tcase_add_test(tc, headers_on_threads_read_as_in_order);
	tcase_add_test(tc, out_of_descriptors_names_the_file_in_order);
	tcase_add_test(tc, large_header_among_shards);
	tcase_add_test(tc, natural_order);
	tcase_add_test(tc, natural_sort_of_runs);
	tcase_add_test(tc, natural_sort_matches_comparator);
	tcase_add_test(tc, natural_sort_long_numbers);
	tcase_add_test(tc, natural_sort_on_threads);
	suite_add_tcase(s, tc);
	return tu_run_suite(s, 1);
}
