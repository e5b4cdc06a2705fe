/*
 * tasks/matmul_cols.c: decode products split by output columns: with a few rows, one task per
 * matmul would read the whole weight on one worker while the others wait; here each worker's
 * task computes a range of output columns into its own slab tensor (reading its part of the
 * weight), and a concat task lays the slabs side by side in the output.
 *
 * Layer: tasks/ (an op file), over kernels/cpu/gemm.c. A column range of a product has the bits
 * of the same columns of the whole product (each element's sum depends on K only), so the split
 * changes no bit. 16-bit weights are read as stored on the few-rows path, else widened here.
 */
#include <stdlib.h>      /* calloc */
#include <string.h>      /* memcpy */
#include "zt_kernels.h"  /* zt_kern_sgemm, zt_kern_sgemm_w16 */
#include "tasks_impl.h"  /* builder, slots */

struct zt_cols_args {
    struct zt_task_hdr hdr;
    int C, OC, tied;  /* weight [C, OC] (HF Conv1D), or tied [OC, C] */
    int64_t o0;       /* first output column of the slab */
    int nslab;        /* concat: slabs */
};

/* the weight as fp32 from column (tied: row) o0 on: as stored, or widened into scratch */
static const float *weight_f32(void *buffers[], const struct zt_cols_args *a) {
    const void *w = zt_slot_ptr(buffers, &a->hdr, 2);
    enum zt_dtype dt = (enum zt_dtype)a->hdr.dtype[2];
    if (!zt_dtype_is16(dt)) return w;
    size_t n = (size_t)a->C * (size_t)a->OC;
    float *wide = zt_worker_scratch(ZT_SCRATCH_WIDENING, n);
    zt_dtype_to_f32(dt, wide, w, n);
    return wide;
}

void matmul_cols_cpu(void *buffers[], void *cl_arg) {
    const struct zt_cols_args *a = cl_arg;
    float *slab = zt_slot_ptr(buffers, &a->hdr, 0);
    const float *inp = zt_slot_ptr(buffers, &a->hdr, 1);
    const void *w = zt_slot_ptr(buffers, &a->hdr, 2), *bias = zt_slot_ptr(buffers, &a->hdr, 3);
    int N = (int)(zt_slot_nx(buffers, &a->hdr, 1) / a->C);
    int oc = (int)(zt_slot_nx(buffers, &a->hdr, 0) / N), tb = a->tied;
    enum zt_dtype dt = (enum zt_dtype)a->hdr.dtype[2], db = (enum zt_dtype)a->hdr.dtype[3];
    size_t off = tb ? (size_t)a->o0 * a->C : (size_t)a->o0; /* the slab's first weight value */
    int ldb = tb ? a->C : a->OC;
    float beta = 0.0f;
    for (int n = 0; bias && n < N; n++) { /* seed each row with its bias columns */
        zt_dtype_to_f32(db, slab + (size_t)n * oc,
                        (const char *)bias + (size_t)a->o0 * zt_dtype_size(db), (size_t)oc);
        beta = 1.0f;
    }
    if (zt_dtype_is16(dt) &&
        zt_kern_sgemm_w16(tb, N, oc, a->C, inp, a->C, (const uint16_t *)w + off,
                          dt == ZT_DTYPE_F16, ldb, beta, slab, oc) == 0)
        return;
    zt_kern_sgemm(0, tb, N, oc, a->C, 1.0f, inp, a->C, weight_f32(buffers, a) + off, ldb, beta,
                  slab, oc);
}

void concat_cols_cpu(void *buffers[], void *cl_arg) {
    const struct zt_cols_args *a = cl_arg;
    float *out = zt_slot_ptr(buffers, &a->hdr, 0);
    int N = (int)(zt_slot_nx(buffers, &a->hdr, 0) / a->OC);
    int64_t at = 0;
    for (int i = 0; i < a->nslab; i++) {
        const float *s = zt_slot_buf_ptr(buffers, &a->hdr, 1, i);
        int64_t oc = zt_slot_buf_nx(buffers, &a->hdr, 1, i) / N;
        for (int n = 0; n < N; n++)
            memcpy(out + (size_t)n * a->OC + at, s + (size_t)n * oc, (size_t)oc * sizeof *s);
        at += oc;
    }
}

enum zt_status zt_task_matmul_cols(const struct zt_task_opts *o, zt_tensor_t slab,
                                   zt_tensor_t inp, int blk, zt_tensor_t w, zt_tensor_t bias,
                                   int tied, int64_t o0) {
    const char *fn = "zt_task_matmul_cols";
    ZT_CHECK(zt_check_blk(fn, inp, blk));
    int64_t C = zt_tensor_cols(inp), OC = tied ? zt_tensor_rows(w) : zt_tensor_cols(w);
    int64_t n = zt_tensor_blk_rows(inp, blk), oc = zt_tensor_cols(slab);
    if ((tied ? zt_tensor_cols(w) : zt_tensor_rows(w)) != C || zt_tensor_rows(slab) != n ||
        o0 < 0 || o0 + oc > OC || zt_tensor_dtype(slab) != ZT_DTYPE_F32 ||
        zt_tensor_dtype(inp) != ZT_DTYPE_F32 || zt_tensor_nblk(slab) != 1 || (tied && bias))
        return zt_error_set(ZT_ERR_INVALID, "%s: %s [%lld, %lld] (columns %lld..) of %s x %s "
                            "do not agree", fn, zt_tensor_name(slab), (long long)n,
                            (long long)oc, (long long)o0, zt_tensor_name(inp),
                            zt_tensor_name(w));
    ZT_ARGS_NEW(struct zt_cols_args, a);
    *a = (struct zt_cols_args){.C = (int)C, .OC = (int)OC, .tied = tied, .o0 = o0};
    a->hdr.native16 = 1; /* the body reads 16-bit weights as stored, or widens them itself */
    struct zt_builder tb;
    zt_builder_init(&tb, &a->hdr, ZT_KIND_matmul_cols, o, blk);
    zt_builder_add(&tb, slab, -1, STARPU_W);
    zt_builder_add(&tb, inp, blk, STARPU_R);
    zt_builder_add(&tb, w, -1, STARPU_R);
    zt_builder_add(&tb, bias, -1, STARPU_R);
    return zt_builder_submit(&tb, a, sizeof *a, o ? o->priority : 0);
}

enum zt_status zt_task_concat_cols(const struct zt_task_opts *o, zt_tensor_t out, int blk,
                                   const zt_tensor_t *slabs, int n) {
    ZT_CHECK(zt_check_blk("zt_task_concat_cols", out, blk));
    int64_t cols = 0, rows = zt_tensor_blk_rows(out, blk);
    struct zt_block_ref refs[16];
    for (int i = 0; i < n && i < 16; i++) {
        cols += zt_tensor_cols(slabs[i]);
        refs[i] = (struct zt_block_ref){.t = slabs[i], .blk = 0};
        if (zt_tensor_rows(slabs[i]) != rows || zt_tensor_nblk(slabs[i]) != 1) cols = -1;
    }
    if (n < 1 || n > 16 || cols != zt_tensor_cols(out) || zt_tensor_dtype(out) != ZT_DTYPE_F32)
        return zt_error_set(ZT_ERR_INVALID, "zt_task_concat_cols: %d slabs do not make the "
                            "%lld columns of %s block %d", n, (long long)zt_tensor_cols(out),
                            zt_tensor_name(out), blk);
    ZT_ARGS_NEW(struct zt_cols_args, a);
    *a = (struct zt_cols_args){.OC = (int)cols, .nslab = n};
    struct zt_builder tb;
    zt_builder_init(&tb, &a->hdr, ZT_KIND_concat_cols, o, blk);
    zt_builder_add(&tb, out, blk, STARPU_W);
    zt_builder_add_list(&tb, refs, n, STARPU_R);
    return zt_builder_submit(&tb, a, sizeof *a, o ? o->priority : 0);
}
