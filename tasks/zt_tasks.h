/*
 * tasks/zt_tasks.h: the task API users build apps against: one insert function per task kind.
 *
 * Layer: tasks/ (the only code that calls starpu_task_insert). Every function submits
 * asynchronously and returns ZT_OK or a status (ZT_ERR_INVALID for mismatched shapes,
 * ZT_ERR_RUNTIME if StarPU refuses the task). Tensors are fp32 unless stated; token tensors are
 * int32. Wherever a task takes fp32 it also takes bf16 or fp16 tensors (zt_tensor_init_dtype):
 * it computes in fp32 on their widened values and rounds what it writes to nearest even, once
 * per task (an accumulating task rounds the sum it stores); the blocks listed in one argument
 * must share one type. Collectives move 16-bit blocks as 16-bit data. "blk" selects a row block;
 * the block structure of tensors used together must agree (same number of blocks, block b of
 * each covering the same sequences). Kernel semantics
 * (layouts, += versus =) are those of kernels/zt_kernels.h.
 */
#ifndef ZT_TASKS_H
#define ZT_TASKS_H

#include <stdint.h>       /* int64_t */
#include "zt_status.h"    /* enum zt_status */
#include "zt_tensor.h"    /* zt_tensor_t */
#include "zt_task_kinds.h"/* enum zt_task_kind */

#ifdef __cplusplus
extern "C" {
#endif

struct zt_tokens;   /* io/zt_tokens.h */
struct zt_data_row; /* io/zt_tokens.h */

/* Per-task options: trace fields and scheduling priority. */
struct zt_task_opts {
    int layer;     /* -1 when not per layer */
    int mb;        /* micro-batch index, -1 when not */
    int64_t step;  /* training step (trace) */
    int priority;  /* StarPU priority (see sched/zt_prio) */
    int recompute; /* 1: the task recomputes activations a checkpointed block did not keep
                    * (activation checkpointing): marked as such in traces */
    int on_host;   /* 1: CPU workers run it even where a GPU worker could (ZeRO-Offload's
                    * optimizer); 0: the GPU takes every task it has a kernel for */
};

/* Start the runtime (StarPU, single-threaded BLAS); reference counted. */
enum zt_status zt_tasks_init(void);
void zt_tasks_free(void);

/* ---- data ---- */
/* inputs/targets [Bm, T] int32 (one row per sequence), block blk: rows of global step `step`
 * (1-based) with global batch B, this micro-batch's first global row being row0 (data rule of
 * io/zt_tokens.h). */
enum zt_status zt_task_load_batch(const struct zt_task_opts *o, zt_tensor_t inputs,
                                  zt_tensor_t targets, int blk, const struct zt_tokens *tok,
                                  int64_t step, int B, int row0);
/* The same from planned rows (io/zt_dataset.h's sampler): the block's row i is rows[row0 +
 * its first row in the tensor + i] of the open files; targets from position `active` on are -1
 * (no loss: the sequence-length curriculum; active = T for none). The rows are copied. */
enum zt_status zt_task_load_rows(const struct zt_task_opts *o, zt_tensor_t inputs,
                                 zt_tensor_t targets, int blk, const struct zt_tokens *files,
                                 const struct zt_data_row *rows, int row0, int active);
/* The first load_batch that failed (the token file shrank or holds an id >= vocab_size since it
 * was opened: its block was zeroed instead), its message set as the last error, or ZT_OK. Check
 * it once the step's losses are in, before using them. */
enum zt_status zt_task_data_status(void);
/* Zero every block of t (one task per block). */
enum zt_status zt_task_zero(const struct zt_task_opts *o, zt_tensor_t t);

/* ---- embedding ---- (out [N,C] with N = Bm*T; tokens [Bm,T]; wpe may be NULL) */
enum zt_status zt_task_encoder_forward(const struct zt_task_opts *o, zt_tensor_t out, int blk,
                                       zt_tensor_t tokens, zt_tensor_t wte, zt_tensor_t wpe);
enum zt_status zt_task_encoder_backward(const struct zt_task_opts *o, zt_tensor_t dwte,
                                        zt_tensor_t dwpe, zt_tensor_t dout, zt_tensor_t tokens);

/* ---- layernorm ---- (out/inp [N,C], mean/rstd [N], w/b [C]) */
enum zt_status zt_task_layernorm_forward(const struct zt_task_opts *o, zt_tensor_t out,
                                         zt_tensor_t mean, zt_tensor_t rstd, int blk,
                                         zt_tensor_t inp, zt_tensor_t w, zt_tensor_t b);
/* dinp block += input gradient; part (rows = nblk of dinp, cols = 2C) row blk = [dw | db] of
 * this block, reduced in block order by zt_task_layernorm_param_reduce (deterministic). */
enum zt_status zt_task_layernorm_backward(const struct zt_task_opts *o, zt_tensor_t dinp,
                                          zt_tensor_t part, int blk, zt_tensor_t dout,
                                          zt_tensor_t inp, zt_tensor_t w, zt_tensor_t mean,
                                          zt_tensor_t rstd);
enum zt_status zt_task_layernorm_param_reduce(const struct zt_task_opts *o, zt_tensor_t dw,
                                              zt_tensor_t db, zt_tensor_t part);

/* ---- matmul ---- (HF layout w [C,OC]; out/dout [N,OC]; inp/dinp [N,C]; bias may be NULL)
 * With fp32 inp/out and a bf16 w, on a CPU with a bf16 engine (ZT_GEMM not avx512/openblas),
 * the forward computes as a bf16 model does (llama.cpp, autocast): each input rounded to bf16,
 * the products summed in fp32 on the bf16 engine, from the bias. */
enum zt_status zt_task_matmul_forward(const struct zt_task_opts *o, zt_tensor_t out, int blk,
                                      zt_tensor_t inp, zt_tensor_t w, zt_tensor_t bias);
enum zt_status zt_task_matmul_backward_inp(const struct zt_task_opts *o, zt_tensor_t dinp,
                                           int blk, zt_tensor_t dout, zt_tensor_t w,
                                           int accumulate);
/* dw block wblk (rows of w) += inp^T @ dout over every row block; wblk -1: every block of dw in
 * one task (for 16-bit tensors: the activations are widened once instead of once per block) */
enum zt_status zt_task_matmul_backward_weight(const struct zt_task_opts *o, zt_tensor_t dw,
                                              int wblk, zt_tensor_t inp, zt_tensor_t dout);
enum zt_status zt_task_matmul_backward_bias(const struct zt_task_opts *o, zt_tensor_t dbias,
                                            zt_tensor_t dout);
/* A bf16 weight packed once for the bf16 engine (what a bf16 model's products read on every
 * step, as llama.cpp repacks its weights for AMX): zt_bf16_tiles_available says whether this
 * process packs (a bf16 engine, ZT_GEMM not avx512/openblas); zt_bf16_tiles_elems the values
 * a packed [rows, cols] weight takes (rows and cols rounded up to multiples of 32);
 * zt_bf16_tiles_pack packs src (rows ld apart) into dst, then the caller marks the tensor over
 * dst (zt_tensor_set_bf16_tiles). ZT_ERR_INVALID when this process does not pack. */
int zt_bf16_tiles_available(void);
size_t zt_bf16_tiles_elems(int64_t rows, int64_t cols);
enum zt_status zt_bf16_tiles_pack(const uint16_t *src, int64_t ld, int64_t rows, int64_t cols,
                                  uint16_t *dst);
/* tied head: w [OC,C]; out [N,OC] = inp @ w^T */
enum zt_status zt_task_matmul_t_forward(const struct zt_task_opts *o, zt_tensor_t out, int blk,
                                        zt_tensor_t inp, zt_tensor_t w);
enum zt_status zt_task_matmul_t_backward_inp(const struct zt_task_opts *o, zt_tensor_t dinp,
                                             int blk, zt_tensor_t dout, zt_tensor_t w,
                                             int accumulate);
enum zt_status zt_task_matmul_t_backward_weight(const struct zt_task_opts *o, zt_tensor_t dw,
                                                int wblk, zt_tensor_t dout, zt_tensor_t inp);

/* ---- attention ---- (qkv [N,3C], out [N,C], att [Bm, NH*T*T]) */
enum zt_status zt_task_attention_forward(const struct zt_task_opts *o, zt_tensor_t out,
                                         zt_tensor_t att, int blk, zt_tensor_t qkv, int n_head);
enum zt_status zt_task_attention_backward(const struct zt_task_opts *o, zt_tensor_t dqkv,
                                          int blk, zt_tensor_t dout, zt_tensor_t qkv,
                                          zt_tensor_t att, int n_head);

/* ---- inference ---- (tasks/inference.c) A generation step works on rows: row r of the step's
 * activation tensors is position rows[r].pos of the sequence held in KV-cache slot rows[r].slot.
 * A layer's KV cache is an f32, bf16 or f16 tensor kv [S*Tc, 2C] with one block per slot (block
 * s: slot s's cache, head-major as zt_kern_kv_store lays it out; 16-bit: K and V rounded as they
 * are stored, zt_kern_kv_store16). The functions take the whole step's arrays
 * (indexed by row) and read the entries of block blk's rows; within a block, the rows of one slot
 * must be together. */
struct zt_row_pos {
    int32_t slot, pos;
};
/* out block blk (f32 [n, C]) row r = column tokens[r] of wte_t + wpe[rows[r].pos]: the token
 * table transposed, [C, V], as the generator keeps it (the tied head then reads it as a
 * [C, V] weight, row after row); 16-bit tables are widened one token's column at a time */
enum zt_status zt_task_embed_rows(const struct zt_task_opts *o, zt_tensor_t out, int blk,
                                  zt_tensor_t wte_t, zt_tensor_t wpe, const int32_t *tokens,
                                  const struct zt_row_pos *rows);
/* the same with row r's token read from ids[r] (one block of int32, at least a token per row
 * of out) when the task runs: a task before it writes them (the decode step ahead of the one
 * whose sampling picks them) */
enum zt_status zt_task_embed_fed(const struct zt_task_opts *o, zt_tensor_t out, int blk,
                                 zt_tensor_t wte_t, zt_tensor_t wpe, zt_tensor_t ids,
                                 const struct zt_row_pos *rows);
/* the K and V columns of qkv block blk's rows into their slots' caches, at their positions.
 * kv: f32 [S * ctx, 2C] in S blocks, one per slot; inside a slot the cache is head-major
 * (kernels/zt_kernels.h: zt_kern_kv_store), hence n_head */
enum zt_status zt_task_kv_append(const struct zt_task_opts *o, zt_tensor_t kv, zt_tensor_t qkv,
                                 int blk, const struct zt_row_pos *rows, int n_head);
/* out block blk = causal attention of its rows (queries from qkv) against their slots' caches,
 * which must hold every position up to theirs (kernels/zt_kernels.h: zt_kern_attention_cached) */
enum zt_status zt_task_attention_cached(const struct zt_task_opts *o, zt_tensor_t out, int blk,
                                        zt_tensor_t qkv, zt_tensor_t kv,
                                        const struct zt_row_pos *rows, int n_head);
/* the same for heads h0..h1-1 only: out block blk holds their (h1 - h0) * (C / n_head)
 * columns, so that several workers share a decode step's attention, a range of heads each */
enum zt_status zt_task_attention_heads(const struct zt_task_opts *o, zt_tensor_t out, int blk,
                                       zt_tensor_t qkv, zt_tensor_t kv,
                                       const struct zt_row_pos *rows, int n_head, int h0,
                                       int h1);
/* out [k, C] row i = inp row idx[i] (f32, whole tensors) */
enum zt_status zt_task_gather_rows(const struct zt_task_opts *o, zt_tensor_t out,
                                   zt_tensor_t inp, const int32_t *idx);

/* ---- decode products split by output columns ---- (tasks/matmul_cols.c) For a few rows, so
 * that several workers share one product's weight reads: slab (f32 [n, oc], one block) =
 * columns [o0, o0 + oc) of the input rows (n) @ w (+ bias), w in HF layout [C, OC] (a tied
 * head as its transpose, as the generator keeps it); then zt_task_concat_cols lays the slabs
 * side by side in out block blk. The bits are those of zt_task_matmul_forward (and of
 * zt_task_layernorm_forward, zt_task_gelu_forward, zt_task_residual_forward for the folded
 * steps below). */
#define ZT_TASK_FEW_ROWS 8 /* a few rows: the decode path of the products (kernels' FEW_ROWS) */
/* the input rows of a column part: block blk of inp, layer-normed first by ln_w, ln_b when
 * ln_w is not NULL (each part then does the layernorm task's work on its rows, with its bits);
 * or (inp NULL) the nin (1 to 16) slabs of an earlier split product side by side, each f32 in
 * one block (so that product needs no concatenation task). With slabs, base (f32, one block of
 * the slabs' rows and columns) makes the input base + the slabs (the residual, with
 * zt_task_concat_cols's bits), which ln_w may then layer-norm, and keep (base's shape, another
 * tensor) receives that sum: one part of a product keeps it, so no concatenation task sits on
 * the step's chain between the parts of two products */
struct zt_cols_input {
    zt_tensor_t inp;
    int blk;
    zt_tensor_t ln_w, ln_b;
    const zt_tensor_t *slabs;
    int nin;
    zt_tensor_t base, keep;
};
/* gelu: the slab goes through GELU (the MLP's first product, so no GELU task follows) */
enum zt_status zt_task_matmul_cols(const struct zt_task_opts *o, zt_tensor_t slab,
                                   const struct zt_cols_input *in, zt_tensor_t w,
                                   zt_tensor_t bias, int64_t o0, int gelu);
/* out block blk = the n (1 to 16) slabs side by side, added to block blk of base when base is
 * not NULL (the residual: out = base + slabs; base must be another tensor than out) */
enum zt_status zt_task_concat_cols(const struct zt_task_opts *o, zt_tensor_t out, int blk,
                                   const zt_tensor_t *slabs, int n, zt_tensor_t base);

/* ---- sampling ---- (tasks/sample.c) tokens (int32, one per row) row i = the token picked
 * from logits row i (f32 [n, V], whole tensors; left as they are) with p[i]
 * (kernels/zt_kernels.h: zt_kern_sample); the histories are copied at submission */
struct zt_sample_params {
    float temperature, top_p, penalty;
    int top_k;
    double u;                /* uniform in [0, 1) */
    const int32_t *history;  /* the sequence so far (repetition penalty) */
    int nhist;
};
enum zt_status zt_task_sample(const struct zt_task_opts *o, zt_tensor_t tokens,
                              zt_tensor_t logits, const struct zt_sample_params *p);

/* ---- pointwise ---- */
enum zt_status zt_task_gelu_forward(const struct zt_task_opts *o, zt_tensor_t out, int blk,
                                    zt_tensor_t inp);
/* in place: d holds dout on entry and dinp on exit */
enum zt_status zt_task_gelu_backward(const struct zt_task_opts *o, zt_tensor_t d, int blk,
                                     zt_tensor_t inp);
enum zt_status zt_task_residual_forward(const struct zt_task_opts *o, zt_tensor_t out, int blk,
                                        zt_tensor_t a, zt_tensor_t b);
/* da += dout; db += dout (either may be NULL) */
enum zt_status zt_task_residual_backward(const struct zt_task_opts *o, zt_tensor_t da,
                                         zt_tensor_t db, int blk, zt_tensor_t dout);

/* ---- loss ---- logits [N,V] (overwritten by dscale * its gradient when dscale != 0),
 * losses [N], targets [Bm,T] */
enum zt_status zt_task_crossentropy(const struct zt_task_opts *o, zt_tensor_t logits,
                                    zt_tensor_t losses, int blk, zt_tensor_t targets,
                                    float dscale);

/* ---- optimizer ---- work on groups of blocks of the flat parameter buffer */
struct zt_block_ref {
    zt_tensor_t t;
    int blk;
    int64_t off; /* element offset of the block inside its group's slice of m/v */
};
/* partial (doubles, one row per group) row g = sum of squares of the listed gradient blocks */
enum zt_status zt_task_grad_sumsq(const struct zt_task_opts *o, zt_tensor_t partial, int g,
                                  const struct zt_block_ref *grads, int n);
/* clip [3] (fp32) = {coefficient, global norm, overflow}: the gradients are loss_scale times the
 * true ones (fp16 loss scaling; 1 otherwise); norm = sqrt(sum of partial in order) / loss_scale;
 * coefficient = min(1, max_norm / (norm + 1e-6)) when max_norm > 0 (torch.nn.utils.
 * clip_grad_norm_), else 1, divided by loss_scale (unscaling and clipping in one factor);
 * overflow = 1 when the sum is not finite (an inf or NaN gradient), else 0. */
enum zt_status zt_task_grad_clip(const struct zt_task_opts *o, zt_tensor_t clip,
                                 zt_tensor_t partial, float max_norm, float loss_scale);
struct zt_adamw_hparams {
    float lr, beta1, beta2, eps, weight_decay;
    int64_t t;     /* 1-based optimizer step, for bias correction */
    int decoupled; /* 1: AdamW decay; 0: Adam with L2 */
    int skip_nonfinite; /* with clip: leave everything as it is when clip[2] != 0 (fp16
                         * overflow: DeepSpeed skips the step) */
};
/* One AdamW step on the listed parameter blocks with their gradient blocks and group g of the
 * moment tensors m, v (one block per group); gradients scaled by clip[0], or not scaled when
 * clip is NULL (no clipping: the task then waits only for its own gradients, so it can run
 * during the rest of the backward). outs (NULL or n blocks shaped like params): each updated
 * value is also written there (mixed precision: the fp32 master weights are params, outs the
 * bf16/fp16 working copy, rounded to nearest even). */
enum zt_status zt_task_adamw(const struct zt_task_opts *o, const struct zt_block_ref *params,
                             const struct zt_block_ref *grads, int n, zt_tensor_t m,
                             zt_tensor_t v, int g, zt_tensor_t clip,
                             const struct zt_adamw_hparams *hp, const struct zt_block_ref *outs);
/* AdamW on a window of an optimizer group (zt_task_adamw_window): block g of m, v (and w) holds
 * the group's elements [lo, lo + block size), and each listed block (which must overlap the
 * window) is updated on its part inside it, so a large group can be updated piece by piece in
 * small buffers (AdamW is elementwise: the pieces give the same bits as the whole). */
struct zt_adamw_window {
    const struct zt_block_ref *params; /* [n] parameter blocks, .off their first element in the
                                        * group; .t NULL: the block's values live in w */
    const struct zt_block_ref *grads;  /* [n] their gradient blocks */
    int n;
    zt_tensor_t m, v;       /* the moments (fp32), block g */
    zt_tensor_t w;          /* optional: values of the blocks not in memory, laid out like m */
    int g;
    int64_t lo;             /* the group element at the start of block g */
    zt_tensor_t clip;       /* optional: as for zt_task_adamw */
    const struct zt_adamw_hparams *hp;
    zt_tensor_t pipe;       /* optional token accessed RW (serializes the task with swaps) */
    const struct zt_block_ref *outs; /* optional: as for zt_task_adamw, for the blocks in memory
                                      * (entries of blocks in w are ignored) */
    zt_tensor_t wout;       /* optional, at least w's block size (typically bf16/fp16): the
                             * updated values of the blocks in w, laid out like w (mixed
                             * precision with parameters on NVMe: the working copy swapped out
                             * to the parameter file) */
};
enum zt_status zt_task_adamw_window(const struct zt_task_opts *o,
                                    const struct zt_adamw_window *a);

/* ---- swap (NVMe offload) ---- A swap moves segments between tensor blocks and a swap file
 * (io/zt_swapdir.h) through the asynchronous I/O engine (io/zt_aio.h). It takes its place in the
 * task graph like a task (its blocks are acquired asynchronously in submission order) but runs
 * on an I/O thread, never on a worker: the bytes move while the workers compute, and the swap's
 * successors start when its data is there. An I/O error is recorded (the first one, with file and
 * offset); later swaps are skipped and zt_io_service_status() returns it. */
struct zt_swapfile;
struct zt_aio_cfg;
struct zt_swap_seg {
    zt_tensor_t t;
    int blk;
    int64_t mem_off;  /* bytes into the block */
    int64_t len;      /* bytes */
    int64_t file_off; /* bytes into the file */
};
/* The I/O service: threads that run swap_in/swap_out and zt_task_io tasks (tasks/io_service.c).
 * Start/stop the I/O threads (nthreads: DeepSpeed's aio.thread_count). Reference counted (one
 * service per process, e.g. for several engines): the first zt_io_service_init's settings hold
 * until the matching last zt_io_service_free. */
enum zt_status zt_io_service_init(const struct zt_aio_cfg *cfg, int nthreads);
void zt_io_service_free(void);
const char *zt_io_service_engine_name(void);
/* Blocking transfers outside the task graph (initial values, export): the caller makes sure no
 * task uses the region. Writes must be 4096-aligned. */
enum zt_status zt_io_write_sync(const struct zt_swapfile *f, const void *buf, int64_t len,
                                int64_t off);
enum zt_status zt_io_read_sync(const struct zt_swapfile *f, void *buf, int64_t len, int64_t off);
/* The first swap error since zt_io_service_init (its message set as the last error), or ZT_OK. */
enum zt_status zt_io_service_status(void);
/* Block until every submitted swap has moved its bytes and released its blocks. Tasks waited
 * for with zt_runtime_wait_all include the swaps they depend on, not a trailing swap_out. */
void zt_io_service_wait(void);
/* A host task served by an I/O thread (checkpoint writes): once each listed block is held for
 * reading (acquired in submission order, so it sees what the tasks submitted before wrote, and
 * tasks submitted after that write a block wait for it), fn(ctx, ptrs) runs on an I/O thread with
 * the blocks' host pointers (ptrs[i] for refs[i]), then the blocks are released. No worker is
 * used. fn always runs, even after a swap failed, and reports its own errors through ctx. bytes:
 * for the trace record (kind ckpt_write). */
typedef void (*zt_io_fn)(void *ctx, void *const *ptrs);
enum zt_status zt_task_io(const struct zt_task_opts *o, const struct zt_block_ref *refs, int n,
                          int64_t bytes, zt_io_fn fn, void *ctx);
/* swap_in: the segments from the file into the blocks (the blocks written); swap_out: the
 * blocks into the file (the blocks read). order: blocks that order the file's regions across
 * tasks (may be NULL): a swap-out takes them RW, a swap-in R; pipe: an optional RW token
 * serializing the task with others. A swap-out's file offset must be 4096-aligned; an unaligned
 * block or length goes through a bounce buffer, and the region is written up to the next 4096
 * boundary (with zeros): leave it to the segment. Swap-ins may be unaligned (a bounce buffer is
 * used). */
enum zt_status zt_task_swap_in(const struct zt_task_opts *o, const struct zt_swapfile *f,
                               const struct zt_swap_seg *segs, int n,
                               const struct zt_block_ref *order, int norder, zt_tensor_t pipe);
enum zt_status zt_task_swap_out(const struct zt_task_opts *o, const struct zt_swapfile *f,
                                const struct zt_swap_seg *segs, int n,
                                const struct zt_block_ref *order, int norder, zt_tensor_t pipe);

/* ---- collectives (MPI, host memory) ---- on the blocks refs[0..n) (of any tensors, anywhere
 * in memory), taken in list order. part[2r], part[2r+1] is the range of block indices that rank
 * r owns; the parts are in rank order and together cover the n blocks. Every collective task
 * also takes `token` (a one-element tensor) RW, so the collectives of a rank run in submission
 * order, which is the same on every rank: no deadlock under any scheduler (PLATFORM.md item 11).
 *   allreduce:      every element becomes the sum over ranks, added in rank order 0..N-1
 *   reduce_scatter: only the caller's part becomes that sum (the rest is left as it was)
 *   allgather:      every rank's part is copied to all ranks (elemsize 4 or 8)
 * aux (naux blocks, or NULL and 0): blocks matching the caller's part block by block (same
 * element counts). For allreduce and reduce_scatter an accumulator: the caller's part of the sum
 * is added to it (reduce_scatter then only reads refs: ZeRO stage 2 gradients, reduced from a
 * micro-batch's full gradients into the rank's shard). For allgather a source: copied into the
 * caller's part first (refs are then only written: ZeRO stage 3 gathers a parameter from the
 * ranks' shards into a slot). */
enum zt_status zt_task_comm_allreduce(const struct zt_task_opts *o, const struct zt_block_ref *refs,
                                      int n, const int64_t *part, const struct zt_block_ref *aux,
                                      int naux, zt_tensor_t token);
enum zt_status zt_task_comm_reduce_scatter(const struct zt_task_opts *o,
                                           const struct zt_block_ref *refs, int n,
                                           const int64_t *part, const struct zt_block_ref *aux,
                                           int naux, zt_tensor_t token);
enum zt_status zt_task_comm_allgather(const struct zt_task_opts *o, const struct zt_block_ref *refs,
                                      int n, const int64_t *part, const struct zt_block_ref *aux,
                                      int naux, size_t elemsize, zt_tensor_t token);
/* Bytes a reduce-scatter or all-reduce task allocates while it runs, for a part of `my`
 * elements of this rank (its largest block max_block) on nranks ranks, blocks of type dt and
 * accumulator blocks of type acc (ZT_DTYPE_F32 without). The allocator keeps them in the
 * arena of the worker that ran the task: they count once per worker towards a process's peak. */
size_t zt_task_comm_reduce_scratch(int64_t my, int nranks, enum zt_dtype dt, enum zt_dtype acc,
                                   int64_t max_block);
/* ---- point-to-point ---- (MPI, host memory; tasks/p2p.c) Block blk of t to or from rank
 * `peer` (0 to world size - 1, this rank included): pipeline parallelism's activations forward
 * to the next stage and their gradients back. (peer, tag) is a stream: the k-th send to peer
 * with tag matches the k-th recv from that rank with that tag, in submission order on both
 * sides, whatever order the tasks become ready in (tags 0 to zt_p2p_tag_max(); at most 4096
 * messages of one stream in flight at once). A send reads its block and a recv writes it, in
 * StarPU's sequential consistency like any task: a send waits for the block's last writer, and
 * later readers of a recv's block wait for the recv. Neither runs on a worker: the block is
 * acquired asynchronously and zerotask's communication thread moves the bytes, so a recv
 * submitted long before its data comes holds only its block. The bytes move as they are (16-bit
 * tensors as their raw bytes), at most 2^31 - 1 per block. Fatal for the job, after one line
 * "zerotask: error: rank R: recv from rank P tag T (step S ...) ..." on stderr: a recv whose
 * block is not as large as the message (expected and got bytes are named), a failing MPI call,
 * or a send or recv waiting longer than ZT_COMM_TIMEOUT seconds from when it was posted (a peer
 * that never sends; a peer that never receives a message too large for MPI to send eagerly:
 * a small one completes on the sender's side, and one never received is not reported). A
 * send holds its block for reading until MPI has taken the bytes, for a large message until
 * the peer has posted the matching recv. Returns ZT_ERR_INVALID for a bad block, peer or tag,
 * for a 4097th message of one stream in flight, or before zt_tasks_init. Thread-safe;
 * submission order is the order of the calls. */
enum zt_status zt_task_send(const struct zt_task_opts *o, zt_tensor_t t, int blk, int peer,
                            int tag);
enum zt_status zt_task_recv(const struct zt_task_opts *o, zt_tensor_t t, int blk, int peer,
                            int tag);
/* Block until every submitted send and recv has moved its bytes and released its block. Tasks
 * waited for with zt_runtime_wait_all include the recvs whose blocks they read, not a trailing
 * send; zt_tasks_free waits for everything. */
void zt_p2p_wait(void);
/* The largest tag a send or recv takes (MPI_TAG_UB / 4096: 524287 on Open MPI, at least 7 on
 * any MPI); -1 before zt_tasks_init. */
int zt_p2p_tag_max(void);

/* Bytes a CPU worker keeps resident once it has run products of at most M x N x K (the parts
 * of its GEMM packing buffers they wrote). */
size_t zt_task_worker_gemm_bytes(int64_t M, int64_t N, int64_t K);

#ifdef __cplusplus
}
#endif
#endif /* ZT_TASKS_H */
