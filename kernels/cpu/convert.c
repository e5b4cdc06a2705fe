/*
 * kernels/cpu/convert.c: fp32 <-> bf16 and fp32 <-> fp16 (IEEE binary16) conversions (bottom
 * layer, pure compute). Mixed precision stores parameters, activations and gradients in 16 bits
 * and computes in fp32: every 16-bit value is widened exactly, and every fp32 result is narrowed
 * with round-to-nearest-even, as PyTorch's .to(torch.bfloat16) / .to(torch.float16) do (the
 * tests compare with them bit for bit, NaN payloads aside).
 *
 * Integer arithmetic only: the result never depends on the FPU's rounding mode or on compiler
 * flags, and gcc vectorizes the loops.
 * bf16: the top 16 bits of the fp32 pattern, rounded on the 16 dropped bits; NaN -> 0x7FC0
 *       (PyTorch's c10::BFloat16 gives every NaN that pattern).
 * fp16: 5 exponent bits (bias 15), 10 mantissa bits; |x| >= 65520 (the midpoint between the
 *       largest half 65504 and 2^16) -> inf; below 2^-14 the result is subnormal (steps of
 *       2^-24) or zero; NaN -> sign | 0x7E00 (PyTorch's fp16_ieee_from_fp32_value).
 */
#if defined(__F16C__) && defined(__AVX__)
#include <immintrin.h> /* _mm256_cvtps_ph, _mm256_cvtph_ps */
#define ZT_HAVE_F16C 1
#endif
#include <assert.h> /* assert */
#include <stddef.h> /* size_t */
#include <stdint.h> /* uint16_t, uint32_t */
#include <string.h> /* memcpy */

#include "zt_kernels.h" /* prototypes */

static inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

// ----------------------------------------------------------------------------
// bf16
static inline uint16_t to_bf16(uint32_t u) {
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0; /* NaN */
    /* add just under half an ulp of bf16, plus one when the kept lsb is odd: ties go to even */
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

void zt_kern_f32_to_bf16(uint16_t *restrict dst, const float *restrict src, size_t n) {
    assert(n == 0 || (dst && src));
    for (size_t i = 0; i < n; i++) dst[i] = to_bf16(f32_bits(src[i]));
}

void zt_kern_bf16_to_f32(float *restrict dst, const uint16_t *restrict src, size_t n) {
    assert(n == 0 || (dst && src));
    for (size_t i = 0; i < n; i++) dst[i] = bits_f32((uint32_t)src[i] << 16);
}

// ----------------------------------------------------------------------------
// fp16
static inline uint16_t to_f16(uint32_t u) {
    const uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return (uint16_t)(sign | 0x7E00u); /* NaN */
    if (a >= 0x477FF000u) return (uint16_t)(sign | 0x7C00u); /* >= 65520 (and inf): inf */
    if (a >= 0x38800000u) {                                   /* normal: >= 2^-14 */
        uint32_t h = ((a >> 23) - 112u) << 10 | (a & 0x7FFFFFu) >> 13; /* exponent 127 -> 15 */
        uint32_t rem = a & 0x1FFFu;
        h += rem > 0x1000u || (rem == 0x1000u && (h & 1u)); /* a carry moves into the exponent */
        return (uint16_t)(sign | h);
    }
    if (a <= 0x33000000u) return (uint16_t)sign; /* <= 2^-25 (half of the smallest subnormal) */
    /* subnormal: value = m * 2^(e - 150) with the implicit bit; in units of 2^-24 that is
     * m >> (126 - e), rounded to even on the bits shifted out (1024 units = the smallest normal,
     * whose pattern 0x0400 the carry produces) */
    uint32_t e = a >> 23, m = (a & 0x7FFFFFu) | 0x800000u, s = 126u - e;
    uint32_t h = m >> s, rem = m & ((1u << s) - 1u), half = 1u << (s - 1u);
    h += rem > half || (rem == half && (h & 1u));
    return (uint16_t)(sign | h);
}

static inline float from_f16(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
    if (e == 0x1Fu) return bits_f32(sign | 0x7F800000u | m << 13); /* inf, NaN (payload kept) */
    if (e != 0) return bits_f32(sign | (e + 112u) << 23 | m << 13);
    /* zero or subnormal: m * 2^-24, exact in fp32 */
    float v = (float)m * 0x1p-24f;
    return bits_f32(sign | f32_bits(v));
}

/* F16C's conversions round to nearest even with the same overflow and subnormal results; they
 * keep NaN payloads, which are set to sign | 0x7E00 afterwards so that both paths give the same
 * bits (widening NaNs may differ in payload only) */
void zt_kern_f32_to_f16(uint16_t *restrict dst, const float *restrict src, size_t n) {
    assert(n == 0 || (dst && src));
    size_t i = 0;
#ifdef ZT_HAVE_F16C
    const __m128i expo = _mm_set1_epi16(0x7C00), mant = _mm_set1_epi16(0x03FF);
    const __m128i sign = _mm_set1_epi16((short)0x8000), qnan = _mm_set1_epi16(0x7E00);
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
        /* NaN lanes (exponent all ones, mantissa not zero) -> sign | 0x7E00 */
        __m128i nan = _mm_andnot_si128(_mm_cmpeq_epi16(_mm_and_si128(h, mant), _mm_setzero_si128()),
                                       _mm_cmpeq_epi16(_mm_and_si128(h, expo), expo));
        __m128i fix = _mm_or_si128(_mm_and_si128(h, sign), qnan);
        h = _mm_or_si128(_mm_and_si128(nan, fix), _mm_andnot_si128(nan, h));
        _mm_storeu_si128((__m128i *)(dst + i), h);
    }
#endif
    for (; i < n; i++) dst[i] = to_f16(f32_bits(src[i]));
}

void zt_kern_f16_to_f32(float *restrict dst, const uint16_t *restrict src, size_t n) {
    assert(n == 0 || (dst && src));
    size_t i = 0;
#ifdef ZT_HAVE_F16C
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
#endif
    for (; i < n; i++) dst[i] = from_f16(src[i]);
}
