/*
 * apps/mlp_example.c: a second model on the public engine + task API: a byte-level MLP that
 * predicts the next byte from the current one (embedding -> linear -> ReLU -> linear -> softmax
 * cross-entropy). The ReLU is a codelet written here, submitted with starpu_task_insert on
 * engine-owned handles: the way to add a kernel zerotask does not ship. docs/writing-a-model.md
 * walks through it.
 *
 * Layer: apps/. Includes only <zerotask.h>. Usage: zt-mlp-example --data F [--steps N]
 */
#include <stdio.h>     /* printf */
#include <stdlib.h>    /* atoi */
#include <string.h>    /* strcmp */
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

/* the model: its parameters and activations (T rows per sequence, blocks of whole sequences) */
enum { V = 256, T = 64, C = 64, H = 256 };
struct mlp {
    zt_param_t emb, w1, b1, w2, b2;
    zt_tensor_t in, tg, x, h, hg, logits, losses, dx, dh;
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

/* 2. the engine owns parameters, gradients and Adam state; 3. the activations */
static enum zt_status declare_model(zt_engine_t e, struct mlp *m) {
    m->emb = zt_engine_param(e, "emb.weight", 2, (int64_t[]){V, C}, ZT_INIT_NORMAL, 0.1f);
    m->w1 = zt_engine_param(e, "fc1.weight", 2, (int64_t[]){C, H}, ZT_INIT_NORMAL, 0.1f);
    m->b1 = zt_engine_param(e, "fc1.bias", 1, (int64_t[]){H}, ZT_INIT_ZERO, 0);
    m->w2 = zt_engine_param(e, "fc2.weight", 2, (int64_t[]){H, V}, ZT_INIT_NORMAL, 0.05f);
    m->b2 = zt_engine_param(e, "fc2.bias", 1, (int64_t[]){V}, ZT_INIT_ZERO, 0);
    if (!m->emb || !m->w1 || !m->b1 || !m->w2 || !m->b2)
        return zt_error_last_code() != ZT_OK ? zt_error_last_code() : ZT_ERR_INVALID;
    ZT_CHECK(zt_engine_finalize(e));
    ZT_CHECK(zt_engine_act(e, "inputs", 1, T, 4, &m->in));
    ZT_CHECK(zt_engine_act(e, "targets", 1, T, 4, &m->tg));
    ZT_CHECK(zt_engine_act(e, "x", T, C, 4, &m->x));
    ZT_CHECK(zt_engine_act(e, "h", T, H, 4, &m->h));
    ZT_CHECK(zt_engine_act(e, "hg", T, H, 4, &m->hg));
    ZT_CHECK(zt_engine_act(e, "logits", T, V, 4, &m->logits));
    ZT_CHECK(zt_engine_act(e, "losses", T, 1, 4, &m->losses));
    ZT_CHECK(zt_engine_act(e, "dx", T, C, 4, &m->dx));
    return zt_engine_act(e, "dh", T, H, 4, &m->dh);
}

/* forward and backward of block b: load, embed, fc1, ReLU, fc2, loss, back to dx */
static enum zt_status submit_block(const struct zt_step_ctx *c, const struct mlp *m, int b,
                                   const struct zt_tokens *tok, int step, int batch) {
    const struct zt_task_opts *o = &c->opts;
    ZT_CHECK(zt_task_load_batch(o, m->in, m->tg, b, tok, step, batch, 0));
    ZT_CHECK(zt_task_encoder_forward(o, m->x, b, m->in, zt_param_value(c, m->emb), NULL));
    ZT_CHECK(zt_task_matmul_forward(o, m->h, b, m->x, zt_param_value(c, m->w1),
                                    zt_param_value(c, m->b1)));
    ZT_CHECK(user_task(&relu_forward_cl, m->h, m->hg, b));
    ZT_CHECK(zt_task_matmul_forward(o, m->logits, b, m->hg, zt_param_value(c, m->w2),
                                    zt_param_value(c, m->b2)));
    ZT_CHECK(zt_task_crossentropy(o, m->logits, m->losses, b, m->tg, 1.0f / (batch * T)));
    ZT_CHECK(zt_task_matmul_backward_inp(o, m->dh, b, m->logits, zt_param_value(c, m->w2), 0));
    ZT_CHECK(user_task(&relu_backward_cl, m->h, m->dh, b));
    return zt_task_matmul_backward_inp(o, m->dx, b, m->dh, zt_param_value(c, m->w1), 0);
}

/* 4. one step: begin (zero grads), forward/backward tasks, end (clip + AdamW) */
static enum zt_status submit_step(zt_engine_t e, const struct mlp *m, const struct zt_tokens *tok,
                                  int step, int batch) {
    ZT_CHECK(zt_engine_step_begin(e, step));
    struct zt_step_ctx c = zt_engine_ctx(e, ZT_PRIO_FORWARD, 0, 1, 0);
    const struct zt_task_opts *o = &c.opts;
    for (int b = 0; b < zt_engine_nblk(e); b++) ZT_CHECK(submit_block(&c, m, b, tok, step, batch));
    zt_tensor_t gw2 = zt_param_grad(&c, m->w2), gw1 = zt_param_grad(&c, m->w1);
    for (int j = 0; j < zt_tensor_nblk(gw2); j++)
        ZT_CHECK(zt_task_matmul_backward_weight(o, gw2, j, m->hg, m->logits));
    for (int j = 0; j < zt_tensor_nblk(gw1); j++)
        ZT_CHECK(zt_task_matmul_backward_weight(o, gw1, j, m->x, m->dh));
    ZT_CHECK(zt_task_matmul_backward_bias(o, zt_param_grad(&c, m->b2), m->logits));
    ZT_CHECK(zt_task_matmul_backward_bias(o, zt_param_grad(&c, m->b1), m->dh));
    ZT_CHECK(zt_task_encoder_backward(o, zt_param_grad(&c, m->emb), NULL, m->dx, m->in));
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

static enum zt_status train(zt_engine_t e, const struct zt_tokens *tok, const struct zt_config *cfg,
                            int steps, double *first, double *loss) {
    struct mlp m;
    ZT_CHECK(declare_model(e, &m));
    for (int s = 1; s <= steps; s++) {
        struct zt_step_info info;
        ZT_CHECK(submit_step(e, &m, tok, s, cfg->train_batch_size));
        ZT_CHECK(step_loss(e, &m, &info, loss));
        if (s == 1) *first = *loss;
        if (s == 1 || s % 10 == 0 || s == steps)
            printf("step %4d/%d | loss %.4f | grad norm %.4f\n", s, steps, *loss, info.grad_norm);
    }
    return ZT_OK;
}

int main(int argc, char **argv) {
    const char *data = NULL;
    int steps = 50;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--data") && i + 1 < argc) data = argv[++i];
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: zt-mlp-example --data TOKENS.bin [--steps N]\n");
            return 2;
        }
    }
    if (!data || steps < 1) {
        fprintf(stderr, "zerotask: error: --data is required and --steps must be >= 1\n");
        return 2;
    }
    struct zt_config cfg;
    make_config(&cfg);
    struct zt_tokens tok;
    zt_engine_t e = NULL;
    double first = 0, loss = 0;
    enum zt_status rc = zt_tokens_open(&tok, data, V);
    if (rc == ZT_OK && (rc = zt_engine_init(&e, &cfg)) == ZT_OK)
        rc = train(e, &tok, &cfg, steps, &first, &loss);
    if (rc == ZT_OK) printf("mlp: loss %.4f -> %.4f\n", first, loss);
    else fprintf(stderr, "zerotask: error: %s\n", zt_error_last());
    if (e) zt_engine_free(e);
    zt_tokens_close(&tok);
    return rc == ZT_OK && loss < first ? 0 : 1;
}
