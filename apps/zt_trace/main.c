/*
 * apps/zt_trace/main.c: zt-trace's command line: help, options, loading the traces and
 * dispatching to a command.
 *
 * Layer: apps/ (zt-trace). zt-trace reads the trace zt-train --trace F.json writes (the replay
 * file F.ztr beside the JSON; docs/traces.md): where the time of each step went (summary), what
 * the step would take with other workers, policies, bandwidths or rank counts (replay),
 * pictures (plot), a scale-out projection (project) and pipeline layouts (pipeline). It
 * needs no runtime (no StarPU, no MPI): it reads the file. Errors: the rooms report through
 * zt_error_set, and main prints exactly one line "zt-trace: error: ..." on stderr; exit 2 for
 * a bad command line, 1 for anything else (a damaged trace included).
 */
#include <errno.h>    /* errno */
#include <stdio.h>    /* printf, fputs */
#include <stdlib.h>   /* strtod, free */
#include <string.h>   /* strcmp, strdup, strtok_r */
#include "zt_trace.h" /* the commands */

static const char *usage_text =
    "usage: zt-trace COMMAND TRACE [options]\n"
    "\n"
    "TRACE is what zt-train --trace F.json wrote: F.json or the replay file F.ztr beside it\n"
    "(either name reads F.ztr; docs/traces.md).\n"
    "\n"
    "  summary TRACE [--json]\n"
    "      per step and rank: span, time in compute (data loading and the recompute of\n"
    "      activation checkpointing included; the recompute also alone), communication, swap\n"
    "      and checkpoint tasks, idle time per worker, the critical path (its length, tasks\n"
    "      and kinds) and the fraction of communication and swap time hidden behind compute\n"
    "  replay TRACE [--workers N] [--policy P] [--ranks N] [--cores N] [--shared-cores]\n"
    "               [--link-bw X] [--disk-bw X] [--compute X] [--alpha-us A --bw-gbs B]\n"
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
    "      --shared-cores  a node's running compute tasks share all its cores evenly\n"
    "                    (default: each worker keeps a core, round robin)\n"
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
    "      PREFIX-timeline.png (every compute worker of every rank, and the I/O threads that\n"
    "      ran a task, over step S, coloured by phase and class) and PREFIX-breakdown.png (a\n"
    "      bar per rank: compute, communication, swap,\n"
    "      checkpoint, idle); needs gnuplot\n"
    "  project TRACE [TRACE...] [--ranks LIST] [--alpha-us A] [--bw-gbs B] [--plot OUT.png]\n"
    "          [--json]\n"
    "      scale-out projection: each trace (one per ZeRO stage) replayed as one of N ranks,\n"
    "      one rank per node, collectives as alpha-beta ring collectives (defaults 10 us,\n"
    "      12.5 GB/s); per N (default 8,16,...,1024): step time, exposed communication share,\n"
    "      communication volume and memory per rank (docs/traces.md, \"Scale-out projection\")\n"
    "  pipeline TRACE --stages P [--dp N] [--micro M] [--schedule 1f1b|gpipe]\n"
    "           [--partition parameters|uniform|time] [--alpha-us A] [--bw-gbs B] [--json]\n"
    "      a recorded GPT-2 run as a pipeline of P stages, one rank each with the recorded\n"
    "      workers: each layer's measured work, the layers cut into stages (as the pipeline\n"
    "      section's partition does, or balanced by the measured time), M micro-batches\n"
    "      (default: the run's gradient_accumulation_steps) in the 1F1B (default) or GPipe\n"
    "      order, activations and gradients between stages as messages (defaults 10 us,\n"
    "      12.5 GB/s); per stage: work per micro-batch, busy and idle time, micro-batches in\n"
    "      flight; the step time, the bubble against (P-1)/(M+P-1) and the stage imbalance;\n"
    "      --dp N: N data-parallel replicas of every stage, their gradients reduced in a ring\n"
    "      (ZeRO-1 runs: the optimizer's work split over them); last, the measured work per\n"
    "      layer as the pipeline section zt-train cuts by (\"partition\": \"weights\")\n"
    "      (docs/traces.md, \"Pipeline projection\")\n"
    "\n"
    "Exit status: 0 ok, 2 bad command line, 1 any other error (a damaged trace included).\n";

#define MAX_TRACES 16
#define MAX_RANK_COUNTS 32

enum command { CMD_SUMMARY, CMD_REPLAY, CMD_PLOT, CMD_PROJECT, CMD_PIPELINE, CMD_COUNT };
static const char *const command_names[CMD_COUNT] = {"summary", "replay", "plot", "project",
                                                     "pipeline"};

/* zt-trace's command line, parsed */
struct trace_args {
    enum command cmd;
    const char *files[MAX_TRACES];
    int nfiles;
    int json;
    struct sim_options sim;      /* replay */
    int policy_set;
    double alpha_us, bw_gbs;     /* replay and project: the alpha-beta model */
    const char *out;             /* plot: the PNGs' prefix */
    long long step;              /* plot: the step drawn; -1: the second */
    int ranks[MAX_RANK_COUNTS];  /* project: the rank counts */
    int nranks;
    const char *plot;            /* project: the PNG */
    struct pipe_options pipe;    /* pipeline */
};

// ----------------------------------------------------------------------------
// options

/* v as a number in [lo, hi] into *out */
static enum zt_status number(const char *opt, const char *v, double lo, double hi,
                             double *out) {
    char *e;
    errno = 0;
    double x = v ? strtod(v, &e) : 0;
    if (!v || e == v || *e || errno || !(x >= lo && x <= hi))
        return zt_error_set(ZT_ERR_USAGE, "%s %s: expected a number from %g to %g", opt,
                            v ? v : "(missing)", lo, hi);
    *out = x;
    return ZT_OK;
}

/* v as one of names[0..n) into *out */
static enum zt_status choice(const char *opt, const char *v, const char *const *names, int n,
                             const char *expected, int *out) {
    int k = 0;
    while (k < n && (!v || strcmp(v, names[k]))) k++;
    if (k == n)
        return zt_error_set(ZT_ERR_USAGE, "%s %s: expected %s", opt, v ? v : "(missing)",
                            expected);
    *out = k;
    return ZT_OK;
}

/* --alpha-us and --bw-gbs (replay, project); *taken: arguments used, 0 when a is neither */
static enum zt_status collective_option(struct trace_args *c, const char *a, const char *v,
                                        int *taken) {
    *taken = 2;
    if (!strcmp(a, "--alpha-us")) {
        ZT_CHECK(number(a, v, 0, 1e6, &c->alpha_us));
        c->sim.alpha_us = c->alpha_us > 0 ? c->alpha_us : 1e-9;
    } else if (!strcmp(a, "--bw-gbs")) {
        ZT_CHECK(number(a, v, 1e-3, 1e6, &c->bw_gbs));
        c->sim.bw_gbs = c->bw_gbs;
        if (c->sim.alpha_us <= 0) c->sim.alpha_us = c->alpha_us; /* B alone: alpha-beta too */
    } else {
        *taken = 0;
    }
    return ZT_OK;
}

static enum zt_status replay_option(struct trace_args *c, const char *a, const char *v,
                                    int *taken) {
    struct sim_options *o = &c->sim;
    double x = 0;
    int k = 0;
    *taken = 2;
    if (!strcmp(a, "--workers")) {
        ZT_CHECK(number(a, v, 1, 4096, &x));
        o->workers = (int)x;
    } else if (!strcmp(a, "--policy")) {
        ZT_CHECK(choice(a, v, policy_names, POL_COUNT, "recorded, eager, prio or cp", &k));
        o->pol = (enum policy)k;
        c->policy_set = 1;
    } else if (!strcmp(a, "--ranks")) {
        ZT_CHECK(number(a, v, 1, 4096, &x));
        o->ranks = (int)x;
    } else if (!strcmp(a, "--cores")) {
        ZT_CHECK(number(a, v, 1, 1e6, &o->cores));
    } else if (!strcmp(a, "--link-bw")) {
        ZT_CHECK(number(a, v, 1e-3, 1e6, &o->link));
    } else if (!strcmp(a, "--disk-bw")) {
        ZT_CHECK(number(a, v, 1e-3, 1e6, &o->disk));
    } else if (!strcmp(a, "--compute")) {
        ZT_CHECK(number(a, v, 1e-3, 1e6, &o->compute));
    } else if (!strcmp(a, "--shared-cores")) {
        o->shared = 1;
        *taken = 1;
    } else if (!strcmp(a, "--durations")) {
        ZT_CHECK(choice(a, v, duration_names, DUR_COUNT, "auto, wall or cpu", &k));
        o->durs = (enum durations)k;
    } else {
        return collective_option(c, a, v, taken);
    }
    return ZT_OK;
}

static enum zt_status plot_option(struct trace_args *c, const char *a, const char *v, int *taken) {
    double x = 0;
    *taken = 2;
    if (!strcmp(a, "--out")) {
        if (!v) return zt_error_set(ZT_ERR_USAGE, "--out: expected a path prefix");
        c->out = v;
    } else if (!strcmp(a, "--step")) {
        ZT_CHECK(number(a, v, 0, 1e15, &x));
        c->step = (long long)x;
    } else {
        *taken = 0;
    }
    return ZT_OK;
}

/* --ranks LIST: comma-separated rank counts >= 2 */
static enum zt_status rank_list(struct trace_args *c, const char *v) {
    char *dup = strdup(v ? v : ""), *save = NULL;
    if (!dup) return zt_error_set(ZT_ERR_NOMEM, "out of memory");
    enum zt_status rc = ZT_OK;
    for (char *t = strtok_r(dup, ",", &save); t && rc == ZT_OK; t = strtok_r(NULL, ",", &save)) {
        double x = 0;
        if (c->nranks == MAX_RANK_COUNTS)
            rc = zt_error_set(ZT_ERR_USAGE, "--ranks: %d counts at most", MAX_RANK_COUNTS);
        else if ((rc = number("--ranks", t, 2, 1 << 20, &x)) == ZT_OK)
            c->ranks[c->nranks++] = (int)x;
    }
    free(dup);
    if (rc == ZT_OK && !c->nranks)
        rc = zt_error_set(ZT_ERR_USAGE, "--ranks %s: expected a comma-separated list of counts "
                          ">= 2", v ? v : "(missing)");
    return rc;
}

static enum zt_status project_option(struct trace_args *c, const char *a, const char *v,
                                     int *taken) {
    *taken = 2;
    if (!strcmp(a, "--plot")) {
        if (!v) return zt_error_set(ZT_ERR_USAGE, "--plot: expected an output .png path");
        c->plot = v;
    } else if (!strcmp(a, "--ranks")) {
        ZT_CHECK(rank_list(c, v));
    } else {
        return collective_option(c, a, v, taken);
    }
    return ZT_OK;
}

static enum zt_status pipeline_option(struct trace_args *c, const char *a, const char *v,
                                      int *taken) {
    struct pipe_options *o = &c->pipe;
    double x = 0;
    int k = 0;
    *taken = 2;
    if (!strcmp(a, "--stages")) {
        ZT_CHECK(number(a, v, 1, ZT_PIPE_MAX_STAGES, &x));
        o->stages = (int)x;
    } else if (!strcmp(a, "--dp")) {
        ZT_CHECK(number(a, v, 1, 1 << 20, &x));
        o->dp = (int)x;
    } else if (!strcmp(a, "--micro")) {
        ZT_CHECK(number(a, v, 1, 1 << 20, &x));
        o->micro = (int)x;
    } else if (!strcmp(a, "--schedule")) {
        ZT_CHECK(choice(a, v, pipe_schedule_names, 2, "1f1b or gpipe", &o->gpipe));
    } else if (!strcmp(a, "--partition")) {
        ZT_CHECK(choice(a, v, pipe_partition_names, PIPE_PART_COUNT,
                        "parameters, uniform or time", &k));
        o->partition = (enum pipe_partition)k;
    } else if (!strcmp(a, "--alpha-us")) {
        ZT_CHECK(number(a, v, 0, 1e6, &o->alpha_us));
    } else if (!strcmp(a, "--bw-gbs")) {
        ZT_CHECK(number(a, v, 1e-3, 1e9, &o->bw_gbs));
    } else {
        *taken = 0;
    }
    return ZT_OK;
}

/* the arguments after the command */
static enum zt_status parse_arguments(struct trace_args *c, int argc, char **argv) {
    int taken; /* arguments the last one used: 1, or 2 with its value */
    for (int i = 2; i < argc; i += taken) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        taken = 1;
        if (a[0] != '-') {
            if (c->nfiles == MAX_TRACES)
                return zt_error_set(ZT_ERR_USAGE, "too many trace files (%d at most): %s",
                                    MAX_TRACES, a);
            c->files[c->nfiles++] = a;
            continue;
        }
        if (!strcmp(a, "--json")) {
            c->json = 1;
            continue;
        }
        taken = 0;
        if (c->cmd == CMD_REPLAY) ZT_CHECK(replay_option(c, a, v, &taken));
        else if (c->cmd == CMD_PLOT) ZT_CHECK(plot_option(c, a, v, &taken));
        else if (c->cmd == CMD_PROJECT) ZT_CHECK(project_option(c, a, v, &taken));
        else if (c->cmd == CMD_PIPELINE) ZT_CHECK(pipeline_option(c, a, v, &taken));
        if (!taken)
            return zt_error_set(ZT_ERR_USAGE, "unknown option %s for this command", a);
    }
    return ZT_OK;
}

/* the command line, checked, with each command's defaults */
static enum zt_status parse_command_line(struct trace_args *c, int argc, char **argv) {
    *c = (struct trace_args){.sim = {.pol = POL_RECORDED, .link = 1, .disk = 1, .compute = 1},
                      .alpha_us = 10, .bw_gbs = 12.5, .step = -1,
                      .pipe = {.dp = 1, .alpha_us = 10, .bw_gbs = 12.5}};
    int k = 0;
    if (choice("command", argv[1], command_names, CMD_COUNT,
               "summary, replay, plot, project or pipeline", &k) != ZT_OK)
        return zt_error_set(ZT_ERR_USAGE, "unknown command %s", argv[1]);
    c->cmd = (enum command)k;
    ZT_CHECK(parse_arguments(c, argc, argv));
    const char *name = command_names[c->cmd];
    if (c->nfiles == 0)
        return zt_error_set(ZT_ERR_USAGE, "%s: expected a trace file (F.json given to zt-train "
                            "--trace, or its replay file F.ztr)", name);
    if (c->cmd != CMD_PROJECT && c->nfiles > 1)
        return zt_error_set(ZT_ERR_USAGE, "%s: one trace file expected", name);
    if (c->cmd == CMD_PLOT && !c->out)
        return zt_error_set(ZT_ERR_USAGE, "plot: --out PREFIX is required");
    if (c->cmd == CMD_REPLAY && !c->policy_set && c->sim.workers > 0) c->sim.pol = POL_EAGER;
    if (c->cmd == CMD_PIPELINE && c->pipe.stages < 1)
        return zt_error_set(ZT_ERR_USAGE, "pipeline: --stages P is required");
    c->pipe.json = c->json;
    if (c->cmd == CMD_PROJECT && !c->nranks)
        for (int n = 8; n <= 1024; n *= 2) c->ranks[c->nranks++] = n;
    return ZT_OK;
}

// ----------------------------------------------------------------------------
// running a command

static enum zt_status run_command(const struct trace_args *c, const struct trace *trs) {
    switch (c->cmd) {
    case CMD_SUMMARY: return cmd_summary(&trs[0], c->json);
    case CMD_REPLAY: return cmd_replay(&trs[0], &c->sim, c->json);
    case CMD_PLOT: return cmd_plot(&trs[0], c->out, c->step);
    case CMD_PIPELINE: return cmd_pipeline(&trs[0], &c->pipe);
    default: {
        struct project_options po = {.ranks = c->ranks, .nranks = c->nranks,
                                     .alpha_us = c->alpha_us, .bw_gbs = c->bw_gbs,
                                     .plot = c->plot, .json = c->json};
        return cmd_project(trs, c->nfiles, &po);
    }
    }
}

/* load and analyse every trace, then run the command */
static enum zt_status run(const struct trace_args *c) {
    struct trace trs[MAX_TRACES];
    int nloaded = 0;
    enum zt_status rc = ZT_OK;
    while (rc == ZT_OK && nloaded < c->nfiles) {
        struct trace *tr = &trs[nloaded++];
        rc = trace_load(tr, c->files[nloaded - 1]);
        if (rc == ZT_OK) rc = trace_analyse(tr);
    }
    if (rc == ZT_OK) rc = run_command(c, trs);
    for (int i = 0; i < nloaded; i++) trace_free(&trs[i]);
    if (rc == ZT_OK && fflush(stdout) != 0)
        rc = zt_error_set(ZT_ERR_IO, "standard output: write failed");
    return rc;
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
    struct trace_args c;
    enum zt_status rc = zt_knobs_check(); /* ZT_LOG_LEVEL and the other knobs, strictly */
    if (rc == ZT_OK) rc = parse_command_line(&c, argc, argv);
    if (rc == ZT_OK) rc = run(&c);
    if (rc == ZT_OK) return 0;
    fprintf(stderr, "zt-trace: error: %s%s\n", zt_error_last(),
            rc == ZT_ERR_USAGE ? " (see zt-trace --help)" : "");
    return rc == ZT_ERR_USAGE ? 2 : 1;
}
