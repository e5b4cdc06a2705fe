/*
 * io/data_spec.c: zt_dataset_open: --data (a file, a list, a blend or a JSON data spec) and
 * --eval-data into open token files and the train and validation sources of zt_dataset.h.
 *
 * Layer: io/ (platform; no StarPU). The sources' shares are normalised here; the sampler that
 * draws from them is io/dataset.c. Errors are one line "data <argument>: ..." naming the
 * source and what was expected; a file's own problems come from zt_tokens_open.
 */
#include "zt_dataset.h"

#include <errno.h>       /* errno */
#include <math.h>        /* isfinite, ceil */
#include <stdio.h>       /* snprintf */
#include <stdlib.h>      /* strtod, free */
#include <string.h>      /* strlen, strchr, memset */
#include <cjson/cJSON.h> /* the JSON spec */
#include "json_fields.h" /* zt_json_* checked readers */
#include "zt_file.h"     /* zt_file_read_all, zt_path_has_suffix */

#define SPEC_MAX_BYTES ((size_t)4 << 20)

/* one source as the user gave it: a path and a weight (0: none given) */
struct source_arg {
    char path[512];
    double weight;
    long long tokens; /* the spec's "tokens" (-1: not given) */
};

struct source_list {
    int n;
    struct source_arg a[ZT_DATA_MAX_SOURCES];
};

// ----------------------------------------------------------------------------
// the command-line syntax: F | F1,F2 | W1:F1,W2:F2

/* "W:PATH" when the text before the first ':' is a number (strtod's syntax): the weight in *w */
static const char *split_weight(const char *item, double *w) {
    const char *colon = strchr(item, ':');
    if (!colon || colon == item) return item;
    char *end;
    errno = 0;
    double v = strtod(item, &end);
    if (end != colon || errno) return item;
    *w = v;
    return colon + 1;
}

static enum zt_status add_item(const char *what, const char *item, size_t len,
                               struct source_list *l) {
    char buf[512];
    if (len == 0 || len >= sizeof buf)
        return zt_error_set(ZT_ERR_USAGE, "%s: %s source (expected PATH or WEIGHT:PATH, comma "
                            "separated)", what, len ? "an overlong" : "an empty");
    if (l->n == ZT_DATA_MAX_SOURCES)
        return zt_error_set(ZT_ERR_USAGE, "%s: more than %d sources", what, ZT_DATA_MAX_SOURCES);
    memcpy(buf, item, len);
    buf[len] = 0;
    struct source_arg *a = &l->a[l->n++];
    a->weight = 0;
    a->tokens = -1;
    double w = NAN;
    const char *path = split_weight(buf, &w);
    if (path != buf && !(isfinite(w) && w > 0))
        return zt_error_set(ZT_ERR_USAGE, "%s: weight %.*s of %s: expected a number > 0", what,
                            (int)(path - 1 - buf), buf, path);
    if (path != buf) a->weight = w;
    if (!*path) return zt_error_set(ZT_ERR_USAGE, "%s: weight %g without a path", what, w);
    snprintf(a->path, sizeof a->path, "%.*s", (int)sizeof a->path - 1, path);
    return ZT_OK;
}

static enum zt_status parse_list(const char *what, const char *s, struct source_list *l) {
    l->n = 0;
    for (const char *p = s;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        ZT_CHECK(add_item(what, p, len, l));
        if (!comma) return ZT_OK;
        p = comma + 1;
    }
}

// ----------------------------------------------------------------------------
// the JSON spec

static const char *const spec_keys[] = {"train", "validation", "valid_split", NULL};
static const char *const entry_keys[] = {"path", "weight", "tokens", NULL};

/* the spec's directory joined to a relative path */
static void spec_path(const char *spec, const char *p, char *out, size_t n) {
    const char *slash = strrchr(spec, '/');
    if (p[0] == '/' || !slash) snprintf(out, n, "%s", p);
    else snprintf(out, n, "%.*s/%s", (int)(slash - spec), spec, p);
}

static enum zt_status parse_entry(const struct zt_json_ctx *c, const cJSON *e, const char *path,
                                  struct source_arg *a) {
    ZT_CHECK(zt_json_object(c, e, path));
    ZT_CHECK(zt_json_check_keys(c, e, path, entry_keys, NULL));
    char sub[ZT_JSON_PATH_MAX];
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(e, "path");
    zt_json_path(sub, path, "path");
    if (!cJSON_IsString(p) || !p->valuestring[0])
        return zt_json_err(c, sub, "expected the token file's path (a string)");
    spec_path(c->file, p->valuestring, a->path, sizeof a->path);
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(e, "weight");
    zt_json_path(sub, path, "weight");
    a->weight = 0;
    if (w) ZT_CHECK(zt_json_num(c, w, sub, ZT_JSON_GT0, &a->weight));
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(e, "tokens");
    zt_json_path(sub, path, "tokens");
    a->tokens = -1;
    if (t) ZT_CHECK(zt_json_int(c, t, sub, 2, INT32_MAX, &a->tokens));
    return ZT_OK;
}

static enum zt_status parse_array(const struct zt_json_ctx *c, const cJSON *arr, const char *key,
                                  struct source_list *l) {
    if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) < 1)
        return zt_json_err(c, key, "expected a non-empty list of {\"path\": ...} entries");
    if (cJSON_GetArraySize(arr) > ZT_DATA_MAX_SOURCES)
        return zt_json_err(c, key, "more than %d sources", ZT_DATA_MAX_SOURCES);
    l->n = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, arr) {
        char path[ZT_JSON_PATH_MAX];
        snprintf(path, sizeof path, "%s[%d]", key, l->n);
        ZT_CHECK(parse_entry(c, e, path, &l->a[l->n++]));
    }
    return ZT_OK;
}

/* the spec file: train (and validation) lists, valid_split (-1: none) */
static enum zt_status parse_spec(const char *file, struct source_list *train,
                                 struct source_list *valid, double *valid_split) {
    char *text;
    size_t len;
    if (zt_file_read_all(file, SPEC_MAX_BYTES, &text, &len) != 0)
        return zt_error_set(ZT_ERR_IO, "data spec %s: cannot read (%s)", file, strerror(errno));
    cJSON *root = cJSON_Parse(text);
    free(text);
    const struct zt_json_ctx c = {"data spec", file};
    enum zt_status rc = root ? zt_json_object(&c, root, "")
                             : zt_json_err(&c, "", "not valid JSON");
    if (rc == ZT_OK) rc = zt_json_check_keys(&c, root, "", spec_keys, NULL);
    if (rc == ZT_OK)
        rc = parse_array(&c, cJSON_GetObjectItemCaseSensitive(root, "train"), "train", train);
    const cJSON *v = root ? cJSON_GetObjectItemCaseSensitive(root, "validation") : NULL;
    const cJSON *vs = root ? cJSON_GetObjectItemCaseSensitive(root, "valid_split") : NULL;
    valid->n = 0;
    *valid_split = -1;
    if (rc == ZT_OK && v && vs)
        rc = zt_json_err(&c, "valid_split", "give either validation or valid_split, not both");
    if (rc == ZT_OK && v) rc = parse_array(&c, v, "validation", valid);
    if (rc == ZT_OK && vs) rc = zt_json_num(&c, vs, "valid_split", ZT_JSON_UNIT_HALF_OPEN,
                                            valid_split);
    cJSON_Delete(root);
    return rc;
}

// ----------------------------------------------------------------------------
// opening the files and building the sets

/* weights all given or none (then the sources' sizes), normalised */
static enum zt_status normalise(const char *what, struct zt_data_set *set,
                                const struct source_list *l) {
    int given = 0;
    for (int i = 0; i < l->n; i++) given += l->a[i].weight > 0;
    if (given && given != l->n)
        return zt_error_set(ZT_ERR_USAGE, "%s: %d of %d sources have a weight: give one for "
                            "every source or for none", what, given, l->n);
    double sum = 0;
    for (int i = 0; i < set->nsources; i++) {
        set->src[i].weight = given ? l->a[i].weight : (double)set->src[i].nseq;
        sum += set->src[i].weight;
    }
    if (!isfinite(sum))
        return zt_error_set(ZT_ERR_USAGE, "%s: the weights add up to more than a double holds "
                            "(expected shares such as 0.7 and 0.3)", what);
    for (int i = 0; i < set->nsources; i++) /* sum 0: one file too short for a sequence */
        set->src[i].weight = sum > 0 ? set->src[i].weight / sum : 1.0 / set->nsources;
    return ZT_OK;
}

/* open source i's file (its own slot in d->files) and take all its sequences */
static enum zt_status open_source(struct zt_dataset *d, const char *what,
                                  const struct source_arg *a, int vocab, int legacy,
                                  struct zt_data_source *s) {
    if (d->nfiles == ZT_DATA_MAX_SOURCES)
        return zt_error_set(ZT_ERR_USAGE, "%s: more than %d token files in all", what,
                            ZT_DATA_MAX_SOURCES);
    struct zt_tokens *t = &d->files[d->nfiles];
    ZT_CHECK(zt_tokens_open(t, a->path, vocab));
    s->file = d->nfiles++;
    snprintf(s->path, sizeof s->path, "%s", a->path);
    if (a->tokens >= 0 && (size_t)a->tokens != t->count)
        return zt_error_set(ZT_ERR_DATA, "%s: %s holds %zu tokens, the spec says %lld", what,
                            a->path, t->count, a->tokens);
    s->first = 0;
    s->nseq = (int64_t)((t->count - 1) / (size_t)d->T);
    if (s->nseq < 1 && !legacy)
        return zt_error_set(ZT_ERR_DATA, "%s: %s holds %zu tokens, fewer than one sequence of "
                            "seq_len %d + 1", what, a->path, t->count, d->T);
    return ZT_OK;
}

static enum zt_status open_set(struct zt_dataset *d, const char *what,
                               const struct source_list *l, int vocab, int legacy,
                               struct zt_data_set *set) {
    set->nsources = l->n;
    for (int i = 0; i < l->n; i++)
        ZT_CHECK(open_source(d, what, &l->a[i], vocab, legacy, &set->src[i]));
    return normalise(what, set, l);
}

/* valid_split: the last f of every train source's sequences become a validation source */
static enum zt_status split_valid(struct zt_dataset *d, const char *what, double f) {
    d->valid.nsources = d->train.nsources;
    for (int i = 0; i < d->train.nsources; i++) {
        struct zt_data_source *t = &d->train.src[i], *v = &d->valid.src[i];
        int64_t nv = (int64_t)ceil(f * (double)t->nseq);
        if (nv < 1 || nv >= t->nseq)
            return zt_error_set(ZT_ERR_DATA, "%s: valid_split %g of %s's %lld sequences leaves "
                                "%s", what, f, t->path, (long long)t->nseq,
                                nv < 1 ? "no validation sequence" : "no training sequence");
        *v = *t;
        v->first = t->nseq - nv;
        v->nseq = nv;
        t->nseq -= nv;
    }
    struct source_list none = {0};
    return normalise(what, &d->valid, &none);
}

static enum zt_status open_lists(struct zt_dataset *d, const char *data,
                                 const char *eval_data, int vocab, struct source_list *lists) {
    struct source_list *train = &lists[0], *valid = &lists[1];
    char what[600];
    snprintf(what, sizeof what, "--data %s", data);
    double split = -1;
    int spec = zt_path_has_suffix(data, ".json");
    if (spec) ZT_CHECK(parse_spec(data, train, valid, &split));
    else ZT_CHECK(parse_list(what, data, train));
    d->legacy = !spec && train->n == 1 && train->a[0].weight == 0 && d->order == ZT_DATA_LINEAR;
    ZT_CHECK(open_set(d, what, train, vocab, d->legacy, &d->train));
    if (split > 0) ZT_CHECK(split_valid(d, what, split));
    if (spec && valid->n) ZT_CHECK(open_set(d, what, valid, vocab, 0, &d->valid));
    if (!eval_data) return ZT_OK;
    snprintf(what, sizeof what, "--eval-data %s", eval_data);
    if (valid->n || split > 0)
        return zt_error_set(ZT_ERR_USAGE, "%s: the data spec %s names validation data already "
                            "(validation or valid_split): give one of them", what, data);
    if (zt_path_has_suffix(eval_data, ".json"))
        return zt_error_set(ZT_ERR_USAGE, "%s: expected token files (PATH, a list, or a "
                            "WEIGHT:PATH blend); a spec's validation list comes with --data",
                            what);
    ZT_CHECK(parse_list(what, eval_data, valid));
    return open_set(d, what, valid, vocab, 0, &d->valid);
}

enum zt_status zt_dataset_open(struct zt_dataset *d, const char *data, const char *eval_data,
                               int vocab_size, int T, enum zt_data_order order, uint64_t seed) {
    ZT_ASSERT_MSG(d && data && T >= 1, "zt_dataset_open: bad arguments");
    memset(d, 0, sizeof *d);
    for (int i = 0; i < ZT_DATA_MAX_SOURCES; i++) d->files[i].fd = -1;
    d->T = T;
    d->order = order;
    d->seed = seed;
    struct source_list *lists = calloc(2, sizeof *lists); /* 74 KiB: off the stack */
    if (!lists) return zt_error_set(ZT_ERR_NOMEM, "data %s: out of memory", data);
    enum zt_status rc = open_lists(d, data, eval_data, vocab_size, lists);
    free(lists);
    if (rc != ZT_OK) zt_dataset_close(d);
    return rc;
}

void zt_dataset_close(struct zt_dataset *d) {
    if (!d) return;
    for (int i = 0; i < d->nfiles; i++) zt_tokens_close(&d->files[i]);
    d->nfiles = 0;
}
