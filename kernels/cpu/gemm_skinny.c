/*
 * kernels/cpu/gemm_skinny.c: the few-rows path of the AVX-512 GEMM (decode: one row of A per
 * sequence), op(B) read once straight from memory, in fp32 or as the bf16/fp16 it is stored in.
 *
 * Layer: kernels/ (bottom, pure compute). Packing op(B) would cost more than the product when A
 * has a few rows, and widening 16-bit weights to fp32 first would move three times the bytes the
 * product needs. The sums are the blocked path's, element by element (gemm_impl.h): alpha * a
 * rounded once, fmadd in k order from zero within each GEMM_KC block, the block's sum stored or
 * added by tile_mode; a 16-bit value widens exactly, so the bits are those of the product on B
 * widened first. Two shapes of op(B): tb = 0 (B[K,N], rows streamed whole, the sums in a
 * per-thread buffer that stays in L2) and tb = 1 (B[N,K]: 16 x 16 blocks of its rows
 * transposed in registers).
 */
#include <stddef.h>     /* size_t */
#include <string.h>     /* memset */

#include "gemm_impl.h"  /* lanes, tr16, tile_mode, GEMM_KC, zt_gemm_skinny */

#if ZT_GEMM_HAVE_AVX512
#define SKINNY_NC 4096 /* columns of op(B) per pass when tb = 0: whole rows of a layer's weight
                        * streamed at once (the sums, 8 x 16 KiB at most, stay in L2) */
#define TGT __attribute__((target("avx512f")))

/* n (<= 16) elements of type bt at p, widened to fp32 lanes (the rest 0); 16-bit edges go
 * through a small copy (a masked 16-bit load would need AVX512BW) */
static inline __attribute__((always_inline)) TGT __m512 load_b(const void *p, size_t at, int n,
                                                               enum zt_gemm_btype bt) {
    if (bt == ZT_GEMM_B_F32) return _mm512_maskz_loadu_ps(lanes(n), (const float *)p + at);
    const uint16_t *q = (const uint16_t *)p + at;
    uint16_t edge[16] = {0};
    if (n < 16) {
        memcpy(edge, q, (size_t)n * sizeof *q);
        q = edge;
    }
    __m256i h = _mm256_loadu_si256((const __m256i *)q);
    if (bt == ZT_GEMM_B_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* a KC block's sum into C as the blocked path stores it (mode 0: =, 1: +=, 2: = beta C +) */
static inline __attribute__((always_inline)) TGT void store_c(float *ci, __m512 x, __mmask16 mk,
                                                              int mode, float beta) {
    if (mode) {
        __m512 c = _mm512_maskz_loadu_ps(mk, ci);
        if (mode == 2) c = _mm512_mul_ps(_mm512_set1_ps(beta), c);
        x = _mm512_add_ps(c, x);
    }
    _mm512_mask_storeu_ps(ci, mk, x);
}

/* tb = 1: C[0:m, 0:nr] (nr <= 16 rows of B, from row j0) for the KC block at k = pc */
static inline __attribute__((always_inline)) TGT void rows_block(
    int m, int nr, int kc, const float *a, const void *B, size_t j0, size_t pc, size_t ldb,
    enum zt_gemm_btype bt, float *c, size_t ldc, int mode, float beta) {
    __m512 acc[GEMM_SKINNY_MR];
    for (int i = 0; i < GEMM_SKINNY_MR; i++) acc[i] = _mm512_setzero_ps();
    for (int k0 = 0; k0 < kc; k0 += 16) {
        int kn = kc - k0 < 16 ? kc - k0 : 16;
        __m512 col[16]; /* after tr16: col[kk] = op(B)[pc + k0 + kk, j0 : j0 + 16] */
        for (int j = 0; j < 16; j++)
            col[j] = j < nr ? load_b(B, (j0 + j) * ldb + pc + k0, kn, bt) : _mm512_setzero_ps();
        tr16(col);
        for (int kk = 0; kk < kn; kk++)
            for (int i = 0; i < m; i++)
                acc[i] = _mm512_fmadd_ps(_mm512_set1_ps(a[(size_t)i * GEMM_KC + k0 + kk]),
                                         col[kk], acc[i]);
    }
    for (int i = 0; i < m; i++) store_c(c + (size_t)i * ldc, acc[i], lanes(nr), mode, beta);
}

/* rows of B a pass of cols_block reads together: each sum stays in a register over ROWS fmadds
 * (in k order, so the bits are those of one row at a time) while ROWS streams of B are in
 * flight, and the next ROWS rows are prefetched one pass ahead */
#define ROWS 4

/* the sums of ROWS rows of B into acc, for nc columns: row is the element offset of the first
 * one (row pc + k of B, at column j0), k its index in the block (the A values it takes) */
static inline __attribute__((always_inline)) TGT void cols_rows(
    int m, int nv, int nc, const float *a, int k, const void *B, size_t row, size_t ldb,
    enum zt_gemm_btype bt, float (*acc)[SKINNY_NC], int prefetch) {
    const size_t esz = bt == ZT_GEMM_B_F32 ? 4 : 2;
    for (int v = 0; v < nv; v++) {
        size_t at = row + 16 * (size_t)v;
        int n = nc - 16 * v;
        __m512 b[ROWS];
        for (int u = 0; u < ROWS; u++) b[u] = load_b(B, at + u * ldb, n, bt);
        if (prefetch)
            for (int u = 0; u < ROWS; u++)
                _mm_prefetch((const char *)B + (at + (ROWS + u) * ldb) * esz, _MM_HINT_T0);
        for (int i = 0; i < m; i++) {
            __m512 x = _mm512_load_ps(acc[i] + 16 * v);
            for (int u = 0; u < ROWS; u++)
                x = _mm512_fmadd_ps(_mm512_set1_ps(a[(size_t)i * GEMM_KC + k + u]), b[u], x);
            _mm512_store_ps(acc[i] + 16 * v, x);
        }
    }
}

/* tb = 0: C[0:m, 0:nc] (nc <= SKINNY_NC columns from j0) for the KC block at k = pc, the rows
 * of B streamed whole, ROWS at a time, the sums in acc */
static inline __attribute__((always_inline)) TGT void cols_block(
    int m, int nc, int kc, const float *a, const void *B, size_t j0, size_t pc, size_t ldb,
    enum zt_gemm_btype bt, float *c, size_t ldc, int mode, float beta) {
    static _Thread_local _Alignas(64) float acc[GEMM_SKINNY_MR][SKINNY_NC];
    int nv = (nc + 15) / 16, k = 0;
    for (int i = 0; i < m; i++) memset(acc[i], 0, (size_t)nv * 16 * sizeof(float));
    for (; k + ROWS <= kc; k += ROWS)
        cols_rows(m, nv, nc, a, k, B, (pc + (size_t)k) * ldb + j0, ldb, bt, acc,
                  k + 2 * ROWS <= kc);
    for (; k < kc; k++) { /* the last kc % ROWS rows, one at a time */
        size_t row = (pc + (size_t)k) * ldb + j0;
        for (int v = 0; v < nv; v++) {
            __m512 bv = load_b(B, row + 16 * (size_t)v, nc - 16 * v, bt);
            for (int i = 0; i < m; i++) {
                __m512 x = _mm512_load_ps(acc[i] + 16 * v);
                x = _mm512_fmadd_ps(_mm512_set1_ps(a[(size_t)i * GEMM_KC + k]), bv, x);
                _mm512_store_ps(acc[i] + 16 * v, x);
            }
        }
    }
    for (int i = 0; i < m; i++)
        for (int v = 0; v < nv; v++)
            store_c(c + (size_t)i * ldc + 16 * v, _mm512_load_ps(acc[i] + 16 * v),
                    lanes(nc - 16 * v), mode, beta);
}

/* one KC block of the whole product, for one type of B (inlined per type) */
static inline __attribute__((always_inline)) TGT void block(
    int tb, int M, int N, int kc, const float *a, const void *B, size_t pc, size_t ldb,
    enum zt_gemm_btype bt, float *C, size_t ldc, int mode, float beta) {
    int step = tb ? 16 : SKINNY_NC;
    for (int j0 = 0; j0 < N; j0 += step) {
        int n = N - j0 < step ? N - j0 : step;
        if (tb)
            rows_block(M, n, kc, a, B, (size_t)j0, pc, ldb, bt, C + j0, ldc, mode, beta);
        else if (M == 1) /* one sequence: a constant row count, the row loop folded away */
            cols_block(1, n, kc, a, B, (size_t)j0, pc, ldb, bt, C + j0, ldc, mode, beta);
        else
            cols_block(M, n, kc, a, B, (size_t)j0, pc, ldb, bt, C + j0, ldc, mode, beta);
    }
}

static TGT void block_f32(int tb, int M, int N, int kc, const float *a, const void *B,
                          size_t pc, size_t ldb, float *C, size_t ldc, int mode, float beta) {
    block(tb, M, N, kc, a, B, pc, ldb, ZT_GEMM_B_F32, C, ldc, mode, beta);
}
static TGT void block_bf16(int tb, int M, int N, int kc, const float *a, const void *B,
                           size_t pc, size_t ldb, float *C, size_t ldc, int mode, float beta) {
    block(tb, M, N, kc, a, B, pc, ldb, ZT_GEMM_B_BF16, C, ldc, mode, beta);
}
static TGT void block_f16(int tb, int M, int N, int kc, const float *a, const void *B,
                          size_t pc, size_t ldb, float *C, size_t ldc, int mode, float beta) {
    block(tb, M, N, kc, a, B, pc, ldb, ZT_GEMM_B_F16, C, ldc, mode, beta);
}

void zt_gemm_skinny(int tb, int M, int N, int K, float alpha, const float *A, size_t lda,
                    const void *B, enum zt_gemm_btype bt, size_t ldb, float beta, float *C,
                    size_t ldc) {
    _Alignas(64) float a[GEMM_SKINNY_MR * GEMM_KC]; /* alpha A, rounded once, as pack_a */
    for (int pc = 0; pc < K; pc += GEMM_KC) {
        int kc = K - pc < GEMM_KC ? K - pc : GEMM_KC, mode = tile_mode(pc, beta);
        for (int i = 0; i < M; i++)
            for (int k = 0; k < kc; k++) {
                float x = A[(size_t)i * lda + pc + k];
                a[i * GEMM_KC + k] = alpha == 1.0f ? x : alpha * x;
            }
        if (bt == ZT_GEMM_B_F32)
            block_f32(tb, M, N, kc, a, B, (size_t)pc, ldb, C, ldc, mode, beta);
        else if (bt == ZT_GEMM_B_BF16)
            block_bf16(tb, M, N, kc, a, B, (size_t)pc, ldb, C, ldc, mode, beta);
        else block_f16(tb, M, N, kc, a, B, (size_t)pc, ldb, C, ldc, mode, beta);
    }
}
#endif /* ZT_GEMM_HAVE_AVX512 */
