/*
 * io/tracefile.c: the replay file (.ztr): its writer, its reader, and the run's metadata.
 *
 * Layer: io/ (platform; no StarPU). sched/trace.c writes the file through
 * zt_tracefile_write_header/_task; the zt-trace tool reads it with zt_tracefile_open/_next.
 * The format is in zt_tracefile.h and docs/traces.md. The reader checks every field of every
 * line and, at the end, the ids and dependencies of the whole file (docs/traces.md, "What the
 * reader checks"), and reports the first fault as one zt_error_set line naming the file, the
 * line, the field and its value. It reads a file or a buffer in memory (the fuzz target's way).
 */
#include "zt_tracefile.h"

#include <errno.h>     /* errno */
#include <math.h>      /* isfinite, floor */
#include <stdarg.h>    /* va_list */
#include <stdlib.h>    /* strtoll, strtod, realloc, free, qsort, bsearch */
#include <string.h>    /* strcmp, strncmp, strchr, strspn, strerror, strdup */
#include <sys/types.h> /* ssize_t */

/* the header line's words; the version and columns follow */
#define HEADER_PREFIX "# zerotask replay "
#define COLUMNS_WHAT "rank id kind step layer mb blk worker node submit_us start_us end_us "
#define COLUMNS_V2 COLUMNS_WHAT "bytes_read bytes_written prio ndeps deps..."
#define COLUMNS_V3 COLUMNS_WHAT "cpu_us waited_us bytes_read bytes_written prio ndeps deps..."
#define COLUMNS_V4                                                                               \
    COLUMNS_WHAT "cpu_us waited_us bytes_read bytes_written prio recompute ndeps deps..."
#define META_PREFIX "# meta"

static int starts_with(const char *s, const char *prefix) {
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

// ----------------------------------------------------------------------------------------------
// metadata

void zt_tracefile_meta_set(struct zt_tracefile_meta *m, const char *key, const char *value) {
    int i = 0;
    while (i < m->n && strcmp(m->key[i], key) != 0) i++;
    if (i == ZT_TRACEFILE_META_MAX) return;
    snprintf(m->key[i], sizeof m->key[i], "%s", key);
    snprintf(m->value[i], sizeof m->value[i], "%s", value);
    /* one word in the replay file, a plain string in the JSON */
    for (char *c = m->value[i]; *c; c++)
        if (*c == ' ' || *c == '\t' || *c == '"' || *c == '\\' || *c == '\n') *c = '_';
    if (i == m->n) m->n++;
}

const char *zt_tracefile_meta_get(const struct zt_tracefile_meta *m, const char *key) {
    for (int i = 0; i < m->n; i++)
        if (strcmp(m->key[i], key) == 0) return m->value[i];
    return NULL;
}

// ----------------------------------------------------------------------------------------------
// writer

void zt_tracefile_replay_path(char *out, size_t n, const char *json_path) {
    size_t l = strlen(json_path);
    if (ends_with(json_path, ".json"))
        snprintf(out, n, "%.*s.ztr", (int)(l - 5), json_path);
    else
        snprintf(out, n, "%s.ztr", json_path);
}

void zt_tracefile_write_header(FILE *f, const struct zt_tracefile_meta *meta) {
    fprintf(f, HEADER_PREFIX "%d: " COLUMNS_V4 "\n" META_PREFIX, ZT_TRACEFILE_VERSION);
    for (int i = 0; i < meta->n; i++) fprintf(f, " %s=%s", meta->key[i], meta->value[i]);
    fprintf(f, "\n");
}

void zt_tracefile_write_task(FILE *f, const struct zt_tracefile_task *t, double origin_us) {
    fprintf(f, "%d %lld %s %lld %d %d %d %d %d", t->rank, (long long)t->id, t->kind,
            (long long)t->step, t->layer, t->mb, t->blk, t->worker, t->node);
    fprintf(f, " %.3f %.3f %.3f %.3f %.3f %lld %lld %lld %d %lld", t->submit_us - origin_us,
            t->start_us - origin_us, t->end_us - origin_us, t->cpu_us, t->waited_us,
            (long long)t->bytes_read, (long long)t->bytes_written, (long long)t->prio,
            t->recompute ? 1 : 0, (long long)t->ndeps);
    for (int64_t k = 0; k < t->ndeps; k++) fprintf(f, " %lld", (long long)t->deps[k]);
    fprintf(f, "\n");
}

// ----------------------------------------------------------------------------------------------
// reader: opening

/* the file to read for path: the replay file beside a trace JSON, or path itself */
static enum zt_status pick_file(const char *path, char **out) {
    char sibling[4096];
    zt_tracefile_replay_path(sibling, sizeof sibling, path);
    int beside = ends_with(path, ".json");
    if (!beside && !ends_with(path, ".ztr")) { /* F written by --trace F has F.ztr beside it */
        FILE *probe = fopen(sibling, "r");
        if (probe) {
            beside = 1;
            fclose(probe);
        }
    }
    *out = strdup(beside ? sibling : path);
    if (!*out) return zt_error_set(ZT_ERR_NOMEM, "trace %s: out of memory", path);
    return ZT_OK;
}

/* the next line into r->buf (*len: its length; 0 at the end of the file), NUL bytes refused */
static enum zt_status read_line(struct zt_tracefile_reader *r, ssize_t *len) {
    *len = getline(&r->buf, &r->cap, r->f);
    if (*len <= 0) {
        *len = 0;
        if (ferror(r->f)) return zt_error_set(ZT_ERR_IO, "trace %s: read failed", r->path);
        return ZT_OK;
    }
    r->line++;
    if ((ssize_t)strlen(r->buf) != *len)
        return zt_error_set(ZT_ERR_DATA, "trace %s line %ld: a NUL byte at column %zu: expected "
                            "a text line (binary data?)", r->path, r->line, strlen(r->buf) + 1);
    return ZT_OK;
}

static enum zt_status read_header(struct zt_tracefile_reader *r) {
    ssize_t len;
    ZT_CHECK(read_line(r, &len));
    if (len == 0)
        return zt_error_set(ZT_ERR_DATA, "trace %s: empty (a replay file expected)", r->path);
    int v = 0;
    char colon = 0;
    if (!starts_with(r->buf, HEADER_PREFIX) ||
        sscanf(r->buf + strlen(HEADER_PREFIX), "%d%c", &v, &colon) != 2 || colon != ':')
        return zt_error_set(ZT_ERR_DATA,
                            "trace %s: not a zerotask replay file (first line \"" HEADER_PREFIX
                            "%d: ...\" expected; zt-train --trace F.json writes F.ztr)",
                            r->path, ZT_TRACEFILE_VERSION);
    if (v < ZT_TRACEFILE_VERSION_MIN || v > ZT_TRACEFILE_VERSION)
        return zt_error_set(ZT_ERR_DATA, "trace %s: replay file version %d (versions %d to %d "
                            "are read)", r->path, v, ZT_TRACEFILE_VERSION_MIN,
                            ZT_TRACEFILE_VERSION);
    r->version = v;
    return ZT_OK;
}

enum zt_status zt_tracefile_open(struct zt_tracefile_reader *r, const char *path) {
    memset(r, 0, sizeof *r);
    enum zt_status rc;
    ZT_CHECK(pick_file(path, &r->path));
    r->f = fopen(r->path, "r");
    if (!r->f) {
        if (strcmp(r->path, path) != 0)
            rc = zt_error_set(ZT_ERR_IO, "trace %s: cannot open its replay file %s (%s; "
                              "zt-train --trace writes it beside the JSON)", path, r->path,
                              strerror(errno));
        else
            rc = zt_error_set(ZT_ERR_IO, "trace %s: cannot open (%s)", path, strerror(errno));
        goto fail;
    }
    ZT_CHECK_GOTO(read_header(r), rc, fail);
    return ZT_OK;
fail:
    zt_tracefile_close(r);
    return rc;
}

enum zt_status zt_tracefile_open_buffer(struct zt_tracefile_reader *r, const char *buf,
                                        size_t n, const char *name) {
    memset(r, 0, sizeof *r);
    enum zt_status rc;
    r->path = strdup(name);
    if (!r->path) return zt_error_set(ZT_ERR_NOMEM, "trace %s: out of memory", name);
    if (n == 0) {
        rc = zt_error_set(ZT_ERR_DATA, "trace %s: empty (a replay file expected)", name);
        goto fail;
    }
    r->f = fmemopen((void *)buf, n, "r");
    if (!r->f) {
        rc = zt_error_set(ZT_ERR_NOMEM, "trace %s: cannot read from memory (%s)", name,
                          strerror(errno));
        goto fail;
    }
    ZT_CHECK_GOTO(read_header(r), rc, fail);
    return ZT_OK;
fail:
    zt_tracefile_close(r);
    return rc;
}

// ----------------------------------------------------------------------------------------------
// reader: the "# meta" line

/* the numeric keys zt-trace reads, and the values it accepts */
static const struct meta_range {
    const char *key;
    double min, max;
    int integer;
} meta_ranges[] = {
    {"world", 1, ZT_TRACEFILE_RANKS_MAX, 1},
    {"ranks_per_node", 1, ZT_TRACEFILE_RANKS_MAX, 1},
    {"cores", 1, 65536, 1},
    {"workers", 1, ZT_TRACE_IO_WORKER, 1},
    {"stage", 0, 3, 1},
    {"params", 0, 9007199254740992.0, 1},
    {"micro_batch", 0, 1 << 30, 1},
    {"grad_accum", 0, 1 << 30, 1},
    {"seq_len", 0, 1 << 30, 1},
    {"n_layer", 0, 1 << 30, 1},
    {"flops_per_step", 0, 1e30, 0},
    {"mem_params", 0, 9007199254740992.0, 1},
    {"mem_grads", 0, 9007199254740992.0, 1},
    {"mem_optim", 0, 9007199254740992.0, 1},
    {"mem_acts", 0, 9007199254740992.0, 1},
    {"mem_nvme", 0, 9007199254740992.0, 1},
};

/* a decimal number (no nan, inf or hex) of the whole of s into *v */
static int parse_decimal(const char *s, double *v) {
    if (!*s || strspn(s, "0123456789.eE+-") != strlen(s)) return 0;
    char *end;
    errno = 0;
    *v = strtod(s, &end);
    return *end == '\0' && errno == 0 && isfinite(*v);
}

/* a field's value as the messages show it: at most 40 bytes, anything unprintable as '?' */
static const char *shown(const char *v, char *out, size_t n) {
    size_t k = 0;
    for (; v[k] && k + 1 < n && k < 40; k++)
        out[k] = v[k] >= 0x20 && v[k] < 0x7f ? v[k] : '?';
    out[k] = '\0';
    return out;
}

/* a key's value checked against meta_ranges (keys not there are passed through) */
static enum zt_status meta_check(struct zt_tracefile_reader *r, const char *key, const char *v) {
    for (size_t k = 0; k < sizeof meta_ranges / sizeof meta_ranges[0]; k++) {
        const struct meta_range *m = &meta_ranges[k];
        if (strcmp(key, m->key) != 0) continue;
        double x;
        char sv[48];
        if (!parse_decimal(v, &x) || x < m->min || x > m->max || (m->integer && x != floor(x)))
            return zt_error_set(ZT_ERR_DATA, "trace %s line %ld: meta %s=%s: expected %s from "
                                "%.0f to %.0f", r->path, r->line, key, shown(v, sv, sizeof sv),
                                m->integer ? "an integer" : "a number", m->min, m->max);
        if (!strcmp(key, "world")) r->world = (int)x;
        if (!strcmp(key, "workers")) r->workers = (int)x;
    }
    return ZT_OK;
}

/* the words key=value after "# meta" (words without '=' are skipped) */
static enum zt_status meta_parse(struct zt_tracefile_reader *r) {
    if (r->ntasks > 0)
        return zt_error_set(ZT_ERR_DATA, "trace %s line %ld: a \"# meta\" line after the first "
                            "task line: expected it before the tasks (line 2)", r->path,
                            r->line);
    char *save = NULL;
    for (char *w = strtok_r(r->buf + strlen(META_PREFIX), " \t\n", &save); w;
         w = strtok_r(NULL, " \t\n", &save)) {
        char *eq = strchr(w, '=');
        if (!eq) continue;
        *eq = '\0';
        ZT_CHECK(meta_check(r, w, eq + 1));
        zt_tracefile_meta_set(&r->meta, w, eq + 1);
    }
    return ZT_OK;
}

// ----------------------------------------------------------------------------------------------
// reader: a task line, field by field

/* "trace FILE line N: FIELD VALUE: expected ..." */
__attribute__((format(printf, 4, 5)))
static enum zt_status field_error(const struct zt_tracefile_reader *r, const char *field,
                                  const char *value, const char *fmt, ...) {
    char v[48], what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return zt_error_set(ZT_ERR_DATA, "trace %s line %ld: %s %s: expected %s", r->path, r->line,
                        field, shown(value, v, sizeof v), what);
}

/* the first max words of the line into w[0..*n), the line cut at its blanks; *save: where
 * strtok_r goes on from */
static void split_words(char *line, char **w, int max, int *n, char **save) {
    *n = 0;
    *save = NULL;
    for (char *t = strtok_r(line, " \t", save); t; t = *n < max ? strtok_r(NULL, " \t", save)
                                                               : NULL) {
        w[(*n)++] = t;
        if (*n == max) break;
    }
}

/* an integer word in [lo, hi] into *v */
static enum zt_status int_field(const struct zt_tracefile_reader *r, const char *field,
                                const char *s, long long lo, long long hi, long long *v) {
    char *end;
    errno = 0;
    *v = strtoll(s, &end, 10);
    if (end == s || *end != '\0' || errno == ERANGE || *v < lo || *v > hi)
        return field_error(r, field, s, "an integer from %lld to %lld", lo, hi);
    return ZT_OK;
}

/* a time word into *v: microseconds in [0, ZT_TRACEFILE_TIME_MAX_US]; with unknown, -1 too */
static enum zt_status time_field(const struct zt_tracefile_reader *r, const char *field,
                                 const char *s, int unknown, double *v) {
    if (parse_decimal(s, v) && ((*v >= 0 && *v <= ZT_TRACEFILE_TIME_MAX_US) ||
                                (unknown && *v == -1)))
        return ZT_OK;
    return field_error(r, field, s, "%sa finite number of microseconds from 0 to %.0e",
                       unknown ? "-1 (not measured) or " : "", ZT_TRACEFILE_TIME_MAX_US);
}

/* the columns of a version 4 line (version 3 lacks recompute, version 2 also cpu_us and
 * waited_us) */
enum column {
    C_RANK, C_ID, C_KIND, C_STEP, C_LAYER, C_MB, C_BLK, C_WORKER, C_NODE, C_SUBMIT, C_START,
    C_END, C_CPU, C_WAITED, C_BREAD, C_BWRITTEN, C_PRIO, C_RECOMPUTE, C_NDEPS, C_COUNT
};
static const char *const column_names[C_COUNT] = {
    "rank", "id", "kind", "step", "layer", "mb", "blk", "worker", "node", "submit_us",
    "start_us", "end_us", "cpu_us", "waited_us", "bytes_read", "bytes_written", "prio",
    "recompute", "ndeps"};

/* whether a version's lines lack column c */
static int absent(int version, enum column c) {
    return (version < 4 && c == C_RECOMPUTE) || (version < 3 && (c == C_CPU || c == C_WAITED));
}

/* which of a version's words is column c (-1: the version has none) */
static int word_of(int version, enum column c) {
    if (absent(version, c)) return -1;
    int w = 0;
    for (int k = 0; k < (int)c; k++) w += !absent(version, (enum column)k);
    return w;
}

/* the header's column list of a version, for messages */
static const char *columns_of(int version) {
    return version >= 4 ? COLUMNS_V4 : version == 3 ? COLUMNS_V3 : COLUMNS_V2;
}

/* where a task ran: its rank, worker and node, within the file's world and workers */
static enum zt_status place_fields(struct zt_tracefile_reader *r, char **w,
                                   struct zt_tracefile_task *t) {
    long long v;
    long long ranks = r->world ? r->world : ZT_TRACEFILE_RANKS_MAX;
    long long nwk = r->workers ? r->workers : ZT_TRACE_IO_WORKER;
    const char *wks = w[word_of(r->version, C_WORKER)];
    if (int_field(r, "rank", w[C_RANK], 0, ranks - 1, &v) != ZT_OK)
        return field_error(r, "rank", w[C_RANK], "a rank from 0 to %lld%s", ranks - 1,
                           r->world ? " (the \"# meta\" line's world)" : "");
    t->rank = (int)v;
    char *end;
    errno = 0;
    v = strtoll(wks, &end, 10);
    int ok = end != wks && *end == '\0' && errno == 0;
    if (!ok || !((v >= 0 && v < nwk) || (v >= ZT_TRACE_IO_WORKER &&
                                          v < ZT_TRACE_IO_WORKER + ZT_TRACE_IO_THREADS_MAX)))
        return field_error(r, "worker", wks, "a compute worker from 0 to %lld%s or an I/O "
                           "thread from %d to %d", nwk - 1,
                           r->workers ? " (the \"# meta\" line's workers)" : "",
                           ZT_TRACE_IO_WORKER, ZT_TRACE_IO_WORKER + ZT_TRACE_IO_THREADS_MAX - 1);
    t->worker = (int)v;
    ZT_CHECK(int_field(r, "node", w[word_of(r->version, C_NODE)], 0, 65535, &v));
    t->node = (int)v;
    return ZT_OK;
}

/* what it was: its id, kind, step, layer, micro-batch and row block */
static enum zt_status label_fields(struct zt_tracefile_reader *r, char **w,
                                   struct zt_tracefile_task *t) {
    long long v;
    ZT_CHECK(int_field(r, "id", w[C_ID], 0, INT64_MAX / 2, &v));
    t->id = v;
    if (strlen(w[C_KIND]) >= sizeof r->kind)
        return field_error(r, "kind", w[C_KIND], "a task kind name of at most %d bytes",
                           (int)sizeof r->kind - 1);
    snprintf(r->kind, sizeof r->kind, "%s", w[C_KIND]);
    t->kind = r->kind;
    ZT_CHECK(int_field(r, "step", w[C_STEP], -1, INT64_MAX / 2, &v));
    t->step = v;
    ZT_CHECK(int_field(r, "layer", w[C_LAYER], -1, INT32_MAX, &v));
    t->layer = (int)v;
    ZT_CHECK(int_field(r, "mb", w[C_MB], -1, INT32_MAX, &v));
    t->mb = (int)v;
    ZT_CHECK(int_field(r, "blk", w[C_BLK], -1, INT32_MAX, &v));
    t->blk = (int)v;
    return ZT_OK;
}

/* when: submitted, started, ended (in that order), its CPU time and wait for a core */
static enum zt_status time_fields(struct zt_tracefile_reader *r, char **w,
                                  struct zt_tracefile_task *t) {
    int v = r->version;
    ZT_CHECK(time_field(r, "submit_us", w[word_of(v, C_SUBMIT)], 0, &t->submit_us));
    ZT_CHECK(time_field(r, "start_us", w[word_of(v, C_START)], 0, &t->start_us));
    ZT_CHECK(time_field(r, "end_us", w[word_of(v, C_END)], 0, &t->end_us));
    if (t->start_us < t->submit_us)
        return field_error(r, "start_us", w[word_of(v, C_START)], "at least submit_us %.3f (a "
                           "task starts after its submission)", t->submit_us);
    if (t->end_us < t->start_us)
        return field_error(r, "end_us", w[word_of(v, C_END)], "at least start_us %.3f",
                           t->start_us);
    t->cpu_us = t->waited_us = -1;
    if (!absent(v, C_CPU)) {
        ZT_CHECK(time_field(r, "cpu_us", w[word_of(v, C_CPU)], 1, &t->cpu_us));
        ZT_CHECK(time_field(r, "waited_us", w[word_of(v, C_WAITED)], 1, &t->waited_us));
    }
    return ZT_OK;
}

/* its bytes, priority, recompute mark and dependency count */
static enum zt_status size_fields(struct zt_tracefile_reader *r, char **w,
                                  struct zt_tracefile_task *t) {
    long long v;
    int ver = r->version;
    ZT_CHECK(int_field(r, "bytes_read", w[word_of(ver, C_BREAD)], 0, INT64_MAX / 4, &v));
    t->bytes_read = v;
    ZT_CHECK(int_field(r, "bytes_written", w[word_of(ver, C_BWRITTEN)], 0, INT64_MAX / 4, &v));
    t->bytes_written = v;
    ZT_CHECK(int_field(r, "prio", w[word_of(ver, C_PRIO)], INT32_MIN, INT32_MAX, &v));
    t->prio = v;
    if (!absent(ver, C_RECOMPUTE)) { /* else 0 */
        const char *mark = w[word_of(ver, C_RECOMPUTE)];
        if (strcmp(mark, "0") != 0 && strcmp(mark, "1") != 0)
            return field_error(r, "recompute", mark, "0 or 1 (1: the task recomputes a "
                               "checkpointed block's activations)");
        t->recompute = mark[0] == '1';
    }
    ZT_CHECK(int_field(r, "ndeps", w[word_of(ver, C_NDEPS)], 0, ZT_TRACEFILE_DEPS_MAX, &v));
    t->ndeps = v;
    return ZT_OK;
}

/* room for one more entry in a growing array *v of *cap entries of size sz */
static enum zt_status grow(const struct zt_tracefile_reader *r, void **v, int64_t *cap,
                           int64_t n, size_t sz) {
    if (n < *cap) return ZT_OK;
    int64_t c = *cap ? 2 * *cap : 64;
    void *p = realloc(*v, (size_t)c * sz);
    if (!p) return zt_error_set(ZT_ERR_NOMEM, "trace %s: out of memory", r->path);
    *v = p;
    *cap = c;
    return ZT_OK;
}

/* the ndeps dependency ids that follow the columns (the words strtok_r gives from *save):
 * each an earlier task's id of the rank, and nothing after them */
static enum zt_status dep_fields(struct zt_tracefile_reader *r, char **save,
                                 struct zt_tracefile_task *t) {
    int64_t k = 0;
    for (char *wd = strtok_r(NULL, " \t", save); wd; wd = strtok_r(NULL, " \t", save), k++) {
        if (k == t->ndeps)
            return zt_error_set(ZT_ERR_DATA, "trace %s line %ld: %lld dependencies announced, "
                                "more listed (ndeps: expected the number of ids that follow it)",
                                r->path, r->line, (long long)t->ndeps);
        long long v;
        ZT_CHECK(grow(r, (void **)&r->deps, &r->depcap, k, sizeof *r->deps));
        int number = int_field(r, "dependency", wd, 1, INT64_MAX, &v) == ZT_OK;
        if (!number || v >= t->id)
            return field_error(r, "dependency", wd, "the id of an earlier task of rank %d, "
                               "from 1 to %lld (%s)", t->rank, (long long)t->id - 1,
                               !number ? "ids are integers from 1"
                               : v == t->id ? "a task cannot depend on itself"
                                            : "it is not an earlier task: ids follow submission");
        r->deps[k] = v;
        ZT_CHECK(grow(r, (void **)&r->refs, &r->caprefs, r->nrefs, sizeof *r->refs));
        r->refs[r->nrefs++] = (struct zt_tracefile_ref){.id = v, .rank = t->rank,
                                                         .line = r->line};
    }
    if (k < t->ndeps)
        return zt_error_set(ZT_ERR_DATA, "trace %s line %ld: %lld dependencies announced, "
                            "fewer listed (ndeps: expected the number of ids that follow it)",
                            r->path, r->line, (long long)t->ndeps);
    t->deps = r->deps;
    return ZT_OK;
}

/* a task line (in r->buf, its newline still there) into *t, every field checked */
static enum zt_status parse_task(struct zt_tracefile_reader *r, ssize_t len,
                                 struct zt_tracefile_task *t) {
    if (r->buf[len - 1] != '\n')
        return zt_error_set(ZT_ERR_DATA, "trace %s line %ld: truncated (no newline at its end): "
                            "expected a whole task line", r->path, r->line);
    r->buf[len - 1] = '\0';
    int ncol = word_of(r->version, C_NDEPS) + 1, n; /* ndeps: every version's last column */
    char *w[C_COUNT], *save;
    split_words(r->buf, w, ncol, &n, &save);
    *t = (struct zt_tracefile_task){0};
    if (n < ncol) {
        int c = 0;
        while (word_of(r->version, (enum column)c) != n) c++;
        return zt_error_set(ZT_ERR_DATA, "trace %s line %ld: %s missing: expected \"%s\"",
                            r->path, r->line, column_names[c], columns_of(r->version));
    }
    ZT_CHECK(place_fields(r, w, t));
    ZT_CHECK(label_fields(r, w, t));
    ZT_CHECK(time_fields(r, w, t));
    ZT_CHECK(size_fields(r, w, t));
    if (t->id == 0 && t->ndeps > 0)
        return field_error(r, "ndeps", w[word_of(r->version, C_NDEPS)], "0 for a task "
                           "recorded without its submission (id 0)");
    ZT_CHECK(dep_fields(r, &save, t));
    if (t->id > 0) {
        ZT_CHECK(grow(r, (void **)&r->ids, &r->capids, r->nids, sizeof *r->ids));
        r->ids[r->nids++] = (struct zt_tracefile_ref){.id = t->id, .rank = t->rank,
                                                      .line = r->line};
    }
    return ZT_OK;
}

// ----------------------------------------------------------------------------------------------
// reader: the whole file

/* by rank and id (a dependency looked up among the ids) */
static int cmp_ref_id(const void *a, const void *b) {
    const struct zt_tracefile_ref *x = a, *y = b;
    if (x->rank != y->rank) return x->rank < y->rank ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* by rank, id, then line */
static int cmp_ref(const void *a, const void *b) {
    const struct zt_tracefile_ref *x = a, *y = b;
    if (x->rank != y->rank) return x->rank < y->rank ? -1 : 1;
    if (x->id != y->id) return x->id < y->id ? -1 : 1;
    return (x->line > y->line) - (x->line < y->line);
}

/* at the end of the file: every id once per rank, every dependency a task of the file */
static enum zt_status check_graph(struct zt_tracefile_reader *r) {
    if (r->nids > 1) qsort(r->ids, (size_t)r->nids, sizeof *r->ids, cmp_ref);
    for (int64_t i = 1; i < r->nids; i++)
        if (r->ids[i].rank == r->ids[i - 1].rank && r->ids[i].id == r->ids[i - 1].id)
            return zt_error_set(ZT_ERR_DATA, "trace %s line %ld: id %lld: expected an id no "
                                "other task of rank %d has (line %ld has it too)", r->path,
                                r->ids[i].line, (long long)r->ids[i].id, r->ids[i].rank,
                                r->ids[i - 1].line);
    for (int64_t k = 0; k < r->nrefs; k++) {
        const struct zt_tracefile_ref *d = &r->refs[k];
        if (!r->nids || !bsearch(d, r->ids, (size_t)r->nids, sizeof *r->ids, cmp_ref_id))
            return zt_error_set(ZT_ERR_DATA, "trace %s line %ld: dependency %lld: expected the "
                                "id of a task of rank %d in the file (none has it)", r->path,
                                d->line, (long long)d->id, d->rank);
    }
    return ZT_OK;
}

enum zt_status zt_tracefile_next(struct zt_tracefile_reader *r, struct zt_tracefile_task *t,
                                 int *got) {
    *got = 0;
    ssize_t len;
    for (;;) {
        ZT_CHECK(read_line(r, &len));
        if (len == 0) return check_graph(r);
        if (r->buf[0] != '#') break;
        if (starts_with(r->buf, META_PREFIX)) ZT_CHECK(meta_parse(r));
    }
    ZT_CHECK(parse_task(r, len, t));
    r->ntasks++;
    *got = 1;
    return ZT_OK;
}

enum zt_status zt_tracefile_parse(const char *buf, size_t n, const char *name,
                                  int64_t *ntasks) {
    struct zt_tracefile_reader r;
    struct zt_tracefile_task t;
    int got = 1;
    enum zt_status rc = zt_tracefile_open_buffer(&r, buf, n, name);
    while (rc == ZT_OK && got) rc = zt_tracefile_next(&r, &t, &got);
    if (ntasks) *ntasks = rc == ZT_OK ? r.ntasks : 0;
    zt_tracefile_close(&r);
    return rc;
}

void zt_tracefile_close(struct zt_tracefile_reader *r) {
    if (r->f) fclose(r->f);
    free(r->buf);
    free(r->deps);
    free(r->ids);
    free(r->refs);
    free(r->path);
    memset(r, 0, sizeof *r);
}
