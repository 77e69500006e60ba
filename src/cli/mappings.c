/* ckptfs mappings [--for SOURCE] [--json]: the shipped mappings with what
 * they do and the architectures they read; with --for, whether each one
 * plans over a checkpoint (its keys and config.json), and why not. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../util/jsonw.h"
#include "cli.h"
#include "opts.h"

struct entry {
	char name[256], path[4400];
};

static int cmp_entry(const void *a, const void *b)
{
	return strcmp(((const struct entry *)a)->name, ((const struct entry *)b)->name);
}

/* Every *.json of the search directories, the first of each name. */
static int collect(struct entry **out, size_t *n, struct ck_err *err)
{
	const char *dirs[16];
	char buf[4096];
	int nd = ck_mapping_dirs(dirs, 16, buf, sizeof buf);
	size_t cap = 0;
	*out = NULL;
	*n = 0;
	for (int d = 0; d < nd; d++) {
		DIR *dir = opendir(dirs[d]);
		struct dirent *e;
		while (dir && (e = readdir(dir))) {
			size_t l = strlen(e->d_name);
			if (l < 6 || l >= 256 || strcmp(e->d_name + l - 5, ".json"))
				continue;
			int dup = 0;
			for (size_t k = 0; k < *n && !dup; k++)
				dup = !strncmp((*out)[k].name, e->d_name, l - 5) && !(*out)[k].name[l - 5];
			if (dup)
				continue;
			if (*n == cap) {
				cap = cap ? 2 * cap : 32;
				struct entry *ne = realloc(*out, cap * sizeof *ne);
				if (!ne) {
					closedir(dir);
					return ck_fail_sys(err, ENOMEM, "mappings");
				}
				*out = ne;
			}
			struct entry *en = &(*out)[(*n)++];
			snprintf(en->name, sizeof en->name, "%.*s", (int)(l - 5), e->d_name);
			snprintf(en->path, sizeof en->path, "%s/%s", dirs[d], e->d_name);
		}
		if (dir)
			closedir(dir);
	}
	qsort(*out, *n, sizeof **out, cmp_entry);
	return 0;
}

/* The description's first sentence, cut to n characters. */
static void first_sentence(const char *d, char *out, size_t n)
{
	size_t k = 0;
	for (; d && d[k] && k + 1 < n; k++) {
		out[k] = d[k];
		if (d[k] == '.' && (d[k + 1] == ' ' || !d[k + 1]) && k > 8)
			break;
	}
	out[k] = '\0';
	if (d && d[k] && d[k] != '.' && k >= 3)
		memcpy(out + k - 3, "...", 4);
}

/* Whether the mapping reads the source's architecture ("" when either says nothing). */
static const char *arch_mismatch(const struct ck_mapping *m, const struct ck_catalog *cat)
{
	const cJSON *a = cat->config ? cJSON_GetObjectItemCaseSensitive(cat->config, "architectures")
				     : NULL;
	if (!m->n_architectures || !cJSON_IsArray(a) || !cJSON_IsString(a->child))
		return NULL;
	for (int i = 0; i < m->n_architectures; i++)
		for (const cJSON *x = a->child; x; x = x->next)
			if (cJSON_IsString(x) && !strcmp(x->valuestring, m->architectures[i]))
				return NULL;
	return a->child->valuestring;
}

enum { L_FOR = 1, L_JSON };
static const struct ck_cli_opt mappings_opts[] = {
	{L_FOR, "--for", "SOURCE", "which mappings apply to this checkpoint, and why not"},
	{L_JSON, "--json", NULL, "one JSON array"},
	{0, NULL, NULL, NULL},
};

const struct ck_cli_verb ck_verb_mappings = {
	"mappings", "",
	"      the shipped mappings (--mapping NAME finds them); with --for, which\n"
	"      ones apply to a checkpoint\n",
	mappings_opts, CK_CLI_VIEW_NONE, NULL, NULL};

int ck_cmd_mappings(int argc, char **argv)
{
	const char *src = NULL, *val;
	int json = 0;
	struct ck_err err;
	for (int i = 1, id; (id = ck_cli_next(&ck_verb_mappings, argc, argv, &i, NULL, &val, &err));) {
		if (id == CK_CLI_ERROR)
			return ck_cli_report(&err);
		if (id == CK_CLI_OPERAND)
			return ck_cli_report((ck_cli_usage_error(&ck_verb_mappings, &err), &err));
		src = id == L_FOR ? val : src;
		json |= id == L_JSON;
	}
	struct ck_catalog *cat = NULL;
	if (src && ck_catalog_open(src, &cat, &err) < 0)
		return ck_cli_report(&err);
	struct entry *ents;
	size_t n;
	if (collect(&ents, &n, &err) < 0) {
		ck_catalog_free(cat);
		return ck_cli_report(&err);
	}
	int w = 4;
	for (size_t k = 0; k < n; k++)
		w = (int)strlen(ents[k].name) > w ? (int)strlen(ents[k].name) : w;
	if (json)
		printf("[");
	for (size_t k = 0; k < n; k++) {
		struct ck_mapping *m = NULL;
		char why[1100] = "", desc[100], archs[300] = "";
		int ok = ck_mapping_load(ents[k].path, &m, &err) == 0, applies = 0;
		if (!ok)
			snprintf(why, sizeof why, "invalid: %s", err.msg);
		for (int i = 0; ok && i < m->n_architectures; i++)
			snprintf(archs + strlen(archs), sizeof archs - strlen(archs), "%s%s", i ? ", " : "",
				 m->architectures[i]);
		first_sentence(ok ? m->description : NULL, desc, sizeof desc);
		const char *other = ok && cat ? arch_mismatch(m, cat) : NULL;
		if (ok && cat && other) {
			snprintf(why, sizeof why, "reads %s, the source is %s", archs, other);
		} else if (ok && cat) {
			struct ck_plan *p = NULL;
			applies = ck_plan_build(cat, &m, 1, &p, &err) == 0;
			if (applies)
				snprintf(why, sizeof why, "%zu tensors", p->n);
			else
				snprintf(why, sizeof why, "%s", err.msg);
			ck_plan_free(p);
		}
		if (json) {
			printf("%s\n  {\"name\": ", k ? "," : "");
			ck_json_fput_str(stdout, ents[k].name);
			printf(", \"path\": ");
			ck_json_fput_str(stdout, ents[k].path);
			printf(", \"description\": ");
			ck_json_fput_str(stdout, ok && m->description ? m->description : "");
			printf(", \"architectures\": [");
			for (int i = 0; ok && i < m->n_architectures; i++) {
				printf("%s", i ? ", " : "");
				ck_json_fput_str(stdout, m->architectures[i]);
			}
			printf("]");
			if (cat)
				printf(", \"applies\": %s, \"why\": ", applies ? "true" : "false");
			if (cat || !ok)
				ck_json_fput_str(stdout, why);
			printf("}");
		} else if (cat) {
			printf("%-*s  %-3s  ", w, ents[k].name, applies ? "yes" : "no");
			ck_fput_safe(stdout, why);
			putchar('\n');
		} else {
			printf("%-*s  %s%s%s%s\n", w, ents[k].name, desc, archs[0] ? " [" : "", archs,
			       archs[0] ? "]" : "");
			if (!ok) {
				printf("%*s  ", w, "");
				ck_fput_safe(stdout, why);
				putchar('\n');
			}
		}
		ck_mapping_free(m);
	}
	if (json)
		printf("\n]\n");
	free(ents);
	ck_catalog_free(cat);
	return fflush(stdout) == 0 ? 0 : 1;
}
