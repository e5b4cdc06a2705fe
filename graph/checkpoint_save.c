/*
 * graph/checkpoint_save.c: the collective checkpoint save (zt_checkpoint.h): every rank's shard
 * into DIR/.<tag>.partial, then rank 0 publishes the tag and applies keep_last.
 *
 * Layer: graph/. The shard of a rank is written by the engine in the background
 * (zt_engine_save_begin/_end in graph/engine_ckpt.c, on io/zt_ckpt_writer.h); the directory
 * steps are io/zt_ckpt_dir.h; meta.json is checkpoint_meta.c. Ranks agree after each phase,
 * so all succeed or all fail together and no rank waits in a collective for one that gave up.
 */
#include <stdio.h>           /* snprintf */
#include <stdlib.h>          /* calloc, free */
#include <string.h>          /* strcmp, strlen */
#include "checkpoint_impl.h" /* this room's shared declarations */
#include "zt_ckpt_dir.h"     /* the directory protocol */
#include "zt_comm.h"         /* zt_comm_count_failed, zt_comm_rank, zt_comm_size */
#include "zt_file.h"         /* zt_file_replace */
#include "zt_log.h"          /* ZT_LOG_I */

enum zt_status zt_checkpoint_agree(enum zt_status rc, const char *what, const char *path) {
    if (zt_comm_size() == 1) return rc;
    int nfailed = 0;
    enum zt_status crc = zt_comm_count_failed(rc != ZT_OK, &nfailed);
    if (rc != ZT_OK) return rc;
    if (crc != ZT_OK) return crc;
    if (nfailed > 0)
        return zt_error_set(ZT_ERR_PEER, "checkpoint %s: %s failed on another rank (see its "
                            "message)", path, what);
    return ZT_OK;
}

enum zt_status zt_checkpoint_publish(const char *dir, const char *tag, const char *partial,
                                     char *meta, int set_latest) {
    if (!meta) return zt_error_set(ZT_ERR_NOMEM, "checkpoint %s: out of memory", dir);
    char path[ZT_CKPT_PATH_BYTES + 16];
    snprintf(path, sizeof path, "%s/meta.json", partial);
    enum zt_status rc = zt_file_replace("checkpoint metadata", path, meta, strlen(meta));
    free(meta);
    ZT_CHECK(rc);
    return zt_ckpt_dir_publish_tag(dir, tag, set_latest);
}

/* whether tag t is one the trainer wrote in run run_id: named step<N> (digits only), with that
 * run id; keep_last prunes no other (an imported or hand-made tag, another run's) */
static int pruneable(const struct zt_ckpt_tag *t, uint64_t run_id) {
    if (strncmp(t->name, "step", 4) != 0 || !t->name[4]) return 0;
    for (const char *c = t->name + 4; *c; c++)
        if (*c < '0' || *c > '9') return 0;
    return t->info.run_id == run_id;
}

/* Rank 0, after a publish: remove the leftovers of crashed saves and removals, then the oldest
 * of run run_id's step<N> tags beyond the newest keep_last (keep_last <= 0: none). The tag
 * just saved, `keep`, always stays, even when the run left tags of higher steps earlier. */
static void prune(const char *dir, const char *keep, int keep_last, uint64_t run_id) {
    zt_ckpt_dir_sweep(dir);
    struct zt_ckpt_tag *t;
    int n;
    if (keep_last <= 0 || zt_checkpoint_list(dir, &t, &n) != ZT_OK) return;
    for (int i = n - 1, kept = 0; i >= 0; i--) { /* newest first */
        int is_keep = strcmp(t[i].name, keep) == 0;
        if (!pruneable(&t[i], run_id) || is_keep || kept < keep_last - 1) {
            kept += !is_keep && pruneable(&t[i], run_id);
            continue;
        }
        if (zt_ckpt_dir_remove_tag(dir, t[i].name) != 0) continue;
        ZT_LOG_I("checkpoint %s: removed tag %s (keep_last %d)", dir, t[i].name, keep_last);
    }
    free(t);
}

// ----------------------------------------------------------------------------
// the save in two halves

struct zt_ckpt_save {
    zt_engine_t e;
    char dir[ZT_CKPT_PATH_BYTES], tag[64], partial[ZT_CKPT_PATH_BYTES];
    int keep_last;
    uint64_t run_id;          /* the run's id: keep_last prunes its tags only */
    char *meta;               /* rank 0: meta.json's text, taken at the step boundary */
    enum zt_status shard_rc;  /* this rank's shard could not be started (message in msg) */
    char msg[1024];
};

enum zt_status zt_checkpoint_save_begin(zt_engine_t e, const char *dir, int64_t step,
                                        const char *extra, int keep_last,
                                        struct zt_ckpt_save **out) {
    *out = NULL;
    if (strlen(dir) + 80 > ZT_CKPT_PATH_BYTES)
        return zt_error_set(ZT_ERR_INVALID, "checkpoint %s: path too long", dir);
    struct zt_ckpt_save *s = calloc(1, sizeof *s);
    if (!s) return zt_error_set(ZT_ERR_NOMEM, "checkpoint %s: out of memory", dir);
    s->e = e;
    s->keep_last = keep_last;
    snprintf(s->dir, sizeof s->dir, "%s", dir);
    snprintf(s->tag, sizeof s->tag, "step%lld", (long long)step);
    zt_ckpt_dir_partial_path(s->partial, sizeof s->partial, dir, s->tag);
    /* one shard per world rank (a pipeline's stages and replicas alike) */
    const int rank = zt_comm_rank();
    struct zt_shard_id id = {.step = step, .rank = rank, .world = zt_comm_size()};
    enum zt_status rc = zt_checkpoint_run_id(&id.run_id); /* the same on every rank */
    int stages = 1, ntable = 0;
    struct zt_engine_tensor *table = NULL; /* a pipeline's tensors, on rank 0 */
    zt_engine_pipe_stage(e, &stages);
    if (stages > 1) { /* collective: every rank takes part, whatever happened before */
        const enum zt_status trc = zt_engine_pipe_tensors(e, &table, &ntable);
        if (rc == ZT_OK) rc = trc;
    }
    if (rc == ZT_OK && rank == 0) rc = zt_ckpt_dir_prepare(dir, s->tag);
    if ((rc = zt_checkpoint_agree(rc, "creating the directory", dir)) != ZT_OK) {
        free(table);
        free(s);
        return rc;
    }
    char shard[ZT_CKPT_PATH_BYTES + 32];
    zt_ckpt_dir_shard_path(shard, sizeof shard, s->partial, rank);
    /* a failure here is agreed on with the others' in zt_checkpoint_save_end */
    if ((s->shard_rc = zt_engine_save_begin_id(e, shard, &id)) != ZT_OK)
        snprintf(s->msg, sizeof s->msg, "%s", zt_error_last());
    s->run_id = id.run_id;
    if (rank == 0)
        s->meta = zt_checkpoint_meta_build(e, s->tag, step, extra, id.run_id, table, ntable);
    free(table);
    *out = s;
    return ZT_OK;
}

enum zt_status zt_checkpoint_save_end(struct zt_ckpt_save *s, struct zt_save_info *info) {
    if (!s) return ZT_OK;
    const int rank = zt_comm_rank();
    enum zt_status rc = s->shard_rc;
    if (rc == ZT_OK)
        rc = zt_engine_save_end(s->e, info);
    else
        zt_error_set(rc, "%s", s->msg); /* the message may have been replaced since _begin */
    rc = zt_checkpoint_agree(rc, "writing a shard", s->dir);
    if (rc == ZT_OK && rank == 0) {
        rc = zt_checkpoint_publish(s->dir, s->tag, s->partial, s->meta, 1);
        s->meta = NULL; /* zt_checkpoint_publish frees it */
    }
    if (rank == 0 && rc != ZT_OK) zt_ckpt_dir_discard(s->dir, s->tag);
    rc = zt_checkpoint_agree(rc, "publishing", s->dir);
    if (rc == ZT_OK && rank == 0) prune(s->dir, s->tag, s->keep_last, s->run_id);
    free(s->meta);
    free(s);
    return rc;
}

void zt_checkpoint_save_abandon(struct zt_ckpt_save *s) {
    if (!s) return;
    if (s->shard_rc == ZT_OK) zt_engine_save_end(s->e, NULL);
    free(s->meta);
    free(s);
}

enum zt_status zt_checkpoint_save(zt_engine_t e, const char *dir, int64_t step,
                                  const char *extra, int keep_last) {
    struct zt_ckpt_save *s;
    ZT_CHECK(zt_checkpoint_save_begin(e, dir, step, extra, keep_last, &s));
    return zt_checkpoint_save_end(s, NULL);
}
