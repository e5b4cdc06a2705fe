/*
 * tasks/crossentropy.c: softmax cross-entropy per row block; with dscale != 0 the logits are
 * replaced by their gradient in place (no second [N,V] buffer, as in llm.c).
 *
 * Layer: tasks/ (an op file), over kernels/cpu/crossentropy.c.
 */
#include <stdlib.h>      /* calloc */
#include <string.h>      /* memcpy */
#include "zt_kernels.h"  /* zt_kern_crossentropy_forward_backward */
#include "tasks_impl.h"  /* builder, slots */

struct zt_crossentropy_args {
    struct zt_task_hdr hdr;
    int V;
    float dscale;
};

/* 16-bit logits (hdr.native16): a row at a time widened, through the kernel, and (its gradient)
 * rounded back, instead of the whole [N,V] block: the kernel treats each row on its own, so the
 * bits are those of the whole block widened */
static void rows16(void *buffers[], const struct zt_crossentropy_args *a) {
    const struct zt_task_hdr *h = &a->hdr;
    float *losses = zt_slot_ptr(buffers, h, 1);
    const int32_t *tg = zt_slot_ptr(buffers, h, 2);
    int N = (int)zt_slot_nx(buffers, h, 1);
    float *row = zt_worker_scratch(ZT_SCRATCH_BODY, (size_t)a->V);
    for (int n = 0; n < N; n++) {
        size_t at = (size_t)n * a->V;
        const float *x = zt_slot_f32(buffers, h, 0, at, (size_t)a->V, row);
        if (x != row) memcpy(row, x, (size_t)a->V * sizeof *row);
        zt_kern_crossentropy_forward_backward(row, losses + n, tg + n, 1, a->V, a->dscale);
        if (a->dscale != 0) zt_slot_store_f32(buffers, h, 0, at, (size_t)a->V, row);
    }
}

void crossentropy_cpu(void *buffers[], void *cl_arg) {
    const struct zt_crossentropy_args *a = cl_arg;
    if (a->hdr.native16) {
        rows16(buffers, a);
        return;
    }
    float *logits = zt_slot_ptr(buffers, &a->hdr, 0);
    float *losses = zt_slot_ptr(buffers, &a->hdr, 1);
    const int32_t *tg = zt_slot_ptr(buffers, &a->hdr, 2);
    int N = (int)zt_slot_nx(buffers, &a->hdr, 1);
    zt_kern_crossentropy_forward_backward(logits, losses, tg, N, a->V, a->dscale);
}

#ifdef ZT_USE_CUDA
#include "zt_kernels_cuda.h" /* zt_cuda_crossentropy_forward_backward */

void crossentropy_cuda(void *buffers[], void *cl_arg) {
    const struct zt_crossentropy_args *a = cl_arg;
    int N = (int)zt_slot_nx(buffers, &a->hdr, 1);
    ZT_CUDA_OK("crossentropy", zt_cuda_crossentropy_forward_backward(
                                   zt_slot_ptr(buffers, &a->hdr, 0),
                                   zt_slot_ptr(buffers, &a->hdr, 1),
                                   zt_slot_ptr(buffers, &a->hdr, 2), N, a->V, a->dscale,
                                   zt_cuda_stream()));
}
#endif

enum zt_status zt_task_crossentropy(const struct zt_task_opts *o, zt_tensor_t logits,
                                    zt_tensor_t losses, int blk, zt_tensor_t targets,
                                    float dscale) {
    static const char fn[] = "zt_task_crossentropy";
    ZT_CHECK(zt_check_blk(fn, logits, blk));
    ZT_CHECK(zt_check_same_blocks(fn, logits, losses));
    ZT_CHECK(zt_check_same_blocks(fn, logits, targets));
    if (zt_tensor_numel(losses) != zt_tensor_rows(logits) ||
        zt_tensor_numel(targets) != zt_tensor_rows(logits))
        return zt_error_set(ZT_ERR_INVALID, "%s: losses and targets need one entry per row of %s",
                            fn, zt_tensor_name(logits));
    ZT_ARGS_NEW(struct zt_crossentropy_args, a);
    a->V = (int)zt_tensor_cols(logits);
    a->dscale = dscale;
    struct zt_builder tb;
    zt_builder_init(&tb, &a->hdr, ZT_KIND_crossentropy, o, blk);
    a->hdr.native16 = (unsigned char)(zt_dtype_is16(zt_tensor_dtype(logits)) &&
                                      zt_tensor_dtype(losses) == ZT_DTYPE_F32);
    zt_builder_add(&tb, logits, blk, dscale != 0 ? STARPU_RW : STARPU_R);
    zt_builder_add(&tb, losses, blk, STARPU_W);
    zt_builder_add(&tb, targets, blk, STARPU_R);
    return zt_builder_submit(&tb, a, sizeof *a, o ? o->priority : 0);
}
