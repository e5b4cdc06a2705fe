/*
 * tests/kernels/test_cuda_kernels.c: kernels/cuda against kernels/cpu (issue 8), bit for bit:
 * the fp32 <-> bf16/fp16 converters on random values plus every special case (zeros, subnormals,
 * rounding ties, overflow, inf, NaN), several AdamW and Adam (L2) steps with a gradient scale,
 * GELU forward/backward (in place too) and the residual add, layernorm forward/backward at widths
 * with and without leftover columns.
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

/* copy n floats to a new device buffer (NULL on failure, after saying why) */
static float *to_dev(const float *h, size_t n) {
    float *d = NULL;
    if (cudaMalloc((void **)&d, n * sizeof *d) != cudaSuccess ||
        cudaMemcpy(d, h, n * sizeof *d, cudaMemcpyHostToDevice) != cudaSuccess) {
        printf("FAIL cudaMalloc/cudaMemcpy of %zu floats\n", n);
        cudaFree(d);
        return NULL;
    }
    return d;
}

/* device buffer d (n floats) against the CPU's h, bit for bit */
static int same_bits(const float *d, const float *h, size_t n, const char *what) {
    float *g = malloc(n * sizeof *g);
    size_t bad = 0, first = 0;
    if (cudaMemcpy(g, d, n * sizeof *g, cudaMemcpyDeviceToHost) != cudaSuccess) bad = n;
    for (size_t i = 0; bad < n && i < n; i++)
        if (memcmp(&g[i], &h[i], 4) != 0 && !bad++) first = i;
    ZT_TEST_TRUE(bad == 0, "%s: %zu of %zu differ from the CPU kernel (first at %zu: cpu %.9g, "
                 "cuda %.9g)", what, bad, n, first, (double)h[first], (double)g[first]);
    free(g);
    return bad == 0;
}

/* GELU forward/backward and the residual add over inputs that reach both tails of exp */
static int check_pointwise(void) {
    float *x = malloc(N * sizeof *x), *dy = malloc(N * sizeof *dy), *y = malloc(N * sizeof *y),
          *dx = malloc(N * sizeof *dx), *acc = malloc(N * sizeof *acc);
    for (size_t i = 0; i < N; i++) {
        x[i] = i % 1000 == 0 ? next_f(-60, 60) : next_f(-6, 6);
        dy[i] = next_f(-1, 1);
        acc[i] = next_f(-1, 1);
    }
    float *gx = to_dev(x, N), *gdy = to_dev(dy, N), *gy = to_dev(x, N), *ga = to_dev(acc, N),
          *gb = to_dev(acc, N);
    if (!gx || !gdy || !gy || !ga || !gb) return 1;
    zt_kern_gelu_forward(y, x, N);
    CU(zt_cuda_gelu_forward(gy, gx, N, 0));
    same_bits(gy, y, N, "gelu forward");
    zt_kern_gelu_backward(dx, x, dy, N);
    CU(zt_cuda_gelu_backward(gy, gx, gdy, N, 0));
    same_bits(gy, dx, N, "gelu backward");
    CU(cudaMemcpy(gy, dy, N * sizeof *dy, cudaMemcpyHostToDevice)); /* in place: dinp = dout */
    CU(zt_cuda_gelu_backward(gy, gx, gy, N, 0));
    same_bits(gy, dx, N, "gelu backward in place");
    zt_kern_residual_forward(y, x, dy, N);
    CU(zt_cuda_residual_forward(gy, gx, gdy, N, 0));
    same_bits(gy, y, N, "residual forward");
    memcpy(y, acc, N * sizeof *y);
    zt_kern_residual_backward(y, NULL, dy, N);
    CU(zt_cuda_residual_backward(ga, NULL, gdy, N, 0));
    same_bits(ga, y, N, "residual backward (da only)");
    CU(zt_cuda_residual_backward(NULL, gb, gdy, N, 0));
    same_bits(gb, y, N, "residual backward (db only)");
    cudaFree(gx), cudaFree(gdy), cudaFree(gy), cudaFree(ga), cudaFree(gb);
    free(x), free(dy), free(y), free(dx), free(acc);
    return 0;
}

/* layernorm forward and backward for widths with and without leftover columns (C % 8) and a
 * row count that does not fill the last block; backward accumulates into nonzero buffers */
static int check_layernorm(int Nr, int C) {
    size_t nc = (size_t)Nr * C;
    float *x = malloc(nc * 4), *w = malloc(C * 4), *b = malloc(C * 4), *dy = malloc(nc * 4),
          *y = malloc(nc * 4), *mean = malloc(Nr * 4), *rstd = malloc(Nr * 4),
          *dx = malloc(nc * 4), *dw = malloc(C * 4), *db = malloc(C * 4);
    for (size_t i = 0; i < nc; i++) {
        x[i] = next_f(-3, 3) + (i % 7 == 0 ? 10.0f : 0.0f);
        dy[i] = next_f(-1, 1);
        dx[i] = next_f(-0.1f, 0.1f);
    }
    for (int c = 0; c < C; c++) {
        w[c] = next_f(0.5f, 1.5f), b[c] = next_f(-0.2f, 0.2f);
        dw[c] = next_f(-0.1f, 0.1f), db[c] = next_f(-0.1f, 0.1f);
    }
    float *gx = to_dev(x, nc), *gw = to_dev(w, C), *gb = to_dev(b, C), *gdy = to_dev(dy, nc),
          *gy = to_dev(y, nc), *gm = to_dev(mean, Nr), *gr = to_dev(rstd, Nr),
          *gdx = to_dev(dx, nc), *gdw = to_dev(dw, C), *gdb = to_dev(db, C);
    if (!gx || !gw || !gb || !gdy || !gy || !gm || !gr || !gdx || !gdw || !gdb) return 1;
    zt_kern_layernorm_forward(y, mean, rstd, x, w, b, Nr, C);
    CU(zt_cuda_layernorm_forward(gy, gm, gr, gx, gw, gb, Nr, C, 0));
    zt_kern_layernorm_backward(dx, dw, db, dy, x, w, mean, rstd, Nr, C);
    CU(zt_cuda_layernorm_backward(gdx, gdw, gdb, gdy, gx, gw, gm, gr, Nr, C, 0));
    const struct {
        const char *name;
        const float *dev, *cpu;
        size_t n;
    } outs[] = {{"forward: out", gy, y, nc},          {"forward: mean", gm, mean, (size_t)Nr},
                {"forward: rstd", gr, rstd, (size_t)Nr}, {"backward: dinp", gdx, dx, nc},
                {"backward: dw", gdw, dw, (size_t)C},  {"backward: db", gdb, db, (size_t)C}};
    for (size_t k = 0; k < sizeof outs / sizeof outs[0]; k++) {
        char what[64];
        snprintf(what, sizeof what, "layernorm %dx%d %s", Nr, C, outs[k].name);
        same_bits(outs[k].dev, outs[k].cpu, outs[k].n, what);
    }
    float *dev[] = {gx, gw, gb, gdy, gy, gm, gr, gdx, gdw, gdb};
    for (size_t k = 0; k < sizeof dev / sizeof dev[0]; k++) cudaFree(dev[k]);
    free(x), free(w), free(b), free(dy), free(y), free(mean), free(rstd), free(dx), free(dw),
        free(db);
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
    if (check_convert() || check_adamw() || check_pointwise() || check_layernorm(100, 768) ||
        check_layernorm(33, 37) || check_layernorm(5, 3))
        return 1;
    return zt_test_finish("test_cuda_kernels");
}
