/*
 * tasks/crossentropy.c: softmax cross-entropy per row block; with dscale != 0 the logits are
 * replaced by their gradient in place (no second [N,V] buffer, as in llm.c).
 *
 * Layer: tasks/ (an op file), over kernels/cpu/crossentropy.c.
 */
#include <stdlib.h>      /* calloc */
#include "zt_kernels.h"  /* zt_kern_crossentropy_forward_backward */
#include "tasks_impl.h"  /* builder, slots */

struct zt_crossentropy_args {
    struct zt_task_hdr hdr;
    int V;
    float dscale;
};

void crossentropy_cpu(void *buffers[], void *cl_arg) {
    const struct zt_crossentropy_args *a = cl_arg;
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
    zt_builder_add(&tb, logits, blk, dscale != 0 ? STARPU_RW : STARPU_R);
    zt_builder_add(&tb, losses, blk, STARPU_W);
    zt_builder_add(&tb, targets, blk, STARPU_R);
    return zt_builder_submit(&tb, a, sizeof *a, o ? o->priority : 0);
}
