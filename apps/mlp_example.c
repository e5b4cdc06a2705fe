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
    const int V = 256, T = 64, C = 64, H = 256;
    /* 1. a config, built in code here (zt_config_load reads the same from DeepSpeed JSON) */
    struct zt_config cfg;
    zt_config_defaults(&cfg);
    cfg.train_batch_size = 8;
    cfg.micro_batch = 8;
    cfg.grad_accum = 1;
    cfg.world_size = 1;
    cfg.optim = ZT_OPTIM_ADAMW;
    cfg.lr = 3e-3f;
    cfg.weight_decay = 0.0f;
    struct zt_tokens tok;
    if (zt_tokens_open(&tok, data, V) != ZT_OK) goto fail_early;
    /* 2. the engine owns parameters, gradients and Adam state */
    zt_engine_t e;
    if (zt_engine_init(&e, &cfg) != ZT_OK) goto fail_early;
    zt_param_t emb = zt_engine_param(e, "emb.weight", 2, (int64_t[]){V, C}, ZT_INIT_NORMAL, 0.1f);
    zt_param_t w1 = zt_engine_param(e, "fc1.weight", 2, (int64_t[]){C, H}, ZT_INIT_NORMAL, 0.1f);
    zt_param_t b1 = zt_engine_param(e, "fc1.bias", 1, (int64_t[]){H}, ZT_INIT_ZERO, 0);
    zt_param_t w2 = zt_engine_param(e, "fc2.weight", 2, (int64_t[]){H, V}, ZT_INIT_NORMAL, 0.05f);
    zt_param_t b2 = zt_engine_param(e, "fc2.bias", 1, (int64_t[]){V}, ZT_INIT_ZERO, 0);
    if (!emb || !w1 || !b1 || !w2 || !b2 || zt_engine_finalize(e) != ZT_OK) goto fail;
    /* 3. activations: T rows per sequence, blocks of whole sequences */
    zt_tensor_t in, tg, x, h, hg, logits, losses, dx, dh;
    if (zt_engine_act(e, "inputs", 1, T, 4, &in) || zt_engine_act(e, "targets", 1, T, 4, &tg) ||
        zt_engine_act(e, "x", T, C, 4, &x) || zt_engine_act(e, "h", T, H, 4, &h) ||
        zt_engine_act(e, "hg", T, H, 4, &hg) || zt_engine_act(e, "logits", T, V, 4, &logits) ||
        zt_engine_act(e, "losses", T, 1, 4, &losses) || zt_engine_act(e, "dx", T, C, 4, &dx) ||
        zt_engine_act(e, "dh", T, H, 4, &dh))
        goto fail;
    int nb = zt_engine_nblk(e);
    double first = 0, loss = 0;
    for (int s = 1; s <= steps; s++) {
        /* 4. one step: begin (zero grads), forward/backward tasks, end (clip + AdamW), wait */
        if (zt_engine_step_begin(e, s)) goto fail;
        struct zt_step_ctx c = zt_engine_ctx(e, ZT_PRIO_FORWARD, 0, 1, 0);
        const struct zt_task_opts *o = &c.opts;
        for (int b = 0; b < nb; b++) {
            if (zt_task_load_batch(o, in, tg, b, &tok, s, cfg.train_batch_size, 0) ||
                zt_task_encoder_forward(o, x, b, in, zt_param_value(&c, emb), NULL) ||
                zt_task_matmul_forward(o, h, b, x, zt_param_value(&c, w1),
                                       zt_param_value(&c, b1)) ||
                user_task(&relu_forward_cl, h, hg, b) ||
                zt_task_matmul_forward(o, logits, b, hg, zt_param_value(&c, w2),
                                       zt_param_value(&c, b2)) ||
                zt_task_crossentropy(o, logits, losses, b, tg, 1.0f / (cfg.train_batch_size * T)) ||
                zt_task_matmul_backward_inp(o, dh, b, logits, zt_param_value(&c, w2), 0) ||
                user_task(&relu_backward_cl, h, dh, b) ||
                zt_task_matmul_backward_inp(o, dx, b, dh, zt_param_value(&c, w1), 0))
                goto fail;
        }
        for (int j = 0; j < zt_tensor_nblk(zt_param_grad(&c, w2)); j++)
            if (zt_task_matmul_backward_weight(o, zt_param_grad(&c, w2), j, hg, logits)) goto fail;
        for (int j = 0; j < zt_tensor_nblk(zt_param_grad(&c, w1)); j++)
            if (zt_task_matmul_backward_weight(o, zt_param_grad(&c, w1), j, x, dh)) goto fail;
        if (zt_task_matmul_backward_bias(o, zt_param_grad(&c, b2), logits) ||
            zt_task_matmul_backward_bias(o, zt_param_grad(&c, b1), dh) ||
            zt_task_encoder_backward(o, zt_param_grad(&c, emb), NULL, dx, in) ||
            zt_engine_step_end(e))
            goto fail;
        struct zt_step_info info;
        if (zt_engine_step_wait(e, &info) || zt_tensor_acquire(losses, 0)) goto fail;
        if (zt_task_data_status() != ZT_OK) { /* a batch the token file could not give */
            zt_tensor_release(losses);
            goto fail;
        }
        const float *l = zt_tensor_data(losses);
        loss = 0;
        for (int64_t i = 0; i < zt_tensor_numel(losses); i++) loss += l[i];
        loss /= (double)zt_tensor_numel(losses);
        zt_tensor_release(losses);
        if (s == 1) first = loss;
        if (s == 1 || s % 10 == 0 || s == steps)
            printf("step %4d/%d | loss %.4f | grad norm %.4f\n", s, steps, loss, info.grad_norm);
    }
    printf("mlp: loss %.4f -> %.4f\n", first, loss);
    zt_engine_free(e);
    zt_tokens_close(&tok);
    return loss < first ? 0 : 1;
fail:
    fprintf(stderr, "zerotask: error: %s\n", zt_error_last());
    zt_engine_free(e);
    zt_tokens_close(&tok);
    return 1;
fail_early:
    fprintf(stderr, "zerotask: error: %s\n", zt_error_last());
    return 1;
}
