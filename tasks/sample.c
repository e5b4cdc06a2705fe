/*
 * tasks/sample.c: the sampling task of generation: one token per row of a logits tensor, each
 * row with its own parameters, random number and sequence so far.
 *
 * Layer: tasks/ (an op file), over kernels/cpu/sample.c. The rows are copied to the worker's
 * scratch before the processors change them, so the logits stay as computed (the caller may
 * still read them). The sequences travel in the task's arguments.
 */
#include <stdlib.h>      /* calloc */
#include <string.h>      /* memcpy */
#include "zt_kernels.h"  /* zt_kern_sample */
#include "tasks_impl.h"  /* builder, slots */

struct zt_sample_row {
    float temperature, top_p, penalty;
    int top_k;
    double u;
    int64_t hist_off; /* its sequence: hist[hist_off .. hist_off + nhist) */
    int nhist;
};

struct zt_sample_args {
    struct zt_task_hdr hdr;
    int V, nrows;
    _Alignas(8) unsigned char data[]; /* nrows struct zt_sample_row, then the sequences */
};

void sample_cpu(void *buffers[], void *cl_arg) {
    struct zt_sample_args *a = cl_arg;
    int32_t *tokens = zt_slot_ptr(buffers, &a->hdr, 0);
    const float *logits = zt_slot_ptr(buffers, &a->hdr, 1);
    const struct zt_sample_row *row = (const struct zt_sample_row *)a->data;
    const int32_t *hist = (const int32_t *)(row + a->nrows);
    float *x = zt_worker_scratch(ZT_SCRATCH_BODY, 2 * (size_t)a->V);
    int32_t *idx = (int32_t *)(x + a->V);
    for (int i = 0; i < a->nrows; i++) {
        const struct zt_sample_row *r = &row[i];
        memcpy(x, logits + (size_t)i * a->V, (size_t)a->V * sizeof *x);
        tokens[i] = zt_kern_sample(x, a->V, hist + r->hist_off, r->nhist, r->temperature,
                                   r->top_k, r->top_p, r->penalty, r->u, idx);
    }
}

enum zt_status zt_task_sample(const struct zt_task_opts *o, zt_tensor_t tokens,
                              zt_tensor_t logits, const struct zt_sample_params *p) {
    int64_t n = zt_tensor_rows(logits), V = zt_tensor_cols(logits), nh = 0;
    if (zt_tensor_numel(tokens) != n || zt_tensor_elemsize(tokens) != sizeof(int32_t) ||
        zt_tensor_dtype(logits) != ZT_DTYPE_F32)
        return zt_error_set(ZT_ERR_INVALID, "zt_task_sample: %s must hold one int32 per row of "
                            "the f32 logits %s", zt_tensor_name(tokens), zt_tensor_name(logits));
    for (int64_t i = 0; i < n; i++) nh += p[i].nhist;
    size_t bytes = sizeof(struct zt_sample_args) + (size_t)n * sizeof(struct zt_sample_row) +
                   (size_t)nh * sizeof(int32_t);
    struct zt_sample_args *a = calloc(1, bytes);
    if (!a) return zt_error_set(ZT_ERR_NOMEM, "out of memory for task arguments");
    a->V = (int)V;
    a->nrows = (int)n;
    struct zt_sample_row *row = (struct zt_sample_row *)a->data;
    int32_t *hist = (int32_t *)(row + n);
    for (int64_t i = 0, off = 0; i < n; off += p[i].nhist, i++) {
        row[i] = (struct zt_sample_row){p[i].temperature, p[i].top_p, p[i].penalty, p[i].top_k,
                                        p[i].u, off, p[i].nhist};
        if (p[i].nhist > 0)
            memcpy(hist + off, p[i].history, (size_t)p[i].nhist * sizeof *hist);
    }
    struct zt_builder tb;
    zt_builder_init(&tb, &a->hdr, ZT_KIND_sample, o, -1);
    zt_builder_add(&tb, tokens, -1, STARPU_W);
    zt_builder_add(&tb, logits, -1, STARPU_R);
    return zt_builder_submit(&tb, a, bytes, o ? o->priority : 0);
}
