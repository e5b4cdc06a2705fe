/*
 * kernels/cpu/kern_math.h: the one vectorizable exponential the CPU kernels share (GELU's tanh,
 * softmax in attention, cross-entropy).
 *
 * exp(x) = 2^n * exp(r), x = n ln2 + r, |r| <= ln2/2, with a degree-6 Cephes polynomial for
 * exp(r) (Cephes expf.c, S. Moshier). Within 1.4 ulp of exp on [-87, 88]; outside it 2^n is
 * clamped, so the result saturates instead of becoming inf/0 abruptly. Branch-free and free of
 * float->int conversions, so gcc vectorizes the loops that call it and UBSan has nothing to say.
 */
#ifndef ZT_KERN_MATH_H
#define ZT_KERN_MATH_H

#include <stdint.h> /* int32_t, uint32_t */
#include <string.h> /* memcpy */

static inline float zt_kern_expf(float x) {
    float t = x * 1.44269504088896341f + 12582912.0f; /* + 1.5*2^23 rounds to nearest integer */
    float fx = t - 12582912.0f;
    int32_t tb;
    memcpy(&tb, &t, sizeof tb);
    int32_t n = tb - 0x4B400000; /* the same integer, read from t's mantissa: no float->int UB */
    float r = x - fx * 0.693359375f;
    r = r - fx * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * (r * r) + r + 1.0f;
    n = n < -126 ? -126 : n; /* integer clamps keep 2^n normal; float clamps would stop gcc */
    n = n > 127 ? 127 : n;   /* from vectorizing (it threads the constant path) */
    uint32_t bits = (uint32_t)(n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

#endif /* ZT_KERN_MATH_H */
