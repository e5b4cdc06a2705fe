/*
 * tasks/matmul_bf16.c: the matmul kinds' bodies when their operands are bf16 and the CPU has a
 * bf16 engine (kernels/cpu/gemm_bf16.c: AMX or AVX512-BF16): the products read the bf16 blocks
 * as stored, sum in fp32 from the start (the bias, the bf16 result widened when the task adds
 * into it, or 0), and the kernel rounds each sum to bf16 once per task (nearest even) as it
 * stores it, as the widening path rounds it. Under ZT_GEMM16_WIDEN the tasks are not
 * native and the dispatcher widens them for the fp32 bodies of matmul.c.
 *
 * Layer: tasks/ (an op file's helper, called by matmul.c's bodies), over kernels/.
 */
#include "zt_kernels.h" /* zt_kern_gemm_bf16, zt_kern_gemm16_get */
#include "tasks_impl.h" /* slots, scratch, zt_mm16 */

int zt_bf16_native(zt_tensor_t x, zt_tensor_t y, zt_tensor_t z) {
    return zt_kern_gemm16_get() != ZT_GEMM16_WIDEN && zt_tensor_dtype(x) == ZT_DTYPE_BF16 &&
           zt_tensor_dtype(y) == ZT_DTYPE_BF16 && zt_tensor_dtype(z) == ZT_DTYPE_BF16;
}

int zt_bf16_products(zt_tensor_t w) {
    return zt_kern_gemm16_get() != ZT_GEMM16_WIDEN && zt_tensor_dtype(w) == ZT_DTYPE_BF16;
}

void zt_bf16_products_run(float *out, int ldo, const float *inp, const uint16_t *w, int tiles,
                          int OC, int64_t o0, int add, int N, int C, int oc) {
    uint16_t *a16 = (uint16_t *)zt_worker_scratch(ZT_SCRATCH_WIDENING,
                                                  ((size_t)N * (size_t)C + 1) / 2);
    int rc = tiles ? zt_kern_matmul_forward_bf16_packed(out, ldo, inp, w, OC, o0, add, N, C, oc,
                                                        a16)
                   : zt_kern_matmul_forward_bf16(out, ldo, inp, w + o0, OC, add, N, C, oc, a16);
    ZT_ASSERT_MSG(rc == 0, "the bf16 engine went away after the task's submission");
}

int zt_bf16_tiles_available(void) { return zt_kern_gemm16_get() != ZT_GEMM16_WIDEN; }

size_t zt_bf16_tiles_elems(int64_t rows, int64_t cols) {
    return zt_kern_bf16_packed_elems((int)rows, (int)cols);
}

enum zt_status zt_bf16_tiles_pack(const uint16_t *src, int64_t ld, int64_t rows, int64_t cols,
                                  uint16_t *dst) {
    if (zt_kern_bf16_pack(src, (int)ld, (int)rows, (int)cols, dst) != 0)
        return zt_error_set(ZT_ERR_INVALID, "zt_bf16_tiles_pack: this CPU (or ZT_GEMM) has no "
                            "bf16 engine to pack for");
    return ZT_OK;
}

/* the fp32 bias of a forward task (slot 3), widened into the body's scratch when 16-bit */
static const float *bias_f32(void *buffers[], const struct zt_task_hdr *h, int OC) {
    const void *p = zt_slot_ptr(buffers, h, 3);
    if (!p || h->dtype[3] == ZT_DTYPE_F32) return p;
    float *f = zt_worker_scratch(ZT_SCRATCH_BODY, (size_t)OC);
    zt_dtype_to_f32((enum zt_dtype)h->dtype[3], f, p, (size_t)OC);
    return f;
}

/* dst (slot 0, rows x cols bf16) = round(start + op(x) op(y)): the kernel's fused store, with
 * the worker's scratch for deep products */
static void product(void *buffers[], const struct zt_task_hdr *h, int ta, int tb, int rows,
                    int cols, int K, const uint16_t *x, int ldx, const uint16_t *y, int ldy,
                    const float *bias, int accumulate) {
    size_t n = zt_kern_gemm_bf16_c16_scratch_floats(rows, cols, K);
    float *scratch = n ? zt_worker_scratch(ZT_SCRATCH_WIDENING, n) : NULL;
    zt_kern_gemm_bf16_c16(ta, tb, rows, cols, K, x, ldx, y, ldy, bias, accumulate,
                          zt_slot_ptr(buffers, h, 0), cols, scratch);
}

/* out[N,OC] = inp[N,C] @ w (w[C,OC], tied: w[OC,C]^T) (+ bias) */
static void forward(void *buffers[], const struct zt_task_hdr *h, const struct zt_mm16 *m,
                    int tied) {
    int N = (int)(zt_slot_nx(buffers, h, 1) / m->C);
    product(buffers, h, 0, tied, N, m->OC, m->C, zt_slot_ptr(buffers, h, 1), m->C,
            zt_slot_ptr(buffers, h, 2), tied ? m->C : m->OC,
            tied ? NULL : bias_f32(buffers, h, m->OC), 0);
}

/* dinp[N,C] (= or +=) dout[N,OC] @ w^T (w[C,OC]; tied: dout @ w with w[OC,C]) */
static void backward_inp(void *buffers[], const struct zt_task_hdr *h, const struct zt_mm16 *m,
                         int tied) {
    int N = (int)(zt_slot_nx(buffers, h, 0) / m->C);
    product(buffers, h, 0, !tied, N, m->C, m->OC, zt_slot_ptr(buffers, h, 1), m->OC,
            zt_slot_ptr(buffers, h, 2), tied ? m->C : m->OC, NULL, m->accumulate);
}

/* rows r0..r1 of the weight gradient += x[N, r0:r1]^T @ y[N, :] with x the slot-1 operand (inp;
 * tied: dout) of xcols columns and y the slot-2 one of ycols */
static void backward_weight(void *buffers[], const struct zt_task_hdr *h, const struct zt_mm16 *m,
                            int tied) {
    const uint16_t *x = zt_slot_ptr(buffers, h, 1);
    int xcols = tied ? m->OC : m->C, ycols = tied ? m->C : m->OC;
    int N = (int)(zt_slot_nx(buffers, h, 1) / xcols), rows = (int)(m->r1 - m->r0);
    if (N == 0 || rows == 0) return;
    product(buffers, h, 1, 0, rows, ycols, N, x + m->r0, xcols, zt_slot_ptr(buffers, h, 2),
            ycols, NULL, 1);
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
