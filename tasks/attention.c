/*
 * tasks/attention.c: causal multi-head attention per row block. Row blocks hold whole
 * sequences, so forward and backward of a block need no other block.
 *
 * Layer: tasks/ (an op file). The backward body works in a [T, T] scratch of its worker
 * (zt_worker_scratch: owned by the worker thread, reused by its next task, freed when it exits),
 * so the task carries no scratch buffer and nothing here outlives the runtime. With bf16 blocks
 * and a bf16 engine the bf16 kernels read and write them as stored (zt_kern_attention_*_bf16).
 */
#include <stdlib.h>      /* calloc */
#include "zt_kernels.h"  /* zt_kern_attention_* */
#include "tasks_impl.h"  /* builder, slots */

struct zt_attention_args {
    struct zt_task_hdr hdr;
    int C, NH;
    int bf16; /* every slot bf16 and the CPU has a bf16 engine: the bf16 kernels (native16) */
};

static float *bf16_scratch(const struct zt_attention_args *a, int T) {
    size_t n = zt_kern_attention_bf16_scratch_floats(T, a->C / a->NH);
    return zt_worker_scratch(ZT_SCRATCH_BODY, n);
}

void attention_forward_cpu(void *buffers[], void *cl_arg) {
    const struct zt_attention_args *a = cl_arg;
    float *out = zt_slot_ptr(buffers, &a->hdr, 0);
    float *att = zt_slot_ptr(buffers, &a->hdr, 1);
    const float *qkv = zt_slot_ptr(buffers, &a->hdr, 2);
    int64_t N = zt_slot_nx(buffers, &a->hdr, 0) / a->C;
    int64_t natt = zt_slot_nx(buffers, &a->hdr, 1);
    int T = (int)((natt / a->NH) / N); /* att = B*NH*T*T, N = B*T */
    if (a->bf16) {
        zt_kern_attention_forward_bf16((uint16_t *)out, (uint16_t *)att, (const uint16_t *)qkv,
                                       bf16_scratch(a, T), (int)(N / T), T, a->C, a->NH);
        return;
    }
    zt_kern_attention_forward(out, att, qkv, (int)(N / T), T, a->C, a->NH);
}

void attention_backward_cpu(void *buffers[], void *cl_arg) {
    const struct zt_attention_args *a = cl_arg;
    float *dqkv = zt_slot_ptr(buffers, &a->hdr, 0);
    const float *dout = zt_slot_ptr(buffers, &a->hdr, 1);
    const float *qkv = zt_slot_ptr(buffers, &a->hdr, 2);
    const float *att = zt_slot_ptr(buffers, &a->hdr, 3);
    int64_t N = zt_slot_nx(buffers, &a->hdr, 1) / a->C;
    int T = (int)((zt_slot_nx(buffers, &a->hdr, 3) / a->NH) / N);
    if (a->bf16) {
        zt_kern_attention_backward_bf16((uint16_t *)dqkv, bf16_scratch(a, T),
                                        (const uint16_t *)dout, (const uint16_t *)qkv,
                                        (const uint16_t *)att, (int)(N / T), T, a->C, a->NH);
        return;
    }
    float *scratch = zt_worker_scratch(ZT_SCRATCH_BODY, zt_kern_attention_scratch_floats(T));
    zt_kern_attention_backward(dqkv, scratch, dout, qkv, att, (int)(N / T), T, a->C, a->NH);
}

#ifdef ZT_USE_CUDA
#include "zt_kernels_cuda.h" /* zt_cuda_attention_* */

void attention_forward_cuda(void *buffers[], void *cl_arg) {
    const struct zt_attention_args *a = cl_arg;
    int64_t N = zt_slot_nx(buffers, &a->hdr, 0) / a->C;
    int T = (int)((zt_slot_nx(buffers, &a->hdr, 1) / a->NH) / N);
    ZT_CUDA_OK("attention_forward",
               zt_cuda_attention_forward(zt_cuda_blas(), zt_slot_ptr(buffers, &a->hdr, 0),
                                         zt_slot_ptr(buffers, &a->hdr, 1),
                                         zt_slot_ptr(buffers, &a->hdr, 2), (int)(N / T), T,
                                         a->C, a->NH, zt_cuda_stream()));
}

/* the backward's scratch is the worker's device body area (all heads of a batch row) */
void attention_backward_cuda(void *buffers[], void *cl_arg) {
    const struct zt_attention_args *a = cl_arg;
    int64_t N = zt_slot_nx(buffers, &a->hdr, 1) / a->C;
    int T = (int)((zt_slot_nx(buffers, &a->hdr, 3) / a->NH) / N);
    float *scratch = zt_cuda_scratch(ZT_CUDA_BODY,
                                     zt_cuda_attention_scratch_floats(T, a->NH) * sizeof(float));
    ZT_CUDA_OK("attention_backward",
               zt_cuda_attention_backward(zt_cuda_blas(), zt_slot_ptr(buffers, &a->hdr, 0),
                                          scratch, zt_slot_ptr(buffers, &a->hdr, 1),
                                          zt_slot_ptr(buffers, &a->hdr, 2),
                                          zt_slot_ptr(buffers, &a->hdr, 3), (int)(N / T), T,
                                          a->C, a->NH, zt_cuda_stream()));
}
#endif

static enum zt_status check(const char *fn, zt_tensor_t x, zt_tensor_t qkv, zt_tensor_t att,
                            int blk, int n_head) {
    ZT_CHECK(zt_check_blk(fn, x, blk));
    ZT_CHECK(zt_check_same_blocks(fn, x, qkv));
    ZT_CHECK(zt_check_same_blocks(fn, x, att));
    int64_t C = zt_tensor_cols(x), N = zt_tensor_rows(x), B = zt_tensor_rows(att);
    if (n_head <= 0 || C % n_head != 0 || zt_tensor_cols(qkv) != 3 * C || N % B != 0 ||
        zt_tensor_cols(att) != n_head * (N / B) * (N / B))
        return zt_error_set(ZT_ERR_INVALID, "%s: shapes %s [%lld,%lld], %s, %s with %d heads do "
                                            "not agree", fn, zt_tensor_name(x), (long long)N,
                            (long long)C, zt_tensor_name(qkv), zt_tensor_name(att), n_head);
    return ZT_OK;
}

enum zt_status zt_task_attention_forward(const struct zt_task_opts *o, zt_tensor_t out,
                                         zt_tensor_t att, int blk, zt_tensor_t qkv, int n_head) {
    ZT_CHECK(check("zt_task_attention_forward", out, qkv, att, blk, n_head));
    ZT_ARGS_NEW(struct zt_attention_args, a);
    a->C = (int)zt_tensor_cols(out);
    a->NH = n_head;
    a->bf16 = zt_bf16_native(out, att, qkv);
    a->hdr.native16 = (unsigned char)a->bf16;
    struct zt_builder tb;
    zt_builder_init(&tb, &a->hdr, ZT_KIND_attention_forward, o, blk);
    zt_builder_add(&tb, out, blk, STARPU_W);
    zt_builder_add(&tb, att, blk, STARPU_W);
    zt_builder_add(&tb, qkv, blk, STARPU_R);
    return zt_builder_submit(&tb, a, sizeof *a, o ? o->priority : 0);
}

enum zt_status zt_task_attention_backward(const struct zt_task_opts *o, zt_tensor_t dqkv,
                                          int blk, zt_tensor_t dout, zt_tensor_t qkv,
                                          zt_tensor_t att, int n_head) {
    ZT_CHECK(check("zt_task_attention_backward", dout, qkv, att, blk, n_head));
    ZT_CHECK(zt_check_same_blocks("zt_task_attention_backward", dqkv, qkv));
    ZT_ARGS_NEW(struct zt_attention_args, a);
    a->C = (int)zt_tensor_cols(dout);
    a->NH = n_head;
    a->bf16 = zt_bf16_native(dout, qkv, att) && zt_tensor_dtype(dqkv) == ZT_DTYPE_BF16;
    a->hdr.native16 = (unsigned char)a->bf16;
    struct zt_builder tb;
    zt_builder_init(&tb, &a->hdr, ZT_KIND_attention_backward, o, blk);
    zt_builder_add(&tb, dqkv, blk, STARPU_W);
    zt_builder_add(&tb, dout, blk, STARPU_R);
    zt_builder_add(&tb, qkv, blk, STARPU_R);
    zt_builder_add(&tb, att, blk, STARPU_R);
    return zt_builder_submit(&tb, a, sizeof *a, o ? o->priority : 0);
}
