/*
 * tasks/data.c: load_batch (token files -> inputs/targets) and fill_zero codelets.
 *
 * Layer: tasks/. load_batch is the llm.c DataLoader step as a task: it reads one row block of
 * one micro-batch from the token files (validated when opened, read again with every id
 * checked), by the step rule of io/zt_tokens.h or from rows the sampler planned (a copy of the
 * block's rows travels in the task's arguments), so reading the next micro-batch overlaps
 * compute like any other task. A codelet cannot return
 * an error: a failed read (the file truncated or rewritten while training) zeroes the block, so
 * the tasks after it see valid ids, and is kept here for zt_task_data_status.
 */
#include <pthread.h>     /* pthread_mutex_t */
#include <stdio.h>       /* snprintf */
#include <stdlib.h>      /* calloc */
#include <string.h>      /* memset */
#include "zt_tokens.h"   /* zt_tokens_batch */
#include "tasks_impl.h"  /* builder, slots */

/* the first failed batch read of the process */
static struct {
    pthread_mutex_t mu;
    enum zt_status err;
    char msg[1024];
} g_data = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void data_fail(enum zt_status rc) {
    pthread_mutex_lock(&g_data.mu);
    if (g_data.err == ZT_OK) {
        g_data.err = rc;
        snprintf(g_data.msg, sizeof g_data.msg, "%s", zt_error_last());
    }
    pthread_mutex_unlock(&g_data.mu);
}

enum zt_status zt_task_data_status(void) {
    pthread_mutex_lock(&g_data.mu);
    enum zt_status rc = g_data.err;
    if (rc != ZT_OK) zt_error_set(rc, "%s", g_data.msg);
    pthread_mutex_unlock(&g_data.mu);
    return rc;
}

struct zt_load_batch_args {
    struct zt_task_hdr hdr;
    const struct zt_tokens *tok; /* the open files (rows) or the one file (the step rule) */
    int64_t step;
    int B, row0, T, active;
    int nrows;                   /* 0: the step rule; else rows[nrows] */
    struct zt_data_row rows[];
};

static enum zt_status load_rows(const struct zt_load_batch_args *a, int nrows, int32_t *in,
                                int32_t *tg) {
    if (!a->nrows) return zt_tokens_batch(a->tok, a->step, a->B, a->T, a->row0, nrows, in, tg);
    for (int r = 0; r < nrows; r++)
        ZT_CHECK(zt_tokens_row(a->tok, &a->rows[r], a->T, a->active, in + (size_t)r * a->T,
                               tg + (size_t)r * a->T));
    return ZT_OK;
}

void load_batch_cpu(void *buffers[], void *cl_arg) {
    const struct zt_load_batch_args *a = cl_arg;
    int32_t *in = zt_slot_ptr(buffers, &a->hdr, 0);
    int32_t *tg = zt_slot_ptr(buffers, &a->hdr, 1);
    int nrows = (int)(zt_slot_nx(buffers, &a->hdr, 0) / a->T);
    enum zt_status rc = load_rows(a, nrows, in, tg);
    if (rc != ZT_OK) {
        data_fail(rc);
        memset(in, 0, sizeof *in * (size_t)nrows * (size_t)a->T);
        memset(tg, 0, sizeof *tg * (size_t)nrows * (size_t)a->T);
    }
}

static enum zt_status check_load(const char *fn, zt_tensor_t inputs, zt_tensor_t targets,
                                 int blk, int have_data) {
    ZT_CHECK(zt_check_blk(fn, inputs, blk));
    ZT_CHECK(zt_check_same_blocks(fn, inputs, targets));
    if (zt_tensor_elemsize(inputs) != 4 || zt_tensor_elemsize(targets) != 4 || !have_data)
        return zt_error_set(ZT_ERR_INVALID, "%s: int32 tensors and token files are required",
                            fn);
    return ZT_OK;
}

static enum zt_status submit_load(const struct zt_task_opts *o, zt_tensor_t inputs,
                                  zt_tensor_t targets, int blk, struct zt_load_batch_args *a,
                                  size_t size) {
    struct zt_builder tb;
    zt_builder_init(&tb, &a->hdr, ZT_KIND_load_batch, o, blk);
    zt_builder_add(&tb, inputs, blk, STARPU_W);
    zt_builder_add(&tb, targets, blk, STARPU_W);
    return zt_builder_submit(&tb, a, size, o ? o->priority : 0);
}

enum zt_status zt_task_load_batch(const struct zt_task_opts *o, zt_tensor_t inputs,
                                  zt_tensor_t targets, int blk, const struct zt_tokens *tok,
                                  int64_t step, int B, int row0) {
    ZT_CHECK(check_load("zt_task_load_batch", inputs, targets, blk, tok != NULL));
    ZT_ARGS_NEW(struct zt_load_batch_args, a);
    a->tok = tok;
    a->step = step;
    a->B = B;
    a->T = (int)zt_tensor_cols(inputs);
    a->row0 = row0 + (int)zt_tensor_blk_row0(inputs, blk);
    return submit_load(o, inputs, targets, blk, a, sizeof *a);
}

enum zt_status zt_task_load_rows(const struct zt_task_opts *o, zt_tensor_t inputs,
                                 zt_tensor_t targets, int blk, const struct zt_tokens *files,
                                 const struct zt_data_row *rows, int row0, int active) {
    ZT_CHECK(check_load("zt_task_load_rows", inputs, targets, blk, files && rows));
    const int T = (int)zt_tensor_cols(inputs);
    const int nrows = (int)zt_tensor_blk_rows(inputs, blk);
    if (active < 1 || active > T || nrows < 1)
        return zt_error_set(ZT_ERR_INVALID, "zt_task_load_rows: active length %d outside 1..%d",
                            active, T);
    size_t size = sizeof(struct zt_load_batch_args) + (size_t)nrows * sizeof *rows;
    struct zt_load_batch_args *a = calloc(1, size);
    if (!a) return zt_error_set(ZT_ERR_NOMEM, "out of memory for task arguments");
    a->tok = files;
    a->T = T;
    a->active = active;
    a->nrows = nrows;
    memcpy(a->rows, rows + row0 + zt_tensor_blk_row0(inputs, blk), (size_t)nrows * sizeof *rows);
    return submit_load(o, inputs, targets, blk, a, size);
}

struct zt_fill_zero_args {
    struct zt_task_hdr hdr;
};

void fill_zero_cpu(void *buffers[], void *cl_arg) {
    const struct zt_fill_zero_args *a = cl_arg;
    memset(zt_slot_ptr(buffers, &a->hdr, 0), 0,
           (size_t)zt_slot_nx(buffers, &a->hdr, 0) * STARPU_VECTOR_GET_ELEMSIZE(buffers[0]));
}

#ifdef ZT_USE_CUDA
#include <cuda_runtime_api.h> /* cudaMemsetAsync */

/* each block as stored (hdr.cuda_blocks): zero bits are +0 in every float type */
void fill_zero_cuda(void *buffers[], void *cl_arg) {
    const struct zt_fill_zero_args *a = cl_arg;
    for (int i = 0; i < a->hdr.count[0]; i++)
        ZT_CUDA_OK("fill_zero",
                   cudaMemsetAsync(zt_slot_buf_ptr(buffers, &a->hdr, 0, i), 0,
                                   (size_t)zt_slot_buf_nx(buffers, &a->hdr, 0, i) *
                                       STARPU_VECTOR_GET_ELEMSIZE(buffers[a->hdr.first[0] + i]),
                                   (cudaStream_t)zt_cuda_stream()));
}
#endif

enum zt_status zt_task_zero(const struct zt_task_opts *o, zt_tensor_t t) {
    if (!t) return zt_error_set(ZT_ERR_INVALID, "zt_task_zero: missing tensor");
    for (int j = 0; j < zt_tensor_nblk(t); j++) {
        ZT_ARGS_NEW(struct zt_fill_zero_args, a);
        struct zt_builder tb;
        zt_builder_init(&tb, &a->hdr, ZT_KIND_fill_zero, o, j);
        a->hdr.native16 = 1; /* all-zero bits are +0 in fp32, bf16 and fp16 alike */
        a->hdr.cuda_blocks = 1;
        zt_builder_add(&tb, t, j, STARPU_W);
        ZT_CHECK(zt_builder_submit(&tb, a, sizeof *a, o ? o->priority : 0));
    }
    return ZT_OK;
}
