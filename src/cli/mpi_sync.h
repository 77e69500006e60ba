/* The one thing ckptfs asks of MPI: after each process has done its part
 * (mounted, converted), agree whether every rank succeeded. MPI is
 * initialised only for this, after any fork (the FUSE daemon never has MPI
 * state), and finalised at once. */
#ifndef CK_MPI_SYNC_H
#define CK_MPI_SYNC_H

/* 1 if every rank passed ok != 0, 0 if some did not; -1 when not launched
 * by mpirun or built without MPI (then nothing was done). Every rank of the
 * job must call it exactly once. */
int ck_mpi_all_ok(int ok);
/* Whether ck_mpi_agree will take place (built with MPI, started by mpirun). */
int ck_mpi_launched(void);
/* The same in two steps, for work that must happen between the agreement
 * and the end of MPI: MPI_Finalize is collective, so no rank exits (and has
 * mpirun tear the job down) before every rank has done it. ck_mpi_finish
 * must follow a ck_mpi_agree that did not return -1. */
int ck_mpi_agree(int ok);
void ck_mpi_finish(void);

/* Run a verb whose body sets *synced once it has called ck_mpi_all_ok (or
 * must not: a foreground daemon); if it returns before that, make the call
 * for it, so the other ranks never wait forever. */
int ck_mpi_run_verb(int (*body)(int argc, char **argv, int *synced), int argc, char **argv);

#endif
