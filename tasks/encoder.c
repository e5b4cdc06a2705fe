/*
 * tasks/encoder.c: token + position embedding, forward (per row block) and backward (one task:
 * the scatter-add into dwte/dwpe runs over every row in a fixed order, so it is deterministic).
 *
 * Layer: tasks/ (an op file), over kernels/cpu/encoder.c. With 16-bit tables the bodies touch
 * only the rows the tokens name (the dispatcher would widen the whole vocabulary per task).
 */
#include <stdlib.h>      /* calloc */
#include <string.h>      /* memcpy */
#include "zt_kernels.h"  /* zt_kern_encoder_* */
#include "tasks_impl.h"  /* builder, slots */

struct zt_encoder_args {
    struct zt_task_hdr hdr;
    int T, C;
};

/* forward with 16-bit slots (hdr.native16): only the rows the tokens name are widened, not the
 * whole tables; each output row is the fp32 sum the kernel computes, rounded once */
static void forward16(void *buffers[], const struct zt_encoder_args *a) {
    const struct zt_task_hdr *h = &a->hdr;
    const int32_t *tok = zt_slot_ptr(buffers, h, 1);
    int N = (int)zt_slot_nx(buffers, h, 1), C = a->C;
    float *buf = zt_worker_scratch(ZT_SCRATCH_BODY, 3 * (size_t)C);
    for (int n = 0; n < N; n++) {
        const float *we = zt_slot_f32(buffers, h, 2, (size_t)tok[n] * C, C, buf);
        const float *pe = h->count[3] ? zt_slot_f32(buffers, h, 3, (size_t)(n % a->T) * C, C,
                                                    buf + C)
                                      : NULL;
        for (int c = 0; c < C; c++) buf[2 * C + c] = pe ? we[c] + pe[c] : we[c];
        zt_slot_store_f32(buffers, h, 0, (size_t)n * C, C, buf + 2 * C);
    }
}

/* backward with 16-bit slots: dwpe is small and widened whole; of dwte only the rows the tokens
 * name, each widened when first met, summed in row order and rounded once at the end (the bits
 * of the whole table widened, summed and narrowed: the other rows round-trip unchanged, NaN
 * encodings aside, which the whole-table path would have made canonical). The body uses the
 * dispatcher's widening area, which a native16 task leaves free. */
static void backward16(void *buffers[], const struct zt_encoder_args *a) {
    const struct zt_task_hdr *h = &a->hdr;
    const int32_t *tok = zt_slot_ptr(buffers, h, 3);
    int N = (int)zt_slot_nx(buffers, h, 3), C = a->C, T = a->T;
    int64_t V = zt_slot_nx(buffers, h, 0) / C, npe = h->count[1] ? (int64_t)T * C : 0;
    float *area = zt_worker_scratch(ZT_SCRATCH_WIDENING,
                                    (size_t)V + (size_t)N * (C + 1) + (size_t)npe + C);
    int32_t *slot_of = (int32_t *)area, *row_of = slot_of + V;
    float *rows = area + V + N, *dpe = rows + (size_t)N * C, *d = dpe + npe;
    for (int64_t v = 0; v < V; v++) slot_of[v] = -1;
    if (npe) zt_dtype_to_f32((enum zt_dtype)h->dtype[1], dpe, zt_slot_ptr(buffers, h, 1),
                             (size_t)npe);
    int used = 0;
    for (int n = 0; n < N; n++) {
        const float *dn = zt_slot_f32(buffers, h, 2, (size_t)n * C, C, d);
        if (slot_of[tok[n]] < 0) {
            row_of[used] = tok[n];
            float *r = rows + (size_t)used * C;
            const float *x = zt_slot_f32(buffers, h, 0, (size_t)tok[n] * C, C, r);
            if (x != r) memcpy(r, x, C * sizeof *r);
            slot_of[tok[n]] = used++;
        }
        float *dwe = rows + (size_t)slot_of[tok[n]] * C;
        for (int c = 0; c < C; c++) dwe[c] += dn[c];
        if (!npe) continue;
        float *dp = dpe + (size_t)(n % T) * C;
        for (int c = 0; c < C; c++) dp[c] += dn[c];
    }
    for (int u = 0; u < used; u++)
        zt_slot_store_f32(buffers, h, 0, (size_t)row_of[u] * C, C, rows + (size_t)u * C);
    if (npe) zt_slot_store_f32(buffers, h, 1, 0, (size_t)npe, dpe);
}

void encoder_forward_cpu(void *buffers[], void *cl_arg) {
    const struct zt_encoder_args *a = cl_arg;
    if (a->hdr.native16) {
        forward16(buffers, a);
        return;
    }
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
    if (a->hdr.native16) {
        backward16(buffers, a);
        return;
    }
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

/* a 16-bit tensor among them (a missing one is none) */
static int any16(zt_tensor_t x, zt_tensor_t y, zt_tensor_t z) {
    return (x && zt_dtype_is16(zt_tensor_dtype(x))) || (y && zt_dtype_is16(zt_tensor_dtype(y))) ||
           (z && zt_dtype_is16(zt_tensor_dtype(z)));
}

/* the position table (when there is one) holds T rows of C */
static enum zt_status check_positions(const char *fn, zt_tensor_t pe, zt_tensor_t tokens,
                                      int64_t C) {
    if (pe && zt_tensor_numel(pe) < zt_tensor_cols(tokens) * C)
        return zt_error_set(ZT_ERR_INVALID, "%s: %s has %lld values, fewer than %lld positions "
                            "of %lld", fn, zt_tensor_name(pe), (long long)zt_tensor_numel(pe),
                            (long long)zt_tensor_cols(tokens), (long long)C);
    return ZT_OK;
}

#ifdef ZT_USE_CUDA
#include "zt_kernels_cuda.h" /* zt_cuda_encoder_* */

/* with a position table only (the plain lookup is cpu_only); tokens, like the tables, are a
 * device array */
void encoder_forward_cuda(void *buffers[], void *cl_arg) {
    const struct zt_encoder_args *a = cl_arg;
    const struct zt_task_hdr *h = &a->hdr;
    ZT_CUDA_OK("encoder_forward",
               zt_cuda_encoder_forward(zt_slot_ptr(buffers, h, 0), zt_slot_ptr(buffers, h, 1),
                                       zt_slot_ptr(buffers, h, 2), zt_slot_ptr(buffers, h, 3),
                                       (int)zt_slot_nx(buffers, h, 1), a->T, 0, a->C,
                                       zt_cuda_stream()));
}

void encoder_backward_cuda(void *buffers[], void *cl_arg) {
    const struct zt_encoder_args *a = cl_arg;
    const struct zt_task_hdr *h = &a->hdr;
    ZT_CUDA_OK("encoder_backward",
               zt_cuda_encoder_backward(zt_slot_ptr(buffers, h, 0), zt_slot_ptr(buffers, h, 1),
                                        zt_slot_ptr(buffers, h, 2), zt_slot_ptr(buffers, h, 3),
                                        (int)zt_slot_nx(buffers, h, 3), a->T, 0, a->C,
                                        zt_cuda_stream()));
}
#endif

enum zt_status zt_task_encoder_forward(const struct zt_task_opts *o, zt_tensor_t out, int blk,
                                       zt_tensor_t tokens, zt_tensor_t wte, zt_tensor_t wpe) {
    ZT_CHECK(zt_check_blk("zt_task_encoder_forward", out, blk));
    ZT_CHECK(zt_check_same_blocks("zt_task_encoder_forward", out, tokens));
    ZT_CHECK(check_positions("zt_task_encoder_forward", wpe, tokens, zt_tensor_cols(out)));
    ZT_ARGS_NEW(struct zt_encoder_args, a);
    a->T = (int)zt_tensor_cols(tokens);
    a->C = (int)zt_tensor_cols(out);
    struct zt_builder tb;
    zt_builder_init(&tb, &a->hdr, ZT_KIND_encoder_forward, o, blk);
    a->hdr.native16 = (unsigned char)any16(out, wte, wpe);
    a->hdr.cpu_only |= wpe == NULL; /* the plain lookup has no device kernel */
    zt_builder_add(&tb, out, blk, STARPU_W);
    zt_builder_add(&tb, tokens, blk, STARPU_R);
    zt_builder_add(&tb, wte, -1, STARPU_R);
    zt_builder_add(&tb, wpe, -1, STARPU_R);
    return zt_builder_submit(&tb, a, sizeof *a, o ? o->priority : 0);
}

enum zt_status zt_task_encoder_backward(const struct zt_task_opts *o, zt_tensor_t dwte,
                                        zt_tensor_t dwpe, zt_tensor_t dout, zt_tensor_t tokens) {
    ZT_CHECK(zt_check_same_blocks("zt_task_encoder_backward", dout, tokens));
    ZT_CHECK(check_positions("zt_task_encoder_backward", dwpe, tokens, zt_tensor_cols(dout)));
    ZT_ARGS_NEW(struct zt_encoder_args, a);
    a->T = (int)zt_tensor_cols(tokens);
    a->C = (int)zt_tensor_cols(dout);
    struct zt_builder tb;
    zt_builder_init(&tb, &a->hdr, ZT_KIND_encoder_backward, o, -1);
    a->hdr.native16 = (unsigned char)any16(dwte, dwpe, dout);
    a->hdr.cpu_only |= dwpe == NULL;
    zt_builder_add(&tb, dwte, -1, STARPU_RW);
    zt_builder_add(&tb, dwpe, -1, STARPU_RW);
    zt_builder_add(&tb, dout, -1, STARPU_R);
    zt_builder_add(&tb, tokens, -1, STARPU_R);
    return zt_builder_submit(&tb, a, sizeof *a, o ? o->priority : 0);
}
