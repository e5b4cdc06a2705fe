/*
 * kernels/cpu/layernorm.c: LayerNorm over the last dimension, forward and backward (bottom layer,
 * pure compute). Float arithmetic with llm.c's algorithm; eps = 1e-5 as in PyTorch.
 *
 * Row reductions use LN_LANES independent partial sums combined in a fixed order: gcc can then
 * vectorize them without -ffast-math, and the summation order depends only on C, so results are
 * bit-identical run to run.
 * Reference: llm.c train_gpt2.c layernorm_forward / layernorm_backward;
 * https://pytorch.org/docs/stable/generated/torch.nn.LayerNorm.html
 */
#include <assert.h> /* assert */
#include <math.h>   /* sqrtf */
#include <stddef.h> /* size_t */

#include "zt_kernels.h" /* prototypes */

#define LN_LANES 8
#define LN_EPS 1e-5f

// fixed-order sum of lane partials: ((l0+l1)+(l2+l3)) + ((l4+l5)+(l6+l7))
static inline float lanes_sum(const float acc[LN_LANES]) {
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

// ----------------------------------------------------------------------------
// out[N,C] = (inp - mean) * rstd * w + b; mean[N], rstd[N] saved for backward
// inp[N,C], w[C], b[C]; rstd = 1 / sqrt(biased variance + eps)
void zt_kern_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                               const float *w, const float *b, int N, int C) {
    assert(N >= 0 && C > 0);
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float acc[LN_LANES] = {0};
        int i = 0;
        for (; i + LN_LANES <= C; i += LN_LANES) {
            for (int l = 0; l < LN_LANES; l++) acc[l] += x[i + l];
        }
        float s = lanes_sum(acc);
        for (; i < C; i++) s += x[i];
        float m = s / C;

        float vacc[LN_LANES] = {0};
        i = 0;
        for (; i + LN_LANES <= C; i += LN_LANES) {
            for (int l = 0; l < LN_LANES; l++) {
                float d = x[i + l] - m;
                vacc[l] += d * d;
            }
        }
        float v = lanes_sum(vacc);
        for (; i < C; i++) {
            float d = x[i] - m;
            v += d * d;
        }
        v = v / C;
        float r = 1.0f / sqrtf(v + LN_EPS);

        float *o = out + (size_t)n * C;
        for (int c = 0; c < C; c++) {
            float nrm = r * (x[c] - m);
            o[c] = nrm * w[c] + b[c];
        }
        mean[n] = m;
        rstd[n] = r;
    }
}

// ----------------------------------------------------------------------------
// dinp[N,C] += d/dinp; dw[C] += sum_n norm*dout; db[C] += sum_n dout
// (dout[N,C], inp[N,C], w[C], mean[N], rstd[N] from the forward)
// dinp = rstd * (w*dout - mean(w*dout) - norm * mean(w*dout*norm)), norm = (inp-mean)*rstd
void zt_kern_layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
                                const float *inp, const float *w, const float *mean,
                                const float *rstd, int N, int C) {
    assert(N >= 0 && C > 0);
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        const float *d = dout + (size_t)n * C;
        float *dx = dinp + (size_t)n * C;
        const float m = mean[n];
        const float r = rstd[n];

        // two reductions: mean(w*dout) and mean(w*dout*norm)
        float a1[LN_LANES] = {0}, a2[LN_LANES] = {0};
        int i = 0;
        for (; i + LN_LANES <= C; i += LN_LANES) {
            for (int l = 0; l < LN_LANES; l++) {
                float nrm = (x[i + l] - m) * r;
                float dn = w[i + l] * d[i + l];
                a1[l] += dn;
                a2[l] += dn * nrm;
            }
        }
        float dnorm_mean = lanes_sum(a1);
        float dnorm_norm_mean = lanes_sum(a2);
        for (; i < C; i++) {
            float nrm = (x[i] - m) * r;
            float dn = w[i] * d[i];
            dnorm_mean += dn;
            dnorm_norm_mean += dn * nrm;
        }
        dnorm_mean = dnorm_mean / C;
        dnorm_norm_mean = dnorm_norm_mean / C;

        /* the buffers never overlap (see the header); without ivdep gcc gives up on the alias
         * checks for six pointers and runs this loop scalar (8x slower) */
#pragma GCC ivdep
        for (int c = 0; c < C; c++) {
            float nrm = (x[c] - m) * r;
            float dn = w[c] * d[c];
            db[c] += d[c];
            dw[c] += nrm * d[c];
            float dval = dn - dnorm_mean - nrm * dnorm_norm_mean;
            dx[c] += dval * r;
        }
    }
}
