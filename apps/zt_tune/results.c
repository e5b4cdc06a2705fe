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
#include <sys/stat.h>   /* stat */
#include <unistd.h>     /* unlink */
#include "cli.h"        /* cli_run_gnuplot */
#include "zt_file.h"    /* zt_file_mkdirs */
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

static enum zt_status make_dirs(const char *path) {
    if (zt_file_mkdirs(path, 0755) != 0)
        return zt_error_set(ZT_ERR_IO, "%s: cannot create (%s)", path, strerror(errno));
    return ZT_OK;
}

static void results_path(const struct tune *t, const char *name, char *out, size_t n) {
    snprintf(out, n, "%s/%s", t->at.results_dir, name);
}

// ----------------------------------------------------------------------------
// results.jsonl

/* What makes two tunes' trials the same measurement: the config (its autotuning section
 * aside), the model, the data file, the NVMe directory, the profiled steps, the cores and the
 * zt-train they ran. An earlier results.jsonl with another fingerprint is not resumed. */
static uint64_t fingerprint(const struct tune *t) {
    cJSON *cfg = cJSON_Duplicate(t->user, 1);
    cJSON_DeleteItemFromObjectCaseSensitive(cfg, "autotuning");
    char *text = cfg ? cJSON_PrintUnformatted(cfg) : NULL;
    cJSON_Delete(cfg);
    uint64_t h = text ? zt_hash_bytes(0, text, strlen(text)) : 0;
    cJSON_free(text);
    struct stat st;
    int64_t data_size = stat(t->data, &st) == 0 ? (int64_t)st.st_size : -1;
    const int64_t v[] = {t->shape.vocab_size, t->shape.seq_len, t->shape.n_embd,
                         t->shape.n_layer, t->shape.n_head, data_size,
                         t->at.start_profile_step, t->at.end_profile_step, t->cores};
    h = zt_hash_bytes(h, v, sizeof v);
    const char *s[] = {t->data, t->nvme_path ? t->nvme_path : "", t->zt_train};
    for (int i = 0; i < 3; i++) h = zt_hash_bytes(h, s[i], strlen(s[i]) + 1);
    return h;
}

/* Read an earlier results.jsonl into t->earlier: its first line must carry this tune's
 * fingerprint (else ZT_ERR_CONFIG); a line cut by an interruption is skipped (that trial runs
 * again). */
static enum zt_status load_earlier(struct tune *t, const char *path, const char *mark) {
    FILE *f = fopen(path, "r");
    char line[8192];
    for (int lineno = 1; f && fgets(line, sizeof line, f); lineno++) {
        cJSON *j = cJSON_Parse(line);
        const cJSON *tune = cJSON_GetObjectItemCaseSensitive(j, "tune");
        if (lineno == 1 && !(cJSON_IsString(tune) && !strcmp(tune->valuestring, mark))) {
            cJSON_Delete(j);
            fclose(f);
            return zt_error_set(ZT_ERR_CONFIG, "%s: the results of another tune (its config, "
                                "model, data, NVMe path, profiled steps or cores differ): "
                                "give another results_dir, or overwrite them", path);
        }
        if (lineno > 1 && cJSON_IsString(cJSON_GetObjectItemCaseSensitive(j, "key")))
            cJSON_AddItemToArray(t->earlier, j);
        else
            cJSON_Delete(j);
    }
    if (f) fclose(f);
    return ZT_OK;
}

enum zt_status results_open(struct tune *t) {
    ZT_CHECK(make_dirs(t->at.results_dir));
    ZT_CHECK(make_dirs(t->at.exps_dir));
    char path[1100], mark[32];
    results_path(t, "results.jsonl", path, sizeof path);
    snprintf(mark, sizeof mark, "%016llx", (unsigned long long)fingerprint(t));
    t->earlier = cJSON_CreateArray();
    if (!t->earlier) return zt_error_set(ZT_ERR_NOMEM, "out of memory");
    int fresh = t->at.overwrite && !t->resume;
    if (!fresh) ZT_CHECK(load_earlier(t, path, mark));
    if (!fresh && cJSON_GetArraySize(t->earlier) > 0) return ZT_OK;
    FILE *f = fopen(path, "w"); /* a new file: its fingerprint first */
    int ok = f && fprintf(f, "{\"tune\": \"%s\"}\n", mark) > 0;
    if (f && fclose(f) != 0) ok = 0;
    if (!ok) return zt_error_set(ZT_ERR_IO, "%s: cannot write (%s)", path, strerror(errno));
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
    cJSON_AddStringToObject(j, "dir", c->dir);
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
        const cJSON *dir = cJSON_GetObjectItemCaseSensitive(j, "dir");
        if (cJSON_IsString(why)) snprintf(c->why, sizeof c->why, "%s", why->valuestring);
        if (cJSON_IsString(dir)) snprintf(c->dir, sizeof c->dir, "%s", dir->valuestring);
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
                   "%lld\t%d\t%d\t%lld\t%d\t%s\t%s\t%s\t%s\t%.1f\t%s\t%s\t%s\n", i, c->phase,
                state_names[c->state], k->ranks, k->stage, k->micro, k->accum,
                zt_precision_name(k->prec), off, k->sched, k->workers, k->chunks,
                (long long)k->reduce_bucket, (long long)k->allgather_bucket, k->overlap_comm,
                (long long)k->s3_max_live, (long long)k->s3_prefetch, k->opt_buffers,
                k->param_buffers, (long long)k->aio_block, k->aio_queue_depth, pm, mm, ps, ms,
                c->trial_s, c->dir, c->why, mark);
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
               "measured_peak_mib\tpredicted_ms\tmeasured_ms\ttrial_s\tdir\twhy\tbest\n");
    for (int i = 0; i < t->n; i++) print_row(f, t, i, 1);
    if (fclose(f) != 0)
        return zt_error_set(ZT_ERR_IO, "%s: write failed (%s)", path, strerror(errno));
    if (!t->quiet) print_table(t);
    return ZT_OK;
}

// ----------------------------------------------------------------------------
// the best configuration and the plot

/* text then tail into path */
static enum zt_status write_text(const char *path, const char *text, const char *tail) {
    FILE *f = fopen(path, "w");
    int ok = f && fputs(text, f) >= 0 && fputs(tail, f) >= 0;
    if (f && fclose(f) != 0) ok = 0;
    if (!ok) return zt_error_set(ZT_ERR_IO, "%s: cannot write (%s)", path, strerror(errno));
    return ZT_OK;
}

/* s as one shell word: in single quotes, a quote inside written '\'' */
static void shell_word(char *out, size_t n, const char *s) {
    size_t at = 0;
    out[at++] = '\'';
    for (; *s && at + 6 < n; s++) {
        if (*s == '\'') {
            memcpy(out + at, "'\\''", 4);
            at += 4;
        } else {
            out[at++] = *s;
        }
    }
    out[at++] = '\'';
    out[at] = '\0';
}

static enum zt_status write_best(const struct tune *t) {
    const struct knobs *k = &t->c[t->best].k;
    char path[1100], env[8192], cfg[2300], model[2300], data[2300], launch[128] = "";
    results_path(t, "ds_config_optimal.json", path, sizeof path);
    cJSON *js = knobs_config(t, k, 0);
    char *text = js ? cJSON_Print(js) : NULL;
    cJSON_Delete(js);
    if (!text) return zt_error_set(ZT_ERR_NOMEM, "out of memory");
    enum zt_status rc = write_text(path, text, "\n");
    cJSON_free(text);
    ZT_CHECK(rc);
    if (k->ranks > 1)
        snprintf(launch, sizeof launch, "mpirun -np %d -x STARPU_SCHED -x STARPU_NCPU "
                 "-x ZT_GRAPH_CHUNKS ", k->ranks);
    shell_word(cfg, sizeof cfg, path);
    shell_word(model, sizeof model, t->model);
    shell_word(data, sizeof data, t->data);
    snprintf(env, sizeof env, "# zt-tune's best configuration: source this file, then run the "
             "command below\nexport STARPU_SCHED=%s\nexport STARPU_NCPU=%d\n"
             "export ZT_GRAPH_CHUNKS=%d\n# %szt-train --ds-config %s --model %s --data %s\n",
             k->sched, k->workers, k->chunks, launch, cfg, model, data);
    results_path(t, "env_optimal.sh", path, sizeof path);
    return write_text(path, env, "");
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
