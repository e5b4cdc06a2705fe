/*
 * tasks/pointwise.c: GELU and residual-add codelets, per row block.
 *
 * Layer: tasks/ (an op file), over kernels/cpu/gelu.c and kernels/cpu/residual.c. Every kind
 * here is elementwise (hdr.elementwise): 16-bit blocks are widened a chunk at a time.
 */
#include <stdlib.h>      /* calloc */
#include "zt_kernels.h"  /* zt_kern_gelu_*, zt_kern_residual_* */
#include "tasks_impl.h"  /* builder, slots */

struct zt_pointwise_args {
    struct zt_task_hdr hdr;
};

void gelu_forward_cpu(void *buffers[], void *cl_arg) {
    const struct zt_pointwise_args *a = cl_arg;
    zt_kern_gelu_forward(zt_slot_ptr(buffers, &a->hdr, 0), zt_slot_ptr(buffers, &a->hdr, 1),
                         (size_t)zt_slot_nx(buffers, &a->hdr, 0));
}

void gelu_backward_cpu(void *buffers[], void *cl_arg) {
    const struct zt_pointwise_args *a = cl_arg;
    float *d = zt_slot_ptr(buffers, &a->hdr, 0);
    zt_kern_gelu_backward(d, zt_slot_ptr(buffers, &a->hdr, 1), d,
                          (size_t)zt_slot_nx(buffers, &a->hdr, 0));
}

void residual_forward_cpu(void *buffers[], void *cl_arg) {
    const struct zt_pointwise_args *a = cl_arg;
    zt_kern_residual_forward(zt_slot_ptr(buffers, &a->hdr, 0), zt_slot_ptr(buffers, &a->hdr, 1),
                             zt_slot_ptr(buffers, &a->hdr, 2),
                             (size_t)zt_slot_nx(buffers, &a->hdr, 0));
}

void residual_backward_cpu(void *buffers[], void *cl_arg) {
    const struct zt_pointwise_args *a = cl_arg;
    zt_kern_residual_backward(zt_slot_ptr(buffers, &a->hdr, 0), zt_slot_ptr(buffers, &a->hdr, 1),
                              zt_slot_ptr(buffers, &a->hdr, 2),
                              (size_t)zt_slot_nx(buffers, &a->hdr, 2));
}

#ifdef ZT_USE_CUDA
#include "zt_kernels_cuda.h" /* zt_cuda_gelu_*, zt_cuda_residual_* */

void gelu_forward_cuda(void *buffers[], void *cl_arg) {
    const struct zt_pointwise_args *a = cl_arg;
    ZT_CUDA_OK("gelu_forward", zt_cuda_gelu_forward(zt_slot_ptr(buffers, &a->hdr, 0),
                                                    zt_slot_ptr(buffers, &a->hdr, 1),
                                                    (size_t)zt_slot_nx(buffers, &a->hdr, 0),
                                                    zt_cuda_stream()));
}

void gelu_backward_cuda(void *buffers[], void *cl_arg) {
    const struct zt_pointwise_args *a = cl_arg;
    float *d = zt_slot_ptr(buffers, &a->hdr, 0);
    ZT_CUDA_OK("gelu_backward", zt_cuda_gelu_backward(d, zt_slot_ptr(buffers, &a->hdr, 1), d,
                                                      (size_t)zt_slot_nx(buffers, &a->hdr, 0),
                                                      zt_cuda_stream()));
}

void residual_forward_cuda(void *buffers[], void *cl_arg) {
    const struct zt_pointwise_args *a = cl_arg;
    ZT_CUDA_OK("residual_forward",
               zt_cuda_residual_forward(zt_slot_ptr(buffers, &a->hdr, 0),
                                        zt_slot_ptr(buffers, &a->hdr, 1),
                                        zt_slot_ptr(buffers, &a->hdr, 2),
                                        (size_t)zt_slot_nx(buffers, &a->hdr, 0), zt_cuda_stream()));
}

void residual_backward_cuda(void *buffers[], void *cl_arg) {
    const struct zt_pointwise_args *a = cl_arg;
    ZT_CUDA_OK("residual_backward",
               zt_cuda_residual_backward(zt_slot_ptr(buffers, &a->hdr, 0),
                                         zt_slot_ptr(buffers, &a->hdr, 1),
                                         zt_slot_ptr(buffers, &a->hdr, 2),
                                         (size_t)zt_slot_nx(buffers, &a->hdr, 2),
                                         zt_cuda_stream()));
}
#endif

static enum zt_status check_same_shape(const char *fn, zt_tensor_t x, zt_tensor_t y) {
    if (!y) return ZT_OK;
    ZT_CHECK(zt_check_same_blocks(fn, x, y));
    if (zt_tensor_numel(x) != zt_tensor_numel(y))
        return zt_error_set(ZT_ERR_INVALID, "%s: %s and %s differ in size", fn, zt_tensor_name(x),
                            zt_tensor_name(y));
    return ZT_OK;
}

static enum zt_status submit(enum zt_task_kind kind, const char *fn, const struct zt_task_opts *o,
                             int blk, zt_tensor_t t0, enum starpu_data_access_mode m0,
                             zt_tensor_t t1, enum starpu_data_access_mode m1, zt_tensor_t t2) {
    ZT_CHECK(zt_check_blk(fn, t0 ? t0 : t1, blk));
    ZT_CHECK(check_same_shape(fn, t0 ? t0 : t1, t1));
    ZT_CHECK(check_same_shape(fn, t0 ? t0 : t1, t2));
    ZT_ARGS_NEW(struct zt_pointwise_args, a);
    struct zt_builder tb;
    zt_builder_init(&tb, &a->hdr, kind, o, blk);
    a->hdr.elementwise = 1;
    zt_builder_add(&tb, t0, t0 ? blk : -1, m0);
    zt_builder_add(&tb, t1, t1 ? blk : -1, m1);
    if (t2) zt_builder_add(&tb, t2, blk, STARPU_R);
    return zt_builder_submit(&tb, a, sizeof *a, o ? o->priority : 0);
}

enum zt_status zt_task_gelu_forward(const struct zt_task_opts *o, zt_tensor_t out, int blk,
                                    zt_tensor_t inp) {
    return submit(ZT_KIND_gelu_forward, "zt_task_gelu_forward", o, blk, out, STARPU_W, inp,
                  STARPU_R, NULL);
}

enum zt_status zt_task_gelu_backward(const struct zt_task_opts *o, zt_tensor_t d, int blk,
                                     zt_tensor_t inp) {
    return submit(ZT_KIND_gelu_backward, "zt_task_gelu_backward", o, blk, d, STARPU_RW, inp,
                  STARPU_R, NULL);
}

enum zt_status zt_task_residual_forward(const struct zt_task_opts *o, zt_tensor_t out, int blk,
                                        zt_tensor_t a, zt_tensor_t b) {
    if (!a || !b) return zt_error_set(ZT_ERR_INVALID, "zt_task_residual_forward: missing input");
    return submit(ZT_KIND_residual_forward, "zt_task_residual_forward", o, blk, out, STARPU_W, a,
                  STARPU_R, b);
}

enum zt_status zt_task_residual_backward(const struct zt_task_opts *o, zt_tensor_t da,
                                         zt_tensor_t db, int blk, zt_tensor_t dout) {
    if (!dout || (!da && !db))
        return zt_error_set(ZT_ERR_INVALID, "zt_task_residual_backward: nothing to do");
    ZT_CHECK(zt_check_blk("zt_task_residual_backward", dout, blk));
    ZT_CHECK(check_same_shape("zt_task_residual_backward", dout, da));
    ZT_CHECK(check_same_shape("zt_task_residual_backward", dout, db));
    ZT_ARGS_NEW(struct zt_pointwise_args, a);
    struct zt_builder tb;
    zt_builder_init(&tb, &a->hdr, ZT_KIND_residual_backward, o, blk);
    a->hdr.elementwise = 1;
    zt_builder_add(&tb, da, blk, STARPU_RW);
    zt_builder_add(&tb, db, blk, STARPU_RW);
    zt_builder_add(&tb, dout, blk, STARPU_R);
    return zt_builder_submit(&tb, a, sizeof *a, o ? o->priority : 0);
}
