/*
 * sched/zt_comm_mpi.h: the MPI communicator itself, for the collective codelets in tasks/.
 * Internal (not installed): keeps <mpi.h> out of the public headers.
 */
#ifndef ZT_COMM_MPI_H
#define ZT_COMM_MPI_H

#include <mpi.h>

MPI_Comm zt_comm_mpi(void);

#endif /* ZT_COMM_MPI_H */
