/*
 * apps/zt_trace/plot.c: the pictures, drawn by gnuplot: `zt-trace plot` (a step's timeline of
 * every worker, and a bar per rank of where a step goes) and the projection's plot.
 *
 * Layer: apps/ (zt-trace). Each picture is a data file and a gnuplot script beside the PNG,
 * removed once gnuplot has drawn it. The timeline colours compute tasks by their phase
 * (tasks/zt_task_kinds.h's phase column; data loading with the forward) and the other tasks by
 * their class.
 */
#include <errno.h>    /* errno */
#include <stdio.h>    /* fopen */
#include <stdlib.h>   /* free */
#include <string.h>   /* strstr, strchr, strerror */
#include <unistd.h>   /* unlink */
#include "cli.h"      /* cli_run_gnuplot */
#include "zt_trace.h" /* struct trace, step_summary */

enum shade {
    SHADE_FORWARD,
    SHADE_BACKWARD,
    SHADE_WEIGHT_GRAD,
    SHADE_OPTIMIZER,
    SHADE_COMM,
    SHADE_SWAP,
    SHADE_CKPT,
    SHADE_COUNT
};
static const char *const shade_names[SHADE_COUNT] = {
    "forward", "backward", "weight grads", "optimizer", "communication", "swap", "checkpoint"};
static const char *const shade_rgb[SHADE_COUNT] = {"#4e79a7", "#f28e2b", "#edc948", "#59a14f",
                                                   "#e15759", "#b07aa1", "#9c755f"};

static enum shade shade_of(const struct task *t) {
    switch (t->bucket) {
    case BUCKET_COMM: return SHADE_COMM;
    case BUCKET_SWAP: return SHADE_SWAP;
    case BUCKET_CKPT: return SHADE_CKPT;
    default: break;
    }
    switch (t->phase) {
    case ZT_TASK_PHASE_BACKWARD: return SHADE_BACKWARD;
    case ZT_TASK_PHASE_WEIGHT_GRAD: return SHADE_WEIGHT_GRAD;
    case ZT_TASK_PHASE_OPTIMIZER: return SHADE_OPTIMIZER;
    default: return SHADE_FORWARD;
    }
}

// ----------------------------------------------------------------------------
// gnuplot

/* gnuplot draws script gp; then it and the data file go, and the PNG is announced */
static enum zt_status draw(const char *gp, const char *dat, const char *png) {
    ZT_CHECK(cli_run_gnuplot(gp));
    unlink(dat);
    unlink(gp);
    printf("wrote %s\n", png);
    return ZT_OK;
}

/* writes class c's boxes "x0 x1 y0 y1" to d, returns how many */
typedef int (*emit_fn)(const struct trace *tr, FILE *d, int c, int arg, const void *ctx);

/* PREFIX-name.png: boxes, one data block per class, each plotted in its colour when not empty */
static enum zt_status plot_boxes(const char *prefix, const char *name, const char *setup,
                                 int ncls, const char *const *cname, const char *const *rgb,
                                 emit_fn emit, const struct trace *tr, int arg,
                                 const void *ctx) {
    char dat[4200], gp[4200], png[4200];
    snprintf(dat, sizeof dat, "%s-%s.dat", prefix, name);
    snprintf(gp, sizeof gp, "%s-%s.gp", prefix, name);
    snprintf(png, sizeof png, "%s-%s.png", prefix, name);
    FILE *d = fopen(dat, "w"), *g = d ? fopen(gp, "w") : NULL;
    if (!d || !g) {
        if (d) fclose(d);
        return zt_error_set(ZT_ERR_IO, "%s: cannot create (%s)", d ? gp : dat,
                            strerror(errno));
    }
    int *n = xcalloc((size_t)ncls, sizeof *n);
    for (int c = 0; c < ncls; c++) {
        n[c] = emit(tr, d, c, arg, ctx);
        fprintf(d, "%s\n\n", n[c] ? "" : "0 0 0 0"); /* an empty block keeps its index */
    }
    fprintf(g, "set terminal pngcairo size 1600,900 font 'sans,11'\nset output '%s'\n%s\n", png,
            setup);
    fprintf(g, "set style fill solid 0.9 noborder\nplot");
    int k = 0;
    for (int c = 0; c < ncls; c++)
        if (n[c])
            fprintf(g, "%s '%s' index %d using (($1+$2)/2):(($3+$4)/2):(($2-$1)/2):(($4-$3)/2) "
                       "with boxxyerror fc rgb '%s' title '%s'", k++ ? "," : "", dat, c, rgb[c],
                    cname[c]);
    if (!k) fprintf(g, " NaN notitle");
    fprintf(g, "\n");
    free(n);
    int bad = fclose(d) != 0;
    bad |= fclose(g) != 0;
    if (bad) return zt_error_set(ZT_ERR_IO, "%s: write failed", dat);
    return draw(gp, dat, png);
}

// ----------------------------------------------------------------------------
// the step's timeline

/* whether task t of rank r falls in window w */
static int in_window(const struct trace *tr, int r, int w, const struct task *t) {
    return t->end > tr->win_start[w] && t->start < window_end(tr, r, w);
}

/* the timeline's rows: every compute worker's lane, and the I/O lanes (swap and communication
 * threads) that ran a task in window w; row[r][lane] is its row from the top, -1 when left out.
 * Returns the row count. */
static int timeline_rows(const struct trace *tr, int w, int **row) {
    int y = 0;
    for (int r = 0; r < tr->nranks; r++) {
        const struct rank *R = &tr->r[r];
        row[r] = xcalloc((size_t)(R->nworkers + R->nio + 1), sizeof **row);
        for (int l = 0; l < R->nworkers + R->nio; l++) row[r][l] = l < R->nworkers ? 0 : -1;
        for (int i = 0; i < R->n; i++)
            if (in_window(tr, r, w, &R->t[i])) row[r][task_lane(&R->t[i], R->nworkers)] = 0;
        for (int l = 0; l < R->nworkers + R->nio; l++)
            if (row[r][l] == 0) row[r][l] = y++;
    }
    return y;
}

/* shade c's tasks of window w: a box per task on its row (ctx: timeline_rows's) */
static int emit_timeline(const struct trace *tr, FILE *d, int c, int w, const void *ctx) {
    int *const *row = ctx;
    int n = 0;
    for (int r = 0; r < tr->nranks; r++) {
        const struct rank *R = &tr->r[r];
        for (int i = 0; i < R->n; i++) {
            const struct task *t = &R->t[i];
            if ((int)shade_of(t) != c || !in_window(tr, r, w, t)) continue;
            const int y = row[r][task_lane(t, R->nworkers)];
            double x0 = (t->start - tr->win_start[w]) / 1e3;
            double x1 = (t->end - tr->win_start[w]) / 1e3;
            if (x1 - x0 < 0.002) x1 = x0 + 0.002; /* visible */
            fprintf(d, "%.4f %.4f %.2f %.2f\n", x0, x1, y + 0.1, y + 0.9);
            n++;
        }
    }
    return n;
}

static enum zt_status plot_timeline(const struct trace *tr, const char *prefix, int w) {
    char *setup = xcalloc(1, 65536); /* title, axes and a label per row */
    int at = snprintf(setup, 65536, "set title 'zerotask trace %s: step %lld, a lane per worker "
                      "and busy I/O thread (ZeRO stage %s, %s)' noenhanced\nset xlabel 'ms "
                      "since the step began'\nset key outside right top\nset grid xtics\n"
                      "set ytics (", tr->path, (long long)tr->win_step[w],
                      trace_meta(tr, "stage", "?"), trace_meta(tr, "sched", "?"));
    int **row = xcalloc((size_t)tr->nranks, sizeof *row);
    const int nrows = timeline_rows(tr, w, row);
    for (int r = 0; r < tr->nranks; r++) {
        const struct rank *R = &tr->r[r];
        for (int l = 0; l < R->nworkers + R->nio && at < 60000; l++)
            if (row[r][l] >= 0)
                at += snprintf(setup + at, 65536 - (size_t)at, "%s'rank %d %s %d' %.1f",
                               row[r][l] ? ", " : "", r, l < R->nworkers ? "CPU" : "I/O",
                               l < R->nworkers ? l : l - R->nworkers, row[r][l] + 0.5);
    }
    snprintf(setup + at, 65536 - (size_t)at, ")\nset yrange [%d:-0.2]\nset xrange [0:*]\n",
             nrows);
    enum zt_status rc = plot_boxes(prefix, "timeline", setup, SHADE_COUNT, shade_names,
                                   shade_rgb, emit_timeline, tr, w, row);
    for (int r = 0; r < tr->nranks; r++) free(row[r]);
    free(row);
    free(setup);
    return rc;
}

// ----------------------------------------------------------------------------
// where a step goes, per rank

enum { BAR_COMPUTE, BAR_COMM, BAR_IDLE, BAR_SWAP, BAR_CKPT, BAR_COUNT };

/* class c of every rank: [compute, comm, idle] stacked per compute worker on the left bar,
 * [swap, ckpt] on the I/O threads on the right; ctx: ms per step [nranks x BAR_COUNT] */
static int emit_breakdown(const struct trace *tr, FILE *d, int c, int unused, const void *ctx) {
    (void)unused;
    const double *v = ctx;
    int n = 0;
    for (int r = 0; r < tr->nranks; r++) {
        const double *x = &v[r * BAR_COUNT];
        n += x[c] > 0;
        double y0 = 0;
        if (c < BAR_SWAP) {
            for (int k = 0; k < c; k++) y0 += x[k];
            fprintf(d, "%.3f %.3f %.4f %.4f\n", r - 0.38, r - 0.02, y0, y0 + x[c]);
        } else {
            for (int k = BAR_SWAP; k < c; k++) y0 += x[k];
            fprintf(d, "%.3f %.3f %.4f %.4f\n", r + 0.02, r + 0.38, y0, y0 + x[c]);
        }
    }
    return n; /* a class no rank has stays out of the key */
}

static enum zt_status plot_breakdown(const struct trace *tr, const char *prefix) {
    double *v = xcalloc((size_t)tr->nranks * BAR_COUNT, sizeof *v);
    for (int r = 0; r < tr->nranks; r++) {
        int nw = tr->r[r].nworkers ? tr->r[r].nworkers : 1;
        double *x = &v[r * BAR_COUNT];
        for (int k = 0; k < tr->nwin; k++) {
            struct step_summary s;
            step_summary(tr, r, k, &s);
            x[BAR_COMPUTE] += s.busy[BUCKET_COMPUTE] / nw / 1e3 / tr->nwin;
            x[BAR_COMM] += s.busy[BUCKET_COMM] / nw / 1e3 / tr->nwin;
            x[BAR_IDLE] += s.idle_sum / nw / 1e3 / tr->nwin;
            x[BAR_SWAP] += s.busy[BUCKET_SWAP] / 1e3 / tr->nwin;
            x[BAR_CKPT] += s.busy[BUCKET_CKPT] / 1e3 / tr->nwin;
        }
    }
    static const char *const bname[BAR_COUNT] = {"compute", "communication", "idle",
                                                 "swap (I/O threads)",
                                                 "checkpoint (I/O threads)"};
    static const char *const brgb[BAR_COUNT] = {"#4e79a7", "#e15759", "#d0d0d0", "#b07aa1",
                                                "#9c755f"};
    char setup[4096];
    int at = snprintf(setup, sizeof setup, "set title 'zerotask trace %s: where a step goes, "
                      "per rank (mean of %d steps; left bar: per compute worker, right bar: I/O "
                      "threads)' noenhanced\nset ylabel 'ms per step'\nset key outside right "
                      "top\nset grid ytics\nset xrange [-0.6:%d.6]\nset yrange [0:*]\n"
                      "set xtics (", tr->path, tr->nwin, tr->nranks - 1);
    for (int r = 0; r < tr->nranks && at < 4000; r++)
        at += snprintf(setup + at, sizeof setup - (size_t)at, "%s'rank %d' %d", r ? ", " : "",
                       r, r);
    snprintf(setup + at, sizeof setup - (size_t)at, ")\n");
    enum zt_status rc = plot_boxes(prefix, "breakdown", setup, BAR_COUNT, bname, brgb,
                                   emit_breakdown, tr, 0, v);
    free(v);
    return rc;
}

enum zt_status cmd_plot(const struct trace *tr, const char *prefix, long long step) {
    int w = tr->nwin > 1 ? 1 : 0; /* the second step: the first warms up */
    if (step >= 0) {
        for (w = 0; w < tr->nwin && tr->win_step[w] != step; w++) continue;
        if (w == tr->nwin)
            return zt_error_set(ZT_ERR_INVALID, "--step %lld: not in the trace (steps "
                                "%lld..%lld)", step, (long long)tr->win_step[0],
                                (long long)tr->win_step[tr->nwin - 1]);
    }
    ZT_CHECK(plot_timeline(tr, prefix, w));
    return plot_breakdown(tr, prefix);
}

// ----------------------------------------------------------------------------
// the projection

enum zt_status plot_projection(const char *png, const struct trace *trs, int ntr) {
    char gp[4200], dat[4200];
    snprintf(gp, sizeof gp, "%s.gp", png);
    snprintf(dat, sizeof dat, "%s.dat", png);
    FILE *g = fopen(gp, "w");
    if (!g) return zt_error_set(ZT_ERR_IO, "%s: cannot create (%s)", gp, strerror(errno));
    fprintf(g, "set terminal pngcairo size 1400,600 font 'sans,11'\nset output '%s'\n"
               "set multiplot layout 1,2 title 'zerotask scale-out projection (alpha-beta ring "
               "collectives, one rank per node)'\nset logscale x 2\nset xlabel 'ranks'\n"
               "set grid\nset key top left\n", png);
    for (int panel = 0; panel < 2; panel++) {
        fprintf(g, panel ? "set ylabel 'memory per rank, MiB'\nset logscale y\nplot"
                         : "set ylabel 'step time, ms'\nplot");
        for (int k = 0; k < ntr; k++) /* a data block per trace, titled by its stage */
            fprintf(g, "%s '%s' index %d using 2:%d with linespoints lw 2 title 'stage %d'",
                    k ? "," : "", dat, k, panel ? 5 : 3, trace_stage(&trs[k]));
        fprintf(g, "\n");
    }
    fprintf(g, "unset multiplot\n");
    if (fclose(g) != 0) return zt_error_set(ZT_ERR_IO, "%s: write failed", gp);
    return draw(gp, dat, png);
}
