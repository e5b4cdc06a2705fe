/*
 * kernels/cuda/encoder.cu: kernels/cpu/encoder.c on the device, with its bits. The forward is
 * one add per element. The backward adds each row of dout into a row of dwte (its token) and of
 * dwpe (its position); the CPU adds the rows in order n = 0..N-1, so an element that several rows
 * reach (a repeated token, a position seen twice) gets its additions in that order. Here every
 * thread owns one column of a disjoint set of rows (the tokens of one residue class, or one
 * position) and walks the rows in order, adding only its own: no atomics, the CPU's order.
 */
#include <cuda_runtime.h>
#include <stdint.h>
#include "zt_kernels_cuda.h"

#define THREADS 256
#define COLS 128    /* columns per block in the backward */
#define BUCKETS 64  /* dwte: tokens are split by token % BUCKETS */

__global__ static void k_enc_forward(float *out, const int32_t *tokens, const float *wte,
                                     const float *wpe, int N, int T, int t0, int C) {
    const size_t total = (size_t)N * C;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        const int n = (int)(i / C), c = (int)(i % C);
        const int t = (int)(((int64_t)t0 + n) % T);
        out[i] = __fadd_rn(wte[(size_t)tokens[n] * C + c], wpe[(size_t)t * C + c]);
    }
}

/* column c of the tokens with token % BUCKETS == blockIdx.y, rows in order */
__global__ static void k_enc_backward_wte(float *dwte, const float *dout, const int32_t *tokens,
                                          int N, int C) {
    const int c = blockIdx.x * COLS + threadIdx.x;
    const int bucket = blockIdx.y;
    if (c >= C) return;
    for (int n = 0; n < N; n++) {
        const int32_t tok = tokens[n]; /* the same address for the whole warp: one load */
        if (tok % BUCKETS != bucket) continue;
        float *d = dwte + (size_t)tok * C + c;
        *d = __fadd_rn(*d, dout[(size_t)n * C + c]);
    }
}

/* column c of position blockIdx.y: the rows n with (t0 + n) % T == position, in order */
__global__ static void k_enc_backward_wpe(float *dwpe, const float *dout, int N, int T, int t0,
                                          int C) {
    const int c = blockIdx.x * COLS + threadIdx.x;
    const int pos = blockIdx.y;
    if (c >= C) return;
    const int first = (int)(((int64_t)pos - t0 % T + T) % T);
    if (first >= N) return; /* no row reaches this position */
    float *d = dwpe + (size_t)pos * C + c;
    float s = *d;
    for (int64_t n = first; n < N; n += T) s = __fadd_rn(s, dout[(size_t)n * C + c]);
    *d = s;
}

extern "C" int zt_cuda_encoder_forward(float *out, const int32_t *tokens, const float *wte,
                                       const float *wpe, int N, int T, int t0, int C,
                                       void *stream) {
    if (N <= 0 || C <= 0 || T <= 0) return 0;
    size_t total = (size_t)N * C;
    unsigned grid = (unsigned)((total + THREADS - 1) / THREADS);
    if (grid > 65535u) grid = 65535u;
    k_enc_forward<<<grid, THREADS, 0, (cudaStream_t)stream>>>(out, tokens, wte, wpe, N, T, t0, C);
    return (int)cudaGetLastError();
}

extern "C" int zt_cuda_encoder_backward(float *dwte, float *dwpe, const float *dout,
                                        const int32_t *tokens, int N, int T, int t0, int C,
                                        void *stream) {
    if (N <= 0 || C <= 0 || T <= 0) return 0;
    cudaStream_t s = (cudaStream_t)stream;
    const unsigned gx = (unsigned)((C + COLS - 1) / COLS);
    if (T > 65535) return (int)cudaErrorInvalidConfiguration; /* one grid row per position */
    k_enc_backward_wte<<<dim3(gx, BUCKETS), COLS, 0, s>>>(dwte, dout, tokens, N, C);
    k_enc_backward_wpe<<<dim3(gx, (unsigned)T), COLS, 0, s>>>(dwpe, dout, N, T, t0, C);
    return (int)cudaGetLastError();
}
