/*
 * kernels/cuda/sumsq.cu: the sum of squares of a float array in double (the gradient norm), as
 * zt_kern_sumsq computes it, but in another order: the CPU adds 8 lanes in sequence, which on a
 * device would be millions of dependent additions. Here each of a fixed number of blocks adds a
 * fixed, grid-strided share per thread, the threads meet in a fixed shared-memory tree, and one
 * block adds the block sums in order: the same n always gives the same bits (run to run and
 * device to device of the same build), within a few double ulps of the CPU's sum, which is what
 * the clipping factor is rounded from (it differs from the CPU's only if that rounding does).
 */
#include <cuda_runtime.h>
#include "zt_kernels_cuda.h"

#define THREADS 256
#define BLOCKS 120 /* fixed: the order may depend on n only */

__device__ static double block_tree(double v, double *sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int s = THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) sh[threadIdx.x] = __dadd_rn(sh[threadIdx.x], sh[threadIdx.x + s]);
        __syncthreads();
    }
    return sh[0];
}

__global__ static void k_sumsq_part(double *part, const float *x, size_t n) {
    __shared__ double sh[THREADS];
    double acc = 0.0;
    for (size_t i = blockIdx.x * (size_t)THREADS + threadIdx.x; i < n;
         i += (size_t)BLOCKS * THREADS) {
        double d = (double)x[i];
        acc = __dadd_rn(acc, __dmul_rn(d, d));
    }
    double s = block_tree(acc, sh);
    if (threadIdx.x == 0) part[blockIdx.x] = s;
}

__global__ static void k_sumsq_final(double *out, const double *part) {
    if (threadIdx.x != 0) return;
    double s = 0.0;
    for (int b = 0; b < BLOCKS; b++) s = __dadd_rn(s, part[b]);
    *out = s;
}

extern "C" size_t zt_cuda_sumsq_scratch_doubles(void) { return BLOCKS; }

extern "C" int zt_cuda_sumsq(double *out, double *scratch, const float *x, size_t n,
                             void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    k_sumsq_part<<<BLOCKS, THREADS, 0, s>>>(scratch, x, n);
    k_sumsq_final<<<1, 32, 0, s>>>(out, scratch);
    return (int)cudaGetLastError();
}
