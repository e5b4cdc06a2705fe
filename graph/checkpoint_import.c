/*
 * graph/checkpoint_import.c: a checkpoint made from weights (zt_checkpoint_import): one tag
 * (DIR/step0, or DIR/<tag> when named) written by one rank at stage 0, the safetensors file's
 * tensors as fp32 parameters with zero Adam moments, published like any save, so that
 * `zt-train --resume DIR` (or DIR/<tag>) starts from them.
 *
 * Into a directory that already holds checkpoints only as a named tag beside them, so that
 * `latest` never moves unasked.
 *
 * Layer: graph/. Needs no engine and no runtime: the shard is written directly with
 * io/zt_ckpt.h's writer, one tensor in memory at a time.
 */
#include <stdio.h>           /* snprintf */
#include <stdlib.h>          /* malloc, calloc, free */
#include <string.h>          /* strlen, strchr, strcmp */
#include <sys/stat.h>        /* stat */
#include "checkpoint_impl.h" /* this room's shared declarations */
#include "zt_ckpt.h"         /* shard writer */
#include "zt_ckpt_dir.h"     /* the directory protocol */

/* the weights of a safetensors file and the buffers to copy them */
struct import {
    const char *source;       /* the safetensors path, for messages */
    struct zt_safetensors st;
    struct zt_shard_rec *rec; /* [3 * st.n]: parameter, exp_avg, exp_avg_sq of each tensor */
    float *values, *zeros;    /* [largest tensor] */
};

static int64_t numel(const struct zt_st_tensor *t) {
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
    return n;
}

static enum zt_status alloc_buffers(struct import *im) {
    int64_t largest = 1;
    for (int i = 0; i < im->st.n; i++) {
        int64_t n = numel(&im->st.t[i]);
        largest = n > largest ? n : largest;
    }
    im->rec = calloc((size_t)im->st.n * 3 + 1, sizeof *im->rec);
    if (!im->rec || !(im->values = malloc((size_t)largest * 4)) ||
        !(im->zeros = calloc((size_t)largest, 4)))
        return zt_error_set(ZT_ERR_NOMEM, "import %s: out of memory", im->source);
    return ZT_OK;
}

/* three records per tensor (its rows x cols in each role, all rows in one rank's shard);
 * a tensor must have rows (no scalars) and a name that fits a shard record */
static enum zt_status plan_records(struct import *im) {
    for (int i = 0; i < im->st.n; i++) {
        const struct zt_st_tensor *t = &im->st.t[i];
        if (t->ndim < 1 || strlen(t->name) >= ZT_SHARD_MAX_NAME)
            return zt_error_set(ZT_ERR_CKPT_CORRUPT, "import %s: tensor %s: a scalar or too "
                                "long a name", im->source, t->name);
        int64_t rows = t->ndim == 1 ? 1 : t->shape[0];
        for (int role = 0; role < 3; role++) {
            struct zt_shard_rec *r = &im->rec[3 * i + role];
            snprintf(r->name, sizeof r->name, "%s", t->name);
            r->role = role;
            r->rows = r->row1 = rows;
            r->cols = numel(t) / rows;
        }
    }
    return ZT_OK;
}

/* the shard: each tensor's values (converted to fp32), then zeros for both moments */
static enum zt_status write_shard(struct import *im, const char *partial, uint64_t run_id) {
    char path[ZT_CKPT_PATH_BYTES + 32];
    zt_ckpt_dir_shard_path(path, sizeof path, partial, 0);
    struct zt_shard_writer w;
    const struct zt_shard_id id = {.run_id = run_id, .step = 0, .rank = 0, .world = 1};
    ZT_CHECK(zt_shard_create(&w, path, &id, im->rec, 3 * im->st.n));
    enum zt_status rc = ZT_OK;
    for (int i = 0; rc == ZT_OK && i < im->st.n; i++) {
        const struct zt_st_tensor *t = &im->st.t[i];
        int64_t n = im->rec[3 * i].rows * im->rec[3 * i].cols;
        rc = zt_st_read_f32(&im->st, t->name, t->ndim, t->shape, im->values);
        if (rc == ZT_OK) rc = zt_shard_append(&w, im->values, n);
        for (int k = 0; k < 2 && rc == ZT_OK; k++) rc = zt_shard_append(&w, im->zeros, n);
        if (rc != ZT_OK) zt_shard_abort(&w, rc);
    }
    if (rc == ZT_OK) rc = zt_shard_commit(&w);
    return rc;
}

enum zt_status zt_checkpoint_check_tag_name(const char *tag) {
    if (!tag[0] || strlen(tag) >= 64 || strchr(tag, '/') || tag[0] == '.' ||
        strcmp(tag, "latest") == 0)
        return zt_error_set(ZT_ERR_INVALID, "tag '%s': expected a name of 1-63 characters, "
                            "without '/', not starting with '.', not 'latest'", tag);
    return ZT_OK;
}

/* Where the weights may go in DIR: without a tag, DIR must hold no checkpoint yet (its
 * `latest` would move silently); with one, that tag must not exist. *has_latest: whether DIR
 * has a `latest`. */
static enum zt_status check_destination(const char *dir, const char *tag, int *has_latest) {
    char latest[ZT_CKPT_PATH_BYTES + 16], at[ZT_CKPT_PATH_BYTES + 80];
    snprintf(latest, sizeof latest, "%s/latest", dir);
    struct stat sb;
    *has_latest = stat(latest, &sb) == 0;
    if (tag) {
        snprintf(at, sizeof at, "%s/%s", dir, tag);
        if (stat(at, &sb) == 0)
            return zt_error_set(ZT_ERR_IO, "checkpoint %s: tag %s exists already (expected a new "
                                "tag name)", dir, tag);
        return ZT_OK;
    }
    struct zt_ckpt_tag *t = NULL;
    int n = 0;
    ZT_CHECK(zt_checkpoint_list(dir, &t, &n)); /* one that cannot be read is not empty */
    free(t);
    if (*has_latest || n > 0)
        return zt_error_set(ZT_ERR_IO, "checkpoint %s: already holds checkpoints (%d tag(s)%s); "
                            "importing would move its latest: give a tag name to add the weights "
                            "beside them (zt-ckpt import --tag NAME), or a new directory", dir,
                            n, *has_latest ? " and latest" : "");
    return ZT_OK;
}

enum zt_status zt_checkpoint_import(const char *source, const char *dir, const char *tag,
                                    int set_latest) {
    if (strlen(dir) + 80 > ZT_CKPT_PATH_BYTES)
        return zt_error_set(ZT_ERR_INVALID, "checkpoint %s: path too long", dir);
    if (tag) ZT_CHECK(zt_checkpoint_check_tag_name(tag));
    struct import im = {.source = source};
    ZT_CHECK(zt_st_open(&im.st, source));
    im.st.finite_only = 1; /* a NaN or Inf weight is an error naming it, as at --init-from */
    int has_latest = 0;
    enum zt_status rc = zt_checkpoint_lock(dir, "checkpoint directory");
    if (rc == ZT_OK) rc = check_destination(dir, tag, &has_latest);
    if (!tag) tag = "step0";
    char partial[ZT_CKPT_PATH_BYTES];
    zt_ckpt_dir_partial_path(partial, sizeof partial, dir, tag);
    const uint64_t run_id = zt_checkpoint_new_run_id(); /* a new run starts from these weights */
    if (rc == ZT_OK) rc = alloc_buffers(&im);
    if (rc == ZT_OK) rc = plan_records(&im);
    const int partial_is_ours = rc == ZT_OK; /* DIR locked, the tag free: ours to remove */
    if (rc == ZT_OK) rc = zt_ckpt_dir_prepare(dir, tag);
    if (rc == ZT_OK) rc = write_shard(&im, partial, run_id);
    if (rc == ZT_OK)
        rc = zt_checkpoint_publish(dir, tag, partial,
                                   zt_checkpoint_meta_build_import(&im.st, source, tag, run_id),
                                   set_latest || !has_latest);
    if (rc != ZT_OK && partial_is_ours) zt_ckpt_dir_discard(dir, tag);
    free(im.rec);
    free(im.values);
    free(im.zeros);
    zt_st_close(&im.st);
    return rc;
}
