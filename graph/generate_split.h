/*
 * graph/generate_split.h: how a decode step shares its products and its attention among the
 * workers (pure arithmetic, never installed; generate_step.c uses it, test_generate_split
 * checks it).
 *
 * Layer: graph/. A product's output columns go in parts of equal width (a multiple of 32: whole
 * vectors of the GEMM), the last one narrower, none empty, at most one per worker; the
 * attention goes by whole heads, at most one range per worker, none empty.
 */
#ifndef ZT_GENERATE_SPLIT_H
#define ZT_GENERATE_SPLIT_H

#include <stdint.h> /* int64_t */

#define GEN_SPLIT_MAX_PARTS 16 /* a step's products go in at most this many parts */

/* the workers a decode step splits among: 1 to GEN_SPLIT_MAX_PARTS (the weights' column panels
 * and the step's parts both take it, so that a part is a whole panel) */
int gen_split_workers(int workers);

/* the parts of a product of oc (>= 1) output columns among workers (>= 1) */
int gen_split_parts(int workers, int64_t oc);
/* part p's columns: [*o0, *o0 + the width returned) */
int64_t gen_split_cols(int workers, int64_t oc, int p, int64_t *o0);
/* the parts of an attention of n_head (>= 1) heads, and part p's heads [*h0, *h1) */
int gen_split_heads(int workers, int n_head);
void gen_split_head_range(int workers, int n_head, int p, int *h0, int *h1);

#endif /* ZT_GENERATE_SPLIT_H */
