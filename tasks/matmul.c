/*
 * tasks/matmul.c: linear layers (HF Conv1D layout w[C,OC]) and the tied head (w[OC,C]).
 *
 * Layer: tasks/. Forward and input-gradient tasks work per row block of the activations;
 * weight-gradient tasks work per row block of the weight and read every activation block, so
 * each weight-gradient block sums over the rows in one fixed order.
 */
#include <stdlib.h>      /* calloc */
#include <string.h>      /* memcpy */
#include "zt_kernels.h"  /* zt_kern_matmul_* */
#include "tasks_impl.h"  /* builder, slots */

struct zt_matmul_args {
    struct zt_task_hdr hdr;
    int C, OC;
    int accumulate;
    int w16; /* forward with fp32 rows and a 16-bit weight read as stored (hdr.native16) */
    int bf16w; /* w16 with a bf16 weight on the bf16 engine: the bf16 model's products */
    int tiles; /* bf16w with the weight packed in the engine's tiles (zt_tensor_bf16_tiles) */
    int bf16; /* bf16 operands on the CPU's bf16 engine (hdr.native16; matmul_bf16.c) */
    int64_t r0, r1; /* weight rows of this block (weight-gradient tasks) */
    int64_t panel;  /* forward: the weight in column panels of this width (0: row-major) */
};

/* a task of bf16 operands: its body in matmul_bf16.c; 0 when the task is not one */
static int ran_bf16(void *buffers[], const struct zt_matmul_args *a) {
    if (!a->bf16) return 0;
    struct zt_mm16 m = {.C = a->C, .OC = a->OC, .accumulate = a->accumulate, .r0 = a->r0,
                        .r1 = a->r1};
    zt_matmul_bf16_body(buffers, &a->hdr, &m);
    return 1;
}

/* a 16-bit weight (and bias) widened into the worker's scratch: the fallback of the w16 path */
static const float *widened(void *buffers[], const struct zt_matmul_args *a, int s, float *dst) {
    const void *p = zt_slot_ptr(buffers, &a->hdr, s);
    if (!p || !zt_dtype_is16(a->hdr.dtype[s])) return p;
    zt_dtype_to_f32((enum zt_dtype)a->hdr.dtype[s], dst, p,
                    (size_t)zt_slot_nx(buffers, &a->hdr, s));
    return dst;
}

/* forward with fp32 rows and a bf16 weight: the bf16 model's products, from the bias */
static void forward_bf16w(void *buffers[], const struct zt_matmul_args *a, const float *bias) {
    float *out = zt_slot_ptr(buffers, &a->hdr, 0);
    int N = (int)(zt_slot_nx(buffers, &a->hdr, 1) / a->C);
    for (int n = 0; bias && n < N; n++)
        memcpy(out + (size_t)n * a->OC, bias, (size_t)a->OC * sizeof *bias);
    zt_bf16_products_run(out, a->OC, zt_slot_ptr(buffers, &a->hdr, 1),
                         zt_slot_ptr(buffers, &a->hdr, 2), a->tiles, a->OC, 0, bias != NULL, N,
                         a->C, a->OC);
}

/* forward with fp32 rows and a 16-bit weight: the bf16 model's products, read as stored (a few
 * rows), or widened here */
static void forward_w16(void *buffers[], const struct zt_matmul_args *a, int tied) {
    float *out = zt_slot_ptr(buffers, &a->hdr, 0);
    const float *inp = zt_slot_ptr(buffers, &a->hdr, 1);
    const uint16_t *w = zt_slot_ptr(buffers, &a->hdr, 2);
    int N = (int)(zt_slot_nx(buffers, &a->hdr, 1) / a->C), f16 = a->hdr.dtype[2] == ZT_DTYPE_F16;
    size_t nw = (size_t)a->C * (size_t)a->OC;
    float *scratch = zt_worker_scratch(ZT_SCRATCH_BODY, (size_t)a->OC);
    const float *bias = tied ? NULL : widened(buffers, a, 3, scratch);
    if (a->bf16w) {
        forward_bf16w(buffers, a, bias);
        return;
    }
    int done = tied ? zt_kern_matmul_t_forward_w16(out, inp, w, f16, N, a->C, a->OC)
                    : zt_kern_matmul_forward_w16(out, inp, w, f16, bias, N, a->C, a->OC);
    if (done == 0) return;
    float *wide = zt_worker_scratch(ZT_SCRATCH_WIDENING, nw + (size_t)a->OC);
    bias = tied ? NULL : widened(buffers, a, 3, wide + nw);
    zt_dtype_to_f32((enum zt_dtype)a->hdr.dtype[2], wide, w, nw);
    if (tied) zt_kern_matmul_t_forward(out, inp, wide, N, a->C, a->OC);
    else zt_kern_matmul_forward(out, inp, wide, bias, N, a->C, a->OC);
}

void zt_part_product(float *out, int ldo, const float *inp, int N, int C, const void *w,
                     enum zt_dtype dt, int ldw, int cols, float beta) {
    if (!zt_dtype_is16(dt)) {
        zt_kern_sgemm(0, 0, N, cols, C, 1.0f, inp, C, w, ldw, beta, out, ldo);
        return;
    }
    if (zt_kern_sgemm_w16(0, N, cols, C, inp, C, w, dt == ZT_DTYPE_F16, ldw, beta, out, ldo) == 0)
        return;
    float *wide = zt_worker_scratch(ZT_SCRATCH_WIDENING, (size_t)C * (size_t)cols);
    for (int k = 0; k < C; k++)
        zt_dtype_to_f32(dt, wide + (size_t)k * cols, (const uint16_t *)w + (size_t)k * ldw,
                        (size_t)cols);
    zt_kern_sgemm(0, 0, N, cols, C, 1.0f, inp, C, wide, cols, beta, out, ldo);
}

/* forward over a weight in column panels (zt_tensor_col_panels): the rows seeded with the bias,
 * then each panel's columns; each element's sum depends on K only, so the bits are those of the
 * row-major weight's product */
static void forward_panels(void *buffers[], const struct zt_matmul_args *a) {
    float *out = zt_slot_ptr(buffers, &a->hdr, 0);
    const float *inp = zt_slot_ptr(buffers, &a->hdr, 1);
    const char *w = zt_slot_ptr(buffers, &a->hdr, 2);
    const enum zt_dtype dt = (enum zt_dtype)a->hdr.dtype[2];
    const int N = (int)(zt_slot_nx(buffers, &a->hdr, 1) / a->C), C = a->C, OC = a->OC;
    const float *bias =
        widened(buffers, a, 3, zt_worker_scratch(ZT_SCRATCH_BODY, (size_t)OC));
    for (int n = 0; bias && n < N; n++)
        memcpy(out + (size_t)n * OC, bias, (size_t)OC * sizeof *bias);
    for (int64_t o0 = 0; o0 < OC; o0 += a->panel) {
        const int pw = (int)(OC - o0 < a->panel ? OC - o0 : a->panel);
        zt_part_product(out + o0, OC, inp, N, C, w + (size_t)(C * o0) * zt_dtype_size(dt), dt,
                        pw, pw, bias ? 1.0f : 0.0f);
    }
}

void matmul_forward_cpu(void *buffers[], void *cl_arg) {
    const struct zt_matmul_args *a = cl_arg;
    if (a->panel) {
        forward_panels(buffers, a);
        return;
    }
    if (ran_bf16(buffers, a)) return;
    if (a->w16) {
        forward_w16(buffers, a, 0);
        return;
    }
    float *out = zt_slot_ptr(buffers, &a->hdr, 0);
    const float *inp = zt_slot_ptr(buffers, &a->hdr, 1);
    int N = (int)(zt_slot_nx(buffers, &a->hdr, 1) / a->C);
    zt_kern_matmul_forward(out, inp, zt_slot_ptr(buffers, &a->hdr, 2),
                           zt_slot_ptr(buffers, &a->hdr, 3), N, a->C, a->OC);
}

void matmul_backward_inp_cpu(void *buffers[], void *cl_arg) {
    const struct zt_matmul_args *a = cl_arg;
    if (ran_bf16(buffers, a)) return;
    float *dinp = zt_slot_ptr(buffers, &a->hdr, 0);
    int N = (int)(zt_slot_nx(buffers, &a->hdr, 0) / a->C);
    zt_kern_matmul_backward_inp(dinp, zt_slot_ptr(buffers, &a->hdr, 1),
                                zt_slot_ptr(buffers, &a->hdr, 2), N, a->C, a->OC, a->accumulate);
}

void matmul_backward_weight_cpu(void *buffers[], void *cl_arg) {
    const struct zt_matmul_args *a = cl_arg;
    if (ran_bf16(buffers, a)) return;
    float *dw = zt_slot_ptr(buffers, &a->hdr, 0);
    const float *inp = zt_slot_ptr(buffers, &a->hdr, 1);
    int N = (int)(zt_slot_nx(buffers, &a->hdr, 1) / a->C);
    zt_kern_matmul_backward_weight(dw, inp, zt_slot_ptr(buffers, &a->hdr, 2), N, a->C, a->OC,
                                   (int)a->r0, (int)a->r1);
}

/* dbias (+)= the column sums of dout with 16-bit slots (hdr.native16): dout widened a row at a
 * time; each column summed in row order from 0 and added to dbias once, as the kernel does */
static void bias16(void *buffers[], const struct zt_matmul_args *a) {
    const struct zt_task_hdr *h = &a->hdr;
    int N = (int)(zt_slot_nx(buffers, h, 1) / a->OC), OC = a->OC;
    float *acc = zt_worker_scratch(ZT_SCRATCH_BODY, 3 * (size_t)OC), *row = acc + OC;
    for (int j = 0; j < OC; j++) acc[j] = 0.0f;
    for (int n = 0; n < N; n++) {
        const float *d = zt_slot_f32(buffers, h, 1, (size_t)n * OC, (size_t)OC, row);
        for (int j = 0; j < OC; j++) acc[j] += d[j];
    }
    float *db = row + OC;
    const float *cur = zt_slot_f32(buffers, h, 0, 0, (size_t)OC, db);
    for (int j = 0; j < OC; j++) db[j] = cur[j] + acc[j];
    zt_slot_store_f32(buffers, h, 0, 0, (size_t)OC, db);
}

void matmul_backward_bias_cpu(void *buffers[], void *cl_arg) {
    const struct zt_matmul_args *a = cl_arg;
    if (a->hdr.native16) {
        bias16(buffers, a);
        return;
    }
    int N = (int)(zt_slot_nx(buffers, &a->hdr, 1) / a->OC);
    zt_kern_matmul_backward_bias(zt_slot_ptr(buffers, &a->hdr, 0),
                                 zt_slot_ptr(buffers, &a->hdr, 1), N, a->OC);
}

void matmul_t_forward_cpu(void *buffers[], void *cl_arg) {
    const struct zt_matmul_args *a = cl_arg;
    if (ran_bf16(buffers, a)) return;
    if (a->w16) {
        forward_w16(buffers, a, 1);
        return;
    }
    int N = (int)(zt_slot_nx(buffers, &a->hdr, 1) / a->C);
    zt_kern_matmul_t_forward(zt_slot_ptr(buffers, &a->hdr, 0), zt_slot_ptr(buffers, &a->hdr, 1),
                             zt_slot_ptr(buffers, &a->hdr, 2), N, a->C, a->OC);
}

void matmul_t_backward_inp_cpu(void *buffers[], void *cl_arg) {
    const struct zt_matmul_args *a = cl_arg;
    if (ran_bf16(buffers, a)) return;
    int N = (int)(zt_slot_nx(buffers, &a->hdr, 0) / a->C);
    zt_kern_matmul_t_backward_inp(zt_slot_ptr(buffers, &a->hdr, 0),
                                  zt_slot_ptr(buffers, &a->hdr, 1),
                                  zt_slot_ptr(buffers, &a->hdr, 2), N, a->C, a->OC,
                                  a->accumulate);
}

void matmul_t_backward_weight_cpu(void *buffers[], void *cl_arg) {
    const struct zt_matmul_args *a = cl_arg;
    if (ran_bf16(buffers, a)) return;
    int N = (int)(zt_slot_nx(buffers, &a->hdr, 2) / a->C);
    zt_kern_matmul_t_backward_weight(zt_slot_ptr(buffers, &a->hdr, 0),
                                     zt_slot_ptr(buffers, &a->hdr, 1),
                                     zt_slot_ptr(buffers, &a->hdr, 2), N, a->C, a->OC,
                                     (int)a->r0, (int)a->r1);
}

#ifdef ZT_USE_CUDA
#include "zt_kernels_cuda.h" /* zt_cuda_matmul_* */

#define SLOT(i) zt_slot_ptr(buffers, &a->hdr, i)

void matmul_forward_cuda(void *buffers[], void *cl_arg) {
    const struct zt_matmul_args *a = cl_arg;
    int N = (int)(zt_slot_nx(buffers, &a->hdr, 1) / a->C);
    ZT_CUDA_OK("matmul_forward", zt_cuda_matmul_forward(zt_cuda_blas(), SLOT(0), SLOT(1), SLOT(2),
                                                        SLOT(3), N, a->C, a->OC,
                                                        zt_cuda_stream()));
}

void matmul_backward_inp_cuda(void *buffers[], void *cl_arg) {
    const struct zt_matmul_args *a = cl_arg;
    int N = (int)(zt_slot_nx(buffers, &a->hdr, 0) / a->C);
    ZT_CUDA_OK("matmul_backward_inp",
               zt_cuda_matmul_backward_inp(zt_cuda_blas(), SLOT(0), SLOT(1), SLOT(2), N, a->C,
                                           a->OC, a->accumulate, zt_cuda_stream()));
}

void matmul_backward_weight_cuda(void *buffers[], void *cl_arg) {
    const struct zt_matmul_args *a = cl_arg;
    int N = (int)(zt_slot_nx(buffers, &a->hdr, 1) / a->C);
    ZT_CUDA_OK("matmul_backward_weight",
               zt_cuda_matmul_backward_weight(zt_cuda_blas(), SLOT(0), SLOT(1), SLOT(2), N, a->C,
                                              a->OC, (int)a->r0, (int)a->r1, zt_cuda_stream()));
}

void matmul_backward_bias_cuda(void *buffers[], void *cl_arg) {
    const struct zt_matmul_args *a = cl_arg;
    int N = (int)(zt_slot_nx(buffers, &a->hdr, 1) / a->OC);
    ZT_CUDA_OK("matmul_backward_bias",
               zt_cuda_matmul_backward_bias(SLOT(0), SLOT(1), N, a->OC, zt_cuda_stream()));
}

void matmul_t_forward_cuda(void *buffers[], void *cl_arg) {
    const struct zt_matmul_args *a = cl_arg;
    int N = (int)(zt_slot_nx(buffers, &a->hdr, 1) / a->C);
    ZT_CUDA_OK("matmul_t_forward", zt_cuda_matmul_t_forward(zt_cuda_blas(), SLOT(0), SLOT(1),
                                                            SLOT(2), N, a->C, a->OC,
                                                            zt_cuda_stream()));
}

void matmul_t_backward_inp_cuda(void *buffers[], void *cl_arg) {
    const struct zt_matmul_args *a = cl_arg;
    int N = (int)(zt_slot_nx(buffers, &a->hdr, 0) / a->C);
    ZT_CUDA_OK("matmul_t_backward_inp",
               zt_cuda_matmul_t_backward_inp(zt_cuda_blas(), SLOT(0), SLOT(1), SLOT(2), N, a->C,
                                             a->OC, a->accumulate, zt_cuda_stream()));
}

void matmul_t_backward_weight_cuda(void *buffers[], void *cl_arg) {
    const struct zt_matmul_args *a = cl_arg;
    int N = (int)(zt_slot_nx(buffers, &a->hdr, 2) / a->C);
    ZT_CUDA_OK("matmul_t_backward_weight",
               zt_cuda_matmul_t_backward_weight(zt_cuda_blas(), SLOT(0), SLOT(1), SLOT(2), N,
                                                a->C, a->OC, (int)a->r0, (int)a->r1,
                                                zt_cuda_stream()));
}
#undef SLOT
#endif

/* shapes: inp [N,C] and w rows x cols must agree with the layout */
static enum zt_status check_weight(const char *fn, zt_tensor_t inp_or_dinp, zt_tensor_t w, int tied,
                              int *C, int *OC) {
    int64_t wr = zt_tensor_rows(w), wc = zt_tensor_cols(w);
    *C = (int)(tied ? wc : wr);
    *OC = (int)(tied ? wr : wc);
    if (zt_tensor_cols(inp_or_dinp) != *C)
        return zt_error_set(ZT_ERR_INVALID, "%s: %s has %lld columns but weight %s is %lld x %lld",
                            fn, zt_tensor_name(inp_or_dinp), (long long)zt_tensor_cols(inp_or_dinp),
                            zt_tensor_name(w), (long long)wr, (long long)wc);
    return ZT_OK;
}

static enum zt_status rowwise(enum zt_task_kind kind, const char *fn, const struct zt_task_opts *o,
                              zt_tensor_t dst, int blk, enum starpu_data_access_mode dmode,
                              zt_tensor_t src, zt_tensor_t w, zt_tensor_t bias, int tied,
                              int accumulate, zt_tensor_t shape_ref) {
    ZT_CHECK(zt_check_blk(fn, dst, blk));
    ZT_CHECK(zt_check_same_blocks(fn, dst, src));
    int C, OC;
    ZT_CHECK(check_weight(fn, shape_ref, w, tied, &C, &OC));
    /* fp32 rows against a 16-bit weight read it as stored, not widened whole: a bf16 one on a
     * bf16 engine as the bf16 model's products (packed once, or per task), another (a few rows,
     * decode) through the fp32 GEMM's few-rows path */
    int forward = kind == ZT_KIND_matmul_forward || kind == ZT_KIND_matmul_t_forward;
    int f32_rows = zt_tensor_dtype(dst) == ZT_DTYPE_F32 && zt_tensor_dtype(src) == ZT_DTYPE_F32;
    int bf16w = forward && !tied && f32_rows && zt_bf16_products(w);
    if (zt_tensor_bf16_tiles(w) && !bf16w)
        return zt_error_set(ZT_ERR_INVALID, "%s: %s is packed for the bf16 engine: only a "
                            "forward product of fp32 rows reads it", fn, zt_tensor_name(w));
    const int64_t panel = zt_tensor_col_panels(w);
    if (panel && (kind != ZT_KIND_matmul_forward || !f32_rows || bf16w))
        return zt_error_set(ZT_ERR_INVALID, "%s: %s is stored in column panels: only a forward "
                            "product of fp32 rows reads it", fn, zt_tensor_name(w));
    ZT_ARGS_NEW(struct zt_matmul_args, a);
    a->C = C;
    a->OC = OC;
    a->accumulate = accumulate;
    a->bf16w = bf16w;
    a->tiles = zt_tensor_bf16_tiles(w);
    a->w16 = forward && zt_dtype_is16(zt_tensor_dtype(w)) && f32_rows &&
             (bf16w || zt_tensor_blk_rows(dst, blk) <= ZT_KERN_FEW_ROWS);
    a->bf16 = zt_bf16_native(dst, src, w);
    a->panel = panel;
    /* a panelled weight is read as stored by its body alone */
    a->hdr.native16 = (unsigned char)(a->w16 || a->bf16 || panel);
    struct zt_builder tb;
    zt_builder_init(&tb, &a->hdr, kind, o, blk);
    if (a->bf16w || panel) a->hdr.cpu_only = 1; /* the CUDA body would not round the rows */
    zt_builder_add(&tb, dst, blk, dmode);
    zt_builder_add(&tb, src, blk, STARPU_R);
    zt_builder_add(&tb, w, -1, STARPU_R);
    if (kind == ZT_KIND_matmul_forward) zt_builder_add(&tb, bias, -1, STARPU_R);
    return zt_builder_submit(&tb, a, sizeof *a, o ? o->priority : 0);
}

enum zt_status zt_task_matmul_forward(const struct zt_task_opts *o, zt_tensor_t out, int blk,
                                      zt_tensor_t inp, zt_tensor_t w, zt_tensor_t bias) {
    return rowwise(ZT_KIND_matmul_forward, "zt_task_matmul_forward", o, out, blk, STARPU_W, inp,
                   w, bias, 0, 0, inp);
}

enum zt_status zt_task_matmul_backward_inp(const struct zt_task_opts *o, zt_tensor_t dinp,
                                           int blk, zt_tensor_t dout, zt_tensor_t w,
                                           int accumulate) {
    return rowwise(ZT_KIND_matmul_backward_inp, "zt_task_matmul_backward_inp", o, dinp, blk,
                   accumulate ? STARPU_RW : STARPU_W, dout, w, NULL, 0, accumulate, dinp);
}

enum zt_status zt_task_matmul_t_forward(const struct zt_task_opts *o, zt_tensor_t out, int blk,
                                        zt_tensor_t inp, zt_tensor_t w) {
    return rowwise(ZT_KIND_matmul_t_forward, "zt_task_matmul_t_forward", o, out, blk, STARPU_W,
                   inp, w, NULL, 1, 0, inp);
}

enum zt_status zt_task_matmul_t_backward_inp(const struct zt_task_opts *o, zt_tensor_t dinp,
                                             int blk, zt_tensor_t dout, zt_tensor_t w,
                                             int accumulate) {
    return rowwise(ZT_KIND_matmul_t_backward_inp, "zt_task_matmul_t_backward_inp", o, dinp, blk,
                   accumulate ? STARPU_RW : STARPU_W, dout, w, NULL, 1, accumulate, dinp);
}

static enum zt_status weightwise(enum zt_task_kind kind, const char *fn,
                                 const struct zt_task_opts *o, zt_tensor_t dw, int wblk,
                                 zt_tensor_t a0, zt_tensor_t a1, int tied) {
    if (wblk != -1) ZT_CHECK(zt_check_blk(fn, dw, wblk));
    ZT_CHECK(zt_check_same_blocks(fn, a0, a1));
    int C, OC;
    ZT_CHECK(check_weight(fn, tied ? a1 : a0, dw, tied, &C, &OC));
    ZT_ARGS_NEW(struct zt_matmul_args, a);
    a->C = C;
    a->OC = OC;
    a->r0 = wblk < 0 ? 0 : zt_tensor_blk_row0(dw, wblk);
    a->r1 = wblk < 0 ? zt_tensor_rows(dw) : a->r0 + zt_tensor_blk_rows(dw, wblk);
    a->bf16 = zt_bf16_native(dw, a0, a1);
    a->hdr.native16 = (unsigned char)a->bf16;
    struct zt_builder tb;
    zt_builder_init(&tb, &a->hdr, kind, o, wblk);
    zt_builder_add(&tb, dw, wblk, STARPU_RW);
    zt_builder_add(&tb, a0, -1, STARPU_R);
    zt_builder_add(&tb, a1, -1, STARPU_R);
    return zt_builder_submit(&tb, a, sizeof *a, o ? o->priority : 0);
}

enum zt_status zt_task_matmul_backward_weight(const struct zt_task_opts *o, zt_tensor_t dw,
                                              int wblk, zt_tensor_t inp, zt_tensor_t dout) {
    return weightwise(ZT_KIND_matmul_backward_weight, "zt_task_matmul_backward_weight", o, dw,
                      wblk, inp, dout, 0);
}

enum zt_status zt_task_matmul_t_backward_weight(const struct zt_task_opts *o, zt_tensor_t dw,
                                                int wblk, zt_tensor_t dout, zt_tensor_t inp) {
    return weightwise(ZT_KIND_matmul_t_backward_weight, "zt_task_matmul_t_backward_weight", o,
                      dw, wblk, dout, inp, 1);
}

enum zt_status zt_task_matmul_backward_bias(const struct zt_task_opts *o, zt_tensor_t dbias,
                                            zt_tensor_t dout) {
    if (!dbias || zt_tensor_numel(dbias) != zt_tensor_cols(dout))
        return zt_error_set(ZT_ERR_INVALID, "zt_task_matmul_backward_bias: bias gradient must "
                                            "have %lld elements", (long long)zt_tensor_cols(dout));
    ZT_ARGS_NEW(struct zt_matmul_args, a);
    a->OC = (int)zt_tensor_cols(dout);
    struct zt_builder tb;
    zt_builder_init(&tb, &a->hdr, ZT_KIND_matmul_backward_bias, o, -1);
    a->hdr.native16 = (unsigned char)(zt_dtype_is16(zt_tensor_dtype(dbias)) ||
                                      zt_dtype_is16(zt_tensor_dtype(dout)));
    zt_builder_add(&tb, dbias, -1, STARPU_RW);
    zt_builder_add(&tb, dout, -1, STARPU_R);
    return zt_builder_submit(&tb, a, sizeof *a, o ? o->priority : 0);
}

size_t zt_task_worker_gemm_bytes(int64_t M, int64_t N, int64_t K) {
    return zt_kern_gemm_thread_bytes(M, N, K);
}
