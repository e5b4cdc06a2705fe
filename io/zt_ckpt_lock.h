/*
 * io/zt_ckpt_lock.h: one writer per checkpoint directory: a lock file DIR/.lock, held with
 * flock(2) and naming its holder (pid, host, start time), so that a second run saving into the
 * same directory is refused at its start with one line naming the first, instead of the two
 * failing later in each other's renames.
 *
 * Layer: io/ (platform; no StarPU, no MPI). Who takes it (rank 0 of a job) is graph/'s choice
 * (graph/checkpoint_lock.c). The kernel drops a flock when its holder dies, so a lock file left
 * by a killed process does not block the next run; a holder that ends normally removes it.
 */
#ifndef ZT_CKPT_LOCK_H
#define ZT_CKPT_LOCK_H

#include "zt_ckpt_dir.h" /* ZT_CKPT_PATH_BYTES */
#include "zt_status.h"   /* enum zt_status */

#ifdef __cplusplus
extern "C" {
#endif

struct zt_ckpt_lock {
    int fd;                         /* the locked file, -1 when none is held */
    char path[ZT_CKPT_PATH_BYTES];  /* DIR/.lock */
};

/* Create DIR (and its parents) and take DIR/.lock without waiting. Held by another process:
 * ZT_ERR_IO, "WHAT DIR is in use by pid P on host H since T (...)" (what: how the caller's user
 * named DIR, e.g. "--save-dir"). A file system without flock: a warning, and *l holds nothing. */
enum zt_status zt_ckpt_lock_take(struct zt_ckpt_lock *l, const char *dir, const char *what);
/* Remove the lock file and release the lock (nothing held: nothing done). */
void zt_ckpt_lock_release(struct zt_ckpt_lock *l);

#ifdef __cplusplus
}
#endif
#endif /* ZT_CKPT_LOCK_H */
