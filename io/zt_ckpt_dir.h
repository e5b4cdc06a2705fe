/*
 * io/zt_ckpt_dir.h: the checkpoint directory protocol: where a save writes, how a tag is
 * published so that a crash at any moment leaves the previous tags and `latest` intact, how
 * `latest` is followed, and how old tags are removed.
 *
 * Layer: io/ (platform; no StarPU, no engine). What a tag holds (meta.json's content, the shard
 * files' content) is graph/'s and io/ckpt.c's business; this module moves directories and the
 * `latest` file. Layout (docs/checkpoints.md):
 *
 *   DIR/latest             the newest complete tag's name and a newline (replaced atomically)
 *   DIR/<tag>/             a complete tag: meta.json (written last) and rank<R>.zts per rank
 *   DIR/.<tag>.partial/    a save in progress (or one that crashed: removed by the next save)
 *   DIR/.<tag>.old/        the previous copy of a tag being saved again, until `latest` is new
 *   DIR/.<tag>.dead/       a tag being removed (keep_last), out of sight before it is emptied
 *
 * Every error is one line "checkpoint <path>: ..." (zt_status.h).
 */
#ifndef ZT_CKPT_DIR_H
#define ZT_CKPT_DIR_H

#include <stddef.h>    /* size_t */
#include "zt_status.h" /* enum zt_status */

#ifdef __cplusplus
extern "C" {
#endif

/* The longest path the protocol builds (a directory's path must leave room for its tag names). */
#define ZT_CKPT_PATH_BYTES 1024

/* DIR and every missing parent, like mkdir -p (an existing directory is fine). */
enum zt_status zt_ckpt_dir_create(const char *dir);

/* The directory a save of tag fills: DIR/.<tag>.partial. */
void zt_ckpt_dir_partial_path(char *buf, size_t n, const char *dir, const char *tag);
/* Create DIR (and its parents) and an empty DIR/.<tag>.partial; a leftover of that name (a
 * crashed save's) is removed first. */
enum zt_status zt_ckpt_dir_prepare(const char *dir, const char *tag);

/* Publish DIR/.<tag>.partial (its files complete and fsynced, meta.json last) as DIR/<tag>:
 * an existing DIR/<tag> is moved aside to DIR/.<tag>.old, the partial directory renamed into
 * place, DIR fsynced, DIR/latest replaced atomically, and only then the old copy removed.
 * A failure leaves the previous tag and `latest` as they were. */
enum zt_status zt_ckpt_dir_publish(const char *dir, const char *tag);
/* The same, replacing `latest` only when set_latest != 0 (a tag added beside the others). */
enum zt_status zt_ckpt_dir_publish_tag(const char *dir, const char *tag, int set_latest);

/* Remove DIR/.<tag>.partial and its files (a save that failed). */
void zt_ckpt_dir_discard(const char *dir, const char *tag);

/* Remove what crashed saves and removals left: DIR/.<tag>.partial and DIR/.<tag>.dead
 * directories and DIR/latest.tmp-* files. */
void zt_ckpt_dir_sweep(const char *dir);

/* Remove tag DIR/<tag>: renamed to DIR/.<tag>.dead in one step, then emptied, so that a crash
 * in between never leaves a visible tag without its files. 0 on success, -1 when the rename
 * failed (the tag is left as it is). */
int zt_ckpt_dir_remove_tag(const char *dir, const char *tag);

/* Called for each entry of DIR that may be a tag: name (not hidden, shorter than max_name)
 * and path DIR/name. A status other than ZT_OK stops the walk and is returned. */
typedef enum zt_status (*zt_ckpt_dir_visit_fn)(void *arg, const char *name, const char *path);
/* Walk DIR's possible tags (ZT_ERR_IO when DIR cannot be opened). */
enum zt_status zt_ckpt_dir_each_entry(const char *dir, size_t max_name,
                                      zt_ckpt_dir_visit_fn visit, void *arg);

/* PATH is a tag directory (it holds meta.json) or a checkpoint directory (its `latest` is
 * followed; when the tag `latest` names is missing because a save of the same tag stopped
 * between its two renames, DIR/.<tag>.old is used) -> tagdir. ZT_ERR_IO for a path that is
 * neither, ZT_ERR_CKPT_CORRUPT for a bad or dangling `latest`. */
enum zt_status zt_ckpt_dir_resolve(const char *path, char *tagdir, size_t n);

/* The whole of a small checkpoint file (what: its role for messages, "metadata", ...) as a
 * NUL-terminated string (*text: caller frees). ZT_ERR_IO when it cannot be read. */
enum zt_status zt_ckpt_dir_read_text(const char *path, const char *what, char **text);

/* Rank r's shard file name, "rank<r>.zts", as meta.json lists it. */
void zt_ckpt_dir_shard_name(char *buf, size_t n, int rank);
/* Its path in directory tagdir. */
void zt_ckpt_dir_shard_path(char *buf, size_t n, const char *tagdir, int rank);
/* The paths of a tag's n shard files, each of which must exist (*paths: n strings; free them
 * with zt_ckpt_dir_free_paths, also after a failure). ZT_ERR_CKPT_CORRUPT names a missing one. */
enum zt_status zt_ckpt_dir_shard_paths(const char *tagdir, int n, char ***paths);
void zt_ckpt_dir_free_paths(char **paths, int n);

#ifdef __cplusplus
}
#endif
#endif /* ZT_CKPT_DIR_H */
