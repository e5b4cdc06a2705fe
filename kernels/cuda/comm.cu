/*
 * kernels/cuda/comm.cu: the arithmetic of a reduction across ranks on the device (the NCCL
 * collectives of tasks/collective_nccl.c move the bytes; this adds them). The sums are those of
 * the MPI path: every element is the fp32 sum of the N ranks' copies in rank order 0..N-1, each
 * add rounded alone (__fadd_rn), 16-bit copies widened exactly first and the result rounded once
 * to nearest even, so a reduction gives the same bits whichever transport carried it.
 */
#include <cuda_runtime.h>
#include "zt_kernels_cuda.h"
#include "convert.cuh" /* the element converters */

#define THREADS 256

static unsigned blocks_for(size_t n) {
    size_t b = (n + THREADS - 1) / THREADS;
    return (unsigned)(b > 65535u * 32u ? 65535u * 32u : b); /* grid-stride loops cover the rest */
}

__device__ static inline float load(const void *p, size_t i, int dt) {
    if (dt == ZT_CUDA_BF16) return from_bf16(((const uint16_t *)p)[i]);
    if (dt == ZT_CUDA_F16) return from_f16(((const uint16_t *)p)[i]);
    return ((const float *)p)[i];
}

__device__ static inline void store(void *p, size_t i, int dt, float x) {
    if (dt == ZT_CUDA_BF16) ((uint16_t *)p)[i] = to_bf16(x);
    else if (dt == ZT_CUDA_F16) ((uint16_t *)p)[i] = to_f16(x);
    else ((float *)p)[i] = x;
}

__global__ static void k_rank_sum(void *out, void *acc, const unsigned char *rows, size_t stride,
                                  int N, size_t n, int dt, int adt) {
    const size_t es = dt == ZT_CUDA_F32 ? 4 : 2;
    for (size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x; j < n;
         j += (size_t)gridDim.x * blockDim.x) {
        float s = load(rows, j, dt);
        for (int r = 1; r < N; r++) s = __fadd_rn(s, load(rows + (size_t)r * stride * es, j, dt));
        if (acc) store(acc, j, adt, __fadd_rn(load(acc, j, adt), s));
        if (out) store(out, j, dt, s);
    }
}

extern "C" int zt_cuda_rank_sum(void *out, void *acc, const void *rows, size_t stride, int N,
                                size_t n, int dt, int adt, void *stream) {
    if (n == 0 || N < 1) return 0;
    if (dt < ZT_CUDA_F32 || dt > ZT_CUDA_F16 || adt < ZT_CUDA_F32 || adt > ZT_CUDA_F16)
        return (int)cudaErrorInvalidValue;
    k_rank_sum<<<blocks_for(n), THREADS, 0, (cudaStream_t)stream>>>(
        out, acc, (const unsigned char *)rows, stride, N, n, dt, adt);
    return (int)cudaGetLastError();
}
