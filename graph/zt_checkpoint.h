/*
 * graph/zt_checkpoint.h: training checkpoints: a directory of tags, each one meta.json plus one
 * shard file per rank (io/zt_ckpt.h), and `latest` naming the newest complete tag.
 *
 * Layer: graph/ (checkpoint_meta.c, checkpoint_save.c, checkpoint_load.c, checkpoint_import.c),
 * on io/zt_ckpt_dir.h (the directory protocol) and io/zt_ckpt.h (shard files). Layout and
 * guarantees: docs/checkpoints.md.
 *
 *   DIR/latest            the newest complete tag's name (replaced atomically, last)
 *   DIR/<tag>/meta.json   format, step, world size, stage, tensors, partition, config, ...
 *   DIR/<tag>/rank<R>.zts rank R's rows of every fp32 value, exp_avg and exp_avg_sq
 *
 * A save writes into DIR/.<tag>.partial, every rank its shard, then rank 0 writes meta.json,
 * renames the directory into place, fsyncs DIR and only then replaces `latest`; older tags go
 * (keep_last) only after that. A failure anywhere (disk full included) leaves the previous tags
 * and `latest` as they were. A checkpoint loads into any world size and ZeRO stage.
 */
#ifndef ZT_CHECKPOINT_H
#define ZT_CHECKPOINT_H

#include <stddef.h>     /* size_t */
#include <stdint.h>     /* int64_t */
#include "zt_ckpt.h"    /* struct zt_shard_set */
#include "zt_config.h"  /* struct zt_model_shape */
#include "zt_engine.h"  /* zt_engine_t */
#include "zt_status.h"  /* enum zt_status */

#ifdef __cplusplus
extern "C" {
#endif

#define ZT_CKPT_FORMAT 1

struct zt_ckpt_info { /* from meta.json */
    int format;
    int64_t step;           /* optimizer steps done; training resumes at step + 1 */
    int world_size, zero_stage;
    char tag[128];
    uint64_t run_id;        /* the run that wrote it; 0: written before run ids and checksums */
    int checksummed;        /* meta.json carried its checksum, and it matched */
};

/* Collective: every rank calls it between steps. Saves the engine's state after step `step` as
 * DIR/step<step> (an existing tag of that name is replaced only once the new one is complete).
 * extra: the text of a JSON object whose members are added to meta.json (e.g. "model", "data"),
 * or NULL. keep_last > 0: then removes this run's oldest step<N> tags beyond the newest
 * keep_last (tags of other names, such as an imported one, and other runs' tags stay). */
enum zt_status zt_checkpoint_save(zt_engine_t e, const char *dir, int64_t step,
                                  const char *extra, int keep_last);
/* The same in two halves, so the shards are written while training goes on (the trainer's
 * way). _begin: at the step boundary right after step `step` (zt_engine_step_wait returned, the
 * next step not submitted): prepares DIR/.<tag>.partial, starts this rank's shard in the
 * background (zt_engine_save_begin) and takes meta.json's content. _end: any time later (the
 * trainer: after the next step): waits for the shard, then all ranks agree, rank 0 publishes
 * (meta.json, rename, latest) and prunes as zt_checkpoint_save does. Both collective; info
 * (may be NULL) gets this rank's shard figures. _end frees s whatever happens. */
struct zt_ckpt_save;
enum zt_status zt_checkpoint_save_begin(zt_engine_t e, const char *dir, int64_t step,
                                        const char *extra, int keep_last,
                                        struct zt_ckpt_save **s);
enum zt_status zt_checkpoint_save_end(struct zt_ckpt_save *s, struct zt_save_info *info);
/* Not collective, for a failing run: waits for this rank's shard and forgets the save (the
 * hidden DIR/.<tag>.partial stays; the next save of that tag clears it). */
void zt_checkpoint_save_abandon(struct zt_ckpt_save *s);
/* A checkpoint directory (its `latest` is followed) or a tag directory -> the tag directory. */
enum zt_status zt_checkpoint_resolve(const char *path, char *tagdir, size_t n);
/* Read and check a tag's meta.json: a newer format is refused, and so is content that does not
 * match its checksum (meta_crc32c), or a meta.json that lost its checksum but records a run id.
 * Every reader of meta.json checks it this way. */
enum zt_status zt_checkpoint_info(const char *tagdir, struct zt_ckpt_info *info);
/* A top-level member of a tag's meta.json (checked as zt_checkpoint_info checks it) as JSON
 * text in *text (malloc'd; NULL when the member is absent). */
enum zt_status zt_checkpoint_meta_member(const char *tagdir, const char *name, char **text);
/* Collective, before a load (the model built, no shard read): the model's tensors against the
 * tag's table (naming the first tensor that differs), then every field of its shape against
 * meta.json's "model" (absent in an imported tag: nothing more to check), naming the field,
 * the checkpoint's value and model_name's. */
enum zt_status zt_checkpoint_check_model(zt_engine_t e, const char *tagdir,
                                         const struct zt_model_shape *shape,
                                         const char *model_name);
/* Replace the engine's state with a tag's (written by any world size and stage). Every rank
 * calls it; all succeed or all fail. */
enum zt_status zt_checkpoint_load(zt_engine_t e, const char *tagdir, struct zt_ckpt_info *info);

/* The complete tags in DIR (subdirectories with a readable meta.json), by ascending step
 * (*t: caller frees). */
struct zt_ckpt_tag {
    char name[256];
    struct zt_ckpt_info info;
};
enum zt_status zt_checkpoint_list(const char *dir, struct zt_ckpt_tag **t, int *n);

/* meta.json's tensor table, in the model's declaration order (*t: caller frees). */
#define ZT_CKPT_MAX_DIMS 8
struct zt_ckpt_tensor {
    char name[160];
    int ndim;
    int64_t shape[ZT_CKPT_MAX_DIMS];
};
enum zt_status zt_checkpoint_tensors(const char *tagdir, struct zt_ckpt_tensor **t, int *n);
/* Open the tag's rank files (every one must exist) as one set (io/zt_ckpt.h); each must be the
 * shard of this checkpoint (run id, step, rank, world size: zt_shard_set_check_id). */
enum zt_status zt_checkpoint_open_shards(const char *tagdir, const struct zt_ckpt_info *info,
                                         struct zt_shard_set *s);
/* A checkpoint to start training from given weights: one rank, stage 0, step 0, the weights of
 * a safetensors file in F32/BF16/F16, zero moments. tag NULL: DIR/step0 and DIR/latest, in a DIR
 * that holds no checkpoint yet (one that does is refused). tag given: DIR/<tag> beside what DIR
 * holds (an existing tag of that name is refused); `latest` moves to it when set_latest or when
 * DIR has none. DIR is locked while written (zt_checkpoint_lock). */
enum zt_status zt_checkpoint_import(const char *safetensors, const char *dir, const char *tag,
                                    int set_latest);
/* A name zt_checkpoint_import accepts as a tag: 1-63 characters, no '/', not starting with
 * '.', not "latest" (else ZT_ERR_INVALID naming it and what is expected). */
enum zt_status zt_checkpoint_check_tag_name(const char *tag);

/* One writer per checkpoint directory: rank 0 of the job takes DIR/.lock (DIR created), held
 * until the process ends; the other ranks do nothing (not collective). Held by another process:
 * ZT_ERR_IO, "WHAT DIR is in use by pid P on host H since T" (what: how the user named DIR, e.g.
 * "--save-dir"). */
enum zt_status zt_checkpoint_lock(const char *dir, const char *what);

#ifdef __cplusplus
}
#endif
#endif /* ZT_CHECKPOINT_H */
