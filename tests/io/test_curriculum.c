/*
 * tests/io/test_curriculum.c: proves the legacy "curriculum_learning" section parses to the
 * fields it documents and turns every bad input into ZT_ERR_CONFIG with one line naming the
 * file and the JSON path: each required key missing, wrong types and ranges, unknown keys (with
 * "did you mean"), schedule types and curriculum types zerotask does not implement, min above
 * max, fixed_discrete's lengths; and that "data_efficiency" is accepted only with nothing in it
 * enabled, the error naming the enabled part. Also a few schedule values worked out by hand and
 * the seq_len check; the full comparison with DeepSpeed's formulas is test_curriculum.py.
 */
#include <stdio.h>  /* fprintf, snprintf */
#include <string.h> /* strstr, strchr */

#include "zt_config.h" /* zt_config_parse, zt_curriculum_seqlen */
#include "zt_status.h" /* zt_error_last */
#include "zt_test.h"   /* ZT_TEST_TRUE, zt_test_finish */
#include "config_check.h" /* EXPECT_ERR, OK_WS */

/* a config around a curriculum_learning section body */
#define CL(body) "{\"train_batch_size\": 8, \"curriculum_learning\": {" body "}}"
/* an enabled seqlen curriculum with these keys after the first three */
#define ON(rest) CL("\"enabled\": true, \"curriculum_type\": \"seqlen\", " rest)
#define LINEAR_SC "\"schedule_config\": {\"total_curriculum_step\": 10, \"difficulty_step\": 8}"
#define DE(body) "{\"train_batch_size\": 8, \"data_efficiency\": {" body "}}"

#define OK(json) OK_WS(json, 1)

static void test_valid(void) {
    struct zt_config c = OK("{\"train_batch_size\": 8}");
    ZT_TEST_TRUE(!c.curriculum.enabled, "no section: disabled");
    c = OK(ON("\"min_difficulty\": 8, \"max_difficulty\": 1024, \"schedule_type\": "
              "\"fixed_linear\", \"schedule_config\": {\"total_curriculum_step\": 40000, "
              "\"difficulty_step\": 8}"));
    const struct zt_curriculum_cfg *cl = &c.curriculum;
    ZT_TEST_TRUE(cl->enabled && cl->type == ZT_CURRICULUM_SEQLEN && cl->min_difficulty == 8 &&
                     cl->max_difficulty == 1024 && cl->schedule == ZT_CURRICULUM_FIXED_LINEAR &&
                     cl->total_curriculum_step == 40000 && cl->difficulty_step == 8 &&
                     cl->root_degree == 1.0,
                 "fixed_linear fields");
    c = OK(ON("\"min_difficulty\": 64, \"max_difficulty\": 512, \"schedule_type\": "
              "\"fixed_root\", \"schedule_config\": {\"total_curriculum_step\": 3e4, "
              "\"difficulty_step\": 64, \"root_degree\": 2.5}"));
    ZT_TEST_TRUE(cl->schedule == ZT_CURRICULUM_FIXED_ROOT && cl->total_curriculum_step == 30000 &&
                     cl->difficulty_step == 64 && cl->root_degree == 2.5,
                 "fixed_root fields");
    c = OK(ON("\"min_difficulty\": 1, \"max_difficulty\": 64, \"schedule_type\": "
              "\"fixed_discrete\", \"schedule_config\": {\"difficulty\": [16, 32, 64], "
              "\"max_step\": [5, 10]}"));
    ZT_TEST_TRUE(cl->schedule == ZT_CURRICULUM_FIXED_DISCRETE && cl->n_stages == 3 &&
                     cl->difficulty[0] == 16 && cl->difficulty[2] == 64 && cl->max_step[0] == 5 &&
                     cl->max_step[1] == 10,
                 "fixed_discrete fields");
    ZT_TEST_TRUE(!strcmp(zt_curriculum_schedule_name(cl->schedule), "fixed_discrete") &&
                     !strcmp(zt_curriculum_schedule_name((enum zt_curriculum_schedule)9), "?"),
                 "schedule names");
    /* disabled: read no further than "enabled" (as DeepSpeed), but keys are still checked */
    c = OK(CL("\"enabled\": false, \"schedule_type\": \"custom\", \"min_difficulty\": 0"));
    ZT_TEST_TRUE(!c.curriculum.enabled, "disabled section");
    c = OK(CL("\"curriculum_type\": \"seqlen\""));
    ZT_TEST_TRUE(!c.curriculum.enabled, "enabled defaults to false");
    /* data_efficiency with nothing enabled is accepted and ignored */
    OK(DE("\"enabled\": false"));
    OK(DE("\"enabled\": false, \"seed\": 7, \"data_sampling\": {\"enabled\": false, "
          "\"num_epochs\": 1, \"curriculum_learning\": {\"enabled\": false, "
          "\"curriculum_metrics\": {\"seqlen\": {\"min_difficulty\": 8}}}}, "
          "\"data_routing\": {\"random_ltd\": {\"enabled\": false}}"));
}

static void test_missing(void) {
    const char *why = "missing (an enabled curriculum requires it";
    EXPECT_ERR(CL("\"enabled\": true"), "config case.json: curriculum_learning.curriculum_type: "
               "missing (an enabled curriculum requires it; zerotask implements \"seqlen\")");
    EXPECT_ERR(ON("\"max_difficulty\": 64"), "curriculum_learning.min_difficulty: ", why);
    EXPECT_ERR(ON("\"min_difficulty\": 8"), "curriculum_learning.max_difficulty: ", why);
    EXPECT_ERR(ON("\"min_difficulty\": 8, \"max_difficulty\": 64, " LINEAR_SC),
               "curriculum_learning.schedule_type: ", why);
    EXPECT_ERR(ON("\"min_difficulty\": 8, \"max_difficulty\": 64, \"schedule_type\": "
                  "\"fixed_linear\""), "curriculum_learning.schedule_config: ", why);
    EXPECT_ERR(ON("\"min_difficulty\": 8, \"max_difficulty\": 64, \"schedule_type\": "
                  "\"fixed_linear\", \"schedule_config\": {\"difficulty_step\": 8}"),
               "curriculum_learning.schedule_config.total_curriculum_step: missing (schedule_type "
               "\"fixed_linear\" requires it)");
    EXPECT_ERR(ON("\"min_difficulty\": 8, \"max_difficulty\": 64, \"schedule_type\": "
                  "\"fixed_linear\", \"schedule_config\": {\"total_curriculum_step\": 8}"),
               "curriculum_learning.schedule_config.difficulty_step: missing (schedule_type "
               "\"fixed_linear\" requires it)");
    EXPECT_ERR(ON("\"min_difficulty\": 8, \"max_difficulty\": 64, \"schedule_type\": "
                  "\"fixed_root\", " LINEAR_SC),
               "curriculum_learning.schedule_config.root_degree: missing (schedule_type "
               "\"fixed_root\" requires it)");
    EXPECT_ERR(ON("\"min_difficulty\": 8, \"max_difficulty\": 64, \"schedule_type\": "
                  "\"fixed_discrete\", \"schedule_config\": {\"max_step\": [4]}"),
               "curriculum_learning.schedule_config.difficulty: missing (schedule_type "
               "\"fixed_discrete\" requires it)");
    EXPECT_ERR(ON("\"min_difficulty\": 8, \"max_difficulty\": 64, \"schedule_type\": "
                  "\"fixed_discrete\", \"schedule_config\": {\"difficulty\": [8, 64]}"),
               "curriculum_learning.schedule_config.max_step: missing (schedule_type "
               "\"fixed_discrete\" requires it)");
}

#define MM "\"min_difficulty\": 8, \"max_difficulty\": 64, "
#define DISC(sc) ON(MM "\"schedule_type\": \"fixed_discrete\", \"schedule_config\": {" sc "}")
#define ROOT(sc) ON(MM "\"schedule_type\": \"fixed_root\", \"schedule_config\": {" sc "}")

static void test_types(void) {
    EXPECT_ERR("{\"train_batch_size\": 8, \"curriculum_learning\": true}",
               "curriculum_learning: expected an object, got true");
    EXPECT_ERR(CL("\"enabled\": \"yes\""),
               "curriculum_learning.enabled: expected true or false, got a string (\"yes\")");
    EXPECT_ERR(ON("\"min_difficulty\": 8.5"),
               "curriculum_learning.min_difficulty: expected an integer >= 1, got 8.5");
    EXPECT_ERR(ON("\"min_difficulty\": 0"),
               "curriculum_learning.min_difficulty: expected an integer >= 1, got 0");
    EXPECT_ERR(ON("\"min_difficulty\": 8, \"max_difficulty\": \"64\""),
               "curriculum_learning.max_difficulty: expected an integer >= 1, got a string");
    EXPECT_ERR(ON("\"curriculum_type\": 1"), "curriculum_learning.curriculum_type:",
               "appears more than once");
    EXPECT_ERR(CL("\"enabled\": true, \"curriculum_type\": [\"seqlen\"]"),
               "curriculum_learning.curriculum_type: expected a string, got an array");
    EXPECT_ERR(ON(MM "\"schedule_type\": 3"),
               "curriculum_learning.schedule_type: expected a string, got 3");
    EXPECT_ERR(ON(MM "\"schedule_type\": \"fixed_linear\", \"schedule_config\": []"),
               "curriculum_learning.schedule_config: expected an object, got an array");
    EXPECT_ERR(ON(MM "\"schedule_type\": \"fixed_linear\", \"schedule_config\": "
                  "{\"total_curriculum_step\": 0, \"difficulty_step\": 8}"),
               "curriculum_learning.schedule_config.total_curriculum_step: expected an integer "
               ">= 1, got 0");
    EXPECT_ERR(ROOT("\"total_curriculum_step\": 10, \"difficulty_step\": -8, \"root_degree\": 2"),
               "curriculum_learning.schedule_config.difficulty_step: expected an integer >= 1, "
               "got -8");
    EXPECT_ERR(ROOT("\"total_curriculum_step\": 10, \"difficulty_step\": 8, \"root_degree\": 0"),
               "curriculum_learning.schedule_config.root_degree: expected a number > 0, got 0");
    EXPECT_ERR(ROOT("\"total_curriculum_step\": 10, \"difficulty_step\": 8, \"root_degree\": "
                    "\"2\""), "curriculum_learning.schedule_config.root_degree: expected a "
               "number > 0, got a string");
    EXPECT_ERR(DISC("\"difficulty\": \"8\", \"max_step\": [4]"),
               "curriculum_learning.schedule_config.difficulty: expected an array of integers, "
               "got a string");
    EXPECT_ERR(DISC("\"difficulty\": [8, \"16\"], \"max_step\": [4]"),
               "curriculum_learning.schedule_config.difficulty[1]: expected an integer in "
               "[1, 64], got a string");
    EXPECT_ERR(DISC("\"difficulty\": [8, 128], \"max_step\": [4]"),
               "curriculum_learning.schedule_config.difficulty[1]: expected an integer in "
               "[1, 64], got 128");
    EXPECT_ERR(DISC("\"difficulty\": [8, 16], \"max_step\": [0]"),
               "curriculum_learning.schedule_config.max_step[0]: expected an integer >= 1, got 0");
    EXPECT_ERR(DISC("\"difficulty\": [8, 16, 32], \"max_step\": [10, 10]"),
               "curriculum_learning.schedule_config.max_step: expected increasing steps, got 10 "
               "after 10 at [1]");
    EXPECT_ERR(DISC("\"difficulty\": [8], \"max_step\": []"),
               "curriculum_learning.schedule_config.max_step: expected 1 to 63 entries, got 0");
}

static void test_rules(void) {
    EXPECT_ERR(ON("\"min_difficulty\": 128, \"max_difficulty\": 64"),
               "curriculum_learning.max_difficulty: expected at least min_difficulty (128), "
               "got 64");
    EXPECT_ERR(DISC("\"difficulty\": [8, 16, 32], \"max_step\": [4]"),
               "curriculum_learning.schedule_config.difficulty: expected 2 entries (one more "
               "than max_step", "got 3");
    EXPECT_ERR(DISC("\"difficulty\": [8, 16], \"max_step\": [4, 8]"),
               "curriculum_learning.schedule_config.difficulty: expected 3 entries", "got 2");
    EXPECT_ERR(ON("\"min_difficulty\": 12, \"max_difficulty\": 64, \"schedule_type\": "
                  "\"fixed_linear\", " LINEAR_SC),
               "curriculum_learning.min_difficulty: expected a multiple of "
               "schedule_config.difficulty_step (8), got 12");
    EXPECT_ERR(ON(MM "\"schedule_type\": \"fixed_linear\", \"schedule_config\": "
                  "{\"total_curriculum_step\": 10, \"difficulty_step\": 8, \"root_degree\": 2}"),
               "curriculum_learning.schedule_config.root_degree: is not read by schedule_type "
               "\"fixed_linear\" (it reads total_curriculum_step, difficulty_step)");
    EXPECT_ERR(DISC("\"difficulty\": [8, 16], \"max_step\": [4], \"difficulty_step\": 8"),
               "curriculum_learning.schedule_config.difficulty_step: is not read by "
               "schedule_type \"fixed_discrete\" (it reads difficulty, max_step)");
}

static void test_refused(void) {
    EXPECT_ERR(ON(MM "\"schedule_type\": \"custom\""),
               "curriculum_learning.schedule_type: \"custom\" is not implemented by zerotask",
               "set_custom_curriculum_learning_schedule");
    EXPECT_ERR(ON(MM "\"schedule_type\": \"fixed_lnear\", " LINEAR_SC),
               "curriculum_learning.schedule_type: unknown schedule type \"fixed_lnear\"; did "
               "you mean 'fixed_linear'?");
    EXPECT_ERR(ON(MM "\"schedule_type\": \"exponential\", " LINEAR_SC),
               "curriculum_learning.schedule_type: expected one of fixed_linear, fixed_root, "
               "fixed_discrete, got \"exponential\"");
    EXPECT_ERR(CL("\"enabled\": true, \"curriculum_type\": \"vocabularyrarity\""),
               "curriculum_learning.curriculum_type: \"vocabularyrarity\" is not implemented by "
               "zerotask (it implements \"seqlen\" only)");
    /* unknown keys, in the section and in schedule_config, enabled or not */
    EXPECT_ERR(CL("\"enabled\": false, \"max_dificulty\": 64"),
               "curriculum_learning.max_dificulty: unknown key; did you mean 'max_difficulty'?");
    EXPECT_ERR(ON(MM "\"schedule_type\": \"fixed_linear\", \"schedule_config\": "
                  "{\"total_curriculum_steps\": 10, \"difficulty_step\": 8}"),
               "curriculum_learning.schedule_config.total_curriculum_steps: unknown key; did you "
               "mean 'total_curriculum_step'?");
    EXPECT_ERR(CL("\"enabled\": true, \"metric\": \"seqlen\""),
               "curriculum_learning.metric: unknown key");
}

static void test_data_efficiency(void) {
    const char *ni = "enabled, but DeepSpeed's data_efficiency library is not implemented by "
                     "zerotask (it implements the legacy top-level \"curriculum_learning\" "
                     "section, curriculum_type \"seqlen\")";
    EXPECT_ERR(DE("\"enabled\": true"), "config case.json: data_efficiency: ", ni);
    EXPECT_ERR(DE("\"enabled\": true, \"data_sampling\": {\"enabled\": true, "
                  "\"curriculum_learning\": {\"enabled\": true, \"curriculum_metrics\": {}}}"),
               "config case.json: data_efficiency.data_sampling.curriculum_learning: ", ni);
    EXPECT_ERR(DE("\"data_sampling\": {\"dynamic_batching\": {\"enabled\": true}}"),
               "data_efficiency.data_sampling.dynamic_batching: ", ni);
    EXPECT_ERR(DE("\"data_sampling\": {\"enabled\": true}"), "data_efficiency.data_sampling: ",
               ni);
    EXPECT_ERR(DE("\"data_routing\": {\"enabled\": false, \"random_ltd\": {\"enabled\": true, "
                  "\"layer_token_lr_schedule\": {\"enabled\": false}}}"),
               "data_efficiency.data_routing.random_ltd: ", ni);
    EXPECT_ERR(DE("\"data_routing\": {\"random_ltd\": {\"layer_token_lr_schedule\": "
                  "{\"enabled\": true}}}"),
               "data_efficiency.data_routing.random_ltd.layer_token_lr_schedule: ", ni);
    EXPECT_ERR(DE("\"enabled\": \"true\""),
               "data_efficiency.enabled: expected true or false, got a string");
    EXPECT_ERR(DE("\"data_sampling\": {\"curriculum_learning\": {\"enabled\": 1}}"),
               "data_efficiency.data_sampling.curriculum_learning.enabled: expected true or "
               "false, got 1");
    EXPECT_ERR(DE("\"data_samplng\": {}"),
               "data_efficiency.data_samplng: unknown key; did you mean 'data_sampling'?");
    EXPECT_ERR(DE("\"data_sampling\": {\"curriculum_learnig\": {}}"),
               "data_efficiency.data_sampling.curriculum_learnig: unknown key; did you mean "
               "'curriculum_learning'?");
    EXPECT_ERR("{\"train_batch_size\": 8, \"data_efficiency\": false}",
               "data_efficiency: expected an object, got false");
    /* both curricula */
    EXPECT_ERR("{\"train_batch_size\": 8, \"curriculum_learning\": {\"enabled\": true, "
               "\"curriculum_type\": \"seqlen\", " MM "\"schedule_type\": \"fixed_linear\", "
               LINEAR_SC "}, \"data_efficiency\": {\"data_sampling\": {\"curriculum_learning\": "
               "{\"enabled\": true}}}}",
               "data_efficiency.data_sampling.curriculum_learning: enabled together with the "
               "top-level \"curriculum_learning\" section: give one curriculum");
}

static void test_schedule(void) {
    struct zt_config c = OK(ON(MM "\"schedule_type\": \"fixed_linear\", " LINEAR_SC));
    /* floor(s / 10 * 56 + 8) rounded down to a multiple of 8, capped at 64 */
    static const int want[] = {8, 16, 24, 24, 32, 40, 40, 48, 56, 64, 64, 64};
    for (int s = 1; s <= 12; s++)
        ZT_TEST_TRUE(zt_curriculum_seqlen(&c.curriculum, s) == want[s - 1],
                     "fixed_linear step %d: %d, want %d", s, zt_curriculum_seqlen(&c.curriculum, s),
                     want[s - 1]);
    ZT_TEST_TRUE(zt_curriculum_seqlen(&c.curriculum, 0) == 8, "step 0: min_difficulty");
    ZT_TEST_TRUE(zt_curriculum_seqlen(&c.curriculum, INT64_MAX) == 64, "last step: max");
    ZT_TEST_TRUE(zt_curriculum_check_seqlen(&c.curriculum, 64) == ZT_OK, "max == seq_len");
    ZT_TEST_TRUE(zt_curriculum_check_seqlen(&c.curriculum, 32) == ZT_ERR_CONFIG &&
                     strstr(zt_error_last(), "curriculum_learning.max_difficulty 64 exceeds the "
                                             "model's seq_len 32"),
                 "seq_len check: %s", zt_error_last());
    /* DeepSpeed stops updating once max is reached: a later, smaller difficulty is not used */
    c = OK(DISC("\"difficulty\": [16, 64, 32], \"max_step\": [2, 4]"));
    static const int disc[] = {16, 16, 64, 64, 64, 64};
    for (int s = 1; s <= 6; s++)
        ZT_TEST_TRUE(zt_curriculum_seqlen(&c.curriculum, s) == disc[s - 1],
                     "fixed_discrete step %d: %d, want %d", s,
                     zt_curriculum_seqlen(&c.curriculum, s), disc[s - 1]);
    /* min == max: the scheduler never moves */
    c = OK(ON("\"min_difficulty\": 32, \"max_difficulty\": 32, \"schedule_type\": "
              "\"fixed_discrete\", \"schedule_config\": {\"difficulty\": [8, 16], "
              "\"max_step\": [3]}"));
    ZT_TEST_TRUE(zt_curriculum_seqlen(&c.curriculum, 1) == 32 &&
                     zt_curriculum_seqlen(&c.curriculum, 9) == 32, "min == max");
    c = OK(CL("\"enabled\": false"));
    ZT_TEST_TRUE(zt_curriculum_seqlen(&c.curriculum, 5) == 0 &&
                     zt_curriculum_check_seqlen(&c.curriculum, 1) == ZT_OK, "disabled");
}

int main(void) {
    test_valid();
    test_missing();
    test_types();
    test_rules();
    test_refused();
    test_data_efficiency();
    test_schedule();
    return zt_test_finish("test_curriculum");
}
