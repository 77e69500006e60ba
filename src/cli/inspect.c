/* ckptfs inspect: the catalog as a table or JSON, from headers alone. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "../ckpt/catalog.h"
#include "../util/jsonw.h"
#include "cli.h"

static int fmt_shape(char *buf, size_t n, const struct ck_tensor_info *t)
{
	size_t k = (size_t)snprintf(buf, n, "[");
	for (int d = 0; d < t->ndim && k < n; d++)
		k += (size_t)snprintf(buf + k, n - k, "%s%" PRId64, d ? ", " : "", t->shape[d]);
	if (k < n)
		k += (size_t)snprintf(buf + k, n - k, "]");
	return (int)k;
}

static void print_json(const struct ck_catalog *cat)
{
	FILE *f = stdout;
	fprintf(f, "{\"format\": \"%s\", \"source\": ", cat->format);
	ck_json_fput_str(f, cat->source);
	fprintf(f, ", \"tensors\": [");
	for (size_t i = 0; i < cat->n_entries; i++) {
		const struct ck_catalog_entry *e = &cat->entries[i];
		fprintf(f, "%s\n  {\"name\": ", i ? "," : "");
		ck_json_fput_str(f, e->t.name);
		fprintf(f, ", \"dtype\": \"%s\", \"shape\": [", ck_dtype_name(e->t.dtype));
		for (int d = 0; d < e->t.ndim; d++)
			fprintf(f, "%s%" PRId64, d ? ", " : "", e->t.shape[d]);
		fprintf(f, "], \"bytes\": %" PRIu64 ", \"file\": ", e->t.nbytes);
		ck_json_fput_str(f, cat->files[e->file].name);
		fprintf(f, ", \"offset\": %" PRIu64 "}", e->t.offset);
	}
	fprintf(f, "\n], \"n_tensors\": %zu, \"n_files\": %zu, \"total_bytes\": %" PRIu64 "}\n",
		cat->n_entries, cat->n_files, cat->total_bytes);
}

static void print_table(const struct ck_catalog *cat)
{
	int wn = 4, ws = 5;
	char shape[512];
	for (size_t i = 0; i < cat->n_entries; i++) {
		int n = (int)strlen(cat->entries[i].t.name);
		int s = fmt_shape(shape, sizeof shape, &cat->entries[i].t);
		wn = n > wn ? n : wn;
		ws = s > ws ? s : ws;
	}
	printf("%-*s  %-11s  %-*s  %14s  %s\n", wn, "NAME", "DTYPE", ws, "SHAPE", "BYTES", "FILE");
	for (size_t i = 0; i < cat->n_entries; i++) {
		const struct ck_catalog_entry *e = &cat->entries[i];
		fmt_shape(shape, sizeof shape, &e->t);
		printf("%-*s  %-11s  %-*s  %14" PRIu64 "  %s\n", wn, e->t.name,
		       ck_dtype_name(e->t.dtype), ws, shape, e->t.nbytes, cat->files[e->file].name);
	}
	printf("%zu tensors, %" PRIu64 " bytes (%.2f GiB) in %zu file%s, format %s\n",
	       cat->n_entries, cat->total_bytes, (double)cat->total_bytes / (1 << 30), cat->n_files,
	       cat->n_files == 1 ? "" : "s", cat->format);
}

int ck_cmd_inspect(int argc, char **argv)
{
	const char *source = NULL;
	int json = 0;
	struct ck_err err;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json"))
			json = 1;
		else if (argv[i][0] == '-' && argv[i][1])
			return ck_cli_report((ck_fail(&err, CK_E_USAGE, "inspect: unknown option %s",
						      argv[i]),
					      &err));
		else if (source)
			return ck_cli_report((ck_fail(&err, CK_E_USAGE,
						      "inspect: more than one SOURCE given"),
					      &err));
		else
			source = argv[i];
	}
	if (!source)
		return ck_cli_report(
			(ck_fail(&err, CK_E_USAGE, "usage: ckptfs inspect SOURCE [--json]"), &err));
	struct ck_catalog *cat;
	if (ck_catalog_open(source, &cat, &err) < 0)
		return ck_cli_report(&err);
	if (json)
		print_json(cat);
	else
		print_table(cat);
	ck_catalog_free(cat);
	return fflush(stdout) == 0 ? 0 : 1;
}
