/*
 * tests/tasks/test_prio_map.c: the priority levels keep the order sched/priority.c documents,
 * for any depth of model, and their map onto a policy's priority range keeps that order, fills
 * the range's ends and stays inside it (narrow ranges, eager-prio's -5..5, wide ones, none).
 */
#include "zt_sched.h"  /* zt_prio_level, zt_prio_map */
#include "zt_test.h"   /* ZT_TEST_TRUE */

int main(void) {
    const int depths[] = {0, 1, 2, 4, 12, 48, 1000};
    for (size_t di = 0; di < sizeof depths / sizeof *depths; di++) {
        int L = depths[di];
#define LV(c, l) zt_prio_level(ZT_PRIO_##c, l, L)
        ZT_TEST_TRUE(LV(REDUCE_LAST, -1) > LV(PREFETCH_BWD, 0), "L=%d: last reduction first", L);
        ZT_TEST_TRUE(LV(PREFETCH_BWD, 0) > LV(BACKWARD, 0), "L=%d: backward prefetch", L);
        ZT_TEST_TRUE(LV(BACKWARD, 0) == LV(REDUCE, 1), "L=%d: reductions with the backward", L);
        ZT_TEST_TRUE(LV(BACKWARD, 0) > LV(PREFETCH_FWD, 0), "L=%d: backward over prefetch", L);
        ZT_TEST_TRUE(LV(PREFETCH_FWD, 0) == LV(IO, -1), "L=%d: input with the prefetch", L);
        ZT_TEST_TRUE(LV(PREFETCH_FWD, 0) > LV(FORWARD, 0), "L=%d: prefetch over forward", L);
        int prev = -100;
        for (int l = -1; l <= L; l++) {
            int w = LV(WEIGHT_GRAD, l);
            ZT_TEST_TRUE(w >= prev && w >= -3 && w <= 0 && w < LV(FORWARD, l),
                         "L=%d: weight gradient of layer %d at %d (previous %d)", L, l, w, prev);
            prev = w;
        }
        ZT_TEST_TRUE(LV(WEIGHT_GRAD, -1) == -3 && LV(WEIGHT_GRAD, L) == 0,
                     "L=%d: weight gradients span -3..0", L);
        ZT_TEST_TRUE(LV(WEIGHT_GRAD, -1) > LV(OPT_READ, -1) && LV(OPT_READ, -1) > LV(OPTIMIZER, -1),
                     "L=%d: optimizer reads first", L);
        ZT_TEST_TRUE(LV(OPTIMIZER, -1) == ZT_PRIO_MIN_LEVEL &&
                         LV(REDUCE_LAST, 0) == ZT_PRIO_MAX_LEVEL,
                     "L=%d: levels span the range", L);
        ZT_TEST_TRUE(LV(WEIGHT_GRAD, -7) == -3 && LV(WEIGHT_GRAD, L + 9) == 0,
                     "L=%d: layers outside -1..L clamp", L);
#undef LV
    }
    const int ranges[][2] = {{0, 1},   {0, 3},       {-2, 2}, {-5, 5},
                             {-1, 20}, {-100, 100},  {-2147483647, 2147483647},
                             {-2147483647, 4},       {0, 0},  {3, 1}};
    for (size_t ri = 0; ri < sizeof ranges / sizeof *ranges; ri++) {
        int lo = ranges[ri][0], hi = ranges[ri][1], prev = lo;
        int whole = lo <= ZT_PRIO_MIN_LEVEL && hi >= ZT_PRIO_MAX_LEVEL; /* taken as is */
        for (int v = ZT_PRIO_MIN_LEVEL - 2; v <= ZT_PRIO_MAX_LEVEL + 2; v++) {
            int p = zt_prio_map(v, lo, hi);
            if (hi <= lo) {
                ZT_TEST_TRUE(p == lo, "[%d, %d]: level %d -> %d, want %d", lo, hi, v, p, lo);
                continue;
            }
            ZT_TEST_TRUE(p >= lo && p <= hi && p >= prev,
                         "[%d, %d]: level %d -> %d (previous %d)", lo, hi, v, p, prev);
            prev = p;
            if (whole && v >= ZT_PRIO_MIN_LEVEL && v <= ZT_PRIO_MAX_LEVEL)
                ZT_TEST_TRUE(p == v, "[%d, %d]: level %d taken as is, got %d", lo, hi, v, p);
        }
        if (hi > lo)
            ZT_TEST_TRUE(
                zt_prio_map(ZT_PRIO_MIN_LEVEL, lo, hi) == (whole ? ZT_PRIO_MIN_LEVEL : lo) &&
                    zt_prio_map(ZT_PRIO_MAX_LEVEL, lo, hi) == (whole ? ZT_PRIO_MAX_LEVEL : hi),
                "[%d, %d]: the ends", lo, hi);
    }
    /* squeezed onto a few values, neighbouring levels may merge; the ends never do */
    ZT_TEST_TRUE(zt_prio_map(zt_prio_level(ZT_PRIO_REDUCE_LAST, 0, 4), 0, 1) == 1 &&
                     zt_prio_map(zt_prio_level(ZT_PRIO_OPTIMIZER, -1, 4), 0, 1) == 0,
                 "[0, 1]: the last reductions over the optimizer");
    return zt_test_finish("test_prio_map");
}
