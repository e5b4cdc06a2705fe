/*
 * tasks/collective_nccl.c: the collectives of tasks/collective.c through NCCL on device memory
 * (GPU build, ZT_USE_NCCL): the comm_<kind>_cuda bodies.
 *
 * Layer: tasks/ (an op file's second transport), over sched/'s NCCL communicator (zt_nccl.h) and
 * kernels/cuda/comm.cu's rank-order sums.
 *
 * With one CUDA worker per rank on every rank, the collective tasks run on that worker
 * (zt_nccl_active, dispatch.c's placement) and move the blocks device to device with
 * NCCL's point-to-point calls, in one group per collective, on the worker's stream; the
 * messages are those of the MPI path (rank r's part goes to rank r, block by block, to be summed
 * there; an all-gather sends every part to every rank), and the sums are kernels/cuda/comm.cu's:
 * the MPI path's rank order and bits. The task's token still orders them (one stream per
 * worker, submitted in the same order on every rank), and every rank still sends the watchdog
 * its note on entering a collective; NCCL's own waits have no timeout of ours. The communicator
 * is sched/nccl.c's.
 */
#include <stdio.h>            /* snprintf */
#include <cuda_runtime_api.h> /* cudaMallocAsync, cudaMemcpyAsync */
#include <nccl.h>             /* ncclSend, ncclRecv, ncclGroupStart */
#include "collective_impl.h"  /* args, slots, zt_collective_* */
#include "tasks_impl.h"       /* zt_slot_buf_*, zt_cuda_stream */
#include "zt_comm.h"          /* zt_comm_rank */
#include "zt_kernels_cuda.h"  /* zt_cuda_rank_sum */
#include "zt_nccl.h"          /* zt_nccl_comm */

/* a failed NCCL or CUDA call in a collective is fatal for the job, as a failed MPI call is */
#define DEV_OK(what, type, call, ok, errstr)                                                     \
    do {                                                                                         \
        type rc_ = (call);                                                                       \
        if (rc_ != ok) {                                                                         \
            char m_[160];                                                                        \
            snprintf(m_, sizeof m_, "%s: %s", what, errstr(rc_));                                \
            zt_collective_die(m_, a);                                                    \
        }                                                                                        \
    } while (0)
#define NCCL_OK(what, call) DEV_OK(what, ncclResult_t, call, ncclSuccess, ncclGetErrorString)
#define CUDA_OK(what, call) DEV_OK(what, cudaError_t, call, cudaSuccess, cudaGetErrorString)

static int cuda_type(int dtype) {
    return dtype == ZT_DTYPE_BF16 ? ZT_CUDA_BF16 : dtype == ZT_DTYPE_F16 ? ZT_CUDA_F16
                                                                         : ZT_CUDA_F32;
}

/* send (or receive) the blocks of rank part's part, in place, to (from) rank peer, one message
 * per block in block order: both sides walk the same list, so the messages pair up */
static void nccl_blocks(void *buffers[], const struct zt_collective_args *a, int part, int peer,
                        int send, cudaStream_t st) {
    for (int64_t b = a->part[2 * part]; b < a->part[2 * part + 1]; b++) {
        void *p = zt_slot_buf_ptr(buffers, &a->hdr, SLOT_BLOCKS, (int)b);
        size_t bytes = (size_t)zt_slot_buf_nx(buffers, &a->hdr, SLOT_BLOCKS, (int)b) *
                       (size_t)a->elemsize;
        if (send) NCCL_OK("ncclSend", ncclSend(p, bytes, ncclUint8, peer, zt_nccl_comm(), st));
        else NCCL_OK("ncclRecv", ncclRecv(p, bytes, ncclUint8, peer, zt_nccl_comm(), st));
    }
}

/* the reduce-scatter of reduce_scatter_body on the device: the copies of this rank's part
 * arrive in rows of a device scratch (its own copy too), then one rank-order sum per block */
static void nccl_reduce_scatter(void *buffers[], const struct zt_collective_args *a,
                                cudaStream_t st, int acc, int keep) {
    const int N = a->nranks, me = zt_comm_rank();
    const int64_t my = zt_collective_part_elems(buffers, a, me);
    const size_t es = (size_t)a->elemsize;
    unsigned char *scratch = NULL;
    CUDA_OK("allocating a reduce-scatter's device scratch",
            cudaMallocAsync((void **)&scratch, (size_t)(my > 0 ? my : 1) * (size_t)N * es, st));
    NCCL_OK("ncclGroupStart", ncclGroupStart());
    for (int k = 1; k < N && my > 0; k++) {
        int r = (me + k) % N;
        int64_t at = 0;
        for (int64_t b = a->part[2 * me]; b < a->part[2 * me + 1]; b++) {
            int64_t n = zt_slot_buf_nx(buffers, &a->hdr, SLOT_BLOCKS, (int)b);
            NCCL_OK("ncclRecv", ncclRecv(scratch + ((size_t)r * (size_t)my + (size_t)at) * es,
                                         (size_t)n * es, ncclUint8, r, zt_nccl_comm(), st));
            at += n;
        }
    }
    for (int k = 1; k < N; k++) nccl_blocks(buffers, a, (me + k) % N, (me + k) % N, 1, st);
    NCCL_OK("ncclGroupEnd", ncclGroupEnd());
    int64_t at = 0;
    for (int64_t b = a->part[2 * me]; b < a->part[2 * me + 1]; b++) {
        int64_t n = zt_slot_buf_nx(buffers, &a->hdr, SLOT_BLOCKS, (int)b);
        CUDA_OK("copying a block into the reduce-scatter's scratch",
                cudaMemcpyAsync(scratch + ((size_t)me * (size_t)my + (size_t)at) * es,
                                zt_slot_buf_ptr(buffers, &a->hdr, SLOT_BLOCKS, (int)b),
                                (size_t)n * es, cudaMemcpyDeviceToDevice, st));
        at += n;
    }
    at = 0;
    for (int64_t b = a->part[2 * me], i = 0; b < a->part[2 * me + 1]; b++, i++) {
        int64_t n = zt_slot_buf_nx(buffers, &a->hdr, SLOT_BLOCKS, (int)b);
        CUDA_OK("the rank-order sum",
                (cudaError_t)zt_cuda_rank_sum(
                    keep ? zt_slot_buf_ptr(buffers, &a->hdr, SLOT_BLOCKS, (int)b) : NULL,
                    acc ? zt_slot_buf_ptr(buffers, &a->hdr, SLOT_AUX, (int)i) : NULL,
                    scratch + (size_t)at * es, (size_t)my, N, (size_t)n,
                    cuda_type(a->hdr.dtype[SLOT_BLOCKS]), cuda_type(a->hdr.dtype[SLOT_AUX]), st));
        at += n;
    }
    CUDA_OK("freeing a reduce-scatter's device scratch", cudaFreeAsync(scratch, st));
}

/* allgather_body on the device: every part to every rank, in place */
static void nccl_allgather(void *buffers[], const struct zt_collective_args *a, cudaStream_t st) {
    const int N = a->nranks, me = zt_comm_rank();
    NCCL_OK("ncclGroupStart", ncclGroupStart());
    for (int k = 1; k < N; k++) {
        int r = (me + k) % N;
        nccl_blocks(buffers, a, r, r, 0, st);  /* its part from r */
        nccl_blocks(buffers, a, me, r, 1, st); /* ours to r */
    }
    NCCL_OK("ncclGroupEnd", ncclGroupEnd());
}

static void collective_body_nccl(void *buffers[], void *cl_arg, int reduce, int gather) {
    const struct zt_collective_args *a = cl_arg;
    const int aux = a->hdr.count[SLOT_AUX] > 0, me = zt_comm_rank();
    cudaStream_t st = (cudaStream_t)zt_cuda_stream();
    if (gather && !reduce && aux) /* copy_source on the device */
        for (int64_t b = a->part[2 * me], i = 0; b < a->part[2 * me + 1]; b++, i++)
            CUDA_OK("copying an all-gather's source",
                    cudaMemcpyAsync(zt_slot_buf_ptr(buffers, &a->hdr, SLOT_BLOCKS, (int)b),
                                    zt_slot_buf_ptr(buffers, &a->hdr, SLOT_AUX, (int)i),
                                    (size_t)zt_slot_buf_nx(buffers, &a->hdr, SLOT_BLOCKS, (int)b) *
                                        (size_t)a->elemsize,
                                    cudaMemcpyDeviceToDevice, st));
    struct zt_coll_id id;
    if (!zt_collective_enter(a, reduce && aux, &id)) return;
    if (reduce) nccl_reduce_scatter(buffers, a, st, aux, !aux || gather);
    if (gather && a->nranks > 1) nccl_allgather(buffers, a, st);
}

void comm_allreduce_cuda(void *buffers[], void *cl_arg) {
    collective_body_nccl(buffers, cl_arg, 1, 1);
}
void comm_reduce_scatter_cuda(void *buffers[], void *cl_arg) {
    collective_body_nccl(buffers, cl_arg, 1, 0);
}
void comm_allgather_cuda(void *buffers[], void *cl_arg) {
    collective_body_nccl(buffers, cl_arg, 0, 1);
}
