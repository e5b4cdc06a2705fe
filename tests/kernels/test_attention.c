/*
 * tests/kernels/test_attention.c: proves zt_kern_attention_forward (out and the saved softmax
 * att, zero above the diagonal) and zt_kern_attention_backward (dqkv) against PyTorch float64
 * (nanoGPT's masked-softmax attention) and autograd, for B=2,T=5,C=8,NH=2 and for
 * B=1,T=130,C=8,NH=2 (three causal row blocks of the blocked sgemm, the last one partial); that
 * dqkv is fully overwritten (destination and scratch pre-filled with NaN); that repeated calls
 * are bit-identical; and dqkv against central finite differences of the float forward (every
 * input for T=5, every 7th for T=130).
 * Tolerances vs PyTorch: 1e-5 * max(1,|ref|) (float sgemm with K <= T, float softmax).
 * Finite differences: step 1e-2; softmax curvature gives truncation ~1e-5, float rounding of
 * L = sum dout*out (~1e-6 for T=5, ~1e-5 for T=130) over 2e-2 gives <= 5e-4: tol 2e-3.
 */
#include <math.h>   /* NAN */
#include <stdlib.h> /* EXIT_FAILURE */

#include "kernels_ref.h" /* reference readers, checks */
#include "zt_kernels.h"  /* kernels under test */

struct att_ctx {
    float *out, *att;
    const float *qkv, *dout;
    int B, T, C, NH;
};

static double att_loss(void *p) {
    struct att_ctx *c = p;
    zt_kern_attention_forward(c->out, c->att, c->qkv, c->B, c->T, c->C, c->NH);
    return kref_dot(c->out, c->dout, (size_t)c->B * c->T * c->C);
}

static void run_case(const char *cs, size_t fd_stride) {
    const int B = kref_meta(cs, "B"), T = kref_meta(cs, "T"), C = kref_meta(cs, "C"),
              NH = kref_meta(cs, "NH");
    const size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C,
                 natt = (size_t)B * NH * T * T;
    float *qkv = kref_f32(cs, "qkv", nqkv);
    const float *dout = kref_f32(cs, "dout", nout);
    char lbl[128];

    float *out = kref_floats(nout, NAN), *att = kref_floats(natt, NAN);
    zt_kern_attention_forward(out, att, qkv, B, T, C, NH);
    snprintf(lbl, sizeof lbl, "%s forward out", cs);
    KREF_CHECK(out, kref_f64(cs, "out", nout), nout, 1e-5, lbl);
    snprintf(lbl, sizeof lbl, "%s forward att (incl. zeros above the diagonal)", cs);
    KREF_CHECK(att, kref_f64(cs, "att", natt), natt, 1e-5, lbl);
    for (int bh = 0; bh < B * NH; bh++)
        for (int i = 0; i < T; i++)
            for (int j = i + 1; j < T; j++)
                if (att[((size_t)bh * T + i) * T + j] != 0.0f) {
                    ZT_TEST_FAIL("%s: att[%d][%d][%d] above the diagonal is not 0", cs, bh, i, j);
                    i = T;
                    bh = B * NH;
                    break;
                }

    const size_t nscr = zt_kern_attention_scratch_floats(T);
    float *scratch = kref_floats(nscr, NAN);
    float *dqkv = kref_floats(nqkv, NAN);
    zt_kern_attention_backward(dqkv, scratch, dout, qkv, att, B, T, C, NH);
    snprintf(lbl, sizeof lbl, "%s backward dqkv", cs);
    KREF_CHECK(dqkv, kref_f64(cs, "dqkv", nqkv), nqkv, 1e-5, lbl);

    // determinism: same inputs, bit-identical outputs (scratch now holds old values)
    float *out2 = kref_floats(nout, 1), *att2 = kref_floats(natt, 1), *dqkv2 = kref_floats(nqkv, 1);
    zt_kern_attention_forward(out2, att2, qkv, B, T, C, NH);
    zt_kern_attention_backward(dqkv2, scratch, dout, qkv, att2, B, T, C, NH);
    snprintf(lbl, sizeof lbl, "%s repeated forward out", cs);
    KREF_CHECK_BITS(out2, out, nout, lbl);
    snprintf(lbl, sizeof lbl, "%s repeated backward dqkv", cs);
    KREF_CHECK_BITS(dqkv2, dqkv, nqkv, lbl);

    struct att_ctx ctx = {kref_floats(nout, 0), kref_floats(natt, 0), qkv, dout, B, T, C, NH};
    snprintf(lbl, sizeof lbl, "%s dqkv", cs);
    KREF_CHECK_FD(dqkv, qkv, nqkv, fd_stride, 1e-2, 2e-3, att_loss, &ctx, lbl);
}

int main(void) {
    zt_kern_blas_init();
    kref_init();
    run_case("attention", 1);
    run_case("attention_t130", 7);
    kref_free_all();
    return zt_test_finish("test_attention");
}
