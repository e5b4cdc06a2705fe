/*
 * io/zt_dataset.h: the training data of zt-train: one token file, a list of them, a weighted
 * blend, or a JSON data spec, and the sampler that turns the run's position in the data into the
 * rows of each global batch.
 *
 * Layer: io/ (platform; no StarPU). docs/data.md is the user's guide. The --data syntax:
 *   F                  one token file (with --data-order linear: zt_tokens.h's data rule)
 *   F1,F2,...          a list: sources in the proportion of their sizes
 *   0.7:F1,0.3:F2      a blend: each source's share of the sequences (weights > 0, normalised)
 *   SPEC.json          {"train": [{"path": P, "weight": W (optional), "tokens": N (optional,
 *                      checked)}...], "validation": [...] (optional), "valid_split": f
 *                      (optional, 0 <= f < 1: the last f of every train source's sequences are
 *                      held out for validation)}; paths relative to the spec's directory.
 *
 * A source's sequences: sequence j of a file of `count` tokens is tokens j*T .. j*T + T (T + 1
 * tokens: inputs and the targets one later), j = 0 .. (count - 1) / T - 1. The blend draws the
 * g-th sequence of the run (g = 0, 1, ...; row k of step i is g = (i-1)*B + k) from the source
 * whose share lags its weight most: w_s * (g + 1) - drawn_s largest, the lowest index on a tie
 * (Megatron-style blending), so every source's count stays within one sequence of w_s * g at
 * every prefix. The d-th sequence drawn from a source is its sequence perm_e(d mod N_s) in epoch
 * e = d / N_s: perm the identity in linear order, else a permutation of 0..N_s-1 that depends on
 * the seed, the source's index and the epoch only. Batches are therefore a property of the data,
 * the seed and the global batch size: any world size and micro-batch split read the same rows.
 */
#ifndef ZT_DATASET_H
#define ZT_DATASET_H

#include <stdint.h>    /* int64_t, uint64_t */
#include "zt_status.h" /* enum zt_status */
#include "zt_tokens.h" /* struct zt_tokens, struct zt_data_row */

#ifdef __cplusplus
extern "C" {
#endif

#define ZT_DATA_MAX_SOURCES 64

enum zt_data_order { ZT_DATA_LINEAR = 0, ZT_DATA_SHUFFLE };

struct zt_data_source {
    char path[512];
    double weight;     /* share of the sequences drawn, normalised over the set */
    int file;          /* index into the dataset's open files */
    int64_t first;     /* its sequences are first .. first + nseq - 1 of the file */
    int64_t nseq;
};

/* the train sources or the validation sources */
struct zt_data_set {
    int nsources;
    struct zt_data_source src[ZT_DATA_MAX_SOURCES];
};

struct zt_dataset {
    int T;                     /* sequence length */
    enum zt_data_order order;
    uint64_t seed;
    int legacy;                /* one file by its path, linear order: zt_tokens.h's data rule */
    int nfiles;
    struct zt_tokens files[ZT_DATA_MAX_SOURCES];
    struct zt_data_set train, valid; /* valid.nsources 0: no validation data */
};

/* Where the sampler stands: what a checkpoint keeps. */
struct zt_sampler_state {
    int64_t consumed;                   /* sequences drawn so far (g of the next one) */
    int64_t drawn[ZT_DATA_MAX_SOURCES]; /* per source: sequences drawn (its epoch: drawn / nseq) */
};

/* Open the data: `data` in the syntax above, `eval_data` (NULL: the spec's validation data, if
 * any) a file, list or blend. Every file is opened and checked (zt_tokens_open). Errors are one
 * line naming the argument and what was expected: a bad weight, a missing file, a source shorter
 * than one sequence, an empty blend, a malformed spec. */
enum zt_status zt_dataset_open(struct zt_dataset *d, const char *data, const char *eval_data,
                               int vocab_size, int T, enum zt_data_order order, uint64_t seed);
void zt_dataset_close(struct zt_dataset *d);

/* The next B rows of set (train or valid) from state st, which advances past them. */
void zt_dataset_next(const struct zt_dataset *d, const struct zt_data_set *set,
                     struct zt_sampler_state *st, int B, struct zt_data_row *rows);

/* The epoch (1-based) the next sequence of source s of set belongs to (the step rule: the pass
 * over the file's tokens the next row starts in). */
int64_t zt_dataset_epoch(const struct zt_dataset *d, const struct zt_data_set *set,
                         const struct zt_sampler_state *st, int s);

/* The blend: the source of the g-th sequence given the counts drawn before it (exposed for
 * tests). */
int zt_dataset_pick(const struct zt_data_set *set, const int64_t *drawn, int64_t g);

/* The shuffle: sequence index of position j (< n) of epoch e of source s. */
int64_t zt_dataset_permute(uint64_t seed, int s, int64_t e, int64_t j, int64_t n);

/* The state as a JSON object's text (malloc'd; NULL when out of memory): order, seed, consumed,
 * and per source its path, sequences, weight, drawn and epoch. */
char *zt_sampler_state_json(const struct zt_dataset *d, const struct zt_sampler_state *st);
/* Restore st from such text (what: where it came from, for messages), checking that it belongs
 * to this data: the same order, seed and sources (their sequence counts and weights). */
enum zt_status zt_sampler_state_parse(const struct zt_dataset *d, const char *json,
                                      const char *what, struct zt_sampler_state *st);

#ifdef __cplusplus
}
#endif
#endif /* ZT_DATASET_H */
