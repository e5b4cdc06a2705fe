/*
 * apps/zt_trace/simulate.c: the discrete-event replay of a trace's task graph, and the
 * `zt-trace replay` command that reports it.
 *
 * Layer: apps/ (zt-trace). project.c runs the same simulation for its scale-out projection.
 * The model (docs/traces.md, "replay"): each task keeps its recorded duration, normalised to the
 * speed of one core (analysis.c; with CPU durations, its worker's CPU time instead), plus the
 * runtime's latency before it, and runs when its dependencies have ended and its rank's host
 * thread has submitted it. The host thread is replayed per step window: it submits a step's
 * tasks at their recorded offsets, waits for the tasks that ended during the window in the
 * recording, and starts the next window after the recorded gap. A collective (the k-th comm_*
 * task of every rank) ends a transfer time after the last rank has joined it. Compute tasks of
 * ranks sharing a node progress at min(1, cores / running) of full speed.
 */
#include <float.h>    /* DBL_MAX */
#include <stdio.h>    /* printf */
#include <stdlib.h>   /* free */
#include <string.h>   /* memset */
#include "zt_trace.h" /* struct trace, struct sim_options */

const char *const policy_names[POL_COUNT] = {"recorded", "eager", "prio", "cp"};
const char *const duration_names[DUR_COUNT] = {"auto", "wall", "cpu"};

enum task_state { WAITING, RELEASED, READY, RUNNING, DONE };

struct sim_task {
    enum task_state st;
    int ndep_left;
    double release, ready, rem, endt; /* rem: work left (compute); endt: end time (others) */
    int lane;                         /* while running */
    int ends;                         /* advance: a compute task that ends at the next event */
};

struct sim_rank {
    const struct rank *R;
    int rec;          /* the recorded rank it replays */
    int node;
    struct sim_task *s;
    int *subord;      /* tasks in submission order */
    int cursor;       /* next unreleased, in subord */
    int *gleft;       /* per window: gate tasks not done */
    double *H;        /* per window: host start (-1 unknown) */
    double *simwait;  /* per window: wait over (-1 unknown) */
    double *gmax;     /* per window: last end among its gates so far */
    int *busy;        /* per lane: running task or -1 */
    double *rate;     /* per compute lane: speed of its running task (1: a whole core) */
    int *lnext;       /* recorded policy: next worker_order per lane */
    int **lorder;     /* per lane: its tasks by worker_order (the lanes dispatch keeps in order) */
    int *lcount;      /* per lane: how many */
    int nlane;
    double *bl;       /* cp policy: bottom level */
    int *ready;       /* ready compute tasks */
    int nready;
    double busy_us[BUCKET_COUNT];
};

struct sim {
    const struct trace *tr;
    struct sim_options o;
    int N, nwork;
    int cpu;          /* compute tasks last their recorded CPU time (else: wall time) */
    int Nm;           /* ranks the collectives and partitions are sized for */
    int rpn;          /* simulated ranks per node */
    double N0;        /* ranks recorded */
    double cores;     /* cores per node (0: unknown) */
    int ncore;        /* core slots per node */
    struct sim_rank *rk;
    int ncoll;
    int *cjoin;       /* per collective: ranks joined */
    double *cstart;   /* per collective: last join */
    double *cdur;     /* per collective: transfer time */
    double now;
    int *run;         /* per core slot of every node: compute tasks running on it */
};

// ----------------------------------------------------------------------------
// collectives

double ring_factor(int kind_id, int n) {
    if (n <= 1) return 0;
    double f = (double)(n - 1) / n;
    return kind_id == ZT_KIND_comm_allreduce ? 2 * f : f;
}

/* collective k's transfer time: the recorded one (from the last rank's join to the first rank's
 * end) scaled to N ranks and the link, or the alpha-beta model */
static double coll_time(const struct sim *S, const struct task *t0, double join, double fin) {
    int N = S->Nm;
    double rec = fin - join > 0 ? fin - join : 0;
    double d;
    if (S->o.alpha_us > 0 || S->N0 < 2) {
        double bytes = (double)(t0->bytes_read > t0->bytes_written ? t0->bytes_read
                                                                    : t0->bytes_written);
        double steps = t0->kind_id == ZT_KIND_comm_allreduce ? 2.0 * (N - 1) : N - 1;
        double a = S->o.alpha_us > 0 ? S->o.alpha_us : 10;
        double bw = S->o.bw_gbs > 0 ? S->o.bw_gbs : 12.5;
        d = N > 1 ? steps * a + ring_factor(t0->kind_id, N) * bytes / (bw * 1e3) : 0;
    } else {
        d = rec * ring_factor(t0->kind_id, N) / ring_factor(t0->kind_id, (int)S->N0);
    }
    return S->o.no_comm ? 0 : d / S->o.link;
}

static void coll_times(struct sim *S) {
    const struct trace *tr = S->tr;
    int n0 = tr->nranks; /* the ranks whose records there are */
    S->ncoll = tr->r[0].ncoll;
    S->cdur = xcalloc((size_t)S->ncoll, sizeof *S->cdur);
    S->cjoin = xcalloc((size_t)S->ncoll, sizeof *S->cjoin);
    S->cstart = xcalloc((size_t)S->ncoll, sizeof *S->cstart);
    int **by = xcalloc((size_t)n0, sizeof *by); /* per rank, collective k -> task */
    for (int r = 0; r < n0; r++) {
        by[r] = xcalloc((size_t)S->ncoll, sizeof **by);
        for (int i = 0; i < tr->r[r].n; i++)
            if (tr->r[r].t[i].coll >= 0) by[r][tr->r[r].t[i].coll] = i;
    }
    for (int k = 0; k < S->ncoll; k++) {
        double join = 0, fin = DBL_MAX;
        for (int r = 0; r < n0; r++) {
            const struct task *t = &tr->r[r].t[by[r][k]];
            if (t->start > join) join = t->start;
            if (t->end < fin) fin = t->end;
        }
        S->cdur[k] = coll_time(S, &tr->r[0].t[by[0][k]], join, fin);
    }
    for (int r = 0; r < n0; r++) free(by[r]);
    free(by);
}

// ----------------------------------------------------------------------------
// tasks and windows

/* a task's work at the speed of a whole core: with CPU durations, a compute task's recorded CPU
 * time (what it cost without the time its thread waited for a core, whoever held it) */
static double task_work(const struct sim *S, const struct task *t) {
    return S->cpu && t->cpu >= 0 ? t->cpu : t->work;
}

/* how long task t runs in the simulation, at full speed */
static double sim_work(const struct sim *S, const struct task *t) {
    double w = task_work(S, t) + (S->cpu ? t->lat_cpu : t->lat);
    int part = trace_stage(S->tr) >= 1 && S->Nm != S->N0;
    int io = t->bucket == BUCKET_SWAP || t->bucket == BUCKET_CKPT;
    if (part && (t->kind_id == ZT_KIND_adamw || io))
        w *= S->N0 / S->Nm; /* ZeRO partitions: 1/N of the state per rank */
    if (io) return w / S->o.disk;
    if (t->bucket == BUCKET_COMPUTE) return w / S->o.compute;
    return w;
}

static void ready_push(const struct sim *S, struct sim_rank *K, int i);

static void release_ready(struct sim *S, struct sim_rank *K, int i) {
    struct sim_task *s = &K->s[i];
    if (s->st != RELEASED || s->ndep_left > 0) return;
    s->st = READY;
    s->ready = S->now;
    const struct task *t = &K->R->t[i];
    if (!on_io_thread(t) && S->o.pol != POL_RECORDED) ready_push(S, K, i);
}

/* window w's wait is over when its gates are done and its host has submitted its pre-wait
 * tasks; then the post-wait tasks and the next window get their release times (and so on
 * through the windows whose waits that ends: a loop, as there may be many) */
static void window_check(struct sim *S, struct sim_rank *K, int w) {
    const struct trace *tr = S->tr;
    int W = tr->nwin;
    for (; w < W; w++) {
        if (K->simwait[w] >= 0 || K->H[w] < 0 || K->gleft[w] > 0) return;
        double lp = tr->last_pre[(size_t)K->rec * W + w];
        double ge = tr->gate_end[(size_t)K->rec * W + w];
        double t = K->H[w] + (lp - tr->win_start[w]);
        if (K->gmax[w] > t) t = K->gmax[w];
        K->simwait[w] = t;
        if (w + 1 < W)
            K->H[w + 1] = t + (tr->win_start[w + 1] - ge > 0 ? tr->win_start[w + 1] - ge : 0);
    }
}

static void complete(struct sim *S, struct sim_rank *K, int i) {
    struct sim_task *s = &K->s[i];
    const struct task *t = &K->R->t[i];
    s->st = DONE;
    s->endt = S->now;
    K->busy[s->lane] = -1;
    for (int k = 0; k < t->nsucc; k++) {
        struct sim_task *u = &K->s[t->succ[k]];
        if (--u->ndep_left == 0) release_ready(S, K, t->succ[k]);
    }
    int g = t->gate;
    if (S->now > K->gmax[g]) K->gmax[g] = S->now;
    K->gleft[g]--;
    window_check(S, K, g);
}

/* when the host thread submits task t, or -1 while that is not known yet */
static double release_time(const struct sim *S, const struct sim_rank *K, const struct task *t) {
    const struct trace *tr = S->tr;
    int w = t->win;
    if (!t->post) {
        if (K->H[w] < 0) return -1;
        double off = t->submit - tr->win_start[w];
        return K->H[w] + (off > 0 ? off : 0);
    }
    if (K->simwait[w] < 0) return -1;
    return K->simwait[w] + (t->submit - tr->gate_end[(size_t)K->rec * tr->nwin + w]);
}

static void start_task(struct sim *S, struct sim_rank *K, int i, int lane) {
    struct sim_task *s = &K->s[i];
    const struct task *t = &K->R->t[i];
    s->st = RUNNING;
    s->lane = lane;
    K->busy[lane] = i;
    s->rem = sim_work(S, t);
    s->endt = DBL_MAX;
    if (on_io_thread(t)) s->endt = S->now + s->rem;
    if (t->coll < 0) return;
    int k = t->coll;
    if (S->now > S->cstart[k]) S->cstart[k] = S->now;
    if (++S->cjoin[k] < S->N) return;
    double e = S->cstart[k] + S->cdur[k]; /* the last rank joined: everyone ends together */
    for (int r = 0; r < S->N; r++) {
        struct sim_rank *Q = &S->rk[r];
        for (int l = 0; l < Q->nlane; l++) {
            int j = Q->busy[l];
            if (j >= 0 && Q->R->t[j].coll == k) Q->s[j].endt = e;
        }
    }
}

// ----------------------------------------------------------------------------
// scheduling

/* whether ready task a goes before ready task b under the policy */
static int better(const struct sim *S, const struct sim_rank *K, int a, int b) {
    const struct task *x = &K->R->t[a], *y = &K->R->t[b];
    if (S->o.pol == POL_PRIO && x->prio != y->prio) return x->prio > y->prio;
    if (S->o.pol == POL_CP && K->bl[a] != K->bl[b]) return K->bl[a] > K->bl[b];
    if (K->s[a].ready != K->s[b].ready) return K->s[a].ready < K->s[b].ready;
    return a < b;
}

/* whether task t keeps its recorded lane and order: I/O tasks always, every task under the
 * recorded policy */
static int keeps_order(const struct sim *S, const struct task *t) {
    return on_io_thread(t) || S->o.pol == POL_RECORDED;
}

/* The ready compute tasks are a binary heap under better (a strict total order: ties end with
 * the index), so the best comes first in O(log n) as a scan would find it. */
static void ready_push(const struct sim *S, struct sim_rank *K, int i) {
    int at = K->nready++;
    while (at > 0 && better(S, K, i, K->ready[(at - 1) / 2])) {
        K->ready[at] = K->ready[(at - 1) / 2];
        at = (at - 1) / 2;
    }
    K->ready[at] = i;
}

static int ready_pop(const struct sim *S, struct sim_rank *K) {
    int top = K->ready[0], last = K->ready[--K->nready], at = 0;
    for (;;) {
        int c = 2 * at + 1;
        if (c >= K->nready) break;
        if (c + 1 < K->nready && better(S, K, K->ready[c + 1], K->ready[c])) c++;
        if (!better(S, K, K->ready[c], last)) break;
        K->ready[at] = K->ready[c];
        at = c;
    }
    K->ready[at] = last;
    return top;
}

static void dispatch(struct sim *S, struct sim_rank *K) {
    /* I/O threads (and every lane under the recorded policy): each free lane starts its next
     * task in recorded order once it is ready */
    for (int lane = 0; lane < K->nlane; lane++) {
        if (K->busy[lane] >= 0 || K->lnext[lane] >= K->lcount[lane]) continue;
        int i = K->lorder[lane][K->lnext[lane]];
        if (i < 0 || K->s[i].st != READY) continue;
        K->lnext[lane]++;
        start_task(S, K, i, lane);
    }
    if (S->o.pol == POL_RECORDED) return;
    for (int lane = 0; lane < S->nwork && K->nready > 0; lane++) {
        if (K->busy[lane] >= 0) continue;
        start_task(S, K, ready_pop(S, K), lane);
    }
}

/* the core slot (node-major index) compute worker l of simulated rank r runs on */
static int slot_of(const struct sim *S, int r, int l) {
    int node = r / S->rpn, k = (r % S->rpn) * S->nwork + l;
    return node * S->ncore + k % S->ncore;
}

/* each compute lane's speed: workers sharing a core split it (or, --shared-cores, a node's
 * running compute tasks share all its cores evenly); a collective's wait uses no core */
static void set_rates(struct sim *S, int nslot) {
    memset(S->run, 0, (size_t)nslot * sizeof *S->run);
    for (int r = 0; r < S->N; r++)
        for (int l = 0; l < S->nwork; l++) {
            int i = S->rk[r].busy[l];
            if (i >= 0 && S->rk[r].R->t[i].bucket == BUCKET_COMPUTE) S->run[slot_of(S, r, l)]++;
        }
    for (int r = 0; r < S->N; r++)
        for (int l = 0; l < S->nwork; l++) {
            int c = slot_of(S, r, l);
            S->rk[r].rate[l] = S->run[c] > 1 ? 1.0 / S->run[c] : 1.0;
            if (S->o.shared) {
                int n = S->rk[r].node, tot = 0;
                for (int k = 0; k < S->ncore; k++) tot += S->run[n * S->ncore + k];
                S->rk[r].rate[l] = S->cores > 0 && tot > S->cores ? S->cores / tot : 1.0;
            }
        }
}

// ----------------------------------------------------------------------------
// the event loop

/* the tasks whose host submission is due by now become released (and ready when free) */
static void release_due(struct sim *S) {
    for (int r = 0; r < S->N; r++) {
        struct sim_rank *K = &S->rk[r];
        while (K->cursor < K->R->n) {
            int i = K->subord[K->cursor];
            double rt = release_time(S, K, &K->R->t[i]);
            if (rt < 0 || rt > S->now) break;
            K->s[i].st = RELEASED;
            K->s[i].release = rt;
            K->cursor++;
            release_ready(S, K, i);
        }
    }
}

/* the time of the next release or task end, DBL_MAX when there is none */
static double next_event(const struct sim *S) {
    double next = DBL_MAX;
    for (int r = 0; r < S->N; r++) {
        const struct sim_rank *K = &S->rk[r];
        if (K->cursor < K->R->n) {
            double rt = release_time(S, K, &K->R->t[K->subord[K->cursor]]);
            if (rt >= 0 && rt < next) next = rt;
        }
        for (int l = 0; l < K->nlane; l++) {
            int i = K->busy[l];
            if (i < 0) continue;
            const struct task *t = &K->R->t[i];
            double e = t->bucket == BUCKET_COMPUTE ? S->now + K->s[i].rem / K->rate[l]
                                                   : K->s[i].endt;
            if (e < next) next = e;
        }
    }
    return next;
}

/* the running tasks progress by dt; those done complete (*left counts the tasks not done). A
 * compute task whose end, as next_event computed it, is next is done even when rounding
 * leaves a sliver of work (a sliver too small to move a large clock would never end): every
 * call completes a task or reaches a release, which bounds the event loop. */
static void advance(struct sim *S, double next, int64_t *left) {
    double dt = next - S->now;
    for (int r = 0; r < S->N; r++) {
        struct sim_rank *K = &S->rk[r];
        for (int l = 0; l < K->nlane; l++) {
            int i = K->busy[l];
            if (i < 0) continue;
            const struct task *t = &K->R->t[i];
            K->busy_us[t->bucket] += dt;
            if (t->bucket != BUCKET_COMPUTE) continue;
            K->s[i].ends = S->now + K->s[i].rem / K->rate[l] <= next; /* as next_event has it */
            K->s[i].rem -= dt * K->rate[l];
        }
    }
    S->now = next;
    for (int r = 0; r < S->N; r++) {
        struct sim_rank *K = &S->rk[r];
        for (int l = 0; l < K->nlane; l++) {
            int i = K->busy[l];
            if (i < 0) continue;
            const struct task *t = &K->R->t[i];
            int done = t->bucket == BUCKET_COMPUTE
                           ? K->s[i].rem <= 1e-9 * (1 + t->work) || K->s[i].ends
                           : K->s[i].endt <= S->now;
            if (done) {
                complete(S, K, i);
                (*left)--;
            }
        }
    }
}

static enum zt_status run_events(struct sim *S) {
    const struct trace *tr = S->tr;
    S->now = tr->win_start[0];
    for (int r = 0; r < S->N; r++) window_check(S, &S->rk[r], 0);
    int nnodes = (S->N + S->rpn - 1) / S->rpn;
    int nslot = nnodes * S->ncore;
    S->run = xcalloc((size_t)nslot, sizeof *S->run);
    int64_t left = 0, guard = 0;
    for (int r = 0; r < S->N; r++) left += S->rk[r].R->n;
    /* each turn completes a task or reaches a release (one per task), so 2 turns per task
     * suffice; the limit turns a bug in that argument into an error instead of a hang */
    int64_t turns = 4 * left + 16;
    while (left > 0) {
        release_due(S);
        for (int r = 0; r < S->N; r++) dispatch(S, &S->rk[r]);
        set_rates(S, nslot);
        double next = next_event(S);
        if (next == DBL_MAX)
            return zt_error_set(ZT_ERR_DATA, "trace %s: the replay cannot go on (%lld tasks never "
                                "run): the trace is incomplete or its collectives do not match "
                                "across ranks", tr->path, (long long)left);
        if (++guard > turns)
            return zt_error_set(ZT_ERR_RUNTIME, "trace %s: the replay made no progress in %lld "
                                "turns (%lld tasks left): expected at most 2 turns per task "
                                "(a bug in zt-trace)", tr->path, (long long)turns,
                                (long long)left);
        advance(S, next < S->now ? S->now : next, &left);
    }
    return ZT_OK;
}

// ----------------------------------------------------------------------------
// set-up and results

/* the rank's tasks in submission order (ties: by index) */
static void sort_submission(const struct rank *R, int *v, int n) {
    struct keyed *k = xcalloc((size_t)n, sizeof *k);
    for (int i = 0; i < n; i++) k[i] = (struct keyed){R->t[i].submit, i};
    qsort(k, (size_t)n, sizeof *k, cmp_keyed);
    for (int i = 0; i < n; i++) v[i] = k[i].i;
    free(k);
}

/* each lane's tasks that keep their recorded order, by their place among the lane's tasks */
static void lane_orders(const struct sim *S, struct sim_rank *K) {
    const struct rank *R = K->R;
    K->lorder = xcalloc((size_t)K->nlane, sizeof *K->lorder);
    K->lcount = xcalloc((size_t)K->nlane, sizeof *K->lcount);
    for (int i = 0; i < R->n; i++) {
        const struct task *t = &R->t[i];
        int lane = task_lane(t, S->nwork);
        if (keeps_order(S, t) && t->worker_order + 1 > K->lcount[lane])
            K->lcount[lane] = t->worker_order + 1;
    }
    for (int l = 0; l < K->nlane; l++) {
        K->lorder[l] = xcalloc((size_t)K->lcount[l], sizeof **K->lorder);
        for (int o = 0; o < K->lcount[l]; o++) K->lorder[l][o] = -1;
    }
    for (int i = 0; i < R->n; i++) {
        const struct task *t = &R->t[i];
        if (keeps_order(S, t)) K->lorder[task_lane(t, S->nwork)][t->worker_order] = i;
    }
}

/* simulated rank r: recorded rank r mod the recorded count */
static void rank_init(struct sim *S, int r, int nio) {
    const struct trace *tr = S->tr;
    int W = tr->nwin;
    struct sim_rank *K = &S->rk[r];
    K->rec = r % tr->nranks;
    K->R = &tr->r[K->rec];
    K->node = r / S->rpn;
    const struct rank *R = K->R;
    K->s = xcalloc((size_t)R->n, sizeof *K->s);
    K->subord = xcalloc((size_t)R->n, sizeof *K->subord);
    sort_submission(R, K->subord, R->n);
    K->gleft = xcalloc((size_t)W, sizeof *K->gleft);
    K->H = xcalloc((size_t)W, sizeof *K->H);
    K->simwait = xcalloc((size_t)W, sizeof *K->simwait);
    K->gmax = xcalloc((size_t)W, sizeof *K->gmax);
    for (int w = 0; w < W; w++) K->H[w] = K->simwait[w] = K->gmax[w] = -1;
    K->H[0] = tr->win_start[0];
    K->nlane = S->nwork + nio;
    K->busy = xcalloc((size_t)K->nlane, sizeof *K->busy);
    K->rate = xcalloc((size_t)K->nlane, sizeof *K->rate);
    K->lnext = xcalloc((size_t)K->nlane, sizeof *K->lnext);
    lane_orders(S, K);
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

/* the simulated layout from the options and the recording */
static enum zt_status sim_init(struct sim *S, const struct trace *tr,
                               const struct sim_options *o) {
    memset(S, 0, sizeof *S);
    S->tr = tr;
    S->o = *o;
    S->N = o->ranks > 0 ? o->ranks : tr->nranks;
    S->Nm = o->model_ranks > 0 ? o->model_ranks : S->N;
    S->N0 = trace_meta_num(tr, "world", tr->nranks);
    int maxw = 0, nio = 0;
    for (int r = 0; r < tr->nranks; r++) {
        if (tr->r[r].nworkers > maxw) maxw = tr->r[r].nworkers;
        if (tr->r[r].nio > nio) nio = tr->r[r].nio;
    }
    S->nwork = o->workers > 0 ? o->workers : maxw;
    if (o->pol == POL_RECORDED && S->nwork != maxw)
        return zt_error_set(ZT_ERR_INVALID, "--policy recorded replays the recorded %d "
                            "worker(s); with --workers %d choose eager, prio or cp", maxw,
                            S->nwork);
    double rec_cores = trace_meta_num(tr, "cores", 0);
    S->cores = o->cores > 0 ? o->cores : rec_cores;
    /* auto: wall times replay the recording itself (slowdowns by other processes included);
     * another layout of workers, ranks or cores is predicted from CPU times, for a machine
     * whose cores serve this run alone */
    int other = S->nwork != maxw || S->N != tr->nranks || o->shared ||
                (o->cores > 0 && o->cores != rec_cores);
    S->cpu = tr->has_cpu && (o->durs == DUR_CPU || (o->durs == DUR_AUTO && other));
    S->rpn = o->ranks_per_node;
    if (S->rpn <= 0) {
        int rec = (int)trace_meta_num(tr, "ranks_per_node", tr->nranks);
        S->rpn = rec >= tr->nranks ? S->N : rec; /* one machine stays one machine */
    }
    /* a node's compute workers on its cores, round robin (no cores known: one each) */
    S->ncore = S->cores >= 1 ? (int)S->cores : S->rpn * S->nwork;
    if (S->ncore > S->rpn * S->nwork) S->ncore = S->rpn * S->nwork; /* the others stay idle */
    coll_times(S);
    S->rk = xcalloc((size_t)S->N, sizeof *S->rk);
    for (int r = 0; r < S->N; r++) rank_init(S, r, nio);
    return ZT_OK;
}

static void sim_free(struct sim *S) {
    for (int r = 0; S->rk && r < S->N; r++) {
        struct sim_rank *K = &S->rk[r];
        free(K->s);
        free(K->subord);
        free(K->gleft);
        free(K->H);
        free(K->simwait);
        free(K->gmax);
        free(K->busy);
        free(K->rate);
        free(K->lnext);
        for (int l = 0; K->lorder && l < K->nlane; l++) free(K->lorder[l]);
        free(K->lorder);
        free(K->lcount);
        free(K->ready);
        free(K->bl);
    }
    free(S->rk);
    free(S->cdur);
    free(S->cjoin);
    free(S->cstart);
    free(S->run);
}

enum zt_status simulate(const struct trace *tr, const struct sim_options *o,
                        struct sim_result *res) {
    memset(res, 0, sizeof *res);
    struct sim S;
    enum zt_status rc;
    ZT_CHECK_GOTO(sim_init(&S, tr, o), rc, out);
    ZT_CHECK_GOTO(run_events(&S), rc, out);
    int W = tr->nwin;
    res->nranks = S.N;
    res->nworkers = S.nwork;
    res->cpu = S.cpu;
    res->step_us = xcalloc((size_t)S.N * (size_t)W, sizeof *res->step_us);
    for (int r = 0; r < S.N; r++) {
        const struct sim_rank *K = &S.rk[r];
        for (int w = 0; w < W; w++)
            res->step_us[(size_t)r * W + w] = (w + 1 < W ? K->H[w + 1] : K->simwait[w]) - K->H[w];
    }
    memcpy(res->busy_us, S.rk[0].busy_us, sizeof res->busy_us);
out:
    sim_free(&S);
    return rc;
}

void sim_result_free(struct sim_result *res) {
    free(res->step_us);
    memset(res, 0, sizeof *res);
}

double mean_steps(const double *v, int nwin, int stride) {
    int w0 = nwin > 1 ? 1 : 0;
    double s = 0;
    for (int w = w0; w < nwin; w++) s += v[(size_t)w * stride];
    return s / (nwin - w0);
}

// ----------------------------------------------------------------------------
// the replay command

static void print_replay_json(const struct trace *tr, const struct sim_options *o,
                              const struct sim_result *S, const double *rec) {
    int W = tr->nwin;
    printf("{\"trace\": \"%s\", \"policy\": \"%s\", \"workers\": %d, \"ranks\": %d, "
           "\"recorded_ranks\": %d, \"durations\": \"%s\", \"predicted_ms\": %.4f, "
           "\"recorded_ms\": %.4f, \"steps\": [", tr->path, policy_names[o->pol], S->nworkers,
           S->nranks, tr->nranks, S->cpu ? "cpu" : "wall", mean_steps(S->step_us, W, 1) / 1e3,
           mean_steps(rec, W, 1) / 1e3);
    for (int w = 0; w < W; w++)
        printf("%s{\"step\": %lld, \"predicted_ms\": %.4f, \"recorded_ms\": %.4f}",
               w ? ", " : "", (long long)tr->win_step[w], S->step_us[w] / 1e3, rec[w] / 1e3);
    printf("], \"busy_ms_per_step\": {");
    for (int c = 0; c < BUCKET_COUNT; c++)
        printf("%s\"%s\": %.4f", c ? ", " : "", bucket_names[c], S->busy_us[c] / W / 1e3);
    printf("}}\n");
}

static void print_replay_text(const struct trace *tr, const struct sim_options *o,
                              const struct sim_result *S, const double *rec) {
    int W = tr->nwin;
    double mp = mean_steps(S->step_us, W, 1), mr = mean_steps(rec, W, 1);
    printf("replay of %s: %d rank(s) (recorded %d) x %d worker(s), policy %s, %s durations\n",
           tr->path, S->nranks, tr->nranks, S->nworkers, policy_names[o->pol],
           S->cpu ? "CPU-time" : "wall-time");
    printf("%6s %14s %13s\n", "step", "predicted ms", "recorded ms");
    for (int w = 0; w < W; w++)
        printf("%6lld %14.2f %13.2f\n", (long long)tr->win_step[w], S->step_us[w] / 1e3,
               rec[w] / 1e3);
    char diff[64] = "n/a: the recorded steps lasted 0 ms"; /* no relative error of nothing */
    if (mr > 0) snprintf(diff, sizeof diff, "%+.1f%%", 100 * (mp - mr) / mr);
    printf("step time: predicted %.2f ms, recorded %.2f ms (%s; mean of steps %s)\n", mp / 1e3,
           mr / 1e3, diff, W > 1 ? "after the first" : "");
    printf("busy per step, rank 0 (all its workers):");
    for (int c = 0; c < BUCKET_COUNT; c++)
        printf("%s %s %.2f ms", c ? "," : "", bucket_names[c], S->busy_us[c] / W / 1e3);
    printf("\n");
}

enum zt_status cmd_replay(const struct trace *tr, const struct sim_options *o, int json) {
    struct sim_result S;
    ZT_CHECK(simulate(tr, o, &S));
    double *rec = xcalloc((size_t)tr->nwin, sizeof *rec); /* rank 0's recorded windows */
    for (int w = 0; w < tr->nwin; w++) rec[w] = window_end(tr, 0, w) - tr->win_start[w];
    if (json) print_replay_json(tr, o, &S, rec);
    else print_replay_text(tr, o, &S, rec);
    free(rec);
    sim_result_free(&S);
    return ZT_OK;
}
