/*
 * apps/zt_trace/zt_trace.h: what the rooms of the zt-trace tool share: the loaded trace (a task
 * graph per rank, cut into step windows), the simulator's options and results, and each
 * command's entry point.
 *
 * Layer: apps/ (private to zt-trace). The rooms: main.c (command line), trace.c (loading the
 * replay file through io/zt_tracefile.h into task graphs), analysis.c (windows, worker order,
 * normalised work, critical paths), summary.c, simulate.c (discrete-event replay), project.c
 * (alpha-beta scale-out projection), pipeline.c (pipeline layouts) and plot.c (gnuplot).
 * Errors go through zt_error_set; main.c prints the one line.
 */
#ifndef ZT_TRACE_TOOL_H
#define ZT_TRACE_TOOL_H

#include <stddef.h>   /* size_t */
#include <stdint.h>   /* int64_t */
#include "zerotask.h" /* zt_status, zt_tracefile_*, zt_task_kind_* */

// ----------------------------------------------------------------------------
// the trace

/* What a task occupies, as the tool adds time up. A data-loading task runs as a codelet on a
 * compute worker and holds a core as a compute task does, so it is counted with them (the
 * summary shows its part as data_ms, and the recompute tasks' part as recompute_ms). */
enum bucket { BUCKET_COMPUTE, BUCKET_COMM, BUCKET_SWAP, BUCKET_CKPT, BUCKET_COUNT };
/* "compute", "comm", "swap", "ckpt": the names of the buckets in the tool's output */
extern const char *const bucket_names[BUCKET_COUNT];

struct task {
    int64_t id, step;
    int layer, mb, blk, worker, node;
    int recompute;                    /* 1: it recomputes a checkpointed block's activations */
    char kind[ZT_TRACEFILE_KIND_LEN]; /* its kind's name as recorded */
    int kind_id;                      /* enum zt_task_kind; -1 for a name the table lacks */
    enum zt_task_class cls;           /* tasks/zt_task_kinds.h's class and phase columns */
    enum zt_task_phase phase;
    enum bucket bucket;
    double submit, start, end;        /* us, on the trace's time base */
    double work;        /* us at the speed of a whole core (analysis.c) */
    double cpu;         /* compute tasks: the worker thread's CPU time in it (us), else < 0 */
    double lat;         /* us between when it could have started and when it did */
    double lat_cpu;     /* the same for CPU durations: less the time its worker waited for a core */
    double waited;      /* us its worker waited for a core since its previous task; < 0 unknown */
    int64_t bytes_read, bytes_written, prio;
    int ndep, nsucc;
    int *dep, *succ;    /* indices in the rank's array */
    int64_t *dep_ids;   /* while loading: the ids of its dependencies [ndep] */
    int win;            /* the step window it was submitted in */
    int gate;           /* the window whose end waits for it */
    int post;           /* submitted after its window's wait */
    int coll;           /* k: the rank's k-th collective, else -1 */
    int worker_order;   /* its place among its recorded worker's tasks */
    int win_pos;        /* its place among the tasks submitted in its window */
};

struct rank {
    struct task *t;     /* [n], sorted by id */
    int n, cap;
    int nworkers;       /* compute workers (ids 0..nworkers-1) */
    int nio;            /* I/O threads */
    int ncoll;          /* collectives */
    /* per window w (analysis.c), in index order: the tasks submitted in it,
     * sub[sub_first[w] .. sub_first[w + 1]), and those that may run during it,
     * run[run_first[w] .. run_first[w + 1]) (every task from the window it starts in to the one
     * it ends in) */
    int *sub_first, *sub, *run_first, *run;
};

struct trace {
    char *path;                    /* the replay file read */
    int nranks;
    int has_cpu;                   /* the file has compute tasks' CPU times (version >= 3) */
    struct rank *r;                /* [nranks] */
    struct zt_tracefile_meta meta; /* the run's description */
    /* step windows (analysis.c): one per step label that has a task on a compute worker */
    int nwin;
    int64_t *win_step;             /* [nwin] the step label of each window */
    double *win_start;             /* [nwin + 1] first submission of its step's worker tasks
                                    * (any rank); [nwin] = DBL_MAX */
    double *gate_end;              /* [nranks x nwin] last end of the tasks ending in it */
    double *last_pre;              /* [nranks x nwin] last submission before its wait */
};

/* on one of zerotask's I/O threads rather than a compute worker */
static inline int on_io_thread(const struct task *t) { return t->worker >= ZT_TRACE_IO_WORKER; }
/* its lane on a rank with nworkers compute workers: the worker, or an I/O thread after them */
static inline int task_lane(const struct task *t, int nworkers) {
    return on_io_thread(t) ? nworkers + t->worker - ZT_TRACE_IO_WORKER : t->worker;
}

/* calloc/realloc that end the program with "zt-trace: error: out of memory" when memory runs
 * out (every array here is sized by the trace; there is nothing to fall back to) */
void *xcalloc(size_t n, size_t size);
void *xrealloc(void *p, size_t size);

/* an index with a sort key: qsort by cmp_keyed orders by key, ties in index order (a stable
 * sort, in O(n log n) whatever the order of the records) */
struct keyed {
    double key;
    int i;
};
int cmp_keyed(const void *a, const void *b);

/* trace.c: read the replay file of path (the .ztr, or the JSON given to zt-train --trace) into
 * a task graph per rank; trace_free releases it (also after a failed load). */
enum zt_status trace_load(struct trace *tr, const char *path);
void trace_free(struct trace *tr);
/* the run's description: a key's value (def when absent), as a number, the ZeRO stage */
const char *trace_meta(const struct trace *tr, const char *key, const char *def);
double trace_meta_num(const struct trace *tr, const char *key, double def);
int trace_stage(const struct trace *tr);

// ----------------------------------------------------------------------------
// analysis.c

/* Step windows, gates, successors, collectives, recorded worker order, latencies and normalised
 * work (docs/traces.md, "Step windows" and "replay").
 * @retval ZT_ERR_DATA windows that cannot be formed, or more task-window pairs than
 *                     ZT_TRACE_RUN_PAIRS_MAX (tasks spanning very many steps) */
enum zt_status trace_analyse(struct trace *tr);
/* the end of window w on rank r: the next window's start, or the last's last task end */
double window_end(const struct trace *tr, int r, int w);

/* task-window pairs (a task counted in each window it may run in) zt-trace holds at most */
#define ZT_TRACE_RUN_PAIRS_MAX 50000000

#define CRIT_KINDS_MAX 64
/* the longest chain through dependencies among the tasks rank r submitted in window w, with
 * recorded durations, and its time per kind */
struct critical_path {
    double length_us;
    int ntasks;
    int nkinds;
    char kind[CRIT_KINDS_MAX][ZT_TRACEFILE_KIND_LEN];
    double kind_us[CRIT_KINDS_MAX];
};
void critical_path(const struct trace *tr, int r, int w, struct critical_path *cp);

// ----------------------------------------------------------------------------
// summary.c

/* where window w of rank r went */
struct step_summary {
    double span;                 /* us */
    double busy[BUCKET_COUNT];   /* task time per bucket, clipped to the window, all lanes */
    double data;                 /* of busy[BUCKET_COMPUTE]: data-loading tasks */
    double recompute;            /* of busy[BUCKET_COMPUTE]: recompute tasks (checkpointing) */
    double idle_sum, idle_max;   /* compute workers' idle time: summed, largest */
    double hidden[BUCKET_COUNT]; /* time of non-compute tasks while a compute task ran */
    double total[BUCKET_COUNT];  /* time of non-compute tasks (hidden's denominator) */
    struct critical_path cp;
};
void step_summary(const struct trace *tr, int r, int w, struct step_summary *s);
enum zt_status cmd_summary(const struct trace *tr, int json);

// ----------------------------------------------------------------------------
// simulate.c

enum policy { POL_RECORDED, POL_EAGER, POL_PRIO, POL_CP, POL_COUNT };
extern const char *const policy_names[POL_COUNT];
enum durations { DUR_AUTO, DUR_WALL, DUR_CPU, DUR_COUNT };
extern const char *const duration_names[DUR_COUNT];

struct sim_options {
    int workers;         /* compute workers per rank; 0: as recorded */
    enum policy pol;
    int ranks;           /* simulated ranks; 0: as recorded */
    int model_ranks;     /* ranks the collectives and ZeRO partitions are sized for; 0: ranks */
    int ranks_per_node;  /* 0: as recorded (all on one node if recorded so) */
    double cores;        /* cores per node; 0: as recorded */
    double link, disk, compute; /* speed-ups of collectives, swaps and checkpoints, compute */
    double alpha_us, bw_gbs;    /* > 0: alpha-beta ring collectives */
    int no_comm;         /* collectives cost nothing (for the exposed-communication share) */
    int shared;          /* a node's cores shared evenly by its running tasks (else: pinned) */
    enum durations durs; /* compute tasks' durations */
};

struct sim_result {
    int nranks;          /* simulated ranks */
    int nworkers;        /* compute workers per rank */
    int cpu;             /* compute tasks lasted their CPU time (else: wall time) */
    double *step_us;     /* [nranks x nwin] each window's predicted length */
    double busy_us[BUCKET_COUNT]; /* rank 0's busy time per bucket, all windows, all lanes */
};

/* Replay the trace's task graph (docs/traces.md, "replay").
 * @retval ZT_ERR_INVALID options the trace cannot be replayed with
 * @retval ZT_ERR_DATA    a graph that cannot be run to its end */
enum zt_status simulate(const struct trace *tr, const struct sim_options *o,
                        struct sim_result *res);
void sim_result_free(struct sim_result *res);
/* the mean of v[w * stride] over the windows after the first (the first warms up), or the
 * first alone */
double mean_steps(const double *v, int nwin, int stride);
/* the share of a collective's bytes each rank sends in a ring of n ranks */
double ring_factor(int kind_id, int n);
enum zt_status cmd_replay(const struct trace *tr, const struct sim_options *o, int json);

// ----------------------------------------------------------------------------
// project.c, plot.c

struct project_options {
    const int *ranks;    /* [nranks] the rank counts to project to */
    int nranks;
    double alpha_us, bw_gbs;
    const char *plot;    /* a PNG to draw, or NULL */
    int json;
};
enum zt_status cmd_project(const struct trace *trs, int ntr, const struct project_options *o);

// ----------------------------------------------------------------------------
// pipeline.c

/* how `zt-trace pipeline` cuts the layers: graph/pipe_plan.c's "parameters" and "uniform", or
 * balanced by the measured time of each layer ("time") */
enum pipe_partition { PIPE_PART_PARAMETERS, PIPE_PART_UNIFORM, PIPE_PART_TIME, PIPE_PART_COUNT };
extern const char *const pipe_partition_names[PIPE_PART_COUNT];
extern const char *const pipe_schedule_names[2]; /* "1f1b", "gpipe" */
struct pipe_options {
    int stages;          /* P >= 1 */
    int dp;              /* data-parallel replicas of every stage (>= 1) */
    int micro;           /* M micro-batches per step; 0: the recorded accumulation */
    int gpipe;           /* 1: every forward, then every backward; 0: 1F1B */
    enum pipe_partition partition;
    double alpha_us, bw_gbs; /* a message between stages: alpha + bytes / bandwidth */
    int json;
};
/* the recorded GPT-2 run projected to a pipeline of o->stages ranks (rank 0's work) */
enum zt_status cmd_pipeline(const struct trace *tr, const struct pipe_options *o);
enum zt_status cmd_plot(const struct trace *tr, const char *prefix, long long step);
/* the projection's picture: png from the data file png.dat that cmd_project wrote */
enum zt_status plot_projection(const char *png, const struct trace *trs, int ntr);

#endif /* ZT_TRACE_TOOL_H */
