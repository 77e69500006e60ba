#include "launcher.h"

#include <stdlib.h>

int64_t ck_launcher_get(enum ck_launcher what)
{
	static const char *const vars[][5] = {
		[CK_RANK] = {"OMPI_COMM_WORLD_RANK", "RANK"},
		[CK_WORLD] = {"OMPI_COMM_WORLD_SIZE", "WORLD_SIZE"},
		[CK_LOCAL_RANK] = {"OMPI_COMM_WORLD_LOCAL_RANK", "LOCAL_RANK", "MPI_LOCALRANKID",
				   "SLURM_LOCALID"},
		[CK_LOCAL_SIZE] = {"OMPI_COMM_WORLD_LOCAL_SIZE", "LOCAL_WORLD_SIZE"},
	};
	for (int k = 0; k < 5 && vars[what][k]; k++) {
		const char *e = getenv(vars[what][k]);
		if (!e)
			continue;
		char *end;
		long long v = strtoll(e, &end, 10);
		return *e && !*end && v >= 0 ? v : -1; /* the first one set decides */
	}
	return -1;
}
