/*
 * apps/zt_tune/tune.h: what the rooms of zt-tune share: one candidate configuration (the
 * DeepSpeed config fields and environment the tuner varies), its prediction and measurement,
 * and the tuning session.
 *
 * Layer: apps/ (private to zt-tune). The rooms: main.c (command line, the search's phases),
 * space.c (the candidates, their DeepSpeed config and the memory model's verdict), trial.c (a
 * measured trial: zt-train under mpirun; a predicted one: zt-trace replay), results.c (the
 * results directory: resume, the table, the best config and its environment, the plot).
 * Errors go through zt_error_set; main.c prints the one line.
 */
#ifndef ZT_TUNE_H
#define ZT_TUNE_H

#include <stdint.h>      /* int64_t */
#include <stdio.h>       /* FILE */
#include <cjson/cJSON.h> /* cJSON */
#include "zerotask.h"    /* zt_config, zt_model_shape, zt_memory_predict */

/* A candidate runs only when its predicted peak, raised by the memory model's error bound, fits
 * the budget: tests/graph/test_memory_model.py holds the predictions to at most 1 - 1/1.08 below
 * the measured peaks (docs/architecture.md, "Memory model", has the errors measured), so a
 * candidate that runs fits; one that does not anyway is a failed trial. */
#define TUNE_MEMORY_MARGIN 1.08

/* One configuration: the fields of the DeepSpeed config and the environment it sets. */
struct knobs {
    int ranks;       /* data-parallel ranks (mpirun -np) */
    int stage, micro, accum, train_batch;
    enum zt_precision prec;
    enum zt_offload_device opt_dev, param_dev;
    int64_t reduce_bucket, allgather_bucket;     /* elements */
    int overlap_comm;
    int64_t s3_max_live, s3_prefetch;            /* elements */
    int opt_buffers;         /* offload_optimizer.buffer_count: 0 auto (ZT_SWAP_BUFFER_MEM) */
    int param_buffers;       /* offload_param.buffer_count */
    int64_t aio_block;                           /* bytes */
    int aio_queue_depth;
    int workers;     /* STARPU_NCPU per rank */
    int chunks;      /* ZT_GRAPH_CHUNKS */
    char sched[32];  /* STARPU_SCHED (a longer name is refused at start-up) */
};

enum cand_state {
    CAND_PENDING,   /* not decided yet */
    CAND_PRUNED,    /* not run: why says (memory, outside the micro-batch sizes, ...) */
    CAND_PREDICTED, /* not run: its step time predicted (pred_ms) from a measured one */
    CAND_MEASURED,  /* run: meas_ms, meas_peak */
    CAND_FAILED,    /* run and failed: why has its error */
};

struct cand {
    struct knobs k;
    char key[320];           /* the knobs in one line: identity in the results directory */
    enum cand_state state;
    const char *phase;       /* "micro-batch", "replay", "refine" */
    int64_t pred_peak;       /* bytes: the memory model's largest rank */
    double pred_ms;          /* predicted step time (ms), < 0 none */
    double meas_ms;          /* measured: median step time over the profiled steps */
    double meas_peak_mib;    /* measured: the largest rank's VmHWM */
    double trial_s;          /* wall time of its trial */
    int from;                /* the measured candidate a prediction came from, else -1 */
    int resumed;             /* its result came from an earlier tune's results */
    char dir[1024];          /* its trial's directory (config, output, log, trace, replays) */
    char why[240];
};

/* The tuning session. */
struct tune {
    /* inputs */
    const char *ds_config, *model, *data, *nvme_path;
    const char *zt_train, *zt_trace, *mpirun; /* the programs it runs */
    cJSON *user;                 /* the user's config as parsed */
    struct zt_config cfg;        /* the same, resolved for ranks */
    struct zt_autotune_cfg at;   /* its autotuning section, the options applied */
    struct zt_model_shape shape;
    int ranks;                   /* --ranks, 0: auto (the split of the cores is tuned) */
    int cores;
    int64_t budget;              /* host bytes per rank (--memory-budget), 0: machine_mem / ranks */
    int64_t machine_mem;         /* host bytes available when the tune began */
    uint64_t seed;
    int allow_precision, resume, dry_run, trial_timeout_s, quiet;
    /* candidates */
    struct cand *c;
    int n, cap;
    int best;                    /* the best measured candidate, -1 none */
    int trials;                  /* trials measured (resumed ones included) */
    int since_best;              /* trials since the best last improved */
    double t0_ms;                /* when tuning began */
    /* earlier results (results.jsonl) */
    cJSON *earlier;
};

/* space.c */
void knobs_from_config(struct knobs *k, const struct zt_config *cfg);
void knobs_key(const struct knobs *k, char *out, size_t n);
/* Add a candidate (a duplicate of one already there returns that one's index); -1 out of
 * memory. */
int tune_add(struct tune *t, const struct knobs *k, const char *phase);
/* The user's config with the knobs applied, for a trial (trial = 1: no checkpoint or
 * autotuning section) or for the result. Owner: the caller (cJSON_Delete). */
cJSON *knobs_config(const struct tune *t, const struct knobs *k, int trial);
/* Predict c's peak memory (the memory model, every rank); a config zt-train would refuse is
 * pruned with its error. */
enum zt_status cand_predict_memory(struct tune *t, struct cand *c);
/* the budget per rank of a configuration, and whether c's predicted peak, with the memory
 * model's error margin, fits it */
int64_t tune_budget(const struct tune *t, const struct knobs *k);
int cand_fits(const struct tune *t, const struct cand *c);
/* The micro-batch phase's candidates: stage x placement x precision x micro-batch. */
enum zt_status space_micro_batch(struct tune *t);
/* The neighbours of candidate b that zt-trace replay predicts: scheduler policy and workers. */
int space_replay_neighbours(struct tune *t, int b, int *out, int max);
/* One knob of candidate b changed at a time (fast = false): chunks, buckets, overlap, stage-3
 * windows, aio. */
int space_refine_neighbours(struct tune *t, int b, int *out, int max);
/* "stage 2 | micro 4 x accum 2 | bf16 | offload opt nvme" and the like */
void knobs_describe(const struct knobs *k, char *out, size_t n);

/* trial.c */
/* Run c (zt-train, traced, under mpirun with t->ranks ranks): measured or failed. */
enum zt_status trial_measure(struct tune *t, struct cand *c, int index);
/* Predict c's step time by replaying the trace of measured candidate m with c's policy and
 * workers; its pred_ms, from = m. */
enum zt_status trial_replay(struct tune *t, struct cand *c, int m);
/* SIGINT and SIGTERM stop the running program and make the trial fail with "interrupted" */
void trial_catch_interrupts(void);
int trial_interrupted(void);

/* results.c */
/* results_dir and exps_dir made; results.jsonl loaded (resume) or cleared (overwrite). */
enum zt_status results_open(struct tune *t);
/* A measured or failed candidate appended to results.jsonl (flushed). */
enum zt_status results_append(struct tune *t, const struct cand *c);
/* The earlier result for c's key, applied to c: 1 when there was one. */
int results_resume(struct tune *t, struct cand *c);
/* The table (stdout and results.tsv), ds_config_optimal.json, env_optimal.sh, autotune.png. */
enum zt_status results_write(struct tune *t);

/* the metric's value of a measured candidate, larger is better */
double tune_score(const struct tune *t, const struct cand *c);

#endif /* ZT_TUNE_H */
