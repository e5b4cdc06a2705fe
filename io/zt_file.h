/*
 * io/zt_file.h: crash-safe file replacement, shared by every writer of a file a user keeps
 * (token files, safetensors, checkpoints), and the small whole-file helpers of io/ (read a file
 * into memory, sync a directory).
 *
 * The new content goes to a temporary next to the target (rename() is atomic only within one
 * filesystem), is fsynced, then renamed over the target and the directory fsynced. A failure at
 * any point (disk full included) removes the temporary and leaves the old file untouched.
 *
 *   struct zt_afile f;
 *   if ((rc = zt_afile_open(&f, "safetensors", path)) != ZT_OK) return rc;
 *   if (zt_afile_write(&f, buf, n) != 0) return zt_afile_fail(&f);
 *   return zt_afile_commit(&f);
 */
#ifndef ZT_FILE_H
#define ZT_FILE_H

#include <stddef.h>    /* size_t */
#include <stdint.h>    /* int64_t */
#include <sys/types.h> /* mode_t */
#include "zt_status.h" /* enum zt_status */

struct zt_afile {
    int fd;
    const char *kind; /* what the file is, for messages: "tokens", "safetensors", ... */
    const char *path; /* the target; borrowed, must outlive the zt_afile */
    const char *what; /* the step in progress, for messages */
    char *tmp;        /* the temporary's path */
};

// create the temporary (mode 0644) next to path
enum zt_status zt_afile_open(struct zt_afile *f, const char *kind, const char *path);
// write n bytes, retrying short writes and EINTR; 0 on success, -1 with errno set
int zt_afile_write(struct zt_afile *f, const void *buf, size_t n);
// fsync, close, rename over the target, fsync the directory; on failure as zt_afile_fail
enum zt_status zt_afile_commit(struct zt_afile *f);
// remove the temporary and report the failed step with errno's text; returns ZT_ERR_IO
enum zt_status zt_afile_fail(struct zt_afile *f);

// the whole new content of path in one call: open, write n bytes of buf, commit (as above)
enum zt_status zt_file_replace(const char *kind, const char *path, const void *buf, size_t n);

// write all of buf to fd (short writes and EINTR retried); 0 on success, -1 with errno set
int zt_write_all(int fd, const void *buf, size_t n);

// Open path for reading only if it is a regular file: a FIFO or a device is refused before
// anything could block on it (the open itself is non-blocking, then checked with fstat). The
// descriptor (O_CLOEXEC, blocking again) or -1 with errno set: open's errno, or EINVAL when path
// is not a regular file. *size: the file's size (may be NULL).
int zt_file_open_regular(const char *path, int64_t *size);

// zt_file_open_regular for an input of a kind ("tokens", "safetensors", ...): ZT_OK with *fd,
// or ZT_ERR_IO "<kind> <path>: not a regular file" / "<kind> <path>: cannot open (<errno>)".
enum zt_status zt_file_open_input(const char *kind, const char *path, int *fd, int64_t *size);

// Whether the file name or path ends with suffix (".json").
int zt_path_has_suffix(const char *path, const char *suffix);

// Read the regular file path into a NUL-terminated buffer of *len bytes (owner: caller, free).
// 0 on success; -1 with errno set: open's errno, EINVAL when path is not a regular file, EFBIG
// when it holds more than max bytes (*len is then its size), ENOMEM, EIO on a read error.
int zt_file_read_all(const char *path, size_t max, char **buf, size_t *len);

// Remove the files of dir (a flat directory: no subdirectories), then dir itself; best effort
// (what cannot be removed stays).
void zt_file_remove_dir(const char *dir);

// mkdir -p: create path and its missing parents with mode (an existing directory is fine). 0 on
// success; -1 with errno set: mkdir's (the first parent's failure when that is why path could not
// be made), ENOTDIR when path exists and is not a directory, ENAMETOOLONG past PATH_MAX.
int zt_file_mkdirs(const char *path, mode_t mode);

// fsync the directory dir, so that a rename or creation in it survives a crash; 0 on success,
// -1 with errno set (some filesystems refuse fsync on directories: callers decide).
int zt_file_fsync_dir(const char *dir);

#endif /* ZT_FILE_H */
