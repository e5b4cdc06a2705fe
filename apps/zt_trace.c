/*
 * apps/zt_trace.c: zt-trace, the tool that reads a trace's replay file (zt-train --trace F.json
 * writes F.ztr beside it; docs/traces.md): where the time of each step went (summary), what the
 * step would take with other workers, policies, bandwidths or rank counts (replay: a
 * discrete-event simulation of the recorded task graph), pictures (plot: gnuplot PNGs) and a
 * scale-out projection to 8..1024 ranks (project: the same simulation with an alpha-beta model
 * of ring collectives). Needs no runtime (no StarPU, no MPI): it reads the file.
 *
 * Layer: apps/. Includes only <zerotask.h>. Errors: exactly one line "zt-trace: error: ..." on
 * stderr; exit 2 for a bad command line, 1 for anything else (a damaged trace included).
 *
 * The model (docs/traces.md, "Replay"): each task keeps its recorded duration, normalised to
 * the speed of one core (a task that shared the machine's cores with more running threads than
 * there were cores ran slower by that factor; replays of another layout take a compute task's
 * recorded CPU time instead, which also leaves out time other processes held its core), and
 * runs when its dependencies have ended and
 * the rank's host thread has submitted it. The host thread is replayed per step window: it
 * submits a step's tasks at their recorded offsets, waits for the tasks that ended during the
 * window in the recording, and starts the next window after the recorded gap. A collective
 * (the k-th comm_* task of every rank) ends a transfer time after the last rank has joined it.
 * Compute tasks of ranks sharing a node progress at min(1, cores / running) of full speed.
 */
#include <errno.h>      /* errno */
#include <float.h>      /* DBL_MAX */
#include <math.h>       /* fabs */
#include <stdint.h>     /* int64_t */
#include <stdio.h>      /* printf */
#include <stdlib.h>     /* malloc */
#include <string.h>     /* strcmp */
#include <sys/wait.h>   /* WIFEXITED */
#include <unistd.h>     /* unlink */
#include "zerotask.h"   /* ZEROTASK_VERSION */

static const char *usage_text =
    "usage: zt-trace COMMAND TRACE.ztr [options]\n"
    "\n"
    "Reads the replay file zt-train --trace F.json writes beside the JSON (F.ztr; docs/traces.md).\n"
    "\n"
    "  summary TRACE [--json]\n"
    "      per step and rank: span, time in compute, communication, swap and checkpoint tasks,\n"
    "      idle time per worker, the critical path (its length, tasks and kinds) and the\n"
    "      fraction of communication and swap time hidden behind compute\n"
    "  replay TRACE [--workers N] [--policy P] [--ranks N] [--cores N] [--link-bw X]\n"
    "               [--disk-bw X] [--compute X] [--alpha-us A --bw-gbs B]\n"
    "               [--durations D] [--json]\n"
    "      discrete-event simulation of the recorded task graph; prints the predicted step\n"
    "      times and breakdown beside the recorded ones. With no options it replays the run as\n"
    "      recorded (each task on its worker, in its order) and must reproduce its step time.\n"
    "      --workers N   compute workers per rank (default: as recorded)\n"
    "      --policy P    recorded (default while --workers is not given), eager (first ready,\n"
    "                    first served), prio (the tasks' StarPU priorities, then eager) or cp\n"
    "                    (longest path to the step's end first: a critical-path list)\n"
    "      --ranks N     data-parallel ranks (rank r replays recorded rank r mod the recorded\n"
    "                    count; collectives and ZeRO-partitioned work scale with N)\n"
    "      --cores N     cores per node shared by its ranks' workers (default: recorded)\n"
    "      --durations D compute tasks last their recorded wall time (wall) or their\n"
    "                    worker's CPU time (cpu: what they cost on a core of their own,\n"
    "                    without the time other processes held it); auto (default): wall as\n"
    "                    recorded, cpu when --workers, --ranks or --cores change the layout\n"
    "      --link-bw X   collectives X times faster (bandwidth scaling); --disk-bw X swaps and\n"
    "                    checkpoint writes X times faster; --compute X compute X times faster\n"
    "      --alpha-us A, --bw-gbs B\n"
    "                    model collectives as ring collectives, alpha-beta (A us per message\n"
    "                    step, B GB/s per link) instead of scaling the recorded ones\n"
    "  plot TRACE --out PREFIX [--step S]\n"
    "      PREFIX-timeline.png (every worker of every rank over step S, coloured by task kind)\n"
    "      and PREFIX-breakdown.png (a bar per rank: compute, communication, swap, checkpoint,\n"
    "      idle); needs gnuplot\n"
    "  project TRACE [TRACE...] [--ranks LIST] [--alpha-us A] [--bw-gbs B] [--plot OUT.png]\n"
    "          [--json]\n"
    "      scale-out projection: each trace (one per ZeRO stage) replayed as one of N ranks,\n"
    "      one rank per node, collectives as alpha-beta ring collectives (defaults 10 us,\n"
    "      12.5 GB/s); per N (default 8,16,...,1024): step time, exposed communication share,\n"
    "      communication volume and memory per rank (docs/traces.md, \"Scale-out projection\")\n"
    "\n"
    "Exit status: 0 ok, 2 bad command line, 1 any other error (a damaged trace included).\n";

/* ---------------------------------------------------------------------------------------------
 * errors */
static int usage(const char *fmt, const char *arg) {
    fprintf(stderr, "zt-trace: error: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, " (see zt-trace --help)\n");
    return 2;
}

static char g_err[9000];
#define FAIL(...) (snprintf(g_err, sizeof g_err, __VA_ARGS__), -1)

static void *xcalloc(size_t n, size_t sz) {
    void *p = calloc(n ? n : 1, sz);
    if (!p) {
        fprintf(stderr, "zt-trace: error: out of memory\n");
        exit(1);
    }
    return p;
}

static void *xrealloc(void *p, size_t sz) {
    p = realloc(p, sz ? sz : 1);
    if (!p) {
        fprintf(stderr, "zt-trace: error: out of memory\n");
        exit(1);
    }
    return p;
}

/* ---------------------------------------------------------------------------------------------
 * the trace */
enum cls { C_COMPUTE, C_COMM, C_SWAP, C_CKPT, C_N };
static const char *const g_cls_name[C_N] = {"compute", "comm", "swap", "ckpt"};
/* finer classes for the timeline's colours */
enum pcls { P_FWD, P_BWD, P_WGRAD, P_OPT, P_COMM, P_SWAP, P_CKPT, P_N };
static const char *const g_pcls_name[P_N] = {"forward", "backward", "weight grads", "optimizer",
                                             "communication", "swap", "checkpoint"};
static const char *const g_pcls_rgb[P_N] = {"#4e79a7", "#f28e2b", "#edc948", "#59a14f",
                                            "#e15759", "#b07aa1", "#9c755f"};
#define IO_WORKER 1000 /* ZT_TRACE_IO_WORKER */

struct task {
    int64_t id, step;
    int layer, mb, blk, worker, node, cls, pcls;
    char kind[32];
    double submit, start, end, work; /* work: us at the speed of a whole core */
    double cpu;       /* compute tasks: the worker thread's CPU time in it (us), else < 0 */
    double lat;       /* us between when it could have started and when it did */
    double lat_cpu;   /* the same for CPU durations: less the time its worker waited for a core */
    double waited;    /* us its worker waited for a core since its previous task; < 0 unknown */
    int64_t br, bw, prio;
    int ndep, nsucc;
    int *dep, *succ; /* indices in the rank's array */
    int64_t *ids;    /* while loading: [count, dependency ids...] */
    int win;         /* the step window it was submitted in */
    int gate;        /* the window whose end waits for it */
    int post;        /* submitted after its window's wait */
    int coll;        /* k: the rank's k-th collective, else -1 */
    int rorder;      /* its place on its recorded worker */
};

struct rank {
    struct task *t;
    int n, cap;
    int nwork;        /* compute workers (ids 0..nwork-1) */
    int nio;          /* I/O threads */
    int ncoll;
};

struct trace {
    const char *path;
    int nranks;
    int has_cpu;      /* replay file version 3: compute tasks' CPU times */
    struct rank *r;
    char meta[32][2][64];
    int nmeta;
    int nwin;
    int64_t *wstep;   /* the step label of each window */
    double *ws;       /* window start: first submission of a compute task of the step */
    double *gate_end; /* per window: last end of the tasks ending in it */
    double *lastpre;  /* per rank x window: last submission before the wait */
};

static const char *meta(const struct trace *tr, const char *key, const char *def) {
    for (int i = 0; i < tr->nmeta; i++)
        if (!strcmp(tr->meta[i][0], key)) return tr->meta[i][1];
    return def;
}

static double meta_num(const struct trace *tr, const char *key, double def) {
    const char *v = meta(tr, key, NULL);
    return v ? atof(v) : def;
}

static int starts(const char *s, const char *p) { return strncmp(s, p, strlen(p)) == 0; }
static int ends(const char *s, const char *p) {
    size_t a = strlen(s), b = strlen(p);
    return a >= b && !strcmp(s + a - b, p);
}

static void classify(struct task *t) {
    const char *k = t->kind;
    if (starts(k, "comm_")) t->cls = C_COMM, t->pcls = P_COMM;
    else if (starts(k, "swap_")) t->cls = C_SWAP, t->pcls = P_SWAP;
    else if (!strcmp(k, "ckpt_write")) t->cls = C_CKPT, t->pcls = P_CKPT;
    else {
        t->cls = C_COMPUTE;
        if (ends(k, "_backward_weight") || ends(k, "_backward_bias") ||
            !strcmp(k, "layernorm_param_reduce"))
            t->pcls = P_WGRAD;
        else if (strstr(k, "backward")) t->pcls = P_BWD;
        else if (!strcmp(k, "adamw") || starts(k, "grad_") || !strcmp(k, "fill_zero"))
            t->pcls = P_OPT;
        else t->pcls = P_FWD;
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

static int load(struct trace *tr, const char *path) {
    memset(tr, 0, sizeof *tr);
    tr->path = path;
    FILE *f = fopen(path, "r");
    if (!f) return FAIL("trace %s: cannot open (%s)", path, strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    long ln = 0;
    int rc = 0, ver = 3;
    while (getline(&line, &cap, f) > 0) {
        ln++;
        if (ln == 1) {
            if (starts(line, "# zerotask replay 3:")) ver = 3;
            else if (starts(line, "# zerotask replay 2:")) ver = 2; /* no cpu_us column */
            else {
                rc = FAIL("trace %s: not a zerotask replay file (first line \"# zerotask replay "
                          "3: ...\" expected; zt-train --trace F.json writes F.ztr)", path);
                break;
            }
            continue;
        }
        if (line[0] == '#') {
            if (starts(line, "# meta")) {
                char *save = NULL;
                for (char *w = strtok_r(line + 6, " \n", &save); w && tr->nmeta < 32;
                     w = strtok_r(NULL, " \n", &save)) {
                    char *eq = strchr(w, '=');
                    if (!eq) continue;
                    *eq = 0;
                    snprintf(tr->meta[tr->nmeta][0], 64, "%s", w);
                    snprintf(tr->meta[tr->nmeta][1], 64, "%s", eq + 1);
                    tr->nmeta++;
                }
            }
            continue;
        }
        struct task t = {0};
        int rank, nd, used = 0;
        long long id, step, br, bw, prio;
        int n;
        t.cpu = -1, t.waited = -1;
        if (ver == 3)
            n = sscanf(line, "%d %lld %31s %lld %d %d %d %d %d %lf %lf %lf %lf %lf %lld %lld %lld "
                             "%d%n", &rank, &id, t.kind, &step, &t.layer, &t.mb, &t.blk,
                       &t.worker, &t.node, &t.submit, &t.start, &t.end, &t.cpu, &t.waited,
                       &br, &bw, &prio, &nd, &used) - 2;
        else
            n = sscanf(line, "%d %lld %31s %lld %d %d %d %d %d %lf %lf %lf %lld %lld %lld %d%n",
                       &rank, &id, t.kind, &step, &t.layer, &t.mb, &t.blk, &t.worker, &t.node,
                       &t.submit, &t.start, &t.end, &br, &bw, &prio, &nd, &used);
        if (n != 16 || rank < 0 || rank > 65535 || nd < 0 || id < 0 || t.end < t.start) {
            rc = FAIL("trace %s line %ld: expected \"rank id kind step layer mb blk worker node "
                      "submit_us start_us end_us%s bytes_read bytes_written prio ndeps deps...\"",
                      path, ln, ver == 3 ? " cpu_us waited_us" : "");
            break;
        }
        t.id = id, t.step = step, t.br = br, t.bw = bw, t.prio = prio;
        if (rank >= tr->nranks) {
            tr->r = xrealloc(tr->r, (size_t)(rank + 1) * sizeof *tr->r);
            for (int k = tr->nranks; k <= rank; k++) memset(&tr->r[k], 0, sizeof tr->r[k]);
            tr->nranks = rank + 1;
        }
        struct rank *R = &tr->r[rank];
        if (R->n == R->cap) {
            R->cap = R->cap ? 2 * R->cap : 1024;
            R->t = xrealloc(R->t, (size_t)R->cap * sizeof *R->t);
        }
        int64_t *d = xcalloc((size_t)nd + 1, sizeof *d);
        d[0] = nd;
        const char *p = line + used;
        for (int k = 0; k < nd; k++) {
            char *endp;
            long long v = strtoll(p, &endp, 10);
            if (endp == p) {
                free(d);
                rc = FAIL("trace %s line %ld: %d dependencies announced, fewer listed", path, ln,
                          nd);
                goto done;
            }
            d[k + 1] = v;
            p = endp;
        }
        t.ids = d; /* resolved to indices below */
        classify(&t);
        R->t[R->n++] = t;
    }
    tr->has_cpu = ver == 3;
    if (!rc && ln == 0) rc = FAIL("trace %s: empty (a replay file expected)", path);
    if (!rc && tr->nranks == 0) rc = FAIL("trace %s: no task records", path);
done:
    free(line);
    fclose(f);
    for (int r = 0; r < tr->nranks; r++) {
        struct rank *R = &tr->r[r];
        if (!rc) qsort(R->t, (size_t)R->n, sizeof *R->t, cmp_id);
        for (int i = 0; i < R->n; i++) {
            struct task *t = &R->t[i];
            int64_t *ids = t->ids;
            int nd = (int)ids[0];
            t->ids = NULL;
            t->dep = xcalloc((size_t)nd, sizeof *t->dep);
            t->ndep = 0;
            for (int k = 0; k < nd; k++) {
                int64_t v = ids[k + 1];
                if (rc) break;
                int at = find_id(R, v);
                if (at < 0 || v >= t->id) {
                    rc = FAIL("trace %s: rank %d task %lld depends on task %lld, which is not an "
                              "earlier task of the trace", path, r, (long long)t->id,
                              (long long)v);
                    break;
                }
                t->dep[t->ndep++] = at;
            }
            free(ids);
            if (t->worker >= IO_WORKER) {
                if (t->worker - IO_WORKER + 1 > R->nio) R->nio = t->worker - IO_WORKER + 1;
            } else if (t->worker + 1 > R->nwork) {
                R->nwork = t->worker + 1;
            }
        }
    }
    return rc;
}

static void trace_free(struct trace *tr) {
    for (int r = 0; r < tr->nranks; r++) {
        for (int i = 0; i < tr->r[r].n; i++) {
            free(tr->r[r].t[i].dep);
            free(tr->r[r].t[i].succ);
        }
        free(tr->r[r].t);
    }
    free(tr->r);
    free(tr->wstep);
    free(tr->ws);
    free(tr->gate_end);
    free(tr->lastpre);
}

static int cmp_dbl(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* successors, collectives, windows, gates, recorded worker order and normalised work */
static int analyse(struct trace *tr) {
    int64_t smin = INT64_MAX, smax = INT64_MIN;
    for (int r = 0; r < tr->nranks; r++)
        for (int i = 0; i < tr->r[r].n; i++) {
            struct task *t = &tr->r[r].t[i];
            if (t->worker >= IO_WORKER) continue;
            if (t->step < smin) smin = t->step;
            if (t->step > smax) smax = t->step;
        }
    if (smin == INT64_MAX) return FAIL("trace %s: no task ran on a worker", tr->path);
    if (smax - smin > 1000000) return FAIL("trace %s: step labels out of range", tr->path);
    /* windows: one per step label that has a compute task, started by its first submission
     * (of any rank: ranks of one machine share the clock) */
    int nl = (int)(smax - smin + 1);
    double *first = xcalloc((size_t)nl, sizeof *first);
    for (int k = 0; k < nl; k++) first[k] = DBL_MAX;
    for (int r = 0; r < tr->nranks; r++)
        for (int i = 0; i < tr->r[r].n; i++) {
            struct task *t = &tr->r[r].t[i];
            if (t->worker >= IO_WORKER) continue;
            int k = (int)(t->step - smin);
            if (t->submit < first[k]) first[k] = t->submit;
        }
    tr->wstep = xcalloc((size_t)nl, sizeof *tr->wstep);
    tr->ws = xcalloc((size_t)nl + 1, sizeof *tr->ws);
    tr->nwin = 0;
    for (int k = 0; k < nl; k++)
        if (first[k] < DBL_MAX) {
            if (tr->nwin && first[k] <= tr->ws[tr->nwin - 1]) {
                free(first);
                return FAIL("trace %s: step %lld was submitted before the step before it",
                            tr->path, (long long)(smin + k));
            }
            tr->wstep[tr->nwin] = smin + k;
            tr->ws[tr->nwin++] = first[k];
        }
    free(first);
    tr->ws[tr->nwin] = DBL_MAX;
    int W = tr->nwin;
    tr->gate_end = xcalloc((size_t)W * (size_t)tr->nranks, sizeof *tr->gate_end);
    tr->lastpre = xcalloc((size_t)W * (size_t)tr->nranks, sizeof *tr->lastpre);
    int ncoll0 = -1;
    for (int r = 0; r < tr->nranks; r++) {
        struct rank *R = &tr->r[r];
        double *ge = &tr->gate_end[(size_t)r * W], *lp = &tr->lastpre[(size_t)r * W];
        for (int w = 0; w < W; w++) ge[w] = lp[w] = tr->ws[w];
        R->ncoll = 0;
        for (int i = 0; i < R->n; i++) {
            struct task *t = &R->t[i];
            t->nsucc = 0;
            t->coll = t->cls == C_COMM ? R->ncoll++ : -1;
            int w = 0, g = 0;
            while (w + 1 < W && tr->ws[w + 1] <= t->submit) w++;
            while (g + 1 < W && tr->ws[g + 1] <= t->end) g++;
            if (g < w) g = w;
            t->win = w;
            t->gate = g;
            if (t->end > ge[g]) ge[g] = t->end;
        }
        if (ncoll0 >= 0 && R->ncoll != ncoll0)
            return FAIL("trace %s: rank %d has %d collectives, rank 0 %d", tr->path, r,
                        R->ncoll, ncoll0);
        ncoll0 = R->ncoll;
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
        /* each worker's tasks in recorded start order */
        int nlane = R->nwork + R->nio;
        int *cnt = xcalloc((size_t)nlane, sizeof *cnt);
        int *ord = xcalloc((size_t)R->n, sizeof *ord);
        for (int i = 0; i < R->n; i++) ord[i] = i;
        /* insertion by start time is enough: records are nearly sorted by id already */
        for (int i = 1; i < R->n; i++) {
            int x = ord[i], j = i;
            while (j > 0 && R->t[ord[j - 1]].start > R->t[x].start) {
                ord[j] = ord[j - 1];
                j--;
            }
            ord[j] = x;
        }
        /* the runtime's own time per task: from when it could have started (submitted, its
         * dependencies ended, its worker free) to when it did; replayed as part of its work */
        double *free_at = xcalloc((size_t)nlane, sizeof *free_at);
        for (int i = 0; i < R->n; i++) {
            struct task *t = &R->t[ord[i]];
            int lane = t->worker >= IO_WORKER ? R->nwork + t->worker - IO_WORKER : t->worker;
            t->rorder = cnt[lane]++;
            double can = t->submit > free_at[lane] ? t->submit : free_at[lane];
            for (int k = 0; k < t->ndep; k++)
                if (R->t[t->dep[k]].end > can) can = R->t[t->dep[k]].end;
            t->lat = t->cls != C_COMM && t->start > can ? t->start - can : 0;
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
        free(cnt);
        free(ord);
    }
    /* normalised work: a compute task that ran while more threads than cores ran on its node
     * ran slower by that factor (collectives do not count: their waits sleep, sched/comm.c) */
    int rpn = (int)meta_num(tr, "ranks_per_node", tr->nranks);
    double cores = meta_num(tr, "cores", 0);
    if (rpn < 1) rpn = 1;
    for (int n0 = 0; n0 < tr->nranks; n0 += rpn) {
        int ne = 0;
        for (int r = n0; r < n0 + rpn && r < tr->nranks; r++) ne += 2 * tr->r[r].n;
        double *ev = xcalloc((size_t)ne, sizeof *ev); /* times; starts +, ends - (sign bit) */
        double *tm = xcalloc((size_t)ne, sizeof *tm);
        int m = 0;
        for (int r = n0; r < n0 + rpn && r < tr->nranks; r++)
            for (int i = 0; i < tr->r[r].n; i++) {
                struct task *t = &tr->r[r].t[i];
                if (t->worker >= IO_WORKER || t->cls == C_COMM) continue;
                tm[m++] = t->start;
            }
        int ns = m;
        for (int r = n0; r < n0 + rpn && r < tr->nranks; r++)
            for (int i = 0; i < tr->r[r].n; i++)
                if (tr->r[r].t[i].worker < IO_WORKER && tr->r[r].t[i].cls != C_COMM)
                    tm[m++] = tr->r[r].t[i].end;
        /* F(x) = integral of the number of running tasks up to x, at the sorted event times:
         * running(x) = starts <= x minus ends <= x */
        double *st = xcalloc((size_t)ns, sizeof *st), *en = xcalloc((size_t)ns, sizeof *en);
        memcpy(st, tm, (size_t)ns * sizeof *st);
        memcpy(en, tm + ns, (size_t)ns * sizeof *en);
        qsort(st, (size_t)ns, sizeof *st, cmp_dbl);
        qsort(en, (size_t)ns, sizeof *en, cmp_dbl);
        qsort(tm, (size_t)m, sizeof *tm, cmp_dbl);
        double *F = ev;
        int a = 0, b = 0;
        double acc = 0;
        for (int k = 0; k < m; k++) {
            if (k) acc += (double)(a - b) * (tm[k] - tm[k - 1]);
            while (a < ns && st[a] <= tm[k]) a++;
            while (b < ns && en[b] <= tm[k]) b++;
            F[k] = acc;
        }
        for (int r = n0; r < n0 + rpn && r < tr->nranks; r++)
            for (int i = 0; i < tr->r[r].n; i++) {
                struct task *t = &tr->r[r].t[i];
                double dur = t->end - t->start;
                t->work = dur;
                if (t->worker >= IO_WORKER || t->cls != C_COMPUTE) t->cpu = -1;
                else if (t->cpu > dur) t->cpu = dur;
                if (t->worker >= IO_WORKER || t->cls == C_COMM || dur <= 0 || cores <= 0 ||
                    m == 0)
                    continue;
                /* binary searches: F at start and end */
                int lo = 0, hi = m - 1;
                while (lo < hi) {
                    int mid = (lo + hi) / 2;
                    if (tm[mid] < t->start) lo = mid + 1;
                    else hi = mid;
                }
                int i0 = lo;
                lo = 0, hi = m - 1;
                while (lo < hi) {
                    int mid = (lo + hi) / 2;
                    if (tm[mid] < t->end) lo = mid + 1;
                    else hi = mid;
                }
                double avg = (F[lo] - F[i0]) / dur; /* running threads, itself included */
                if (avg > cores) t->work = dur * cores / avg;
            }
        free(st);
        free(en);
        free(ev);
        free(tm);
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * summary */
struct iv {
    double a, b;
};

static int cmp_iv(const void *x, const void *y) {
    const struct iv *p = x, *q = y;
    return (p->a > q->a) - (p->a < q->a);
}

/* merge intervals in place (sorted, disjoint); returns their count */
static int merge(struct iv *v, int n) {
    if (!n) return 0;
    qsort(v, (size_t)n, sizeof *v, cmp_iv);
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
static double covered(const struct iv *u, int n, double a, double b) {
    double s = 0;
    for (int i = 0; i < n && u[i].a < b; i++) {
        double x = u[i].a > a ? u[i].a : a, y = u[i].b < b ? u[i].b : b;
        if (y > x) s += y - x;
    }
    return s;
}

struct stepsum {
    double span, busy[C_N], idle_sum, idle_max, cp, hidden[C_N], total[C_N];
    int cp_n, cp_end;
    double cp_kind[64];
    char cp_kname[64][32];
    int ncpk;
};

static double win_end(const struct trace *tr, int r, int w) {
    return w + 1 < tr->nwin ? tr->ws[w + 1] : tr->gate_end[(size_t)r * tr->nwin + w];
}

static void step_summary(const struct trace *tr, int r, int w, struct stepsum *s) {
    const struct rank *R = &tr->r[r];
    memset(s, 0, sizeof *s);
    double a = tr->ws[w], b = win_end(tr, r, w);
    s->span = b - a;
    struct iv *comp = xcalloc((size_t)R->n, sizeof *comp);
    double *wb = xcalloc((size_t)R->nwork + 1, sizeof *wb);
    int nc = 0;
    for (int i = 0; i < R->n; i++) {
        const struct task *t = &R->t[i];
        double x = t->start > a ? t->start : a, y = t->end < b ? t->end : b;
        if (y <= x) continue;
        s->busy[t->cls] += y - x;
        if (t->worker < IO_WORKER) wb[t->worker] += y - x;
        if (t->cls == C_COMPUTE) comp[nc++] = (struct iv){x, y};
    }
    nc = merge(comp, nc);
    for (int i = 0; i < R->n; i++) {
        const struct task *t = &R->t[i];
        double x = t->start > a ? t->start : a, y = t->end < b ? t->end : b;
        if (y <= x || t->cls == C_COMPUTE) continue;
        s->total[t->cls] += y - x;
        s->hidden[t->cls] += covered(comp, nc, x, y);
    }
    for (int k = 0; k < R->nwork; k++) {
        double idle = s->span - wb[k];
        s->idle_sum += idle;
        if (idle > s->idle_max) s->idle_max = idle;
    }
    /* critical path of the window's tasks: the longest chain through dependencies among the
     * tasks submitted in it (recorded durations) */
    double *len = xcalloc((size_t)R->n, sizeof *len);
    int *from = xcalloc((size_t)R->n, sizeof *from);
    int best = -1;
    for (int i = 0; i < R->n; i++) {
        const struct task *t = &R->t[i];
        from[i] = -1;
        if (t->win != w) continue;
        double m = 0;
        for (int k = 0; k < t->ndep; k++) {
            int d = t->dep[k];
            if (R->t[d].win == w && len[d] > m) m = len[d], from[i] = d;
        }
        len[i] = m + (t->end - t->start);
        if (best < 0 || len[i] > len[best]) best = i;
    }
    if (best >= 0) {
        s->cp = len[best];
        s->cp_end = best;
        for (int i = best; i >= 0; i = from[i]) {
            s->cp_n++;
            int k = 0;
            while (k < s->ncpk && strcmp(s->cp_kname[k], R->t[i].kind)) k++;
            if (k == s->ncpk && k < 64) snprintf(s->cp_kname[s->ncpk++], 32, "%s", R->t[i].kind);
            if (k < 64) s->cp_kind[k] += R->t[i].end - R->t[i].start;
        }
    }
    free(len);
    free(from);
    free(comp);
    free(wb);
}

static int cmd_summary(const struct trace *tr, int json) {
    if (json) printf("{\"trace\": \"%s\", \"ranks\": %d, \"steps\": [", tr->path, tr->nranks);
    else
        printf("trace %s: %d rank(s) x %d worker(s), ZeRO stage %s, scheduler %s, %d step(s)\n"
               "%5s %4s %9s %10s %9s %9s %9s %13s %9s %6s %7s %7s\n", tr->path, tr->nranks,
               tr->r[0].nwork, meta(tr, "stage", "?"), meta(tr, "sched", "?"), tr->nwin, "step",
               "rank", "span ms", "compute ms", "comm ms", "swap ms", "ckpt ms",
               "idle/worker ms", "crit ms", "tasks", "comm%hid", "swap%hid");
    for (int w = 0; w < tr->nwin; w++)
        for (int r = 0; r < tr->nranks; r++) {
            struct stepsum s;
            step_summary(tr, r, w, &s);
            double hc = s.total[C_COMM] > 0 ? s.hidden[C_COMM] / s.total[C_COMM] : -1;
            double hs = s.total[C_SWAP] > 0 ? s.hidden[C_SWAP] / s.total[C_SWAP] : -1;
            int nw = tr->r[r].nwork ? tr->r[r].nwork : 1;
            if (json) {
                printf("%s\n {\"step\": %lld, \"rank\": %d, \"span_ms\": %.4f, \"compute_ms\": "
                       "%.4f, \"comm_ms\": %.4f, \"swap_ms\": %.4f, \"ckpt_ms\": %.4f, "
                       "\"idle_ms_per_worker\": %.4f, \"idle_ms_max\": %.4f, \"critical_ms\": "
                       "%.4f, \"critical_tasks\": %d, \"comm_hidden\": %.4f, \"swap_hidden\": "
                       "%.4f, \"critical_kinds\": {", (w || r) ? "," : "",
                       (long long)tr->wstep[w], r, s.span / 1e3, s.busy[C_COMPUTE] / 1e3,
                       s.busy[C_COMM] / 1e3, s.busy[C_SWAP] / 1e3, s.busy[C_CKPT] / 1e3,
                       s.idle_sum / nw / 1e3, s.idle_max / 1e3, s.cp / 1e3, s.cp_n, hc, hs);
                for (int k = 0; k < s.ncpk; k++)
                    printf("%s\"%s\": %.4f", k ? ", " : "", s.cp_kname[k], s.cp_kind[k] / 1e3);
                printf("}}");
                continue;
            }
            char h1[16] = "-", h2[16] = "-";
            if (hc >= 0) snprintf(h1, sizeof h1, "%.0f%%", 100 * hc);
            if (hs >= 0) snprintf(h2, sizeof h2, "%.0f%%", 100 * hs);
            printf("%5lld %4d %9.2f %10.2f %9.2f %9.2f %9.2f %13.2f %9.2f %6d %7s %7s\n",
                   (long long)tr->wstep[w], r, s.span / 1e3, s.busy[C_COMPUTE] / 1e3,
                   s.busy[C_COMM] / 1e3, s.busy[C_SWAP] / 1e3, s.busy[C_CKPT] / 1e3,
                   s.idle_sum / nw / 1e3, s.cp / 1e3, s.cp_n, h1, h2);
        }
    if (json) {
        printf("]}\n");
        return 0;
    }
    /* the critical path of the last step, rank 0, by kind */
    struct stepsum s;
    int w = tr->nwin - 1;
    step_summary(tr, 0, w, &s);
    printf("critical path, step %lld rank 0: %.2f ms over %d tasks (%.0f%% of the span):",
           (long long)tr->wstep[w], s.cp / 1e3, s.cp_n, s.span > 0 ? 100 * s.cp / s.span : 0);
    for (int n = 0; n < 6 && n < s.ncpk; n++) { /* the largest kinds, in order */
        int k = -1;
        for (int j = 0; j < s.ncpk; j++)
            if (s.cp_kind[j] >= 0 && (k < 0 || s.cp_kind[j] > s.cp_kind[k])) k = j;
        printf("%s %s %.2f ms", n ? "," : "", s.cp_kname[k], s.cp_kind[k] / 1e3);
        s.cp_kind[k] = -1;
    }
    printf("\n");
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * replay: the discrete-event simulation */
enum policy { POL_RECORDED, POL_EAGER, POL_PRIO, POL_CP };
static const char *const g_pol_name[] = {"recorded", "eager", "prio", "cp"};

struct simopt {
    int workers;      /* 0: as recorded */
    enum policy pol;
    int ranks;        /* simulated ranks; 0: as recorded */
    int model_ranks;  /* ranks the collectives and ZeRO partitions are sized for; 0: ranks */
    int rpn;          /* ranks per node; 0: as recorded (all on one node if recorded so) */
    double cores;     /* 0: recorded */
    double link, disk, compute;
    double alpha_us, bw_gbs; /* > 0: alpha-beta collectives */
    int no_comm;      /* collectives cost nothing (exposed-communication share) */
    int shared;       /* cores shared evenly by a node's running tasks (else: pinned) */
    enum durs { D_AUTO, D_WALL, D_CPU } durs; /* compute tasks' durations (--durations) */
};
static const char *const g_durs_name[] = {"auto", "wall", "cpu"};

struct stask {
    int st;           /* 0 waiting, 1 released, 2 ready, 3 running, 4 done */
    int ndep_left;
    double release, ready, rem, endt;
    int worker;       /* lane while running */
};

struct srank {
    const struct rank *R;
    int rec;          /* the recorded rank it replays */
    int node;
    struct stask *s;
    int *subord;      /* tasks in submission order */
    int cursor;       /* next unreleased, in subord */
    int *gleft;       /* per window: gate tasks not done */
    double *H;        /* per window: host start (-1 unknown) */
    double *simwait;  /* per window: wait over (-1 unknown) */
    double *gmax;     /* per window: last end among its gates so far */
    int *busy;        /* per lane: running task or -1 */
    double *rate;     /* per compute lane: speed of its running task (1: a whole core) */
    int *lnext;       /* recorded policy: next rorder per lane */
    int nlane;
    double *bl;       /* cp policy: bottom level */
    int *ready;       /* ready compute tasks */
    int nready;
    double cls_busy[C_N];
};

struct sim {
    const struct trace *tr;
    struct simopt o;
    int N, nwork;
    int cpu;          /* compute tasks last their recorded CPU time (else: wall time) */
    int Nm;           /* ranks the collectives and partitions are sized for */
    int rpn;          /* simulated ranks per node */
    double N0;        /* ranks recorded */
    struct srank *rk;
    int ncoll;
    int *cjoin;       /* per collective: ranks joined */
    double *cstart;   /* per collective: last join */
    double *cdur;     /* per collective: transfer time */
    double now;
    double *pred;     /* per rank x window: predicted window length */
};

static double ring_factor(const char *kind, int n) {
    if (n <= 1) return 0;
    double f = (double)(n - 1) / n;
    return !strcmp(kind, "comm_allreduce") ? 2 * f : f;
}

/* transfer time of each collective: the recorded one (from the last rank's join to the first
 * rank's end) scaled to N ranks and the link, or the alpha-beta model */
static void coll_times(struct sim *S) {
    const struct trace *tr = S->tr;
    int n0 = tr->nranks; /* the ranks whose records there are */
    int N = S->Nm;
    S->ncoll = tr->r[0].ncoll;
    S->cdur = xcalloc((size_t)S->ncoll, sizeof *S->cdur);
    S->cjoin = xcalloc((size_t)S->ncoll, sizeof *S->cjoin);
    S->cstart = xcalloc((size_t)S->ncoll, sizeof *S->cstart);
    double **by = xcalloc((size_t)n0, sizeof *by); /* per rank, collective k -> task */
    for (int r = 0; r < n0; r++) {
        by[r] = xcalloc((size_t)S->ncoll, sizeof **by);
        for (int i = 0; i < tr->r[r].n; i++)
            if (tr->r[r].t[i].coll >= 0) by[r][tr->r[r].t[i].coll] = (double)i;
    }
    for (int k = 0; k < S->ncoll; k++) {
        const struct task *t0 = &tr->r[0].t[(int)by[0][k]];
        double join = 0, fin = DBL_MAX;
        for (int r = 0; r < n0; r++) {
            const struct task *t = &tr->r[r].t[(int)by[r][k]];
            if (t->start > join) join = t->start;
            if (t->end < fin) fin = t->end;
        }
        double rec = fin - join > 0 ? fin - join : 0;
        double d;
        if (S->o.alpha_us > 0 || S->N0 < 2) {
            double bytes = (double)(t0->br > t0->bw ? t0->br : t0->bw);
            double steps = !strcmp(t0->kind, "comm_allreduce") ? 2.0 * (N - 1) : N - 1;
            double a = S->o.alpha_us > 0 ? S->o.alpha_us : 10;
            double bw = S->o.bw_gbs > 0 ? S->o.bw_gbs : 12.5;
            d = N > 1 ? steps * a + ring_factor(t0->kind, N) * bytes / (bw * 1e3) : 0;
        } else {
            d = rec * ring_factor(t0->kind, N) / ring_factor(t0->kind, (int)S->N0);
        }
        S->cdur[k] = S->o.no_comm ? 0 : d / S->o.link;
    }
    for (int r = 0; r < n0; r++) free(by[r]);
    free(by);
}

static int cmp_sub_(const struct rank *R, int a, int b) {
    const struct task *x = &R->t[a], *y = &R->t[b];
    if (x->submit != y->submit) return x->submit < y->submit ? -1 : 1;
    return a - b;
}

static void sort_sub(const struct rank *R, int *v, int n) { /* insertion: nearly sorted */
    for (int i = 1; i < n; i++) {
        int x = v[i], j = i;
        while (j > 0 && cmp_sub_(R, v[j - 1], x) > 0) {
            v[j] = v[j - 1];
            j--;
        }
        v[j] = x;
    }
}

static int stage_of(const struct trace *tr) { return (int)meta_num(tr, "stage", 0); }

/* a task's work at the speed of a whole core: with CPU durations, a compute task's recorded CPU
 * time (what it cost without the time its thread waited for a core, whoever held it) */
static double task_work(const struct sim *S, const struct task *t) {
    return S->cpu && t->cpu >= 0 ? t->cpu : t->work;
}

/* how long task t runs in the simulation, at full speed */
static double sim_work(const struct sim *S, const struct task *t) {
    double w = task_work(S, t) + (S->cpu ? t->lat_cpu : t->lat);
    int part = stage_of(S->tr) >= 1 && S->Nm != S->N0;
    if (part && (!strcmp(t->kind, "adamw") || t->cls == C_SWAP || t->cls == C_CKPT))
        w *= S->N0 / S->Nm; /* ZeRO partitions: 1/N of the state per rank */
    if (t->cls == C_SWAP || t->cls == C_CKPT) return w / S->o.disk;
    if (t->cls == C_COMPUTE) return w / S->o.compute;
    return w;
}

static void release_ready(struct sim *S, struct srank *K, int i) {
    struct stask *s = &K->s[i];
    if (s->st != 1 || s->ndep_left > 0) return;
    s->st = 2;
    s->ready = S->now;
    const struct task *t = &K->R->t[i];
    if (t->worker < IO_WORKER && S->o.pol != POL_RECORDED) K->ready[K->nready++] = i;
}

static void window_check(struct sim *S, struct srank *K, int w);

static void complete(struct sim *S, struct srank *K, int i) {
    struct stask *s = &K->s[i];
    const struct task *t = &K->R->t[i];
    s->st = 4;
    s->endt = S->now;
    K->busy[s->worker] = -1;
    for (int k = 0; k < t->nsucc; k++) {
        struct stask *u = &K->s[t->succ[k]];
        if (--u->ndep_left == 0) release_ready(S, K, t->succ[k]);
    }
    int g = t->gate;
    if (S->now > K->gmax[g]) K->gmax[g] = S->now;
    K->gleft[g]--;
    window_check(S, K, g);
}

/* window w's wait is over when its gates are done and its host has submitted its pre-wait
 * tasks; then the post-wait tasks and the next window get their release times */
static void window_check(struct sim *S, struct srank *K, int w) {
    const struct trace *tr = S->tr;
    int W = tr->nwin;
    if (K->simwait[w] >= 0 || K->H[w] < 0 || K->gleft[w] > 0) return;
    double lp = tr->lastpre[(size_t)K->rec * W + w], ge = tr->gate_end[(size_t)K->rec * W + w];
    double t = K->H[w] + (lp - tr->ws[w]);
    if (K->gmax[w] > t) t = K->gmax[w];
    K->simwait[w] = t;
    if (w + 1 < W) {
        K->H[w + 1] = t + (tr->ws[w + 1] - ge > 0 ? tr->ws[w + 1] - ge : 0);
        window_check(S, K, w + 1);
    }
}

static double release_time(const struct sim *S, const struct srank *K, const struct task *t) {
    const struct trace *tr = S->tr;
    int w = t->win;
    if (!t->post) {
        if (K->H[w] < 0) return -1;
        double off = t->submit - tr->ws[w];
        return K->H[w] + (off > 0 ? off : 0);
    }
    if (K->simwait[w] < 0) return -1;
    return K->simwait[w] + (t->submit - tr->gate_end[(size_t)K->rec * tr->nwin + w]);
}

static void start_task(struct sim *S, struct srank *K, int i, int lane) {
    struct stask *s = &K->s[i];
    const struct task *t = &K->R->t[i];
    s->st = 3;
    s->worker = lane;
    K->busy[lane] = i;
    s->rem = sim_work(S, t);
    s->endt = DBL_MAX;
    if (t->worker >= IO_WORKER) s->endt = S->now + s->rem;
    if (t->coll >= 0) {
        int k = t->coll;
        if (S->now > S->cstart[k]) S->cstart[k] = S->now;
        if (++S->cjoin[k] == S->N) { /* the last rank joined: everyone ends together */
            double e = S->cstart[k] + S->cdur[k];
            for (int r = 0; r < S->N; r++) {
                struct srank *Q = &S->rk[r];
                for (int l = 0; l < Q->nlane; l++) {
                    int j = Q->busy[l];
                    if (j >= 0 && Q->R->t[j].coll == k) Q->s[j].endt = e;
                }
            }
        }
    }
}

static int better(const struct sim *S, const struct srank *K, int a, int b) {
    const struct task *x = &K->R->t[a], *y = &K->R->t[b];
    if (S->o.pol == POL_PRIO && x->prio != y->prio) return x->prio > y->prio;
    if (S->o.pol == POL_CP && K->bl[a] != K->bl[b]) return K->bl[a] > K->bl[b];
    if (K->s[a].ready != K->s[b].ready) return K->s[a].ready < K->s[b].ready;
    return a < b;
}

static void dispatch(struct sim *S, struct srank *K) {
    const struct rank *R = K->R;
    /* I/O threads (and every lane under the recorded policy): recorded order per thread */
    for (int i = 0; i < R->n; i++) {
        const struct task *t = &R->t[i];
        if (K->s[i].st != 2) continue;
        if (t->worker < IO_WORKER && S->o.pol != POL_RECORDED) continue;
        int lane = t->worker >= IO_WORKER ? S->nwork + t->worker - IO_WORKER : t->worker;
        if (K->busy[lane] < 0 && K->lnext[lane] == t->rorder) {
            K->lnext[lane]++;
            start_task(S, K, i, lane);
        }
    }
    if (S->o.pol == POL_RECORDED) return;
    for (int lane = 0; lane < S->nwork && K->nready > 0; lane++) {
        if (K->busy[lane] >= 0) continue;
        int b = 0;
        for (int j = 1; j < K->nready; j++)
            if (better(S, K, K->ready[j], K->ready[b])) b = j;
        int i = K->ready[b];
        K->ready[b] = K->ready[--K->nready];
        start_task(S, K, i, lane);
    }
}

/* the core (node-major index) compute worker l of simulated rank r runs on */
static int slot_of(const struct sim *S, int r, int l, int ncore) {
    int node = r / S->rpn, k = (r % S->rpn) * S->nwork + l;
    return node * ncore + k % ncore;
}

static int simulate(const struct trace *tr, const struct simopt *o, struct sim *S) {
    memset(S, 0, sizeof *S);
    S->tr = tr;
    S->o = *o;
    S->N = o->ranks > 0 ? o->ranks : tr->nranks;
    S->Nm = o->model_ranks > 0 ? o->model_ranks : S->N;
    S->N0 = meta_num(tr, "world", tr->nranks);
    int maxw = 0;
    for (int r = 0; r < tr->nranks; r++)
        if (tr->r[r].nwork > maxw) maxw = tr->r[r].nwork;
    S->nwork = o->workers > 0 ? o->workers : maxw;
    if (o->pol == POL_RECORDED && S->nwork != maxw)
        return FAIL("--policy recorded replays the recorded %d worker(s); with --workers %d "
                    "choose eager, prio or cp", maxw, S->nwork);
    int W = tr->nwin;
    double cores = o->cores > 0 ? o->cores : meta_num(tr, "cores", 0);
    /* auto: wall times replay the recording itself (slowdowns by other processes included);
     * another layout of workers, ranks or cores is predicted from CPU times, for a machine
     * whose cores serve this run alone */
    int other = S->nwork != maxw || S->N != tr->nranks || o->shared ||
                (o->cores > 0 && o->cores != meta_num(tr, "cores", 0));
    S->cpu = tr->has_cpu && (o->durs == D_CPU || (o->durs == D_AUTO && other));
    int rpn = o->rpn;
    if (rpn <= 0) {
        int rec = (int)meta_num(tr, "ranks_per_node", tr->nranks);
        rpn = rec >= tr->nranks ? S->N : rec; /* one machine stays one machine */
    }
    coll_times(S);
    S->rk = xcalloc((size_t)S->N, sizeof *S->rk);
    S->pred = xcalloc((size_t)S->N * (size_t)W, sizeof *S->pred);
    int nio = 0;
    for (int r = 0; r < tr->nranks; r++)
        if (tr->r[r].nio > nio) nio = tr->r[r].nio;
    for (int r = 0; r < S->N; r++) {
        struct srank *K = &S->rk[r];
        K->rec = r % tr->nranks;
        K->R = &tr->r[K->rec];
        K->node = r / rpn;
        const struct rank *R = K->R;
        K->s = xcalloc((size_t)R->n, sizeof *K->s);
        K->subord = xcalloc((size_t)R->n, sizeof *K->subord);
        for (int i = 0; i < R->n; i++) K->subord[i] = i;
        sort_sub(R, K->subord, R->n);
        K->gleft = xcalloc((size_t)W, sizeof *K->gleft);
        K->H = xcalloc((size_t)W, sizeof *K->H);
        K->simwait = xcalloc((size_t)W, sizeof *K->simwait);
        K->gmax = xcalloc((size_t)W, sizeof *K->gmax);
        for (int w = 0; w < W; w++) K->H[w] = K->simwait[w] = K->gmax[w] = -1;
        K->H[0] = tr->ws[0];
        K->nlane = S->nwork + nio;
        K->busy = xcalloc((size_t)K->nlane, sizeof *K->busy);
        K->rate = xcalloc((size_t)K->nlane, sizeof *K->rate);
        K->lnext = xcalloc((size_t)K->nlane, sizeof *K->lnext);
        for (int l = 0; l < K->nlane; l++) K->busy[l] = -1;
        K->ready = xcalloc((size_t)R->n, sizeof *K->ready);
        K->bl = xcalloc((size_t)R->n, sizeof *K->bl);
        for (int i = R->n - 1; i >= 0; i--) { /* bottom levels: successors have larger ids */
            double m = 0;
            for (int k = 0; k < R->t[i].nsucc; k++)
                if (K->bl[R->t[i].succ[k]] > m) m = K->bl[R->t[i].succ[k]];
            K->bl[i] = m + task_work(S, &R->t[i]);
        }
        for (int i = 0; i < R->n; i++) {
            K->s[i].ndep_left = R->t[i].ndep;
            K->gleft[R->t[i].gate]++;
        }
    }
    S->now = tr->ws[0];
    for (int r = 0; r < S->N; r++) window_check(S, &S->rk[r], 0);
    int nnodes = (S->N + rpn - 1) / rpn;
    /* a node's compute workers on its cores, round robin (no cores known: one each) */
    int ncore = cores >= 1 ? (int)cores : rpn * S->nwork;
    S->rpn = rpn;
    int nslot = nnodes * ncore;
    int *run = xcalloc((size_t)nslot, sizeof *run);
    int64_t left = 0;
    for (int r = 0; r < S->N; r++) left += S->rk[r].R->n;
    int64_t guard = 0;
    while (left > 0) {
        /* releases due now */
        for (int r = 0; r < S->N; r++) {
            struct srank *K = &S->rk[r];
            while (K->cursor < K->R->n) {
                int i = K->subord[K->cursor];
                double rt = release_time(S, K, &K->R->t[i]);
                if (rt < 0 || rt > S->now) break;
                K->s[i].st = 1;
                K->s[i].release = rt;
                K->cursor++;
                release_ready(S, K, i);
            }
        }
        for (int r = 0; r < S->N; r++) dispatch(S, &S->rk[r]);
        /* rates: compute tasks share their node's cores (a collective's wait sleeps) */
        memset(run, 0, (size_t)nslot * sizeof *run);
        for (int r = 0; r < S->N; r++)
            for (int l = 0; l < S->nwork; l++) {
                int i = S->rk[r].busy[l];
                if (i >= 0 && S->rk[r].R->t[i].cls == C_COMPUTE) run[slot_of(S, r, l, ncore)]++;
            }
        for (int r = 0; r < S->N; r++)
            for (int l = 0; l < S->nwork; l++) {
                int c = slot_of(S, r, l, ncore);
                S->rk[r].rate[l] = run[c] > 1 ? 1.0 / run[c] : 1.0;
                if (S->o.shared) {
                    int n = S->rk[r].node, tot = 0;
                    for (int k = 0; k < ncore; k++) tot += run[n * ncore + k];
                    S->rk[r].rate[l] = cores > 0 && tot > cores ? cores / tot : 1.0;
                }
            }
        /* the next event */
        double next = DBL_MAX;
        for (int r = 0; r < S->N; r++) {
            struct srank *K = &S->rk[r];
            if (K->cursor < K->R->n) {
                double rt = release_time(S, K, &K->R->t[K->subord[K->cursor]]);
                if (rt >= 0 && rt < next) next = rt;
            }
            for (int l = 0; l < K->nlane; l++) {
                int i = K->busy[l];
                if (i < 0) continue;
                const struct task *t = &K->R->t[i];
                double e = (t->cls == C_COMPUTE) ? S->now + K->s[i].rem / K->rate[l]
                                                 : K->s[i].endt;
                if (e < next) next = e;
            }
        }
        if (next == DBL_MAX || ++guard > 100000000) {
            free(run);
            return FAIL("trace %s: the replay cannot go on (%lld tasks never run): the trace "
                        "is incomplete or its collectives do not match across ranks", tr->path,
                        (long long)left);
        }
        if (next < S->now) next = S->now;
        double dt = next - S->now;
        for (int r = 0; r < S->N; r++) {
            struct srank *K = &S->rk[r];
            for (int l = 0; l < K->nlane; l++) {
                int i = K->busy[l];
                if (i < 0) continue;
                const struct task *t = &K->R->t[i];
                K->cls_busy[t->cls] += dt;
                if (t->cls == C_COMPUTE) K->s[i].rem -= dt * K->rate[l];
            }
        }
        S->now = next;
        for (int r = 0; r < S->N; r++) {
            struct srank *K = &S->rk[r];
            for (int l = 0; l < K->nlane; l++) {
                int i = K->busy[l];
                if (i < 0) continue;
                const struct task *t = &K->R->t[i];
                int done = t->cls == C_COMPUTE ? K->s[i].rem <= 1e-9 * (1 + t->work)
                                               : K->s[i].endt <= S->now;
                if (done) {
                    complete(S, K, i);
                    left--;
                }
            }
        }
    }
    free(run);
    for (int r = 0; r < S->N; r++) {
        struct srank *K = &S->rk[r];
        for (int w = 0; w < W; w++)
            S->pred[(size_t)r * W + w] = (w + 1 < W ? K->H[w + 1] : K->simwait[w]) - K->H[w];
    }
    return 0;
}

static void sim_free(struct sim *S) {
    for (int r = 0; S->rk && r < S->N; r++) {
        struct srank *K = &S->rk[r];
        free(K->s);
        free(K->subord);
        free(K->gleft);
        free(K->H);
        free(K->simwait);
        free(K->gmax);
        free(K->busy);
        free(K->rate);
        free(K->lnext);
        free(K->ready);
        free(K->bl);
    }
    free(S->rk);
    free(S->cdur);
    free(S->cjoin);
    free(S->cstart);
    free(S->pred);
}

/* mean over the windows after the first (the first warms up) when there are several */
static double mean_steps(const double *v, int W, int stride) {
    int w0 = W > 1 ? 1 : 0;
    double s = 0;
    for (int w = w0; w < W; w++) s += v[(size_t)w * stride];
    return s / (W - w0);
}

static int cmd_replay(const struct trace *tr, const struct simopt *o, int json) {
    struct sim S;
    if (simulate(tr, o, &S) != 0) {
        sim_free(&S);
        return -1;
    }
    int W = tr->nwin;
    double *rec = xcalloc((size_t)W, sizeof *rec);
    for (int w = 0; w < W; w++) rec[w] = win_end(tr, 0, w) - tr->ws[w];
    double mp = mean_steps(S.pred, W, 1), mr = mean_steps(rec, W, 1);
    if (json) {
        printf("{\"trace\": \"%s\", \"policy\": \"%s\", \"workers\": %d, \"ranks\": %d, "
               "\"recorded_ranks\": %d, \"durations\": \"%s\", \"predicted_ms\": %.4f, "
               "\"recorded_ms\": %.4f, \"steps\": [", tr->path, g_pol_name[o->pol], S.nwork,
               S.N, tr->nranks, S.cpu ? "cpu" : "wall", mp / 1e3, mr / 1e3);
        for (int w = 0; w < W; w++)
            printf("%s{\"step\": %lld, \"predicted_ms\": %.4f, \"recorded_ms\": %.4f}",
                   w ? ", " : "", (long long)tr->wstep[w], S.pred[w] / 1e3, rec[w] / 1e3);
        printf("], \"busy_ms_per_step\": {");
        for (int c = 0; c < C_N; c++)
            printf("%s\"%s\": %.4f", c ? ", " : "", g_cls_name[c], S.rk[0].cls_busy[c] / W / 1e3);
        printf("}}\n");
    } else {
        printf("replay of %s: %d rank(s) (recorded %d) x %d worker(s), policy %s, %s "
               "durations\n", tr->path, S.N, tr->nranks, S.nwork, g_pol_name[o->pol],
               S.cpu ? "CPU-time" : "wall-time");
        printf("%6s %14s %13s\n", "step", "predicted ms", "recorded ms");
        for (int w = 0; w < W; w++)
            printf("%6lld %14.2f %13.2f\n", (long long)tr->wstep[w], S.pred[w] / 1e3,
                   rec[w] / 1e3);
        printf("step time: predicted %.2f ms, recorded %.2f ms (%+.1f%%; mean of steps %s)\n",
               mp / 1e3, mr / 1e3, mr > 0 ? 100 * (mp - mr) / mr : 0,
               W > 1 ? "after the first" : "");
        printf("busy per step, rank 0 (all its workers):");
        for (int c = 0; c < C_N; c++)
            printf("%s %s %.2f ms", c ? "," : "", g_cls_name[c], S.rk[0].cls_busy[c] / W / 1e3);
        printf("\n");
    }
    free(rec);
    sim_free(&S);
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * project: scale-out */
static int cmd_project(struct trace *trs, int ntr, const int *ranks, int nranks, double alpha,
                       double bw, const char *plot, int json) {
    FILE *dat = NULL;
    char datp[4200] = "";
    if (plot) {
        snprintf(datp, sizeof datp, "%s.dat", plot);
        if (!(dat = fopen(datp, "w")))
            return FAIL("plot data %s: cannot create (%s)", datp, strerror(errno));
    }
    if (json) printf("{\"alpha_us\": %g, \"bw_gbs\": %g, \"rows\": [", alpha, bw);
    else
        printf("scale-out projection: one rank per node, ring collectives alpha %.1f us, %.2f "
               "GB/s per link\n%5s %6s %11s %11s %14s %12s %16s\n", alpha, bw, "stage", "ranks",
               "step ms", "comm share", "comm MiB/step", "tokens/s", "memory/rank MiB");
    int first = 1;
    for (int k = 0; k < ntr; k++) {
        struct trace *tr = &trs[k];
        int stage = stage_of(tr);
        double P = meta_num(tr, "params", 0), n0 = tr->nranks;
        double mp = meta_num(tr, "mem_params", 4 * P), mg = meta_num(tr, "mem_grads", 4 * P);
        double ma = meta_num(tr, "mem_acts", 0);
        double pw = stage >= 3 ? mp - 4 * P / n0 : 0, gw = stage >= 2 ? mg - 4 * P / n0 : 0;
        if (pw < 0) pw = 0;
        if (gw < 0) gw = 0;
        double tok = meta_num(tr, "micro_batch", 0) * meta_num(tr, "grad_accum", 1) *
                     meta_num(tr, "seq_len", 0);
        for (int j = 0; j < nranks; j++) {
            int N = ranks[j];
            /* ranks are symmetric: one simulated rank, one per node, whose collectives and
             * partitions are those of N ranks */
            struct simopt o = {.pol = POL_EAGER, .ranks = 1, .model_ranks = N, .rpn = 1,
                               .link = 1, .disk = 1, .compute = 1, .alpha_us = alpha,
                               .bw_gbs = bw};
            struct trace one = *tr;
            one.nranks = 1;
            struct sim S, Z;
            int rc = simulate(&one, &o, &S);
            o.no_comm = 1;
            if (!rc) rc = simulate(&one, &o, &Z);
            else memset(&Z, 0, sizeof Z);
            if (rc) {
                sim_free(&S);
                sim_free(&Z);
                if (dat) fclose(dat);
                return -1;
            }
            int W = tr->nwin;
            double t = mean_steps(S.pred, W, 1), tz = mean_steps(Z.pred, W, 1);
            double vol = 0;
            for (int i = 0; i < tr->r[0].n; i++) {
                const struct task *x = &tr->r[0].t[i];
                if (x->cls == C_COMM && x->win == (W > 1 ? 1 : 0))
                    vol += ring_factor(x->kind, N) * (double)(x->br > x->bw ? x->br : x->bw);
            }
            double mem = (stage >= 3 ? 4 * P / N + pw : 4 * P) + (stage >= 2 ? 4 * P / N + gw : 4 * P) +
                         (stage >= 1 ? 8 * P / N : 8 * P) + ma;
            double share = t > 0 ? (t - tz) / t : 0;
            if (json)
                printf("%s\n {\"stage\": %d, \"ranks\": %d, \"step_ms\": %.4f, \"comm_share\": "
                       "%.4f, \"comm_mib\": %.4f, \"tokens_per_s\": %.1f, \"memory_mib\": %.3f}",
                       first ? "" : ",", stage, N, t / 1e3, share, vol / 1048576.0,
                       t > 0 ? tok * N / (t / 1e6) : 0, mem / 1048576.0);
            else
                printf("%5d %6d %11.2f %10.1f%% %14.2f %12.0f %16.1f\n", stage, N, t / 1e3,
                       100 * share, vol / 1048576.0, t > 0 ? tok * N / (t / 1e6) : 0,
                       mem / 1048576.0);
            if (dat)
                fprintf(dat, "%d %d %.6f %.6f %.6f\n", stage, N, t / 1e3, 100 * share,
                        mem / 1048576.0);
            first = 0;
            sim_free(&S);
            sim_free(&Z);
        }
        if (dat) fprintf(dat, "\n\n");
    }
    if (json) printf("]}\n");
    if (!dat) return 0;
    if (fclose(dat) != 0) return FAIL("plot data %s: write failed", datp);
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * plot: gnuplot */
static int run_gnuplot(const char *gp) {
    char cmd[4400];
    snprintf(cmd, sizeof cmd, "gnuplot '%s' 2>&1", gp);
    FILE *p = popen(cmd, "r");
    if (!p) return FAIL("gnuplot: cannot start (%s)", strerror(errno));
    char out[512] = "", line[512];
    while (fgets(line, sizeof line, p))
        if (!out[0] && (strstr(line, "rror") || strstr(line, "not found")))
            snprintf(out, sizeof out, "%s", line);
    int st = pclose(p);
    if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) == 127)
        return FAIL("gnuplot not found (install gnuplot-nox: scripts/setup-deps.sh)");
    if (WEXITSTATUS(st) != 0 || out[0]) {
        char *nl = strchr(out, '\n');
        if (nl) *nl = 0;
        return FAIL("gnuplot failed on %s: %s", gp, out[0] ? out : "non-zero exit");
    }
    return 0;
}

/* boxes x0 x1 y0 y1, one data block per class, each plotted in its colour when not empty */
static int plot_boxes(const char *prefix, const char *name, const char *setup, int ncls,
                      const char *const *cname, const char *const *rgb,
                      int (*emit)(const struct trace *, FILE *, int, int, void *),
                      const struct trace *tr, int arg, void *ctx) {
    char dat[4200], gp[4200], png[4200];
    snprintf(dat, sizeof dat, "%s-%s.dat", prefix, name);
    snprintf(gp, sizeof gp, "%s-%s.gp", prefix, name);
    snprintf(png, sizeof png, "%s-%s.png", prefix, name);
    FILE *d = fopen(dat, "w"), *g = d ? fopen(gp, "w") : NULL;
    if (!d || !g) {
        if (d) fclose(d);
        return FAIL("%s: cannot create (%s)", d ? gp : dat, strerror(errno));
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
    if (bad) return FAIL("%s: write failed", dat);
    int rc = run_gnuplot(gp);
    if (!rc) {
        unlink(dat);
        unlink(gp);
        printf("wrote %s\n", png);
    }
    return rc;
}

static int emit_timeline(const struct trace *tr, FILE *d, int c, int w, void *ctx) {
    (void)ctx;
    int n = 0, y = 0;
    for (int r = 0; r < tr->nranks; r++) {
        const struct rank *R = &tr->r[r];
        for (int i = 0; i < R->n; i++) {
            const struct task *t = &R->t[i];
            if (t->pcls != c || t->end <= tr->ws[w] || t->start >= win_end(tr, r, w)) continue;
            int lane = t->worker >= IO_WORKER ? R->nwork + t->worker - IO_WORKER : t->worker;
            double x0 = (t->start - tr->ws[w]) / 1e3, x1 = (t->end - tr->ws[w]) / 1e3;
            if (x1 - x0 < 0.002) x1 = x0 + 0.002; /* visible */
            fprintf(d, "%.4f %.4f %.2f %.2f\n", x0, x1, y + lane + 0.1, y + lane + 0.9);
            n++;
        }
        y += R->nwork + R->nio;
    }
    return n;
}

/* per rank: [compute, comm, idle] per compute worker, then [swap, ckpt] on the I/O threads,
 * ms per step */
static int emit_breakdown(const struct trace *tr, FILE *d, int c, int unused, void *ctx) {
    (void)unused;
    const double *v = ctx; /* nranks x 5 */
    int n = 0;
    for (int r = 0; r < tr->nranks; r++) {
        const double *x = &v[r * 5];
        n += x[c] > 0;
        double y0 = 0;
        if (c < 3) {
            for (int k = 0; k < c; k++) y0 += x[k];
            fprintf(d, "%.3f %.3f %.4f %.4f\n", r - 0.38, r - 0.02, y0, y0 + x[c]);
        } else {
            for (int k = 3; k < c; k++) y0 += x[k];
            fprintf(d, "%.3f %.3f %.4f %.4f\n", r + 0.02, r + 0.38, y0, y0 + x[c]);
        }
    }
    return n; /* a class no rank has stays out of the key */
}

static int cmd_plot(const struct trace *tr, const char *prefix, long long step) {
    int w = tr->nwin > 1 ? 1 : 0;
    if (step >= 0) {
        for (w = 0; w < tr->nwin && tr->wstep[w] != step; w++) continue;
        if (w == tr->nwin)
            return FAIL("--step %lld: not in the trace (steps %lld..%lld)", step,
                        (long long)tr->wstep[0], (long long)tr->wstep[tr->nwin - 1]);
    }
    /* lane labels */
    char *setup = xcalloc(1, 65536);
    int at = snprintf(setup, 65536, "set title 'zerotask trace %s: step %lld, a lane per worker "
                      "(ZeRO stage %s, %s)' noenhanced\nset xlabel 'ms since the step began'\n"
                      "set key outside right top\nset grid xtics\nset ytics (",
                      tr->path, (long long)tr->wstep[w], meta(tr, "stage", "?"),
                      meta(tr, "sched", "?"));
    int y = 0;
    for (int r = 0; r < tr->nranks; r++) {
        const struct rank *R = &tr->r[r];
        for (int l = 0; l < R->nwork + R->nio && at < 60000; l++, y++)
            at += snprintf(setup + at, 65536 - (size_t)at, "%s'rank %d %s %d' %.1f",
                           y ? ", " : "", r, l < R->nwork ? "CPU" : "I/O",
                           l < R->nwork ? l : l - R->nwork, y + 0.5);
    }
    snprintf(setup + at, 65536 - (size_t)at, ")\nset yrange [%d:-0.2]\nset xrange [0:*]\n",
             y);
    int rc = plot_boxes(prefix, "timeline", setup, P_N, g_pcls_name, g_pcls_rgb, emit_timeline,
                        tr, w, NULL);
    free(setup);
    if (rc) return rc;
    double *v = xcalloc((size_t)tr->nranks * 5, sizeof *v);
    for (int r = 0; r < tr->nranks; r++) {
        int nw = tr->r[r].nwork ? tr->r[r].nwork : 1;
        for (int k = 0; k < tr->nwin; k++) {
            struct stepsum s;
            step_summary(tr, r, k, &s);
            v[r * 5 + 0] += s.busy[C_COMPUTE] / nw / 1e3 / tr->nwin;
            v[r * 5 + 1] += s.busy[C_COMM] / nw / 1e3 / tr->nwin;
            v[r * 5 + 2] += s.idle_sum / nw / 1e3 / tr->nwin;
            v[r * 5 + 3] += s.busy[C_SWAP] / 1e3 / tr->nwin;
            v[r * 5 + 4] += s.busy[C_CKPT] / 1e3 / tr->nwin;
        }
    }
    static const char *const bname[5] = {"compute", "communication", "idle",
                                         "swap (I/O threads)", "checkpoint (I/O threads)"};
    static const char *const brgb[5] = {"#4e79a7", "#e15759", "#d0d0d0", "#b07aa1", "#9c755f"};
    char bsetup[4096];
    at = snprintf(bsetup, sizeof bsetup, "set title 'zerotask trace %s: where a step goes, per "
                  "rank (mean of %d steps; left bar: per compute worker, right bar: I/O "
                  "threads)' noenhanced\nset ylabel 'ms per step'\nset key outside right top\n"
                  "set grid ytics\nset xrange [-0.6:%d.6]\nset yrange [0:*]\nset xtics (",
                  tr->path, tr->nwin, tr->nranks - 1);
    for (int r = 0; r < tr->nranks && at < 4000; r++)
        at += snprintf(bsetup + at, sizeof bsetup - (size_t)at, "%s'rank %d' %d", r ? ", " : "",
                       r, r);
    snprintf(bsetup + at, sizeof bsetup - (size_t)at, ")\n");
    rc = plot_boxes(prefix, "breakdown", bsetup, 5, bname, brgb, emit_breakdown, tr, 0, v);
    free(v);
    return rc;
}

static int project_plot(const char *png, const struct trace *trs, int ntr) {
    char gp[4200];
    snprintf(gp, sizeof gp, "%s.gp", png);
    FILE *g = fopen(gp, "w");
    if (!g) return FAIL("%s: cannot create (%s)", gp, strerror(errno));
    fprintf(g, "set terminal pngcairo size 1400,600 font 'sans,11'\nset output '%s'\n"
               "set multiplot layout 1,2 title 'zerotask scale-out projection (alpha-beta ring "
               "collectives, one rank per node)'\nset logscale x 2\nset xlabel 'ranks'\n"
               "set grid\nset key top left\n", png);
    for (int panel = 0; panel < 2; panel++) {
        fprintf(g, panel ? "set ylabel 'memory per rank, MiB'\nset logscale y\nplot"
                         : "set ylabel 'step time, ms'\nplot");
        for (int k = 0; k < ntr; k++) /* a data block per trace, titled by its stage */
            fprintf(g, "%s '%s.dat' index %d using 2:%d with linespoints lw 2 title 'stage %d'",
                    k ? "," : "", png, k, panel ? 5 : 3, stage_of(&trs[k]));
        fprintf(g, "\n");
    }
    fprintf(g, "unset multiplot\n");
    if (fclose(g) != 0) return FAIL("%s: write failed", gp);
    int rc = run_gnuplot(gp);
    if (!rc) {
        char dat[4200];
        snprintf(dat, sizeof dat, "%s.dat", png);
        unlink(dat);
        unlink(gp);
        printf("wrote %s\n", png);
    }
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * command line */
static int num(const char *opt, const char *v, double lo, double hi, double *out) {
    char *e;
    errno = 0;
    double x = v ? strtod(v, &e) : 0;
    if (!v || e == v || *e || errno || !(x >= lo && x <= hi)) {
        char m[200];
        snprintf(m, sizeof m, "%s %%s: expected a number from %g to %g", opt, lo, hi);
        return usage(m, v ? v : "(missing)");
    }
    *out = x;
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        fputs(usage_text, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("zt-trace %s\n", ZEROTASK_VERSION);
        return 0;
    }
    const char *cmd = argv[1];
    int is_sum = !strcmp(cmd, "summary"), is_rep = !strcmp(cmd, "replay"),
        is_plot = !strcmp(cmd, "plot"), is_proj = !strcmp(cmd, "project");
    if (!is_sum && !is_rep && !is_plot && !is_proj) return usage("unknown command %s", cmd);
    const char *files[16];
    int nf = 0, json = 0, pol_set = 0;
    const char *out = NULL, *plot = NULL;
    long long step = -1;
    struct simopt o = {.pol = POL_RECORDED, .link = 1, .disk = 1, .compute = 1};
    int ranks[32], nr = 0;
    double alpha = 10, bw = 12.5;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        double x;
        if (a[0] != '-') {
            if (nf == 16) return usage("too many trace files (16 at most): %s", a);
            files[nf++] = a;
            continue;
        }
        int takes = 1;
        if (!strcmp(a, "--json")) json = 1, takes = 0;
        else if (is_rep && !strcmp(a, "--workers")) {
            if (num(a, v, 1, 4096, &x)) return 2;
            o.workers = (int)x;
        } else if (is_rep && !strcmp(a, "--policy")) {
            int k = 0;
            while (k < 4 && (!v || strcmp(v, g_pol_name[k]))) k++;
            if (k == 4) return usage("--policy %s: expected recorded, eager, prio or cp",
                                     v ? v : "(missing)");
            o.pol = (enum policy)k;
            pol_set = 1;
        } else if (is_rep && !strcmp(a, "--ranks")) {
            if (num(a, v, 1, 4096, &x)) return 2;
            o.ranks = (int)x;
        } else if (is_rep && !strcmp(a, "--cores")) {
            if (num(a, v, 1, 1e6, &o.cores)) return 2;
        } else if (is_rep && !strcmp(a, "--link-bw")) {
            if (num(a, v, 1e-3, 1e6, &o.link)) return 2;
        } else if (is_rep && !strcmp(a, "--disk-bw")) {
            if (num(a, v, 1e-3, 1e6, &o.disk)) return 2;
        } else if (is_rep && !strcmp(a, "--shared-cores")) {
            o.shared = 1;
            takes = 0;
        } else if (is_rep && !strcmp(a, "--durations")) {
            int k = 0;
            while (k < 3 && (!v || strcmp(v, g_durs_name[k]))) k++;
            if (k == 3) return usage("--durations %s: expected auto, wall or cpu",
                                     v ? v : "(missing)");
            o.durs = (enum durs)k;
        } else if (is_rep && !strcmp(a, "--compute")) {
            if (num(a, v, 1e-3, 1e6, &o.compute)) return 2;
        } else if ((is_rep || is_proj) && !strcmp(a, "--alpha-us")) {
            if (num(a, v, 0, 1e6, &alpha)) return 2;
            o.alpha_us = alpha > 0 ? alpha : 1e-9;
        } else if ((is_rep || is_proj) && !strcmp(a, "--bw-gbs")) {
            if (num(a, v, 1e-3, 1e6, &bw)) return 2;
            o.bw_gbs = bw;
            if (o.alpha_us <= 0) o.alpha_us = alpha;
        } else if (is_plot && !strcmp(a, "--out")) {
            if (!v) return usage("--out: expected a path prefix%s", "");
            out = v;
        } else if (is_plot && !strcmp(a, "--step")) {
            if (num(a, v, 0, 1e15, &x)) return 2;
            step = (long long)x;
        } else if (is_proj && !strcmp(a, "--plot")) {
            if (!v) return usage("--plot: expected an output .png path%s", "");
            plot = v;
        } else if (is_proj && !strcmp(a, "--ranks")) {
            char *dup = strdup(v ? v : ""), *save = NULL;
            for (char *t = strtok_r(dup, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                if (nr == 32 || num("--ranks", t, 2, 1 << 20, &x)) {
                    free(dup);
                    return nr == 32 ? usage("--ranks: 32 counts at most%s", "") : 2;
                }
                ranks[nr++] = (int)x;
            }
            free(dup);
            if (!nr) return usage("--ranks %s: expected a comma-separated list of counts >= 2",
                                  v ? v : "(missing)");
        } else {
            return usage("unknown option %s for this command", a);
        }
        i += takes;
    }
    if (nf == 0) return usage("%s: expected a trace file (F.ztr, written by zt-train --trace F.json)",
                              cmd);
    if (!is_proj && nf > 1) return usage("%s: one trace file expected", cmd);
    if (is_plot && !out) return usage("plot: --out PREFIX is required%s", "");
    if (is_rep && !pol_set && o.workers > 0) o.pol = POL_EAGER;
    if (is_proj && !nr)
        for (int n = 8; n <= 1024; n *= 2) ranks[nr++] = n;
    struct trace *trs = xcalloc((size_t)nf, sizeof *trs);
    int rc = 0, nl = 0;
    for (; nl < nf && !rc; nl++) {
        rc = load(&trs[nl], files[nl]);
        if (!rc) rc = analyse(&trs[nl]);
    }
    if (!rc) {
        if (is_sum) rc = cmd_summary(&trs[0], json);
        else if (is_rep) rc = cmd_replay(&trs[0], &o, json);
        else if (is_plot) rc = cmd_plot(&trs[0], out, step);
        else {
            rc = cmd_project(trs, nf, ranks, nr, alpha, bw, plot, json);
            if (!rc && plot) rc = project_plot(plot, trs, nf);
        }
    }
    for (int i = 0; i < nl; i++) trace_free(&trs[i]);
    free(trs);
    if (rc) {
        fprintf(stderr, "zt-trace: error: %s\n", g_err);
        return 1;
    }
    if (fflush(stdout) != 0) {
        fprintf(stderr, "zt-trace: error: standard output: write failed\n");
        return 1;
    }
    return 0;
}
