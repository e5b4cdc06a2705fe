/*
 * apps/zt_trace/analysis.c: the loaded task graphs analysed: step windows, the tasks each
 * window's end waits for, successors, collectives, each worker's recorded order, the runtime's
 * latency before each task, each task's work at the speed of a whole core, and critical paths.
 *
 * Layer: apps/ (zt-trace). Runs once per trace after trace_load; summary.c, simulate.c,
 * project.c and plot.c read what it fills in. docs/traces.md ("Step windows", "replay")
 * describes the model.
 */
#include <float.h>    /* DBL_MAX */
#include <stdlib.h>   /* qsort, free */
#include <string.h>   /* memcpy, strcmp */
#include "zt_trace.h" /* struct trace */

static int cmp_dbl(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int cmp_keyed(const void *a, const void *b) {
    const struct keyed *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    return (x->i > y->i) - (x->i < y->i);
}

double window_end(const struct trace *tr, int r, int w) {
    return w + 1 < tr->nwin ? tr->win_start[w + 1] : tr->gate_end[(size_t)r * tr->nwin + w];
}

// ----------------------------------------------------------------------------
// windows

/* the range of step labels of tasks on compute workers */
static enum zt_status step_range(const struct trace *tr, int64_t *smin, int64_t *smax) {
    *smin = INT64_MAX;
    *smax = INT64_MIN;
    for (int r = 0; r < tr->nranks; r++)
        for (int i = 0; i < tr->r[r].n; i++) {
            const struct task *t = &tr->r[r].t[i];
            if (on_io_thread(t)) continue;
            if (t->step < *smin) *smin = t->step;
            if (t->step > *smax) *smax = t->step;
        }
    if (*smin == INT64_MAX)
        return zt_error_set(ZT_ERR_DATA, "trace %s: no task ran on a worker", tr->path);
    if (*smax - *smin > 1000000)
        return zt_error_set(ZT_ERR_DATA, "trace %s: step labels out of range", tr->path);
    return ZT_OK;
}

/* a window per step label that has a task on a compute worker, started by the label's first
 * submission (of any rank: ranks of one machine share the clock) */
static enum zt_status find_windows(struct trace *tr) {
    int64_t smin, smax;
    ZT_CHECK(step_range(tr, &smin, &smax));
    int nl = (int)(smax - smin + 1);
    double *first = xcalloc((size_t)nl, sizeof *first);
    for (int k = 0; k < nl; k++) first[k] = DBL_MAX;
    for (int r = 0; r < tr->nranks; r++)
        for (int i = 0; i < tr->r[r].n; i++) {
            const struct task *t = &tr->r[r].t[i];
            if (on_io_thread(t)) continue;
            int k = (int)(t->step - smin);
            if (t->submit < first[k]) first[k] = t->submit;
        }
    tr->win_step = xcalloc((size_t)nl, sizeof *tr->win_step);
    tr->win_start = xcalloc((size_t)nl + 1, sizeof *tr->win_start);
    tr->nwin = 0;
    for (int k = 0; k < nl; k++) {
        if (first[k] == DBL_MAX) continue;
        if (tr->nwin && first[k] <= tr->win_start[tr->nwin - 1]) {
            free(first);
            return zt_error_set(ZT_ERR_DATA, "trace %s: step %lld was submitted before the step "
                                "before it", tr->path, (long long)(smin + k));
        }
        tr->win_step[tr->nwin] = smin + k;
        tr->win_start[tr->nwin++] = first[k];
    }
    free(first);
    tr->win_start[tr->nwin] = DBL_MAX;
    return ZT_OK;
}

/* the last window that starts at or before x (the first when none does) */
static int window_at(const struct trace *tr, double x) {
    int lo = 0, hi = tr->nwin - 1; /* win_start rises strictly */
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        if (tr->win_start[mid] <= x) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

/* rank r's tasks into windows: the one each was submitted in and the one whose end waits for
 * it (its gate), each window's last gate end, and the collectives' numbers */
static void place_in_windows(struct trace *tr, int r) {
    struct rank *R = &tr->r[r];
    int W = tr->nwin;
    double *ge = &tr->gate_end[(size_t)r * W], *lp = &tr->last_pre[(size_t)r * W];
    for (int w = 0; w < W; w++) ge[w] = lp[w] = tr->win_start[w];
    R->ncoll = 0;
    for (int i = 0; i < R->n; i++) {
        struct task *t = &R->t[i];
        t->nsucc = 0;
        t->coll = t->bucket == BUCKET_COMM ? R->ncoll++ : -1;
        int w = window_at(tr, t->submit), g = window_at(tr, t->end);
        if (g < w) g = w;
        t->win = w;
        t->gate = g;
        if (t->end > ge[g]) ge[g] = t->end;
    }
}

/* rank r's tasks by the window they were submitted in, and by the windows they may run in (from
 * the one holding their start to the one holding their end), each list in index order */
static enum zt_status window_lists(struct trace *tr, int r) {
    struct rank *R = &tr->r[r];
    int W = tr->nwin;
    R->sub_first = xcalloc((size_t)W + 1, sizeof *R->sub_first);
    R->run_first = xcalloc((size_t)W + 1, sizeof *R->run_first);
    int64_t pairs = 0;
    for (int i = 0; i < R->n; i++) {
        const struct task *t = &R->t[i];
        int a = window_at(tr, t->start), b = window_at(tr, t->end);
        R->sub_first[t->win + 1]++;
        for (int w = a; w <= b && pairs <= ZT_TRACE_RUN_PAIRS_MAX; w++) R->run_first[w + 1]++;
        pairs += b - a + 1;
    }
    if (pairs > ZT_TRACE_RUN_PAIRS_MAX)
        return zt_error_set(ZT_ERR_DATA, "trace %s: rank %d's tasks span more than %d step "
                            "windows in all: expected tasks that each run within a few steps",
                            tr->path, r, ZT_TRACE_RUN_PAIRS_MAX);
    for (int w = 0; w < W; w++) {
        R->sub_first[w + 1] += R->sub_first[w];
        R->run_first[w + 1] += R->run_first[w];
    }
    R->sub = xcalloc((size_t)R->n, sizeof *R->sub);
    R->run = xcalloc((size_t)pairs, sizeof *R->run);
    int *fs = xcalloc((size_t)W, sizeof *fs), *fr = xcalloc((size_t)W, sizeof *fr);
    for (int i = 0; i < R->n; i++) {
        struct task *t = &R->t[i];
        t->win_pos = fs[t->win]++;
        R->sub[R->sub_first[t->win] + t->win_pos] = i;
        for (int w = window_at(tr, t->start), b = window_at(tr, t->end); w <= b; w++)
            R->run[R->run_first[w] + fr[w]++] = i;
    }
    free(fs);
    free(fr);
    return ZT_OK;
}

/* which of rank r's tasks were submitted after their window's wait, each window's last
 * submission before it, and every task's successors */
static void link_rank(struct trace *tr, int r) {
    struct rank *R = &tr->r[r];
    int W = tr->nwin;
    const double *ge = &tr->gate_end[(size_t)r * W];
    double *lp = &tr->last_pre[(size_t)r * W];
    for (int i = 0; i < R->n; i++) {
        struct task *t = &R->t[i];
        t->post = t->submit >= ge[t->win] && t->win + 1 < W;
        if (!t->post && t->submit > lp[t->win]) lp[t->win] = t->submit;
        for (int k = 0; k < t->ndep; k++) R->t[t->dep[k]].nsucc++;
    }
    for (int i = 0; i < R->n; i++) {
        R->t[i].succ = xcalloc((size_t)R->t[i].nsucc, sizeof(int));
        R->t[i].nsucc = 0;
    }
    for (int i = 0; i < R->n; i++)
        for (int k = 0; k < R->t[i].ndep; k++) {
            struct task *d = &R->t[R->t[i].dep[k]];
            d->succ[d->nsucc++] = i;
        }
}

// ----------------------------------------------------------------------------
// worker order and latency

/* each lane's tasks in recorded start order, and the runtime's own time before each task: from
 * when it could have started (submitted, its dependencies ended, its worker free) to when it
 * did; the replay adds it to the task's work */
static void order_lanes(struct rank *R) {
    int nlane = R->nworkers + R->nio;
    int *count = xcalloc((size_t)nlane, sizeof *count);
    int *ord = xcalloc((size_t)R->n, sizeof *ord);
    struct keyed *by_start = xcalloc((size_t)R->n, sizeof *by_start);
    for (int i = 0; i < R->n; i++) by_start[i] = (struct keyed){R->t[i].start, i};
    qsort(by_start, (size_t)R->n, sizeof *by_start, cmp_keyed);
    for (int i = 0; i < R->n; i++) ord[i] = by_start[i].i;
    free(by_start);
    double *free_at = xcalloc((size_t)nlane, sizeof *free_at);
    for (int i = 0; i < R->n; i++) {
        struct task *t = &R->t[ord[i]];
        int lane = task_lane(t, R->nworkers);
        t->worker_order = count[lane]++;
        double can = t->submit > free_at[lane] ? t->submit : free_at[lane];
        for (int k = 0; k < t->ndep; k++)
            if (R->t[t->dep[k]].end > can) can = R->t[t->dep[k]].end;
        t->lat = t->bucket != BUCKET_COMM && t->start > can ? t->start - can : 0;
        free_at[lane] = t->end;
    }
    /* with CPU durations a task's latency leaves out the time its worker waited for a core
     * (woken for it, or displaced, while other threads held the cores) */
    for (int i = 0; i < R->n; i++) {
        struct task *t = &R->t[i];
        double l = t->waited > 0 ? t->lat - t->waited : t->lat;
        t->lat_cpu = l > 0 ? l : 0;
    }
    free(free_at);
    free(count);
    free(ord);
}

// ----------------------------------------------------------------------------
// normalised work

/* a task that holds a core of its node while it runs: compute-bucket tasks on compute workers
 * (a collective's wait sleeps, sched/comm.c) */
static int holds_core(const struct task *t) {
    return !on_io_thread(t) && t->bucket != BUCKET_COMM;
}

/* the times at which tasks holding a core start or end on ranks [r0, r1), sorted (*tm, *m), and
 * F[k]: the integral of the number of such tasks running, up to tm[k] */
static void running_integral(const struct trace *tr, int r0, int r1, double **tm_out,
                             double **F_out, int *m_out) {
    int ne = 0;
    for (int r = r0; r < r1; r++) ne += 2 * tr->r[r].n;
    double *F = xcalloc((size_t)ne, sizeof *F);
    double *tm = xcalloc((size_t)ne, sizeof *tm);
    int m = 0;
    for (int r = r0; r < r1; r++)
        for (int i = 0; i < tr->r[r].n; i++)
            if (holds_core(&tr->r[r].t[i])) tm[m++] = tr->r[r].t[i].start;
    int ns = m;
    for (int r = r0; r < r1; r++)
        for (int i = 0; i < tr->r[r].n; i++)
            if (holds_core(&tr->r[r].t[i])) tm[m++] = tr->r[r].t[i].end;
    /* running(x) = starts <= x minus ends <= x */
    double *st = xcalloc((size_t)ns, sizeof *st), *en = xcalloc((size_t)ns, sizeof *en);
    memcpy(st, tm, (size_t)ns * sizeof *st);
    memcpy(en, tm + ns, (size_t)ns * sizeof *en);
    qsort(st, (size_t)ns, sizeof *st, cmp_dbl);
    qsort(en, (size_t)ns, sizeof *en, cmp_dbl);
    qsort(tm, (size_t)m, sizeof *tm, cmp_dbl);
    int a = 0, b = 0;
    double acc = 0;
    for (int k = 0; k < m; k++) {
        if (k) acc += (double)(a - b) * (tm[k] - tm[k - 1]);
        while (a < ns && st[a] <= tm[k]) a++;
        while (b < ns && en[b] <= tm[k]) b++;
        F[k] = acc;
    }
    free(st);
    free(en);
    *tm_out = tm;
    *F_out = F;
    *m_out = m;
}

/* the first index of the sorted v[0..n) whose value is not below x (n - 1 when none) */
static int lower_bound(const double *v, int n, double x) {
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (v[mid] < x) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* each task's work: its recorded duration, and for a compute task that ran while more threads
 * than cores ran on its node, that duration shortened by the factor it was slowed by; CPU times
 * kept for compute-bucket tasks only, and at most their wall time */
static void normalise_work(struct trace *tr) {
    int rpn = (int)trace_meta_num(tr, "ranks_per_node", tr->nranks);
    double cores = trace_meta_num(tr, "cores", 0);
    if (rpn < 1) rpn = 1;
    for (int r0 = 0; r0 < tr->nranks; r0 += rpn) {
        int r1 = r0 + rpn < tr->nranks ? r0 + rpn : tr->nranks;
        double *tm, *F;
        int m;
        running_integral(tr, r0, r1, &tm, &F, &m);
        for (int r = r0; r < r1; r++)
            for (int i = 0; i < tr->r[r].n; i++) {
                struct task *t = &tr->r[r].t[i];
                double dur = t->end - t->start;
                t->work = dur;
                if (on_io_thread(t) || t->bucket != BUCKET_COMPUTE) t->cpu = -1;
                else if (t->cpu > dur) t->cpu = dur;
                if (!holds_core(t) || dur <= 0 || cores <= 0 || m == 0) continue;
                int i0 = lower_bound(tm, m, t->start), i1 = lower_bound(tm, m, t->end);
                double avg = (F[i1] - F[i0]) / dur; /* running threads, itself included */
                if (avg > cores) t->work = dur * cores / avg;
            }
        free(F);
        free(tm);
    }
}

enum zt_status trace_analyse(struct trace *tr) {
    ZT_CHECK(find_windows(tr));
    size_t nw = (size_t)tr->nwin * (size_t)tr->nranks;
    tr->gate_end = xcalloc(nw, sizeof *tr->gate_end);
    tr->last_pre = xcalloc(nw, sizeof *tr->last_pre);
    for (int r = 0; r < tr->nranks; r++) {
        place_in_windows(tr, r);
        if (tr->r[r].ncoll != tr->r[0].ncoll)
            return zt_error_set(ZT_ERR_DATA, "trace %s: rank %d has %d collectives, rank 0 %d",
                                tr->path, r, tr->r[r].ncoll, tr->r[0].ncoll);
        link_rank(tr, r);
        order_lanes(&tr->r[r]);
        ZT_CHECK(window_lists(tr, r));
    }
    normalise_work(tr);
    return ZT_OK;
}

// ----------------------------------------------------------------------------
// critical path

void critical_path(const struct trace *tr, int r, int w, struct critical_path *cp) {
    const struct rank *R = &tr->r[r];
    memset(cp, 0, sizeof *cp);
    const int *sub = R->sub + R->sub_first[w]; /* the window's tasks, in index order */
    int m = R->sub_first[w + 1] - R->sub_first[w];
    double *len = xcalloc((size_t)m, sizeof *len); /* longest chain ending with each task */
    int *from = xcalloc((size_t)m, sizeof *from);  /* the chain's task before it (its place) */
    int best = -1;
    for (int p = 0; p < m; p++) {
        const struct task *t = &R->t[sub[p]];
        from[p] = -1;
        double mx = 0;
        for (int k = 0; k < t->ndep; k++) {
            const struct task *d = &R->t[t->dep[k]];
            if (d->win == w && len[d->win_pos] > mx) mx = len[d->win_pos], from[p] = d->win_pos;
        }
        len[p] = mx + (t->end - t->start);
        if (best < 0 || len[p] > len[best]) best = p;
    }
    if (best >= 0) cp->length_us = len[best];
    for (int p = best; p >= 0; p = from[p]) {
        const struct task *t = &R->t[sub[p]];
        cp->ntasks++;
        int k = 0;
        while (k < cp->nkinds && strcmp(cp->kind[k], t->kind)) k++;
        if (k == cp->nkinds && k < CRIT_KINDS_MAX)
            memcpy(cp->kind[cp->nkinds++], t->kind, sizeof cp->kind[0]);
        if (k < CRIT_KINDS_MAX) cp->kind_us[k] += t->end - t->start;
    }
    free(len);
    free(from);
}
