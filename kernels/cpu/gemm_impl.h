/*
 * kernels/cpu/gemm_impl.h: what the files of the CPU GEMMs share (never installed): gemm.c
 * (the engines, the blocked path, the per-thread packing buffers), gemm_skinny.c (the few-rows
 * path) and gemm_bf16.c (the bf16 engines: the buffers, the tile mode, the transposes).
 *
 * Layer: kernels/. Both paths sum each element the same way (gemm.c's header: fmadd in k order
 * from zero within blocks of GEMM_KC, each block's sum then stored or added by tile_mode), so a
 * product has the same bits whichever path computes it.
 */
#ifndef ZT_GEMM_IMPL_H
#define ZT_GEMM_IMPL_H

#include <stdint.h> /* uint16_t */

#if defined(__x86_64__) && defined(__GNUC__)
#define ZT_GEMM_HAVE_AVX512 1
#include <immintrin.h> /* AVX-512F intrinsics */
#else
#define ZT_GEMM_HAVE_AVX512 0
#endif

#define GEMM_NR 32  /* columns of the register tile: two zmm (micro-panel of op(B)) */
#define GEMM_KC 384 /* k per block: a 12 x 384 A micro-panel is 18 KiB of L1 */
#define GEMM_SKINNY_MR 8 /* up to this many rows of op(A) take the few-rows path */

/* how a block's sum meets C: 0 C = sum, 1 C += sum, 2 C = beta C + sum (the first block by
 * beta, the later ones always added) */
static inline int tile_mode(int pc, float beta) {
    return pc > 0 ? 1 : beta == 0.0f ? 0 : beta == 1.0f ? 1 : 2;
}

#define GEMM_NC 384  /* columns per packed B block: 384 x 384 floats, 576 KiB of L2 */
#define GEMM_MC 1536 /* rows of op(A) packed at once: 1536 x 384 floats, 2.25 MiB */
#define GEMM_BUF_A_BYTES ((size_t)GEMM_MC * GEMM_KC * sizeof(float))
#define GEMM_BUF_B_BYTES ((size_t)GEMM_KC * GEMM_NC * sizeof(float))

/* This thread's two packing buffers (GEMM_BUF_A_BYTES and GEMM_BUF_B_BYTES, 64-byte aligned),
 * for whichever engine the thread runs (one product at a time): 0, or -1 when memory is short
 * or a test asks for the stack-packed paths (zt_kern_gemm_test_nobuf). */
int zt_gemm_thread_bufs(void **a, void **b);

/* C[M,N] = beta C (beta 0: zeros, never reading C): an empty product, as BLAS */
void zt_gemm_scale_c(int M, int N, float beta, float *C, size_t ldc);

/* the element type of op(B) on the few-rows path */
enum zt_gemm_btype { ZT_GEMM_B_F32 = 0, ZT_GEMM_B_BF16, ZT_GEMM_B_F16 };

#if ZT_GEMM_HAVE_AVX512
static inline __attribute__((always_inline, target("avx512f"))) __mmask16 lanes(int n) {
    return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1u);
}

/* r[j] lane k -> r[k] lane j: interleave pairs, then quads, then 128-bit lanes twice */
static inline __attribute__((always_inline, target("avx512f"))) void tr16(__m512 r[16]) {
    __m512 t[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) {
        r[4 * i] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
        r[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
        r[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
        r[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
    }
    for (int h = 0; h < 2; h++)
        for (int i = 0; i < 4; i++) {
            __m512 lo = r[8 * h + i], hi = r[8 * h + 4 + i];
            t[8 * h + i] = _mm512_shuffle_f32x4(lo, hi, 0x88);
            t[8 * h + 4 + i] = _mm512_shuffle_f32x4(lo, hi, 0xDD);
        }
    for (int i = 0; i < 8; i++) {
        r[i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0x88);
        r[8 + i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0xDD);
    }
}

/* C = alpha A op(B) + beta C for M <= GEMM_SKINNY_MR rows of A (not transposed), op(B) read
 * once from memory in its own type (16-bit types widened in registers: the bits of the product
 * on B widened first). bf16 needs AVX512BW (zt_gemm_skinny_b16_available). */
void zt_gemm_skinny(int tb, int M, int N, int K, float alpha, const float *A, size_t lda,
                    const void *B, enum zt_gemm_btype bt, size_t ldb, float beta, float *C,
                    size_t ldc);
#endif

#endif /* ZT_GEMM_IMPL_H */
