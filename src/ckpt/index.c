#include "index.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../util/json_strict.h"
#include "../util/strmap.h"

int ck_plain_file_name(const char *name)
{
	if (!name[0] || strchr(name, '/') || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
		return -1;
	return 0;
}

void ck_index_free(struct ck_index *idx)
{
	for (size_t i = 0; i < idx->n_files; i++)
		free(idx->files[i]);
	for (size_t i = 0; i < idx->n_entries; i++)
		free(idx->entries[i].key);
	free(idx->files);
	free(idx->entries);
	memset(idx, 0, sizeof *idx);
}

int ck_index_parse(const char *json, size_t len, const char *what, struct ck_index *out,
		   struct ck_err *err)
{
	memset(out, 0, sizeof *out);
	/* metadata.total_size may be any number in the wild; integers are only
	 * required where we use them, so no CK_JSON_INTEGERS_ONLY here. */
	cJSON *root = ck_json_parse(json, len, 0, CK_E_SOURCE, what, err);
	if (!root)
		return -1;
	int rc = -1;
	struct ck_strmap files = {0};
	const cJSON *wm = NULL;
	if (!cJSON_IsObject(root)) {
		ck_fail(err, CK_E_SOURCE, "%s: not a JSON object", what);
		goto out;
	}
	for (const cJSON *c = root->child; c; c = c->next)
		if (strcmp(c->string, "weight_map") == 0) {
			if (wm) {
				ck_fail(err, CK_E_SOURCE, "%s: duplicate \"weight_map\"", what);
				goto out;
			}
			wm = c;
		}
	if (!wm || !cJSON_IsObject(wm)) {
		ck_fail(err, CK_E_SOURCE, "%s: %s", what,
			wm ? "\"weight_map\" is not an object" : "no \"weight_map\"");
		goto out;
	}
	size_t n = (size_t)cJSON_GetArraySize(wm);
	out->entries = calloc(n ? n : 1, sizeof *out->entries);
	out->files = calloc(n ? n : 1, sizeof *out->files);
	if (!out->entries || !out->files || ck_strmap_init(&files, 16) < 0) {
		ck_fail_sys(err, ENOMEM, "%s", what);
		goto out;
	}
	for (cJSON *c = wm->child; c; c = c->next) {
		if (!cJSON_IsString(c)) {
			ck_fail(err, CK_E_SOURCE, "%s: weight_map[\"%s\"] is not a string", what,
				c->string);
			goto out;
		}
		const char *fname = c->valuestring;
		if (ck_plain_file_name(fname) < 0) {
			ck_fail(err, CK_E_SOURCE,
				"%s: weight_map[\"%s\"] names \"%s\", not a plain file name in the "
				"directory",
				what, c->string, fname);
			goto out;
		}
		/* shards list their keys together: most entries name the file
		 * the one before did */
		uint32_t fi = (uint32_t)out->n_files, existing;
		int r = 0;
		if (out->n_entries && !strcmp(fname, out->files[out->entries[out->n_entries - 1].file])) {
			fi = out->entries[out->n_entries - 1].file;
		} else if ((r = ck_strmap_put(&files, fname, fi, &existing)) < 0) {
			ck_fail_sys(err, ENOMEM, "%s", what);
			goto out;
		} else if (r == 1) {
			fi = existing;
		} else {
			if (!(out->files[out->n_files] = strdup(fname))) {
				ck_fail_sys(err, ENOMEM, "%s", what);
				goto out;
			}
			out->n_files++;
		}
		struct ck_index_entry *e = &out->entries[out->n_entries];
		e->key = c->string; /* taken from the tree: cJSON_Delete skips a NULL name */
		c->string = NULL;
		e->file = fi;
		out->n_entries++;
	}
	rc = 0;
out:
	ck_strmap_free(&files);
	cJSON_Delete(root);
	if (rc < 0)
		ck_index_free(out);
	return rc;
}
