/*
 * tests/kernels/test_gelu.c: proves zt_kern_gelu_forward/backward (tanh approximation) against
 * PyTorch float64 F.gelu(approximate='tanh') and its autograd gradient, over random inputs plus
 * 0, +-1e-3, +-30 and -9 (saturation of the exponential); that backward works in place
 * (dinp aliasing dout); and the backward against central finite differences of the float forward.
 * n = 45 exercises the vectorized body and its tail.
 * Tolerances: 2e-6 * max(1,|ref|): the kernel's exp is within 1.4 ulp and gelu adds a few float
 * roundings. Finite differences: step 1e-3 (truncation eps^2 |gelu'''|/6 < 1e-6), float rounding
 * of out (~6e-8 * |out| <= 2e-6 at |x|=30) over 2e-3 gives <= 2e-3 at the largest inputs; tol 3e-3.
 */
#include <stdlib.h> /* EXIT_FAILURE */

#include "kernels_ref.h" /* reference readers, checks */
#include "zt_kernels.h"  /* kernels under test */

struct gelu_ctx {
    float *out;
    const float *inp, *dout;
    size_t n;
};

static double gelu_loss(void *p) {
    struct gelu_ctx *c = p;
    zt_kern_gelu_forward(c->out, c->inp, c->n);
    return kref_dot(c->out, c->dout, c->n);
}

int main(void) {
    kref_init();
    const char *cs = "gelu";
    const size_t n = (size_t)kref_meta(cs, "n");
    float *inp = kref_f32(cs, "inp", n);
    const float *dout = kref_f32(cs, "dout", n);
    const double *out_ref = kref_f64(cs, "out", n);
    const double *dinp_ref = kref_f64(cs, "dinp", n);

    float *out = kref_floats(n, -7.0f);
    zt_kern_gelu_forward(out, inp, n);
    KREF_CHECK(out, out_ref, n, 2e-6, "gelu forward");

    float *dinp = kref_floats(n, -7.0f);
    zt_kern_gelu_backward(dinp, inp, dout, n);
    KREF_CHECK(dinp, dinp_ref, n, 2e-6, "gelu backward");

    float *inplace = kref_copy(dout, n); /* dinp aliasing dout */
    zt_kern_gelu_backward(inplace, inp, inplace, n);
    KREF_CHECK_BITS(inplace, dinp, n, "gelu backward in place == out of place");

    struct gelu_ctx ctx = {kref_floats(n, 0), inp, dout, n};
    KREF_CHECK_FD(dinp, inp, n, 1, 1e-3, 3e-3, gelu_loss, &ctx, "gelu dinp");

    kref_free_all();
    return zt_test_finish("test_gelu");
}
