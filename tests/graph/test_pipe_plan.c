/*
 * tests/graph/test_pipe_plan.c: proves the pipeline plan (graph/zt_pipe_plan.h): the balanced cut
 * gives the least possible largest stage (checked against every cut by brute force on small
 * cases, zeros included), every stage non-empty and the ranges consecutive, and shares the rest
 * evenly when one heavy layer is the bottleneck (gpt2-124M on 8 stages); the uniform cut puts
 * the remainder first (DeepSpeed's partition_uniform); GPT-2's specs (embed, blocks, ln_f, head)
 * with their parameter counts; the three methods on gpt2-124M's shape; the refusals (more stages
 * than layers, a regex that matches nothing); the description line.
 */
#include <stdio.h>  /* snprintf */
#include <string.h> /* strstr */

#include "zt_pipe_plan.h" /* our API */
#include "zt_test.h"      /* ZT_TEST_TRUE, zt_test_finish */

/* the least largest part of w[0..n) in `parts` non-empty consecutive parts, by trying every cut */
static double brute(const double *w, int n, int parts, int from) {
    if (parts == 1) {
        double s = 0;
        for (int i = from; i < n; i++) s += w[i];
        return s;
    }
    double best = 1e300, s = 0;
    for (int i = from; i < n - parts + 1; i++) {
        s += w[i];
        const double rest = brute(w, n, parts - 1, i + 1), m = s > rest ? s : rest;
        if (m < best) best = m;
    }
    return best;
}

static void test_balanced(void) {
    const double cases[][8] = {{5, 1, 1, 1, 1, 1, 1, 5}, {1, 2, 3, 4, 5, 6, 7, 8},
                               {0, 0, 1, 0, 1, 0, 0, 1}, {9, 0, 0, 0, 0, 0, 0, 9}};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++)
        for (int parts = 1; parts <= 8; parts++) {
            int first[9];
            ZT_TEST_TRUE(zt_pipe_partition_balanced(cases[c], 8, parts, first) == ZT_OK,
                         "case %zu parts %d", c, parts);
            double worst = 0;
            int ok = first[0] == 0 && first[parts] == 8;
            for (int k = 0; k < parts; k++) {
                double sum = 0;
                ok &= first[k + 1] > first[k];
                for (int i = first[k]; i < first[k + 1]; i++) sum += cases[c][i];
                if (sum > worst) worst = sum;
            }
            ZT_TEST_TRUE(ok && worst == brute(cases[c], 8, parts, 0), "case %zu, %d parts: "
                         "largest %g, the least possible %g", c, parts, worst,
                         brute(cases[c], 8, parts, 0));
        }
    int first[4];
    ZT_TEST_TRUE(zt_pipe_partition_balanced(cases[0], 2, 3, first) == ZT_ERR_CONFIG,
                 "3 parts of 2 items refused");
}

static void test_uniform(void) {
    int first[4];
    ZT_TEST_TRUE(zt_pipe_partition_uniform(11, 3, first) == ZT_OK && first[0] == 0 &&
                     first[1] == 4 && first[2] == 8 && first[3] == 11,
                 "11 in 3: 4, 4, 3 (got %d %d %d)", first[1], first[2], first[3]);
}

static void test_gpt2(void) {
    const struct zt_model_shape s = {.vocab_size = 50304, .seq_len = 1024, .n_embd = 768,
                                     .n_layer = 12, .n_head = 12};
    ZT_TEST_TRUE(!strcmp(zt_pipe_spec_name(&s, 0), "embed") &&
                     !strcmp(zt_pipe_spec_name(&s, 12), "block") &&
                     !strcmp(zt_pipe_spec_name(&s, 13), "ln_f") &&
                     !strcmp(zt_pipe_spec_name(&s, 14), "head"),
                 "spec names");
    ZT_TEST_TRUE(zt_pipe_spec_params(&s, 1) == 7087872 &&
                     zt_pipe_spec_params(&s, 0) == 50304LL * 768 + 1024 * 768,
                 "a block has 7.09M parameters (got %lld)", (long long)zt_pipe_spec_params(&s, 1));
    struct zt_config c;
    zt_config_defaults(&c);
    struct zt_pipeline_cfg p = c.pipeline;
    struct zt_pipe_plan pl;
    p.stages = 2;
    ZT_TEST_TRUE(zt_pipe_plan_gpt2(&s, &p, &pl) == ZT_OK && pl.nspecs == 15 &&
                     pl.first[1] == 7 && pl.first[2] == 15,
                 "parameters, 2 stages: embed + blocks 0-5 | blocks 6-11, ln_f, head (cut %d)",
                 pl.first[1]);
    /* 8 stages: the embedding alone is the bottleneck; the blocks still share out evenly */
    p.stages = 8;
    ZT_TEST_TRUE(zt_pipe_plan_gpt2(&s, &p, &pl) == ZT_OK, "8 stages");
    int most = 0; /* blocks (specs 1..12) in a middle stage */
    for (int k = 1; k < 7; k++) {
        int blocks = 0;
        for (int i = pl.first[k]; i < pl.first[k + 1]; i++) blocks += i >= 1 && i <= 12;
        if (blocks > most) most = blocks;
    }
    ZT_TEST_TRUE(pl.first[1] == 1 && most <= 2 && pl.first[7] >= 13,
                 "8 stages by parameters: embed alone, at most 2 blocks a middle stage (cuts "
                 "%d %d %d %d %d %d %d)", pl.first[1], pl.first[2], pl.first[3], pl.first[4],
                 pl.first[5], pl.first[6], pl.first[7]);
    p.stages = 2;
    p.partition = ZT_PIPE_UNIFORM;
    ZT_TEST_TRUE(zt_pipe_plan_gpt2(&s, &p, &pl) == ZT_OK && pl.first[1] == 8,
                 "uniform, 2 stages: 8 | 7 specs (cut %d)", pl.first[1]);
    p.partition = ZT_PIPE_TYPE;
    snprintf(p.partition_type, sizeof p.partition_type, "BLOCK");
    p.stages = 3;
    ZT_TEST_TRUE(zt_pipe_plan_gpt2(&s, &p, &pl) == ZT_OK && pl.weight[0] == 4 &&
                     pl.weight[1] == 4 && pl.weight[2] == 4,
                 "type:BLOCK (any case), 3 stages: 4 blocks each (%g %g %g)", pl.weight[0],
                 pl.weight[1], pl.weight[2]);
    char line[160];
    zt_pipe_plan_describe(&pl, &s, 0, line, sizeof line);
    ZT_TEST_TRUE(strstr(line, "stage 0 of 3: layers 0-") && strstr(line, "(embed .. block 3)"),
                 "describe: %s", line);
    snprintf(p.partition_type, sizeof p.partition_type, "^attn$");
    ZT_TEST_TRUE(zt_pipe_plan_gpt2(&s, &p, &pl) == ZT_ERR_CONFIG &&
                     strstr(zt_error_last(), "matches none of the layers"),
                 "a regex that matches nothing: %s", zt_error_last());
    /* weights: 15 specs of weight 1 but block 0 (spec 1) of 13: 2 stages cut right after it */
    p.partition = ZT_PIPE_WEIGHTS;
    p.stages = 2;
    p.nweights = 15;
    for (int i = 0; i < 15; i++) p.weights[i] = i == 1 ? 13 : 1;
    ZT_TEST_TRUE(zt_pipe_plan_gpt2(&s, &p, &pl) == ZT_OK && pl.first[1] == 2 &&
                     pl.weight[0] == 14 && pl.weight[1] == 13,
                 "weights: embed and the heavy block 0 | the rest (cut %d, %g %g)", pl.first[1],
                 pl.weight[0], pl.weight[1]);
    p.nweights = 14;
    ZT_TEST_TRUE(zt_pipe_plan_gpt2(&s, &p, &pl) == ZT_ERR_CONFIG &&
                     strstr(zt_error_last(), "partition_weights has 14 entries, the model has "
                                             "15 layers"),
                 "weights of another model: %s", zt_error_last());
    p.partition = ZT_PIPE_PARAMETERS;
    p.stages = 16;
    ZT_TEST_TRUE(zt_pipe_plan_gpt2(&s, &p, &pl) == ZT_ERR_CONFIG &&
                     strstr(zt_error_last(), "pipeline.stages 16: expected at most 15"),
                 "16 stages of 15 layers: %s", zt_error_last());
}

int main(void) {
    test_balanced();
    test_uniform();
    test_gpt2();
    return zt_test_finish("test_pipe_plan");
}
