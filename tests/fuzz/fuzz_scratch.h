/* A fuzz target's scratch directory for inputs that must be files: made
 * under /tmp on the first input, and removed with the files it names at
 * exit (each replay and fuzz run used to leave one behind). */
#ifndef CK_FUZZ_SCRATCH_H
#define CK_FUZZ_SCRATCH_H

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static char scratch_dir[64];
static const char *const *scratch_files; /* NULL-terminated names */

static void scratch_remove(void)
{
	char p[128];
	for (const char *const *f = scratch_files; *f; f++) {
		snprintf(p, sizeof p, "%s/%s", scratch_dir, *f);
		unlink(p);
	}
	rmdir(scratch_dir);
}

/* The directory (/tmp/PREFIX-XXXXXX), or NULL when it cannot be made. */
static const char *scratch(const char *prefix, const char *const *files)
{
	if (!scratch_dir[0]) {
		snprintf(scratch_dir, sizeof scratch_dir, "/tmp/%s-XXXXXX", prefix);
		if (!mkdtemp(scratch_dir)) {
			scratch_dir[0] = 0;
			return NULL;
		}
		scratch_files = files;
		atexit(scratch_remove);
	}
	return scratch_dir;
}

#endif
