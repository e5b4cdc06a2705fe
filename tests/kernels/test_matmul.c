/*
 * tests/kernels/test_matmul.c: proves the Conv1D matmul (out = inp @ w + bias, w[C,OC]) and the
 * tied-head matmul_t (out = inp @ w^T, w[OC,C]) kernels against PyTorch float64 and autograd:
 * forward with and without bias; backward_inp overwriting (accumulate = 0, into a NaN-filled
 * buffer) and accumulating (+=); backward_weight and backward_bias accumulating into non-zero
 * buffers, with the weight gradient built from row chunks c0..c1 (o0..o1 for matmul_t) as well as
 * in one call; and every gradient against central finite differences of the float forward.
 * The engine is the default one (ZT_GEMM=auto: ours on an AVX-512 CPU; test_gemm covers both).
 * Chunked and unchunked weight gradients are NOT compared bitwise: OpenBLAS's result depends on
 * the M extent of the call (edge/small-matrix kernels), so a chunked dw may differ from the full
 * one in the last bit; each is deterministic for a fixed chunking.
 * Tolerances vs PyTorch: 1e-5 * max(1,|ref|) (float sgemm, K <= 12). Finite differences: the
 * maps are linear, step 1e-2, float rounding of L over the step ~1e-4: tol 1e-3.
 */
#include <math.h>   /* NAN */
#include <stdlib.h> /* EXIT_FAILURE */

#include "kernels_ref.h" /* reference readers, checks */
#include "zt_kernels.h"  /* kernels under test */

struct mm_ctx {
    float *out;
    const float *inp, *w, *bias, *dout;
    int N, C, OC, tied;
};

static double mm_loss(void *p) {
    struct mm_ctx *c = p;
    if (c->tied)
        zt_kern_matmul_t_forward(c->out, c->inp, c->w, c->N, c->C, c->OC);
    else
        zt_kern_matmul_forward(c->out, c->inp, c->w, c->bias, c->N, c->C, c->OC);
    return kref_dot(c->out, c->dout, (size_t)c->N * c->OC);
}

static double *plus(const float *a, const double *b, size_t n) {
    double *d = kref_alloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++) d[i] = (double)a[i] + b[i];
    return d;
}

static void conv1d(void) {
    const char *cs = "matmul";
    const int N = kref_meta(cs, "N"), C = kref_meta(cs, "C"), OC = kref_meta(cs, "OC");
    float *inp = kref_f32(cs, "inp", (size_t)N * C);
    float *w = kref_f32(cs, "w", (size_t)C * OC);
    float *bias = kref_f32(cs, "bias", OC);
    const float *dout = kref_f32(cs, "dout", (size_t)N * OC);
    const double *dinp_ref = kref_f64(cs, "dinp", (size_t)N * C);
    const double *dw_ref = kref_f64(cs, "dw", (size_t)C * OC);
    const double *dbias_ref = kref_f64(cs, "dbias", OC);
    const float *dinp_init = kref_f32(cs, "dinp_init", (size_t)N * C);
    const float *dw_init = kref_f32(cs, "dw_init", (size_t)C * OC);
    const float *dbias_init = kref_f32(cs, "dbias_init", OC);

    float *out = kref_floats((size_t)N * OC, NAN);
    zt_kern_matmul_forward(out, inp, w, bias, N, C, OC);
    KREF_CHECK(out, kref_f64(cs, "out", (size_t)N * OC), (size_t)N * OC, 1e-5,
               "matmul forward (bias)");
    float *out_nb = kref_floats((size_t)N * OC, NAN);
    zt_kern_matmul_forward(out_nb, inp, w, NULL, N, C, OC);
    KREF_CHECK(out_nb, kref_f64(cs, "out_nobias", (size_t)N * OC), (size_t)N * OC, 1e-5,
               "matmul forward (no bias)");

    // backward_inp: overwrite (NaN-filled destination must not leak through), then +=
    float *dinp = kref_floats((size_t)N * C, NAN);
    zt_kern_matmul_backward_inp(dinp, dout, w, N, C, OC, 0);
    KREF_CHECK(dinp, dinp_ref, (size_t)N * C, 1e-5, "matmul backward_inp =");
    float *dinp_acc = kref_copy(dinp_init, (size_t)N * C);
    zt_kern_matmul_backward_inp(dinp_acc, dout, w, N, C, OC, 1);
    KREF_CHECK(dinp_acc, plus(dinp_init, dinp_ref, (size_t)N * C), (size_t)N * C, 1e-5,
               "matmul backward_inp +=");

    // backward_weight: rows [0,3) and [3,C) into a non-zero gradient; full call for comparison
    float *dw_full = kref_copy(dw_init, (size_t)C * OC);
    zt_kern_matmul_backward_weight(dw_full, inp, dout, N, C, OC, 0, C);
    float *dw_chunk = kref_copy(dw_init, (size_t)C * OC);
    const int cut = 3;
    zt_kern_matmul_backward_weight(dw_chunk, inp, dout, N, C, OC, 0, cut);
    zt_kern_matmul_backward_weight(dw_chunk + (size_t)cut * OC, inp, dout, N, C, OC, cut, C);
    zt_kern_matmul_backward_weight(dw_chunk, inp, dout, N, C, OC, 2, 2); /* empty chunk: no-op */
    const double *dw_want = plus(dw_init, dw_ref, (size_t)C * OC);
    KREF_CHECK(dw_full, dw_want, (size_t)C * OC, 1e-5, "matmul backward_weight += (full)");
    KREF_CHECK(dw_chunk, dw_want, (size_t)C * OC, 1e-5, "matmul backward_weight += (c0..c1)");

    float *dbias = kref_copy(dbias_init, OC);
    zt_kern_matmul_backward_bias(dbias, dout, N, OC);
    KREF_CHECK(dbias, plus(dbias_init, dbias_ref, OC), OC, 1e-5, "matmul backward_bias +=");

    // finite differences (gradients from zero)
    float *gi = kref_floats((size_t)N * C, 0), *gw = kref_floats((size_t)C * OC, 0),
          *gb = kref_floats(OC, 0);
    zt_kern_matmul_backward_inp(gi, dout, w, N, C, OC, 0);
    zt_kern_matmul_backward_weight(gw, inp, dout, N, C, OC, 0, C);
    zt_kern_matmul_backward_bias(gb, dout, N, OC);
    struct mm_ctx ctx = {kref_floats((size_t)N * OC, 0), inp, w, bias, dout, N, C, OC, 0};
    KREF_CHECK_FD(gi, inp, (size_t)N * C, 1, 1e-2, 1e-3, mm_loss, &ctx, "matmul dinp");
    KREF_CHECK_FD(gw, w, (size_t)C * OC, 1, 1e-2, 1e-3, mm_loss, &ctx, "matmul dw");
    KREF_CHECK_FD(gb, bias, OC, 1, 1e-2, 1e-3, mm_loss, &ctx, "matmul dbias");
}

static void tied(void) {
    const char *cs = "matmul";
    const int N = kref_meta(cs, "N"), C = kref_meta(cs, "C"), OC = kref_meta(cs, "V");
    float *inp = kref_f32(cs, "t_inp", (size_t)N * C);
    float *w = kref_f32(cs, "t_w", (size_t)OC * C);
    const float *dout = kref_f32(cs, "t_dout", (size_t)N * OC);
    const double *dinp_ref = kref_f64(cs, "t_dinp", (size_t)N * C);
    const double *dw_ref = kref_f64(cs, "t_dw", (size_t)OC * C);
    const float *dinp_init = kref_f32(cs, "t_dinp_init", (size_t)N * C);
    const float *dw_init = kref_f32(cs, "t_dw_init", (size_t)OC * C);

    float *out = kref_floats((size_t)N * OC, NAN);
    zt_kern_matmul_t_forward(out, inp, w, N, C, OC);
    KREF_CHECK(out, kref_f64(cs, "t_out", (size_t)N * OC), (size_t)N * OC, 1e-5,
               "matmul_t forward");

    float *dinp = kref_floats((size_t)N * C, NAN);
    zt_kern_matmul_t_backward_inp(dinp, dout, w, N, C, OC, 0);
    KREF_CHECK(dinp, dinp_ref, (size_t)N * C, 1e-5, "matmul_t backward_inp =");
    float *dinp_acc = kref_copy(dinp_init, (size_t)N * C);
    zt_kern_matmul_t_backward_inp(dinp_acc, dout, w, N, C, OC, 1);
    KREF_CHECK(dinp_acc, plus(dinp_init, dinp_ref, (size_t)N * C), (size_t)N * C, 1e-5,
               "matmul_t backward_inp +=");

    // weight gradient rows [0,4), [4,OC) of the vocabulary into a non-zero gradient
    float *dw_full = kref_copy(dw_init, (size_t)OC * C);
    zt_kern_matmul_t_backward_weight(dw_full, dout, inp, N, C, OC, 0, OC);
    float *dw_chunk = kref_copy(dw_init, (size_t)OC * C);
    const int cut = 4;
    zt_kern_matmul_t_backward_weight(dw_chunk, dout, inp, N, C, OC, 0, cut);
    zt_kern_matmul_t_backward_weight(dw_chunk + (size_t)cut * C, dout, inp, N, C, OC, cut, OC);
    const double *dw_want = plus(dw_init, dw_ref, (size_t)OC * C);
    KREF_CHECK(dw_full, dw_want, (size_t)OC * C, 1e-5, "matmul_t backward_weight += (full)");
    KREF_CHECK(dw_chunk, dw_want, (size_t)OC * C, 1e-5, "matmul_t backward_weight += (o0..o1)");

    float *gi = kref_floats((size_t)N * C, 0), *gw = kref_floats((size_t)OC * C, 0);
    zt_kern_matmul_t_backward_inp(gi, dout, w, N, C, OC, 0);
    zt_kern_matmul_t_backward_weight(gw, dout, inp, N, C, OC, 0, OC);
    struct mm_ctx ctx = {kref_floats((size_t)N * OC, 0), inp, w, NULL, dout, N, C, OC, 1};
    KREF_CHECK_FD(gi, inp, (size_t)N * C, 1, 1e-2, 1e-3, mm_loss, &ctx, "matmul_t dinp");
    KREF_CHECK_FD(gw, w, (size_t)OC * C, 1, 1e-2, 1e-3, mm_loss, &ctx, "matmul_t dw");
}

int main(void) {
    zt_kern_blas_init();
    kref_init();
    conv1d();
    tied();
    kref_free_all();
    return zt_test_finish("test_matmul");
}
