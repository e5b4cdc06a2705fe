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

#include <stdint.h>    /* int64_t */
#include "zt_engine.h" /* struct zt_step_ctx, zt_engine_t */
#include "zt_status.h" /* enum zt_status */
#include "zt_tensor.h" /* zt_tensor_t, enum zt_dtype */

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

/* ---- the kept inputs on NVMe (graph/ckpt_swap.c) ----
 * A model whose checkpointed blocks' inputs are all [rows_per_seq, cols] activations of one type
 * can keep them on NVMe between a block's forward and its backward: the inputs of the blocks
 * whose backward recomputes (zt_recompute_needed) live in zt_ckpt_swap_sets() sets of tensors
 * instead of one each, and those the forward overwrites wait in a swap file under nvme_path.
 * Only the blocks [block0, block1) move (a pipeline stage's; every block otherwise), and a model
 * with several activation sets (a pipeline stage's micro-batches in flight: micro-batch mb uses
 * set mb % act_sets) has its own sets of inputs and its own file regions per activation set. */
struct zt_ckpt_swap_spec {
    int64_t rows_per_seq, cols; /* of each input, as zt_engine_act_dtype takes them */
    enum zt_dtype dtype;
    const char *nvme_path;      /* the directory of the swap file */
    const char *key;            /* the config key that named it, for messages */
    int block0, block1;         /* the blocks this model runs */
    int act_sets;               /* its activation sets (>= 1) */
};
typedef struct zt_ckpt_swap *zt_ckpt_swap_t;
/* Whether block b's input moves (into a set; then maybe to the file): b is one of the blocks
 * [block0, block1) and its backward recomputes. */
int zt_ckpt_swap_moves(const struct zt_recompute_plan *blocks, int block0, int block1, int b);
/* The sets of inputs that the moved inputs of one activation set share (the plan's window, at
 * most the moved inputs; 0: no backward recomputes, nothing moves). For sizing. */
int zt_ckpt_swap_sets(const struct zt_recompute_plan *blocks, int block0, int block1);
/* Make the sets (zt_engine_act_dtype) and, when an input is swapped, the swap file
 * (io/zt_swapdir.h: too little room is ZT_ERR_IO) and start the engine's I/O service; a bad
 * nvme_path is ZT_ERR_CONFIG naming spec->key even when nothing moves (*out NULL then). blocks
 * must outlive it. Owner: caller, with zt_ckpt_swap_free (before the engine's: it waits for
 * the tasks and swaps still queued). */
enum zt_status zt_ckpt_swap_init(zt_ckpt_swap_t *out, zt_engine_t e,
                                 const struct zt_recompute_plan *blocks,
                                 const struct zt_ckpt_swap_spec *spec);
void zt_ckpt_swap_free(zt_ckpt_swap_t s);
/* The tensor block b's input must be in activation set k (the model writes the previous
 * block's output there), or NULL when b's input stays the model's own. */
zt_tensor_t zt_ckpt_swap_input(zt_ckpt_swap_t s, int k, int b);
/* Before block b's forward tasks are submitted, its input complete (a training step only: an
 * evaluation has no backward): its input to the file when a later block's input takes its set
 * (with one set, b's own output: the swap-out reads the input before b's forward overwrites
 * it). The activation set is forward's micro-batch's (opts.mb % act_sets), as for swap-ins. */
enum zt_status zt_ckpt_swap_out(zt_ckpt_swap_t s, const struct zt_step_ctx *forward, int b);
/* At block b's backward, before its recompute: the swap-in of the input that is next to be
 * needed in b's set, prefetched as a backward prefetch of its block. Call it for every block. */
enum zt_status zt_ckpt_swap_in(zt_ckpt_swap_t s, const struct zt_step_ctx *backward, int b);
/* What s holds (all 0 for NULL), per activation set: *moved inputs in *sets sets (the bytes of
 * every activation set's returned), *swapped of them; the swap file's *file_bytes (all sets). */
int64_t zt_ckpt_swap_info(zt_ckpt_swap_t s, int *moved, int *sets, int *swapped,
                          int64_t *file_bytes);
/* A swap's failure (the disk full, an I/O error) shows here: check it once a step's losses are
 * in (zt_io_service_status, tasks/zt_tasks.h). */

#ifdef __cplusplus
}
#endif
#endif /* ZT_RECOMPUTE_H */
