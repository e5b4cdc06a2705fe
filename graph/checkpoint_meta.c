/*
 * graph/checkpoint_meta.c: a tag's meta.json: built from the engine's state at a save (or from
 * a safetensors file at an import), read back into struct zt_ckpt_info and the tensor table,
 * checked against the model before a load, and the training state it carries restored.
 *
 * Layer: graph/. Format: docs/checkpoints.md. meta.json is what makes a tag complete (it is
 * written last), and what a load checks before it reads any shard, so that a mismatch is one
 * line naming the file and the expected value. Its last member, meta_crc32c, is the CRC32C of
 * the file's own bytes before it (up to the comma that precedes the member): written last by
 * hand, found in the text by the reader, so the checksum does not depend on how a JSON library
 * prints numbers; a flipped bit anywhere before it, or anything after it, is refused.
 */
#include <cjson/cJSON.h>     /* meta.json */
#include <math.h>            /* isfinite, floor */
#include <stdio.h>           /* snprintf */
#include <stdlib.h>          /* calloc, free, strtoul */
#include <string.h>          /* strcmp, strlen */
#include "checkpoint_impl.h" /* this room's shared declarations */
#include "zt_ckpt.h"         /* zt_run_id_parse, ZT_CKPT_MAX_ELEMENTS */
#include "zt_ckpt_dir.h"     /* zt_ckpt_dir_read_text, zt_ckpt_dir_shard_name */
#include "zt_crc32c.h"       /* zt_crc32c */

#define CRC_KEY "meta_crc32c" /* the checksum's member: 8 hex digits */

// ----------------------------------------------------------------------------
// building meta.json

/* the fields every meta.json starts with; *tensors: the empty table for the caller to fill */
static cJSON *meta_head(const char *tag, int64_t step, uint64_t run_id, int world, int stage,
                        const char *optimizer_device, const char *param_device, cJSON **tensors) {
    cJSON *m = cJSON_CreateObject();
    char id[20];
    snprintf(id, sizeof id, "%016llx", (unsigned long long)run_id);
    cJSON_AddNumberToObject(m, "format", ZT_CKPT_FORMAT);
    cJSON_AddStringToObject(m, "tag", tag);
    cJSON_AddNumberToObject(m, "step", (double)step);
    cJSON_AddStringToObject(m, "run_id", id);
    cJSON_AddNumberToObject(m, "world_size", world);
    cJSON_AddNumberToObject(m, "zero_stage", stage);
    cJSON *off = cJSON_AddObjectToObject(m, "offload");
    cJSON_AddStringToObject(off, "optimizer", optimizer_device);
    cJSON_AddStringToObject(off, "param", param_device);
    *tensors = cJSON_AddArrayToObject(m, "tensors");
    return m;
}

static void add_tensor(cJSON *tensors, const char *name, int ndim, const int64_t *shape) {
    cJSON *t = cJSON_CreateObject();
    cJSON_AddStringToObject(t, "name", name);
    cJSON *sh = cJSON_AddArrayToObject(t, "shape");
    for (int d = 0; d < ndim; d++) cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)shape[d]));
    cJSON_AddItemToArray(tensors, t);
}

/* a pipeline's partition: each world rank's shard file, its stage and replica (its records
 * are the stage's tensors' rows of its ZeRO shard, in the stage's own flat layout) */
static void add_pipe_partition(cJSON *m, zt_engine_t e) {
    const struct zt_config *c = zt_engine_config(e);
    cJSON *part = cJSON_AddArrayToObject(m, "partition");
    for (int r = 0; r < c->world_size; r++) {
        const struct zt_pipe_rank x = zt_pipe_rank(&c->pipeline, c->world_size, r);
        char file[32];
        zt_ckpt_dir_shard_name(file, sizeof file, r);
        cJSON *p = cJSON_CreateObject();
        cJSON_AddNumberToObject(p, "rank", r);
        cJSON_AddStringToObject(p, "file", file);
        cJSON_AddNumberToObject(p, "pipeline_stage", x.stage);
        cJSON_AddNumberToObject(p, "data_parallel_rank", x.dp_rank);
        cJSON_AddItemToArray(part, p);
    }
}

/* partition: each rank's shard file and the flat elements [lo, hi) it holds */
static void add_partition(cJSON *m, zt_engine_t e) {
    int stages = 1;
    zt_engine_pipe_stage(e, &stages);
    if (stages > 1) {
        add_pipe_partition(m, e);
        return;
    }
    cJSON *part = cJSON_AddArrayToObject(m, "partition");
    for (int r = 0; r < zt_engine_world_size(e); r++) {
        int64_t lo, hi;
        zt_engine_shard_range(e, r, &lo, &hi);
        char file[32];
        zt_ckpt_dir_shard_name(file, sizeof file, r);
        cJSON *p = cJSON_CreateObject();
        cJSON_AddNumberToObject(p, "rank", r);
        cJSON_AddStringToObject(p, "file", file);
        cJSON *el = cJSON_AddArrayToObject(p, "flat_elements");
        cJSON_AddItemToArray(el, cJSON_CreateNumber((double)lo));
        cJSON_AddItemToArray(el, cJSON_CreateNumber((double)hi));
        cJSON_AddItemToArray(part, p);
    }
}

/* precision, optimizer, lr_scheduler, loss_scaler and rng. Adam's step count and the LR
 * schedule move with the updates applied: the training steps minus those fp16 skipped on
 * overflow. */
static void add_train_state(cJSON *m, zt_engine_t e) {
    const struct zt_config *c = zt_engine_config(e);
    struct zt_train_state st;
    zt_engine_get_train_state(e, &st);
    cJSON_AddStringToObject(m, "precision", zt_precision_name(c->precision));
    cJSON *opt = cJSON_AddObjectToObject(m, "optimizer");
    cJSON_AddStringToObject(opt, "type", "AdamW");
    cJSON_AddNumberToObject(opt, "step", (double)st.applied);
    cJSON *ls = cJSON_AddObjectToObject(m, "lr_scheduler");
    cJSON_AddStringToObject(ls, "type", zt_lr_sched_name(c->sched));
    cJSON_AddNumberToObject(ls, "last_batch_iteration", (double)(st.applied - 1));
    cJSON_AddNumberToObject(ls, "lr", zt_config_lr(c, st.applied > 0 ? st.applied : 1));
    /* DeepSpeed's DynamicLossScaler fields (fp16; a scale of 1 otherwise) */
    cJSON *sc = cJSON_AddObjectToObject(m, "loss_scaler");
    cJSON_AddNumberToObject(sc, "cur_scale", st.loss_scale);
    cJSON_AddNumberToObject(sc, "cur_iter", (double)st.cur_iter);
    cJSON_AddNumberToObject(sc, "last_overflow_iter", (double)st.last_overflow_iter);
    cJSON_AddNumberToObject(sc, "cur_hysteresis", st.cur_hysteresis);
    cJSON_AddNumberToObject(sc, "skipped_steps", (double)st.skipped);
    cJSON *rng = cJSON_AddObjectToObject(m, "rng");
    cJSON_AddNumberToObject(rng, "seed", (double)c->seed);
    cJSON_AddStringToObject(rng, "note", "the generator is used only for the initial weights "
                                         "(no dropout): nothing else to restore");
}

/* the run's config file as it was (null when it cannot be read or parsed), and the caller's
 * extra members (the trainer's model shape and data position) */
static void add_config_and_extra(cJSON *m, const struct zt_config *c, const char *extra) {
    char *text = NULL;
    if (c->path[0]) zt_ckpt_dir_read_text(c->path, "config", &text);
    cJSON *config = text ? cJSON_Parse(text) : NULL;
    free(text);
    cJSON_AddItemToObject(m, "config", config ? config : cJSON_CreateNull());
    cJSON *ex = extra ? cJSON_Parse(extra) : NULL;
    for (cJSON *it = ex ? ex->child : NULL; it; it = it->next)
        cJSON_AddItemToObject(m, it->string, cJSON_Duplicate(it, 1));
    cJSON_Delete(ex);
}

/* The text of m (printed as cJSON formats it) with its checksum appended by hand as the last
 * member: the CRC32C of the printed bytes before the comma that introduces it. */
static char *print_and_free(cJSON *m) {
    char *body = cJSON_Print(m), *s = NULL;
    cJSON_Delete(m);
    if (!body) return NULL;
    size_t n = strlen(body);
    while (n > 0 && body[n - 1] != '}') n--; /* the object's closing brace ... */
    if (n > 0) n--;
    while (n > 0 && (body[n - 1] == '\n' || body[n - 1] == '\t' || body[n - 1] == ' ')) n--;
    const size_t cap = n + 64; /* ... and the blanks before it give way to the member */
    if (n > 1 && (s = malloc(cap)) != NULL) {
        memcpy(s, body, n);
        snprintf(s + n, cap - n, ",\n\t\"" CRC_KEY "\":\t\"%08x\"\n}",
                 (unsigned)zt_crc32c(0, body, n));
    }
    free(body);
    return s;
}

char *zt_checkpoint_meta_build(zt_engine_t e, const char *tag, int64_t step, const char *extra,
                               uint64_t run_id, const struct zt_engine_tensor *table, int n) {
    const struct zt_config *c = zt_engine_config(e);
    cJSON *tensors;
    cJSON *m = meta_head(tag, step, run_id, c->world_size, c->zero_stage,
                         zt_offload_device_name(c->offload_optimizer.device),
                         zt_offload_device_name(c->offload_param.device), &tensors);
    if (table) {
        for (int i = 0; i < n; i++) add_tensor(tensors, table[i].name, table[i].ndim,
                                               table[i].shape);
        cJSON_AddNumberToObject(cJSON_AddObjectToObject(m, "pipeline"), "stages",
                                c->pipeline.stages);
    } else {
        for (int i = 0; i < zt_engine_nparams(e); i++) {
            zt_param_t p = zt_engine_param_at(e, i);
            add_tensor(tensors, zt_param_name(p), zt_param_ndim(p), zt_param_shape(p));
        }
    }
    add_partition(m, e);
    add_train_state(m, e);
    add_config_and_extra(m, c, extra);
    return print_and_free(m);
}

char *zt_checkpoint_meta_build_import(const struct zt_safetensors *st, const char *source,
                                      const char *tag, uint64_t run_id) {
    cJSON *tensors;
    cJSON *m = meta_head(tag, 0, run_id, 1, 0, "none", "none", &tensors);
    for (int i = 0; i < st->n; i++)
        add_tensor(tensors, st->t[i].name, st->t[i].ndim, st->t[i].shape);
    cJSON *part = cJSON_AddArrayToObject(m, "partition"), *p0 = cJSON_CreateObject();
    char file[32];
    zt_ckpt_dir_shard_name(file, sizeof file, 0);
    cJSON_AddNumberToObject(p0, "rank", 0);
    cJSON_AddStringToObject(p0, "file", file);
    cJSON_AddItemToArray(part, p0);
    cJSON *opt = cJSON_AddObjectToObject(m, "optimizer");
    cJSON_AddStringToObject(opt, "type", "AdamW");
    cJSON_AddNumberToObject(opt, "step", 0);
    cJSON_AddStringToObject(m, "imported_from", source);
    return print_and_free(m);
}

// ----------------------------------------------------------------------------
// reading meta.json

/* A format this zerotask reads (checked before the checksum: a newer format may checksum
 * otherwise). A missing or non-numeric format is left to zt_checkpoint_info. */
static enum zt_status check_format(const cJSON *m, const char *path) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(m, "format");
    if (cJSON_IsNumber(f) && (f->valuedouble > ZT_CKPT_FORMAT || f->valuedouble < 1))
        return zt_error_set(ZT_ERR_CKPT_CORRUPT, "checkpoint %s: format %g, this zerotask "
                            "reads format %d (written by a newer version?)", path, f->valuedouble,
                            ZT_CKPT_FORMAT);
    return ZT_OK;
}

static const char *skip_blanks(const char *p) {
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
    return p;
}

/* The checksum member at the end of text: the last "meta_crc32c" key, followed by nothing but
 * `: "<8 hex digits>" }` and blanks, preceded by a comma. *covered: the bytes it covers (those
 * before that comma); *want: its value. 1: found; 0: no such key in the text; -1: malformed. */
static int find_checksum(const char *text, size_t *covered, uint32_t *want) {
    const char *key = NULL, *q = "\"" CRC_KEY "\"";
    for (const char *p = strstr(text, q); p; p = strstr(p + 1, q)) key = p;
    if (!key) return 0;
    const char *p = skip_blanks(key + strlen(q));
    if (*p++ != ':') return -1;
    p = skip_blanks(p);
    if (*p++ != '"') return -1;
    char hex[9] = "";
    for (int i = 0; i < 8; i++, p++) {
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f') || (*p >= 'A' && *p <= 'F')))
            return -1;
        hex[i] = *p;
    }
    if (*p++ != '"') return -1;
    p = skip_blanks(p);
    if (*p++ != '}' || *skip_blanks(p) != '\0') return -1;
    const char *c = key;
    while (c > text && (c[-1] == ' ' || c[-1] == '\t' || c[-1] == '\n' || c[-1] == '\r')) c--;
    if (c == text || c[-1] != ',') return -1;
    *covered = (size_t)(c - 1 - text);
    *want = (uint32_t)strtoul(hex, NULL, 16);
    return 1;
}

/* meta_crc32c against the bytes of text it covers (m: text parsed). Without it: a meta.json
 * written before checksums (it has no run_id either) is accepted as it is; one that records a
 * run id lost its checksum and is refused. *checked: whether a checksum was there (and
 * matched). */
static enum zt_status check_checksum(const char *text, cJSON *m, const char *path,
                                     int *checked) {
    size_t covered = 0;
    uint32_t want = 0;
    int found = find_checksum(text, &covered, &want);
    int member = cJSON_GetObjectItemCaseSensitive(m, CRC_KEY) != NULL;
    cJSON_DeleteItemFromObjectCaseSensitive(m, CRC_KEY); /* no reader needs it */
    *checked = found == 1;
    if (found == 0 && !member && !cJSON_GetObjectItemCaseSensitive(m, "run_id")) return ZT_OK;
    if (found == 0 && !member)
        return zt_error_set(ZT_ERR_CKPT_CORRUPT, "checkpoint %s: no " CRC_KEY ", though it "
                            "records a run_id (its checksum was removed?)", path);
    if (found != 1)
        return zt_error_set(ZT_ERR_CKPT_CORRUPT, "checkpoint %s: " CRC_KEY " is malformed "
                            "(expected the last member, \"" CRC_KEY "\": \"<8 hex digits>\", "
                            "and nothing after the object)", path);
    uint32_t have = zt_crc32c(0, text, covered);
    if (have != want)
        return zt_error_set(ZT_ERR_CKPT_CORRUPT, "checkpoint %s: checksum mismatch: " CRC_KEY
                            " says %08x, the content's is %08x (corrupted or edited)", path,
                            (unsigned)want, (unsigned)have);
    return ZT_OK;
}

/* a tag's meta.json parsed and checked (path: its name, for messages; checked: whether it
 * carried its checksum); NULL with the error set */
static cJSON *read_meta_checked(const char *tagdir, char *path, size_t n, int *checked) {
    snprintf(path, n, "%s/meta.json", tagdir);
    char *text;
    if (zt_ckpt_dir_read_text(path, "metadata", &text) != ZT_OK) return NULL;
    cJSON *m = cJSON_Parse(text);
    enum zt_status rc = ZT_OK;
    if (!cJSON_IsObject(m))
        rc = zt_error_set(ZT_ERR_CKPT_CORRUPT, "checkpoint %s: not valid JSON", path);
    if (rc == ZT_OK) rc = check_format(m, path);
    if (rc == ZT_OK) rc = check_checksum(text, m, path, checked);
    free(text);
    if (rc != ZT_OK) {
        cJSON_Delete(m);
        return NULL;
    }
    return m;
}

static cJSON *read_meta(const char *tagdir, char *path, size_t n) {
    int checked;
    return read_meta_checked(tagdir, path, n, &checked);
}

/* run_id: 16 hex digits, not all zero (absent: 0, a checkpoint written before run ids) */
static enum zt_status read_run_id(const cJSON *m, const char *path, uint64_t *id) {
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(m, "run_id");
    *id = 0;
    if (!r) return ZT_OK;
    if (!cJSON_IsString(r) || zt_run_id_parse(r->valuestring, id) != 0)
        return zt_error_set(ZT_ERR_CKPT_CORRUPT, "checkpoint %s: run_id is malformed (expected "
                            "16 hex digits)", path);
    return ZT_OK;
}

#define MAX_COUNT 9007199254740992.0 /* 2^53: steps and iteration counts, whole doubles */

/* x is a number, whole and in [lo, hi] (checked before any conversion to an integer type: one
 * of a double out of its range is undefined) */
static int whole_in(const cJSON *x, double lo, double hi) {
    return cJSON_IsNumber(x) && x->valuedouble >= lo && x->valuedouble <= hi &&
           x->valuedouble == floor(x->valuedouble);
}

enum zt_status zt_checkpoint_info(const char *tagdir, struct zt_ckpt_info *info) {
    memset(info, 0, sizeof *info);
    char path[ZT_CKPT_PATH_BYTES];
    cJSON *m = read_meta_checked(tagdir, path, sizeof path, &info->checksummed);
    if (!m) return zt_error_last_code();
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(m, "format");
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(m, "step");
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(m, "world_size");
    const cJSON *z = cJSON_GetObjectItemCaseSensitive(m, "zero_stage");
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(m, "tag");
    if (!whole_in(f, 1, ZT_CKPT_FORMAT) || !whole_in(st, 0, MAX_COUNT) ||
        !whole_in(w, 1, 1 << 20) || !whole_in(z, 0, 3) || !cJSON_IsString(t)) {
        cJSON_Delete(m);
        return zt_error_set(ZT_ERR_CKPT_CORRUPT, "checkpoint %s: not a zerotask checkpoint's "
                            "metadata (expected format, tag, step (a whole number >= 0), "
                            "world_size (1 to 2^20), zero_stage (0 to 3))", path);
    }
    info->format = (int)f->valuedouble;
    info->step = (int64_t)st->valuedouble;
    info->world_size = (int)w->valuedouble;
    info->zero_stage = (int)z->valuedouble;
    snprintf(info->tag, sizeof info->tag, "%s", t->valuestring);
    enum zt_status rc = read_run_id(m, path, &info->run_id);
    cJSON_Delete(m);
    return rc;
}

enum zt_status zt_checkpoint_meta_member(const char *tagdir, const char *name, char **text) {
    char path[ZT_CKPT_PATH_BYTES];
    *text = NULL;
    cJSON *m = read_meta(tagdir, path, sizeof path);
    if (!m) return zt_error_last_code();
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(m, name);
    if (v && !(*text = cJSON_PrintUnformatted(v))) {
        cJSON_Delete(m);
        return zt_error_set(ZT_ERR_NOMEM, "checkpoint %s: out of memory", path);
    }
    cJSON_Delete(m);
    return ZT_OK;
}

/* one entry of the tensors table: a name that fits and a shape of 1..ZT_CKPT_MAX_DIMS whole
 * sizes >= 1 whose product (the tensor's elements) is at most ZT_CKPT_MAX_ELEMENTS, so that
 * no reader's product of them (elements, bytes) overflows */
static enum zt_status parse_tensor(const cJSON *it, int i, const char *path,
                                   struct zt_ckpt_tensor *t) {
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(it, "name");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(it, "shape"), *d;
    int nd = cJSON_GetArraySize(sh);
    if (!cJSON_IsString(nm) || strlen(nm->valuestring) >= sizeof t->name || !cJSON_IsArray(sh) ||
        nd < 1 || nd > ZT_CKPT_MAX_DIMS)
        return zt_error_set(ZT_ERR_CKPT_CORRUPT, "checkpoint %s: tensor %d of the table is "
                            "malformed (expected name and shape)", path, i);
    snprintf(t->name, sizeof t->name, "%s", nm->valuestring);
    int64_t elements = 1;
    cJSON_ArrayForEach(d, sh) {
        if (!whole_in(d, 1, (double)ZT_CKPT_MAX_ELEMENTS) ||
            (int64_t)d->valuedouble > ZT_CKPT_MAX_ELEMENTS / elements)
            return zt_error_set(ZT_ERR_CKPT_CORRUPT, "checkpoint %s: tensor %s has a bad shape "
                                "(expected whole sizes >= 1, at most 2^40 elements in all)",
                                path, t->name);
        t->shape[t->ndim++] = (int64_t)d->valuedouble;
        elements *= t->shape[t->ndim - 1];
    }
    return ZT_OK;
}

enum zt_status zt_checkpoint_tensors(const char *tagdir, struct zt_ckpt_tensor **out, int *n) {
    *out = NULL;
    *n = 0;
    char path[ZT_CKPT_PATH_BYTES];
    cJSON *m = read_meta(tagdir, path, sizeof path);
    if (!m) return zt_error_last_code();
    const cJSON *table = cJSON_GetObjectItemCaseSensitive(m, "tensors"), *it;
    int count = cJSON_GetArraySize(table);
    struct zt_ckpt_tensor *t = calloc((size_t)count + 1, sizeof *t);
    enum zt_status rc = ZT_OK;
    if (!cJSON_IsArray(table) || count < 1)
        rc = zt_error_set(ZT_ERR_CKPT_CORRUPT, "checkpoint %s: no \"tensors\" table", path);
    else if (!t)
        rc = zt_error_set(ZT_ERR_NOMEM, "checkpoint %s: out of memory", path);
    int i = 0;
    cJSON_ArrayForEach(it, table) {
        if (rc != ZT_OK) break;
        rc = parse_tensor(it, i, path, &t[i]);
        i++;
    }
    cJSON_Delete(m);
    if (rc != ZT_OK) {
        free(t);
        return rc;
    }
    *out = t;
    *n = count;
    return ZT_OK;
}

// ----------------------------------------------------------------------------
// checking and restoring at a load

/* "768x2304" */
static void shape_text(char *buf, size_t n, int ndim, const int64_t *shape) {
    size_t at = 0;
    buf[0] = '\0';
    for (int d = 0; d < ndim && at < n; d++)
        at += (size_t)snprintf(buf + at, n - at, "%s%lld", d ? "x" : "", (long long)shape[d]);
}

/* parameter p against the table t[n]: present, same shape */
static enum zt_status check_param(zt_param_t p, const struct zt_ckpt_tensor *t, int n,
                                  const char *tagdir) {
    int k = 0;
    while (k < n && strcmp(t[k].name, zt_param_name(p)) != 0) k++;
    if (k == n)
        return zt_error_set(ZT_ERR_CKPT_CORRUPT, "checkpoint %s/meta.json: this model's tensor "
                            "%s is not in the checkpoint (another model's?)", tagdir,
                            zt_param_name(p));
    char have[128], want[128];
    shape_text(have, sizeof have, t[k].ndim, t[k].shape);
    shape_text(want, sizeof want, zt_param_ndim(p), zt_param_shape(p));
    if (strcmp(have, want) != 0)
        return zt_error_set(ZT_ERR_CKPT_CORRUPT, "checkpoint %s/meta.json: tensor %s is %s, "
                            "this model's is %s (model shape mismatch)", tagdir,
                            zt_param_name(p), have, want);
    return ZT_OK;
}

enum zt_status zt_checkpoint_meta_check_tensors(zt_engine_t e, const char *tagdir) {
    struct zt_ckpt_tensor *t;
    int n;
    ZT_CHECK(zt_checkpoint_tensors(tagdir, &t, &n));
    enum zt_status rc = ZT_OK;
    int stages = 1;
    zt_engine_pipe_stage(e, &stages);
    for (int i = 0; rc == ZT_OK && i < zt_engine_nparams(e); i++)
        rc = check_param(zt_engine_param_at(e, i), t, n, tagdir);
    /* a pipeline stage holds some of them (checkpoint_check_model checks the model's shape) */
    if (rc == ZT_OK && stages == 1 && n != zt_engine_nparams(e))
        rc = zt_error_set(ZT_ERR_CKPT_CORRUPT, "checkpoint %s/meta.json: %d tensors, this model "
                          "has %d (model shape mismatch)", tagdir, n, zt_engine_nparams(e));
    free(t);
    return rc;
}

/* optimizer.step: the updates applied, at most the steps trained (absent: every step) */
static enum zt_status read_updates_applied(const cJSON *m, const char *path,
                                           const struct zt_ckpt_info *info,
                                           struct zt_train_state *st) {
    const cJSON *opt = cJSON_GetObjectItemCaseSensitive(m, "optimizer");
    const cJSON *os = cJSON_GetObjectItemCaseSensitive(opt, "step");
    if (!os) return ZT_OK;
    if (!whole_in(os, 0, (double)info->step))
        return zt_error_set(ZT_ERR_CKPT_CORRUPT, "checkpoint %s: optimizer.step must be a "
                            "count of at most %lld steps", path, (long long)info->step);
    st->applied = (int64_t)os->valuedouble;
    return ZT_OK;
}

/* loss_scaler (absent: nothing to restore). The steps skipped always carry over; the scaler
 * itself only when both runs are fp16 with a dynamic scale: another precision's run starts
 * this one's scaler afresh, as a new DeepSpeed run would. */
static enum zt_status read_loss_scaler(const cJSON *m, const char *path,
                                       const struct zt_config *c, struct zt_train_state *st) {
    static const char *const keys[] = {"cur_scale", "cur_iter", "last_overflow_iter",
                                       "cur_hysteresis", "skipped_steps"};
    const cJSON *sc = cJSON_GetObjectItemCaseSensitive(m, "loss_scaler");
    const cJSON *pr = cJSON_GetObjectItemCaseSensitive(m, "precision");
    if (!sc) return ZT_OK;
    /* cur_scale > 0 (a finite double); the others whole: last_overflow_iter may be -1 (never),
     * cur_hysteresis fits an int */
    static const double lo[] = {0, 0, -1, 0, 0};
    static const double hi[] = {0, MAX_COUNT, MAX_COUNT, 2147483647.0, MAX_COUNT};
    double v[5];
    for (int i = 0; i < 5; i++) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(sc, keys[i]);
        int ok = i == 0 ? cJSON_IsNumber(x) && isfinite(x->valuedouble) && x->valuedouble > 0
                        : whole_in(x, lo[i], hi[i]);
        if (!ok)
            return zt_error_set(ZT_ERR_CKPT_CORRUPT, "checkpoint %s: loss_scaler.%s is missing "
                                "or out of range", path, keys[i]);
        v[i] = x->valuedouble;
    }
    st->skipped = (int64_t)v[4];
    int both_fp16 = c->precision == ZT_PREC_FP16 && cJSON_IsString(pr) &&
                    strcmp(pr->valuestring, "fp16") == 0;
    if (both_fp16 && c->loss_scale == 0) {
        st->loss_scale = v[0];
        st->cur_iter = (int64_t)v[1];
        st->last_overflow_iter = (int64_t)v[2];
        st->cur_hysteresis = (int)v[3];
    }
    return ZT_OK;
}

enum zt_status zt_checkpoint_meta_load_train_state(zt_engine_t e, const char *tagdir,
                                                   const struct zt_ckpt_info *info) {
    char path[ZT_CKPT_PATH_BYTES];
    cJSON *m = read_meta(tagdir, path, sizeof path);
    if (!m) return zt_error_last_code();
    struct zt_train_state st;
    zt_engine_get_train_state(e, &st);
    st.applied = info->step;
    st.skipped = 0;
    enum zt_status rc = read_updates_applied(m, path, info, &st);
    if (rc == ZT_OK) rc = read_loss_scaler(m, path, zt_engine_config(e), &st);
    cJSON_Delete(m);
    if (rc == ZT_OK) zt_engine_set_train_state(e, &st);
    return rc;
}

/* meta.json's "model" (the trainer's model shape) against shape, field by field; absent (an
 * imported tag, a save through the API): nothing to check */
static enum zt_status check_model_fields(const char *tagdir, const struct zt_model_shape *shape,
                                         const char *model_name) {
    static const char *const keys[] = {"vocab_size", "seq_len", "n_embd", "n_layer", "n_head"};
    const int want[] = {shape->vocab_size, shape->seq_len, shape->n_embd, shape->n_layer,
                        shape->n_head};
    char path[ZT_CKPT_PATH_BYTES];
    cJSON *m = read_meta(tagdir, path, sizeof path);
    if (!m) return zt_error_last_code();
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(m, "model");
    enum zt_status rc = ZT_OK;
    if (model && !cJSON_IsObject(model))
        rc = zt_error_set(ZT_ERR_CKPT_CORRUPT, "checkpoint %s: \"model\" is not an object", path);
    for (int i = 0; model && rc == ZT_OK && i < 5; i++) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(model, keys[i]);
        if (!cJSON_IsNumber(x))
            rc = zt_error_set(ZT_ERR_CKPT_CORRUPT, "checkpoint %s: model.%s is missing or not a "
                              "number", path, keys[i]);
        else if (x->valuedouble != want[i])
            rc = zt_error_set(ZT_ERR_CKPT_CORRUPT, "checkpoint %s: model %s is %.0f, model %s "
                              "has %d (model shape mismatch: trained with another model)", path,
                              keys[i], x->valuedouble, model_name, want[i]);
    }
    cJSON_Delete(m);
    return rc;
}

enum zt_status zt_checkpoint_check_model(zt_engine_t e, const char *tagdir,
                                         const struct zt_model_shape *shape,
                                         const char *model_name) {
    /* tensors first: a field that changes a tensor's shape is named with that tensor */
    enum zt_status rc = zt_checkpoint_meta_check_tensors(e, tagdir);
    if (rc == ZT_OK) rc = check_model_fields(tagdir, shape, model_name);
    return zt_checkpoint_agree(rc, "checking the model", tagdir);
}
