#include "bdi.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int ck_raise_bdi_readahead(const char *mountpoint, unsigned kb)
{
	FILE *mi = fopen("/proc/self/mountinfo", "r");
	char line[8192];
	int rc = -1;
	while (mi && fgets(line, sizeof line, mi)) {
		unsigned maj, min;
		char mnt[4096];
		if (sscanf(line, "%*d %*d %u:%u %*s %4095s", &maj, &min, mnt) != 3 ||
		    strcmp(mnt, mountpoint))
			continue;
		char p[128], val[32];
		snprintf(p, sizeof p, "/sys/class/bdi/%u:%u/read_ahead_kb", maj, min);
		int n = snprintf(val, sizeof val, "%u", kb);
		int fd = open(p, O_WRONLY | O_CLOEXEC);
		if (fd >= 0) {
			if (write(fd, val, (size_t)n) == n)
				rc = 0;
			close(fd);
		}
	}
	if (mi)
		fclose(mi);
	return rc;
}
