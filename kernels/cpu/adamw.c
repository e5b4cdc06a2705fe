/*
 * kernels/cpu/adamw.c: Adam / AdamW optimizer step on one contiguous shard, and the fixed-order
 * sum of squares used for gradient-norm clipping (bottom layer, pure compute).
 *
 * The step follows PyTorch 1.13's single-tensor Adam/AdamW (torch/optim/adam.py, adamw.py,
 * _single_tensor_adam[w]) operation by operation, in float32, with each scalar coefficient
 * computed the way Python computes it (in double, from the float hyper-parameters) and rounded
 * to float once, as PyTorch does when it applies a Python scalar to a float tensor:
 *   AdamW:      param.mul_(1 - lr*wd)
 *   Adam (L2):  grad = grad.add(param, alpha=wd)
 *   exp_avg.mul_(b1).add_(grad, alpha=1-b1)
 *   exp_avg_sq.mul_(b2).addcmul_(grad, grad, value=1-b2)
 *   denom = (exp_avg_sq.sqrt() / sqrt(bc2)).add_(eps)
 *   param.addcdiv_(exp_avg, denom, value=-lr/bc1)
 * PyTorch's vectorized add_(x, alpha=a) is a fused multiply-add (Vectorized fmadd), so the two
 * "add with alpha" steps use fmaf here too (exactly rounded, so still machine-independent; a
 * vfmadd under -march=native). Most values then match torch's bits; the rest are an ulp or two
 * apart, from PyTorch's scalar tail loop and from bc1/bc2 arriving here as float while PyTorch
 * keeps them in double.
 * Reference: https://pytorch.org/docs/1.13/generated/torch.optim.AdamW.html; llm.c
 * train_gpt2.c gpt2_update.
 */
#include <assert.h> /* assert */
#include <math.h>   /* fmaf, sqrt, sqrtf */
#include <stddef.h> /* size_t */

#include <string.h> /* memset */
#include "zt_kernels.h" /* prototypes */

#define SUMSQ_LANES 8

// ----------------------------------------------------------------------------
// param[n], m[n], v[n] updated in place from grad[n] (see the header for the formula)
// 512-bit vectors where the target has them (gcc prefers 256 on AVX-512 CPUs): each element's
// operations are the same, so the bits too (wider vectors only make the pass quicker)
__attribute__((target("prefer-vector-width=512"))) void zt_kern_adamw(
    float *param, float *m, float *v, const float *grad, size_t n, float lr, float beta1,
    float beta2, float eps, float weight_decay, float bc1, float bc2, float grad_scale,
    int decoupled) {
    assert(n == 0 || (param && m && v && grad));
    assert(bc1 > 0.0f && bc2 > 0.0f);
    // scalars as Python computes them (double), rounded once to float
    const float decay = (float)(1.0 - (double)lr * (double)weight_decay);
    const float omb1 = (float)(1.0 - (double)beta1);
    const float omb2 = (float)(1.0 - (double)beta2);
    const float bc2_sqrt = (float)sqrt((double)bc2);
    const float neg_step = (float)(-((double)lr / (double)bc1));
    const float wd = weight_decay;

    // One pass, each element's operations in the order above: the loads and stores of the four
    // arrays overlap the divider and square-root unit, which a pass per operation left idle in
    // turn (sqrtf vectorizes: the library is built without math-errno). Two loops, so that
    // neither tests the mode per element.
    if (decoupled) {
        for (size_t i = 0; i < n; i++) {
            const float g = grad[i] * grad_scale;
            const float p = param[i] * decay;
            const float mi = fmaf(g, omb1, m[i] * beta1);
            const float vi = v[i] * beta2 + (omb2 * g) * g;
            m[i] = mi;
            v[i] = vi;
            param[i] = p + (neg_step * mi) / (sqrtf(vi) / bc2_sqrt + eps);
        }
    } else {
        for (size_t i = 0; i < n; i++) {
            const float g = fmaf(param[i], wd, grad[i] * grad_scale);
            const float mi = fmaf(g, omb1, m[i] * beta1);
            const float vi = v[i] * beta2 + (omb2 * g) * g;
            m[i] = mi;
            v[i] = vi;
            param[i] = param[i] + (neg_step * mi) / (sqrtf(vi) / bc2_sqrt + eps);
        }
    }
}

// ----------------------------------------------------------------------------
// sum of x[i]^2 in double. Each square is exact in double; the sum uses SUMSQ_LANES partials in
// a fixed order combined by a fixed tree, so the result depends only on x and n.
void zt_kern_sumsq_begin(struct zt_sumsq *a) {
    memset(a, 0, sizeof *a);
}

/* the 8 squares of one group of x's values into the lanes */
static void sumsq_group(double acc[SUMSQ_LANES], const float *g) {
    for (int l = 0; l < SUMSQ_LANES; l++) {
        double d = (double)g[l];
        acc[l] += d * d;
    }
}

void zt_kern_sumsq_add(struct zt_sumsq *a, const float *x, size_t n) {
    assert(n == 0 || x);
    size_t i = 0;
    /* complete the group a previous part left open: lane l always takes the values whose
     * place in the whole sequence is l modulo 8 */
    while (a->tail > 0 && i < n) {
        a->rest[a->tail++] = x[i++];
        if (a->tail == SUMSQ_LANES) {
            sumsq_group(a->acc, a->rest);
            a->tail = 0;
        }
    }
    for (; i + SUMSQ_LANES <= n; i += SUMSQ_LANES) sumsq_group(a->acc, x + i);
    for (; i < n; i++) a->rest[a->tail++] = x[i];
}

double zt_kern_sumsq_end(const struct zt_sumsq *a) {
    const double *acc = a->acc;
    double s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (int i = 0; i < a->tail; i++) {
        double d = (double)a->rest[i];
        s += d * d;
    }
    return s;
}

double zt_kern_sumsq(const float *x, size_t n) {
    struct zt_sumsq a;
    zt_kern_sumsq_begin(&a);
    zt_kern_sumsq_add(&a, x, n);
    return zt_kern_sumsq_end(&a);
}
