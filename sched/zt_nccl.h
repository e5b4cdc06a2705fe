/*
 * sched/zt_nccl.h: the NCCL communicator of the GPU build, for the collectives' device bodies in
 * tasks/ (internal, not installed; only with ZT_USE_NCCL).
 *
 * Layer: sched/. zt_runtime_init sets it up once StarPU runs and zt_runtime_free tears it down
 * before StarPU stops (sched/nccl.c); tasks/ only uses it.
 */
#ifndef ZT_NCCL_H
#define ZT_NCCL_H

#include <nccl.h>      /* ncclComm_t */
#include "zt_status.h" /* enum zt_status */

/* After StarPU starts: agree with every rank on the collectives' transport (NCCL when every rank
 * has exactly one CUDA worker and ZT_NCCL=1, else MPI), and for NCCL create the communicator on
 * the CUDA worker (the id from rank 0 through MPI). ZT_OK also when MPI is kept; ZT_ERR_RUNTIME
 * when the agreement or NCCL fails. */
enum zt_status zt_nccl_init(void);
/* Destroy the communicator on its worker (nothing when MPI was kept); before StarPU stops. */
void zt_nccl_free(void);
/* Nonzero when the collectives go through NCCL (the same on every rank). */
int zt_nccl_active(void);
/* The communicator; NULL when the collectives go through MPI. */
ncclComm_t zt_nccl_comm(void);

#endif /* ZT_NCCL_H */
