/*
 * kernels/cpu/encoder.c: GPT-2 token + position embedding, forward and backward (bottom layer,
 * pure compute). Rows may be a chunk of the B*T token rows: t0 is the position of row 0.
 * Reference: llm.c train_gpt2.c encoder_forward / encoder_backward.
 */
#include <assert.h> /* assert */
#include <stddef.h> /* size_t */
#include <stdint.h> /* int32_t */

#include "zt_kernels.h" /* prototypes */

// ----------------------------------------------------------------------------
// out[N,C] = wte[tokens[n], :] + wpe[(t0 + n) % T, :]
// tokens[N] in [0,V), wte[V,C], wpe[T,C] (only rows < T are read)
void zt_kern_encoder_forward(float *out, const int32_t *tokens, const float *wte, const float *wpe,
                             int N, int T, int t0, int C) {
    assert(N >= 0 && T > 0 && t0 >= 0 && C > 0);
    int t = t0 % T;
    for (int n = 0; n < N; n++) {
        assert(tokens[n] >= 0);
        float *o = out + (size_t)n * C;
        const float *we = wte + (size_t)tokens[n] * C;
        const float *pe = wpe + (size_t)t * C;
        for (int c = 0; c < C; c++) {
            o[c] = we[c] + pe[c];
        }
        t = (t + 1 == T) ? 0 : t + 1;
    }
}

// ----------------------------------------------------------------------------
// dwte[tokens[n], :] += dout[n, :]; dwpe[(t0+n)%T, :] += dout[n, :]
// Rows are applied in order n = 0..N-1, so repeated tokens always sum in the same order.
void zt_kern_encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tokens,
                              int N, int T, int t0, int C) {
    assert(N >= 0 && T > 0 && t0 >= 0 && C > 0);
    int t = t0 % T;
    for (int n = 0; n < N; n++) {
        assert(tokens[n] >= 0);
        const float *d = dout + (size_t)n * C;
        float *dwe = dwte + (size_t)tokens[n] * C;
        float *dpe = dwpe + (size_t)t * C;
        for (int c = 0; c < C; c++) {
            dwe[c] += d[c];
        }
        for (int c = 0; c < C; c++) {
            dpe[c] += d[c];
        }
        t = (t + 1 == T) ? 0 : t + 1;
    }
}
