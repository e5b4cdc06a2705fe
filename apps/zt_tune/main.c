/*
 * apps/zt_tune/main.c: zt-tune, the autotuner: the fastest configuration of a zt-train job that
 * fits a memory budget, from the memory model, short measured trials and zt-trace replay,
 * written as a ready DeepSpeed config and the environment it needs.
 *
 * Layer: apps/ (private to zt-tune). A tune is parse -> inputs -> the micro-batch phase (ZeRO
 * stage x placement x precision x micro-batch, pruned by the memory model, measured) -> the
 * replay phase (scheduler policy and workers per rank of the best, predicted by replaying its
 * trace; the best prediction measured) -> the refinement (autotuning.fast false: one knob at a
 * time, measured) -> the results. Errors: one line "error: <message>"; exit 2 for a bad
 * command line, config or budget, 1 otherwise.
 */
#include <stdlib.h>   /* free, malloc */
#include <string.h>   /* strcmp, strrchr */
#include <unistd.h>   /* sysconf, readlink, access */
#include "cli.h"      /* options, errors, cli_mem_available */
#include "tune.h"
#include "zt_clock.h" /* zt_clock_ms */
#include "zt_file.h"  /* zt_file_read_all */

static const char *usage_text =
    "usage: zt-tune --ds-config F --model F --data F [options]\n"
    "\n"
    "Find the fastest configuration of a zt-train job that fits in memory, and write it as a\n"
    "DeepSpeed config: the memory model prunes what would not fit, short traced trials measure\n"
    "ZeRO stage x micro-batch x offload placement, zt-trace replay predicts the scheduler policy\n"
    "and workers per rank around the best one, and with autotuning.fast false the buckets,\n"
    "overlap, stage-3 windows, offload buffer counts, aio and ZT_GRAPH_CHUNKS are measured one\n"
    "at a time.\n"
    "\n"
    "The config's \"autotuning\" section (DeepSpeed's keys): fast, metric throughput|latency|\n"
    "flops, tuner_type gridsearch|random|model_based, tuner_num_trials, tuner_early_stopping,\n"
    "max_train_batch_size (unset: the global batch stays fixed), min_train_batch_size,\n"
    "max/min_train_micro_batch_size_per_gpu, num_tuning_micro_batch_sizes, start_profile_step,\n"
    "end_profile_step, results_dir, exps_dir, overwrite (false: reuse earlier results).\n"
    "\n"
    "options:\n"
    "  --ranks N|auto       data-parallel ranks, started with mpirun (default 1); auto: every\n"
    "                       split of the cores into ranks x workers that divides the batch\n"
    "  --memory-budget S    host memory per rank (bytes, or K/M/G; default: the memory\n"
    "                       available now divided by the ranks); nothing predicted above it runs\n"
    "  --nvme-path D        a directory on a fast disk: adds optimizer and parameter offload to\n"
    "                       NVMe to the space (else the config's offload nvme_path, if any)\n"
    "  --allow-precision    also try bf16 (or fp32 for a bf16 config): changes the numerics\n"
    "  --seed S             the random tuner's order (default: the config's seed)\n"
    "  --results-dir D      overrides autotuning.results_dir;  --exps-dir D  autotuning.exps_dir\n"
    "  --resume             reuse the results in the results directory (as overwrite false)\n"
    "  --trial-timeout S    seconds a trial may run (default 900)\n"
    "  --mpirun P           Open MPI's mpirun for several ranks (default: mpirun on PATH)\n"
    "  --dry-run            the space and the memory model's verdicts (stdout, results.tsv),\n"
    "                       nothing run\n"
    "  --quiet              no progress lines and no table (the files are written)\n"
    "\n"
    "Outputs in the results directory: ds_config_optimal.json, env_optimal.sh (STARPU_SCHED,\n"
    "STARPU_NCPU, ZT_GRAPH_CHUNKS and the command), results.tsv (every candidate: predicted and\n"
    "measured step time and peak memory, why each one not run was not), results.jsonl (the\n"
    "trials, for --resume), autotune.png (needs gnuplot). Each trial's config, output, log and\n"
    "trace: EXPS_DIR/expNNN-HASH/ (the table's id, the configuration's hash).\n"
    "Interrupted (Ctrl-C, SIGTERM), it stops the running trial and exits 130; --resume then\n"
    "goes on from the trials done.\n"
    "Exit status: 0 ok, 2 bad command line, config or budget, 130 interrupted, 1 any other\n"
    "error.\n";

static const struct cli_program g_cli = {.name = "zt-tune", .error_prefix = "zt-tune",
                                         .print_errors = 1};

// ----------------------------------------------------------------------------
// the command line and the inputs

struct options {
    const char *results_dir, *exps_dir, *budget, *ranks;
    int64_t seed, timeout;
};

static int parse_options(struct tune *t, struct options *o, int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int rc = 0;
        const char **text = !strcmp(a, "--ds-config")     ? &t->ds_config
                            : !strcmp(a, "--model")       ? &t->model
                            : !strcmp(a, "--data")        ? &t->data
                            : !strcmp(a, "--nvme-path")   ? &t->nvme_path
                            : !strcmp(a, "--results-dir") ? &o->results_dir
                            : !strcmp(a, "--exps-dir")    ? &o->exps_dir
                            : !strcmp(a, "--memory-budget") ? &o->budget
                            : !strcmp(a, "--mpirun")      ? &t->mpirun
                            : !strcmp(a, "--ranks")       ? &o->ranks : NULL;
        int64_t *num = !strcmp(a, "--seed") ? &o->seed
                       : !strcmp(a, "--trial-timeout") ? &o->timeout : NULL;
        if (text) rc = cli_string_option(&g_cli, argc, argv, &i, text);
        else if (num) rc = cli_int_option(&g_cli, argc, argv, &i, num == &o->seed ? 0 : 1, num);
        else if (!strcmp(a, "--allow-precision")) t->allow_precision = 1;
        else if (!strcmp(a, "--resume")) t->resume = 1;
        else if (!strcmp(a, "--dry-run")) t->dry_run = 1;
        else if (!strcmp(a, "--quiet")) t->quiet = 1;
        else rc = cli_usage_error(&g_cli, "unknown option '%s'", a);
        if (rc) return rc;
    }
    if (o->timeout > 7 * 86400)
        return cli_usage_error(&g_cli, "--trial-timeout %lld: at most a week (604800 s)",
                               (long long)o->timeout);
    if (!t->ds_config) return cli_usage_error(&g_cli, "missing %s", "--ds-config");
    if (!t->model) return cli_usage_error(&g_cli, "missing %s", "--model");
    if (!t->data) return cli_usage_error(&g_cli, "missing %s", "--data");
    char *end = NULL;
    long ranks = strcmp(o->ranks, "auto") ? strtol(o->ranks, &end, 10) : 0;
    if (end && (*end || ranks < 1 || ranks > 4096))
        return cli_usage_error(&g_cli, "--ranks %s: expected 1 to 4096 or auto", o->ranks);
    t->ranks = (int)ranks;
    if (o->budget && (zt_size_parse(o->budget, &t->budget) != 0 || t->budget <= 0))
        return cli_usage_error(&g_cli, "--memory-budget %s: expected a size in bytes, like "
                               "800M or 2G", o->budget);
    return 0;
}

/* the program beside this one (the build or install directory), else the name for PATH */
static const char *sibling(const char *name, char *buf, size_t n) {
    char self[4096];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len > 0) {
        self[len] = '\0';
        char *slash = strrchr(self, '/');
        if (slash) {
            *slash = '\0';
            snprintf(buf, n, "%s/%s", self, name);
            if (access(buf, X_OK) == 0) return buf;
        }
    }
    return name;
}

/* The user's config: its JSON (t->user) and its values (t->cfg). The tuner chooses the
 * micro-batch and accumulation, so with a train_batch_size only that is resolved (the user's
 * split need not suit the ranks tried); the accumulation is kept for max_train_batch_size. */
static enum zt_status load_config(struct tune *t) {
    char *text = NULL;
    size_t len = 0;
    if (zt_file_read_all(t->ds_config, 64u << 20, &text, &len) != 0 ||
        !(t->user = cJSON_Parse(text))) {
        free(text); /* zt_config_load says what is wrong with it */
        return zt_config_load(&t->cfg, t->ds_config, 1) == ZT_OK
                   ? zt_error_set(ZT_ERR_CONFIG, "config %s: cannot read it", t->ds_config)
                   : zt_error_last_code();
    }
    free(text);
    cJSON *base = cJSON_Duplicate(t->user, 1);
    const cJSON *acc = cJSON_GetObjectItemCaseSensitive(t->user, "gradient_accumulation_steps");
    if (base && cJSON_GetObjectItemCaseSensitive(base, "train_batch_size")) {
        cJSON_DeleteItemFromObjectCaseSensitive(base, "train_micro_batch_size_per_gpu");
        cJSON_DeleteItemFromObjectCaseSensitive(base, "gradient_accumulation_steps");
    }
    char *json = base ? cJSON_PrintUnformatted(base) : NULL;
    cJSON_Delete(base);
    if (!json) return zt_error_set(ZT_ERR_NOMEM, "out of memory");
    /* auto: the batch rule as on one rank; each rank count tried divides the global batch */
    enum zt_status rc = zt_config_parse(&t->cfg, json, t->ds_config, t->ranks ? t->ranks : 1);
    cJSON_free(json);
    if (rc == ZT_OK && cJSON_IsNumber(acc) && acc->valueint >= 1)
        t->cfg.grad_accum = acc->valueint;
    return rc;
}

/* config (its raw JSON too), model, token file; the options over the autotuning section */
static int load_inputs(struct tune *t, const struct options *o) {
    const char *sched = getenv("STARPU_SCHED");
    if (sched && strlen(sched) >= sizeof t->c[0].k.sched)
        return cli_usage_error(&g_cli, "STARPU_SCHED=%s: not a policy name", sched);
    if (load_config(t) != ZT_OK)
        return cli_fail(&g_cli, zt_error_last_code() == ZT_ERR_IO ? 1 : 2);
    t->at = t->cfg.autotune;
    if (o->results_dir) snprintf(t->at.results_dir, sizeof t->at.results_dir, "%s",
                                 o->results_dir);
    if (o->exps_dir) snprintf(t->at.exps_dir, sizeof t->at.exps_dir, "%s", o->exps_dir);
    t->seed = o->seed >= 0 ? (uint64_t)o->seed : t->cfg.seed;
    t->trial_timeout_s = (int)o->timeout;
    if (!t->nvme_path && t->cfg.offload_optimizer.device == ZT_OFFLOAD_NVME)
        t->nvme_path = t->cfg.offload_optimizer.nvme_path;
    if (zt_model_shape_load(&t->shape, t->model) != ZT_OK) return cli_fail(&g_cli, 2);
    struct zt_tokens tok;
    if (zt_tokens_open(&tok, t->data, t->shape.vocab_size) != ZT_OK) return cli_fail(&g_cli, 1);
    zt_tokens_close(&tok);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    t->cores = cores > 0 ? (int)cores : 1;
    t->machine_mem = cli_mem_available();
    return 0;
}

// ----------------------------------------------------------------------------
// measuring a candidate

static int is_better(const struct tune *t, int i) {
    return t->c[i].state == CAND_MEASURED &&
           (t->best < 0 || tune_score(t, &t->c[i]) > tune_score(t, &t->c[t->best]));
}

static void print_trial(const struct tune *t, int i) {
    const struct cand *c = &t->c[i];
    char what[256];
    knobs_describe(&c->k, what, sizeof what);
    if (c->state == CAND_MEASURED)
        printf("[%d/%d] exp%03d %s: %.1f ms/step, %.1f samples/s, peak %.0f MiB (predicted "
               "%.0f)%s%s\n", t->trials, t->at.tuner_num_trials, i, what, c->meas_ms,
               c->k.train_batch * 1e3 / c->meas_ms, c->meas_peak_mib, c->pred_peak / 1048576.0,
               c->resumed ? " [resumed]" : "", i == t->best ? " [best]" : "");
    else
        printf("[%d/%d] exp%03d %s: failed: %s%s\n", t->trials, t->at.tuner_num_trials, i,
               what, c->why, c->resumed ? " [resumed]" : "");
    fflush(stdout);
}

/* Run candidate i (or take its earlier result); the best and the early-stopping count follow.
 * A candidate predicted above the budget is never run. */
static enum zt_status measure(struct tune *t, int i) {
    struct cand *c = &t->c[i];
    if (trial_interrupted())
        return zt_error_set(ZT_ERR_INVALID, "interrupted; --resume goes on from the trials "
                            "done");
    if (!cand_fits(t, c))
        return zt_error_set(ZT_ERR_INVALID, "exp%03d is predicted above the budget",
                            i);
    int resumed = results_resume(t, c);
    if (resumed)
        t->trials++;
    else
        ZT_CHECK(trial_measure(t, c, i));
    /* the model's margin should make this impossible: if it happens, the run did not fit */
    const int64_t budget = tune_budget(t, &c->k);
    if (c->state == CAND_MEASURED && c->meas_peak_mib * 1048576.0 > (double)budget) {
        c->state = CAND_FAILED;
        snprintf(c->why, sizeof c->why, "measured peak %.1f MiB above the budget %.1f MiB "
                 "(predicted %.1f)", c->meas_peak_mib, budget / 1048576.0,
                 c->pred_peak / 1048576.0);
    }
    if (!resumed) ZT_CHECK(results_append(t, c));
    if (is_better(t, i)) {
        t->best = i;
        t->since_best = 0;
    } else {
        t->since_best++;
    }
    if (!t->quiet) print_trial(t, i);
    return ZT_OK;
}

/* whether the trial budget or early stopping ends the search; why in c's note */
static int must_stop(const struct tune *t, struct cand *c) {
    if (t->trials >= t->at.tuner_num_trials) {
        snprintf(c->why, sizeof c->why, "not run: %d trials done "
                 "(autotuning.tuner_num_trials)", t->trials);
        return 1;
    }
    if (t->best >= 0 && t->since_best >= t->at.tuner_early_stopping) {
        snprintf(c->why, sizeof c->why, "not run: early stopping after %d trials without a "
                 "better one (autotuning.tuner_early_stopping)", t->since_best);
        return 1;
    }
    return 0;
}

/* measure the pending candidates of order[0..n) in turn, until a stop rule */
static enum zt_status measure_in_order(struct tune *t, const int *order, int n) {
    for (int j = 0; j < n; j++) {
        struct cand *c = &t->c[order[j]];
        if (c->state != CAND_PENDING) continue;
        if (must_stop(t, c)) {
            c->state = CAND_PRUNED;
            continue;
        }
        ZT_CHECK(measure(t, order[j]));
    }
    return ZT_OK;
}

// ----------------------------------------------------------------------------
// the phases

static int same_class(const struct knobs *a, const struct knobs *b) {
    return a->ranks == b->ranks && a->workers == b->workers && a->stage == b->stage &&
           a->opt_dev == b->opt_dev && a->param_dev == b->param_dev && a->prec == b->prec;
}

/* the measured probe of c's class among probes[0..np), else -1 */
static int class_probe(const struct tune *t, const struct cand *c, const int *probes, int np) {
    for (int q = 0; q < np; q++)
        if (same_class(&t->c[probes[q]].k, &c->k) && t->c[probes[q]].state == CAND_MEASURED)
            return probes[q];
    return -1;
}

/* model_based: each class's largest micro-batch first (a probe, never cut by early stopping);
 * then the other micro-batch sizes of the classes whose probe came within 5% of the best */
static enum zt_status model_based(struct tune *t, int *order, int n) {
    int probes[256], np = 0;
    for (int j = 0; j < n && np < 256; j++) {
        int seen = 0;
        for (int q = 0; q < np && !seen; q++)
            seen = same_class(&t->c[probes[q]].k, &t->c[order[j]].k);
        if (!seen) probes[np++] = order[j];
    }
    int patience = t->at.tuner_early_stopping;
    t->at.tuner_early_stopping = np + 1;
    enum zt_status rc = measure_in_order(t, probes, np);
    t->at.tuner_early_stopping = patience;
    t->since_best = 0;
    ZT_CHECK(rc);
    if (t->best < 0) return ZT_OK;
    const double best = tune_score(t, &t->c[t->best]);
    for (int j = 0; j < n; j++) {
        struct cand *c = &t->c[order[j]];
        int p = class_probe(t, c, probes, np);
        if (c->state != CAND_PENDING || (p >= 0 && tune_score(t, &t->c[p]) * 1.05 >= best))
            continue;
        if (p >= 0)
            snprintf(c->why, sizeof c->why, "not run (model_based): its class's probe exp%03d "
                     "scored %.0f%% below the best", p,
                     100.0 * (1 - tune_score(t, &t->c[p]) / best));
        else
            snprintf(c->why, sizeof c->why, "not run (model_based): its class's probe failed or "
                     "did not run");
        c->state = CAND_PRUNED;
    }
    return measure_in_order(t, order, n);
}

/* a reproducible shuffle (splitmix64 of the seed) */
static void shuffle(int *a, int n, uint64_t seed) {
    for (int i = n - 1; i > 0; i--) {
        uint64_t z = (seed += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        int j = (int)((z ^ (z >> 31)) % (uint64_t)(i + 1));
        int x = a[i];
        a[i] = a[j], a[j] = x;
    }
}

/* no candidate fits: the smallest one and by how much */
static enum zt_status budget_error(const struct tune *t) {
    int small = -1;
    for (int i = 0; i < t->n; i++)
        if (t->c[i].pred_peak > 0 && (small < 0 || t->c[i].pred_peak < t->c[small].pred_peak))
            small = i;
    if (small < 0) return zt_error_set(ZT_ERR_CONFIG, "no valid candidate (first: %s)",
                                       t->n ? t->c[0].why : "none");
    char what[256];
    knobs_describe(&t->c[small].k, what, sizeof what);
    return zt_error_set(ZT_ERR_CONFIG, "--memory-budget %.1f MiB per rank: below the smallest "
                        "candidate's predicted peak, %.1f MiB with the model's margin (%s); "
                        "raise the budget, add --nvme-path to offload, or use more ranks",
                        tune_budget(t, &t->c[small].k) / 1048576.0,
                        t->c[small].pred_peak * TUNE_MEMORY_MARGIN / 1048576.0, what);
}

static enum zt_status micro_batch_phase(struct tune *t) {
    int *order = malloc((size_t)t->n * sizeof *order), n = 0;
    if (!order) return zt_error_set(ZT_ERR_NOMEM, "out of memory");
    for (int i = 0; i < t->n; i++)
        if (t->c[i].state == CAND_PENDING) order[n++] = i;
    enum zt_status rc = ZT_OK;
    if (t->at.tuner_type == ZT_TUNER_RANDOM) shuffle(order, n, t->seed);
    if (t->at.tuner_type == ZT_TUNER_MODEL_BASED) rc = model_based(t, order, n);
    else rc = measure_in_order(t, order, n);
    free(order);
    return rc;
}

/* Predict the best one's scheduler and worker neighbours by replay; measure the best
 * prediction when it promises more than 2%; again from a new best. */
static enum zt_status replay_round(struct tune *t, int b, int *nb, int *top) {
    int n = space_replay_neighbours(t, b, nb, 4 * t->cores);
    *top = -1;
    for (int j = 0; j < n; j++) {
        struct cand *c = &t->c[nb[j]];
        if (c->state == CAND_PENDING) ZT_CHECK(trial_replay(t, c, b));
        if (c->state == CAND_PREDICTED &&
            (*top < 0 || tune_score(t, c) > tune_score(t, &t->c[*top])))
            *top = nb[j];
    }
    return ZT_OK;
}

static enum zt_status replay_phase(struct tune *t) {
    int *nb = malloc((size_t)(4 * t->cores) * sizeof *nb), top = -1; /* policies x workers */
    if (!nb) return zt_error_set(ZT_ERR_NOMEM, "out of memory");
    enum zt_status rc = ZT_OK;
    for (int round = 0; round < 4 && rc == ZT_OK; round++) {
        int b = t->best;
        rc = replay_round(t, b, nb, &top);
        if (rc != ZT_OK || top < 0 ||
            tune_score(t, &t->c[top]) < 1.02 * tune_score(t, &t->c[b]) ||
            must_stop(t, &t->c[top]))
            break;
        rc = measure(t, top);
        if (rc != ZT_OK || t->best == b) break;
    }
    free(nb);
    return rc;
}

/* autotuning.fast false: one knob at a time around the best, measured, while it improves */
static enum zt_status refine_phase(struct tune *t) {
    for (;;) {
        int b = t->best, nb[64], n = space_refine_neighbours(t, b, nb, 64);
        ZT_CHECK(measure_in_order(t, nb, n));
        if (t->best == b) return ZT_OK;
    }
}

static void print_header(const struct tune *t) {
    int pending = 0, pruned = 0;
    for (int i = 0; i < t->n; i++) pending += t->c[i].state == CAND_PENDING,
                                   pruned += t->c[i].state == CAND_PRUNED;
    char ranks[32], budget[64];
    snprintf(ranks, sizeof ranks, t->ranks ? "%d rank(s)" : "auto ranks", t->ranks);
    if (t->budget) snprintf(budget, sizeof budget, "%.0f MiB per rank", t->budget / 1048576.0);
    else snprintf(budget, sizeof budget, "%.0f MiB / ranks", t->machine_mem / 1048576.0);
    printf("zt-tune: %s | %s on %d cores | budget %s | tuner %s, metric %s, %s | %d "
           "candidates: %d to try, %d pruned before running\n", t->ds_config, ranks, t->cores,
           budget, zt_tuner_type_name(t->at.tuner_type), zt_tune_metric_name(t->at.metric),
           t->at.fast ? "fast" : "full", t->n, pending, pruned);
    fflush(stdout);
}

static void print_best(const struct tune *t) {
    const struct cand *c = &t->c[t->best];
    char what[256];
    knobs_describe(&c->k, what, sizeof what);
    printf("\nbest: exp%03d %s: %.1f ms/step (%.1f samples/s), peak %.0f MiB per rank\n"
           "wrote %s/ds_config_optimal.json, env_optimal.sh, results.tsv, autotune.png\n"
           "tuning took %.1f s: %d trials measured\n", t->best, what, c->meas_ms,
           c->k.train_batch * 1e3 / c->meas_ms, c->meas_peak_mib, t->at.results_dir,
           (zt_clock_ms() - t->t0_ms) / 1e3, t->trials);
}

static enum zt_status run_tune(struct tune *t) {
    t->t0_ms = zt_clock_ms();
    ZT_CHECK(space_micro_batch(t));
    int pending = 0;
    for (int i = 0; i < t->n; i++) pending += t->c[i].state == CAND_PENDING;
    if (!t->quiet) print_header(t);
    if (!pending) return budget_error(t);
    if (t->dry_run) return results_write(t);
    ZT_CHECK(results_open(t));
    ZT_CHECK(micro_batch_phase(t));
    if (t->best < 0) {
        for (int i = 0; i < t->n; i++)
            if (t->c[i].state == CAND_FAILED)
                return zt_error_set(ZT_ERR_INVALID, "no trial succeeded; exp%03d: %s",
                                    i, t->c[i].why);
        return zt_error_set(ZT_ERR_INVALID, "no trial ran");
    }
    t->since_best = 0;
    ZT_CHECK(replay_phase(t));
    t->since_best = 0;
    if (!t->at.fast) ZT_CHECK(refine_phase(t));
    if (trial_interrupted())
        return zt_error_set(ZT_ERR_INVALID, "interrupted; --resume goes on from the trials "
                            "done");
    ZT_CHECK(results_write(t));
    if (!t->quiet) print_best(t);
    return ZT_OK;
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (cli_is_help(argv[i])) {
            fputs(usage_text, stdout);
            return 0;
        }
    char train[4200], trace[4200];
    struct tune t = {.best = -1, .mpirun = "mpirun"};
    struct options o = {.ranks = "1", .seed = -1, .timeout = 900};
    t.zt_train = sibling("zt-train", train, sizeof train);
    t.zt_trace = sibling("zt-trace", trace, sizeof trace);
    trial_catch_interrupts();
    int code = parse_options(&t, &o, argc, argv);
    if (!code && zt_knobs_check() != ZT_OK) code = cli_fail(&g_cli, 2);
    if (!code) code = load_inputs(&t, &o);
    if (!code && run_tune(&t) != ZT_OK)
        code = cli_fail(&g_cli, trial_interrupted() ? 130
                                : zt_error_last_code() == ZT_ERR_CONFIG ? 2 : 1);
    cJSON_Delete(t.user);
    cJSON_Delete(t.earlier);
    free(t.c);
    return code;
}
