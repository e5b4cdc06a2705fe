/*
 * tests/tasks/test_task_kinds.c: proves that the tables generated from the ZT_TASK_KINDS X-macro
 * (tasks/task_kinds.c) agree with it: every kind has a distinct name that zt_task_kind_find
 * maps back to it, the name table is the one zt_task_kind_name reads, every kind's class and
 * phase are in range and named, the classes of the collectives, sends and recvs, swaps,
 * checkpoint writes and batch loads are the ones the trace tools sort by, every compute kind has
 * a phase and no communication, swap or checkpoint kind has one, and out-of-range kinds and
 * unknown names give "?", COMPUTE/NONE and -1.
 */
#include <string.h>          /* strcmp */
#include "zt_task_kinds.h"   /* the tables under test */
#include "zt_test.h"         /* ZT_TEST_TRUE */

int main(void) {
    const char *const *names = zt_task_kind_names();
    for (int k = 0; k < ZT_KIND_COUNT; k++) {
        const char *n = zt_task_kind_name(k);
        ZT_TEST_TRUE(n == names[k], "kind %d: name table and zt_task_kind_name differ", k);
        ZT_TEST_TRUE(zt_task_kind_find(n) == k, "kind %d (%s): found as %d", k, n,
                     zt_task_kind_find(n));
        for (int j = 0; j < k; j++)
            ZT_TEST_TRUE(strcmp(names[j], n) != 0, "kinds %d and %d share the name %s", j, k, n);
        enum zt_task_class c = zt_task_kind_class(k);
        enum zt_task_phase p = zt_task_kind_phase(k);
        ZT_TEST_TRUE(c >= 0 && c < ZT_TASK_CLASS_COUNT && strcmp(zt_task_class_name(c), "?"),
                     "kind %s: class %d", n, (int)c);
        ZT_TEST_TRUE(p >= 0 && p < ZT_TASK_PHASE_COUNT && strcmp(zt_task_phase_name(p), "?"),
                     "kind %s: phase %d", n, (int)p);
        if (c == ZT_TASK_CLASS_COMPUTE)
            ZT_TEST_TRUE(p != ZT_TASK_PHASE_NONE, "compute kind %s: no phase", n);
        if (c == ZT_TASK_CLASS_COMMUNICATION || c == ZT_TASK_CLASS_SWAP ||
            c == ZT_TASK_CLASS_CHECKPOINT)
            ZT_TEST_TRUE(p == ZT_TASK_PHASE_NONE, "%s kind %s: phase %s", zt_task_class_name(c),
                         n, zt_task_phase_name(p));
    }
    ZT_TEST_TRUE(zt_task_kind_class(ZT_KIND_comm_allreduce) == ZT_TASK_CLASS_COMMUNICATION &&
                     zt_task_kind_class(ZT_KIND_comm_reduce_scatter) ==
                         ZT_TASK_CLASS_COMMUNICATION &&
                     zt_task_kind_class(ZT_KIND_comm_allgather) == ZT_TASK_CLASS_COMMUNICATION,
                 "collectives are communication");
    ZT_TEST_TRUE(zt_task_kind_class(ZT_KIND_send) == ZT_TASK_CLASS_COMMUNICATION &&
                     zt_task_kind_class(ZT_KIND_recv) == ZT_TASK_CLASS_COMMUNICATION,
                 "point-to-point is communication");
    ZT_TEST_TRUE(zt_task_kind_class(ZT_KIND_swap_in) == ZT_TASK_CLASS_SWAP &&
                     zt_task_kind_class(ZT_KIND_swap_out) == ZT_TASK_CLASS_SWAP,
                 "swaps are swap");
    ZT_TEST_TRUE(zt_task_kind_class(ZT_KIND_ckpt_write) == ZT_TASK_CLASS_CHECKPOINT,
                 "checkpoint writes are checkpoint");
    ZT_TEST_TRUE(zt_task_kind_class(ZT_KIND_load_batch) == ZT_TASK_CLASS_DATA, "batches: data");
    ZT_TEST_TRUE(zt_task_kind_phase(ZT_KIND_matmul_backward_weight) == ZT_TASK_PHASE_WEIGHT_GRAD &&
                     zt_task_kind_phase(ZT_KIND_attention_forward) == ZT_TASK_PHASE_FORWARD &&
                     zt_task_kind_phase(ZT_KIND_attention_backward) == ZT_TASK_PHASE_BACKWARD &&
                     zt_task_kind_phase(ZT_KIND_adamw) == ZT_TASK_PHASE_OPTIMIZER,
                 "phases of matmul, attention and adamw");
    ZT_TEST_TRUE(!strcmp(zt_task_kind_name(-1), "?") && !strcmp(zt_task_kind_name(ZT_KIND_COUNT),
                                                                 "?"),
                 "out-of-range kinds are named ?");
    ZT_TEST_TRUE(zt_task_kind_class(ZT_KIND_COUNT) == ZT_TASK_CLASS_COMPUTE &&
                     zt_task_kind_phase(-1) == ZT_TASK_PHASE_NONE,
                 "out-of-range kinds: compute, no phase");
    ZT_TEST_TRUE(!strcmp(zt_task_class_name(ZT_TASK_CLASS_COUNT), "?") &&
                     !strcmp(zt_task_phase_name(ZT_TASK_PHASE_COUNT), "?"),
                 "out-of-range classes and phases are named ?");
    ZT_TEST_TRUE(zt_task_kind_find("no_such_kind") == -1 && zt_task_kind_find("") == -1,
                 "unknown names are -1");
    return zt_test_finish("test_task_kinds");
}
