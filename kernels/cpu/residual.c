/*
 * kernels/cpu/residual.c: residual connection out = a + b and its backward (bottom layer, pure
 * compute). Elementwise; plain loops that gcc -O3 vectorizes. No restrict: callers may alias out
 * with a or b (gcc then versions the loop with a runtime overlap check).
 * Reference: llm.c train_gpt2.c residual_forward / residual_backward.
 */
#include <assert.h> /* assert */
#include <stddef.h> /* size_t */

#include "zt_kernels.h" /* prototypes */

// ----------------------------------------------------------------------------
// out[n] = a[n] + b[n]
void zt_kern_residual_forward(float *out, const float *a, const float *b, size_t n) {
    assert(n == 0 || (out && a && b));
    for (size_t i = 0; i < n; i++) {
        out[i] = a[i] + b[i];
    }
}

// ----------------------------------------------------------------------------
// da[n] += dout[n]; db[n] += dout[n]; either output may be NULL (that branch is skipped)
void zt_kern_residual_backward(float *da, float *db, const float *dout, size_t n) {
    assert(n == 0 || dout);
    if (da) {
        for (size_t i = 0; i < n; i++) {
            da[i] += dout[i];
        }
    }
    if (db) {
        for (size_t i = 0; i < n; i++) {
            db[i] += dout[i];
        }
    }
}
