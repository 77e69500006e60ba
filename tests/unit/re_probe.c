/* The regex engine for a test's questions (tests/cli/regex_diff.py): each
 * stdin line "PATTERN\tSUBJECT" is answered on stdout with 1 (the pattern
 * matches somewhere in the subject), 0, or "E message" (refused). */
#include <stdio.h>
#include <string.h>

#include "util/ecma_re.h"

int main(void)
{
	static char line[1 << 20];
	while (fgets(line, sizeof line, stdin)) {
		line[strcspn(line, "\n")] = '\0';
		char *tab = strchr(line, '\t');
		if (!tab) {
			fprintf(stderr, "re_probe: a line without a tab\n");
			return 2;
		}
		*tab = '\0';
		struct ck_re re;
		struct ck_err err;
		if (ck_re_compile(line, &re, &err) < 0) {
			printf("E %s\n", err.msg);
			continue;
		}
		int r = ck_re_search(&re, tab + 1, strlen(tab + 1));
		ck_re_free(&re);
		if (r < 0) {
			fprintf(stderr, "re_probe: search failed (%d)\n", r);
			return 2;
		}
		printf("%d\n", r);
	}
	return 0;
}
