/* Replay driver: feeds every file of the given corpus directories to the
 * linked LLVMFuzzerTestOneInput, so the checked-in corpus (including every
 * crash ever found) runs under gcc and the sanitizers in `meson test`.
 * libFuzzer builds link the same target without this file. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/error.h"
#include "util/json_strict.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);


int main(int argc, char **argv)
{
	size_t total = 0;
	for (int a = 1; a < argc; a++) {
		struct dirent **ents;
		int n = scandir(argv[a], &ents, NULL, alphasort);
		if (n < 0) {
			perror(argv[a]);
			return 1;
		}
		for (int i = 0; i < n; i++) {
			if (ents[i]->d_name[0] != '.') {
				char path[4096];
				snprintf(path, sizeof path, "%s/%s", argv[a], ents[i]->d_name);
				char *buf;
				size_t len;
				struct ck_err err;
				if (ck_read_file(path, 1u << 30, &buf, &len, CK_E_SOURCE, &err) < 0) {
					fprintf(stderr, "%s\n", err.msg);
					return 1;
				}
				/* exact-size copy so ASan sees any overread */
				uint8_t *exact = malloc(len ? len : 1);
				memcpy(exact, buf, len);
				free(buf);
				LLVMFuzzerTestOneInput(exact, len);
				free(exact);
				total++;
			}
			free(ents[i]);
		}
		free(ents);
	}
	printf("replayed %zu inputs\n", total);
	return total ? 0 : 1;
}
