/*
 * tests/kernels/test_cuda_kernels.c: kernels/cuda against kernels/cpu, bit for bit:
 * the fp32 <-> bf16/fp16 converters on random values plus every special case (zeros, subnormals,
 * rounding ties, overflow, inf, NaN), several AdamW and Adam (L2) steps with a gradient scale,
 * GELU forward/backward (in place too) and the residual add, layernorm forward/backward at widths
 * with and without leftover columns, the encoder with repeated tokens and wrapping positions,
 * cross-entropy (losses within 1 ulp, gradients exact) at vocabularies with and without
 * leftover columns and larger than one shared-memory chunk; the matmuls (cuBLAS) against
 * OpenBLAS by normalised error, their bias gradient bit for bit; attention forward and backward by
 * normalised error; the collectives' rank-order sum (every element type and accumulator).
 * Built with -DZT_USE_CUDA=ON; without a usable CUDA device it exits with CTest's skip code (77)
 * and says why (here: the toolkit's stub libcuda answers cudaGetDeviceCount with error 35).
 */
#include <cublas_v2.h>        /* cublasCreate */
#include <cuda_runtime_api.h> /* cudaMalloc, cudaMemcpy */
#include <math.h>             /* fabs */
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
            printf("FAIL %s: error %d (%s, if a CUDA error)\n", #call, (int)e_,                   \
                   cudaGetErrorString(e_));                                                      \
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
    /* param, m, v, grad; the clip tensor; the copy of the new values */
    float *h[4], *d[4], *out = malloc(sz), *dclip, *dcopy;
    CU(cudaMalloc((void **)&dclip, 3 * sizeof(float)));
    CU(cudaMalloc((void **)&dcopy, sz));
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
            /* steps 3 and 4 take the scale from a device clip tensor; step 4's says a
             * gradient was not finite, so it changes nothing (skip_nonfinite) */
            const float *clip = NULL;
            if (step == 3 || step == 4) {
                float hc[3] = {0.25f, 1.0f, step == 4 ? 1.0f : 0.0f};
                CU(cudaMemcpy(dclip, hc, sizeof hc, cudaMemcpyHostToDevice));
                clip = dclip;
                gs = 0.25f;
            }
            if (step != 4)
                zt_kern_adamw(h[0], h[1], h[2], h[3], N, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, bc1,
                              bc2, gs, decoupled);
            CU(zt_cuda_adamw(d[0], d[1], d[2], d[3], dcopy, N, 1e-3f, 0.9f, 0.999f, 1e-8f,
                             0.01f, bc1, bc2, 0.5f, clip, 1, decoupled, 0));
            if (step == 4) { /* skipped: the copy still holds step 3's values */
                CU(cudaMemcpy(out, dcopy, sz, cudaMemcpyDeviceToHost));
                ZT_TEST_TRUE(memcmp(out, h[0], sz) == 0, "a skipped step leaves the copy");
            }
        }
        CU(cudaMemcpy(out, dcopy, sz, cudaMemcpyDeviceToHost));
        ZT_TEST_TRUE(memcmp(out, h[0], sz) == 0, "%s: the copy holds the new values",
                     decoupled ? "AdamW" : "Adam (L2)");
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
    cudaFree(dclip), cudaFree(dcopy);
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

/* one device int array from host (NULL on failure) */
static int32_t *to_dev_i32(const int32_t *h, size_t n) {
    int32_t *d = NULL;
    if (cudaMalloc((void **)&d, n * sizeof *d) != cudaSuccess ||
        cudaMemcpy(d, h, n * sizeof *d, cudaMemcpyHostToDevice) != cudaSuccess) {
        printf("FAIL cudaMalloc/cudaMemcpy of %zu ints\n", n);
        cudaFree(d);
        return NULL;
    }
    return d;
}

/* the encoder over N rows of a T-position context starting at t0, with a small vocabulary so
 * tokens repeat (the backward's per-element order matters) and rows that wrap past T */
static int check_encoder(int Nr, int T, int t0, int C, int V) {
    size_t nc = (size_t)Nr * C;
    int32_t *tok = malloc(Nr * sizeof *tok);
    float *wte = malloc((size_t)V * C * 4), *wpe = malloc((size_t)T * C * 4), *y = malloc(nc * 4),
          *dy = malloc(nc * 4), *dwte = malloc((size_t)V * C * 4),
          *dwpe = malloc((size_t)T * C * 4);
    for (int n = 0; n < Nr; n++) tok[n] = (int32_t)(next_u32() % (uint32_t)V);
    for (size_t i = 0; i < (size_t)V * C; i++) wte[i] = next_f(-1, 1), dwte[i] = next_f(-1, 1);
    for (size_t i = 0; i < (size_t)T * C; i++) wpe[i] = next_f(-1, 1), dwpe[i] = next_f(-1, 1);
    for (size_t i = 0; i < nc; i++) dy[i] = next_f(-1, 1) * (i % 5 == 0 ? 1e-4f : 1.0f);
    int32_t *gt = to_dev_i32(tok, (size_t)Nr);
    float *gwte = to_dev(wte, (size_t)V * C), *gwpe = to_dev(wpe, (size_t)T * C),
          *gy = to_dev(dy, nc), *gdy = to_dev(dy, nc), *gdwte = to_dev(dwte, (size_t)V * C),
          *gdwpe = to_dev(dwpe, (size_t)T * C);
    if (!gt || !gwte || !gwpe || !gy || !gdy || !gdwte || !gdwpe) return 1;
    zt_kern_encoder_forward(y, tok, wte, wpe, Nr, T, t0, C);
    CU(zt_cuda_encoder_forward(gy, gt, gwte, gwpe, Nr, T, t0, C, 0));
    char what[80];
    snprintf(what, sizeof what, "encoder N=%d T=%d t0=%d C=%d forward", Nr, T, t0, C);
    same_bits(gy, y, nc, what);
    zt_kern_encoder_backward(dwte, dwpe, dy, tok, Nr, T, t0, C);
    CU(zt_cuda_encoder_backward(gdwte, gdwpe, gdy, gt, Nr, T, t0, C, 0));
    snprintf(what, sizeof what, "encoder N=%d T=%d t0=%d C=%d backward dwte", Nr, T, t0, C);
    same_bits(gdwte, dwte, (size_t)V * C, what);
    snprintf(what, sizeof what, "encoder N=%d T=%d t0=%d C=%d backward dwpe", Nr, T, t0, C);
    same_bits(gdwpe, dwpe, (size_t)T * C, what);
    cudaFree(gt), cudaFree(gwte), cudaFree(gwpe), cudaFree(gy), cudaFree(gdy), cudaFree(gdwte),
        cudaFree(gdwpe);
    free(tok), free(wte), free(wpe), free(y), free(dy), free(dwte), free(dwpe);
    return 0;
}

/* distance in units in the last place between two finite floats of the same sign */
static uint32_t ulps(float a, float b) {
    uint32_t ua, ub;
    memcpy(&ua, &a, 4);
    memcpy(&ub, &b, 4);
    return ua > ub ? ua - ub : ub - ua;
}

/* cross-entropy over N rows of V logits: losses within 1 ulp (the one rounding that may differ:
 * CUDA's double log against glibc's), the gradient (dscale != 0) and the untouched logits
 * (dscale == 0) bit for bit */
static int check_xent(int Nr, int V, float dscale) {
    size_t nv = (size_t)Nr * V;
    float *x = malloc(nv * 4), *loss = malloc(Nr * 4), *gl = malloc(Nr * 4);
    int32_t *tgt = malloc(Nr * sizeof *tgt);
    for (size_t i = 0; i < nv; i++) x[i] = next_f(-8, 8) + (i % 97 == 0 ? 30.0f : 0.0f);
    for (int n = 0; n < Nr; n++) tgt[n] = (int32_t)(next_u32() % (uint32_t)V);
    float *gx = to_dev(x, nv), *gloss = to_dev(loss, (size_t)Nr);
    int32_t *gt = to_dev_i32(tgt, (size_t)Nr);
    if (!gx || !gloss || !gt) return 1;
    zt_kern_crossentropy_forward_backward(x, loss, tgt, Nr, V, dscale);
    CU(zt_cuda_crossentropy_forward_backward(gx, gloss, gt, Nr, V, dscale, 0));
    CU(cudaMemcpy(gl, gloss, Nr * 4, cudaMemcpyDeviceToHost));
    uint32_t worst = 0;
    int exact = 0;
    for (int n = 0; n < Nr; n++) {
        uint32_t u = ulps(loss[n], gl[n]);
        worst = u > worst ? u : worst;
        exact += u == 0;
    }
    ZT_TEST_TRUE(worst <= 1, "cross-entropy %dx%d dscale %g: losses within 1 ulp of the CPU's "
                 "(%d of %d identical, worst %u ulp)", Nr, V, (double)dscale, exact, Nr, worst);
    char what[80];
    snprintf(what, sizeof what, "cross-entropy %dx%d dscale %g: %s", Nr, V, (double)dscale,
             dscale != 0.0f ? "gradient" : "logits untouched");
    same_bits(gx, x, nv, what);
    cudaFree(gx), cudaFree(gloss), cudaFree(gt);
    free(x), free(loss), free(gl), free(tgt);
    return 0;
}

/* the gradient norm's sum of squares: within 1e-12 relative of the CPU's, and the same bits on
 * a second run */
static int check_sumsq(size_t n) {
    float *x = malloc(n * 4);
    for (size_t i = 0; i < n; i++) x[i] = next_f(-1, 1) * (i % 1009 == 0 ? 100.0f : 1.0f);
    float *gx = to_dev(x, n);
    double *gs = NULL, *go = NULL, r1 = 0, r2 = 0;
    if (!gx) return 1;
    CU(cudaMalloc((void **)&gs, zt_cuda_sumsq_scratch_doubles() * sizeof(double)));
    CU(cudaMalloc((void **)&go, sizeof(double)));
    CU(zt_cuda_sumsq(go, gs, gx, n, 0));
    CU(cudaMemcpy(&r1, go, sizeof r1, cudaMemcpyDeviceToHost));
    CU(zt_cuda_sumsq(go, gs, gx, n, 0));
    CU(cudaMemcpy(&r2, go, sizeof r2, cudaMemcpyDeviceToHost));
    double c = zt_kern_sumsq(x, n);
    ZT_TEST_TRUE(fabs(r1 - c) <= 1e-12 * c, "sumsq of %zu: %.17g against the CPU's %.17g", n, r1,
                 c);
    ZT_TEST_TRUE(memcmp(&r1, &r2, sizeof r1) == 0, "sumsq of %zu: the same bits twice", n);
    cudaFree(gx), cudaFree(gs), cudaFree(go);
    free(x);
    return 0;
}

/* device buffer d against the CPU's h: max |d - h| / max |h| (the normalised error) */
static double norm_err(const float *d, const float *h, size_t n) {
    float *g = malloc(n * sizeof *g);
    double num = 0, den = 0;
    if (cudaMemcpy(g, d, n * sizeof *g, cudaMemcpyDeviceToHost) != cudaSuccess) num = INFINITY;
    for (size_t i = 0; num < INFINITY && i < n; i++) {
        double e = fabs((double)g[i] - (double)h[i]), m = fabs((double)h[i]);
        num = e > num || e != e ? e : num;
        den = m > den ? m : den;
    }
    free(g);
    return den > 0 ? num / den : num;
}

#define MM_TOL 1e-5 /* fp32 sums of up to a few thousand products in another order */

/* the Conv1D and tied-head products and their gradients against OpenBLAS (normalised error;
 * cuBLAS sums in another order), the bias gradient bit for bit; weight gradients for a row
 * range inside the matrix, the input gradients both overwritten and accumulated */
static int check_matmul(cublasHandle_t h, int Nr, int C, int OC) {
    size_t nc = (size_t)Nr * C, no = (size_t)Nr * OC, wc = (size_t)C * OC;
    float *x = malloc(nc * 4), *w = malloc(wc * 4), *bias = malloc(OC * 4), *dy = malloc(no * 4),
          *y = malloc(no * 4), *dx = malloc(nc * 4), *dw = malloc(wc * 4), *db = malloc(OC * 4);
    for (size_t i = 0; i < nc; i++) x[i] = next_f(-1, 1), dx[i] = next_f(-1, 1);
    for (size_t i = 0; i < wc; i++) w[i] = next_f(-0.1f, 0.1f), dw[i] = next_f(-0.1f, 0.1f);
    for (size_t i = 0; i < no; i++) dy[i] = next_f(-1, 1);
    for (int o = 0; o < OC; o++) bias[o] = next_f(-1, 1), db[o] = next_f(-1, 1);
    float *gx = to_dev(x, nc), *gw = to_dev(w, wc), *gb = to_dev(bias, OC), *gdy = to_dev(dy, no),
          *gy = to_dev(dy, no), *gdx = to_dev(dx, nc), *gdw = to_dev(dw, wc), *gdb = to_dev(db, OC);
    if (!gx || !gw || !gb || !gdy || !gy || !gdx || !gdw || !gdb) return 1;
    const int lo = C / 3, hi = C - C / 4, olo = OC / 5, ohi = OC - OC / 3;
    struct {
        const char *what;
        double err;
    } r[7];
    int k = 0;
    zt_kern_matmul_forward(y, x, w, bias, Nr, C, OC);
    CU(zt_cuda_matmul_forward(h, gy, gx, gw, gb, Nr, C, OC, 0));
    r[k].what = "forward with bias", r[k++].err = norm_err(gy, y, no);
    zt_kern_matmul_backward_inp(dx, dy, w, Nr, C, OC, 1);
    CU(zt_cuda_matmul_backward_inp(h, gdx, gdy, gw, Nr, C, OC, 1, 0));
    r[k].what = "backward inp (accumulate)", r[k++].err = norm_err(gdx, dx, nc);
    zt_kern_matmul_backward_weight(dw + (size_t)lo * OC, x, dy, Nr, C, OC, lo, hi);
    CU(zt_cuda_matmul_backward_weight(h, gdw + (size_t)lo * OC, gx, gdy, Nr, C, OC, lo, hi, 0));
    r[k].what = "backward weight rows", r[k++].err = norm_err(gdw, dw, wc);
    zt_kern_matmul_backward_bias(db, dy, Nr, OC);
    CU(zt_cuda_matmul_backward_bias(gdb, gdy, Nr, OC, 0));
    same_bits(gdb, db, (size_t)OC, "matmul backward bias");
    /* tied head: w read as [OC,C] */
    zt_kern_matmul_t_forward(y, x, w, Nr, C, OC);
    CU(zt_cuda_matmul_t_forward(h, gy, gx, gw, Nr, C, OC, 0));
    r[k].what = "tied forward", r[k++].err = norm_err(gy, y, no);
    zt_kern_matmul_t_backward_inp(dx, dy, w, Nr, C, OC, 0);
    CU(zt_cuda_matmul_t_backward_inp(h, gdx, gdy, gw, Nr, C, OC, 0, 0));
    r[k].what = "tied backward inp (overwrite)", r[k++].err = norm_err(gdx, dx, nc);
    zt_kern_matmul_t_backward_weight(dw + (size_t)olo * C, dy, x, Nr, C, OC, olo, ohi);
    CU(zt_cuda_matmul_t_backward_weight(h, gdw + (size_t)olo * C, gdy, gx, Nr, C, OC, olo, ohi,
                                        0));
    r[k].what = "tied backward weight rows", r[k++].err = norm_err(gdw, dw, wc);
    for (int i = 0; i < k; i++)
        ZT_TEST_TRUE(r[i].err <= MM_TOL, "matmul %dx%dx%d %s: normalised error %.3g (<= %g)", Nr,
                     C, OC, r[i].what, r[i].err, MM_TOL);
    float *dev[] = {gx, gw, gb, gdy, gy, gdx, gdw, gdb};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) cudaFree(dev[i]);
    free(x), free(w), free(bias), free(dy), free(y), free(dx), free(dw), free(db);
    return 0;
}

/* the normalised error of columns c0..c0+w-1 of rows x ld arrays (device d, CPU h) */
static double part_err(const float *d, const float *h, size_t rows, size_t ld, size_t c0,
                       size_t w) {
    float *g = malloc(rows * ld * sizeof *g);
    double num = 0, den = 0;
    if (cudaMemcpy(g, d, rows * ld * sizeof *g, cudaMemcpyDeviceToHost) != cudaSuccess)
        num = INFINITY;
    for (size_t r = 0; num < INFINITY && r < rows; r++)
        for (size_t c = c0; c < c0 + w; c++) {
            double e = fabs((double)g[r * ld + c] - (double)h[r * ld + c]);
            double m = fabs((double)h[r * ld + c]);
            num = e > num || e != e ? e : num;
            den = m > den ? m : den;
        }
    free(g);
    return den > 0 ? num / den : num;
}

/* attention forward and backward against the CPU (normalised error: cuBLAS products) for a
 * T that is not a multiple of the CPU's row block, and heads of 8 columns */
static int check_attention(cublasHandle_t h, int B, int T, int C, int NH) {
    size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, na = (size_t)B * NH * T * T;
    float *qkv = malloc(nq * 4), *dy = malloc(no * 4), *y = malloc(no * 4), *att = malloc(na * 4),
          *dq = malloc(nq * 4), *scr = malloc(zt_kern_attention_scratch_floats(T) * 4);
    for (size_t i = 0; i < nq; i++) qkv[i] = next_f(-2, 2);
    for (size_t i = 0; i < no; i++) dy[i] = next_f(-1, 1);
    float *gq = to_dev(qkv, nq), *gdy = to_dev(dy, no), *gy = to_dev(dy, no), *ga = to_dev(att, na),
          *gdq = to_dev(dq, nq), *gs = NULL;
    if (!gq || !gdy || !gy || !ga || !gdq) return 1;
    CU(cudaMalloc((void **)&gs, zt_cuda_attention_scratch_floats(T, NH) * 4));
    zt_kern_attention_forward(y, att, qkv, B, T, C, NH);
    CU(zt_cuda_attention_forward(h, gy, ga, gq, B, T, C, NH, 0));
    zt_kern_attention_backward(dq, scr, dy, qkv, att, B, T, C, NH);
    CU(zt_cuda_attention_backward(h, gdq, gs, gdy, gq, ga, B, T, C, NH, 0));
    const struct {
        const char *what;
        const float *dev, *cpu;
        size_t n; /* dq, dk, dv: their column offset in dqkv's rows of 3C */
    } r[] = {{"out", gy, y, no}, {"att", ga, att, na}, {"dq", gdq, dq, 0}, {"dk", gdq, dq, C},
             {"dv", gdq, dq, 2 * (size_t)C}};
    for (size_t k = 0; k < sizeof r / sizeof r[0]; k++) {
        double e = k < 2 ? norm_err(r[k].dev, r[k].cpu, r[k].n)
                         : part_err(r[k].dev, r[k].cpu, (size_t)B * T, 3 * (size_t)C, r[k].n,
                                    (size_t)C);
        ZT_TEST_TRUE(e <= MM_TOL, "attention B=%d T=%d C=%d NH=%d %s: normalised error %.3g "
                     "(<= %g)", B, T, C, NH, r[k].what, e, MM_TOL);
    }
    cudaFree(gq), cudaFree(gdy), cudaFree(gy), cudaFree(ga), cudaFree(gdq), cudaFree(gs);
    free(qkv), free(dy), free(y), free(att), free(dq), free(scr);
    return 0;
}

/* 16-bit or fp32 elements (dt: ZT_CUDA_*) to fp32 and back, with the CPU converters */
static void widen_h(int dt, float *d, const void *s, size_t n) {
    if (dt == ZT_CUDA_BF16) zt_kern_bf16_to_f32(d, s, n);
    else if (dt == ZT_CUDA_F16) zt_kern_f16_to_f32(d, s, n);
    else memcpy(d, s, n * 4);
}
static void narrow_h(int dt, void *d, const float *s, size_t n) {
    if (dt == ZT_CUDA_BF16) zt_kern_f32_to_bf16(d, s, n);
    else if (dt == ZT_CUDA_F16) zt_kern_f32_to_f16(d, s, n);
    else memcpy(d, s, n * 4);
}

/* the NCCL collectives' sum (zt_cuda_rank_sum) against the MPI path's arithmetic
 * (tasks/collective.c reduce_scatter_body: fp32 adds in rank order 0..N-1, 16-bit copies widened and
 * the sum and accumulator rounded once), bit for bit: rows of a strided scratch, with and
 * without an accumulator of either width, with and without keeping the sum */
static int check_rank_sum(int ranks, int dt, int adt, int with_acc, int keep) {
    const size_t n = 1003, stride = 1100, es = dt == ZT_CUDA_F32 ? 4 : 2;
    const size_t aes = adt == ZT_CUDA_F32 ? 4 : 2, nr = (size_t)ranks * stride;
    float *w = malloc(nr * 4), *a32 = malloc(n * 4), *o32 = malloc(n * 4);
    unsigned char *rows = malloc(nr * es), *acc = malloc(n * aes), *out = malloc(n * es);
    unsigned char *g_acc = malloc(n * aes), *g_out = malloc(n * es);
    for (size_t i = 0; i < nr; i++) w[i] = i % 97 == 0 ? next_f(-3e4f, 3e4f) : next_f(-2, 2);
    for (size_t j = 0; j < n; j++) a32[j] = next_f(-1, 1);
    narrow_h(dt, rows, w, nr); /* the copies as they travel */
    narrow_h(adt, acc, a32, n);
    void *d_rows = NULL, *d_acc = NULL, *d_out = NULL;
    CU(cudaMalloc(&d_rows, nr * es));
    CU(cudaMalloc(&d_acc, n * aes));
    CU(cudaMalloc(&d_out, n * es));
    CU(cudaMemcpy(d_rows, rows, nr * es, cudaMemcpyHostToDevice));
    CU(cudaMemcpy(d_acc, acc, n * aes, cudaMemcpyHostToDevice));
    /* the CPU: reduce_scatter_body's loop */
    widen_h(dt, w, rows, nr);
    widen_h(adt, a32, acc, n);
    for (size_t j = 0; j < n; j++) {
        float sum = w[j];
        for (int r = 1; r < ranks; r++) sum += w[(size_t)r * stride + j];
        if (with_acc) a32[j] += sum;
        o32[j] = sum;
    }
    narrow_h(adt, acc, a32, n);
    narrow_h(dt, out, o32, n);
    CU(zt_cuda_rank_sum(keep ? d_out : NULL, with_acc ? d_acc : NULL, d_rows, stride, ranks, n,
                        dt, adt, 0));
    CU(cudaMemcpy(g_acc, d_acc, n * aes, cudaMemcpyDeviceToHost));
    CU(cudaMemcpy(g_out, d_out, n * es, cudaMemcpyDeviceToHost));
    if (with_acc)
        ZT_TEST_TRUE(memcmp(g_acc, acc, n * aes) == 0, "rank sum of %d ranks (type %d): the "
                     "accumulator (type %d) differs from the CPU's", ranks, dt, adt);
    if (keep)
        ZT_TEST_TRUE(memcmp(g_out, out, n * es) == 0, "rank sum of %d ranks (type %d): the sum "
                     "differs from the CPU's", ranks, dt);
    cudaFree(d_rows), cudaFree(d_acc), cudaFree(d_out);
    free(w), free(a32), free(o32), free(rows), free(acc), free(out), free(g_acc), free(g_out);
    return 0;
}

static int check_rank_sums(void) {
    const int types[] = {ZT_CUDA_F32, ZT_CUDA_BF16, ZT_CUDA_F16};
    for (int ranks = 1; ranks <= 4; ranks++)
        for (int t = 0; t < 3; t++)
            if (check_rank_sum(ranks, types[t], types[t], 0, 1) ||          /* the sum only */
                check_rank_sum(ranks, types[t], ZT_CUDA_F32, 1, 0) ||       /* fp32 accumulator */
                check_rank_sum(ranks, types[t], types[t], 1, 1))            /* both */
                return 1;
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
        check_layernorm(33, 37) || check_layernorm(5, 3) || check_encoder(300, 64, 37, 768, 50) ||
        check_encoder(500, 64, 5, 40, 200) ||
        check_encoder(7, 1024, 0, 37, 3) || check_xent(16, 50257, 1.0f / 16) ||
        check_xent(33, 37, 0.5f) || check_xent(9, 5001, 0.0f) || check_xent(4, 3, 1.0f) ||
        check_sumsq(N) || check_sumsq(7) || check_sumsq(40000000) || check_rank_sums())
        return 1;
    cublasHandle_t h;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) {
        printf("FAIL cublasCreate\n");
        return 1;
    }
    int bad = check_matmul(h, 64, 768, 2304) || check_matmul(h, 37, 41, 53) ||
              check_attention(h, 2, 100, 96, 4) || check_attention(h, 1, 37, 40, 5);
    cublasDestroy(h);
    if (bad) return 1;
    return zt_test_finish("test_cuda_kernels");
}
