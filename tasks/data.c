/*
 * tasks/data.c: load_batch (token file -> inputs/targets) and fill_zero codelets.
 *
 * Layer: tasks/. load_batch is the llm.c DataLoader step as a task: it copies one row block of
 * one micro-batch out of the memory-mapped token file (validated when opened), so reading the
 * next micro-batch overlaps compute like any other task.
 */
#include <stdlib.h>      /* calloc */
#include <string.h>      /* memset */
#include "zt_tokens.h"   /* zt_tokens_batch */
#include "tasks_impl.h"  /* builder, slots */

struct zt_load_batch_args {
    struct zt_task_hdr hdr;
    const struct zt_tokens *tok;
    int64_t step;
    int B, row0, T;
};

void load_batch_cpu(void *buffers[], void *cl_arg) {
    const struct zt_load_batch_args *a = cl_arg;
    int32_t *in = zt_slot_ptr(buffers, &a->hdr, 0);
    int32_t *tg = zt_slot_ptr(buffers, &a->hdr, 1);
    int nrows = (int)(zt_slot_nx(buffers, &a->hdr, 0) / a->T);
    zt_tokens_batch(a->tok, a->step, a->B, a->T, a->row0, nrows, in, tg);
}

enum zt_status zt_task_load_batch(const struct zt_task_opts *o, zt_tensor_t inputs,
                                  zt_tensor_t targets, int blk, const struct zt_tokens *tok,
                                  int64_t step, int B, int row0) {
    ZT_CHECK(zt_check_blk("zt_task_load_batch", inputs, blk));
    ZT_CHECK(zt_check_same_blocks("zt_task_load_batch", inputs, targets));
    if (zt_tensor_elemsize(inputs) != 4 || zt_tensor_elemsize(targets) != 4 || !tok)
        return zt_error_set(ZT_ERR_INVALID, "zt_task_load_batch: int32 tensors and a token file "
                                            "are required");
    ZT_ARGS_NEW(struct zt_load_batch_args, a);
    a->tok = tok;
    a->step = step;
    a->B = B;
    a->T = (int)zt_tensor_cols(inputs);
    a->row0 = row0 + (int)zt_tensor_blk_row0(inputs, blk);
    struct zt_builder tb;
    zt_builder_init(&tb, &a->hdr, ZT_KIND_load_batch, o, blk);
    zt_builder_add(&tb, inputs, blk, STARPU_W);
    zt_builder_add(&tb, targets, blk, STARPU_W);
    return zt_builder_submit(&tb, a, sizeof *a, o ? o->priority : 0);
}

struct zt_fill_zero_args {
    struct zt_task_hdr hdr;
};

void fill_zero_cpu(void *buffers[], void *cl_arg) {
    const struct zt_fill_zero_args *a = cl_arg;
    memset(zt_slot_ptr(buffers, &a->hdr, 0), 0,
           (size_t)zt_slot_nx(buffers, &a->hdr, 0) * STARPU_VECTOR_GET_ELEMSIZE(buffers[0]));
}

enum zt_status zt_task_zero(const struct zt_task_opts *o, zt_tensor_t t) {
    if (!t) return zt_error_set(ZT_ERR_INVALID, "zt_task_zero: missing tensor");
    for (int j = 0; j < zt_tensor_nblk(t); j++) {
        ZT_ARGS_NEW(struct zt_fill_zero_args, a);
        struct zt_builder tb;
        zt_builder_init(&tb, &a->hdr, ZT_KIND_fill_zero, o, j);
        zt_builder_add(&tb, t, j, STARPU_W);
        ZT_CHECK(zt_builder_submit(&tb, a, sizeof *a, o ? o->priority : 0));
    }
    return ZT_OK;
}
