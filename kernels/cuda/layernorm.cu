/*
 * kernels/cuda/layernorm.cu: kernels/cpu/layernorm.c on the device, with the CPU kernel's
 * summation order, so results have its bits. The CPU kernel sums a row in 8 lanes (lane l takes
 * columns l, l+8, ... of the whole 8-column groups), adds the lanes as
 * ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)) and then the leftover columns in order. Here 8 threads
 * of a warp are those lanes for one row (a warp holds 4 rows, a block 32); the lane sums meet in
 * the row's first thread through shuffles, which adds them in that order. Every operation is
 * rounded on its own (__fadd_rn, __fmul_rn, ...: no contraction, as the C11 build has none).
 * The backward's dw and db sum over rows: one thread per column adds the rows in order, as the
 * CPU loop does.
 */
#include <cuda_runtime.h>
#include "kern_math.cuh"
#include "zt_kernels_cuda.h"

#define LANES 8
#define ROWS_PER_BLOCK 32
#define THREADS (LANES * ROWS_PER_BLOCK)
#define LN_EPS 1e-5f
#define FULL 0xffffffffu

__global__ static void k_ln_forward(float *out, float *mean, float *rstd, const float *inp,
                                    const float *w, const float *b, int N, int C) {
    const int lane = threadIdx.x % LANES;
    const int n = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / LANES;
    const bool live = n < N; /* every thread takes part in the shuffles */
    const float *x = inp + (size_t)(live ? n : 0) * C;
    const int c8 = C / LANES * LANES;
    float acc = 0.0f;
    for (int i = 0; live && i < c8; i += LANES) acc = __fadd_rn(acc, x[i + lane]);
    float s = zt_lanes_sum8(acc);
    if (lane == 0)
        for (int i = c8; live && i < C; i++) s = __fadd_rn(s, x[i]);
    const float m = __shfl_sync(FULL, __fdiv_rn(s, (float)C), 0, LANES);
    float vacc = 0.0f;
    for (int i = 0; live && i < c8; i += LANES) {
        float d = __fsub_rn(x[i + lane], m);
        vacc = __fadd_rn(vacc, __fmul_rn(d, d));
    }
    float v = zt_lanes_sum8(vacc);
    if (lane == 0)
        for (int i = c8; live && i < C; i++) {
            float d = __fsub_rn(x[i], m);
            v = __fadd_rn(v, __fmul_rn(d, d));
        }
    const float r = __shfl_sync(
        FULL, __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(v, (float)C), LN_EPS))), 0, LANES);
    if (!live) return;
    float *o = out + (size_t)n * C;
    for (int c = lane; c < C; c += LANES)
        o[c] = __fadd_rn(__fmul_rn(__fmul_rn(r, __fsub_rn(x[c], m)), w[c]), b[c]);
    if (lane == 0) {
        mean[n] = m;
        rstd[n] = r;
    }
}

__global__ static void k_ln_backward_inp(float *dinp, const float *dout, const float *inp,
                                         const float *w, const float *mean, const float *rstd,
                                         int N, int C) {
    const int lane = threadIdx.x % LANES;
    const int n = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / LANES;
    const bool live = n < N;
    const size_t row = (size_t)(live ? n : 0) * C;
    const float *x = inp + row, *d = dout + row;
    const float m = live ? mean[n] : 0.0f, r = live ? rstd[n] : 0.0f;
    const int c8 = C / LANES * LANES;
    float a1 = 0.0f, a2 = 0.0f;
    for (int i = 0; live && i < c8; i += LANES) {
        float nrm = __fmul_rn(__fsub_rn(x[i + lane], m), r);
        float dn = __fmul_rn(w[i + lane], d[i + lane]);
        a1 = __fadd_rn(a1, dn);
        a2 = __fadd_rn(a2, __fmul_rn(dn, nrm));
    }
    float s1 = zt_lanes_sum8(a1), s2 = zt_lanes_sum8(a2);
    if (lane == 0)
        for (int i = c8; live && i < C; i++) {
            float nrm = __fmul_rn(__fsub_rn(x[i], m), r);
            float dn = __fmul_rn(w[i], d[i]);
            s1 = __fadd_rn(s1, dn);
            s2 = __fadd_rn(s2, __fmul_rn(dn, nrm));
        }
    const float dmean = __shfl_sync(FULL, __fdiv_rn(s1, (float)C), 0, LANES);
    const float dnmean = __shfl_sync(FULL, __fdiv_rn(s2, (float)C), 0, LANES);
    if (!live) return;
    float *dx = dinp + row;
    for (int c = lane; c < C; c += LANES) {
        float nrm = __fmul_rn(__fsub_rn(x[c], m), r);
        float dn = __fmul_rn(w[c], d[c]);
        float dval = __fsub_rn(__fsub_rn(dn, dmean), __fmul_rn(nrm, dnmean));
        dx[c] = __fadd_rn(dx[c], __fmul_rn(dval, r));
    }
}

__global__ static void k_ln_backward_wb(float *dw, float *db, const float *dout, const float *inp,
                                        const float *mean, const float *rstd, int N, int C) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float sw = dw[c], sb = db[c];
    for (int n = 0; n < N; n++) { /* rows in order, as the CPU loop adds them */
        float dv = dout[(size_t)n * C + c];
        float nrm = __fmul_rn(__fsub_rn(inp[(size_t)n * C + c], mean[n]), rstd[n]);
        sb = __fadd_rn(sb, dv);
        sw = __fadd_rn(sw, __fmul_rn(nrm, dv));
    }
    dw[c] = sw;
    db[c] = sb;
}

extern "C" int zt_cuda_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                                         const float *w, const float *b, int N, int C,
                                         void *stream) {
    if (N <= 0 || C <= 0) return 0;
    unsigned grid = (unsigned)((N + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK);
    k_ln_forward<<<grid, THREADS, 0, (cudaStream_t)stream>>>(out, mean, rstd, inp, w, b, N, C);
    return (int)cudaGetLastError();
}

extern "C" int zt_cuda_layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
                                          const float *inp, const float *w, const float *mean,
                                          const float *rstd, int N, int C, void *stream) {
    if (N <= 0 || C <= 0) return 0;
    cudaStream_t s = (cudaStream_t)stream;
    unsigned grid = (unsigned)((N + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK);
    k_ln_backward_inp<<<grid, THREADS, 0, s>>>(dinp, dout, inp, w, mean, rstd, N, C);
    k_ln_backward_wb<<<(unsigned)((C + 255) / 256), 256, 0, s>>>(dw, db, dout, inp, mean, rstd,
                                                                  N, C);
    return (int)cudaGetLastError();
}
