/*
 * tasks/collective.c: collectives as StarPU tasks: all-reduce, reduce-scatter and all-gather of
 * a list of blocks across the ranks of the collectives' group (zt_tasks.h): the MPI world, or
 * a pipeline stage's data-parallel replicas (zt_comm_set_group); "rank" below is a rank of it.
 *
 * Layer: tasks/ (an op file). It uses the communicators sched/ sets up and tears down: the MPI
 * one (zt_comm_mpi.h, with its watchdog) and, in the GPU build, the NCCL one (zt_nccl.h).
 *
 * The blocks of a collective may lie anywhere (one flat buffer, or the gathered-parameter and
 * gradient slots of ZeRO stage 3): each rank's part is a run of whole blocks, sent and received
 * in place through an MPI hindexed datatype over the blocks' addresses, so nothing is packed.
 * Sums are computed in a fixed order: the owner of each part receives every rank's copy of it
 * (point-to-point messages move bytes only) and adds them in rank order 0..N-1, so the result
 * does not depend on MPI's algorithms, the scheduler or timing, and is the same on every rank.
 * An all-reduce is that reduce-scatter followed by an all-gather of the parts. Messages are
 * tagged with the collective's sequence number, so a rank that is missing or ahead never matches
 * the wrong collective; the waits go through the watchdog (sched/comm.c, ZT_COMM_TIMEOUT).
 * Every rank sends (N-1)/N of the range and receives as much, as a ring does, in one round.
 * bf16/fp16 blocks travel as 16-bit data (half the bytes of fp32); their sums are computed in
 * fp32 in the same rank order and rounded once to nearest even (the accumulator of a
 * reduce-scatter may be fp32 or 16-bit: it is added to in fp32 and rounded when 16-bit).
 *
 * A failing MPI call is fatal for the job: the codelet prints the collective and aborts every
 * rank (MPI_Abort) rather than leave the others waiting. The NCCL bodies of the GPU build are
 * tasks/collective_nccl.c; what both share is tasks/collective_impl.h.
 */
#include <stdio.h>            /* fprintf, snprintf */
#include <stdlib.h>           /* malloc, free */
#include <string.h>           /* memcpy */
#include "collective_impl.h"  /* args, slots, zt_collective_* */
#include "tasks_impl.h"       /* builder, slots */
#include "zt_comm.h"          /* zt_comm_rank, zt_comm_group_rank, zt_comm_group_size */
#include "zt_comm_mpi.h"      /* zt_comm_mpi, zt_comm_enter, zt_comm_abort_job */

static int64_t g_seq = 0; /* submission order = execution order (token) */

void zt_collective_die(const char *what, const struct zt_collective_args *a) {
    fprintf(stderr, "zerotask: error: rank %d: %s in collective #%lld\n", zt_comm_rank(), what,
            (long long)a->seq);
    zt_comm_abort_job();
}

int64_t zt_collective_part_elems(void *buffers[], const struct zt_collective_args *a, int r) {
    int64_t n = 0;
    for (int64_t i = a->part[2 * r]; i < a->part[2 * r + 1]; i++)
        n += zt_slot_buf_nx(buffers, &a->hdr, SLOT_BLOCKS, (int)i);
    return n;
}

int zt_collective_enter(const struct zt_collective_args *a, int local_sum,
                        struct zt_coll_id *id) {
    if (a->nranks == 1 && !local_sum) return 0;
    if (zt_comm_skip(a->seq)) {
        fprintf(stderr, "zerotask: rank %d skips collective #%lld %s (ZT_TEST_SKIP_COLLECTIVE)\n",
                zt_comm_rank(), (long long)a->seq, zt_task_kind_name(a->hdr.kind));
        return 0;
    }
    *id = (struct zt_coll_id){.seq = a->seq, .step = a->hdr.step, .layer = a->hdr.layer};
    snprintf(id->name, sizeof id->name, "%s", zt_task_kind_name(a->hdr.kind));
    if (a->nranks > 1) zt_comm_enter(id);
    return 1;
}

// ----------------------------------------------------------------------------
// the MPI host bodies

/* the datatype that covers rank r's blocks at their addresses (use with MPI_BOTTOM) */
static MPI_Datatype part_type(void *buffers[], const struct zt_collective_args *a, int r,
                              const struct zt_coll_id *id) {
    int n = (int)(a->part[2 * r + 1] - a->part[2 * r]);
    int *len = malloc((size_t)n * sizeof *len);
    MPI_Aint *disp = malloc((size_t)n * sizeof *disp);
    if (!len || !disp) zt_collective_die("out of memory for a datatype", a);
    for (int i = 0; i < n; i++) {
        int b = (int)a->part[2 * r] + i;
        len[i] = (int)zt_slot_buf_nx(buffers, &a->hdr, SLOT_BLOCKS, b);
        MPI_Get_address(zt_slot_buf_ptr(buffers, &a->hdr, SLOT_BLOCKS, b), &disp[i]);
    }
    MPI_Datatype t;
    MPI_Datatype el = a->elemsize == 8 ? MPI_DOUBLE : a->elemsize == 2 ? MPI_UINT16_T : MPI_FLOAT;
    int err = MPI_Type_create_hindexed(n, len, disp, el, &t);
    if (err == MPI_SUCCESS) err = MPI_Type_commit(&t);
    if (err != MPI_SUCCESS) zt_comm_fail(id, "building a datatype", err);
    free(len);
    free(disp);
    return t;
}

/* n elements of dtype at src as fp32 (F32: src itself, no copy) / back into dst */
static const float *widen(float *tmp, const void *src, size_t n, int dtype) {
    if (dtype == ZT_DTYPE_F32) return src;
    zt_dtype_to_f32(dtype, tmp, src, n);
    return tmp;
}
static void narrow(void *dst, const float *src, size_t n, int dtype) {
    if (dtype != ZT_DTYPE_F32) zt_dtype_from_f32(dtype, dst, src, n);
}

/* Every rank sends its copy of part r to rank r: rank me receives the others' copies of its
 * part into rows r of scratch ([N][my] elements) and puts its own into row me. */
static void exchange_parts(void *buffers[], const struct zt_collective_args *a,
                           const struct zt_coll_id *id, MPI_Request *req, unsigned char *scratch) {
    const int N = a->nranks, me = zt_comm_group_rank(), tag = zt_comm_tag(a->seq);
    const int64_t my = zt_collective_part_elems(buffers, a, me);
    const size_t es = (size_t)a->elemsize;
    const MPI_Datatype el = es == 2 ? MPI_UINT16_T : MPI_FLOAT;
    MPI_Datatype *ty = malloc((size_t)N * sizeof *ty);
    if (!ty) zt_collective_die("out of memory for a reduce-scatter", a);
    for (int r = 0; r < N; r++) ty[r] = MPI_DATATYPE_NULL;
    int nr = 0, err = MPI_SUCCESS;
    for (int k = 1; k < N && my > 0 && err == MPI_SUCCESS; k++) {
        int r = (me + k) % N;
        err = MPI_Irecv(scratch + (size_t)r * (size_t)my * es, (int)my, el, a->base + r, tag,
                        zt_comm_mpi(),
                        &req[nr++]);
    }
    for (int k = 1; k < N && err == MPI_SUCCESS; k++) {
        int r = (me + k) % N;
        if (a->part[2 * r + 1] > a->part[2 * r]) {
            ty[r] = part_type(buffers, a, r, id);
            err = MPI_Isend(MPI_BOTTOM, 1, ty[r], a->base + r, tag, zt_comm_mpi(), &req[nr++]);
        }
    }
    if (err != MPI_SUCCESS) zt_comm_fail(id, "posting the reduce-scatter messages", err);
    zt_comm_waitall(nr, req, id);
    for (int r = 0; r < N; r++)
        if (ty[r] != MPI_DATATYPE_NULL) MPI_Type_free(&ty[r]);
    free(ty);
    int64_t at = 0;
    for (int64_t b = a->part[2 * me]; b < a->part[2 * me + 1]; b++) {
        int64_t n = zt_slot_buf_nx(buffers, &a->hdr, SLOT_BLOCKS, (int)b);
        memcpy(scratch + ((size_t)me * (size_t)my + (size_t)at) * es,
               zt_slot_buf_ptr(buffers, &a->hdr, SLOT_BLOCKS, (int)b), (size_t)n * es);
        at += n;
    }
}

/* Add the N copies in scratch in rank order 0..N-1, in fp32 whatever the blocks' type (16-bit
 * copies are widened first); keep the sum in this rank's blocks (keep) and/or add it to the
 * accumulator blocks (acc), each rounded once to its type. */
static void sum_parts(void *buffers[], const struct zt_collective_args *a,
                      const unsigned char *scratch, int acc, int keep) {
    const int N = a->nranks, me = zt_comm_group_rank();
    const int64_t my = zt_collective_part_elems(buffers, a, me);
    const int dt = a->hdr.dtype[SLOT_BLOCKS], adt = a->hdr.dtype[SLOT_AUX];
    /* the copies as fp32, and fp32 room for one block's sum and accumulator (16-bit only) */
    int64_t maxn = 1;
    for (int64_t b = a->part[2 * me]; b < a->part[2 * me + 1]; b++)
        if (zt_slot_buf_nx(buffers, &a->hdr, SLOT_BLOCKS, (int)b) > maxn)
            maxn = zt_slot_buf_nx(buffers, &a->hdr, SLOT_BLOCKS, (int)b);
    float *wide = dt == ZT_DTYPE_F32 ? NULL : malloc((size_t)(my > 0 ? my : 1) * (size_t)N * 4);
    float *tout = dt == ZT_DTYPE_F32 ? NULL : malloc((size_t)maxn * 4);
    float *tacc = adt == ZT_DTYPE_F32 ? NULL : malloc((size_t)maxn * 4);
    if ((dt != ZT_DTYPE_F32 && (!wide || !tout)) || (adt != ZT_DTYPE_F32 && !tacc))
        zt_collective_die("out of memory for a reduce-scatter", a);
    const float *w = widen(wide, scratch, (size_t)my * (size_t)N, dt);
    int64_t at = 0;
    for (int64_t b = a->part[2 * me], i = 0; b < a->part[2 * me + 1]; b++, i++) {
        int64_t n = zt_slot_buf_nx(buffers, &a->hdr, SLOT_BLOCKS, (int)b);
        void *outp = zt_slot_buf_ptr(buffers, &a->hdr, SLOT_BLOCKS, (int)b);
        void *accp = acc ? zt_slot_buf_ptr(buffers, &a->hdr, SLOT_AUX, (int)i) : NULL;
        float *out = dt == ZT_DTYPE_F32 ? outp : tout;
        float *dst = !acc                ? NULL
                     : adt == ZT_DTYPE_F32 ? accp
                                           : (float *)widen(tacc, accp, (size_t)n, adt);
        for (int64_t j = 0; j < n; j++) {
            float s = w[at + j];
            for (int r = 1; r < N; r++) s += w[(int64_t)r * my + at + j];
            if (acc) dst[j] += s;
            if (keep) out[j] = s;
        }
        if (keep) narrow(outp, out, (size_t)n, dt);
        if (acc) narrow(accp, dst, (size_t)n, adt);
        at += n;
    }
    free(wide);
    free(tout);
    free(tacc);
}

size_t zt_task_comm_reduce_scratch(int64_t my, int nranks, enum zt_dtype dt, enum zt_dtype acc,
                                   int64_t max_block) {
    const size_t parts = (size_t)(my > 0 ? my : 1) * (size_t)nranks;
    const int dt16 = dt == ZT_DTYPE_BF16 || dt == ZT_DTYPE_F16;
    const int acc16 = acc == ZT_DTYPE_BF16 || acc == ZT_DTYPE_F16;
    return parts * (dt16 ? 2 : 4)                       /* reduce_scatter_body's copies */
           + (dt16 ? parts * 4 + (size_t)max_block * 4 : 0) /* sum_parts: widened, one sum */
           + (acc16 ? (size_t)max_block * 4 : 0);       /* one accumulator block widened */
}

/* The reduce-scatter: this rank's part summed over the ranks in rank order (exchange_parts,
 * then sum_parts), kept in place or added to the accumulator blocks (slot 2). */
static void reduce_scatter_body(void *buffers[], const struct zt_collective_args *a,
                                const struct zt_coll_id *id, MPI_Request *req, int acc,
                                int keep) {
    const int64_t my = zt_collective_part_elems(buffers, a, zt_comm_group_rank());
    unsigned char *scratch = malloc((size_t)(my > 0 ? my : 1) * (size_t)a->nranks *
                                    (size_t)a->elemsize);
    if (!scratch) zt_collective_die("out of memory for a reduce-scatter", a);
    exchange_parts(buffers, a, id, req, scratch);
    sum_parts(buffers, a, scratch, acc, keep);
    free(scratch);
}

/* Every rank sends its part to every other rank, in place. */
static void allgather_body(void *buffers[], const struct zt_collective_args *a,
                           const struct zt_coll_id *id, MPI_Request *req) {
    const int N = a->nranks, me = zt_comm_group_rank(), tag = zt_comm_tag(a->seq);
    MPI_Datatype *ty = malloc((size_t)N * sizeof *ty);
    if (!ty) zt_collective_die("out of memory for an all-gather", a);
    for (int r = 0; r < N; r++) ty[r] = MPI_DATATYPE_NULL;
    int nr = 0, err = MPI_SUCCESS;
    for (int r = 0; r < N && err == MPI_SUCCESS; r++)
        if (a->part[2 * r + 1] > a->part[2 * r]) ty[r] = part_type(buffers, a, r, id);
    for (int k = 1; k < N && err == MPI_SUCCESS; k++) {
        int r = (me + k) % N;
        if (ty[r] != MPI_DATATYPE_NULL)
            err = MPI_Irecv(MPI_BOTTOM, 1, ty[r], a->base + r, tag, zt_comm_mpi(), &req[nr++]);
    }
    for (int k = 1; k < N && ty[me] != MPI_DATATYPE_NULL && err == MPI_SUCCESS; k++) {
        int r = (me + k) % N;
        err = MPI_Isend(MPI_BOTTOM, 1, ty[me], a->base + r, tag, zt_comm_mpi(), &req[nr++]);
    }
    if (err != MPI_SUCCESS) zt_comm_fail(id, "posting the all-gather messages", err);
    zt_comm_waitall(nr, req, id);
    for (int r = 0; r < N; r++)
        if (ty[r] != MPI_DATATYPE_NULL) MPI_Type_free(&ty[r]);
    free(ty);
}

/* all-gather source: copy the caller's source blocks (slot 2) into its part */
static void copy_source(void *buffers[], const struct zt_collective_args *a) {
    const int me = zt_comm_group_rank();
    for (int64_t b = a->part[2 * me], i = 0; b < a->part[2 * me + 1]; b++, i++)
        memcpy(zt_slot_buf_ptr(buffers, &a->hdr, SLOT_BLOCKS, (int)b),
               zt_slot_buf_ptr(buffers, &a->hdr, SLOT_AUX, (int)i),
               (size_t)zt_slot_buf_nx(buffers, &a->hdr, SLOT_BLOCKS, (int)b) * (size_t)a->elemsize);
}

static void collective_body(void *buffers[], void *cl_arg, int reduce, int gather) {
    const struct zt_collective_args *a = cl_arg;
    const int aux = a->hdr.count[SLOT_AUX] > 0;
    if (gather && !reduce && aux) copy_source(buffers, a);
    struct zt_coll_id id;
    if (!zt_collective_enter(a, reduce && aux, &id)) return;
    MPI_Request *req = malloc(2 * (size_t)a->nranks * sizeof *req);
    if (!req) zt_collective_die("out of memory", a);
    if (reduce) reduce_scatter_body(buffers, a, &id, req, aux, !aux || gather);
    if (gather && a->nranks > 1) allgather_body(buffers, a, &id, req);
    free(req);
}

void comm_allreduce_cpu(void *buffers[], void *cl_arg) { collective_body(buffers, cl_arg, 1, 1); }
void comm_reduce_scatter_cpu(void *buffers[], void *cl_arg) {
    collective_body(buffers, cl_arg, 1, 0);
}
void comm_allgather_cpu(void *buffers[], void *cl_arg) { collective_body(buffers, cl_arg, 0, 1); }

// ----------------------------------------------------------------------------
// the inserts

/* the ranks' parts cover the n blocks in rank order, each within an MPI count, and the aux
 * blocks match this rank's part block by block */
static enum zt_status check_parts(const char *fn, const struct zt_block_ref *refs, int n,
                                  const int64_t *part, const struct zt_block_ref *aux,
                                  int naux) {
    const int N = zt_comm_group_size(), me = zt_comm_group_rank();
    for (int r = 0; r < N; r++) {
        if (part[2 * r] > part[2 * r + 1] || (r > 0 && part[2 * r] != part[2 * r - 1]) ||
            (r == 0 && part[0] != 0) || (r == N - 1 && part[2 * r + 1] != n))
            return zt_error_set(ZT_ERR_INVALID, "%s: rank %d's part, blocks [%lld, %lld), is not "
                                                "in rank order or does not cover the %d blocks",
                                fn, r, (long long)part[2 * r], (long long)part[2 * r + 1], n);
        int64_t el = 0;
        for (int64_t b = part[2 * r]; b < part[2 * r + 1]; b++)
            el += zt_tensor_blk_rows(refs[b].t, refs[b].blk) * zt_tensor_cols(refs[b].t);
        if (el > INT32_MAX / N)
            return zt_error_set(ZT_ERR_INVALID, "%s: rank %d's part (%lld elements) is too large",
                                fn, r, (long long)el);
    }
    if (naux > 0) { /* the aux blocks match the caller's part, block by block */
        if (naux != part[2 * me + 1] - part[2 * me])
            return zt_error_set(ZT_ERR_INVALID, "%s: %d accumulator/source blocks for a part of "
                                                "%lld", fn, naux,
                                (long long)(part[2 * me + 1] - part[2 * me]));
        for (int i = 0; i < naux; i++) {
            const struct zt_block_ref *x = &refs[part[2 * me] + i], *y = &aux[i];
            if (zt_tensor_blk_rows(x->t, x->blk) * zt_tensor_cols(x->t) !=
                zt_tensor_blk_rows(y->t, y->blk) * zt_tensor_cols(y->t))
                return zt_error_set(ZT_ERR_INVALID, "%s: block %d of the accumulator/source has "
                                                    "another size than its part", fn, i);
        }
    }
    return ZT_OK;
}

static enum zt_status submit_collective(enum zt_task_kind kind, const char *fn,
                                        const struct zt_task_opts *o,
                                        const struct zt_block_ref *refs, int n,
                                        const int64_t *part, const struct zt_block_ref *aux,
                                        int naux, size_t elemsize, zt_tensor_t token) {
    const int N = zt_comm_group_size();
    if (n < 1 || !refs || !part || !token || naux < 0 || (naux > 0 && !aux) || !refs[0].t)
        return zt_error_set(ZT_ERR_INVALID, "%s: bad arguments", fn);
    const enum zt_dtype dt = zt_tensor_dtype(refs[0].t);
    const int reduce = kind != ZT_KIND_comm_allgather;
    if (dt == ZT_DTYPE_BF16 || dt == ZT_DTYPE_F16) elemsize = 2; /* 16-bit data travels as is */
    if ((reduce && dt == ZT_DTYPE_RAW) || (elemsize != 2 && elemsize != 4 && elemsize != 8) ||
        zt_tensor_elemsize(refs[0].t) != elemsize)
        return zt_error_set(ZT_ERR_INVALID, "%s: blocks of %s (%zu-byte elements) cannot be %s",
                            fn, zt_dtype_name(dt), zt_tensor_elemsize(refs[0].t),
                            reduce ? "summed" : "gathered with that element size");
    if (naux > 0 && aux[0].t && !reduce && zt_tensor_dtype(aux[0].t) != dt)
        return zt_error_set(ZT_ERR_INVALID, "%s: the source blocks (%s) are not of the blocks' "
                                            "type (%s)", fn,
                            zt_dtype_name(zt_tensor_dtype(aux[0].t)), zt_dtype_name(dt));
    if (naux > 0 && aux[0].t && reduce && zt_tensor_dtype(aux[0].t) == ZT_DTYPE_RAW)
        return zt_error_set(ZT_ERR_INVALID, "%s: the accumulator blocks cannot be summed into",
                            fn);
    ZT_CHECK(check_parts(fn, refs, n, part, aux, naux));
    struct zt_collective_args *a = calloc(1, sizeof *a + 2 * (size_t)N * sizeof(int64_t));
    if (!a) return zt_error_set(ZT_ERR_NOMEM, "out of memory for task arguments");
    a->nranks = N;
    a->base = zt_comm_group_base();
    a->elemsize = (int)elemsize;
    a->seq = ++g_seq;
    a->hdr.native16 = 1; /* 16-bit blocks move as 16-bit data (reduce_scatter_body widens) */
    a->hdr.cuda_blocks = 1; /* so do the NCCL bodies, block by block, on the device */
    memcpy(a->part, part, 2 * (size_t)N * sizeof(int64_t));
    struct zt_builder tb;
    zt_builder_init(&tb, &a->hdr, kind, o, -1);
    /* with a source, an all-gather writes every block; with an accumulator, a reduce-scatter
     * only reads its blocks */
    enum starpu_data_access_mode mode = STARPU_RW;
    if (naux > 0 && kind == ZT_KIND_comm_allgather) mode = STARPU_W;
    if (naux > 0 && kind == ZT_KIND_comm_reduce_scatter) mode = STARPU_R;
    zt_builder_add_list(&tb, refs, n, mode);
    zt_builder_add(&tb, token, 0, STARPU_RW);
    zt_builder_add_list(&tb, aux, naux, kind == ZT_KIND_comm_allgather ? STARPU_R : STARPU_RW);
    return zt_builder_submit(&tb, a, sizeof *a + 2 * (size_t)N * sizeof(int64_t),
                             o ? o->priority : 0);
}

enum zt_status zt_task_comm_allreduce(const struct zt_task_opts *o, const struct zt_block_ref *refs,
                                      int n, const int64_t *part, const struct zt_block_ref *aux,
                                      int naux, zt_tensor_t token) {
    return submit_collective(ZT_KIND_comm_allreduce, "zt_task_comm_allreduce", o, refs, n, part,
                             aux, naux, 4, token);
}

enum zt_status zt_task_comm_reduce_scatter(const struct zt_task_opts *o,
                                           const struct zt_block_ref *refs, int n,
                                           const int64_t *part, const struct zt_block_ref *aux,
                                           int naux, zt_tensor_t token) {
    return submit_collective(ZT_KIND_comm_reduce_scatter, "zt_task_comm_reduce_scatter", o, refs,
                             n, part, aux, naux, 4, token);
}

enum zt_status zt_task_comm_allgather(const struct zt_task_opts *o, const struct zt_block_ref *refs,
                                      int n, const int64_t *part, const struct zt_block_ref *aux,
                                      int naux, size_t elemsize, zt_tensor_t token) {
    return submit_collective(ZT_KIND_comm_allgather, "zt_task_comm_allgather", o, refs, n, part,
                             aux, naux, elemsize, token);
}
