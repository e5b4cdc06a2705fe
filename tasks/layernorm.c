/*
 * tasks/layernorm.c: layernorm forward/backward per row block, and the fixed-order reduction of
 * the per-block weight/bias gradient partials (STARPU_REDUX would reorder the sum; see
 * STYLE.md 6 on determinism).
 *
 * Layer: tasks/ (an op file), over kernels/cpu/layernorm.c.
 */
#include <stdlib.h>      /* calloc */
#include <string.h>      /* memset */
#include "zt_kernels.h"  /* zt_kern_layernorm_* */
#include "tasks_impl.h"  /* builder, slots */

struct zt_layernorm_args {
    struct zt_task_hdr hdr;
    int C;
};

void layernorm_forward_cpu(void *buffers[], void *cl_arg) {
    const struct zt_layernorm_args *a = cl_arg;
    float *out = zt_slot_ptr(buffers, &a->hdr, 0);
    float *mean = zt_slot_ptr(buffers, &a->hdr, 1);
    float *rstd = zt_slot_ptr(buffers, &a->hdr, 2);
    const float *inp = zt_slot_ptr(buffers, &a->hdr, 3);
    const float *w = zt_slot_ptr(buffers, &a->hdr, 4);
    const float *b = zt_slot_ptr(buffers, &a->hdr, 5);
    int N = (int)zt_slot_nx(buffers, &a->hdr, 1);
    zt_kern_layernorm_forward(out, mean, rstd, inp, w, b, N, a->C);
}

void layernorm_backward_cpu(void *buffers[], void *cl_arg) {
    const struct zt_layernorm_args *a = cl_arg;
    float *dinp = zt_slot_ptr(buffers, &a->hdr, 0);
    float *part = zt_slot_ptr(buffers, &a->hdr, 1);
    const float *dout = zt_slot_ptr(buffers, &a->hdr, 2);
    const float *inp = zt_slot_ptr(buffers, &a->hdr, 3);
    const float *w = zt_slot_ptr(buffers, &a->hdr, 4);
    const float *mean = zt_slot_ptr(buffers, &a->hdr, 5);
    const float *rstd = zt_slot_ptr(buffers, &a->hdr, 6);
    int N = (int)zt_slot_nx(buffers, &a->hdr, 5);
    memset(part, 0, 2 * (size_t)a->C * sizeof(float));
    zt_kern_layernorm_backward(dinp, part, part + a->C, dout, inp, w, mean, rstd, N, a->C);
}

void layernorm_param_reduce_cpu(void *buffers[], void *cl_arg) {
    const struct zt_layernorm_args *a = cl_arg;
    float *dw = zt_slot_ptr(buffers, &a->hdr, 0);
    float *db = zt_slot_ptr(buffers, &a->hdr, 1);
    const float *part = zt_slot_ptr(buffers, &a->hdr, 2);
    int nb = (int)(zt_slot_nx(buffers, &a->hdr, 2) / (2 * a->C));
    for (int j = 0; j < nb; j++) { /* block order: deterministic */
        zt_kern_residual_backward(dw, NULL, part + (size_t)j * 2 * a->C, (size_t)a->C);
        zt_kern_residual_backward(db, NULL, part + (size_t)j * 2 * a->C + a->C, (size_t)a->C);
    }
}

#ifdef ZT_USE_CUDA
#include <cuda_runtime_api.h> /* cudaMemsetAsync */
#include "zt_kernels_cuda.h"  /* zt_cuda_layernorm_* */

/* the CPU's adds in its block order (zt_cuda_residual_backward: its bits) */
void layernorm_param_reduce_cuda(void *buffers[], void *cl_arg) {
    const struct zt_layernorm_args *a = cl_arg;
    float *dw = zt_slot_ptr(buffers, &a->hdr, 0);
    float *db = zt_slot_ptr(buffers, &a->hdr, 1);
    const float *part = zt_slot_ptr(buffers, &a->hdr, 2);
    int nb = (int)(zt_slot_nx(buffers, &a->hdr, 2) / (2 * a->C));
    for (int j = 0; j < nb; j++) {
        const float *pj = part + (size_t)j * 2 * a->C;
        ZT_CUDA_OK("layernorm_param_reduce",
                   zt_cuda_residual_backward(dw, NULL, pj, (size_t)a->C, zt_cuda_stream()));
        ZT_CUDA_OK("layernorm_param_reduce",
                   zt_cuda_residual_backward(db, NULL, pj + a->C, (size_t)a->C,
                                             zt_cuda_stream()));
    }
}

void layernorm_forward_cuda(void *buffers[], void *cl_arg) {
    const struct zt_layernorm_args *a = cl_arg;
    int N = (int)zt_slot_nx(buffers, &a->hdr, 1);
    ZT_CUDA_OK("layernorm_forward",
               zt_cuda_layernorm_forward(zt_slot_ptr(buffers, &a->hdr, 0),
                                         zt_slot_ptr(buffers, &a->hdr, 1),
                                         zt_slot_ptr(buffers, &a->hdr, 2),
                                         zt_slot_ptr(buffers, &a->hdr, 3),
                                         zt_slot_ptr(buffers, &a->hdr, 4),
                                         zt_slot_ptr(buffers, &a->hdr, 5), N, a->C,
                                         zt_cuda_stream()));
}

void layernorm_backward_cuda(void *buffers[], void *cl_arg) {
    const struct zt_layernorm_args *a = cl_arg;
    float *part = zt_slot_ptr(buffers, &a->hdr, 1);
    int N = (int)zt_slot_nx(buffers, &a->hdr, 5);
    ZT_CUDA_OK("layernorm_backward", cudaMemsetAsync(part, 0, 2 * (size_t)a->C * sizeof(float),
                                                     (cudaStream_t)zt_cuda_stream()));
    ZT_CUDA_OK("layernorm_backward",
               zt_cuda_layernorm_backward(zt_slot_ptr(buffers, &a->hdr, 0), part, part + a->C,
                                          zt_slot_ptr(buffers, &a->hdr, 2),
                                          zt_slot_ptr(buffers, &a->hdr, 3),
                                          zt_slot_ptr(buffers, &a->hdr, 4),
                                          zt_slot_ptr(buffers, &a->hdr, 5),
                                          zt_slot_ptr(buffers, &a->hdr, 6), N, a->C,
                                          zt_cuda_stream()));
}
#endif

enum zt_status zt_task_layernorm_forward(const struct zt_task_opts *o, zt_tensor_t out,
                                         zt_tensor_t mean, zt_tensor_t rstd, int blk,
                                         zt_tensor_t inp, zt_tensor_t w, zt_tensor_t b) {
    static const char fn[] = "zt_task_layernorm_forward";
    ZT_CHECK(zt_check_blk(fn, out, blk));
    ZT_CHECK(zt_check_same_blocks(fn, out, inp));
    ZT_CHECK(zt_check_same_blocks(fn, out, mean));
    ZT_CHECK(zt_check_same_blocks(fn, out, rstd));
    ZT_ARGS_NEW(struct zt_layernorm_args, a);
    a->C = (int)zt_tensor_cols(out);
    struct zt_builder tb;
    zt_builder_init(&tb, &a->hdr, ZT_KIND_layernorm_forward, o, blk);
    zt_builder_add(&tb, out, blk, STARPU_W);
    zt_builder_add(&tb, mean, blk, STARPU_W);
    zt_builder_add(&tb, rstd, blk, STARPU_W);
    zt_builder_add(&tb, inp, blk, STARPU_R);
    zt_builder_add(&tb, w, -1, STARPU_R);
    zt_builder_add(&tb, b, -1, STARPU_R);
    return zt_builder_submit(&tb, a, sizeof *a, o ? o->priority : 0);
}

enum zt_status zt_task_layernorm_backward(const struct zt_task_opts *o, zt_tensor_t dinp,
                                          zt_tensor_t part, int blk, zt_tensor_t dout,
                                          zt_tensor_t inp, zt_tensor_t w, zt_tensor_t mean,
                                          zt_tensor_t rstd) {
    static const char fn[] = "zt_task_layernorm_backward";
    ZT_CHECK(zt_check_blk(fn, dinp, blk));
    ZT_CHECK(zt_check_same_blocks(fn, dinp, dout));
    ZT_CHECK(zt_check_same_blocks(fn, dinp, inp));
    ZT_CHECK(zt_check_same_blocks(fn, dinp, part));
    if (zt_tensor_cols(part) != 2 * zt_tensor_cols(dinp) ||
        zt_tensor_rows(part) != zt_tensor_nblk(part))
        return zt_error_set(ZT_ERR_INVALID, "%s: partial tensor %s must be [nblk, 2C]", fn,
                            zt_tensor_name(part));
    ZT_ARGS_NEW(struct zt_layernorm_args, a);
    a->C = (int)zt_tensor_cols(dinp);
    struct zt_builder tb;
    zt_builder_init(&tb, &a->hdr, ZT_KIND_layernorm_backward, o, blk);
    zt_builder_add(&tb, dinp, blk, STARPU_RW);
    zt_builder_add(&tb, part, blk, STARPU_W);
    zt_builder_add(&tb, dout, blk, STARPU_R);
    zt_builder_add(&tb, inp, blk, STARPU_R);
    zt_builder_add(&tb, w, -1, STARPU_R);
    zt_builder_add(&tb, mean, blk, STARPU_R);
    zt_builder_add(&tb, rstd, blk, STARPU_R);
    return zt_builder_submit(&tb, a, sizeof *a, o ? o->priority : 0);
}

enum zt_status zt_task_layernorm_param_reduce(const struct zt_task_opts *o, zt_tensor_t dw,
                                              zt_tensor_t db, zt_tensor_t part) {
    ZT_ARGS_NEW(struct zt_layernorm_args, a);
    a->C = (int)zt_tensor_numel(dw);
    struct zt_builder tb;
    zt_builder_init(&tb, &a->hdr, ZT_KIND_layernorm_param_reduce, o, -1);
    zt_builder_add(&tb, dw, -1, STARPU_RW);
    zt_builder_add(&tb, db, -1, STARPU_RW);
    zt_builder_add(&tb, part, -1, STARPU_R);
    return zt_builder_submit(&tb, a, sizeof *a, o ? o->priority : 0);
}
