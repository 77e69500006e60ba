/* Fuzz target: torch.save files as sources (zip directory, data.pkl through
 * the restricted pickle reader, tensor references; and the legacy non-zip
 * stream of pickles and storage runs), read from a memfd. */
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ckpt/torchbin.h"
#include "util/fileio.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int fd = memfd_create("fuzz", MFD_CLOEXEC);
	if (fd < 0)
		return 0;
	if (write(fd, data, size) == (ssize_t)size) {
		struct ck_file_tensors h;
		struct ck_err err;
		struct ck_leftout lo = {0};
		int r = ck_is_torch_legacy(data, size)
				? ck_torchbin_read_legacy(fd, size, "fuzz", &h, &lo, &err)
				: ck_torchbin_read_fd(fd, size, "fuzz", &h, &lo, &err);
		if (r == 0)
			ck_file_tensors_free(&h);
		ck_leftout_free(&lo);
	}
	close(fd);
	return 0;
}
