/*
 * bench/gemm_bench.c: zerotask's AVX-512 GEMM (kernels/cpu/gemm.c) against OpenBLAS cblas_sgemm
 * in the same process, single-threaded both (as each StarPU worker runs them), on the products
 * of the bench models: per linear layer the forward (NN), the input gradient (NT) and the weight
 * gradient (TN) of one rank's rows, the tied head, and the attention products. OpenBLAS picks its
 * kernels from OPENBLAS_CORETYPE at load time, so run it once per environment:
 *
 *   build/bench/zt-gemm-bench                          # OpenBLAS's own choice (SkylakeX here)
 *   OPENBLAS_CORETYPE=Haswell build/bench/zt-gemm-bench
 *
 * Each product runs --rounds times alternating the two engines (ours, OpenBLAS, ours, ...), each
 * time for at least --min-ms; the table prints the median GFLOP/s of each and the time ratio
 * ours / OpenBLAS (< 1: ours faster), then the geometric mean per model. The two engines' C
 * agree to float rounding: the largest difference over the largest |C| is printed.
 * A "gemm_bench model=... geomean_ratio=..." line per model closes each part (for scripts).
 */
#include <cblas.h>  /* cblas_sgemm, openblas_get_corename */
#include <math.h>   /* fabs, exp, log */
#include <stdio.h>  /* printf */
#include <stdlib.h> /* getenv, malloc */
#include <string.h> /* strcmp */

#include "bench_util.h" /* bench_now, bench_median */
#include "zt_kernels.h" /* zt_kern_sgemm, zt_kern_gemm_set */

struct shape {
    const char *model, *what;
    int ta, tb, M, N, K;
};

/* As the tasks call them with 2 ranks: one rank's rows (small: 4 x 128, gpt2-124M: 2 x 256)
 * in ZT_GRAPH_CHUNKS = 4 row blocks for the forward and input-gradient tasks (M = 128); the
 * weight-gradient tasks take a quarter of the weight's rows over all 512 rows (K = 512); the
 * attention products are one (batch row, head) at full T. */
static const struct shape g_shapes[] = {
    {"small", "qkv fwd", 0, 0, 128, 1152, 384},
    {"small", "qkv dinp", 0, 1, 128, 384, 1152},
    {"small", "qkv dw", 1, 0, 96, 1152, 512},
    {"small", "proj fwd", 0, 0, 128, 384, 384},
    {"small", "fc fwd", 0, 0, 128, 1536, 384},
    {"small", "fcproj fwd", 0, 0, 128, 384, 1536},
    {"small", "fcproj dinp", 0, 1, 128, 1536, 384},
    {"small", "fcproj dw", 1, 0, 384, 384, 512},
    {"small", "head fwd", 0, 1, 128, 8192, 384},
    {"small", "head dinp", 0, 0, 128, 384, 8192},
    {"small", "head dw", 1, 0, 2048, 384, 512},
    {"small", "att qk^T", 0, 1, 128, 128, 64},
    {"small", "att pv", 0, 0, 128, 64, 128},
    {"gpt2-124M", "qkv fwd", 0, 0, 128, 2304, 768},
    {"gpt2-124M", "qkv dinp", 0, 1, 128, 768, 2304},
    {"gpt2-124M", "qkv dw", 1, 0, 192, 2304, 512},
    {"gpt2-124M", "fc fwd", 0, 0, 128, 3072, 768},
    {"gpt2-124M", "fcproj fwd", 0, 0, 128, 768, 3072},
    {"gpt2-124M", "fcproj dinp", 0, 1, 128, 3072, 768},
    {"gpt2-124M", "fcproj dw", 1, 0, 768, 768, 512},
    {"gpt2-124M", "head fwd", 0, 1, 128, 50304, 768},
    {"gpt2-124M", "head dinp", 0, 0, 128, 768, 50304},
    {"gpt2-124M", "head dw", 1, 0, 12576, 768, 512},
    {"gpt2-124M", "att qk^T", 0, 1, 256, 256, 64},
    {"gpt2-124M", "att pv", 0, 0, 256, 64, 256},
};

static double run(const struct shape *s, const float *A, const float *B, float *C, double min_s) {
    int lda = s->ta ? s->M : s->K, ldb = s->tb ? s->K : s->N;
    int reps = 0;
    double t0 = bench_now(), t;
    do {
        zt_kern_sgemm(s->ta, s->tb, s->M, s->N, s->K, 1.0f, A, lda, B, ldb, 0.0f, C, s->N);
        reps++;
        t = bench_now() - t0;
    } while (t < min_s);
    return t / reps;
}

int main(int argc, char **argv) {
    int rounds = 5;
    double min_ms = 150;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--rounds")) rounds = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--min-ms")) min_ms = atof(argv[i + 1]);
        else {
            fprintf(stderr, "usage: zt-gemm-bench [--rounds 5] [--min-ms 150]\n");
            return 2;
        }
    }
    if (argc % 2 == 0 || rounds < 1 || rounds > 99 || !(min_ms > 0)) {
        fprintf(stderr, "usage: zt-gemm-bench [--rounds 5] [--min-ms 150]\n");
        return 2;
    }
    if (!zt_kern_gemm_avx512_available()) {
        fprintf(stderr, "zt-gemm-bench: this CPU has no AVX-512F: the AVX-512 engine cannot run\n");
        return 2;
    }
    zt_kern_blas_init();
    const char *ct = getenv("OPENBLAS_CORETYPE");
    printf("zerotask AVX-512 GEMM vs OpenBLAS %s (OPENBLAS_CORETYPE=%s), one thread each, "
           "median of %d alternating rounds\n",
           openblas_get_corename(), ct && *ct ? ct : "(unset)", rounds);
    printf("%-10s %-12s %2s %5s %5s %5s | %9s %9s | %s | %s\n", "model", "product", "op", "M", "N",
           "K", "ours GF/s", "OpenBLAS", "ours/OpenBLAS time", "max|diff|/max|C|");
    const char *model = NULL;
    double lsum = 0;
    int nmodel = 0;
    size_t n = sizeof g_shapes / sizeof g_shapes[0];
    for (size_t i = 0; i <= n; i++) {
        if (model && (i == n || strcmp(model, g_shapes[i].model) != 0)) {
            printf("gemm_bench model=%s products=%d geomean_ratio=%.3f\n", model, nmodel,
                   exp(lsum / nmodel));
            lsum = 0;
            nmodel = 0;
        }
        if (i == n) break;
        const struct shape *s = &g_shapes[i];
        model = s->model;
        size_t na = (size_t)s->M * s->K, nb = (size_t)s->K * s->N, nc = (size_t)s->M * s->N;
        float *A = malloc(na * 4), *B = malloc(nb * 4), *C0 = malloc(nc * 4), *C1 = malloc(nc * 4);
        if (!A || !B || !C0 || !C1) {
            fprintf(stderr, "zt-gemm-bench: out of memory\n");
            return 1;
        }
        srand(1);
        for (size_t j = 0; j < na; j++) A[j] = (float)rand() / RAND_MAX - 0.5f;
        for (size_t j = 0; j < nb; j++) B[j] = (float)rand() / RAND_MAX - 0.5f;
        double to[99], tb[99];
        for (int r = 0; r < rounds; r++) {
            zt_kern_gemm_set(ZT_GEMM_AVX512);
            to[r] = run(s, A, B, C0, min_ms / 1e3);
            zt_kern_gemm_set(ZT_GEMM_OPENBLAS);
            tb[r] = run(s, A, B, C1, min_ms / 1e3);
        }
        double mo = bench_median(to, rounds), mb = bench_median(tb, rounds);
        double flop = 2.0 * s->M * s->N * s->K, diff = 0, big = 0;
        for (size_t j = 0; j < nc; j++) {
            double d = fabs((double)C0[j] - C1[j]);
            if (d > diff) diff = d;
            if (fabs((double)C1[j]) > big) big = fabs((double)C1[j]);
        }
        diff /= big > 0 ? big : 1;
        const char *op = s->ta ? "TN" : s->tb ? "NT" : "NN";
        printf("%-10s %-12s %2s %5d %5d %5d | %9.1f %9.1f | %18.2f | %.1e\n", s->model, s->what,
               op, s->M, s->N, s->K, flop / mo / 1e9, flop / mb / 1e9, mo / mb, diff);
        lsum += log(mo / mb);
        nmodel++;
        free(A);
        free(B);
        free(C0);
        free(C1);
    }
    return 0;
}
