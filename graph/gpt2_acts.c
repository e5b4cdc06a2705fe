/*
 * graph/gpt2_acts.c: GPT-2's activations: one table of every tensor a micro-batch makes (per
 * layer, before and after the layers) that zt_gpt2_init allocates and zt_gpt2_act_bytes sizes;
 * activation checkpointing's recompute window aliased into the checkpointed layers and their
 * inputs on NVMe; a pipeline stage's sets of a micro-batch's activations.
 *
 * Layer: graph/ (behind gpt2.c, gpt2_impl.h). The tensors are the engine's (zt_engine_act*).
 */
#include <stddef.h>       /* offsetof */
#include <stdint.h>       /* SIZE_MAX */
#include <stdlib.h>       /* calloc */
#include <string.h>       /* memcpy */
#include "gpt2_impl.h"    /* struct zt_gpt2 */

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
/* after the layers: a micro-batch's own (kept until its backward), then the shared ones */
static const struct act_row g_tail_set_acts[] = {
    {"lnf", M_(lnf), D_T, D_C, A_X},
    {"lnf_mean", M_(lnf_mean), D_T, D_1, A_F32},
    {"lnf_rstd", M_(lnf_rstd), D_T, D_1, A_F32},
    {"logits", M_(logits), D_T, D_V, A_X},
};
static const struct act_row g_tail_acts[] = {
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
enum layer_part { PART_ALL, PART_KEPT, PART_WINDOW, PART_OUTPUT, PART_NONE };

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
    if (part == PART_NONE) return 0;
    if (part == PART_OUTPUT) return r->off == offsetof(struct zt_layer_acts, res3);
    return part == PART_ALL || (part == PART_WINDOW) == recomputed(r, mode);
}

/* the layer specs [spec0, spec1) of the stage whose activations are made or sized (the whole
 * model without a pipeline) */
struct spec_range {
    int spec0, spec1;
};

static int in_range(const struct spec_range *r, int k) { return k >= r->spec0 && k < r->spec1; }

/* Which of layer l's activations a pipeline stage makes: its own layers' (own), only the output
 * of the layer just before its first (its input, received from the stage before), none of the
 * other layers; every layer without a pipeline. */
static enum layer_part stage_part(const struct spec_range *r, int l, enum layer_part own) {
    if (in_range(r, 1 + l)) return own;
    return l == r->spec0 - 2 ? PART_OUTPUT : PART_NONE;
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

/* the config's checkpointed layers among [layer0, layer1) and their recompute window */
enum zt_status zt_gpt2_plan_layers(const struct zt_config *cfg, int L, int layer0, int layer1,
                                   struct zt_recompute_plan *rc) {
    unsigned char *ckpt = calloc((size_t)L + 1, 1);
    if (!ckpt) return zt_error_set(ZT_ERR_NOMEM, "model: out of memory");
    for (int l = layer0 > 0 ? layer0 : 0; l < L && l < layer1; l++)
        ckpt[l] = (unsigned char)zt_actckpt_layer(&cfg->actckpt, l);
    enum zt_status st = zt_recompute_init(rc, L, ckpt, 0);
    free(ckpt);
    return st;
}

/* The sets of a micro-batch's activations a stage keeps: 1 without a pipeline; 1F1B
 * (docs/pipeline.md) `stages` sets, GPipe one per micro-batch (at most the accumulation).
 * Micro-batch mb uses set mb % sets, so its forward waits (StarPU's order by data) until the
 * backward of micro-batch mb - sets is done with the set: the schedule's memory bound, with no
 * instruction list. */
static int act_sets(const struct zt_config *cfg) {
    if (cfg->pipeline.stages <= 1) return 1;
    const int n = cfg->pipeline.schedule == ZT_PIPE_GPIPE ? cfg->grad_accum
                                                           : cfg->pipeline.stages;
    return n < cfg->grad_accum ? n : cfg->grad_accum;
}

/* what for_each_act walks: the model (NULL when sizing), its shape, config and checkpointed
 * layers, and what to do with each activation */
struct act_walk {
    zt_gpt2_t m;
    struct spec_range specs;
    const struct zt_model_shape *s;
    const struct zt_config *cfg;
    const struct zt_recompute_plan *rc;
    act_fn fn;
    void *ctx;
};

/* whether layer l's input (the output of the layer below, or the embeddings) waits on NVMe
 * between its forward and backward: activation_checkpointing.offload nvme, l one of the stage's
 * layers, and its backward recomputes from it */
static int input_moves(const struct act_walk *a, int l) {
    return a->cfg->actckpt.offload == ZT_OFFLOAD_NVME &&
           zt_ckpt_swap_moves(a->rc, a->specs.spec0 - 1, a->specs.spec1 - 1, l);
}

/* one set of a micro-batch's activations: the head's (into head), each layer's (a checkpointed
 * layer only what it keeps), the recompute window, the last stage's tail; the inputs on NVMe
 * are not made (the swap's sets hold them). Bases NULL: sizing. */
static enum zt_status set_acts(const struct act_walk *a, char *head, struct zt_layer_acts *layers,
                               struct zt_layer_acts *window) {
#define N_(t) (sizeof(t) / sizeof *(t))
#define MOVED_(l, type, f) (input_moves(a, l) ? offsetof(type, f) : SIZE_MAX)
    const int accum = a->cfg->grad_accum;
    const enum zt_recompute mode = a->cfg->actckpt.recompute;
    ZT_CHECK(each_row(a->ctx, a->s, a->fn, g_head_acts, N_(g_head_acts), head, accum, PART_ALL,
                      mode, MOVED_(0, struct zt_gpt2, encoded)));
    for (int l = 0; l < a->s->n_layer; l++)
        ZT_CHECK(each_row(a->ctx, a->s, a->fn, g_layer_acts, N_(g_layer_acts),
                          layers ? (char *)&layers[l] : NULL, accum,
                          stage_part(&a->specs, l, zt_recompute_slot(a->rc, l) >= 0
                                                       ? PART_KEPT
                                                       : PART_ALL),
                          mode, MOVED_(l + 1, struct zt_layer_acts, res3)));
    for (int w = 0; w < a->rc->window; w++)
        ZT_CHECK(each_row(a->ctx, a->s, a->fn, g_layer_acts, N_(g_layer_acts),
                          window ? (char *)&window[w] : NULL, accum, PART_WINDOW, mode,
                          SIZE_MAX));
    if (in_range(&a->specs, a->s->n_layer + 1)) /* the final norm's and the head's (logits) */
        ZT_CHECK(each_row(a->ctx, a->s, a->fn, g_tail_set_acts, N_(g_tail_set_acts), head, accum,
                          PART_ALL, mode, SIZE_MAX));
    return ZT_OK;
#undef MOVED_
#undef N_
}

/* every activation in allocation order: the first set's (the model's own tensors), the tail
 * every set shares, then a pipeline stage's other sets, each checkpointed as the first and with
 * its own recompute window; m NULL: sizing the stage of specs r */
static enum zt_status for_each_act(zt_gpt2_t m, struct spec_range r,
                                   const struct zt_model_shape *s, const struct zt_config *cfg,
                                   const struct zt_recompute_plan *rc, act_fn fn, void *ctx) {
    const struct act_walk a = {m, r, s, cfg, rc, fn, ctx};
    ZT_CHECK(set_acts(&a, (char *)m, m ? m->layer_acts : NULL, m ? m->window : NULL));
    ZT_CHECK(each_row(ctx, s, fn, g_tail_acts, sizeof g_tail_acts / sizeof *g_tail_acts,
                      (char *)m, cfg->grad_accum, PART_ALL, cfg->actckpt.recompute, SIZE_MAX));
    for (int k = 1; k < act_sets(cfg); k++)
        ZT_CHECK(set_acts(&a, m ? (char *)m->sets[k].shadow : NULL,
                          m ? m->sets[k].layer_acts : NULL, m ? m->sets[k].window : NULL));
    return ZT_OK;
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
    *out = (struct zt_gpt2_recompute){.nckpt = m->rc.nckpt, .window = m->rc.window,
                                      .act_sets = m->nsets};
    for (int set = 0; set < m->nsets; set++)
        for (int w = 0; w < m->rc.window; w++)
            for (size_t k = 0; k < sizeof g_layer_acts / sizeof *g_layer_acts; k++) {
                const char *win = (const char *)&m->sets[set].window[w];
                const zt_tensor_t t = *(const zt_tensor_t *)(win + g_layer_acts[k].off);
                if (t) out->window_bytes += zt_tensor_numel(t) * (int64_t)zt_tensor_elemsize(t);
            }
    out->set_bytes = zt_ckpt_swap_info(m->swap, &out->moved, &out->sets, &out->swapped,
                                       &out->file_bytes);
}

int64_t zt_gpt2_stage_act_bytes(const struct zt_model_shape *s, const struct zt_config *cfg,
                                int chunks, int spec0, int spec1) {
    struct act_sizing z = {cfg, chunks, 0};
    struct zt_recompute_plan rc;
    if (zt_gpt2_plan_layers(cfg, s->n_layer, spec0 - 1, spec1 - 1, &rc) != ZT_OK) return -1;
    const struct spec_range r = {spec0, spec1};
    for_each_act(NULL, r, s, cfg, &rc, size_act, &z); /* size_act cannot fail */
    if (cfg->actckpt.offload == ZT_OFFLOAD_NVME) /* the sets of the inputs on NVMe */
        z.bytes += act_sets(cfg) * zt_ckpt_swap_sets(&rc, spec0 - 1, spec1 - 1) *
                   zt_engine_act_size(cfg, chunks, s->seq_len, s->n_embd,
                                      zt_dtype_size(zt_engine_config_dtype(cfg)));
    zt_recompute_free(&rc);
    return z.bytes;
}

int64_t zt_gpt2_act_bytes(const struct zt_model_shape *s, const struct zt_config *cfg,
                          int chunks) {
    return zt_gpt2_stage_act_bytes(s, cfg, chunks, 0, s->n_layer + 3);
}

/* in every set, a checkpointed layer's recomputed activations are the tensors of its window
 * set; the rest stay its own */
static void alias_window(zt_gpt2_t m) {
    for (int k = 0; k < m->nsets; k++)
        for (int l = 0; l < m->s.n_layer; l++) {
            const int w = zt_recompute_slot(&m->rc, l);
            if (w < 0) continue;
            const char *slot = (const char *)&m->sets[k].window[w];
            for (size_t i = 0; i < sizeof g_layer_acts / sizeof *g_layer_acts; i++)
                if (recomputed(&g_layer_acts[i], m->recompute))
                    memcpy((char *)&m->sets[k].layer_acts[l] + g_layer_acts[i].off,
                           slot + g_layer_acts[i].off, sizeof(zt_tensor_t));
        }
}

/* the inputs that wait on NVMe: the swap's sets take the places for_each_act left empty, in
 * every activation set (set 0's in the model's own fields) */
static enum zt_status swap_inputs(zt_gpt2_t m, const struct zt_config *cfg) {
    const struct zt_ckpt_swap_spec spec = {
        .rows_per_seq = m->s.seq_len, .cols = m->s.n_embd, .dtype = zt_engine_dtype(m->e),
        .nvme_path = cfg->actckpt.nvme_path, .key = "activation_checkpointing.offload.nvme_path",
        .block0 = m->spec0 - 1, .block1 = m->spec1 - 1, .act_sets = m->nsets};
    ZT_CHECK(zt_ckpt_swap_init(&m->swap, m->e, &m->rc, &spec));
    for (int k = 0; k < m->nsets; k++)
        for (int l = 0; l < m->s.n_layer; l++) {
            const zt_tensor_t t = zt_ckpt_swap_input(m->swap, k, l);
            struct zt_gpt2 *head = k ? m->sets[k].shadow : m;
            if (t) *(l ? &m->sets[k].layer_acts[l - 1].res3 : &head->encoded) = t;
        }
    return ZT_OK;
}

/* the model's fields a set holds besides its layers */
static const size_t g_set_fields[] = {
    offsetof(struct zt_gpt2, inputs), offsetof(struct zt_gpt2, targets),
    offsetof(struct zt_gpt2, encoded), offsetof(struct zt_gpt2, lnf),
    offsetof(struct zt_gpt2, lnf_mean), offsetof(struct zt_gpt2, lnf_rstd),
    offsetof(struct zt_gpt2, logits)};

static void copy_set_fields(struct zt_gpt2 *dst, const struct zt_gpt2 *src) {
    for (size_t i = 0; i < sizeof g_set_fields / sizeof *g_set_fields; i++)
        memcpy((char *)dst + g_set_fields[i], (const char *)src + g_set_fields[i],
               sizeof(zt_tensor_t));
}

void zt_gpt2_acts_use(zt_gpt2_t m, int k) {
    copy_set_fields(m, m->sets[k].shadow);
    m->layer_acts = m->sets[k].layer_acts;
}

/* the sets' storage (set 0 is the model's own tensors, the others are made by for_each_act) */
static enum zt_status alloc_sets(zt_gpt2_t m, const struct zt_config *cfg) {
    m->nsets = act_sets(cfg);
    m->sets = calloc((size_t)m->nsets, sizeof *m->sets);
    if (!m->sets) return zt_error_set(ZT_ERR_NOMEM, "model: out of memory");
    for (int k = 0; k < m->nsets; k++) {
        m->sets[k].shadow = calloc(1, sizeof *m->sets[k].shadow);
        m->sets[k].layer_acts = k ? calloc((size_t)m->s.n_layer, sizeof(struct zt_layer_acts))
                                  : m->layer_acts;
        m->sets[k].window = k ? calloc((size_t)m->rc.window + 1, sizeof(struct zt_layer_acts))
                              : m->window;
        if (!m->sets[k].shadow || !m->sets[k].layer_acts || !m->sets[k].window)
            return zt_error_set(ZT_ERR_NOMEM, "model: out of memory");
    }
    return ZT_OK;
}

enum zt_status zt_gpt2_acts_make(zt_gpt2_t m, const struct zt_config *cfg) {
    ZT_CHECK(alloc_sets(m, cfg));
    const struct spec_range r = {m->spec0, m->spec1};
    ZT_CHECK(for_each_act(m, r, &m->s, cfg, &m->rc, make_act, m->e));
    if (cfg->actckpt.offload == ZT_OFFLOAD_NVME) ZT_CHECK(swap_inputs(m, cfg));
    copy_set_fields(m->sets[0].shadow, m);
    alias_window(m);
    return ZT_OK;
}

void zt_gpt2_acts_free(zt_gpt2_t m) {
    for (int k = 0; m->sets && k < m->nsets; k++) {
        free(m->sets[k].shadow);
        if (k) free(m->sets[k].window);
        if (k) free(m->sets[k].layer_acts);
        else m->layer_acts = m->sets[0].layer_acts; /* the model's own array */
    }
    free(m->sets);
    m->sets = NULL;
}
