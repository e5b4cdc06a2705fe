/*
 * io/actckpt_config.c: the config's "activation_checkpointing" section, with DeepSpeed's keys
 * and defaults (deepspeed/runtime/activation_checkpointing/config.py), and which layers it
 * checkpoints.
 *
 * Layer: io/ (platform; no StarPU). Errors as the rest of the config: one line naming the file,
 * the JSON path and what was expected. The recomputation itself is the engine's.
 *
 * DeepSpeed's section only configures deepspeed.checkpointing.checkpoint; the model code decides
 * which layers call it. zerotask's GPT-2 has no such call site, so the section present turns
 * checkpointing on: every layer, or the first number_checkpoints (0: off). Beyond DeepSpeed,
 * which reads these as Python values unchecked: the flags are true or false, number_checkpoints
 * is null or an integer >= 0, and the two keys zerotask cannot honour (partition_activations,
 * profile) are refused when true. The keys DeepSpeed ties to partition_activations
 * (cpu_checkpointing, contiguous_memory_optimization) are accepted without it: zerotask's
 * checkpointed inputs are whole per-layer tensors, in host memory on a CPU build already.
 * zerotask's own keys: "recompute" (what a checkpointed layer recomputes) and "offload"
 * (device and nvme_path: the kept inputs on NVMe through the swap engine).
 */
#include <limits.h>      /* INT_MAX */
#include <math.h>        /* floor */
#include <string.h>      /* strcmp */
#include "config_impl.h" /* zt_config_parse_actckpt, zt_actckpt_defaults */

static const char *const ac_keys[] = {"partition_activations", "cpu_checkpointing",
                                      "contiguous_memory_optimization", "number_checkpoints",
                                      "synchronize_checkpoint_boundary", "profile", "recompute",
                                      "offload", NULL};
static const char *const offload_keys[] = {"device", "nvme_path", NULL};

/* "recompute" (zerotask's key, not DeepSpeed's): full (default), or selective: mlp, attention
 * (in enum zt_recompute's order) */
static enum zt_status parse_recompute(const struct zt_json_ctx *c, const cJSON *v,
                                      enum zt_recompute *out) {
    static const char *const names[] = {"full", "mlp", "attention"};
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(v, "recompute");
    const char *s = "full";
    if (x) ZT_CHECK(zt_json_string(c, x, "activation_checkpointing.recompute", &s));
    for (int k = 0; k < 3; k++)
        if (!strcmp(s, names[k])) {
            *out = (enum zt_recompute)k;
            return ZT_OK;
        }
    return zt_json_err(c, "activation_checkpointing.recompute", "expected \"full\" (all of a "
                       "checkpointed layer's activations but its output), \"mlp\" (only the "
                       "MLP's; the attention's are kept) or \"attention\" (only the "
                       "attention's; the MLP's are kept), got \"%s\"", s);
}

void zt_actckpt_defaults(struct zt_actckpt_cfg *ac) {
    *ac = (struct zt_actckpt_cfg){.number_checkpoints = -1, .nvme_path = "/local_nvme"};
}

/* "offload" (zerotask's key, shaped as DeepSpeed's offload sections): where the kept inputs
 * live; absent, cpu_checkpointing true says cpu. A contradiction of the two is an error. */
static enum zt_status parse_offload(const struct zt_json_ctx *c, const cJSON *v,
                                    struct zt_actckpt_cfg *a) {
    const char *path = "activation_checkpointing.offload";
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(v, "offload");
    a->offload = a->cpu_checkpointing ? ZT_OFFLOAD_CPU : ZT_OFFLOAD_NONE;
    if (!x) return ZT_OK;
    ZT_CHECK(zt_json_object(c, x, path));
    ZT_CHECK(zt_json_check_keys(c, x, path, offload_keys, NULL));
    a->offload = ZT_OFFLOAD_NONE;
    ZT_CHECK(zt_config_parse_target(c, x, path, &a->offload, a->nvme_path));
    if (a->cpu_checkpointing && a->offload == ZT_OFFLOAD_NONE)
        return zt_json_err(c, "activation_checkpointing.offload.device", "\"none\" contradicts "
                           "cpu_checkpointing true (the kept inputs in host memory): expected "
                           "\"cpu\" or \"nvme\", or cpu_checkpointing false");
    return ZT_OK;
}

int zt_actckpt_layer(const struct zt_actckpt_cfg *c, int layer) {
    return c && c->enabled && layer >= 0 &&
           (c->number_checkpoints < 0 || layer < c->number_checkpoints);
}

enum zt_status zt_actckpt_check_layers(const struct zt_actckpt_cfg *c, int n_layer) {
    if (!c || !c->enabled || c->number_checkpoints <= n_layer) return ZT_OK;
    return zt_error_set(ZT_ERR_CONFIG, "activation_checkpointing.number_checkpoints %d exceeds "
                        "the model's n_layer %d (it counts the checkpointed layers from the "
                        "first)", c->number_checkpoints, n_layer);
}

/* the flag `key` of v into *out when present (DeepSpeed's default false stays otherwise) */
static enum zt_status flag(const struct zt_json_ctx *c, const cJSON *v, const char *key,
                           int *out) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(v, key);
    char p[ZT_JSON_PATH_MAX];
    zt_json_path(p, "activation_checkpointing", key);
    return x ? zt_json_bool(c, x, p, out) : ZT_OK;
}

/* number_checkpoints: null (DeepSpeed's default) is every layer (-1), else an integer >= 0 */
static enum zt_status parse_number(const struct zt_json_ctx *c, const cJSON *x, int *out) {
    char g[96];
    if (cJSON_IsNull(x)) {
        *out = -1;
        return ZT_OK;
    }
    double d = cJSON_IsNumber(x) ? x->valuedouble : -1;
    if (!(d >= 0 && d <= INT_MAX && floor(d) == d))
        return zt_json_err(c, "activation_checkpointing.number_checkpoints", "expected null "
                           "(every layer) or an integer >= 0 (the first layers), got %s",
                           zt_json_describe(x, g, sizeof g));
    *out = (int)d;
    return ZT_OK;
}

enum zt_status zt_config_parse_actckpt(const struct zt_json_ctx *c, const cJSON *v,
                                       struct zt_actckpt_cfg *ac) {
    const char *path = "activation_checkpointing";
    ZT_CHECK(zt_json_object(c, v, path));
    /* DeepSpeed's section has no "enabled": say how it is turned on and off */
    if (cJSON_GetObjectItemCaseSensitive(v, "enabled"))
        return zt_json_err(c, "activation_checkpointing.enabled", "unknown key (DeepSpeed's "
                           "section has none: the section present turns checkpointing on, "
                           "\"number_checkpoints\": 0 turns it off)");
    ZT_CHECK(zt_json_check_keys(c, v, path, ac_keys, NULL));
    struct zt_actckpt_cfg a;
    zt_actckpt_defaults(&a);
    int partition = 0, profile = 0;
    ZT_CHECK(flag(c, v, "partition_activations", &partition));
    if (partition)
        return zt_json_err(c, "activation_checkpointing.partition_activations", "true is not "
                           "implemented: it splits the checkpointed activations across the "
                           "model-parallel ranks, and zerotask has no tensor parallelism");
    ZT_CHECK(flag(c, v, "profile", &profile));
    if (profile)
        return zt_json_err(c, "activation_checkpointing.profile", "true is not implemented: "
                           "zt-train --trace shows the recompute tasks");
    ZT_CHECK(flag(c, v, "cpu_checkpointing", &a.cpu_checkpointing));
    ZT_CHECK(flag(c, v, "contiguous_memory_optimization", &a.contiguous_memory_optimization));
    ZT_CHECK(flag(c, v, "synchronize_checkpoint_boundary", &a.synchronize_checkpoint_boundary));
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(v, "number_checkpoints");
    if (x) ZT_CHECK(parse_number(c, x, &a.number_checkpoints));
    ZT_CHECK(parse_recompute(c, v, &a.recompute));
    ZT_CHECK(parse_offload(c, v, &a));
    a.enabled = a.number_checkpoints != 0;
    *ac = a;
    return ZT_OK;
}
