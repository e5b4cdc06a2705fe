/*
 * apps/mlp_example.c: a second model on the public engine + task API: a byte-level model that
 * predicts the next byte from the current one (embedding -> residual MLP blocks
 * x += fc2(relu(fc1(x))) -> linear head -> softmax cross-entropy). The ReLU is a codelet written
 * here, submitted with starpu_task_insert on engine-owned handles: the way to add a kernel
 * zerotask does not ship. With --checkpoint every block keeps only its input and recomputes fc1
 * and the ReLU in its backward (graph/zt_recompute.h): the way a model checkpoints its own
 * blocks. docs/writing-a-model.md walks through it.
 *
 * Layer: apps/. Includes only <zerotask.h>. Usage: zt-mlp-example --data F [--steps N]
 * [--depth D] [--checkpoint] [--save F.safetensors]
 */
#include <stdio.h>     /* printf, snprintf */
#include <stdlib.h>    /* atoi */
#include <string.h>    /* strcmp, memset */
#include "zerotask.h"  /* engine, tasks, tokens */

/* ---- a user codelet: ReLU on one row block (StarPU vector interface: pointer and length) ---- */
static void relu_forward_cpu(void *buffers[], void *cl_arg) {
    (void)cl_arg;
    const float *h = (const float *)STARPU_VECTOR_GET_PTR(buffers[0]);
    float *out = (float *)STARPU_VECTOR_GET_PTR(buffers[1]);
    unsigned n = STARPU_VECTOR_GET_NX(buffers[0]);
    for (unsigned i = 0; i < n; i++) out[i] = h[i] > 0.0f ? h[i] : 0.0f;
}
/* d holds dout on entry and dinp on exit */
static void relu_backward_cpu(void *buffers[], void *cl_arg) {
    (void)cl_arg;
    const float *h = (const float *)STARPU_VECTOR_GET_PTR(buffers[0]);
    float *d = (float *)STARPU_VECTOR_GET_PTR(buffers[1]);
    unsigned n = STARPU_VECTOR_GET_NX(buffers[0]);
    for (unsigned i = 0; i < n; i++) d[i] = h[i] > 0.0f ? d[i] : 0.0f;
}
static struct starpu_codelet relu_forward_cl = {
    .cpu_funcs = {relu_forward_cpu}, .nbuffers = 2, .modes = {STARPU_R, STARPU_W},
    .name = "relu_forward"};
static struct starpu_codelet relu_backward_cl = {
    .cpu_funcs = {relu_backward_cpu}, .nbuffers = 2, .modes = {STARPU_R, STARPU_RW},
    .name = "relu_backward"};

/* submit a user codelet on block b of two engine tensors; StarPU orders it after the tasks that
 * write them and before the tasks that read them (sequential consistency) */
static enum zt_status user_task(struct starpu_codelet *cl, zt_tensor_t a, zt_tensor_t b, int blk) {
    int rc = starpu_task_insert(cl, STARPU_R, zt_tensor_handle(a, blk), cl->modes[1],
                                zt_tensor_handle(b, blk), 0);
    return rc == 0 ? ZT_OK
                   : zt_error_set(ZT_ERR_RUNTIME, "%s: starpu_task_insert: %d", cl->name, rc);
}

/* the model: an embedding, `depth` residual MLP blocks x += fc2(relu(fc1(x))), a linear head;
 * its parameters and activations (T rows per sequence, blocks of whole sequences) */
enum { V = 256, T = 64, C = 64, H = 256, MAX_DEPTH = 16 };
struct mlp_block {
    zt_param_t w1, b1, w2, b2;
    zt_tensor_t h, hg; /* fc1's output and its ReLU: what a checkpointed block recomputes */
};
struct mlp {
    int depth;
    zt_param_t emb, wh, bh;
    struct mlp_block blk[MAX_DEPTH];
    zt_tensor_t in, tg, x[MAX_DEPTH + 1], proj, logits, losses, dres, dh;
    struct zt_recompute_plan plan; /* which blocks are checkpointed, and their window sets */
    int64_t hidden_bytes;          /* of the h and hg tensors made */
};

/* 1. a config, built in code here (zt_config_load reads the same from DeepSpeed JSON) */
static void make_config(struct zt_config *cfg) {
    zt_config_defaults(cfg);
    cfg->train_batch_size = 8;
    cfg->micro_batch = 8;
    cfg->grad_accum = 1;
    cfg->world_size = 1;
    cfg->optim = ZT_OPTIM_ADAMW;
    cfg->lr = 3e-3f;
    cfg->weight_decay = 0.0f;
}

static zt_param_t param(zt_engine_t e, const char *name, int d, int64_t rows, int64_t cols,
                        float std) {
    char full[64];
    snprintf(full, sizeof full, name, d);
    return zt_engine_param(e, full, cols ? 2 : 1, (int64_t[]){rows, cols},
                           std > 0 ? ZT_INIT_NORMAL : ZT_INIT_ZERO, std);
}

/* 2. the engine owns parameters, gradients and Adam state */
static enum zt_status declare_params(zt_engine_t e, struct mlp *m) {
    int ok = (m->emb = param(e, "emb.weight", 0, V, C, 0.1f)) != NULL;
    for (int d = 0; d < m->depth; d++) {
        struct mlp_block *k = &m->blk[d];
        ok &= (k->w1 = param(e, "blocks.%d.fc1.weight", d, C, H, 0.1f)) != NULL;
        ok &= (k->b1 = param(e, "blocks.%d.fc1.bias", d, H, 0, 0)) != NULL;
        ok &= (k->w2 = param(e, "blocks.%d.fc2.weight", d, H, C, 0.02f)) != NULL;
        ok &= (k->b2 = param(e, "blocks.%d.fc2.bias", d, C, 0, 0)) != NULL;
    }
    ok &= (m->wh = param(e, "head.weight", 0, C, V, 0.05f)) != NULL;
    ok &= (m->bh = param(e, "head.bias", 0, V, 0, 0)) != NULL;
    if (!ok) return zt_error_last_code() != ZT_OK ? zt_error_last_code() : ZT_ERR_INVALID;
    return zt_engine_finalize(e);
}

/* 3. the activations: a checkpointed block's h and hg are its window set's (zt_recompute.h),
 * made by the first block of the set */
static enum zt_status declare_acts(zt_engine_t e, struct mlp *m, int checkpoint) {
    unsigned char ckpt[MAX_DEPTH];
    memset(ckpt, checkpoint, sizeof ckpt);
    ZT_CHECK(zt_recompute_init(&m->plan, m->depth, ckpt, 0));
    zt_tensor_t set_h[MAX_DEPTH] = {0}, set_hg[MAX_DEPTH] = {0};
    for (int d = 0; d < m->depth; d++) {
        const int w = zt_recompute_slot(&m->plan, d);
        if (w >= 0 && set_h[w]) {
            m->blk[d].h = set_h[w];
            m->blk[d].hg = set_hg[w];
            continue;
        }
        ZT_CHECK(zt_engine_act(e, "h", T, H, 4, &m->blk[d].h));
        ZT_CHECK(zt_engine_act(e, "hg", T, H, 4, &m->blk[d].hg));
        m->hidden_bytes += 2 * zt_tensor_numel(m->blk[d].h) * 4;
        if (w >= 0) {
            set_h[w] = m->blk[d].h;
            set_hg[w] = m->blk[d].hg;
        }
    }
    for (int d = 0; d <= m->depth; d++) ZT_CHECK(zt_engine_act(e, "x", T, C, 4, &m->x[d]));
    ZT_CHECK(zt_engine_act(e, "inputs", 1, T, 4, &m->in));
    ZT_CHECK(zt_engine_act(e, "targets", 1, T, 4, &m->tg));
    ZT_CHECK(zt_engine_act(e, "proj", T, C, 4, &m->proj));
    ZT_CHECK(zt_engine_act(e, "logits", T, V, 4, &m->logits));
    ZT_CHECK(zt_engine_act(e, "losses", T, 1, 4, &m->losses));
    ZT_CHECK(zt_engine_act(e, "dres", T, C, 4, &m->dres));
    return zt_engine_act(e, "dh", T, H, 4, &m->dh);
}

/* fc1 and the ReLU of block d on row block b: in the forward, and again in a recompute */
static enum zt_status block_hidden(const struct zt_step_ctx *c, const struct mlp *m, int d,
                                   int b) {
    const struct mlp_block *k = &m->blk[d];
    ZT_CHECK(zt_task_matmul_forward(&c->opts, k->h, b, m->x[d], zt_param_value(c, k->w1),
                                    zt_param_value(c, k->b1)));
    return user_task(&relu_forward_cl, k->h, k->hg, b);
}

/* 4. the forward of one step: load, embed, the blocks, the head and the loss */
static enum zt_status forward(zt_engine_t e, const struct mlp *m, const struct zt_tokens *tok,
                              int step, int batch) {
    const int nb = zt_engine_nblk(e), D = m->depth;
    struct zt_step_ctx c = zt_engine_ctx(e, ZT_PRIO_FORWARD, -1, D, 0);
    for (int b = 0; b < nb; b++) {
        ZT_CHECK(zt_task_load_batch(&c.opts, m->in, m->tg, b, tok, step, batch, 0));
        ZT_CHECK(zt_task_encoder_forward(&c.opts, m->x[0], b, m->in, zt_param_value(&c, m->emb),
                                         NULL));
    }
    for (int d = 0; d < D; d++) {
        c = zt_engine_ctx(e, ZT_PRIO_FORWARD, d, D, 0);
        const struct mlp_block *k = &m->blk[d];
        for (int b = 0; b < nb; b++) {
            ZT_CHECK(block_hidden(&c, m, d, b));
            ZT_CHECK(zt_task_matmul_forward(&c.opts, m->proj, b, k->hg, zt_param_value(&c, k->w2),
                                            zt_param_value(&c, k->b2)));
            ZT_CHECK(zt_task_residual_forward(&c.opts, m->x[d + 1], b, m->x[d], m->proj));
        }
    }
    c = zt_engine_ctx(e, ZT_PRIO_FORWARD, D, D, 0);
    for (int b = 0; b < nb; b++) {
        ZT_CHECK(zt_task_matmul_forward(&c.opts, m->logits, b, m->x[D], zt_param_value(&c, m->wh),
                                        zt_param_value(&c, m->bh)));
        ZT_CHECK(zt_task_crossentropy(&c.opts, m->logits, m->losses, b, m->tg,
                                      1.0f / (float)(batch * T)));
    }
    return ZT_OK;
}

/* the gradients of a linear layer's weight and bias from its input and output gradient */
static enum zt_status linear_grads(const struct zt_step_ctx *c, zt_param_t w, zt_param_t bias,
                                   zt_tensor_t inp, zt_tensor_t dout) {
    zt_tensor_t gw = zt_param_grad(c, w);
    for (int j = 0; j < zt_tensor_nblk(gw); j++)
        ZT_CHECK(zt_task_matmul_backward_weight(&c->opts, gw, j, inp, dout));
    return zt_task_matmul_backward_bias(&c->opts, zt_param_grad(c, bias), dout);
}

/* the backward of block d: dres holds d(x[d+1]) on entry and d(x[d]) on exit; a checkpointed
 * block whose set a later block has taken recomputes its h and hg first */
static enum zt_status block_backward(zt_engine_t e, const struct mlp *m, int d) {
    const int nb = zt_engine_nblk(e);
    const struct mlp_block *k = &m->blk[d];
    const struct zt_step_ctx c = zt_engine_ctx(e, ZT_PRIO_BACKWARD, d, m->depth, 0);
    if (zt_recompute_needed(&m->plan, d)) {
        const struct zt_step_ctx r = zt_recompute_ctx(&c);
        for (int b = 0; b < nb; b++) ZT_CHECK(block_hidden(&r, m, d, b));
    }
    ZT_CHECK(linear_grads(&c, k->w2, k->b2, k->hg, m->dres));
    for (int b = 0; b < nb; b++) {
        ZT_CHECK(zt_task_matmul_backward_inp(&c.opts, m->dh, b, m->dres,
                                             zt_param_value(&c, k->w2), 0));
        ZT_CHECK(user_task(&relu_backward_cl, k->h, m->dh, b));
        ZT_CHECK(zt_task_matmul_backward_inp(&c.opts, m->dres, b, m->dh,
                                             zt_param_value(&c, k->w1), 1));
    }
    return linear_grads(&c, k->w1, k->b1, m->x[d], m->dh);
}

/* 4. one step: begin (zero grads), forward and backward tasks, end (clip + AdamW) */
static enum zt_status submit_step(zt_engine_t e, const struct mlp *m, const struct zt_tokens *tok,
                                  int step, int batch) {
    ZT_CHECK(zt_engine_step_begin(e, step));
    ZT_CHECK(forward(e, m, tok, step, batch));
    const struct zt_step_ctx c = zt_engine_ctx(e, ZT_PRIO_BACKWARD, m->depth, m->depth, 0);
    for (int b = 0; b < zt_engine_nblk(e); b++)
        ZT_CHECK(zt_task_matmul_backward_inp(&c.opts, m->dres, b, m->logits,
                                             zt_param_value(&c, m->wh), 0));
    ZT_CHECK(linear_grads(&c, m->wh, m->bh, m->x[m->depth], m->logits));
    for (int d = m->depth - 1; d >= 0; d--) ZT_CHECK(block_backward(e, m, d));
    ZT_CHECK(zt_task_encoder_backward(&c.opts, zt_param_grad(&c, m->emb), NULL, m->dres, m->in));
    return zt_engine_step_end(e);
}

/* wait for the step and average its losses (checking that its batches were read) */
static enum zt_status step_loss(zt_engine_t e, const struct mlp *m, struct zt_step_info *info,
                                double *loss) {
    ZT_CHECK(zt_engine_step_wait(e, info));
    ZT_CHECK(zt_tensor_acquire(m->losses, 0));
    enum zt_status rc = zt_task_data_status(); /* a batch the token file could not give */
    const float *l = zt_tensor_data(m->losses);
    int64_t n = zt_tensor_numel(m->losses);
    *loss = 0;
    for (int64_t i = 0; i < n; i++) *loss += l[i];
    *loss /= (double)n;
    zt_tensor_release(m->losses);
    return rc;
}

struct options {
    const char *data, *save;
    int steps, depth, checkpoint;
};

static enum zt_status train(zt_engine_t e, struct mlp *m, const struct zt_tokens *tok,
                            const struct options *op, double *first, double *loss) {
    ZT_CHECK(declare_params(e, m));
    ZT_CHECK(declare_acts(e, m, op->checkpoint));
    printf("mlp: %d blocks, %d checkpointed (window of %d): h and hg take %.1f KiB\n", m->depth,
           m->plan.nckpt, m->plan.window, (double)m->hidden_bytes / 1024);
    for (int s = 1; s <= op->steps; s++) {
        struct zt_step_info info;
        ZT_CHECK(submit_step(e, m, tok, s, zt_engine_config(e)->train_batch_size));
        ZT_CHECK(step_loss(e, m, &info, loss));
        if (s == 1) *first = *loss;
        if (s == 1 || s % 10 == 0 || s == op->steps)
            printf("step %4d/%d | loss %.6f | grad norm %.6f\n", s, op->steps, *loss,
                   info.grad_norm);
    }
    return op->save ? zt_engine_save_safetensors(e, op->save) : ZT_OK;
}

static int parse_options(int argc, char **argv, struct options *op) {
    *op = (struct options){.steps = 50, .depth = 2};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--data") && i + 1 < argc) op->data = argv[++i];
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc) op->steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--depth") && i + 1 < argc) op->depth = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--save") && i + 1 < argc) op->save = argv[++i];
        else if (!strcmp(argv[i], "--checkpoint")) op->checkpoint = 1;
        else {
            fprintf(stderr, "usage: zt-mlp-example --data TOKENS.bin [--steps N] [--depth D] "
                    "[--checkpoint] [--save F.safetensors]\n");
            return 0;
        }
    }
    if (op->data && op->steps >= 1 && op->depth >= 1 && op->depth <= MAX_DEPTH) return 1;
    fprintf(stderr, "zerotask: error: --data is required, --steps must be >= 1 and --depth "
            "from 1 to %d\n", MAX_DEPTH);
    return 0;
}

int main(int argc, char **argv) {
    struct options op;
    if (!parse_options(argc, argv, &op)) return 2;
    struct zt_config cfg;
    make_config(&cfg);
    struct zt_tokens tok;
    struct mlp m = {.depth = op.depth};
    zt_engine_t e = NULL;
    double first = 0, loss = 0;
    enum zt_status rc = zt_tokens_open(&tok, op.data, V);
    if (rc == ZT_OK && (rc = zt_engine_init(&e, &cfg)) == ZT_OK)
        rc = train(e, &m, &tok, &op, &first, &loss);
    if (rc == ZT_OK) printf("mlp: loss %.4f -> %.4f\n", first, loss);
    else fprintf(stderr, "zerotask: error: %s\n", zt_error_last());
    zt_recompute_free(&m.plan);
    if (e) zt_engine_free(e);
    zt_tokens_close(&tok);
    return rc == ZT_OK && loss < first ? 0 : 1;
}
