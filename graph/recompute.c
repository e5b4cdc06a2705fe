/*
 * graph/recompute.c: the plan of activation checkpointing over a model's blocks (which blocks
 * are checkpointed, the window set of each, when a backward recomputes) and the recompute's
 * context. zt_recompute.h says how a model uses it.
 *
 * Layer: graph/. Submits nothing: the model submits its own forward tasks again.
 */
#include <stdlib.h>       /* calloc, free */
#include "zt_recompute.h" /* our API */
#include "zt_sched.h"     /* zt_knob_int */

int zt_recompute_window(int nckpt) {
    int64_t w = 2;
    if (zt_knob_int("ZT_RECOMPUTE_WINDOW", &w) != ZT_OK) w = 2;
    return nckpt < w ? nckpt : (int)w;
}

enum zt_status zt_recompute_init(struct zt_recompute_plan *r, int nblocks,
                                 const unsigned char *ckpt, int window) {
    *r = (struct zt_recompute_plan){.nblocks = nblocks};
    if (nblocks < 0)
        return zt_error_set(ZT_ERR_INVALID, "zt_recompute_init: %d blocks (expected >= 0)",
                            nblocks);
    r->index = calloc((size_t)nblocks + 1, sizeof *r->index); /* + 1: never calloc(0) */
    if (!r->index) return zt_error_set(ZT_ERR_NOMEM, "zt_recompute_init: out of memory");
    for (int b = 0; b < nblocks; b++) r->index[b] = !ckpt || ckpt[b] ? r->nckpt++ : -1;
    r->window = window < 1 ? zt_recompute_window(r->nckpt)
                           : (window < r->nckpt ? window : r->nckpt);
    return ZT_OK;
}

void zt_recompute_free(struct zt_recompute_plan *r) {
    free(r->index);
    r->index = NULL;
}

int zt_recompute_slot(const struct zt_recompute_plan *r, int b) {
    if (b < 0 || b >= r->nblocks || r->index[b] < 0) return -1;
    return r->index[b] % r->window;
}

int zt_recompute_needed(const struct zt_recompute_plan *r, int b) {
    if (zt_recompute_slot(r, b) < 0) return 0;
    return r->nckpt - 1 - r->index[b] >= r->window; /* checkpointed blocks after b */
}

struct zt_step_ctx zt_recompute_ctx(const struct zt_step_ctx *backward) {
    struct zt_step_ctx c = *backward;
    c.opts.recompute = 1;
    return c;
}
