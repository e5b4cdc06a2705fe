/*
 * graph/checkpoint.c: checkpoint directories (zt_checkpoint.h): meta.json, the save protocol
 * (partial directory, every rank's shard, meta, rename, `latest`, keep_last) and loading.
 *
 * Layer: graph/. The shards themselves: zt_engine_save_shard / zt_engine_load_shards
 * (graph/engine.c) on io/ckpt.c. Ranks agree after each phase (zt_comm_sum_double), so all
 * succeed or all fail together and no rank waits in a collective for one that gave up.
 */
#include "zt_checkpoint.h"
#include <cjson/cJSON.h> /* meta.json */
#include <dirent.h>      /* opendir */
#include <errno.h>       /* errno */
#include <fcntl.h>       /* open */
#include <math.h>        /* isfinite */
#include <stdio.h>       /* snprintf, fopen */
#include <stdlib.h>      /* malloc, qsort */
#include <string.h>      /* strcmp, strerror */
#include <sys/stat.h>    /* mkdir, stat */
#include <unistd.h>      /* fsync, rmdir, unlink */
#include "zt_comm.h"     /* zt_comm_sum_double */
#include "zt_file.h"     /* zt_afile */
#include "zt_log.h"      /* ZT_LOG_I */
#include "zt_safetensors.h" /* import */

#define PATH_BYTES 1024

/* all ranks learn whether any failed; a rank that did not fail reports the other's failure */
static enum zt_status agree(enum zt_status rc, const char *what, const char *path) {
    if (zt_comm_size() == 1) return rc;
    double bad = rc != ZT_OK;
    enum zt_status crc = zt_comm_sum_double(&bad);
    if (rc != ZT_OK) return rc;
    if (crc != ZT_OK) return crc;
    if (bad > 0)
        return zt_error_set(ZT_ERR_IO, "checkpoint %s: %s failed on another rank (see its "
                            "message)", path, what);
    return ZT_OK;
}

static enum zt_status fsync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0 || fsync(fd) != 0) {
        enum zt_status rc = zt_error_set(ZT_ERR_IO, "checkpoint %s: cannot sync the directory "
                                         "(%s)", dir, strerror(errno));
        if (fd >= 0) close(fd);
        return rc;
    }
    close(fd);
    return ZT_OK;
}

/* remove a tag directory (files only inside) */
static void remove_tag_dir(const char *path) {
    DIR *d = opendir(path);
    if (!d) return;
    struct dirent *de;
    char p[PATH_BYTES];
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
            snprintf(p, sizeof p, "%s/%s", path, de->d_name);
            unlink(p);
        }
    closedir(d);
    rmdir(path);
}

static enum zt_status write_text(const char *kind, const char *path, const char *text) {
    struct zt_afile f;
    ZT_CHECK(zt_afile_open(&f, kind, path));
    if (zt_afile_write(&f, text, strlen(text)) != 0) return zt_afile_fail(&f);
    return zt_afile_commit(&f);
}

static char *read_text(const char *path, enum zt_status *rc, const char *kind) {
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    long n = -1;
    if (f && fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (buf = malloc((size_t)n + 1)) && fread(buf, 1, (size_t)n, f) == (size_t)n) {
        buf[n] = '\0';
        fclose(f);
        *rc = ZT_OK;
        return buf;
    }
    *rc = zt_error_set(ZT_ERR_IO, "checkpoint %s: cannot read the %s (%s)", path, kind,
                       f ? "read error" : strerror(errno));
    if (f) fclose(f);
    free(buf);
    return NULL;
}

static const char *sched_name(enum zt_lr_sched_type t) {
    switch (t) {
    case ZT_LR_WARMUP: return "WarmupLR";
    case ZT_LR_WARMUP_DECAY: return "WarmupDecayLR";
    case ZT_LR_WARMUP_COSINE: return "WarmupCosineLR";
    default: return "constant";
    }
}

/* meta.json's text (caller frees) */
/* the fields every meta.json starts with; tensors[] is filled by the caller */
static cJSON *meta_head(const char *tag, int64_t step, int world, int stage, const char *optdev,
                        const char *pardev, cJSON **tensors) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddNumberToObject(m, "format", ZT_CKPT_FORMAT);
    cJSON_AddStringToObject(m, "tag", tag);
    cJSON_AddNumberToObject(m, "step", (double)step);
    cJSON_AddNumberToObject(m, "world_size", world);
    cJSON_AddNumberToObject(m, "zero_stage", stage);
    cJSON *off = cJSON_AddObjectToObject(m, "offload");
    cJSON_AddStringToObject(off, "optimizer", optdev);
    cJSON_AddStringToObject(off, "param", pardev);
    *tensors = cJSON_AddArrayToObject(m, "tensors");
    return m;
}

static void add_tensor(cJSON *ts, const char *name, int ndim, const int64_t *shape) {
    cJSON *t = cJSON_CreateObject();
    cJSON_AddStringToObject(t, "name", name);
    cJSON *sh = cJSON_AddArrayToObject(t, "shape");
    for (int d = 0; d < ndim; d++) cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)shape[d]));
    cJSON_AddItemToArray(ts, t);
}

static char *meta_json(zt_engine_t e, const char *tag, int64_t step, const char *extra) {
    const struct zt_config *c = zt_engine_config(e);
    static const char *const dev[] = {"none", "cpu", "nvme"};
    cJSON *ts;
    cJSON *m = meta_head(tag, step, zt_engine_world_size(e), c->zero_stage,
                         dev[c->offload_optimizer.device], dev[c->offload_param.device], &ts);
    for (int i = 0; i < zt_engine_nparams(e); i++) {
        zt_param_t p = zt_engine_param_at(e, i);
        add_tensor(ts, zt_param_name(p), zt_param_ndim(p), zt_param_shape(p));
    }
    cJSON *part = cJSON_AddArrayToObject(m, "partition");
    for (int r = 0; r < zt_engine_world_size(e); r++) {
        int64_t lo, hi;
        zt_engine_shard_range(e, r, &lo, &hi);
        char file[32];
        snprintf(file, sizeof file, "rank%d.zts", r);
        cJSON *p = cJSON_CreateObject();
        cJSON_AddNumberToObject(p, "rank", r);
        cJSON_AddStringToObject(p, "file", file);
        cJSON *el = cJSON_AddArrayToObject(p, "flat_elements");
        cJSON_AddItemToArray(el, cJSON_CreateNumber((double)lo));
        cJSON_AddItemToArray(el, cJSON_CreateNumber((double)hi));
        cJSON_AddItemToArray(part, p);
    }
    /* Adam's step count and the LR schedule move with the updates applied: the training steps
     * minus those fp16 skipped on overflow */
    struct zt_train_state ts_;
    zt_engine_get_train_state(e, &ts_);
    static const char *const prec[] = {"fp32", "bf16", "fp16"};
    cJSON_AddStringToObject(m, "precision", prec[c->precision]);
    cJSON *opt = cJSON_AddObjectToObject(m, "optimizer");
    cJSON_AddStringToObject(opt, "type", "AdamW");
    cJSON_AddNumberToObject(opt, "step", (double)ts_.applied);
    cJSON *ls = cJSON_AddObjectToObject(m, "lr_scheduler");
    cJSON_AddStringToObject(ls, "type", sched_name(c->sched));
    cJSON_AddNumberToObject(ls, "last_batch_iteration", (double)(ts_.applied - 1));
    cJSON_AddNumberToObject(ls, "lr", zt_config_lr(c, ts_.applied > 0 ? ts_.applied : 1));
    /* DeepSpeed's DynamicLossScaler fields (fp16; a scale of 1 otherwise) */
    cJSON *sc = cJSON_AddObjectToObject(m, "loss_scaler");
    cJSON_AddNumberToObject(sc, "cur_scale", ts_.loss_scale);
    cJSON_AddNumberToObject(sc, "cur_iter", (double)ts_.cur_iter);
    cJSON_AddNumberToObject(sc, "last_overflow_iter", (double)ts_.last_overflow_iter);
    cJSON_AddNumberToObject(sc, "cur_hysteresis", ts_.cur_hysteresis);
    cJSON_AddNumberToObject(sc, "skipped_steps", (double)ts_.skipped);
    cJSON *rng = cJSON_AddObjectToObject(m, "rng");
    cJSON_AddNumberToObject(rng, "seed", (double)c->seed);
    cJSON_AddStringToObject(rng, "note", "the generator is used only for the initial weights "
                                         "(no dropout): nothing else to restore");
    enum zt_status rc;
    char *cfgtext = c->path[0] ? read_text(c->path, &rc, "config") : NULL;
    cJSON *cj = cfgtext ? cJSON_Parse(cfgtext) : NULL;
    free(cfgtext);
    cJSON_AddItemToObject(m, "config", cj ? cj : cJSON_CreateNull());
    cJSON *ex = extra ? cJSON_Parse(extra) : NULL;
    for (cJSON *it = ex ? ex->child : NULL; it; it = it->next)
        cJSON_AddItemToObject(m, it->string, cJSON_Duplicate(it, 1));
    cJSON_Delete(ex);
    char *s = cJSON_Print(m);
    cJSON_Delete(m);
    return s;
}

/* a tag's meta.json parsed (path: its name, for messages); NULL with the error set */
static cJSON *read_meta(const char *tagdir, char *path, size_t n) {
    snprintf(path, n, "%s/meta.json", tagdir);
    enum zt_status rc;
    char *text = read_text(path, &rc, "metadata");
    if (!text) return NULL;
    cJSON *m = cJSON_Parse(text);
    free(text);
    if (!cJSON_IsObject(m)) {
        cJSON_Delete(m);
        zt_error_set(ZT_ERR_CKPT_CORRUPT, "checkpoint %s: not valid JSON", path);
        return NULL;
    }
    return m;
}

enum zt_status zt_checkpoint_info(const char *tagdir, struct zt_ckpt_info *info) {
    memset(info, 0, sizeof *info);
    char path[PATH_BYTES];
    cJSON *m = read_meta(tagdir, path, sizeof path);
    if (!m) return zt_error_last_code();
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(m, "format");
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(m, "step");
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(m, "world_size");
    const cJSON *z = cJSON_GetObjectItemCaseSensitive(m, "zero_stage");
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(m, "tag");
    if (!cJSON_IsNumber(f) || !cJSON_IsNumber(st) || !cJSON_IsNumber(w) || !cJSON_IsNumber(z) ||
        !cJSON_IsString(t) || st->valuedouble < 0 || w->valuedouble < 1 ||
        w->valuedouble > 1 << 20) {
        cJSON_Delete(m);
        return zt_error_set(ZT_ERR_CKPT_CORRUPT, "checkpoint %s: not a zerotask checkpoint's "
                            "metadata (expected format, tag, step, world_size, zero_stage)",
                            path);
    }
    info->format = f->valueint;
    info->step = (int64_t)st->valuedouble;
    info->world_size = w->valueint;
    info->zero_stage = z->valueint;
    snprintf(info->tag, sizeof info->tag, "%s", t->valuestring);
    cJSON_Delete(m);
    if (info->format > ZT_CKPT_FORMAT || info->format < 1)
        return zt_error_set(ZT_ERR_CKPT_CORRUPT, "checkpoint %s: format %d, this zerotask "
                            "reads format %d (written by a newer version?)", path, info->format,
                            ZT_CKPT_FORMAT);
    return ZT_OK;
}

enum zt_status zt_checkpoint_tensors(const char *tagdir, struct zt_ckpt_tensor **out, int *n) {
    *out = NULL;
    *n = 0;
    char path[PATH_BYTES];
    cJSON *m = read_meta(tagdir, path, sizeof path);
    if (!m) return zt_error_last_code();
    const cJSON *ts = cJSON_GetObjectItemCaseSensitive(m, "tensors"), *it;
    int cnt = cJSON_GetArraySize(ts);
    struct zt_ckpt_tensor *t = calloc((size_t)cnt + 1, sizeof *t);
    enum zt_status rc = ZT_OK;
    if (!cJSON_IsArray(ts) || cnt < 1)
        rc = zt_error_set(ZT_ERR_CKPT_CORRUPT, "checkpoint %s: no \"tensors\" table", path);
    else if (!t)
        rc = zt_error_set(ZT_ERR_NOMEM, "checkpoint %s: out of memory", path);
    int i = 0;
    cJSON_ArrayForEach(it, ts) {
        if (rc != ZT_OK) break;
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(it, "name");
        const cJSON *sh = cJSON_GetObjectItemCaseSensitive(it, "shape"), *d;
        int nd = cJSON_GetArraySize(sh);
        if (!cJSON_IsString(nm) || strlen(nm->valuestring) >= sizeof t[i].name ||
            !cJSON_IsArray(sh) || nd < 1 || nd > ZT_CKPT_MAX_DIMS) {
            rc = zt_error_set(ZT_ERR_CKPT_CORRUPT, "checkpoint %s: tensor %d of the table is "
                              "malformed (expected name and shape)", path, i);
            break;
        }
        snprintf(t[i].name, sizeof t[i].name, "%s", nm->valuestring);
        cJSON_ArrayForEach(d, sh) {
            if (!cJSON_IsNumber(d) || d->valuedouble < 1) {
                rc = zt_error_set(ZT_ERR_CKPT_CORRUPT, "checkpoint %s: tensor %s has a bad "
                                  "shape", path, t[i].name);
                break;
            }
            t[i].shape[t[i].ndim++] = (int64_t)d->valuedouble;
        }
        i++;
    }
    cJSON_Delete(m);
    if (rc != ZT_OK) {
        free(t);
        return rc;
    }
    *out = t;
    *n = cnt;
    return ZT_OK;
}

static void shape_text(char *buf, size_t n, int ndim, const int64_t *shape) {
    size_t at = 0;
    buf[0] = '\0';
    for (int d = 0; d < ndim && at < n; d++)
        at += (size_t)snprintf(buf + at, n - at, "%s%lld", d ? "x" : "", (long long)shape[d]);
}

/* the model's tensors against meta.json's table: a clear message before any shard is read */
static enum zt_status check_tensors(zt_engine_t e, const char *tagdir) {
    struct zt_ckpt_tensor *t;
    int n;
    ZT_CHECK(zt_checkpoint_tensors(tagdir, &t, &n));
    enum zt_status rc = ZT_OK;
    for (int i = 0; rc == ZT_OK && i < zt_engine_nparams(e); i++) {
        zt_param_t p = zt_engine_param_at(e, i);
        int k = 0;
        while (k < n && strcmp(t[k].name, zt_param_name(p)) != 0) k++;
        char have[128], want[128];
        if (k < n) {
            shape_text(have, sizeof have, t[k].ndim, t[k].shape);
            shape_text(want, sizeof want, zt_param_ndim(p), zt_param_shape(p));
        }
        if (k == n)
            rc = zt_error_set(ZT_ERR_CKPT_CORRUPT, "checkpoint %s/meta.json: this model's tensor "
                              "%s is not in the checkpoint (another model's?)", tagdir,
                              zt_param_name(p));
        else if (strcmp(have, want) != 0)
            rc = zt_error_set(ZT_ERR_CKPT_CORRUPT, "checkpoint %s/meta.json: tensor %s is %s, "
                              "this model's is %s (model shape mismatch)", tagdir,
                              zt_param_name(p), have, want);
    }
    if (rc == ZT_OK && n != zt_engine_nparams(e))
        rc = zt_error_set(ZT_ERR_CKPT_CORRUPT, "checkpoint %s/meta.json: %d tensors, this model "
                          "has %d (model shape mismatch)", tagdir, n, zt_engine_nparams(e));
    free(t);
    return rc;
}

/* the tag's rank files per meta.json (each must exist); *paths: n strings and the array */
static enum zt_status shard_paths(const char *tagdir, int n, char ***out) {
    char **paths = calloc((size_t)n + 1, sizeof *paths);
    if (!paths) return zt_error_set(ZT_ERR_NOMEM, "checkpoint %s: out of memory", tagdir);
    enum zt_status rc = ZT_OK;
    for (int r = 0; rc == ZT_OK && r < n; r++) {
        struct stat sb;
        if (!(paths[r] = malloc(PATH_BYTES))) {
            rc = zt_error_set(ZT_ERR_NOMEM, "checkpoint %s: out of memory", tagdir);
            break;
        }
        snprintf(paths[r], PATH_BYTES, "%s/rank%d.zts", tagdir, r);
        if (stat(paths[r], &sb) != 0)
            rc = zt_error_set(ZT_ERR_CKPT_CORRUPT, "checkpoint %s: rank %d's shard is missing "
                              "(meta.json says %d ranks wrote it)", paths[r], r, n);
    }
    *out = paths;
    return rc;
}

static void free_paths(char **paths, int n) {
    for (int r = 0; paths && r < n; r++) free(paths[r]);
    free(paths);
}

enum zt_status zt_checkpoint_open_shards(const char *tagdir, const struct zt_ckpt_info *info,
                                         struct zt_shard_set *s) {
    char **paths = NULL;
    enum zt_status rc = shard_paths(tagdir, info->world_size, &paths);
    if (rc == ZT_OK) rc = zt_shard_set_open(s, (const char *const *)paths, info->world_size);
    free_paths(paths, info->world_size);
    return rc;
}

enum zt_status zt_checkpoint_resolve(const char *path, char *tagdir, size_t n) {
    char p[PATH_BYTES];
    struct stat sb;
    snprintf(p, sizeof p, "%s/meta.json", path);
    if (stat(p, &sb) == 0) {
        snprintf(tagdir, n, "%s", path);
        return ZT_OK;
    }
    snprintf(p, sizeof p, "%s/latest", path);
    if (stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return zt_error_set(ZT_ERR_IO, "checkpoint %s: no such directory", path);
    if (stat(p, &sb) != 0)
        return zt_error_set(ZT_ERR_IO, "checkpoint %s: neither a tag (no meta.json) nor a "
                            "checkpoint directory (no latest)", path);
    enum zt_status rc;
    char *text = read_text(p, &rc, "latest tag");
    if (!text) return rc;
    size_t len = strcspn(text, "\r\n");
    text[len] = '\0';
    if (len == 0 || strchr(text, '/') || text[0] == '.') {
        rc = zt_error_set(ZT_ERR_CKPT_CORRUPT, "checkpoint %s: does not name a tag (expected "
                          "one line like step100)", p);
        free(text);
        return rc;
    }
    snprintf(tagdir, n, "%s/%s", path, text);
    snprintf(p, sizeof p, "%s/meta.json", tagdir);
    if (stat(p, &sb) != 0) { /* a re-save of this tag stopped between its two renames */
        char old[PATH_BYTES];
        snprintf(old, sizeof old, "%s/.%s.old/meta.json", path, text);
        if (stat(old, &sb) == 0) {
            ZT_LOG_I("checkpoint %s: tag %s was being replaced; using its previous copy", path,
                     text);
            snprintf(tagdir, n, "%s/.%s.old", path, text);
            free(text);
            return ZT_OK;
        }
    }
    if (stat(p, &sb) != 0)
        rc = zt_error_set(ZT_ERR_CKPT_CORRUPT, "checkpoint %s/latest names tag '%s', but %s "
                          "does not exist", path, text, p);
    free(text);
    return rc;
}

/* the updates applied and the fp16 loss scaler (meta.json's optimizer.step and loss_scaler; a
 * checkpoint without them applied every step). The scaler is taken only when both runs are
 * fp16: another precision's run starts this one's scaler afresh, as a new DeepSpeed run would. */
static enum zt_status load_train_state(zt_engine_t e, const char *tagdir,
                                       const struct zt_ckpt_info *info) {
    char path[PATH_BYTES];
    cJSON *m = read_meta(tagdir, path, sizeof path);
    if (!m) return zt_error_last_code();
    struct zt_train_state st;
    zt_engine_get_train_state(e, &st);
    st.applied = info->step;
    st.skipped = 0;
    enum zt_status rc = ZT_OK;
    const cJSON *opt = cJSON_GetObjectItemCaseSensitive(m, "optimizer");
    const cJSON *os = cJSON_GetObjectItemCaseSensitive(opt, "step");
    const cJSON *sc = cJSON_GetObjectItemCaseSensitive(m, "loss_scaler");
    const cJSON *pr = cJSON_GetObjectItemCaseSensitive(m, "precision");
    if (os) {
        if (!cJSON_IsNumber(os) || os->valuedouble < 0 || os->valuedouble > (double)info->step)
            rc = zt_error_set(ZT_ERR_CKPT_CORRUPT, "checkpoint %s: optimizer.step must be a "
                              "count of at most %lld steps", path, (long long)info->step);
        else
            st.applied = (int64_t)os->valuedouble;
    }
    if (rc == ZT_OK && sc) {
        const char *k[] = {"cur_scale", "cur_iter", "last_overflow_iter", "cur_hysteresis",
                           "skipped_steps"};
        double v[5];
        for (int i = 0; i < 5 && rc == ZT_OK; i++) {
            const cJSON *x = cJSON_GetObjectItemCaseSensitive(sc, k[i]);
            if (!cJSON_IsNumber(x) || !isfinite(x->valuedouble) ||
                (i == 0 ? x->valuedouble <= 0 : i != 2 && x->valuedouble < 0))
                rc = zt_error_set(ZT_ERR_CKPT_CORRUPT, "checkpoint %s: loss_scaler.%s is "
                                  "missing or out of range", path, k[i]);
            else
                v[i] = x->valuedouble;
        }
        if (rc == ZT_OK) {
            st.skipped = (int64_t)v[4];
            const struct zt_config *c = zt_engine_config(e);
            if (c->precision == ZT_PREC_FP16 && cJSON_IsString(pr) &&
                strcmp(pr->valuestring, "fp16") == 0 && c->loss_scale == 0) {
                st.loss_scale = v[0];
                st.cur_iter = (int64_t)v[1];
                st.last_overflow_iter = (int64_t)v[2];
                st.cur_hysteresis = (int)v[3];
            }
        }
    }
    cJSON_Delete(m);
    if (rc == ZT_OK) zt_engine_set_train_state(e, &st);
    return rc;
}

enum zt_status zt_checkpoint_load(zt_engine_t e, const char *tagdir, struct zt_ckpt_info *info) {
    enum zt_status rc = zt_checkpoint_info(tagdir, info);
    if (rc == ZT_OK) rc = check_tensors(e, tagdir);
    char **paths = NULL;
    if (rc == ZT_OK) rc = shard_paths(tagdir, info->world_size, &paths);
    if (rc == ZT_OK)
        rc = zt_engine_load_shards(e, (const char *const *)paths, info->world_size);
    free_paths(paths, info->world_size);
    if (rc == ZT_OK) rc = load_train_state(e, tagdir, info);
    return agree(rc, "loading", tagdir);
}

static int by_step(const void *a, const void *b) {
    int64_t x = ((const struct zt_ckpt_tag *)a)->info.step;
    int64_t y = ((const struct zt_ckpt_tag *)b)->info.step;
    return x < y ? -1 : x > y;
}

enum zt_status zt_checkpoint_list(const char *dir, struct zt_ckpt_tag **out, int *n) {
    *out = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d) return zt_error_set(ZT_ERR_IO, "checkpoint %s: cannot open the directory (%s)", dir,
                                strerror(errno));
    struct zt_ckpt_tag *t = NULL;
    int cap = 0;
    struct dirent *de;
    char p[PATH_BYTES + 300];
    enum zt_status rc = ZT_OK;
    while ((de = readdir(d))) {
        struct zt_ckpt_info info;
        if (de->d_name[0] == '.' || strlen(de->d_name) >= sizeof t->name) continue;
        snprintf(p, sizeof p, "%.1023s/%s", dir, de->d_name);
        if (zt_checkpoint_info(p, &info) != ZT_OK) continue; /* not a tag: left alone */
        if (*n == cap) {
            struct zt_ckpt_tag *nt = realloc(t, (size_t)(cap = cap ? 2 * cap : 16) * sizeof *t);
            if (!nt) {
                rc = zt_error_set(ZT_ERR_NOMEM, "checkpoint %s: out of memory", dir);
                break;
            }
            t = nt;
        }
        t[*n].info = info;
        snprintf(t[*n].name, sizeof t[*n].name, "%s", de->d_name);
        (*n)++;
    }
    closedir(d);
    if (rc != ZT_OK) {
        free(t);
        *n = 0;
        return rc;
    }
    if (*n > 1) qsort(t, (size_t)*n, sizeof *t, by_step);
    *out = t;
    return ZT_OK;
}

/* rank 0: keep the newest keep_last complete tags (`keep` among them), remove the leftovers of
 * saves and removals that crashed */
static void prune(const char *dir, const char *keep, int keep_last) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *de;
    char p[PATH_BYTES + 300];
    while ((de = readdir(d))) {
        snprintf(p, sizeof p, "%.1023s/%s", dir, de->d_name);
        size_t len = strlen(de->d_name);
        if (de->d_name[0] == '.' &&
            ((len > 9 && strcmp(de->d_name + len - 8, ".partial") == 0) ||
             (len > 6 && strcmp(de->d_name + len - 5, ".dead") == 0)))
            remove_tag_dir(p);
        if (strncmp(de->d_name, "latest.tmp-", 11) == 0) unlink(p);
    }
    closedir(d);
    struct zt_ckpt_tag *t;
    int n;
    if (keep_last <= 0 || zt_checkpoint_list(dir, &t, &n) != ZT_OK) return;
    for (int i = n - 1, kept = 0; i >= 0; i--) { /* newest first; `keep` always stays */
        if (strcmp(t[i].name, keep) == 0 || kept < keep_last - 1) {
            kept += strcmp(t[i].name, keep) != 0;
            continue;
        }
        /* out of sight first (one rename), then emptied: a crash in between leaves a
         * hidden .dead directory for the next save, never a tag without its files */
        char dead[PATH_BYTES + 300];
        snprintf(p, sizeof p, "%.1023s/%s", dir, t[i].name);
        snprintf(dead, sizeof dead, "%.1023s/.%s.dead", dir, t[i].name);
        if (rename(p, dead) != 0) continue;
        remove_tag_dir(dead);
        ZT_LOG_I("checkpoint %s: removed tag %s (keep_last %d)", dir, t[i].name, keep_last);
    }
    free(t);
}

/* rank 0, after every shard is in DIR/.<tag>.partial: meta, rename, sync, latest */
static enum zt_status publish(const char *dir, const char *tag, const char *partial,
                              char *meta) {
    char p[PATH_BYTES + 16], fin[PATH_BYTES], old[PATH_BYTES];
    if (!meta) return zt_error_set(ZT_ERR_NOMEM, "checkpoint %s: out of memory", dir);
    snprintf(p, sizeof p, "%s/meta.json", partial);
    enum zt_status rc = write_text("checkpoint metadata", p, meta);
    free(meta);
    ZT_CHECK(rc);
    snprintf(fin, sizeof fin, "%s/%s", dir, tag);
    snprintf(old, sizeof old, "%s/.%s.old", dir, tag);
    struct stat sb;
    int had = stat(fin, &sb) == 0;
    if (had) { /* the same tag saved again (e.g. after a resume): the old one goes last */
        remove_tag_dir(old);
        if (rename(fin, old) != 0)
            return zt_error_set(ZT_ERR_IO, "checkpoint %s: cannot move the previous %s aside "
                                "(%s)", dir, tag, strerror(errno));
    }
    if (rename(partial, fin) != 0) {
        rc = zt_error_set(ZT_ERR_IO, "checkpoint %s: cannot rename %s into place (%s)", dir,
                          partial, strerror(errno));
        if (had) rename(old, fin);
        return rc;
    }
    ZT_CHECK(fsync_dir(dir));
    snprintf(p, sizeof p, "%s/latest", dir);
    char line[160];
    snprintf(line, sizeof line, "%s\n", tag);
    ZT_CHECK(write_text("checkpoint latest", p, line));
    if (had) remove_tag_dir(old);
    return ZT_OK;
}

/* DIR (and its parents) and a fresh DIR/.<tag>.partial (a crashed save's is stale) */
static enum zt_status make_partial(const char *dir, const char *partial) {
    struct stat sb;
    char up[PATH_BYTES];
    snprintf(up, sizeof up, "%s", dir);
    for (char *s = strchr(up + 1, '/'); s; s = strchr(s + 1, '/')) { /* mkdir -p */
        *s = '\0';
        mkdir(up, 0755);
        *s = '/';
    }
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return zt_error_set(ZT_ERR_IO, "checkpoint %s: cannot create the directory (%s)", dir,
                            strerror(errno));
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return zt_error_set(ZT_ERR_IO, "checkpoint %s: not a directory", dir);
    remove_tag_dir(partial);
    if (mkdir(partial, 0755) != 0)
        return zt_error_set(ZT_ERR_IO, "checkpoint %s: cannot create %s (%s)", dir, partial,
                            strerror(errno));
    return ZT_OK;
}

struct zt_ckpt_save {
    zt_engine_t e;
    char dir[PATH_BYTES], tag[64], partial[PATH_BYTES];
    int keep_last;
    char *meta;         /* rank 0: meta.json's text, taken at the step boundary */
    enum zt_status rc;  /* this rank's shard could not be started (message in msg) */
    char msg[1024];
};

enum zt_status zt_checkpoint_save_begin(zt_engine_t e, const char *dir, int64_t step,
                                        const char *extra, int keep_last,
                                        struct zt_ckpt_save **out) {
    *out = NULL;
    if (strlen(dir) + 80 > PATH_BYTES)
        return zt_error_set(ZT_ERR_INVALID, "checkpoint %s: path too long", dir);
    struct zt_ckpt_save *s = calloc(1, sizeof *s);
    if (!s) return zt_error_set(ZT_ERR_NOMEM, "checkpoint %s: out of memory", dir);
    s->e = e;
    s->keep_last = keep_last;
    snprintf(s->dir, sizeof s->dir, "%s", dir);
    snprintf(s->tag, sizeof s->tag, "step%lld", (long long)step);
    snprintf(s->partial, sizeof s->partial, "%s/.%s.partial", dir, s->tag);
    const int rank = zt_engine_rank(e);
    enum zt_status rc = rank == 0 ? make_partial(dir, s->partial) : ZT_OK;
    if ((rc = agree(rc, "creating the directory", dir)) != ZT_OK) {
        free(s);
        return rc;
    }
    char shard[PATH_BYTES + 32];
    snprintf(shard, sizeof shard, "%s/rank%d.zts", s->partial, rank);
    /* a failure here is agreed on with the others' in zt_checkpoint_save_end */
    if ((s->rc = zt_engine_save_begin(e, shard)) != ZT_OK)
        snprintf(s->msg, sizeof s->msg, "%s", zt_error_last());
    if (rank == 0) s->meta = meta_json(e, s->tag, step, extra);
    *out = s;
    return ZT_OK;
}

enum zt_status zt_checkpoint_save_end(struct zt_ckpt_save *s, struct zt_save_info *info) {
    if (!s) return ZT_OK;
    const int rank = zt_engine_rank(s->e);
    enum zt_status rc = s->rc;
    if (rc == ZT_OK) rc = zt_engine_save_end(s->e, info);
    else zt_error_set(rc, "%s", s->msg);
    rc = agree(rc, "writing a shard", s->dir);
    if (rc == ZT_OK && rank == 0) {
        rc = publish(s->dir, s->tag, s->partial, s->meta);
        s->meta = NULL; /* publish frees it */
    }
    if (rank == 0 && rc != ZT_OK) remove_tag_dir(s->partial);
    rc = agree(rc, "publishing", s->dir);
    if (rc == ZT_OK && rank == 0) prune(s->dir, s->tag, s->keep_last);
    free(s->meta);
    free(s);
    return rc;
}

void zt_checkpoint_save_abandon(struct zt_ckpt_save *s) {
    if (!s) return;
    if (s->rc == ZT_OK) zt_engine_save_end(s->e, NULL);
    free(s->meta);
    free(s);
}

enum zt_status zt_checkpoint_save(zt_engine_t e, const char *dir, int64_t step,
                                  const char *extra, int keep_last) {
    struct zt_ckpt_save *s;
    ZT_CHECK(zt_checkpoint_save_begin(e, dir, step, extra, keep_last, &s));
    return zt_checkpoint_save_end(s, NULL);
}

/* ---- import: weights -> a step-0 checkpoint ---- */
enum zt_status zt_checkpoint_import(const char *path, const char *dir) {
    if (strlen(dir) + 80 > PATH_BYTES)
        return zt_error_set(ZT_ERR_INVALID, "checkpoint %s: path too long", dir);
    struct zt_safetensors st;
    ZT_CHECK(zt_st_open(&st, path));
    char partial[PATH_BYTES], shard[PATH_BYTES + 32];
    snprintf(partial, sizeof partial, "%s/.step0.partial", dir);
    struct zt_shard_rec *rec = calloc((size_t)st.n * 3 + 1, sizeof *rec);
    float *buf = NULL, *zero = NULL;
    int64_t maxn = 1;
    for (int i = 0; i < st.n; i++) {
        int64_t n = 1;
        for (int d = 0; d < st.t[i].ndim; d++) n *= st.t[i].shape[d];
        maxn = n > maxn ? n : maxn;
    }
    enum zt_status rc = ZT_OK;
    if (!rec || !(buf = malloc((size_t)maxn * 4)) || !(zero = calloc((size_t)maxn, 4)))
        rc = zt_error_set(ZT_ERR_NOMEM, "import %s: out of memory", path);
    cJSON *ts = NULL;
    cJSON *m = rc == ZT_OK ? meta_head("step0", 0, 1, 0, "none", "none", &ts) : NULL;
    for (int i = 0; rc == ZT_OK && i < st.n; i++) {
        const struct zt_st_tensor *t = &st.t[i];
        if (t->ndim < 1 || strlen(t->name) >= ZT_SHARD_MAX_NAME) {
            rc = zt_error_set(ZT_ERR_CKPT_CORRUPT, "import %s: tensor %s: a scalar or too long a "
                              "name", path, t->name);
            break;
        }
        int64_t rows = t->ndim == 1 ? 1 : t->shape[0], n = 1;
        for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
        for (int role = 0; role < 3; role++) {
            struct zt_shard_rec *r = &rec[3 * i + role];
            snprintf(r->name, sizeof r->name, "%s", t->name);
            r->role = role;
            r->rows = r->row1 = rows;
            r->cols = n / rows;
        }
        add_tensor(ts, t->name, t->ndim, t->shape);
    }
    if (rc == ZT_OK) {
        cJSON *part = cJSON_AddArrayToObject(m, "partition"), *p0 = cJSON_CreateObject();
        cJSON_AddNumberToObject(p0, "rank", 0);
        cJSON_AddStringToObject(p0, "file", "rank0.zts");
        cJSON_AddItemToArray(part, p0);
        cJSON *opt = cJSON_AddObjectToObject(m, "optimizer");
        cJSON_AddStringToObject(opt, "type", "AdamW");
        cJSON_AddNumberToObject(opt, "step", 0);
        cJSON_AddStringToObject(m, "imported_from", path);
        rc = make_partial(dir, partial);
    }
    struct zt_shard_writer w;
    snprintf(shard, sizeof shard, "%s/rank0.zts", partial);
    if (rc == ZT_OK) rc = zt_shard_create(&w, shard, 0, 1, rec, 3 * st.n);
    for (int i = 0; rc == ZT_OK && i < st.n; i++) {
        const struct zt_st_tensor *t = &st.t[i];
        int64_t n = rec[3 * i].rows * rec[3 * i].cols;
        rc = zt_st_read_f32(&st, t->name, t->ndim, t->shape, buf);
        if (rc == ZT_OK) rc = zt_shard_append(&w, buf, n);
        for (int k = 0; k < 2 && rc == ZT_OK; k++) rc = zt_shard_append(&w, zero, n);
        if (rc != ZT_OK) zt_shard_abort(&w, rc);
    }
    if (rc == ZT_OK) rc = zt_shard_commit(&w);
    if (rc == ZT_OK) {
        char *text = cJSON_Print(m);
        rc = publish(dir, "step0", partial, text);
    }
    if (rc != ZT_OK) remove_tag_dir(partial);
    cJSON_Delete(m);
    free(rec);
    free(buf);
    free(zero);
    zt_st_close(&st);
    return rc;
}
