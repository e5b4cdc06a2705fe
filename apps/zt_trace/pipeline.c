/*
 * apps/zt_trace/pipeline.c: `zt-trace pipeline`: what a recorded run of GPT-2 would take as a
 * pipeline of P stages, one rank each: the per-layer work the trace measured, the cut of the
 * layers into stages (graph/pipe_plan.c's, or balanced by the measured time), M micro-batches
 * in the 1F1B or the GPipe order, and the activations and gradients between stages as
 * alpha-beta messages.
 *
 * Layer: apps/ (zt-trace). The model: a stage is a rank with the recorded rank's workers, its
 * work per micro-batch spread evenly over them (the recorded work of its layers' tasks over the
 * worker count); a stage runs its forwards and backwards one after another in the schedule's
 * order, each as soon as its input arrived; the optimizer (its share of the recorded optimizer
 * work, by parameters; ZeRO-1 splits it over the replicas) runs after a stage's last backward,
 * the first and last stage first exchanging the tied embedding's gradient, and with --dp N
 * the stage's N replicas first reducing their gradients (a ring). docs/traces.md ("Pipeline
 * projection") lists the assumptions and the sources of each number.
 */
#include <stdio.h>    /* printf */
#include <stdlib.h>   /* free */
#include <string.h>   /* strcmp */
#include "zt_trace.h" /* struct trace, struct pipe_options */

const char *const pipe_schedule_names[2] = {"1f1b", "gpipe"};
const char *const pipe_partition_names[PIPE_PART_COUNT] = {"parameters", "uniform", "time"};

/* work (us of a whole core) of one layer spec: forward and backward per micro-batch, and its
 * share of the optimizer per step */
struct spec_work {
    double fwd, bwd, opt;
};

/* what the projection needs of the trace */
struct recorded_run {
    struct zt_model_shape shape;
    int micro_batch, accum, workers, nspecs;
    int zero1;                /* the run's ZeRO stage >= 1: the optimizer state is partitioned */
    double step_us;           /* the recorded step: mean over the windows used */
    struct spec_work *w;      /* [nspecs] */
};

/* the layer spec (embed 0, block l at 1 + l, ln_f L + 1, head L + 2) a task's work belongs to,
 * or -1 for the optimizer's and other per-step work */
static int spec_of(const struct task *t, int L) {
    if (!strncmp(t->kind, "encoder_", 8) || !strcmp(t->kind, "load_batch")) return 0;
    if (t->phase == ZT_TASK_PHASE_OPTIMIZER || t->phase == ZT_TASK_PHASE_NONE) return -1;
    if (t->layer >= 0 && t->layer < L) return 1 + t->layer;
    if (t->layer == L) return !strncmp(t->kind, "layernorm_", 10) ? L + 1 : L + 2;
    return -1;
}

/* the windows the costs come from: every step after the first (the first warms up) */
static int used_window(const struct trace *tr, int w) { return tr->nwin == 1 || w >= 1; }

static enum zt_status shape_of(const struct trace *tr, struct zt_model_shape *s) {
    static const char *const keys[] = {"vocab_size", "seq_len", "n_embd", "n_layer", "n_head"};
    int v[5];
    for (int k = 0; k < 5; k++) {
        v[k] = (int)trace_meta_num(tr, keys[k], 0);
        if (v[k] < 1)
            return zt_error_set(ZT_ERR_DATA, "trace %s: its description lacks %s (a GPT-2 run of "
                                "zt-train records it; record the run again)", tr->path, keys[k]);
    }
    *s = (struct zt_model_shape){.vocab_size = v[0], .seq_len = v[1], .n_embd = v[2],
                                 .n_layer = v[3], .n_head = v[4]};
    return ZT_OK;
}

/* the per-spec work of rank 0's compute tasks, per micro-batch (forward, backward) and per step
 * (the optimizer's, shared out by parameters) */
static enum zt_status measure(const struct trace *tr, struct recorded_run *x) {
    ZT_CHECK(shape_of(tr, &x->shape));
    x->micro_batch = (int)trace_meta_num(tr, "micro_batch", 1);
    x->accum = (int)trace_meta_num(tr, "grad_accum", 1);
    x->workers = tr->r[0].nworkers > 0 ? tr->r[0].nworkers : 1;
    x->zero1 = trace_stage(tr) >= 1;
    x->nspecs = x->shape.n_layer + 3;
    x->w = xcalloc((size_t)x->nspecs, sizeof *x->w);
    int nwin = 0;
    double opt = 0, span = 0;
    for (int w = 0; w < tr->nwin; w++)
        if (used_window(tr, w)) nwin++, span += window_end(tr, 0, w) - tr->win_start[w];
    for (int i = 0; i < tr->r[0].n; i++) {
        const struct task *t = &tr->r[0].t[i];
        if (t->bucket != BUCKET_COMPUTE || on_io_thread(t) || !used_window(tr, t->win)) continue;
        double us = t->work > 0 ? t->work : t->end - t->start;
        int s = spec_of(t, x->shape.n_layer);
        if (s < 0) opt += us;
        else if (t->phase == ZT_TASK_PHASE_FORWARD || t->cls == ZT_TASK_CLASS_DATA)
            x->w[s].fwd += us;
        else
            x->w[s].bwd += us;
    }
    double per_mb = 1.0 / ((double)nwin * x->accum), params = 0;
    for (int s = 0; s < x->nspecs; s++) params += (double)zt_pipe_spec_params(&x->shape, s);
    for (int s = 0; s < x->nspecs; s++) {
        x->w[s].fwd *= per_mb;
        x->w[s].bwd *= per_mb;
        x->w[s].opt = opt / nwin * (double)zt_pipe_spec_params(&x->shape, s) / params;
    }
    x->step_us = span / nwin;
    return ZT_OK;
}

/* spec s's measured forward + backward per micro-batch, in ms (positive: a spec whose tasks
 * took no measurable time gets the smallest weight zt-train accepts) */
static double spec_ms(const struct recorded_run *x, int s) {
    const double ms = (x->w[s].fwd + x->w[s].bwd) / 1e3;
    return ms > 1e-6 ? ms : 1e-6;
}

/* the stages' first specs: graph/pipe_plan.c's cut, or balanced by the measured time */
static enum zt_status cut(const struct recorded_run *x, const struct pipe_options *o,
                          int *first) {
    if (o->stages > x->nspecs || o->stages > ZT_PIPE_MAX_STAGES)
        return zt_error_set(ZT_ERR_USAGE, "--stages %d: this model has %d layer specs (and %d "
                            "stages at most)", o->stages, x->nspecs, ZT_PIPE_MAX_STAGES);
    if (o->partition == PIPE_PART_TIME) {
        double *w = xcalloc((size_t)x->nspecs, sizeof *w);
        for (int s = 0; s < x->nspecs; s++) w[s] = spec_ms(x, s); /* as zt-train gets them */
        enum zt_status rc = zt_pipe_partition_balanced(w, x->nspecs, o->stages, first);
        free(w);
        return rc;
    }
    struct zt_pipeline_cfg pc = {.stages = o->stages,
                                 .partition = o->partition == PIPE_PART_UNIFORM
                                                  ? ZT_PIPE_UNIFORM : ZT_PIPE_PARAMETERS};
    struct zt_pipe_plan pl;
    ZT_CHECK(zt_pipe_plan_gpt2(&x->shape, &pc, &pl));
    for (int s = 0; s <= o->stages; s++) first[s] = pl.first[s];
    return ZT_OK;
}

/* one stage's operations in its schedule's order: op k is micro-batch mb[k], forward or not */
static void stage_order(int s, int P, int M, int gpipe, int *mb, int *fwd) {
    int k = 0;
    if (gpipe) {
        for (int j = 0; j < M; j++) mb[k] = j, fwd[k++] = 1;
        for (int j = 0; j < M; j++) mb[k] = j, fwd[k++] = 0;
        return;
    }
    /* 1F1B (PipeDream-flush, DeepSpeed's TrainSchedule): P - s - 1 forwards to fill the
     * pipeline, then a forward and a backward in turn, then the backwards left */
    int warm = P - s - 1 < M ? P - s - 1 : M;
    for (int j = 0; j < warm; j++) mb[k] = j, fwd[k++] = 1;
    for (int j = 0; j < M; j++) {
        if (warm + j < M) mb[k] = warm + j, fwd[k++] = 1;
        mb[k] = j, fwd[k++] = 0;
    }
}

/* the projection's result per stage and in all */
struct pipe_result {
    double F[ZT_PIPE_MAX_STAGES], B[ZT_PIPE_MAX_STAGES], O[ZT_PIPE_MAX_STAGES]; /* us */
    double end_fb[ZT_PIPE_MAX_STAGES], end[ZT_PIPE_MAX_STAGES];
    int in_flight[ZT_PIPE_MAX_STAGES]; /* the most micro-batches between forward and backward */
    double R[ZT_PIPE_MAX_STAGES]; /* the gradients' reduction among the stage's replicas */
    double msg_us, tied_us, span_fb, step_us, bubble, theory, imbalance, tokens_per_s;
};

/* when op k of stage s may start: its input from the neighbouring stage (plus the message), or
 * -1 when that has not been computed yet */
static double input_ready(int s, int P, int j, int fwd, double *const *fend,
                          double *const *bend, double msg) {
    if (fwd) return s == 0 ? 0 : fend[s - 1][j] < 0 ? -1 : fend[s - 1][j] + msg;
    if (s == P - 1) return fend[s][j];
    return bend[s + 1][j] < 0 ? -1 : bend[s + 1][j] + msg;
}

/* every stage's forwards and backwards, each as early as its stage and input allow */
static enum zt_status simulate_stages(int P, int M, int gpipe, struct pipe_result *r) {
    int *mb = xcalloc((size_t)P * 2 * M, sizeof *mb), *fw = xcalloc((size_t)P * 2 * M, sizeof *fw);
    double **fend = xcalloc((size_t)P, sizeof *fend), **bend = xcalloc((size_t)P, sizeof *bend);
    int next[ZT_PIPE_MAX_STAGES] = {0}, done = 0, live[ZT_PIPE_MAX_STAGES] = {0};
    double free_at[ZT_PIPE_MAX_STAGES] = {0};
    for (int s = 0; s < P; s++) {
        stage_order(s, P, M, gpipe, mb + (size_t)s * 2 * M, fw + (size_t)s * 2 * M);
        fend[s] = xcalloc((size_t)M, sizeof **fend), bend[s] = xcalloc((size_t)M, sizeof **bend);
        for (int j = 0; j < M; j++) fend[s][j] = bend[s][j] = -1;
    }
    for (int progress = 1; progress && done < P * 2 * M;) {
        progress = 0;
        for (int s = 0; s < P; s++) {
            while (next[s] < 2 * M) {
                int k = s * 2 * M + next[s], j = mb[k];
                double in = input_ready(s, P, j, fw[k], fend, bend, r->msg_us);
                if (in < 0) break;
                double start = in > free_at[s] ? in : free_at[s];
                free_at[s] = start + (fw[k] ? r->F[s] : r->B[s]);
                (fw[k] ? fend : bend)[s][j] = free_at[s];
                live[s] += fw[k] ? 1 : -1;
                if (live[s] > r->in_flight[s]) r->in_flight[s] = live[s];
                next[s]++, done++, progress = 1;
            }
        }
    }
    for (int s = 0; s < P; s++) r->end_fb[s] = free_at[s], free(fend[s]), free(bend[s]);
    free(fend), free(bend), free(mb), free(fw);
    if (done < P * 2 * M)
        return zt_error_set(ZT_ERR_DATA, "pipeline: the schedule deadlocked (a bug)");
    return ZT_OK;
}

/* the stages' times from the cut, the schedule simulated, then the optimizer */
static enum zt_status project(const struct recorded_run *x, const struct pipe_options *o,
                              const int *first, struct pipe_result *r) {
    const int P = o->stages, M = o->micro;
    const double bytes_per_us = o->bw_gbs * 1e3, C = x->shape.n_embd;
    r->msg_us = o->alpha_us + (double)x->micro_batch * x->shape.seq_len * C * 4 / bytes_per_us;
    r->tied_us = P > 1 ? o->alpha_us + (double)x->shape.vocab_size * C * 4 / bytes_per_us : 0;
    const int N = o->dp;
    for (int s = 0; s < P; s++) {
        double params = 0;
        r->F[s] = r->B[s] = r->O[s] = 0;
        for (int i = first[s]; i < first[s + 1]; i++) {
            r->F[s] += x->w[i].fwd / x->workers;
            r->B[s] += x->w[i].bwd / x->workers;
            r->O[s] += x->w[i].opt / x->workers / (x->zero1 ? N : 1);
            params += (double)zt_pipe_spec_params(&x->shape, i);
        }
        /* a ring all-reduce of the stage's fp32 gradients among its N replicas (ZeRO-1: a
         * reduce-scatter, then an all-gather of the updated parameters: the same volume) */
        r->R[s] = N > 1 ? 2.0 * (N - 1) * o->alpha_us +
                              2.0 * (N - 1) / N * params * 4 / bytes_per_us : 0;
    }
    ZT_CHECK(simulate_stages(P, M, o->gpipe, r));
    double busy = 0, mean = 0, most = 0;
    r->span_fb = r->step_us = 0;
    for (int s = 0; s < P; s++) {
        busy += M * (r->F[s] + r->B[s]);
        mean += (r->F[s] + r->B[s]) / P;
        if (r->F[s] + r->B[s] > most) most = r->F[s] + r->B[s];
        if (r->end_fb[s] > r->span_fb) r->span_fb = r->end_fb[s];
        r->end[s] = r->end_fb[s] + (s == 0 || s == P - 1 ? r->tied_us : 0) + r->R[s] + r->O[s];
        if (r->end[s] > r->step_us) r->step_us = r->end[s];
    }
    r->bubble = r->span_fb > 0 ? 1 - busy / (P * r->span_fb) : 0;
    if (r->bubble < 0) r->bubble = 0; /* rounding of a pipeline without idle time */
    r->theory = (double)(P - 1) / (M + P - 1);
    r->imbalance = mean > 0 ? most / mean : 1;
    r->tokens_per_s = (double)N * M * x->micro_batch * x->shape.seq_len / (r->step_us / 1e6);
    return ZT_OK;
}

/* "block 6", "embed", ... */
static void spec_label(const struct zt_model_shape *s, int i, char *buf, size_t n) {
    if (i >= 1 && i <= s->n_layer) snprintf(buf, n, "block %d", i - 1);
    else snprintf(buf, n, "%s", zt_pipe_spec_name(s, i));
}

static double max_of(const double *v, int n) {
    double m = 0;
    for (int i = 0; i < n; i++) m = v[i] > m ? v[i] : m;
    return m;
}

/* the measured times as zt-train's partition_weights list */
static void print_weights(const struct recorded_run *x) {
    printf("[");
    for (int s = 0; s < x->nspecs; s++) printf("%s%.6f", s ? ", " : "", spec_ms(x, s));
    printf("]");
}

static void print_text(const struct trace *tr, const struct recorded_run *x,
                       const struct pipe_options *o, const int *first,
                       const struct pipe_result *r) {
    printf("pipeline projection of %s: %d stages x %d data-parallel replicas (ranks of %d "
           "workers), %d micro-batches of %d x %d tokens, %s, cut by %s; messages %g us + %g "
           "GB/s (%.3f ms per micro-batch and cut)\n", tr->path, o->stages, o->dp, x->workers,
           o->micro, x->micro_batch, x->shape.seq_len, pipe_schedule_names[o->gpipe],
           pipe_partition_names[o->partition], o->alpha_us, o->bw_gbs, r->msg_us / 1e3);
    printf("%-5s %-26s %9s %10s %10s %9s %9s %9s %9s\n", "stage", "layer specs", "params",
           "fwd ms/mb", "bwd ms/mb", "optim ms", "busy ms", "idle ms", "in flight");
    for (int s = 0; s < o->stages; s++) {
        char specs[80], a[24], b[24];
        int64_t p = 0;
        for (int i = first[s]; i < first[s + 1]; i++) p += zt_pipe_spec_params(&x->shape, i);
        spec_label(&x->shape, first[s], a, sizeof a);
        spec_label(&x->shape, first[s + 1] - 1, b, sizeof b);
        snprintf(specs, sizeof specs, "%d-%d (%s .. %s)", first[s], first[s + 1] - 1, a, b);
        double busy = o->micro * (r->F[s] + r->B[s]), idle = r->span_fb - busy;
        printf("%-5d %-26s %8.2fM %10.3f %10.3f %9.3f %9.3f %9.3f %9d\n", s, specs, p / 1e6,
               r->F[s] / 1e3, r->B[s] / 1e3, r->O[s] / 1e3, busy / 1e3,
               idle > 0 ? idle / 1e3 : 0.0, r->in_flight[s]);
    }
    printf("step: %.3f ms projected, %.0f tokens/s (forwards and backwards %.3f ms, then the "
           "tied embedding's gradient %.3f ms, the replicas' reduction up to %.3f ms and the "
           "optimizer); recorded on %d rank(s): %.3f ms per step of %d micro-batch(es)\n",
           r->step_us / 1e3, r->tokens_per_s, r->span_fb / 1e3, r->tied_us / 1e3,
           max_of(r->R, o->stages) / 1e3, tr->nranks, x->step_us / 1e3, x->accum);
    printf("bubble: %.4f of the stages' time (a pipeline of equal stages and free messages: "
           "(P-1)/(M+P-1) = %.4f); stage imbalance (slowest / mean): %.3f\n", r->bubble,
           r->theory, r->imbalance);
    printf("to train with the cut by these measured times: \"pipeline\": {\"stages\": %d, "
           "\"partition\": \"weights\", \"partition_weights\": ", o->stages);
    print_weights(x);
    printf("}\n");
}

static void print_json(const struct recorded_run *x, const struct pipe_options *o,
                       const int *first, const struct pipe_result *r) {
    printf("{\"stages\": %d, \"dp\": %d, \"micro_batches\": %d, \"schedule\": \"%s\", "
           "\"partition\": \"%s\", \"workers\": %d, \"message_ms\": %.6f, \"tied_ms\": %.6f, "
           "\"step_ms\": %.6f, \"tokens_per_s\": %.3f, \"pipeline_ms\": %.6f, "
           "\"recorded_step_ms\": %.6f, \"bubble\": %.6f, \"bubble_theory\": %.6f, "
           "\"imbalance\": %.6f, \"stage\": [", o->stages, o->dp, o->micro,
           pipe_schedule_names[o->gpipe], pipe_partition_names[o->partition], x->workers,
           r->msg_us / 1e3, r->tied_us / 1e3, r->step_us / 1e3, r->tokens_per_s,
           r->span_fb / 1e3, x->step_us / 1e3, r->bubble, r->theory, r->imbalance);
    for (int s = 0; s < o->stages; s++)
        printf("%s{\"first_spec\": %d, \"last_spec\": %d, \"fwd_ms\": %.6f, \"bwd_ms\": %.6f, "
               "\"reduce_ms\": %.6f, \"optim_ms\": %.6f, \"end_ms\": %.6f, \"in_flight\": %d}",
               s ? ", " : "", first[s], first[s + 1] - 1, r->F[s] / 1e3, r->B[s] / 1e3,
               r->R[s] / 1e3, r->O[s] / 1e3, r->end[s] / 1e3, r->in_flight[s]);
    printf("], \"partition_weights\": ");
    print_weights(x);
    printf("}\n");
}

enum zt_status cmd_pipeline(const struct trace *tr, const struct pipe_options *o) {
    struct recorded_run x = {0};
    int first[ZT_PIPE_MAX_STAGES + 1];
    struct pipe_result r = {0};
    enum zt_status rc = measure(tr, &x);
    struct pipe_options oo = *o;
    if (oo.micro <= 0) oo.micro = x.accum; /* the run's accumulation, as its config says */
    if (rc == ZT_OK) rc = cut(&x, &oo, first);
    if (rc == ZT_OK) rc = project(&x, &oo, first, &r);
    if (rc == ZT_OK && oo.json) print_json(&x, &oo, first, &r);
    else if (rc == ZT_OK) print_text(tr, &x, &oo, first, &r);
    free(x.w);
    return rc;
}
