#include "device.h"

#include "../util/launcher.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>


void ck_device_init(struct ck_device *d)
{
	d->kind = CK_DEV_CPU;
	d->index = -1;
	d->gpu_mem = CK_GPU_MEM_DEFAULT;
	d->gpu_min = CK_GPU_MIN_DEFAULT;
}

int ck_device_parse(const char *spec, struct ck_device *d, struct ck_err *err)
{
	d->index = -1;
	if (!strcmp(spec, "cpu")) {
		d->kind = CK_DEV_CPU;
	} else if (!strcmp(spec, "auto")) {
		d->kind = CK_DEV_AUTO;
	} else if (!strcmp(spec, "cuda")) {
		d->kind = CK_DEV_CUDA;
	} else if (!strncmp(spec, "cuda:", 5) && spec[5] >= '0' && spec[5] <= '9') {
		char *end;
		long n = strtol(spec + 5, &end, 10);
		if (*end || n > 1023)
			return ck_fail(err, CK_E_USAGE, "--device %s: not a device number", spec);
		d->kind = CK_DEV_CUDA;
		d->index = (int)n;
	} else {
		return ck_fail(err, CK_E_USAGE, "--device %s: expected cpu, cuda, cuda:N or auto",
			       spec);
	}
	return 0;
}

static int local_rank(void)
{
	int64_t r = ck_launcher_get(CK_LOCAL_RANK);
	return r >= 0 && r < 1 << 20 ? (int)r : 0;
}

int ck_device_open(const struct ck_device *d, int lanes, struct ck_gpu **out, char *note,
		   size_t nnote, struct ck_err *err)
{
	*out = NULL;
	if (nnote)
		note[0] = '\0';
	if (d->kind == CK_DEV_CPU)
		return 0;
	char why[200];
	int count = ck_gpu_count(why, sizeof why);
	if (count == 0) {
		if (d->kind == CK_DEV_AUTO) {
			snprintf(note, nnote, "--device auto: %s; transforms run on the CPU", why);
			return 0;
		}
		return ck_fail(err, CK_E_USAGE, "--device cuda: %s", why);
	}
	int dev = d->index >= 0 ? d->index : local_rank() % count;
	if (ck_gpu_open(dev, d->gpu_mem, lanes, out, err) < 0)
		return -1;
	snprintf(note, nnote, "transforms run on %s, %d lanes in %llu MiB (casts, scales and "
			      "transposes of reads from %llu KiB; copies stay on the CPU)",
		 ck_gpu_name(*out), lanes, (unsigned long long)(d->gpu_mem >> 20),
		 (unsigned long long)(d->gpu_min >> 10));
	return 0;
}
