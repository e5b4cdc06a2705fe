/*
 * io/pipeline_config.c: the config's "pipeline" section, with DeepSpeed's keys and defaults
 * (deepspeed/runtime/config.py, get_pipeline_config; PipelineModule's partition methods), and
 * the world it lays out: stages x data-parallel replicas.
 *
 * Layer: io/ (platform; no StarPU). Errors as the rest of the config: one line naming the file,
 * the JSON path and what was expected. The partition of a model into stages is the model's
 * (graph/pipe_plan.c); this file only reads what the user asked for.
 *
 * DeepSpeed reads the section as plain Python values; zerotask checks every type. Its keys:
 * "stages" ("auto", DeepSpeed's default: the PipelineModule's num_stages; zerotask's GPT-2 has
 * no such module, so "auto" is 1 stage) or an integer >= 1; "partition" (DeepSpeed's config
 * default "best", which its engine does not read: PipelineModule's own default, "parameters",
 * is what runs; zerotask takes "best" as "parameters"), "uniform" or "type:REGEX" ("profile"
 * is refused, as DeepSpeed does); "activation_checkpoint_interval" (an integer >= 0: every k-th
 * layer checkpointed, 0 none); "seed_layers" (false only: zerotask seeds the whole model from
 * one generator, the same values for every layout); "pipe_partitioned" and "grad_partitioned"
 * (DeepSpeed splits the activations and gradients sent between stages over the tensor-parallel
 * ranks; without tensor parallelism there is nothing to split: accepted, no effect). zerotask's
 * own key "schedule": "1f1b" (default) or "gpipe".
 */
#include <regex.h>       /* regcomp: a "type:REGEX" partition is checked when read */
#include <stdlib.h>      /* getenv */
#include <string.h>      /* strcmp, strncmp */
#include "config_impl.h" /* zt_config_parse_pipeline */

static const char *const pipe_keys[] = {"stages", "partition", "seed_layers",
                                        "activation_checkpoint_interval", "pipe_partitioned",
                                        "grad_partitioned", "schedule", "partition_weights",
                                        NULL};

void zt_pipeline_defaults(struct zt_pipeline_cfg *p) {
    *p = (struct zt_pipeline_cfg){.stages = 1, .partition = ZT_PIPE_PARAMETERS,
                                  .pipe_partitioned = 1, .grad_partitioned = 1};
}

static enum zt_status parse_stages(const struct zt_json_ctx *c, const cJSON *x, int *out) {
    if (cJSON_IsString(x) && !strcmp(x->valuestring, "auto")) {
        *out = 1;
        return ZT_OK;
    }
    if (cJSON_IsString(x))
        return zt_json_err(c, "pipeline.stages", "expected \"auto\" or an integer >= 1, got "
                           "\"%s\"", x->valuestring);
    return zt_json_int32(c, x, "pipeline.stages", 1, out);
}

static enum zt_status parse_partition(const struct zt_json_ctx *c, const cJSON *x,
                                      struct zt_pipeline_cfg *p) {
    const char *s = NULL, *path = "pipeline.partition";
    ZT_CHECK(zt_json_string(c, x, path, &s));
    if (!strcmp(s, "parameters") || !strcmp(s, "best")) p->partition = ZT_PIPE_PARAMETERS;
    else if (!strcmp(s, "uniform")) p->partition = ZT_PIPE_UNIFORM;
    else if (!strcmp(s, "weights")) p->partition = ZT_PIPE_WEIGHTS;
    else if (!strncmp(s, "type:", 5) && s[5] && strlen(s + 5) < sizeof p->partition_type) {
        regex_t re; /* DeepSpeed: re.search(REGEX, layer name, re.IGNORECASE) */
        int bad = regcomp(&re, s + 5, REG_EXTENDED | REG_ICASE | REG_NOSUB);
        if (bad)
            return zt_json_err(c, path, "\"%s\": expected a POSIX extended regular expression "
                               "after \"type:\"", s);
        regfree(&re);
        p->partition = ZT_PIPE_TYPE;
        strcpy(p->partition_type, s + 5);
    } else if (!strcmp(s, "profile"))
        return zt_json_err(c, path, "\"profile\" is not implemented (DeepSpeed's is not "
                           "either): expected \"parameters\", \"uniform\", \"type:REGEX\" or "
                           "\"weights\" (measured times: zt-trace pipeline --partition time "
                           "prints them)");
    else
        return zt_json_err(c, path, "expected \"parameters\" (or \"best\"), \"uniform\", "
                           "\"type:REGEX\" (a regular expression of at most %d characters "
                           "over the layer names) or \"weights\", got \"%s\"",
                           (int)sizeof p->partition_type - 1, s);
    return ZT_OK;
}

static enum zt_status parse_schedule(const struct zt_json_ctx *c, const cJSON *x,
                                     enum zt_pipe_schedule *out) {
    const char *s = NULL;
    ZT_CHECK(zt_json_string(c, x, "pipeline.schedule", &s));
    if (!strcmp(s, "1f1b") || !strcmp(s, "gpipe")) {
        *out = !strcmp(s, "gpipe") ? ZT_PIPE_GPIPE : ZT_PIPE_1F1B;
        return ZT_OK;
    }
    return zt_json_err(c, "pipeline.schedule", "expected \"1f1b\" (one forward, one backward: "
                       "at most `stages` micro-batches of activations in flight per stage) or "
                       "\"gpipe\" (every forward, then every backward), got \"%s\"", s);
}

/* "partition_weights": a list of positive numbers, one per layer spec, with partition
 * "weights" (and only with it) */
static enum zt_status parse_weights(const struct zt_json_ctx *c, const cJSON *v,
                                    struct zt_pipeline_cfg *p) {
    const char *path = "pipeline.partition_weights";
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(v, "partition_weights");
    if (!x && p->partition != ZT_PIPE_WEIGHTS) return ZT_OK;
    if (!x || p->partition != ZT_PIPE_WEIGHTS)
        return zt_json_err(c, x ? path : "pipeline.partition", "partition \"weights\" and "
                           "partition_weights go together (expected both or neither)");
    const int n = cJSON_IsArray(x) ? cJSON_GetArraySize(x) : 0;
    if (n < 1 || n > ZT_PIPE_MAX_WEIGHTS)
        return zt_json_err(c, path, "expected a list of 1 to %d numbers (one per layer: embed, "
                           "each block, ln_f, head)", ZT_PIPE_MAX_WEIGHTS);
    for (int i = 0; i < n; i++) {
        const cJSON *w = cJSON_GetArrayItem(x, i);
        if (!cJSON_IsNumber(w) || !(w->valuedouble > 0) || w->valuedouble > 1e30)
            return zt_json_err(c, path, "entry %d: expected a positive number", i);
        p->weights[i] = w->valuedouble;
    }
    p->nweights = n;
    return ZT_OK;
}

enum zt_status zt_config_parse_pipeline(const struct zt_json_ctx *c, const cJSON *v,
                                        struct zt_pipeline_cfg *out) {
    ZT_CHECK(zt_json_object(c, v, "pipeline"));
    ZT_CHECK(zt_json_check_keys(c, v, "pipeline", pipe_keys, NULL));
    struct zt_pipeline_cfg p;
    zt_pipeline_defaults(&p);
    const cJSON *x;
    if ((x = cJSON_GetObjectItemCaseSensitive(v, "stages")))
        ZT_CHECK(parse_stages(c, x, &p.stages));
    if ((x = cJSON_GetObjectItemCaseSensitive(v, "partition")))
        ZT_CHECK(parse_partition(c, x, &p));
    if ((x = cJSON_GetObjectItemCaseSensitive(v, "activation_checkpoint_interval")))
        ZT_CHECK(zt_json_int32(c, x, "pipeline.activation_checkpoint_interval", 0,
                               &p.activation_checkpoint_interval));
    if ((x = cJSON_GetObjectItemCaseSensitive(v, "seed_layers"))) {
        int seed = 0;
        ZT_CHECK(zt_json_bool(c, x, "pipeline.seed_layers", &seed));
        if (seed)
            return zt_json_err(c, "pipeline.seed_layers", "true is not implemented: zerotask "
                               "draws every parameter from one seeded generator in declaration "
                               "order, the same values whatever the stages");
    }
    if ((x = cJSON_GetObjectItemCaseSensitive(v, "pipe_partitioned")))
        ZT_CHECK(zt_json_bool(c, x, "pipeline.pipe_partitioned", &p.pipe_partitioned));
    if ((x = cJSON_GetObjectItemCaseSensitive(v, "grad_partitioned")))
        ZT_CHECK(zt_json_bool(c, x, "pipeline.grad_partitioned", &p.grad_partitioned));
    if ((x = cJSON_GetObjectItemCaseSensitive(v, "schedule")))
        ZT_CHECK(parse_schedule(c, x, &p.schedule));
    ZT_CHECK(parse_weights(c, v, &p));
    *out = p;
    return ZT_OK;
}

enum zt_status zt_config_check_pipeline(const struct zt_json_ctx *c,
                                        const struct zt_pipeline_cfg *p, int world_size,
                                        int zero_stage, int *dp) {
    if (world_size % p->stages != 0)
        return zt_json_err(c, "pipeline.stages", "%d does not divide the world size %d "
                           "(expected the ranks to form stages x data-parallel replicas)",
                           p->stages, world_size);
    if (p->stages > 1 && zero_stage >= 2)
        return zt_json_err(c, "zero_optimization.stage", "%d with pipeline.stages %d: expected "
                           "ZeRO stage 0 or 1 with a pipeline (DeepSpeed refuses stages 2-3 "
                           "with pipelining too: they partition the gradients each "
                           "micro-batch, which the pipeline's accumulation defeats)",
                           zero_stage, p->stages);
    *dp = world_size / p->stages;
    return ZT_OK;
}

enum zt_status zt_config_pipeline_actckpt(const struct zt_json_ctx *c,
                                          const struct zt_pipeline_cfg *p,
                                          struct zt_actckpt_cfg *ac) {
    const int k = p->activation_checkpoint_interval;
    if (k == 0) return ZT_OK;
    if (k > 1)
        return zt_json_err(c, "pipeline.activation_checkpoint_interval", "%d: expected 0 or 1 "
                           "(zerotask checkpoints layer by layer: 1 checkpoints every layer; "
                           "recomputing chunks of %d layers together is not implemented)", k, k);
    ac->enabled = 1;
    ac->number_checkpoints = -1; /* every layer */
    return ZT_OK;
}

/* whether the swap files go through the thread engine (ZT_AIO_ENGINE=threads, one of the
 * values sched/knobs.c checks): blocking direct I/O, each finished by the thread that waits */
static int swap_engine_threads(void) {
    const char *e = getenv("ZT_AIO_ENGINE");
    return e && strcmp(e, "threads") == 0;
}

enum zt_status zt_pipeline_check_runnable(const struct zt_config *c) {
    const struct zt_pipeline_cfg *p = &c->pipeline;
    if (p->stages <= 1 || !c->actckpt.enabled || c->actckpt.offload != ZT_OFFLOAD_NVME ||
        swap_engine_threads())
        return ZT_OK;
    return zt_error_set(ZT_ERR_CONFIG, "config %s: pipeline.stages %d with activation "
                        "checkpointing's inputs on NVMe (offload device nvme) runs with "
                        "ZT_AIO_ENGINE=threads only: through io_uring a stage's swap writes were "
                        "seen to stall (docs/pipeline.md)",
                        c->path[0] ? c->path : "(built in code)", p->stages);
}

struct zt_pipe_rank zt_pipe_rank(const struct zt_pipeline_cfg *p, int world_size, int rank) {
    const int dp = world_size / (p->stages > 0 ? p->stages : 1);
    /* DeepSpeed's PipeDataParallelTopology: axes [pipe, data], pipe outermost */
    return (struct zt_pipe_rank){.stage = rank / dp, .dp_rank = rank % dp, .stages = p->stages,
                                 .dp = dp};
}
