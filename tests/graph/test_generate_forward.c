/*
 * tests/graph/test_generate_forward.c: the inference engine's logits of a prompt against the
 * training forward's, bit for bit (same kernels, same blocking; with the AVX-512 GEMM engine).
 *
 * The demo model, initialised from the config's seed; an evaluation step (forward and loss, no
 * update) on the first batch of a token file (its last micro-batch holds the logits); the
 * weights exported; a generator loaded from
 * them gets sequence 0's first P tokens as a prompt (P = seq_len - 1 and a shorter one, prefill
 * in one step and in chunks) and must return the logits rows 0..P-1 of the training forward,
 * byte for byte. Under ZT_GEMM=openblas (no such guarantee) they must agree to 1e-5.
 *
 * Usage: test_generate_forward DS_CONFIG MODEL TOKENS WORKDIR
 */
#include <stdio.h>      /* snprintf */
#include <stdlib.h>     /* calloc */
#include <string.h>     /* memcmp */
#include "zerotask.h"   /* the public API */
#include "zt_test.h"    /* ZT_TEST_* */

#define ZT_OKAY(call)                                                                            \
    do {                                                                                         \
        if ((call) != ZT_OK) {                                                                   \
            fprintf(stderr, "FAIL %s: %s\n", #call, zt_error_last());                            \
            return 1;                                                                            \
        }                                                                                        \
    } while (0)

/* the training forward's logits of the last micro-batch of step 1 (its first sequence) into
 * *out ([T, V] floats), its first T inputs into ids; the weights exported to weights */
static int training_logits(const char *ds, const struct zt_model_shape *s, const char *tokens,
                           const char *weights, float **out, int32_t *ids) {
    struct zt_config cfg;
    struct zt_tokens tok;
    zt_engine_t e;
    zt_gpt2_t m;
    double loss;
    struct zt_step_info info;
    ZT_OKAY(zt_config_load(&cfg, ds, 1));
    ZT_OKAY(zt_tokens_open(&tok, tokens, s->vocab_size));
    ZT_OKAY(zt_engine_init(&e, &cfg));
    ZT_OKAY(zt_gpt2_init(&m, e, s));
    ZT_OKAY(zt_engine_save_safetensors(e, weights));
    ZT_OKAY(zt_gpt2_step_submit(m, &tok, 1, 0));
    ZT_OKAY(zt_gpt2_step_wait(m, &loss, &info));
    int32_t *targets = calloc((size_t)s->seq_len, sizeof *targets);
    /* the logits are the last micro-batch's: its first row is row (accum - 1) * micro */
    int row0 = cfg.micro_batch * (cfg.grad_accum - 1);
    ZT_OKAY(zt_tokens_batch(&tok, 1, cfg.train_batch_size, s->seq_len, row0, 1, ids, targets));
    free(targets);
    zt_tensor_t lg = zt_gpt2_logits(m);
    size_t n = (size_t)s->seq_len * (size_t)s->vocab_size;
    *out = calloc(n, sizeof **out);
    ZT_OKAY(zt_tensor_acquire(lg, 0));
    memcpy(*out, zt_tensor_data(lg), n * sizeof **out);
    zt_tensor_release(lg);
    zt_gpt2_free(m);
    zt_engine_free(e);
    zt_tokens_close(&tok);
    return 0;
}

/* the generator's prompt logits of ids[0..P) with prefill chunks of `chunk` rows */
static int generator_logits(const struct zt_model_shape *s, const char *weights,
                            const int32_t *ids, int P, int chunk, float *out) {
    zt_generator_t g;
    struct zt_gen_weights w = {.safetensors = weights};
    struct zt_gen_config cfg = {.max_batch = 2, .prefill_chunk = chunk};
    struct zt_gen_params p = {.max_new_tokens = 1, .temperature = 0, .top_p = 1,
                              .repetition_penalty = 1, .eos_id = -1};
    ZT_OKAY(zt_generator_create(&g, s, &w, &cfg));
    ZT_OKAY(zt_generator_submit(g, ids, P, &p, NULL, NULL, out, NULL));
    ZT_OKAY(zt_generator_run(g));
    zt_generator_free(g);
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: %s DS_CONFIG MODEL TOKENS WORKDIR\n", argv[0]);
        return 2;
    }
    struct zt_model_shape s;
    char weights[1024];
    snprintf(weights, sizeof weights, "%s/forward.safetensors", argv[4]);
    ZT_OKAY(zt_model_shape_load(&s, argv[2]));
    ZT_OKAY(zt_tasks_init()); /* one runtime for both engines: MPI starts once per process */
    int32_t *ids = calloc((size_t)s.seq_len, sizeof *ids);
    float *train = NULL;
    if (training_logits(argv[1], &s, argv[3], weights, &train, ids)) return 1;
    const char *gemm = getenv("ZT_GEMM");
    int exact = !gemm || strcmp(gemm, "openblas") != 0;
    int lens[2] = {s.seq_len - 1, s.seq_len / 2 + 3}, chunks[2] = {0, 5};
    size_t V = (size_t)s.vocab_size;
    float *gen = calloc((size_t)s.seq_len * V, sizeof *gen);
    for (int i = 0; i < 2; i++) {
        for (int c = 0; c < 2; c++) {
            if (generator_logits(&s, weights, ids, lens[i], chunks[c], gen)) return 1;
            size_t n = (size_t)lens[i] * V;
            if (exact) {
                double md = 0;
                size_t at = 0;
                for (size_t k = 0; k < n; k++)
                    if (fabs(gen[k] - train[k]) > md) md = fabs(gen[k] - train[k]), at = k;
                if (md > 0) fprintf(stderr, "max diff %g at row %zu\n", md, at / V);
                ZT_TEST_TRUE(!memcmp(gen, train, n * sizeof *gen), "prompt of %d tokens, "
                             "chunks of %d: logits differ from the training forward's", lens[i],
                             chunks[c]);
            } else {
                double maxd = 0;
                for (size_t k = 0; k < n; k++)
                    maxd = fabs(gen[k] - train[k]) > maxd ? fabs(gen[k] - train[k]) : maxd;
                ZT_TEST_TRUE(maxd <= 1e-5, "prompt of %d tokens: max diff %g", lens[i], maxd);
            }
        }
    }
    free(gen);
    free(train);
    free(ids);
    zt_tasks_free();
    if (zt_test_failures) return 1;
    printf("ok: prompt logits = the training forward's (%s)\n", exact ? "bit for bit" : "1e-5");
    return 0;
}
