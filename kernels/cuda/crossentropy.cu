/*
 * kernels/cuda/crossentropy.cu: kernels/cpu/crossentropy.c on the device, with its summation
 * order. One block per row: the row maximum (order does not change a maximum), the
 * exponentials exp(x - max) with the CPU's polynomial (kern_math.cuh), computed by the whole
 * block a chunk at a time into shared memory, and their sum in double by 8 threads that are the
 * CPU's 8 lanes (lane l adds elements l, l+8, ... in order; the leftover V % 8 go to lane 0
 * last), combined as ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)). The loss is
 * log(sum) - (x[target] - max) in double: CUDA's log is within 1 ulp of glibc's (correctly
 * rounded in practice), and the result is rounded to float, so the loss has the CPU's bits
 * except when that double lands within an ulp of a float rounding boundary. The gradient,
 * dscale * (softmax - onehot), is the CPU's operation for operation.
 */
#include <cuda_runtime.h>
#include <stdint.h>
#include "kern_math.cuh"
#include "zt_kernels_cuda.h"

#define THREADS 256
#define LANES 8
#define CHUNK 2048 /* exponentials staged per pass: a multiple of LANES */
#define FULL 0xffffffffu

__device__ static float fmax_cpu(float a, float b) { return b > a ? b : a; }

__global__ static void k_xent(float *logits, float *losses, const int32_t *targets, int V,
                              float dscale) {
    __shared__ float e[CHUNK];
    __shared__ float wmax[THREADS / 32];
    __shared__ double lane_sum[LANES];
    __shared__ float bcast;
    const int n = blockIdx.x, tid = threadIdx.x;
    float *x = logits + (size_t)n * V;
    const int32_t t = targets[n];
    if (t < 0) { /* no target (a position the curriculum cut off): loss 0, no gradient */
        if (tid == 0) losses[n] = 0.0f;
        if (dscale != 0.0f)
            for (int i = tid; i < V; i += THREADS) x[i] = 0.0f;
        return;
    }

    float m = x[0];
    for (int i = tid; i < V; i += THREADS) m = fmax_cpu(m, x[i]);
    for (int o = 16; o > 0; o >>= 1) m = fmax_cpu(m, __shfl_xor_sync(FULL, m, o));
    if (tid % 32 == 0) wmax[tid / 32] = m;
    __syncthreads();
    if (tid == 0) {
        float r = wmax[0];
        for (int w = 1; w < THREADS / 32; w++) r = fmax_cpu(r, wmax[w]);
        bcast = r;
    }
    __syncthreads();
    const float mx = bcast;
    const float xt = x[t]; /* read before the exponentials overwrite the row */
    __syncthreads();

    const int v8 = V / LANES * LANES;
    double acc = 0.0;
    for (int i0 = 0; i0 < V; i0 += CHUNK) {
        const int nb = V - i0 < CHUNK ? V - i0 : CHUNK;
        for (int i = tid; i < nb; i += THREADS) {
            float ex = zt_expf(__fsub_rn(x[i0 + i], mx));
            e[i] = ex;
            if (dscale != 0.0f) x[i0 + i] = ex;
        }
        __syncthreads();
        if (tid < LANES) {
            const int whole = v8 - i0 < nb ? v8 - i0 : nb; /* i0 <= v8: i0 is a multiple of 8 */
            for (int k = tid; k < whole; k += LANES) acc = __dadd_rn(acc, (double)e[k]);
            if (tid == 0)
                for (int k = whole; k < nb; k++) acc = __dadd_rn(acc, (double)e[k]);
        }
        __syncthreads();
    }
    if (tid < LANES) lane_sum[tid] = acc;
    __syncthreads();
    const double *l = lane_sum;
    const double sum = __dadd_rn(__dadd_rn(__dadd_rn(l[0], l[1]), __dadd_rn(l[2], l[3])),
                                 __dadd_rn(__dadd_rn(l[4], l[5]), __dadd_rn(l[6], l[7])));
    if (tid == 0)
        losses[n] = __double2float_rn(__dsub_rn(log(sum), __dsub_rn((double)xt, (double)mx)));
    if (dscale == 0.0f) return;
    const float k = __double2float_rn(__ddiv_rn((double)dscale, sum));
    for (int i = tid; i < V; i += THREADS) x[i] = __fmul_rn(x[i], k);
    __syncthreads(); /* the block's writes are visible to thread 0 */
    if (tid == 0) x[t] = __fsub_rn(x[t], dscale);
}

extern "C" int zt_cuda_crossentropy_forward_backward(float *logits, float *losses,
                                                     const int32_t *targets, int N, int V,
                                                     float dscale, void *stream) {
    if (N <= 0 || V <= 0) return 0;
    k_xent<<<(unsigned)N, THREADS, 0, (cudaStream_t)stream>>>(logits, losses, targets, V, dscale);
    return (int)cudaGetLastError();
}
