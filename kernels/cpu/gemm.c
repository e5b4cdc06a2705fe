/*
 * kernels/cpu/gemm.c: the single-precision product behind every CPU matmul and attention kernel
 * (bottom layer, pure compute).
 *
 * Two engines, chosen once per process before any task runs (zt_kern_gemm_set; the tasks layer
 * reads ZT_GEMM):
 *   - ZT_GEMM_AVX512: our own blocked GEMM (packing plus a 12x32 AVX-512 register tile),
 *     compiled for AVX-512F with a target attribute and used only where the CPU has it;
 *   - ZT_GEMM_OPENBLAS: OpenBLAS cblas_sgemm, single-threaded (zt_kern_blas_init).
 * Why our own: OpenBLAS picks its kernels from OPENBLAS_CORETYPE, and with "Haswell" (set on our
 * test machines) an AVX-512 CPU runs its AVX2 kernels at 0.75 of the speed (97 against 127 GF/s
 * here); this engine runs at OpenBLAS's own AVX-512 speed whatever that variable says (bench in
 * docs/benchmarks.md). The scheme is the Goto/BLIS one: op(B) is packed in blocks of KC x NC
 * (L2-resident) as 32-column micro-panels, op(A) in 12-row micro-panels (one of them L1-resident
 * while it sweeps the B block), and the micro-kernel keeps a 12 x 32 tile of C in 24 zmm
 * accumulators.
 *
 * Determinism: every C element is sum_k op(A)[i,k] op(B)[k,j] accumulated in k order from zero
 * within blocks of KC = 384 consecutive k, each block's sum then added to C in k order (the
 * first one to beta * C). The order depends on K only, not on M, N, the caller's row chunks,
 * alignment or thread, so a product has the same bits however the graph splits it.
 * Reference: Goto and van de Geijn, "Anatomy of high-performance matrix multiplication" (2008);
 * BLIS's kernel/blocksize notes (https://github.com/flame/blis, docs/KernelsHowTo.md).
 */
#include <cblas.h>   /* cblas_sgemm */
#include <pthread.h> /* pthread_key_t, pthread_once */
#include <stddef.h>  /* size_t */
#include <stdlib.h>  /* aligned_alloc, free */
#include <string.h>  /* memset */

#include "zt_kernels.h" /* prototypes */
#include "gemm_impl.h"  /* ZT_GEMM_HAVE_AVX512, GEMM_KC, lanes, tr16, tile_mode, skinny */

static enum zt_gemm_engine g_engine = ZT_GEMM_OPENBLAS;
static int g_test_nobuf; /* tests/kernels/test_gemm.c: take the stack-packed path */

void zt_kern_gemm_test_nobuf(int on) { g_test_nobuf = on; }
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

int zt_kern_gemm_avx512_available(void) {
#if ZT_GEMM_HAVE_AVX512
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") ? 1 : 0;
#else
    return 0;
#endif
}

static void default_engine(void) {
    g_engine = zt_kern_gemm_avx512_available() ? ZT_GEMM_AVX512 : ZT_GEMM_OPENBLAS;
}

enum zt_gemm_engine zt_kern_gemm_get(void) {
    pthread_once(&g_once, default_engine);
    return g_engine;
}

int zt_kern_gemm_set(enum zt_gemm_engine e) {
    pthread_once(&g_once, default_engine);
    if (e == ZT_GEMM_AVX512 && !zt_kern_gemm_avx512_available()) return -1;
    g_engine = e;
    return 0;
}

static void blas_sgemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                       const float *B, int ldb, float beta, float *C, int ldc) {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M,
                N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void zt_gemm_scale_c(int M, int N, float beta, float *C, size_t ldc) {
    for (int i = 0; i < M; i++) {
        float *ci = C + (size_t)i * ldc;
        if (beta == 0.0f) memset(ci, 0, (size_t)N * sizeof(float));
        else if (beta != 1.0f)
            for (int j = 0; j < N; j++) ci[j] *= beta;
    }
}

#if ZT_GEMM_HAVE_AVX512
#define GEMM_MR 12  /* rows of the register tile (micro-panel of op(A)) */

/* per-thread packing buffers of fixed size, shared with the bf16 engine (gemm_impl.h; StarPU
 * workers live for the whole run; freed at thread exit) */
struct gemm_buf {
    float *a, *b;
};
static pthread_key_t g_buf_key;
static pthread_once_t g_key_once = PTHREAD_ONCE_INIT;
static int g_key_ok;

static void buf_free(void *p) {
    struct gemm_buf *g = p;
    free(g->a);
    free(g->b);
    free(g);
}

static void key_init(void) { g_key_ok = pthread_key_create(&g_buf_key, buf_free) == 0; }

/* this thread's buffers; NULL when memory is short (the caller then packs on its stack) */
static struct gemm_buf *thread_buf(void) {
    pthread_once(&g_key_once, key_init);
    if (!g_key_ok || g_test_nobuf) return NULL;
    struct gemm_buf *g = pthread_getspecific(g_buf_key);
    if (g) return g;
    g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->a = aligned_alloc(64, GEMM_BUF_A_BYTES);
    g->b = aligned_alloc(64, GEMM_BUF_B_BYTES);
    if (!g->a || !g->b || pthread_setspecific(g_buf_key, g) != 0) {
        buf_free(g);
        return NULL;
    }
    return g;
}

int zt_gemm_thread_bufs(void **a, void **b) {
    struct gemm_buf *g = thread_buf();
    if (!g) return -1;
    *a = g->a;
    *b = g->b;
    return 0;
}

/* op(B)[0:kc, 0:nc] into 32-column micro-panels, each k-major (p[k*32 + j]), zero past nc.
 * tb = 0: B is [K,N] (row k contiguous); tb = 1: B is [N,K], transposed 16 x 16 in registers. */
static __attribute__((target("avx512f"))) void pack_b(int tb, int kc, int nc, const float *B,
                                                     size_t ldb, float *out) {
    for (int j0 = 0; j0 < nc; j0 += GEMM_NR) {
        int nr = nc - j0 < GEMM_NR ? nc - j0 : GEMM_NR;
        float *p = out + (size_t)j0 * kc;
        if (!tb) {
            __mmask16 m0 = lanes(nr), m1 = lanes(nr - 16);
            for (int k = 0; k < kc; k++) {
                const float *s = B + (size_t)k * ldb + j0;
                _mm512_store_ps(p + (size_t)k * GEMM_NR, _mm512_maskz_loadu_ps(m0, s));
                _mm512_store_ps(p + (size_t)k * GEMM_NR + 16, _mm512_maskz_loadu_ps(m1, s + 16));
            }
            continue;
        }
        for (int jh = 0; jh < GEMM_NR; jh += 16) {
            for (int kb = 0; kb < kc; kb += 16) {
                int kn = kc - kb < 16 ? kc - kb : 16;
                __mmask16 km = lanes(kn);
                __m512 r[16];
                const float *s = B + (size_t)(j0 + jh) * ldb + kb;
                for (int j = 0; j < 16; j++)
                    r[j] = jh + j < nr ? _mm512_maskz_loadu_ps(km, s + (size_t)j * ldb)
                                       : _mm512_setzero_ps();
                tr16(r);
                for (int k = 0; k < kn; k++)
                    _mm512_store_ps(p + (size_t)(kb + k) * GEMM_NR + jh, r[k]);
            }
        }
    }
}


/* alpha op(A)[0:m, 0:kc] into 12-row micro-panels, each k-major (p[k*12 + i]), zero past m.
 * ta = 0: A is [M,K], 16 x 16 blocks transposed in registers; ta = 1: A is [K,M]. Each value is
 * alpha * a rounded once (none when alpha is 1), whichever way it is packed. */
static __attribute__((target("avx512f"))) void pack_a(int ta, int m, int kc, const float *A,
                                                     size_t lda, float alpha, float *out) {
    const __m512 va = _mm512_set1_ps(alpha);
    const __mmask16 m12 = lanes(GEMM_MR);
    for (int i0 = 0; i0 < m; i0 += GEMM_MR) {
        int mr = m - i0 < GEMM_MR ? m - i0 : GEMM_MR;
        float *p = out + (size_t)i0 * kc;
        if (!ta) {
            const float *s = A + (size_t)i0 * lda;
            for (int kb = 0; kb < kc; kb += 16) {
                int kn = kc - kb < 16 ? kc - kb : 16;
                __mmask16 km = lanes(kn);
                __m512 r[16];
                for (int i = 0; i < 16; i++)
                    r[i] = i < mr ? _mm512_maskz_loadu_ps(km, s + (size_t)i * lda + kb)
                                  : _mm512_setzero_ps();
                tr16(r);
                for (int k = 0; k < kn; k++) {
                    __m512 x = alpha == 1.0f ? r[k] : _mm512_mul_ps(va, r[k]);
                    _mm512_mask_storeu_ps(p + (size_t)(kb + k) * GEMM_MR, m12, x);
                }
            }
        } else {
            const __mmask16 mm = lanes(mr);
            for (int k = 0; k < kc; k++) {
                __m512 x = _mm512_maskz_loadu_ps(mm, A + (size_t)k * lda + i0);
                if (alpha != 1.0f) x = _mm512_mul_ps(va, x);
                _mm512_mask_storeu_ps(p + (size_t)k * GEMM_MR, m12, x);
            }
        }
    }
}

/* C[0:mr, 0:nr] (= acc | += acc | = beta*C + acc, by mode 0 | 1 | 2) with acc the 12 x 32 tile
 * sum over kc of the packed panels a (12 per k) and b (32 per k) */
static __attribute__((target("avx512f"))) void tile(int kc, const float *restrict a,
                                                   const float *restrict b, float *c, size_t ldc,
                                                   int mr, int nr, int mode, float beta) {
    __m512 acc[GEMM_MR][2];
    for (int i = 0; i < mr; i++) {
        _mm_prefetch((const char *)(c + (size_t)i * ldc), _MM_HINT_T0);
        _mm_prefetch((const char *)(c + (size_t)i * ldc + 16), _MM_HINT_T0);
    }
#pragma GCC unroll 12
    for (int i = 0; i < GEMM_MR; i++) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    for (int k = 0; k < kc; k++) {
        __m512 b0 = _mm512_load_ps(b + (size_t)k * GEMM_NR);
        __m512 b1 = _mm512_load_ps(b + (size_t)k * GEMM_NR + 16);
#pragma GCC unroll 12
        for (int i = 0; i < GEMM_MR; i++) {
            __m512 ai = _mm512_set1_ps(a[(size_t)k * GEMM_MR + i]);
            acc[i][0] = _mm512_fmadd_ps(ai, b0, acc[i][0]);
            acc[i][1] = _mm512_fmadd_ps(ai, b1, acc[i][1]);
        }
    }
    __mmask16 m0 = lanes(nr), m1 = lanes(nr - 16);
    __m512 vb = _mm512_set1_ps(beta);
#pragma GCC unroll 12
    for (int i = 0; i < GEMM_MR; i++) {
        if (i >= mr) break;
        float *ci = c + (size_t)i * ldc;
        __m512 x0 = acc[i][0], x1 = acc[i][1];
        if (mode) {
            __m512 c0 = _mm512_maskz_loadu_ps(m0, ci), c1 = _mm512_maskz_loadu_ps(m1, ci + 16);
            if (mode == 2) {
                c0 = _mm512_mul_ps(vb, c0);
                c1 = _mm512_mul_ps(vb, c1);
            }
            x0 = _mm512_add_ps(c0, x0);
            x1 = _mm512_add_ps(c1, x1);
        }
        _mm512_mask_storeu_ps(ci, m0, x0);
        _mm512_mask_storeu_ps(ci + 16, m1, x1);
    }
}


/* The blocked product with packing buffers for mcap rows of op(A) and ncap columns of op(B)
 * (multiples of the tile), kc <= GEMM_KC deep. Every element gets the same tiles in the same k
 * order whatever the capacities, so the same bits. */
static __attribute__((target("avx512f"))) void blocked(
    int ta, int tb, int M, int N, int K, float alpha, const float *A, size_t lda, const float *B,
    size_t ldb, float beta, float *C, size_t ldc, float *abuf, int mcap, float *bbuf, int ncap) {
    for (int pc = 0; pc < K; pc += GEMM_KC) {
        int kc = K - pc < GEMM_KC ? K - pc : GEMM_KC, mode = tile_mode(pc, beta);
        for (int ic = 0; ic < M; ic += mcap) {
            int mc = M - ic < mcap ? M - ic : mcap;
            pack_a(ta, mc, kc, ta ? A + (size_t)pc * lda + ic : A + (size_t)ic * lda + pc, lda,
                   alpha, abuf);
            for (int jc = 0; jc < N; jc += ncap) {
                int nc = N - jc < ncap ? N - jc : ncap;
                pack_b(tb, kc, nc, tb ? B + (size_t)jc * ldb + pc : B + (size_t)pc * ldb + jc,
                       ldb, bbuf);
                for (int i0 = 0; i0 < mc; i0 += GEMM_MR)
                    for (int j0 = 0; j0 < nc; j0 += GEMM_NR)
                        tile(kc, abuf + (size_t)i0 * kc, bbuf + (size_t)j0 * kc,
                             C + (size_t)(ic + i0) * ldc + jc + j0, ldc,
                             mc - i0 < GEMM_MR ? mc - i0 : GEMM_MR,
                             nc - j0 < GEMM_NR ? nc - j0 : GEMM_NR, mode, beta);
            }
        }
    }
}

/* Without the thread's buffers (no memory): one micro-panel of each on the stack (slower: op(B)
 * is packed again for every 12 rows). */
static __attribute__((noinline, target("avx512f"))) void sgemm_stack(
    int ta, int tb, int M, int N, int K, float alpha, const float *A, size_t lda, const float *B,
    size_t ldb, float beta, float *C, size_t ldc) {
    _Alignas(64) float ap[GEMM_MR * GEMM_KC];
    _Alignas(64) float bp[GEMM_NR * GEMM_KC];
    blocked(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, ap, GEMM_MR, bp, GEMM_NR);
}

static void avx512_sgemm(int ta, int tb, int M, int N, int K, float alpha, const float *A,
                         size_t lda, const float *B, size_t ldb, float beta, float *C,
                         size_t ldc) {
    if (M <= GEMM_SKINNY_MR && !ta) {
        zt_gemm_skinny(tb, M, N, K, alpha, A, lda, B, ZT_GEMM_B_F32, ldb, beta, C, ldc);
        return;
    }
    struct gemm_buf *g = thread_buf();
    if (!g)
        sgemm_stack(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    else
        blocked(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, g->a, GEMM_MC, g->b,
                GEMM_NC);
}
#endif /* ZT_GEMM_HAVE_AVX512 */

void zt_kern_sgemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                   const float *B, int ldb, float beta, float *C, int ldc) {
    if (M <= 0 || N <= 0) return;
#if ZT_GEMM_HAVE_AVX512
    if (zt_kern_gemm_get() == ZT_GEMM_AVX512) {
        if (K <= 0) {
            zt_gemm_scale_c(M, N, beta, C, (size_t)ldc); /* an empty product, as BLAS */
            return;
        }
        avx512_sgemm(ta, tb, M, N, K, alpha, A, (size_t)lda, B, (size_t)ldb, beta, C,
                     (size_t)ldc);
        return;
    }
#endif
    blas_sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

size_t zt_kern_gemm_thread_bytes(int64_t M, int64_t N, int64_t K) {
#if ZT_GEMM_HAVE_AVX512
    if (zt_kern_gemm_get() != ZT_GEMM_AVX512) return 0;
    const size_t m = (size_t)(M < GEMM_MC ? M : GEMM_MC), k = (size_t)(K < GEMM_KC ? K : GEMM_KC);
    const size_t n = (size_t)(N < GEMM_NC ? N : GEMM_NC);
    return (m * k + k * n) * sizeof(float); /* the parts of the A and B panels packing writes */
#else
    (void)M, (void)N, (void)K;
    return 0;
#endif
}

int zt_kern_sgemm_w16(int tb, int M, int N, int K, const float *A, int lda, const uint16_t *B,
                      int is_f16, int ldb, float beta, float *C, int ldc) {
#if ZT_GEMM_HAVE_AVX512
    if (zt_kern_gemm_get() != ZT_GEMM_AVX512 || M > GEMM_SKINNY_MR || M < 1 || N < 1 || K < 1)
        return -1;
    zt_gemm_skinny(tb, M, N, K, 1.0f, A, (size_t)lda, B, is_f16 ? ZT_GEMM_B_F16 : ZT_GEMM_B_BF16,
                   (size_t)ldb, beta, C, (size_t)ldc);
    return 0;
#else
    (void)tb, (void)M, (void)N, (void)K, (void)A, (void)lda, (void)B, (void)is_f16, (void)ldb;
    (void)beta, (void)C, (void)ldc;
    return -1;
#endif
}
