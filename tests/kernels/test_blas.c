/*
 * tests/kernels/test_blas.c: proves zt_kern_blas_init leaves OpenBLAS single-threaded (the
 * kernels' determinism rests on it) and that, after it, repeated sgemm-backed kernel calls on the
 * same inputs are bit-identical, including a shape large enough for OpenBLAS to block it.
 */
#include <cblas.h>  /* openblas_get_num_threads */
#include <stdlib.h> /* EXIT_FAILURE */

#include "kernels_ref.h" /* allocation and bitwise check helpers */
#include "zt_kernels.h"  /* kernels under test */

int main(void) {
    zt_kern_blas_init();
    ZT_TEST_TRUE(openblas_get_num_threads() == 1, "OpenBLAS has %d threads after init, want 1",
                 openblas_get_num_threads());

    const int N = 193, C = 257, OC = 129;
    float *inp = kref_floats((size_t)N * C, 0), *w = kref_floats((size_t)C * OC, 0);
    unsigned s = 12345u; /* LCG: fixed pseudo-random values in [-0.5, 0.5) */
    for (size_t i = 0; i < (size_t)N * C; i++) {
        s = s * 1103515245u + 12345u;
        inp[i] = (float)(s >> 9) / 8388608.0f - 0.5f;
    }
    for (size_t i = 0; i < (size_t)C * OC; i++) {
        s = s * 1103515245u + 12345u;
        w[i] = (float)(s >> 9) / 8388608.0f - 0.5f;
    }
    float *o1 = kref_floats((size_t)N * OC, 0), *o2 = kref_floats((size_t)N * OC, 1);
    zt_kern_matmul_forward(o1, inp, w, NULL, N, C, OC);
    zt_kern_matmul_forward(o2, inp, w, NULL, N, C, OC);
    KREF_CHECK_BITS(o1, o2, (size_t)N * OC, "matmul_forward repeated call");

    kref_free_all();
    return zt_test_finish("test_blas");
}
