/*
 * kernels/zt_kernels_cuda.h: CUDA versions of kernels/ (docs/cuda.md), launched asynchronously on a
 * caller's stream (a StarPU CUDA worker's local stream); pure compute, no StarPU, no
 * allocation. The element-wise and row kernels produce the same bits as their CPU twins in
 * zt_kernels.h: the arithmetic is written with round-to-nearest intrinsics (__fmaf_rn where the
 * CPU kernel fuses, __fmul_rn and __fadd_rn where it does not) in the CPU's order, so nvcc's
 * contraction cannot change a result. The exceptions are said at each: the matmuls and
 * attention's products (cuBLAS: fp32 rounding, another order), the sum of squares (its own
 * fixed order) and cross-entropy's loss (CUDA's double log).
 * Pointers are device pointers; stream is a cudaStream_t (0: the default stream). Return 0, or
 * the cudaError_t of the launch (the matmuls: or a cublasStatus_t).
 * Built only with -DZT_USE_CUDA=ON; tests/kernels/test_cuda_kernels.c compares with kernels/cpu.
 */
#ifndef ZT_KERNELS_CUDA_H
#define ZT_KERNELS_CUDA_H

#include <stddef.h> /* size_t */
#include <stdint.h> /* uint16_t, int32_t */

#ifdef __cplusplus
extern "C" {
#endif

/* fp32 <-> bf16/fp16, as zt_kern_f32_to_bf16 and friends (RNE; NaN -> 0x7FC0 for bf16,
 * sign | 0x7E00 for fp16) */
int zt_cuda_f32_to_bf16(uint16_t *dst, const float *src, size_t n, void *stream);
int zt_cuda_bf16_to_f32(float *dst, const uint16_t *src, size_t n, void *stream);
int zt_cuda_f32_to_f16(uint16_t *dst, const float *src, size_t n, void *stream);
int zt_cuda_f16_to_f32(float *dst, const uint16_t *src, size_t n, void *stream);

/* Adam/AdamW step on n contiguous parameters, as zt_kern_adamw (PyTorch semantics); copy (may
 * be NULL) receives the new values as well. clip: NULL, or a device array of 3 floats read
 * when the kernel runs (the optimizer's clip tensor): its [0] is the gradient scale instead of
 * grad_scale, and with skip_nonfinite a non-zero [2] (a non-finite gradient somewhere) makes
 * the step change nothing, copy included. */
int zt_cuda_adamw(float *param, float *m, float *v, const float *grad, float *copy, size_t n,
                  float lr, float beta1, float beta2, float eps, float weight_decay, float bc1,
                  float bc2, float grad_scale, const float *clip, int skip_nonfinite,
                  int decoupled, void *stream);

/* GELU (tanh approximation) and its backward, as zt_kern_gelu_forward/backward (dinp may
 * alias dout) */
int zt_cuda_gelu_forward(float *out, const float *inp, size_t n, void *stream);
int zt_cuda_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n,
                          void *stream);
/* out = a + b; da += dout, db += dout (either may be NULL), as zt_kern_residual_* */
int zt_cuda_residual_forward(float *out, const float *a, const float *b, size_t n, void *stream);
int zt_cuda_residual_backward(float *da, float *db, const float *dout, size_t n, void *stream);

/* layernorm over the last dimension (eps 1e-5), as zt_kern_layernorm_forward/backward: the
 * same summation order, so the same bits */
int zt_cuda_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                              const float *w, const float *b, int N, int C, void *stream);
int zt_cuda_layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
                               const float *inp, const float *w, const float *mean,
                               const float *rstd, int N, int C, void *stream);

/* token + position embedding, as zt_kern_encoder_forward/backward (the backward adds the rows
 * in order n = 0..N-1 into every element, as the CPU does; tokens is a device array) */
int zt_cuda_encoder_forward(float *out, const int32_t *tokens, const float *wte, const float *wpe,
                            int N, int T, int t0, int C, void *stream);
int zt_cuda_encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tokens,
                             int N, int T, int t0, int C, void *stream);

/* softmax cross-entropy, as zt_kern_crossentropy_forward_backward (dscale != 0: logits becomes
 * its gradient); the CPU's summation order, its bits up to the last rounding of the loss */
int zt_cuda_crossentropy_forward_backward(float *logits, float *losses, const int32_t *targets,
                                          int N, int V, float dscale, void *stream);

/* linear layers, as zt_kern_matmul_* (same layouts, row-major): cuBLAS sgemm on handle (a
 * cublasHandle_t, set to stream and to CUBLAS_PEDANTIC_MATH: fp32, no TF32), so the products
 * match the CPU to fp32 rounding, not bit for bit; matmul_backward_bias has the CPU's bits.
 * Return 0, or a cuBLAS status or CUDA error. */
int zt_cuda_matmul_forward(void *handle, float *out, const float *inp, const float *w,
                           const float *bias, int N, int C, int OC, void *stream);
int zt_cuda_matmul_backward_inp(void *handle, float *dinp, const float *dout, const float *w,
                                int N, int C, int OC, int accumulate, void *stream);
int zt_cuda_matmul_backward_weight(void *handle, float *dw, const float *inp, const float *dout,
                                   int N, int C, int OC, int c0, int c1, void *stream);
int zt_cuda_matmul_backward_bias(float *dbias, const float *dout, int N, int OC, void *stream);
int zt_cuda_matmul_t_forward(void *handle, float *out, const float *inp, const float *w, int N,
                             int C, int OC, void *stream);
int zt_cuda_matmul_t_backward_inp(void *handle, float *dinp, const float *dout, const float *w,
                                  int N, int C, int OC, int accumulate, void *stream);
int zt_cuda_matmul_t_backward_weight(void *handle, float *dw, const float *dout,
                                     const float *inp, int N, int C, int OC, int o0, int o1,
                                     void *stream);

/* causal self-attention, as zt_kern_attention_forward/backward (qkv[B,T,3C], att[B,NH,T,T]):
 * the products on cuBLAS (pedantic fp32), the softmax and its backward in the CPU's order.
 * The backward's scratch holds zt_cuda_attention_scratch_floats(T, NH) floats (all heads of a
 * batch row at once; the CPU's holds one head). */
size_t zt_cuda_attention_scratch_floats(int T, int NH);
int zt_cuda_attention_forward(void *handle, float *out, float *att, const float *qkv, int B,
                              int T, int C, int NH, void *stream);
int zt_cuda_attention_backward(void *handle, float *dqkv, float *scratch, const float *dout,
                               const float *qkv, const float *att, int B, int T, int C, int NH,
                               void *stream);

/* *out = sum of x[i]^2 in double (device pointers; scratch holds
 * zt_cuda_sumsq_scratch_doubles() doubles): a fixed order of its own, so the same n gives the
 * same bits every run, within a few ulps of zt_kern_sumsq's (not its bits) */
size_t zt_cuda_sumsq_scratch_doubles(void);
int zt_cuda_sumsq(double *out, double *scratch, const float *x, size_t n, void *stream);

/* The reduction of the NCCL collectives (tasks/collective.c), in the MPI path's order and bits:
 * rows holds N copies of n elements of type dt (row r at element r * stride); for every j,
 * s = row0[j] + row1[j] + ... + row(N-1)[j] in fp32, in that order (16-bit widened exactly);
 * then acc[j] += s in fp32, rounded to acc's type adt (acc may be NULL), and out[j] = s rounded
 * to dt (out may be NULL; it may be one of the rows). Types: ZT_CUDA_F32, _BF16, _F16. */
enum { ZT_CUDA_F32 = 0, ZT_CUDA_BF16 = 1, ZT_CUDA_F16 = 2 };
int zt_cuda_rank_sum(void *out, void *acc, const void *rows, size_t stride, int N, size_t n,
                     int dt, int adt, void *stream);

#ifdef __cplusplus
}
#endif
#endif /* ZT_KERNELS_CUDA_H */
