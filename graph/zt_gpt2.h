/*
 * graph/zt_gpt2.h: GPT-2 built on the public engine and task API (nothing private).
 *
 * Layer: graph/. Parameters carry Hugging Face GPT-2 names and layouts; the output head is tied
 * to transformer.wte.weight. One training step: for each micro-batch, load_batch, forward,
 * loss, backward; then the engine's clip + AdamW. The reported loss of a step is the mean
 * cross-entropy over all B*T positions of the step, computed before the update.
 */
#ifndef ZT_GPT2_H
#define ZT_GPT2_H

#include <stddef.h>     /* size_t */
#include <stdint.h>     /* int64_t */
#include "zt_config.h"  /* struct zt_model_shape */
#include "zt_engine.h"  /* zt_engine_t */

#ifdef __cplusplus
extern "C" {
#endif

struct zt_tokens;
struct zt_data_row;
typedef struct zt_gpt2 *zt_gpt2_t;

/* Declare the parameters on e (which must not be finalized yet), finalize e, and allocate the
 * activations. GPT-2 initialisation from the engine's seed (std 0.02; c_proj weights
 * 0.02/sqrt(2L)). Owner: caller, with zt_gpt2_free (before zt_engine_free). */
enum zt_status zt_gpt2_init(zt_gpt2_t *m, zt_engine_t e, const struct zt_model_shape *shape);
/* ZT_ERR_CONFIG naming the shape unless every field is positive and n_embd divides by n_head */
enum zt_status zt_gpt2_check_shape(const struct zt_model_shape *shape);
void zt_gpt2_free(zt_gpt2_t m);

/* Submit the tasks of training step `step` (1-based) reading tok; train == 0 submits the
 * forward and loss only (no update). Call zt_gpt2_step_wait afterwards. */
enum zt_status zt_gpt2_step_submit(zt_gpt2_t m, const struct zt_tokens *tok, int64_t step,
                                   int train);
/* A global batch the sampler planned (io/zt_dataset.h): row k (0..B-1) is rows[k] of files;
 * positions from `active` on carry no loss and no gradient (the sequence-length curriculum:
 * causal attention makes the rest equal the batch truncated to `active`; seq_len: none). */
struct zt_gpt2_batch {
    const struct zt_tokens *files;
    const struct zt_data_row *rows;
    int active;
};
/* Activation checkpointing (the config's activation_checkpointing): nckpt layers keep only
 * their output and recompute the rest during the backward into a window of `window` layers'
 * activations (window_bytes; nothing is recomputed, nor saved, unless nckpt > window). With
 * offload nvme, the inputs of the `moved` layers that recompute (a stage's own) live in `sets`
 * sets of tensors per activation set (set_bytes in all), and `swapped` of them per activation
 * set wait in a swap file of file_bytes. */
struct zt_gpt2_recompute {
    int nckpt, window;
    int act_sets;         /* a pipeline stage's sets of a micro-batch's activations (1 without) */
    int64_t window_bytes; /* every set's windows together */
    int moved, sets, swapped;
    int64_t set_bytes, file_bytes;
};
void zt_gpt2_recompute_info(zt_gpt2_t m, struct zt_gpt2_recompute *out);
/* The global batch rows this rank's micro-batch mb (0..accum-1) trains: first .. first + Bm - 1
 * (README, "Data parallelism"); *accum and *Bm may be NULL. */
int zt_gpt2_rank_rows(zt_gpt2_t m, int mb, int *accum, int *Bm);
/* The same as zt_gpt2_step_submit for a planned batch; the loss is the mean over the B * active
 * positions that carry one. */
enum zt_status zt_gpt2_batch_submit(zt_gpt2_t m, const struct zt_gpt2_batch *batch, int64_t step,
                                    int train);
/* Wait for the step; *loss = mean loss of the step (before its update). A training step whose
 * loss or gradient norm is NaN or Inf fails or warns as zt_engine_check_step says. */
enum zt_status zt_gpt2_step_wait(zt_gpt2_t m, double *loss, struct zt_step_info *info);

/* The parameters of a GPT-2 of this shape in declaration order: wte, wpe, then per layer its 12
 * (ln_1.weight, ln_1.bias, attn.c_attn.weight, attn.c_attn.bias, attn.c_proj.weight,
 * attn.c_proj.bias, ln_2.weight, ln_2.bias, mlp.c_fc.weight, mlp.c_fc.bias, mlp.c_proj.weight,
 * mlp.c_proj.bias), then ln_f.weight, ln_f.bias. Parameter i's HF name and shape (shape[1] 0 for
 * a vector). */
#define ZT_GPT2_LAYER_PARAMS 12
int zt_gpt2_nparams(const struct zt_model_shape *s);
void zt_gpt2_param_info(const struct zt_model_shape *s, int i, char *name, size_t n, int *ndim,
                        int64_t shape[2]);

/* The logits of the last micro-batch's forward, [Bm*T, V] in the model's type (after a step
 * submitted with train == 0 they are left as computed: the loss does not overwrite them). Read
 * them between zt_tensor_acquire and zt_tensor_release. */
zt_tensor_t zt_gpt2_logits(zt_gpt2_t m);

/* Strict loading (DeepSpeed's load_module_strict): every tensor of the weights file st must be
 * one the model takes for this shape, or one Hugging Face GPT-2 files hold besides them (a
 * layer's attn.bias / attn.masked_bias buffers, lm_head.weight when it equals
 * transformer.wte.weight, to which the model ties the head). Any other is ZT_ERR_CKPT_CORRUPT
 * naming how many and the first; relaxed accepts them with one warning line on rank 0. Missing
 * tensors and shapes are checked when the weights are loaded (zt_engine_load_safetensors). */
struct zt_safetensors;
enum zt_status zt_gpt2_check_weights(const struct zt_model_shape *shape,
                                     const struct zt_safetensors *st, int relaxed);

/* Without an engine: the bytes of the activations zt_gpt2_init allocates in an engine of config
 * cfg with ZT_GRAPH_CHUNKS = chunks (zt_engine_memory's acts); -1 (error set) when the plan of
 * the checkpointed layers finds no memory. */
int64_t zt_gpt2_act_bytes(const struct zt_model_shape *s, const struct zt_config *cfg,
                          int chunks);
/* The same for a pipeline stage that runs layer specs [spec0, spec1) (zt_pipe_plan_gpt2's
 * first[stage] .. first[stage + 1]: 0 the embedding, 1 + l layer l, L + 1 ln_f, L + 2 the
 * head); zt_gpt2_act_bytes is the whole range. */
int64_t zt_gpt2_stage_act_bytes(const struct zt_model_shape *s, const struct zt_config *cfg,
                                int chunks, int spec0, int spec1);
/* Whether a stage that runs layer specs [spec0, spec1) holds parameter i (zt_gpt2_param_info's
 * order): the spec that reads it is one of its own (wte: the embedding's or the head's, so the
 * first and the last stage both hold it). */
int zt_gpt2_param_in_specs(const struct zt_model_shape *s, int i, int spec0, int spec1);

/* The order in which one micro-batch's backward asks for the parameters' gradients
 * (zt_param_grad: ev[k] = i, parameter i in zt_gpt2_param_info's order) and declares them
 * final (zt_engine_grad_ready: ev[k] = ~i): what the stage >= 2 gradient slots grow by. Returns
 * the number of events; ev may be NULL to count them. */
int zt_gpt2_grad_events(const struct zt_model_shape *s, int *ev);

/* The number of parameter elements of a GPT-2 of shape s. */
int64_t zt_gpt2_numel(const struct zt_model_shape *s);
/* Host bytes the model needs (parameters, gradients, Adam moments, activations) before it is
 * built, so a caller can refuse a model that does not fit; -1 as zt_gpt2_act_bytes. */
int64_t zt_gpt2_mem_estimate(const struct zt_model_shape *s, const struct zt_config *cfg);
/* The same for a pipeline stage that runs layer specs [spec0, spec1) (as
 * zt_gpt2_stage_act_bytes): its parameters and its activation sets. */
int64_t zt_gpt2_stage_mem_estimate(const struct zt_model_shape *s, const struct zt_config *cfg,
                                   int spec0, int spec1);

/* Floating-point operations of one training step (forward + backward, matmuls and attention),
 * for the achieved-GFLOP/s figure. */
double zt_gpt2_step_flops(zt_gpt2_t m);

#ifdef __cplusplus
}
#endif
#endif /* ZT_GPT2_H */
