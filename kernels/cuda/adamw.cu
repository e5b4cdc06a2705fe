/*
 * kernels/cuda/adamw.cu: the Adam/AdamW step of kernels/cpu/adamw.c on the device, with the same
 * operations in the same order: the scalar coefficients are computed on the host exactly as the
 * CPU kernel computes them (in double, rounded once to float), fused where the CPU kernel calls
 * fmaf and rounded after every other operation (__fmul_rn, __fadd_rn, __fdiv_rn, __fsqrt_rn),
 * so a step gives the CPU kernel's bits. One thread per element, grid-stride.
 */
#include <math.h>
#include <cuda_runtime.h>
#include "zt_kernels_cuda.h"

#define THREADS 256

struct adam_coef {
    float lr_decay, beta1, beta2, omb1, omb2, bc2_sqrt, neg_step, eps, wd, grad_scale;
};

/* clip (device, may be NULL): [0] replaces c.grad_scale, and with skip a non-zero [2] leaves
 * everything as it is (the optimizer's clip tensor: tasks/adamw.c); copy (may be NULL) gets
 * the new values too */
__global__ static void k_adamw(float *p, float *m, float *v, const float *g, float *copy,
                               size_t n, struct adam_coef c, const float *clip, int skip,
                               int decoupled) {
    if (clip && skip && clip[2] != 0.0f) return;
    const float gs = clip ? clip[0] : c.grad_scale;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float gi = __fmul_rn(g[i], gs), pi = p[i];
        if (decoupled) pi = __fmul_rn(pi, c.lr_decay);
        else gi = __fmaf_rn(pi, c.wd, gi);
        float mi = __fmaf_rn(gi, c.omb1, __fmul_rn(m[i], c.beta1));
        float vi = __fadd_rn(__fmul_rn(v[i], c.beta2), __fmul_rn(__fmul_rn(c.omb2, gi), gi));
        float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), c.bc2_sqrt), c.eps);
        p[i] = __fadd_rn(pi, __fdiv_rn(__fmul_rn(c.neg_step, mi), denom));
        if (copy) copy[i] = p[i];
        m[i] = mi;
        v[i] = vi;
    }
}

extern "C" int zt_cuda_adamw(float *param, float *m, float *v, const float *grad, float *copy,
                             size_t n, float lr, float beta1, float beta2, float eps,
                             float weight_decay, float bc1, float bc2, float grad_scale,
                             const float *clip, int skip_nonfinite, int decoupled,
                             void *stream) {
    if (n == 0) return 0;
    struct adam_coef c;
    c.lr_decay = (float)(1.0 - (double)lr * (double)weight_decay);
    c.beta1 = beta1;
    c.beta2 = beta2;
    c.omb1 = (float)(1.0 - (double)beta1);
    c.omb2 = (float)(1.0 - (double)beta2);
    c.bc2_sqrt = (float)sqrt((double)bc2);
    c.neg_step = (float)(-((double)lr / (double)bc1));
    c.eps = eps;
    c.wd = weight_decay;
    c.grad_scale = grad_scale;
    size_t b = (n + THREADS - 1) / THREADS;
    unsigned blocks = (unsigned)(b > 65535u * 32u ? 65535u * 32u : b);
    k_adamw<<<blocks, THREADS, 0, (cudaStream_t)stream>>>(param, m, v, grad, copy, n, c, clip,
                                                        skip_nonfinite, decoupled);
    return (int)cudaGetLastError();
}
