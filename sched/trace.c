/*
 * sched/trace.c: per-task trace records and their Chrome trace-event JSON export.
 *
 * Layer: sched/. The codelet dispatcher (tasks/dispatch.c) times each task body with
 * starpu_timing_now() and calls zt_trace_record(); StarPU's FxT tracing is not in Debian's build
 * (PLATFORM.md item 2), so this is our own. The JSON opens in Perfetto (ui.perfetto.dev) and
 * chrome://tracing: one process per rank, one thread per StarPU worker. With several ranks the
 * records are gathered to rank 0, which writes the one file.
 */
#include <pthread.h>   /* pthread_mutex_t */
#include <stdio.h>     /* open_memstream, fprintf */
#include <stdlib.h>    /* realloc */
#include <string.h>    /* memcpy */
#include <starpu.h>    /* starpu_worker_get_name */
#include "zt_comm.h"   /* zt_comm_gatherv_bytes */
#include "zt_file.h"   /* zt_afile_* */
#include "zt_sched.h"  /* struct zt_trace_rec */

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct zt_trace_rec *g_recs;
static size_t g_n, g_cap;
static int g_on;

void zt_trace_enable(int on) { g_on = on; }
int zt_trace_enabled(void) { return g_on; }

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
    pthread_mutex_unlock(&g_lock);
}

/* what one rank sends to rank 0: a header, its worker names, then its records */
struct trace_hdr {
    int64_t nrec;
    int32_t nworkers, pad;
};
#define TRACE_WNAME 64

static void *pack_local(size_t *len) {
    pthread_mutex_lock(&g_lock);
    unsigned nw = starpu_worker_get_count();
    *len = sizeof(struct trace_hdr) + (size_t)nw * TRACE_WNAME + g_n * sizeof *g_recs;
    char *buf = calloc(1, *len);
    if (buf) {
        struct trace_hdr h = {(int64_t)g_n, (int32_t)nw, 0};
        memcpy(buf, &h, sizeof h);
        for (unsigned w = 0; w < nw; w++)
            starpu_worker_get_name((int)w, buf + sizeof h + (size_t)w * TRACE_WNAME, TRACE_WNAME);
        memcpy(buf + sizeof h + (size_t)nw * TRACE_WNAME, g_recs, g_n * sizeof *g_recs);
    }
    pthread_mutex_unlock(&g_lock);
    return buf;
}

static enum zt_status write_all_ranks(const char *path, const char *const *names, int nnames,
                                      const char *all, size_t total, int nranks) {
    /* the JSON is built in memory, then written by the crash-safe writer (io/zt_file.h) */
    char *json = NULL;
    size_t jlen = 0;
    FILE *f = open_memstream(&json, &jlen);
    if (!f) return zt_error_set(ZT_ERR_NOMEM, "trace %s: out of memory", path);
    /* one time origin for every rank: ranks on one machine share CLOCK_MONOTONIC, which
     * starpu_timing_now reads, so their lanes line up */
    double t0 = -1;
    const char *p = all;
    for (int r = 0; r < nranks && p < all + total; r++) {
        struct trace_hdr h;
        memcpy(&h, p, sizeof h);
        const struct zt_trace_rec *rec =
            (const void *)(p + sizeof h + (size_t)h.nworkers * TRACE_WNAME);
        for (int64_t i = 0; i < h.nrec; i++)
            if (t0 < 0 || rec[i].start_us < t0) t0 = rec[i].start_us;
        p += sizeof h + (size_t)h.nworkers * TRACE_WNAME + (size_t)h.nrec * sizeof *rec;
    }
    if (t0 < 0) t0 = 0;
    fprintf(f, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n");
    p = all;
    int first = 1;
    for (int r = 0; r < nranks && p < all + total; r++) {
        struct trace_hdr h;
        memcpy(&h, p, sizeof h);
        const char *wn = p + sizeof h;
        const struct zt_trace_rec *rec = (const void *)(wn + (size_t)h.nworkers * TRACE_WNAME);
        fprintf(f, "%s{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,"
                   "\"args\":{\"name\":\"rank %d\"}}", first ? "" : ",\n", r, r);
        first = 0;
        for (int w = 0; w < h.nworkers; w++)
            fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,"
                       "\"args\":{\"name\":\"%.*s\"}}", r, w, TRACE_WNAME,
                    wn + (size_t)w * TRACE_WNAME);
        int io_named[8] = {0};
        for (int64_t i = 0; i < h.nrec; i++) { /* I/O threads' tracks */
            int k = rec[i].worker - ZT_TRACE_IO_WORKER;
            if (k < 0 || k >= 8 || io_named[k]) continue;
            io_named[k] = 1;
            fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,"
                       "\"args\":{\"name\":\"I/O thread %d\"}}", r, rec[i].worker, k);
        }
        for (int64_t i = 0; i < h.nrec; i++) {
            const struct zt_trace_rec *x = &rec[i];
            const char *nm = (x->kind >= 0 && x->kind < nnames) ? names[x->kind] : "task";
            fprintf(f, ",\n{\"name\":\"%s\",\"cat\":\"task\",\"ph\":\"X\",\"pid\":%d,"
                       "\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"kind\":\"%s\","
                       "\"rank\":%d,\"step\":%lld,\"layer\":%d,\"mb\":%d,\"blk\":%d,"
                       "\"worker\":%d,\"bytes\":%lld}}",
                    nm, r, x->worker, x->start_us - t0, x->end_us - x->start_us, nm, r,
                    (long long)x->step, x->layer, x->mb, x->blk, x->worker,
                    (long long)x->bytes);
        }
        p = (const char *)(rec + h.nrec);
    }
    fprintf(f, "\n]}\n");
    if (fclose(f) != 0) {
        free(json);
        return zt_error_set(ZT_ERR_NOMEM, "trace %s: out of memory", path);
    }
    struct zt_afile af;
    enum zt_status rc = zt_afile_open(&af, "trace", path);
    if (rc == ZT_OK)
        rc = zt_afile_write(&af, json, jlen) != 0 ? zt_afile_fail(&af) : zt_afile_commit(&af);
    free(json);
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
    double bad = rc != ZT_OK;
    if (zt_comm_sum_double(&bad) == ZT_OK && bad > 0 && rc == ZT_OK)
        rc = zt_error_set(ZT_ERR_IO, "trace %s: rank 0 could not write it", path);
    return rc;
}
