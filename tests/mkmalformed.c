/* mkmalformed DIR: write one file per malformed-safetensors class,
 * DIR/<class>.safetensors, plus DIR/<class>.expect holding the message
 * fragment. Feeds the CLI tests and the replay corpus. */
#include <stdio.h>
#include <stdlib.h>

#include "malformed.h"

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: mkmalformed DIR\n");
		return 2;
	}
	for (size_t i = 0; i < n_malformed_classes; i++) {
		const struct malformed_class *c = &malformed_classes[i];
		size_t len;
		unsigned char *img = c->make(&len);
		char path[4096];
		snprintf(path, sizeof path, "%s/%s.safetensors", argv[1], c->name);
		FILE *f = fopen(path, "wb");
		if (!f || fwrite(img, 1, len, f) != len || fclose(f) != 0) {
			perror(path);
			return 1;
		}
		free(img);
		snprintf(path, sizeof path, "%s/%s.expect", argv[1], c->name);
		f = fopen(path, "w");
		if (!f || fprintf(f, "%s\n", c->expect) < 0 || fclose(f) != 0) {
			perror(path);
			return 1;
		}
	}
	return 0;
}
