/*
 * tests/kernels/test_gemm.c: proves zt_kern_sgemm (kernels/cpu/gemm.c) on both engines against
 * a float64 product of the same operands: every transpose pair, shapes on and off every block
 * edge (M around the 12-row tile and the 1536-row A block, N around the 32- and 16-column
 * halves and the 384-column B block, K around the 16-wide transpose and the 384 k block),
 * padded leading dimensions, alpha != 1, beta 0 (C full of NaN, never read), 1 and 0.5. Error
 * bound per element: (K + 2) * 2^-23 * (sum_k |alpha a b| + |beta c|), the classic
 * recursive-summation bound with room for the block adds.
 * Then the AVX-512 engine's claims: its bits depend on K only (the product computed in one call
 * equals, bit for bit, the same product assembled from row chunks and from column chunks), the
 * same call twice gives the same bits, and the stack-packed path (taken when the per-thread
 * buffers cannot be allocated) gives the same bits as the buffered one. Without AVX-512F those
 * parts are skipped with a message and zt_kern_gemm_set must refuse the engine.
 */
#include <math.h>   /* fabs, isnan, NAN */
#include <stdio.h>  /* printf */
#include <stdlib.h> /* malloc, free, rand */
#include <string.h> /* memcpy, memcmp */

#include "zt_kernels.h" /* zt_kern_sgemm, zt_kern_gemm_set */
#include "zt_test.h"    /* ZT_TEST_TRUE, zt_test_finish */

static float *randf(size_t n) {
    float *p = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) p[i] = (float)rand() / (float)RAND_MAX * 2.0f - 1.0f;
    return p;
}

static float opa(const float *A, int lda, int ta, int i, int k) {
    return ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k];
}

/* one product against float64; returns the worst error / bound */
static double check(int ta, int tb, int M, int N, int K, float alpha, float beta, int pad) {
    int lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
    float *A = randf((size_t)(ta ? K : M) * lda), *B = randf((size_t)(tb ? N : K) * ldb);
    float *C0 = randf((size_t)M * ldc), *C = malloc((size_t)M * ldc * sizeof(float));
    memcpy(C, C0, (size_t)M * ldc * sizeof(float));
    if (beta == 0.0f)
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) C[(size_t)i * ldc + j] = NAN;
    zt_kern_sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    double worst = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0, mag = 0;
            for (int k = 0; k < K; k++) {
                double p = (double)alpha * opa(A, lda, ta, i, k) * opa(B, ldb, !tb, j, k);
                s += p;
                mag += fabs(p);
            }
            double c0 = C0[(size_t)i * ldc + j];
            if (beta != 0.0f) {
                s += beta * c0;
                mag += fabs(beta * c0);
            }
            double got = C[(size_t)i * ldc + j];
            double bound = (K + 2) * ldexp(1.0, -23) * mag + 1e-30;
            double r = isnan(got) ? INFINITY : fabs(got - s) / bound;
            if (r > worst) worst = r;
        }
    // the padding columns of C are never written
    for (int i = 0; i < M; i++)
        for (int j = N; j < ldc; j++)
            if (memcmp(&C[(size_t)i * ldc + j], &C0[(size_t)i * ldc + j], sizeof(float)) != 0)
                worst = INFINITY;
    free(A);
    free(B);
    free(C0);
    free(C);
    return worst;
}

static void engine(const char *name) {
    static const int shapes[][3] = {{1, 1, 1},      {12, 32, 16},   {13, 33, 17},   {11, 15, 5},
                                    {37, 53, 41},   {24, 64, 384},  {25, 47, 385},  {7, 400, 769},
                                    {100, 17, 800}, {128, 128, 64}, {1540, 40, 20}, {3, 770, 10}};
    const float ab[][2] = {{1.0f, 0.0f}, {1.0f, 1.0f}, {0.125f, 0.5f}, {-0.7f, 0.0f}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int t = 0; t < 4; t++) {
            const float *x = ab[(s + (size_t)t) % 4];
            int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2], pad = (int)(s % 3) * 3;
            double r = check(t & 1, t >> 1, M, N, K, x[0], x[1], pad);
            ZT_TEST_TRUE(r <= 1.0,
                         "%s: ta=%d tb=%d M=%d N=%d K=%d alpha=%g beta=%g pad=%d: error %.3g of "
                         "the bound",
                         name, t & 1, t >> 1, M, N, K, x[0], x[1], pad, r);
        }
}

/* the AVX-512 engine's bits depend on K only (K = 803: a last block of k not a multiple of
 * the few-rows path's 4 rows of B per pass) */
static void bits(void) {
    const int M = 50, N = 70;
    for (int t = 0; t < 8; t++) {
        int ta = t & 1, tb = (t >> 1) & 1, K = t & 4 ? 803 : 800, lda = ta ? M : K,
            ldb = tb ? K : N;
        float *A = randf((size_t)M * K), *B = randf((size_t)K * N), *C0 = randf((size_t)M * N);
        size_t n = (size_t)M * N * sizeof(float);
        float *full = malloc(n), *again = malloc(n), *rows = malloc(n), *cols = malloc(n),
              *stk = malloc(n);
        memcpy(full, C0, n);
        memcpy(again, C0, n);
        memcpy(rows, C0, n);
        memcpy(cols, C0, n);
        memcpy(stk, C0, n);
        zt_kern_sgemm(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, 1.0f, full, N);
        zt_kern_sgemm(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, 1.0f, again, N);
        for (int i0 = 0; i0 < M; i0 += 7) { // row chunks: rows of op(A) and of C
            int m = M - i0 < 7 ? M - i0 : 7;
            const float *a = ta ? A + i0 : A + (size_t)i0 * lda;
            zt_kern_sgemm(ta, tb, m, N, K, 1.0f, a, lda, B, ldb, 1.0f, rows + (size_t)i0 * N, N);
        }
        ZT_TEST_TRUE(memcmp(full, rows, n) == 0, "avx512 ta=%d tb=%d: chunks of 7 rows change "
                     "the bits", ta, tb);
        memcpy(rows, C0, n);
        for (int i0 = 0; i0 < M; i0 += 1 + i0 % 3) { // 1, 2 or 3 rows: the few-rows path
            int m = 1 + i0 % 3 < M - i0 ? 1 + i0 % 3 : M - i0;
            const float *a = ta ? A + i0 : A + (size_t)i0 * lda;
            zt_kern_sgemm(ta, tb, m, N, K, 1.0f, a, lda, B, ldb, 1.0f, rows + (size_t)i0 * N, N);
        }
        for (int j0 = 0; j0 < N; j0 += 19) { // column chunks: columns of op(B) and of C
            int nn = N - j0 < 19 ? N - j0 : 19;
            const float *b = tb ? B + (size_t)j0 * ldb : B + j0;
            zt_kern_sgemm(ta, tb, M, nn, K, 1.0f, A, lda, b, ldb, 1.0f, cols + j0, N);
        }
        zt_kern_gemm_test_nobuf(1);
        zt_kern_sgemm(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, 1.0f, stk, N);
        zt_kern_gemm_test_nobuf(0);
        ZT_TEST_TRUE(memcmp(full, again, n) == 0, "avx512 ta=%d tb=%d: two calls differ", ta, tb);
        ZT_TEST_TRUE(memcmp(full, rows, n) == 0, "avx512 ta=%d tb=%d: row chunks change the bits",
                     ta, tb);
        ZT_TEST_TRUE(memcmp(full, cols, n) == 0,
                     "avx512 ta=%d tb=%d: column chunks change the bits", ta, tb);
        ZT_TEST_TRUE(memcmp(full, stk, n) == 0,
                     "avx512 ta=%d tb=%d: the stack-packed path changes the bits", ta, tb);
        free(A);
        free(B);
        free(C0);
        free(full);
        free(again);
        free(rows);
        free(cols);
        free(stk);
    }
}

/* the few-rows path on more columns than one pass takes (4096) and its most rows: the bits of
 * the blocked path, which computes the same rows when a ninth one comes with them */
static void bits_wide(void) {
    const int M = ZT_KERN_FEW_ROWS + 1, N = 4200, K = 803;
    float *A = randf((size_t)M * K), *B = randf((size_t)K * N);
    size_t n = (size_t)M * N * sizeof(float);
    float *blocked = calloc(1, n), *few = calloc(1, n);
    zt_kern_sgemm(0, 0, M, N, K, 1.0f, A, K, B, N, 0.0f, blocked, N);
    zt_kern_sgemm(0, 0, M - 1, N, K, 1.0f, A, K, B, N, 0.0f, few, N);
    ZT_TEST_TRUE(memcmp(blocked, few, (size_t)(M - 1) * N * sizeof(float)) == 0,
                 "avx512: %d rows x %d columns on the few-rows path change the bits", M - 1, N);
    free(A);
    free(B);
    free(blocked);
    free(few);
}

/* 16-bit op(B) read as stored (the few-rows path) = zt_kern_sgemm on B widened, bit for bit */
static void bits_w16(void) {
    const int N = 70;
    for (int t = 0; t < 8; t++) {
        int tb = t & 1, f16 = (t >> 1) & 1, K = t & 4 ? 803 : 800, ldb = tb ? K : N;
        float *A = randf((size_t)8 * K), *Bf = randf((size_t)K * N);
        uint16_t *B = malloc((size_t)K * N * sizeof *B);
        if (f16) zt_kern_f32_to_f16(B, Bf, (size_t)K * N);
        else zt_kern_f32_to_bf16(B, Bf, (size_t)K * N);
        if (f16) zt_kern_f16_to_f32(Bf, B, (size_t)K * N);
        else zt_kern_bf16_to_f32(Bf, B, (size_t)K * N);
        for (int M = 1; M <= ZT_KERN_FEW_ROWS; M += 3) {
            size_t n = (size_t)M * N * sizeof(float);
            float *want = malloc(n), *got = malloc(n);
            for (size_t i = 0; i < (size_t)M * N; i++) want[i] = got[i] = (float)i / 7.0f;
            zt_kern_sgemm(0, tb, M, N, K, 1.0f, A, K, Bf, ldb, 1.0f, want, N);
            int rc = zt_kern_sgemm_w16(tb, M, N, K, A, K, B, f16, ldb, 1.0f, got, N);
            ZT_TEST_TRUE(rc == 0 && memcmp(want, got, n) == 0,
                         "w16 tb=%d %s M=%d: rc %d, differs from the widened product", tb,
                         f16 ? "f16" : "bf16", M, rc);
            free(want);
            free(got);
        }
        ZT_TEST_TRUE(zt_kern_sgemm_w16(tb, ZT_KERN_FEW_ROWS + 1, N, K, A, K, B, f16, ldb, 0.0f,
                                       Bf, N) == -1, "w16 takes more than the few rows");
        free(A);
        free(Bf);
        free(B);
    }
}

int main(void) {
    zt_kern_blas_init();
    srand(7);
    ZT_TEST_TRUE(zt_kern_gemm_set(ZT_GEMM_OPENBLAS) == 0, "cannot select OpenBLAS");
    engine("openblas");
    if (zt_kern_gemm_avx512_available()) {
        ZT_TEST_TRUE(zt_kern_gemm_set(ZT_GEMM_AVX512) == 0, "cannot select the AVX-512 engine");
        ZT_TEST_TRUE(zt_kern_gemm_get() == ZT_GEMM_AVX512, "AVX-512 engine not selected");
        engine("avx512");
        zt_kern_gemm_test_nobuf(1);
        engine("avx512 (stack-packed)");
        zt_kern_gemm_test_nobuf(0);
        bits();
        bits_wide();
        bits_w16();
    } else {
        printf("test_gemm: this CPU has no AVX-512F: only OpenBLAS checked\n");
        ZT_TEST_TRUE(zt_kern_gemm_set(ZT_GEMM_AVX512) != 0,
                     "AVX-512 engine accepted on a CPU without AVX-512F");
    }
    return zt_test_finish("test_gemm");
}
