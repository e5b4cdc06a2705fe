/*
 * tests/kernels/test_gemm_bf16.c: the bf16 product (kernels/cpu/gemm_bf16.c) on every engine
 * this CPU has, against a float64 reference of the same bf16 inputs.
 *
 * Error bound: each C element is a sum of K exact products (a product of two bf16 values fits
 * in fp32) rounded in fp32 once per addition, starting from beta C, so |C - exact| is at most
 * (K + 1) u (sum_k |a_ik b_kj| + |beta c_ij|) with u = 2^-24 (Higham, "Accuracy and Stability
 * of Numerical Algorithms", 3.1), plus one rounding of beta c. Every transposition case, edge
 * shapes around the 16/32 tiles and the 1024-deep k blocks, padded leading dimensions; then the
 * bits: row chunks, column chunks, the stack-packed path and a second call give the same C, and
 * the bf16-C product (its fused rounding store) equals the fp32-C one rounded afterwards, and a
 * weight packed once (zt_kern_bf16_pack) gives the stored weight's bits, whole or by columns.
 * Under ZT_GEMM16_WIDEN the kernel declines (-1, C untouched); an engine the CPU lacks cannot be
 * selected.
 */
#include <math.h>   /* fabs, ldexp */
#include <stdint.h> /* uint16_t */
#include <stdio.h>  /* printf */
#include <stdlib.h> /* malloc, free, rand */
#include <string.h> /* memcmp, memcpy */

#include "zt_kernels.h" /* zt_kern_gemm_bf16, zt_kern_gemm16_*, converters */
#include "zt_test.h"    /* ZT_TEST_TRUE, zt_test_finish */

static const char *const NAMES[] = {"widen", "avx512bf16", "amx"};

/* n bf16 values of a few magnitudes and both signs (some exact zeros) */
static uint16_t *rand_bf16(size_t n) {
    float *f = malloc(n * sizeof *f);
    uint16_t *b = malloc(n * sizeof *b);
    for (size_t i = 0; i < n; i++) {
        float x = (float)rand() / (float)RAND_MAX * 2.0f - 1.0f;
        f[i] = i % 13 == 0 ? 0.0f : x * (i % 7 == 0 ? 64.0f : 1.0f);
    }
    zt_kern_f32_to_bf16(b, f, n);
    free(f);
    return b;
}

static double wide(uint16_t h) {
    float f;
    zt_kern_bf16_to_f32(&f, &h, 1);
    return f;
}

static double op(const uint16_t *X, int ld, int t, int r, int k) {
    return wide(t ? X[(size_t)k * ld + r] : X[(size_t)r * ld + k]);
}

/* C from the kernel against the float64 reference; the worst error over its bound */
static double check(int ta, int tb, int M, int N, int K, float beta, int pad) {
    int lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
    uint16_t *A = rand_bf16((size_t)(ta ? K : M) * lda + 1);
    uint16_t *B = rand_bf16((size_t)(tb ? N : K) * ldb + 1);
    float *C = malloc((size_t)M * ldc * sizeof *C), *C0 = malloc((size_t)M * ldc * sizeof *C);
    for (size_t i = 0; i < (size_t)M * ldc; i++) C0[i] = C[i] = (float)(i % 11) - 5.0f;
    ZT_TEST_TRUE(zt_kern_gemm_bf16(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc) == 0,
                 "the kernel declined %dx%dx%d", M, N, K);
    double worst = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0, mag = 0;
            for (int k = 0; k < K; k++) {
                double p = op(A, lda, ta, i, k) * op(B, ldb, !tb, j, k);
                s += p;
                mag += fabs(p);
            }
            double c0 = beta == 0.0f ? 0 : (double)beta * C0[(size_t)i * ldc + j];
            double bound = (K + 2) * ldexp(1, -24) * (mag + fabs(c0)) + 1e-30;
            double r = fabs(C[(size_t)i * ldc + j] - (s + c0)) / bound;
            if (r > worst) worst = r;
        }
    for (int i = 0; i < M; i++)
        for (int j = N; j < ldc; j++)
            ZT_TEST_TRUE(C[(size_t)i * ldc + j] == C0[(size_t)i * ldc + j],
                         "%dx%dx%d: padding column %d written", M, N, K, j);
    free(A), free(B), free(C), free(C0);
    return worst;
}

static void accuracy(const char *name) {
    static const int S[][3] = {{1, 1, 1},     {1, 17, 33},   {5, 31, 64},  {16, 16, 32},
                               {17, 33, 31},  {32, 32, 64},  {33, 47, 95}, {64, 80, 1025},
                               {100, 40, 2100}, {8, 300, 48}, {40, 9, 7}};
    static const float BETA[] = {0.0f, 1.0f, 0.5f};
    for (size_t s = 0; s < sizeof S / sizeof *S; s++)
        for (int t = 0; t < 4; t++) {
            int ta = t >> 1, tb = t & 1, pad = (int)(s % 3);
            float beta = BETA[s % 3];
            double r = check(ta, tb, S[s][0], S[s][1], S[s][2], beta, pad);
            ZT_TEST_TRUE(r <= 1.0, "%s ta=%d tb=%d %dx%dx%d beta=%g: error %.3g of the bound",
                         name, ta, tb, S[s][0], S[s][1], S[s][2], (double)beta, r);
        }
}

/* C of rows r0..r1 and columns c0..c1 of the product, computed on its own */
static void part(int ta, int tb, int K, const uint16_t *A, int lda, const uint16_t *B, int ldb,
                 float *C, int ldc, int r0, int r1, int c0, int c1) {
    const uint16_t *a = ta ? A + r0 : A + (size_t)r0 * lda;
    const uint16_t *b = tb ? B + (size_t)c0 * ldb : B + c0;
    zt_kern_gemm_bf16(ta, tb, r1 - r0, c1 - c0, K, a, lda, b, ldb, 1.0f,
                      C + (size_t)r0 * ldc + c0, ldc);
}

static void bits(const char *name) {
    const int M = 70, N = 90, K = 1100;
    for (int t = 0; t < 4; t++) {
        int ta = t >> 1, tb = t & 1, lda = ta ? M : K, ldb = tb ? K : N;
        uint16_t *A = rand_bf16((size_t)M * K), *B = rand_bf16((size_t)N * K);
        size_t n = (size_t)M * N * sizeof(float);
        float *c[5];
        for (int v = 0; v < 5; v++) {
            c[v] = malloc(n);
            for (int i = 0; i < M * N; i++) c[v][i] = (float)(i % 5) * 0.25f;
        }
        part(ta, tb, K, A, lda, B, ldb, c[0], N, 0, M, 0, N);
        part(ta, tb, K, A, lda, B, ldb, c[1], N, 0, M, 0, N);
        for (int r = 0; r < M; r += 7) part(ta, tb, K, A, lda, B, ldb, c[2], N, r,
                                            r + 7 < M ? r + 7 : M, 0, N);
        for (int j = 0; j < N; j += 20) part(ta, tb, K, A, lda, B, ldb, c[3], N, 0, M, j,
                                             j + 20 < N ? j + 20 : N);
        zt_kern_gemm_test_nobuf(1);
        part(ta, tb, K, A, lda, B, ldb, c[4], N, 0, M, 0, N);
        zt_kern_gemm_test_nobuf(0);
        static const char *const WHAT[] = {"", "a second call", "row chunks of 7",
                                           "column chunks of 20", "the stack-packed path"};
        for (int v = 1; v < 5; v++)
            ZT_TEST_TRUE(memcmp(c[0], c[v], n) == 0, "%s ta=%d tb=%d: %s changes the bits",
                         name, ta, tb, WHAT[v]);
        for (int v = 0; v < 5; v++) free(c[v]);
        free(A), free(B);
    }
}

/* the bf16-C product (bias, accumulate or neither; shallow and deep k) against the fp32-C one
 * started the same way and rounded by zt_kern_f32_to_bf16: the same bits */
static void bits_c16(const char *name) {
    static const int S[][3] = {{40, 70, 96}, {33, 50, 1500}, {1, 3, 5}};
    for (size_t s = 0; s < sizeof S / sizeof *S; s++)
        for (int v = 0; v < 12; v++) {
            int ta = v & 1, tb = (v >> 1) & 1, start = v >> 2; /* 0 none, 1 bias, 2 accumulate */
            int M = S[s][0], N = S[s][1], K = S[s][2];
            uint16_t *A = rand_bf16((size_t)M * K), *B = rand_bf16((size_t)N * K);
            uint16_t *C = rand_bf16((size_t)M * N), *want = malloc((size_t)M * N * 2);
            float *f = malloc((size_t)M * N * sizeof *f), *bias = malloc((size_t)N * sizeof *f);
            float *scratch = malloc((size_t)M * N * sizeof *f);
            for (int j = 0; j < N; j++) bias[j] = (float)j * 0.125f - 2.0f;
            for (int i = 0; i < M; i++)
                for (int j = 0; j < N; j++)
                    f[(size_t)i * N + j] = start == 1 ? bias[j]
                                           : start == 2 ? (float)wide(C[(size_t)i * N + j])
                                                        : 0.0f;
            zt_kern_gemm_bf16(ta, tb, M, N, K, A, ta ? M : K, B, tb ? K : N, start ? 1.0f : 0.0f,
                              f, N);
            zt_kern_f32_to_bf16(want, f, (size_t)M * N);
            zt_kern_gemm_bf16_c16(ta, tb, M, N, K, A, ta ? M : K, B, tb ? K : N,
                                  start == 1 ? bias : NULL, start == 2, C, N, scratch);
            ZT_TEST_TRUE(memcmp(C, want, (size_t)M * N * 2) == 0,
                         "%s ta=%d tb=%d %dx%dx%d start %d: the bf16-C product differs from "
                         "the fp32-C one rounded", name, ta, tb, M, N, K, start);
            free(A), free(B), free(C), free(want), free(f), free(bias), free(scratch);
        }
}

/* a weight packed once (zt_kern_bf16_pack) against the same weight as stored: its values read
 * back, and products of 1 to 70 rows over all of it or over column parts starting at multiples
 * of 32, from 0, C or beta C, with the stored product's bits; the inference product (fp32 rows
 * rounded to bf16) on both layouts equals the product of the rounded rows */
static void packed(const char *name) {
    static const int S[][2] = {{768, 2304}, {1100, 90}, {64, 50}, {3072, 96}, {5, 33}};
    static const int ROWS[] = {1, 2, 16, 17, 32, 33, 70};
    for (size_t s = 0; s < sizeof S / sizeof *S; s++) {
        int K = S[s][0], N = S[s][1];
        uint16_t *B = rand_bf16((size_t)K * N);
        size_t pe = zt_kern_bf16_packed_elems(K, N);
        ZT_TEST_TRUE(pe >= (size_t)K * N && pe % 32 == 0, "%s: %zu packed values for [%d, %d]",
                     name, pe, K, N);
        uint16_t *P = malloc(pe * 2);
        ZT_TEST_TRUE(zt_kern_bf16_pack(B, N, K, N, P) == 0, "%s: pack declined", name);
        int same = 1;
        for (int k = 0; k < K; k++)
            for (int n = 0; n < N; n++)
                same &= zt_kern_bf16_packed_at(P, K, N, k, n) == B[(size_t)k * N + n];
        ZT_TEST_TRUE(same, "%s: [%d, %d] packed: values read back differ", name, K, N);
        for (size_t r = 0; r < sizeof ROWS / sizeof *ROWS; r++)
            for (int j0 = 0; j0 < N; j0 += (N / 64 + 1) * 32) {
                int M = ROWS[r], nc = N - j0;
                float beta = r % 3 == 0 ? 0.0f : r % 3 == 1 ? 1.0f : 0.5f;
                uint16_t *A = rand_bf16((size_t)M * K);
                size_t n = (size_t)M * nc * sizeof(float);
                float *want = malloc(n), *got = malloc(n);
                for (int i = 0; i < M * nc; i++) want[i] = got[i] = (float)(i % 5) * 0.25f;
                zt_kern_gemm_bf16(0, 0, M, nc, K, A, K, B + j0, N, beta, want, nc);
                ZT_TEST_TRUE(zt_kern_gemm_bf16_packed(M, nc, K, A, K, P, N, j0, beta, got, nc) ==
                                     0 && memcmp(want, got, n) == 0,
                             "%s: %d rows x [%d, %d] from column %d (beta %g): the packed "
                             "product differs from the stored one", name, M, K, N, j0, beta);
                free(A), free(want), free(got);
            }
        float one = 0.0f;
        ZT_TEST_TRUE(N <= 16 || zt_kern_gemm_bf16_packed(1, 1, K, B, K, P, N, 16, 0.0f, &one,
                                                         1) == -1,
                     "%s: a column part at 16 (not a multiple of 32) was not refused", name);
        /* the inference product: fp32 rows rounded to bf16, on both layouts */
        int M = 9;
        float *x = malloc((size_t)M * K * sizeof *x), *c1 = malloc((size_t)M * N * 4);
        float *c2 = malloc((size_t)M * N * 4), *c3 = malloc((size_t)M * N * 4);
        uint16_t *a16 = malloc((size_t)M * K * 2), *xr = malloc((size_t)M * K * 2);
        for (int i = 0; i < M * K; i++) x[i] = (float)(i % 97) * 0.013f - 0.6f;
        zt_kern_f32_to_bf16(xr, x, (size_t)M * K);
        zt_kern_gemm_bf16(0, 0, M, N, K, xr, K, B, N, 0.0f, c1, N);
        ZT_TEST_TRUE(zt_kern_matmul_forward_bf16(c2, N, x, B, N, 0, M, K, N, a16) == 0 &&
                         zt_kern_matmul_forward_bf16_packed(c3, N, x, P, N, 0, 0, M, K, N,
                                                            a16) == 0 &&
                         !memcmp(c1, c2, (size_t)M * N * 4) && !memcmp(c1, c3, (size_t)M * N * 4),
                     "%s: [%d, %d]: the inference product is not the product of the rounded "
                     "rows", name, K, N);
        free(x), free(c1), free(c2), free(c3), free(a16), free(xr), free(B), free(P);
    }
}

static void widen_declines(void) {
    ZT_TEST_TRUE(zt_kern_gemm16_set(ZT_GEMM16_WIDEN) == 0, "cannot select widening");
    uint16_t a = 0x3F80, b = 0x4000;
    float c = 7.0f;
    ZT_TEST_TRUE(zt_kern_gemm_bf16(0, 0, 1, 1, 1, &a, 1, &b, 1, 0.0f, &c, 1) == -1 && c == 7.0f,
                 "widen: the kernel computed instead of declining");
    uint16_t p[1024];
    ZT_TEST_TRUE(zt_kern_bf16_pack(&b, 1, 1, 1, p) == -1 &&
                     zt_kern_gemm_bf16_packed(1, 1, 1, &a, 1, p, 1, 0, 0.0f, &c, 1) == -1 &&
                     zt_kern_matmul_forward_bf16(&c, 1, &c, &b, 1, 0, 1, 1, 1, &a) == -1 &&
                     c == 7.0f,
                 "widen: packing or a packed product ran instead of declining");
}

int main(void) {
    enum zt_gemm16_engine best = zt_kern_gemm16_get();
    for (int e = ZT_GEMM16_AVX512BF16; e <= ZT_GEMM16_AMX; e++) {
        if (!zt_kern_gemm16_available((enum zt_gemm16_engine)e)) {
            printf("engine %s: not on this CPU\n", NAMES[e]);
            ZT_TEST_TRUE(zt_kern_gemm16_set((enum zt_gemm16_engine)e) == -1,
                         "%s selected on a CPU without it", NAMES[e]);
            continue;
        }
        ZT_TEST_TRUE(zt_kern_gemm16_set((enum zt_gemm16_engine)e) == 0, "cannot select %s",
                     NAMES[e]);
        printf("engine %s\n", NAMES[e]);
        accuracy(NAMES[e]);
        bits(NAMES[e]);
        bits_c16(NAMES[e]);
        packed(NAMES[e]);
    }
    ZT_TEST_TRUE(best == ZT_GEMM16_WIDEN || zt_kern_gemm16_available(best),
                 "the default engine is one the CPU lacks");
    widen_declines();
    return zt_test_finish("test_gemm_bf16");
}
