/*
 * tasks/comm.c: collectives as StarPU tasks: all-reduce, reduce-scatter and all-gather of a
 * contiguous range of a flat buffer across the MPI ranks (zt_tasks.h).
 *
 * Sums are computed in a fixed order: the owner of each part receives every rank's copy of it
 * (point-to-point messages move bytes only) and adds them in rank order 0..N-1, so the result
 * does not depend on MPI's algorithms, the scheduler or timing, and is the same on every rank.
 * An all-reduce is that reduce-scatter followed by an all-gather of the parts. Messages are
 * tagged with the collective's sequence number, so a rank that is missing or ahead never matches
 * the wrong collective; the waits go through the watchdog (sched/comm.c, ZT_COMM_TIMEOUT).
 * Every rank sends (N-1)/N of the range and receives as much, as a ring does, in one round.
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
    int64_t seq;        /* per-process sequence number of the collective (tags, reports) */
    int64_t part[];     /* 2 * nranks */
};

static int64_t g_seq = 0; /* submission order = execution order (token) */

static struct zt_coll_id coll_id(const struct zt_comm_args *a) {
    struct zt_coll_id id = {.seq = a->seq, .step = a->hdr.step, .layer = a->hdr.layer};
    snprintf(id.name, sizeof id.name, "%s", zt_task_kind_name(a->hdr.kind));
    return id;
}

static int64_t part_len(const struct zt_comm_args *a, int r) {
    return a->part[2 * r + 1] - a->part[2 * r];
}

/* Every rank sends its copy of part r to rank r; rank me adds the N copies of its part in rank
 * order 0..N-1 and keeps the sum in place. */
static void reduce_scatter_body(const struct zt_comm_args *a, const struct zt_coll_id *id,
                                float *base, MPI_Request *req) {
    const int N = a->nranks, me = zt_comm_rank(), tag = zt_comm_tag(a->seq);
    const int64_t my = part_len(a, me);
    float *scratch = malloc((size_t)(my > 0 ? my : 1) * (size_t)N * sizeof(float));
    if (!scratch) {
        fprintf(stderr, "zerotask: error: rank %d: out of memory for a reduce-scatter of %lld "
                        "floats\n", me, (long long)my);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    int nr = 0, err = MPI_SUCCESS;
    for (int k = 1; k < N && my > 0 && err == MPI_SUCCESS; k++) {
        int r = (me + k) % N;
        err = MPI_Irecv(scratch + (int64_t)r * my, (int)my, MPI_FLOAT, r, tag, zt_comm_mpi(),
                        &req[nr++]);
    }
    for (int k = 1; k < N && err == MPI_SUCCESS; k++) {
        int r = (me + k) % N;
        if (part_len(a, r) > 0)
            err = MPI_Isend(base + a->part[2 * r], (int)part_len(a, r), MPI_FLOAT, r, tag,
                            zt_comm_mpi(), &req[nr++]);
    }
    if (err != MPI_SUCCESS) zt_comm_fail(id, "posting the reduce-scatter messages", err);
    zt_comm_waitall(nr, req, id);
    float *out = base + a->part[2 * me];
    memcpy(scratch + (int64_t)me * my, out, (size_t)my * sizeof(float));
    for (int64_t i = 0; i < my; i++) {
        float s = scratch[i];
        for (int r = 1; r < N; r++) s += scratch[(int64_t)r * my + i];
        out[i] = s;
    }
    free(scratch);
}

/* Every rank sends its part to every other rank, in place. */
static void allgather_body(const struct zt_comm_args *a, const struct zt_coll_id *id,
                           char *base, MPI_Request *req) {
    const int N = a->nranks, me = zt_comm_rank(), tag = zt_comm_tag(a->seq);
    const size_t es = (size_t)a->elemsize;
    MPI_Datatype t = a->elemsize == 8 ? MPI_DOUBLE : MPI_FLOAT;
    int nr = 0, err = MPI_SUCCESS;
    for (int k = 1; k < N && err == MPI_SUCCESS; k++) {
        int r = (me + k) % N;
        if (part_len(a, r) > 0)
            err = MPI_Irecv(base + (size_t)a->part[2 * r] * es, (int)part_len(a, r), t, r, tag,
                            zt_comm_mpi(), &req[nr++]);
    }
    for (int k = 1; k < N && part_len(a, me) > 0 && err == MPI_SUCCESS; k++) {
        int r = (me + k) % N;
        err = MPI_Isend(base + (size_t)a->part[2 * me] * es, (int)part_len(a, me), t, r, tag,
                        zt_comm_mpi(), &req[nr++]);
    }
    if (err != MPI_SUCCESS) zt_comm_fail(id, "posting the all-gather messages", err);
    zt_comm_waitall(nr, req, id);
}

static void comm_body(void *buffers[], void *cl_arg, int reduce, int gather) {
    const struct zt_comm_args *a = cl_arg;
    if (a->nranks == 1) return;
    if (zt_comm_skip(a->seq)) {
        fprintf(stderr, "zerotask: rank %d skips collective #%lld %s (ZT_TEST_SKIP_COLLECTIVE)\n",
                zt_comm_rank(), (long long)a->seq, zt_task_kind_name(a->hdr.kind));
        return;
    }
    const struct zt_coll_id id = coll_id(a);
    zt_comm_enter(&id);
    void *base = zt_slot_buf_ptr(buffers, &a->hdr, 0, 0);
    MPI_Request *req = malloc(2 * (size_t)a->nranks * sizeof *req);
    if (!req) {
        fprintf(stderr, "zerotask: error: rank %d: out of memory in collective #%lld\n",
                zt_comm_rank(), (long long)a->seq);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (reduce) reduce_scatter_body(a, &id, base, req);
    if (gather) allgather_body(a, &id, base, req);
    free(req);
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
