/*
 * graph/checkpoint_identity.c: what binds a checkpoint's files together: the run id (random,
 * made at the run's first save, carried across resumes), recorded in meta.json and, with the
 * tag's step, rank and world size, in every shard's header; and the check at every reader that
 * each shard belongs to the checkpoint whose meta.json names it.
 *
 * Layer: graph/. The shard header's fields are io/zt_ckpt.h's (zt_shard_set_check_id); the ranks
 * share rank 0's id through zt_comm (sched/). A process runs one training run: its run id is the
 * process's, adopted from the checkpoint it resumed or made at its first save.
 */
#include <sys/random.h>      /* getrandom */
#include <time.h>            /* clock_gettime */
#include <unistd.h>          /* getpid */
#include "checkpoint_impl.h" /* this room's shared declarations */
#include "zt_ckpt_dir.h"     /* zt_ckpt_dir_shard_paths */
#include "zt_comm.h"         /* zt_comm_size, zt_comm_rank, zt_comm_sum_double */

static uint64_t run_id; /* 0: none yet (no checkpoint resumed or saved by this process) */

uint64_t zt_checkpoint_new_run_id(void) {
    uint64_t id = 0;
    if (getrandom(&id, sizeof id, 0) != (ssize_t)sizeof id) { /* no entropy source: time, pid */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        id = zt_hash_bytes((uint64_t)ts.tv_nsec ^ (uint64_t)ts.tv_sec << 30, &ts, sizeof ts);
        id ^= (uint64_t)getpid() << 40;
    }
    return id ? id : 1; /* 0 means "none" */
}

void zt_checkpoint_adopt_run_id(uint64_t id) { run_id = id; }

enum zt_status zt_checkpoint_run_id(uint64_t *id) {
    if (!run_id) {
        uint64_t mine = zt_comm_rank() == 0 ? zt_checkpoint_new_run_id() : 0;
        if (zt_comm_size() > 1) { /* rank 0's id to all: two exact 32-bit sums */
            double hi = (double)(mine >> 32), lo = (double)(mine & 0xffffffffu);
            ZT_CHECK(zt_comm_sum_double(&hi));
            ZT_CHECK(zt_comm_sum_double(&lo));
            mine = (uint64_t)hi << 32 | (uint64_t)lo;
        }
        run_id = mine;
    }
    *id = run_id;
    return ZT_OK;
}

enum zt_status zt_checkpoint_open_shards(const char *tagdir, const struct zt_ckpt_info *info,
                                         struct zt_shard_set *s) {
    char **paths = NULL;
    enum zt_status rc = zt_ckpt_dir_shard_paths(tagdir, info->world_size, &paths);
    if (rc == ZT_OK) rc = zt_shard_set_open(s, (const char *const *)paths, info->world_size);
    zt_ckpt_dir_free_paths(paths, info->world_size);
    if (rc == ZT_OK && (rc = zt_shard_set_check_id(s, info->run_id, info->step)) != ZT_OK)
        zt_shard_set_close(s);
    return rc;
}

enum zt_status zt_checkpoint_check_shard_ids(const char *tagdir, const struct zt_ckpt_info *info) {
    struct zt_shard_set s;
    ZT_CHECK(zt_checkpoint_open_shards(tagdir, info, &s));
    zt_shard_set_close(&s);
    return ZT_OK;
}
