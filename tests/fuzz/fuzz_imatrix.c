/* Fuzz target: importance matrices (--gguf-imatrix), the legacy .dat and
 * the GGUF format, read from a memfd by its /proc path. A matrix that
 * loads must be what the loader promises: entries sorted by name, each
 * once, 1 to 64 bytes, at least one finite value each; anything else is
 * the harness's finding (abort). */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ckpt/imatrix.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int fd = memfd_create("fuzz", MFD_CLOEXEC);
	if (fd < 0)
		return 0;
	if (write(fd, data, size) == (ssize_t)size) {
		char path[64];
		snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
		struct ck_imatrix m;
		struct ck_err err;
		if (ck_imatrix_load(path, &m, &err) == 0) {
			if (!m.n)
				abort();
			for (size_t i = 0; i < m.n; i++) {
				size_t len = strlen(m.e[i].name);
				if (len < 1 || len > 64 || !m.e[i].n ||
				    (i && strcmp(m.e[i - 1].name, m.e[i].name) >= 0) ||
				    ck_imatrix_find(&m, m.e[i].name) != &m.e[i])
					abort();
				for (uint64_t k = 0; k < m.e[i].n; k++)
					if (!isfinite(m.e[i].v[k]))
						abort();
			}
			ck_imatrix_free(&m);
		}
	}
	close(fd);
	return 0;
}
