/* --device cpu|cuda|cuda:N|auto: which backend evaluates transforms.
 * cpu (the default) never touches a GPU: a training job owns its GPU's
 * memory, so using one is opt-in. cuda takes the GPU of the launcher's local
 * rank (OMPI_COMM_WORLD_LOCAL_RANK, LOCAL_RANK) modulo the devices, else
 * device 0; cuda:N that one; auto a GPU if one is usable, else the CPU. */
#ifndef CK_DEVICE_H
#define CK_DEVICE_H

#include <stdint.h>

#include "../util/error.h"
#include "gpu.h"

enum ck_device_kind { CK_DEV_CPU, CK_DEV_CUDA, CK_DEV_AUTO };

struct ck_device {
	enum ck_device_kind kind;
	int index;	  /* cuda:N; -1: by local rank */
	uint64_t gpu_mem; /* device memory budget for all lanes */
	uint64_t gpu_min; /* smallest read worth the GPU */
};

/* Reads from this size go to the GPU when it is on (smaller ones are not
 * worth a PCIe round trip). */
#define CK_GPU_MIN_DEFAULT (256u << 10)

/* The default: cpu, CK_GPU_MEM_DEFAULT, CK_GPU_MIN_DEFAULT. */
void ck_device_init(struct ck_device *d);
/* Parse a --device value into d->kind and d->index (syntax only; no GPU
 * is touched; the budgets set by other options stay). */
int ck_device_parse(const char *spec, struct ck_device *d, struct ck_err *err);
/* Open the device for `lanes` evaluators: *out is NULL for the CPU (auto
 * without a usable GPU says so in note). Fails with one line when cuda was
 * asked for and cannot be had. Call after any fork (CUDA contexts do not
 * survive one). */
int ck_device_open(const struct ck_device *d, int lanes, struct ck_gpu **out, char *note,
		   size_t nnote, struct ck_err *err);

#endif
