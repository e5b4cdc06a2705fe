/*
 * tests/kernels/test_residual.c: proves zt_kern_residual_forward (out = a + b, also in place into
 * a) and zt_kern_residual_backward (da += dout, db += dout, NULL outputs skipped) against
 * PyTorch float64, and the backward against central finite differences of the float forward.
 * n = 45 exercises the vectorized body and its scalar tail.
 * Tolerances: 1e-6 * max(1,|ref|) (one float add). Finite differences: linear kernel, step 1e-2,
 * tol 1e-3 (float rounding of L over the step).
 */
#include <stdlib.h> /* EXIT_FAILURE */

#include "kernels_ref.h" /* reference readers, checks */
#include "zt_kernels.h"  /* kernels under test */

struct res_ctx {
    float *out;
    const float *a, *b, *dout;
    size_t n;
};

static double res_loss(void *p) {
    struct res_ctx *c = p;
    zt_kern_residual_forward(c->out, c->a, c->b, c->n);
    return kref_dot(c->out, c->dout, c->n);
}

int main(void) {
    kref_init();
    const char *cs = "residual";
    const size_t n = (size_t)kref_meta(cs, "n");
    float *a = kref_f32(cs, "a", n);
    float *b = kref_f32(cs, "b", n);
    const float *dout = kref_f32(cs, "dout", n);
    const double *out_ref = kref_f64(cs, "out", n);
    const float *da_init = kref_f32(cs, "da_init", n);
    const float *db_init = kref_f32(cs, "db_init", n);

    float *out = kref_floats(n, -7.0f);
    zt_kern_residual_forward(out, a, b, n);
    KREF_CHECK(out, out_ref, n, 1e-6, "residual forward");

    float *inplace = kref_copy(a, n); /* out aliasing a */
    zt_kern_residual_forward(inplace, inplace, b, n);
    KREF_CHECK_BITS(inplace, out, n, "residual forward in place == out of place");

    // backward accumulates into non-zero buffers
    float *da = kref_copy(da_init, n);
    float *db = kref_copy(db_init, n);
    zt_kern_residual_backward(da, db, dout, n);
    double *want_a = kref_alloc(n * sizeof(double)), *want_b = kref_alloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++) {
        want_a[i] = (double)da_init[i] + dout[i];
        want_b[i] = (double)db_init[i] + dout[i];
    }
    KREF_CHECK(da, want_a, n, 1e-6, "residual backward da +=");
    KREF_CHECK(db, want_b, n, 1e-6, "residual backward db +=");

    // a NULL output is skipped, the other still accumulates
    float *da2 = kref_copy(da_init, n);
    zt_kern_residual_backward(da2, NULL, dout, n);
    KREF_CHECK_BITS(da2, da, n, "residual backward with db == NULL");
    float *db2 = kref_copy(db_init, n);
    zt_kern_residual_backward(NULL, db2, dout, n);
    KREF_CHECK_BITS(db2, db, n, "residual backward with da == NULL");

    // finite differences: d(sum dout*out)/da = dout
    float *ga = kref_floats(n, 0.0f), *gb = kref_floats(n, 0.0f);
    zt_kern_residual_backward(ga, gb, dout, n);
    struct res_ctx ctx = {kref_floats(n, 0), a, b, dout, n};
    KREF_CHECK_FD(ga, a, n, 1, 1e-2, 1e-3, res_loss, &ctx, "residual da");
    KREF_CHECK_FD(gb, b, n, 1, 1e-2, 1e-3, res_loss, &ctx, "residual db");

    kref_free_all();
    return zt_test_finish("test_residual");
}
