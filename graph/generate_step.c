/*
 * graph/generate_step.c: the task graph of one generation step: the step's rows (prompt chunks
 * and decode tokens of every running request, as one batch) through every layer, then the logits
 * of the rows that need them.
 *
 * Layer: graph/. The dense parts are the training forward's tasks (layernorm, matmul, gelu,
 * residual: the same kernels, so a row's values have the training forward's bits); attention
 * goes through the KV cache (kv_append, attention_cached). A step of up to SPLIT_ROWS rows (a
 * batch's decode rows, or short prompt chunks) splits its products and its attention among the
 * workers and folds the small tasks into them (layer_split), with the same kernels and bits.
 * The step's tensors are made over one arena, sized for the largest step, with exactly the
 * step's rows, and freed after it: a decode step computes its rows only.
 */
#include <stdlib.h>         /* calloc, free */
#include "zt_aio.h"         /* zt_aio_alloc */
#include "generate_impl.h"  /* struct gen_acts, gen_step_submit */
#include "generate_split.h" /* gen_split_* */

enum { A_X, A_RES2, A_LN, A_MEAN, A_RSTD, A_QKV, A_ATTY, A_PROJ, A_FCH, A_FCHG, A_ROWS_END,
       A_XS = A_ROWS_END, A_LNF, A_LNFM, A_LNFR, A_LOGITS, A_COUNT };

/* columns of each step tensor (in units of C, except: 0 = one column, -1 = vocabulary), and
 * whether a decode step (layer_split: the small tasks folded into the parts) uses it */
static const struct { const char *name; int cols, split; } g_acts[A_COUNT] = {
    {"x", 1, 1},       {"res2", 1, 1},     {"ln", 1, 0},      {"ln_mean", 0, 0},
    {"ln_rstd", 0, 0}, {"qkv", 3, 1},      {"atty", 1, 0},    {"proj", 1, 0},
    {"fch", 4, 0},     {"fch_gelu", 4, 0}, {"xs", 1, 1},      {"lnf", 1, 0},
    {"lnf_mean", 0, 0}, {"lnf_rstd", 0, 0}, {"logits", -1, 1},
};

/* decode steps (up to SPLIT_ROWS rows): each product's output columns split among the workers,
 * into slabs (zt_task_matmul_cols) then laid side by side (zt_task_concat_cols, or read as they
 * are by the next product): each worker reads its part of the weights once per step, where row
 * blocks would each read all of them */
enum { S_QKV, S_ATT, S_PROJ, S_FCH, S_LOGITS, S_COUNT }; /* S_ATT: attention, by heads */
#define SPLIT_ROWS 64 /* steps of up to this many rows split their products by columns */

struct gen_acts {
    struct zt_model_shape s;
    int max_rows;
    float *arena;
    zt_tensor_t t[A_COUNT];
    int parts;                          /* column parts of a decode step's products (1: none) */
    int split;                          /* this step splits its products */
    float *slab_arena;                  /* split_rows() rows of every slab */
    zt_tensor_t slab[S_COUNT][GEN_SPLIT_MAX_PARTS];
};

/* output columns of each slab type */
static int64_t slab_cols(const struct gen_acts *a, int k) {
    int64_t C = a->s.n_embd;
    return k == S_QKV ? 3 * C : k == S_ATT || k == S_PROJ ? C : k == S_FCH ? 4 * C
                                                                          : a->s.vocab_size;
}

/* the parts of slab set k (generate_split.c): the attention's in whole heads, a product's in
 * columns */
static int nparts(const struct gen_acts *a, int k) {
    if (k != S_ATT) return gen_split_parts(a->parts, slab_cols(a, k));
    return gen_split_heads(a->parts, a->s.n_head);
}

/* the heads [*h0, *h1) of the attention's part p */
static void head_range(const struct gen_acts *a, int p, int *h0, int *h1) {
    gen_split_head_range(a->parts, a->s.n_head, p, h0, h1);
}

/* part p of slab set k: its first column *o0, and its width */
static int64_t slab_part(const struct gen_acts *a, int k, int p, int64_t *o0) {
    if (k != S_ATT) return gen_split_cols(a->parts, slab_cols(a, k), p, o0);
    int h0, h1, hs = a->s.n_embd / a->s.n_head;
    head_range(a, p, &h0, &h1);
    *o0 = (int64_t)h0 * hs;
    return (int64_t)(h1 - h0) * hs;
}

static int64_t cols_of(const struct gen_acts *a, int k) {
    return g_acts[k].cols == 0 ? 1 : g_acts[k].cols < 0 ? a->s.vocab_size
                                                        : (int64_t)g_acts[k].cols * a->s.n_embd;
}

/* the rows of the steps that split their products (the slabs' rows) */
static int split_rows(const struct gen_acts *a) {
    return a->max_rows < SPLIT_ROWS ? a->max_rows : SPLIT_ROWS;
}

/* the floats of the activation arena and of the slab arena (none without a split) */
static void arena_floats(const struct gen_acts *a, int64_t *floats, int64_t *slabs) {
    *floats = *slabs = 0;
    for (int k = 0; k < A_COUNT; k++) *floats += cols_of(a, k) * a->max_rows + 16; /* 64 B apart */
    for (int k = 0; k < S_COUNT && a->parts > 1; k++)
        *slabs += (slab_cols(a, k) + 16 * a->parts) * split_rows(a);
}

static void acts_init(struct gen_acts *a, const struct zt_model_shape *s, int max_rows,
                      int parts) {
    a->s = *s;
    a->max_rows = max_rows;
    a->parts = gen_split_workers(parts);
}

int64_t gen_acts_bytes(const struct zt_model_shape *s, int max_rows, int parts) {
    struct gen_acts a = {0};
    int64_t floats, slabs;
    acts_init(&a, s, max_rows, parts);
    arena_floats(&a, &floats, &slabs);
    return (floats + slabs) * (int64_t)sizeof(float);
}

enum zt_status gen_acts_create(struct gen_acts **out, const struct zt_model_shape *s,
                               int max_rows, int parts) {
    struct gen_acts *a = calloc(1, sizeof *a);
    if (!a) return zt_error_set(ZT_ERR_NOMEM, "generate: out of memory");
    acts_init(a, s, max_rows, parts);
    int64_t floats, slabs;
    arena_floats(a, &floats, &slabs);
    a->arena = zt_aio_alloc((size_t)floats * sizeof(float));
    a->slab_arena = slabs ? zt_aio_alloc((size_t)slabs * sizeof(float)) : NULL;
    *out = a;
    if (!a->arena || (slabs && !a->slab_arena))
        return zt_error_set(ZT_ERR_NOMEM, "generate: out of memory for %.1f MiB of activations",
                            (floats + slabs) * 4.0 / 1048576.0);
    return ZT_OK;
}

void gen_acts_free(struct gen_acts *a) {
    if (!a) return;
    gen_step_end(a);
    free(a->slab_arena);
    free(a->arena);
    free(a);
}

/* the step's tensors: rows n (nblk blocks) for the layers, k for the logits (none when k is 0:
 * a step of prompt chunks that end no prompt); a decode step registers only those it uses */
static enum zt_status make_step_tensors(struct gen_acts *a, int n, int nblk, int k) {
    float *p = a->arena;
    for (int i = 0; i < (k > 0 ? A_COUNT : A_ROWS_END); i++) {
        int rows = i < A_ROWS_END ? n : k, nb = i < A_ROWS_END ? nblk : (k < nblk ? k : nblk);
        if (!a->split || g_acts[i].split)
            ZT_CHECK(zt_tensor_init(&a->t[i], g_acts[i].name, p, rows, cols_of(a, i),
                                    sizeof(float), nb, NULL));
        p += cols_of(a, i) * a->max_rows + 16;
    }
    return ZT_OK;
}

/* a decode step's slabs: n rows of each part of each layer product, nlogits of the head's */
static enum zt_status make_slabs(struct gen_acts *a, int n, int nlogits) {
    float *p = a->slab_arena;
    for (int k = 0; k < S_COUNT; k++)
        for (int q = 0; q < nparts(a, k); q++) {
            int64_t o0, w = slab_part(a, k, q, &o0);
            int rows = k == S_LOGITS ? nlogits : n;
            if (rows == 0) continue;
            ZT_CHECK(zt_tensor_init(&a->slab[k][q], "slab", p, rows, w, sizeof(float), 1, NULL));
            p += (w + 16) * split_rows(a);
        }
    return ZT_OK;
}

void gen_step_end(struct gen_acts *a) {
    for (int i = 0; i < A_COUNT; i++) {
        if (a->t[i]) zt_tensor_free(a->t[i]);
        a->t[i] = NULL;
    }
    for (int k = 0; k < S_COUNT; k++)
        for (int q = 0; q < GEN_SPLIT_MAX_PARTS; q++) {
            if (a->slab[k][q]) zt_tensor_free(a->slab[k][q]);
            a->slab[k][q] = NULL;
        }
}

/* a decode step's product split by columns into slab set k, each part reading `in` (a block,
 * or the slabs of the product before, with the residual); gelu: GELU on the slabs. The first
 * part alone keeps the residual sum (in->keep). */
static enum zt_status parts(struct gen_acts *a, const struct zt_task_opts *o, int k,
                            const struct zt_cols_input *in, zt_tensor_t w, zt_tensor_t bias,
                            int gelu) {
    struct zt_cols_input rest = *in;
    rest.keep = NULL;
    for (int q = 0; q < nparts(a, k); q++) {
        int64_t o0;
        slab_part(a, k, q, &o0);
        ZT_CHECK(zt_task_matmul_cols(o, a->slab[k][q], q == 0 ? in : &rest, w, bias, o0, gelu));
    }
    return ZT_OK;
}

/* slab set k side by side into out block 0, added to base (the residual) when not NULL */
static enum zt_status join(struct gen_acts *a, const struct zt_task_opts *o, int k,
                           zt_tensor_t out, zt_tensor_t base) {
    return zt_task_concat_cols(o, out, 0, a->slab[k], nparts(a, k), base);
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
    ZT_CHECK(zt_task_kv_append(o, kv, t[A_QKV], b, bt->rows, a->s.n_head));
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

/* the same layer for a decode step (one block, products split by columns): the layernorms
 * fold into the parts of the products that read them, and so do the residuals (each part adds
 * the slabs of the product before to the residual stream, the first part keeps the sum), GELU
 * into the first MLP product, whose slabs the second reads directly, and the attention is
 * split by heads among the workers, its slabs read by the projection: seven tasks on the
 * step's serial chain per layer instead of fifteen. x: the layer's input, the block (the first
 * layer) or res2 + the slabs of the layer before's last product (kept in x) */
static enum zt_status layer_split(struct gen_acts *a, const struct gen_layer *L, zt_tensor_t kv,
                                  const struct gen_batch *bt, const struct zt_task_opts *o,
                                  int first) {
    zt_tensor_t *t = a->t;
    zt_tensor_t const *p = L->p;
    const int nproj = nparts(a, S_PROJ);
    const struct zt_cols_input ln1 =
        first ? (struct zt_cols_input){.inp = t[A_X], .ln_w = p[P_LN1W], .ln_b = p[P_LN1B]}
              : (struct zt_cols_input){.slabs = a->slab[S_PROJ], .nin = nproj, .base = t[A_RES2],
                                       .keep = t[A_X], .ln_w = p[P_LN1W], .ln_b = p[P_LN1B]};
    const struct zt_cols_input ln2 = {.slabs = a->slab[S_PROJ], .nin = nproj, .base = t[A_X],
                                      .keep = t[A_RES2], .ln_w = p[P_LN2W], .ln_b = p[P_LN2B]};
    const struct zt_cols_input att = {.slabs = a->slab[S_ATT], .nin = nparts(a, S_ATT)};
    const struct zt_cols_input fch = {.slabs = a->slab[S_FCH], .nin = nparts(a, S_FCH)};
    ZT_CHECK(parts(a, o, S_QKV, &ln1, p[P_QKVW], p[P_QKVB], 0));
    ZT_CHECK(join(a, o, S_QKV, t[A_QKV], NULL));
    ZT_CHECK(zt_task_kv_append(o, kv, t[A_QKV], 0, bt->rows, a->s.n_head));
    for (int q = 0; q < nparts(a, S_ATT); q++) { /* a range of heads per worker */
        int h0, h1;
        head_range(a, q, &h0, &h1);
        ZT_CHECK(zt_task_attention_heads(o, a->slab[S_ATT][q], 0, t[A_QKV], kv, bt->rows,
                                         a->s.n_head, h0, h1));
    }
    ZT_CHECK(parts(a, o, S_PROJ, &att, p[P_ATTPW], p[P_ATTPB], 0));
    ZT_CHECK(parts(a, o, S_FCH, &ln2, p[P_FCW], p[P_FCB], 1)); /* res2 = x + the attention's */
    return parts(a, o, S_PROJ, &fch, p[P_FCPW], p[P_FCPB], 0);
}

enum zt_status gen_step_submit(struct gen_acts *a, struct gen_weights *w, zt_tensor_t *kv,
                               const struct gen_batch *bt, int nblk, zt_tensor_t *logits) {
    if (bt->n < 1 || bt->n > a->max_rows || bt->nlogits > bt->n)
        return zt_error_set(ZT_ERR_INVALID, "generate: a step of %d rows (%d of them with "
                            "logits): expected 1 to %d rows", bt->n, bt->nlogits, a->max_rows);
    if (nblk > bt->n) nblk = bt->n;
    /* decode rows: one row block, the products split by columns among the workers instead */
    a->split = a->parts > 1 && bt->n <= split_rows(a);
    if (a->split) nblk = 1;
    if (a->split) ZT_CHECK(make_slabs(a, bt->n, bt->nlogits));
    ZT_CHECK(make_step_tensors(a, bt->n, nblk, bt->nlogits));
    zt_tensor_t *t = a->t;
    struct zt_task_opts o = {.layer = -1, .mb = -1, .step = bt->step, .priority = 0};
    for (int b = 0; b < nblk; b++)
        ZT_CHECK(bt->fed ? zt_task_embed_fed(&o, t[A_X], b, w->wte, w->wpe, bt->fed, bt->rows)
                         : zt_task_embed_rows(&o, t[A_X], b, w->wte, w->wpe, bt->tokens,
                                              bt->rows));
    for (int l = 0; l < a->s.n_layer; l++) {
        struct gen_layer *L;
        ZT_CHECK(gen_weights_layer(w, l, bt->step, &L));
        o.layer = l;
        if (a->split) ZT_CHECK(layer_split(a, L, kv[l], bt, &o, l == 0));
        for (int b = 0; b < nblk && !a->split; b++) ZT_CHECK(layer_block(a, L, kv[l], bt, &o, b));
    }
    ZT_CHECK(gen_weights_pass_end(w));
    o.layer = -1;
    *logits = NULL;
    if (bt->nlogits == 0) return ZT_OK;
    if (a->split) ZT_CHECK(join(a, &o, S_PROJ, t[A_X], t[A_RES2])); /* the last MLP's residual */
    ZT_CHECK(zt_task_gather_rows(&o, t[A_XS], t[A_X], bt->logit_rows));
    if (a->split) { /* ln_f folded into the head's parts */
        const struct zt_cols_input lnf = {.inp = t[A_XS], .ln_w = w->lnfw, .ln_b = w->lnfb};
        ZT_CHECK(parts(a, &o, S_LOGITS, &lnf, w->wte, NULL, 0));
        ZT_CHECK(join(a, &o, S_LOGITS, t[A_LOGITS], NULL));
    }
    for (int b = 0; b < zt_tensor_nblk(t[A_XS]) && !a->split; b++) {
        ZT_CHECK(zt_task_layernorm_forward(&o, t[A_LNF], t[A_LNFM], t[A_LNFR], b, t[A_XS],
                                           w->lnfw, w->lnfb));
        ZT_CHECK(zt_task_matmul_forward(&o, t[A_LOGITS], b, t[A_LNF], w->wte, NULL));
    }
    *logits = t[A_LOGITS];
    return ZT_OK;
}
