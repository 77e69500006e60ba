/* --mapping NAME: a file, or a shipped mapping found by name in
 * $CKPTFS_MAPPING_PATH (colon-separated), the installed share directory,
 * then this source tree's mappings/. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ckptfs_config.h"
#include "open.h"

int ck_mapping_dirs(const char **dirs, int max, char *buf, size_t n)
{
	int k = 0;
	const char *env = getenv("CKPTFS_MAPPING_PATH");
	if (env && *env) {
		snprintf(buf, n, "%s", env);
		for (char *save, *d = strtok_r(buf, ":", &save); d && k < max - 2;
		     d = strtok_r(NULL, ":", &save))
			if (*d)
				dirs[k++] = d;
	}
	dirs[k++] = CKPTFS_MAPPINGS_DIR;
	dirs[k++] = CKPTFS_SOURCE_MAPPINGS;
	return k;
}

int ck_mapping_resolve(const char *arg, char *out, size_t n, struct ck_err *err)
{
	struct stat st;
	if (stat(arg, &st) == 0 || strchr(arg, '/') || !*arg) {
		snprintf(out, n, "%s", arg); /* a path: ck_mapping_load says what is wrong */
		return 0;
	}
	const char *dirs[16];
	char buf[4096];
	int nd = ck_mapping_dirs(dirs, 16, buf, sizeof buf);
	for (int d = 0; d < nd; d++)
		for (int ext = 0; ext < 2; ext++) {
			snprintf(out, n, "%s/%s%s", dirs[d], arg, ext ? ".json" : "");
			if (stat(out, &st) == 0 && S_ISREG(st.st_mode))
				return 0;
		}
	return ck_fail(err, CK_E_MAPPING,
		       "mapping \"%s\" is neither a file nor a shipped mapping (`ckptfs mappings` "
		       "lists them)",
		       arg);
}
