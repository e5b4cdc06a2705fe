/*
 * apps/train_run.h: zt-train's run: what the command line asked for and everything a run holds,
 * shared by its phases (train_gpt2.c: parse, start, loop, finish; train_validate.c: the inputs
 * checked before the runtime starts; train_errors.c: how a rank reports a failure).
 *
 * Layer: apps/ (zt-train only).
 */
#ifndef ZT_APPS_TRAIN_RUN_H
#define ZT_APPS_TRAIN_RUN_H

#include <stdint.h>     /* int64_t */
#include <stdio.h>      /* FILE */
#include "cli.h"        /* struct cli_program */
#include "train_data.h" /* struct train_data */
#include "zerotask.h"   /* everything public */

/* what the command line asked for */
struct train_options {
    const char *ds_config, *model, *data; /* required */
    const char *data_order, *eval_data, *dump_data;
    int64_t eval_interval, eval_steps; /* -1: not given */
    const char *init_from, *export_path, *log_path, *trace_path, *grads_path;
    const char *save_dir, *resume;
    int64_t steps;         /* the last step to train */
    int64_t seed;          /* -1: the config's */
    int64_t save_interval; /* -1: the config's */
    int eval_only, quiet, init_from_relaxed;
};

/* a checkpoint being written in the background (zt_checkpoint_save_begin) */
struct pending_save {
    int64_t step;
    double begin_ms; /* how long beginning it held the loop */
    const char *dir;
};

/* everything a run holds, filled in the order of its phases */
struct train_run {
    struct cli_program cli;
    struct train_options opt;
    int rank, world;
    int talk;                      /* this rank prints progress: rank 0 without --quiet */
    /* validated inputs */
    struct zt_config cfg;
    struct zt_model_shape shape;
    struct train_data data;
    const char *save_dir;          /* --save-dir, else the config's checkpoint.dir, else NULL */
    int64_t save_interval;         /* --save-interval, else the config's */
    char resume_tag[1024];         /* the tag directory --resume names */
    struct zt_ckpt_info resume_info;
    /* built */
    zt_engine_t engine;
    zt_gpt2_t model;
    struct zt_engine_mem mem;      /* the memory plan; the gradient slots grow during step 1 */
    double load_ms;                /* time to load the --resume checkpoint */
    /* the training loop */
    FILE *log;                     /* --log, on rank 0 */
    int64_t first_step;            /* 1, or the step after the resumed checkpoint's */
    int64_t tokens_per_step;
    double flops_per_step;
    int print_every;               /* steps between progress lines (steps_per_print) */
    struct zt_ckpt_save *saving;   /* the checkpoint being written, or NULL */
    struct pending_save pending;
};

/* train_errors.c: errors and agreement between ranks */

/* Report the last error as this rank should (a bad command line or config: rank 0 alone; else
 * each rank, prefixed with its rank when there are several). Returns exit_code. */
int train_fail(int exit_code);
/* Every rank passes its start-up outcome (0 or an exit code); returns the rank's own code, or 1
 * when another rank failed (collective). */
int train_agree(int code);
/* A failure after start-up, reported; ends the whole job when the others may be waiting for
 * this rank in a collective. Returns the exit code. */
int train_report_failure(const struct train_run *r);

/* train_validate.c: returns 0 when every rank's inputs are good, else the exit code (errors
 * reported) */
int train_validate_inputs(struct train_run *r);

#endif /* ZT_APPS_TRAIN_RUN_H */
