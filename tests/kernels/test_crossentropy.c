/*
 * tests/kernels/test_crossentropy.c: proves zt_kern_crossentropy_forward_backward against
 * PyTorch float64 F.cross_entropy(reduction='none') and the autograd gradient of
 * dscale * sum(losses) with dscale = 1/N, for V = 11 and V = 50 (lane tail), with a row offset by
 * +1000 (only a max-subtracting softmax survives it in float) and a row with one dominant logit;
 * that dscale == 0 leaves the logits bit-untouched and gives the same losses; and the gradient
 * against central finite differences of the float losses.
 * Tolerances vs PyTorch: 1e-5 * max(1,|ref|) (float exp within 1.4 ulp, sums in double).
 * Finite differences: step 1e-2 on logits of size ~3 (for the +1000 row the float step is the
 * exact representable one, 1e-2 rounded at ulp 6e-5); truncation ~eps^2/6 ~ 2e-5, float rounding
 * of the losses over the step ~5e-5: tol 1e-3.
 */
#include <stdint.h> /* int32_t */
#include <stdlib.h> /* EXIT_FAILURE */

#include "kernels_ref.h" /* reference readers, checks */
#include "zt_kernels.h"  /* kernels under test */

struct ce_ctx {
    float *logits, *losses;
    const int32_t *targets;
    int N, V;
    float dscale;
};

static double ce_loss(void *p) {
    struct ce_ctx *c = p;
    zt_kern_crossentropy_forward_backward(c->logits, c->losses, c->targets, c->N, c->V, 0.0f);
    double s = 0;
    for (int n = 0; n < c->N; n++) s += (double)c->losses[n];
    return s * c->dscale;
}

static void run_case(const char *cs) {
    const int N = kref_meta(cs, "N"), V = kref_meta(cs, "V");
    const size_t NV = (size_t)N * V;
    float *logits = kref_f32(cs, "logits", NV);
    const int32_t *targets = kref_i32(cs, "targets", N);
    const double *losses_ref = kref_f64(cs, "losses", N);
    const float dscale = 1.0f / (float)N;
    char lbl[128];

    // dscale == 0: losses only, logits untouched
    float *l0 = kref_copy(logits, NV), *losses0 = kref_floats(N, -7.0f);
    zt_kern_crossentropy_forward_backward(l0, losses0, targets, N, V, 0.0f);
    snprintf(lbl, sizeof lbl, "%s losses (dscale 0)", cs);
    KREF_CHECK(losses0, losses_ref, N, 1e-5, lbl);
    snprintf(lbl, sizeof lbl, "%s logits untouched with dscale 0", cs);
    KREF_CHECK_BITS(l0, logits, NV, lbl);

    // dscale != 0: logits overwritten by the gradient
    float *g = kref_copy(logits, NV), *losses = kref_floats(N, -7.0f);
    zt_kern_crossentropy_forward_backward(g, losses, targets, N, V, dscale);
    snprintf(lbl, sizeof lbl, "%s losses (dscale 1/N)", cs);
    KREF_CHECK(losses, losses_ref, N, 1e-5, lbl);
    snprintf(lbl, sizeof lbl, "%s losses equal with and without dscale", cs);
    KREF_CHECK_BITS(losses, losses0, N, lbl);
    snprintf(lbl, sizeof lbl, "%s dlogits", cs);
    KREF_CHECK(g, kref_f64(cs, "dlogits", NV), NV, 1e-5, lbl);

    struct ce_ctx ctx = {logits, kref_floats(N, 0), targets, N, V, dscale};
    snprintf(lbl, sizeof lbl, "%s dlogits", cs);
    KREF_CHECK_FD(g, logits, NV, 1, 1e-2, 1e-3, ce_loss, &ctx, lbl);
}

int main(void) {
    kref_init();
    run_case("crossentropy");
    run_case("crossentropy_v50");
    kref_free_all();
    return zt_test_finish("test_crossentropy");
}
