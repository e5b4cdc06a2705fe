/*
 * sched/trace.c: per-task trace records and their Chrome trace-event JSON export.
 *
 * Layer: sched/. The codelet dispatcher (tasks/dispatch.c) times each task body with
 * starpu_timing_now() and calls zt_trace_record(); StarPU's FxT tracing is not in Debian's build
 * (PLATFORM.md item 2), so this is our own. The JSON opens in Perfetto (ui.perfetto.dev) and
 * chrome://tracing: one process per rank, one thread per StarPU worker.
 */
#include <pthread.h>   /* pthread_mutex_t */
#include <stdio.h>     /* fopen, fprintf */
#include <stdlib.h>    /* realloc */
#include <string.h>    /* strerror */
#include <errno.h>     /* errno */
#include <unistd.h>    /* fsync, getpid, unlink */
#include <starpu.h>    /* starpu_worker_get_name */
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

enum zt_status zt_trace_write(const char *path, const char *const *names, int nnames, int rank) {
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.tmp-%d", path, (int)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) return zt_error_set(ZT_ERR_IO, "trace %s: cannot create (%s)", path, strerror(errno));
    pthread_mutex_lock(&g_lock);
    double t0 = g_n ? g_recs[0].start_us : 0;
    for (size_t i = 0; i < g_n; i++)
        if (g_recs[i].start_us < t0) t0 = g_recs[i].start_us;
    fprintf(f, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n");
    fprintf(f, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":\"rank %d\"}}",
            rank, rank);
    unsigned nw = starpu_worker_get_count();
    for (unsigned w = 0; w < nw; w++) {
        char wname[64];
        starpu_worker_get_name((int)w, wname, sizeof wname);
        fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%u,"
                   "\"args\":{\"name\":\"%s\"}}", rank, w, wname);
    }
    for (size_t i = 0; i < g_n; i++) {
        const struct zt_trace_rec *r = &g_recs[i];
        const char *nm = (r->kind >= 0 && r->kind < nnames) ? names[r->kind] : "task";
        fprintf(f, ",\n{\"name\":\"%s\",\"cat\":\"task\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,"
                   "\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"kind\":\"%s\",\"step\":%lld,"
                   "\"layer\":%d,\"mb\":%d,\"blk\":%d,\"worker\":%d,\"bytes\":%lld}}",
                nm, rank, r->worker, r->start_us - t0, r->end_us - r->start_us, nm,
                (long long)r->step, r->layer, r->mb, r->blk, r->worker, (long long)r->bytes);
    }
    pthread_mutex_unlock(&g_lock);
    fprintf(f, "\n]}\n");
    /* flush + fsync before rename so a crash never leaves a truncated file under the name */
    int bad = fflush(f) != 0 || fsync(fileno(f)) != 0;
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return zt_error_set(ZT_ERR_IO, "trace %s: write failed (%s)", path, strerror(e));
    }
    return ZT_OK;
}
