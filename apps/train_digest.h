/*
 * apps/train_digest.h: fingerprints of zt-train's inputs, for the start-up check that every rank
 * runs the same job (the config and model files, the data files and how they are drawn, the
 * --init-from weights).
 *
 * Layer: apps/ (zt-train only). The digests are compared across ranks by zt_comm_check_same.
 */
#ifndef ZT_APPS_TRAIN_DIGEST_H
#define ZT_APPS_TRAIN_DIGEST_H

#include <stdint.h>     /* uint64_t */
#include "zt_dataset.h" /* struct zt_dataset */

/* h extended with every byte of the file at path (nothing when it cannot be read) */
uint64_t train_file_hash(uint64_t h, const char *path);
/* A fingerprint of a big file's contents (never of its path): its size and about 1 MiB of
 * blocks spread over it. */
uint64_t train_sampled_digest(const char *path);
/* The data: every file's sampled digest, in the order --data and --eval-data name them, and how
 * the sources draw from them (rule, weights, sequences). */
uint64_t train_data_digest(const struct zt_dataset *d);

#endif /* ZT_APPS_TRAIN_DIGEST_H */
