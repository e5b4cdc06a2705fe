/*
 * apps/zt_tune/results.c: the results directory. results.jsonl holds every trial's outcome as it
 * ends (an interrupted tune resumes from it); at the end the table of every candidate
 * (results.tsv and stdout), the best config (ds_config_optimal.json, DeepSpeed's name), the
 * environment and command that run it (env_optimal.sh) and a plot (autotune.png, gnuplot).
 *
 * Layer: apps/ (private to zt-tune).
 */
#include <errno.h>      /* errno */
#include <math.h>       /* isnan */
#include <stdlib.h>     /* free */
#include <string.h>     /* strcmp, strerror */
#include <sys/stat.h>   /* mkdir */
#include <unistd.h>     /* unlink */
#include "cli.h"        /* cli_run_gnuplot */
#include "tune.h"

static const char *const state_names[] = {"pending", "pruned", "predicted", "measured",
                                          "failed"};

double tune_score(const struct tune *t, const struct cand *c) {
    double ms = c->state == CAND_MEASURED ? c->meas_ms : c->pred_ms;
    if (!(ms > 0)) return -1;
    /* throughput and flops grow with samples per second: the same order for one model */
    if (t->at.metric == ZT_TUNE_LATENCY) return 1e3 / ms;
    return c->k.train_batch * 1e3 / ms;
}

/* mkdir -p */
static enum zt_status make_dirs(const char *path) {
    char p[1024];
    snprintf(p, sizeof p, "%s", path);
    for (char *s = p + 1;; s++) {
        if (*s && *s != '/') continue;
        char was = *s;
        *s = '\0';
        if (mkdir(p, 0755) != 0 && errno != EEXIST)
            return zt_error_set(ZT_ERR_IO, "%s: cannot create (%s)", p,
                                strerror(errno));
        if (!(*s = was)) break;
    }
    return ZT_OK;
}

static void results_path(const struct tune *t, const char *name, char *out, size_t n) {
    snprintf(out, n, "%s/%s", t->at.results_dir, name);
}

// ----------------------------------------------------------------------------
// results.jsonl

enum zt_status results_open(struct tune *t) {
    ZT_CHECK(make_dirs(t->at.results_dir));
    ZT_CHECK(make_dirs(t->at.exps_dir));
    char path[1100];
    results_path(t, "results.jsonl", path, sizeof path);
    t->earlier = cJSON_CreateArray();
    if (!t->earlier) return zt_error_set(ZT_ERR_NOMEM, "out of memory");
    if (t->at.overwrite && !t->resume) return unlink(path) == 0 || errno == ENOENT ? ZT_OK
        : zt_error_set(ZT_ERR_IO, "%s: cannot remove (%s)", path, strerror(errno));
    FILE *f = fopen(path, "r");
    char line[4096];
    int lineno = 0;
    while (f && fgets(line, sizeof line, f)) {
        lineno++;
        cJSON *j = cJSON_Parse(line);
        if (!cJSON_IsString(cJSON_GetObjectItemCaseSensitive(j, "key"))) {
            cJSON_Delete(j); /* a line cut by the interruption: that trial runs again */
            fprintf(stderr, "%s line %d: not a result, ignored\n", path, lineno);
            continue;
        }
        cJSON_AddItemToArray(t->earlier, j);
    }
    if (f) fclose(f);
    return ZT_OK;
}

enum zt_status results_append(struct tune *t, const struct cand *c) {
    char path[1100];
    results_path(t, "results.jsonl", path, sizeof path);
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "key", c->key);
    cJSON_AddStringToObject(j, "state", state_names[c->state]);
    cJSON_AddNumberToObject(j, "ms", isnan(c->meas_ms) ? -1 : c->meas_ms);
    cJSON_AddNumberToObject(j, "peak_mib", c->meas_peak_mib);
    cJSON_AddNumberToObject(j, "trial_s", c->trial_s);
    cJSON_AddStringToObject(j, "why", c->why);
    char *text = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    FILE *f = text ? fopen(path, "a") : NULL;
    int ok = f && fprintf(f, "%s\n", text) > 0;
    if (f && fclose(f) != 0) ok = 0;
    cJSON_free(text);
    if (!ok) return zt_error_set(ZT_ERR_IO, "%s: cannot append (%s)", path,
                                 strerror(errno));
    return ZT_OK;
}

int results_resume(struct tune *t, struct cand *c) {
    const cJSON *j;
    cJSON_ArrayForEach(j, t->earlier) {
        if (strcmp(cJSON_GetObjectItemCaseSensitive(j, "key")->valuestring, c->key)) continue;
        const cJSON *st = cJSON_GetObjectItemCaseSensitive(j, "state");
        const cJSON *why = cJSON_GetObjectItemCaseSensitive(j, "why");
        c->state = cJSON_IsString(st) && !strcmp(st->valuestring, "measured") ? CAND_MEASURED
                                                                              : CAND_FAILED;
        c->meas_ms = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(j, "ms"));
        c->meas_peak_mib = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(j, "peak_mib"));
        c->trial_s = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(j, "trial_s"));
        if (cJSON_IsString(why)) snprintf(c->why, sizeof c->why, "%s", why->valuestring);
        c->resumed = 1;
        return 1;
    }
    return 0;
}

// ----------------------------------------------------------------------------
// the table

static void offload_text(const struct knobs *k, char *out, size_t n) {
    snprintf(out, n, "%s%s%s", k->opt_dev == ZT_OFFLOAD_NONE ? "none" : "opt:",
             k->opt_dev == ZT_OFFLOAD_NONE ? "" : zt_offload_device_name(k->opt_dev),
             k->param_dev == ZT_OFFLOAD_NONE ? "" : "+param");
}

/* one row; tsv: tab-separated with every knob, else aligned for a terminal */
static void print_row(FILE *f, const struct tune *t, int i, int tsv) {
    const struct cand *c = &t->c[i];
    const struct knobs *k = &c->k;
    char off[32], pm[16] = "-", mm[16] = "-", ps[16] = "-", ms[16] = "-";
    offload_text(k, off, sizeof off);
    if (c->pred_peak > 0) snprintf(pm, sizeof pm, "%.0f", c->pred_peak / 1048576.0);
    if (c->meas_peak_mib > 0) snprintf(mm, sizeof mm, "%.0f", c->meas_peak_mib);
    if (c->pred_ms > 0) snprintf(ps, sizeof ps, "%.1f", c->pred_ms);
    if (c->state == CAND_MEASURED) snprintf(ms, sizeof ms, "%.1f", c->meas_ms);
    const char *mark = i == t->best ? "*" : "";
    if (tsv)
        fprintf(f, "%d\t%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%d\t%d\t%lld\t%lld\t%d\t%lld\t"
                   "%lld\t%d\t%d\t%lld\t%d\t%s\t%s\t%s\t%s\t%.1f\t%s\t%s\n", i, c->phase,
                state_names[c->state], k->ranks, k->stage, k->micro, k->accum,
                zt_precision_name(k->prec), off, k->sched, k->workers, k->chunks,
                (long long)k->reduce_bucket, (long long)k->allgather_bucket, k->overlap_comm,
                (long long)k->s3_max_live, (long long)k->s3_prefetch, k->opt_buffers,
                k->param_buffers, (long long)k->aio_block, k->aio_queue_depth, pm, mm, ps, ms,
                c->trial_s, c->why, mark);
    else
        fprintf(f, "%3d%-1s %-11s %-9s %5d %3dx%-3d %-4s %-15s %-5s %2dx%-2d %3d %7s %7s %8s "
                   "%8s  %s\n", i, mark, c->phase, state_names[c->state], k->stage, k->micro,
                k->accum, zt_precision_name(k->prec), off, k->sched, k->ranks, k->workers,
                k->chunks, pm, mm, ps, ms, c->why);
}

static void print_table(const struct tune *t) {
    printf("\n id  phase       state     stage micro   prec offload         sched rxw   ch "
           "pred_MiB meas_MiB  pred_ms  meas_ms  why\n");
    for (int i = 0; i < t->n; i++) print_row(stdout, t, i, 0);
}

static enum zt_status write_table(const struct tune *t) {
    char path[1100];
    if (t->dry_run) ZT_CHECK(make_dirs(t->at.results_dir)); /* results_open was not called */
    results_path(t, "results.tsv", path, sizeof path);
    FILE *f = fopen(path, "w");
    if (!f) return zt_error_set(ZT_ERR_IO, "%s: cannot create (%s)", path,
                                strerror(errno));
    fprintf(f, "id\tphase\tstate\tranks\tstage\tmicro\taccum\tprecision\toffload\tsched\tworkers\t"
               "chunks\treduce_bucket\tallgather_bucket\toverlap_comm\tmax_live\tprefetch\t"
               "opt_buffers\tparam_buffers\taio_block\taio_queue_depth\tpredicted_peak_mib\t"
               "measured_peak_mib\tpredicted_ms\tmeasured_ms\ttrial_s\twhy\tbest\n");
    for (int i = 0; i < t->n; i++) print_row(f, t, i, 1);
    if (fclose(f) != 0)
        return zt_error_set(ZT_ERR_IO, "%s: write failed (%s)", path, strerror(errno));
    if (!t->quiet) print_table(t);
    return ZT_OK;
}

// ----------------------------------------------------------------------------
// the best configuration and the plot

static enum zt_status write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    int ok = f && fputs(text, f) >= 0;
    if (f && fclose(f) != 0) ok = 0;
    if (!ok) return zt_error_set(ZT_ERR_IO, "%s: cannot write (%s)", path,
                                 strerror(errno));
    return ZT_OK;
}

static enum zt_status write_best(const struct tune *t) {
    const struct knobs *k = &t->c[t->best].k;
    char path[1100], env[4096];
    results_path(t, "ds_config_optimal.json", path, sizeof path);
    cJSON *js = knobs_config(t, k, 0);
    char *text = js ? cJSON_Print(js) : NULL;
    cJSON_Delete(js);
    if (!text) return zt_error_set(ZT_ERR_NOMEM, "out of memory");
    size_t len = strlen(text);
    enum zt_status rc = ZT_OK;
    char *withnl = malloc(len + 2);
    if (!withnl) rc = zt_error_set(ZT_ERR_NOMEM, "out of memory");
    else memcpy(withnl, text, len), memcpy(withnl + len, "\n", 2), rc = write_text(path, withnl);
    free(withnl);
    cJSON_free(text);
    ZT_CHECK(rc);
    char launch[512] = "";
    if (k->ranks > 1)
        snprintf(launch, sizeof launch, "mpirun -np %d -x STARPU_SCHED -x STARPU_NCPU "
                 "-x ZT_GRAPH_CHUNKS ", k->ranks);
    snprintf(env, sizeof env, "# zt-tune's best configuration: source this file, then run the "
             "command below\nexport STARPU_SCHED=%s\nexport STARPU_NCPU=%d\n"
             "export ZT_GRAPH_CHUNKS=%d\n# %szt-train --ds-config %s --model %s --data %s\n",
             k->sched, k->workers, k->chunks, launch, path, t->model, t->data);
    results_path(t, "env_optimal.sh", path, sizeof path);
    return write_text(path, env);
}

/* autotune.png: every measured or predicted candidate's step time against its predicted
 * peak memory, the budget as a line, the best one marked */
static enum zt_status write_plot(const struct tune *t) {
    char dat[1100], gp[1100], png[1100];
    results_path(t, "autotune.dat", dat, sizeof dat);
    results_path(t, "autotune.gp", gp, sizeof gp);
    results_path(t, "autotune.png", png, sizeof png);
    const double budget = tune_budget(t, &t->c[t->best].k) / 1048576.0;
    FILE *d = fopen(dat, "w"), *g = fopen(gp, "w");
    if (!d || !g) {
        if (d) fclose(d);
        if (g) fclose(g);
        return zt_error_set(ZT_ERR_IO, "%s: cannot write (%s)", dat, strerror(errno));
    }
    for (int kind = 0; kind < 3; kind++) { /* blocks: measured, predicted, the best */
        for (int i = 0; i < t->n; i++) {
            const struct cand *c = &t->c[i];
            int in = kind == 0 ? c->state == CAND_MEASURED
                     : kind == 1 ? c->state == CAND_PREDICTED : i == t->best;
            if (in)
                fprintf(d, "%.1f %.2f\n", c->pred_peak / 1048576.0,
                        c->state == CAND_MEASURED ? c->meas_ms : c->pred_ms);
        }
        fprintf(d, "\n\n");
    }
    fclose(d);
    fprintf(g, "set terminal pngcairo size 900,600\nset output '%s'\n"
               "set title 'zt-tune: step time against predicted peak memory per rank'\n"
               "set xlabel 'predicted peak memory per rank (MiB)'\nset ylabel 'step time (ms)'\n"
               "set arrow from %.1f, graph 0 to %.1f, graph 1 nohead dt 2 lc rgb 'red'\n"
               "set key outside bottom center horizontal\nset grid\n"
               "plot '%s' index 0 with points pt 7 lc rgb '#1f77b4' title 'measured', "
               "'' index 1 with points pt 6 lc rgb '#7f7f7f' title 'predicted (replay)', "
               "'' index 2 with points pt 3 ps 3 lc rgb '#d62728' title 'best', "
               "1/0 with lines dt 2 lc rgb 'red' title 'budget'\n", png, budget, budget, dat);
    fclose(g);
    enum zt_status rc = cli_run_gnuplot(gp);
    unlink(dat);
    unlink(gp);
    return rc;
}

enum zt_status results_write(struct tune *t) {
    ZT_CHECK(write_table(t));
    if (t->best < 0) return ZT_OK;
    ZT_CHECK(write_best(t));
    if (write_plot(t) != ZT_OK) /* the results stand without the picture */
        fprintf(stderr, "warning: no plot: %s\n", zt_error_last());
    return ZT_OK;
}
