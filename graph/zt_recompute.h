/*
 * graph/zt_recompute.h: activation checkpointing for a model's blocks: which blocks keep only
 * their input, which set of the recompute window holds a checkpointed block's other
 * activations, whether its backward must recompute them first, and the context that submits
 * (and marks in traces) the recompute's tasks.
 *
 * Layer: graph/. GPT-2 (graph/gpt2.c) plans its layers with it; a user model plans its own
 * blocks the same way (docs/writing-a-model.md, apps/mlp_example.c). The model owns the
 * tensors: it makes `window` sets of the activations a checkpointed block recomputes
 * (zt_engine_act) and gives checkpointed block b set zt_recompute_slot(b). Blocks run their
 * forward in order 0..nblocks-1 and their backward in reverse, in every micro-batch; the
 * recompute is the block's own forward tasks again, from its kept input, submitted just before
 * its backward in zt_recompute_ctx(its backward's context). StarPU's sequential consistency
 * makes the recompute wait for the last task that still reads the set (the backward of the
 * block above that used it) and the block's backward wait for the recompute.
 */
#ifndef ZT_RECOMPUTE_H
#define ZT_RECOMPUTE_H

#include "zt_engine.h" /* struct zt_step_ctx */
#include "zt_status.h" /* enum zt_status */

#ifdef __cplusplus
extern "C" {
#endif

struct zt_recompute_plan {
    int nblocks;
    int nckpt;  /* checkpointed blocks */
    int window; /* sets of recomputed activations: at most nckpt (0 when none) */
    int *index; /* [nblocks]: a block's place among the checkpointed ones, -1 when not one */
};

/* The window a model with nckpt checkpointed blocks uses: ZT_RECOMPUTE_WINDOW (1..8, default
 * 2), at most nckpt. One set is the least memory (every recompute waits for the backward of the
 * block above to finish with the set); two let the recompute of a block run beside the backward
 * of the block above. A bad knob value gives the default (zt-train checks knobs at start-up). */
int zt_recompute_window(int nckpt);
/* Plan nblocks blocks: ckpt[b] nonzero checkpoints block b (ckpt NULL: every block); window < 1:
 * zt_recompute_window's, else at most nckpt. Owner: caller, with zt_recompute_free. */
enum zt_status zt_recompute_init(struct zt_recompute_plan *r, int nblocks,
                                 const unsigned char *ckpt, int window);
void zt_recompute_free(struct zt_recompute_plan *r);
/* The window set of block b's recomputed activations, -1 when b is not checkpointed (it keeps
 * its own). */
int zt_recompute_slot(const struct zt_recompute_plan *r, int b);
/* Whether the backward of block b must recompute its activations first: b is checkpointed and a
 * later checkpointed block's forward has taken its set since (the last `window` checkpointed
 * blocks still hold their forward's values). */
int zt_recompute_needed(const struct zt_recompute_plan *r, int b);
/* The context for the recompute of a block: its backward's (priority, layer, micro-batch; at
 * ZeRO stage 3 zt_param_value gathers the block's parameters once for both), with the task
 * options marked `recompute`, which traces and zt-trace summary show. */
struct zt_step_ctx zt_recompute_ctx(const struct zt_step_ctx *backward);

#ifdef __cplusplus
}
#endif
#endif /* ZT_RECOMPUTE_H */
