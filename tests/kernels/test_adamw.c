/*
 * tests/kernels/test_adamw.c: proves zt_kern_adamw against torch.optim.AdamW (decoupled weight
 * decay) and torch.optim.Adam (L2 weight decay), both float32 single-tensor path, over 5 steps,
 * with grad_scale 1 and != 1 (PyTorch side: grads scaled before step); and zt_kern_sumsq against
 * a float64 PyTorch sum, plus its run-to-run bit stability and that fed in parts of uneven
 * lengths it gives the one call's bits.
 * The kernel mirrors PyTorch's operation order (including the fused multiply-add of its
 * vectorized add_ with alpha), so results agree to float rounding; the test prints how many values
 * are bit-identical (about 90%). Remaining differences: PyTorch's scalar tail loop and the float
 * (not double) bias-correction arguments, an ulp or two. Tolerance: relative 1e-6 on param,
 * exp_avg and exp_avg_sq (exp_avg suffers cancellation, so an ulp of g can be ~1e-6 of it; plus
 * 1e-30 absolute for exact zeros).
 * sumsq: squares are exact in double, only the summation order differs from PyTorch: rel 1e-13.
 * (The optimizer has no backward; there is nothing to finite-difference.)
 */
#include <math.h>   /* pow, fabs */
#include <stdlib.h> /* EXIT_FAILURE */
#include <string.h> /* memcmp */

#include "kernels_ref.h" /* reference readers, checks */
#include "zt_kernels.h"  /* kernels under test */

static void run_case(const char *cs) {
    const int n = kref_meta(cs, "n"), steps = kref_meta(cs, "steps"),
              decoupled = kref_meta(cs, "decoupled");
    const double *hy = kref_f64(cs, "hyper", 6);
    const float lr = (float)hy[0], b1 = (float)hy[1], b2 = (float)hy[2], eps = (float)hy[3],
                wd = (float)hy[4], gs = (float)hy[5];
    float *p = kref_f32(cs, "p0", n);
    const float *grads = kref_f32(cs, "grads", (size_t)steps * n);
    float *m = kref_floats(n, 0.0f), *v = kref_floats(n, 0.0f);
    for (int t = 1; t <= steps; t++) {
        // bias corrections as PyTorch computes them (double), passed as float
        const float bc1 = (float)(1.0 - pow((double)b1, t));
        const float bc2 = (float)(1.0 - pow((double)b2, t));
        zt_kern_adamw(p, m, v, grads + (size_t)(t - 1) * n, n, lr, b1, b2, eps, wd, bc1, bc2, gs,
                      decoupled);
    }
    char lbl[128];
    // informational: how many values match PyTorch bit for bit
    const double *pr = kref_f64(cs, "p", n), *mr = kref_f64(cs, "m", n), *vr = kref_f64(cs, "v", n);
    int same = 0;
    for (int i = 0; i < n; i++)
        same += (p[i] == (float)pr[i]) + (m[i] == (float)mr[i]) + (v[i] == (float)vr[i]);
    fprintf(stderr, "%s: %d of %d values bit-identical to PyTorch\n", cs, same, 3 * n);
    snprintf(lbl, sizeof lbl, "%s param after %d steps", cs, steps);
    KREF_CHECK_REL(p, pr, n, 1e-6, 1e-30, lbl);
    snprintf(lbl, sizeof lbl, "%s exp_avg after %d steps", cs, steps);
    KREF_CHECK_REL(m, mr, n, 1e-6, 1e-30, lbl);
    snprintf(lbl, sizeof lbl, "%s exp_avg_sq after %d steps", cs, steps);
    KREF_CHECK_REL(v, vr, n, 1e-6, 1e-30, lbl);
}

static void sumsq(void) {
    const int n = kref_meta("sumsq", "n");
    const float *x = kref_f32("sumsq", "x", n);
    const double want = kref_f64("sumsq", "sumsq", 1)[0];
    const double got = zt_kern_sumsq(x, n);
    ZT_TEST_TRUE(fabs(got - want) <= 1e-13 * want, "sumsq: got %.17g want %.17g", got, want);
    for (int k = 0; k < 3; k++) {
        double again = zt_kern_sumsq(x, n);
        ZT_TEST_TRUE(again == got, "sumsq not bit-stable: %.17g vs %.17g", again, got);
    }
    ZT_TEST_TRUE(zt_kern_sumsq(x, 0) == 0.0, "sumsq of nothing is not 0");
    double tail = zt_kern_sumsq(x, 5); /* shorter than one lane block */
    double t5 = 0;
    for (int i = 0; i < 5; i++) t5 += (double)x[i] * x[i];
    ZT_TEST_TRUE(fabs(tail - t5) <= 1e-15 * t5, "sumsq n=5: got %.17g want %.17g", tail, t5);
    /* fed in parts of uneven lengths (groups of 8 split across parts): the one call's bits */
    static const int parts[] = {3, 1, 13, 8, 2, 29, 5};
    for (int cut = 0; cut < 2; cut++) {
        struct zt_sumsq a;
        zt_kern_sumsq_begin(&a);
        int at = 0;
        for (int p = 0; at < n; p = (p + 1) % 7) {
            int m = n - at < parts[p] * (cut + 1) ? n - at : parts[p] * (cut + 1);
            zt_kern_sumsq_add(&a, x + at, (size_t)m);
            at += m;
        }
        double inparts = zt_kern_sumsq_end(&a);
        ZT_TEST_TRUE(memcmp(&inparts, &got, sizeof got) == 0,
                     "sumsq in parts: %.17g, the one call %.17g", inparts, got);
    }
}

int main(void) {
    kref_init();
    run_case("adamw");
    run_case("adamw_scaled");
    run_case("adam_l2");
    run_case("adam_l2_scaled");
    sumsq();
    kref_free_all();
    return zt_test_finish("test_adamw");
}
