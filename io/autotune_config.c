/*
 * io/autotune_config.c: the config's "autotuning" section, with DeepSpeed's keys, meanings and
 * defaults (deepspeed/autotuning/constants.py), for zt-tune.
 *
 * Layer: io/ (platform; no StarPU). Errors as the rest of the config: one line naming the file,
 * the JSON path and what was expected.
 */
#include <stddef.h>      /* offsetof */
#include <stdio.h>       /* snprintf */
#include <string.h>      /* strcmp, strlen */
#include "config_impl.h" /* zt_config_parse_autotuning */

static const char *const tune_impl[] = {
    "enabled", "fast", "metric", "tuner_type", "tuner_num_trials", "tuner_early_stopping",
    "max_train_batch_size", "min_train_batch_size", "max_train_micro_batch_size_per_gpu",
    "min_train_micro_batch_size_per_gpu", "num_tuning_micro_batch_sizes", "start_profile_step",
    "end_profile_step", "results_dir", "exps_dir", "overwrite", NULL};
static const char *const tune_notimpl[] = {"arg_mappings", "mp_size", "model_info",
                                           "model_info_path", "metric_path", NULL};

static const char *const metric_names[] = {"throughput", "latency", "flops", NULL};
static const char *const tuner_names[] = {"gridsearch", "random", "model_based", NULL};

const char *zt_tune_metric_name(enum zt_tune_metric m) {
    return (unsigned)m <= ZT_TUNE_FLOPS ? metric_names[m] : "?";
}
const char *zt_tuner_type_name(enum zt_tuner_type t) {
    return (unsigned)t <= ZT_TUNER_MODEL_BASED ? tuner_names[t] : "?";
}

void zt_autotune_defaults(struct zt_autotune_cfg *at) {
    *at = (struct zt_autotune_cfg){
        .fast = 1, .metric = ZT_TUNE_THROUGHPUT, .tuner_type = ZT_TUNER_GRIDSEARCH,
        .tuner_num_trials = 50, .tuner_early_stopping = 5,
        .max_train_micro_batch_size_per_gpu = 1024, .min_train_micro_batch_size_per_gpu = 1,
        .num_tuning_micro_batch_sizes = 3, .start_profile_step = 3, .end_profile_step = 5,
        .overwrite = 1};
    snprintf(at->results_dir, sizeof at->results_dir, "autotuning_results");
    snprintf(at->exps_dir, sizeof at->exps_dir, "autotuning_exps");
}

/* one of the NULL-terminated names, as its index */
static enum zt_status parse_name(const struct zt_json_ctx *c, const cJSON *v, const char *path,
                                 const char *const *names, int *out) {
    const char *s = NULL;
    ZT_CHECK(zt_json_string(c, v, path, &s));
    for (int i = 0; names[i]; i++)
        if (!strcmp(s, names[i])) {
            *out = i;
            return ZT_OK;
        }
    char list[128] = "";
    for (int i = 0; names[i]; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "",
                 names[i]);
    return zt_json_err(c, path, "expected one of %s, got \"%s\"", list, s);
}

static enum zt_status parse_dir(const struct zt_json_ctx *c, const cJSON *v, const char *path,
                                char *out, size_t n) {
    const char *d = NULL;
    ZT_CHECK(zt_json_string(c, v, path, &d));
    if (strlen(d) == 0 || strlen(d) >= n - 64)
        return zt_json_err(c, path, "expected a directory path of 1 to %d bytes", (int)n - 65);
    snprintf(out, n, "%s", d);
    return ZT_OK;
}

/* the integer keys: JSON name, field, least value */
static int *int_field(struct zt_autotune_cfg *at, const char *key, int *min) {
    static const struct { const char *key; size_t off; int min; } ints[] = {
        {"tuner_num_trials", offsetof(struct zt_autotune_cfg, tuner_num_trials), 1},
        {"tuner_early_stopping", offsetof(struct zt_autotune_cfg, tuner_early_stopping), 1},
        {"max_train_batch_size", offsetof(struct zt_autotune_cfg, max_train_batch_size), 1},
        {"min_train_batch_size", offsetof(struct zt_autotune_cfg, min_train_batch_size), 1},
        {"max_train_micro_batch_size_per_gpu",
         offsetof(struct zt_autotune_cfg, max_train_micro_batch_size_per_gpu), 1},
        {"min_train_micro_batch_size_per_gpu",
         offsetof(struct zt_autotune_cfg, min_train_micro_batch_size_per_gpu), 1},
        {"num_tuning_micro_batch_sizes",
         offsetof(struct zt_autotune_cfg, num_tuning_micro_batch_sizes), 1},
        {"start_profile_step", offsetof(struct zt_autotune_cfg, start_profile_step), 1},
        {"end_profile_step", offsetof(struct zt_autotune_cfg, end_profile_step), 1}};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        if (!strcmp(key, ints[i].key)) {
            *min = ints[i].min;
            return (int *)((char *)at + ints[i].off);
        }
    return NULL;
}

/* one key of the section */
static enum zt_status parse_key(const struct zt_json_ctx *c, const cJSON *x,
                                struct zt_autotune_cfg *at) {
    char p[ZT_JSON_PATH_MAX];
    zt_json_path(p, "autotuning", x->string);
    int *field, min = 0, k = 0;
    if ((field = int_field(at, x->string, &min))) return zt_json_int32(c, x, p, min, field);
    if (!strcmp(x->string, "enabled")) return zt_json_bool(c, x, p, &at->enabled);
    if (!strcmp(x->string, "fast")) return zt_json_bool(c, x, p, &at->fast);
    if (!strcmp(x->string, "overwrite")) return zt_json_bool(c, x, p, &at->overwrite);
    if (!strcmp(x->string, "results_dir"))
        return parse_dir(c, x, p, at->results_dir, sizeof at->results_dir);
    if (!strcmp(x->string, "exps_dir"))
        return parse_dir(c, x, p, at->exps_dir, sizeof at->exps_dir);
    if (!strcmp(x->string, "metric")) {
        ZT_CHECK(parse_name(c, x, p, metric_names, &k));
        at->metric = (enum zt_tune_metric)k;
        return ZT_OK;
    }
    ZT_CHECK(parse_name(c, x, p, tuner_names, &k)); /* tuner_type: the last key left */
    at->tuner_type = (enum zt_tuner_type)k;
    return ZT_OK;
}

enum zt_status zt_config_parse_autotuning(const struct zt_json_ctx *c, const cJSON *v,
                                          struct zt_autotune_cfg *at) {
    ZT_CHECK(zt_json_object(c, v, "autotuning"));
    ZT_CHECK(zt_json_check_keys(c, v, "autotuning", tune_impl, tune_notimpl));
    for (const cJSON *x = v->child; x; x = x->next) ZT_CHECK(parse_key(c, x, at));
    if (at->end_profile_step < at->start_profile_step)
        return zt_json_err(c, "autotuning.end_profile_step", "expected at least "
                           "start_profile_step (%d), got %d", at->start_profile_step,
                           at->end_profile_step);
    if (at->max_train_micro_batch_size_per_gpu < at->min_train_micro_batch_size_per_gpu)
        return zt_json_err(c, "autotuning.max_train_micro_batch_size_per_gpu", "expected at "
                           "least min_train_micro_batch_size_per_gpu (%d), got %d",
                           at->min_train_micro_batch_size_per_gpu,
                           at->max_train_micro_batch_size_per_gpu);
    if (at->max_train_batch_size && at->max_train_batch_size < at->min_train_batch_size)
        return zt_json_err(c, "autotuning.max_train_batch_size", "expected at least "
                           "min_train_batch_size (%d), got %d", at->min_train_batch_size,
                           at->max_train_batch_size);
    return ZT_OK;
}
