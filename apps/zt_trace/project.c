/*
 * apps/zt_trace/project.c: `zt-trace project`: a scale-out projection of recorded traces to N
 * data-parallel ranks, collectives as alpha-beta ring collectives.
 *
 * Layer: apps/ (zt-trace). Each trace (one per ZeRO stage) is replayed by simulate.c as one of
 * N ranks, one rank per node; per N: the step time, the exposed communication share (against
 * the same replay with free collectives), the communication volume, tokens/s and the memory per
 * rank. docs/traces.md ("Scale-out projection") lists the assumptions. With --plot the rows also
 * go to PNG.dat for plot.c.
 */
#include <errno.h>    /* errno */
#include <stdio.h>    /* printf, fopen */
#include <string.h>   /* strerror */
#include "zt_trace.h" /* struct trace, simulate */

/* what a trace's recording says of its rank's memory and work, independent of N */
struct recorded {
    int stage;
    double P;        /* parameters */
    double pw, gw;   /* the gathered-parameter (stage 3) and gradient-slot (stage >= 2) windows */
    double ma;       /* activations */
    double tok;      /* tokens per step and rank */
};

static struct recorded recorded_of(const struct trace *tr) {
    struct recorded x = {.stage = trace_stage(tr), .P = trace_meta_num(tr, "params", 0)};
    double n0 = tr->nranks;
    double mp = trace_meta_num(tr, "mem_params", 4 * x.P);
    double mg = trace_meta_num(tr, "mem_grads", 4 * x.P);
    x.ma = trace_meta_num(tr, "mem_acts", 0);
    x.pw = x.stage >= 3 ? mp - 4 * x.P / n0 : 0;
    x.gw = x.stage >= 2 ? mg - 4 * x.P / n0 : 0;
    if (x.pw < 0) x.pw = 0;
    if (x.gw < 0) x.gw = 0;
    x.tok = trace_meta_num(tr, "micro_batch", 0) * trace_meta_num(tr, "grad_accum", 1) *
            trace_meta_num(tr, "seq_len", 0);
    return x;
}

/* one row: the trace's rank 0 replayed as one of N ranks */
struct row {
    double step_us, share, vol, mem;
};

static enum zt_status project_row(const struct trace *tr, const struct recorded *x, int N,
                                  const struct project_options *po, struct row *row) {
    /* ranks are symmetric: one simulated rank, one per node, whose collectives and partitions
     * are those of N ranks */
    struct sim_options o = {.pol = POL_EAGER, .ranks = 1, .model_ranks = N,
                            .ranks_per_node = 1, .link = 1, .disk = 1, .compute = 1,
                            .alpha_us = po->alpha_us, .bw_gbs = po->bw_gbs};
    struct trace one = *tr;
    one.nranks = 1;
    struct sim_result S, Z;
    ZT_CHECK(simulate(&one, &o, &S));
    o.no_comm = 1;
    enum zt_status rc = simulate(&one, &o, &Z);
    if (rc != ZT_OK) {
        sim_result_free(&S);
        return rc;
    }
    int W = tr->nwin;
    double t = mean_steps(S.step_us, W, 1), tz = mean_steps(Z.step_us, W, 1);
    double vol = 0;
    for (int i = 0; i < tr->r[0].n; i++) {
        const struct task *k = &tr->r[0].t[i];
        double bytes = (double)(k->bytes_read > k->bytes_written ? k->bytes_read
                                                                  : k->bytes_written);
        if (k->bucket == BUCKET_COMM && k->win == (W > 1 ? 1 : 0))
            vol += ring_factor(k->kind_id, N) * bytes;
    }
    double P = x->P;
    row->mem = (x->stage >= 3 ? 4 * P / N + x->pw : 4 * P) +
               (x->stage >= 2 ? 4 * P / N + x->gw : 4 * P) + (x->stage >= 1 ? 8 * P / N : 8 * P) +
               x->ma;
    row->step_us = t;
    row->share = t > 0 ? (t - tz) / t : 0;
    row->vol = vol;
    sim_result_free(&S);
    sim_result_free(&Z);
    return ZT_OK;
}

static void print_row(const struct project_options *po, const struct recorded *x, int N,
                      const struct row *w, int first, FILE *dat) {
    double t = w->step_us, tps = t > 0 ? x->tok * N / (t / 1e6) : 0;
    if (po->json)
        printf("%s\n {\"stage\": %d, \"ranks\": %d, \"step_ms\": %.4f, \"comm_share\": %.4f, "
               "\"comm_mib\": %.4f, \"tokens_per_s\": %.1f, \"memory_mib\": %.3f}",
               first ? "" : ",", x->stage, N, t / 1e3, w->share, w->vol / 1048576.0, tps,
               w->mem / 1048576.0);
    else
        printf("%5d %6d %11.2f %10.1f%% %14.2f %12.0f %16.1f\n", x->stage, N, t / 1e3,
               100 * w->share, w->vol / 1048576.0, tps, w->mem / 1048576.0);
    if (dat)
        fprintf(dat, "%d %d %.6f %.6f %.6f\n", x->stage, N, t / 1e3, 100 * w->share,
                w->mem / 1048576.0);
}

/* the rows of every trace and rank count; the plot's data into dat when not NULL */
static enum zt_status project_rows(const struct trace *trs, int ntr,
                                   const struct project_options *po, FILE *dat) {
    int first = 1;
    for (int k = 0; k < ntr; k++) {
        struct recorded x = recorded_of(&trs[k]);
        for (int j = 0; j < po->nranks; j++) {
            struct row w;
            ZT_CHECK(project_row(&trs[k], &x, po->ranks[j], po, &w));
            print_row(po, &x, po->ranks[j], &w, first, dat);
            first = 0;
        }
        if (dat) fprintf(dat, "\n\n"); /* a data block per trace */
    }
    return ZT_OK;
}

enum zt_status cmd_project(const struct trace *trs, int ntr, const struct project_options *po) {
    FILE *dat = NULL;
    char datp[4200] = "";
    if (po->plot) {
        snprintf(datp, sizeof datp, "%s.dat", po->plot);
        if (!(dat = fopen(datp, "w")))
            return zt_error_set(ZT_ERR_IO, "plot data %s: cannot create (%s)", datp,
                                strerror(errno));
    }
    if (po->json)
        printf("{\"alpha_us\": %g, \"bw_gbs\": %g, \"rows\": [", po->alpha_us, po->bw_gbs);
    else
        printf("scale-out projection: one rank per node, ring collectives alpha %.1f us, %.2f "
               "GB/s per link\n%5s %6s %11s %11s %14s %12s %16s\n", po->alpha_us, po->bw_gbs,
               "stage", "ranks", "step ms", "comm share", "comm MiB/step", "tokens/s",
               "memory/rank MiB");
    enum zt_status rc = project_rows(trs, ntr, po, dat);
    if (rc != ZT_OK) {
        if (dat) fclose(dat);
        return rc;
    }
    if (po->json) printf("]}\n");
    if (!dat) return ZT_OK;
    if (fclose(dat) != 0)
        return zt_error_set(ZT_ERR_IO, "plot data %s: write failed", datp);
    return plot_projection(po->plot, trs, ntr);
}
