/* Shared by the verbs: open the source, load the mappings, build the plan. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

int ck_view_open(struct ck_view *v, const char *source, char **mappings, int n_mappings,
		 struct ck_err *err)
{
	memset(v, 0, sizeof *v);
	if (n_mappings > CK_MAX_MAPPINGS)
		return ck_fail(err, CK_E_USAGE, "at most %d --mapping files", CK_MAX_MAPPINGS);
	if (ck_catalog_open(source, &v->cat, err) < 0)
		return -1;
	for (int i = 0; i < n_mappings; i++, v->n_maps++)
		if (ck_mapping_load(mappings[i], &v->maps[i], err) < 0) {
			ck_view_close(v);
			return -1;
		}
	if (ck_plan_build(v->cat, v->maps, v->n_maps, &v->plan, err) < 0) {
		ck_view_close(v);
		return -1;
	}
	return 0;
}

void ck_view_close(struct ck_view *v)
{
	ck_plan_free(v->plan);
	for (int i = 0; i < v->n_maps; i++)
		ck_mapping_free(v->maps[i]);
	ck_catalog_free(v->cat);
	memset(v, 0, sizeof *v);
}

int ck_parse_size(const char *s, uint64_t *out)
{
	char *end;
	if (!isdigit((unsigned char)*s))
		return -1;
	unsigned long long v = strtoull(s, &end, 10);
	static const struct {
		const char *suf;
		uint64_t mul;
	} units[] = {{"", 1},		 {"B", 1},	     {"K", 1000},	   {"KB", 1000},
		     {"KiB", 1ULL << 10}, {"M", 1000000},     {"MB", 1000000},	   {"MiB", 1ULL << 20},
		     {"G", 1000000000},	 {"GB", 1000000000}, {"GiB", 1ULL << 30}, {"T", 1000000000000},
		     {"TB", 1000000000000}, {"TiB", 1ULL << 40}};
	for (size_t i = 0; i < sizeof units / sizeof *units; i++)
		if (!strcmp(end, units[i].suf)) {
			if (__builtin_mul_overflow((uint64_t)v, units[i].mul, out))
				return -1;
			return 0;
		}
	return -1;
}
