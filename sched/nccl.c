/*
 * sched/nccl.c: set-up and tear-down of the NCCL communicator (GPU build, ZT_USE_NCCL), and the
 * choice between NCCL and MPI for the collectives.
 *
 * Layer: sched/, beside the MPI communicator (comm.c): runtime.c calls zt_nccl_init once StarPU
 * runs and zt_nccl_free before it stops; the collectives in tasks/collective.c use the
 * communicator. Every rank must take the same transport, or one would wait for messages the
 * other transport carries: the ranks agree (zt_comm_count_failed of "I cannot") before any NCCL
 * call.
 * MPI launches the ranks and carries the communicator's id (ncclGetUniqueId on rank 0,
 * MPI_Bcast). The communicator lives on the CUDA worker's thread, with its device current.
 */
#include <starpu.h>       /* starpu_cuda_worker_get_count, starpu_execute_on_each_worker */
#include "zt_comm.h"      /* zt_comm_rank, zt_comm_size */
#include "zt_comm_mpi.h"  /* zt_comm_mpi */
#include "zt_nccl.h"      /* our prototypes */
#include "zt_sched.h"     /* zt_knob_int */

static ncclComm_t g_nccl = NULL; /* NULL: the collectives go through MPI */
static ncclResult_t g_nccl_rc;   /* the worker's ncclCommInitRank / ncclCommDestroy */

/* NCCL's communicator spans the world: a group of fewer ranks (a pipeline stage's replicas)
 * runs its collectives through MPI, on every rank of the job alike */
int zt_nccl_active(void) { return g_nccl != NULL && zt_comm_group_size() == zt_comm_size(); }

ncclComm_t zt_nccl_comm(void) { return g_nccl; }

static void init_on_worker(void *arg) {
    g_nccl_rc = ncclCommInitRank(&g_nccl, zt_comm_size(), *(ncclUniqueId *)arg, zt_comm_rank());
    if (g_nccl_rc != ncclSuccess) g_nccl = NULL;
}

static void free_on_worker(void *arg) {
    (void)arg;
    g_nccl_rc = ncclCommDestroy(g_nccl);
}

/* *all: nonzero when every rank wants NCCL and has exactly one CUDA worker */
static enum zt_status agree_on_nccl(int *all) {
    int64_t want = 1;
    ZT_CHECK(zt_knob_int("ZT_NCCL", &want));
    int ok = want && starpu_cuda_worker_get_count() == 1, nlacking = 0;
    ZT_CHECK(zt_comm_count_failed(!ok, &nlacking));
    *all = nlacking == 0;
    return ZT_OK;
}

enum zt_status zt_nccl_init(void) {
    int all = 0;
    ZT_CHECK(agree_on_nccl(&all));
    if (!all) return ZT_OK;
    ncclUniqueId uid;
    ncclResult_t rc = zt_comm_rank() == 0 ? ncclGetUniqueId(&uid) : ncclSuccess;
    int bad = rc != ncclSuccess;
    if (zt_comm_size() > 1) {
        MPI_Bcast(&bad, 1, MPI_INT, 0, zt_comm_mpi());
        if (!bad) MPI_Bcast(&uid, (int)sizeof uid, MPI_BYTE, 0, zt_comm_mpi());
    }
    if (bad)
        return zt_error_set(ZT_ERR_RUNTIME, "NCCL: ncclGetUniqueId on rank 0 failed%s%s "
                                            "(ZT_NCCL=0 runs the collectives through MPI)",
                            rc != ncclSuccess ? ": " : "",
                            rc != ncclSuccess ? ncclGetErrorString(rc) : "");
    starpu_execute_on_each_worker(init_on_worker, &uid, STARPU_CUDA);
    if (g_nccl_rc != ncclSuccess)
        return zt_error_set(ZT_ERR_RUNTIME, "NCCL: ncclCommInitRank (rank %d of %d) failed: %s "
                                            "(ZT_NCCL=0 runs the collectives through MPI)",
                            zt_comm_rank(), zt_comm_size(), ncclGetErrorString(g_nccl_rc));
    return ZT_OK;
}

void zt_nccl_free(void) {
    if (!g_nccl) return;
    starpu_execute_on_each_worker(free_on_worker, NULL, STARPU_CUDA);
    g_nccl = NULL;
}
