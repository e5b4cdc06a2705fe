/*
 * tests/kernels/test_encoder.c: proves zt_kern_encoder_forward/backward against PyTorch float64
 * (wte[tokens] + wpe[pos] and its autograd gradients), including repeated tokens, the t0 chunk
 * offset (a chunk that starts mid-sequence and crosses a sequence boundary), and that backward
 * accumulates (+=) into non-zero dwte/dwpe; and the backward against central finite differences of
 * the float forward.
 * Tolerances: forward/backward 1e-6 * max(1,|ref|) (one float add per element, or a handful for
 * repeated tokens). Finite differences: the kernel is linear, so a step of 1e-2 has no truncation
 * error; the float rounding of L = sum dout*out (~1e-6) over the step gives ~1e-4, tol 1e-3.
 */
#include <stdint.h> /* int32_t */
#include <stdlib.h> /* EXIT_FAILURE */

#include "kernels_ref.h" /* reference readers, checks */
#include "zt_kernels.h"  /* kernels under test */

struct enc_ctx {
    float *out;
    const int32_t *tokens;
    const float *wte, *wpe, *dout;
    int N, T, C;
};

static double enc_loss(void *p) {
    struct enc_ctx *c = p;
    zt_kern_encoder_forward(c->out, c->tokens, c->wte, c->wpe, c->N, c->T, 0, c->C);
    return kref_dot(c->out, c->dout, (size_t)c->N * c->C);
}

int main(void) {
    kref_init();
    const char *cs = "encoder";
    const int B = kref_meta(cs, "B"), T = kref_meta(cs, "T"), C = kref_meta(cs, "C"),
              V = kref_meta(cs, "V");
    const int N = B * T;
    const int32_t *tokens = kref_i32(cs, "tokens", N);
    float *wte = kref_f32(cs, "wte", (size_t)V * C);
    float *wpe = kref_f32(cs, "wpe", (size_t)T * C);
    const float *dout = kref_f32(cs, "dout", (size_t)N * C);
    const double *out_ref = kref_f64(cs, "out", (size_t)N * C);
    const double *dwte_ref = kref_f64(cs, "dwte", (size_t)V * C);
    const double *dwpe_ref = kref_f64(cs, "dwpe", (size_t)T * C);
    const float *dwte_init = kref_f32(cs, "dwte_init", (size_t)V * C);
    const float *dwpe_init = kref_f32(cs, "dwpe_init", (size_t)T * C);

    // forward, all rows
    float *out = kref_floats((size_t)N * C, -7.0f);
    zt_kern_encoder_forward(out, tokens, wte, wpe, N, T, 0, C);
    KREF_CHECK(out, out_ref, (size_t)N * C, 1e-6, "encoder forward");

    // forward, a chunk of rows 3..8 (t0 = 3, crosses into the second sequence)
    const int n0 = 3, n1 = 9;
    float *chunk = kref_floats((size_t)(n1 - n0) * C, -7.0f);
    zt_kern_encoder_forward(chunk, tokens + n0, wte, wpe, n1 - n0, T, n0 % T, C);
    KREF_CHECK(chunk, out_ref + (size_t)n0 * C, (size_t)(n1 - n0) * C, 1e-6,
               "encoder forward chunk t0=3");

    // backward from zero, all rows
    float *dwte = kref_floats((size_t)V * C, 0.0f);
    float *dwpe = kref_floats((size_t)T * C, 0.0f);
    zt_kern_encoder_backward(dwte, dwpe, dout, tokens, N, T, 0, C);
    KREF_CHECK(dwte, dwte_ref, (size_t)V * C, 1e-6, "encoder backward dwte");
    KREF_CHECK(dwpe, dwpe_ref, (size_t)T * C, 1e-6, "encoder backward dwpe");

    // backward accumulates into non-zero buffers, in three chunks with t0 offsets 0, 4, 7%T
    float *dwte_acc = kref_copy(dwte_init, (size_t)V * C);
    float *dwpe_acc = kref_copy(dwpe_init, (size_t)T * C);
    const int cuts[] = {0, 4, 7, N};
    for (int k = 0; k < 3; k++) {
        int a = cuts[k], b = cuts[k + 1];
        zt_kern_encoder_backward(dwte_acc, dwpe_acc, dout + (size_t)a * C, tokens + a, b - a, T,
                                 a % T, C);
    }
    double *want_wte = kref_alloc(sizeof(double) * V * C);
    double *want_wpe = kref_alloc(sizeof(double) * T * C);
    for (int i = 0; i < V * C; i++) want_wte[i] = dwte_init[i] + dwte_ref[i];
    for (int i = 0; i < T * C; i++) want_wpe[i] = dwpe_init[i] + dwpe_ref[i];
    KREF_CHECK(dwte_acc, want_wte, (size_t)V * C, 1e-6, "encoder backward += dwte (chunked)");
    KREF_CHECK(dwpe_acc, want_wpe, (size_t)T * C, 1e-6, "encoder backward += dwpe (chunked)");

    // finite differences of the float forward
    struct enc_ctx ctx = {kref_floats((size_t)N * C, 0), tokens, wte, wpe, dout, N, T, C};
    KREF_CHECK_FD(dwte, wte, (size_t)V * C, 1, 1e-2, 1e-3, enc_loss, &ctx, "encoder dwte");
    KREF_CHECK_FD(dwpe, wpe, (size_t)T * C, 1, 1e-2, 1e-3, enc_loss, &ctx, "encoder dwpe");

    kref_free_all();
    return zt_test_finish("test_encoder");
}
