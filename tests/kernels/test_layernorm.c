/*
 * tests/kernels/test_layernorm.c: proves zt_kern_layernorm_forward (out, mean, rstd) and
 * zt_kern_layernorm_backward (dinp, dw, db) against PyTorch float64 F.layer_norm and autograd,
 * for C = 8 (one full lane block) and C = 37 (lane blocks plus a tail); that backward accumulates
 * (+=) into non-zero dinp/dw/db; and the backward against central finite differences of the float
 * forward (inp, w and b).
 * Tolerances vs PyTorch: 1e-5 * max(1,|ref|) (float reductions over C <= 37, rstd up to ~2).
 * Finite differences: step 1e-2 on inputs of size ~1-3; truncation eps^2 |f'''| ~ 1e-4 relative
 * to the normalised scale, float rounding of L (~1e-6) over 2e-2 ~ 1e-4: tol 2e-3.
 */
#include <stdlib.h> /* EXIT_FAILURE */

#include "kernels_ref.h" /* reference readers, checks */
#include "zt_kernels.h"  /* kernels under test */

struct ln_ctx {
    float *out, *mean, *rstd;
    const float *inp, *w, *b, *dout;
    int N, C;
};

static double ln_loss(void *p) {
    struct ln_ctx *c = p;
    zt_kern_layernorm_forward(c->out, c->mean, c->rstd, c->inp, c->w, c->b, c->N, c->C);
    return kref_dot(c->out, c->dout, (size_t)c->N * c->C);
}

static void run_case(const char *cs) {
    const int N = kref_meta(cs, "N"), C = kref_meta(cs, "C");
    const size_t NC = (size_t)N * C;
    float *inp = kref_f32(cs, "inp", NC);
    float *w = kref_f32(cs, "w", C);
    float *b = kref_f32(cs, "b", C);
    const float *dout = kref_f32(cs, "dout", NC);
    const float *dinp_init = kref_f32(cs, "dinp_init", NC);
    const float *dw_init = kref_f32(cs, "dw_init", C);
    const float *db_init = kref_f32(cs, "db_init", C);
    char lbl[128];

    float *out = kref_floats(NC, -7.0f), *mean = kref_floats(N, -7.0f),
          *rstd = kref_floats(N, -7.0f);
    zt_kern_layernorm_forward(out, mean, rstd, inp, w, b, N, C);
    snprintf(lbl, sizeof lbl, "%s forward out", cs);
    KREF_CHECK(out, kref_f64(cs, "out", NC), NC, 1e-5, lbl);
    snprintf(lbl, sizeof lbl, "%s forward mean", cs);
    KREF_CHECK(mean, kref_f64(cs, "mean", N), N, 1e-5, lbl);
    snprintf(lbl, sizeof lbl, "%s forward rstd", cs);
    KREF_CHECK(rstd, kref_f64(cs, "rstd", N), N, 1e-5, lbl);

    // backward from zero
    float *dinp = kref_floats(NC, 0), *dw = kref_floats(C, 0), *db = kref_floats(C, 0);
    zt_kern_layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
    const double *dinp_ref = kref_f64(cs, "dinp", NC), *dw_ref = kref_f64(cs, "dw", C),
                 *db_ref = kref_f64(cs, "db", C);
    snprintf(lbl, sizeof lbl, "%s backward dinp", cs);
    KREF_CHECK(dinp, dinp_ref, NC, 1e-5, lbl);
    snprintf(lbl, sizeof lbl, "%s backward dw", cs);
    KREF_CHECK(dw, dw_ref, C, 1e-5, lbl);
    snprintf(lbl, sizeof lbl, "%s backward db", cs);
    KREF_CHECK(db, db_ref, C, 1e-5, lbl);

    // backward accumulates into non-zero buffers (dinp is the residual stream: +=)
    float *dinp2 = kref_copy(dinp_init, NC), *dw2 = kref_copy(dw_init, C),
          *db2 = kref_copy(db_init, C);
    zt_kern_layernorm_backward(dinp2, dw2, db2, dout, inp, w, mean, rstd, N, C);
    double *wi = kref_alloc(NC * sizeof(double)), *ww = kref_alloc(C * sizeof(double)),
           *wb = kref_alloc(C * sizeof(double));
    for (size_t i = 0; i < NC; i++) wi[i] = dinp_init[i] + dinp_ref[i];
    for (int i = 0; i < C; i++) ww[i] = dw_init[i] + dw_ref[i];
    for (int i = 0; i < C; i++) wb[i] = db_init[i] + db_ref[i];
    snprintf(lbl, sizeof lbl, "%s backward dinp +=", cs);
    KREF_CHECK(dinp2, wi, NC, 1e-5, lbl);
    snprintf(lbl, sizeof lbl, "%s backward dw +=", cs);
    KREF_CHECK(dw2, ww, C, 1e-5, lbl);
    snprintf(lbl, sizeof lbl, "%s backward db +=", cs);
    KREF_CHECK(db2, wb, C, 1e-5, lbl);

    // finite differences of the float forward
    struct ln_ctx ctx = {kref_floats(NC, 0), kref_floats(N, 0), kref_floats(N, 0), inp, w, b,
                         dout, N, C};
    snprintf(lbl, sizeof lbl, "%s dinp", cs);
    KREF_CHECK_FD(dinp, inp, NC, 1, 1e-2, 2e-3, ln_loss, &ctx, lbl);
    snprintf(lbl, sizeof lbl, "%s dw", cs);
    KREF_CHECK_FD(dw, w, C, 1, 1e-2, 2e-3, ln_loss, &ctx, lbl);
    snprintf(lbl, sizeof lbl, "%s db", cs);
    KREF_CHECK_FD(db, b, C, 1, 1e-2, 2e-3, ln_loss, &ctx, lbl);
}

int main(void) {
    kref_init();
    run_case("layernorm");
    run_case("layernorm_c37");
    kref_free_all();
    return zt_test_finish("test_layernorm");
}
