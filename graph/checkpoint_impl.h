/*
 * graph/checkpoint_impl.h: what the checkpoint files of graph/ share among themselves; not
 * installed, not for apps (their interface is zt_checkpoint.h).
 *
 *   checkpoint_meta.c    meta.json: built at a save, read and checked at a load
 *   checkpoint_save.c    the collective save (begin/end), publishing a tag, keep_last
 *   checkpoint_load.c    finding tags (`latest`, listing) and the collective load
 *   checkpoint_import.c  a step-0 checkpoint from a safetensors file
 *   checkpoint_identity.c the run id, and each shard's identity checked against meta.json
 *   checkpoint_lock.c    one writer per checkpoint directory (rank 0 holds DIR/.lock)
 *
 * Layer: graph/. The directory protocol (mkdir, rename, `latest`, fsync) is io/zt_ckpt_dir.h;
 * the shard files are io/zt_ckpt.h, written and read by the engine (zt_engine.h).
 */
#ifndef ZT_CHECKPOINT_IMPL_H
#define ZT_CHECKPOINT_IMPL_H

#include <stdint.h>          /* int64_t */
#include "zt_checkpoint.h"   /* struct zt_ckpt_info */
#include "zt_engine.h"       /* zt_engine_t */
#include "zt_safetensors.h"  /* struct zt_safetensors */
#include "zt_status.h"       /* enum zt_status */

/* Every rank passes its outcome; all learn whether any failed, so that all succeed or all fail
 * together and no rank waits in a collective for one that gave up. A rank that did not fail
 * reports the other's failure ("checkpoint PATH: WHAT failed on another rank"). */
enum zt_status zt_checkpoint_agree(enum zt_status rc, const char *what, const char *path);

/* meta.json's text for the engine's state after step `step` as tag `tag` of run run_id, with
 * the members of the JSON object `extra` (may be NULL) added, and last its checksum
 * (meta_crc32c); NULL when out of memory (caller frees). table[0..n): a pipeline's tensors of
 * every stage (zt_engine_pipe_tensors), or NULL for the engine's own. */
char *zt_checkpoint_meta_build(zt_engine_t e, const char *tag, int64_t step, const char *extra,
                               uint64_t run_id, const struct zt_engine_tensor *table, int n);
/* meta.json's text for a step-0 tag made from the weights in st (read from source); caller
 * frees. */
char *zt_checkpoint_meta_build_import(const struct zt_safetensors *st, const char *source,
                                      const char *tag, uint64_t run_id);
/* The engine's tensors against the tag's meta.json table: a clear message naming the first
 * missing or differently shaped tensor before any shard is read (ZT_ERR_CKPT_CORRUPT). */
enum zt_status zt_checkpoint_meta_check_tensors(zt_engine_t e, const char *tagdir);
/* The training state of the tag's meta.json (updates applied, the fp16 loss scaler) into the
 * engine. */
enum zt_status zt_checkpoint_meta_load_train_state(zt_engine_t e, const char *tagdir,
                                                   const struct zt_ckpt_info *info);

/* Rank 0, once every shard is in partial (DIR/.<tag>.partial): write meta.json there (last:
 * its presence marks a complete tag), then publish the tag (io/zt_ckpt_dir.h), moving `latest`
 * to it when set_latest. Frees meta; a NULL meta is an out-of-memory failure. */
enum zt_status zt_checkpoint_publish(const char *dir, const char *tag, const char *partial,
                                     char *meta, int set_latest);

/* The run's id (collective the first time: rank 0 makes it, every rank gets it). */
enum zt_status zt_checkpoint_run_id(uint64_t *id);
/* A fresh random run id (never 0). */
uint64_t zt_checkpoint_new_run_id(void);
/* The run goes on from a checkpoint of run id (0: one that records none: a new id is made at
 * the next save). */
void zt_checkpoint_adopt_run_id(uint64_t id);
/* Every shard of the tag is the one meta.json names (run id, step, rank, world size): the
 * headers are read, not the data. */
enum zt_status zt_checkpoint_check_shard_ids(const char *tagdir, const struct zt_ckpt_info *info);

/* zt_engine_save_begin (zt_engine.h), the shard's header recording id (graph/engine_ckpt.c). */
struct zt_shard_id;
enum zt_status zt_engine_save_begin_id(zt_engine_t e, const char *path,
                                       const struct zt_shard_id *id);

#endif /* ZT_CHECKPOINT_IMPL_H */
