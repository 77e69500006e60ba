/* What a launcher (mpirun, torchrun, Intel MPI, Slurm) tells a process
 * through its environment: one lookup for every user (ranks of a view,
 * {rank} and {local_rank} in paths, the local GPU). */
#ifndef CK_LAUNCHER_H
#define CK_LAUNCHER_H

#include <stdint.h>

enum ck_launcher {
	CK_RANK,       /* OMPI_COMM_WORLD_RANK, RANK */
	CK_WORLD,      /* OMPI_COMM_WORLD_SIZE, WORLD_SIZE */
	CK_LOCAL_RANK, /* OMPI_COMM_WORLD_LOCAL_RANK, LOCAL_RANK, MPI_LOCALRANKID, SLURM_LOCALID */
	CK_LOCAL_SIZE  /* OMPI_COMM_WORLD_LOCAL_SIZE, LOCAL_WORLD_SIZE */
};

/* The first of the variables above that holds a non-negative integer, or -1. */
int64_t ck_launcher_get(enum ck_launcher what);

#endif
