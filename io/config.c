/*
 * io/config.c: the DeepSpeed-style training config: its key tables, one parser per section,
 * the batch-size rule, defaults and zt_config_load. The field readers are io/json_fields.c, the
 * learning-rate schedules io/lr_schedule.c, the model-shape JSON io/model_shape.c.
 *
 * Layer: io/ (platform; no StarPU). Parsed with cJSON. Every problem is ZT_ERR_CONFIG with one
 * line "config <file>: <json.path>: <what was expected>", so the user can fix the file without
 * reading code. Nothing is silently ignored: unknown keys (with "did you mean"), DeepSpeed keys
 * we do not implement yet, duplicated keys (cJSON keeps both in its child list), wrong types and
 * out-of-range values are all errors.
 *
 * Batch rule (DeepSpeed's DeepSpeedConfig._set_batch_related_parameters + _batch_assertion):
 *   train_batch_size == train_micro_batch_size_per_gpu * gradient_accumulation_steps * world
 *   all three given   -> checked as is;
 *   tbs + micro       -> accum = tbs / micro / world   (floor divisions, then checked)
 *   tbs + accum       -> micro = tbs / world / accum   (floor divisions, then checked)
 *   micro + accum     -> tbs = micro * accum * world
 *   only tbs          -> accum = 1, micro = tbs / world (then checked: must divide)
 *   only micro        -> accum = 1, tbs = micro * world
 *   none / only accum -> error ("Either train_batch_size or train_micro_batch_size_per_gpu").
 */
#include "zt_config.h"

#include <cjson/cJSON.h> /* cJSON_GetObjectItemCaseSensitive, cJSON_Is*, cJSON_Delete */
#include <ctype.h>       /* tolower */
#include <limits.h>      /* INT_MAX */
#include <stddef.h>      /* offsetof */
#include <stdio.h>       /* snprintf */
#include <stdlib.h>      /* free */
#include <string.h>      /* strcmp, strlen */
#include <strings.h>     /* strcasecmp */

#include "json_fields.h" /* zt_json_*: checked field readers */
#include "config_impl.h" /* zt_config_parse_autotuning, _curriculum, _actckpt */
#include "zt_log.h"      /* ZT_LOG_W, ZT_LOG_I */
#include "zt_status.h"   /* zt_error_set, ZT_ERR_CONFIG */

// ----------------------------------------------------------------------------
// the names of the config's enums, as the config spells them

static const char *const offload_device_names[] = {"none", "cpu", "nvme"};
static const char *const precision_names[] = {"fp32", "bf16", "fp16"};

const char *zt_offload_device_name(enum zt_offload_device d) {
    return (unsigned)d <= ZT_OFFLOAD_NVME ? offload_device_names[d] : "?";
}
const char *zt_precision_name(enum zt_precision p) {
    return (unsigned)p <= ZT_PREC_FP16 ? precision_names[p] : "?";
}

// ----------------------------------------------------------------------------
// the DeepSpeed key tables

static const char *const top_impl[] = {
    "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
    "optimizer", "scheduler", "gradient_clipping", "steps_per_print", "seed", "zero_optimization",
    "fp16", "bf16", "bfloat16", "communication_data_type",
    /* accepted only as {"enabled": false}: NVIDIA apex's AMP is not ours to run */
    "amp", "aio", "checkpoint", "autotuning",
    /* the legacy curriculum (seqlen); data_efficiency only with nothing enabled in it */
    "curriculum_learning", "data_efficiency",
    /* the section present turns checkpointing on (io/actckpt_config.c) */
    "activation_checkpointing", "pipeline", NULL};

static const char *const top_notimpl[] = {
    "flops_profiler", "tensorboard", "wandb", "csv_monitor", "comet",
    "wall_clock_breakdown", "memory_breakdown", "dump_state", "prescale_gradients",
    "gradient_predivide_factor", "sparse_gradients",
    "seq_parallel_communication_data_type", "data_types", "elasticity",
    "zero_allow_untested_optimizer", "zero_force_ds_cpu_optimizer",
    "disable_allgather", "fp32_allreduce", "allreduce_always_fp32", "sparse_attention",
    "compression_training", "quantize_training", "eigenvalue", "progressive_layer_drop",
    "nebula", "hybrid_engine", "weight_quantization", "dataloader_drop_last", "timers",
    "graph_harvesting", "compile",
    "use_data_before_expert_parallelism", "torch_autocast", "tensor_parallel",
    "use_node_local_storage", "load_universal_checkpoint", "mics_shard_size",
    "mics_hierarchical_params_gather", "train_batch_size_per_gpu_auto", NULL};

static const char *const zero_impl[] = {
    "stage", "reduce_bucket_size", "allgather_bucket_size", "overlap_comm",
    "contiguous_gradients", "reduce_scatter", "allgather_partitions", "stage3_max_live_parameters",
    "stage3_prefetch_bucket_size", "stage3_param_persistence_threshold", "offload_optimizer",
    "offload_param", NULL};
static const char *const zero_notimpl[] = {
    "load_from_fp32_weights", "elastic_checkpoint", "sub_group_size",
    "stage3_max_reuse_distance", "stage3_model_persistence_threshold",
    "stage3_gather_16bit_weights_on_model_save", "stage3_gather_fp16_weights_on_model_save",
    "round_robin_gradients", "zero_hpz_partition_size", "zero_quantized_weights",
    "zero_quantized_nontrainable_weights", "zero_quantized_gradients", "mics_shard_size",
    "mics_hierarchical_params_gather", "memory_efficient_linear", "cpu_offload",
    "cpu_offload_params", "cpu_offload_use_pin_memory", "ignore_unused_parameters",
    "legacy_stage1", "use_multi_rank_bucket_allreduce", "pipeline_loading_checkpoint",
    "override_module_apply", "log_trace_cache_warnings", "module_granularity_threshold",
    "use_all_reduce_for_fetch_params", "stage3_use_all_reduce_for_fetch_params", NULL};

static const char *const offopt_impl[] = {"device", "nvme_path", "pin_memory", "buffer_count",
                                          "pipeline_read", "pipeline_write", "pipeline", NULL};
static const char *const offopt_notimpl[] = {"fast_init", "ratio", "super_offload",
                                             "cpuadam_cores_perc", NULL};
static const char *const offparam_impl[] = {"device", "nvme_path", "pin_memory", "buffer_count",
                                            "buffer_size", "max_in_cpu", NULL};
static const char *const aio_impl[] = {"block_size", "queue_depth", "thread_count",
                                       "intra_op_parallelism", "single_submit", "overlap_events",
                                       NULL};
static const char *const aio_notimpl[] = {"use_gds", NULL};

static const char *const amp_impl[] = {"enabled", NULL};
static const char *const amp_notimpl[] = {"opt_level", NULL};
static const char *const bf16_impl[] = {"enabled", NULL};
static const char *const bf16_notimpl[] = {"immediate_grad_update", "check_grad_overflow",
                                           "auto_cast", NULL};
static const char *const fp16_impl[] = {"enabled", "loss_scale", "initial_scale_power",
                                        "loss_scale_window", "hysteresis",
                                        "consecutive_hysteresis", "min_loss_scale", NULL};
static const char *const fp16_notimpl[] = {"auto_cast", "fp16_master_weights_and_grads",
                                           "immediate_grad_update", "check_grad_overflow", NULL};

static const char *const optim_impl[] = {"type", "params", NULL};
static const char *const optim_notimpl[] = {"legacy_fusion", NULL};
static const char *const adam_impl[] = {"lr", "betas", "eps", "weight_decay", "adam_w_mode", NULL};
static const char *const adam_notimpl[] = {
    "torch_adam", "amsgrad", "bias_correction", "fused", "max_grad_norm", "set_grad_none",
    "capturable", "foreach", "maximize", "differentiable", "freeze_step", "cuda_aware",
    "comm_backend_name", NULL};
/* DeepSpeed optimizer names (compared lower-case) other than Adam/AdamW */
static const char *const optim_types_notimpl[] = {
    "adagrad", "lamb", "onebitadam", "zerooneadam", "onebitlamb", "lion", "muadam", "muadamw",
    "musgd", "sgd", "fusedadam", "cpuadam", "rmsprop", NULL};

static const char *const sched_impl[] = {"type", "params", NULL};
/* the names of enum zt_lr_sched_type, NULL-terminated: the implemented scheduler types follow
 * "constant" (no scheduler section) */
static const char *const lr_sched_names[] = {"constant", "WarmupLR", "WarmupDecayLR",
                                             "WarmupCosineLR", NULL};
static const char *const *const sched_types_impl = lr_sched_names + 1;
const char *zt_lr_sched_name(enum zt_lr_sched_type t) {
    return (unsigned)t <= ZT_LR_WARMUP_COSINE ? lr_sched_names[t] : "?";
}
static const char *const sched_types_notimpl[] = {"LRRangeTest", "OneCycle", NULL};
static const char *const warmup_params[] = {"warmup_min_lr", "warmup_max_lr", "warmup_num_steps",
                                            "warmup_type", NULL};
static const char *const decay_params[] = {"warmup_min_lr", "warmup_max_lr", "warmup_num_steps",
                                           "warmup_type", "total_num_steps", NULL};
static const char *const cosine_params[] = {"total_num_steps", "warmup_min_ratio",
                                            "warmup_num_steps", "cos_min_ratio", "warmup_type",
                                            NULL};
static const char *const sched_params_notimpl[] = {"last_batch_iteration", NULL};

// ----------------------------------------------------------------------------
// sections

/* "enabled" of a precision section (DeepSpeed's default false) */
static enum zt_status get_enabled(const struct zt_json_ctx *c, const cJSON *v, const char *path,
                                  int *on) {
    const cJSON *en = cJSON_GetObjectItemCaseSensitive(v, "enabled");
    char p[ZT_JSON_PATH_MAX];
    zt_json_path(p, path, "enabled");
    *on = 0;
    if (en) ZT_CHECK(zt_json_bool(c, en, p, on));
    return ZT_OK;
}

static enum zt_status parse_amp(const struct zt_json_ctx *c, const cJSON *v) {
    ZT_CHECK(zt_json_object(c, v, "amp"));
    ZT_CHECK(zt_json_check_keys(c, v, "amp", amp_impl, amp_notimpl));
    int on;
    ZT_CHECK(get_enabled(c, v, "amp", &on));
    if (on)
        return zt_json_err(c, "amp", "is a DeepSpeed key that zerotask does not implement yet (it "
                                 "runs NVIDIA apex; use \"bf16\" or \"fp16\")");
    return ZT_OK;
}

/* "bf16" / "bfloat16" (path) or "fp16": sets *on and, for fp16, the loss-scaler keys */
static enum zt_status parse_precision(const struct zt_json_ctx *c, const cJSON *v, const char *path,
                                      int fp16, int *on, struct zt_config *cfg) {
    ZT_CHECK(zt_json_object(c, v, path));
    ZT_CHECK(zt_json_check_keys(c, v, path, fp16 ? fp16_impl : bf16_impl,
                        fp16 ? fp16_notimpl : bf16_notimpl));
    ZT_CHECK(get_enabled(c, v, path, on));
    if (!fp16) return ZT_OK;
    char p[ZT_JSON_PATH_MAX];
    const cJSON *x;
    long long k = 0;
    double d = 0;
    if ((x = cJSON_GetObjectItemCaseSensitive(v, "loss_scale"))) {
        zt_json_path(p, path, "loss_scale");
        ZT_CHECK(zt_json_num(c, x, p, ZT_JSON_GE0, &d));
        cfg->loss_scale = d;
    }
    if ((x = cJSON_GetObjectItemCaseSensitive(v, "initial_scale_power"))) {
        zt_json_path(p, path, "initial_scale_power");
        ZT_CHECK(
            zt_json_int(c, x, p, 0, 126, &k)); /* 2^126 is the largest fp32 power of two < inf/2 */
        cfg->initial_scale_power = (int)k;
    }
    if ((x = cJSON_GetObjectItemCaseSensitive(v, "loss_scale_window"))) {
        zt_json_path(p, path, "loss_scale_window");
        ZT_CHECK(zt_json_int32(c, x, p, 1, &cfg->loss_scale_window));
    }
    if ((x = cJSON_GetObjectItemCaseSensitive(v, "hysteresis"))) {
        zt_json_path(p, path, "hysteresis");
        ZT_CHECK(zt_json_int32(c, x, p, 1, &cfg->hysteresis));
    }
    if ((x = cJSON_GetObjectItemCaseSensitive(v, "consecutive_hysteresis"))) {
        zt_json_path(p, path, "consecutive_hysteresis");
        ZT_CHECK(zt_json_bool(c, x, p, &cfg->consecutive_hysteresis));
    }
    if ((x = cJSON_GetObjectItemCaseSensitive(v, "min_loss_scale"))) {
        zt_json_path(p, path, "min_loss_scale");
        ZT_CHECK(zt_json_num(c, x, p, ZT_JSON_GT0, &d));
        cfg->min_loss_scale = d;
    }
    return ZT_OK;
}

/* the sections together: at most one precision enabled; communication_data_type names it */
static enum zt_status parse_precisions(const struct zt_json_ctx *c, const cJSON *root,
                                       struct zt_config *cfg) {
    const cJSON *x;
    int bf = 0, fp = 0, on = 0;
    const char *bfname = NULL;
    if ((x = cJSON_GetObjectItemCaseSensitive(root, "amp"))) ZT_CHECK(parse_amp(c, x));
    static const char *const bfkeys[] = {"bf16", "bfloat16"};
    for (int i = 0; i < 2; i++)
        if ((x = cJSON_GetObjectItemCaseSensitive(root, bfkeys[i]))) {
            if (bfname) /* DeepSpeed reads one or the other: two would leave one ignored */
                return zt_json_err(c, bfkeys[i], "\"bf16\" and \"bfloat16\" are the same section; "
                                             "give only one");
            ZT_CHECK(parse_precision(c, x, bfkeys[i], 0, &on, cfg));
            bf = on;
            bfname = bfkeys[i];
        }
    if ((x = cJSON_GetObjectItemCaseSensitive(root, "fp16")))
        ZT_CHECK(parse_precision(c, x, "fp16", 1, &fp, cfg));
    if (bf && fp)
        return zt_json_err(c, "fp16", "and \"%s\" are both enabled; enable at most one precision "
                                  "(DeepSpeed refuses both too)", bfname);
    cfg->precision = bf ? ZT_PREC_BF16 : fp ? ZT_PREC_FP16 : ZT_PREC_FP32;
    if ((x = cJSON_GetObjectItemCaseSensitive(root, "communication_data_type"))) {
        const char *s = NULL;
        ZT_CHECK(zt_json_string(c, x, "communication_data_type", &s));
        int k = 0;
        while (k < 3 && strcmp(s, precision_names[k]) != 0) k++;
        if (k == 3)
            return zt_json_err(c, "communication_data_type", "expected \"fp32\", \"bf16\" or "
                                                         "\"fp16\", got \"%s\"", s);
        /* gradients are reduced in the training precision (summed in fp32 either way): another
         * type would only change the bytes moved */
        if (k != (int)cfg->precision)
            return zt_json_err(c, "communication_data_type", "is \"%s\" but training runs in %s: "
                           "zerotask does not implement another communication type yet (leave "
                           "the key out, or give \"%s\")", s, precision_names[cfg->precision],
                           precision_names[cfg->precision]);
    }
    return ZT_OK;
}

enum zt_status zt_config_parse_target(const struct zt_json_ctx *c, const cJSON *v,
                                      const char *path, enum zt_offload_device *device,
                                      char nvme_path[ZT_NVME_PATH_MAX]) {
    char p[ZT_JSON_PATH_MAX];
    const cJSON *x;
    if ((x = cJSON_GetObjectItemCaseSensitive(v, "device"))) {
        const char *d = NULL;
        zt_json_path(p, path, "device");
        ZT_CHECK(zt_json_string(c, x, p, &d));
        int k = ZT_OFFLOAD_NONE;
        while (k <= ZT_OFFLOAD_NVME && strcmp(d, offload_device_names[k]) != 0) k++;
        if (k > ZT_OFFLOAD_NVME)
            return zt_json_err(c, p, "expected \"none\", \"cpu\" or \"nvme\", got \"%s\"", d);
        *device = (enum zt_offload_device)k;
    }
    if ((x = cJSON_GetObjectItemCaseSensitive(v, "nvme_path"))) {
        const char *d = NULL;
        zt_json_path(p, path, "nvme_path");
        ZT_CHECK(zt_json_string(c, x, p, &d));
        if (!*d || strlen(d) >= ZT_NVME_PATH_MAX - 64)
            return zt_json_err(c, p, "expected a directory path of 1 to %d characters",
                               ZT_NVME_PATH_MAX - 65);
        snprintf(nvme_path, ZT_NVME_PATH_MAX, "%s", d);
    }
    return ZT_OK;
}

/* zero_optimization.offload_optimizer / offload_param (which: 0 / 1) */
static enum zt_status parse_offload(const struct zt_json_ctx *c, const cJSON *v, int which,
                                    struct zt_offload_cfg *o) {
    const char *path = which ? "zero_optimization.offload_param"
                             : "zero_optimization.offload_optimizer";
    char p[ZT_JSON_PATH_MAX];
    ZT_CHECK(zt_json_object(c, v, path));
    ZT_CHECK(zt_json_check_keys(c, v, path, which ? offparam_impl : offopt_impl,
                        which ? NULL : offopt_notimpl));
    ZT_CHECK(zt_config_parse_target(c, v, path, &o->device, o->nvme_path));
    const cJSON *x;
    static const char *const bools[] = {"pin_memory", "pipeline_read", "pipeline_write",
                                        "pipeline"};
    int *bdst[] = {&o->pin_memory, &o->pipeline_read, &o->pipeline_write, NULL};
    for (int i = 0; i < 4; i++) {
        if (!(x = cJSON_GetObjectItemCaseSensitive(v, bools[i]))) continue;
        zt_json_path(p, path, bools[i]);
        int b = 0;
        ZT_CHECK(zt_json_bool(c, x, p, &b));
        if (bdst[i]) *bdst[i] = b;
        else o->pipeline_read = o->pipeline_write = b; /* DeepSpeed's "pipeline": both */
    }
    long long n = 0;
    if ((x = cJSON_GetObjectItemCaseSensitive(v, "buffer_count"))) {
        zt_json_path(p, path, "buffer_count");
        if (!which && cJSON_IsString(x) && strcmp(x->valuestring, "auto") == 0)
            n = 0; /* the engine sizes it (ZT_SWAP_BUFFER_MEM) */
        else
            ZT_CHECK(zt_json_int(c, x, p, 1, 1 << 16, &n));
        o->buffer_count = (int)n;
    }
    if ((x = cJSON_GetObjectItemCaseSensitive(v, "buffer_size"))) {
        zt_json_path(p, path, "buffer_size");
        ZT_CHECK(zt_json_int(c, x, p, 1, INT64_MAX / 8, &n));
        o->buffer_size = n;
    }
    if ((x = cJSON_GetObjectItemCaseSensitive(v, "max_in_cpu"))) {
        zt_json_path(p, path, "max_in_cpu");
        ZT_CHECK(zt_json_int(c, x, p, 0, INT64_MAX / 8, &n));
        o->max_in_cpu = n;
    }
    return ZT_OK;
}

/* checkpoint: zerotask's keys (save_interval, keep_last, dir); DeepSpeed's own are refused */
static const char *const ckpt_impl[] = {"save_interval", "keep_last", "dir", NULL};
static const char *const ckpt_notimpl[] = {"tag_validation", "load_universal",
                                           "use_node_local_storage", "parallel_write", "writer",
                                           NULL};

static enum zt_status parse_checkpoint(const struct zt_json_ctx *c, const cJSON *v,
                                       struct zt_config *cfg) {
    ZT_CHECK(zt_json_object(c, v, "checkpoint"));
    ZT_CHECK(zt_json_check_keys(c, v, "checkpoint", ckpt_impl, ckpt_notimpl));
    const cJSON *x;
    long long n = 0;
    if ((x = cJSON_GetObjectItemCaseSensitive(v, "save_interval"))) {
        ZT_CHECK(zt_json_int(c, x, "checkpoint.save_interval", 0, INT64_MAX / 2, &n));
        cfg->ckpt_save_interval = n;
    }
    if ((x = cJSON_GetObjectItemCaseSensitive(v, "keep_last"))) {
        ZT_CHECK(zt_json_int(c, x, "checkpoint.keep_last", 0, 1 << 20, &n));
        cfg->ckpt_keep_last = (int)n;
    }
    if ((x = cJSON_GetObjectItemCaseSensitive(v, "dir"))) {
        const char *d = NULL;
        ZT_CHECK(zt_json_string(c, x, "checkpoint.dir", &d));
        if (strlen(d) == 0 || strlen(d) >= sizeof cfg->ckpt_dir - 64)
            return zt_json_err(c, "checkpoint.dir", "expected a directory path of 1 to %d bytes",
                           (int)sizeof cfg->ckpt_dir - 65);
        snprintf(cfg->ckpt_dir, sizeof cfg->ckpt_dir, "%s", d);
    }
    return ZT_OK;
}

static enum zt_status parse_aio(const struct zt_json_ctx *c, const cJSON *v,
                                struct zt_config *cfg) {
    ZT_CHECK(zt_json_object(c, v, "aio"));
    ZT_CHECK(zt_json_check_keys(c, v, "aio", aio_impl, aio_notimpl));
    const cJSON *x;
    long long n = 0;
    if ((x = cJSON_GetObjectItemCaseSensitive(v, "block_size"))) {
        ZT_CHECK(zt_json_int(c, x, "aio.block_size", 4096, (long long)1 << 30, &n));
        if (n % 4096)
            return zt_json_err(c, "aio.block_size", "expected a multiple of 4096 bytes (O_DIRECT), "
                                                "got %lld", n);
        cfg->aio_block_size = n;
    }
    if ((x = cJSON_GetObjectItemCaseSensitive(v, "queue_depth"))) {
        ZT_CHECK(zt_json_int(c, x, "aio.queue_depth", 1, 4096, &n));
        cfg->aio_queue_depth = (int)n;
    }
    static const char *const threads[] = {"thread_count", "intra_op_parallelism"};
    for (int i = 0; i < 2; i++) {
        if (!(x = cJSON_GetObjectItemCaseSensitive(v, threads[i]))) continue;
        char p[ZT_JSON_PATH_MAX];
        zt_json_path(p, "aio", threads[i]);
        ZT_CHECK(zt_json_int(c, x, p, 1, 64, &n));
        cfg->aio_thread_count = (int)n;
    }
    if ((x = cJSON_GetObjectItemCaseSensitive(v, "single_submit")))
        ZT_CHECK(zt_json_bool(c, x, "aio.single_submit", &cfg->aio_single_submit));
    if ((x = cJSON_GetObjectItemCaseSensitive(v, "overlap_events")))
        ZT_CHECK(zt_json_bool(c, x, "aio.overlap_events", &cfg->aio_overlap_events));
    return ZT_OK;
}

static enum zt_status parse_zero(const struct zt_json_ctx *c, const cJSON *v,
                                 struct zt_config *cfg) {
    ZT_CHECK(zt_json_object(c, v, "zero_optimization"));
    ZT_CHECK(zt_json_check_keys(c, v, "zero_optimization", zero_impl, zero_notimpl));
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(v, "stage");
    if (st) {
        long long s = 0;
        ZT_CHECK(zt_json_int(c, st, "zero_optimization.stage", 0, 3, &s));
        cfg->zero_stage = (int)s;
    }
    const cJSON *x;
    long long n = 0;
    if ((x = cJSON_GetObjectItemCaseSensitive(v, "reduce_bucket_size"))) {
        ZT_CHECK(zt_json_int(c, x, "zero_optimization.reduce_bucket_size", 1, INT64_MAX / 8, &n));
        cfg->reduce_bucket_size = n;
    }
    if ((x = cJSON_GetObjectItemCaseSensitive(v, "allgather_bucket_size"))) {
        ZT_CHECK(
            zt_json_int(c, x, "zero_optimization.allgather_bucket_size", 1, INT64_MAX / 8, &n));
        cfg->allgather_bucket_size = n;
    }
    static const struct {
        const char *key;
        long long lo;
        size_t at;
    } s3[] = {
        {"stage3_max_live_parameters", 1, offsetof(struct zt_config, stage3_max_live_parameters)},
        {"stage3_prefetch_bucket_size", 0, offsetof(struct zt_config, stage3_prefetch_bucket_size)},
        {"stage3_param_persistence_threshold", 0,
         offsetof(struct zt_config, stage3_param_persistence_threshold)},
    };
    for (size_t i = 0; i < sizeof s3 / sizeof s3[0]; i++) {
        if (!(x = cJSON_GetObjectItemCaseSensitive(v, s3[i].key))) continue;
        char p[ZT_JSON_PATH_MAX];
        zt_json_path(p, "zero_optimization", s3[i].key);
        ZT_CHECK(zt_json_int(c, x, p, s3[i].lo, INT64_MAX / 8, &n));
        *(int64_t *)((char *)cfg + s3[i].at) = n;
    }
    if ((x = cJSON_GetObjectItemCaseSensitive(v, "overlap_comm")))
        ZT_CHECK(zt_json_bool(c, x, "zero_optimization.overlap_comm", &cfg->overlap_comm));
    if ((x = cJSON_GetObjectItemCaseSensitive(v, "offload_optimizer")))
        ZT_CHECK(parse_offload(c, x, 0, &cfg->offload_optimizer));
    if ((x = cJSON_GetObjectItemCaseSensitive(v, "offload_param")))
        ZT_CHECK(parse_offload(c, x, 1, &cfg->offload_param));
    /* DeepSpeed partitions the optimizer state from stage 1 and the parameters at stage 3 */
    if (cfg->offload_optimizer.device != ZT_OFFLOAD_NONE && cfg->zero_stage < 1)
        return zt_json_err(c, "zero_optimization.offload_optimizer", "needs stage >= 1 (the "
                       "optimizer state is partitioned from stage 1), got stage %d",
                       cfg->zero_stage);
    if (cfg->offload_param.device != ZT_OFFLOAD_NONE && cfg->zero_stage < 3)
        return zt_json_err(c, "zero_optimization.offload_param", "needs stage 3 (parameters are "
                       "partitioned only at stage 3), got stage %d", cfg->zero_stage);
    if ((x = cJSON_GetObjectItemCaseSensitive(v, "reduce_scatter")))
        ZT_CHECK(zt_json_bool(c, x, "zero_optimization.reduce_scatter", &cfg->reduce_scatter));
    /* our gradients and partitions are always contiguous slices of one flat buffer: these two
     * only accept DeepSpeed's values */
    int b = 1;
    if ((x = cJSON_GetObjectItemCaseSensitive(v, "contiguous_gradients"))) {
        ZT_CHECK(zt_json_bool(c, x, "zero_optimization.contiguous_gradients", &b));
    }
    if ((x = cJSON_GetObjectItemCaseSensitive(v, "allgather_partitions"))) {
        ZT_CHECK(zt_json_bool(c, x, "zero_optimization.allgather_partitions", &b));
        if (!b)
            return zt_json_err(c, "zero_optimization.allgather_partitions",
                           "false (a broadcast per partition) is not implemented; zerotask "
                           "always all-gathers partitions");
    }
    return ZT_OK;
}

static enum zt_status parse_optimizer(const struct zt_json_ctx *c, const cJSON *v,
                                      struct zt_config *cfg) {
    ZT_CHECK(zt_json_object(c, v, "optimizer"));
    ZT_CHECK(zt_json_check_keys(c, v, "optimizer", optim_impl, optim_notimpl));
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(v, "type");
    if (!ty) return zt_json_err(c, "optimizer.type", "missing (expected \"Adam\" or \"AdamW\")");
    const char *t = "";
    ZT_CHECK(zt_json_string(c, ty, "optimizer.type", &t));
    /* DeepSpeed lower-cases the optimizer name before comparing (engine.optimizer_name) */
    if (strcasecmp(t, "adam") == 0) {
        cfg->optim = ZT_OPTIM_ADAM;
        cfg->weight_decay = 0.0f;
    } else if (strcasecmp(t, "adamw") == 0) {
        cfg->optim = ZT_OPTIM_ADAMW;
        cfg->weight_decay = 0.01f;
    } else {
        char low[64];
        size_t i = 0;
        for (; t[i] && i + 1 < sizeof low; i++) low[i] = (char)tolower((unsigned char)t[i]);
        low[i] = '\0';
        if (zt_json_in_list(low, optim_types_notimpl))
            return zt_json_err(c, "optimizer.type",
                           "\"%s\" is a DeepSpeed optimizer that zerotask "
                           "does not implement yet (supported: Adam, AdamW)",
                           t);
        static const char *const ok[] = {"Adam", "AdamW", NULL};
        const char *s = zt_json_near_miss(t, ok, NULL);
        if (s)
            return zt_json_err(c, "optimizer.type", "unknown optimizer \"%s\"; did you mean '%s'?",
                               t, s);
        return zt_json_err(c, "optimizer.type", "unknown optimizer \"%s\" (supported: Adam, AdamW)",
                           t);
    }
    cfg->adam_w_mode = 1;
    const cJSON *pa = cJSON_GetObjectItemCaseSensitive(v, "params");
    if (!pa) return ZT_OK;
    ZT_CHECK(zt_json_object(c, pa, "optimizer.params"));
    ZT_CHECK(zt_json_check_keys(c, pa, "optimizer.params", adam_impl, adam_notimpl));
    double d = 0;
    const cJSON *x;
    if ((x = cJSON_GetObjectItemCaseSensitive(pa, "lr"))) {
        ZT_CHECK(zt_json_num(c, x, "optimizer.params.lr", ZT_JSON_GT0, &d));
        cfg->lr = (float)d;
    }
    if ((x = cJSON_GetObjectItemCaseSensitive(pa, "betas"))) {
        char g[96];
        if (!cJSON_IsArray(x) || cJSON_GetArraySize(x) != 2)
            return zt_json_err(
                c, "optimizer.params.betas", "expected an array of 2 numbers in [0, 1), got %s",
                cJSON_IsArray(x) ? "an array of another length" : zt_json_describe(x, g, sizeof g));
        double b[2] = {0, 0};
        for (int i = 0; i < 2; i++) {
            char p[ZT_JSON_PATH_MAX];
            snprintf(p, sizeof p, "optimizer.params.betas[%d]", i);
            ZT_CHECK(zt_json_num(c, cJSON_GetArrayItem(x, i), p, ZT_JSON_UNIT_HALF_OPEN, &b[i]));
        }
        cfg->beta1 = (float)b[0];
        cfg->beta2 = (float)b[1];
    }
    if ((x = cJSON_GetObjectItemCaseSensitive(pa, "eps"))) {
        ZT_CHECK(zt_json_num(c, x, "optimizer.params.eps", ZT_JSON_GT0, &d));
        cfg->eps = (float)d;
    }
    if ((x = cJSON_GetObjectItemCaseSensitive(pa, "weight_decay"))) {
        ZT_CHECK(zt_json_num(c, x, "optimizer.params.weight_decay", ZT_JSON_GE0, &d));
        cfg->weight_decay = (float)d;
    }
    if ((x = cJSON_GetObjectItemCaseSensitive(pa, "adam_w_mode"))) {
        int m = 1;
        ZT_CHECK(zt_json_bool(c, x, "optimizer.params.adam_w_mode", &m));
        /* DeepSpeed silently forces decoupled decay for AdamW; a contradiction is an error here */
        if (cfg->optim == ZT_OPTIM_ADAMW && !m)
            return zt_json_err(c, "optimizer.params.adam_w_mode",
                           "false contradicts type AdamW, which always decouples weight decay "
                           "(use type Adam for L2-style decay)");
        cfg->adam_w_mode = m;
    }
    return ZT_OK;
}

static enum zt_status parse_scheduler(const struct zt_json_ctx *c, const cJSON *v,
                                      struct zt_config *cfg) {
    ZT_CHECK(zt_json_object(c, v, "scheduler"));
    ZT_CHECK(zt_json_check_keys(c, v, "scheduler", sched_impl, NULL));
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(v, "type");
    if (!ty)
        return zt_json_err(c, "scheduler.type",
                       "missing (expected \"WarmupLR\", \"WarmupDecayLR\" or \"WarmupCosineLR\")");
    const char *t = "";
    ZT_CHECK(zt_json_string(c, ty, "scheduler.type", &t));
    const char *const *params;
    /* DeepSpeed compares scheduler names case-sensitively (VALID_LR_SCHEDULES) */
    if (strcmp(t, lr_sched_names[ZT_LR_WARMUP]) == 0) {
        cfg->sched = ZT_LR_WARMUP;
        params = warmup_params;
    } else if (strcmp(t, lr_sched_names[ZT_LR_WARMUP_DECAY]) == 0) {
        cfg->sched = ZT_LR_WARMUP_DECAY;
        params = decay_params;
    } else if (strcmp(t, lr_sched_names[ZT_LR_WARMUP_COSINE]) == 0) {
        cfg->sched = ZT_LR_WARMUP_COSINE;
        params = cosine_params;
    } else if (zt_json_in_list(t, sched_types_notimpl)) {
        return zt_json_err(c, "scheduler.type",
                           "\"%s\" is a DeepSpeed scheduler that zerotask does "
                           "not implement yet (supported: WarmupLR, "
                           "WarmupDecayLR, WarmupCosineLR)",
                           t);
    } else {
        const char *s = zt_json_near_miss(t, sched_types_impl, sched_types_notimpl);
        if (s)
            return zt_json_err(c, "scheduler.type", "unknown scheduler \"%s\"; did you mean '%s'?",
                               t, s);
        return zt_json_err(c, "scheduler.type", "unknown scheduler \"%s\" (supported: WarmupLR, "
                                            "WarmupDecayLR, WarmupCosineLR)", t);
    }
    const cJSON *pa = cJSON_GetObjectItemCaseSensitive(v, "params");
    int have_total = 0;
    if (pa) {
        ZT_CHECK(zt_json_object(c, pa, "scheduler.params"));
        /* a parameter of another scheduler type is an unknown key here: DeepSpeed would fail
         * with "unexpected keyword argument" */
        ZT_CHECK(zt_json_check_keys(c, pa, "scheduler.params", params, sched_params_notimpl));
        double d = 0;
        const cJSON *x;
        if ((x = cJSON_GetObjectItemCaseSensitive(pa, "warmup_min_lr"))) {
            ZT_CHECK(zt_json_num(c, x, "scheduler.params.warmup_min_lr", ZT_JSON_GE0, &d));
            cfg->warmup_min_lr = (float)d;
        }
        if ((x = cJSON_GetObjectItemCaseSensitive(pa, "warmup_max_lr"))) {
            ZT_CHECK(zt_json_num(c, x, "scheduler.params.warmup_max_lr", ZT_JSON_GT0, &d));
            cfg->warmup_max_lr = (float)d;
        }
        if ((x = cJSON_GetObjectItemCaseSensitive(pa, "warmup_num_steps")))
            ZT_CHECK(zt_json_int32(c, x, "scheduler.params.warmup_num_steps", 0,
                                   &cfg->warmup_num_steps));
        if ((x = cJSON_GetObjectItemCaseSensitive(pa, "total_num_steps"))) {
            ZT_CHECK(
                zt_json_int32(c, x, "scheduler.params.total_num_steps", 1, &cfg->total_num_steps));
            have_total = 1;
        }
        if ((x = cJSON_GetObjectItemCaseSensitive(pa, "warmup_min_ratio"))) {
            ZT_CHECK(
                zt_json_num(c, x, "scheduler.params.warmup_min_ratio", ZT_JSON_UNIT_CLOSED, &d));
            cfg->warmup_min_ratio = (float)d;
        }
        if ((x = cJSON_GetObjectItemCaseSensitive(pa, "cos_min_ratio"))) {
            ZT_CHECK(zt_json_num(c, x, "scheduler.params.cos_min_ratio", ZT_JSON_UNIT_CLOSED, &d));
            cfg->cos_min_ratio = (float)d;
        }
        if ((x = cJSON_GetObjectItemCaseSensitive(pa, "warmup_type"))) {
            const char *w = "";
            ZT_CHECK(zt_json_string(c, x, "scheduler.params.warmup_type", &w));
            /* DeepSpeed warns and falls back to log for an unknown type; we refuse it */
            if (strcmp(w, "log") == 0)
                cfg->warmup_type = ZT_WARMUP_LOG;
            else if (strcmp(w, "linear") == 0)
                cfg->warmup_type = ZT_WARMUP_LINEAR;
            else
                return zt_json_err(c, "scheduler.params.warmup_type",
                               "expected \"log\" or \"linear\", got \"%s\"", w);
        }
    }
    if (cfg->sched != ZT_LR_WARMUP && !have_total)
        return zt_json_err(c, "scheduler.params.total_num_steps", "missing (%s requires it)", t);
    int w = cfg->warmup_num_steps < 2 ? 2 : cfg->warmup_num_steps; /* DeepSpeed: max(2, n) */
    if (cfg->sched == ZT_LR_WARMUP_COSINE && cfg->total_num_steps == w)
        return zt_json_err(c, "scheduler.params.total_num_steps",
                       "expected a value different from the effective warmup_num_steps %d "
                       "(WarmupCosineLR divides by their difference)", w);
    if (cfg->sched != ZT_LR_WARMUP && cfg->total_num_steps < w)
        ZT_LOG_W("config %s: scheduler.params.total_num_steps %d is less than warmup_num_steps %d "
                 "(as DeepSpeed, the schedule is used as given)", c->file, cfg->total_num_steps, w);
    return ZT_OK;
}

/* DeepSpeed's batch rule (see the file comment). */
/* DeepSpeed's batch rule over the ws ranks of the job, dp of them data-parallel replicas (ws
 * without a pipeline, ws / stages with one) */
static enum zt_status resolve_batch(const struct zt_json_ctx *c, struct zt_config *cfg, int has_tbs,
                                    int has_micro, int has_acc, int world_size, int ws) {
    long long tbs = cfg->train_batch_size, mb = cfg->micro_batch, ga = cfg->grad_accum;
    if (has_tbs && has_micro && has_acc) {
        /* checked below */
    } else if (has_tbs && has_micro) {
        ga = tbs / mb / ws;
    } else if (has_tbs && has_acc) {
        mb = tbs / ws / ga;
    } else if (has_micro && has_acc) {
        tbs = mb * ga * ws;
    } else if (has_tbs) {
        ga = 1;
        mb = tbs / ws;
    } else if (has_micro) {
        ga = 1;
        tbs = mb * ws;
    } else {
        return zt_json_err(c, NULL,
                           "either train_batch_size or train_micro_batch_size_per_gpu must "
                           "be given");
    }
    if (tbs > INT_MAX)
        return zt_json_err(c, "train_batch_size",
                       "the derived train batch size %lld does not fit in 32 bits", tbs);
    if (mb < 1 || ga < 1 || tbs != mb * ga * ws)
        return zt_json_err(c, NULL,
                       "train_batch_size must equal train_micro_batch_size_per_gpu * "
                       "gradient_accumulation_steps * %s: %lld != %lld * %lld * %d",
                       ws == world_size ? "world_size" : "the data-parallel replicas (world_size"
                       " / pipeline.stages)", tbs, mb, ga, ws);
    cfg->train_batch_size = (int)tbs;
    cfg->micro_batch = (int)mb;
    cfg->grad_accum = (int)ga;
    cfg->world_size = world_size;
    return ZT_OK;
}

// ----------------------------------------------------------------------------
// public: config

void zt_config_defaults(struct zt_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    cfg->world_size = 1;
    cfg->optim = ZT_OPTIM_ADAMW;
    cfg->lr = 1e-3f;
    cfg->beta1 = 0.9f;
    cfg->beta2 = 0.999f;
    cfg->eps = 1e-8f;
    cfg->weight_decay = 0.01f;
    cfg->adam_w_mode = 1;
    cfg->sched = ZT_LR_CONSTANT;
    cfg->warmup_min_lr = 0.0f;
    cfg->warmup_max_lr = 0.001f;
    cfg->warmup_num_steps = 1000;
    cfg->warmup_type = ZT_WARMUP_LOG;
    cfg->total_num_steps = 0;
    cfg->warmup_min_ratio = 0.0f;
    cfg->cos_min_ratio = 0.0001f;
    cfg->precision = ZT_PREC_FP32;
    cfg->loss_scale = 0;                /* DeepSpeed's fp16 defaults */
    cfg->initial_scale_power = 16;
    cfg->loss_scale_window = 1000;
    cfg->hysteresis = 2;
    cfg->consecutive_hysteresis = 0;
    cfg->min_loss_scale = 1;
    cfg->gradient_clipping = 0.0f;
    cfg->steps_per_print = 10;
    cfg->seed = 1234;
    cfg->zero_stage = 0;
    cfg->reduce_bucket_size = 500000000;    /* DeepSpeed's defaults */
    cfg->allgather_bucket_size = 500000000;
    cfg->stage3_max_live_parameters = 1000000000;
    cfg->stage3_prefetch_bucket_size = 50000000;
    cfg->stage3_param_persistence_threshold = 100000;
    cfg->overlap_comm = 1;
    cfg->reduce_scatter = 1;
    struct zt_offload_cfg *o[2] = {&cfg->offload_optimizer, &cfg->offload_param};
    for (int i = 0; i < 2; i++) {
        snprintf(o[i]->nvme_path, sizeof o[i]->nvme_path, "/local_nvme");
        o[i]->buffer_count = i ? 5 : 0; /* optimizer: auto (engine), parameters: DeepSpeed's */
        o[i]->pipeline_read = o[i]->pipeline_write = 1;
        o[i]->buffer_size = 100000000;
        o[i]->max_in_cpu = 1000000000;
    }
    cfg->aio_block_size = 1048576;
    cfg->aio_queue_depth = 8;
    cfg->aio_overlap_events = 1;
    cfg->aio_thread_count = 1;
    zt_autotune_defaults(&cfg->autotune);
    zt_actckpt_defaults(&cfg->actckpt);
    zt_pipeline_defaults(&cfg->pipeline);
}

static enum zt_status parse_config(struct zt_config *out, const char *json, size_t len,
                                   const char *name, const char *path, int world_size) {
    struct zt_json_ctx c = {"config", name ? name : "(string)"};
    if (world_size < 1)
        return zt_error_set(ZT_ERR_INVALID, "config %s: world size must be >= 1, got %d", c.file,
                            world_size);
    /* parse into a local copy: on error *out is left untouched */
    struct zt_config cfg;
    zt_config_defaults(&cfg);
    snprintf(cfg.path, sizeof cfg.path, "%s", path ? path : "");
    cJSON *root = NULL;
    ZT_CHECK(zt_json_parse_object(&c, json, len, &root));
    enum zt_status rc = zt_json_check_keys(&c, root, "", top_impl, top_notimpl);
    int has_tbs = 0, has_micro = 0, has_acc = 0, has_optim = 0;
    const cJSON *x;
    if (rc == ZT_OK && (x = cJSON_GetObjectItemCaseSensitive(root, "train_batch_size"))) {
        rc = zt_json_int32(&c, x, "train_batch_size", 1, &cfg.train_batch_size);
        has_tbs = 1;
    }
    if (rc == ZT_OK &&
        (x = cJSON_GetObjectItemCaseSensitive(root, "train_micro_batch_size_per_gpu"))) {
        rc = zt_json_int32(&c, x, "train_micro_batch_size_per_gpu", 1, &cfg.micro_batch);
        has_micro = 1;
    }
    if (rc == ZT_OK &&
        (x = cJSON_GetObjectItemCaseSensitive(root, "gradient_accumulation_steps"))) {
        rc = zt_json_int32(&c, x, "gradient_accumulation_steps", 1, &cfg.grad_accum);
        has_acc = 1;
    }
    if (rc == ZT_OK && (x = cJSON_GetObjectItemCaseSensitive(root, "optimizer"))) {
        rc = parse_optimizer(&c, x, &cfg);
        has_optim = 1;
    }
    if (rc == ZT_OK && (x = cJSON_GetObjectItemCaseSensitive(root, "scheduler")))
        rc = parse_scheduler(&c, x, &cfg);
    if (rc == ZT_OK && (x = cJSON_GetObjectItemCaseSensitive(root, "gradient_clipping"))) {
        double d = 0;
        rc = zt_json_num(&c, x, "gradient_clipping", ZT_JSON_GE0, &d);
        cfg.gradient_clipping = (float)d;
    }
    if (rc == ZT_OK && (x = cJSON_GetObjectItemCaseSensitive(root, "steps_per_print")))
        rc = zt_json_int32(&c, x, "steps_per_print", 1, &cfg.steps_per_print);
    if (rc == ZT_OK && (x = cJSON_GetObjectItemCaseSensitive(root, "seed"))) {
        long long s = 0;
        /* JSON numbers are doubles: integers above 2^53 would not be exact */
        rc = zt_json_int(&c, x, "seed", 0, 9007199254740992LL, &s);
        cfg.seed = (uint64_t)s;
    }
    if (rc == ZT_OK && (x = cJSON_GetObjectItemCaseSensitive(root, "zero_optimization")))
        rc = parse_zero(&c, x, &cfg);
    if (rc == ZT_OK && (x = cJSON_GetObjectItemCaseSensitive(root, "aio")))
        rc = parse_aio(&c, x, &cfg);
    if (rc == ZT_OK && (x = cJSON_GetObjectItemCaseSensitive(root, "checkpoint")))
        rc = parse_checkpoint(&c, x, &cfg);
    if (rc == ZT_OK && (x = cJSON_GetObjectItemCaseSensitive(root, "autotuning")))
        rc = zt_config_parse_autotuning(&c, x, &cfg.autotune);
    if (rc == ZT_OK && (x = cJSON_GetObjectItemCaseSensitive(root, "curriculum_learning")))
        rc = zt_config_parse_curriculum(&c, x, &cfg.curriculum);
    if (rc == ZT_OK && (x = cJSON_GetObjectItemCaseSensitive(root, "data_efficiency")))
        rc = zt_config_check_data_efficiency(&c, x, cfg.curriculum.enabled);
    if (rc == ZT_OK && (x = cJSON_GetObjectItemCaseSensitive(root, "activation_checkpointing")))
        rc = zt_config_parse_actckpt(&c, x, &cfg.actckpt);
    if (rc == ZT_OK && (x = cJSON_GetObjectItemCaseSensitive(root, "pipeline")))
        rc = zt_config_parse_pipeline(&c, x, &cfg.pipeline);
    if (rc == ZT_OK) rc = parse_precisions(&c, root, &cfg);
    int dp = world_size;
    if (rc == ZT_OK)
        rc = zt_config_check_pipeline(&c, &cfg.pipeline, world_size, cfg.zero_stage, &dp);
    if (rc == ZT_OK) rc = zt_config_pipeline_actckpt(&c, &cfg.pipeline, &cfg.actckpt);
    if (rc == ZT_OK) rc = resolve_batch(&c, &cfg, has_tbs, has_micro, has_acc, world_size, dp);
    cJSON_Delete(root);
    if (rc != ZT_OK) return rc;
    if (!has_optim)
        ZT_LOG_I("config %s: no \"optimizer\" section; using AdamW lr=%g betas=[%g, %g] eps=%g "
                 "weight_decay=%g",
                 c.file, cfg.lr, cfg.beta1, cfg.beta2, cfg.eps, cfg.weight_decay);
    *out = cfg;
    return ZT_OK;
}

enum zt_status zt_config_parse(struct zt_config *cfg, const char *json, const char *name,
                               int world_size) {
    if (!cfg || !json) return zt_error_set(ZT_ERR_INVALID, "zt_config_parse: NULL argument");
    return parse_config(cfg, json, strlen(json), name, "", world_size);
}

enum zt_status zt_config_load(struct zt_config *cfg, const char *path, int world_size) {
    if (!cfg || !path) return zt_error_set(ZT_ERR_INVALID, "zt_config_load: NULL argument");
    char *buf;
    size_t len;
    ZT_CHECK(zt_json_read_file("config", path, &buf, &len));
    enum zt_status rc = parse_config(cfg, buf, len, path, path, world_size);
    free(buf);
    return rc;
}
