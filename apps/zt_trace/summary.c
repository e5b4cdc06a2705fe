/*
 * apps/zt_trace/summary.c: `zt-trace summary`: where each step's time went, per rank.
 *
 * Layer: apps/ (zt-trace). Per step window and rank: the span, task time per bucket (compute,
 * communication, swap, checkpoint; data loading and the recompute of activation checkpointing
 * counted with compute and also shown alone),
 * idle time per compute worker, the critical path (analysis.c) and the fraction of
 * communication and swap time during which a compute task ran ("hidden"); for a pipeline's
 * trace, the bubble per step. plot.c draws the same numbers as bars.
 */
#include <stdio.h>    /* printf */
#include <stdlib.h>   /* qsort, free */
#include <string.h>   /* memset */
#include "zt_trace.h" /* struct trace, struct step_summary */

/* a time interval [a, b) */
struct interval {
    double a, b;
};

static int cmp_interval(const void *x, const void *y) {
    const struct interval *p = x, *q = y;
    return (p->a > q->a) - (p->a < q->a);
}

/* merge intervals in place (sorted, disjoint); returns their count */
static int merge(struct interval *v, int n) {
    if (!n) return 0;
    qsort(v, (size_t)n, sizeof *v, cmp_interval);
    int m = 0;
    for (int i = 1; i < n; i++) {
        if (v[i].a <= v[m].b) {
            if (v[i].b > v[m].b) v[m].b = v[i].b;
        } else {
            v[++m] = v[i];
        }
    }
    return m + 1;
}

/* length of [a, b) covered by the merged intervals u[0..n) */
static double covered(const struct interval *u, int n, double a, double b) {
    double s = 0;
    for (int i = 0; i < n && u[i].a < b; i++) {
        double x = u[i].a > a ? u[i].a : a, y = u[i].b < b ? u[i].b : b;
        if (y > x) s += y - x;
    }
    return s;
}

void step_summary(const struct trace *tr, int r, int w, struct step_summary *s) {
    const struct rank *R = &tr->r[r];
    memset(s, 0, sizeof *s);
    double a = tr->win_start[w], b = window_end(tr, r, w);
    s->span = b - a;
    const int *run = R->run + R->run_first[w]; /* the tasks that may run in it */
    int m = R->run_first[w + 1] - R->run_first[w];
    struct interval *comp = xcalloc((size_t)m, sizeof *comp);  /* compute tasks' times */
    double *wb = xcalloc((size_t)R->nworkers + 1, sizeof *wb); /* per worker: busy */
    int nc = 0;
    for (int k = 0; k < m; k++) {
        const struct task *t = &R->t[run[k]];
        double x = t->start > a ? t->start : a, y = t->end < b ? t->end : b;
        if (y <= x) continue;
        s->busy[t->bucket] += y - x;
        if (t->cls == ZT_TASK_CLASS_DATA) s->data += y - x;
        if (t->recompute && t->bucket == BUCKET_COMPUTE) s->recompute += y - x;
        if (!on_io_thread(t)) wb[t->worker] += y - x;
        if (t->bucket == BUCKET_COMPUTE) comp[nc++] = (struct interval){x, y};
    }
    nc = merge(comp, nc);
    for (int k = 0; k < m; k++) {
        const struct task *t = &R->t[run[k]];
        double x = t->start > a ? t->start : a, y = t->end < b ? t->end : b;
        if (y <= x || t->bucket == BUCKET_COMPUTE) continue;
        s->total[t->bucket] += y - x;
        s->hidden[t->bucket] += covered(comp, nc, x, y);
    }
    for (int k = 0; k < R->nworkers; k++) {
        double idle = s->span - wb[k];
        s->idle_sum += idle;
        if (idle > s->idle_max) s->idle_max = idle;
    }
    critical_path(tr, r, w, &s->cp);
    free(comp);
    free(wb);
}

/* the fraction of bucket c's time that was hidden, -1 when there was none */
static double hidden_share(const struct step_summary *s, enum bucket c) {
    return s->total[c] > 0 ? s->hidden[c] / s->total[c] : -1;
}

static void print_row_json(const struct trace *tr, int r, int w, const struct step_summary *s) {
    int nw = tr->r[r].nworkers ? tr->r[r].nworkers : 1;
    printf("%s\n {\"step\": %lld, \"rank\": %d, \"span_ms\": %.4f, \"compute_ms\": %.4f, "
           "\"comm_ms\": %.4f, \"swap_ms\": %.4f, \"ckpt_ms\": %.4f, \"data_ms\": %.4f, "
           "\"recompute_ms\": %.4f, \"idle_ms_per_worker\": %.4f, \"idle_ms_max\": %.4f, "
           "\"critical_ms\": %.4f, \"critical_tasks\": %d, \"comm_hidden\": %.4f, "
           "\"swap_hidden\": %.4f, \"critical_kinds\": {", (w || r) ? "," : "",
           (long long)tr->win_step[w], r, s->span / 1e3, s->busy[BUCKET_COMPUTE] / 1e3,
           s->busy[BUCKET_COMM] / 1e3, s->busy[BUCKET_SWAP] / 1e3, s->busy[BUCKET_CKPT] / 1e3,
           s->data / 1e3, s->recompute / 1e3, s->idle_sum / nw / 1e3, s->idle_max / 1e3,
           s->cp.length_us / 1e3, s->cp.ntasks, hidden_share(s, BUCKET_COMM),
           hidden_share(s, BUCKET_SWAP));
    for (int k = 0; k < s->cp.nkinds; k++)
        printf("%s\"%s\": %.4f", k ? ", " : "", s->cp.kind[k], s->cp.kind_us[k] / 1e3);
    printf("}}");
}

static void print_row_text(const struct trace *tr, int r, int w, const struct step_summary *s) {
    int nw = tr->r[r].nworkers ? tr->r[r].nworkers : 1;
    double hc = hidden_share(s, BUCKET_COMM), hs = hidden_share(s, BUCKET_SWAP);
    char h1[16] = "-", h2[16] = "-";
    if (hc >= 0) snprintf(h1, sizeof h1, "%.0f%%", 100 * hc);
    if (hs >= 0) snprintf(h2, sizeof h2, "%.0f%%", 100 * hs);
    printf("%5lld %4d %9.2f %10.2f %9.2f %9.2f %9.2f %9.2f %13.2f %9.2f %6d %7s %7s\n",
           (long long)tr->win_step[w], r, s->span / 1e3, s->busy[BUCKET_COMPUTE] / 1e3,
           s->recompute / 1e3, s->busy[BUCKET_COMM] / 1e3, s->busy[BUCKET_SWAP] / 1e3,
           s->busy[BUCKET_CKPT] / 1e3, s->idle_sum / nw / 1e3, s->cp.length_us / 1e3,
           s->cp.ntasks, h1, h2);
}

/* the last step's critical path on rank 0, its largest kinds first */
static void print_critical_path(const struct trace *tr) {
    struct step_summary s;
    int w = tr->nwin - 1;
    step_summary(tr, 0, w, &s);
    struct critical_path *cp = &s.cp;
    char share[64] = "n/a of the span: the step lasted 0 ms"; /* no share of nothing */
    if (s.span > 0)
        snprintf(share, sizeof share, "%.0f%% of the span", 100 * cp->length_us / s.span);
    printf("critical path, step %lld rank 0: %.2f ms over %d tasks (%s):",
           (long long)tr->win_step[w], cp->length_us / 1e3, cp->ntasks, share);
    for (int n = 0; n < 6 && n < cp->nkinds; n++) {
        int k = -1;
        for (int j = 0; j < cp->nkinds; j++)
            if (cp->kind_us[j] >= 0 && (k < 0 || cp->kind_us[j] > cp->kind_us[k])) k = j;
        printf("%s %s %.2f ms", n ? "," : "", cp->kind[k], cp->kind_us[k] / 1e3);
        cp->kind_us[k] = -1;
    }
    printf("\n");
}

/* A pipeline's bubble in window w (the trace of a zt-train run with pipeline.stages = P > 1 on
 * P x dp ranks, world rank s * dp + d holding stage s of replica d): each replica's stages'
 * compute time in forward and backward tasks against P times the time from its first such task
 * to its last, averaged over the replicas, and the busiest stage's time over its replica's mean
 * (the largest); -1 when the window has none */
static double pipeline_bubble(const struct trace *tr, int w, int P, double *imbalance) {
    const int dp = tr->nranks / P;
    double idle = 0;
    int replicas = 0;
    *imbalance = 1;
    for (int d = 0; d < dp; d++) {
        double t0 = 1e300, t1 = -1e300, sum = 0, most = 0;
        for (int r = d; r < tr->nranks; r += dp) {
            double busy = 0;
            for (int i = 0; i < tr->r[r].n; i++) {
                const struct task *t = &tr->r[r].t[i];
                if (t->win != w || t->bucket != BUCKET_COMPUTE || on_io_thread(t) ||
                    (t->phase != ZT_TASK_PHASE_FORWARD && t->phase != ZT_TASK_PHASE_BACKWARD &&
                     t->phase != ZT_TASK_PHASE_WEIGHT_GRAD) || t->cls == ZT_TASK_CLASS_DATA)
                    continue;
                busy += t->end - t->start;
                t0 = t->start < t0 ? t->start : t0;
                t1 = t->end > t1 ? t->end : t1;
            }
            sum += busy;
            most = busy > most ? busy : most;
        }
        if (t1 <= t0) continue;
        idle += 1 - sum / (P * (t1 - t0));
        replicas++;
        if (sum > 0 && most / (sum / P) > *imbalance) *imbalance = most / (sum / P);
    }
    return replicas ? idle / replicas : -1;
}

/* the pipeline's bubble per step, beside the theory's (P-1)/(M+P-1) */
static void print_pipeline(const struct trace *tr, int json) {
    const int P = (int)trace_meta_num(tr, "pipeline_stages", 1);
    const int M = (int)trace_meta_num(tr, "grad_accum", 1);
    if (P < 2 || tr->nranks % P != 0) return;
    printf(json ? ", \"pipeline\": {\"stages\": %d, \"replicas\": %d, \"micro_batches\": %d, "
                  "\"theory\": %.6f, \"steps\": ["
                : "pipeline: %d stages x %d replica(s), %d micro-batches; bubble per step "
                  "(theory (P-1)/(M+P-1) = %.4f):",
           P, tr->nranks / P, M, (double)(P - 1) / (M + P - 1));
    for (int w = 0, k = 0; w < tr->nwin; w++) {
        double im = 1, b = pipeline_bubble(tr, w, P, &im);
        if (b < 0) continue;
        if (json)
            printf("%s{\"step\": %lld, \"bubble\": %.6f, \"imbalance\": %.6f}", k++ ? ", " : "",
                   (long long)tr->win_step[w], b, im);
        else
            printf(" step %lld %.4f (imbalance %.3f)%s", (long long)tr->win_step[w], b, im,
                   w + 1 < tr->nwin ? "," : "");
    }
    printf(json ? "]}" : "\n");
}

enum zt_status cmd_summary(const struct trace *tr, int json) {
    if (json)
        printf("{\"trace\": \"%s\", \"ranks\": %d, \"steps\": [", tr->path, tr->nranks);
    else
        printf("trace %s: %d rank(s) x %d worker(s), ZeRO stage %s, scheduler %s, %d step(s)\n"
               "%5s %4s %9s %10s %9s %9s %9s %9s %13s %9s %6s %7s %7s\n", tr->path, tr->nranks,
               tr->r[0].nworkers, trace_meta(tr, "stage", "?"), trace_meta(tr, "sched", "?"),
               tr->nwin, "step", "rank", "span ms", "compute ms", "recomp ms", "comm ms", "swap ms",
               "ckpt ms", "idle/worker ms", "crit ms", "tasks", "comm%hid", "swap%hid");
    for (int w = 0; w < tr->nwin; w++)
        for (int r = 0; r < tr->nranks; r++) {
            struct step_summary s;
            step_summary(tr, r, w, &s);
            if (json) print_row_json(tr, r, w, &s);
            else print_row_text(tr, r, w, &s);
        }
    if (json) printf("]");
    else print_critical_path(tr);
    print_pipeline(tr, json);
    if (json) printf("}\n");
    return ZT_OK;
}
