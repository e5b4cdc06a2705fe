/*
 * kernels/cuda/pointwise.cu: GELU (tanh approximation) and the residual add of kernels/cpu/gelu.c
 * and kernels/cpu/residual.c on the device. The CPU kernels are compiled as ISO C11, so gcc
 * contracts nothing (-ffp-contract=off); here every operation is rounded on its own
 * (__fmul_rn, __fadd_rn, __fsub_rn, __fdiv_rn: nvcc cannot fuse them) in the CPU's order, and
 * exp is kernels/cpu/kern_math.h's polynomial (kern_math.cuh), so each result has the CPU
 * kernel's bits.
 * One thread per element, grid-stride.
 */
#include <cuda_runtime.h>
#include <stdint.h>
#include "kern_math.cuh"
#include "zt_kernels_cuda.h"

#define THREADS 256
#define GELU_SCALING_FACTOR 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_CUBIC 0.044715f

/* u = SF * (x + ((CUBIC * x) * x) * x), e = exp(-2u), as the CPU kernel */
__device__ static float gelu_e(float x) {
    float cube = __fmul_rn(__fmul_rn(__fmul_rn(GELU_CUBIC, x), x), x);
    float u = __fmul_rn(GELU_SCALING_FACTOR, __fadd_rn(x, cube));
    return zt_expf(__fmul_rn(-2.0f, u));
}

__global__ static void k_gelu_forward(float *out, const float *inp, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float x = inp[i];
        out[i] = __fdiv_rn(x, __fadd_rn(1.0f, gelu_e(x)));
    }
}

__global__ static void k_gelu_backward(float *dinp, const float *inp, const float *dout,
                                       size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float x = inp[i];
        float e = gelu_e(x);
        float s = __fdiv_rn(1.0f, __fadd_rn(1.0f, e));
        /* 3.0f * GELU_CUBIC is folded by gcc into one float constant, rounded once */
        float dudx = __fmul_rn(GELU_SCALING_FACTOR,
                               __fadd_rn(1.0f, __fmul_rn(__fmul_rn(3.0f * GELU_CUBIC, x), x)));
        float local = __fadd_rn(s, __fmul_rn(__fmul_rn(__fmul_rn(x, 2.0f),
                                                       __fmul_rn(__fmul_rn(e, s), s)),
                                             dudx));
        dinp[i] = __fmul_rn(local, dout[i]);
    }
}

__global__ static void k_residual_forward(float *out, const float *a, const float *b, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = __fadd_rn(a[i], b[i]);
}

__global__ static void k_residual_backward(float *da, float *db, const float *dout, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float d = dout[i];
        if (da) da[i] = __fadd_rn(da[i], d);
        if (db) db[i] = __fadd_rn(db[i], d);
    }
}

static unsigned blocks(size_t n) {
    size_t b = (n + THREADS - 1) / THREADS;
    return (unsigned)(b < 65535 ? (b ? b : 1) : 65535);
}

extern "C" int zt_cuda_gelu_forward(float *out, const float *inp, size_t n, void *stream) {
    if (n == 0) return 0;
    k_gelu_forward<<<blocks(n), THREADS, 0, (cudaStream_t)stream>>>(out, inp, n);
    return (int)cudaGetLastError();
}

extern "C" int zt_cuda_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n,
                                     void *stream) {
    if (n == 0) return 0;
    k_gelu_backward<<<blocks(n), THREADS, 0, (cudaStream_t)stream>>>(dinp, inp, dout, n);
    return (int)cudaGetLastError();
}

extern "C" int zt_cuda_residual_forward(float *out, const float *a, const float *b, size_t n,
                                        void *stream) {
    if (n == 0) return 0;
    k_residual_forward<<<blocks(n), THREADS, 0, (cudaStream_t)stream>>>(out, a, b, n);
    return (int)cudaGetLastError();
}

extern "C" int zt_cuda_residual_backward(float *da, float *db, const float *dout, size_t n,
                                         void *stream) {
    if (n == 0 || (!da && !db)) return 0;
    k_residual_backward<<<blocks(n), THREADS, 0, (cudaStream_t)stream>>>(da, db, dout, n);
    return (int)cudaGetLastError();
}
