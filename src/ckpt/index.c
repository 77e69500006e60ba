#include "index.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../util/json_lex.h"
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

/* A file name (p->str) as an index into out->files. */
static int file_slot(struct ck_index *out, struct ck_strmap *files, const char *fname,
		     uint32_t *fi, struct ck_err *err, const char *what)
{
	/* shards list their keys together: most entries name the file the one
	 * before did */
	if (out->n_entries && !strcmp(fname, out->files[out->entries[out->n_entries - 1].file])) {
		*fi = out->entries[out->n_entries - 1].file;
		return 0;
	}
	if (out->n_files == out->cap_files) {
		size_t c = out->cap_files ? 2 * out->cap_files : 16;
		char **nf = realloc(out->files, c * sizeof *nf);
		if (!nf)
			return ck_fail_sys(err, ENOMEM, "%s", what);
		out->files = nf;
		out->cap_files = c;
	}
	if (ck_strmap_get(files, fname, fi) == 0)
		return 0;
	char *dup = strdup(fname);
	if (!dup || ck_strmap_put(files, dup, (uint32_t)out->n_files, NULL) < 0) {
		free(dup);
		return ck_fail_sys(err, ENOMEM, "%s", what);
	}
	*fi = (uint32_t)out->n_files;
	out->files[out->n_files++] = dup;
	return 0;
}

struct wm_ctx {
	struct ck_jlex *p;
	struct ck_index *out;
	struct ck_strmap *files;
	size_t cap;
};

/* One weight_map entry: key -> a plain file name. */
static int wm_member(void *vc, char *key, const char *fname)
{
	struct wm_ctx *c = vc;
	struct ck_index *out = c->out;
	uint32_t fi = 0;
	int r = -1;
	if (ck_plain_file_name(fname) < 0)
		ck_fail(c->p->err, CK_E_SOURCE,
			"%s: weight_map[\"%s\"] names \"%s\", not a plain file name in the directory",
			c->p->what, key, fname);
	else
		r = file_slot(out, c->files, fname, &fi, c->p->err, c->p->what);
	if (r == 0 && out->n_entries == c->cap) {
		size_t n = c->cap ? 2 * c->cap : 1024;
		struct ck_index_entry *ne = realloc(out->entries, n * sizeof *ne);
		if (ne)
			out->entries = ne, c->cap = n;
		else
			r = ck_fail_sys(c->p->err, ENOMEM, "%s", c->p->what);
	}
	if (r < 0) {
		free(key);
		return -1;
	}
	out->entries[out->n_entries++] = (struct ck_index_entry){key, fi};
	return 0;
}

/* Read in one pass, no tree: an index of a large checkpoint lists ~100,000
 * keys. "metadata" (total_size may be any number) and other members are
 * skipped. */
int ck_index_parse(const char *json, size_t len, const char *what, struct ck_index *out,
		   struct ck_err *err)
{
	memset(out, 0, sizeof *out);
	/* the reader checks UTF-8, NUL bytes and \u0000 as it goes */
	struct ck_jlex p = {.s = json, .n = len, .what = what, .ctx = what, .err = err};
	struct ck_strmap files = {0};
	int rc = -1, have_wm = 0;
	if (ck_strmap_init(&files, 16) < 0) {
		ck_fail_sys(err, ENOMEM, "%s", what);
		goto out;
	}
	if (!ck_jlex_eat(&p, '{')) {
		if (ck_jlex_skip(&p, 0) == 0)
			ck_fail(err, CK_E_SOURCE, "%s: not a JSON object", what);
		goto out;
	}
	if (!ck_jlex_eat(&p, '}')) {
		do {
			char *key;
			if (ck_jlex_key(&p, &key) < 0)
				goto out;
			int wm = !strcmp(key, "weight_map");
			free(key);
			if (wm && have_wm++) {
				ck_fail(err, CK_E_SOURCE, "%s: duplicate \"weight_map\"", what);
				goto out;
			}
			if (wm && !ck_jlex_peek(&p, '{')) {
				if (ck_jlex_skip(&p, 1) == 0)
					ck_fail(err, CK_E_SOURCE, "%s: \"weight_map\" is not an object",
						what);
				goto out;
			}
			struct wm_ctx c = {&p, out, &files, 0};
			int r = wm ? ck_jlex_string_map(&p, wm_member, &c,
							"weight_map[\"%s\"] is not a string")
				   : ck_jlex_skip(&p, 1);
			if (r < 0)
				goto out;
		} while (ck_jlex_eat(&p, ','));
		if (!ck_jlex_eat(&p, '}')) {
			ck_jlex_syntax(&p);
			goto out;
		}
	}
	ck_jlex_ws(&p);
	if (p.i != len) {
		if (ck_jlex_bad_byte(&p) == 0)
			ck_fail(err, CK_E_SOURCE, "%s: trailing data after the JSON value at offset %zu",
				what, p.i);
		goto out;
	}
	if (!have_wm) {
		ck_fail(err, CK_E_SOURCE, "%s: no \"weight_map\"", what);
		goto out;
	}
	rc = 0;
out:
	ck_strmap_free(&files);
	ck_jlex_free(&p);
	if (rc < 0)
		ck_index_free(out);
	return rc;
}
