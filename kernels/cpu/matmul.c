/*
 * kernels/cpu/matmul.c: linear layers as zt_kern_sgemm products (bottom layer, pure compute).
 *
 * Two layouts (see zt_kernels.h): Hugging Face Conv1D, out = inp @ w + bias with w[C,OC], and the
 * tied output head, out = inp @ wte^T with w[OC,C]. All arrays are row-major; the two flags of
 * each zt_kern_sgemm call say which operand is read transposed. Either GEMM engine runs
 * single-threaded per call (kernels/cpu/gemm.c), so each product has a fixed summation order.
 * Reference: llm.c train_gpt2.c matmul_forward / matmul_backward (same maths, naive loops there);
 * https://www.netlib.org/lapack/explore-html/ (sgemm: C = alpha op(A) op(B) + beta C).
 */
#include <assert.h> /* assert */
#include <stddef.h> /* size_t */
#include <string.h> /* memcpy */

#include "zt_kernels.h" /* prototypes */

// dbias is reduced over rows in column blocks of this many floats held on the stack
#define MM_BIAS_BLOCK 256

// ----------------------------------------------------------------------------
// Conv1D layout
// out[N,OC] = inp[N,C] @ w[C,OC] + bias[OC] (bias may be NULL)
void zt_kern_matmul_forward(float *out, const float *inp, const float *w, const float *bias,
                            int N, int C, int OC) {
    assert(N >= 0 && C > 0 && OC > 0);
    if (N == 0) return;
    float beta = 0.0f;
    if (bias) {
        // seed every row with the bias; sgemm then adds the product to it (beta = 1)
        for (int n = 0; n < N; n++) {
            memcpy(out + (size_t)n * OC, bias, (size_t)OC * sizeof(float));
        }
        beta = 1.0f;
    }
    zt_kern_sgemm(0, 0, N, OC, C, 1.0f, inp, C, w, OC, beta,
                out, OC);
}

int zt_kern_matmul_forward_w16(float *out, const float *inp, const uint16_t *w, int is_f16,
                               const float *bias, int N, int C, int OC) {
    if (N < 1 || N > ZT_KERN_FEW_ROWS || zt_kern_gemm_get() != ZT_GEMM_AVX512) return -1;
    for (int n = 0; bias && n < N; n++)
        memcpy(out + (size_t)n * OC, bias, (size_t)OC * sizeof(float));
    return zt_kern_sgemm_w16(0, N, OC, C, inp, C, w, is_f16, OC, bias ? 1.0f : 0.0f, out, OC);
}

int zt_kern_matmul_t_forward_w16(float *out, const float *inp, const uint16_t *w, int is_f16,
                                 int N, int C, int OC) {
    return zt_kern_sgemm_w16(1, N, OC, C, inp, C, w, is_f16, C, 0.0f, out, OC);
}

int zt_kern_matmul_forward_bf16(float *out, int ldo, const float *inp, const uint16_t *w,
                                int ldw, int add, int N, int C, int oc, uint16_t *a16) {
    if (zt_kern_gemm16_get() == ZT_GEMM16_WIDEN) return -1;
    if (N < 1) return 0;
    zt_kern_f32_to_bf16(a16, inp, (size_t)N * (size_t)C);
    return zt_kern_gemm_bf16(0, 0, N, oc, C, a16, C, w, ldw, add ? 1.0f : 0.0f, out, ldo);
}

int zt_kern_matmul_forward_bf16_packed(float *out, int ldo, const float *inp, const uint16_t *P,
                                       int OC, int64_t o0, int add, int N, int C, int oc,
                                       uint16_t *a16) {
    if (zt_kern_gemm16_get() == ZT_GEMM16_WIDEN || o0 % 32 != 0) return -1;
    if (N < 1) return 0;
    zt_kern_f32_to_bf16(a16, inp, (size_t)N * (size_t)C);
    return zt_kern_gemm_bf16_packed(N, oc, C, a16, C, P, OC, (int)o0, add ? 1.0f : 0.0f, out,
                                    ldo);
}

// dinp[N,C] (= or +=) dout[N,OC] @ w[C,OC]^T
void zt_kern_matmul_backward_inp(float *dinp, const float *dout, const float *w, int N, int C,
                                 int OC, int accumulate) {
    assert(N >= 0 && C > 0 && OC > 0);
    if (N == 0) return;
    zt_kern_sgemm(0, 1, N, C, OC, 1.0f, dout, OC, w, OC,
                accumulate ? 1.0f : 0.0f, dinp, C);
}

// dw[c1-c0, OC] += inp[N, c0:c1]^T @ dout[N,OC]
// dw points at row c0 of the full gradient [C,OC]; inp[N,C] is read with leading dimension C
void zt_kern_matmul_backward_weight(float *dw, const float *inp, const float *dout, int N, int C,
                                    int OC, int c0, int c1) {
    assert(N >= 0 && C > 0 && OC > 0 && 0 <= c0 && c0 <= c1 && c1 <= C);
    if (N == 0 || c1 == c0) return;
    zt_kern_sgemm(1, 0, c1 - c0, OC, N, 1.0f, inp + c0, C, dout,
                OC, 1.0f, dw, OC);
}

// dbias[OC] += sum over n of dout[N,OC]
// Rows are summed into a zeroed stack block first (fixed order n = 0..N-1, vectorized across
// columns), then added once, as PyTorch does (sum, then accumulate into .grad).
void zt_kern_matmul_backward_bias(float *dbias, const float *dout, int N, int OC) {
    assert(N >= 0 && OC > 0);
    for (int o0 = 0; o0 < OC; o0 += MM_BIAS_BLOCK) {
        int nb = OC - o0 < MM_BIAS_BLOCK ? OC - o0 : MM_BIAS_BLOCK;
        float acc[MM_BIAS_BLOCK];
        for (int j = 0; j < nb; j++) acc[j] = 0.0f;
        for (int n = 0; n < N; n++) {
            const float *d = dout + (size_t)n * OC + o0;
            for (int j = 0; j < nb; j++) acc[j] += d[j];
        }
        for (int j = 0; j < nb; j++) dbias[o0 + j] += acc[j];
    }
}

// ----------------------------------------------------------------------------
// tied head layout, w[OC,C] (wte with OC = V)
// out[N,OC] = inp[N,C] @ w[OC,C]^T
void zt_kern_matmul_t_forward(float *out, const float *inp, const float *w, int N, int C, int OC) {
    assert(N >= 0 && C > 0 && OC > 0);
    if (N == 0) return;
    zt_kern_sgemm(0, 1, N, OC, C, 1.0f, inp, C, w, C, 0.0f, out,
                OC);
}

// dinp[N,C] (= or +=) dout[N,OC] @ w[OC,C]
void zt_kern_matmul_t_backward_inp(float *dinp, const float *dout, const float *w, int N, int C,
                                   int OC, int accumulate) {
    assert(N >= 0 && C > 0 && OC > 0);
    if (N == 0) return;
    zt_kern_sgemm(0, 0, N, C, OC, 1.0f, dout, OC, w, C,
                accumulate ? 1.0f : 0.0f, dinp, C);
}

// dw[o1-o0, C] += dout[N, o0:o1]^T @ inp[N,C]
// dw points at row o0 of the full gradient [OC,C]; dout[N,OC] is read with leading dimension OC
void zt_kern_matmul_t_backward_weight(float *dw, const float *dout, const float *inp, int N, int C,
                                      int OC, int o0, int o1) {
    assert(N >= 0 && C > 0 && OC > 0 && 0 <= o0 && o0 <= o1 && o1 <= OC);
    if (N == 0 || o1 == o0) return;
    zt_kern_sgemm(1, 0, o1 - o0, C, N, 1.0f, dout + o0, OC, inp,
                C, 1.0f, dw, C);
}
