/*
 * io/file.c: crash-safe file replacement, reading a whole file, mkdir -p, syncing a directory (see
 * zt_file.h).
 *
 * Layer: io/ (platform; no StarPU). Every writer of a file a user keeps goes through the atomic
 * replace here (token files, safetensors, checkpoint shards, meta.json, latest).
 */
#include "zt_file.h"
#include <dirent.h>   /* opendir, readdir */
#include <errno.h>    /* errno, EINTR */
#include <limits.h>   /* PATH_MAX */
#include <fcntl.h>    /* open, O_RDONLY, O_DIRECTORY */
#include <stdint.h>   /* uint64_t */
#include <stdio.h>    /* snprintf */
#include <stdlib.h>   /* malloc, free, mkstemp */
#include <string.h>   /* memcpy, strchr, strcmp, strlen, strerror, strrchr, strdup */
#include <sys/stat.h> /* fchmod, fstat, mkdir, stat, S_ISREG */
#include <unistd.h>   /* close, read, write, fsync, unlink, rmdir, getpid */

int zt_write_all(int fd, const void *buf, size_t n) {
    const char *p = buf;
    while (n > 0) {
        size_t chunk = n > (1u << 30) ? (1u << 30) : n;
        ssize_t w = write(fd, p, chunk);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (w == 0) {
            errno = ENOSPC; /* a regular file that takes nothing is full */
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

enum zt_status zt_afile_open(struct zt_afile *f, const char *kind, const char *path) {
    f->fd = -1;
    f->kind = kind;
    f->path = path;
    f->what = "write";
    size_t plen = strlen(path);
    f->tmp = malloc(plen + 32);
    if (!f->tmp) return zt_error_set(ZT_ERR_NOMEM, "%s %s: out of memory", kind, path);
    snprintf(f->tmp, plen + 32, "%s.tmp-%ld-XXXXXX", path, (long)getpid());
    f->fd = mkstemp(f->tmp);
    if (f->fd < 0) {
        enum zt_status rc = zt_error_set(ZT_ERR_IO, "%s %s: cannot create a temporary file "
                                                    "next to it (%s)", kind, path, strerror(errno));
        free(f->tmp);
        f->tmp = NULL;
        return rc;
    }
    /* mkstemp creates 0600; what we write is data others may read */
    if (fchmod(f->fd, 0644) != 0) {
        f->what = "chmod";
        return zt_afile_fail(f);
    }
    return ZT_OK;
}

int zt_afile_write(struct zt_afile *f, const void *buf, size_t n) {
    f->what = "write";
    return zt_write_all(f->fd, buf, n);
}

enum zt_status zt_afile_fail(struct zt_afile *f) {
    int e = errno;
    if (f->fd >= 0) close(f->fd);
    f->fd = -1;
    if (f->tmp) unlink(f->tmp); /* never leave a partial file; the old file at path is untouched */
    free(f->tmp);
    f->tmp = NULL;
    return zt_error_set(ZT_ERR_IO, "%s %s: %s failed (%s)", f->kind, f->path, f->what,
                        strerror(e));
}

enum zt_status zt_afile_commit(struct zt_afile *f) {
    /* fsync before rename: otherwise a crash can leave the new name pointing at empty blocks */
    f->what = "fsync";
    if (fsync(f->fd) != 0) return zt_afile_fail(f);
    f->what = "close";
    int cfd = f->fd;
    f->fd = -1;
    if (close(cfd) != 0) return zt_afile_fail(f);
    f->what = "rename";
    if (rename(f->tmp, f->path) != 0) return zt_afile_fail(f);
    /* fsync the directory so that the rename itself survives a crash */
    char *dir = strdup(f->path);
    if (dir) {
        char *slash = strrchr(dir, '/');
        const char *d = slash ? (slash == dir ? "/" : (*slash = '\0', dir)) : ".";
        (void)zt_file_fsync_dir(d); /* best effort: some filesystems refuse it on directories */
        free(dir);
    }
    free(f->tmp);
    f->tmp = NULL;
    return ZT_OK;
}

enum zt_status zt_file_replace(const char *kind, const char *path, const void *buf, size_t n) {
    struct zt_afile f;
    ZT_CHECK(zt_afile_open(&f, kind, path));
    if (zt_afile_write(&f, buf, n) != 0) return zt_afile_fail(&f);
    return zt_afile_commit(&f);
}

int zt_file_mkdirs(const char *path, mode_t mode) {
    char buf[PATH_MAX];
    size_t n = strlen(path);
    if (n >= sizeof buf) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(buf, path, n + 1);
    int parent_err = 0; /* an existing parent may still refuse mkdir: path itself decides */
    for (char *s = strchr(buf + 1, '/'); s; s = strchr(s + 1, '/')) {
        *s = '\0';
        if (mkdir(buf, mode) != 0 && errno != EEXIST && !parent_err) parent_err = errno;
        *s = '/';
    }
    if (mkdir(buf, mode) != 0 && errno != EEXIST) {
        if (errno == ENOENT && parent_err) errno = parent_err;
        return -1;
    }
    struct stat st;
    if (stat(buf, &st) != 0) return -1;
    if (!S_ISDIR(st.st_mode)) {
        errno = ENOTDIR;
        return -1;
    }
    return 0;
}

int zt_file_fsync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    errno = e;
    return rc;
}

int zt_file_open_regular(const char *path, int64_t *size) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return -1;
    struct stat st;
    int err = fstat(fd, &st) != 0 ? errno : !S_ISREG(st.st_mode) ? EINVAL : 0;
    int fl = err ? 0 : fcntl(fd, F_GETFL);
    if (!err && (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0)) err = errno;
    if (err) {
        close(fd);
        errno = err;
        return -1;
    }
    if (size) *size = (int64_t)st.st_size;
    return fd;
}

enum zt_status zt_file_open_input(const char *kind, const char *path, int *fd, int64_t *size) {
    *fd = zt_file_open_regular(path, size);
    if (*fd >= 0) return ZT_OK;
    if (errno == EINVAL) return zt_error_set(ZT_ERR_IO, "%s %s: not a regular file", kind, path);
    return zt_error_set(ZT_ERR_IO, "%s %s: cannot open (%s)", kind, path, strerror(errno));
}

int zt_file_read_all(const char *path, size_t max, char **buf, size_t *len) {
    *buf = NULL;
    *len = 0;
    int64_t size = 0;
    int fd = zt_file_open_regular(path, &size);
    if (fd < 0) return -1;
    int err = 0;
    char *b = NULL;
    if ((uint64_t)size > (uint64_t)max) err = EFBIG, *len = (size_t)size;
    else if (!(b = malloc((size_t)size + 1))) err = ENOMEM;
    size_t got = 0;
    while (!err && got < (size_t)size) {
        ssize_t r = read(fd, b + got, (size_t)size - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) err = EIO; /* an error, or the file shrank under us */
        else got += (size_t)r;
    }
    close(fd);
    if (err) {
        free(b);
        errno = err;
        return -1;
    }
    b[got] = '\0';
    *buf = b;
    *len = got;
    return 0;
}

void zt_file_remove_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *de;
        char p[PATH_MAX];
        while ((de = readdir(d)))
            if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
                snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
                unlink(p);
            }
        closedir(d);
    }
    rmdir(dir);
}

int zt_path_has_suffix(const char *path, const char *suffix) {
    size_t n = strlen(path), m = strlen(suffix);
    return n >= m && !strcmp(path + n - m, suffix);
}
