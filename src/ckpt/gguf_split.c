#include "gguf_split.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../util/json_strict.h"

#define SUFFIX_LEN 20 /* "-00001-of-00003.gguf" */

/* k and n of a name ending -KKKKK-of-NNNNN.gguf (llama.cpp's
 * llama_split_path), else 0. */
static int split_name(const char *path, int *k, int *n)
{
	size_t len = strlen(path);
	if (len < SUFFIX_LEN)
		return 0;
	const char *s = path + len - SUFFIX_LEN;
	for (int i = 0; i < SUFFIX_LEN; i++) {
		const char *want = "-#####-of-#####.gguf";
		if (want[i] == '#' ? s[i] < '0' || s[i] > '9' : s[i] != want[i])
			return 0;
	}
	*k = atoi(s + 1);
	*n = atoi(s + 10);
	return 1;
}

void ck_gguf_split_names_free(char **paths, size_t n)
{
	for (size_t i = 0; i < n && paths; i++)
		free(paths[i]);
	free(paths);
}

int ck_gguf_split_names(const char *path, char ***paths, size_t *n, struct ck_err *err)
{
	*paths = NULL;
	*n = 0;
	int k, count;
	if (!split_name(path, &k, &count) || (k == 1 && count <= 1))
		return 0;
	if (k != 1 || count < 1)
		return ck_fail(err, CK_E_SOURCE,
			       "%s: piece %d of a split GGUF of %d: name its first file "
			       "(...-00001-of-%05d.gguf), which leads to the rest, as llama.cpp "
			       "loads it",
			       path, k, count, count);
	size_t prefix = strlen(path) - SUFFIX_LEN;
	if (!(*paths = calloc((size_t)count, sizeof **paths)))
		return ck_fail_sys(err, ENOMEM, "%s", path);
	for (int i = 0; i < count; i++) {
		size_t cap = prefix + SUFFIX_LEN + 1;
		if (!((*paths)[i] = malloc(cap))) {
			ck_gguf_split_names_free(*paths, (size_t)i);
			*paths = NULL;
			return ck_fail_sys(err, ENOMEM, "%s", path);
		}
		snprintf((*paths)[i], cap, "%.*s-%05d-of-%05d.gguf", (int)prefix, path, i + 1,
			 count);
	}
	*n = (size_t)count;
	return 0;
}

/* An integer key of meta in [lo, hi]: 1 (*v), 0 absent, -1 not such. */
static int int_key(const cJSON *meta, const char *key, int64_t lo, int64_t hi, int64_t *v)
{
	const cJSON *j = cJSON_GetObjectItemCaseSensitive(meta, key);
	return !j ? 0 : ck_json_int(j, lo, hi, v) < 0 ? -1 : 1;
}

int ck_gguf_split_piece(struct ck_gguf_split *s, cJSON *meta, const char *path, struct ck_err *err)
{
	int64_t no = 0, count = 0, tensors = -1;
	int k = s->read++;
	if (int_key(meta, "split.no", 0, 65534, &no) < 0 ||
	    int_key(meta, "split.count", 1, 65535, &count) < 0 ||
	    int_key(meta, "split.tensors.count", 0, INT32_MAX, &tensors) < 0)
		return ck_fail(err, CK_E_SOURCE,
			       "%s: split.no, split.count or split.tensors.count is not a count "
			       "(0-65534, 1-65535, 0-2^31)",
			       path);
	if (!s->count && count > 1)
		return ck_fail(err, CK_E_SOURCE,
			       "%s: piece %lld of a split GGUF of %lld files, not named as "
			       "llama.cpp names them (PREFIX-00001-of-%05lld.gguf ...)",
			       path, (long long)no + 1, (long long)count, (long long)count);
	if (s->count && (count != s->count || no != k))
		return ck_fail(err, CK_E_SOURCE,
			       "%s: split.no %lld of split.count %lld, where its name says %d of "
			       "%d: not one split GGUF",
			       path, (long long)no, (long long)count, k, s->count);
	if (k > 0)
		return 1;
	if (s->count && tensors < 0)
		return ck_fail(err, CK_E_SOURCE,
			       "%s: a split GGUF's first file without "
			       "split.tensors.count",
			       path);
	s->tensors = tensors;
	cJSON_DeleteItemFromObjectCaseSensitive(meta, "split.no");
	cJSON_DeleteItemFromObjectCaseSensitive(meta, "split.count");
	cJSON_DeleteItemFromObjectCaseSensitive(meta, "split.tensors.count");
	return 0;
}

int ck_gguf_dir_pick(const char *dir, char *const *names, size_t n, char **path, struct ck_err *err)
{
	/* pieces of one split, the first among them (a missing one is then
	 * reported by name when the first is read) */
	int k = 0, count = 0, ki, ci;
	int set = n > 0 && split_name(names[0], &k, &count) && k == 1;
	for (size_t i = 1; i < n && set; i++) {
		size_t prefix = strlen(names[0]) - SUFFIX_LEN;
		set = strlen(names[i]) == prefix + SUFFIX_LEN &&
		      !strncmp(names[i], names[0], prefix) && split_name(names[i], &ki, &ci) &&
		      ci == count;
	}
	if (n != 1 && !set)
		return ck_fail(err, CK_E_SOURCE,
			       "%s: %zu GGUF files (%s, %s%s), not one split GGUF: name the one to "
			       "read",
			       dir, n, names[0], names[1], n > 2 ? ", ..." : "");
	size_t cap = strlen(dir) + strlen(names[0]) + 2;
	if (!(*path = malloc(cap)))
		return ck_fail_sys(err, ENOMEM, "%s", dir);
	snprintf(*path, cap, "%s/%s", dir, names[0]);
	return 0;
}
