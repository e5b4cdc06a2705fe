/*
 * graph/zt_engine.h: the training engine: parameters by name, their flat buffers, gradients and
 * optimizer state, activations, and the per-step lifecycle.
 *
 * Layer: graph/. A model (graph/gpt2.c, apps/mlp_example.c) declares parameters, finalizes the
 * engine, then each step: zt_engine_step_begin (zeroes gradients), submits its forward/backward
 * tasks (tasks/zt_tasks.h) on engine-owned tensors, zt_engine_step_end (gradient norm, clipping,
 * AdamW tasks), zt_engine_step_wait. Everything is submitted before anything is waited for.
 *
 * Data parallelism (ZeRO, DeepSpeed's stages 0-3): with N MPI ranks each rank runs the same
 * graph on its rows of the batch; the flat layout is cut into N shards of whole row blocks
 * (rank r owns a contiguous range); gradient buckets (reduce_bucket_size) are reduced by
 * collective tasks; at stages 1-3 a rank keeps AdamW state and updates only its shard. Stages
 * 1-2 then all-gather the shards (allgather_bucket_size). At stage 2 a micro-batch's gradients
 * go to slots (full-size tensors shared by the parameters of one shape) and each bucket is
 * reduce-scattered into the rank's gradient shard as soon as it is declared (grad_ready), so a
 * rank holds 1/N of the gradient sums plus the slots in flight. At stage 3 a rank also holds
 * only its shard of the parameters (plus the small "persistent" ones whole): zt_param_value
 * gathers a parameter into a slot when the model reads it, and slots are reused least recently
 * gathered first, so gathers run ahead of the compute as far as free slots allow.
 *
 * Offload (zero_optimization.offload_optimizer / offload_param nvme): the optimizer state of the
 * rank's groups (and at stage 3 its non-persistent parameter shards) live in swap files under
 * nvme_path; step_end swaps each group into one of buffer_count swap buffers, runs AdamW there
 * and swaps it out (swap_in/swap_out tasks, tasks/zt_tasks.h), and a stage-3 gather reads the
 * rank's blocks from the file into the slot before the all-gather. step_wait returns a failed
 * swap's error (file, offset). Results are bit-identical to the same run in memory.
 *
 * Mixed precision (config "bf16" / "fp16", DeepSpeed's meaning): the model reads a bf16/fp16
 * working copy of the parameters and accumulates 16-bit gradients (zt_engine_dtype); slots,
 * collectives and activations made with zt_engine_act_dtype are 16-bit too. The optimizer keeps
 * fp32 master weights beside exp_avg and exp_avg_sq (this rank's blocks at stage >= 1, whole at
 * stage 0), and each AdamW task writes the rounded copy of what it updated. fp16 scales the
 * loss (zt_engine_loss_scale: the model multiplies its loss gradient by it); a step whose
 * gradients hold an inf or NaN is skipped (values, moments, Adam's step count and the LR
 * schedule unchanged) and the scale follows DeepSpeed's DynamicLossScaler.
 *
 * Memory (llm.c): parameters, gradients, exp_avg and exp_avg_sq are each ONE flat buffer; a
 * parameter is a slice aligned to 16 floats. Parameters of two or more dimensions with enough
 * elements are split into ZT_GRAPH_CHUNKS row blocks so their gradient products run in parallel.
 */
#ifndef ZT_ENGINE_H
#define ZT_ENGINE_H

#include <stdint.h>     /* int64_t */
#include "zt_config.h"  /* struct zt_config */
#include "zt_sched.h"   /* enum zt_prio_class */
#include "zt_status.h"  /* enum zt_status */
#include "zt_tasks.h"   /* struct zt_task_opts */
#include "zt_tensor.h"  /* zt_tensor_t */

#ifdef __cplusplus
extern "C" {
#endif

typedef struct zt_engine *zt_engine_t;
typedef struct zt_param *zt_param_t;

enum zt_init { ZT_INIT_ZERO = 0, ZT_INIT_ONE, ZT_INIT_NORMAL };

/* Create an engine for cfg (copied): starts MPI and StarPU (zt_tasks_init) and checks that the
 * config's batch rule was resolved for this job's world size (ZT_ERR_CONFIG otherwise). Reads
 * ZT_GRAPH_CHUNKS and ZT_OPT_GROUP_ELEMS. Owner: caller, with zt_engine_free. */
enum zt_status zt_engine_init(zt_engine_t *e, const struct zt_config *cfg);
void zt_engine_free(zt_engine_t e);

/* Declare a parameter (before zt_engine_finalize). shape[0] rows, the rest flattened into
 * columns. init: zero, one, or normal(0, std) from the engine's seeded generator, drawn in
 * declaration order. Returns NULL and sets the error on a duplicate name or bad shape. */
zt_param_t zt_engine_param(zt_engine_t e, const char *name, int ndim, const int64_t *shape,
                           enum zt_init init, float std);
/* A parameter of the model that this rank does not hold (another pipeline stage's): nothing is
 * declared, but its draws from the generator are skipped in its place, so that every layout
 * starts from the same values. Call it in declaration order, between the zt_engine_param
 * calls. */
void zt_engine_param_skip(zt_engine_t e, int ndim, const int64_t *shape, enum zt_init init);
/* The row blocks per tensor an engine started now would use: ZT_GRAPH_CHUNKS, or 1 when it is
 * unset and StarPU runs (or will start) CUDA workers. Part of what every rank must agree on. */
enum zt_status zt_engine_graph_chunks(int64_t *chunks);
/* Lay out and allocate every flat buffer, register the tensors, initialise parameters. */
enum zt_status zt_engine_finalize(zt_engine_t e);

/* ---- pipeline parallelism (docs/pipeline.md): stages x data-parallel replicas ----
 * This rank's stage and the stage count (1: no pipeline). The data-parallel job the ZeRO plan,
 * the batch rows and the collectives see is then the stage's own: its replicas
 * (zt_engine_rank and zt_engine_world_size count them, not the world). */
int zt_engine_pipe_stage(zt_engine_t e, int *stages);
/* Every stage's tensors, in stage order (a 1-rank model's order; the last stage's copy of a
 * tied parameter left out): a collective call of every rank; world rank 0 gets the malloc'd
 * table (*n entries; free it), the others NULL. */
struct zt_engine_tensor {
    char name[160];
    int ndim;
    int64_t shape[8];
};
enum zt_status zt_engine_pipe_tensors(zt_engine_t e, struct zt_engine_tensor **out, int *n);
/* The world rank of stage s's rank. */
int zt_engine_pipe_rank(zt_engine_t e, int s);
/* p is held by the first and the last stage (GPT-2's token embedding, which the head reads too:
 * DeepSpeed's TiedLayerSpec). Before the gradient norm the two add each other's gradient of it,
 * so both copies take the same step, and only the first stage counts it in the norm. Call it
 * on both stages, before zt_engine_finalize. */
enum zt_status zt_engine_pipe_tie(zt_engine_t e, zt_param_t p);
/* The point-to-point tags of a pipeline's messages (tasks/zt_tasks.h zt_task_send/recv): the
 * model's activations forward and their gradients back, the engine's norm sums and tied
 * gradients. */
enum zt_pipe_tag { ZT_PIPE_TAG_ACT = 1, ZT_PIPE_TAG_GRAD, ZT_PIPE_TAG_NORM, ZT_PIPE_TAG_TIED };

/* Where the model is in the step when it submits a task: the task's priority class, its layer
 * (-1: embeddings, 0..n_layer-1: blocks, n_layer: final norm and head; -1 when not per layer) of
 * n_layer, and the micro-batch (-1 when none). The engine tags and prioritises the tasks it adds
 * on behalf of the model's (stage-3 gathers, gradient slots, bucket reductions) from the context
 * passed to zt_param_value, zt_param_grad and zt_engine_grad_ready: there is no hidden "current
 * layer" in the engine. opts are the options of the model's own tasks in this context. */
struct zt_step_ctx {
    enum zt_prio_class cls;
    int layer, n_layer, mb;
    struct zt_task_opts opts;
};
/* The context (and task options: priority from sched/zt_sched.h, layer, micro-batch, step) for
 * tasks of class c at layer `layer` of n_layer in micro-batch mb of the current step. */
struct zt_step_ctx zt_engine_ctx(zt_engine_t e, enum zt_prio_class c, int layer, int n_layer,
                                 int mb);

/* The tensor the model's tasks read (value) and accumulate gradients into (grad), valid after
 * finalize. Call them when submitting each task (ctx: that task's context), never keep the
 * result: at ZeRO stage 3 the value is a slot that zt_param_value fills by submitting an
 * all-gather (tagged with ctx's layer and micro-batch, prioritised as a prefetch of the forward
 * or, in a backward context, of the backward) when the parameter is not gathered; at stage >= 2
 * zt_param_grad gives a zeroed slot when the parameter has none since its last reduction. A task
 * may read at most two non-persistent parameters of one shape. NULL (error set) on failure. */
zt_tensor_t zt_param_value(const struct zt_step_ctx *ctx, zt_param_t p);
zt_tensor_t zt_param_grad(const struct zt_step_ctx *ctx, zt_param_t p);
const char *zt_param_name(zt_param_t p);
int zt_param_ndim(zt_param_t p);
const int64_t *zt_param_shape(zt_param_t p);
int zt_engine_nparams(zt_engine_t e);
zt_param_t zt_engine_param_at(zt_engine_t e, int i);
zt_param_t zt_engine_param_find(zt_engine_t e, const char *name);
int64_t zt_engine_numel(zt_engine_t e); /* parameters (without padding) */

/* Activation tensor of a micro-batch: rows = micro_batch * rows_per_seq, blocks of whole
 * sequences (min(ZT_GRAPH_CHUNKS, micro_batch) blocks). Owned by the engine. */
enum zt_status zt_engine_act(zt_engine_t e, const char *name, int64_t rows_per_seq, int64_t cols,
                             size_t elemsize, zt_tensor_t *out);
/* The same with an element type (zt_engine_dtype() for the activations of mixed precision). */
enum zt_status zt_engine_act_dtype(zt_engine_t e, const char *name, int64_t rows_per_seq,
                                   int64_t cols, enum zt_dtype dtype, zt_tensor_t *out);
/* Tensor with one row per activation block (for per-block partial results). */
enum zt_status zt_engine_act_partials(zt_engine_t e, const char *name, int64_t cols,
                                      zt_tensor_t *out);
int zt_engine_nblk(zt_engine_t e);
/* Without an engine: the bytes of an activation that zt_engine_act (rows_per_seq > 0, elements
 * of elemsize bytes) or zt_engine_act_partials (rows_per_seq 0, fp32) makes in an engine of
 * config cfg with ZT_GRAPH_CHUNKS = chunks, as zt_engine_memory counts them. */
int64_t zt_engine_act_size(const struct zt_config *cfg, int chunks, int64_t rows_per_seq,
                           int64_t cols, size_t elemsize);

const struct zt_config *zt_engine_config(zt_engine_t e);
/* The type of the working copy, gradients and slots: F32, or BF16/F16 in mixed precision. */
enum zt_dtype zt_engine_dtype(zt_engine_t e);
/* The same for an engine of config cfg, without one. */
enum zt_dtype zt_engine_config_dtype(const struct zt_config *cfg);
/* The loss scale of the next step's backward (fp16; 1 otherwise): the model multiplies the
 * gradient of its loss by it. */
float zt_engine_loss_scale(zt_engine_t e);
/* Step lifecycle. step is 1-based; the lr is the config schedule's value for it. */
enum zt_status zt_engine_step_begin(zt_engine_t e, int64_t step);
/* Declare that no task submitted later in this micro-batch writes p's gradient (call it after
 * submitting each micro-batch's backward tasks for p; ctx: the context of the last of them,
 * which tags the reduction and ranks it among the last ones when its layer is <= 0). With
 * zero_optimization.overlap_comm, the reduction of p's bucket is submitted as soon as every
 * parameter of the bucket is declared: at stages 0-1 in the last micro-batch (the all-reduce of
 * the sums, with several ranks), at stage >= 2 in every micro-batch (a reduce-scatter into the
 * gradient shards), so it overlaps the rest of the backward. Optional: step_end reduces
 * whatever was not declared. */
enum zt_status zt_engine_grad_ready(zt_engine_t e, const struct zt_step_ctx *ctx,
                                    zt_param_t p);
/* Reduce the gradients left (all-reduce at ZeRO stages 0-1, reduce-scatter at stages 2-3), then
 * the gradient norm, clipping and AdamW on the groups this rank updates (all at stage 0, its
 * shard at stages 1-3), then all-gather the updated shards (stages 1-2; at stage 3 only the
 * persistent parameters: the others are gathered when next read). */
enum zt_status zt_engine_step_end(zt_engine_t e);
struct zt_step_info {
    int64_t step;
    float lr;
    float grad_norm;  /* global L2 norm of the gradients before clipping (unscaled) */
    double loss_scale; /* the scale the step's backward used (1 unless fp16) */
    int skipped;      /* fp16: the gradients overflowed and the update was skipped */
};
/* Wait for the step's results (info; the model's losses are acquired by the model). Without
 * offload every task of the step is done on return. With optimizer state on NVMe the step's last
 * swap-outs may still run, overlapping the next step (which the graph orders after them where it
 * must): a swap error fails the next step_wait or zt_engine_finish. */
enum zt_status zt_engine_step_wait(zt_engine_t e, struct zt_step_info *info);
/* After a training step's zt_engine_step_wait, with the model's loss of it: in fp32 and bf16 a
 * NaN or Inf loss or gradient norm is ZT_ERR_NUMERIC naming the step, or with
 * ZT_ON_NONFINITE=warn one warning line (rank 0, the first such step) and ZT_OK. fp16 skips
 * such steps instead (loss scaling); evaluations are not checked. */
enum zt_status zt_engine_check_step(zt_engine_t e, double loss, const struct zt_step_info *info);
/* What a checkpoint keeps of the training loop besides tensors: updates applied and skipped
 * (the step count of Adam and of the LR schedule is applied + 1) and the fp16 loss scaler
 * (DeepSpeed's DynamicLossScaler fields). Set it between steps. */
struct zt_train_state {
    int64_t applied, skipped;
    double loss_scale;
    int64_t cur_iter, last_overflow_iter;
    int cur_hysteresis;
};
void zt_engine_get_train_state(zt_engine_t e, struct zt_train_state *st);
void zt_engine_set_train_state(zt_engine_t e, const struct zt_train_state *st);
/* Wait for every task (the last swap-outs included) and report a failed swap. Call it after the
 * last step. */
enum zt_status zt_engine_finish(zt_engine_t e);

/* Weights in and out, Hugging Face names: every parameter must be present with its shape
 * (F32, BF16 or F16). Export is F32, atomic, in declaration order. */
enum zt_status zt_engine_load_safetensors(zt_engine_t e, const char *path);
enum zt_status zt_engine_save_safetensors(zt_engine_t e, const char *path);
/* The current gradients under the parameter names (after zt_engine_step_wait they are the
 * unclipped gradients of the step just done, summed over the ranks: clipping scales inside the
 * AdamW task). At ZeRO stage >= 2 (gradients) and 3 (values) the ranks' shards are all-gathered
 * into a temporary whole copy first. Collective: every rank calls it; rank 0 writes. */
enum zt_status zt_engine_save_grads_safetensors(zt_engine_t e, const char *path);

/* Checkpoint shards (io/zt_ckpt.h, docs/checkpoints.md). A shard holds this rank's rows (the row
 * blocks of its ZeRO shard, at every stage) of each parameter's fp32 value, exp_avg and
 * exp_avg_sq, written atomically to path.
 * zt_engine_save_begin: call at a step boundary (after zt_engine_step_end, before the next
 * step's tasks are submitted). It returns at once; the state is written in the background by
 * host tasks on the I/O threads (one per parameter), each holding the blocks it reads (values
 * and moments in memory, or the swap files' regions of offloaded state) so it sees the state
 * after that step, while the next steps' forward and backward run; only their updates of that
 * state wait for it. zt_engine_save_end waits for the shard (written, fsynced, renamed into
 * place) and reports its first failure; info (may be NULL) gets its bytes and the time from
 * begin to the shard being complete. One save at a time.
 * zt_engine_save_shard: both at once.
 * Load: replaces the engine's state with the shards paths[0..n) (rank k's at paths[k]) written
 * by any world size and ZeRO stage: all are opened and checked (names, shapes, every row present
 * once) before anything changes, and each record's CRC32C is checked as it is read. Not
 * collective; call between steps. */
struct zt_save_info {
    int64_t bytes;
    double write_ms;
};
enum zt_status zt_engine_save_begin(zt_engine_t e, const char *path);
enum zt_status zt_engine_save_end(zt_engine_t e, struct zt_save_info *info);
enum zt_status zt_engine_save_shard(zt_engine_t e, const char *path);
enum zt_status zt_engine_load_shards(zt_engine_t e, const char *const *paths, int n);
/* The flat-layout elements [lo, hi) of rank r's ZeRO shard (padding included). */
void zt_engine_shard_range(zt_engine_t e, int r, int64_t *lo, int64_t *hi);

/* Rank and world size of the data-parallel job (MPI; with a pipeline, the stage's replicas). */
int zt_engine_rank(zt_engine_t e);
int zt_engine_world_size(zt_engine_t e);

/* Bytes per category on this rank (host memory), slots included: optimizer state is 1/N of the
 * total at ZeRO stage >= 1 (whole row blocks per rank), gradient sums 1/N at stage >= 2 plus the
 * gradient slots (holding micro-batch gradients until their bucket is reduced; they grow on
 * demand, so they are larger after step 1 than before it), parameters 1/N at stage 3 plus the
 * persistent parameters and the value slots (gathered parameters). */
struct zt_engine_mem {
    int64_t params, grads, optim, acts;
    int64_t value_slots, grad_slots;   /* parts of params and grads: the slot pools */
    int64_t swap_buffers;              /* part of optim: NVMe offload's swap buffers */
    int64_t nvme;                      /* bytes of this rank's swap files */
};
void zt_engine_memory(zt_engine_t e, struct zt_engine_mem *m);

#ifdef __cplusplus
}
#endif
#endif /* ZT_ENGINE_H */
