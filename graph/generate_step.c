/*
 * graph/generate_step.c: the task graph of one generation step: the step's rows (prompt chunks
 * and decode tokens of every running request, as one batch) through every layer, then the logits
 * of the rows that need them.
 *
 * Layer: graph/. The dense parts are the training forward's tasks (layernorm, matmul, gelu,
 * residual: the same kernels, so a row's values have the training forward's bits); attention
 * goes through the KV cache (kv_append, attention_cached). The step's tensors are made over one
 * arena, sized for the largest step, with exactly the step's rows, and freed after it: a decode
 * step computes its rows only.
 */
#include <stdlib.h>         /* calloc, free */
#include "zt_aio.h"         /* zt_aio_alloc */
#include "generate_impl.h"  /* struct gen_acts, gen_step_submit */

enum { A_X, A_RES2, A_LN, A_MEAN, A_RSTD, A_QKV, A_ATTY, A_PROJ, A_FCH, A_FCHG, A_ROWS_END,
       A_XS = A_ROWS_END, A_LNF, A_LNFM, A_LNFR, A_LOGITS, A_COUNT };

/* columns of each step tensor (in units of C, except: 0 = one column, -1 = vocabulary) */
static const struct { const char *name; int cols; } g_acts[A_COUNT] = {
    {"x", 1}, {"res2", 1}, {"ln", 1}, {"ln_mean", 0}, {"ln_rstd", 0}, {"qkv", 3}, {"atty", 1},
    {"proj", 1}, {"fch", 4}, {"fch_gelu", 4}, {"xs", 1}, {"lnf", 1}, {"lnf_mean", 0},
    {"lnf_rstd", 0}, {"logits", -1},
};

struct gen_acts {
    struct zt_model_shape s;
    int max_rows;
    float *arena;
    zt_tensor_t t[A_COUNT];
};

static int64_t cols_of(const struct gen_acts *a, int k) {
    return g_acts[k].cols == 0 ? 1 : g_acts[k].cols < 0 ? a->s.vocab_size
                                                        : (int64_t)g_acts[k].cols * a->s.n_embd;
}

enum zt_status gen_acts_create(struct gen_acts **out, const struct zt_model_shape *s,
                               int max_rows) {
    struct gen_acts *a = calloc(1, sizeof *a);
    if (!a) return zt_error_set(ZT_ERR_NOMEM, "generate: out of memory");
    a->s = *s;
    a->max_rows = max_rows;
    int64_t floats = 0;
    for (int k = 0; k < A_COUNT; k++) floats += cols_of(a, k) * max_rows + 16; /* 64 B apart */
    a->arena = zt_aio_alloc((size_t)floats * sizeof(float));
    *out = a;
    if (!a->arena)
        return zt_error_set(ZT_ERR_NOMEM, "generate: out of memory for %.1f MiB of activations",
                            floats * 4.0 / 1048576.0);
    return ZT_OK;
}

void gen_acts_free(struct gen_acts *a) {
    if (!a) return;
    gen_step_end(a);
    free(a->arena);
    free(a);
}

/* the step's tensors: rows n (nblk blocks) for the layers, k for the logits (none when k is 0:
 * a step of prompt chunks that end no prompt) */
static enum zt_status make_step_tensors(struct gen_acts *a, int n, int nblk, int k) {
    float *p = a->arena;
    for (int i = 0; i < (k > 0 ? A_COUNT : A_ROWS_END); i++) {
        int rows = i < A_ROWS_END ? n : k, nb = i < A_ROWS_END ? nblk : (k < nblk ? k : nblk);
        ZT_CHECK(zt_tensor_init(&a->t[i], g_acts[i].name, p, rows, cols_of(a, i), sizeof(float),
                                nb, NULL));
        p += cols_of(a, i) * a->max_rows + 16;
    }
    return ZT_OK;
}

void gen_step_end(struct gen_acts *a) {
    for (int i = 0; i < A_COUNT; i++) {
        if (a->t[i]) zt_tensor_free(a->t[i]);
        a->t[i] = NULL;
    }
}

enum { P_LN1W, P_LN1B, P_QKVW, P_QKVB, P_ATTPW, P_ATTPB, P_LN2W, P_LN2B, P_FCW, P_FCB, P_FCPW,
       P_FCPB };

/* one layer on row block b: attention through the cache, then the MLP; x in and out */
static enum zt_status layer_block(struct gen_acts *a, const struct gen_layer *L, zt_tensor_t kv,
                                  const struct gen_batch *bt, const struct zt_task_opts *o, int b) {
    zt_tensor_t *t = a->t;
    zt_tensor_t const *p = L->p;
    ZT_CHECK(zt_task_layernorm_forward(o, t[A_LN], t[A_MEAN], t[A_RSTD], b, t[A_X], p[P_LN1W],
                                       p[P_LN1B]));
    ZT_CHECK(zt_task_matmul_forward(o, t[A_QKV], b, t[A_LN], p[P_QKVW], p[P_QKVB]));
    ZT_CHECK(zt_task_kv_append(o, kv, t[A_QKV], b, bt->rows));
    ZT_CHECK(zt_task_attention_cached(o, t[A_ATTY], b, t[A_QKV], kv, bt->rows, a->s.n_head));
    ZT_CHECK(zt_task_matmul_forward(o, t[A_PROJ], b, t[A_ATTY], p[P_ATTPW], p[P_ATTPB]));
    ZT_CHECK(zt_task_residual_forward(o, t[A_RES2], b, t[A_X], t[A_PROJ]));
    ZT_CHECK(zt_task_layernorm_forward(o, t[A_LN], t[A_MEAN], t[A_RSTD], b, t[A_RES2],
                                       p[P_LN2W], p[P_LN2B]));
    ZT_CHECK(zt_task_matmul_forward(o, t[A_FCH], b, t[A_LN], p[P_FCW], p[P_FCB]));
    ZT_CHECK(zt_task_gelu_forward(o, t[A_FCHG], b, t[A_FCH]));
    ZT_CHECK(zt_task_matmul_forward(o, t[A_PROJ], b, t[A_FCHG], p[P_FCPW], p[P_FCPB]));
    return zt_task_residual_forward(o, t[A_X], b, t[A_RES2], t[A_PROJ]);
}

enum zt_status gen_step_submit(struct gen_acts *a, struct gen_weights *w, zt_tensor_t *kv,
                               const struct gen_batch *bt, int nblk, zt_tensor_t *logits) {
    if (bt->n < 1 || bt->n > a->max_rows || bt->nlogits > bt->n)
        return zt_error_set(ZT_ERR_INVALID, "generate: a step of %d rows (%d of them with "
                            "logits): expected 1 to %d rows", bt->n, bt->nlogits, a->max_rows);
    if (nblk > bt->n) nblk = bt->n;
    ZT_CHECK(make_step_tensors(a, bt->n, nblk, bt->nlogits));
    zt_tensor_t *t = a->t;
    struct zt_task_opts o = {.layer = -1, .mb = -1, .step = bt->step, .priority = 0};
    for (int b = 0; b < nblk; b++)
        ZT_CHECK(zt_task_embed_rows(&o, t[A_X], b, w->wte, w->wpe, bt->tokens, bt->rows));
    for (int l = 0; l < a->s.n_layer; l++) {
        struct gen_layer *L;
        ZT_CHECK(gen_weights_layer(w, l, bt->step, &L));
        o.layer = l;
        for (int b = 0; b < nblk; b++) ZT_CHECK(layer_block(a, L, kv[l], bt, &o, b));
    }
    ZT_CHECK(gen_weights_pass_end(w));
    o.layer = -1;
    *logits = NULL;
    if (bt->nlogits == 0) return ZT_OK;
    ZT_CHECK(zt_task_gather_rows(&o, t[A_XS], t[A_X], bt->logit_rows));
    for (int b = 0; b < zt_tensor_nblk(t[A_XS]); b++) {
        ZT_CHECK(zt_task_layernorm_forward(&o, t[A_LNF], t[A_LNFM], t[A_LNFR], b, t[A_XS],
                                           w->lnfw, w->lnfb));
        ZT_CHECK(zt_task_matmul_t_forward(&o, t[A_LOGITS], b, t[A_LNF], w->wte));
    }
    *logits = t[A_LOGITS];
    return ZT_OK;
}
