/*
 * tests/io/test_actckpt.c: proves the "activation_checkpointing" section parses to the fields
 * zt_config.h documents and turns every bad input into ZT_ERR_CONFIG with one line naming the
 * file and the JSON path: DeepSpeed's defaults, the enabling rule (the section present turns
 * checkpointing on, number_checkpoints 0 off), partition_activations and profile refused when
 * true, each key's wrong types, unknown keys (with "did you mean"); and which layers
 * zt_actckpt_layer checkpoints and the n_layer check of zt_actckpt_check_layers.
 */
#include <stdio.h>  /* fprintf, snprintf */
#include <string.h> /* strstr, strchr */

#include "zt_config.h" /* zt_config_parse, zt_actckpt_layer, zt_actckpt_check_layers */
#include "zt_status.h" /* zt_error_last */
#include "zt_test.h"   /* ZT_TEST_TRUE, zt_test_finish */
#include "config_check.h" /* EXPECT_ERR, OK_WS */

/* a config around an activation_checkpointing section body */
#define AC(body) "{\"train_batch_size\": 8, \"activation_checkpointing\": {" body "}}"

#define OK(json) OK_WS(json, 1)

/* no section: off; an empty one: every layer, DeepSpeed's false defaults */
static void test_defaults(void) {
    struct zt_config c;
    zt_config_defaults(&c);
    ZT_TEST_TRUE(!c.actckpt.enabled && c.actckpt.number_checkpoints == -1, "defaults: off");
    c = OK("{\"train_batch_size\": 8}");
    const struct zt_actckpt_cfg *a = &c.actckpt;
    ZT_TEST_TRUE(!a->enabled && a->number_checkpoints == -1 && !a->cpu_checkpointing &&
                     !a->contiguous_memory_optimization && !a->synchronize_checkpoint_boundary &&
                     !a->profile,
                 "no section: off");
    c = OK(AC(""));
    ZT_TEST_TRUE(a->enabled && a->number_checkpoints == -1 && !a->cpu_checkpointing &&
                     !a->contiguous_memory_optimization && !a->synchronize_checkpoint_boundary &&
                     !a->profile,
                 "empty section: every layer");
    /* DeepSpeed's own spelling of every default */
    c = OK(AC("\"partition_activations\": false, \"number_checkpoints\": null, "
              "\"contiguous_memory_optimization\": false, \"synchronize_checkpoint_boundary\": "
              "false, \"profile\": false, \"cpu_checkpointing\": false"));
    ZT_TEST_TRUE(a->enabled && a->number_checkpoints == -1 && !a->cpu_checkpointing &&
                     !a->contiguous_memory_optimization && !a->synchronize_checkpoint_boundary &&
                     !a->profile,
                 "DeepSpeed's defaults spelled out");
}

static void test_accepted(void) {
    struct zt_config c = OK(AC("\"cpu_checkpointing\": true, \"contiguous_memory_optimization\": "
                               "true, \"synchronize_checkpoint_boundary\": true, "
                               "\"number_checkpoints\": 4"));
    const struct zt_actckpt_cfg *a = &c.actckpt;
    ZT_TEST_TRUE(a->enabled && a->number_checkpoints == 4 && a->cpu_checkpointing &&
                     a->contiguous_memory_optimization && a->synchronize_checkpoint_boundary &&
                     !a->profile,
                 "every accepted key true");
    /* DeepSpeed ties these to partition_activations; zerotask takes them without it */
    c = OK(AC("\"partition_activations\": false, \"cpu_checkpointing\": true"));
    ZT_TEST_TRUE(a->enabled && a->cpu_checkpointing, "cpu_checkpointing alone");
    c = OK(AC("\"contiguous_memory_optimization\": true"));
    ZT_TEST_TRUE(a->enabled && a->contiguous_memory_optimization && a->number_checkpoints == -1,
                 "contiguous_memory_optimization without number_checkpoints");
    c = OK(AC("\"number_checkpoints\": 0, \"cpu_checkpointing\": true"));
    ZT_TEST_TRUE(!a->enabled && a->number_checkpoints == 0 && a->cpu_checkpointing,
                 "number_checkpoints 0: off");
    c = OK(AC("\"number_checkpoints\": 1"));
    ZT_TEST_TRUE(a->enabled && a->number_checkpoints == 1, "number_checkpoints 1");
    c = OK(AC("\"number_checkpoints\": 1.2e1"));
    ZT_TEST_TRUE(a->enabled && a->number_checkpoints == 12, "number_checkpoints 1.2e1 is 12");
    c = OK(AC("\"number_checkpoints\": null"));
    ZT_TEST_TRUE(a->enabled && a->number_checkpoints == -1, "number_checkpoints null");
    /* zerotask's recompute key */
    ZT_TEST_TRUE(a->recompute == ZT_RECOMPUTE_FULL, "recompute: full by default");
    c = OK(AC("\"recompute\": \"mlp\""));
    ZT_TEST_TRUE(a->enabled && a->recompute == ZT_RECOMPUTE_MLP, "recompute mlp");
    c = OK(AC("\"recompute\": \"full\""));
    ZT_TEST_TRUE(a->recompute == ZT_RECOMPUTE_FULL, "recompute full");
    c = OK(AC("\"recompute\": \"attention\""));
    ZT_TEST_TRUE(a->enabled && a->recompute == ZT_RECOMPUTE_ATTENTION, "recompute attention");
    EXPECT_ERR(AC("\"recompute\": \"attn\""), "activation_checkpointing.recompute: "
               "expected \"full\" (all of a checkpointed layer's activations but its output), "
               "\"mlp\" (only the MLP's; the attention's are kept) or \"attention\" (only the "
               "attention's; the MLP's are kept), got \"attn\"");
    EXPECT_ERR(AC("\"recompute\": 1"), "activation_checkpointing.recompute");
}

/* zerotask's offload key: where the kept inputs live; cpu_checkpointing true means cpu */
static void test_offload(void) {
    struct zt_config c = OK(AC(""));
    const struct zt_actckpt_cfg *a = &c.actckpt;
    ZT_TEST_TRUE(a->offload == ZT_OFFLOAD_NONE && !strcmp(a->nvme_path, "/local_nvme"),
                 "offload: none by default, nvme_path DeepSpeed's /local_nvme");
    c = OK(AC("\"cpu_checkpointing\": true"));
    ZT_TEST_TRUE(a->offload == ZT_OFFLOAD_CPU, "cpu_checkpointing true: offload cpu");
    c = OK(AC("\"offload\": {\"device\": \"nvme\", \"nvme_path\": \"/mnt/x\"}"));
    ZT_TEST_TRUE(a->enabled && a->offload == ZT_OFFLOAD_NVME && !strcmp(a->nvme_path, "/mnt/x"),
                 "offload nvme with its path");
    c = OK(AC("\"cpu_checkpointing\": true, \"offload\": {\"device\": \"nvme\"}"));
    ZT_TEST_TRUE(a->offload == ZT_OFFLOAD_NVME && !strcmp(a->nvme_path, "/local_nvme"),
                 "offload nvme beside cpu_checkpointing true, the default path");
    c = OK(AC("\"offload\": {}"));
    ZT_TEST_TRUE(a->offload == ZT_OFFLOAD_NONE, "offload {}: none");
    EXPECT_ERR(AC("\"cpu_checkpointing\": true, \"offload\": {\"device\": \"none\"}"),
               "config case.json: activation_checkpointing.offload.device: \"none\" contradicts "
               "cpu_checkpointing true (the kept inputs in host memory): expected \"cpu\" or "
               "\"nvme\", or cpu_checkpointing false");
    EXPECT_ERR(AC("\"offload\": {\"device\": \"disk\"}"), "activation_checkpointing.offload."
               "device: expected \"none\", \"cpu\" or \"nvme\", got \"disk\"");
    EXPECT_ERR(AC("\"offload\": {\"nvme_path\": \"\"}"), "activation_checkpointing.offload."
               "nvme_path: expected a directory path of 1 to");
    EXPECT_ERR(AC("\"offload\": {\"nvme\": \"/x\"}"), "activation_checkpointing.offload.nvme");
    EXPECT_ERR(AC("\"offload\": \"nvme\""), "activation_checkpointing.offload");
}

static void test_refused(void) {
    EXPECT_ERR(AC("\"partition_activations\": true"),
               "config case.json: activation_checkpointing.partition_activations: true is not "
               "implemented: it splits the checkpointed activations across the model-parallel "
               "ranks, and zerotask has no tensor parallelism");
    EXPECT_ERR(AC("\"profile\": true"), "config case.json: activation_checkpointing.profile: "
               "true is not implemented: zt-train --trace shows the recompute tasks");
    /* refused even when the section is off: the key asks for something zerotask cannot do */
    EXPECT_ERR(AC("\"number_checkpoints\": 0, \"profile\": true"),
               "activation_checkpointing.profile: true is not implemented");
    EXPECT_ERR(AC("\"enabled\": false"), "config case.json: activation_checkpointing.enabled: "
               "unknown key (DeepSpeed's section has none: the section present turns "
               "checkpointing on, \"number_checkpoints\": 0 turns it off)");
}

static void test_types(void) {
    static const char *const flags[] = {"partition_activations", "cpu_checkpointing",
                                        "contiguous_memory_optimization",
                                        "synchronize_checkpoint_boundary", "profile", NULL};
    static const char *const bad[] = {"1", "0", "\"true\"", "null", "[]", "{}", NULL};
    char json[256], want[160];
    for (int i = 0; flags[i]; i++)
        for (int j = 0; bad[j]; j++) {
            snprintf(json, sizeof json, AC("\"%s\": %s"), flags[i], bad[j]);
            snprintf(want, sizeof want, "config case.json: activation_checkpointing.%s: "
                     "expected true or false, got ", flags[i]);
            EXPECT_ERR(json, want);
        }
    const char *want_n = "config case.json: activation_checkpointing.number_checkpoints: "
                         "expected null (every layer) or an integer >= 0 (the first layers), "
                         "got ";
    static const char *const bad_n[] = {"-1", "2.5", "\"4\"", "true", "[4]", "{}", "1e10",
                                        NULL};
    for (int j = 0; bad_n[j]; j++) {
        snprintf(json, sizeof json, AC("\"number_checkpoints\": %s"), bad_n[j]);
        EXPECT_ERR(json, want_n);
    }
    EXPECT_ERR(AC("\"number_checkpoints\": -1"), "got -1");
    EXPECT_ERR(AC("\"number_checkpoints\": \"4\""), "got a string (\"4\")");
    EXPECT_ERR("{\"train_batch_size\": 8, \"activation_checkpointing\": true}",
               "config case.json: activation_checkpointing: expected an object, got true");
    EXPECT_ERR("{\"train_batch_size\": 8, \"activation_checkpointing\": null}",
               "activation_checkpointing: expected an object");
}

static void test_keys(void) {
    /* DeepSpeed's own format string spells the first key this way */
    EXPECT_ERR(AC("\"partitioned_activations\": false"),
               "config case.json: activation_checkpointing.partitioned_activations: unknown key; "
               "did you mean 'partition_activations'?");
    EXPECT_ERR(AC("\"number_checkpoint\": 2"), "activation_checkpointing.number_checkpoint: "
               "unknown key; did you mean 'number_checkpoints'?");
    EXPECT_ERR(AC("\"cpu_checkpoint\": true"), "did you mean 'cpu_checkpointing'?");
    EXPECT_ERR(AC("\"synchronize\": true"), "activation_checkpointing.synchronize: unknown key");
    EXPECT_ERR(AC("\"profile\": false, \"profile\": false"),
               "activation_checkpointing.profile: key appears more than once");
    EXPECT_ERR("{\"train_batch_size\": 8, \"activation_checkpointng\": {}}",
               "activation_checkpointng: unknown key; did you mean 'activation_checkpointing'?");
}

static void test_layers(void) {
    struct zt_config c = OK(AC(""));
    const struct zt_actckpt_cfg *a = &c.actckpt;
    for (int l = 0; l < 48; l++)
        ZT_TEST_TRUE(zt_actckpt_layer(a, l), "every layer: layer %d", l);
    ZT_TEST_TRUE(!zt_actckpt_layer(a, -1), "layer -1");
    ZT_TEST_TRUE(zt_actckpt_check_layers(a, 1) == ZT_OK, "every layer fits any n_layer");
    c = OK(AC("\"number_checkpoints\": 3"));
    for (int l = 0; l < 12; l++)
        ZT_TEST_TRUE(zt_actckpt_layer(a, l) == (l < 3), "first 3: layer %d", l);
    ZT_TEST_TRUE(zt_actckpt_check_layers(a, 3) == ZT_OK && zt_actckpt_check_layers(a, 12) == ZT_OK,
                 "3 of 3 and 3 of 12 layers");
    c = OK(AC("\"number_checkpoints\": 30"));
    ZT_TEST_TRUE(zt_actckpt_check_layers(a, 12) == ZT_ERR_CONFIG &&
                     strstr(zt_error_last(), "activation_checkpointing.number_checkpoints 30 "
                                             "exceeds the model's n_layer 12") &&
                     !strchr(zt_error_last(), '\n'),
                 "n_layer check: %s", zt_error_last());
    c = OK(AC("\"number_checkpoints\": 0"));
    for (int l = 0; l < 4; l++) ZT_TEST_TRUE(!zt_actckpt_layer(a, l), "off: layer %d", l);
    ZT_TEST_TRUE(zt_actckpt_check_layers(a, 1) == ZT_OK, "off: no n_layer check");
    c = OK("{\"train_batch_size\": 8}");
    ZT_TEST_TRUE(!zt_actckpt_layer(a, 0) && zt_actckpt_check_layers(a, 1) == ZT_OK, "no section");
    ZT_TEST_TRUE(!zt_actckpt_layer(NULL, 0) && zt_actckpt_check_layers(NULL, 1) == ZT_OK, "NULL");
    /* a failed parse leaves the config as it was */
    struct zt_config keep;
    zt_config_defaults(&keep);
    keep.actckpt.number_checkpoints = 5;
    ZT_TEST_TRUE(zt_config_parse(&keep, AC("\"profile\": true"), NAME, 1) == ZT_ERR_CONFIG &&
                     keep.actckpt.number_checkpoints == 5,
                 "failed parse leaves the config");
}

int main(void) {
    test_defaults();
    test_accepted();
    test_offload();
    test_refused();
    test_types();
    test_keys();
    test_layers();
    return zt_test_finish("test_actckpt");
}
