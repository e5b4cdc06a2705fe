/*
 * tasks/matmul_cols.c: decode products split by output columns: with a few rows, one task per
 * matmul would read the whole weight on one worker while the others wait; here each worker's
 * task computes a range of output columns into its own slab tensor (reading its part of the
 * weight), and a concat task lays the slabs side by side in the output. So that a decode
 * step's serial chain stays short, a part may layer-norm its input rows first, put its slab
 * through GELU, or read the slabs of the product before as its input (added to the residual
 * stream, the sum kept by one part, then layer-normed), and the concat may add the residual:
 * each with the bits of the task it replaces (the same kernels, row by row or element by
 * element).
 *
 * Layer: tasks/ (an op file), over kernels/cpu/gemm.c. A column range of a product has the bits
 * of the same columns of the whole product (each element's sum depends on K only), so the split
 * changes no bit. A bf16 weight on a bf16 engine takes the bf16 model's products (the rows
 * rounded to bf16, as matmul.c's forward does); other 16-bit weights are read as stored on the
 * few-rows path, else the slab's columns are widened here.
 */
#include <stdlib.h>      /* calloc */
#include <string.h>      /* memcpy */
#include "zt_kernels.h"  /* zt_kern_sgemm(_w16), layernorm, gelu and residual forward */
#include "tasks_impl.h"  /* builder, slots */

struct zt_cols_args {
    struct zt_task_hdr hdr;
    int C, OC;        /* weight [C, OC] (HF Conv1D layout) */
    int64_t o0;       /* first output column of the slab */
    int n;            /* rows */
    int nslab;        /* matmul: input slabs (0: one input block); concat: slabs */
    int gelu;         /* matmul: GELU on the slab */
    int ln;           /* matmul: the input block layer-normed first */
    int base;         /* out = base + the slabs (concat), or the input (matmul, from slabs) */
    int keep;         /* matmul: base + the slabs also into the keep tensor */
    int bf16w;        /* matmul: a bf16 weight on the bf16 engine (the bf16 model's products) */
    int tiles;        /* matmul: bf16w with the weight packed in the engine's tiles */
    int panel;        /* matmul: the weight in column panels, the slab's columns one of them */
};

/* the n rows of the `count` slabs of slot s side by side into out (rows ld floats apart) */
static void side_by_side(float *out, int64_t ld, int n, void *buffers[],
                         const struct zt_task_hdr *h, int s, int count) {
    int64_t at = 0;
    for (int i = 0; i < count; i++) {
        const float *p = zt_slot_buf_ptr(buffers, h, s, i);
        int64_t w = zt_slot_buf_nx(buffers, h, s, i) / n;
        for (int r = 0; r < n; r++)
            memcpy(out + (size_t)r * ld + at, p + (size_t)r * w, (size_t)w * sizeof *p);
        at += w;
    }
}

/* the slab's first weight value and the elements between the weight's rows there: its panel
 * (ld oc), or its columns of the row-major weight (ld OC) */
static const char *weight_part(void *buffers[], const struct zt_cols_args *a, int oc, int *ld) {
    const char *w = zt_slot_ptr(buffers, &a->hdr, 2);
    const size_t es = zt_dtype_size((enum zt_dtype)a->hdr.dtype[2]);
    *ld = a->panel ? oc : a->OC;
    return w + (a->panel ? (size_t)a->C * (size_t)a->o0 : (size_t)a->o0) * es;
}

/* rows (n x C) layer-normed into out by the slots' weights (4, 5); the statistics and the
 * widened weights after out's n x C floats */
static void layer_norm_rows(float *out, const float *rows, void *buffers[],
                            const struct zt_cols_args *a) {
    size_t nc = (size_t)a->n * (size_t)a->C;
    float *mean = out + nc, *rstd = mean + a->n, *w = rstd + a->n, *b = w + a->C;
    zt_dtype_to_f32((enum zt_dtype)a->hdr.dtype[4], w, zt_slot_ptr(buffers, &a->hdr, 4),
                    (size_t)a->C);
    zt_dtype_to_f32((enum zt_dtype)a->hdr.dtype[5], b, zt_slot_ptr(buffers, &a->hdr, 5),
                    (size_t)a->C);
    zt_kern_layernorm_forward(out, mean, rstd, rows, w, b, a->n, a->C);
}

/* the input rows: the block as it is or layer-normed; or the slabs side by side (in scratch),
 * added to the base (and kept) and layer-normed when the part asks for it */
static const float *input_rows(void *buffers[], const struct zt_cols_args *a) {
    size_t nc = (size_t)a->n * (size_t)a->C;
    const float *rows = zt_slot_ptr(buffers, &a->hdr, 1);
    if (a->nslab == 0 && !a->ln) return rows;
    float *in = zt_worker_scratch(ZT_SCRATCH_BODY, 2 * nc + 2 * ((size_t)a->n + (size_t)a->C));
    if (a->nslab) {
        side_by_side(in, a->C, a->n, buffers, &a->hdr, 1, a->nslab);
        if (a->base) zt_kern_residual_forward(in, zt_slot_ptr(buffers, &a->hdr, 6), in, nc);
        if (a->keep) memcpy(zt_slot_ptr(buffers, &a->hdr, 7), in, nc * sizeof *in);
        if (!a->ln) return in;
        rows = in;
    }
    layer_norm_rows(in + nc, rows, buffers, a);
    return in + nc;
}

void matmul_cols_cpu(void *buffers[], void *cl_arg) {
    const struct zt_cols_args *a = cl_arg;
    float *slab = zt_slot_ptr(buffers, &a->hdr, 0);
    const float *inp = input_rows(buffers, a);
    const void *w = zt_slot_ptr(buffers, &a->hdr, 2), *bias = zt_slot_ptr(buffers, &a->hdr, 3);
    int N = a->n, oc = (int)(zt_slot_nx(buffers, &a->hdr, 0) / N);
    enum zt_dtype dt = (enum zt_dtype)a->hdr.dtype[2], db = (enum zt_dtype)a->hdr.dtype[3];
    int ldw;
    const void *part = weight_part(buffers, a, oc, &ldw);
    float beta = 0.0f;
    for (int n = 0; bias && n < N; n++) { /* seed each row with its bias columns */
        zt_dtype_to_f32(db, slab + (size_t)n * oc,
                        (const char *)bias + (size_t)a->o0 * zt_dtype_size(db), (size_t)oc);
        beta = 1.0f;
    }
    if (a->bf16w)
        zt_bf16_products_run(slab, oc, inp, w, a->tiles, a->OC, a->o0, beta != 0.0f, N, a->C, oc);
    else zt_part_product(slab, oc, inp, N, a->C, part, dt, ldw, oc, beta);
    if (a->gelu) zt_kern_gelu_forward(slab, slab, (size_t)N * oc);
}

void concat_cols_cpu(void *buffers[], void *cl_arg) {
    const struct zt_cols_args *a = cl_arg;
    float *out = zt_slot_ptr(buffers, &a->hdr, 0);
    int N = (int)(zt_slot_nx(buffers, &a->hdr, 0) / a->OC);
    side_by_side(out, a->OC, N, buffers, &a->hdr, 1, a->nslab);
    if (a->base)
        zt_kern_residual_forward(out, zt_slot_ptr(buffers, &a->hdr, 2), out, (size_t)N * a->OC);
}

/* whether t is one f32 block of rows x cols */
static int f32_block(zt_tensor_t t, int64_t rows, int64_t cols) {
    return zt_tensor_rows(t) == rows && zt_tensor_cols(t) == cols && zt_tensor_nblk(t) == 1 &&
           zt_tensor_dtype(t) == ZT_DTYPE_F32;
}

/* the slabs' columns side by side and their rows (-1 columns: 0 or more than 16 slabs, or
 * slabs that are not one f32 block each of the same rows) */
static int64_t slabs_shape(const struct zt_cols_input *in, int64_t *rows,
                           struct zt_block_ref *refs) {
    int64_t cols = 0;
    *rows = in->nin > 0 ? zt_tensor_rows(in->slabs[0]) : 0;
    for (int i = 0; i < in->nin && i < 16; i++) {
        cols += zt_tensor_cols(in->slabs[i]);
        refs[i] = (struct zt_block_ref){.t = in->slabs[i], .blk = 0};
        if (!f32_block(in->slabs[i], *rows, zt_tensor_cols(in->slabs[i]))) return -1;
    }
    return in->nin >= 1 && in->nin <= 16 ? cols : -1;
}

/* the input's columns and rows (-1 columns: slabs that do not agree, layernorm weights that do
 * not match the input, a base or a keep that does not match the slabs or comes without them) */
static int64_t input_shape(const struct zt_cols_input *in, int64_t *rows,
                           struct zt_block_ref *refs) {
    int64_t C = in->inp ? zt_tensor_cols(in->inp) : slabs_shape(in, rows, refs);
    if (in->inp) *rows = zt_tensor_blk_rows(in->inp, in->blk);
    int bad_ln = in->ln_w && (!in->ln_b || zt_tensor_numel(in->ln_w) != C ||
                              zt_tensor_numel(in->ln_b) != C);
    int bad_base = in->base && (in->inp || !f32_block(in->base, *rows, C));
    int bad_keep = in->keep && (!in->base || in->keep == in->base ||
                                !f32_block(in->keep, *rows, C));
    return bad_ln || bad_base || bad_keep ? -1 : C;
}

enum zt_status zt_task_matmul_cols(const struct zt_task_opts *o, zt_tensor_t slab,
                                   const struct zt_cols_input *in, zt_tensor_t w,
                                   zt_tensor_t bias, int64_t o0, int gelu) {
    const char *fn = "zt_task_matmul_cols";
    if (!in || (in->ln_b && !in->ln_w))
        return zt_error_set(ZT_ERR_INVALID, "%s: %s", fn, in ? "ln_b without ln_w"
                                                             : "no input (zt_cols_input NULL)");
    if (in->inp) ZT_CHECK(zt_check_blk(fn, in->inp, in->blk));
    struct zt_block_ref refs[16];
    int64_t n, C = input_shape(in, &n, refs), oc = zt_tensor_cols(slab);
    int64_t OC = zt_tensor_cols(w);
    if (zt_tensor_bf16_tiles(w) && (!zt_bf16_products(w) || o0 % 32 != 0))
        return zt_error_set(ZT_ERR_INVALID, "%s: %s is packed for the bf16 engine: its column "
                            "parts must start at multiples of 32 (column %lld)", fn,
                            zt_tensor_name(w), (long long)o0);
    const int64_t panel = zt_tensor_col_panels(w);
    if (panel && (o0 % panel != 0 || oc != (OC - o0 < panel ? OC - o0 : panel) ||
                  zt_bf16_products(w)))
        return zt_error_set(ZT_ERR_INVALID, "%s: %s is stored in column panels of %lld: a part "
                            "must be one whole panel (columns %lld.., %lld of them)", fn,
                            zt_tensor_name(w), (long long)panel, (long long)o0, (long long)oc);
    if (C < 1 || zt_tensor_rows(w) != C ||
        zt_tensor_rows(slab) != n || o0 < 0 || o0 + oc > OC ||
        zt_tensor_dtype(slab) != ZT_DTYPE_F32 ||
        (in->inp && zt_tensor_dtype(in->inp) != ZT_DTYPE_F32) || zt_tensor_nblk(slab) != 1)
        return zt_error_set(ZT_ERR_INVALID, "%s: %s [%lld, %lld] (columns %lld..) of %s x %s "
                            "do not agree", fn, zt_tensor_name(slab), (long long)n,
                            (long long)oc, (long long)o0,
                            in->inp ? zt_tensor_name(in->inp) : "the input slabs",
                            zt_tensor_name(w));
    ZT_ARGS_NEW(struct zt_cols_args, a);
    *a = (struct zt_cols_args){.C = (int)C, .OC = (int)OC, .o0 = o0, .n = (int)n,
                               .nslab = in->inp ? 0 : in->nin, .gelu = gelu,
                               .ln = in->ln_w != NULL, .base = in->base != NULL,
                               .keep = in->keep != NULL};
    a->hdr.native16 = 1; /* the body reads 16-bit weights as stored, or widens them itself */
    a->bf16w = zt_bf16_products(w);
    a->tiles = zt_tensor_bf16_tiles(w);
    a->panel = panel != 0;
    struct zt_builder tb;
    zt_builder_init(&tb, &a->hdr, ZT_KIND_matmul_cols, o, in->inp ? in->blk : 0);
    zt_builder_add(&tb, slab, -1, STARPU_W);
    if (in->inp) zt_builder_add(&tb, in->inp, in->blk, STARPU_R);
    else zt_builder_add_list(&tb, refs, in->nin, STARPU_R);
    zt_builder_add(&tb, w, -1, STARPU_R);
    zt_builder_add(&tb, bias, -1, STARPU_R);
    zt_builder_add(&tb, in->ln_w, -1, STARPU_R);
    zt_builder_add(&tb, in->ln_b, -1, STARPU_R);
    zt_builder_add(&tb, in->base, 0, STARPU_R);
    zt_builder_add(&tb, in->keep, 0, STARPU_W);
    return zt_builder_submit(&tb, a, sizeof *a, o ? o->priority : 0);
}

enum zt_status zt_task_concat_cols(const struct zt_task_opts *o, zt_tensor_t out, int blk,
                                   const zt_tensor_t *slabs, int n, zt_tensor_t base) {
    ZT_CHECK(zt_check_blk("zt_task_concat_cols", out, blk));
    int64_t rows = zt_tensor_blk_rows(out, blk), got;
    struct zt_block_ref refs[16];
    struct zt_cols_input in = {.slabs = slabs, .nin = n};
    int64_t cols = input_shape(&in, &got, refs);
    int bad_base = base && (base == out || zt_tensor_cols(base) != cols ||
                            zt_tensor_nblk(base) !=
                            zt_tensor_nblk(out) || zt_tensor_dtype(base) != ZT_DTYPE_F32 ||
                            zt_tensor_blk_rows(base, blk) != rows);
    if (cols != zt_tensor_cols(out) || got != rows || bad_base ||
        zt_tensor_dtype(out) != ZT_DTYPE_F32)
        return zt_error_set(ZT_ERR_INVALID, "zt_task_concat_cols: %d slabs%s do not make the "
                            "%lld columns of %s block %d", n,
                            base == out ? " (and a base that is the output itself)"
                            : base      ? " (and the base)"
                                        : "",
                            (long long)zt_tensor_cols(out), zt_tensor_name(out), blk);
    ZT_ARGS_NEW(struct zt_cols_args, a);
    *a = (struct zt_cols_args){.OC = (int)cols, .nslab = n, .base = base != NULL};
    struct zt_builder tb;
    zt_builder_init(&tb, &a->hdr, ZT_KIND_concat_cols, o, blk);
    zt_builder_add(&tb, out, blk, STARPU_W);
    zt_builder_add_list(&tb, refs, n, STARPU_R);
    zt_builder_add(&tb, base, blk, STARPU_R);
    return zt_builder_submit(&tb, a, sizeof *a, o ? o->priority : 0);
}
