/*
 * graph/engine_impl.h: the engine's private structs and the functions its files share.
 *
 * Layer: graph/, behind zt_engine.h. Included only by the engine's own files:
 *   engine.c       init/free, parameter declaration, finalize (plan -> allocate -> initialise
 *                  -> register), activations, accessors, the I/O service
 *   zero_plan.c    the ZeRO plan (pure arithmetic; zero_plan.h)
 *   rng.c          the deterministic normal generator
 *   slots.c        stage-3 value slots (gathered parameters) and stage >= 2 gradient slots
 *   step.c         step_begin, grad_ready, bucket reductions, norm/clip/AdamW, step_end/wait
 *   loss_scale.c   the fp16 dynamic loss scaler
 *   offload.c      NVMe offload: swap files and buffers (struct zt_offload is private to it)
 *   weights.c      safetensors load/save, consolidation of sharded state
 *   engine_ckpt.c  checkpoint shard save (background) and load
 */
#ifndef ZT_ENGINE_IMPL_H
#define ZT_ENGINE_IMPL_H

#include <stdint.h>     /* int64_t, uint64_t */
#include "zero_plan.h"  /* struct zt_zero_plan */
#include "zt_engine.h"  /* the public API, struct zt_step_ctx */

struct zt_safetensors;  /* io/zt_safetensors.h */
struct zt_shard_set;    /* io/zt_ckpt.h */
struct zt_aio_cfg;      /* io/zt_aio.h */
struct zt_offload;      /* offload.c */
struct zt_engine_save;  /* engine_ckpt.c */

#define ZT_MAX_DIMS 8

struct zt_param {
    char name[160];
    int ndim;
    int64_t shape[ZT_MAX_DIMS];
    int64_t rows, cols;    /* shape[0] x the rest (1 x n for a vector) */
    enum zt_init init;
    float std;
    struct zt_engine *e;
    /* its place in the ZeRO plan (copied from e->plan.param[i]) */
    int64_t off;           /* first element in the flat layout */
    int nblk, first_blk;   /* row blocks; the first one's index in the model's block list */
    int own0, own1;        /* the blocks [own0, own1) of it in this rank's shard */
    int persistent;        /* stage 3: small enough to stay whole on every rank */
    int offloaded;         /* stage 3 offload_param nvme: its shard lives in the swap file */
    int reduce_bucket;     /* its gradient-reduction bucket */
    /* this rank's storage: home holds the fp32 values (whole at stages 0-2 and for persistent
     * parameters at stage 3, else only its own blocks; in mixed precision the master weights:
     * its own blocks at stage >= 1), grad_sums the gradient sums (whole at stages 0-1, else
     * its own blocks; at stage 1 with reduce_scatter only its own blocks are summed over the
     * ranks), work the bf16/fp16 copy the model reads in mixed precision (whole, or its own
     * blocks where stage 3 gathers it; NULL in fp32 training, where home is both). NULL when
     * the rank holds none of the parameter's blocks. */
    zt_tensor_t home, grad_sums, work;
    /* what the model reads and accumulates into now: work/home and grad_sums, or (stage 3
     * values, stage >= 2 gradients) a slot of the pool of its shape, NULL when it has none */
    zt_tensor_t value, grad;
    int shape_class;       /* the slot pool of its shape */
    int value_slot;        /* stage 3: its slot in the gathered-value pool, -1 when none */
    int grad_slot;         /* stage >= 2: its slot in the gradient pool, -1 when none */
    int64_t skip_before;   /* normal draws skipped before its own (zt_engine_param_skip) */
    int no_norm;           /* a pipeline's last stage: the tied copy, counted by the first */
    int ready_count;       /* stages 0-1: zt_engine_grad_ready calls this step */
    int declared;          /* stage >= 2: declared ready since its bucket was last reduced */
};

/* This rank's flat buffers (llm.c: one allocation per kind, a parameter is a slice) and the
 * block views of them in flat order ([plan.nblk], .off relative to the block's optimizer
 * group; .t NULL for a block this rank does not hold). */
struct zt_engine_buffers {
    float *master;          /* fp32 values (mixed precision: the master weights) */
    void *grad_sums;        /* gradient sums, of the working type */
    void *work;             /* mixed precision: the 16-bit copy the model reads */
    int64_t master_n, grad_sums_n, work_n; /* elements of each */
    size_t bytes[3];        /* of master, grad_sums, work */
    int pinned[3];          /* each page-locked for the GPUs (zt_host_pin) */
    struct zt_block_ref *master_blk, *grad_blk, *work_blk; /* work_blk: master_blk in fp32 */
    zt_tensor_t m, v;       /* exp_avg, exp_avg_sq: one block per group this rank updates (NULL
                             * when they live in the swap file) */
    zt_tensor_t grad_sumsq; /* [ngroups] doubles: each group's sum of squared gradients */
    zt_tensor_t clip;       /* [3] floats: clip coefficient, global norm, overflow flag */
    zt_tensor_t comm_token; /* orders every collective of this rank (zt_tasks.h) */
    struct zt_block_ref *persist_blk; /* stage 3: the persistent blocks (plan.persist_blk) */
};

/* Slots of one parameter shape: full-size tensors that parameters occupy in turn (stage 3
 * gathered values; stage >= 2 a micro-batch's gradients). A slot changes tenant only after every
 * task of the old tenant was submitted, so StarPU's implicit dependencies (write after read)
 * make the new tenant's first task wait for the old tenant's last one. */
struct zt_pool {
    int64_t rows, cols;
    enum zt_dtype dt;
    int nblk;              /* row blocks of each slot (the parameters' own blocking) */
    int n, cap;            /* slots made, room for */
    zt_tensor_t *t;        /* [cap] the slots */
    struct zt_param **tenant; /* [cap] the parameter in each slot, or NULL */
    uint64_t *stamp;       /* [cap] when the tenant moved in (least recently gathered is evicted) */
};

struct zt_engine_slots {
    struct zt_pool *value_pool, *grad_pool; /* [nshapes] each */
    int nshapes;
    uint64_t clock;         /* gathers so far (the pools' stamps) */
};

/* fp16 loss scaling: DeepSpeed's DynamicLossScaler fields, or a static scale */
struct zt_loss_scaler {
    double scale;
    int64_t cur_iter, last_overflow_iter;
    int cur_hysteresis;
};

struct zt_reduce_state {
    int pending;            /* parameters not yet declared ready this step (or micro-batch) */
    int submitted;          /* its collective is submitted this step */
};

/* the current step, and the updates applied so far (a skipped fp16 step moves neither Adam's
 * step count nor the LR schedule) */
struct zt_engine_step {
    int64_t step;
    float lr;
    int64_t applied, skipped;
    int updating;            /* step_end submitted an update that step_wait has not counted */
    int updated;             /* the step step_wait last waited for was an update */
    struct zt_reduce_state *reduce; /* [plan.nreduce] */
    int64_t *parts;          /* [2 * size] scratch: each rank's part of a collective */
};

struct zt_engine_acts {
    int nblk;               /* activation blocks: min(ZT_GRAPH_CHUNKS, micro_batch) */
    int64_t *blk_seqs;      /* [nblk] sequences per activation block */
    zt_tensor_t *t;
    int n, cap;
    int64_t bytes;
};

/* a pipeline (engine_pipe.c): this rank's stage, the norm's sums of every stage, the tie */
struct zt_engine_pipe {
    int stage, stages;      /* stages 1: no pipeline */
    int *group0;            /* [stages + 1]: stage s's groups are grad_sumsq's blocks
                             * group0[s] .. group0[s + 1] - 1 */
    struct zt_param *tied;  /* held by the first and the last stage too, or NULL */
    int tied_peer;          /* the world rank of its other copy */
    zt_tensor_t tied_in;    /* the other copy's gradient, received */
    int64_t pending_skip;   /* normal draws to skip before the next declared parameter */
};

struct zt_engine {
    struct zt_config cfg;
    int rank, size, stage;  /* data parallelism: this rank, ranks, ZeRO stage */
    struct zt_engine_pipe pipe;
    int chunks;             /* ZT_GRAPH_CHUNKS */
    int64_t group_elems;    /* ZT_OPT_GROUP_ELEMS */
    int mixed;              /* bf16/fp16 training */
    enum zt_dtype work_dtype; /* what the model reads and writes: F32, or BF16/F16 (mixed) */
    uint64_t rng;           /* the initializer's generator state */
    struct zt_param **params; /* [nparams], each allocated alone: zt_param_t stays valid */
    int nparams, cap_params;
    int finalized;
    struct zt_zero_plan plan;
    struct zt_engine_buffers buf;
    struct zt_engine_slots slots;
    struct zt_engine_step st;
    struct zt_loss_scaler scaler;
    int nonfinite_warn;     /* ZT_ON_NONFINITE=warn: a non-finite step warns and training goes on */
    int64_t nonfinite_step; /* the first step with a NaN or Inf loss or gradient norm (0: none) */
    struct zt_engine_acts act;
    int io_held;                  /* holds a reference to the I/O service (zt_io_service_init) */
    struct zt_offload *offload;   /* NVMe offload, NULL without (offload.c) */
    struct zt_engine_save *save;  /* the shard being written in the background, or NULL */
};

// ----------------------------------------------------------------------------
// engine_pipe.c: a pipeline's part of the engine

/* zt_engine_init: the stage of this rank; the data-parallel job, and the collectives' group
 * (zt_comm_set_group), become the stage's replicas */
enum zt_status zt_engine_pipe_init(zt_engine_t e);
/* register_optimizer: the groups of every stage (a collective call over the world) and the
 * tied gradient's receive buffer */
enum zt_status zt_engine_pipe_finalize(zt_engine_t e);
void zt_engine_pipe_free(zt_engine_t e);
/* grad_ready, once the tied parameter's sums are final and before they are reduced among the
 * stage's replicas: summed with the other end's (the same replica of the first or last stage) */
enum zt_status zt_engine_pipe_tie_grads(zt_engine_t e, const struct zt_task_opts *o);
/* grad_norm, after the replicas' all-gather of the sums: this stage's group sums to the same
 * replica of every other stage, theirs from them */
enum zt_status zt_engine_pipe_norm_sums(zt_engine_t e, const struct zt_task_opts *o);
/* whether this rank prints the engine's notes (world rank 0) */
int zt_engine_talks(const struct zt_engine *e);
/* weights.c: the values or gradients of every stage to world rank 0, which writes path; whole:
 * the stage's consolidated flat fp32 buffer when its replicas hold parts, else NULL */
enum zt_status zt_engine_pipe_save(zt_engine_t e, const char *path, int grads,
                                   zt_tensor_t whole);

// ----------------------------------------------------------------------------
// layout helpers

/* first row of block j of p (zt_tensor_init's even split) */
static inline int64_t zt_param_blk_row0(const struct zt_param *p, int j) {
    return zt_plan_blk_row0(p->rows, p->nblk, j);
}
/* elements of p's blocks that this rank owns */
static inline int64_t zt_param_own_elems(const struct zt_param *p) {
    return (zt_param_blk_row0(p, p->own1) - zt_param_blk_row0(p, p->own0)) * p->cols;
}
/* which of p's storage holds only its own blocks (zero_plan.h) */
static inline int zt_engine_partial_values(const struct zt_engine *e, const struct zt_param *p) {
    return zt_plan_partial_values(e->stage, p->persistent);
}
static inline int zt_engine_partial_grads(const struct zt_engine *e) {
    return zt_plan_partial_grads(e->stage);
}
static inline int zt_engine_partial_master(const struct zt_engine *e, const struct zt_param *p) {
    return zt_plan_partial_master(e->stage, e->mixed, p->persistent);
}
/* stage 1 with reduce_scatter and several ranks: the gradient sums are whole, but after the
 * reduction only the rank's own blocks hold the sums */
static inline int zt_engine_scattered_sums(const struct zt_engine *e) {
    return e->stage == 1 && e->size > 1 && e->cfg.reduce_scatter;
}
/* the blocks the model reads and the optimizer's all-gathers send: the working copy (mixed) */
static inline zt_tensor_t zt_param_work(const struct zt_param *p) {
    return p->work ? p->work : p->home;
}
/* elements of parameter block b (its padding excluded) */
static inline int64_t zt_engine_blk_elems(const struct zt_engine *e, int b) {
    const struct zt_block_ref *g = &e->buf.grad_blk[b];
    return zt_tensor_blk_rows(g->t, g->blk) * zt_tensor_cols(g->t);
}
/* elements [x0, x1) of p's values or moments (role, io/zt_ckpt.h) from checkpoint shards */
enum zt_status zt_param_read_shards(struct zt_shard_set *s, const struct zt_param *p, int role,
                                    int64_t x0, int64_t x1, float *dst);

// ----------------------------------------------------------------------------
// rng.c: a normal generator independent of libc (splitmix64 + Box-Muller)
void zt_rng_normal(float *x, int64_t n, float std, uint64_t *s);
/* advance s past the draws of zt_rng_normal(x, n, ., s) without making them */
void zt_rng_skip_normal(int64_t n, uint64_t *s);

// ----------------------------------------------------------------------------
// engine.c
/* ZT_GRAPH_CHUNKS and ZT_OPT_GROUP_ELEMS, as the engine reads them */
enum zt_status zt_engine_plan_knobs(int64_t *chunks, int64_t *group_elems);
/* the ZeRO plan's inputs for rank `rank` of world_size under config c */
struct zt_plan_cfg zt_engine_plan_cfg(const struct zt_config *c, int rank, int world_size,
                                      int chunks, int64_t group_elems);
/* activation blocks: whole sequences, min(ZT_GRAPH_CHUNKS, micro_batch) of them; never a
 * function of the worker count (determinism) */
static inline int zt_engine_act_blocks(int micro_batch, int chunks) {
    return micro_batch < chunks ? micro_batch : chunks;
}
/* Options for a task the engine adds on behalf of the model's task in ctx (a gather, a slot's
 * zeroing, a reduction): its layer and micro-batch, priority class c. */
struct zt_task_opts zt_engine_task_opts(const struct zt_engine *e, const struct zt_step_ctx *ctx,
                                        enum zt_prio_class c);
/* the context of the engine's own work outside the model's passes (no layer, no micro-batch) */
struct zt_step_ctx zt_engine_own_ctx(const struct zt_engine *e, enum zt_prio_class c);
/* the aio engine's settings (the config's aio section, ZT_AIO_ENGINE) */
enum zt_status zt_engine_aio_cfg(const struct zt_engine *e, struct zt_aio_cfg *ac);
/* take the swap I/O service (its threads serve swaps and checkpoint writes), once per engine */
enum zt_status zt_engine_io_start(zt_engine_t e);

// ----------------------------------------------------------------------------
// slots.c
/* A shape class: one pool pair per distinct rows x cols, in the order of their first parameter */
struct zt_slot_class {
    int64_t rows, cols;
    int nblk;               /* row blocks of a slot (its first parameter's blocking) */
    int64_t count;          /* its non-persistent parameters */
    int64_t value_slots;    /* stage 3: the gathered-value slots it starts with */
};
/* The slot pools of n parameters (shapes, plan entries pp, names for messages) under config c:
 * cls[i] the class of parameter i, out[0..*nclasses) the classes. Stage 3 gathers each
 * non-persistent parameter into a slot of its shape: the budget (value_slots_budget) shared
 * among the shapes in proportion to their elements, at least two slots per shape (a task may
 * read two parameters of one shape). Stage >= 2 gradient slots start at one per class and grow
 * when every slot waits for its bucket's reduction. ZT_ERR_CONFIG: a parameter larger than
 * offload_param.buffer_size. */
enum zt_status zt_slots_plan(const struct zt_config *c, int n, const struct zt_plan_shape *shapes,
                             const struct zt_plan_param *pp, const char *const *names, int *cls,
                             struct zt_slot_class *out, int *nclasses);
enum zt_status zt_slots_init(zt_engine_t e);
void zt_slots_free(zt_engine_t e);
int64_t zt_slots_value_bytes(const struct zt_engine *e);
int64_t zt_slots_grad_bytes(const struct zt_engine *e);
/* stage 3: every gathered value is stale once the optimizer updates the shards */
void zt_slots_drop_gathered(zt_engine_t e);
/* stage >= 2: p's gradient slot goes back to its pool (its bucket was reduced) */
void zt_slots_release_grad(zt_engine_t e, struct zt_param *p);

// ----------------------------------------------------------------------------
// step.c
/* the parts of blocks [b0, b1) that each rank owns, as block ranges relative to b0, in
 * e->st.parts */
const int64_t *zt_engine_bucket_parts(zt_engine_t e, int b0, int b1);
/* all-gather every rank's part of refs (parameter or gradient blocks), bucket by bucket */
enum zt_status zt_engine_allgather_buckets(zt_engine_t e, const struct zt_task_opts *o,
                                           const struct zt_plan_bucket *bks, int n,
                                           const struct zt_block_ref *refs);

// ----------------------------------------------------------------------------
// loss_scale.c
void zt_loss_scaler_init(struct zt_loss_scaler *sc, const struct zt_config *cfg);
/* after a step of fp16 training: overflow says whether its gradients overflowed */
enum zt_status zt_loss_scaler_update(struct zt_loss_scaler *sc, const struct zt_config *cfg,
                                     int overflow, int64_t step, int log);

// ----------------------------------------------------------------------------
// offload.c: NVMe offload behind this interface; nothing else reads its fields. It exists
// (e->offload != NULL) exactly when the optimizer state is on NVMe.
/* Open the swap files, allocate the swap buffers and write the offloaded parameter shards'
 * initial values (drawn from the generator state rng0 of finalize's start). */
enum zt_status zt_offload_init(zt_engine_t e, uint64_t rng0);
/* the placements offload supports: offload_param nvme only with offload_optimizer nvme */
enum zt_status zt_offload_check(const struct zt_config *c);
void zt_offload_free(zt_engine_t e);
/* whether the stage-3 parameter shards are in the swap file too */
int zt_offload_has_params(const struct zt_offload *o);
/* stage 3: submit the reads of offloaded p's own blocks into their places in slot */
enum zt_status zt_offload_gather(zt_engine_t e, const struct zt_param *p, zt_tensor_t slot,
                                 const struct zt_task_opts *o);
/* submit AdamW on the swapped state, swap unit by swap unit */
enum zt_status zt_offload_adamw(zt_engine_t e, const struct zt_task_opts *o,
                                const struct zt_adamw_hparams *hp, zt_tensor_t coef);
/* between steps, blocking: the fp32 values of offloaded block b (this rank's) */
enum zt_status zt_offload_read_values(zt_engine_t e, int b, float *dst);
/* between steps, blocking: block b's exp_avg (moment 0) or exp_avg_sq (1) */
enum zt_status zt_offload_read_moment(zt_engine_t e, int b, int moment, float *dst);
/* the two swap files: the optimizer state's and (stage 3, offload_param nvme) the parameters' */
enum zt_swap_file { ZT_SWAP_OPTIM_FILE, ZT_SWAP_PARAM_FILE };
/* the order blocks that guard the regions of blocks [b0, b1) (this rank's) in swap file f, each
 * once, into refs; returns the count. A task holding them sees the state after the updates
 * submitted before it. */
int zt_offload_order_refs(zt_engine_t e, enum zt_swap_file f, int b0, int b1,
                          struct zt_block_ref *refs);
/* Rewrite the offloaded parameter shards (and with 16-bit parameters on NVMe their fp32
 * masters): from st, from checkpoint shards ck, or (both NULL) the initializer's stream rng. */
enum zt_status zt_offload_write_params(zt_engine_t e, struct zt_safetensors *st,
                                       struct zt_shard_set *ck, uint64_t rng);
/* rewrite the swapped exp_avg and exp_avg_sq from checkpoint shards */
enum zt_status zt_offload_load_moments(zt_engine_t e, struct zt_shard_set *s);
/* The swap buffers of plan pl under config c: buffer_count units in flight, each [m | v (| w)
 * (| 16-bit w)] of the largest unit; "auto" (0): as many as ZT_SWAP_BUFFER_MEM holds (at most
 * 1/8 of ZT_HOST_MEM_LIMIT), at least 4 (DeepSpeed's default count); never more than units. */
enum zt_status zt_offload_buffers(const struct zt_config *c, const struct zt_zero_plan *pl,
                                  int *nbuf, int64_t *buf_bytes);
/* bytes of the swap buffers (host memory) and of the swap files */
void zt_offload_memory(const struct zt_offload *o, int64_t *buffers, int64_t *files);

// ----------------------------------------------------------------------------
// weights.c
/* p's values from the whole tensor v (fp32): the master blocks this rank keeps, and the working
 * copy rounded (mixed precision). Between steps only. */
enum zt_status zt_weights_set_values(zt_engine_t e, struct zt_param *p, const float *v);

#endif /* ZT_ENGINE_IMPL_H */
