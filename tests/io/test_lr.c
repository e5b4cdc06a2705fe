/*
 * tests/io/test_lr.c: proves zt_config_lr reproduces DeepSpeed's WarmupLR, WarmupDecayLR and
 * WarmupCosineLR (deepspeed/runtime/lr_schedules.py) including DeepSpeed's step convention.
 *
 * Step convention under test: the schedule starts at last_batch_iteration = -1 and its __init__
 * writes get_lr() into the optimizer; the engine calls lr_scheduler.step() after each optimizer
 * step. So 1-based training step s uses lr(-1) for s = 1 (warmup_min_lr; 0.0 for WarmupCosineLR,
 * whose get_lr returns [0.0] before it has started) and lr(it = s - 2) for s >= 2.
 *
 * Expected values are hard-coded, computed from DeepSpeed's formulas (W = max(2, warmup_num_steps),
 * N = total_num_steps), in double:
 *   gamma(it) = log(it + 1) / log(W)  (log)   |   it / W  (linear)            for it < W
 *   WarmupLR:       min + (max - min) * (it < W ? gamma : 1)
 *   WarmupDecayLR:  min + (max - min) * (it < W ? gamma : max(0, (N - it) / max(1, N - W)))
 *   WarmupCosineLR: lr0 * (it < W ? wmr + gamma * (1 - wmr)
 *                               : max(0, cmr + (1 - cmr) * (1 + cos(pi * (it - W + 1) / (N - W))) / 2))
 * Each row's comment shows the arithmetic. Config values are parsed from JSON (stored as float),
 * so comparisons allow a relative 1e-6.
 */
#include <math.h>   /* fabs */
#include <stdio.h>  /* fprintf */
#include <string.h> /* strlen */

#include "zt_config.h" /* zt_config_parse, zt_config_lr */
#include "zt_status.h" /* zt_error_last */
#include "zt_test.h"   /* zt_test_finish */

static struct zt_config load(const char *json) {
    struct zt_config c;
    zt_config_defaults(&c);
    if (zt_config_parse(&c, json, "lr.json", 1) != ZT_OK)
        ZT_TEST_FAIL("config: %s", zt_error_last());
    return c;
}

static void check(int line, const struct zt_config *c, const char *label, int n, const int *steps,
                  const double *want) {
    for (int i = 0; i < n; i++) {
        double got = zt_config_lr(c, steps[i]);
        if (!(fabs(got - want[i]) <= 1e-6 * fabs(want[i]) + 1e-12)) {
            fprintf(stderr, "FAIL %s:%d: %s step %d: lr %.17g, want %.17g\n", __FILE__, line, label,
                    steps[i], got, want[i]);
            zt_test_failures++;
        }
    }
}
#define CHECK(c, label, steps, want)                                                             \
    check(__LINE__, &(c), label, (int)(sizeof(steps) / sizeof(steps[0])), steps, want)

int main(void) {
    /* no scheduler: optimizer lr on every step */
    struct zt_config c = load("{\"train_batch_size\": 1, \"optimizer\": {\"type\": \"AdamW\", "
                              "\"params\": {\"lr\": 0.0025}}}");
    {
        int s[] = {1, 2, 1000};
        double w[] = {0.0025, 0.0025, 0.0025};
        CHECK(c, "constant", s, w);
    }

    /* WarmupLR log, min 0, max 0.001, W 10 */
    c = load("{\"train_batch_size\": 1, \"scheduler\": {\"type\": \"WarmupLR\", \"params\": "
             "{\"warmup_min_lr\": 0, \"warmup_max_lr\": 0.001, \"warmup_num_steps\": 10}}}");
    {
        int s[] = {1, 2, 3, 5, 11, 12, 100};
        double w[] = {
            0.0,                    /* s1: it -1 -> min_lrs */
            0.0,                    /* s2: it 0 -> log(1)/log(10) = 0 */
            0.00030102999566398113, /* s3: it 1 -> 1e-3 * log(2)/log(10) */
            0.0006020599913279623,  /* s5: it 3 -> 1e-3 * log(4)/log(10) */
            0.001,                  /* s11: it 9 -> log(10)/log(10) = 1 */
            0.001,                  /* s12: it 10 >= W -> gamma 1 */
            0.001,                  /* s100 */
        };
        CHECK(c, "WarmupLR log", s, w);
    }

    /* WarmupLR linear, min 1e-4, max 1e-3, W 4: min + 9e-4 * it/4 */
    c = load("{\"train_batch_size\": 1, \"scheduler\": {\"type\": \"WarmupLR\", \"params\": "
             "{\"warmup_min_lr\": 0.0001, \"warmup_max_lr\": 0.001, \"warmup_num_steps\": 4, "
             "\"warmup_type\": \"linear\"}}}");
    {
        int s[] = {1, 2, 3, 4, 5, 6, 7};
        double w[] = {0.0001,   /* s1: it -1 -> min */
                      0.0001,   /* s2: it 0 */
                      0.000325, /* s3: it 1 -> 1e-4 + 9e-4 * 0.25 */
                      0.00055,  /* s4: it 2 -> 1e-4 + 9e-4 * 0.5 */
                      0.000775, /* s5: it 3 -> 1e-4 + 9e-4 * 0.75 */
                      0.001,    /* s6: it 4 = W -> max */
                      0.001};
        CHECK(c, "WarmupLR linear", s, w);
    }

    /* warmup_num_steps 0 becomes W = max(2, 0) = 2 */
    c = load("{\"train_batch_size\": 1, \"scheduler\": {\"type\": \"WarmupLR\", \"params\": "
             "{\"warmup_max_lr\": 1.0, \"warmup_num_steps\": 0, \"warmup_type\": \"linear\"}}}");
    {
        int s[] = {1, 2, 3, 4};
        double w[] = {0.0, 0.0, 0.5 /* it 1 -> 1/2 */, 1.0};
        CHECK(c, "WarmupLR W=max(2,0)", s, w);
    }

    /* WarmupDecayLR linear, min 0, max 0.003, W 30, N 300 (configs/demo_ds.json) */
    c = load("{\"train_batch_size\": 1, \"scheduler\": {\"type\": \"WarmupDecayLR\", \"params\": "
             "{\"warmup_min_lr\": 0.0, \"warmup_max_lr\": 0.003, \"warmup_num_steps\": 30, "
             "\"total_num_steps\": 300, \"warmup_type\": \"linear\"}}}");
    {
        int s[] = {1, 2, 3, 31, 32, 33, 100, 301, 302, 400};
        double w[] = {
            0.0,                    /* s1 */
            0.0,                    /* s2: it 0 */
            0.0001,                 /* s3: it 1 -> 0.003 * 1/30 */
            0.0029000000000000002,  /* s31: it 29 -> 0.003 * 29/30 */
            0.003,                  /* s32: it 30 -> (300-30)/270 = 1 */
            0.002988888888888889,   /* s33: it 31 -> 0.003 * 269/270 */
            0.0022444444444444443,  /* s100: it 98 -> 0.003 * 202/270 */
            1.1111111111111112e-05, /* s301: it 299 -> 0.003 * 1/270 */
            0.0,                    /* s302: it 300 -> 0 */
            0.0,                    /* s400: it 398 -> max(0, -98/270) = 0 */
        };
        CHECK(c, "WarmupDecayLR linear", s, w);
    }

    /* WarmupDecayLR log with N == W: the decay denominator is max(1, N - W) = 1 */
    c = load("{\"train_batch_size\": 1, \"scheduler\": {\"type\": \"WarmupDecayLR\", \"params\": "
             "{\"warmup_max_lr\": 0.001, \"warmup_num_steps\": 5, \"total_num_steps\": 5}}}");
    {
        int s[] = {2, 3, 6, 7, 8};
        double w[] = {0.0,                    /* it 0 */
                      0.00043067655807339306, /* it 1 -> 1e-3 * log(2)/log(5) */
                      0.001,                  /* it 4 -> log(5)/log(5) */
                      0.0,                    /* it 5 -> (5-5)/1 */
                      0.0};                   /* it 6 -> max(0, -1) */
        CHECK(c, "WarmupDecayLR log N=W", s, w);
    }

    /* WarmupCosineLR linear: lr0 0.01, N 100, W 10, wmr 0.1, cmr 0.01 */
    c = load("{\"train_batch_size\": 1, \"optimizer\": {\"type\": \"AdamW\", \"params\": "
             "{\"lr\": 0.01}}, \"scheduler\": {\"type\": \"WarmupCosineLR\", \"params\": "
             "{\"total_num_steps\": 100, \"warmup_num_steps\": 10, \"warmup_min_ratio\": 0.1, "
             "\"cos_min_ratio\": 0.01, \"warmup_type\": \"linear\"}}}");
    {
        int s[] = {1, 2, 3, 11, 12, 13, 57, 101, 102};
        double w[] = {
            0.0,                    /* s1: get_lr() returns [0.0] before it has started */
            0.001,                  /* s2: it 0 -> 0.01 * 0.1 */
            0.0019,                 /* s3: it 1 -> 0.01 * (0.1 + 0.1 * 0.9) */
            0.0091,                 /* s11: it 9 -> 0.01 * (0.1 + 0.9 * 0.9) */
            0.009996984593744524,   /* s12: it 10 -> 0.01*(0.01 + 0.99*(1+cos(pi*1/90))/2) */
            0.00998794204878613,    /* s13: it 11 -> cos(pi*2/90) */
            0.004877247491322622,   /* s57: it 55 -> cos(pi*46/90) */
            0.0001,                 /* s101: it 99 -> cos(pi) = -1 -> 0.01 * cmr */
            0.00010301540625547599, /* s102: it 100 -> cos(pi*91/90): DeepSpeed's tail rises */
        };
        CHECK(c, "WarmupCosineLR linear", s, w);
    }

    /* WarmupCosineLR defaults: log warmup, wmr 0, cmr 1e-4; lr0 0.01, N 100, W 10 */
    c = load("{\"train_batch_size\": 1, \"optimizer\": {\"type\": \"Adam\", \"params\": "
             "{\"lr\": 0.01}}, \"scheduler\": {\"type\": \"WarmupCosineLR\", \"params\": "
             "{\"total_num_steps\": 100, \"warmup_num_steps\": 10}}}");
    {
        int s[] = {1, 2, 3, 11, 12};
        double w[] = {0.0,                   /* s1 */
                      0.0,                   /* s2: it 0 -> log(1) = 0 */
                      0.0030102999566398113, /* s3: it 1 -> 0.01 * log(2)/log(10) */
                      0.01,                  /* s11: it 9 -> 1 */
                      0.00999695443968197};  /* s12: 0.01*(1e-4 + 0.9999*(1+cos(pi/90))/2) */
        CHECK(c, "WarmupCosineLR log", s, w);
    }

    /* the raw schedule accessor: iteration, not step */
    ZT_TEST_TRUE(fabs(zt_config_lr_at(&c, 1) - 0.0030102999566398113) < 1e-9, "lr_at(1)");
    ZT_TEST_TRUE(zt_config_lr_at(&c, -1) == 0.0, "lr_at(-1) of WarmupCosineLR is 0");
    return zt_test_finish("test_lr");
}
