/*
 * io/zt_swapdir.h: the per-run swap directory under a config's nvme_path, and its swap files.
 *
 * A process (one per MPI rank) keeps its swap files in <nvme_path>/zerotask-swap-<host>-<pid>
 * (a second directory it opens under the same path: ...-<pid>.2, and so on), holding an flock
 * on the "lock" file inside it while it lives. zt_swapdir_open first removes
 * the directories of runs that ended without cleaning up (a crash, a kill, MPI_Abort): a
 * directory is stale when its lock is free and its owner is not a live process of this host.
 * zt_swapdir_close removes the files and the directory; a process that dies leaves them to the
 * next start's cleaning.
 *
 * Bad paths are ZT_ERR_CONFIG naming the config key: missing, not a directory, not writable.
 * When the filesystem refuses O_DIRECT the files are opened without it (page cache) and the log
 * says so; a tmpfs nvme_path is accepted with a warning (it is memory, so swapping there saves no
 * host memory). Too little free space for the plan is ZT_ERR_IO at start.
 *
 * Layer: io/. No StarPU.
 */
#ifndef ZT_SWAPDIR_H
#define ZT_SWAPDIR_H

#include <stdint.h>    /* int64_t */
#include "zt_status.h" /* enum zt_status */

struct zt_swapdir {
    char path[640];  /* the run's directory */
    int lock_fd;     /* -1 when not open */
    int direct;      /* files are opened with O_DIRECT */
};

/* A swap file: open descriptor, whether it is O_DIRECT (then every transfer is 4096-aligned),
 * and its path for messages. */
struct zt_swapfile {
    int fd;
    int direct;
    char path[700];
};

/* Whether nvme_path (key: the config key that named it, for messages) is an existing directory:
 * ZT_ERR_CONFIG naming the key otherwise. */
enum zt_status zt_swapdir_check(const char *nvme_path, const char *key);
/* Validate nvme_path as zt_swapdir_check, clean stale runs, create this run's directory (another
 * one opened by this process under the same path gets a name of its own), probe O_DIRECT and
 * check that need_bytes fit in the free space. */
enum zt_status zt_swapdir_open(struct zt_swapdir *d, const char *nvme_path, const char *key,
                               int64_t need_bytes);
/* Create (truncate) file `name` of `bytes` bytes (sparse: reads of unwritten parts give zeros). */
enum zt_status zt_swapdir_file(struct zt_swapdir *d, const char *name, int64_t bytes,
                               struct zt_swapfile *f);
void zt_swapfile_close(struct zt_swapfile *f);
/* Remove the run's directory and everything in it (idempotent). */
void zt_swapdir_close(struct zt_swapdir *d);
/* Remove the directory of every zt_swapdir still open in this process: for a process about to
 * abort (MPI_Abort) without running its destructors. */
void zt_swapdir_remove_all(void);

#endif /* ZT_SWAPDIR_H */
