/*
 * graph/checkpoint_lock.c: one writer per checkpoint directory (zt_checkpoint_lock): rank 0 of
 * the job holds DIR/.lock (io/zt_ckpt_lock.h) from the run's start to its end.
 *
 * Layer: graph/. Why rank 0 alone: a save's directory must be the same directory for every rank
 * (rank 0 creates DIR/.<tag>.partial, every rank writes its shard into it, rank 0 renames it),
 * so a second job saving there is seen by the one lock of its rank 0, and ranks of one job never
 * contend with each other. On a shared file system flock(2) is a lock across hosts (NFS maps it
 * to its byte-range locks).
 */
#include <stdio.h>           /* snprintf */
#include <stdlib.h>          /* atexit */
#include <string.h>          /* strcmp */
#include "checkpoint_impl.h" /* this room's shared declarations */
#include "zt_ckpt_lock.h"    /* zt_ckpt_lock_take, zt_ckpt_lock_release */
#include "zt_comm.h"         /* zt_comm_rank */

/* the lock this process holds, released (its file removed) at exit */
static struct zt_ckpt_lock held = {.fd = -1};
static char held_dir[ZT_CKPT_PATH_BYTES];

static void release_held(void) { zt_ckpt_lock_release(&held); }

enum zt_status zt_checkpoint_lock(const char *dir, const char *what) {
    static int at_exit;
    if (zt_comm_rank() != 0) return ZT_OK;
    if (held.fd >= 0 && strcmp(held_dir, dir) == 0) return ZT_OK; /* already ours */
    release_held(); /* one directory at a time */
    if (strlen(dir) + 16 > sizeof held_dir)
        return zt_error_set(ZT_ERR_INVALID, "checkpoint %s: path too long", dir);
    ZT_CHECK(zt_ckpt_lock_take(&held, dir, what));
    snprintf(held_dir, sizeof held_dir, "%s", dir);
    if (!at_exit) at_exit = atexit(release_held) == 0;
    return ZT_OK;
}
