/*
 * kernels/cpu/gelu.c: GELU, tanh approximation, forward and backward (bottom layer, pure
 * compute); matches PyTorch gelu(approximate='tanh').
 *
 * gelu(x) = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3). Since 0.5 (1 + tanh u) =
 * sigmoid(2u), both passes need one exponential per element: e = exp(-2u), s = 1/(1+e),
 *   gelu(x)  = x s
 *   gelu'(x) = s + x * 2 s (1-s) * du/dx,
 *   with s (1-s) = e s^2 and du/dx = sqrt(2/pi) (1 + 3*0.044715 x^2)
 * The exponential is a branch-free Cephes-style polynomial (zt_kern_expf) instead of libm tanhf so
 * that gcc -O3 vectorizes the loops without -ffast-math (libm calls and float clamps both block
 * it); it is within 1.4 ulp of exp on [-87, 88]. Outside that range 2^n is clamped, so exp
 * saturates near 1e-38 / 1e38 instead of reaching 0 / inf, which changes gelu by < 1e-36.
 * Reference: llm.c train_gpt2.c gelu_forward / gelu_backward;
 * https://pytorch.org/docs/stable/generated/torch.nn.GELU.html; Cephes expf.c (S. Moshier).
 */
#include <assert.h> /* assert */
#include <stddef.h> /* size_t */
#include <stdint.h> /* int32_t, uint32_t */
#include <string.h> /* memcpy */

#include "kern_math.h"  /* zt_kern_expf */
#include "zt_kernels.h" /* prototypes */

#define GELU_SCALING_FACTOR 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_CUBIC 0.044715f


// ----------------------------------------------------------------------------
// out[n] = gelu(inp[n])
void zt_kern_gelu_forward(float *out, const float *inp, size_t n) {
    assert(n == 0 || (out && inp));
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float u = GELU_SCALING_FACTOR * (x + GELU_CUBIC * x * x * x);
        float e = zt_kern_expf(-2.0f * u);
        out[i] = x / (1.0f + e);
    }
}

// ----------------------------------------------------------------------------
// dinp[n] = gelu'(inp[n]) * dout[n]  (dinp may alias dout, so no restrict)
void zt_kern_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
    assert(n == 0 || (dinp && inp && dout));
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float u = GELU_SCALING_FACTOR * (x + GELU_CUBIC * x * x * x);
        float e = zt_kern_expf(-2.0f * u);
        float s = 1.0f / (1.0f + e);
        float dudx = GELU_SCALING_FACTOR * (1.0f + 3.0f * GELU_CUBIC * x * x);
        float local_grad = s + x * 2.0f * (e * s * s) * dudx;
        dinp[i] = local_grad * dout[i];
    }
}
