/*
 * tasks/zt_task_kinds.h: the single list of every task kind (ggml's op registry discipline).
 *
 * Layer: tasks/. The X-macro generates enum zt_task_kind, the names used in traces and
 * STARPU_NAME, the codelets and their perf models (tasks/registry.c). Add a kind here and write
 * its <kind>_cpu implementation; everything else follows.
 */
#ifndef ZT_TASK_KINDS_H
#define ZT_TASK_KINDS_H

#ifdef __cplusplus
extern "C" {
#endif

#define ZT_TASK_KINDS(X)                                                                         \
    X(load_batch)                                                                                \
    X(fill_zero)                                                                                 \
    X(encoder_forward)                                                                           \
    X(encoder_backward)                                                                          \
    X(layernorm_forward)                                                                         \
    X(layernorm_backward)                                                                        \
    X(layernorm_param_reduce)                                                                    \
    X(matmul_forward)                                                                            \
    X(matmul_backward_inp)                                                                       \
    X(matmul_backward_weight)                                                                    \
    X(matmul_backward_bias)                                                                      \
    X(matmul_t_forward)                                                                          \
    X(matmul_t_backward_inp)                                                                     \
    X(matmul_t_backward_weight)                                                                  \
    X(attention_forward)                                                                         \
    X(attention_backward)                                                                        \
    X(gelu_forward)                                                                              \
    X(gelu_backward)                                                                             \
    X(residual_forward)                                                                          \
    X(residual_backward)                                                                         \
    X(crossentropy)                                                                              \
    X(grad_sumsq)                                                                                \
    X(grad_clip)                                                                                 \
    X(adamw)                                                                                     \
    X(comm_allreduce)                                                                            \
    X(comm_reduce_scatter)                                                                       \
    X(comm_allgather)                                                                            \
    X(swap_in)                                                                                   \
    X(swap_out)                                                                                  \
    X(ckpt_write)

enum zt_task_kind {
#define ZT_KIND_ENUM_(k) ZT_KIND_##k,
    ZT_TASK_KINDS(ZT_KIND_ENUM_)
#undef ZT_KIND_ENUM_
    ZT_KIND_COUNT
};

/* "layernorm_forward" etc.; NULL-safe for out-of-range kinds ("?"). */
const char *zt_task_kind_name(int kind);
/* The whole name table, ZT_KIND_COUNT entries. */
const char *const *zt_task_kind_names(void);

#ifdef __cplusplus
}
#endif
#endif /* ZT_TASK_KINDS_H */
