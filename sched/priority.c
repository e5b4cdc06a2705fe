/*
 * sched/priority.c: zerotask's critical-path task priorities.
 *
 * Layer: sched/. One step is a forward chain through the layers, a backward chain of activation
 * gradients back through them, gradient reductions that run in bucket order (one communication
 * token serializes them, so the first bucket's delay is every later bucket's), and an optimizer
 * that waits for the last reduction. Higher levels run first where the policy honours
 * priorities (prio, dmdas, lws; eager, dmda and random ignore them):
 *
 *    5  reductions the optimizer waits on last (the embeddings' and first blocks' buckets, and
 *       the gradient-norm exchange), so the update starts as soon as the backward ends
 *    4  all-gather / swap-in of the parameters the backward reads next (stage 3): the next
 *       layer's gradients wait on them
 *    3  backward activation gradients (the critical chain) and the other reductions
 *    2  all-gather / swap-in of the parameters the forward reads next, and the input batch
 *    1  forward
 *  0..-3 parameter-gradient products, the top layers' first: they feed the first reductions,
 *       which everything after them in the communication order waits on
 *   -4  swap-in of optimizer state (ahead of the update that reads it)
 *   -5  optimizer updates, swap-outs, checkpoint writes
 *
 * The 11 levels are eager-prio's default range (dmdas and lws offer it too); a policy with a
 * narrower range gets them squeezed in order (neighbours may merge), a wider one as they are.
 * Swaps and checkpoint writes are served by zerotask's I/O threads, highest priority first.
 */
#include <starpu.h>    /* starpu_sched_get_min_priority */
#include "zt_sched.h"  /* zt_prio */

static int g_prio_on = -1;

int zt_prio_level(enum zt_prio_class c, int layer, int n_layer) {
    switch (c) {
    case ZT_PRIO_REDUCE_LAST: return 5;
    case ZT_PRIO_PREFETCH_BWD: return 4;
    case ZT_PRIO_BACKWARD:
    case ZT_PRIO_REDUCE: return 3;
    case ZT_PRIO_PREFETCH_FWD:
    case ZT_PRIO_IO: return 2;
    case ZT_PRIO_FORWARD: return 1;
    case ZT_PRIO_WEIGHT_GRAD: {
        /* layer -1 (embeddings) .. n_layer (head) onto -3 .. 0 */
        if (n_layer < 0) n_layer = 0;
        if (layer < -1) layer = -1;
        if (layer > n_layer) layer = n_layer;
        return -3 + (3 * (layer + 1) + (n_layer + 1) / 2) / (n_layer + 1);
    }
    case ZT_PRIO_OPT_READ: return -4;
    case ZT_PRIO_OPTIMIZER: return -5;
    case ZT_PRIO_DEFAULT:
    default: return 0;
    }
}

int zt_prio_map(int level, int lo, int hi) {
    if (hi <= lo) return lo;
    if (level < ZT_PRIO_MIN_LEVEL) level = ZT_PRIO_MIN_LEVEL;
    if (level > ZT_PRIO_MAX_LEVEL) level = ZT_PRIO_MAX_LEVEL;
    if (lo <= ZT_PRIO_MIN_LEVEL && hi >= ZT_PRIO_MAX_LEVEL) return level;
    /* squeezed: level order kept (ties allowed), the extremes onto lo and hi */
    long span = ZT_PRIO_MAX_LEVEL - ZT_PRIO_MIN_LEVEL;
    return (int)(lo + ((long)(level - ZT_PRIO_MIN_LEVEL) * ((long)hi - lo) + span / 2) / span);
}

int zt_prio(enum zt_prio_class c, int layer, int n_layer) {
    if (g_prio_on < 0) {
        int64_t v = 1;
        g_prio_on = (zt_knob_int("ZT_SCHED_PRIORITY", &v) == ZT_OK) ? (int)v : 1;
    }
    if (!g_prio_on) return 0;
    return zt_prio_map(zt_prio_level(c, layer, n_layer), starpu_sched_get_min_priority(),
                       starpu_sched_get_max_priority());
}
