/*
 * io/swapdir.c: the per-run swap directory of NVMe offload and its swap files (see
 * zt_swapdir.h): creating and locking it, sweeping the directories of dead runs, removing it.
 *
 * Layer: io/ (platform; no StarPU). graph/offload.c is its caller.
 */
#define _GNU_SOURCE /* O_DIRECT */
#include "zt_swapdir.h"

#include <dirent.h>       /* opendir, readdir */
#include <errno.h>        /* errno */
#include <fcntl.h>        /* open, O_DIRECT */
#include <linux/magic.h>  /* TMPFS_MAGIC */
#include <pthread.h>      /* pthread_mutex_t */
#include <signal.h>       /* kill */
#include <stdio.h>        /* snprintf */
#include <stdlib.h>       /* posix_memalign */
#include <string.h>       /* strerror */
#include <sys/file.h>     /* flock */
#include <sys/stat.h>     /* stat, mkdir */
#include <sys/statfs.h>   /* statfs */
#include <sys/statvfs.h>  /* statvfs */
#include <unistd.h>       /* gethostname, getpid */
#include "zt_file.h"      /* zt_file_remove_dir */
#include "zt_log.h"       /* ZT_LOG_I */

#define PREFIX "zerotask-swap-"
#define MAX_OPEN 8

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static struct zt_swapdir *g_open[MAX_OPEN];

static void host_name(char *h, size_t n) {
    if (gethostname(h, n) != 0) snprintf(h, n, "localhost");
    h[n - 1] = '\0';
    for (char *c = h; *c; c++)
        if (*c == '/' || *c == '-') *c = '_';
}

/* a run directory of ours is stale when its lock is free and its owner (pid on this host) is
 * not alive; directories of other hosts count as stale only when their lock is free */
static int stale(const char *dir, const char *name, const char *host) {
    char lock[1100];
    snprintf(lock, sizeof lock, "%s/lock", dir);
    int fd = open(lock, O_RDWR | O_CLOEXEC);
    if (fd < 0) return 0; /* being created, or not ours: leave it */
    int held = flock(fd, LOCK_EX | LOCK_NB) != 0;
    close(fd);
    if (held) return 0;
    const char *rest = name + strlen(PREFIX);
    size_t hl = strlen(host);
    if (strncmp(rest, host, hl) == 0 && rest[hl] == '-') {
        long pid = strtol(rest + hl + 1, NULL, 10);
        if (pid > 0 && (kill((pid_t)pid, 0) == 0 || errno == EPERM)) return 0;
    }
    return 1;
}

static void clean_stale(const char *base, const char *host) {
    DIR *dp = opendir(base);
    if (!dp) return;
    struct dirent *de;
    char p[1024];
    while ((de = readdir(dp))) {
        if (strncmp(de->d_name, PREFIX, strlen(PREFIX)) != 0) continue;
        snprintf(p, sizeof p, "%s/%s", base, de->d_name);
        struct stat st;
        if (lstat(p, &st) != 0 || !S_ISDIR(st.st_mode)) continue;
        if (!stale(p, de->d_name, host)) continue;
        zt_file_remove_dir(p);
        ZT_LOG_I("swap: removed %s, left by a run that did not end cleanly", p);
    }
    closedir(dp);
}

static void unregister(struct zt_swapdir *d) {
    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < MAX_OPEN; i++)
        if (g_open[i] == d) g_open[i] = NULL;
    pthread_mutex_unlock(&g_mu);
}

/* this run's directory under base into d->path, registered as open: <host>-<pid>, or
 * <host>-<pid>.<k> when this process has that one open already (the engine's offload and the
 * checkpointed inputs under one nvme_path: each its own, so that neither removes the other's).
 * 0, or -1 when MAX_OPEN are open or the path is too long. */
static int claim_path(struct zt_swapdir *d, const char *base, const char *host) {
    pthread_mutex_lock(&g_mu);
    int slot = 0;
    while (slot < MAX_OPEN && g_open[slot]) slot++;
    for (int k = 1; slot < MAX_OPEN && k <= MAX_OPEN; k++) {
        int n = k == 1 ? snprintf(d->path, sizeof d->path, "%s/" PREFIX "%s-%ld", base, host,
                                  (long)getpid())
                       : snprintf(d->path, sizeof d->path, "%s/" PREFIX "%s-%ld.%d", base, host,
                                  (long)getpid(), k);
        if (n < 0 || (size_t)n >= sizeof d->path) break;
        int taken = 0;
        for (int i = 0; i < MAX_OPEN; i++) taken |= g_open[i] && !strcmp(g_open[i]->path, d->path);
        if (taken) continue;
        g_open[slot] = d;
        pthread_mutex_unlock(&g_mu);
        return 0;
    }
    pthread_mutex_unlock(&g_mu);
    d->path[0] = '\0';
    return -1;
}

enum zt_status zt_swapdir_check(const char *base, const char *key) {
    struct stat st;
    if (stat(base, &st) != 0)
        return zt_error_set(ZT_ERR_CONFIG, "%s %s: %s (expected an existing directory on a "
                            "fast disk)", key, base, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return zt_error_set(ZT_ERR_CONFIG, "%s %s: not a directory", key, base);
    return ZT_OK;
}

enum zt_status zt_swapdir_open(struct zt_swapdir *d, const char *base, const char *key,
                               int64_t need) {
    memset(d, 0, sizeof *d);
    d->lock_fd = -1;
    ZT_CHECK(zt_swapdir_check(base, key));
    char host[128];
    host_name(host, sizeof host);
    clean_stale(base, host);
    if (claim_path(d, base, host) != 0)
        return zt_error_set(ZT_ERR_CONFIG, "%s %s: path too long, or %d swap directories open "
                            "in this process already", key, base, MAX_OPEN);
    zt_file_remove_dir(d->path); /* our pid's, from an earlier life of this pid */
    if (mkdir(d->path, 0700) != 0) {
        int err = errno;
        unregister(d);
        d->path[0] = '\0';
        return zt_error_set(ZT_ERR_CONFIG, "%s %s: cannot create a directory there (%s); "
                            "expected a writable directory", key, base, strerror(err));
    }
    char p[1024];
    snprintf(p, sizeof p, "%s/lock", d->path);
    d->lock_fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (d->lock_fd < 0 || flock(d->lock_fd, LOCK_EX) != 0) {
        int err = errno;
        zt_swapdir_close(d);
        return zt_error_set(ZT_ERR_CONFIG, "%s %s: cannot create files there (%s)", key, base,
                            strerror(err));
    }
    /* O_DIRECT: probe with one aligned write */
    snprintf(p, sizeof p, "%s/probe", d->path);
    int fd = open(p, O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0600);
    d->direct = fd >= 0;
    if (fd >= 0) {
        void *buf = NULL;
        if (posix_memalign(&buf, 4096, 4096) == 0) {
            memset(buf, 0, 4096);
            d->direct = pwrite(fd, buf, 4096, 0) == 4096;
            free(buf);
        }
        close(fd);
    } else if (errno != EINVAL) {
        int err = errno;
        zt_swapdir_close(d);
        return zt_error_set(ZT_ERR_CONFIG, "%s %s: cannot create files there (%s)", key, base,
                            strerror(err));
    }
    unlink(p);
    struct statfs sf;
    if (statfs(base, &sf) == 0 && sf.f_type == TMPFS_MAGIC)
        ZT_LOG_W("%s %s is on tmpfs (memory): swapping there saves no host memory", key, base);
    if (!d->direct)
        ZT_LOG_W("%s %s: the filesystem refuses O_DIRECT; swap files use buffered I/O (page "
                 "cache) instead", key, base);
    struct statvfs sv;
    if (statvfs(base, &sv) == 0) {
        double avail = (double)sv.f_bavail * (double)sv.f_frsize;
        if (avail < (double)need) {
            zt_swapdir_close(d);
            return zt_error_set(ZT_ERR_IO, "%s %s: %.1f MiB free, but this rank's swap files "
                                "need %.1f MiB (%.0f KiB free, %lld KiB needed)", key, base,
                                avail / 1048576.0, need / 1048576.0, avail / 1024.0,
                                (long long)((need + 1023) / 1024));
        }
    }
    ZT_LOG_I("swap: %s (%s)", d->path, d->direct ? "O_DIRECT" : "buffered");
    return ZT_OK;
}

enum zt_status zt_swapdir_file(struct zt_swapdir *d, const char *name, int64_t bytes,
                               struct zt_swapfile *f) {
    memset(f, 0, sizeof *f);
    snprintf(f->path, sizeof f->path, "%s/%s", d->path, name);
    f->direct = d->direct;
    f->fd = open(f->path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | (d->direct ? O_DIRECT : 0),
                 0600);
    if (f->fd < 0)
        return zt_error_set(ZT_ERR_IO, "swap file %s: cannot create (%s)", f->path,
                            strerror(errno));
    if (ftruncate(f->fd, (off_t)bytes) != 0) {
        int err = errno;
        zt_swapfile_close(f);
        return zt_error_set(ZT_ERR_IO, "swap file %s: cannot size it to %lld bytes (%s)",
                            f->path, (long long)bytes, strerror(err));
    }
    return ZT_OK;
}

void zt_swapfile_close(struct zt_swapfile *f) {
    if (f->fd >= 0) close(f->fd);
    f->fd = -1;
}

void zt_swapdir_close(struct zt_swapdir *d) {
    if (!d->path[0]) return;
    unregister(d);
    zt_file_remove_dir(d->path);
    if (d->lock_fd >= 0) close(d->lock_fd);
    d->lock_fd = -1;
    d->path[0] = '\0';
}

void zt_swapdir_remove_all(void) {
    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < MAX_OPEN; i++)
        if (g_open[i]) zt_file_remove_dir(g_open[i]->path);
    pthread_mutex_unlock(&g_mu);
}
