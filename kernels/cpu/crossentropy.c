/*
 * kernels/cpu/crossentropy.c: fused softmax + cross-entropy forward and its logits gradient
 * (bottom layer, pure compute).
 *
 * Per row: subtract the row max (no overflow for any finite logits), exponentiate with a
 * vectorizable polynomial (zt_kern_expf, about 2 ulp), sum the exponentials in double with CE_LANES
 * partials combined in a fixed order, loss = log(sum) - (x[target] - max) in double. With
 * dscale != 0 the exponentials are written into the logits row and scaled into the gradient
 * dscale * (softmax - onehot), so no scratch memory is needed.
 * Reference: llm.c train_gpt2.c softmax_forward / crossentropy_forward /
 * crossentropy_softmax_backward;
 * https://pytorch.org/docs/stable/generated/torch.nn.CrossEntropyLoss.html
 */
#include <assert.h> /* assert */
#include <math.h>   /* log */
#include <stddef.h> /* size_t */
#include <stdint.h> /* int32_t, uint32_t */
#include <string.h> /* memcpy */

#include "kern_math.h"  /* zt_kern_expf */
#include "zt_kernels.h" /* prototypes */

#define CE_LANES 8
#define CE_BLOCK 512 /* exponentials of a dscale == 0 row are staged through this stack block */


static float row_max(const float *x, int V) {
    float acc[CE_LANES];
    for (int l = 0; l < CE_LANES; l++) acc[l] = x[0];
    int i = 0;
    for (; i + CE_LANES <= V; i += CE_LANES) {
        for (int l = 0; l < CE_LANES; l++) acc[l] = x[i + l] > acc[l] ? x[i + l] : acc[l];
    }
    float m = acc[0];
    for (int l = 1; l < CE_LANES; l++) m = acc[l] > m ? acc[l] : m;
    for (; i < V; i++) m = x[i] > m ? x[i] : m;
    return m;
}

// e[i] = exp(x[i] - mx) for i < n; returns nothing (vectorized loop, e may equal x)
static void exp_shifted(float *e, const float *x, float mx, int n) {
    for (int i = 0; i < n; i++) e[i] = zt_kern_expf(x[i] - mx);
}

// fixed-order double sum of e[0..n) accumulated into the lane partials acc
static void sum_lanes(double acc[CE_LANES], const float *e, int n) {
    int i = 0;
    for (; i + CE_LANES <= n; i += CE_LANES) {
        for (int l = 0; l < CE_LANES; l++) acc[l] += (double)e[i + l];
    }
    for (; i < n; i++) acc[0] += (double)e[i];
}

// ----------------------------------------------------------------------------
// losses[N] = -log softmax(logits[N,V])[targets[n]]; targets[N] in [0,V), or -1: no target
// (loss 0 and, with dscale, a zero gradient row: a position the curriculum cut off)
// dscale != 0: logits[N,V] is overwritten by dscale * (softmax(logits) - onehot(targets))
void zt_kern_crossentropy_forward_backward(float *logits, float *losses, const int32_t *targets,
                                           int N, int V, float dscale) {
    assert(N >= 0 && V > 0);
    for (int n = 0; n < N; n++) {
        float *x = logits + (size_t)n * V;
        const int32_t t = targets[n];
        assert(t >= -1 && t < V);
        if (t < 0) {
            losses[n] = 0.0f;
            if (dscale != 0.0f) memset(x, 0, sizeof *x * (size_t)V);
            continue;
        }
        const float mx = row_max(x, V);
        const float xt = x[t];

        double acc[CE_LANES] = {0};
        if (dscale != 0.0f) {
            exp_shifted(x, x, mx, V);
            sum_lanes(acc, x, V);
        } else {
            float e[CE_BLOCK];
            for (int i0 = 0; i0 < V; i0 += CE_BLOCK) {
                int nb = V - i0 < CE_BLOCK ? V - i0 : CE_BLOCK;
                exp_shifted(e, x + i0, mx, nb);
                sum_lanes(acc, e, nb);
            }
        }
        double sum = ((acc[0] + acc[1]) + (acc[2] + acc[3])) +
                     ((acc[4] + acc[5]) + (acc[6] + acc[7]));
        losses[n] = (float)(log(sum) - ((double)xt - (double)mx));

        if (dscale != 0.0f) {
            const float k = (float)((double)dscale / sum);
            for (int i = 0; i < V; i++) x[i] = x[i] * k;
            x[t] -= dscale;
        }
    }
}
