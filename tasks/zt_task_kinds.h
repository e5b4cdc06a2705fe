/*
 * tasks/zt_task_kinds.h: the single list of every task kind (ggml's op registry discipline).
 *
 * Layer: tasks/. The X-macro generates enum zt_task_kind, the names used in traces and
 * STARPU_NAME (tasks/task_kinds.c), the codelets and their perf models (tasks/registry.c), and
 * each kind's class (what resource it occupies: compute, communication, swap, checkpoint or data
 * loading) and phase (for compute: forward, backward, weight gradient or optimizer; NONE
 * otherwise), which the trace tools use to sort tasks. Add a kind here (name, class, phase) and
 * write its <kind>_cpu implementation; everything else follows.
 */
#ifndef ZT_TASK_KINDS_H
#define ZT_TASK_KINDS_H

#ifdef __cplusplus
extern "C" {
#endif

#define ZT_TASK_KINDS(X)                                                                         \
    X(load_batch, DATA, FORWARD)                                                                 \
    X(fill_zero, COMPUTE, OPTIMIZER)                                                             \
    X(encoder_forward, COMPUTE, FORWARD)                                                         \
    X(encoder_backward, COMPUTE, BACKWARD)                                                       \
    X(layernorm_forward, COMPUTE, FORWARD)                                                       \
    X(layernorm_backward, COMPUTE, BACKWARD)                                                     \
    X(layernorm_param_reduce, COMPUTE, WEIGHT_GRAD)                                              \
    X(matmul_forward, COMPUTE, FORWARD)                                                          \
    X(matmul_backward_inp, COMPUTE, BACKWARD)                                                    \
    X(matmul_backward_weight, COMPUTE, WEIGHT_GRAD)                                              \
    X(matmul_backward_bias, COMPUTE, WEIGHT_GRAD)                                                \
    X(matmul_t_forward, COMPUTE, FORWARD)                                                        \
    X(matmul_t_backward_inp, COMPUTE, BACKWARD)                                                  \
    X(matmul_t_backward_weight, COMPUTE, WEIGHT_GRAD)                                            \
    X(attention_forward, COMPUTE, FORWARD)                                                       \
    X(attention_backward, COMPUTE, BACKWARD)                                                     \
    X(gelu_forward, COMPUTE, FORWARD)                                                            \
    X(gelu_backward, COMPUTE, BACKWARD)                                                          \
    X(residual_forward, COMPUTE, FORWARD)                                                        \
    X(residual_backward, COMPUTE, BACKWARD)                                                      \
    X(crossentropy, COMPUTE, FORWARD)                                                            \
    X(grad_sumsq, COMPUTE, OPTIMIZER)                                                            \
    X(grad_clip, COMPUTE, OPTIMIZER)                                                             \
    X(adamw, COMPUTE, OPTIMIZER)                                                                 \
    X(comm_allreduce, COMMUNICATION, NONE)                                                       \
    X(comm_reduce_scatter, COMMUNICATION, NONE)                                                  \
    X(comm_allgather, COMMUNICATION, NONE)                                                       \
    X(swap_in, SWAP, NONE)                                                                       \
    X(swap_out, SWAP, NONE)                                                                      \
    X(ckpt_write, CHECKPOINT, NONE)                                                              \
    X(embed_rows, COMPUTE, FORWARD)                                                              \
    X(kv_append, COMPUTE, FORWARD)                                                               \
    X(attention_cached, COMPUTE, FORWARD)                                                        \
    X(gather_rows, COMPUTE, FORWARD)                                                             \
    X(sample, COMPUTE, FORWARD)                                                                  \
    X(matmul_cols, COMPUTE, FORWARD)                                                             \
    X(concat_cols, COMPUTE, FORWARD)                                                             \
    X(send, COMMUNICATION, NONE)                                                                 \
    X(recv, COMMUNICATION, NONE)

enum zt_task_kind {
#define ZT_KIND_ENUM_(k, cls, phase) ZT_KIND_##k,
    ZT_TASK_KINDS(ZT_KIND_ENUM_)
#undef ZT_KIND_ENUM_
    ZT_KIND_COUNT
};

/* What a task occupies while it runs. */
enum zt_task_class {
    ZT_TASK_CLASS_COMPUTE = 0,
    ZT_TASK_CLASS_COMMUNICATION,
    ZT_TASK_CLASS_SWAP,
    ZT_TASK_CLASS_CHECKPOINT,
    ZT_TASK_CLASS_DATA,
    ZT_TASK_CLASS_COUNT
};

/* Where in the training step a compute task belongs (NONE for the other classes). */
enum zt_task_phase {
    ZT_TASK_PHASE_NONE = 0,
    ZT_TASK_PHASE_FORWARD,
    ZT_TASK_PHASE_BACKWARD,
    ZT_TASK_PHASE_WEIGHT_GRAD,
    ZT_TASK_PHASE_OPTIMIZER,
    ZT_TASK_PHASE_COUNT
};

/* "layernorm_forward" etc.; NULL-safe for out-of-range kinds ("?"). */
const char *zt_task_kind_name(int kind);
/* The whole name table, ZT_KIND_COUNT entries. */
const char *const *zt_task_kind_names(void);
/* The kind of that name, or -1 when no kind has it. */
int zt_task_kind_find(const char *name);
/* A kind's class and phase (the table's columns); COMPUTE / NONE for out-of-range kinds. */
enum zt_task_class zt_task_kind_class(int kind);
enum zt_task_phase zt_task_kind_phase(int kind);
/* "compute", "communication", "swap", "checkpoint", "data"; "?" out of range. */
const char *zt_task_class_name(enum zt_task_class cls);
/* "none", "forward", "backward", "weight_grad", "optimizer"; "?" out of range. */
const char *zt_task_phase_name(enum zt_task_phase phase);

#ifdef __cplusplus
}
#endif
#endif /* ZT_TASK_KINDS_H */
