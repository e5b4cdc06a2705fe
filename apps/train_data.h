/*
 * apps/train_data.h: zt-train's data side: the dataset and its sampler (io/zt_dataset.h), the
 * sequence-length curriculum, evaluation on validation data, and the sampler's state in
 * checkpoints.
 *
 * Layer: apps/ (zt-train only). Every rank plans the same global batch of B rows from the same
 * sampler state and loads its own rows of it (graph/zt_gpt2.h), so the batches are the same for
 * any world size and micro-batch split.
 */
#ifndef ZT_APPS_TRAIN_DATA_H
#define ZT_APPS_TRAIN_DATA_H

#include <stdint.h>     /* int64_t */
#include <stdio.h>      /* FILE */
#include "zt_config.h"  /* struct zt_config */
#include "zt_dataset.h" /* struct zt_dataset, struct zt_sampler_state */
#include "zt_gpt2.h"    /* zt_gpt2_t */

/* what the command line said about the data */
struct train_data_options {
    const char *data;          /* --data (required) */
    const char *eval_data;     /* --eval-data, or NULL */
    const char *order;         /* --data-order linear|shuffle, or NULL: linear */
    int64_t eval_interval;     /* --eval-interval (-1: not given) */
    int64_t eval_steps;        /* --eval-steps (-1: not given) */
    const char *dump;          /* --dump-data F: each rank writes F.rank<r>, or NULL */
    int rank;
};

struct train_data {
    struct zt_dataset ds;
    int open;
    struct zt_sampler_state st;      /* after the last training batch planned */
    struct zt_data_row *rows, *next; /* [B] this step's rows; the next step's (read ahead) */
    int B, T;
    const struct zt_curriculum_cfg *curriculum;
    int64_t eval_interval, eval_steps; /* 0 interval: evaluate after the last step only */
    int64_t epoch[ZT_DATA_MAX_SOURCES]; /* each train source's epoch when last reported */
    FILE *dump;                      /* --dump-data: the rows this rank loads, or NULL */
    char dump_path[1100];            /* "" without --dump-data */
};

/* Check the data options (ZT_ERR_USAGE for a bad one) and open the data. */
enum zt_status train_data_open(struct train_data *td, const struct train_data_options *o,
                               const struct zt_config *cfg, const struct zt_model_shape *shape);
/* Create the --dump-data file (dump_path), once the outputs have been checked. */
enum zt_status train_data_open_dump(struct train_data *td);
/* Close the data and the dump (its write errors: ZT_ERR_IO). */
enum zt_status train_data_close(struct train_data *td);

/* Continue from the checkpoint tagdir, which finished step `done`: its sampler state (a
 * checkpoint without one, written before states were kept, continues zt_tokens.h's step rule,
 * which only --data F in linear order reads). */
enum zt_status train_data_resume(struct train_data *td, const char *tagdir, int64_t done);

/* The startup line: sources, shares, sequences, order, validation, curriculum. */
void train_data_describe(const struct train_data *td);

/* Plan step s's batch (the curriculum's length applied), submit it, ask the kernel to read the
 * next step's rows ahead; with talk, print a line when a source starts a new epoch. With
 * --dump-data, one line per row this rank loads: "step micro_batch global_row file position
 * active" (file: the index of the token file in the order --data names them). */
enum zt_status train_data_submit(struct train_data *td, zt_gpt2_t m, int64_t s, int talk);

/* The loss of the train data's first batch (--eval-only), no update. */
enum zt_status train_data_first_loss(struct train_data *td, zt_gpt2_t m, double *loss);

/* Whether to evaluate after step s of `last` (0: before the first), and the mean validation
 * loss over eval_steps batches of B rows from the validation data's start (no gradient, no
 * update). */
int train_data_eval_due(const struct train_data *td, int64_t s, int64_t last);
enum zt_status train_data_eval(struct train_data *td, zt_gpt2_t m, double *loss);

/* The members "sampler" and "curriculum" of a checkpoint's "data" object after step s, as JSON
 * text to append after a comma (malloc'd; NULL when out of memory). */
char *train_data_meta(const struct train_data *td, int64_t s);

/* The epochs of the train sources as a JSON array's text ("[1, 2]") into buf. */
void train_data_epochs(const struct train_data *td, char *buf, size_t n);

#endif /* ZT_APPS_TRAIN_DATA_H */
