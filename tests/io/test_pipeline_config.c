/*
 * tests/io/test_pipeline_config.c: proves the "pipeline" section parses to the fields zt_config.h
 * documents and turns every bad input into ZT_ERR_CONFIG with one line naming the file and the
 * JSON path: DeepSpeed's defaults ("auto" stages, "best" partition as "parameters",
 * pipe/grad_partitioned true), the accepted values, the refused ones (seed_layers true,
 * partition "profile", a bad regex), wrong types, unknown keys; the batch rule over the
 * data-parallel replicas (world_size / stages), a world the stages do not divide, ZeRO stages
 * 2-3 with a pipeline; and zt_pipe_rank's layout (pipe outermost).
 */
#include <string.h> /* strcmp */

#include "zt_config.h"    /* zt_config_parse, zt_pipe_rank */
#include "zt_status.h"    /* zt_error_last */
#include "zt_test.h"      /* ZT_TEST_TRUE, zt_test_finish */
#include "config_check.h" /* EXPECT_ERR, OK_WS */

#define PIPE(body) "{\"train_batch_size\": 8, \"pipeline\": {" body "}}"

static void test_defaults(void) {
    struct zt_config c = OK_WS("{\"train_batch_size\": 8}", 1);
    const struct zt_pipeline_cfg *p = &c.pipeline;
    ZT_TEST_TRUE(p->stages == 1 && p->partition == ZT_PIPE_PARAMETERS &&
                     p->activation_checkpoint_interval == 0 && p->pipe_partitioned &&
                     p->grad_partitioned && p->schedule == ZT_PIPE_1F1B,
                 "no section: 1 stage, DeepSpeed's defaults");
    c = OK_WS(PIPE("\"stages\": \"auto\", \"partition\": \"best\", \"seed_layers\": false, "
                   "\"activation_checkpoint_interval\": 0, \"pipe_partitioned\": true, "
                   "\"grad_partitioned\": true"), 1);
    ZT_TEST_TRUE(p->stages == 1 && p->partition == ZT_PIPE_PARAMETERS,
                 "DeepSpeed's defaults spelled out");
}

static void test_accepted(void) {
    struct zt_config c = OK_WS(PIPE("\"stages\": 2, \"partition\": \"uniform\", "
                                    "\"activation_checkpoint_interval\": 1, "
                                    "\"pipe_partitioned\": false, \"schedule\": \"gpipe\""), 2);
    const struct zt_pipeline_cfg *p = &c.pipeline;
    ZT_TEST_TRUE(p->stages == 2 && p->partition == ZT_PIPE_UNIFORM &&
                     p->activation_checkpoint_interval == 1 && !p->pipe_partitioned &&
                     p->schedule == ZT_PIPE_GPIPE && c.world_size == 2,
                 "stages 2 uniform gpipe");
    ZT_TEST_TRUE(c.actckpt.enabled && c.actckpt.number_checkpoints < 0,
                 "activation_checkpoint_interval 1: every layer checkpointed");
    /* 2 stages of 4 ranks: 2 replicas; train_batch_size 8 = micro 4 x accum 1 x 2 */
    ZT_TEST_TRUE(c.micro_batch == 8 && c.grad_accum == 1, "1 replica: micro-batch 8 (got %d)",
                 c.micro_batch);
    c = OK_WS(PIPE("\"stages\": 2, \"partition\": \"type:block|head\""), 4);
    ZT_TEST_TRUE(p->partition == ZT_PIPE_TYPE && !strcmp(p->partition_type, "block|head") &&
                     c.micro_batch == 4 && c.world_size == 4,
                 "type:REGEX; 4 ranks, 2 stages: 2 replicas, micro-batch 4 (got %d)",
                 c.micro_batch);
    c = OK_WS("{\"train_micro_batch_size_per_gpu\": 2, \"gradient_accumulation_steps\": 4, "
              "\"pipeline\": {\"stages\": 3}}", 6);
    ZT_TEST_TRUE(c.train_batch_size == 16, "6 ranks, 3 stages: 2 replicas x 2 x 4 = 16 (got %d)",
                 c.train_batch_size);
    c = OK_WS(PIPE("\"stages\": 2, \"partition\": \"weights\", "
                   "\"partition_weights\": [0.5, 2, 1e-3]"), 2);
    ZT_TEST_TRUE(p->partition == ZT_PIPE_WEIGHTS && p->nweights == 3 && p->weights[0] == 0.5 &&
                     p->weights[2] == 1e-3,
                 "weights: 3 of them");
    c = OK_WS("{\"train_batch_size\": 8, \"pipeline\": {\"stages\": 2}, "
              "\"zero_optimization\": {\"stage\": 1}}", 2);
    ZT_TEST_TRUE(c.zero_stage == 1, "ZeRO stage 1 with a pipeline");
}

static void test_refused(void) {
    EXPECT_ERR(PIPE("\"seed_layers\": true"), "config case.json: pipeline.seed_layers: true is "
               "not implemented");
    EXPECT_ERR(PIPE("\"partition\": \"profile\""), "pipeline.partition: \"profile\" is not "
               "implemented");
    EXPECT_ERR(PIPE("\"partition\": \"type:(\""), "pipeline.partition: \"type:(\": expected a "
               "POSIX extended regular expression");
    EXPECT_ERR(PIPE("\"partition\": \"type:\""), "pipeline.partition: expected \"parameters\"");
    EXPECT_ERR(PIPE("\"partition\": \"balanced\""), "got \"balanced\"");
    EXPECT_ERR(PIPE("\"schedule\": \"interleaved\""), "pipeline.schedule: expected \"1f1b\"");
    EXPECT_ERR_WS(PIPE("\"stages\": 3"), 4, "config case.json: pipeline.stages: 3 does not "
                  "divide the world size 4");
    EXPECT_ERR_WS("{\"train_batch_size\": 8, \"pipeline\": {\"stages\": 2}, "
                  "\"zero_optimization\": {\"stage\": 2}}", 2, "zero_optimization.stage: 2 with "
                  "pipeline.stages 2: expected ZeRO stage 0 or 1");
    EXPECT_ERR_WS("{\"train_batch_size\": 6, \"train_micro_batch_size_per_gpu\": 2, "
                  "\"pipeline\": {\"stages\": 2}}", 4, "train_batch_size must equal "
                  "train_micro_batch_size_per_gpu * gradient_accumulation_steps * the "
                  "data-parallel replicas (world_size / pipeline.stages)");
}

static void test_types(void) {
    EXPECT_ERR(PIPE("\"stages\": 0"), "pipeline.stages");
    EXPECT_ERR(PIPE("\"stages\": 1.5"), "pipeline.stages");
    EXPECT_ERR(PIPE("\"stages\": \"two\""), "pipeline.stages: expected \"auto\" or an integer "
               ">= 1, got \"two\"");
    EXPECT_ERR(PIPE("\"partition\": 1"), "pipeline.partition");
    EXPECT_ERR(PIPE("\"partition\": \"weights\""), "pipeline.partition: partition "
               "\"weights\" and partition_weights go together");
    EXPECT_ERR(PIPE("\"partition_weights\": [1, 2]"), "pipeline.partition_weights: partition "
               "\"weights\" and partition_weights go together");
    EXPECT_ERR(PIPE("\"partition\": \"weights\", \"partition_weights\": [1, 0]"),
               "pipeline.partition_weights: entry 1: expected a positive number");
    EXPECT_ERR(PIPE("\"partition\": \"weights\", \"partition_weights\": []"),
               "pipeline.partition_weights: expected a list of 1 to 256 numbers");
    EXPECT_ERR(PIPE("\"activation_checkpoint_interval\": 2"),
               "pipeline.activation_checkpoint_interval: 2: expected 0 or 1");
    EXPECT_ERR(PIPE("\"activation_checkpoint_interval\": -1"),
               "pipeline.activation_checkpoint_interval");
    EXPECT_ERR(PIPE("\"pipe_partitioned\": 1"), "pipeline.pipe_partitioned");
    EXPECT_ERR(PIPE("\"grad_partitioned\": \"yes\""), "pipeline.grad_partitioned");
    EXPECT_ERR(PIPE("\"stage\": 2"), "pipeline.stage", "did you mean");
    EXPECT_ERR("{\"train_batch_size\": 8, \"pipeline\": 2}", "pipeline");
}

/* 3 stages x 2 replicas: rank = stage * 2 + dp_rank */
static void test_layout(void) {
    struct zt_pipeline_cfg p;
    struct zt_config c;
    zt_config_defaults(&c);
    p = c.pipeline;
    p.stages = 3;
    for (int r = 0; r < 6; r++) {
        struct zt_pipe_rank x = zt_pipe_rank(&p, 6, r);
        ZT_TEST_TRUE(x.stage == r / 2 && x.dp_rank == r % 2 && x.stages == 3 && x.dp == 2,
                     "rank %d: stage %d dp %d", r, x.stage, x.dp_rank);
    }
}

int main(void) {
    test_defaults();
    test_accepted();
    test_refused();
    test_types();
    test_layout();
    return zt_test_finish("test_pipeline_config");
}
