/*
 * graph/checkpoint_impl.h: what the checkpoint files of graph/ share among themselves; not
 * installed, not for apps (their interface is zt_checkpoint.h).
 *
 *   checkpoint_meta.c    meta.json: built at a save, read and checked at a load
 *   checkpoint_save.c    the collective save (begin/end), publishing a tag, keep_last
 *   checkpoint_load.c    finding tags (`latest`, listing) and the collective load
 *   checkpoint_import.c  a step-0 checkpoint from a safetensors file
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

/* meta.json's text for the engine's state after step `step` as tag `tag`, with the members of
 * the JSON object `extra` (may be NULL) added; NULL when out of memory (caller frees). */
char *zt_checkpoint_meta_build(zt_engine_t e, const char *tag, int64_t step, const char *extra);
/* meta.json's text for tag step0 made from the weights in st (read from source); caller frees. */
char *zt_checkpoint_meta_build_import(const struct zt_safetensors *st, const char *source);
/* The engine's tensors against the tag's meta.json table: a clear message naming the first
 * missing or differently shaped tensor before any shard is read (ZT_ERR_CKPT_CORRUPT). */
enum zt_status zt_checkpoint_meta_check_tensors(zt_engine_t e, const char *tagdir);
/* The training state of the tag's meta.json (updates applied, the fp16 loss scaler) into the
 * engine. */
enum zt_status zt_checkpoint_meta_load_train_state(zt_engine_t e, const char *tagdir,
                                                   const struct zt_ckpt_info *info);

/* Rank 0, once every shard is in partial (DIR/.<tag>.partial): write meta.json there (last:
 * its presence marks a complete tag), then publish the tag (io/zt_ckpt_dir.h). Frees meta; a
 * NULL meta is an out-of-memory failure. */
enum zt_status zt_checkpoint_publish(const char *dir, const char *tag, const char *partial,
                                     char *meta);

#endif /* ZT_CHECKPOINT_IMPL_H */
