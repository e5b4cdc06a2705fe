/*
 * kernels/cuda/attention.cu: kernels/cpu/attention.c on the device. Per batch row b the products
 * of all NH heads are one cuBLAS strided-batched sgemm (head h reads q, k, v in place from
 * qkv[B,T,3C] at column offset h*hs, leading dimension 3C; its T x T matrix is att's or the
 * scratch's h-th), over the full T x T (the CPU cuts it into causal row blocks; entries above
 * the diagonal are zero, so the sums are the same up to order). The causal softmax and its
 * backward are the CPU's row loops: 8 threads per row are the CPU's 8 lanes (lane l takes
 * columns l, l+8, ... of the whole groups, the lanes meet in ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)),
 * leftovers added in order), every operation rounded on its own, exp the CPU's polynomial. The
 * products run in CUBLAS_PEDANTIC_MATH (fp32, no TF32): the results match the CPU to fp32
 * rounding (normalised error), the softmax stages the CPU's bits for the same inputs.
 */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include "kern_math.cuh"
#include "zt_kernels_cuda.h"

#define LANES 8
#define ROWS_PER_BLOCK 32
#define THREADS (LANES * ROWS_PER_BLOCK)
#define FULL 0xffffffffu

__device__ static float max_cpu(float a, float b) { return b > a ? b : a; }

/* rows r of P[R, T] (R = B*NH*T, row i = r % T of its matrix): causal softmax in place, zero
 * above the diagonal */
__global__ static void k_softmax(float *P, long long R, int T) {
    const int lane = threadIdx.x % LANES;
    const long long r = (long long)blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / LANES;
    const bool live = r < R;
    float *row = P + (size_t)(live ? r : 0) * T;
    const int n = live ? (int)(r % T) + 1 : 1, n8 = n / LANES * LANES;
    float m = live ? row[0] : 0.0f; /* a dead row reads nothing: row 0 may be another's */
    for (int j = lane; j < n8; j += LANES) m = max_cpu(m, row[j]);
    for (int k = 1; k < LANES; k++) { /* lane order, as the CPU combines its lanes */
        float o = __shfl_sync(FULL, m, k, LANES);
        if (lane == 0) m = max_cpu(m, o);
    }
    if (lane == 0)
        for (int j = n8; live && j < n; j++) m = max_cpu(m, row[j]);
    const float mx = __shfl_sync(FULL, m, 0, LANES);
    for (int j = lane; live && j < n; j += LANES) row[j] = zt_expf(__fsub_rn(row[j], mx));
    __syncwarp();
    float acc = 0.0f;
    for (int j = lane; live && j < n8; j += LANES) acc = __fadd_rn(acc, row[j]);
    float s = zt_lanes_sum8(acc);
    if (lane == 0)
        for (int j = n8; live && j < n; j++) s = __fadd_rn(s, row[j]);
    const float inv = __fdiv_rn(1.0f, __shfl_sync(FULL, s, 0, LANES));
    if (!live) return;
    for (int j = lane; j < n; j += LANES) row[j] = __fmul_rn(row[j], inv);
    for (int j = n + lane; j < T; j += LANES) row[j] = 0.0f;
}

/* dp[i, j] = scale * att[i,j] * (dp[i,j] - sum_k att[i,k] dp[i,k]) for j <= i, 0 above */
__global__ static void k_softmax_backward(float *dp, const float *att, long long R, int T,
                                          float scale) {
    const int lane = threadIdx.x % LANES;
    const long long r = (long long)blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / LANES;
    const bool live = r < R;
    float *row = dp + (size_t)(live ? r : 0) * T;
    const float *ar = att + (size_t)(live ? r : 0) * T;
    const int n = live ? (int)(r % T) + 1 : 1, n8 = n / LANES * LANES;
    float acc = 0.0f;
    for (int j = lane; live && j < n8; j += LANES) acc = __fadd_rn(acc, __fmul_rn(ar[j], row[j]));
    float dot = zt_lanes_sum8(acc);
    if (lane == 0)
        for (int j = n8; live && j < n; j++) dot = __fadd_rn(dot, __fmul_rn(ar[j], row[j]));
    dot = __shfl_sync(FULL, dot, 0, LANES);
    if (!live) return;
    for (int j = lane; j < n; j += LANES)
        row[j] = __fmul_rn(scale, __fmul_rn(ar[j], __fsub_rn(row[j], dot)));
    for (int j = n + lane; j < T; j += LANES) row[j] = 0.0f;
}

/* row-major, NH heads: out_h[M,Nc] = alpha op(A_h)[M,K] op(B_h)[K,Nc] (+ beta out_h), the heads
 * strideA, strideB, strideO apart; as column-major out^T = op(B)^T op(A)^T */
static int gemm_heads(cublasHandle_t h, int ta, int tb, int M, int Nc, int K, float alpha,
                      const float *A, int lda, long long sa, const float *B, int ldb,
                      long long sb, float *O, int ldo, long long so, int NH) {
    const float beta = 0.0f;
    return (int)cublasSgemmStridedBatched(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                          ta ? CUBLAS_OP_T : CUBLAS_OP_N, Nc, M, K, &alpha, B,
                                          ldb, sb, A, lda, sa, &beta, O, ldo, so, NH);
}

static unsigned row_blocks(long long R) {
    return (unsigned)((R + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK);
}

extern "C" size_t zt_cuda_attention_scratch_floats(int T, int NH) {
    return (size_t)NH * (size_t)T * (size_t)T;
}

extern "C" int zt_cuda_attention_forward(void *handle, float *out, float *att, const float *qkv,
                                         int B, int T, int C, int NH, void *stream) {
    if (B <= 0 || T <= 0 || NH <= 0 || C % NH) return B <= 0 ? 0 : (int)cudaErrorInvalidValue;
    int rc = zt_cublas_prepare(handle, stream);
    if (rc) return rc;
    cublasHandle_t h = (cublasHandle_t)handle;
    const int hs = C / NH, C3 = 3 * C;
    const float scale = 1.0f / sqrtf((float)hs); /* the CPU's sqrtf: correctly rounded both */
    const long long TT = (long long)T * T;
    for (int b = 0; b < B; b++) {
        const float *q = qkv + (size_t)b * T * C3, *k = q + C;
        float *a = att + (size_t)b * NH * TT;
        if ((rc = gemm_heads(h, 0, 1, T, T, hs, scale, q, C3, hs, k, C3, hs, a, T, TT, NH)))
            return rc;
    }
    const long long R = (long long)B * NH * T;
    k_softmax<<<row_blocks(R), THREADS, 0, (cudaStream_t)stream>>>(att, R, T);
    if ((rc = (int)cudaGetLastError())) return rc;
    for (int b = 0; b < B; b++) {
        const float *v = qkv + (size_t)b * T * C3 + 2 * C;
        const float *a = att + (size_t)b * NH * TT;
        float *o = out + (size_t)b * T * C;
        if ((rc = gemm_heads(h, 0, 0, T, hs, T, 1.0f, a, T, TT, v, C3, hs, o, C, hs, NH)))
            return rc;
    }
    return 0;
}

extern "C" int zt_cuda_attention_backward(void *handle, float *dqkv, float *scratch,
                                          const float *dout, const float *qkv, const float *att,
                                          int B, int T, int C, int NH, void *stream) {
    if (B <= 0 || T <= 0 || NH <= 0 || C % NH) return B <= 0 ? 0 : (int)cudaErrorInvalidValue;
    int rc = zt_cublas_prepare(handle, stream);
    if (rc) return rc;
    cublasHandle_t h = (cublasHandle_t)handle;
    const int hs = C / NH, C3 = 3 * C;
    const float scale = 1.0f / sqrtf((float)hs);
    const long long TT = (long long)T * T, R = (long long)NH * T;
    float *dp = scratch; /* [NH, T, T]: datt, then dpreatt, of one batch row */
    for (int b = 0; b < B; b++) {
        const float *q = qkv + (size_t)b * T * C3, *k = q + C, *v = q + 2 * C;
        float *dq = dqkv + (size_t)b * T * C3, *dk = dq + C, *dv = dq + 2 * C;
        const float *a = att + (size_t)b * NH * TT;
        const float *d = dout + (size_t)b * T * C;
        /* datt = dout @ v^T; dv = att^T @ dout */
        if ((rc = gemm_heads(h, 0, 1, T, T, hs, 1.0f, d, C, hs, v, C3, hs, dp, T, TT, NH)) ||
            (rc = gemm_heads(h, 1, 0, T, hs, T, 1.0f, a, T, TT, d, C, hs, dv, C3, hs, NH)))
            return rc;
        k_softmax_backward<<<row_blocks(R), THREADS, 0, (cudaStream_t)stream>>>(dp, a, R, T,
                                                                               scale);
        if ((rc = (int)cudaGetLastError())) return rc;
        /* dq = dpreatt @ k; dk = dpreatt^T @ q */
        if ((rc = gemm_heads(h, 0, 0, T, hs, T, 1.0f, dp, T, TT, k, C3, hs, dq, C3, hs, NH)) ||
            (rc = gemm_heads(h, 1, 0, T, hs, T, 1.0f, dp, T, TT, q, C3, hs, dk, C3, hs, NH)))
            return rc;
    }
    return 0;
}
