/*
 * tasks/matmul_bf16.c: the matmul kinds' bodies when their operands are bf16 and the CPU has a
 * bf16 engine (kernels/cpu/gemm_bf16.c: AMX or AVX512-BF16): the products read the bf16 blocks
 * as stored, sum in fp32 into the worker's scratch, and the result is rounded to bf16 once per
 * task (nearest even), as the widening path rounds it. Under ZT_GEMM16_WIDEN the tasks are not
 * native and the dispatcher widens them for the fp32 bodies of matmul.c.
 *
 * Layer: tasks/ (an op file's helper, called by matmul.c's bodies), over kernels/.
 */
#include <string.h>     /* memcpy */
#include "zt_kernels.h" /* zt_kern_gemm_bf16, zt_kern_gemm16_get */
#include "tasks_impl.h" /* slots, scratch, zt_mm16 */

int zt_matmul_bf16_native(zt_tensor_t dst, zt_tensor_t src, zt_tensor_t w) {
    return zt_kern_gemm16_get() != ZT_GEMM16_WIDEN && zt_tensor_dtype(dst) == ZT_DTYPE_BF16 &&
           zt_tensor_dtype(src) == ZT_DTYPE_BF16 && zt_tensor_dtype(w) == ZT_DTYPE_BF16;
}

/* slot s as fp32 in area (n floats): widened when the task reads it, else left for the body */
static float *fp32_of(void *buffers[], const struct zt_task_hdr *h, int s, int64_t n,
                      enum zt_scratch_area area, int read) {
    float *f = zt_worker_scratch(area, (size_t)n);
    const void *p = zt_slot_ptr(buffers, h, s);
    if (!read || !p) return f;
    if (h->dtype[s] == ZT_DTYPE_F32) memcpy(f, p, (size_t)n * sizeof *f);
    else zt_dtype_to_f32((enum zt_dtype)h->dtype[s], f, p, (size_t)n);
    return f;
}

/* out[N,OC] = inp[N,C] @ w (w[C,OC], tied: w[OC,C]^T) (+ bias) */
static void forward(void *buffers[], const struct zt_task_hdr *h, const struct zt_mm16 *m,
                    int tied) {
    const uint16_t *inp = zt_slot_ptr(buffers, h, 1), *w = zt_slot_ptr(buffers, h, 2);
    int N = (int)(zt_slot_nx(buffers, h, 1) / m->C), has_bias = !tied && h->count[3];
    float *out = fp32_of(buffers, h, 0, (int64_t)N * m->OC, ZT_SCRATCH_WIDENING, 0);
    if (has_bias) {
        const float *bias = fp32_of(buffers, h, 3, m->OC, ZT_SCRATCH_BODY, 1);
        for (int n = 0; n < N; n++) memcpy(out + (size_t)n * m->OC, bias, m->OC * sizeof *out);
    }
    zt_kern_gemm_bf16(0, tied, N, m->OC, m->C, inp, m->C, w, tied ? m->C : m->OC,
                      has_bias ? 1.0f : 0.0f, out, m->OC);
    zt_dtype_from_f32(ZT_DTYPE_BF16, zt_slot_ptr(buffers, h, 0), out, (size_t)N * m->OC);
}

/* dinp[N,C] (= or +=) dout[N,OC] @ w^T (w[C,OC]; tied: dout @ w with w[OC,C]) */
static void backward_inp(void *buffers[], const struct zt_task_hdr *h, const struct zt_mm16 *m,
                         int tied) {
    const uint16_t *dout = zt_slot_ptr(buffers, h, 1), *w = zt_slot_ptr(buffers, h, 2);
    int N = (int)(zt_slot_nx(buffers, h, 0) / m->C);
    float *dinp = fp32_of(buffers, h, 0, (int64_t)N * m->C, ZT_SCRATCH_WIDENING, m->accumulate);
    zt_kern_gemm_bf16(0, !tied, N, m->C, m->OC, dout, m->OC, w, tied ? m->C : m->OC,
                      m->accumulate ? 1.0f : 0.0f, dinp, m->C);
    zt_dtype_from_f32(ZT_DTYPE_BF16, zt_slot_ptr(buffers, h, 0), dinp, (size_t)N * m->C);
}

/* rows r0..r1 of the weight gradient += x[N, r0:r1]^T @ y[N, :] with x the slot-1 operand (inp;
 * tied: dout) of xcols columns and y the slot-2 one of ycols */
static void backward_weight(void *buffers[], const struct zt_task_hdr *h, const struct zt_mm16 *m,
                            int tied) {
    const uint16_t *x = zt_slot_ptr(buffers, h, 1), *y = zt_slot_ptr(buffers, h, 2);
    int xcols = tied ? m->OC : m->C, ycols = tied ? m->C : m->OC;
    int N = (int)(zt_slot_nx(buffers, h, 1) / xcols), rows = (int)(m->r1 - m->r0);
    if (N == 0 || rows == 0) return;
    float *dw = fp32_of(buffers, h, 0, (int64_t)rows * ycols, ZT_SCRATCH_WIDENING, 1);
    zt_kern_gemm_bf16(1, 0, rows, ycols, N, x + m->r0, xcols, y, ycols, 1.0f, dw, ycols);
    zt_dtype_from_f32(ZT_DTYPE_BF16, zt_slot_ptr(buffers, h, 0), dw, (size_t)rows * ycols);
}

void zt_matmul_bf16_body(void *buffers[], const struct zt_task_hdr *h, const struct zt_mm16 *m) {
    switch (h->kind) {
    case ZT_KIND_matmul_forward: forward(buffers, h, m, 0); break;
    case ZT_KIND_matmul_t_forward: forward(buffers, h, m, 1); break;
    case ZT_KIND_matmul_backward_inp: backward_inp(buffers, h, m, 0); break;
    case ZT_KIND_matmul_t_backward_inp: backward_inp(buffers, h, m, 1); break;
    case ZT_KIND_matmul_backward_weight: backward_weight(buffers, h, m, 0); break;
    case ZT_KIND_matmul_t_backward_weight: backward_weight(buffers, h, m, 1); break;
    default: ZT_ASSERT_MSG(0, "matmul_bf16: kind %d has no bf16 body", h->kind);
    }
}
