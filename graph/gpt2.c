/*
 * graph/gpt2.c: GPT-2 forward and backward as loops of task inserts (llm.c's gpt2_forward /
 * gpt2_backward, with every call a zt_task_*).
 *
 * Layer: graph/. No starpu_* calls. Activations are per micro-batch and reused by the next one;
 * StarPU's sequential consistency orders the reuse. Gradient accumulation across micro-batches
 * happens in micro-batch order (parameter gradients are +=).
 */
#include <math.h>         /* sqrtf */
#include <stdio.h>        /* snprintf, fprintf */
#include <stdlib.h>       /* calloc */
#include <string.h>       /* strcmp, strncmp, memcmp */
#include "zt_comm.h"      /* zt_comm_sum_double, zt_comm_rank */
#include "zt_gpt2.h"      /* our API */
#include "zt_safetensors.h" /* struct zt_safetensors, zt_st_find */
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
    /* activations (one micro-batch) */
    zt_tensor_t inputs, targets;         /* [Bm,T] int32 */
    zt_tensor_t encoded;                 /* [N,C] */
    struct zt_layer_acts *layer_acts;    /* [L] */
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

static zt_param_t declare(zt_engine_t e, const char *name, int ndim, int64_t d0, int64_t d1,
                       enum zt_init init, float std) {
    int64_t shape[2] = {d0, d1};
    return zt_engine_param(e, name, ndim, shape, init, std);
}

enum zt_status zt_gpt2_init(zt_gpt2_t *out, zt_engine_t e, const struct zt_model_shape *s) {
    *out = NULL;
    const struct zt_config *cfg = zt_engine_config(e);
    int V = s->vocab_size, T = s->seq_len, C = s->n_embd, L = s->n_layer, NH = s->n_head;
    if (V < 1 || T < 1 || C < 1 || L < 1 || NH < 1 || C % NH != 0)
        return zt_error_set(ZT_ERR_CONFIG, "model: bad shape V=%d T=%d C=%d L=%d NH=%d", V, T, C,
                            L, NH);
    struct zt_gpt2 *m = calloc(1, sizeof *m);
    if (!m) return zt_error_set(ZT_ERR_NOMEM, "model: out of memory");
    m->e = e;
    m->s = *s;
    m->Bm = cfg->micro_batch;
    m->accum = cfg->grad_accum;
    m->B = cfg->train_batch_size;
    m->layer_params = calloc((size_t)L, sizeof *m->layer_params);
    m->layer_acts = calloc((size_t)L, sizeof *m->layer_acts);
    m->losses = calloc((size_t)m->accum, sizeof *m->losses);
    if (!m->layer_params || !m->layer_acts || !m->losses) {
        zt_gpt2_free(m);
        return zt_error_set(ZT_ERR_NOMEM, "model: out of memory");
    }
    *out = m;
    /* ---- parameters, HF GPT-2 names and layouts ---- */
    float std = 0.02f, pstd = 0.02f / sqrtf(2.0f * L);
    char n[160];
    m->wte = declare(e, "transformer.wte.weight", 2, V, C, ZT_INIT_NORMAL, std);
    m->wpe = declare(e, "transformer.wpe.weight", 2, T, C, ZT_INIT_NORMAL, std);
    for (int l = 0; l < L; l++) {
        for (int k = 0; k < P_NLAYER; k++) {
            const struct layer_param *lp = &g_layer_params[k];
            snprintf(n, sizeof n, "transformer.h.%d.%s", l, lp->suffix);
            zt_param_t *p = &m->layer_params[l][k];
            *p = declare(e, n, lp->ndim, (int64_t)lp->r * C, (int64_t)lp->c * C, lp->init,
                         lp->proj ? pstd : std);
            if (!*p) return zt_error_last_code();
        }
    }
    m->lnfw = declare(e, "transformer.ln_f.weight", 1, C, 0, ZT_INIT_ONE, 0);
    m->lnfb = declare(e, "transformer.ln_f.bias", 1, C, 0, ZT_INIT_ZERO, 0);
    if (!m->wte || !m->wpe || !m->lnfw || !m->lnfb) return zt_error_last_code();
    ZT_CHECK(zt_engine_finalize(e));
    /* ---- activations (rows per sequence: T tokens; att: 1 row per sequence) ----
     * X: the model's activations and their gradients, in the engine's type (bf16/fp16 in mixed
     * precision); F: fp32 always (layernorm statistics and per-position losses, as PyTorch keeps
     * them in fp32 under bf16) */
    const enum zt_dtype X = zt_engine_dtype(e), F = ZT_DTYPE_F32;
#define ACT(t, name, rps, cols, dt) ZT_CHECK(zt_engine_act_dtype(e, name, rps, cols, dt, &(t)))
    ZT_CHECK(zt_engine_act(e, "inputs", 1, T, sizeof(int32_t), &m->inputs));
    ZT_CHECK(zt_engine_act(e, "targets", 1, T, sizeof(int32_t), &m->targets));
    ACT(m->encoded, "encoded", T, C, X);
    for (int l = 0; l < L; l++) {
        struct zt_layer_acts *a = &m->layer_acts[l];
        ACT(a->ln1, "ln1", T, C, X);
        ACT(a->ln1_mean, "ln1_mean", T, 1, F);
        ACT(a->ln1_rstd, "ln1_rstd", T, 1, F);
        ACT(a->qkv, "qkv", T, 3 * C, X);
        ACT(a->atty, "atty", T, C, X);
        ACT(a->att, "att", 1, (int64_t)NH * T * T, X);
        ACT(a->res2, "res2", T, C, X);
        ACT(a->ln2, "ln2", T, C, X);
        ACT(a->ln2_mean, "ln2_mean", T, 1, F);
        ACT(a->ln2_rstd, "ln2_rstd", T, 1, F);
        ACT(a->fch, "fch", T, 4 * C, X);
        ACT(a->fch_gelu, "fch_gelu", T, 4 * C, X);
        ACT(a->res3, "res3", T, C, X);
    }
    ACT(m->lnf, "lnf", T, C, X);
    ACT(m->lnf_mean, "lnf_mean", T, 1, F);
    ACT(m->lnf_rstd, "lnf_rstd", T, 1, F);
    ACT(m->logits, "logits", T, V, X);
    for (int j = 0; j < m->accum; j++) ACT(m->losses[j], "losses", T, 1, F);
    ACT(m->proj, "proj", T, C, X);
    ACT(m->dres, "dresidual", T, C, X);
    ACT(m->dC, "dC", T, C, X);
    ACT(m->d3C, "d3C", T, 3 * C, X);
    ACT(m->d4C, "d4C", T, 4 * C, X);
#undef ACT
    ZT_CHECK(zt_engine_act_partials(e, "ln_partials", 2 * C, &m->lnpart));
    return ZT_OK;
}

zt_tensor_t zt_gpt2_logits(zt_gpt2_t m) { return m->logits; }

void zt_gpt2_free(zt_gpt2_t m) {
    if (!m) return;
    free(m->layer_params);
    free(m->layer_acts);
    free(m->losses);
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

static enum zt_status micro_batch(zt_gpt2_t m, const struct zt_tokens *tok, int64_t step, int mb,
                                  int train) {
    zt_engine_t e = m->e;
    int nb = zt_engine_nblk(e), L = m->s.n_layer, NH = m->s.n_head;
    struct zt_step_ctx c = zt_engine_ctx(e, ZT_PRIO_IO, -1, L, mb);
    /* rank r's micro-batch j holds rows (j * N + r) * Bm .. + Bm - 1 of the step's global batch
     * (README, "Data parallelism"): N ranks train on exactly the rows one rank would */
    const int N = zt_engine_world_size(e), r = zt_engine_rank(e);
    FOR_BLK ZT_CHECK(zt_task_load_batch(&c.opts, m->inputs, m->targets, b, tok, step, m->B,
                                        (mb * N + r) * m->Bm));
    /* ---- forward ---- */
    c = zt_engine_ctx(e, ZT_PRIO_FORWARD, -1, L, mb);
    FOR_BLK ZT_CHECK(zt_task_encoder_forward(&c.opts, m->encoded, b, m->inputs, V_(&c, m->wte),
                                             V_(&c, m->wpe)));
    zt_tensor_t res = m->encoded;
    for (int l = 0; l < L; l++) {
        struct zt_layer_acts *a = &m->layer_acts[l];
        zt_param_t *p = m->layer_params[l];
        c = zt_engine_ctx(e, ZT_PRIO_FORWARD, l, L, mb);
        const struct zt_task_opts *o = &c.opts;
        FOR_BLK ZT_CHECK(zt_task_layernorm_forward(o, a->ln1, a->ln1_mean, a->ln1_rstd, b, res,
                                                   V_(&c, p[P_LN1W]), V_(&c, p[P_LN1B])));
        ZT_CHECK(linear_forward(&c, nb, a->qkv, a->ln1, p[P_QKVW], p[P_QKVB]));
        FOR_BLK ZT_CHECK(zt_task_attention_forward(o, a->atty, a->att, b, a->qkv, NH));
        ZT_CHECK(linear_forward(&c, nb, m->proj, a->atty, p[P_ATTPW], p[P_ATTPB]));
        FOR_BLK ZT_CHECK(zt_task_residual_forward(o, a->res2, b, res, m->proj));
        FOR_BLK ZT_CHECK(zt_task_layernorm_forward(o, a->ln2, a->ln2_mean, a->ln2_rstd, b,
                                                   a->res2, V_(&c, p[P_LN2W]),
                                                   V_(&c, p[P_LN2B])));
        ZT_CHECK(linear_forward(&c, nb, a->fch, a->ln2, p[P_FCW], p[P_FCB]));
        FOR_BLK ZT_CHECK(zt_task_gelu_forward(o, a->fch_gelu, b, a->fch));
        ZT_CHECK(linear_forward(&c, nb, m->proj, a->fch_gelu, p[P_FCPW], p[P_FCPB]));
        FOR_BLK ZT_CHECK(zt_task_residual_forward(o, a->res3, b, a->res2, m->proj));
        res = a->res3;
    }
    c = zt_engine_ctx(e, ZT_PRIO_FORWARD, L, L, mb);
    FOR_BLK ZT_CHECK(zt_task_layernorm_forward(&c.opts, m->lnf, m->lnf_mean, m->lnf_rstd, b, res,
                                               V_(&c, m->lnfw), V_(&c, m->lnfb)));
    FOR_BLK ZT_CHECK(zt_task_matmul_t_forward(&c.opts, m->logits, b, m->lnf, V_(&c, m->wte)));
    /* d(mean over all B*T positions of the step)/dlogit: 1/(B*T) for every micro-batch, times
     * the loss scale (fp16: every gradient of the backward is that multiple of the true one) */
    float dscale = train ? 1.0f / ((float)m->B * (float)m->s.seq_len) : 0.0f;
    if (train && zt_engine_loss_scale(e) != 1.0f) dscale *= zt_engine_loss_scale(e);
    FOR_BLK ZT_CHECK(zt_task_crossentropy(&c.opts, m->logits, m->losses[mb], b, m->targets,
                                          dscale));
    if (!train) return ZT_OK;
    /* ---- backward ---- */
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

enum zt_status zt_gpt2_step_submit(zt_gpt2_t m, const struct zt_tokens *tok, int64_t step,
                                   int train) {
    if (train) ZT_CHECK(zt_engine_step_begin(m->e, step));
    for (int mb = 0; mb < m->accum; mb++) ZT_CHECK(micro_batch(m, tok, step, mb, train));
    if (train) ZT_CHECK(zt_engine_step_end(m->e));
    return ZT_OK;
}

enum zt_status zt_gpt2_step_wait(zt_gpt2_t m, double *loss, struct zt_step_info *info) {
    struct zt_step_info own;
    if (!info) info = &own;
    ZT_CHECK(zt_engine_step_wait(m->e, info));
    double s = 0;
    int64_t n = 0;
    for (int mb = 0; mb < m->accum; mb++) { /* fixed order, double accumulation */
        ZT_CHECK(zt_tensor_acquire(m->losses[mb], 0));
        const float *l = zt_tensor_data(m->losses[mb]);
        int64_t k = zt_tensor_numel(m->losses[mb]);
        for (int64_t i = 0; i < k; i++) s += l[i];
        n += k;
        zt_tensor_release(m->losses[mb]);
    }
    ZT_CHECK(zt_task_data_status()); /* the losses came from the batches read: were they read? */
    /* the global loss: every rank's sum, added in rank order, over every position of the step */
    double dn = (double)n;
    ZT_CHECK(zt_comm_sum_double(&s));
    ZT_CHECK(zt_comm_sum_double(&dn));
    *loss = s / dn;
    return zt_engine_check_step(m->e, *loss, info);
}

double zt_gpt2_step_flops(zt_gpt2_t m) {
    double B = m->B, T = m->s.seq_len, C = m->s.n_embd, L = m->s.n_layer, V = m->s.vocab_size;
    /* forward multiply-adds per token: 12 C^2 per layer in linears + 2 T C (causal ~ T C) in
     * attention, plus V C in the head; training = 3x forward, 2 flops per multiply-add */
    double fwd = L * (12 * C * C + 2 * T * C) + V * C;
    return 2.0 * 3.0 * fwd * B * T;
}

int64_t zt_gpt2_mem_estimate(const struct zt_model_shape *s, const struct zt_config *cfg) {
    int64_t V = s->vocab_size, T = s->seq_len, C = s->n_embd, L = s->n_layer, NH = s->n_head;
    int64_t params = V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C;
    int64_t N = (int64_t)cfg->micro_batch * T;
    int64_t acts = N * C * (1 + L * 14 + 1 + 6) + N * (L * 4 + 2) + N * V +
                   (int64_t)cfg->micro_batch * L * NH * T * T + N * (cfg->grad_accum + 2);
    return 4 * (4 * params + acts);
}

// ----------------------------------------------------------------------------
// weights files: which tensors the model takes

/* what a tensor of a weights file is to a GPT-2 of a given shape */
enum file_tensor {
    FT_TAKEN,        /* one of the model's parameters */
    FT_LEFT,         /* what Hugging Face files hold besides them: a layer's attention mask
                      * buffers (attn.bias, attn.masked_bias), lm_head.weight equal to wte */
    FT_OTHER_LAYER,  /* a tensor of a layer the model does not have */
    FT_UNTIED_HEAD,  /* lm_head.weight differing from transformer.wte.weight */
    FT_UNKNOWN,
};

/* the layer number at s ("<l>." with no sign and no leading zero), -1 when there is none;
 * *rest: after the dot */
static long layer_number(const char *s, const char **rest) {
    long l = 0;
    const char *c = s;
    for (; *c >= '0' && *c <= '9' && c - s < 9; c++) l = l * 10 + (*c - '0');
    if (c == s || *c != '.' || (s[0] == '0' && c - s > 1)) return -1;
    *rest = c + 1;
    return l;
}

/* lm_head.weight is the model's wte (tied): accepted when it is the same bytes */
static int head_is_wte(const struct zt_safetensors *st, const struct zt_st_tensor *head) {
    const struct zt_st_tensor *wte = zt_st_find(st, "transformer.wte.weight");
    if (!wte || wte->dtype != head->dtype || wte->ndim != head->ndim ||
        wte->end - wte->begin != head->end - head->begin)
        return 0;
    for (int d = 0; d < wte->ndim; d++)
        if (wte->shape[d] != head->shape[d]) return 0;
    return memcmp(st->data + wte->begin, st->data + head->begin, wte->end - wte->begin) == 0;
}

static enum file_tensor classify(const struct zt_model_shape *sh, const struct zt_safetensors *st,
                                 const struct zt_st_tensor *t) {
    static const char *const whole_model[] = {"transformer.wte.weight", "transformer.wpe.weight",
                                              "transformer.ln_f.weight", "transformer.ln_f.bias"};
    static const char prefix[] = "transformer.h.";
    for (size_t i = 0; i < sizeof whole_model / sizeof *whole_model; i++)
        if (!strcmp(t->name, whole_model[i])) return FT_TAKEN;
    if (!strcmp(t->name, "lm_head.weight"))
        return head_is_wte(st, t) ? FT_LEFT : FT_UNTIED_HEAD;
    if (strncmp(t->name, prefix, sizeof prefix - 1) != 0) return FT_UNKNOWN;
    const char *suffix = NULL;
    long l = layer_number(t->name + sizeof prefix - 1, &suffix);
    if (l < 0) return FT_UNKNOWN;
    enum file_tensor kind = FT_UNKNOWN;
    for (int k = 0; k < P_NLAYER; k++)
        if (!strcmp(suffix, g_layer_params[k].suffix)) kind = FT_TAKEN;
    if (!strcmp(suffix, "attn.bias") || !strcmp(suffix, "attn.masked_bias")) kind = FT_LEFT;
    if (kind != FT_UNKNOWN && l >= sh->n_layer) kind = FT_OTHER_LAYER;
    return kind;
}

enum { NAMED = 3 }; /* tensors the model does not take that a message names */

/* rank 0, relaxed: one warning line naming the first few tensors ignored */
static void warn_ignored(const struct zt_safetensors *st, const int *first, int n) {
    char names[4 * ZT_ST_MAX_NAME] = "";
    size_t at = 0;
    for (int k = 0; k < n && k < NAMED; k++)
        at += (size_t)snprintf(names + at, sizeof names - at, "%s'%s'", k ? ", " : "",
                               st->t[first[k]].name);
    fprintf(stderr, "zerotask: warning: safetensors %s: ignored %d tensor(s) the model does not "
                    "have (--init-from-relaxed): %s%s\n", st->path, n, names,
            n > NAMED ? ", ..." : "");
}

enum zt_status zt_gpt2_check_weights(const struct zt_model_shape *sh,
                                     const struct zt_safetensors *st, int relaxed) {
    int first[NAMED], n = 0; /* the first tensors not taken (header order), how many in all */
    enum file_tensor first_kind = FT_TAKEN;
    for (int i = 0; i < st->n; i++) {
        enum file_tensor kind = classify(sh, st, &st->t[i]);
        if (kind == FT_TAKEN || kind == FT_LEFT) continue;
        if (n == 0) first_kind = kind;
        if (n < NAMED) first[n] = i;
        n++;
    }
    if (n == 0) return ZT_OK;
    if (relaxed) {
        if (zt_comm_rank() == 0) warn_ignored(st, first, n);
        return ZT_OK;
    }
    char why[96] = "";
    if (first_kind == FT_OTHER_LAYER) snprintf(why, sizeof why, " (n_layer is %d)", sh->n_layer);
    if (first_kind == FT_UNTIED_HEAD)
        snprintf(why, sizeof why, " (the model ties it to transformer.wte.weight, which differs)");
    return zt_error_set(ZT_ERR_CKPT_CORRUPT, "safetensors %s: %d tensor(s) the model does not "
                        "have, first '%s'%s; --init-from-relaxed loads anyway", st->path, n,
                        st->t[first[0]].name, why);
}
