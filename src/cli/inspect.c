/* ckptfs inspect: the source or target view as a table or JSON, from headers
 * and the plan alone; --groups shows dependency groups, --expect compares the
 * view with a model's expected keys like a strict load_state_dict. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ckpt/ggml_types.h"
#include "../exec/engine.h"
#include "../plan/explain.h"
#include "../plan/optstate.h"
#include "../plan/shard.h"
#include "../util/json_strict.h"
#include "../util/jsonw.h"
#include "../util/numfmt.h"
#include "../view/gguf_view.h"
#include "cli.h"
#include "opts.h"

struct row {
	const char *name, *file;
	enum ck_dtype dtype;
	int ndim;
	const int64_t *shape;
	uint64_t bytes;
	int64_t group; /* -1 for the source view */
	const struct ck_shard_info *shard;
	const char *param, *state; /* optimizer state: what it follows */
	uint32_t quant;		   /* a GGUF source's ggml block type (decoded to dtype), or 0 */
	uint64_t stored_bytes;	   /* and its bytes in the file */
};

static void fput_shape(FILE *f, int ndim, const int64_t *shape, const char *sep)
{
	fputc('[', f);
	for (int d = 0; d < ndim; d++)
		fprintf(f, "%s%" PRId64, d ? sep : "", shape[d]);
	fputc(']', f);
}

/* "[a, b, c]" (called twice per row of a 100k-key listing: no printf) */
static int shape_str(char *buf, size_t n, int ndim, const int64_t *shape)
{
	char tmp[CK_MAX_DIMS * 22 + 4];
	size_t k = 0;
	tmp[k++] = '[';
	for (int d = 0; d < ndim && d < CK_MAX_DIMS; d++) {
		if (d)
			tmp[k++] = ',', tmp[k++] = ' ';
		k += (size_t)ck_fmt_i64(tmp + k, shape[d]);
	}
	tmp[k++] = ']';
	tmp[k] = '\0';
	if (n) {
		size_t c = k < n ? k : n - 1;
		memcpy(buf, tmp, c);
		buf[c] = '\0';
	}
	return (int)k;
}

static void rows_of(const struct ck_view *v, int target_view, struct row *rows, size_t *n)
{
	const struct ck_catalog *cat = v->cat;
	if (!target_view) {
		for (size_t i = 0; i < cat->n_entries; i++) {
			const struct ck_catalog_entry *e = &cat->entries[i];
			rows[i] = (struct row){.name = e->t.name,
					       .file = cat->files[e->file].name,
					       .dtype = e->t.dtype,
					       .ndim = e->t.ndim,
					       .shape = e->t.shape,
					       .bytes = e->t.nbytes,
					       .group = -1,
					       .quant = e->t.quant,
					       .stored_bytes = e->t.qbytes};
		}
		*n = cat->n_entries;
		return;
	}
	for (size_t i = 0; i < v->plan->n; i++) {
		const struct ck_target *t = &v->plan->t[i];
		/* the file where the target's first source lives */
		const char *file = t->v.n ? cat->files[cat->entries[t->v.p[0].src].file].name : "";
		rows[i] = (struct row){.name = t->name,
				       .file = file,
				       .dtype = t->v.dtype,
				       .ndim = t->v.ndim,
				       .shape = t->v.shape,
				       .bytes = t->nbytes,
				       .group = t->group,
				       .shard = t->shard,
				       .param = t->param,
				       .state = t->state};
	}
	*n = v->plan->n;
}

static void print_groups_json(const struct ck_view *v)
{
	const struct ck_plan *p = v->plan;
	printf(", \"groups\": [");
	for (size_t g = 0; g < p->n_groups; g++) {
		const struct ck_group *gr = &p->g[g];
		printf("%s\n  {\"id\": %zu, \"in_bytes\": %" PRIu64 ", \"out_bytes\": %" PRIu64
		       ", \"sources\": [",
		       g ? "," : "", g, gr->in_bytes, gr->out_bytes);
		for (size_t k = 0; k < gr->n_sources; k++) {
			printf("%s", k ? ", " : "");
			ck_json_fput_str(stdout, v->cat->entries[gr->sources[k]].t.name);
		}
		printf("], \"targets\": [");
		for (size_t k = 0; k < gr->n_targets; k++) {
			printf("%s", k ? ", " : "");
			ck_json_fput_str(stdout, p->t[gr->targets[k]].name);
		}
		printf("]}");
	}
	printf("\n]");
}

static void print_groups_table(const struct ck_view *v)
{
	const struct ck_plan *p = v->plan;
	printf("\n%zu dependency groups\n", p->n_groups);
	for (size_t g = 0; g < p->n_groups; g++) {
		const struct ck_group *gr = &p->g[g];
		printf("group %zu: %zu source%s (%" PRIu64 " bytes) -> %zu target%s (%" PRIu64
		       " bytes)\n",
		       g, gr->n_sources, gr->n_sources == 1 ? "" : "s", gr->in_bytes, gr->n_targets,
		       gr->n_targets == 1 ? "" : "s", gr->out_bytes);
		for (size_t k = 0; k < gr->n_sources; k++) {
			printf("  < ");
			ck_fput_safe(stdout, v->cat->entries[gr->sources[k]].t.name);
			putchar('\n');
		}
		for (size_t k = 0; k < gr->n_targets; k++) {
			printf("  > ");
			ck_fput_safe(stdout, p->t[gr->targets[k]].name);
			putchar('\n');
		}
	}
}

#define LEFT_OUT_SHOWN 20

/* The optimizer state among the rows: how many tensors, and the state
 * names in first-seen order (at most 64; the planner allows no more). */
static size_t state_summary(const struct row *rows, size_t n, const char **names, size_t *n_names)
{
	size_t nt = 0;
	*n_names = 0;
	for (size_t i = 0; i < n; i++) {
		if (!rows[i].state)
			continue;
		nt++;
		size_t k = 0;
		while (k < *n_names && strcmp(names[k], rows[i].state))
			k++;
		if (k == *n_names && k < 64)
			names[(*n_names)++] = rows[i].state;
	}
	return nt;
}

/* A line on the optimizer state the view carries. */
static void print_state_line(const struct ck_view *v, const struct row *rows, size_t n)
{
	if (!v->plan || !v->plan->opt_template)
		return;
	const char *seen[64];
	size_t ns, nt = state_summary(rows, n, seen, &ns);
	if (!nt)
		return;
	printf("optimizer state: %zu tensor%s (", nt, nt == 1 ? "" : "s");
	for (size_t k = 0; k < ns; k++) {
		printf("%s", k ? ", " : "");
		ck_fput_safe(stdout, seen[k]);
	}
	printf(") following their parameters, named ");
	ck_fput_safe(stdout, v->plan->opt_template);
	putchar('\n');
	struct ck_hparam *h;
	size_t nh;
	if (ck_opt_hparams(v->plan, &h, &nh, &(struct ck_err){0}) < 0 || !nh)
		return;
	printf("%zu hyper-parameter%s (not tensors, not served) named with their targets:\n", nh,
	       nh == 1 ? "" : "s");
	for (size_t i = 0; i < nh && i < LEFT_OUT_SHOWN; i++) {
		printf("  ");
		ck_fput_safe(stdout, h[i].from);
		printf(" (");
		ck_fput_safe(stdout, h[i].what);
		printf(") -> ");
		ck_fput_safe(stdout, h[i].to);
		putchar('\n');
	}
	if (nh > LEFT_OUT_SHOWN)
		printf("  ... and %zu more (inspect --json lists them)\n", nh - LEFT_OUT_SHOWN);
	ck_opt_hparams_free(h, nh);
}

static void print_json(const struct ck_view *v, const struct row *rows, size_t n, int target,
		       int groups)
{
	uint64_t total = 0;
	printf("{\"format\": \"%s\", \"view\": \"%s\", \"source\": ", v->cat->format,
	       target ? "target" : "source");
	ck_json_fput_str(stdout, v->cat->source);
	printf(", \"tensors\": [");
	for (size_t i = 0; i < n; i++) {
		printf("%s\n  {\"name\": ", i ? "," : "");
		ck_json_fput_str(stdout, rows[i].name);
		printf(", \"dtype\": \"%s\", \"shape\": ", ck_dtype_name(rows[i].dtype));
		fput_shape(stdout, rows[i].ndim, rows[i].shape, ", ");
		printf(", \"bytes\": %" PRIu64 ", \"file\": ", rows[i].bytes);
		ck_json_fput_str(stdout, rows[i].file);
		static const char *const sf[] = {"global_shape", "fragments", "axis_fragmentations",
						 "replica_id"};
		for (int k = 0; rows[i].shard && k < 4; k++) {
			printf(", \"%s\": ", sf[k]);
			ck_shard_fput_json(stdout, rows[i].shard, rows[i].ndim, sf[k]);
		}
		if (rows[i].shard && rows[i].shard->global_name) {
			printf(", \"global_name\": ");
			ck_json_fput_str(stdout, rows[i].shard->global_name);
		}
		if (rows[i].param) {
			printf(", \"param\": ");
			ck_json_fput_str(stdout, rows[i].param);
			printf(", \"state\": ");
			ck_json_fput_str(stdout, rows[i].state);
		}
		if (rows[i].quant)
			printf(", \"stored\": \"%s\", \"stored_bytes\": %" PRIu64,
			       ck_ggml_type_name(rows[i].quant), rows[i].stored_bytes);
		if (rows[i].group >= 0)
			printf(", \"group\": %" PRId64, rows[i].group);
		else
			printf(", \"offset\": %" PRIu64, v->cat->entries[i].t.offset);
		printf("}");
		total += rows[i].bytes;
	}
	printf("\n], \"n_tensors\": %zu, \"n_files\": %zu, \"total_bytes\": %" PRIu64
	       ", \"non_tensor_values\": %zu",
	       n, v->cat->n_files, total, v->cat->n_skipped);
	const struct ck_leftout *lo = &v->cat->left_out;
	printf(", \"left_out\": [");
	for (size_t i = 0; i < lo->n; i++) {
		printf("%s\n  {\"key\": ", i ? "," : "");
		ck_json_fput_str(stdout, lo->e[i].key);
		printf(", \"what\": ");
		ck_json_fput_str(stdout, lo->e[i].what);
		printf("}");
	}
	printf("]");
	if (v->plan && v->plan->opt_template) {
		printf(", \"optimizer_state\": {\"naming\": ");
		ck_json_fput_str(stdout, v->plan->opt_template);
		printf(", \"states\": [");
		const char *seen[64];
		size_t ns, nt = state_summary(rows, n, seen, &ns);
		for (size_t k = 0; k < ns; k++) {
			printf("%s", k ? ", " : "");
			ck_json_fput_str(stdout, seen[k]);
		}
		printf("], \"n_tensors\": %zu, \"hyper_parameters\": [", nt);
		struct ck_hparam *h;
		size_t nh;
		if (ck_opt_hparams(v->plan, &h, &nh, &(struct ck_err){0}) == 0) {
			for (size_t i = 0; i < nh; i++) {
				printf("%s{\"from\": ", i ? ", " : "");
				ck_json_fput_str(stdout, h[i].from);
				printf(", \"to\": ");
				ck_json_fput_str(stdout, h[i].to);
				printf(", \"what\": ");
				ck_json_fput_str(stdout, h[i].what);
				printf("}");
			}
			ck_opt_hparams_free(h, nh);
		}
		printf("]}");
	}
	if (v->cat->meta) {
		char *m = cJSON_PrintUnformatted(v->cat->meta);
		printf(", \"metadata\": %s", m ? m : "null");
		cJSON_free(m);
	}
	printf(", \"warnings\": [");
	for (size_t w = 0; w < v->plan->n_warnings; w++) {
		printf("%s", w ? ", " : "");
		ck_json_fput_str(stdout, v->plan->warnings[w]);
	}
	printf("]");
	if (groups)
		print_groups_json(v);
	printf("}\n");
}

/* Eight name bytes hold no control byte (< 0x20) and no DEL, the bytes the
 * table writes as \xNN. Exact: a borrow only flags bytes above a byte that
 * really is below 0x20 (or 0x7f), and bytes >= 0x80 are never flagged. */
static int plain_word(const char *s)
{
	const uint64_t ones = 0x0101010101010101u, high = 0x8080808080808080u;
	uint64_t w, del;
	memcpy(&w, s, 8);
	del = w ^ (0x7f * ones);
	return !(((w - 0x20 * ones) & ~w & high) | ((del - ones) & ~del & high));
}

/* Width of a name once its control bytes are written as \xNN. */
static int safe_len(const char *s)
{
	size_t n = strlen(s), i = 0, w = 0;
	while (i + 8 <= n && plain_word(s + i)) /* 100k-key listings: 8 at a time */
		i += 8;
	for (w = i; i < n; i++)
		w += (unsigned char)s[i] < 0x20 || (unsigned char)s[i] == 0x7f ? 4 : 1;
	return (int)w;
}

static void print_left_out(const struct ck_catalog *cat)
{
	if (!cat->n_skipped)
		return;
	printf("%zu non-tensor value%s left out (never executed):\n", cat->n_skipped,
	       cat->n_skipped == 1 ? "" : "s");
	size_t shown = cat->left_out.n < LEFT_OUT_SHOWN ? cat->left_out.n : LEFT_OUT_SHOWN;
	for (size_t i = 0; i < shown; i++) {
		printf("  ");
		ck_fput_safe(stdout, cat->left_out.e[i].key[0] ? cat->left_out.e[i].key : "(top)");
		printf(": ");
		ck_fput_safe(stdout, cat->left_out.e[i].what);
		printf("\n");
	}
	if (cat->n_skipped > shown)
		printf("  ... and %zu more (inspect --json lists them)\n", cat->n_skipped - shown);
}

/* A GGUF source's metadata, one key a line (long values cut). */
static void print_meta(const struct ck_catalog *cat)
{
	if (!cat->meta)
		return;
	printf("GGUF metadata, %d keys:\n", cJSON_GetArraySize(cat->meta));
	for (const cJSON *e = cat->meta->child; e; e = e->next) {
		char *txt = cJSON_PrintUnformatted(e);
		printf("  ");
		ck_fput_safe(stdout, e->string);
		printf(" = ");
		if (txt && strlen(txt) > 100) {
			txt[100] = '\0';
			ck_fput_safe(stdout, txt);
			printf("...");
		} else {
			ck_fput_safe(stdout, txt ? txt : "?");
		}
		putchar('\n');
		cJSON_free(txt);
	}
}

/* s escaped as ck_fput_safe writes it (safe_len(s) bytes) at o. */
static size_t escape_into(char *o, const char *s)
{
	static const char hex[] = "0123456789abcdef";
	size_t n = strlen(s), k = 0;
	while (k + 8 <= n && plain_word(s + k)) {
		memcpy(o + k, s + k, 8);
		k += 8;
	}
	for (s += k; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c >= 0x20 && c != 0x7f)
			o[k++] = (char)c;
		else
			o[k++] = '\\', o[k++] = 'x', o[k++] = hex[c >> 4], o[k++] = hex[c & 15];
	}
	return k;
}

/* Spaces from column k to column w of the line at o; the new end. */
static size_t pad_to(char *o, size_t k, size_t w)
{
	if (k >= w)
		return k;
	memset(o + k, ' ', w - k);
	return w;
}

/* The DTYPE column of a row: a GGUF source's blocks as "F32 (Q4_K)", the
 * type they decode to first. Returns its length (under 32). */
static size_t dtype_cell(char dt[32], const struct row *r)
{
	int l = r->quant ? snprintf(dt, 32, "%s (%s)", ck_dtype_name(r->dtype),
				    ck_ggml_type_name(r->quant))
			 : snprintf(dt, 32, "%s", ck_dtype_name(r->dtype));
	return l < 0 ? 0 : (size_t)l < 32 ? (size_t)l : 31;
}

/* One row of the table into o (room: the widths plus 64); its length. */
static size_t table_row(char *o, const struct row *r, size_t wn, size_t wd, size_t ws)
{
	size_t k = pad_to(o, escape_into(o, r->name), wn);
	char dt[32];
	size_t f = k + 2, l = dtype_cell(dt, r);
	memset(o + k, ' ', 2);
	memcpy(o + f, dt, l);
	k = pad_to(o, f + l, f + wd);
	f = k + 2;
	memset(o + k, ' ', 2);
	k = pad_to(o, f + (size_t)shape_str(o + f, ws + 1, r->ndim, r->shape), f + ws);
	char num[24]; /* "%14" PRIu64, by hand */
	size_t at = sizeof num;
	uint64_t b = r->bytes;
	do
		num[--at] = (char)('0' + b % 10);
	while (b /= 10);
	memset(o + k, ' ', 2);
	k = pad_to(o, k + 2, k + 2 + (14 > sizeof num - at ? 14 - (sizeof num - at) : 0));
	memcpy(o + k, num + at, sizeof num - at);
	k += sizeof num - at;
	memset(o + k, ' ', 2);
	k += 2 + escape_into(o + k + 2, r->file);
	o[k++] = '\n';
	return k;
}

/* How many rows ahead print_table prefetches a name. */
#define ROW_AHEAD 8

/* Rows are built whole and written with one fwrite each: a 100k-key
 * listing made about thirty stdio calls per row before. */
static int print_table(const struct ck_view *v, const struct row *rows, size_t n, int groups)
{
	size_t wn = 4, wd = 11, ws = 5, wf = 0;
	char shape[512], dt[32];
	uint64_t total = 0;
	for (size_t i = 0; i < n; i++) {
		if (i + ROW_AHEAD < n) /* names lie scattered: a few misses at once */
			__builtin_prefetch(rows[i + ROW_AHEAD].name);
		size_t l = (size_t)safe_len(rows[i].name), f = (size_t)safe_len(rows[i].file),
		       s = (size_t)shape_str(shape, sizeof shape, rows[i].ndim, rows[i].shape);
		wn = l > wn ? l : wn;
		ws = s > ws ? s : ws;
		wf = f > wf ? f : wf;
		if (rows[i].quant && dtype_cell(dt, &rows[i]) > wd)
			wd = dtype_cell(dt, &rows[i]);
		total += rows[i].bytes;
	}
	printf("%-*s  %-*s  %-*s  %14s  %s\n", (int)wn, "NAME", (int)wd, "DTYPE", (int)ws, "SHAPE",
	       "BYTES", "FILE");
	char *line = malloc(wn + wd + ws + wf + 64);
	for (size_t i = 0; line && i < n; i++) {
		if (i + ROW_AHEAD < n)
			__builtin_prefetch(rows[i + ROW_AHEAD].name);
		fwrite(line, 1, table_row(line, &rows[i], wn, wd, ws), stdout);
	}
	free(line);
	if (!line)
		return -1;
	printf("%zu tensors, %" PRIu64 " bytes (%.2f GiB) from %zu file%s, format %s\n", n, total,
	       (double)total / (1 << 30), v->cat->n_files, v->cat->n_files == 1 ? "" : "s",
	       v->cat->format);
	print_state_line(v, rows, n);
	print_left_out(v->cat);
	print_meta(v->cat);
	if (groups)
		print_groups_table(v);
	return 0;
}

/* torch and safetensors dtype spellings of an expected key. */
static enum ck_dtype expect_dtype(const char *s)
{
	enum ck_dtype dt = ck_dtype_from_torch(s);
	return dt != CK_DT_INVALID ? dt : ck_dtype_parse(s, NULL);
}

/* Compare rows with KEYS.json; print a strict load_state_dict style report. */
/* Whether a row has the dtype and shape an --expect entry asks for (each
 * optional). */
static int expect_matches(const struct row *row, const cJSON *dt, const cJSON *sh)
{
	if (dt && expect_dtype(dt->valuestring) != row->dtype)
		return 0;
	if (!sh)
		return 1;
	int d = 0;
	for (const cJSON *x = sh->child; x; x = x->next, d++) {
		int64_t v;
		if (d >= row->ndim || ck_json_int(x, 0, INT64_MAX / 2, &v) < 0 || v != row->shape[d])
			return 0;
	}
	return d == row->ndim;
}

static void print_mismatch(const struct row *row, const char *name, const cJSON *dt,
			   const cJSON *sh)
{
	char s[256];
	char *ws = sh ? cJSON_PrintUnformatted(sh) : NULL;
	shape_str(s, sizeof s, row->ndim, row->shape);
	printf("size or dtype mismatch for ");
	ck_fput_safe(stdout, name);
	printf(": the view has %s %s, expected ", ck_dtype_name(row->dtype), s);
	ck_fput_safe(stdout, dt ? dt->valuestring : "(any dtype)");
	printf(" %s\n", ws ? ws : "(any shape)");
	free(ws);
}

static int check_expect(const char *path, const struct row *rows, size_t n, struct ck_err *err)
{
	char *buf;
	size_t len;
	if (ck_read_file(path, 256u << 20, &buf, &len, CK_E_USAGE, err) < 0)
		return -1;
	cJSON *root = ck_json_parse(buf, len, 0, CK_E_USAGE, path, err);
	free(buf);
	if (!root)
		return -1;
	int rc = -1;
	struct ck_strmap have, want;
	memset(&have, 0, sizeof have);
	memset(&want, 0, sizeof want);
	const cJSON *list = cJSON_IsArray(root) ? root : NULL;
	if (!list) {
		ck_fail(err, CK_E_USAGE, "%s: expected a list of key names or of {name, dtype, shape}",
			path);
		goto out;
	}
	if (ck_strmap_init(&have, n) < 0 || ck_strmap_init(&want, 64) < 0) {
		ck_fail_sys(err, ENOMEM, "expect");
		goto out;
	}
	for (size_t i = 0; i < n; i++)
		ck_strmap_put(&have, rows[i].name, (uint32_t)i, NULL);
	size_t missing = 0, mismatched = 0, unexpected = 0, idx = 0;
	for (const cJSON *e = list->child; e; e = e->next, idx++) {
		/* an entry is a key name (list(state_dict().keys())) or an object
		 * with the name and optionally dtype and shape */
		const cJSON *nm = cJSON_IsString(e) ? e : cJSON_GetObjectItemCaseSensitive(e, "name");
		const cJSON *dt = cJSON_IsString(e) ? NULL : cJSON_GetObjectItemCaseSensitive(e, "dtype");
		const cJSON *sh = cJSON_IsString(e) ? NULL : cJSON_GetObjectItemCaseSensitive(e, "shape");
		if (!cJSON_IsString(nm) || (dt && !cJSON_IsString(dt)) || (sh && !cJSON_IsArray(sh))) {
			ck_fail(err, CK_E_USAGE, "%s: entry %zu is neither a key name nor an object "
						 "with \"name\" (string), optional \"dtype\" "
						 "(string) and \"shape\" (list)",
				path, idx);
			goto out;
		}
		if (ck_strmap_put(&want, nm->valuestring, 0, NULL) < 0) {
			ck_fail_sys(err, ENOMEM, "expect");
			goto out;
		}
		uint32_t r;
		if (ck_strmap_get(&have, nm->valuestring, &r) < 0) {
			printf("%s \"", missing++ ? "," : "Missing key(s) in the view:");
			ck_fput_safe(stdout, nm->valuestring);
			putchar('"');
			continue;
		}
		if (!expect_matches(&rows[r], dt, sh)) {
			if (missing && !mismatched)
				printf("\n");
			print_mismatch(&rows[r], nm->valuestring, dt, sh);
			mismatched++;
		}
	}
	if (missing)
		printf("\n");
	for (size_t i = 0; i < n; i++) {
		uint32_t r;
		if (ck_strmap_get(&want, rows[i].name, &r) < 0) {
			printf("%s \"", unexpected++ ? "," : "Unexpected key(s) in the view:");
			ck_fput_safe(stdout, rows[i].name);
			putchar('"');
		}
	}
	if (unexpected)
		printf("\n");
	if (missing || mismatched || unexpected)
		ck_fail(err, CK_E_MISMATCH, "view differs from %s: %zu missing, %zu unexpected, %zu "
					    "mismatched",
			path, missing, unexpected, mismatched);
	else {
		printf("all %zu keys match %s\n", n, path);
		rc = 0;
	}
out:
	ck_strmap_free(&have);
	ck_strmap_free(&want);
	cJSON_Delete(root);
	return rc;
}

/* --io-plan: run every read of the view through the engine without reading,
 * and report the source bytes it would request against the view's bytes. */
static int io_plan(const struct ck_view *v, struct ck_err *err)
{
	struct ck_engine e;
	ck_engine_init(&e, v->plan, 0);
	e.dry_run = 1;
	struct ck_eval_ctx c;
	ck_eval_ctx_init(&c, &e);
	const uint64_t step = 16u << 20;
	unsigned char *buf = malloc(step);
	int rc = buf ? 0 : ck_fail_sys(err, ENOMEM, "io plan");
	for (size_t i = 0; rc == 0 && i < v->plan->n; i++)
		for (uint64_t off = 0; rc == 0 && off < v->plan->t[i].nbytes; off += step) {
			uint64_t n = v->plan->t[i].nbytes - off < step ? v->plan->t[i].nbytes - off : step;
			rc = ck_engine_read(&c, (uint32_t)i, off, n, buf, err);
		}
	if (rc == 0) {
		uint64_t req = atomic_load(&e.source_bytes_read);
		printf("{\"view_bytes\": %" PRIu64 ", \"source_bytes_requested\": %" PRIu64
		       ", \"read_requests\": %" PRIu64 ", \"ratio\": %.4f}\n",
		       v->plan->total_bytes, req, (uint64_t)atomic_load(&e.read_requests),
		       v->plan->total_bytes ? (double)req / (double)v->plan->total_bytes : 0.0);
	}
	free(buf);
	ck_eval_ctx_free(&c);
	return rc;
}

/* --explain KEY or KEY[i, j, ...]: a key may itself end in "]", so the
 * index form is tried only when the key without it is a target. */
static int do_explain(const struct ck_plan *p, const char *arg, struct ck_err *err)
{
	const struct ck_target *t = ck_plan_find(p, arg);
	size_t len = strlen(arg);
	const char *open = len && arg[len - 1] == ']' ? strrchr(arg, '[') : NULL;
	if (!t && open) {
		char *key = strndup(arg, (size_t)(open - arg));
		if (!key)
			return ck_fail_sys(err, ENOMEM, "explain");
		t = ck_plan_find(p, key);
		free(key);
		int64_t idx[CK_MAX_DIMS];
		int n = 0;
		const char *s = open + 1;
		while (t && *s != ']' && n < CK_MAX_DIMS) {
			char *end;
			errno = 0;
			long long v = strtoll(s, &end, 10);
			if (end == s || errno)
				return ck_fail(err, CK_E_USAGE, "--explain %s: not an index", arg);
			idx[n++] = v;
			s = end;
			while (*s == ' ')
				s++;
			if (*s == ',')
				s++;
		}
		if (t)
			return ck_explain_index(stdout, p, t, idx, n, err);
	}
	if (!t)
		return ck_fail(err, CK_E_USAGE, "--explain: no tensor \"%s\" in the view", arg);
	ck_explain_text(stdout, p, t);
	return 0;
}

enum { I_JSON = 1, I_GROUPS, I_IOPLAN, I_FORMAT, I_EXPLAIN, I_EXPECT };

static const struct ck_cli_opt inspect_opts[] = {
	{I_JSON, "--json", NULL, "one JSON document (every key, shape, dtype, group, provenance)"},
	{I_GROUPS, "--groups", NULL, "the dependency groups: targets, sources, bytes"},
	{I_EXPECT, "--expect", "KEYS.json", "compare the keys (and shapes) with a model's; exit 5 if not"},
	{I_IOPLAN, "--io-plan", NULL, "the source byte ranges each target reads"},
	{I_EXPLAIN, "--explain", "KEY[INDEX]", "where each element of a target comes from"},
	{I_FORMAT, "--format", "gguf[:TYPE]", "the GGUF view's metadata and tensors"},
	{0, NULL, NULL, NULL},
};

const struct ck_cli_verb ck_verb_inspect = {
	"inspect", "SOURCE",
	"      list tensors of the source, or of the target view through mappings\n"
	"      (keys, dtypes, shapes, groups: no tensor data is read)\n",
	inspect_opts, CK_CLI_VIEW_ALL, ck_cli_gguf_opts, NULL};

int ck_cmd_inspect(int argc, char **argv)
{
	const char *source = NULL, *expect = NULL, *explain = NULL, *val;
	struct ck_view_args va = {.rank = -1};
	struct ck_gguf_opts gopt = {0};
	int json = 0, groups = 0, ioplan = 0, id;
	struct ck_err err;
	for (int i = 1; (id = ck_cli_next(&ck_verb_inspect, argc, argv, &i, &va, &val, &err));) {
		if (id == CK_CLI_ERROR)
			return ck_cli_report(&err);
		if (id == CK_CLI_OPERAND && source)
			return ck_cli_report(
				(ck_fail(&err, CK_E_USAGE, "inspect: more than one SOURCE given"), &err));
		if (id == CK_CLI_OPERAND)
			source = val;
		json |= id == I_JSON;
		groups |= id == I_GROUPS;
		ioplan |= id == I_IOPLAN;
		explain = id == I_EXPLAIN ? val : explain;
		expect = id == I_EXPECT ? val : expect;
		if ((id == I_FORMAT && ck_gguf_parse_format(val, &gopt, &err) < 0) ||
		    ck_cli_gguf_opt(id, val, &gopt, &err) < 0)
			return ck_cli_report(&err);
	}
	if (!source)
		return ck_cli_report((ck_cli_usage_error(&ck_verb_inspect, &err), &err));
	if (va.ranks)
		return ck_cli_report((ck_fail(&err, CK_E_USAGE, "--ranks is for mount (use --rank)"),
				      &err));
	if (!gopt.on && ck_gguf_opts_used(&gopt))
		return ck_cli_report((
		    ck_fail(&err, CK_E_USAGE, "the --gguf-* options go with --format gguf"), &err));
	if (gopt.on && (va.mesh || va.shard_groups || expect || explain || groups || ioplan))
		return ck_cli_report((ck_fail(&err, CK_E_USAGE,
					      "--format gguf lists the GGUF view (with --mapping and "
					      "--json only)"),
				      &err));
	struct ck_view v;
	if (ck_view_open(&v, source, &va, &err) < 0)
		return ck_cli_report(&err);
	if (gopt.on) {
		int rc = ck_inspect_gguf(&v, &gopt, json, &err) < 0 ? ck_cli_report(&err) : 0;
		ck_view_close(&v);
		return fflush(stdout) != 0 && rc == 0 ? 1 : rc;
	}
	/* a DCP source's tensors are assembled from chunks: show the plan */
	int target = va.n_maps > 0 || va.mesh || va.shard_groups || v.cat->logical != NULL;
	size_t cap = target ? v.plan->n : v.cat->n_entries, n;
	struct row *rows = malloc((cap ? cap : 1) * sizeof *rows);
	if (!rows) {
		ck_view_close(&v);
		return ck_cli_report((ck_fail_sys(&err, ENOMEM, "inspect"), &err));
	}
	rows_of(&v, target, rows, &n);
	int rc = 0;
	/* the ambiguity lint: warnings, never a failure */
	for (size_t w = 0; w < v.plan->n_warnings; w++)
		fprintf(stderr, "ckptfs: warning: %s\n", v.plan->warnings[w]);
	if (explain) {
		if (do_explain(v.plan, explain, &err) < 0)
			rc = ck_cli_report(&err);
	} else if (expect) {
		if (check_expect(expect, rows, n, &err) < 0)
			rc = ck_cli_report(&err);
	} else if (ioplan) {
		if (io_plan(&v, &err) < 0)
			rc = ck_cli_report(&err);
	} else if (json)
		print_json(&v, rows, n, target, groups);
	else if (print_table(&v, rows, n, groups) < 0)
		rc = ck_cli_report((ck_fail_sys(&err, ENOMEM, "inspect"), &err));
	free(rows);
	ck_view_close(&v);
	if (fflush(stdout) != 0 && rc == 0)
		rc = 1;
	return rc;
}
