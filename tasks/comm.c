/*
 * tasks/comm.c: collectives as StarPU tasks: all-reduce, reduce-scatter and all-gather of a
 * contiguous range of a flat buffer across the MPI ranks (zt_tasks.h).
 *
 * Sums are computed in a fixed order: the owner of each part receives every rank's copy of it
 * (MPI_Alltoallv moves bytes only) and adds them in rank order 0..N-1, so the result does not
 * depend on MPI's reduction algorithm, the scheduler or timing, and is the same on every rank.
 * An all-reduce is that reduce-scatter followed by an all-gather of the parts.
 *
 * The codelets run on CPU workers, where every block is in main memory at its registered
 * address, so the blocks of one range form one array starting at the first block's pointer.
 * A failing MPI call is fatal for the job: the codelet prints the collective and aborts every
 * rank (MPI_Abort) rather than leave the others waiting.
 */
#include <stdio.h>        /* fprintf */
#include <stdlib.h>       /* malloc, free */
#include <string.h>       /* memcpy */
#include "tasks_impl.h"   /* builder, slots */
#include "zt_comm.h"      /* zt_comm_rank, zt_comm_size */
#include "zt_comm_mpi.h"  /* zt_comm_mpi */

struct zt_comm_args {
    struct zt_task_hdr hdr;
    int nranks;
    int elemsize;
    int64_t seq;        /* per-process sequence number of the collective (messages) */
    int64_t part[];     /* 2 * nranks */
};

static int64_t g_seq = 0; /* submission order = execution order (token) */

static void comm_fail(const struct zt_comm_args *a, const char *what, int err) {
    char msg[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    MPI_Error_string(err, msg, &len);
    fprintf(stderr, "zerotask: error: rank %d: collective #%lld (%s, step %lld, layer %d): %s "
                    "failed: %s\n", zt_comm_rank(), (long long)a->seq,
            zt_task_kind_name(a->hdr.kind), (long long)a->hdr.step, a->hdr.layer, what, msg);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

/* counts/displacements in elements; the parts are small enough for int (checked at submit) */
static void fill_counts(const struct zt_comm_args *a, int *cnt, int *dsp) {
    for (int r = 0; r < a->nranks; r++) {
        cnt[r] = (int)(a->part[2 * r + 1] - a->part[2 * r]);
        dsp[r] = (int)a->part[2 * r];
    }
}

static void reduce_scatter_body(const struct zt_comm_args *a, float *base, int *cnt, int *dsp) {
    const int N = a->nranks, me = zt_comm_rank();
    const int64_t my = a->part[2 * me + 1] - a->part[2 * me];
    float *scratch = malloc((size_t)(my > 0 ? my : 1) * (size_t)N * sizeof(float));
    int *rc = malloc((size_t)N * sizeof(int)), *rd = malloc((size_t)N * sizeof(int));
    if (!scratch || !rc || !rd) {
        fprintf(stderr, "zerotask: error: rank %d: out of memory for a reduce-scatter of %lld "
                        "floats\n", me, (long long)my);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    for (int r = 0; r < N; r++) {
        rc[r] = (int)my;
        rd[r] = (int)(r * my);
    }
    int err = MPI_Alltoallv(base, cnt, dsp, MPI_FLOAT, scratch, rc, rd, MPI_FLOAT, zt_comm_mpi());
    if (err != MPI_SUCCESS) comm_fail(a, "MPI_Alltoallv", err);
    float *out = base + a->part[2 * me];
    for (int64_t i = 0; i < my; i++) {
        float s = scratch[i];
        for (int r = 1; r < N; r++) s += scratch[(int64_t)r * my + i];
        out[i] = s;
    }
    free(scratch);
    free(rc);
    free(rd);
}

static void allgather_body(const struct zt_comm_args *a, void *base, int *cnt, int *dsp) {
    MPI_Datatype t = a->elemsize == 8 ? MPI_DOUBLE : MPI_FLOAT;
    int err = MPI_Allgatherv(MPI_IN_PLACE, 0, t, base, cnt, dsp, t, zt_comm_mpi());
    if (err != MPI_SUCCESS) comm_fail(a, "MPI_Allgatherv", err);
}

static void comm_body(void *buffers[], void *cl_arg, int reduce, int gather) {
    const struct zt_comm_args *a = cl_arg;
    if (a->nranks == 1) return;
    void *base = zt_slot_buf_ptr(buffers, &a->hdr, 0, 0);
    int cnt[a->nranks], dsp[a->nranks];
    fill_counts(a, cnt, dsp);
    if (reduce) reduce_scatter_body(a, base, cnt, dsp);
    if (gather) allgather_body(a, base, cnt, dsp);
}

void comm_allreduce_cpu(void *buffers[], void *cl_arg) { comm_body(buffers, cl_arg, 1, 1); }
void comm_reduce_scatter_cpu(void *buffers[], void *cl_arg) { comm_body(buffers, cl_arg, 1, 0); }
void comm_allgather_cpu(void *buffers[], void *cl_arg) { comm_body(buffers, cl_arg, 0, 1); }

static enum zt_status submit(enum zt_task_kind kind, const char *fn, const struct zt_task_opts *o,
                             const struct zt_block_ref *refs, int n, const int64_t *part,
                             size_t elemsize, zt_tensor_t token) {
    const int N = zt_comm_size();
    if (n < 1 || !refs || !part || !token || (elemsize != 4 && elemsize != 8))
        return zt_error_set(ZT_ERR_INVALID, "%s: bad arguments", fn);
    for (int r = 0; r < N; r++) {
        if (part[2 * r] > part[2 * r + 1] || (r > 0 && part[2 * r] != part[2 * r - 1]) ||
            part[2 * r + 1] - part[2 * r] > INT32_MAX / N)
            return zt_error_set(ZT_ERR_INVALID, "%s: rank %d's part [%lld, %lld) is not in rank "
                                                "order or too large", fn, r,
                                (long long)part[2 * r], (long long)part[2 * r + 1]);
    }
    struct zt_comm_args *a = calloc(1, sizeof *a + 2 * (size_t)N * sizeof(int64_t));
    if (!a) return zt_error_set(ZT_ERR_NOMEM, "out of memory for task arguments");
    a->nranks = N;
    a->elemsize = (int)elemsize;
    a->seq = ++g_seq;
    memcpy(a->part, part, 2 * (size_t)N * sizeof(int64_t));
    struct zt_tb tb;
    zt_tb_init(&tb, &a->hdr, kind, o, -1);
    /* slot 0: the range's blocks; slot 1: the communicator token */
    zt_tb_add_list(&tb, refs, n, STARPU_RW);
    zt_tb_add(&tb, token, 0, STARPU_RW);
    return zt_tb_submit(&tb, a, sizeof *a + 2 * (size_t)N * sizeof(int64_t),
                        o ? o->priority : 0);
}

enum zt_status zt_task_comm_allreduce(const struct zt_task_opts *o, const struct zt_block_ref *refs,
                                      int n, const int64_t *part, zt_tensor_t token) {
    return submit(ZT_KIND_comm_allreduce, "zt_task_comm_allreduce", o, refs, n, part, 4, token);
}

enum zt_status zt_task_comm_reduce_scatter(const struct zt_task_opts *o,
                                           const struct zt_block_ref *refs, int n,
                                           const int64_t *part, zt_tensor_t token) {
    return submit(ZT_KIND_comm_reduce_scatter, "zt_task_comm_reduce_scatter", o, refs, n, part, 4,
                  token);
}

enum zt_status zt_task_comm_allgather(const struct zt_task_opts *o, const struct zt_block_ref *refs,
                                      int n, const int64_t *part, size_t elemsize,
                                      zt_tensor_t token) {
    return submit(ZT_KIND_comm_allgather, "zt_task_comm_allgather", o, refs, n, part, elemsize,
                  token);
}
