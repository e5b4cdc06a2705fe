/*
 * tests/io/test_config.c: proves the DeepSpeed config and model-shape readers accept what they
 * document and turn every bad input into ZT_ERR_CONFIG with one line that names the file and the
 * JSON path: unknown keys (with "did you mean"), DeepSpeed keys not implemented yet, duplicated
 * keys, wrong types, out-of-range values, empty files, non-objects, JSON syntax errors (with
 * line and byte offset), and DeepSpeed's train-batch-size rule in all its branches.
 * Each error case checks the status code and the key parts of the message.
 */
#include <stdio.h>    /* fopen, fputs */
#include <stdlib.h>   /* getenv */
#include <string.h>   /* strstr */
#include <sys/stat.h> /* mkdir */

#include "zt_config.h" /* zt_config_parse, zt_config_load, zt_model_shape_parse */
#include "zt_status.h" /* zt_error_last */
#include "zt_test.h"   /* ZT_TEST_TRUE, zt_test_finish */
#include "config_check.h" /* EXPECT_ERR, OK_WS */

#define OK(json, ws) OK_WS(json, ws)

#define BATCH(c, tbs, mb, ga)                                                                    \
    ZT_TEST_TRUE((c).train_batch_size == (tbs) && (c).micro_batch == (mb) &&                     \
                     (c).grad_accum == (ga),                                                     \
                 "batch got %d/%d/%d want %d/%d/%d", (c).train_batch_size, (c).micro_batch,      \
                 (c).grad_accum, tbs, mb, ga)

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        ZT_TEST_FAIL("cannot write %s", path);
        return;
    }
    fputs(text, f);
    fclose(f);
}

static void test_valid(void) {
    /* the demo config shipped in configs/ */
    const char *src = getenv("ZT_SOURCE_DIR");
    char p[1024];
    snprintf(p, sizeof p, "%s/configs/demo_ds.json", src ? src : "../../..");
    struct zt_config c;
    enum zt_status rc = zt_config_load(&c, p, 1);
    ZT_TEST_TRUE(rc == ZT_OK, "demo config: %s", zt_error_last());
    if (rc == ZT_OK) {
        BATCH(c, 16, 8, 2);
        ZT_TEST_TRUE(c.optim == ZT_OPTIM_ADAMW && c.lr == 0.003f && c.beta1 == 0.9f &&
                         c.beta2 == 0.95f && c.eps == 1e-8f && c.weight_decay == 0.01f,
                     "demo optimizer");
        ZT_TEST_TRUE(c.sched == ZT_LR_WARMUP_DECAY && c.warmup_max_lr == 0.003f &&
                         c.warmup_num_steps == 30 && c.total_num_steps == 300 &&
                         c.warmup_type == ZT_WARMUP_LINEAR,
                     "demo scheduler");
        ZT_TEST_TRUE(c.gradient_clipping == 1.0f && c.steps_per_print == 10 && c.seed == 1234,
                     "demo other");
        ZT_TEST_TRUE(strcmp(c.path, p) == 0, "path recorded");
    }
    /* defaults */
    c = OK("{\"train_batch_size\": 8}", 1);
    BATCH(c, 8, 8, 1);
    ZT_TEST_TRUE(c.optim == ZT_OPTIM_ADAMW && c.lr == 1e-3f && c.beta1 == 0.9f &&
                     c.beta2 == 0.999f && c.eps == 1e-8f && c.weight_decay == 0.01f &&
                     c.adam_w_mode == 1 && c.sched == ZT_LR_CONSTANT && c.steps_per_print == 10 &&
                     c.seed == 1234 && c.gradient_clipping == 0.0f && c.zero_stage == 0,
                 "defaults");
    /* Adam, case-insensitive, weight decay default 0, L2 mode allowed */
    c = OK("{\"train_batch_size\": 8, \"optimizer\": {\"type\": \"ADAM\", \"params\": "
           "{\"adam_w_mode\": false, \"lr\": 0.5}}}", 1);
    ZT_TEST_TRUE(c.optim == ZT_OPTIM_ADAM && c.weight_decay == 0.0f && c.adam_w_mode == 0 &&
                     c.lr == 0.5f, "Adam");
    c = OK("{\"train_batch_size\": 8, \"optimizer\": {\"type\": \"adamw\"}}", 1);
    ZT_TEST_TRUE(c.optim == ZT_OPTIM_ADAMW && c.weight_decay == 0.01f, "adamw lower case");
    /* precision sections that ask for fp32, zero stage 0 */
    c = OK("{\"train_batch_size\": 8, \"fp16\": {\"enabled\": false}, \"bf16\": {}, "
           "\"zero_optimization\": {\"stage\": 0}, \"seed\": 42}", 1);
    ZT_TEST_TRUE(c.seed == 42, "seed");
    ZT_TEST_TRUE(c.zero_stage == 0 && c.reduce_bucket_size == 500000000 && c.overlap_comm == 1 &&
                     c.reduce_scatter == 1, "zero defaults (DeepSpeed's)");
    c = OK("{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 2, "
           "\"reduce_bucket_size\": 5e5, \"allgather_bucket_size\": 1000, \"overlap_comm\": false, "
           "\"contiguous_gradients\": true, \"reduce_scatter\": false}}", 1);
    ZT_TEST_TRUE(c.zero_stage == 2 && c.reduce_bucket_size == 500000 &&
                     c.allgather_bucket_size == 1000 && c.overlap_comm == 0 && c.reduce_scatter == 0,
                 "zero_optimization keys");
    ZT_TEST_TRUE(c.stage3_max_live_parameters == 1000000000 &&
                     c.stage3_prefetch_bucket_size == 50000000 &&
                     c.stage3_param_persistence_threshold == 100000, "stage 3 defaults (DeepSpeed's)");
    ZT_TEST_TRUE(c.offload_optimizer.device == ZT_OFFLOAD_NONE &&
                     c.offload_optimizer.buffer_count == 0 && c.offload_param.buffer_count == 5 &&
                     c.offload_optimizer.pipeline_read && c.offload_optimizer.pipeline_write &&
                     c.offload_param.buffer_size == 100000000 &&
                     c.offload_param.max_in_cpu == 1000000000 &&
                     strcmp(c.offload_optimizer.nvme_path, "/local_nvme") == 0 &&
                     c.aio_block_size == 1048576 && c.aio_queue_depth == 8 &&
                     !c.aio_single_submit && c.aio_overlap_events && c.aio_thread_count == 1,
                 "offload and aio defaults (DeepSpeed's, pipelining on, optimizer buffers auto)");
    c = OK("{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 1, "
           "\"offload_optimizer\": {\"device\": \"nvme\", \"buffer_count\": \"auto\"}}}", 1);
    ZT_TEST_TRUE(c.offload_optimizer.buffer_count == 0, "offload_optimizer.buffer_count \"auto\"");
    c = OK("{\"train_batch_size\": 8, \"checkpoint\": {\"dir\": \"ck\", \"save_interval\": 100, "
           "\"keep_last\": 3}}", 1);
    ZT_TEST_TRUE(strcmp(c.ckpt_dir, "ck") == 0 && c.ckpt_save_interval == 100 &&
                     c.ckpt_keep_last == 3, "checkpoint {dir, save_interval, keep_last}");
    c = OK("{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 3, "
           "\"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"/mnt/a\", "
           "\"buffer_count\": 2, \"pin_memory\": true, \"pipeline_read\": false}, "
           "\"offload_param\": {\"device\": \"nvme\", \"nvme_path\": \"/mnt/b\", "
           "\"buffer_size\": 1e6, \"max_in_cpu\": 5e5}}, \"aio\": {\"block_size\": 262144, "
           "\"queue_depth\": 32, \"thread_count\": 2, \"single_submit\": true, "
           "\"overlap_events\": false}}", 1);
    ZT_TEST_TRUE(c.offload_optimizer.device == ZT_OFFLOAD_NVME &&
                     strcmp(c.offload_optimizer.nvme_path, "/mnt/a") == 0 &&
                     c.offload_optimizer.buffer_count == 2 && c.offload_optimizer.pin_memory &&
                     !c.offload_optimizer.pipeline_read && c.offload_optimizer.pipeline_write &&
                     c.offload_param.device == ZT_OFFLOAD_NVME &&
                     strcmp(c.offload_param.nvme_path, "/mnt/b") == 0 &&
                     c.offload_param.buffer_size == 1000000 && c.offload_param.max_in_cpu == 500000 &&
                     c.aio_block_size == 262144 && c.aio_queue_depth == 32 &&
                     c.aio_thread_count == 2 && c.aio_single_submit && !c.aio_overlap_events,
                 "offload and aio keys");
    c = OK("{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 3, "
           "\"stage3_max_live_parameters\": 3e5, \"stage3_prefetch_bucket_size\": 0, "
           "\"stage3_param_persistence_threshold\": 64}}", 1);
    ZT_TEST_TRUE(c.zero_stage == 3 && c.stage3_max_live_parameters == 300000 &&
                     c.stage3_prefetch_bucket_size == 0 && c.stage3_param_persistence_threshold == 64,
                 "stage 3 keys");
    /* scheduler defaults (DeepSpeed's) */
    c = OK("{\"train_batch_size\": 8, \"scheduler\": {\"type\": \"WarmupLR\"}}", 1);
    ZT_TEST_TRUE(c.sched == ZT_LR_WARMUP && c.warmup_min_lr == 0.0f && c.warmup_max_lr == 0.001f &&
                     c.warmup_num_steps == 1000 && c.warmup_type == ZT_WARMUP_LOG, "WarmupLR defaults");
    c = OK("{\"train_batch_size\": 8, \"scheduler\": {\"type\": \"WarmupCosineLR\", \"params\": "
           "{\"total_num_steps\": 100}}}", 1);
    ZT_TEST_TRUE(c.sched == ZT_LR_WARMUP_COSINE && c.warmup_min_ratio == 0.0f &&
                     c.cos_min_ratio == 0.0001f && c.total_num_steps == 100, "cosine defaults");
}

static void test_batch_rule(void) {
    struct zt_config c;
    c = OK("{\"train_batch_size\": 16, \"train_micro_batch_size_per_gpu\": 4, "
           "\"gradient_accumulation_steps\": 2}", 2);
    BATCH(c, 16, 4, 2);
    ZT_TEST_TRUE(c.world_size == 2, "world size recorded");
    EXPECT_ERR("{\"train_batch_size\": 16, \"train_micro_batch_size_per_gpu\": 4, "
               "\"gradient_accumulation_steps\": 2}",
               "config case.json", "train_batch_size", "16 != 4 * 2 * 1");
    c = OK("{\"train_batch_size\": 32, \"train_micro_batch_size_per_gpu\": 4}", 2);
    BATCH(c, 32, 4, 4);
    EXPECT_ERR("{\"train_batch_size\": 10, \"train_micro_batch_size_per_gpu\": 4}",
               "10 != 4 * 2 * 1");
    c = OK("{\"train_batch_size\": 32, \"gradient_accumulation_steps\": 2}", 2);
    BATCH(c, 32, 8, 2);
    EXPECT_ERR_WS("{\"train_batch_size\": 30, \"gradient_accumulation_steps\": 4}", 2,
                  "30 != 3 * 4 * 2");
    c = OK("{\"train_micro_batch_size_per_gpu\": 4, \"gradient_accumulation_steps\": 3}", 2);
    BATCH(c, 24, 4, 3);
    c = OK("{\"train_batch_size\": 16}", 4);
    BATCH(c, 16, 4, 1);
    EXPECT_ERR_WS("{\"train_batch_size\": 10}", 4, "10 != 2 * 1 * 4");
    EXPECT_ERR_WS("{\"train_batch_size\": 3}", 4, "3 != 0 * 1 * 4");
    c = OK("{\"train_micro_batch_size_per_gpu\": 3}", 2);
    BATCH(c, 6, 3, 1);
    EXPECT_ERR("{}", "config case.json", "either train_batch_size or train_micro_batch_size_per_gpu");
    EXPECT_ERR("{\"gradient_accumulation_steps\": 2}", "either train_batch_size");
    expect_err_(__LINE__, "{\"train_batch_size\": 8}", 0, ZT_ERR_INVALID, "world size", NULL);
}

static void test_keys(void) {
    struct zt_config c;
    EXPECT_ERR("{\"train_batch_szie\": 8}", "config case.json: train_batch_szie: unknown key",
               "did you mean 'train_batch_size'?");
    EXPECT_ERR("{\"train_batch_size\": 8, \"optimzer\": {}}", "optimzer", "did you mean 'optimizer'?");
    EXPECT_ERR("{\"train_batch_size\": 8, \"banana\": 1}", "banana: unknown key");
    EXPECT_ERR("{\"train_batch_size\": 8, \"optimizer\": {\"type\": \"AdamW\", \"params\": "
               "{\"lrr\": 0.1}}}", "optimizer.params.lrr: unknown key", "did you mean 'lr'?");
    EXPECT_ERR("{\"train_batch_size\": 8, \"scheduler\": {\"type\": \"WarmupLR\", \"params\": "
               "{\"warmup_num_step\": 10}}}", "scheduler.params.warmup_num_step",
               "did you mean 'warmup_num_steps'?");
    /* mixed precision: DeepSpeed's keys and defaults */
    c = OK("{\"train_batch_size\": 8}", 1);
    ZT_TEST_TRUE(c.precision == ZT_PREC_FP32 && c.loss_scale == 0 && c.initial_scale_power == 16 &&
                     c.loss_scale_window == 1000 && c.hysteresis == 2 &&
                     !c.consecutive_hysteresis && c.min_loss_scale == 1,
                 "precision defaults (fp32; DeepSpeed's fp16 scaler defaults)");
    c = OK("{\"train_batch_size\": 8, \"bf16\": {\"enabled\": true}}", 1);
    ZT_TEST_TRUE(c.precision == ZT_PREC_BF16, "bf16 enabled");
    c = OK("{\"train_batch_size\": 8, \"bfloat16\": {\"enabled\": true}, \"fp16\": "
           "{\"enabled\": false}, \"communication_data_type\": \"bf16\"}", 1);
    ZT_TEST_TRUE(c.precision == ZT_PREC_BF16, "bfloat16 alias, fp16 off, matching comm type");
    c = OK("{\"train_batch_size\": 8, \"fp16\": {\"enabled\": true, \"loss_scale\": 0, "
           "\"initial_scale_power\": 12, \"loss_scale_window\": 50, \"hysteresis\": 3, "
           "\"consecutive_hysteresis\": true, \"min_loss_scale\": 0.5}}", 1);
    ZT_TEST_TRUE(c.precision == ZT_PREC_FP16 && c.loss_scale == 0 && c.initial_scale_power == 12 &&
                     c.loss_scale_window == 50 && c.hysteresis == 3 && c.consecutive_hysteresis &&
                     c.min_loss_scale == 0.5, "fp16 scaler keys");
    c = OK("{\"train_batch_size\": 8, \"fp16\": {\"enabled\": true, \"loss_scale\": 128}}", 1);
    ZT_TEST_TRUE(c.precision == ZT_PREC_FP16 && c.loss_scale == 128, "fp16 static scale");
    EXPECT_ERR("{\"train_batch_size\": 8, \"fp16\": {\"enabled\": true}, \"bf16\": "
               "{\"enabled\": true}}", "fp16: and \"bf16\" are both enabled");
    EXPECT_ERR("{\"train_batch_size\": 8, \"bf16\": {}, \"bfloat16\": {}}",
               "bfloat16: \"bf16\" and \"bfloat16\" are the same section");
    EXPECT_ERR("{\"train_batch_size\": 8, \"fp16\": {\"enabled\": true, \"loss_scale\": -1}}",
               "fp16.loss_scale: expected a number >= 0, got -1");
    EXPECT_ERR("{\"train_batch_size\": 8, \"fp16\": {\"initial_scale_power\": 200}}",
               "fp16.initial_scale_power: expected an integer in [0, 126], got 200");
    EXPECT_ERR("{\"train_batch_size\": 8, \"fp16\": {\"loss_scale_window\": 0}}",
               "fp16.loss_scale_window: expected an integer >= 1, got 0");
    EXPECT_ERR("{\"train_batch_size\": 8, \"fp16\": {\"hysteresis\": 0.5}}",
               "fp16.hysteresis: expected an integer >= 1");
    EXPECT_ERR("{\"train_batch_size\": 8, \"fp16\": {\"min_loss_scale\": 0}}",
               "fp16.min_loss_scale: expected a number > 0, got 0");
    EXPECT_ERR("{\"train_batch_size\": 8, \"fp16\": {\"enable\": true}}",
               "fp16.enable: unknown key; did you mean 'enabled'?");
    EXPECT_ERR("{\"train_batch_size\": 8, \"bf16\": {\"enabled\": true, \"loss_scale\": 1}}",
               "bf16.loss_scale: unknown key");
    EXPECT_ERR("{\"train_batch_size\": 8, \"communication_data_type\": \"fp8\"}",
               "communication_data_type: expected \"fp32\", \"bf16\" or \"fp16\", got \"fp8\"");
    EXPECT_ERR("{\"train_batch_size\": 8, \"bf16\": {\"enabled\": true}, "
               "\"communication_data_type\": \"fp32\"}",
               "communication_data_type: is \"fp32\" but training runs in bf16");
    /* a parameter of another scheduler type */
    EXPECT_ERR("{\"train_batch_size\": 8, \"scheduler\": {\"type\": \"WarmupLR\", \"params\": "
               "{\"total_num_steps\": 10}}}", "scheduler.params.total_num_steps: unknown key");
    EXPECT_ERR("{\"train_batch_size\": 8, \"scheduler\": {\"type\": \"WarmupCosineLR\", \"params\": "
               "{\"total_num_steps\": 10, \"warmup_max_lr\": 0.1}}}",
               "scheduler.params.warmup_max_lr: unknown key");
    EXPECT_ERR("{\"train_batch_size\": 8, \"zero_optimization\": {\"stgae\": 0}}",
               "zero_optimization.stgae", "did you mean 'stage'?");
}

static void test_not_implemented(void) {
    const char *ni = "is a DeepSpeed key that zerotask does not implement yet";
    EXPECT_ERR("{\"train_batch_size\": 8, \"amp\": {\"enabled\": true}}", "amp:", ni);
    EXPECT_ERR("{\"train_batch_size\": 8, \"fp16\": {\"enabled\": true, \"auto_cast\": true}}",
               "fp16.auto_cast:", ni);
    EXPECT_ERR("{\"train_batch_size\": 8, \"fp16\": {\"fp16_master_weights_and_grads\": true}}",
               "fp16.fp16_master_weights_and_grads:", ni);
    EXPECT_ERR("{\"train_batch_size\": 8, \"bf16\": {\"enabled\": true, "
               "\"immediate_grad_update\": true}}", "bf16.immediate_grad_update:", ni);
    static const char *const keys[] = {
        "flops_profiler", "tensorboard", "wandb", "csv_monitor",
        "wall_clock_breakdown", "dump_state", "prescale_gradients", "gradient_predivide_factor",
        "sparse_gradients", "data_types",
        "elasticity", "zero_allow_untested_optimizer", NULL};
    for (int i = 0; keys[i]; i++) {
        char json[256], want[128];
        snprintf(json, sizeof json, "{\"train_batch_size\": 8, \"%s\": {}}", keys[i]);
        snprintf(want, sizeof want, "case.json: %s: %s", keys[i], ni);
        expect_err_(__LINE__, json, 1, ZT_ERR_CONFIG, want, NULL);
    }
    EXPECT_ERR("{\"train_batch_size\": 8, \"checkpoint\": {\"tag_validation\": \"Warn\"}}",
               "checkpoint.tag_validation:", ni);
    EXPECT_ERR("{\"train_batch_size\": 8, \"checkpoint\": {\"keep_last\": -1}}",
               "checkpoint.keep_last:", "expected an integer in [0, 1048576]");
    EXPECT_ERR("{\"train_batch_size\": 8, \"checkpoint\": {\"dir\": 3}}", "checkpoint.dir:",
               "expected a string");
    EXPECT_ERR("{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 3, "
               "\"stage3_max_live_parameters\": 0}}",
               "zero_optimization.stage3_max_live_parameters", "expected an integer >= 1");
    EXPECT_ERR("{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 3, "
               "\"stage3_max_reuse_distance\": 1000}}",
               "zero_optimization.stage3_max_reuse_distance", "does not implement yet");
    EXPECT_ERR("{\"train_batch_size\": 8, \"zero_optimization\": {\"reduce_bucket_size\": 0}}",
               "zero_optimization.reduce_bucket_size", "expected an integer >= 1");
    EXPECT_ERR("{\"train_batch_size\": 8, \"zero_optimization\": {\"overlap_comm\": 1}}",
               "zero_optimization.overlap_comm", "expected true or false");
    EXPECT_ERR("{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 0, "
               "\"offload_optimizer\": {\"device\": \"cpu\"}}}",
               "zero_optimization.offload_optimizer:", "needs stage >= 1");
    EXPECT_ERR("{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 2, "
               "\"offload_param\": {\"device\": \"nvme\"}}}",
               "zero_optimization.offload_param:", "needs stage 3");
    EXPECT_ERR("{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 1, "
               "\"offload_optimizer\": {\"device\": \"disk\"}}}",
               "zero_optimization.offload_optimizer.device:", "expected \"none\", \"cpu\" or \"nvme\"");
    EXPECT_ERR("{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 1, "
               "\"offload_optimizer\": {\"ratio\": 0.5}}}",
               "zero_optimization.offload_optimizer.ratio:", ni);
    EXPECT_ERR("{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 1, "
               "\"offload_optimizer\": {\"buffer_cont\": 2}}}",
               "zero_optimization.offload_optimizer.buffer_cont:", "did you mean 'buffer_count'?");
    EXPECT_ERR("{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 3, "
               "\"offload_param\": {\"buffer_count\": \"auto\"}}}",
               "zero_optimization.offload_param.buffer_count:", "expected an integer");
    EXPECT_ERR("{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 3, "
               "\"offload_param\": {\"buffer_count\": 0}}}",
               "zero_optimization.offload_param.buffer_count:", "expected an integer in [1, 65536]");
    EXPECT_ERR("{\"train_batch_size\": 8, \"aio\": {\"block_size\": 5000}}", "aio.block_size:",
               "expected a multiple of 4096");
    EXPECT_ERR("{\"train_batch_size\": 8, \"aio\": {\"queue_depth\": 0}}", "aio.queue_depth:",
               "expected an integer in [1, 4096]");
    EXPECT_ERR("{\"train_batch_size\": 8, \"aio\": {\"use_gds\": true}}", "aio.use_gds:", ni);
    EXPECT_ERR("{\"train_batch_size\": 8, \"optimizer\": {\"type\": \"Lamb\"}}", "optimizer.type",
               "\"Lamb\" is a DeepSpeed optimizer that zerotask does not implement yet");
    EXPECT_ERR("{\"train_batch_size\": 8, \"optimizer\": {\"type\": \"OneBitAdam\"}}",
               "does not implement yet");
    EXPECT_ERR("{\"train_batch_size\": 8, \"optimizer\": {\"type\": \"Adamm\"}}",
               "optimizer.type", "did you mean 'Adam'?");
    EXPECT_ERR("{\"train_batch_size\": 8, \"optimizer\": {\"type\": \"AdamW\", \"params\": "
               "{\"amsgrad\": true}}}", "optimizer.params.amsgrad:", ni);
    EXPECT_ERR("{\"train_batch_size\": 8, \"scheduler\": {\"type\": \"OneCycle\"}}",
               "scheduler.type", "\"OneCycle\" is a DeepSpeed scheduler");
    EXPECT_ERR("{\"train_batch_size\": 8, \"scheduler\": {\"type\": \"warmuplr\"}}",
               "scheduler.type", "did you mean 'WarmupLR'?");
    EXPECT_ERR("{\"train_batch_size\": 8, \"scheduler\": {\"params\": {}}}", "scheduler.type: missing");
    EXPECT_ERR("{\"train_batch_size\": 8, \"optimizer\": {\"params\": {}}}", "optimizer.type: missing");
}

static void test_duplicates(void) {
    EXPECT_ERR("{\"train_batch_size\": 8, \"train_batch_size\": 16}",
               "config case.json: train_batch_size: key appears more than once");
    EXPECT_ERR("{\"train_batch_size\": 8, \"optimizer\": {\"type\": \"AdamW\", \"params\": "
               "{\"lr\": 0.1, \"lr\": 0.2}}}", "optimizer.params.lr: key appears more than once");
}

static void test_types_and_ranges(void) {
    EXPECT_ERR("{\"train_batch_size\": \"8\"}", "train_batch_size: expected an integer >= 1",
               "a string");
    EXPECT_ERR("{\"train_batch_size\": 8.5}", "train_batch_size: expected an integer >= 1, got 8.5");
    EXPECT_ERR("{\"train_batch_size\": 0}", "train_batch_size: expected an integer >= 1, got 0");
    EXPECT_ERR("{\"train_batch_size\": 1e12}", "train_batch_size: expected an integer in [1, ");
    EXPECT_ERR("{\"train_micro_batch_size_per_gpu\": -1}", "train_micro_batch_size_per_gpu: expected");
    EXPECT_ERR("{\"train_batch_size\": 8, \"gradient_accumulation_steps\": 0}",
               "gradient_accumulation_steps: expected an integer >= 1, got 0");
    EXPECT_ERR("{\"train_batch_size\": 8, \"optimizer\": 5}", "optimizer: expected an object, got 5");
    EXPECT_ERR("{\"train_batch_size\": 8, \"optimizer\": {\"type\": 3}}",
               "optimizer.type: expected a string");
    const char *o = "{\"train_batch_size\": 8, \"optimizer\": {\"type\": \"AdamW\", \"params\": {%s}}}";
    struct {
        const char *params, *want;
    } cases[] = {
        {"\"lr\": 0", "optimizer.params.lr: expected a number > 0, got 0"},
        {"\"lr\": -0.1", "optimizer.params.lr: expected a number > 0, got -0.1"},
        {"\"lr\": \"fast\"", "optimizer.params.lr: expected a number > 0, got a string"},
        {"\"betas\": [0.9, 1.0]", "optimizer.params.betas[1]: expected a number in [0, 1), got 1"},
        {"\"betas\": [-0.1, 0.9]", "optimizer.params.betas[0]: expected a number in [0, 1)"},
        {"\"betas\": [0.9]", "optimizer.params.betas: expected an array of 2 numbers"},
        {"\"betas\": 0.9", "optimizer.params.betas: expected an array of 2 numbers"},
        {"\"betas\": [0.9, null]", "optimizer.params.betas[1]: expected a number in [0, 1), got null"},
        {"\"eps\": 0", "optimizer.params.eps: expected a number > 0"},
        {"\"weight_decay\": -0.01", "optimizer.params.weight_decay: expected a number >= 0"},
        {"\"adam_w_mode\": 1", "optimizer.params.adam_w_mode: expected true or false"},
        {"\"adam_w_mode\": false", "optimizer.params.adam_w_mode: false contradicts type AdamW"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char json[512];
        snprintf(json, sizeof json, o, cases[i].params);
        expect_err_(__LINE__, json, 1, ZT_ERR_CONFIG, "config case.json: ", cases[i].want, NULL);
    }
    EXPECT_ERR("{\"train_batch_size\": 8, \"gradient_clipping\": -1}",
               "gradient_clipping: expected a number >= 0, got -1");
    EXPECT_ERR("{\"train_batch_size\": 8, \"steps_per_print\": 0}", "steps_per_print: expected");
    EXPECT_ERR("{\"train_batch_size\": 8, \"seed\": -5}", "seed: expected an integer >= 0, got -5");
    EXPECT_ERR("{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 5}}",
               "zero_optimization.stage: expected an integer in [0, 3], got 5");
    EXPECT_ERR("{\"train_batch_size\": 8, \"fp16\": {\"enabled\": \"no\"}}",
               "fp16.enabled: expected true or false");
    const char *s = "{\"train_batch_size\": 8, \"scheduler\": {\"type\": \"%s\", \"params\": {%s}}}";
    struct {
        const char *type, *params, *want;
    } sc[] = {
        {"WarmupLR", "\"warmup_num_steps\": -1", "scheduler.params.warmup_num_steps: expected an integer >= 0, got -1"},
        {"WarmupLR", "\"warmup_min_lr\": -1", "scheduler.params.warmup_min_lr: expected a number >= 0"},
        {"WarmupLR", "\"warmup_max_lr\": 0", "scheduler.params.warmup_max_lr: expected a number > 0"},
        {"WarmupLR", "\"warmup_type\": \"cubic\"", "scheduler.params.warmup_type: expected \"log\" or \"linear\", got \"cubic\""},
        {"WarmupLR", "\"last_batch_iteration\": 5", "scheduler.params.last_batch_iteration: is a DeepSpeed key"},
        {"WarmupDecayLR", "\"warmup_num_steps\": 10", "scheduler.params.total_num_steps: missing"},
        {"WarmupDecayLR", "\"total_num_steps\": 0", "scheduler.params.total_num_steps: expected an integer >= 1, got 0"},
        {"WarmupCosineLR", "\"warmup_num_steps\": 10", "scheduler.params.total_num_steps: missing"},
        {"WarmupCosineLR", "\"total_num_steps\": 10, \"warmup_num_steps\": 10", "scheduler.params.total_num_steps: expected a value different"},
        {"WarmupCosineLR", "\"total_num_steps\": 10, \"cos_min_ratio\": 1.5", "scheduler.params.cos_min_ratio: expected a number in [0, 1]"},
        {"WarmupCosineLR", "\"total_num_steps\": 10, \"warmup_min_ratio\": -0.5", "scheduler.params.warmup_min_ratio: expected a number in [0, 1]"},
    };
    for (size_t i = 0; i < sizeof sc / sizeof sc[0]; i++) {
        char json[512];
        snprintf(json, sizeof json, s, sc[i].type, sc[i].params);
        expect_err_(__LINE__, json, 1, ZT_ERR_CONFIG, "config case.json: ", sc[i].want, NULL);
    }
    EXPECT_ERR("{\"train_batch_size\": 8, \"scheduler\": []}", "scheduler: expected an object, got an array");
}

static void test_text_level(const char *dir) {
    /* not an object, syntax errors with position, trailing garbage */
    EXPECT_ERR("[1, 2]", "config case.json: expected a JSON object at the top level, got an array");
    EXPECT_ERR("8", "expected a JSON object at the top level, got 8");
    EXPECT_ERR("{\n  \"train_batch_size\": 8,\n  oops\n}", "config case.json: invalid JSON at line 3",
               "byte offset");
    EXPECT_ERR("{\"train_batch_size\": 8", "invalid JSON at line 1");
    EXPECT_ERR("{\"train_batch_size\": 8} x", "invalid JSON at line 1, column 25 (byte offset 24)");
    EXPECT_ERR("   \n ", "config case.json: file is empty");

    /* files: empty, missing, the name in the message */
    char p[1024];
    snprintf(p, sizeof p, "%s/empty.json", dir);
    write_file(p, "");
    struct zt_config c;
    enum zt_status rc = zt_config_load(&c, p, 1);
    ZT_TEST_TRUE(rc == ZT_ERR_CONFIG && strstr(zt_error_last(), p) &&
                     strstr(zt_error_last(), "file is empty"),
                 "empty file: %s %s", zt_status_str(rc), zt_error_last());
    snprintf(p, sizeof p, "%s/missing.json", dir);
    rc = zt_config_load(&c, p, 1);
    ZT_TEST_TRUE(rc == ZT_ERR_IO && strstr(zt_error_last(), p) &&
                     strstr(zt_error_last(), "cannot open"),
                 "missing file: %s %s", zt_status_str(rc), zt_error_last());
    snprintf(p, sizeof p, "%s/typo.json", dir);
    write_file(p, "{\n  \"train_batch_size\": 8,\n  \"optimizer\": {\"type\": \"AdamW\", "
                  "\"params\": {\"betas\": [0.9, 1.5]}}\n}\n");
    rc = zt_config_load(&c, p, 1);
    char want[1200];
    snprintf(want, sizeof want, "config %s: optimizer.params.betas[1]: expected a number in [0, 1), "
                                "got 1.5", p);
    ZT_TEST_TRUE(rc == ZT_ERR_CONFIG && strcmp(zt_error_last(), want) == 0,
                 "file message:\n  got  %s\n  want %s", zt_error_last(), want);
}

static void test_model_shape(const char *dir) {
    struct zt_model_shape m;
    enum zt_status rc = zt_model_shape_parse(&m, "{\"vocab_size\": 50257, \"seq_len\": 1024, "
                                                 "\"n_embd\": 768, \"n_layer\": 12, \"n_head\": 12}",
                                             "m.json");
    ZT_TEST_TRUE(rc == ZT_OK && m.vocab_size == 50257 && m.seq_len == 1024 && m.n_embd == 768 &&
                     m.n_layer == 12 && m.n_head == 12, "gpt2 shape: %s", zt_error_last());
    const char *src = getenv("ZT_SOURCE_DIR");
    char p[1024];
    snprintf(p, sizeof p, "%s/configs/demo_model.json", src ? src : "../../..");
    rc = zt_model_shape_load(&m, p);
    ZT_TEST_TRUE(rc == ZT_OK && m.vocab_size == 256 && m.n_head == 4, "demo model: %s", zt_error_last());
    struct {
        const char *json, *want;
    } bad[] = {
        {"{\"vocab_size\": 256, \"seq_len\": 64, \"n_embd\": 128, \"n_layer\": 4}",
         "model shape m.json: n_head: missing"},
        {"{\"vocab_size\": 256, \"seq_len\": 64, \"n_embed\": 128, \"n_layer\": 4, \"n_head\": 4}",
         "model shape m.json: n_embed: unknown key; did you mean 'n_embd'?"},
        {"{\"vocab_size\": 256, \"seq_len\": 64, \"n_embd\": 130, \"n_layer\": 4, \"n_head\": 4}",
         "model shape m.json: n_embd: expected a multiple of n_head 4, got 130"},
        {"{\"vocab_size\": 0, \"seq_len\": 64, \"n_embd\": 128, \"n_layer\": 4, \"n_head\": 4}",
         "model shape m.json: vocab_size: expected an integer >= 1, got 0"},
        {"{\"vocab_size\": 256, \"seq_len\": \"64\", \"n_embd\": 128, \"n_layer\": 4, \"n_head\": 4}",
         "seq_len: expected an integer >= 1, got a string"},
        {"{\"vocab_size\": 256, \"vocab_size\": 256, \"seq_len\": 64, \"n_embd\": 128, "
         "\"n_layer\": 4, \"n_head\": 4}", "vocab_size: key appears more than once"},
        {"", "model shape m.json: file is empty"},
        {"[]", "model shape m.json: expected a JSON object"},
        {"{\"vocab_size\": }", "model shape m.json: invalid JSON at line 1"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rc = zt_model_shape_parse(&m, bad[i].json, "m.json");
        ZT_TEST_TRUE(rc == ZT_ERR_CONFIG && strstr(zt_error_last(), bad[i].want),
                     "shape case %zu: %s: %s (want %s)", i, zt_status_str(rc), zt_error_last(),
                     bad[i].want);
    }
    snprintf(p, sizeof p, "%s/nope.json", dir);
    rc = zt_model_shape_load(&m, p);
    ZT_TEST_TRUE(rc == ZT_ERR_IO && strstr(zt_error_last(), p), "missing shape file");
}

int main(void) {
    const char *dir = getenv("ZT_IO_TEST_TMP");
    if (!dir) dir = "/tmp/zt-test-config";
    mkdir(dir, 0755);
    test_valid();
    test_batch_rule();
    test_keys();
    test_not_implemented();
    test_duplicates();
    test_types_and_ranges();
    test_text_level(dir);
    test_model_shape(dir);
    return zt_test_finish("test_config");
}
