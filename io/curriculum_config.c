/*
 * io/curriculum_config.c: the config's legacy "curriculum_learning" section, with DeepSpeed's
 * keys, meanings and rules (deepspeed/runtime/data_pipeline/curriculum_scheduler.py and the
 * constants next to it), and the refusal of DeepSpeed's newer "data_efficiency" library.
 *
 * Layer: io/ (platform; no StarPU). Errors as the rest of the config: one line naming the file,
 * the JSON path and what was expected. The schedule itself is io/curriculum.c.
 *
 * DeepSpeed reads the section only when "enabled" is true, and then asserts (or fails with a
 * KeyError on) every key its schedule type reads; so do we, and a disabled section is checked
 * for unknown keys only. Beyond DeepSpeed, which takes these as Python values unchecked: the
 * difficulties and steps are positive integers, min_difficulty <= max_difficulty, fixed_discrete's
 * max_step increases and its difficulties lie in [1, max_difficulty], a schedule_config key the
 * schedule type does not read is an error, and for fixed_linear / fixed_root min_difficulty is a
 * multiple of difficulty_step (DeepSpeed releases differ on the first difficulty otherwise).
 */
#include <stdint.h>      /* int64_t */
#include <stdio.h>       /* snprintf */
#include <string.h>      /* strcmp, strlen */
#include "config_impl.h" /* zt_config_parse_curriculum, zt_config_check_data_efficiency */

#define STEP_MAX 9007199254740992LL /* 2^53: larger JSON integers are not exact */

static const char *const cl_keys[] = {"enabled", "curriculum_type", "min_difficulty",
                                      "max_difficulty", "schedule_type", "schedule_config", NULL};
/* schedule_type values; "custom" needs a Python function and is refused on its own */
static const char *const schedule_names[] = {"fixed_linear", "fixed_root", "fixed_discrete",
                                             NULL};
static const char *const sc_keys[] = {"total_curriculum_step", "difficulty_step", "root_degree",
                                      "difficulty", "max_step", NULL};
/* the schedule_config keys each schedule type reads, all required (enum order) */
static const char *const linear_keys[] = {"total_curriculum_step", "difficulty_step", NULL};
static const char *const root_keys[] = {"total_curriculum_step", "difficulty_step",
                                        "root_degree", NULL};
static const char *const discrete_keys[] = {"difficulty", "max_step", NULL};
static const char *const *const sched_keys[] = {linear_keys, root_keys, discrete_keys};

/* "a, b, c" of a NULL-terminated list */
static const char *join(const char *const *names, char *buf, size_t n) {
    buf[0] = '\0';
    for (int i = 0; names[i]; i++)
        snprintf(buf + strlen(buf), n - strlen(buf), "%s%s", i ? ", " : "", names[i]);
    return buf;
}

/* the required key `key` of obj (at path parent), or an error naming what requires it */
static enum zt_status required(const struct zt_json_ctx *c, const cJSON *obj, const char *parent,
                               const char *key, const char *why, const cJSON **out) {
    *out = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (*out) return ZT_OK;
    char p[ZT_JSON_PATH_MAX];
    zt_json_path(p, parent, key);
    return zt_json_err(c, p, "missing (%s)", why);
}

/* curriculum_type: "seqlen", the only type zerotask implements */
static enum zt_status parse_type(const struct zt_json_ctx *c, const cJSON *v,
                                 struct zt_curriculum_cfg *cl) {
    const char *path = "curriculum_learning.curriculum_type", *s = NULL;
    ZT_CHECK(zt_json_string(c, v, path, &s));
    if (strcmp(s, "seqlen") != 0)
        return zt_json_err(c, path, "\"%s\" is not implemented by zerotask (it implements "
                           "\"seqlen\" only)", s);
    cl->type = ZT_CURRICULUM_SEQLEN;
    return ZT_OK;
}

static enum zt_status parse_schedule_type(const struct zt_json_ctx *c, const cJSON *v,
                                          struct zt_curriculum_cfg *cl) {
    const char *path = "curriculum_learning.schedule_type", *s = NULL;
    ZT_CHECK(zt_json_string(c, v, path, &s));
    for (int i = 0; schedule_names[i]; i++)
        if (!strcmp(s, schedule_names[i])) {
            cl->schedule = (enum zt_curriculum_schedule)i;
            return ZT_OK;
        }
    if (!strcmp(s, "custom"))
        return zt_json_err(c, path, "\"custom\" is not implemented by zerotask (DeepSpeed calls "
                           "a Python function given to set_custom_curriculum_learning_schedule; "
                           "use fixed_linear, fixed_root or fixed_discrete)");
    const char *near = zt_json_near_miss(s, schedule_names, NULL);
    if (near) return zt_json_err(c, path, "unknown schedule type \"%s\"; did you mean '%s'?", s,
                                 near);
    return zt_json_err(c, path, "expected one of fixed_linear, fixed_root, fixed_discrete, got "
                       "\"%s\"", s);
}

/* a non-empty array of at most max_n integers in [lo, hi] at path, into out[] and *n */
static enum zt_status parse_int_array(const struct zt_json_ctx *c, const cJSON *v,
                                      const char *path, long long lo, long long hi,
                                      int max_n, long long *out, int *n) {
    char g[96], p[ZT_JSON_PATH_MAX];
    if (!cJSON_IsArray(v))
        return zt_json_err(c, path, "expected an array of integers, got %s",
                           zt_json_describe(v, g, sizeof g));
    int len = cJSON_GetArraySize(v);
    if (len < 1 || len > max_n)
        return zt_json_err(c, path, "expected 1 to %d entries, got %d", max_n, len);
    int i = 0;
    for (const cJSON *x = v->child; x; x = x->next, i++) {
        snprintf(p, sizeof p, "%s[%d]", path, i);
        ZT_CHECK(zt_json_int(c, x, p, lo, hi, &out[i]));
    }
    *n = len;
    return ZT_OK;
}

/* fixed_discrete: "difficulty" and "max_step", len(difficulty) == len(max_step) + 1 */
static enum zt_status parse_discrete(const struct zt_json_ctx *c, const cJSON *sc,
                                     struct zt_curriculum_cfg *cl) {
    const char *dpath = "curriculum_learning.schedule_config.difficulty";
    const char *mpath = "curriculum_learning.schedule_config.max_step";
    long long vals[ZT_CURRICULUM_STAGES_MAX];
    int nd = 0, nm = 0;
    ZT_CHECK(parse_int_array(c, cJSON_GetObjectItemCaseSensitive(sc, "max_step"), mpath, 1,
                             STEP_MAX, ZT_CURRICULUM_STAGES_MAX - 1, vals, &nm));
    for (int i = 0; i < nm; i++) {
        if (i && vals[i] <= vals[i - 1])
            return zt_json_err(c, mpath, "expected increasing steps, got %lld after %lld at "
                               "[%d]", vals[i], vals[i - 1], i);
        cl->max_step[i] = vals[i];
    }
    ZT_CHECK(parse_int_array(c, cJSON_GetObjectItemCaseSensitive(sc, "difficulty"), dpath, 1,
                             cl->max_difficulty, ZT_CURRICULUM_STAGES_MAX, vals, &nd));
    if (nd != nm + 1)
        return zt_json_err(c, dpath, "expected %d entries (one more than max_step: the last "
                           "difficulty holds after the last max_step), got %d", nm + 1, nd);
    for (int i = 0; i < nd; i++) cl->difficulty[i] = (int)vals[i];
    cl->n_stages = nd;
    return ZT_OK;
}

/* fixed_linear / fixed_root: total_curriculum_step, difficulty_step (and root_degree) */
static enum zt_status parse_root(const struct zt_json_ctx *c, const cJSON *sc,
                                 struct zt_curriculum_cfg *cl) {
    const char *sp = "curriculum_learning.schedule_config.difficulty_step";
    long long t = 0;
    ZT_CHECK(zt_json_int(c, cJSON_GetObjectItemCaseSensitive(sc, "total_curriculum_step"),
                         "curriculum_learning.schedule_config.total_curriculum_step", 1,
                         STEP_MAX, &t));
    cl->total_curriculum_step = t;
    ZT_CHECK(zt_json_int32(c, cJSON_GetObjectItemCaseSensitive(sc, "difficulty_step"), sp, 1,
                           &cl->difficulty_step));
    cl->root_degree = 1;
    if (cl->schedule == ZT_CURRICULUM_FIXED_ROOT)
        ZT_CHECK(zt_json_num(c, cJSON_GetObjectItemCaseSensitive(sc, "root_degree"),
                             "curriculum_learning.schedule_config.root_degree", ZT_JSON_GT0,
                             &cl->root_degree));
    if (cl->min_difficulty % cl->difficulty_step != 0)
        return zt_json_err(c, "curriculum_learning.min_difficulty", "expected a multiple of "
                           "schedule_config.difficulty_step (%d), got %d (DeepSpeed releases "
                           "differ on the first difficulty otherwise)", cl->difficulty_step,
                           cl->min_difficulty);
    return ZT_OK;
}

/* schedule_config: an object whose keys are the ones schedule_type reads, all present */
static enum zt_status parse_schedule_config(const struct zt_json_ctx *c, const cJSON *sc,
                                            struct zt_curriculum_cfg *cl) {
    const char *path = "curriculum_learning.schedule_config";
    const char *type = schedule_names[cl->schedule];
    const char *const *keys = sched_keys[cl->schedule];
    char p[ZT_JSON_PATH_MAX], why[160], list[160];
    ZT_CHECK(zt_json_object(c, sc, path));
    ZT_CHECK(zt_json_check_keys(c, sc, path, sc_keys, NULL));
    for (const cJSON *x = sc->child; x; x = x->next)
        if (!zt_json_in_list(x->string, keys)) {
            zt_json_path(p, path, x->string);
            return zt_json_err(c, p, "is not read by schedule_type \"%s\" (it reads %s)", type,
                               join(keys, list, sizeof list));
        }
    snprintf(why, sizeof why, "schedule_type \"%s\" requires it", type);
    const cJSON *x;
    for (int i = 0; keys[i]; i++) ZT_CHECK(required(c, sc, path, keys[i], why, &x));
    if (cl->schedule == ZT_CURRICULUM_FIXED_DISCRETE) return parse_discrete(c, sc, cl);
    return parse_root(c, sc, cl);
}

enum zt_status zt_config_parse_curriculum(const struct zt_json_ctx *c, const cJSON *v,
                                          struct zt_curriculum_cfg *cl) {
    const char *path = "curriculum_learning", *why = "an enabled curriculum requires it";
    ZT_CHECK(zt_json_object(c, v, path));
    ZT_CHECK(zt_json_check_keys(c, v, path, cl_keys, NULL));
    *cl = (struct zt_curriculum_cfg){0};
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(v, "enabled");
    if (x) ZT_CHECK(zt_json_bool(c, x, "curriculum_learning.enabled", &cl->enabled));
    if (!cl->enabled) return ZT_OK;
    ZT_CHECK(required(c, v, path, "curriculum_type", "an enabled curriculum requires it; "
                      "zerotask implements \"seqlen\"", &x));
    ZT_CHECK(parse_type(c, x, cl));
    ZT_CHECK(required(c, v, path, "min_difficulty", why, &x));
    ZT_CHECK(zt_json_int32(c, x, "curriculum_learning.min_difficulty", 1, &cl->min_difficulty));
    ZT_CHECK(required(c, v, path, "max_difficulty", why, &x));
    ZT_CHECK(zt_json_int32(c, x, "curriculum_learning.max_difficulty", 1, &cl->max_difficulty));
    if (cl->max_difficulty < cl->min_difficulty)
        return zt_json_err(c, "curriculum_learning.max_difficulty", "expected at least "
                           "min_difficulty (%d), got %d", cl->min_difficulty,
                           cl->max_difficulty);
    ZT_CHECK(required(c, v, path, "schedule_type", why, &x));
    ZT_CHECK(parse_schedule_type(c, x, cl));
    ZT_CHECK(required(c, v, path, "schedule_config", why, &x));
    return parse_schedule_config(c, x, cl);
}

// ----------------------------------------------------------------------------
// data_efficiency: DeepSpeed's newer data library (data_sampling with its curriculum and dynamic
// batching, data_routing with random-LTD), not implemented. Accepted only when nothing in it is
// enabled; the keys of its first two levels are checked, deeper ones are DeepSpeed's parameters
// of parts we do not run.

static const char *const de_keys[] = {"enabled", "seed", "data_sampling", "data_routing", NULL};
static const char *const sampling_keys[] = {"enabled", "num_epochs", "num_workers",
                                            "pin_memory", "curriculum_learning",
                                            "dynamic_batching", NULL};
static const char *const routing_keys[] = {"enabled", "random_ltd", NULL};

/* The deepest object under v (at path, v included) whose "enabled" is true, into hit ("" when
 * none); every "enabled" on the way must be true or false. */
static enum zt_status find_enabled(const struct zt_json_ctx *c, const cJSON *v, const char *path,
                                   char *hit) {
    char p[ZT_JSON_PATH_MAX];
    for (const cJSON *x = v->child; x && !hit[0]; x = x->next) {
        if (!cJSON_IsObject(x)) continue;
        zt_json_path(p, path, x->string);
        ZT_CHECK(find_enabled(c, x, p, hit));
    }
    const cJSON *en = cJSON_GetObjectItemCaseSensitive(v, "enabled");
    int on = 0;
    zt_json_path(p, path, "enabled");
    if (en) ZT_CHECK(zt_json_bool(c, en, p, &on));
    if (on && !hit[0]) snprintf(hit, ZT_JSON_PATH_MAX, "%s", path);
    return ZT_OK;
}

/* the keys of the object v.key when present (an object) */
static enum zt_status check_sub_keys(const struct zt_json_ctx *c, const cJSON *v,
                                     const char *key, const char *const *keys) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(v, key);
    char p[ZT_JSON_PATH_MAX];
    zt_json_path(p, "data_efficiency", key);
    if (!x) return ZT_OK;
    ZT_CHECK(zt_json_object(c, x, p));
    return zt_json_check_keys(c, x, p, keys, NULL);
}

enum zt_status zt_config_check_data_efficiency(const struct zt_json_ctx *c, const cJSON *v,
                                               int legacy_enabled) {
    ZT_CHECK(zt_json_object(c, v, "data_efficiency"));
    ZT_CHECK(zt_json_check_keys(c, v, "data_efficiency", de_keys, NULL));
    ZT_CHECK(check_sub_keys(c, v, "data_sampling", sampling_keys));
    ZT_CHECK(check_sub_keys(c, v, "data_routing", routing_keys));
    char hit[ZT_JSON_PATH_MAX] = "";
    ZT_CHECK(find_enabled(c, v, "data_efficiency", hit));
    if (!hit[0]) return ZT_OK;
    if (legacy_enabled && !strcmp(hit, "data_efficiency.data_sampling.curriculum_learning"))
        return zt_json_err(c, hit, "enabled together with the top-level \"curriculum_learning\" "
                           "section: give one curriculum (zerotask implements the top-level "
                           "section, curriculum_type \"seqlen\")");
    return zt_json_err(c, hit, "enabled, but DeepSpeed's data_efficiency library is not "
                       "implemented by zerotask (it implements the legacy top-level "
                       "\"curriculum_learning\" section, curriculum_type \"seqlen\")");
}
