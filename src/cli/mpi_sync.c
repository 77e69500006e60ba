#include "mpi_sync.h"

#include <stdlib.h>

#include "ckptfs_config.h"
#if CKPTFS_HAVE_MPI
#include <mpi.h>
#endif
#if defined(__SANITIZE_ADDRESS__)
/* OpenMPI keeps allocations past MPI_Finalize (some in plugins it has
 * unloaded, so no suppression can name them): not ckptfs' leaks. */
#include <sanitizer/lsan_interface.h>
#define LSAN_OFF() __lsan_disable()
#define LSAN_ON() __lsan_enable()
#else
#define LSAN_OFF() ((void)0)
#define LSAN_ON() ((void)0)
#endif

int ck_mpi_launched(void)
{
	return CKPTFS_HAVE_MPI && (getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK"));
}

int ck_mpi_agree(int ok)
{
#if CKPTFS_HAVE_MPI
	if (!getenv("OMPI_COMM_WORLD_SIZE") && !getenv("PMIX_RANK"))
		return -1;
	LSAN_OFF();
	int all = 0, r = MPI_Init(NULL, NULL);
	if (r == MPI_SUCCESS) {
		int mine = ok != 0;
		r = MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
	}
	LSAN_ON();
	return r == MPI_SUCCESS && all;
#else
	(void)ok;
	return -1;
#endif
}

void ck_mpi_finish(void)
{
#if CKPTFS_HAVE_MPI
	int init = 0, done = 0;
	MPI_Initialized(&init);
	MPI_Finalized(&done);
	if (init && !done) {
		LSAN_OFF();
		MPI_Finalize();
		LSAN_ON();
	}
#endif
}

int ck_mpi_all_ok(int ok)
{
	int all = ck_mpi_agree(ok);
	if (all >= 0)
		ck_mpi_finish();
	return all;
}

int ck_mpi_run_verb(int (*body)(int argc, char **argv, int *synced), int argc, char **argv)
{
	int synced = 0;
	int rc = body(argc, argv, &synced);
	if (!synced)
		ck_mpi_all_ok(rc == 0);
	return rc;
}
