/*
 * kernels/cpu/blas.c: BLAS set-up for the CPU kernels (bottom layer, pure compute).
 *
 * With ZT_GEMM=openblas (or on a CPU without AVX-512F) every product in kernels/cpu/ goes
 * through OpenBLAS cblas_sgemm (kernels/cpu/gemm.c). Parallelism comes from StarPU
 * running one kernel per worker, so OpenBLAS must not start its own thread pool: extra threads
 * would oversubscribe the cores, and a single-threaded sgemm keeps each product's summation order
 * fixed, which the project's bit-identical-results rule depends on.
 */
#include <cblas.h> /* openblas_set_num_threads (OpenBLAS extension declared in its cblas.h) */

#include "zt_kernels.h" /* zt_kern_blas_init */

void zt_kern_blas_init(void) {
    openblas_set_num_threads(1);
}
