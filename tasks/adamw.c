/*
 * tasks/adamw.c: the optimizer tasks: per-group gradient sum of squares, the global-norm clip
 * coefficient, and AdamW on a group of blocks of the flat parameter buffer.
 *
 * Layer: tasks/. A group is a run of consecutive parameter blocks of about ZT_OPT_GROUP_ELEMS
 * elements; its m and v are one block each of the flat moment tensors. The norm is reduced over
 * groups in group order, so it is bit-identical for any worker count and scheduler.
 */
#include <math.h>        /* sqrt, pow */
#include <stdint.h>      /* uint16_t */
#include <stdlib.h>      /* malloc */
#include <string.h>      /* memset */
#include "zt_kernels.h"  /* zt_kern_adamw, zt_kern_sumsq */
#include "tasks_impl.h"  /* builder, slots */

struct zt_opt_args {
    struct zt_task_hdr hdr;
    int n;                 /* blocks in the group */
    float max_norm;
    float loss_scale;      /* grad_clip: the gradients are this multiple of the true ones */
    int outs;              /* adamw: slot 7 holds a 16-bit copy of each updated block */
    int wout;              /* adamw: slot 8 holds a 16-bit copy of w */
    struct zt_adamw_hparams hp;
    int64_t lo, hi;        /* adamw: the group elements m/v/w hold (window; blocks are clipped) */
    int64_t off[];         /* [n] element offset of block i inside the group's m/v block,
                            * then (adamw) [n] index of its values in slot 0, -1: in w (slot 5) */
};

/* sum of squares of a 16-bit block, widened a chunk at a time (hdr.native16) */
static double sumsq16(enum zt_dtype d, const uint16_t *x, size_t n) {
    float buf[ZT_KERN_SUMSQ_CHUNK];
    struct zt_sumsq acc;
    zt_kern_sumsq_begin(&acc);
    for (size_t i = 0; i < n; i += ZT_KERN_SUMSQ_CHUNK) {
        size_t m = n - i < ZT_KERN_SUMSQ_CHUNK ? n - i : ZT_KERN_SUMSQ_CHUNK;
        zt_dtype_to_f32(d, buf, x + i, m);
        zt_kern_sumsq_add(&acc, buf, m);
    }
    return zt_kern_sumsq_end(&acc);
}

void grad_sumsq_cpu(void *buffers[], void *cl_arg) {
    const struct zt_opt_args *a = cl_arg;
    double *partial = zt_slot_ptr(buffers, &a->hdr, 0);
    double s = 0;
    for (int i = 0; i < a->hdr.count[1]; i++) {
        const void *x = zt_slot_buf_ptr(buffers, &a->hdr, 1, i);
        size_t n = (size_t)zt_slot_buf_nx(buffers, &a->hdr, 1, i);
        s += zt_dtype_is16(a->hdr.dtype[1]) ? sumsq16((enum zt_dtype)a->hdr.dtype[1], x, n)
                                            : zt_kern_sumsq(x, n);
    }
    partial[0] = s;
}

void grad_clip_cpu(void *buffers[], void *cl_arg) {
    const struct zt_opt_args *a = cl_arg;
    float *clip = zt_slot_ptr(buffers, &a->hdr, 0);
    const double *partial = zt_slot_ptr(buffers, &a->hdr, 1);
    int64_t n = zt_slot_nx(buffers, &a->hdr, 1);
    double s = 0;
    for (int64_t g = 0; g < n; g++) s += partial[g];
    /* the norm of the true gradients: the scaled ones' over the loss scale (DeepSpeed) */
    double norm = sqrt(s) / a->loss_scale;
    float coef = 1.0f;
    if (a->max_norm > 0) { /* torch.nn.utils.clip_grad_norm_: clamp(max_norm/(norm+1e-6), max=1) */
        float c = (float)(a->max_norm / ((float)norm + 1e-6f));
        coef = c < 1.0f ? c : 1.0f;
    }
    clip[0] = coef / a->loss_scale; /* unscale and clip in one multiplication */
    clip[1] = (float)norm;
    clip[2] = isfinite(s) ? 0.0f : 1.0f; /* an inf or NaN in some gradient (fp16 overflow) */
}


/* One block of an AdamW task: its values p, moments m and v (all fp32), its gradients g (of type
 * gdt) and, when there is one, its working copy cp (of type cdt) to round the new values into. */
struct adamw_block {
    float *p, *m, *v;
    const void *g;
    void *cp;
    int gdt, cdt;
};

#define ADAMW_CHUNK 2048 /* 16-bit gradients widened this many at a time (8 KiB of L1) */

/* What every block of one AdamW task shares: the hyperparameters, the bias corrections and
 * the clip tensor (NULL: none), as the CPU or the GPU sees it. */
struct adamw_step {
    const struct zt_adamw_hparams *hp;
    float bc1, bc2;
    const float *clip;
};

/* elements [s, t) of the block, a chunk at a time: the gradients widened into L1, the update
 * (elementwise: the bits of one call on the whole range), the new values rounded into the copy */
static void adamw_range(const struct adamw_block *b, int64_t s, int64_t t,
                        const struct adamw_step *st) {
    const struct zt_adamw_hparams *hp = st->hp;
    const float coef = st->clip ? st->clip[0] : 1.0f; /* no clip tensor: no clipping */
    float g32[ADAMW_CHUNK];
    for (int64_t i = s; i < t; i += ADAMW_CHUNK) {
        size_t n = (size_t)(t - i < ADAMW_CHUNK ? t - i : ADAMW_CHUNK);
        const float *g = (const float *)b->g + i;
        if (zt_dtype_is16(b->gdt)) {
            zt_dtype_to_f32(b->gdt, g32, (const uint16_t *)b->g + i, n);
            g = g32;
        }
        zt_kern_adamw(b->p + i, b->m + i, b->v + i, g, n, hp->lr, hp->beta1, hp->beta2, hp->eps,
                      hp->weight_decay, st->bc1, st->bc2, coef, hp->decoupled);
        if (b->cp)
            zt_dtype_from_f32(b->cdt, (char *)b->cp + (size_t)i * zt_dtype_size(b->cdt),
                              b->p + i, n);
    }
}

typedef void (*adamw_range_fn)(const struct adamw_block *b, int64_t s, int64_t t,
                               const struct adamw_step *st);

/* Each block's part of the task's window through range. wide: the 16-bit slots reach the body
 * widened to fp32 (a CUDA worker's gathering), so every slot is read as fp32. */
static void adamw_blocks(void *buffers[], const struct zt_opt_args *a, int wide,
                         adamw_range_fn range) {
    const struct zt_adamw_hparams *hp = &a->hp;
    struct adamw_step st = {.hp = hp, .clip = zt_slot_ptr(buffers, &a->hdr, 4),
                            .bc1 = 1.0f - powf(hp->beta1, (float)hp->t),
                            .bc2 = 1.0f - powf(hp->beta2, (float)hp->t)};
    float *m = zt_slot_ptr(buffers, &a->hdr, 2);
    float *v = zt_slot_ptr(buffers, &a->hdr, 3);
    float *w = zt_slot_ptr(buffers, &a->hdr, 5);
    const int gdt = wide ? ZT_DTYPE_F32 : a->hdr.dtype[1];
    const int odt = wide ? ZT_DTYPE_F32 : a->hdr.dtype[7];
    const int wdt = wide ? ZT_DTYPE_F32 : a->hdr.dtype[8];
    for (int i = 0; i < a->n; i++) {
        int64_t pi = a->off[a->n + i], b0 = a->off[i];
        int64_t bn = zt_slot_buf_nx(buffers, &a->hdr, 1, i);
        /* this block's part of the window, as an element range of the block */
        int64_t s = a->lo > b0 ? a->lo - b0 : 0;
        int64_t t = a->hi < b0 + bn ? a->hi - b0 : bn;
        if (t <= s) continue;
        struct adamw_block blk = {
            .p = pi >= 0 ? zt_slot_buf_ptr(buffers, &a->hdr, 0, (int)pi) : w + (b0 - a->lo),
            .m = m + (b0 - a->lo), .v = v + (b0 - a->lo),
            .g = zt_slot_buf_ptr(buffers, &a->hdr, 1, i), .gdt = gdt,
            /* the working copy, rounded: of a block in memory (outs), or of one whose values
             * are in w (wout, laid out like w) */
            .cp = pi >= 0 && a->outs ? zt_slot_buf_ptr(buffers, &a->hdr, 7, (int)pi)
                  : pi < 0 && a->wout ? (char *)zt_slot_ptr(buffers, &a->hdr, 8) +
                                           (size_t)(b0 - a->lo) * zt_dtype_size(wdt)
                                      : NULL,
            .cdt = pi >= 0 ? odt : wdt};
        range(&blk, s, t, &st);
    }
}

/* The AdamW task handles its 16-bit slots itself (hdr.native16): a task updates a window of its
 * blocks (a swap unit of a large block), so only that window's gradients are widened and only
 * its copies (outs, wout) rounded, where the dispatcher would convert the whole blocks; both a
 * chunk at a time, in L1. */
void adamw_cpu(void *buffers[], void *cl_arg) {
    const struct zt_opt_args *a = cl_arg;
    const float *clip = zt_slot_ptr(buffers, &a->hdr, 4);
    /* the step is skipped: values, moments and the 16-bit copies stay */
    if (clip && a->hp.skip_nonfinite && clip[2] != 0.0f) return;
    adamw_blocks(buffers, a, 0, adamw_range);
}

#ifdef ZT_USE_CUDA
#include "zt_kernels_cuda.h" /* zt_cuda_adamw, zt_cuda_sumsq */

/* on the device, every slot fp32 (gathered and widened): the clip tensor is read by the kernel
 * (its scale, and whether to skip), and the copy gets the new values, rounded when scattered
 * back */
static void adamw_range_cuda(const struct adamw_block *b, int64_t s, int64_t t,
                             const struct adamw_step *st) {
    const struct zt_adamw_hparams *hp = st->hp;
    ZT_CUDA_OK("adamw", zt_cuda_adamw(b->p + s, b->m + s, b->v + s, (const float *)b->g + s,
                                      b->cp ? (float *)b->cp + s : NULL, (size_t)(t - s), hp->lr,
                                      hp->beta1, hp->beta2, hp->eps, hp->weight_decay, st->bc1,
                                      st->bc2, 1.0f, st->clip, hp->skip_nonfinite,
                                      hp->decoupled, zt_cuda_stream()));
}

void adamw_cuda(void *buffers[], void *cl_arg) {
    adamw_blocks(buffers, cl_arg, 1, adamw_range_cuda);
}

/* the gradients gathered into one fp32 array: one sum of squares in the device's own fixed
 * order (kernels/cuda/sumsq.cu), so a GPU run's norm is not the CPU's to the last bit */
void grad_sumsq_cuda(void *buffers[], void *cl_arg) {
    const struct zt_opt_args *a = cl_arg;
    double *scratch = zt_cuda_scratch(ZT_CUDA_BODY, zt_cuda_sumsq_scratch_doubles() *
                                                        sizeof(double));
    ZT_CUDA_OK("grad_sumsq", zt_cuda_sumsq(zt_slot_ptr(buffers, &a->hdr, 0), scratch,
                                           zt_slot_ptr(buffers, &a->hdr, 1),
                                           (size_t)zt_slot_nx(buffers, &a->hdr, 1),
                                           zt_cuda_stream()));
}
#endif

static struct zt_opt_args *args_new(int n) {
    struct zt_opt_args *a = calloc(1, sizeof *a + 2 * (size_t)n * sizeof(int64_t));
    if (a) a->n = n;
    return a;
}

enum zt_status zt_task_grad_sumsq(const struct zt_task_opts *o, zt_tensor_t partial, int g,
                                  const struct zt_block_ref *grads, int n) {
    ZT_CHECK(zt_check_blk("zt_task_grad_sumsq", partial, g));
    struct zt_opt_args *a = args_new(n);
    if (!a) return zt_error_set(ZT_ERR_NOMEM, "out of memory for task arguments");
    struct zt_builder tb;
    zt_builder_init(&tb, &a->hdr, ZT_KIND_grad_sumsq, o, g);
    a->hdr.native16 = 1; /* grad_sumsq_cpu widens 16-bit gradients a chunk at a time */
    zt_builder_add(&tb, partial, g, STARPU_W);
    zt_builder_add_list(&tb, grads, n, STARPU_R);
    return zt_builder_submit(&tb, a, sizeof *a + 2 * (size_t)n * sizeof(int64_t),
                             o ? o->priority : 0);
}

enum zt_status zt_task_grad_clip(const struct zt_task_opts *o, zt_tensor_t clip,
                                 zt_tensor_t partial, float max_norm, float loss_scale) {
    if (!clip || zt_tensor_numel(clip) < 3 || zt_tensor_dtype(clip) != ZT_DTYPE_F32)
        return zt_error_set(ZT_ERR_INVALID, "zt_task_grad_clip: clip tensor needs 3 floats");
    if (!(loss_scale > 0) || !isfinite(loss_scale))
        return zt_error_set(ZT_ERR_INVALID, "zt_task_grad_clip: loss scale %g", loss_scale);
    struct zt_opt_args *a = args_new(0);
    if (!a) return zt_error_set(ZT_ERR_NOMEM, "out of memory for task arguments");
    a->max_norm = max_norm;
    a->loss_scale = loss_scale;
    struct zt_builder tb;
    zt_builder_init(&tb, &a->hdr, ZT_KIND_grad_clip, o, -1);
    zt_builder_add(&tb, clip, -1, STARPU_W);
    zt_builder_add(&tb, partial, -1, STARPU_R);
    return zt_builder_submit(&tb, a, sizeof *a, o ? o->priority : 0);
}

enum zt_status zt_task_adamw(const struct zt_task_opts *o, const struct zt_block_ref *params,
                             const struct zt_block_ref *grads, int n, zt_tensor_t m,
                             zt_tensor_t v, int g, zt_tensor_t clip,
                             const struct zt_adamw_hparams *hp, const struct zt_block_ref *outs) {
    ZT_CHECK(zt_check_blk("zt_task_adamw", m, g));
    int64_t gblk = zt_tensor_blk_rows(m, g) * zt_tensor_cols(m);
    for (int i = 0; i < n; i++) {
        if (!params[i].t)
            return zt_error_set(ZT_ERR_INVALID, "zt_task_adamw: parameter block %d is NULL", i);
        if (grads[i].t && (params[i].off < 0 ||
                           params[i].off + zt_tensor_blk_rows(grads[i].t, grads[i].blk) *
                                               zt_tensor_cols(grads[i].t) > gblk))
            return zt_error_set(ZT_ERR_INVALID, "zt_task_adamw: block %d (offset %lld) is "
                                "outside the group's %lld moments", i,
                                (long long)params[i].off, (long long)gblk);
    }
    const struct zt_adamw_window win = {.params = params, .grads = grads, .n = n, .m = m,
                                        .v = v, .g = g, .lo = 0, .clip = clip, .hp = hp,
                                        .outs = outs};
    return zt_task_adamw_window(o, &win);
}

enum zt_status zt_task_adamw_window(const struct zt_task_opts *o,
                                    const struct zt_adamw_window *win) {
    const struct zt_block_ref *params = win->params, *grads = win->grads, *outs = win->outs;
    const int n = win->n, g = win->g;
    const int64_t lo = win->lo;
    zt_tensor_t w = win->w, m = win->m, v = win->v, clip = win->clip, pipe = win->pipe;
    zt_tensor_t wout = win->wout;
    const struct zt_adamw_hparams *hp = win->hp;
    ZT_CHECK(zt_check_blk("zt_task_adamw", m, g));
    if (wout && (!w || zt_tensor_numel(wout) < zt_tensor_blk_rows(w, g) * zt_tensor_cols(w)))
        return zt_error_set(ZT_ERR_INVALID, "zt_task_adamw: the copy of w needs w and its size");
    if (clip && (zt_tensor_numel(clip) < 3 || zt_tensor_dtype(clip) != ZT_DTYPE_F32))
        return zt_error_set(ZT_ERR_INVALID, "zt_task_adamw: clip tensor needs 3 floats");
    ZT_CHECK(zt_check_same_blocks("zt_task_adamw", m, v));
    if (w) ZT_CHECK(zt_check_same_blocks("zt_task_adamw", m, w));
    /* the optimizer's own state is fp32 (mixed precision: the master weights); gradients and
     * the copies may be 16-bit */
    int f32 = zt_tensor_dtype(m) == ZT_DTYPE_F32 && zt_tensor_dtype(v) == ZT_DTYPE_F32 &&
              (!w || zt_tensor_dtype(w) == ZT_DTYPE_F32);
    for (int i = 0; i < n; i++) f32 &= !params[i].t || zt_tensor_dtype(params[i].t) == ZT_DTYPE_F32;
    if (!f32)
        return zt_error_set(ZT_ERR_INVALID, "zt_task_adamw: parameters, m, v and w must be fp32 "
                                            "(keep fp32 master weights; outs takes a 16-bit copy)");
    struct zt_opt_args *a = args_new(n);
    struct zt_block_ref *in = calloc((size_t)n + 1, sizeof *in);
    if (!a || !in) {
        free(a);
        free(in);
        return zt_error_set(ZT_ERR_NOMEM, "out of memory for task arguments");
    }
    a->hp = *hp;
    a->hdr.native16 = 1; /* adamw_cpu converts its windows of 16-bit slots itself */
    struct zt_builder tb;
    zt_builder_init(&tb, &a->hdr, ZT_KIND_adamw, o, g);
    int64_t gblk = zt_tensor_blk_rows(m, g) * zt_tensor_cols(m);
    a->lo = lo;
    a->hi = lo + gblk;
    if (lo < 0) tb.bad = 1;
    /* slot 0: parameter blocks in memory, 1: gradient blocks, 2: m, 3: v, 4: clip, 5: w,
     * 6: pipe, 7: the copies (outs) of the parameter blocks, block i of each */
    int nin = 0;
    for (int i = 0; i < n; i++) {
        int64_t gn = grads[i].t ? zt_tensor_blk_rows(grads[i].t, grads[i].blk) *
                                      zt_tensor_cols(grads[i].t) : -1;
        if (params[i].t) {
            if (gn < 0 || zt_tensor_blk_rows(params[i].t, params[i].blk) *
                                  zt_tensor_cols(params[i].t) != gn)
                tb.bad = 1;
            a->off[n + i] = nin;
            in[nin++] = params[i];
        } else {
            if (!w) tb.bad = 1;
            a->off[n + i] = -1;
        }
        /* every block has a part in the window */
        if (params[i].off < 0 || gn < 0 || params[i].off >= a->hi || params[i].off + gn <= lo)
            tb.bad = 1;
        a->off[i] = params[i].off;
    }
    zt_builder_add_list(&tb, in, nin, STARPU_RW);
    zt_builder_add_list(&tb, grads, n, STARPU_R);
    zt_builder_add(&tb, m, g, STARPU_RW);
    zt_builder_add(&tb, v, g, STARPU_RW);
    zt_builder_add(&tb, clip, -1, STARPU_R);
    zt_builder_add(&tb, w, w ? g : -1, STARPU_RW);
    zt_builder_add(&tb, pipe, -1, STARPU_RW);
    /* slot 7: the copies of the blocks in memory (shaped like them), in slot 0's order;
     * RW: a task updates only its window of them */
    int nout = 0;
    for (int i = 0; outs && i < n; i++) {
        if (!params[i].t) continue;
        if (!outs[i].t ||
            zt_tensor_blk_rows(outs[i].t, outs[i].blk) * zt_tensor_cols(outs[i].t) !=
                zt_tensor_blk_rows(params[i].t, params[i].blk) * zt_tensor_cols(params[i].t))
            tb.bad = 1;
        else
            in[nout++] = outs[i];
    }
    if (outs && nout != nin) tb.bad = 1;
    a->outs = outs != NULL && nout > 0;
    zt_builder_add_list(&tb, in, a->outs ? nout : 0, STARPU_RW);
    a->wout = wout != NULL;
    zt_builder_add(&tb, wout, wout ? 0 : -1, STARPU_RW);
    free(in);
    return zt_builder_submit(&tb, a, sizeof *a + 2 * (size_t)n * sizeof(int64_t),
                             o ? o->priority : 0);
}
