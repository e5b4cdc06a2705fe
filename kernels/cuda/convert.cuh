/*
 * kernels/cuda/convert.cuh: fp32 <-> bf16/fp16 for one element on the device, the bits of
 * kernels/cpu/convert.c (round to nearest even on the dropped bits; NaN -> 0x7FC0 for bf16,
 * sign | 0x7E00 for fp16; fp16 overflow to inf, subnormals kept). Integer arithmetic on the bit
 * patterns, as the CPU's scalar path, so no device rounding mode or flush-to-zero setting can
 * change a result. Included by the .cu files that convert (convert.cu, comm.cu).
 */
#ifndef ZT_CONVERT_CUH
#define ZT_CONVERT_CUH

#include <stdint.h> /* uint16_t, uint32_t */

__device__ static inline uint16_t f32_to_bf16(uint32_t u) {
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0; /* NaN */
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

__device__ static inline uint16_t f32_to_f16(uint32_t u) {
    uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return (uint16_t)(sign | 0x7E00u);   /* NaN */
    if (a >= 0x477FF000u) return (uint16_t)(sign | 0x7C00u);  /* >= 65520 rounds to inf */
    if (a < 0x38800000u) {                                     /* below 2^-14: subnormal or 0 */
        if (a < 0x33000000u) return (uint16_t)sign;            /* below 2^-25: rounds to 0 */
        uint32_t e = a >> 23, m = (a & 0x7FFFFFu) | 0x800000u;
        uint32_t shift = 126u - e;                             /* 14..24 + 1 */
        uint32_t r = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1u))) r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = a - 0x38000000u;                              /* rebias 127 -> 15 */
    uint32_t h = r >> 13, rem = r & 0x1FFFu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++;
    return (uint16_t)(sign | h);
}

__device__ static inline uint32_t f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
    if (e == 0x1Fu) return sign | 0x7F800000u | m << 13;      /* inf, NaN (payload kept) */
    if (e == 0) {
        if (m == 0) return sign;
        int s = 0;                                             /* normalise the subnormal */
        while (!(m & 0x400u)) m <<= 1, s++;
        return sign | (uint32_t)(113 - s) << 23 | (m & 0x3FFu) << 13;
    }
    return sign | (e + 112u) << 23 | m << 13;
}

__device__ static inline uint16_t to_bf16(float x) { return f32_to_bf16(__float_as_uint(x)); }
__device__ static inline float from_bf16(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }
__device__ static inline uint16_t to_f16(float x) { return f32_to_f16(__float_as_uint(x)); }
__device__ static inline float from_f16(uint16_t h) { return __uint_as_float(f16_to_f32(h)); }

#endif /* ZT_CONVERT_CUH */
