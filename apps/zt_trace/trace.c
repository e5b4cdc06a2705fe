/*
 * apps/zt_trace/trace.c: a replay file read into one task graph per rank.
 *
 * Layer: apps/ (zt-trace). The file is read through io/zt_tracefile.h's reader (which also
 * finds the replay file beside the JSON given to zt-train --trace); each task gets its kind's
 * class and phase from tasks/zt_task_kinds.h, and its dependencies are resolved from ids to
 * indices in its rank's array.
 */
#include <stdio.h>    /* fprintf */
#include <stdlib.h>   /* calloc, realloc, qsort, atof, exit */
#include <string.h>   /* memset, strdup, snprintf */
#include "zt_trace.h" /* struct trace */

const char *const bucket_names[BUCKET_COUNT] = {"compute", "comm", "swap", "ckpt"};

void *xcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size);
    if (!p) {
        fprintf(stderr, "zt-trace: error: out of memory\n");
        exit(1);
    }
    return p;
}

void *xrealloc(void *p, size_t size) {
    p = realloc(p, size ? size : 1);
    if (!p) {
        fprintf(stderr, "zt-trace: error: out of memory\n");
        exit(1);
    }
    return p;
}

const char *trace_meta(const struct trace *tr, const char *key, const char *def) {
    const char *v = zt_tracefile_meta_get(&tr->meta, key);
    return v ? v : def;
}

double trace_meta_num(const struct trace *tr, const char *key, double def) {
    const char *v = zt_tracefile_meta_get(&tr->meta, key);
    return v ? atof(v) : def;
}

int trace_stage(const struct trace *tr) { return (int)trace_meta_num(tr, "stage", 0); }

static enum bucket bucket_of(enum zt_task_class cls) {
    switch (cls) {
    case ZT_TASK_CLASS_COMMUNICATION: return BUCKET_COMM;
    case ZT_TASK_CLASS_SWAP: return BUCKET_SWAP;
    case ZT_TASK_CLASS_CHECKPOINT: return BUCKET_CKPT;
    default: return BUCKET_COMPUTE; /* compute and data loading: a codelet on a worker */
    }
}

/* a task line as the tool holds it; its dependency ids are kept until resolve_deps */
static void task_from_file(const struct zt_tracefile_task *f, struct task *t) {
    *t = (struct task){
        .id = f->id, .step = f->step, .layer = f->layer, .mb = f->mb, .blk = f->blk,
        .recompute = f->recompute, .worker = f->worker, .node = f->node, .submit = f->submit_us,
        .start = f->start_us, .end = f->end_us, .cpu = f->cpu_us, .waited = f->waited_us,
        .bytes_read = f->bytes_read, .bytes_written = f->bytes_written, .prio = f->prio,
        .ndep = (int)f->ndeps};
    snprintf(t->kind, sizeof t->kind, "%s", f->kind);
    t->kind_id = zt_task_kind_find(t->kind);
    t->cls = zt_task_kind_class(t->kind_id);
    t->phase = zt_task_kind_phase(t->kind_id);
    t->bucket = bucket_of(t->cls);
    t->dep_ids = xcalloc((size_t)t->ndep, sizeof *t->dep_ids);
    for (int k = 0; k < t->ndep; k++) t->dep_ids[k] = f->deps[k];
}

static struct rank *rank_slot(struct trace *tr, int rank) {
    if (rank >= tr->nranks) {
        tr->r = xrealloc(tr->r, (size_t)(rank + 1) * sizeof *tr->r);
        for (int k = tr->nranks; k <= rank; k++) memset(&tr->r[k], 0, sizeof tr->r[k]);
        tr->nranks = rank + 1;
    }
    return &tr->r[rank];
}

static enum zt_status read_tasks(struct trace *tr, struct zt_tracefile_reader *rd) {
    for (;;) {
        struct zt_tracefile_task f;
        int got;
        ZT_CHECK(zt_tracefile_next(rd, &f, &got));
        if (!got) return ZT_OK;
        struct rank *R = rank_slot(tr, f.rank);
        if (R->n == R->cap) {
            R->cap = R->cap ? 2 * R->cap : 1024;
            R->t = xrealloc(R->t, (size_t)R->cap * sizeof *R->t);
        }
        task_from_file(&f, &R->t[R->n++]);
    }
}

static int cmp_id(const void *a, const void *b) {
    const struct task *x = a, *y = b;
    return (x->id > y->id) - (x->id < y->id);
}

/* index of task `id` in the rank's array (sorted by id), or -1 */
static int find_id(const struct rank *R, int64_t id) {
    int lo = 0, hi = R->n - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        if (R->t[mid].id == id) return mid;
        if (R->t[mid].id < id) lo = mid + 1;
        else hi = mid - 1;
    }
    return -1;
}

/* rank r's dependencies from ids to indices, and its count of workers and I/O threads */
static enum zt_status resolve_rank(struct trace *tr, int r) {
    struct rank *R = &tr->r[r];
    qsort(R->t, (size_t)R->n, sizeof *R->t, cmp_id);
    for (int i = 0; i < R->n; i++) {
        struct task *t = &R->t[i];
        t->dep = xcalloc((size_t)t->ndep, sizeof *t->dep);
        for (int k = 0; k < t->ndep; k++) {
            int64_t v = t->dep_ids[k];
            int at = find_id(R, v);
            if (at < 0 || v >= t->id)
                return zt_error_set(ZT_ERR_DATA, "trace %s: rank %d task %lld depends on task "
                                    "%lld, which is not an earlier task of the trace", tr->path,
                                    r, (long long)t->id, (long long)v);
            t->dep[k] = at;
        }
        free(t->dep_ids);
        t->dep_ids = NULL;
        int lanes = on_io_thread(t) ? t->worker - ZT_TRACE_IO_WORKER + 1 : t->worker + 1;
        int *count = on_io_thread(t) ? &R->nio : &R->nworkers;
        if (lanes > *count) *count = lanes;
    }
    return ZT_OK;
}

enum zt_status trace_load(struct trace *tr, const char *path) {
    memset(tr, 0, sizeof *tr);
    struct zt_tracefile_reader rd;
    ZT_CHECK(zt_tracefile_open(&rd, path));
    tr->path = strdup(rd.path);
    enum zt_status rc = tr->path ? read_tasks(tr, &rd)
                                 : zt_error_set(ZT_ERR_NOMEM, "trace %s: out of memory", path);
    tr->meta = rd.meta;
    tr->has_cpu = rd.version >= 3;
    zt_tracefile_close(&rd);
    ZT_CHECK(rc);
    if (tr->nranks == 0) return zt_error_set(ZT_ERR_DATA, "trace %s: no task records", tr->path);
    for (int r = 0; r < tr->nranks; r++) ZT_CHECK(resolve_rank(tr, r));
    return ZT_OK;
}

void trace_free(struct trace *tr) {
    for (int r = 0; r < tr->nranks; r++) {
        for (int i = 0; i < tr->r[r].n; i++) {
            free(tr->r[r].t[i].dep);
            free(tr->r[r].t[i].succ);
            free(tr->r[r].t[i].dep_ids);
        }
        free(tr->r[r].t);
        free(tr->r[r].sub_first);
        free(tr->r[r].sub);
        free(tr->r[r].run_first);
        free(tr->r[r].run);
    }
    free(tr->r);
    free(tr->path);
    free(tr->win_step);
    free(tr->win_start);
    free(tr->gate_end);
    free(tr->last_pre);
    memset(tr, 0, sizeof *tr);
}
