/*
 * kernels/cuda/matmul.cu: kernels/cpu/matmul.c on the device, cuBLAS sgemm for the products.
 * Arrays are row-major as on the CPU; cuBLAS is column-major, so each row-major product
 * out = A @ B is computed as out^T = B^T @ A^T (a row-major [r,c] array is a column-major [c,r]
 * one with the same leading dimension). The handle runs in CUBLAS_PEDANTIC_MATH: true fp32, no
 * TF32 tensor cores, so results agree with the CPU's OpenBLAS to fp32 rounding (summation
 * orders differ: normalised error, not bits). The bias gradient is a plain kernel with the CPU's
 * order (rows in order into a zeroed accumulator, then added), so it has the CPU's bits.
 * handle is a cublasHandle_t (a StarPU CUDA worker's: starpu_cublas_get_local_handle()), bound
 * here to stream.
 */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include "kern_math.cuh"
#include "zt_kernels_cuda.h"

#define THREADS 256

/* out[N,OC] rows seeded with the bias, as the CPU seeds them before sgemm with beta = 1 */
__global__ static void k_seed_bias(float *out, const float *bias, int N, int OC) {
    const size_t total = (size_t)N * OC;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = bias[i % OC];
}

__global__ static void k_bias_backward(float *dbias, const float *dout, int N, int OC) {
    const int o = blockIdx.x * blockDim.x + threadIdx.x;
    if (o >= OC) return;
    float acc = 0.0f;
    for (int n = 0; n < N; n++) acc = __fadd_rn(acc, dout[(size_t)n * OC + o]);
    dbias[o] = __fadd_rn(dbias[o], acc);
}

/* row-major out[M,Nc] = alpha op(A) op(B) + beta out, as column-major out^T = op(B)^T op(A)^T */
static int sgemm_rm(void *handle, int ta, int tb, int M, int Nc, int K, const float *A, int lda,
                    const float *B, int ldb, float beta, float *out, int ldo) {
    const float one = 1.0f;
    return (int)cublasSgemm((cublasHandle_t)handle, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                            ta ? CUBLAS_OP_T : CUBLAS_OP_N, Nc, M, K, &one, B, ldb, A, lda, &beta,
                            out, ldo);
}

static unsigned grid_for(size_t total) {
    size_t g = (total + THREADS - 1) / THREADS;
    return (unsigned)(g > 65535 ? 65535 : g);
}

extern "C" int zt_cuda_matmul_forward(void *handle, float *out, const float *inp, const float *w,
                                      const float *bias, int N, int C, int OC, void *stream) {
    if (N <= 0) return 0;
    int rc = zt_cublas_prepare(handle, stream);
    if (rc) return rc;
    if (bias) {
        k_seed_bias<<<grid_for((size_t)N * OC), THREADS, 0, (cudaStream_t)stream>>>(out, bias, N,
                                                                                   OC);
        if ((rc = (int)cudaGetLastError())) return rc;
    }
    return sgemm_rm(handle, 0, 0, N, OC, C, inp, C, w, OC, bias ? 1.0f : 0.0f, out, OC);
}

extern "C" int zt_cuda_matmul_backward_inp(void *handle, float *dinp, const float *dout,
                                           const float *w, int N, int C, int OC, int accumulate,
                                           void *stream) {
    if (N <= 0) return 0;
    int rc = zt_cublas_prepare(handle, stream);
    return rc ? rc
              : sgemm_rm(handle, 0, 1, N, C, OC, dout, OC, w, OC, accumulate ? 1.0f : 0.0f, dinp,
                         C);
}

extern "C" int zt_cuda_matmul_backward_weight(void *handle, float *dw, const float *inp,
                                              const float *dout, int N, int C, int OC, int c0,
                                              int c1, void *stream) {
    if (N <= 0 || c1 <= c0) return 0;
    int rc = zt_cublas_prepare(handle, stream);
    return rc ? rc : sgemm_rm(handle, 1, 0, c1 - c0, OC, N, inp + c0, C, dout, OC, 1.0f, dw, OC);
}

extern "C" int zt_cuda_matmul_backward_bias(float *dbias, const float *dout, int N, int OC,
                                            void *stream) {
    if (OC <= 0) return 0;
    k_bias_backward<<<(unsigned)((OC + THREADS - 1) / THREADS), THREADS, 0,
                      (cudaStream_t)stream>>>(dbias, dout, N, OC);
    return (int)cudaGetLastError();
}

extern "C" int zt_cuda_matmul_t_forward(void *handle, float *out, const float *inp,
                                        const float *w, int N, int C, int OC, void *stream) {
    if (N <= 0) return 0;
    int rc = zt_cublas_prepare(handle, stream);
    return rc ? rc : sgemm_rm(handle, 0, 1, N, OC, C, inp, C, w, C, 0.0f, out, OC);
}

extern "C" int zt_cuda_matmul_t_backward_inp(void *handle, float *dinp, const float *dout,
                                             const float *w, int N, int C, int OC, int accumulate,
                                             void *stream) {
    if (N <= 0) return 0;
    int rc = zt_cublas_prepare(handle, stream);
    return rc ? rc
              : sgemm_rm(handle, 0, 0, N, C, OC, dout, OC, w, C, accumulate ? 1.0f : 0.0f, dinp,
                         C);
}

extern "C" int zt_cuda_matmul_t_backward_weight(void *handle, float *dw, const float *dout,
                                                const float *inp, int N, int C, int OC, int o0,
                                                int o1, void *stream) {
    if (N <= 0 || o1 <= o0) return 0;
    int rc = zt_cublas_prepare(handle, stream);
    return rc ? rc : sgemm_rm(handle, 1, 0, o1 - o0, C, N, dout + o0, OC, inp, C, 1.0f, dw, C);
}
