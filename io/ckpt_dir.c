/*
 * io/ckpt_dir.c: the checkpoint directory protocol (see zt_ckpt_dir.h): the .partial directory a
 * save fills, publishing it by rename, `latest`, following `latest`, and removing tags.
 *
 * Layer: io/ (platform; no StarPU). graph/checkpoint_*.c decide what goes into a tag and when;
 * this file holds every mkdir, rename, opendir and directory fsync of a checkpoint. The order of
 * the steps follows redis's rdbSave: write everything under a hidden name, fsync it, rename it
 * into place, fsync the parent directory, and only then let anything point at it.
 */
#include "zt_ckpt_dir.h"
#include <dirent.h>     /* opendir, readdir */
#include <errno.h>      /* errno, EEXIST */
#include <stdint.h>     /* SIZE_MAX */
#include <stdio.h>      /* snprintf, rename */
#include <stdlib.h>     /* malloc, calloc, free */
#include <string.h>     /* strcmp, strchr, strcspn, strerror */
#include <sys/stat.h>   /* mkdir, stat */
#include <unistd.h>     /* unlink */
#include "zt_file.h"    /* zt_file_replace, _read_all, _fsync_dir, _remove_dir, _mkdirs */
#include "zt_log.h"     /* ZT_LOG_I */

// ----------------------------------------------------------------------------
// small pieces

/* fsync a directory, so that the renames inside it survive a crash */
static enum zt_status fsync_dir(const char *dir) {
    if (zt_file_fsync_dir(dir) != 0)
        return zt_error_set(ZT_ERR_IO, "checkpoint %s: cannot sync the directory (%s)", dir,
                            strerror(errno));
    return ZT_OK;
}

static int has_suffix(const char *name, size_t len, const char *suffix, size_t min_len) {
    size_t k = strlen(suffix);
    return len > min_len && strcmp(name + len - k, suffix) == 0;
}

static int path_exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

enum zt_status zt_ckpt_dir_read_text(const char *path, const char *what, char **text) {
    size_t len;
    if (zt_file_read_all(path, SIZE_MAX - 1, text, &len) == 0) {
        if (strlen(*text) == len) return ZT_OK;
        free(*text); /* a NUL byte would hide what follows it from the JSON parser */
        *text = NULL;
        return zt_error_set(ZT_ERR_CKPT_CORRUPT, "checkpoint %s: the %s holds a NUL byte "
                            "(expected text)", path, what);
    }
    return zt_error_set(ZT_ERR_IO, "checkpoint %s: cannot read the %s (%s)", path, what,
                        errno == EIO || errno == EINVAL ? "read error" : strerror(errno));
}

// ----------------------------------------------------------------------------
// saving: prepare, publish, discard

enum zt_status zt_ckpt_dir_create(const char *dir) {
    if (zt_file_mkdirs(dir, 0755) == 0) return ZT_OK;
    int err = errno;
    struct stat sb;
    if (err == ENOTDIR && stat(dir, &sb) == 0)
        return zt_error_set(ZT_ERR_IO, "checkpoint %s: not a directory", dir);
    return zt_error_set(ZT_ERR_IO, "checkpoint %s: cannot create the directory (%s)", dir,
                        strerror(err));
}

void zt_ckpt_dir_partial_path(char *buf, size_t n, const char *dir, const char *tag) {
    snprintf(buf, n, "%s/.%s.partial", dir, tag);
}

enum zt_status zt_ckpt_dir_prepare(const char *dir, const char *tag) {
    char partial[ZT_CKPT_PATH_BYTES];
    zt_ckpt_dir_partial_path(partial, sizeof partial, dir, tag);
    ZT_CHECK(zt_ckpt_dir_create(dir));
    zt_file_remove_dir(partial); /* a crashed save's leftover: its files are of no use */
    if (mkdir(partial, 0755) != 0)
        return zt_error_set(ZT_ERR_IO, "checkpoint %s: cannot create %s (%s)", dir, partial,
                            strerror(errno));
    return ZT_OK;
}

void zt_ckpt_dir_discard(const char *dir, const char *tag) {
    char partial[ZT_CKPT_PATH_BYTES];
    zt_ckpt_dir_partial_path(partial, sizeof partial, dir, tag);
    zt_file_remove_dir(partial);
}

/* DIR/latest := "<tag>\n", atomically (a temporary, fsync, rename, fsync of DIR) */
static enum zt_status write_latest(const char *dir, const char *tag) {
    char path[ZT_CKPT_PATH_BYTES + 16], line[160];
    snprintf(path, sizeof path, "%s/latest", dir);
    snprintf(line, sizeof line, "%s\n", tag);
    return zt_file_replace("checkpoint latest", path, line, strlen(line));
}

enum zt_status zt_ckpt_dir_publish(const char *dir, const char *tag) {
    return zt_ckpt_dir_publish_tag(dir, tag, 1);
}

enum zt_status zt_ckpt_dir_publish_tag(const char *dir, const char *tag, int set_latest) {
    char partial[ZT_CKPT_PATH_BYTES], final[ZT_CKPT_PATH_BYTES], old[ZT_CKPT_PATH_BYTES];
    zt_ckpt_dir_partial_path(partial, sizeof partial, dir, tag);
    snprintf(final, sizeof final, "%s/%s", dir, tag);
    snprintf(old, sizeof old, "%s/.%s.old", dir, tag);
    int had = path_exists(final);
    if (had) { /* the same tag saved again (e.g. after a resume): the old copy goes last */
        zt_file_remove_dir(old);
        if (rename(final, old) != 0)
            return zt_error_set(ZT_ERR_IO, "checkpoint %s: cannot move the previous %s aside "
                                "(%s)", dir, tag, strerror(errno));
    }
    /* one rename makes the whole tag visible at once: it is there complete or not at all */
    if (rename(partial, final) != 0) {
        enum zt_status rc = zt_error_set(ZT_ERR_IO, "checkpoint %s: cannot rename %s into "
                                         "place (%s)", dir, partial, strerror(errno));
        if (had) rename(old, final);
        return rc;
    }
    /* the rename must be on disk before `latest` names the tag */
    ZT_CHECK(fsync_dir(dir));
    if (set_latest) ZT_CHECK(write_latest(dir, tag));
    if (had) zt_file_remove_dir(old);
    return ZT_OK;
}

// ----------------------------------------------------------------------------
// removing: leftovers and old tags

void zt_ckpt_dir_sweep(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *de;
    char p[ZT_CKPT_PATH_BYTES + 300];
    while ((de = readdir(d))) {
        const char *name = de->d_name;
        size_t len = strlen(name);
        snprintf(p, sizeof p, "%.1023s/%s", dir, name);
        if (name[0] == '.' &&
            (has_suffix(name, len, ".partial", 9) || has_suffix(name, len, ".dead", 6)))
            zt_file_remove_dir(p);
        if (strncmp(name, "latest.tmp-", 11) == 0) unlink(p); /* a crashed `latest` update */
    }
    closedir(d);
}

int zt_ckpt_dir_remove_tag(const char *dir, const char *tag) {
    char path[ZT_CKPT_PATH_BYTES + 300], dead[ZT_CKPT_PATH_BYTES + 300];
    snprintf(path, sizeof path, "%.1023s/%s", dir, tag);
    snprintf(dead, sizeof dead, "%.1023s/.%s.dead", dir, tag);
    /* out of sight first (one rename), then emptied: a crash in between leaves a hidden .dead
     * directory for the next save's sweep, never a tag without its files */
    if (rename(path, dead) != 0) return -1;
    zt_file_remove_dir(dead);
    return 0;
}

// ----------------------------------------------------------------------------
// reading: tags of a directory, `latest`, shard files

enum zt_status zt_ckpt_dir_each_entry(const char *dir, size_t max_name,
                                      zt_ckpt_dir_visit_fn visit, void *arg) {
    DIR *d = opendir(dir);
    if (!d) return zt_error_set(ZT_ERR_IO, "checkpoint %s: cannot open the directory (%s)", dir,
                                strerror(errno));
    struct dirent *de;
    char p[ZT_CKPT_PATH_BYTES + 300];
    enum zt_status rc = ZT_OK;
    while (rc == ZT_OK && (de = readdir(d))) {
        if (de->d_name[0] == '.' || strlen(de->d_name) >= max_name) continue;
        snprintf(p, sizeof p, "%.1023s/%s", dir, de->d_name);
        rc = visit(arg, de->d_name, p);
    }
    closedir(d);
    return rc;
}

/* `latest`'s first line, which must be a plain tag name (no '/', not hidden) */
static enum zt_status read_latest(const char *path, char **tag) {
    ZT_CHECK(zt_ckpt_dir_read_text(path, "latest tag", tag));
    char *t = *tag;
    size_t len = strcspn(t, "\r\n");
    t[len] = '\0';
    if (len == 0 || strchr(t, '/') || t[0] == '.') {
        free(t);
        *tag = NULL;
        return zt_error_set(ZT_ERR_CKPT_CORRUPT, "checkpoint %s: does not name a tag (expected "
                            "one line like step100)", path);
    }
    return ZT_OK;
}

enum zt_status zt_ckpt_dir_resolve(const char *path, char *tagdir, size_t n) {
    char p[ZT_CKPT_PATH_BYTES];
    struct stat sb;
    snprintf(p, sizeof p, "%s/meta.json", path);
    if (path_exists(p)) { /* a tag itself */
        snprintf(tagdir, n, "%s", path);
        return ZT_OK;
    }
    snprintf(p, sizeof p, "%s/latest", path);
    if (stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return zt_error_set(ZT_ERR_IO, "checkpoint %s: no such directory", path);
    if (!path_exists(p))
        return zt_error_set(ZT_ERR_IO, "checkpoint %s: neither a tag (no meta.json) nor a "
                            "checkpoint directory (no latest)", path);
    char *tag;
    ZT_CHECK(read_latest(p, &tag));
    snprintf(tagdir, n, "%s/%s", path, tag);
    snprintf(p, sizeof p, "%s/meta.json", tagdir);
    enum zt_status rc = ZT_OK;
    if (!path_exists(p)) { /* a re-save of this tag stopped between its two renames */
        char old[ZT_CKPT_PATH_BYTES];
        snprintf(old, sizeof old, "%s/.%s.old/meta.json", path, tag);
        if (path_exists(old)) {
            ZT_LOG_I("checkpoint %s: tag %s was being replaced; using its previous copy", path,
                     tag);
            snprintf(tagdir, n, "%s/.%s.old", path, tag);
        } else {
            rc = zt_error_set(ZT_ERR_CKPT_CORRUPT, "checkpoint %s/latest names tag '%s', but %s "
                              "does not exist", path, tag, p);
        }
    }
    free(tag);
    return rc;
}

void zt_ckpt_dir_shard_name(char *buf, size_t n, int rank) { snprintf(buf, n, "rank%d.zts", rank); }

void zt_ckpt_dir_shard_path(char *buf, size_t n, const char *tagdir, int rank) {
    snprintf(buf, n, "%s/rank%d.zts", tagdir, rank);
}

enum zt_status zt_ckpt_dir_shard_paths(const char *tagdir, int n, char ***out) {
    char **paths = calloc((size_t)n + 1, sizeof *paths);
    *out = paths;
    if (!paths) return zt_error_set(ZT_ERR_NOMEM, "checkpoint %s: out of memory", tagdir);
    for (int r = 0; r < n; r++) {
        if (!(paths[r] = malloc(ZT_CKPT_PATH_BYTES)))
            return zt_error_set(ZT_ERR_NOMEM, "checkpoint %s: out of memory", tagdir);
        zt_ckpt_dir_shard_path(paths[r], ZT_CKPT_PATH_BYTES, tagdir, r);
        if (!path_exists(paths[r]))
            return zt_error_set(ZT_ERR_CKPT_CORRUPT, "checkpoint %s: rank %d's shard is missing "
                                "(meta.json says %d ranks wrote it)", paths[r], r, n);
    }
    return ZT_OK;
}

void zt_ckpt_dir_free_paths(char **paths, int n) {
    for (int r = 0; paths && r < n; r++) free(paths[r]);
    free(paths);
}
