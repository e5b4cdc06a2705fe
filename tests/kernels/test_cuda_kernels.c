/*
 * tests/kernels/test_cuda_kernels.c: kernels/cuda against kernels/cpu (issue 8), bit for bit:
 * the fp32 <-> bf16/fp16 converters on random values plus every special case (zeros, subnormals,
 * rounding ties, overflow, inf, NaN), and several AdamW and Adam (L2) steps with a gradient scale.
 * Built with -DZT_USE_CUDA=ON; without a usable CUDA device it exits with CTest's skip code (77)
 * and says why (here: the toolkit's stub libcuda answers cudaGetDeviceCount with error 35).
 */
#include <cuda_runtime_api.h> /* cudaMalloc, cudaMemcpy */
#include <stdint.h>           /* uint16_t, uint32_t */
#include <stdio.h>            /* printf */
#include <stdlib.h>           /* malloc */
#include <string.h>           /* memcpy, memcmp */

#include "zt_kernels.h"      /* the CPU twins */
#include "zt_kernels_cuda.h" /* the kernels under test */
#include "zt_test.h"         /* ZT_TEST_TRUE, ZT_TEST_SKIP */

#define N 100003 /* not a multiple of the block size */

static uint32_t rng = 12345u;
static uint32_t next_u32(void) {
    rng ^= rng << 13, rng ^= rng >> 17, rng ^= rng << 5;
    return rng;
}
static float next_f(float lo, float hi) {
    return lo + (hi - lo) * (float)(next_u32() >> 8) / 16777216.0f;
}

#define CU(call)                                                                                 \
    do {                                                                                         \
        cudaError_t e_ = (cudaError_t)(call);                                                    \
        if (e_ != cudaSuccess) {                                                                 \
            printf("FAIL %s: %s\n", #call, cudaGetErrorString(e_));                              \
            return 1;                                                                            \
        }                                                                                        \
    } while (0)

static float bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static int check_convert(void) {
    float *x = malloc(N * sizeof *x), *wc = malloc(N * sizeof *wc), *wg = malloc(N * sizeof *wg);
    uint16_t *hc = malloc(N * sizeof *hc), *hg = malloc(N * sizeof *hg);
    /* specials first, then random patterns over the whole fp32 range, then "ordinary" values */
    const uint32_t sp[] = {0x00000000u, 0x80000000u, 0x00000001u, 0x007FFFFFu, 0x00800000u,
                           0x33000000u, 0x33000001u, 0x387FC000u, 0x38800000u, 0x3F808000u,
                           0x3F818000u, 0x3F800FFFu, 0x3F801000u, 0x3F803000u, 0x477FEFFFu,
                           0x477FF000u, 0x7F7FFFFFu, 0x7F800000u, 0xFF800000u, 0x7FC00000u,
                           0xFFC00001u, 0x7F800001u};
    size_t ns = sizeof sp / sizeof sp[0];
    for (size_t i = 0; i < N; i++)
        x[i] = i < ns ? bits(sp[i]) : i < N / 2 ? bits(next_u32()) : next_f(-70000.0f, 70000.0f);
    float *dx, *dw;
    uint16_t *dh;
    CU(cudaMalloc((void **)&dx, N * sizeof *dx));
    CU(cudaMalloc((void **)&dw, N * sizeof *dw));
    CU(cudaMalloc((void **)&dh, N * sizeof *dh));
    CU(cudaMemcpy(dx, x, N * sizeof *x, cudaMemcpyHostToDevice));
    /* each 16-bit format: its CPU and CUDA narrowing and widening */
    const struct {
        const char *name;
        void (*narrow)(uint16_t *, const float *, size_t);
        int (*narrow_cuda)(uint16_t *, const float *, size_t, void *);
        void (*widen)(float *, const uint16_t *, size_t);
        int (*widen_cuda)(float *, const uint16_t *, size_t, void *);
    } fmts[] = {{"bf16", zt_kern_f32_to_bf16, zt_cuda_f32_to_bf16, zt_kern_bf16_to_f32,
                 zt_cuda_bf16_to_f32},
                {"fp16", zt_kern_f32_to_f16, zt_cuda_f32_to_f16, zt_kern_f16_to_f32,
                 zt_cuda_f16_to_f32}};
    for (int f = 0; f < 2; f++) {
        const char *name = fmts[f].name;
        fmts[f].narrow(hc, x, N);
        CU(fmts[f].narrow_cuda(dh, dx, N, 0));
        CU(cudaMemcpy(hg, dh, N * sizeof *hg, cudaMemcpyDeviceToHost));
        size_t bad = 0, first = 0;
        for (size_t i = 0; i < N; i++)
            if (hc[i] != hg[i] && !bad++) first = i;
        uint32_t xb;
        memcpy(&xb, &x[first], 4);
        ZT_TEST_TRUE(bad == 0, "fp32 -> %s: %zu of %d differ (first: input 0x%08x, cpu 0x%04x, "
                     "cuda 0x%04x)", name, bad, N, (unsigned)xb, hc[first], hg[first]);
        /* widening every 16-bit pattern the narrowing produced */
        fmts[f].widen(wc, hc, N);
        CU(fmts[f].widen_cuda(dw, dh, N, 0));
        CU(cudaMemcpy(wg, dw, N * sizeof *wg, cudaMemcpyDeviceToHost));
        ZT_TEST_TRUE(memcmp(wc, wg, N * sizeof *wc) == 0, "%s -> fp32: bit-identical", name);
    }
    cudaFree(dx), cudaFree(dw), cudaFree(dh);
    free(x), free(wc), free(wg), free(hc), free(hg);
    return 0;
}

static int check_adamw(void) {
    size_t sz = N * sizeof(float);
    float *h[4], *d[4], *out = malloc(sz); /* param, m, v, grad */
    for (int k = 0; k < 4; k++) {
        h[k] = malloc(sz);
        CU(cudaMalloc((void **)&d[k], sz));
    }
    for (int decoupled = 0; decoupled < 2; decoupled++) {
        for (size_t i = 0; i < N; i++) {
            h[0][i] = next_f(-1, 1);
            h[1][i] = h[2][i] = 0;
        }
        for (int k = 0; k < 3; k++) CU(cudaMemcpy(d[k], h[k], sz, cudaMemcpyHostToDevice));
        double b1t = 1, b2t = 1;
        for (int step = 1; step <= 5; step++) {
            for (size_t i = 0; i < N; i++) h[3][i] = next_f(-2, 2) * (i % 97 == 0 ? 1e3f : 1.0f);
            CU(cudaMemcpy(d[3], h[3], sz, cudaMemcpyHostToDevice));
            b1t *= 0.9, b2t *= 0.999;
            float bc1 = (float)(1 - b1t), bc2 = (float)(1 - b2t), gs = 0.5f;
            zt_kern_adamw(h[0], h[1], h[2], h[3], N, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, bc1, bc2,
                          gs, decoupled);
            CU(zt_cuda_adamw(d[0], d[1], d[2], d[3], N, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, bc1,
                             bc2, gs, decoupled, 0));
        }
        const char *what[3] = {"param", "exp_avg", "exp_avg_sq"};
        for (int k = 0; k < 3; k++) {
            CU(cudaMemcpy(out, d[k], sz, cudaMemcpyDeviceToHost));
            size_t bad = 0;
            for (size_t i = 0; i < N; i++) bad += memcmp(&out[i], &h[k][i], 4) != 0;
            ZT_TEST_TRUE(bad == 0, "%s after 5 steps: %zu of %d differ from the CPU kernel",
                         decoupled ? "AdamW" : "Adam (L2)", bad, N);
            if (bad) printf("  (%s)\n", what[k]);
        }
    }
    for (int k = 0; k < 4; k++) free(h[k]), cudaFree(d[k]);
    free(out);
    return 0;
}

int main(void) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        printf("SKIP test_cuda_kernels: no CUDA device (cudaGetDeviceCount: %s)\n",
               e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        return ZT_TEST_SKIP;
    }
    if (check_convert() || check_adamw()) return 1;
    return zt_test_finish("test_cuda_kernels");
}
