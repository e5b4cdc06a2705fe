/*
 * tasks/encoder.c: token + position embedding, forward (per row block) and backward (one task:
 * the scatter-add into dwte/dwpe runs over every row in a fixed order, so it is deterministic).
 *
 * Layer: tasks/ (an op file), over kernels/cpu/encoder.c.
 */
#include <stdlib.h>      /* calloc */
#include "zt_kernels.h"  /* zt_kern_encoder_* */
#include "tasks_impl.h"  /* builder, slots */

struct zt_encoder_args {
    struct zt_task_hdr hdr;
    int T, C;
};

void encoder_forward_cpu(void *buffers[], void *cl_arg) {
    const struct zt_encoder_args *a = cl_arg;
    float *out = zt_slot_ptr(buffers, &a->hdr, 0);
    const int32_t *tok = zt_slot_ptr(buffers, &a->hdr, 1);
    const float *wte = zt_slot_ptr(buffers, &a->hdr, 2);
    const float *wpe = zt_slot_ptr(buffers, &a->hdr, 3);
    int N = (int)zt_slot_nx(buffers, &a->hdr, 1);
    if (wpe) {
        zt_kern_encoder_forward(out, tok, wte, wpe, N, a->T, 0, a->C);
    } else { /* no position embedding (e.g. an MLP): plain lookup */
        for (int n = 0; n < N; n++)
            for (int c = 0; c < a->C; c++)
                out[(size_t)n * a->C + c] = wte[(size_t)tok[n] * a->C + c];
    }
}

void encoder_backward_cpu(void *buffers[], void *cl_arg) {
    const struct zt_encoder_args *a = cl_arg;
    float *dwte = zt_slot_ptr(buffers, &a->hdr, 0);
    float *dwpe = zt_slot_ptr(buffers, &a->hdr, 1);
    const float *dout = zt_slot_ptr(buffers, &a->hdr, 2);
    const int32_t *tok = zt_slot_ptr(buffers, &a->hdr, 3);
    int N = (int)zt_slot_nx(buffers, &a->hdr, 3);
    if (dwpe) {
        zt_kern_encoder_backward(dwte, dwpe, dout, tok, N, a->T, 0, a->C);
    } else {
        for (int n = 0; n < N; n++)
            for (int c = 0; c < a->C; c++)
                dwte[(size_t)tok[n] * a->C + c] += dout[(size_t)n * a->C + c];
    }
}

enum zt_status zt_task_encoder_forward(const struct zt_task_opts *o, zt_tensor_t out, int blk,
                                       zt_tensor_t tokens, zt_tensor_t wte, zt_tensor_t wpe) {
    ZT_CHECK(zt_check_blk("zt_task_encoder_forward", out, blk));
    ZT_CHECK(zt_check_same_blocks("zt_task_encoder_forward", out, tokens));
    ZT_ARGS_NEW(struct zt_encoder_args, a);
    a->T = (int)zt_tensor_cols(tokens);
    a->C = (int)zt_tensor_cols(out);
    struct zt_builder tb;
    zt_builder_init(&tb, &a->hdr, ZT_KIND_encoder_forward, o, blk);
    zt_builder_add(&tb, out, blk, STARPU_W);
    zt_builder_add(&tb, tokens, blk, STARPU_R);
    zt_builder_add(&tb, wte, -1, STARPU_R);
    zt_builder_add(&tb, wpe, -1, STARPU_R);
    return zt_builder_submit(&tb, a, sizeof *a, o ? o->priority : 0);
}

enum zt_status zt_task_encoder_backward(const struct zt_task_opts *o, zt_tensor_t dwte,
                                        zt_tensor_t dwpe, zt_tensor_t dout, zt_tensor_t tokens) {
    ZT_CHECK(zt_check_same_blocks("zt_task_encoder_backward", dout, tokens));
    ZT_ARGS_NEW(struct zt_encoder_args, a);
    a->T = (int)zt_tensor_cols(tokens);
    a->C = (int)zt_tensor_cols(dout);
    struct zt_builder tb;
    zt_builder_init(&tb, &a->hdr, ZT_KIND_encoder_backward, o, -1);
    zt_builder_add(&tb, dwte, -1, STARPU_RW);
    zt_builder_add(&tb, dwpe, -1, STARPU_RW);
    zt_builder_add(&tb, dout, -1, STARPU_R);
    zt_builder_add(&tb, tokens, -1, STARPU_R);
    return zt_builder_submit(&tb, a, sizeof *a, o ? o->priority : 0);
}
