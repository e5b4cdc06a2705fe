/*
 * graph/checkpoint_load.c: finding checkpoints and loading one (zt_checkpoint.h): following
 * `latest`, listing a directory's tags, and the collective load.
 *
 * Layer: graph/. A load checks meta.json against the model first (checkpoint_meta.c) and
 * every shard's header against meta.json (checkpoint_identity.c), then the engine reads the
 * rows of its own shard from every rank file (zt_engine_load_shards), so a checkpoint loads
 * into any world size and ZeRO stage.
 */
#include <stdio.h>           /* snprintf */
#include <stdlib.h>          /* realloc, qsort, free */
#include <string.h>          /* strcmp */
#include "checkpoint_impl.h" /* this room's shared declarations */
#include "zt_ckpt_dir.h"     /* the directory protocol, shard paths */

enum zt_status zt_checkpoint_resolve(const char *path, char *tagdir, size_t n) {
    return zt_ckpt_dir_resolve(path, tagdir, n);
}

/* rank 0: the checkpoint's tensor table is the whole pipeline's, name by name, in order */
static enum zt_status same_table(const struct zt_engine_tensor *t, int n, const char *tagdir) {
    struct zt_ckpt_tensor *c;
    int nc;
    ZT_CHECK(zt_checkpoint_tensors(tagdir, &c, &nc));
    int k = 0;
    while (k < n && k < nc && strcmp(t[k].name, c[k].name) == 0) k++;
    enum zt_status rc = ZT_OK;
    if (k < n || k < nc)
        rc = zt_error_set(ZT_ERR_CKPT_CORRUPT, "checkpoint %s/meta.json: %d tensors, the "
                          "pipeline's stages hold %d; first difference at tensor %d (%s, "
                          "expected %s): another model's checkpoint?", tagdir, nc, n, k,
                          k < nc ? c[k].name : "none", k < n ? t[k].name : "none");
    free(c);
    return rc;
}

/* A pipeline stage holds some of the model's tensors: that the checkpoint has no others is
 * checked against every stage's together (collective; the outcome agreed on) */
static enum zt_status check_pipeline_tensors(zt_engine_t e, const char *tagdir,
                                             enum zt_status rc) {
    struct zt_engine_tensor *t = NULL;
    int n = 0;
    const enum zt_status trc = zt_engine_pipe_tensors(e, &t, &n);
    if (rc == ZT_OK) rc = trc;
    if (rc == ZT_OK && t) rc = same_table(t, n, tagdir); /* rank 0 */
    free(t);
    return zt_checkpoint_agree(rc, "checking the tensors", tagdir);
}

enum zt_status zt_checkpoint_load(zt_engine_t e, const char *tagdir, struct zt_ckpt_info *info) {
    enum zt_status rc = zt_checkpoint_info(tagdir, info);
    if (rc == ZT_OK) rc = zt_checkpoint_meta_check_tensors(e, tagdir);
    int stages = 1;
    zt_engine_pipe_stage(e, &stages);
    if (stages > 1) rc = check_pipeline_tensors(e, tagdir, rc);
    if (rc == ZT_OK) rc = zt_checkpoint_check_shard_ids(tagdir, info); /* headers only */
    char **paths = NULL;
    if (rc == ZT_OK) rc = zt_ckpt_dir_shard_paths(tagdir, info->world_size, &paths);
    if (rc == ZT_OK)
        rc = zt_engine_load_shards(e, (const char *const *)paths, info->world_size);
    zt_ckpt_dir_free_paths(paths, info->world_size);
    if (rc == ZT_OK) rc = zt_checkpoint_meta_load_train_state(e, tagdir, info);
    if (rc == ZT_OK) zt_checkpoint_adopt_run_id(info->run_id); /* the run goes on */
    return zt_checkpoint_agree(rc, "loading", tagdir);
}

// ----------------------------------------------------------------------------
// listing

/* the tags found so far */
struct tag_list {
    const char *dir;
    struct zt_ckpt_tag *t;
    int n, cap;
};

/* a directory entry with a readable meta.json is a tag; anything else is left alone */
static enum zt_status add_if_tag(void *arg, const char *name, const char *path) {
    struct tag_list *l = arg;
    struct zt_ckpt_info info;
    if (zt_checkpoint_info(path, &info) != ZT_OK) return ZT_OK;
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 16;
        struct zt_ckpt_tag *grown = realloc(l->t, (size_t)l->cap * sizeof *grown);
        if (!grown) return zt_error_set(ZT_ERR_NOMEM, "checkpoint %s: out of memory", l->dir);
        l->t = grown;
    }
    l->t[l->n].info = info;
    snprintf(l->t[l->n].name, sizeof l->t[l->n].name, "%s", name);
    l->n++;
    return ZT_OK;
}

static int by_step(const void *a, const void *b) {
    int64_t x = ((const struct zt_ckpt_tag *)a)->info.step;
    int64_t y = ((const struct zt_ckpt_tag *)b)->info.step;
    return x < y ? -1 : x > y;
}

enum zt_status zt_checkpoint_list(const char *dir, struct zt_ckpt_tag **out, int *n) {
    *out = NULL;
    *n = 0;
    struct tag_list l = {dir, NULL, 0, 0};
    enum zt_status rc = zt_ckpt_dir_each_entry(dir, sizeof l.t->name, add_if_tag, &l);
    if (rc != ZT_OK) {
        free(l.t);
        return rc;
    }
    if (l.n > 1) qsort(l.t, (size_t)l.n, sizeof *l.t, by_step);
    *out = l.t;
    *n = l.n;
    return ZT_OK;
}
