/*
 * graph/gpt2.c: GPT-2's parameters and its forward and backward as loops of task inserts
 * (llm.c's gpt2_forward / gpt2_backward, with every call a zt_task_*).
 *
 * Layer: graph/. No starpu_* calls. Activations are per micro-batch and reused by the next one
 * (gpt2_acts.c); StarPU's sequential consistency orders the reuse. Gradient accumulation across
 * micro-batches happens in micro-batch order (parameter gradients are +=). A pipeline stage
 * (docs/pipeline.md) holds and runs only its layer specs: it receives its input from the stage
 * before and sends its output on, and backward the gradients the other way, as tasks.
 */
#include <math.h>         /* sqrtf */
#include <stdio.h>        /* snprintf */
#include <stdlib.h>       /* calloc */
#include "zt_comm.h"      /* zt_comm_sum_doubles */
#include "zt_gpt2.h"      /* our API */
#include "zt_pipe_plan.h" /* a pipeline's cut of the layers into stages */
#include "zt_tasks.h"     /* zt_task_* */
#include "zt_tokens.h"    /* struct zt_tokens */
#include "gpt2_impl.h"    /* struct zt_gpt2, the activation sets; zt_recompute.h */

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

int zt_gpt2_param_in_specs(const struct zt_model_shape *s, int i, int spec0, int spec1) {
    const int L = s->n_layer, last = 2 + P_NLAYER * L;
#define IN_(k) ((k) >= spec0 && (k) < spec1)
    if (i == 0) return IN_(0) || IN_(L + 2);
    if (i == 1) return IN_(0);
    if (i >= last) return IN_(L + 1);
    return IN_(1 + (i - 2) / P_NLAYER);
#undef IN_
}

/* whether this stage holds parameter i */
static int param_held(const struct zt_gpt2 *m, int i) {
    return zt_gpt2_param_in_specs(&m->s, i, m->spec0, m->spec1);
}

/* every parameter this stage holds, in zt_gpt2_param_info's order, HF GPT-2 names and layouts;
 * the others' draws skipped, so that every stage starts from a 1-rank run's values */
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
        if (!param_held(m, i)) {
            zt_engine_param_skip(m->e, ndim, shape, init);
            continue;
        }
        *p = zt_engine_param(m->e, name, ndim, shape, init, std);
        if (!*p) return zt_error_last_code();
    }
    /* the embedding's stage and the head's both hold wte: their gradients are summed */
    if (m->wte && holds(m, 0) != holds(m, m->s.n_layer + 2))
        ZT_CHECK(zt_engine_pipe_tie(m->e, m->wte));
    return ZT_OK;
}

/* this rank's stage of the pipeline, its layer specs and neighbours */
static enum zt_status plan_stage(zt_gpt2_t m, const struct zt_config *cfg) {
    int stages = 1;
    const int st = zt_engine_pipe_stage(m->e, &stages);
    m->prev = m->next = -1;
    ZT_CHECK(zt_pipe_stage_specs(&m->s, &cfg->pipeline, cfg->path, st, &m->spec0, &m->spec1));
    if (stages == 1) return ZT_OK;
    if (st > 0) m->prev = zt_engine_pipe_rank(m->e, st - 1);
    if (st < stages - 1) m->next = zt_engine_pipe_rank(m->e, st + 1);
    return ZT_OK;
}

enum zt_status zt_gpt2_check_shape(const struct zt_model_shape *s) {
    int V = s->vocab_size, T = s->seq_len, C = s->n_embd, L = s->n_layer, NH = s->n_head;
    if (V < 1 || T < 1 || C < 1 || L < 1 || NH < 1 || C % NH != 0)
        return zt_error_set(ZT_ERR_CONFIG, "model: bad shape V=%d T=%d C=%d L=%d NH=%d", V, T, C,
                            L, NH);
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
    if (!m->layer_params || !m->layer_acts || !m->losses) {
        zt_gpt2_free(m);
        return zt_error_set(ZT_ERR_NOMEM, "model: out of memory");
    }
    *out = m;
    ZT_CHECK(plan_stage(m, cfg));
    /* a stage plans the checkpointing of its own layers (spec 1 + l is layer l) */
    ZT_CHECK(zt_gpt2_plan_layers(cfg, s->n_layer, m->spec0 - 1, m->spec1 - 1, &m->rc));
    m->window = calloc((size_t)m->rc.window + 1, sizeof *m->window); /* + 1: never calloc(0) */
    if (!m->window) return zt_error_set(ZT_ERR_NOMEM, "model: out of memory");
    ZT_CHECK(declare_params(m));
    ZT_CHECK(zt_engine_finalize(e));
    return zt_gpt2_acts_make(m, cfg);
}

zt_tensor_t zt_gpt2_logits(zt_gpt2_t m) { return m->logits; }

void zt_gpt2_free(zt_gpt2_t m) {
    if (!m) return;
    zt_gpt2_acts_free(m);
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

/* what a stage boundary after layer spec k carries: the embeddings (k = 0) or block k-1's
 * output (its gradient, backward: in dres) */
static zt_tensor_t boundary(const struct zt_gpt2 *m, int k) {
    return k == 0 ? m->encoded : m->layer_acts[k - 1].res3;
}

/* every block of t to (send) or from (recv) a neighbouring stage */
static enum zt_status exchange(zt_gpt2_t m, const struct zt_step_ctx *c, zt_tensor_t t, int send,
                               int peer, int tag) {
    const int nb = zt_engine_nblk(m->e);
    FOR_BLK ZT_CHECK(send ? zt_task_send(&c->opts, t, b, peer, tag)
                          : zt_task_recv(&c->opts, t, b, peer, tag));
    return ZT_OK;
}

/* this stage's forward of micro-batch mb: its input (the embeddings, or the previous stage's
 * output), its blocks, its output to the next stage or the final norm, head and loss; *res: the
 * input of the final norm (for the backward) */
static enum zt_status stage_forward(zt_gpt2_t m, const struct zt_gpt2_batch *d, int mb, int train,
                                   zt_tensor_t *res_out) {
    zt_engine_t e = m->e;
    int nb = zt_engine_nblk(e), L = m->s.n_layer;
    struct zt_step_ctx c = zt_engine_ctx(e, ZT_PRIO_IO, -1, L, mb);
    const int row0 = zt_gpt2_rank_rows(m, mb, NULL, NULL);
    FOR_BLK ZT_CHECK(zt_task_load_rows(&c.opts, m->inputs, m->targets, b, d->files, d->rows,
                                       row0, m->active));
    c = zt_engine_ctx(e, ZT_PRIO_FORWARD, -1, L, mb);
    zt_tensor_t res = m->encoded;
    if (holds(m, 0)) {
        FOR_BLK ZT_CHECK(zt_task_encoder_forward(&c.opts, m->encoded, b, m->inputs,
                                                 V_(&c, m->wte), V_(&c, m->wpe)));
    } else { /* the previous stage's output */
        res = boundary(m, m->spec0 - 1);
        ZT_CHECK(exchange(m, &c, res, 0, m->prev, ZT_PIPE_TAG_ACT));
    }
    for (int l = 0; l < L; l++) {
        if (!holds(m, 1 + l)) continue;
        c = zt_engine_ctx(e, ZT_PRIO_FORWARD, l, L, mb);
        if (train) ZT_CHECK(zt_ckpt_swap_out(m->swap, &c, l)); /* its input, to NVMe */
        ZT_CHECK(attention_forward(m, l, &c, res, 1));
        ZT_CHECK(mlp_forward(m, l, &c, 1));
        /* offload cpu: its input to host memory until the backward (devices only) */
        if (train && m->inputs_to_host && zt_recompute_needed(&m->rc, l)) zt_tensor_wont_use(res);
        res = m->layer_acts[l].res3;
    }
    *res_out = res;
    if (m->next >= 0) /* this stage's output to the next: the final norm is not here */
        return exchange(m, &c, boundary(m, m->spec1 - 1), 1, m->next, ZT_PIPE_TAG_ACT);
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
    return ZT_OK;
}

/* the last stage's head and final norm backward: dres = d(the norm's input) */
static enum zt_status head_backward(zt_gpt2_t m, int mb, zt_tensor_t res) {
    zt_engine_t e = m->e;
    int nb = zt_engine_nblk(e), L = m->s.n_layer;
    struct zt_step_ctx cb = zt_engine_ctx(e, ZT_PRIO_BACKWARD, L, L, mb);
    struct zt_step_ctx cw = zt_engine_ctx(e, ZT_PRIO_WEIGHT_GRAD, L, L, mb);
    FOR_BLK ZT_CHECK(zt_task_matmul_t_backward_inp(&cb.opts, m->dC, b, m->logits,
                                                   V_(&cb, m->wte), 0));
    for (int j = 0; j < wgrad_tasks(m, G_(&cw, m->wte)); j++)
        ZT_CHECK(zt_task_matmul_t_backward_weight(&cw.opts, G_(&cw, m->wte), wgrad_blk(m, j),
                                                  m->logits, m->lnf));
    /* a pipeline's last stage: no embedding backward follows for its copy of wte */
    if (!holds(m, 0)) ZT_CHECK(zt_engine_grad_ready(e, &cw, m->wte));
    ZT_CHECK(zt_task_zero(&cb.opts, m->dres));
    ZT_CHECK(layernorm_backward(m, L, mb, m->dC, res, m->lnfw, m->lnfb, m->lnf_mean,
                                m->lnf_rstd));
    /* this micro-batch writes no more gradient of ln_f: its bucket may be reduced */
    ZT_CHECK(zt_engine_grad_ready(e, &cw, m->lnfw));
    return zt_engine_grad_ready(e, &cw, m->lnfb);
}

/* block l's backward: dres = d(its output) in, d(its input) out */
static enum zt_status block_backward(zt_gpt2_t m, int l, int mb) {
    zt_engine_t e = m->e;
    int nb = zt_engine_nblk(e), L = m->s.n_layer, NH = m->s.n_head;
    struct zt_layer_acts *a = &m->layer_acts[l];
    zt_param_t *p = m->layer_params[l];
    zt_tensor_t res_in = l == 0 ? m->encoded : m->layer_acts[l - 1].res3;
    struct zt_step_ctx cb = zt_engine_ctx(e, ZT_PRIO_BACKWARD, l, L, mb);
    struct zt_step_ctx cw = zt_engine_ctx(e, ZT_PRIO_WEIGHT_GRAD, l, L, mb);
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
    return ZT_OK;
}

/* One micro-batch through this stage (every layer without a pipeline). The backward's order of
 * taking and finishing gradients is listed again by zt_gpt2_grad_events for the memory model;
 * test_memory_model fails if they part. */
static enum zt_status micro_batch(zt_gpt2_t m, const struct zt_gpt2_batch *d, int mb,
                                  int train) {
    zt_engine_t e = m->e;
    const int L = m->s.n_layer;
    zt_tensor_t res = NULL;
    if (m->nsets > 1) zt_gpt2_acts_use(m, mb % m->nsets);
    ZT_CHECK(stage_forward(m, d, mb, train, &res));
    if (!train) return ZT_OK;
    struct zt_step_ctx cb = zt_engine_ctx(e, ZT_PRIO_BACKWARD, L, L, mb);
    if (m->next < 0) ZT_CHECK(head_backward(m, mb, res));
    else /* d(this stage's output), from the next stage */
        ZT_CHECK(exchange(m, &cb, m->dres, 0, m->next, ZT_PIPE_TAG_GRAD));
    for (int l = L - 1; l >= 0; l--)
        if (holds(m, 1 + l)) ZT_CHECK(block_backward(m, l, mb));
    if (m->prev >= 0) { /* d(this stage's input), to the previous stage */
        cb = zt_engine_ctx(e, ZT_PRIO_BACKWARD, m->spec0 - 1, L, mb);
        return exchange(m, &cb, m->dres, 1, m->prev, ZT_PIPE_TAG_GRAD);
    }
    struct zt_step_ctx cw = zt_engine_ctx(e, ZT_PRIO_WEIGHT_GRAD, 0, L, mb);
    ZT_CHECK(zt_task_encoder_backward(&cw.opts, G_(&cw, m->wte), G_(&cw, m->wpe), m->dres,
                                      m->inputs));
    ZT_CHECK(zt_engine_grad_ready(e, &cw, m->wte));
    return zt_engine_grad_ready(e, &cw, m->wpe);
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
    const int here = m->next < 0; /* a pipeline: the head's stage holds the losses */
    for (int mb = 0; here && mb < m->accum && (rc = zt_tensor_acquire(m->losses[mb], 0)) == ZT_OK;
         mb++) {
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

/* the parameters (elements) of the layer specs [spec0, spec1) */
static int64_t stage_numel(const struct zt_model_shape *s, int spec0, int spec1) {
    int64_t params = 0;
    char name[160];
    for (int i = 0; i < zt_gpt2_nparams(s); i++) {
        int ndim;
        int64_t shape[2];
        zt_gpt2_param_info(s, i, name, sizeof name, &ndim, shape);
        if (zt_gpt2_param_in_specs(s, i, spec0, spec1))
            params += shape[0] * (ndim == 2 ? shape[1] : 1);
    }
    return params;
}

int64_t zt_gpt2_numel(const struct zt_model_shape *s) { return stage_numel(s, 0, s->n_layer + 3); }

int64_t zt_gpt2_stage_mem_estimate(const struct zt_model_shape *s, const struct zt_config *cfg,
                                   int spec0, int spec1) {
    /* fp32 values, gradients and the two Adam moments; the activations with one block */
    const int64_t acts = zt_gpt2_stage_act_bytes(s, cfg, 1, spec0, spec1);
    return acts < 0 ? -1 : 16 * stage_numel(s, spec0, spec1) + acts;
}

int64_t zt_gpt2_mem_estimate(const struct zt_model_shape *s, const struct zt_config *cfg) {
    return zt_gpt2_stage_mem_estimate(s, cfg, 0, s->n_layer + 3);
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
