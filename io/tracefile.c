/*
 * io/tracefile.c: the replay file (.ztr): its writer, its reader, and the run's metadata.
 *
 * Layer: io/ (platform; no StarPU). sched/trace.c writes the file through
 * zt_tracefile_write_header/_task; the zt-trace tool reads it with zt_tracefile_open/_next.
 * The format is in zt_tracefile.h and docs/traces.md. The reader reports a damaged file as one
 * zt_error_set line naming the file and the line.
 */
#include "zt_tracefile.h"

#include <errno.h>  /* errno */
#include <stdlib.h> /* strtoll, realloc, free */
#include <string.h> /* strcmp, strncmp, strchr, strerror, strdup */

/* the header line's words; the version and columns follow */
#define HEADER_PREFIX "# zerotask replay "
#define COLUMNS_V2                                                                               \
    "rank id kind step layer mb blk worker node submit_us start_us end_us bytes_read "           \
    "bytes_written prio ndeps deps..."
#define COLUMNS_V3                                                                               \
    "rank id kind step layer mb blk worker node submit_us start_us end_us cpu_us waited_us "     \
    "bytes_read bytes_written prio ndeps deps..."
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

/* the words key=value after "# meta" (words without '=' are skipped) */
static void meta_parse(struct zt_tracefile_meta *m, char *line) {
    char *save = NULL;
    for (char *w = strtok_r(line + strlen(META_PREFIX), " \n", &save); w;
         w = strtok_r(NULL, " \n", &save)) {
        char *eq = strchr(w, '=');
        if (!eq) continue;
        *eq = '\0';
        zt_tracefile_meta_set(m, w, eq + 1);
    }
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
    fprintf(f, HEADER_PREFIX "%d: " COLUMNS_V3 "\n" META_PREFIX, ZT_TRACEFILE_VERSION);
    for (int i = 0; i < meta->n; i++) fprintf(f, " %s=%s", meta->key[i], meta->value[i]);
    fprintf(f, "\n");
}

void zt_tracefile_write_task(FILE *f, const struct zt_tracefile_task *t, double origin_us) {
    fprintf(f, "%d %lld %s %lld %d %d %d %d %d", t->rank, (long long)t->id, t->kind,
            (long long)t->step, t->layer, t->mb, t->blk, t->worker, t->node);
    fprintf(f, " %.3f %.3f %.3f %.3f %.3f %lld %lld %lld %lld", t->submit_us - origin_us,
            t->start_us - origin_us, t->end_us - origin_us, t->cpu_us, t->waited_us,
            (long long)t->bytes_read, (long long)t->bytes_written, (long long)t->prio,
            (long long)t->ndeps);
    for (int64_t k = 0; k < t->ndeps; k++) fprintf(f, " %lld", (long long)t->deps[k]);
    fprintf(f, "\n");
}

// ----------------------------------------------------------------------------------------------
// reader

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

static enum zt_status read_header(struct zt_tracefile_reader *r) {
    if (getline(&r->buf, &r->cap, r->f) <= 0) {
        if (ferror(r->f)) return zt_error_set(ZT_ERR_IO, "trace %s: read failed", r->path);
        return zt_error_set(ZT_ERR_DATA, "trace %s: empty (a replay file expected)", r->path);
    }
    r->line = 1;
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

static enum zt_status line_error(const struct zt_tracefile_reader *r) {
    return zt_error_set(ZT_ERR_DATA, "trace %s line %ld: expected \"%s\"", r->path, r->line,
                        r->version >= 3 ? COLUMNS_V3 : COLUMNS_V2);
}

/* the fixed columns of a task line into *t; *used: where the dependency ids begin */
static enum zt_status parse_columns(struct zt_tracefile_reader *r, struct zt_tracefile_task *t,
                                    int *used) {
    int rank, nd, n;
    long long id, step, br, bw, prio;
    t->cpu_us = -1;
    t->waited_us = -1;
    *used = 0;
    if (r->version >= 3)
        n = sscanf(r->buf, "%d %lld %31s %lld %d %d %d %d %d %lf %lf %lf %lf %lf %lld %lld %lld "
                           "%d%n", &rank, &id, r->kind, &step, &t->layer, &t->mb, &t->blk,
                   &t->worker, &t->node, &t->submit_us, &t->start_us, &t->end_us, &t->cpu_us,
                   &t->waited_us, &br, &bw, &prio, &nd, used) - 2;
    else
        n = sscanf(r->buf, "%d %lld %31s %lld %d %d %d %d %d %lf %lf %lf %lld %lld %lld %d%n",
                   &rank, &id, r->kind, &step, &t->layer, &t->mb, &t->blk, &t->worker,
                   &t->node, &t->submit_us, &t->start_us, &t->end_us, &br, &bw, &prio, &nd,
                   used);
    if (n != 16 || rank < 0 || rank > 65535 || nd < 0 || id < 0 || t->end_us < t->start_us)
        return line_error(r);
    t->rank = rank;
    t->id = id;
    t->kind = r->kind;
    t->step = step;
    t->bytes_read = br;
    t->bytes_written = bw;
    t->prio = prio;
    t->ndeps = nd;
    return ZT_OK;
}

/* the ndeps dependency ids after the fixed columns (from buf + used) */
static enum zt_status parse_deps(struct zt_tracefile_reader *r, struct zt_tracefile_task *t,
                                 int used) {
    const char *p = r->buf + used;
    for (int64_t k = 0; k < t->ndeps; k++) {
        char *end;
        long long v = strtoll(p, &end, 10);
        if (end == p)
            return zt_error_set(ZT_ERR_DATA, "trace %s line %ld: %lld dependencies announced, "
                                "fewer listed", r->path, r->line, (long long)t->ndeps);
        if (k == r->depcap) { /* grown as ids are read: a bogus count cannot allocate */
            int64_t cap = r->depcap ? 2 * r->depcap : 64;
            int64_t *d = realloc(r->deps, (size_t)cap * sizeof *d);
            if (!d) return zt_error_set(ZT_ERR_NOMEM, "trace %s: out of memory", r->path);
            r->deps = d;
            r->depcap = cap;
        }
        r->deps[k] = v;
        p = end;
    }
    t->deps = r->deps;
    return ZT_OK;
}

enum zt_status zt_tracefile_next(struct zt_tracefile_reader *r, struct zt_tracefile_task *t,
                                 int *got) {
    *got = 0;
    for (;;) {
        if (getline(&r->buf, &r->cap, r->f) <= 0) {
            if (ferror(r->f)) return zt_error_set(ZT_ERR_IO, "trace %s: read failed", r->path);
            return ZT_OK;
        }
        r->line++;
        if (r->buf[0] != '#') break;
        if (starts_with(r->buf, META_PREFIX)) meta_parse(&r->meta, r->buf);
    }
    int used;
    ZT_CHECK(parse_columns(r, t, &used));
    ZT_CHECK(parse_deps(r, t, used));
    *got = 1;
    return ZT_OK;
}

void zt_tracefile_close(struct zt_tracefile_reader *r) {
    if (r->f) fclose(r->f);
    free(r->buf);
    free(r->deps);
    free(r->path);
    memset(r, 0, sizeof *r);
}
