/*
 * kernels/zt_kernels_cuda.h: CUDA versions of kernels/ (issue 8), launched asynchronously on a
 * caller's stream (a StarPU CUDA worker's local stream); pure compute, no StarPU, no
 * allocation. Each produces the same bits as its CPU twin in zt_kernels.h: the arithmetic is
 * written with round-to-nearest intrinsics (__fmaf_rn where the CPU kernel fuses, __fmul_rn and
 * __fadd_rn where it does not), so nvcc's contraction cannot change a result.
 * Pointers are device pointers; stream is a cudaStream_t (0: the default stream). Return 0, or
 * the cudaError_t of the launch.
 * Built only with -DZT_USE_CUDA=ON; tests/kernels/test_cuda_kernels.c compares with kernels/cpu.
 */
#ifndef ZT_KERNELS_CUDA_H
#define ZT_KERNELS_CUDA_H

#include <stddef.h> /* size_t */
#include <stdint.h> /* uint16_t */

#ifdef __cplusplus
extern "C" {
#endif

/* fp32 <-> bf16/fp16, as zt_kern_f32_to_bf16 and friends (RNE; NaN -> 0x7FC0 for bf16,
 * sign | 0x7E00 for fp16) */
int zt_cuda_f32_to_bf16(uint16_t *dst, const float *src, size_t n, void *stream);
int zt_cuda_bf16_to_f32(float *dst, const uint16_t *src, size_t n, void *stream);
int zt_cuda_f32_to_f16(uint16_t *dst, const float *src, size_t n, void *stream);
int zt_cuda_f16_to_f32(float *dst, const uint16_t *src, size_t n, void *stream);

/* Adam/AdamW step on n contiguous parameters, as zt_kern_adamw (PyTorch semantics) */
int zt_cuda_adamw(float *param, float *m, float *v, const float *grad, size_t n, float lr,
                  float beta1, float beta2, float eps, float weight_decay, float bc1, float bc2,
                  float grad_scale, int decoupled, void *stream);

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

#ifdef __cplusplus
}
#endif
#endif /* ZT_KERNELS_CUDA_H */
