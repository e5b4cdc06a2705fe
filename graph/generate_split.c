/*
 * graph/generate_split.c: how a decode step shares its products and its attention among the
 * workers (generate_split.h).
 *
 * Layer: graph/. Pure arithmetic.
 */
#include "generate_split.h"

/* the width of a product's parts: a worker's share of the columns, up to a multiple of 32 (a
 * weight packed for the bf16 engine is read in blocks of 32 columns) */
static int64_t part_width(int workers, int64_t oc) {
    return ((oc + workers - 1) / workers + 31) / 32 * 32;
}

int gen_split_workers(int workers) {
    return workers < 1 ? 1 : workers > GEN_SPLIT_MAX_PARTS ? GEN_SPLIT_MAX_PARTS : workers;
}

int gen_split_parts(int workers, int64_t oc) {
    int64_t w = part_width(workers, oc);
    return (int)((oc + w - 1) / w); /* with the widths rounded up, fewer may cover them */
}

int64_t gen_split_cols(int workers, int64_t oc, int p, int64_t *o0) {
    int64_t w = part_width(workers, oc);
    *o0 = w * p;
    return oc - *o0 < w ? oc - *o0 : w;
}

int gen_split_heads(int workers, int n_head) { return workers < n_head ? workers : n_head; }

void gen_split_head_range(int workers, int n_head, int p, int *h0, int *h1) {
    int n = gen_split_heads(workers, n_head);
    *h0 = n_head * p / n;
    *h1 = n_head * (p + 1) / n;
}
