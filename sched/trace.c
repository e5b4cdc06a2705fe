/*
 * sched/trace.c: per-task trace records, gathered from every rank and written as the trace files.
 *
 * Layer: sched/. The codelet dispatcher times each task body with starpu_timing_now() and calls
 * zt_trace_record(); each submission goes through zt_trace_submit(), which derives the task's
 * dependencies from its data accesses. StarPU's FxT tracing is not in Debian's build
 * (PLATFORM.md item 2), so this is our own. zt_trace_write() gathers the records to rank 0,
 * which writes the Chrome trace-event JSON (Perfetto, chrome://tracing: one process per rank,
 * one thread per StarPU worker) and the replay file beside it, both in the formats of
 * io/zt_tracefile.h.
 */
#include <pthread.h>      /* pthread_mutex_t */
#include <stdint.h>       /* uintptr_t */
#include <stdio.h>        /* open_memstream, snprintf */
#include <stdlib.h>       /* realloc */
#include <string.h>       /* memcpy */
#include <starpu.h>       /* starpu_worker_get_name */
#include "zt_comm.h"      /* zt_comm_gatherv_bytes */
#include "zt_file.h"      /* zt_afile_* */
#include "zt_sched.h"     /* struct zt_trace_rec */
#include "zt_tracefile.h" /* the trace files' writers, struct zt_tracefile_meta */

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct zt_trace_rec *g_recs;
static size_t g_n, g_cap;
static int g_on;

/* what is known of a task when it is submitted (index id - 1) */
struct trace_sub {
    double submit_us;
    int64_t bytes_r, bytes_w;
    int64_t prio;       /* its StarPU priority */
    int64_t dep0, ndep; /* its dependencies: g_deps[dep0 .. dep0 + ndep) */
};
static struct trace_sub *g_sub;
static int64_t g_nsub, g_capsub;
static int64_t *g_deps;
static int64_t g_ndeps, g_capdeps;

/* per handle: its last writer and the readers since (open addressing on the pointer) */
struct handle_state {
    const void *key;
    int64_t last_w;
    int64_t *rd;
    int nrd, caprd;
};
static struct handle_state *g_map;
static size_t g_mapcap, g_mapn;

/* the run's description (zt_trace_meta), written by rank 0 */
static struct zt_tracefile_meta g_meta;

void zt_trace_enable(int on) { g_on = on; }

void zt_trace_meta(const char *key, const char *value) {
    pthread_mutex_lock(&g_lock);
    zt_tracefile_meta_set(&g_meta, key, value);
    pthread_mutex_unlock(&g_lock);
}

int zt_trace_enabled(void) { return g_on; }

static size_t handle_slot(const struct handle_state *m, size_t cap, const void *key) {
    size_t i = ((uintptr_t)key >> 4) * 0x9E3779B97F4A7C15ull & (cap - 1);
    while (m[i].key && m[i].key != key) i = (i + 1) & (cap - 1);
    return i;
}

static struct handle_state *handle_get(const void *key) {
    if (g_mapcap) {
        size_t i = handle_slot(g_map, g_mapcap, key);
        if (g_map[i].key) return &g_map[i];
    }
    if (2 * (g_mapn + 1) > g_mapcap) {
        size_t cap = g_mapcap ? 2 * g_mapcap : 1024;
        struct handle_state *m = calloc(cap, sizeof *m);
        if (!m) return NULL;
        for (size_t i = 0; i < g_mapcap; i++)
            if (g_map[i].key) m[handle_slot(m, cap, g_map[i].key)] = g_map[i];
        free(g_map);
        g_map = m;
        g_mapcap = cap;
    }
    size_t i = handle_slot(g_map, g_mapcap, key);
    if (!g_map[i].key) {
        g_map[i].key = key;
        g_mapn++;
    }
    return &g_map[i];
}

static int grow(void **p, int64_t *cap, int64_t need, size_t elem) {
    if (need <= *cap) return 1;
    int64_t c = *cap ? *cap : 1024;
    while (c < need) c *= 2;
    void *q = realloc(*p, (size_t)c * elem);
    if (!q) return 0;
    *p = q;
    *cap = c;
    return 1;
}

static int add_dep(int64_t d) {
    if (d <= 0) return 1;
    for (int64_t i = g_sub[g_nsub].dep0; i < g_ndeps; i++)
        if (g_deps[i] == d) return 1;
    if (!grow((void **)&g_deps, &g_capdeps, g_ndeps + 1, sizeof *g_deps)) return 0;
    g_deps[g_ndeps++] = d;
    return 1;
}

int64_t zt_trace_submit(const struct starpu_data_descr *d, int n, int prio) {
    if (!g_on) return 0;
    pthread_mutex_lock(&g_lock);
    int64_t id = 0;
    if (!grow((void **)&g_sub, &g_capsub, g_nsub + 1, sizeof *g_sub)) goto out;
    struct trace_sub *t = &g_sub[g_nsub];
    *t = (struct trace_sub){.submit_us = starpu_timing_now(), .prio = prio, .dep0 = g_ndeps};
    id = g_nsub + 1;
    int ok = 1;
    for (int i = 0; i < n && ok; i++) {
        int m = (int)(d[i].mode & STARPU_RW); /* 1 read, 2 write, 3 both, 0 scratch */
        if (!m) continue;
        int64_t bytes = (int64_t)starpu_data_get_size(d[i].handle);
        if (m & 1) t->bytes_r += bytes;
        if (m & 2) t->bytes_w += bytes;
        struct handle_state *h = handle_get(d[i].handle);
        if (!h) {
            ok = 0;
            break;
        }
        ok = add_dep(h->last_w);
        if (m & 2) {
            for (int k = 0; k < h->nrd && ok; k++) ok = add_dep(h->rd[k]);
        }
    }
    for (int i = 0; i < n && ok; i++) { /* then the task becomes the handles' user */
        int m = (int)(d[i].mode & STARPU_RW);
        if (!m) continue;
        struct handle_state *h = handle_get(d[i].handle);
        if (m & 2) {
            h->last_w = id;
            h->nrd = 0;
        } else if (h->nrd == 0 || h->rd[h->nrd - 1] != id) {
            int64_t cap = h->caprd;
            if (!grow((void **)&h->rd, &cap, h->nrd + 1, sizeof *h->rd)) {
                ok = 0;
                break;
            }
            h->caprd = (int)cap;
            h->rd[h->nrd++] = id;
        }
    }
    t->ndep = g_ndeps - t->dep0;
    if (!ok) { /* out of memory: tracing is best effort, this task keeps no record */
        g_ndeps = t->dep0;
        id = 0;
    } else {
        g_nsub++;
    }
out:
    pthread_mutex_unlock(&g_lock);
    return id;
}

void zt_trace_record(const struct zt_trace_rec *r) {
    pthread_mutex_lock(&g_lock);
    if (g_n == g_cap) {
        size_t cap = g_cap ? 2 * g_cap : 4096;
        struct zt_trace_rec *p = realloc(g_recs, cap * sizeof *p);
        if (!p) { /* drop the record rather than fail the task: tracing is best effort */
            pthread_mutex_unlock(&g_lock);
            return;
        }
        g_recs = p;
        g_cap = cap;
    }
    g_recs[g_n++] = *r;
    pthread_mutex_unlock(&g_lock);
}

double zt_trace_busy_us(int64_t step) {
    double s = 0;
    pthread_mutex_lock(&g_lock);
    for (size_t i = 0; i < g_n; i++)
        if (step < 0 || g_recs[i].step == step) s += g_recs[i].end_us - g_recs[i].start_us;
    pthread_mutex_unlock(&g_lock);
    return s;
}

void zt_trace_reset(void) {
    pthread_mutex_lock(&g_lock);
    free(g_recs);
    g_recs = NULL;
    g_n = g_cap = 0;
    free(g_sub);
    free(g_deps);
    g_sub = NULL;
    g_deps = NULL;
    g_nsub = g_capsub = g_ndeps = g_capdeps = 0;
    for (size_t i = 0; i < g_mapcap; i++) free(g_map[i].rd);
    free(g_map);
    g_map = NULL;
    g_mapcap = g_mapn = 0;
    pthread_mutex_unlock(&g_lock);
}

/* what one rank sends to rank 0: a header, its worker names, its records, what was known of
 * each task at submission, and the dependency lists */
struct trace_hdr {
    int64_t nrec, nsub, ndeps;
    int32_t nworkers, pad;
};
#define TRACE_WNAME 64

static void *pack_local(size_t *len) {
    pthread_mutex_lock(&g_lock);
    unsigned nw = starpu_worker_get_count();
    *len = sizeof(struct trace_hdr) + (size_t)nw * TRACE_WNAME + g_n * sizeof *g_recs +
           (size_t)g_nsub * sizeof *g_sub + (size_t)g_ndeps * sizeof *g_deps;
    char *buf = calloc(1, *len);
    if (buf) {
        struct trace_hdr h = {(int64_t)g_n, g_nsub, g_ndeps, (int32_t)nw, 0};
        char *p = buf;
        memcpy(p, &h, sizeof h);
        p += sizeof h;
        for (unsigned w = 0; w < nw; w++)
            starpu_worker_get_name((int)w, p + (size_t)w * TRACE_WNAME, TRACE_WNAME);
        p += (size_t)nw * TRACE_WNAME;
        if (g_n) memcpy(p, g_recs, g_n * sizeof *g_recs);
        p += g_n * sizeof *g_recs;
        if (g_nsub) memcpy(p, g_sub, (size_t)g_nsub * sizeof *g_sub);
        p += (size_t)g_nsub * sizeof *g_sub;
        if (g_ndeps) memcpy(p, g_deps, (size_t)g_ndeps * sizeof *g_deps);
    }
    pthread_mutex_unlock(&g_lock);
    return buf;
}

/* one rank's part of the gathered bytes */
struct rank_part {
    struct trace_hdr h;
    const char *worker_names;
    const struct zt_trace_rec *rec;
    const struct trace_sub *sub;
    const int64_t *deps;
    int64_t *rec_of_id; /* [nsub + 1]: id -> index of its record, or -1 */
};

static const char *unpack(const char *p, struct rank_part *rp) {
    memcpy(&rp->h, p, sizeof rp->h);
    rp->worker_names = p + sizeof rp->h;
    rp->rec = (const void *)(rp->worker_names + (size_t)rp->h.nworkers * TRACE_WNAME);
    rp->sub = (const void *)(rp->rec + rp->h.nrec);
    rp->deps = (const void *)(rp->sub + rp->h.nsub);
    rp->rec_of_id = NULL;
    return (const char *)(rp->deps + rp->h.ndeps);
}

static const struct trace_sub *sub_of(const struct rank_part *rp, int64_t id) {
    return id >= 1 && id <= rp->h.nsub ? &rp->sub[id - 1] : NULL;
}

/* close the memory stream f (its text in *buf, *len) and write it to path crash-safely */
static enum zt_status put_file(const char *what, const char *path, FILE *f, char **bufp,
                               size_t *lenp) {
    int bad = fclose(f) != 0;
    char *buf = *bufp;
    size_t len = *lenp;
    if (bad) {
        free(buf);
        return zt_error_set(ZT_ERR_NOMEM, "%s %s: out of memory", what, path);
    }
    struct zt_afile af;
    enum zt_status rc = zt_afile_open(&af, what, path);
    if (rc == ZT_OK)
        rc = zt_afile_write(&af, buf, len) != 0 ? zt_afile_fail(&af) : zt_afile_commit(&af);
    free(buf);
    return rc;
}

/* Split the gathered bytes into the ranks' parts (at most nranks; *nr of them), each with its
 * id -> record index, and find the time origin: the earliest submission or start of any rank
 * (ranks on one machine share CLOCK_MONOTONIC, which starpu_timing_now reads, so their lanes
 * line up). */
static enum zt_status unpack_all(const char *path, const char *all, size_t total, int nranks,
                                 struct rank_part *rp, int *nr, double *origin) {
    double t0 = -1;
    const char *p = all;
    *nr = 0;
    for (; *nr < nranks && p < all + total; (*nr)++) {
        struct rank_part *x = &rp[*nr];
        p = unpack(p, x);
        x->rec_of_id = malloc((size_t)(x->h.nsub + 1) * sizeof *x->rec_of_id);
        if (!x->rec_of_id) {
            (*nr)++;
            return zt_error_set(ZT_ERR_NOMEM, "trace %s: out of memory", path);
        }
        for (int64_t i = 0; i <= x->h.nsub; i++) x->rec_of_id[i] = -1;
        for (int64_t i = 0; i < x->h.nrec; i++) {
            if (t0 < 0 || x->rec[i].start_us < t0) t0 = x->rec[i].start_us;
            if (x->rec[i].id >= 1 && x->rec[i].id <= x->h.nsub) x->rec_of_id[x->rec[i].id] = i;
        }
        for (int64_t i = 0; i < x->h.nsub; i++) /* submissions come first */
            if (t0 < 0 || x->sub[i].submit_us < t0) t0 = x->sub[i].submit_us;
    }
    *origin = t0 < 0 ? 0 : t0;
    return ZT_OK;
}

/* record e of rank r as the trace files hold it; what was known at its submission when it was
 * submitted while tracing was on (else its start stands for its submission) */
static void file_task(const struct rank_part *x, int r, const struct zt_trace_rec *e,
                      const char *kind, struct zt_tracefile_task *t) {
    *t = (struct zt_tracefile_task){
        .rank = r, .id = e->id, .kind = kind, .step = e->step, .layer = e->layer, .mb = e->mb,
        .blk = e->blk, .recompute = e->recompute, .worker = e->worker, .node = e->node,
        .submit_us = e->start_us, .start_us = e->start_us, .end_us = e->end_us,
        .cpu_us = e->cpu_us, .waited_us = e->waited_us, .bytes_read = e->bytes};
    const struct trace_sub *sb = sub_of(x, e->id);
    if (sb) {
        t->submit_us = sb->submit_us;
        t->bytes_read = sb->bytes_r;
        t->bytes_written = sb->bytes_w;
        t->prio = sb->prio;
        t->ndeps = sb->ndep;
        t->deps = &x->deps[sb->dep0];
    }
}

/* rank r's process and thread names: its StarPU workers, then the I/O threads it recorded */
static void json_rank_names(struct zt_tracefile_json *j, const struct rank_part *x, int r) {
    char name[TRACE_WNAME + 1];
    zt_tracefile_json_process(j, r);
    for (int w = 0; w < x->h.nworkers; w++) {
        snprintf(name, sizeof name, "%.*s", TRACE_WNAME, x->worker_names + (size_t)w * TRACE_WNAME);
        zt_tracefile_json_thread(j, r, w, name);
    }
    unsigned char io_named[ZT_TRACE_IO_THREADS_MAX] = {0};
    for (int64_t i = 0; i < x->h.nrec; i++) {
        int k = x->rec[i].worker - ZT_TRACE_IO_WORKER;
        if (k < 0 || k >= ZT_TRACE_IO_THREADS_MAX || io_named[k]) continue;
        io_named[k] = 1;
        if (x->rec[i].worker == ZT_TRACE_COMM_LANE) snprintf(name, sizeof name, "communication");
        else snprintf(name, sizeof name, "I/O thread %d", k);
        zt_tracefile_json_thread(j, r, x->rec[i].worker, name);
    }
}

/* rank r's tasks into both files: a JSON event and a replay line each, and a flow arrow from
 * each recorded dependency */
static void write_rank(struct zt_tracefile_json *j, FILE *g, double origin,
                       const struct rank_part *x, int r, const char *const *names, int nnames) {
    json_rank_names(j, x, r);
    for (int64_t i = 0; i < x->h.nrec; i++) {
        const struct zt_trace_rec *e = &x->rec[i];
        const char *kind = (e->kind >= 0 && e->kind < nnames) ? names[e->kind] : "task";
        struct zt_tracefile_task t;
        file_task(x, r, e, kind, &t);
        zt_tracefile_json_task(j, &t, e->bytes, sub_of(x, e->id) != NULL);
        zt_tracefile_write_task(g, &t, origin);
        for (int64_t k = 0; k < t.ndeps; k++) {
            int64_t at = x->rec_of_id[t.deps[k]];
            if (at < 0) continue;
            const struct zt_trace_rec *de = &x->rec[at];
            zt_tracefile_json_flow(j, r, de->worker, de->start_us, de->end_us, e->worker,
                                   e->start_us);
        }
    }
}

static enum zt_status write_all_ranks(const char *path, const char *const *names, int nnames,
                                      const char *all, size_t total, int nranks) {
    struct rank_part *rp = calloc((size_t)nranks, sizeof *rp);
    if (!rp) return zt_error_set(ZT_ERR_NOMEM, "trace %s: out of memory", path);
    int nr = 0;
    double origin = 0;
    enum zt_status rc;
    ZT_CHECK_GOTO(unpack_all(path, all, total, nranks, rp, &nr, &origin), rc, out);
    char *json = NULL, *rpl = NULL;
    size_t jlen = 0, rlen = 0;
    FILE *f = open_memstream(&json, &jlen), *g = open_memstream(&rpl, &rlen);
    if (!f || !g) {
        if (f) fclose(f);
        if (g) fclose(g);
        free(json);
        free(rpl);
        rc = zt_error_set(ZT_ERR_NOMEM, "trace %s: out of memory", path);
        goto out;
    }
    struct zt_tracefile_meta meta;
    pthread_mutex_lock(&g_lock);
    meta = g_meta;
    pthread_mutex_unlock(&g_lock);
    struct zt_tracefile_json j;
    zt_tracefile_json_begin(&j, f, origin, &meta);
    zt_tracefile_write_header(g, &meta);
    for (int r = 0; r < nr; r++) write_rank(&j, g, origin, &rp[r], r, names, nnames);
    zt_tracefile_json_end(&j);
    char rpath[1100];
    zt_tracefile_replay_path(rpath, sizeof rpath, path);
    rc = put_file("trace", path, f, &json, &jlen);
    enum zt_status rc2 = put_file("trace replay file", rpath, g, &rpl, &rlen);
    if (rc == ZT_OK) rc = rc2;
out:
    for (int r = 0; r < nr; r++) free(rp[r].rec_of_id);
    free(rp);
    return rc;
}

enum zt_status zt_trace_write(const char *path, const char *const *names, int nnames) {
    size_t len = 0;
    void *mine = pack_local(&len);
    if (!mine) return zt_error_set(ZT_ERR_NOMEM, "trace %s: out of memory", path);
    void *all = NULL;
    size_t total = 0;
    enum zt_status rc = zt_comm_gatherv_bytes(mine, len, &all, &total);
    free(mine);
    if (rc == ZT_OK && zt_comm_rank() == 0)
        rc = write_all_ranks(path, names, nnames, all, total, zt_comm_size());
    free(all);
    /* every rank learns whether rank 0 managed to write it */
    int nfailed = 0;
    if (zt_comm_count_failed(rc != ZT_OK, &nfailed) == ZT_OK && nfailed > 0 && rc == ZT_OK)
        rc = zt_error_set(ZT_ERR_PEER, "trace %s: rank 0 could not write it", path);
    return rc;
}
