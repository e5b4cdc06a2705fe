/*
 * io/ckpt_lock.c: the checkpoint directory's writer lock (zt_ckpt_lock.h): DIR/.lock, locked
 * with flock(2) and holding one line "pid P on host H since T" for the message a second writer
 * gets.
 *
 * Layer: io/ (platform; no StarPU). The holder removes the file when it lets go; one that dies
 * leaves it, unlocked (the kernel drops the flock), and the next run takes it. Since a holder
 * removes the file while others may have it open, a lock won on a file that is no longer at the
 * path (its holder removed it meanwhile) is given up and taken again on the new file.
 */
#define _GNU_SOURCE    /* gethostname */
#include "zt_ckpt_lock.h"
#include <errno.h>     /* errno, EWOULDBLOCK */
#include <fcntl.h>     /* open */
#include <stdio.h>     /* snprintf */
#include <string.h>    /* strerror, strcspn */
#include <sys/file.h>  /* flock */
#include <sys/stat.h>  /* fstat, stat */
#include <time.h>      /* time, gmtime_r, strftime */
#include <unistd.h>    /* getpid, gethostname, pread, pwrite, ftruncate, unlink, close */
#include "zt_log.h"    /* ZT_LOG_W */

#define LOCK_TRIES 8 /* holders removing the file under us, in a row, before giving up */

/* "pid P on host H since T": who holds the lock, for the message the next writer gets */
static void describe_self(char *buf, size_t n) {
    char host[256] = "?", when[32] = "?";
    if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "?");
    host[sizeof host - 1] = '\0';
    time_t now = time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm)) strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    snprintf(buf, n, "pid %ld on host %s since %s", (long)getpid(), host, when);
}

/* the holder's line from the lock file (empty while the holder is still writing it) */
static void read_holder(int fd, char *buf, size_t n) {
    ssize_t k = pread(fd, buf, n - 1, 0);
    buf[k > 0 ? k : 0] = '\0';
    buf[strcspn(buf, "\n")] = '\0';
}

/* whether the locked fd is still the file at path (its holder did not remove it meanwhile) */
static int still_there(int fd, const char *path) {
    struct stat a, b;
    return fstat(fd, &a) == 0 && stat(path, &b) == 0 && a.st_dev == b.st_dev &&
           a.st_ino == b.st_ino;
}

static enum zt_status write_holder(struct zt_ckpt_lock *l) {
    char line[400];
    describe_self(line, sizeof line);
    size_t n = strlen(line);
    line[n++] = '\n';
    if (ftruncate(l->fd, 0) != 0 || pwrite(l->fd, line, n, 0) != (ssize_t)n)
        return zt_error_set(ZT_ERR_IO, "checkpoint lock %s: cannot write it (%s)", l->path,
                            strerror(errno));
    return ZT_OK;
}

enum zt_status zt_ckpt_lock_take(struct zt_ckpt_lock *l, const char *dir, const char *what) {
    l->fd = -1;
    snprintf(l->path, sizeof l->path, "%s/.lock", dir);
    ZT_CHECK(zt_ckpt_dir_create(dir));
    for (int tries = 0; tries < LOCK_TRIES; tries++) {
        int fd = open(l->path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0)
            return zt_error_set(ZT_ERR_IO, "checkpoint lock %s: cannot create it (%s)", l->path,
                                strerror(errno));
        if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
            int err = errno;
            char holder[400];
            read_holder(fd, holder, sizeof holder);
            close(fd);
            if (err == EWOULDBLOCK)
                return zt_error_set(ZT_ERR_IO, "%s %s is in use by %s (one run writes a "
                                    "checkpoint directory at a time; lock file %s)", what, dir,
                                    holder[0] ? holder : "another process", l->path);
            ZT_LOG_W("checkpoint lock %s: this file system does not lock (%s); a second run "
                     "saving into %s will not be detected", l->path, strerror(err), dir);
            return ZT_OK;
        }
        if (still_there(fd, l->path)) {
            l->fd = fd;
            enum zt_status rc = write_holder(l);
            if (rc != ZT_OK) zt_ckpt_lock_release(l);
            return rc;
        }
        close(fd); /* the previous holder removed the file after we opened it: again */
    }
    return zt_error_set(ZT_ERR_IO, "checkpoint lock %s: its holders keep replacing it", l->path);
}

void zt_ckpt_lock_release(struct zt_ckpt_lock *l) {
    if (l->fd < 0) return;
    unlink(l->path); /* while still locked: a waiter that wins the old file sees it is gone */
    close(l->fd);
    l->fd = -1;
}
