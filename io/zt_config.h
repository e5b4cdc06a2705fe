/*
 * io/zt_config.h: the DeepSpeed-style training config and the model-shape JSON.
 *
 * Layer: io/. Parsed with cJSON. Keys have DeepSpeed's names and meaning. A key we do not know,
 * a known DeepSpeed key we do not implement yet, a duplicated key, a wrong type, an out-of-range
 * value, an empty file or one that is not a JSON object is ZT_ERR_CONFIG with a one-line message
 * naming the file, the JSON path and what was expected (with "did you mean" for near misses).
 */
#ifndef ZT_CONFIG_H
#define ZT_CONFIG_H

#include <stddef.h>    /* size_t */
#include <stdint.h>    /* int64_t */
#include "zt_status.h" /* enum zt_status */

#ifdef __cplusplus
extern "C" {
#endif

enum zt_optim_type { ZT_OPTIM_ADAM = 0, ZT_OPTIM_ADAMW = 1 };

enum zt_lr_sched_type {
    ZT_LR_CONSTANT = 0,     /* no "scheduler" section: lr stays optimizer.params.lr */
    ZT_LR_WARMUP,           /* DeepSpeed WarmupLR */
    ZT_LR_WARMUP_DECAY,     /* DeepSpeed WarmupDecayLR */
    ZT_LR_WARMUP_COSINE,    /* DeepSpeed WarmupCosineLR */
};

enum zt_warmup_type { ZT_WARMUP_LOG = 0, ZT_WARMUP_LINEAR = 1 };

/* training precision: "bf16"/"bfloat16" {enabled} or "fp16" {enabled, ...} (both at once is an
 * error); fp32 when neither is enabled */
enum zt_precision { ZT_PREC_FP32 = 0, ZT_PREC_BF16, ZT_PREC_FP16 };

/* "autotuning" (DeepSpeed's section, keys, meanings and defaults): read by zt-tune; zt-train
 * accepts it and trains with the config as given, as DeepSpeed does outside its autotuner */
enum zt_tune_metric { ZT_TUNE_THROUGHPUT = 0, ZT_TUNE_LATENCY, ZT_TUNE_FLOPS };
enum zt_tuner_type { ZT_TUNER_GRIDSEARCH = 0, ZT_TUNER_RANDOM, ZT_TUNER_MODEL_BASED };
struct zt_autotune_cfg {
    int enabled;                 /* false */
    int fast;                    /* true: micro-batch per stage and placement only, the rest
                                  * predicted; false: the communication, window, aio and chunking
                                  * knobs are measured too */
    enum zt_tune_metric metric;  /* throughput (samples/s), latency (step time), flops */
    enum zt_tuner_type tuner_type; /* gridsearch (DeepSpeed's default), random, model_based */
    int tuner_num_trials;        /* most measured trials (50) */
    int tuner_early_stopping;    /* stop after this many trials without a better one (5) */
    int max_train_batch_size;    /* 0: the global batch stays as configured; else it may vary
                                  * (the accumulation kept) up to this */
    int min_train_batch_size;    /* 0: no lower bound */
    int max_train_micro_batch_size_per_gpu; /* 1024 */
    int min_train_micro_batch_size_per_gpu; /* 1 */
    int num_tuning_micro_batch_sizes;       /* micro-batch sizes tried per stage (3) */
    int start_profile_step, end_profile_step; /* a trial runs end steps and times [start, end]
                                               * (3, 5) */
    char results_dir[512];       /* "autotuning_results" */
    char exps_dir[512];          /* "autotuning_exps" */
    int overwrite;               /* true: earlier results in results_dir are discarded; false:
                                  * reused (an interrupted tune resumes) */
};

/* "curriculum_learning": DeepSpeed's legacy top-level section, with its keys and meanings
 * (deepspeed/runtime/data_pipeline/curriculum_scheduler.py). curriculum_type "seqlen": training
 * step s runs on sequences of zt_curriculum_seqlen(s) tokens, from min_difficulty up to
 * max_difficulty. DeepSpeed's newer "data_efficiency" library is refused (io/curriculum_config.c).
 * The section is read further than "enabled" only when enabled; then every key the schedule type
 * reads is required, as DeepSpeed requires them. */
enum zt_curriculum_type { ZT_CURRICULUM_SEQLEN = 0 };
enum zt_curriculum_schedule {
    ZT_CURRICULUM_FIXED_LINEAR = 0, /* linear from min to max in total_curriculum_step steps */
    ZT_CURRICULUM_FIXED_ROOT,       /* as linear in (step / total_curriculum_step)^(1/degree) */
    ZT_CURRICULUM_FIXED_DISCRETE    /* difficulty[i] while step <= max_step[i], then the last */
};
#define ZT_CURRICULUM_STAGES_MAX 64 /* most entries of fixed_discrete's difficulty list */
struct zt_curriculum_cfg {
    int enabled;                       /* false */
    enum zt_curriculum_type type;      /* curriculum_type: "seqlen" (the only one implemented) */
    int min_difficulty, max_difficulty; /* >= 1, min <= max (sequence lengths, in tokens) */
    enum zt_curriculum_schedule schedule; /* schedule_type */
    /* schedule_config, fixed_linear and fixed_root */
    int64_t total_curriculum_step;     /* steps from min_difficulty to max_difficulty */
    int difficulty_step;               /* every difficulty is a multiple of it (min_difficulty
                                        * included); max_difficulty caps the last */
    double root_degree;                /* fixed_root (> 0; 2 is a square root); fixed_linear: 1 */
    /* schedule_config, fixed_discrete: n_stages difficulties, one more than max_steps */
    int n_stages;
    int difficulty[ZT_CURRICULUM_STAGES_MAX];        /* each in [1, max_difficulty] */
    int64_t max_step[ZT_CURRICULUM_STAGES_MAX - 1];  /* strictly increasing, >= 1 */
};

/* "activation_checkpointing" (DeepSpeed's section and keys; docs/activation-checkpointing.md).
 * zerotask's enabling rule: the section present turns checkpointing on (DeepSpeed's model code
 * calls deepspeed.checkpointing.checkpoint itself; zerotask's GPT-2 has no such call site), for
 * every layer, or for the first number_checkpoints layers; number_checkpoints 0 turns it off.
 * Parsed by io/actckpt_config.c; partition_activations true and profile true are refused. */
/* where offloaded state goes (DeepSpeed's "device" of an offload section), and the size of an
 * offload section's nvme_path (with room for the run's directory and file names under it) */
enum zt_offload_device { ZT_OFFLOAD_NONE = 0, ZT_OFFLOAD_CPU, ZT_OFFLOAD_NVME };
#define ZT_NVME_PATH_MAX 512

struct zt_actckpt_cfg {
    int enabled;                        /* the section present and number_checkpoints != 0 */
    int number_checkpoints;             /* layers checkpointed from the first; -1: every layer */
    int cpu_checkpointing;              /* DeepSpeed: the checkpoints in host memory (CPU
                                         * build: they are) */
    /* "offload" (zerotask's key, DeepSpeed's offload-section shape): where the inputs kept by
     * the checkpointed layers that recompute live between their forward and backward: none
     * (the activations' memory; cpu_checkpointing true means cpu), cpu (host memory), nvme (a
     * swap file under nvme_path, default "/local_nvme") */
    enum zt_offload_device offload;
    char nvme_path[ZT_NVME_PATH_MAX];
    int contiguous_memory_optimization; /* DeepSpeed: one contiguous buffer for the
                                         * checkpoints */
    int synchronize_checkpoint_boundary;/* DeepSpeed: torch.cuda.synchronize at each boundary */
    int profile;                        /* always 0: profile true is refused (use --trace) */
    /* "recompute" (zerotask's key): what a checkpointed layer recomputes in the backward */
    enum zt_recompute { ZT_RECOMPUTE_FULL = 0, /* "full": all but its output (default) */
                        ZT_RECOMPUTE_MLP,      /* "mlp": the MLP's; the attention's are kept */
                        ZT_RECOMPUTE_ATTENTION /* "attention": the attention's up to its
                                                * output; the MLP's and res2 are kept */
    } recompute;
};

/* "pipeline" (DeepSpeed's section; io/pipeline_config.c, docs/pipeline.md): the model's layers
 * cut into `stages` consecutive ranges, one per pipeline stage, each run by world_size / stages
 * data-parallel replicas. */
#define ZT_PIPE_MAX_WEIGHTS 256 /* layer specs a "partition_weights" list may give */
struct zt_pipeline_cfg {
    int stages; /* 1: no pipeline (DeepSpeed's "auto") */
    enum zt_pipe_partition {
        ZT_PIPE_PARAMETERS = 0, /* "parameters" (and DeepSpeed's config default "best") */
        ZT_PIPE_UNIFORM,        /* "uniform": as many layers per stage */
        ZT_PIPE_TYPE,           /* "type:REGEX": as many layers matching REGEX per stage */
        ZT_PIPE_WEIGHTS         /* "weights" (zerotask's): balanced by partition_weights */
    } partition;
    char partition_type[64];            /* the REGEX of "type:REGEX" */
    /* "partition_weights" (zerotask's): one weight per layer spec (embed, each block, ln_f,
     * head), e.g. their measured times from zt-trace pipeline --partition time */
    int nweights;
    double weights[ZT_PIPE_MAX_WEIGHTS];
    int activation_checkpoint_interval; /* every k-th layer checkpointed; 0: none */
    int pipe_partitioned, grad_partitioned; /* accepted (no tensor parallelism to split over) */
    enum zt_pipe_schedule { ZT_PIPE_1F1B = 0, ZT_PIPE_GPIPE } schedule; /* zerotask's key */
};
/* Where a rank sits: DeepSpeed's PipeDataParallelTopology (pipe outermost): rank = stage * dp +
 * dp_rank. */
struct zt_pipe_rank {
    int stage, stages; /* its pipeline stage of `stages` */
    int dp_rank, dp;   /* its place among the stage's data-parallel replicas */
};

struct zt_config {
    char path[512];              /* file it was read from ("" when built in code) */
    /* batch: train_batch_size = micro_batch * grad_accum * data-parallel replicas, world_size
     * without a pipeline, world_size / pipeline.stages with one (DeepSpeed's rule; any one
     * missing is derived from the other two, a missing pair defaults the accumulation to 1) */
    int train_batch_size;
    int micro_batch;             /* train_micro_batch_size_per_gpu */
    int grad_accum;              /* gradient_accumulation_steps */
    int world_size;              /* the world size the rule was resolved with */
    /* optimizer */
    enum zt_optim_type optim;    /* optimizer.type: "Adam" | "AdamW" (case-insensitive) */
    float lr;                    /* optimizer.params.lr            (default 1e-3) */
    float beta1, beta2;          /* optimizer.params.betas         (default [0.9, 0.999]) */
    float eps;                   /* optimizer.params.eps           (default 1e-8) */
    float weight_decay;          /* optimizer.params.weight_decay  (default 0.01 AdamW, 0 Adam) */
    int adam_w_mode;             /* optimizer.params.adam_w_mode: decoupled decay (DeepSpeed's
                                  * default 1 for both types; AdamW forces 1) */
    /* scheduler (DeepSpeed names; params not given take DeepSpeed's defaults) */
    enum zt_lr_sched_type sched;
    float warmup_min_lr;         /* WarmupLR/WarmupDecayLR: default 0 */
    float warmup_max_lr;         /* WarmupLR/WarmupDecayLR: default 0.001 */
    int warmup_num_steps;        /* default 1000 */
    enum zt_warmup_type warmup_type; /* default log */
    int total_num_steps;         /* WarmupDecayLR (required) / WarmupCosineLR (required) */
    float warmup_min_ratio;      /* WarmupCosineLR: default 0 */
    float cos_min_ratio;         /* WarmupCosineLR: default 0.0001 */
    /* mixed precision (DeepSpeed's meaning): parameters, activations and gradients in 16 bits,
     * fp32 master weights and moments in the optimizer */
    enum zt_precision precision;
    /* fp16 loss scaling (DeepSpeed's fp16 section and DynamicLossScaler) */
    double loss_scale;           /* fp16.loss_scale: 0 = dynamic (default), > 0 static */
    int initial_scale_power;     /* dynamic: the first scale is 2^power (default 16) */
    int loss_scale_window;       /* clean steps before the scale doubles (default 1000) */
    int hysteresis;              /* overflows tolerated before it halves (DeepSpeed's
                                  * delayed_shift, default 2) */
    int consecutive_hysteresis;  /* a clean step restores the hysteresis (default false) */
    double min_loss_scale;       /* the scale never goes below it (default 1); an overflow at it
                                  * ends the run, as DeepSpeed's raise_error_at_min_scale */
    /* other */
    float gradient_clipping;     /* 0 = off (DeepSpeed default 0) */
    int steps_per_print;         /* default 10 (DeepSpeed's) */
    uint64_t seed;               /* "seed", default 1234 */
    /* zero_optimization (DeepSpeed's meaning; stages 0-3, see graph/zt_engine.h) */
    int zero_stage;              /* stage: 0 replicated, 1 + optimizer state partitioned,
                                  * 2 + gradients reduce-scattered (default 0) */
    int64_t reduce_bucket_size;  /* elements per gradient reduction (default 5e8) */
    int64_t allgather_bucket_size; /* elements per parameter all-gather (default 5e8) */
    int overlap_comm;            /* reduce a bucket as soon as its gradients are final (default
                                  * true here; false: all reductions after the backward) */
    int reduce_scatter;          /* stage 2: reduce-scatter (default true) or all-reduce */
    int64_t stage3_max_live_parameters;  /* stage 3: cap on gathered elements (default 1e9) */
    int64_t stage3_prefetch_bucket_size; /* stage 3: elements gathered ahead (default 5e7) */
    int64_t stage3_param_persistence_threshold; /* stage 3: smaller tensors kept whole (1e5) */
    /* zero_optimization.offload_optimizer (DeepSpeed's keys; stage >= 1). Unlike DeepSpeed,
     * nvme works at every stage >= 1 and pipeline_read/pipeline_write default to true */
    struct zt_offload_cfg {
        enum zt_offload_device device;
        char nvme_path[ZT_NVME_PATH_MAX]; /* default "/local_nvme" (DeepSpeed's) */
        int pin_memory;          /* accepted; host buffers are pinned when CUDA workers exist */
        int buffer_count;        /* optimizer: 0 = "auto" (default; the engine fills
                                  * ZT_SWAP_BUFFER_MEM), parameters: 5 (DeepSpeed's default) */
        int pipeline_read, pipeline_write; /* optimizer only */
        int64_t buffer_size;     /* parameters only: elements per buffer (1e8) */
        int64_t max_in_cpu;      /* parameters only: elements kept in host memory (1e9) */
    } offload_optimizer, offload_param;
    /* checkpoint (zerotask's section; docs/checkpoints.md): save every save_interval steps (0:
     * never) into dir, keeping the newest keep_last tags (0: all) */
    int64_t ckpt_save_interval;
    int ckpt_keep_last;
    char ckpt_dir[512];
    /* "aio" (DeepSpeed's keys and defaults): the NVMe swap engine */
    int64_t aio_block_size;      /* bytes per request, 1048576 */
    int aio_queue_depth;         /* 8 */
    int aio_single_submit;       /* false */
    int aio_overlap_events;      /* true */
    int aio_thread_count;        /* 1: I/O threads serving the swap tasks */
    struct zt_autotune_cfg autotune;
    struct zt_curriculum_cfg curriculum;
    struct zt_actckpt_cfg actckpt;
    struct zt_pipeline_cfg pipeline;
};

/* rank's stage and data-parallel place in a world of world_size ranks laid out by p */
struct zt_pipe_rank zt_pipe_rank(const struct zt_pipeline_cfg *p, int world_size, int rank);
/* ZT_OK for one stage, and for a pipeline that combines only with what it supports;
 * ZT_ERR_CONFIG naming what a pipeline cannot combine with yet: activation checkpointing's
 * kept inputs on NVMe unless the swap goes through the thread engine (ZT_AIO_ENGINE=threads;
 * the one refusal, for the engine and for zt-train before it starts the runtime: through
 * io_uring, direct writes of a stage were seen to stall, docs/pipeline.md) */
enum zt_status zt_pipeline_check_runnable(const struct zt_config *c);

/* The names of the enums above as the config spells them: "none", "cpu", "nvme"; "fp32",
 * "bf16", "fp16"; "constant" (no scheduler section), "WarmupLR", "WarmupDecayLR",
 * "WarmupCosineLR". "?" for a value out of range. */
const char *zt_offload_device_name(enum zt_offload_device d);
const char *zt_precision_name(enum zt_precision p);
const char *zt_lr_sched_name(enum zt_lr_sched_type t);
/* "throughput", "latency", "flops"; "gridsearch", "random", "model_based" */
const char *zt_tune_metric_name(enum zt_tune_metric m);
const char *zt_tuner_type_name(enum zt_tuner_type t);

/* "fixed_linear", "fixed_root", "fixed_discrete"; "?" for a value out of range */
const char *zt_curriculum_schedule_name(enum zt_curriculum_schedule s);
/* The sequence length of 1-based training step `step` under the curriculum c: exactly the
 * difficulty a DeepSpeed run with the same legacy section trains that step with. DeepSpeed's
 * engine calls update_difficulty(global_steps + 1) before each forward, and global_steps counts
 * the optimizer steps done, so step s uses update_difficulty(s). 0 when c is not enabled (the
 * caller trains on the model's full seq_len); a step < 1 gets min_difficulty (the scheduler's
 * value before any step). Formulas: io/curriculum.c. */
int zt_curriculum_seqlen(const struct zt_curriculum_cfg *c, int64_t step);
/* ZT_OK, or ZT_ERR_CONFIG with one line when the enabled curriculum's max_difficulty exceeds
 * the model's sequence length seq_len ("curriculum_learning.max_difficulty 2048 exceeds the
 * model's seq_len 1024"). */
enum zt_status zt_curriculum_check_seqlen(const struct zt_curriculum_cfg *c, int seq_len);

/* Whether the 0-based transformer layer `layer` is checkpointed under c: enabled, and every
 * layer (number_checkpoints < 0) or layer < number_checkpoints. 0 for a layer < 0. */
int zt_actckpt_layer(const struct zt_actckpt_cfg *c, int layer);
/* ZT_OK, or ZT_ERR_CONFIG with one line when the enabled section's number_checkpoints exceeds
 * the model's n_layer ("activation_checkpointing.number_checkpoints 30 exceeds the model's
 * n_layer 12"). */
enum zt_status zt_actckpt_check_layers(const struct zt_actckpt_cfg *c, int n_layer);

/* Fill cfg with the defaults above (train_batch_size etc. left 0 = unspecified). */
void zt_config_defaults(struct zt_config *cfg);
/* Read a DeepSpeed JSON file and resolve the batch rule for world_size ranks. */
enum zt_status zt_config_load(struct zt_config *cfg, const char *path, int world_size);
/* Same from a JSON string (name is used in messages in place of a path). */
enum zt_status zt_config_parse(struct zt_config *cfg, const char *json, const char *name,
                               int world_size);
/* Learning rate the optimizer uses in 1-based training step `step`, exactly as a DeepSpeed run
 * with the same config would. DeepSpeed's schedule starts at last_batch_iteration = -1 and writes
 * get_lr() into the optimizer in its __init__, and the engine calls lr_scheduler.step() after
 * every optimizer step, so step 1 uses the schedule's value at iteration -1 (warmup_min_lr, or 0
 * for WarmupCosineLR) and step s >= 2 the value at last_batch_iteration = s - 2. Without a
 * scheduler it is cfg->lr. Formulas: io/config.c. */
float zt_config_lr(const struct zt_config *cfg, int64_t step);
/* The schedule's raw value at DeepSpeed's last_batch_iteration `it` (it < 0: the value before
 * the first step()), in double as Python computes it. */
double zt_config_lr_at(const struct zt_config *cfg, int64_t it);

/* Model shape JSON: {"vocab_size", "seq_len", "n_embd", "n_layer", "n_head"}, all required,
 * all positive, n_embd divisible by n_head; unknown keys are errors as above. */
struct zt_model_shape {
    int vocab_size; /* V */
    int seq_len;    /* T (max sequence length; wpe rows) */
    int n_embd;     /* C */
    int n_layer;    /* L */
    int n_head;     /* NH */
};
enum zt_status zt_model_shape_load(struct zt_model_shape *m, const char *path);
enum zt_status zt_model_shape_parse(struct zt_model_shape *m, const char *json, const char *name);
/* Whether the arrays shape s implies (with micro_batch sequences per micro-batch) can be sized:
 * none may hold more than 2^56 elements. A bad one is ZT_ERR_CONFIG naming the file (name),
 * the field it grows with, its value and the limit. Loading and parsing check micro_batch 1. */
enum zt_status zt_model_shape_check_sizes(const struct zt_model_shape *s, int micro_batch,
                                          const char *name);
/* "what: N elements, field value" of the largest of those arrays, for a message. */
void zt_model_shape_largest(const struct zt_model_shape *s, int micro_batch, char *out,
                            size_t n);

#ifdef __cplusplus
}
#endif
#endif /* ZT_CONFIG_H */
