/*
 * sched/priority.c: zerotask's task priority policy.
 *
 * Layer: sched/. The critical path of a step is the chain of forward tasks, then the chain of
 * activation-gradient tasks backwards through the layers; parameter-gradient products and the
 * optimizer can run whenever a worker is free. So: backward activation gradients highest (earlier
 * layers need them last, so later layers first), forward next, weight gradients and the
 * optimizer lowest. Policies without priorities (eager, dmda, random) ignore the values.
 */
#include <starpu.h>    /* starpu_sched_get_min_priority */
#include "zt_sched.h"  /* zt_prio */

static int g_prio_on = -1;

int zt_prio(enum zt_prio_class c, int layer, int n_layer) {
    if (g_prio_on < 0) {
        int64_t v = 1;
        g_prio_on = (zt_knob_int("ZT_SCHED_PRIORITY", 0, 1, &v) == ZT_OK) ? (int)v : 1;
    }
    if (!g_prio_on) return 0;
    int lo = starpu_sched_get_min_priority(), hi = starpu_sched_get_max_priority();
    if (hi <= lo) return 0;
    int p;
    switch (c) {
    case ZT_PRIO_BACKWARD: p = 3; break;
    case ZT_PRIO_FORWARD: p = 2; break;
    case ZT_PRIO_IO: p = 2; break;
    case ZT_PRIO_WEIGHT_GRAD: p = 1; break;
    case ZT_PRIO_OPTIMIZER: p = 0; break;
    default: p = 1; break;
    }
    (void)layer;
    (void)n_layer;
    return p < lo ? lo : (p > hi ? hi : p);
}
