/*
 * graph/gpt2.c: GPT-2 forward and backward as loops of task inserts (llm.c's gpt2_forward /
 * gpt2_backward, with every call a zt_task_*).
 *
 * Layer: graph/. No starpu_* calls. Activations are per micro-batch and reused by the next one;
 * StarPU's sequential consistency orders the reuse. Gradient accumulation across micro-batches
 * happens in micro-batch order (parameter gradients are +=).
 */
#include <math.h>         /* sqrtf */
#include <stddef.h>       /* offsetof */
#include <stdint.h>       /* SIZE_MAX */
#include <stdio.h>        /* snprintf */
#include <stdlib.h>       /* calloc */
#include <string.h>       /* memcpy */
#include "zt_comm.h"      /* zt_comm_sum_doubles */
#include "zt_gpt2.h"      /* our API */
#include "zt_recompute.h" /* the checkpointed layers and their window sets */
#include "zt_tasks.h"     /* zt_task_* */
#include "zt_tokens.h"    /* struct zt_tokens */

enum { P_LN1W, P_LN1B, P_QKVW, P_QKVB, P_ATTPW, P_ATTPB, P_LN2W, P_LN2B, P_FCW, P_FCB, P_FCPW,
       P_FCPB, P_NLAYER };
_Static_assert(P_NLAYER == ZT_GPT2_LAYER_PARAMS, "zt_gpt2.h lists every layer parameter");

struct zt_layer_acts {
    zt_tensor_t ln1, ln1_mean, ln1_rstd; /* [N,C], [N], [N] */
    zt_tensor_t qkv;                     /* [N,3C] */
    zt_tensor_t atty;                    /* [N,C] */
    zt_tensor_t att;                     /* [Bm, NH*T*T] */
    zt_tensor_t res2;                    /* [N,C] residual after attention */
    zt_tensor_t ln2, ln2_mean, ln2_rstd;
    zt_tensor_t fch, fch_gelu;           /* [N,4C] */
    zt_tensor_t res3;                    /* [N,C] layer output */
};

struct zt_gpt2 {
    zt_engine_t e;
    struct zt_model_shape s;
    zt_param_t wte, wpe, lnfw, lnfb;
    zt_param_t (*layer_params)[P_NLAYER]; /* [L][P_NLAYER] */
    int accum, Bm, B;
    int active;                          /* positions of a row with a loss, of the last submit */
    /* activations (one micro-batch) */
    zt_tensor_t inputs, targets;         /* [Bm,T] int32 */
    zt_tensor_t encoded;                 /* [N,C] */
    struct zt_layer_acts *layer_acts;    /* [L]; a checkpointed layer's are the window's but
                                          * res3, its output (the next layer's input) */
    struct zt_recompute_plan rc;         /* which layers are checkpointed, their sets */
    zt_ckpt_swap_t swap;                 /* the kept inputs on NVMe (NULL: in memory) */
    int inputs_to_host;                  /* offload cpu: the kept inputs leave the devices */
    struct zt_layer_acts *window;        /* [rc.window]: the recompute window (only the
                                          * recomputed activations) */
    enum zt_recompute recompute;         /* what a checkpointed layer recomputes */
    zt_tensor_t lnf, lnf_mean, lnf_rstd;
    zt_tensor_t logits;                  /* [N,V], holds dlogits after the loss task */
    zt_tensor_t *losses;                 /* [accum] x [N] */
    zt_tensor_t proj;                    /* [N,C] matmul output before a residual add */
    /* activation gradients (reused per layer) */
    zt_tensor_t dres, dC, d3C, d4C;      /* [N,C], [N,C], [N,3C], [N,4C] */
    zt_tensor_t lnpart;                  /* [nblk, 2C] layernorm weight-gradient partials */
};

/* a layer's parameters: name after "transformer.h.<l>.", shape, initialisation */
static const struct layer_param {
    const char *suffix;
    int ndim, r, c; /* r, c in units: 1=C, 3=3C, 4=4C; c 0 = 1-D */
    enum zt_init init;
    int proj;       /* a c_proj weight: std scaled by 1/sqrt(2L) */
} g_layer_params[P_NLAYER] = {
    {"ln_1.weight", 1, 1, 0, ZT_INIT_ONE, 0},
    {"ln_1.bias", 1, 1, 0, ZT_INIT_ZERO, 0},
    {"attn.c_attn.weight", 2, 1, 3, ZT_INIT_NORMAL, 0},
    {"attn.c_attn.bias", 1, 3, 0, ZT_INIT_ZERO, 0},
    {"attn.c_proj.weight", 2, 1, 1, ZT_INIT_NORMAL, 1},
    {"attn.c_proj.bias", 1, 1, 0, ZT_INIT_ZERO, 0},
    {"ln_2.weight", 1, 1, 0, ZT_INIT_ONE, 0},
    {"ln_2.bias", 1, 1, 0, ZT_INIT_ZERO, 0},
    {"mlp.c_fc.weight", 2, 1, 4, ZT_INIT_NORMAL, 0},
    {"mlp.c_fc.bias", 1, 4, 0, ZT_INIT_ZERO, 0},
    {"mlp.c_proj.weight", 2, 4, 1, ZT_INIT_NORMAL, 1},
    {"mlp.c_proj.bias", 1, 1, 0, ZT_INIT_ZERO, 0},
};

int zt_gpt2_nparams(const struct zt_model_shape *s) { return 4 + P_NLAYER * s->n_layer; }

void zt_gpt2_param_info(const struct zt_model_shape *s, int i, char *name, size_t n, int *ndim,
                        int64_t shape[2]) {
    int64_t C = s->n_embd;
    int last = 2 + P_NLAYER * s->n_layer;
    if (i < 2 || i >= last) { /* wte, wpe; ln_f weight, bias */
        const char *names[4] = {"transformer.wte.weight", "transformer.wpe.weight",
                                "transformer.ln_f.weight", "transformer.ln_f.bias"};
        int k = i < 2 ? i : 2 + (i - last);
        snprintf(name, n, "%s", names[k]);
        *ndim = k < 2 ? 2 : 1;
        shape[0] = k == 0 ? s->vocab_size : k == 1 ? s->seq_len : C;
        shape[1] = k < 2 ? C : 0;
        return;
    }
    const struct layer_param *lp = &g_layer_params[(i - 2) % P_NLAYER];
    snprintf(name, n, "transformer.h.%d.%s", (i - 2) / P_NLAYER, lp->suffix);
    *ndim = lp->ndim;
    shape[0] = (int64_t)lp->r * C;
    shape[1] = (int64_t)lp->c * C;
}

/* parameter i's initialisation: GPT-2's std 0.02, c_proj weights 0.02/sqrt(2L) */
static void param_init(const struct zt_model_shape *s, int i, enum zt_init *init, float *std) {
    const int last = 2 + P_NLAYER * s->n_layer;
    *std = 0.02f;
    if (i < 2 || i >= last) { /* wte, wpe; ln_f weight, bias */
        *init = i < 2 ? ZT_INIT_NORMAL : i == last ? ZT_INIT_ONE : ZT_INIT_ZERO;
        return;
    }
    const struct layer_param *lp = &g_layer_params[(i - 2) % P_NLAYER];
    *init = lp->init;
    if (lp->proj) *std = 0.02f / sqrtf(2.0f * (float)s->n_layer);
}

/* where the model keeps parameter i */
static zt_param_t *param_slot(zt_gpt2_t m, int i) {
    const int last = 2 + P_NLAYER * m->s.n_layer;
    if (i < 2) return i == 0 ? &m->wte : &m->wpe;
    if (i >= last) return i == last ? &m->lnfw : &m->lnfb;
    return &m->layer_params[(i - 2) / P_NLAYER][(i - 2) % P_NLAYER];
}

/* every parameter, in zt_gpt2_param_info's order, HF GPT-2 names and layouts */
static enum zt_status declare_params(zt_gpt2_t m) {
    char name[160];
    for (int i = 0; i < zt_gpt2_nparams(&m->s); i++) {
        int ndim;
        int64_t shape[2];
        enum zt_init init;
        float std;
        zt_gpt2_param_info(&m->s, i, name, sizeof name, &ndim, shape);
        param_init(&m->s, i, &init, &std);
        zt_param_t *p = param_slot(m, i);
        *p = zt_engine_param(m->e, name, ndim, shape, init, std);
        if (!*p) return zt_error_last_code();
    }
    return ZT_OK;
}

// ----------------------------------------------------------------------------
// activations: one table that zt_gpt2_init allocates and zt_gpt2_act_bytes sizes
// X: the model's activations and their gradients, in the engine's type (bf16/fp16 in mixed
// precision); F32: fp32 always (layernorm statistics and per-position losses, as PyTorch keeps
// them in fp32 under bf16); I32: token ids; PARTIALS: one fp32 row per activation block

enum act_dim { D_1, D_T, D_C, D_2C, D_3C, D_4C, D_V, D_NHTT };
enum act_type { A_X, A_F32, A_I32, A_PARTIALS };

struct act_row {
    const char *name;
    size_t off;            /* the tensor's field in struct zt_gpt2 (or struct zt_layer_acts) */
    enum act_dim rows;     /* rows per sequence: 1 or T (partials: ignored) */
    enum act_dim cols;
    enum act_type type;
};

#define M_(f) offsetof(struct zt_gpt2, f)
#define L_(f) offsetof(struct zt_layer_acts, f)
/* before the layers, then each layer's, then after the layers (losses: one per micro-batch) */
static const struct act_row g_head_acts[] = {
    {"inputs", M_(inputs), D_1, D_T, A_I32},
    {"targets", M_(targets), D_1, D_T, A_I32},
    {"encoded", M_(encoded), D_T, D_C, A_X},
};
static const struct act_row g_layer_acts[] = {
    {"ln1", L_(ln1), D_T, D_C, A_X},
    {"ln1_mean", L_(ln1_mean), D_T, D_1, A_F32},
    {"ln1_rstd", L_(ln1_rstd), D_T, D_1, A_F32},
    {"qkv", L_(qkv), D_T, D_3C, A_X},
    {"atty", L_(atty), D_T, D_C, A_X},
    {"att", L_(att), D_1, D_NHTT, A_X},
    {"res2", L_(res2), D_T, D_C, A_X},
    {"ln2", L_(ln2), D_T, D_C, A_X},
    {"ln2_mean", L_(ln2_mean), D_T, D_1, A_F32},
    {"ln2_rstd", L_(ln2_rstd), D_T, D_1, A_F32},
    {"fch", L_(fch), D_T, D_4C, A_X},
    {"fch_gelu", L_(fch_gelu), D_T, D_4C, A_X},
    {"res3", L_(res3), D_T, D_C, A_X},
};
static const struct act_row g_tail_acts[] = {
    {"lnf", M_(lnf), D_T, D_C, A_X},
    {"lnf_mean", M_(lnf_mean), D_T, D_1, A_F32},
    {"lnf_rstd", M_(lnf_rstd), D_T, D_1, A_F32},
    {"logits", M_(logits), D_T, D_V, A_X},
    {"losses", M_(losses), D_T, D_1, A_F32},
    {"proj", M_(proj), D_T, D_C, A_X},
    {"dresidual", M_(dres), D_T, D_C, A_X},
    {"dC", M_(dC), D_T, D_C, A_X},
    {"d3C", M_(d3C), D_T, D_3C, A_X},
    {"d4C", M_(d4C), D_T, D_4C, A_X},
    {"ln_partials", M_(lnpart), D_1, D_2C, A_PARTIALS},
};
#undef M_
#undef L_

static int64_t act_dim(const struct zt_model_shape *s, enum act_dim d) {
    const int64_t T = s->seq_len, C = s->n_embd;
    const int64_t v[] = {1, T, C, 2 * C, 3 * C, 4 * C, s->vocab_size, s->n_head * T * T};
    return v[d];
}

/* what for_each_act does with one activation: t its place in the model (NULL when sizing) */
typedef enum zt_status (*act_fn)(void *ctx, const struct zt_model_shape *s,
                                 const struct act_row *r, zt_tensor_t *t);

/* which of a layer's activations: all, those a checkpointed layer keeps (its output, and with
 * recompute "mlp" the attention's), or those it recomputes (a window of the recompute) */
enum layer_part { PART_ALL, PART_KEPT, PART_WINDOW };

/* whether a checkpointed layer recomputes activation r */
static int recomputed(const struct act_row *r, enum zt_recompute mode) {
#define IS_(f) (r->off == offsetof(struct zt_layer_acts, f))
    if (IS_(res3)) return 0;
    const int attention = IS_(ln1) || IS_(ln1_mean) || IS_(ln1_rstd) || IS_(qkv) || IS_(atty) ||
                          IS_(att);
    switch (mode) {
    case ZT_RECOMPUTE_MLP: return IS_(ln2) || IS_(ln2_mean) || IS_(ln2_rstd) || IS_(fch) ||
                                  IS_(fch_gelu);
    case ZT_RECOMPUTE_ATTENTION: return attention;
    default: return 1;
    }
#undef IS_
}

static int in_part(const struct act_row *r, enum layer_part part, enum zt_recompute mode) {
    return part == PART_ALL || (part == PART_WINDOW) == recomputed(r, mode);
}

/* the rows of one table (a layer's: those of part); the row at offset `moved` is not made (a
 * kept input on NVMe lives in the swap's sets), SIZE_MAX: none */
static enum zt_status each_row(void *ctx, const struct zt_model_shape *s, act_fn fn,
                               const struct act_row *rows, size_t n, char *base, int accum,
                               enum layer_part part, enum zt_recompute mode, size_t moved) {
    for (size_t k = 0; k < n; k++) {
        const struct act_row *r = &rows[k];
        if ((rows == g_layer_acts && !in_part(r, part, mode)) || r->off == moved) continue;
        if (rows == g_tail_acts && r->off == offsetof(struct zt_gpt2, losses)) {
            zt_tensor_t *losses = base ? ((struct zt_gpt2 *)base)->losses : NULL;
            for (int j = 0; j < accum; j++) ZT_CHECK(fn(ctx, s, r, losses ? &losses[j] : NULL));
            continue;
        }
        ZT_CHECK(fn(ctx, s, r, base ? (zt_tensor_t *)(base + r->off) : NULL));
    }
    return ZT_OK;
}

/* the config's checkpointed layers and their recompute window */
static enum zt_status plan_layers(const struct zt_config *cfg, int L,
                                  struct zt_recompute_plan *rc) {
    unsigned char *ckpt = calloc((size_t)L + 1, 1);
    if (!ckpt) return zt_error_set(ZT_ERR_NOMEM, "model: out of memory");
    for (int l = 0; l < L; l++) ckpt[l] = (unsigned char)zt_actckpt_layer(&cfg->actckpt, l);
    enum zt_status st = zt_recompute_init(rc, L, ckpt, 0);
    free(ckpt);
    return st;
}

/* whether layer l's input (the output of the layer below, or the embeddings) waits on NVMe
 * between its forward and backward: activation_checkpointing.offload nvme, and its backward
 * recomputes from it */
static int input_moves(const struct zt_config *cfg, const struct zt_recompute_plan *rc, int l) {
    return cfg->actckpt.offload == ZT_OFFLOAD_NVME && zt_ckpt_swap_moves(rc, l);
}

/* every activation in allocation order: the head, each layer's (a checkpointed layer only its
 * output), the recompute window, the tail; the inputs on NVMe are not made (the swap's sets
 * hold them); m NULL: sizing */
static enum zt_status for_each_act(zt_gpt2_t m, const struct zt_model_shape *s,
                                   const struct zt_config *cfg,
                                   const struct zt_recompute_plan *rc, act_fn fn, void *ctx) {
#define N_(a) (sizeof(a) / sizeof *(a))
#define MOVED_(l, type, f) (input_moves(cfg, rc, l) ? offsetof(type, f) : SIZE_MAX)
    const int accum = cfg->grad_accum, L = s->n_layer;
    const enum zt_recompute mode = cfg->actckpt.recompute;
    ZT_CHECK(each_row(ctx, s, fn, g_head_acts, N_(g_head_acts), (char *)m, accum, PART_ALL,
                      mode, MOVED_(0, struct zt_gpt2, encoded)));
    for (int l = 0; l < L; l++)
        ZT_CHECK(each_row(ctx, s, fn, g_layer_acts, N_(g_layer_acts),
                          m ? (char *)&m->layer_acts[l] : NULL, accum,
                          zt_recompute_slot(rc, l) >= 0 ? PART_KEPT : PART_ALL, mode,
                          MOVED_(l + 1, struct zt_layer_acts, res3)));
    for (int w = 0; w < rc->window; w++)
        ZT_CHECK(each_row(ctx, s, fn, g_layer_acts, N_(g_layer_acts),
                          m ? (char *)&m->window[w] : NULL, accum, PART_WINDOW, mode, SIZE_MAX));
    return each_row(ctx, s, fn, g_tail_acts, N_(g_tail_acts), (char *)m, accum, PART_ALL,
                    mode, SIZE_MAX);
#undef MOVED_
#undef N_
}

static enum zt_status make_act(void *ctx, const struct zt_model_shape *s, const struct act_row *r,
                               zt_tensor_t *t) {
    zt_engine_t e = ctx;
    const int64_t rps = act_dim(s, r->rows), cols = act_dim(s, r->cols);
    switch (r->type) {
    case A_I32: return zt_engine_act(e, r->name, rps, cols, sizeof(int32_t), t);
    case A_PARTIALS: return zt_engine_act_partials(e, r->name, cols, t);
    case A_F32: return zt_engine_act_dtype(e, r->name, rps, cols, ZT_DTYPE_F32, t);
    default: return zt_engine_act_dtype(e, r->name, rps, cols, zt_engine_dtype(e), t);
    }
}

struct act_sizing {
    const struct zt_config *cfg;
    int chunks;
    int64_t bytes;
};

static enum zt_status size_act(void *ctx, const struct zt_model_shape *s, const struct act_row *r,
                               zt_tensor_t *t) {
    (void)t;
    struct act_sizing *z = ctx;
    const size_t es = r->type == A_X ? zt_dtype_size(zt_engine_config_dtype(z->cfg)) : 4;
    z->bytes += zt_engine_act_size(z->cfg, z->chunks, r->type == A_PARTIALS ? 0
                                   : act_dim(s, r->rows), act_dim(s, r->cols), es);
    return ZT_OK;
}

void zt_gpt2_recompute_info(zt_gpt2_t m, struct zt_gpt2_recompute *out) {
    *out = (struct zt_gpt2_recompute){.nckpt = m->rc.nckpt, .window = m->rc.window};
    for (int w = 0; w < m->rc.window; w++)
        for (size_t k = 0; k < sizeof g_layer_acts / sizeof *g_layer_acts; k++) {
            const zt_tensor_t t = *(zt_tensor_t *)((char *)&m->window[w] + g_layer_acts[k].off);
            if (t) out->window_bytes += zt_tensor_numel(t) * (int64_t)zt_tensor_elemsize(t);
        }
    out->set_bytes = zt_ckpt_swap_info(m->swap, &out->moved, &out->sets, &out->swapped,
                                       &out->file_bytes);
}

int64_t zt_gpt2_act_bytes(const struct zt_model_shape *s, const struct zt_config *cfg,
                          int chunks) {
    struct act_sizing z = {cfg, chunks, 0};
    struct zt_recompute_plan rc;
    if (plan_layers(cfg, s->n_layer, &rc) != ZT_OK) return -1;
    for_each_act(NULL, s, cfg, &rc, size_act, &z); /* size_act cannot fail */
    if (cfg->actckpt.offload == ZT_OFFLOAD_NVME) /* the sets of the inputs on NVMe */
        z.bytes += zt_ckpt_swap_sets(&rc) *
                   zt_engine_act_size(cfg, chunks, s->seq_len, s->n_embd,
                                      zt_dtype_size(zt_engine_config_dtype(cfg)));
    zt_recompute_free(&rc);
    return z.bytes;
}

enum zt_status zt_gpt2_check_shape(const struct zt_model_shape *s) {
    int V = s->vocab_size, T = s->seq_len, C = s->n_embd, L = s->n_layer, NH = s->n_head;
    if (V < 1 || T < 1 || C < 1 || L < 1 || NH < 1 || C % NH != 0)
        return zt_error_set(ZT_ERR_CONFIG, "model: bad shape V=%d T=%d C=%d L=%d NH=%d", V, T, C,
                            L, NH);
    return ZT_OK;
}

/* a checkpointed layer's recomputed activations are the tensors of its window set; the rest
 * stay its own */
static void alias_window(zt_gpt2_t m) {
    for (int l = 0; l < m->s.n_layer; l++) {
        const int w = zt_recompute_slot(&m->rc, l);
        if (w < 0) continue;
        const char *slot = (const char *)&m->window[w];
        for (size_t i = 0; i < sizeof g_layer_acts / sizeof *g_layer_acts; i++)
            if (recomputed(&g_layer_acts[i], m->recompute))
                memcpy((char *)&m->layer_acts[l] + g_layer_acts[i].off,
                       slot + g_layer_acts[i].off, sizeof(zt_tensor_t));
    }
}

/* the inputs that wait on NVMe: the swap's sets take the places for_each_act left empty */
static enum zt_status swap_inputs(zt_gpt2_t m, const struct zt_config *cfg) {
    const struct zt_ckpt_swap_spec spec = {
        .rows_per_seq = m->s.seq_len, .cols = m->s.n_embd, .dtype = zt_engine_dtype(m->e),
        .nvme_path = cfg->actckpt.nvme_path, .key = "activation_checkpointing.offload.nvme_path"};
    ZT_CHECK(zt_ckpt_swap_init(&m->swap, m->e, &m->rc, &spec));
    for (int l = 0; l < m->s.n_layer; l++) {
        const zt_tensor_t t = zt_ckpt_swap_input(m->swap, l);
        if (t) *(l ? &m->layer_acts[l - 1].res3 : &m->encoded) = t;
    }
    return ZT_OK;
}

enum zt_status zt_gpt2_init(zt_gpt2_t *out, zt_engine_t e, const struct zt_model_shape *s) {
    *out = NULL;
    const struct zt_config *cfg = zt_engine_config(e);
    ZT_CHECK(zt_gpt2_check_shape(s));
    struct zt_gpt2 *m = calloc(1, sizeof *m);
    if (!m) return zt_error_set(ZT_ERR_NOMEM, "model: out of memory");
    m->e = e;
    m->s = *s;
    m->Bm = cfg->micro_batch;
    m->accum = cfg->grad_accum;
    m->B = cfg->train_batch_size;
    m->layer_params = calloc((size_t)s->n_layer, sizeof *m->layer_params);
    m->layer_acts = calloc((size_t)s->n_layer, sizeof *m->layer_acts);
    m->losses = calloc((size_t)m->accum, sizeof *m->losses);
    m->recompute = cfg->actckpt.recompute;
    m->inputs_to_host = cfg->actckpt.offload == ZT_OFFLOAD_CPU;
    enum zt_status rc = plan_layers(cfg, s->n_layer, &m->rc);
    m->window = calloc((size_t)m->rc.window + 1, sizeof *m->window); /* + 1: never calloc(0) */
    if (rc != ZT_OK || !m->layer_params || !m->layer_acts || !m->losses || !m->window) {
        zt_gpt2_free(m);
        return zt_error_set(ZT_ERR_NOMEM, "model: out of memory");
    }
    *out = m;
    ZT_CHECK(declare_params(m));
    ZT_CHECK(zt_engine_finalize(e));
    ZT_CHECK(for_each_act(m, s, cfg, &m->rc, make_act, e));
    alias_window(m);
    return cfg->actckpt.offload == ZT_OFFLOAD_NVME ? swap_inputs(m, cfg) : ZT_OK;
}

zt_tensor_t zt_gpt2_logits(zt_gpt2_t m) { return m->logits; }

void zt_gpt2_free(zt_gpt2_t m) {
    if (!m) return;
    free(m->layer_params);
    free(m->layer_acts);
    free(m->losses);
    zt_ckpt_swap_free(m->swap);
    zt_recompute_free(&m->rc);
    free(m->window);
    free(m); /* tensors belong to the engine */
}

// ----------------------------------------------------------------------------
// one micro-batch
#define FOR_BLK for (int b = 0; b < nb; b++)
/* the value / gradient tensor of parameter p for a task submitted in context c (at stage 3 the
 * engine gathers p here, tagged with c's layer and micro-batch) */
#define V_(c, p) zt_param_value(c, p)
#define G_(c, p) zt_param_grad(c, p)

/* weight-gradient tasks of a weight: one per row block of it (they run in parallel), or with
 * 16-bit activations one for all its blocks: each task widens every activation block it reads,
 * so per-block tasks would widen them once per block */
static int wgrad_tasks(zt_gpt2_t m, zt_tensor_t g) {
    return zt_engine_dtype(m->e) == ZT_DTYPE_F32 ? zt_tensor_nblk(g) : 1;
}
static int wgrad_blk(zt_gpt2_t m, int j) { return zt_engine_dtype(m->e) == ZT_DTYPE_F32 ? j : -1; }

/* out = inp @ w + bias, per block; then all weight-gradient helpers */
static enum zt_status linear_forward(const struct zt_step_ctx *c, int nb, zt_tensor_t out,
                                     zt_tensor_t inp, zt_param_t w, zt_param_t bias) {
    FOR_BLK ZT_CHECK(zt_task_matmul_forward(&c->opts, out, b, inp, V_(c, w), V_(c, bias)));
    return ZT_OK;
}

static enum zt_status linear_backward(zt_gpt2_t m, int layer, int mb, zt_tensor_t dinp,
                                      zt_tensor_t dout, zt_tensor_t inp, zt_param_t w,
                                      zt_param_t bias) {
    int nb = zt_engine_nblk(m->e), L = m->s.n_layer;
    const struct zt_step_ctx cb = zt_engine_ctx(m->e, ZT_PRIO_BACKWARD, layer, L, mb);
    const struct zt_step_ctx cw = zt_engine_ctx(m->e, ZT_PRIO_WEIGHT_GRAD, layer, L, mb);
    FOR_BLK ZT_CHECK(zt_task_matmul_backward_inp(&cb.opts, dinp, b, dout, V_(&cb, w), 0));
    for (int j = 0; j < wgrad_tasks(m, G_(&cw, w)); j++)
        ZT_CHECK(zt_task_matmul_backward_weight(&cw.opts, G_(&cw, w), wgrad_blk(m, j), inp,
                                                dout));
    ZT_CHECK(zt_task_matmul_backward_bias(&cw.opts, G_(&cw, bias), dout));
    return ZT_OK;
}

static enum zt_status layernorm_backward(zt_gpt2_t m, int layer, int mb, zt_tensor_t dout,
                                         zt_tensor_t inp, zt_param_t w, zt_param_t bias,
                                         zt_tensor_t mean, zt_tensor_t rstd) {
    int nb = zt_engine_nblk(m->e), L = m->s.n_layer;
    const struct zt_step_ctx cb = zt_engine_ctx(m->e, ZT_PRIO_BACKWARD, layer, L, mb);
    const struct zt_step_ctx cw = zt_engine_ctx(m->e, ZT_PRIO_WEIGHT_GRAD, layer, L, mb);
    FOR_BLK ZT_CHECK(zt_task_layernorm_backward(&cb.opts, m->dres, m->lnpart, b, dout, inp,
                                                V_(&cb, w), mean, rstd));
    ZT_CHECK(zt_task_layernorm_param_reduce(&cw.opts, G_(&cw, w), G_(&cw, bias), m->lnpart));
    return ZT_OK;
}

/* Layer l's attention half from its input res, in context c: ln_1 .. the attention, then with
 * whole the projection and the residual into res2 (the recompute "attention" stops before them:
 * the layer kept res2, and its backward does not read the projection's output) */
static enum zt_status attention_forward(zt_gpt2_t m, int l, const struct zt_step_ctx *cp,
                                        zt_tensor_t res, int whole) {
    const int nb = zt_engine_nblk(m->e), NH = m->s.n_head;
    const struct zt_step_ctx c = *cp;
    const struct zt_task_opts *o = &c.opts;
    struct zt_layer_acts *a = &m->layer_acts[l];
    zt_param_t *p = m->layer_params[l];
    FOR_BLK ZT_CHECK(zt_task_layernorm_forward(o, a->ln1, a->ln1_mean, a->ln1_rstd, b, res,
                                               V_(&c, p[P_LN1W]), V_(&c, p[P_LN1B])));
    ZT_CHECK(linear_forward(&c, nb, a->qkv, a->ln1, p[P_QKVW], p[P_QKVB]));
    FOR_BLK ZT_CHECK(zt_task_attention_forward(o, a->atty, a->att, b, a->qkv, NH));
    if (!whole) return ZT_OK;
    ZT_CHECK(linear_forward(&c, nb, m->proj, a->atty, p[P_ATTPW], p[P_ATTPB]));
    FOR_BLK ZT_CHECK(zt_task_residual_forward(o, a->res2, b, res, m->proj));
    return ZT_OK;
}

/* Layer l's MLP half from res2, in context c: ln_2 .. gelu, then with whole the projection and
 * the residual into res3 (the recompute of a checkpointed layer stops before them: the layer
 * kept their result, its output, and its backward does not read the rest) */
static enum zt_status mlp_forward(zt_gpt2_t m, int l, const struct zt_step_ctx *cp, int whole) {
    const int nb = zt_engine_nblk(m->e);
    const struct zt_step_ctx c = *cp;
    const struct zt_task_opts *o = &c.opts;
    struct zt_layer_acts *a = &m->layer_acts[l];
    zt_param_t *p = m->layer_params[l];
    FOR_BLK ZT_CHECK(zt_task_layernorm_forward(o, a->ln2, a->ln2_mean, a->ln2_rstd, b, a->res2,
                                               V_(&c, p[P_LN2W]), V_(&c, p[P_LN2B])));
    ZT_CHECK(linear_forward(&c, nb, a->fch, a->ln2, p[P_FCW], p[P_FCB]));
    FOR_BLK ZT_CHECK(zt_task_gelu_forward(o, a->fch_gelu, b, a->fch));
    if (!whole) return ZT_OK;
    ZT_CHECK(linear_forward(&c, nb, m->proj, a->fch_gelu, p[P_FCPW], p[P_FCPB]));
    FOR_BLK ZT_CHECK(zt_task_residual_forward(o, a->res3, b, a->res2, m->proj));
    return ZT_OK;
}

/* checkpointed layer l's activations again, from its input res: all but its output (recompute
 * "full"), the MLP's from its kept res2 ("mlp"), or the attention's up to atty ("attention") */
static enum zt_status recompute_layer(zt_gpt2_t m, int l, const struct zt_step_ctx *c,
                                      zt_tensor_t res) {
    switch (m->recompute) {
    case ZT_RECOMPUTE_MLP: return mlp_forward(m, l, c, 0);
    case ZT_RECOMPUTE_ATTENTION: return attention_forward(m, l, c, res, 0);
    default: ZT_CHECK(attention_forward(m, l, c, res, 1)); return mlp_forward(m, l, c, 0);
    }
}

static enum zt_status micro_batch(zt_gpt2_t m, const struct zt_gpt2_batch *d, int mb,
                                  int train) {
    zt_engine_t e = m->e;
    int nb = zt_engine_nblk(e), L = m->s.n_layer, NH = m->s.n_head;
    struct zt_step_ctx c = zt_engine_ctx(e, ZT_PRIO_IO, -1, L, mb);
    const int row0 = zt_gpt2_rank_rows(m, mb, NULL, NULL);
    FOR_BLK ZT_CHECK(zt_task_load_rows(&c.opts, m->inputs, m->targets, b, d->files, d->rows,
                                       row0, m->active));
    /* ---- forward ---- */
    c = zt_engine_ctx(e, ZT_PRIO_FORWARD, -1, L, mb);
    FOR_BLK ZT_CHECK(zt_task_encoder_forward(&c.opts, m->encoded, b, m->inputs, V_(&c, m->wte),
                                             V_(&c, m->wpe)));
    zt_tensor_t res = m->encoded;
    for (int l = 0; l < L; l++) {
        c = zt_engine_ctx(e, ZT_PRIO_FORWARD, l, L, mb);
        if (train) ZT_CHECK(zt_ckpt_swap_out(m->swap, &c, l)); /* its input, to NVMe */
        ZT_CHECK(attention_forward(m, l, &c, res, 1));
        ZT_CHECK(mlp_forward(m, l, &c, 1));
        /* offload cpu: its input to host memory until the backward (devices only) */
        if (train && m->inputs_to_host && zt_recompute_needed(&m->rc, l)) zt_tensor_wont_use(res);
        res = m->layer_acts[l].res3;
    }
    c = zt_engine_ctx(e, ZT_PRIO_FORWARD, L, L, mb);
    FOR_BLK ZT_CHECK(zt_task_layernorm_forward(&c.opts, m->lnf, m->lnf_mean, m->lnf_rstd, b, res,
                                               V_(&c, m->lnfw), V_(&c, m->lnfb)));
    FOR_BLK ZT_CHECK(zt_task_matmul_t_forward(&c.opts, m->logits, b, m->lnf, V_(&c, m->wte)));
    /* d(mean over all B*active positions of the step)/dlogit: 1/(B*active) for every
     * micro-batch, times the loss scale (fp16: every gradient of the backward is that multiple
     * of the true one) */
    float dscale = train ? 1.0f / ((float)m->B * (float)m->active) : 0.0f;
    if (train && zt_engine_loss_scale(e) != 1.0f) dscale *= zt_engine_loss_scale(e);
    FOR_BLK ZT_CHECK(zt_task_crossentropy(&c.opts, m->logits, m->losses[mb], b, m->targets,
                                          dscale));
    if (!train) return ZT_OK;
    /* ---- backward ---- (the order in which it takes and finishes gradients is listed again
     * by zt_gpt2_grad_events for the memory model; test_memory_model fails if they part) */
    struct zt_step_ctx cb = zt_engine_ctx(e, ZT_PRIO_BACKWARD, L, L, mb);
    struct zt_step_ctx cw = zt_engine_ctx(e, ZT_PRIO_WEIGHT_GRAD, L, L, mb);
    FOR_BLK ZT_CHECK(zt_task_matmul_t_backward_inp(&cb.opts, m->dC, b, m->logits,
                                                   V_(&cb, m->wte), 0));
    for (int j = 0; j < wgrad_tasks(m, G_(&cw, m->wte)); j++)
        ZT_CHECK(zt_task_matmul_t_backward_weight(&cw.opts, G_(&cw, m->wte), wgrad_blk(m, j),
                                                  m->logits, m->lnf));
    ZT_CHECK(zt_task_zero(&cb.opts, m->dres));
    ZT_CHECK(layernorm_backward(m, L, mb, m->dC, res, m->lnfw, m->lnfb, m->lnf_mean,
                                m->lnf_rstd));
    /* this micro-batch writes no more gradient of ln_f: its bucket may be reduced */
    ZT_CHECK(zt_engine_grad_ready(e, &cw, m->lnfw));
    ZT_CHECK(zt_engine_grad_ready(e, &cw, m->lnfb));
    for (int l = L - 1; l >= 0; l--) {
        struct zt_layer_acts *a = &m->layer_acts[l];
        zt_param_t *p = m->layer_params[l];
        zt_tensor_t res_in = l == 0 ? m->encoded : m->layer_acts[l - 1].res3;
        cb = zt_engine_ctx(e, ZT_PRIO_BACKWARD, l, L, mb);
        cw = zt_engine_ctx(e, ZT_PRIO_WEIGHT_GRAD, l, L, mb);
        ZT_CHECK(zt_ckpt_swap_in(m->swap, &cb, l)); /* an input on NVMe, ahead of its need */
        /* a checkpointed layer's activations again, from its input, at its backward's priority
         * (the scheduler runs them beside the backward of the layer above) */
        if (zt_recompute_needed(&m->rc, l)) {
            const struct zt_step_ctx cr = zt_recompute_ctx(&cb);
            ZT_CHECK(recompute_layer(m, l, &cr, res_in));
        }
        /* dres = d(res3): MLP branch */
        ZT_CHECK(linear_backward(m, l, mb, m->d4C, m->dres, a->fch_gelu, p[P_FCPW], p[P_FCPB]));
        FOR_BLK ZT_CHECK(zt_task_gelu_backward(&cb.opts, m->d4C, b, a->fch));
        ZT_CHECK(linear_backward(m, l, mb, m->dC, m->d4C, a->ln2, p[P_FCW], p[P_FCB]));
        ZT_CHECK(layernorm_backward(m, l, mb, m->dC, a->res2, p[P_LN2W], p[P_LN2B], a->ln2_mean,
                                    a->ln2_rstd));
        /* dres = d(res2): attention branch */
        ZT_CHECK(linear_backward(m, l, mb, m->dC, m->dres, a->atty, p[P_ATTPW], p[P_ATTPB]));
        FOR_BLK ZT_CHECK(zt_task_attention_backward(&cb.opts, m->d3C, b, m->dC, a->qkv, a->att,
                                                    NH));
        ZT_CHECK(linear_backward(m, l, mb, m->dC, m->d3C, a->ln1, p[P_QKVW], p[P_QKVB]));
        ZT_CHECK(layernorm_backward(m, l, mb, m->dC, res_in, p[P_LN1W], p[P_LN1B], a->ln1_mean,
                                    a->ln1_rstd));
        /* layer l is done: its bucket can be reduced while layers l-1..0 run backward */
        for (int k = 0; k < P_NLAYER; k++) ZT_CHECK(zt_engine_grad_ready(e, &cw, p[k]));
    }
    cw = zt_engine_ctx(e, ZT_PRIO_WEIGHT_GRAD, 0, L, mb);
    ZT_CHECK(zt_task_encoder_backward(&cw.opts, G_(&cw, m->wte), G_(&cw, m->wpe), m->dres,
                                      m->inputs));
    ZT_CHECK(zt_engine_grad_ready(e, &cw, m->wte));
    ZT_CHECK(zt_engine_grad_ready(e, &cw, m->wpe));
    return ZT_OK;
}

int zt_gpt2_rank_rows(zt_gpt2_t m, int mb, int *accum, int *Bm) {
    if (accum) *accum = m->accum;
    if (Bm) *Bm = m->Bm;
    /* rank r's micro-batch j holds rows (j * N + r) * Bm .. + Bm - 1 of the step's global batch:
     * N ranks train on exactly the rows one rank would */
    return (mb * zt_engine_world_size(m->e) + zt_engine_rank(m->e)) * m->Bm;
}

enum zt_status zt_gpt2_batch_submit(zt_gpt2_t m, const struct zt_gpt2_batch *batch, int64_t step,
                                    int train) {
    if (!batch || !batch->files || !batch->rows || batch->active < 1 ||
        batch->active > m->s.seq_len)
        return zt_error_set(ZT_ERR_INVALID, "zt_gpt2_batch_submit: a batch needs files, rows and "
                            "an active length in 1..%d", m->s.seq_len);
    m->active = batch->active;
    if (train) ZT_CHECK(zt_engine_step_begin(m->e, step));
    for (int mb = 0; mb < m->accum; mb++) ZT_CHECK(micro_batch(m, batch, mb, train));
    if (train) ZT_CHECK(zt_engine_step_end(m->e));
    return ZT_OK;
}

/* the step rule of zt_tokens.h as planned rows (the load tasks copy them: freed at once) */
enum zt_status zt_gpt2_step_submit(zt_gpt2_t m, const struct zt_tokens *tok, int64_t step,
                                   int train) {
    struct zt_data_row *rows = calloc((size_t)m->B, sizeof *rows);
    if (!rows) return zt_error_set(ZT_ERR_NOMEM, "out of memory for the step's rows");
    for (int k = 0; k < m->B; k++)
        rows[k] = (struct zt_data_row){0, (int64_t)zt_tokens_step_pos(
                                              tok, (uint64_t)(step - 1) * m->B + k, m->s.seq_len)};
    const struct zt_gpt2_batch b = {tok, rows, m->s.seq_len};
    enum zt_status rc = zt_gpt2_batch_submit(m, &b, step, train);
    free(rows);
    return rc;
}

/* The sum of every position's loss of the step: each row's positions added in order (in
 * double) by the rank that holds the row, then the rows in global row order, on every rank: the
 * same bits for any world size and micro-batch split. Positions past `active` add 0. */
static enum zt_status global_loss_sum(zt_gpt2_t m, double *sum) {
    const int T = m->s.seq_len;
    double *rows = calloc((size_t)m->B, sizeof *rows); /* 0 where another rank holds the row */
    if (!rows) return zt_error_set(ZT_ERR_NOMEM, "out of memory for the step's losses");
    enum zt_status rc = ZT_OK;
    for (int mb = 0; mb < m->accum && (rc = zt_tensor_acquire(m->losses[mb], 0)) == ZT_OK; mb++) {
        const float *l = zt_tensor_data(m->losses[mb]);
        const int first = zt_gpt2_rank_rows(m, mb, NULL, NULL);
        for (int i = 0; i < m->Bm; i++)
            for (int t = 0; t < T; t++) rows[first + i] += l[(size_t)i * T + t];
        zt_tensor_release(m->losses[mb]);
    }
    /* the losses came from the batches read: were they read? */
    if (rc == ZT_OK) rc = zt_task_data_status();
    if (rc == ZT_OK) rc = zt_comm_sum_doubles(rows, m->B); /* a row's own sum plus zeros */
    double s = 0;
    for (int k = 0; rc == ZT_OK && k < m->B; k++) s += rows[k];
    free(rows);
    *sum = s;
    return rc;
}

enum zt_status zt_gpt2_step_wait(zt_gpt2_t m, double *loss, struct zt_step_info *info) {
    struct zt_step_info own;
    if (!info) info = &own;
    ZT_CHECK(zt_engine_step_wait(m->e, info));
    if (m->swap) ZT_CHECK(zt_io_service_status()); /* an input on NVMe that did not come back */
    double s = 0;
    ZT_CHECK(global_loss_sum(m, &s));
    *loss = s / ((double)m->B * (double)m->active); /* the positions that carry a loss */
    return zt_engine_check_step(m->e, *loss, info);
}

double zt_gpt2_step_flops(zt_gpt2_t m) {
    double B = m->B, T = m->s.seq_len, C = m->s.n_embd, L = m->s.n_layer, V = m->s.vocab_size;
    /* forward multiply-adds per token: 12 C^2 per layer in linears + 2 T C (causal ~ T C) in
     * attention, plus V C in the head; training = 3x forward, 2 flops per multiply-add */
    double fwd = L * (12 * C * C + 2 * T * C) + V * C;
    return 2.0 * 3.0 * fwd * B * T;
}

int64_t zt_gpt2_numel(const struct zt_model_shape *s) {
    int64_t params = 0;
    char name[160];
    for (int i = 0; i < zt_gpt2_nparams(s); i++) {
        int ndim;
        int64_t shape[2];
        zt_gpt2_param_info(s, i, name, sizeof name, &ndim, shape);
        params += shape[0] * (ndim == 2 ? shape[1] : 1);
    }
    return params;
}

int64_t zt_gpt2_mem_estimate(const struct zt_model_shape *s, const struct zt_config *cfg) {
    /* fp32 values, gradients and the two Adam moments; the activations with one block */
    const int64_t acts = zt_gpt2_act_bytes(s, cfg, 1);
    return acts < 0 ? -1 : 16 * zt_gpt2_numel(s) + acts;
}

// ----------------------------------------------------------------------------
// the backward's gradient order (micro_batch above), for the memory model

int zt_gpt2_grad_events(const struct zt_model_shape *s, int *ev) {
    const int L = s->n_layer, lnfw = 2 + P_NLAYER * L, lnfb = lnfw + 1;
    int n = 0;
#define EV_(x) (ev ? (void)(ev[n] = (x)) : (void)0, n++)
    EV_(0);                        /* the head's weight gradient: wte */
    EV_(lnfw);                     /* ln_f's backward */
    EV_(lnfb);
    EV_(~lnfw);                    /* ln_f declared ready */
    EV_(~lnfb);
    for (int l = L - 1; l >= 0; l--) {
        const int p0 = 2 + P_NLAYER * l; /* the layer's backward writes all its 12, then ready */
        for (int k = P_NLAYER - 1; k >= 0; k--) EV_(p0 + k);
        for (int k = 0; k < P_NLAYER; k++) EV_(~(p0 + k));
    }
    EV_(0);                        /* the encoder's backward: wte, wpe */
    EV_(1);
    EV_(~0);
    EV_(~1);
#undef EV_
    return n;
}
