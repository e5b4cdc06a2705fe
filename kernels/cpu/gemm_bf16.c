/*
 * kernels/cpu/gemm_bf16.c: the bf16 product, bf16 A and B with fp32 accumulation and fp32 C, on
 * the CPU's own bf16 instructions (bottom layer, pure compute).
 *
 * Two engines (zt_kern_gemm16_set; the tasks layer reads ZT_GEMM), both compiled with target
 * attributes and run only where cpuid says the CPU has them:
 *   - ZT_GEMM16_AMX: AMX-BF16 tiles (TDPBF16PS: a 16x16 fp32 tile += a 16x32 bf16 tile times a
 *     32x16 one); Linux hands a process the tile state only after
 *     arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA), asked once here;
 *   - ZT_GEMM16_AVX512BF16: VDPBF16PS (per fp32 lane, the two products of a pair of bf16 k's
 *     added into the accumulator), a 16 x 16 register tile.
 * Without either (ZT_GEMM16_WIDEN) zt_kern_gemm_bf16 returns -1 and the caller widens its
 * operands to fp32 for zt_kern_sgemm (the products are the same: a product of two bf16 values
 * is exact in fp32; the sums are rounded in another order).
 *
 * Both engines read the same packed operands (Goto/BLIS blocking as in gemm.c): op(A) in
 * 16-row panels and op(B) in 16-column panels, each a run of 1 KiB tiles, one per 32 k:
 *   A tile: row i, k-offset kk at [i * 32 + kk] (an AMX A tile: 16 rows of 64 bytes);
 *   B tile: the k pair p, column j at [(p * 16 + j) * 2 + e] = op(B)[2p + e, j] (AMX's "VNNI"
 *   B layout, which is also what VDPBF16PS reads: a zmm holds one k pair of 16 columns).
 * k past K is packed as zeros, and so are the rows and columns of a packed block past M and N
 * up to the next multiple of 32 (their results are dropped).
 *
 * Determinism: C's running value is the accumulator: each element starts from 0, C or beta C
 * (the first block of GEMM16_KC k, by beta) and the products are added in k order, 32 k at a
 * time (AMX) or 2 at a time (AVX512-BF16), by the same instruction sequence wherever the element
 * lies: its bits depend on K only, not on M, N, the caller's row chunks or the thread. The two
 * engines round differently from each other and from the widening path. Both flush bf16
 * subnormal inputs and fp32 subnormal results to zero (the instructions' DAZ/FTZ).
 * References: Intel SDM vol. 2 (TDPBF16PS, VDPBF16PS), Intel's AMX programming reference
 * (ldtilecfg palette 1), the Linux kernel's Documentation/arch/x86/xstate.rst.
 */
#define _GNU_SOURCE  /* syscall */
#include <pthread.h> /* pthread_once */
#include <stddef.h>  /* size_t */
#include <stdint.h>  /* uint16_t */
#include <string.h>  /* memcpy, memset */

#include "zt_kernels.h" /* prototypes */
#include "gemm_impl.h"  /* ZT_GEMM_HAVE_AVX512, lanes, tr16, buffers, scale_c */

#if ZT_GEMM_HAVE_AVX512
#include <cpuid.h>       /* __get_cpuid_count */
#include <sys/syscall.h> /* SYS_arch_prctl */
#include <unistd.h>      /* syscall */
#endif

#define GEMM16_KC 1024 /* k per block: a 32-row A strip is 64 KiB, a B block 512 KiB */
#define GEMM16_MC 1024 /* rows of op(A) packed at once (2 MiB) */
#define GEMM16_NC 256  /* columns of op(B) packed at once */
#define GEMM16_TILE 512 /* uint16 per packed 1 KiB tile */

/* the packed block of k block pc (a multiple of GEMM16_KC) of a [K, N] weight */
static const uint16_t *packed_block(const uint16_t *P, int N, int pc) {
    size_t npad = (size_t)(N + 31) / 32 * 32;
    return P + (size_t)(pc / GEMM16_KC) * (npad / 16) * (GEMM16_KC / 32) * GEMM16_TILE;
}

static enum zt_gemm16_engine g_engine16 = ZT_GEMM16_WIDEN;
static pthread_once_t g_once16 = PTHREAD_ONCE_INIT;

#if ZT_GEMM_HAVE_AVX512
/* AMX-BF16 and AMX-TILE in cpuid, the tile state enabled by the OS (XCR0 bits 17-18) and
 * granted to this process */
static int amx_usable(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
    if (!(d & (1u << 22)) || !(d & (1u << 24))) return 0;
    if (!__get_cpuid_count(1, 0, &a, &b, &c, &d) || !(c & (1u << 27))) return 0; /* OSXSAVE */
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & (3u << 17)) != (3u << 17)) return 0;
    return syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) == 0;
}
#endif

static int g_have[3];

static void probe(void) {
    g_have[ZT_GEMM16_WIDEN] = 1;
#if ZT_GEMM_HAVE_AVX512
    __builtin_cpu_init();
    int bw = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl");
    g_have[ZT_GEMM16_AVX512BF16] = bw && __builtin_cpu_supports("avx512bf16");
    g_have[ZT_GEMM16_AMX] = bw && amx_usable();
#endif
    g_engine16 = g_have[ZT_GEMM16_AMX]          ? ZT_GEMM16_AMX
                 : g_have[ZT_GEMM16_AVX512BF16] ? ZT_GEMM16_AVX512BF16
                                                : ZT_GEMM16_WIDEN;
}

int zt_kern_gemm16_available(enum zt_gemm16_engine e) {
    pthread_once(&g_once16, probe);
    return (unsigned)e < 3 ? g_have[e] : 0;
}

enum zt_gemm16_engine zt_kern_gemm16_get(void) {
    pthread_once(&g_once16, probe);
    return g_engine16;
}

int zt_kern_gemm16_set(enum zt_gemm16_engine e) {
    if (!zt_kern_gemm16_available(e)) return -1;
    g_engine16 = e;
    return 0;
}

#if ZT_GEMM_HAVE_AVX512
#define T16 __attribute__((target("avx512f,avx512bw,avx512vl")))

/* gemm.c's per-thread packing buffers hold the bf16 blocks too */
_Static_assert((size_t)GEMM16_MC * GEMM16_KC * 2 <= GEMM_BUF_A_BYTES, "bf16 A block too big");
_Static_assert((size_t)GEMM16_NC * GEMM16_KC * 2 <= GEMM_BUF_B_BYTES, "bf16 B block too big");

static inline T16 __mmask32 lanes32(int n) {
    return n >= 32 ? (__mmask32)0xFFFFFFFFu : n <= 0 ? 0 : (__mmask32)((1u << n) - 1u);
}

/* lane i of the pair interleave of two 32-lane rows x, y: lanes 2i, 2i+1 = x[h + i], y[h + i]
 * (h = 0: the first 16 columns, h = 16: the last 16) */
static const uint16_t PAIR_LO[32] = {0,  32, 1,  33, 2,  34, 3,  35, 4,  36, 5,
                                     37, 6,  38, 7,  39, 8,  40, 9,  41, 10, 42,
                                     11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
static const uint16_t PAIR_HI[32] = {16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21,
                                     53, 22, 54, 23, 55, 24, 56, 25, 57, 26, 58,
                                     27, 59, 28, 60, 29, 61, 30, 62, 31, 63};

/* 16 k pairs (k = k0 .. k0+31, kc valid) of 32 rows/columns from a k-major matrix (x[k][c] at
 * x + k ld + c, n valid c), as two 16-line halves: lane c of lo[p] (hi[p]) = (x[k0+2p][c],
 * x[k0+2p+1][c]) for c < 16 (c + 16) */
static inline T16 void pairs_kmajor(__m512i lo[16], __m512i hi[16], const uint16_t *x,
                                    size_t ld, int k0, int kc, int n) {
    const __m512i ilo = _mm512_loadu_si512((const void *)PAIR_LO);
    const __m512i ihi = _mm512_loadu_si512((const void *)PAIR_HI);
    const __mmask32 m = lanes32(n);
    for (int p = 0; p < 16; p++) {
        int k = k0 + 2 * p;
        __m512i r0 = k < kc ? _mm512_maskz_loadu_epi16(m, x + (size_t)k * ld)
                            : _mm512_setzero_si512();
        __m512i r1 = k + 1 < kc ? _mm512_maskz_loadu_epi16(m, x + (size_t)(k + 1) * ld)
                                : _mm512_setzero_si512();
        lo[p] = _mm512_permutex2var_epi16(r0, ilo, r1);
        hi[p] = _mm512_permutex2var_epi16(r0, ihi, r1);
    }
}

/* 16 rows/columns of 32 k each from a k-contiguous matrix (x[c][k] at x + c ld + k, n valid
 * c): zmm c holds k = k0 .. k0+31 (kc valid) as 16 k pairs */
static inline T16 void rows_kcontig(__m512i r[16], const uint16_t *x, size_t ld, int k0, int kc,
                                    int n) {
    __mmask32 km = lanes32(kc - k0);
    for (int c = 0; c < 16; c++)
        r[c] = c < n ? _mm512_maskz_loadu_epi16(km, x + (size_t)c * ld + k0)
                     : _mm512_setzero_si512(); /* x itself is not read when n <= 0 */
}

static inline T16 void transpose_pairs(__m512i r[16]) {
    __m512 f[16];
    for (int i = 0; i < 16; i++) f[i] = _mm512_castsi512_ps(r[i]);
    tr16(f);
    for (int i = 0; i < 16; i++) r[i] = _mm512_castps_si512(f[i]);
}

static inline T16 void store_tile(uint16_t *t, const __m512i r[16]) {
    for (int i = 0; i < 16; i++) _mm512_store_si512((void *)(t + i * 32), r[i]);
}

/* pack's k-major, untransposed case (op(B) as stored, B[k][c]): a k pair at a time, its two
 * rows read along all npad columns (a 32 x 32 square at a time reads 32 rows ld apart, which the
 * prefetchers do not follow) and interleaved into each panel's tile row; the rows PACK_AHEAD
 * below are prefetched meanwhile */
#define PACK_AHEAD 32

static T16 void pack_kmajor_rows(int n, int npad, int kc, const uint16_t *X, size_t ld,
                                 uint16_t *out) {
    const __m512i ilo = _mm512_loadu_si512((const void *)PAIR_LO);
    const __m512i ihi = _mm512_loadu_si512((const void *)PAIR_HI);
    int kq = (kc + 31) / 32;
    for (int k = 0; k < kq * 32; k += 2) {
        uint16_t *row = out + (size_t)(k / 32) * GEMM16_TILE + (size_t)(k % 32 / 2) * 32;
        for (int c0 = 0; c0 < npad; c0 += 32) {
            __mmask32 m = lanes32(n - c0);
            __m512i r0 = _mm512_setzero_si512(), r1 = _mm512_setzero_si512();
            if (n > c0 && k < kc) r0 = _mm512_maskz_loadu_epi16(m, X + (size_t)k * ld + c0);
            if (n > c0 && k + 1 < kc)
                r1 = _mm512_maskz_loadu_epi16(m, X + (size_t)(k + 1) * ld + c0);
            if (n > c0 && k + PACK_AHEAD + 1 < kc) {
                _mm_prefetch((const char *)(X + (size_t)(k + PACK_AHEAD) * ld + c0), _MM_HINT_T0);
                _mm_prefetch((const char *)(X + (size_t)(k + PACK_AHEAD + 1) * ld + c0),
                             _MM_HINT_T0);
            }
            uint16_t *t = row + (size_t)(c0 / 16) * kq * GEMM16_TILE;
            _mm512_storeu_si512((void *)t, _mm512_permutex2var_epi16(r0, ilo, r1));
            _mm512_storeu_si512((void *)(t + (size_t)kq * GEMM16_TILE),
                                _mm512_permutex2var_epi16(r0, ihi, r1));
        }
    }
}

/* 16-wide panels of an operand: rows of op(A) (as A tiles) or columns of op(B) (as B tiles),
 * kq = ceil(kc / 32) tiles each, lines past n zero up to npad (a multiple of 32). kmajor: X[k][c]
 * at X + k ld + c, else X[c][k] at X + c ld + k. A tile wants a line's k pairs along a zmm, a B
 * tile a k pair's lines: op(A) is transposed when k-major, op(B) when k-contiguous. */
static T16 void pack(int kmajor, int transpose, int n, int npad, int kc, const uint16_t *X,
                     size_t ld, uint16_t *out) {
    if (kmajor && !transpose) {
        pack_kmajor_rows(n, npad, kc, X, ld, out);
        return;
    }
    int kq = (kc + 31) / 32;
    for (int c0 = 0; c0 < npad; c0 += 32) {
        int nc = n - c0 < 32 ? n - c0 : 32;
        const uint16_t *x = nc <= 0 ? X : kmajor ? X + c0 : X + (size_t)c0 * ld;
        for (int q = 0; q < kq; q++) {
            __m512i r[2][16];
            if (kmajor) {
                pairs_kmajor(r[0], r[1], x, ld, 32 * q, kc, nc);
            } else {
                rows_kcontig(r[0], x, ld, 32 * q, kc, nc);
                rows_kcontig(r[1], nc > 16 ? x + 16 * ld : x, ld, 32 * q, kc, nc - 16);
            }
            for (int h = 0; h < 2; h++) {
                if (transpose) transpose_pairs(r[h]);
                store_tile(out + ((size_t)(c0 / 16 + h) * kq + q) * GEMM16_TILE, r[h]);
            }
        }
    }
}

/* Where a product's C lives and where each element's sum starts: fp32 C (f), from 0, C or
 * beta C by mode (gemm_impl.h's tile_mode); or bf16 C (h, a product of one k block), from the
 * bias row (bias), C widened (mode 1) or 0, the sum rounded once into it */
struct cdst {
    float *f;
    uint16_t *h;
    const float *bias;
    size_t ld;
    int mode;
    float beta;
};

/* 16 fp32 to bf16 as zt_kern_f32_to_bf16 rounds them (nearest even on the dropped 16 bits;
 * NaN -> 0x7FC0), so a fused store has the bits of a store then a conversion */
static inline T16 __m256i round16(__m512 x) {
    __m512i u = _mm512_castps_si512(x);
    __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7FFF)), odd);
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF)),
                                            _mm512_set1_epi32(0x7F800000));
    r = _mm512_mask_mov_epi32(_mm512_srli_epi32(r, 16), nan, _mm512_set1_epi32(0x7FC0));
    return _mm512_cvtepi32_epi16(r);
}

/* the start of C[i0.., j0..] (mr x nr valid) into a dense 16 x 16 tile t (zeros where nothing
 * is valid: no address past C is formed) */
static T16 void c_load(float *t, const struct cdst *cd, int i0, int j0, int mr, int nr) {
    __mmask16 m = lanes(nr);
    __m512 vb = _mm512_set1_ps(cd->beta), x0 = _mm512_setzero_ps();
    if (mr <= 0 || nr <= 0) mr = 0;
    else if (cd->bias) x0 = _mm512_maskz_loadu_ps(m, cd->bias + j0);
    for (int i = 0; i < 16; i++) {
        __m512 x = i < mr ? x0 : _mm512_setzero_ps();
        if (i < mr && cd->mode) {
            size_t at = (size_t)(i0 + i) * cd->ld + j0;
            if (cd->h) {
                __m512i w = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, cd->h + at));
                x = _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
            } else {
                x = _mm512_maskz_loadu_ps(m, cd->f + at);
                if (cd->mode == 2) x = _mm512_mul_ps(vb, x);
            }
        }
        _mm512_store_ps(t + i * 16, x);
    }
}

/* the tile's sums into C[i0.., j0..] (mr x nr valid) */
static T16 void c_store(const struct cdst *cd, int i0, int j0, const float *t, int mr, int nr) {
    __mmask16 m = lanes(nr);
    for (int i = 0; nr > 0 && i < mr && i < 16; i++) {
        size_t at = (size_t)(i0 + i) * cd->ld + j0;
        __m512 x = _mm512_load_ps(t + i * 16);
        if (cd->h) _mm256_mask_storeu_epi16(cd->h + at, m, round16(x));
        else _mm512_mask_storeu_ps(cd->f + at, m, x);
    }
}

/* The tile intrinsics are asm statements that do not tell the compiler which memory they read
 * or write: a barrier keeps the stores into a dense tile before its tile load, and the reads of
 * it after its tile store, should c_load or c_store ever be inlined around them. */
#define TILE_MEMORY_BARRIER() __asm__ volatile("" ::: "memory")

// ----------------------------------------------------------------------------
// AVX512-BF16: a 16 x 16 tile of C in 16 zmm, a k pair per VDPBF16PS

/* the products of kq tiles into the first R rows of the register tile acc (R a constant where
 * it is inlined, so that acc stays in registers): a row's sums do not depend on the others, so
 * leaving the rows past the valid ones out changes no bit and saves their work (a decode step's
 * product has one row) */
static inline __attribute__((always_inline, target("avx512f,avx512bw,avx512vl,avx512bf16"))) void
dp_rows(int R, int kq, const uint16_t *a, const uint16_t *b, __m512 acc[16]) {
    for (int q = 0; q < kq; q++) {
        const uint16_t *aq = a + (size_t)q * GEMM16_TILE;
        const uint16_t *bq = b + (size_t)q * GEMM16_TILE;
        for (int p = 0; p < 16; p++) {
            __m512bh bp = (__m512bh)_mm512_loadu_si512((const void *)(bq + p * 32));
#pragma GCC unroll 16
            for (int i = 0; i < R; i++) {
                int32_t w; /* the pair (a[i][2p], a[i][2p+1]) */
                memcpy(&w, aq + i * 32 + 2 * p, sizeof w);
                acc[i] = _mm512_dpbf16_ps(acc[i], (__m512bh)_mm512_set1_epi32(w), bp);
            }
        }
    }
}

static __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void dp_tile(
    int kq, const uint16_t *a, const uint16_t *b, const struct cdst *cd, int i0, int j0, int mr,
    int nr) {
    _Alignas(64) float t[256];
    c_load(t, cd, i0, j0, mr, nr);
    __m512 acc[16];
    for (int i = 0; i < 16; i++) acc[i] = _mm512_load_ps(t + i * 16);
    if (mr <= 1) dp_rows(1, kq, a, b, acc);
    else if (mr <= 2) dp_rows(2, kq, a, b, acc);
    else if (mr <= 4) dp_rows(4, kq, a, b, acc);
    else if (mr <= 8) dp_rows(8, kq, a, b, acc);
    else dp_rows(16, kq, a, b, acc);
    for (int i = 0; i < 16; i++) _mm512_store_ps(t + i * 16, acc[i]);
    c_store(cd, i0, j0, t, mr, nr);
}

// ----------------------------------------------------------------------------
// AMX-BF16: a 32 x 32 block of C in tiles 0-3, A in tiles 4-5, B in tiles 6-7

struct tilecfg {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
};

/* palette 1, tiles 0-7 of 16 rows x 64 bytes. A constant object: gcc 12 at -O2 without
 * -march=native drops the stores into a local config before ldtilecfg (the builtin is not
 * known to read all 64 bytes), and the tiles then fault. */
static const struct tilecfg TILECFG = {
    .palette = 1,
    .colsb = {64, 64, 64, 64, 64, 64, 64, 64},
    .rows = {16, 16, 16, 16, 16, 16, 16, 16},
};

static __attribute__((target("amx-tile"))) void amx_begin(void) { _tile_loadconfig(&TILECFG); }

static __attribute__((target("amx-tile"))) void amx_end(void) { _tile_release(); }

#define TILE_AHEAD 8 /* B tiles prefetched ahead of their products */

/* the B tiles of k tile q + TILE_AHEAD of panels b0, b1 (when there is one) into L1: a weight
 * packed once is read from memory, where the tile loads alone keep too few lines in flight */
static inline __attribute__((always_inline, target("avx512f"))) void prefetch_b(
    int kq, int q, const uint16_t *b0, const uint16_t *b1) {
    if (q + TILE_AHEAD >= kq) return;
    size_t o = (size_t)(q + TILE_AHEAD) * GEMM16_TILE;
    for (int l = 0; l < GEMM16_TILE; l += 32) {
        _mm_prefetch((const char *)(b0 + o + l), _MM_HINT_T0);
        _mm_prefetch((const char *)(b1 + o + l), _MM_HINT_T0);
    }
}

/* the products of kq tiles of panels a0, a1 (rows 0-15, 16-31) and b0, b1 into tiles 0-3;
 * a1 NULL: rows 0-15 only, into tiles 0-1 (a decode step's few rows), each element by the same
 * instructions */
static __attribute__((target("amx-tile,amx-bf16,avx512f"))) void amx_products(
    int kq, const uint16_t *a0, const uint16_t *a1, const uint16_t *b0, const uint16_t *b1) {
    for (int q = 0; q < kq; q++) {
        size_t o = (size_t)q * GEMM16_TILE;
        prefetch_b(kq, q, b0, b1);
        _tile_loadd(4, a0 + o, 64);
        _tile_loadd(6, b0 + o, 64);
        _tile_dpbf16ps(0, 4, 6);
        _tile_loadd(7, b1 + o, 64);
        _tile_dpbf16ps(1, 4, 7);
        if (!a1) continue;
        _tile_loadd(5, a1 + o, 64);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
}

/* C[i0:i0+mr, j0:j0+nr] (mr, nr <= 32) from panels a0, a1 and b0, b1: a whole fp32 block read
 * as it is (mode 0 or 1) goes straight between C and the tiles, any other through dense tiles */
static __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl"))) void amx_block(
    int kq, const uint16_t *a0, const uint16_t *a1, const uint16_t *b0, const uint16_t *b1,
    const struct cdst *cd, int i0, int j0, int mr, int nr) {
    if (!cd->h && mr == 32 && nr == 32 && cd->mode < 2) {
        float *c = cd->f + (size_t)i0 * cd->ld + j0;
        size_t ldc = cd->ld, ldb = ldc * sizeof(float);
        if (cd->mode == 0) {
            _tile_zero(0);
            _tile_zero(1);
            _tile_zero(2);
            _tile_zero(3);
        } else {
            _tile_loadd(0, c, ldb);
            _tile_loadd(1, c + 16, ldb);
            _tile_loadd(2, c + 16 * ldc, ldb);
            _tile_loadd(3, c + 16 * ldc + 16, ldb);
        }
        amx_products(kq, a0, a1, b0, b1);
        _tile_stored(0, c, ldb);
        _tile_stored(1, c + 16, ldb);
        _tile_stored(2, c + 16 * ldc, ldb);
        _tile_stored(3, c + 16 * ldc + 16, ldb);
        TILE_MEMORY_BARRIER();
        return;
    }
    _Alignas(64) float t[4][256];
    if (mr <= 16) { /* a decode step's few rows: the products of rows 16-31 are not needed */
        c_load(t[0], cd, i0, j0, mr, nr);
        c_load(t[1], cd, i0, j0 + 16, mr, nr - 16);
        TILE_MEMORY_BARRIER();
        _tile_loadd(0, t[0], 64);
        _tile_loadd(1, t[1], 64);
        amx_products(kq, a0, NULL, b0, b1);
        _tile_stored(0, t[0], 64);
        _tile_stored(1, t[1], 64);
        TILE_MEMORY_BARRIER();
        c_store(cd, i0, j0, t[0], mr, nr);
        c_store(cd, i0, j0 + 16, t[1], mr, nr - 16);
        return;
    }
    for (int s = 0; s < 4; s++)
        c_load(t[s], cd, i0 + (s / 2) * 16, j0 + (s % 2) * 16, mr - (s / 2) * 16,
               nr - (s % 2) * 16);
    TILE_MEMORY_BARRIER();
    _tile_loadd(0, t[0], 64);
    _tile_loadd(1, t[1], 64);
    _tile_loadd(2, t[2], 64);
    _tile_loadd(3, t[3], 64);
    amx_products(kq, a0, a1, b0, b1);
    _tile_stored(0, t[0], 64);
    _tile_stored(1, t[1], 64);
    _tile_stored(2, t[2], 64);
    _tile_stored(3, t[3], 64);
    TILE_MEMORY_BARRIER();
    for (int s = 0; s < 4; s++)
        c_store(cd, i0 + (s / 2) * 16, j0 + (s % 2) * 16, t[s], mr - (s / 2) * 16,
                nr - (s % 2) * 16);
}

/* one 32 x 32 block of C at (i0, j0) (mr x nr valid) by the engine: panels a (two 16-row)
 * and b (two 16-column), kq tiles each */
static void block(enum zt_gemm16_engine e, int kq, const uint16_t *a, const uint16_t *b,
                  const struct cdst *cd, int i0, int j0, int mr, int nr) {
    size_t pan = (size_t)kq * GEMM16_TILE;
    if (e == ZT_GEMM16_AMX) {
        amx_block(kq, a, a + pan, b, b + pan, cd, i0, j0, mr, nr);
        return;
    }
    for (int s = 0; s < 4; s++) {
        int ri = (s / 2) * 16, cj = (s % 2) * 16;
        if (mr > ri && nr > cj)
            dp_tile(kq, a + (s / 2) * pan, b + (s % 2) * pan, cd, i0 + ri, j0 + cj, mr - ri,
                    nr - cj);
    }
}

/* the blocked product with buffers for mcap rows and ncap columns (multiples of 32); the
 * blocks after the first k block add to C. op(A) is packed too when it is not transposed: the
 * tiles then load from one contiguous run, which is faster than tile rows lda apart read in
 * place (bench/README.md, the bf16 GEMM section). */
static void blocked16(enum zt_gemm16_engine e, int ta, int tb, int M, int N, int K,
                      const uint16_t *A, size_t lda, const uint16_t *B, size_t ldb,
                      const struct cdst *c0, uint16_t *abuf, int mcap, uint16_t *bbuf, int ncap) {
    for (int pc = 0; pc < K; pc += GEMM16_KC) {
        int kc = K - pc < GEMM16_KC ? K - pc : GEMM16_KC, kq = (kc + 31) / 32;
        size_t pan = (size_t)kq * GEMM16_TILE;
        struct cdst cd = *c0;
        if (pc > 0) cd.mode = 1;
        for (int ic = 0; ic < M; ic += mcap) {
            int mc = M - ic < mcap ? M - ic : mcap;
            pack(ta, ta, mc, (mc + 31) / 32 * 32, kc,
                 ta ? A + (size_t)pc * lda + ic : A + (size_t)ic * lda + pc, lda, abuf);
            for (int jc = 0; jc < N; jc += ncap) {
                int nc = N - jc < ncap ? N - jc : ncap;
                pack(!tb, tb, nc, (nc + 31) / 32 * 32, kc,
                     tb ? B + (size_t)jc * ldb + pc : B + (size_t)pc * ldb + jc, ldb, bbuf);
                for (int i0 = 0; i0 < mc; i0 += 32)
                    for (int j0 = 0; j0 < nc; j0 += 32)
                        block(e, kq, abuf + (size_t)(i0 / 16) * pan,
                              bbuf + (size_t)(j0 / 16) * pan, &cd, ic + i0, jc + j0,
                              mc - i0 < 32 ? mc - i0 : 32, nc - j0 < 32 ? nc - j0 : 32);
            }
        }
    }
}

/* without the thread's buffers: one 32-row strip and one 32-column strip on the stack (the
 * same blocks in the same k order, so the same bits) */
static __attribute__((noinline)) void blocked16_stack(enum zt_gemm16_engine e, int ta, int tb,
                                                      int M, int N, int K, const uint16_t *A,
                                                      size_t lda, const uint16_t *B, size_t ldb,
                                                      const struct cdst *cd) {
    _Alignas(64) uint16_t ap[32 * GEMM16_KC];
    _Alignas(64) uint16_t bp[32 * GEMM16_KC];
    blocked16(e, ta, tb, M, N, K, A, lda, B, ldb, cd, ap, 32, bp, 32);
}

static void run16(enum zt_gemm16_engine e, int ta, int tb, int M, int N, int K,
                  const uint16_t *A, int lda, const uint16_t *B, int ldb, const struct cdst *cd) {
    if (e == ZT_GEMM16_AMX) amx_begin();
    void *abuf, *bbuf;
    if (zt_gemm_thread_bufs(&abuf, &bbuf) != 0)
        blocked16_stack(e, ta, tb, M, N, K, A, (size_t)lda, B, (size_t)ldb, cd);
    else
        blocked16(e, ta, tb, M, N, K, A, (size_t)lda, B, (size_t)ldb, cd, abuf, GEMM16_MC, bbuf,
                  GEMM16_NC);
    if (e == ZT_GEMM16_AMX) amx_end();
}

// ----------------------------------------------------------------------------
// Pre-packed B (a weight packed once, zt_kern_bf16_pack): per k block of GEMM16_KC, the
// 16-column panels of all N columns (padded to a multiple of 32) one after another, each its
// kq tiles: what blocked16 packs per call, so the products have its bits.

/* C[M, nc] from columns [j0, j0 + nc) of the packed P (j0 a multiple of 32) */
static void packed16(enum zt_gemm16_engine e, int M, int nc, int K, const uint16_t *A,
                     size_t lda, const uint16_t *P, int N, int j0, const struct cdst *c0,
                     uint16_t *abuf, int mcap) {
    for (int pc = 0; pc < K; pc += GEMM16_KC) {
        int kc = K - pc < GEMM16_KC ? K - pc : GEMM16_KC, kq = (kc + 31) / 32;
        size_t pan = (size_t)kq * GEMM16_TILE;
        const uint16_t *blk = packed_block(P, N, pc);
        struct cdst cd = *c0;
        if (pc > 0) cd.mode = 1;
        for (int ic = 0; ic < M; ic += mcap) {
            int mc = M - ic < mcap ? M - ic : mcap;
            pack(0, 0, mc, (mc + 31) / 32 * 32, kc, A + (size_t)ic * lda + pc, lda, abuf);
            for (int jc = 0; jc < nc; jc += GEMM16_NC) /* B's panels stay in L2 across rows */
                for (int i0 = 0; i0 < mc; i0 += 32)
                    for (int j = jc; j < nc && j < jc + GEMM16_NC; j += 32)
                        block(e, kq, abuf + (size_t)(i0 / 16) * pan,
                              blk + (size_t)((j0 + j) / 16) * pan, &cd, ic + i0, j,
                              mc - i0 < 32 ? mc - i0 : 32, nc - j < 32 ? nc - j : 32);
        }
    }
}

/* packed16 without the thread's buffers: A a 32-row strip at a time on the stack */
static __attribute__((noinline)) void packed16_stack(enum zt_gemm16_engine e, int M, int nc,
                                                     int K, const uint16_t *A, size_t lda,
                                                     const uint16_t *P, int N, int j0,
                                                     const struct cdst *cd) {
    _Alignas(64) uint16_t ap[32 * GEMM16_KC];
    packed16(e, M, nc, K, A, lda, P, N, j0, cd, ap, 32);
}
#endif /* ZT_GEMM_HAVE_AVX512 */

size_t zt_kern_bf16_packed_elems(int K, int N) {
    if (K <= 0 || N <= 0) return 0;
    size_t npad = (size_t)(N + 31) / 32 * 32, full = (size_t)(K / GEMM16_KC);
    size_t tail = (size_t)(K % GEMM16_KC);
    return npad * (full * GEMM16_KC + (tail + 31) / 32 * 32);
}

int zt_kern_bf16_pack(const uint16_t *B, int ldb, int K, int N, uint16_t *P) {
    if (zt_kern_gemm16_get() == ZT_GEMM16_WIDEN) return -1;
#if ZT_GEMM_HAVE_AVX512
    int npad = (N + 31) / 32 * 32;
    for (int pc = 0; pc < K; pc += GEMM16_KC) {
        int kc = K - pc < GEMM16_KC ? K - pc : GEMM16_KC;
        pack(1, 0, N, npad, kc, B + (size_t)pc * ldb, (size_t)ldb,
             (uint16_t *)packed_block(P, N, pc));
    }
    return 0;
#else
    (void)B, (void)ldb, (void)K, (void)N, (void)P;
    return -1;
#endif
}

uint16_t zt_kern_bf16_packed_at(const uint16_t *P, int K, int N, int k, int n) {
    int pc = k / GEMM16_KC * GEMM16_KC, kc = K - pc < GEMM16_KC ? K - pc : GEMM16_KC;
    size_t kq = (size_t)(kc + 31) / 32, kk = (size_t)(k - pc);
    const uint16_t *panel = packed_block(P, N, pc) + (size_t)(n / 16) * kq * GEMM16_TILE;
    return panel[(kk / 32) * GEMM16_TILE + ((kk % 32) / 2 * 16 + (size_t)(n % 16)) * 2 + kk % 2];
}

int zt_kern_gemm_bf16_packed(int M, int nc, int K, const uint16_t *A, int lda,
                             const uint16_t *P, int N, int j0, float beta, float *C, int ldc) {
    enum zt_gemm16_engine e = zt_kern_gemm16_get();
    if (e == ZT_GEMM16_WIDEN || j0 % 32 != 0 || j0 < 0 || j0 + nc > N) return -1;
    if (M <= 0 || nc <= 0) return 0;
    if (K <= 0) {
        zt_gemm_scale_c(M, nc, beta, C, (size_t)ldc);
        return 0;
    }
#if ZT_GEMM_HAVE_AVX512
    struct cdst cd = {.f = C, .ld = (size_t)ldc, .mode = tile_mode(0, beta), .beta = beta};
    if (e == ZT_GEMM16_AMX) amx_begin();
    void *abuf, *bbuf;
    if (zt_gemm_thread_bufs(&abuf, &bbuf) != 0)
        packed16_stack(e, M, nc, K, A, (size_t)lda, P, N, j0, &cd);
    else
        packed16(e, M, nc, K, A, (size_t)lda, P, N, j0, &cd, abuf, GEMM16_MC);
    if (e == ZT_GEMM16_AMX) amx_end();
    return 0;
#else
    (void)A, (void)lda, (void)P, (void)C;
    return -1;
#endif
}

int zt_kern_gemm_bf16(int ta, int tb, int M, int N, int K, const uint16_t *A, int lda,
                      const uint16_t *B, int ldb, float beta, float *C, int ldc) {
    enum zt_gemm16_engine e = zt_kern_gemm16_get();
    if (e == ZT_GEMM16_WIDEN) return -1;
    if (M <= 0 || N <= 0) return 0;
    if (K <= 0) {
        zt_gemm_scale_c(M, N, beta, C, (size_t)ldc);
        return 0;
    }
#if ZT_GEMM_HAVE_AVX512
    struct cdst cd = {.f = C, .ld = (size_t)ldc, .mode = tile_mode(0, beta), .beta = beta};
    run16(e, ta, tb, M, N, K, A, lda, B, ldb, &cd);
    return 0;
#else
    (void)ta, (void)tb, (void)A, (void)lda, (void)B, (void)ldb, (void)C;
    return -1;
#endif
}

/* the start of each element of C16 into the fp32 scratch (rows N apart) */
static void c16_start(int M, int N, const float *bias, int accumulate, const uint16_t *C,
                      int ldc, float *scratch) {
    for (int i = 0; i < M; i++) {
        float *s = scratch + (size_t)i * N;
        if (bias) memcpy(s, bias, (size_t)N * sizeof *s);
        else if (accumulate) zt_kern_bf16_to_f32(s, C + (size_t)i * ldc, (size_t)N);
        else memset(s, 0, (size_t)N * sizeof *s);
    }
}

size_t zt_kern_gemm_bf16_c16_scratch_floats(int M, int N, int K) {
#if ZT_GEMM_HAVE_AVX512
    if (K <= GEMM16_KC) return 0;
#else
    (void)K;
#endif
    return M > 0 && N > 0 ? (size_t)M * (size_t)N : 0;
}

int zt_kern_gemm_bf16_c16(int ta, int tb, int M, int N, int K, const uint16_t *A, int lda,
                          const uint16_t *B, int ldb, const float *bias, int accumulate,
                          uint16_t *C, int ldc, float *scratch) {
    enum zt_gemm16_engine e = zt_kern_gemm16_get();
    if (e == ZT_GEMM16_WIDEN) return -1;
    if (M <= 0 || N <= 0) return 0;
#if ZT_GEMM_HAVE_AVX512
    if (K > 0 && K <= GEMM16_KC) {
        struct cdst cd = {.h = C, .bias = bias, .ld = (size_t)ldc, .mode = accumulate && !bias};
        run16(e, ta, tb, M, N, K, A, lda, B, ldb, &cd);
        return 0;
    }
#endif
    c16_start(M, N, bias, accumulate, C, ldc, scratch);
    zt_kern_gemm_bf16(ta, tb, M, N, K, A, lda, B, ldb, 1.0f, scratch, N);
    for (int i = 0; i < M; i++)
        zt_kern_f32_to_bf16(C + (size_t)i * ldc, scratch + (size_t)i * N, (size_t)N);
    return 0;
}
