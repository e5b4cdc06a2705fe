/*
 * tests/graph/test_recompute.c: proves the checkpointing plan of graph/zt_recompute.h: which
 * window set each checkpointed block takes (k mod window, k its place among the checkpointed
 * blocks; -1 for the others), which backwards recompute (not the last `window` checkpointed
 * blocks, whose sets no later block took), the window's bounds, and the recompute context's
 * mark, for every block checkpointed and for a subset.
 */
#include <stdlib.h>       /* setenv */
#include "zerotask.h"     /* zt_recompute_*, zt_engine_ctx's struct */
#include "zt_test.h"      /* ZT_TEST_TRUE, zt_test_finish */

/* blocks 0..5, checkpointed 0, 2, 3, 5 (places 0..3), window 2: sets 0, 1, 0, 1 */
static void test_subset(void) {
    const unsigned char ckpt[6] = {1, 0, 1, 1, 0, 1};
    const int slot[6] = {0, -1, 1, 0, -1, 1}, needed[6] = {1, 0, 1, 0, 0, 0};
    struct zt_recompute_plan p;
    ZT_TEST_TRUE(zt_recompute_init(&p, 6, ckpt, 2) == ZT_OK && p.nckpt == 4 && p.window == 2,
                 "subset: 4 checkpointed, window 2 (got %d, %d)", p.nckpt, p.window);
    for (int b = 0; b < 6; b++) {
        ZT_TEST_TRUE(zt_recompute_slot(&p, b) == slot[b], "subset: block %d set %d, expected %d",
                     b, zt_recompute_slot(&p, b), slot[b]);
        ZT_TEST_TRUE(zt_recompute_needed(&p, b) == needed[b], "subset: block %d recompute %d, "
                     "expected %d", b, zt_recompute_needed(&p, b), needed[b]);
    }
    ZT_TEST_TRUE(zt_recompute_slot(&p, -1) == -1 && zt_recompute_slot(&p, 6) == -1,
                 "subset: blocks outside 0..5 have no set");
    zt_recompute_free(&p);
}

/* every block (ckpt NULL), a window of 1: all recompute but the last; a window larger than the
 * checkpointed blocks is cut to them, and then nothing is recomputed */
static void test_all(void) {
    struct zt_recompute_plan p;
    ZT_TEST_TRUE(zt_recompute_init(&p, 4, NULL, 1) == ZT_OK && p.nckpt == 4 && p.window == 1,
                 "all: window 1");
    for (int b = 0; b < 4; b++)
        ZT_TEST_TRUE(zt_recompute_slot(&p, b) == 0 && zt_recompute_needed(&p, b) == (b < 3),
                     "all, window 1: block %d", b);
    zt_recompute_free(&p);
    ZT_TEST_TRUE(zt_recompute_init(&p, 3, NULL, 8) == ZT_OK && p.window == 3, "window cut to 3");
    for (int b = 0; b < 3; b++)
        ZT_TEST_TRUE(zt_recompute_slot(&p, b) == b && !zt_recompute_needed(&p, b),
                     "window 3 of 3: block %d keeps its set", b);
    zt_recompute_free(&p);
    const unsigned char none[2] = {0, 0};
    ZT_TEST_TRUE(zt_recompute_init(&p, 2, none, 0) == ZT_OK && p.nckpt == 0 && p.window == 0 &&
                     zt_recompute_slot(&p, 0) == -1 && !zt_recompute_needed(&p, 1),
                 "none checkpointed: no window, no recompute");
    zt_recompute_free(&p);
    ZT_TEST_TRUE(zt_recompute_init(&p, -1, NULL, 0) == ZT_ERR_INVALID, "-1 blocks refused");
    zt_recompute_free(&p);
}

/* window < 1 asks ZT_RECOMPUTE_WINDOW (default 2); the recompute context is the backward's,
 * marked */
static void test_knob_and_ctx(void) {
    unsetenv("ZT_RECOMPUTE_WINDOW");
    ZT_TEST_TRUE(zt_recompute_window(6) == 2 && zt_recompute_window(1) == 1, "default window 2");
    setenv("ZT_RECOMPUTE_WINDOW", "3", 1);
    ZT_TEST_TRUE(zt_recompute_window(6) == 3, "ZT_RECOMPUTE_WINDOW=3: %d",
                 zt_recompute_window(6));
    unsetenv("ZT_RECOMPUTE_WINDOW");
    struct zt_step_ctx b = {.cls = ZT_PRIO_BACKWARD, .layer = 4, .n_layer = 6, .mb = 1,
                            .opts = {.layer = 4, .mb = 1, .step = 7, .priority = 3}};
    struct zt_step_ctx r = zt_recompute_ctx(&b);
    ZT_TEST_TRUE(r.opts.recompute == 1 && !b.opts.recompute && r.cls == b.cls && r.layer == 4 &&
                     r.mb == 1 && r.opts.priority == 3 && r.opts.step == 7,
                 "the recompute context is the backward's, marked");
}

int main(void) {
    test_subset();
    test_all();
    test_knob_and_ctx();
    return zt_test_finish("test_recompute");
}
