/*
 * tasks/collective_impl.h: what the two transports of the collectives share (tasks/collective.c:
 * the inserts and the MPI host bodies; tasks/collective_nccl.c: the NCCL device bodies of the GPU
 * build): the args struct, its slots, and the common start and fatal end of a body. Private to
 * those two files.
 */
#ifndef ZT_COLLECTIVE_IMPL_H
#define ZT_COLLECTIVE_IMPL_H

#include <stdint.h>      /* int64_t */
#include "tasks_impl.h"  /* struct zt_task_hdr */
#include "zt_comm_mpi.h" /* struct zt_coll_id */

struct zt_collective_args {
    struct zt_task_hdr hdr;
    int nranks;         /* the group's ranks (zt_comm_set_group) */
    int base;           /* world rank of the group's rank 0: its rank r is world rank base + r */
    int elemsize;
    int64_t seq;        /* per-process sequence number of the collective (tags, reports) */
    int64_t part[];     /* 2 * nranks: block index range of each rank's part */
};

/* slots: 0 the blocks, 1 the token, 2 (optional) the caller's accumulator (reductions) or source
 * (all-gather) blocks, as many and as large as the blocks of its part */
enum { SLOT_BLOCKS = 0, SLOT_TOKEN = 1, SLOT_AUX = 2 };

/* A failure inside a collective is fatal for the job: print what failed, naming the collective,
 * and abort every rank (the others would wait for this one forever). */
void zt_collective_die(const char *what, const struct zt_collective_args *a);
/* Elements of rank r's part. */
int64_t zt_collective_part_elems(void *buffers[], const struct zt_collective_args *a, int r);
/* The start of a body, after its local copies: 0 when nothing is to be exchanged (one rank and
 * no local sum: local_sum is a reduction with an accumulator) or this rank must skip the
 * collective (ZT_TEST_SKIP_COLLECTIVE, said on stderr); else 1, with *id naming the collective
 * and, with several ranks, the watchdog told that this rank has entered it. */
int zt_collective_enter(const struct zt_collective_args *a, int local_sum,
                        struct zt_coll_id *id);

#endif /* ZT_COLLECTIVE_IMPL_H */
