/*
 * bench/gemm_packed_bench.c: what packing a weight once would save the bf16 products.
 *
 * The training tasks call zt_kern_gemm_bf16_c16, which packs op(B) (the weight) into the
 * engine's tile layout on every call: each of a layer's row blocks packs the same weight again.
 * zt_kern_gemm_bf16_packed reads a weight packed once beforehand (zt_kern_bf16_pack; the
 * inference engine's layout). For the products whose op(B) is the stored weight (no transpose:
 * the forward of the linear layers, the head's input gradient, attention's P V), this program
 * times, on one thread and per engine: the product packing on every call, the product reading
 * the weight packed beforehand, and the packing alone; it prints GFLOP/s, the share of the
 * engine's ceiling when given (--ceiling-amx, --ceiling-avx512bf16: zt-bf16-peak's 1-thread
 * figures) and the ratio. Each figure is the median of --rounds timings of --reps calls, the
 * variants alternating.
 *
 *   build/bench/zt-gemm-packed-bench [--rounds 5] [--reps 20] [--model gpt2-124M]
 *                                    [--ceiling-amx GF] [--ceiling-avx512bf16 GF]
 */
#include <math.h>   /* exp, log */
#include <stdint.h> /* uint16_t */
#include <stdio.h>  /* printf */
#include <stdlib.h> /* aligned_alloc, atof, atoi, free */
#include <string.h> /* strcmp */

#include "bench_util.h" /* bench_now, bench_median */
#include "zt_kernels.h" /* zt_kern_gemm_bf16*, zt_kern_bf16_pack */

struct shape {
    const char *model, *what;
    int M, N, K;
};

/* the task shapes of zt-gemm-bench whose op(B) is the weight as stored (NN) */
static const struct shape g_shapes[] = {
    {"small", "qkv fwd", 128, 1152, 384},       {"small", "proj fwd", 128, 384, 384},
    {"small", "fc fwd", 128, 1536, 384},        {"small", "fcproj fwd", 128, 384, 1536},
    {"small", "head dinp", 128, 384, 8192},     {"gpt2-124M", "qkv fwd", 128, 2304, 768},
    {"gpt2-124M", "proj fwd", 128, 768, 768},   {"gpt2-124M", "fc fwd", 128, 3072, 768},
    {"gpt2-124M", "fcproj fwd", 128, 768, 3072}, {"gpt2-124M", "head dinp", 128, 768, 50304},
};
#define NSHAPES (int)(sizeof g_shapes / sizeof g_shapes[0])
#define MAX_ROUNDS 99

struct operands {
    uint16_t *A, *B, *P;
    float *C;
};

static void *zalloc(size_t bytes) {
    void *p = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (p) memset(p, 0, (bytes + 63) / 64 * 64);
    return p;
}

static int operands_make(const struct shape *s, struct operands *o) {
    size_t na = (size_t)s->M * s->K, nb = (size_t)s->K * s->N;
    o->A = zalloc(na * 2);
    o->B = zalloc(nb * 2);
    o->P = zalloc(zt_kern_bf16_packed_elems(s->K, s->N) * 2);
    o->C = zalloc((size_t)s->M * s->N * 4);
    if (!o->A || !o->B || !o->P || !o->C) return -1;
    srand(1);
    for (size_t i = 0; i < na; i++) o->A[i] = (uint16_t)(0x3c00 + rand() % 0x400); /* bf16 in [2^-7, 2^-6) */
    for (size_t i = 0; i < nb; i++) o->B[i] = (uint16_t)(0xbc00 + rand() % 0x400);
    return 0;
}

static void operands_free(struct operands *o) {
    free(o->A), free(o->B), free(o->P), free(o->C);
}

enum variant { PER_CALL, PREPACKED, PACK_ONLY, NVARIANTS };

/* seconds per call of variant v */
static double time_variant(const struct shape *s, const struct operands *o, enum variant v,
                           int reps) {
    double t0 = bench_now();
    for (int r = 0; r < reps; r++) {
        if (v == PER_CALL)
            zt_kern_gemm_bf16(0, 0, s->M, s->N, s->K, o->A, s->K, o->B, s->N, 0.0f, o->C, s->N);
        else if (v == PREPACKED)
            zt_kern_gemm_bf16_packed(s->M, s->N, s->K, o->A, s->K, o->P, s->N, 0, 0.0f, o->C,
                                     s->N);
        else
            zt_kern_bf16_pack(o->B, s->N, s->K, s->N, o->P);
    }
    return (bench_now() - t0) / reps;
}

/* the medians of each variant's seconds per call; -1 when out of memory */
static int bench_shape(const struct shape *s, int rounds, int reps, double sec[NVARIANTS]) {
    struct operands o;
    if (operands_make(s, &o) != 0) {
        operands_free(&o);
        return -1;
    }
    zt_kern_bf16_pack(o.B, s->N, s->K, s->N, o.P);
    double t[NVARIANTS][MAX_ROUNDS];
    for (int v = 0; v < NVARIANTS; v++) time_variant(s, &o, (enum variant)v, 1); /* warm-up */
    for (int r = 0; r < rounds; r++)
        for (int v = 0; v < NVARIANTS; v++) t[v][r] = time_variant(s, &o, (enum variant)v, reps);
    for (int v = 0; v < NVARIANTS; v++) sec[v] = bench_median(t[v], rounds);
    operands_free(&o);
    return 0;
}

static void run_engine(const char *name, enum zt_gemm16_engine e, double ceiling,
                       const char *model, int rounds, int reps) {
    if (!zt_kern_gemm16_available(e)) {
        printf("%s: not available on this CPU: skipped\n", name);
        return;
    }
    zt_kern_gemm16_set(e);
    double lg[2] = {0, 0};
    int n = 0;
    for (int i = 0; i < NSHAPES; i++) {
        const struct shape *s = &g_shapes[i];
        double sec[NVARIANTS];
        if (model && strcmp(model, s->model)) continue;
        if (bench_shape(s, rounds, reps, sec) != 0) {
            fprintf(stderr, "zt-gemm-packed-bench: out of memory\n");
            exit(1);
        }
        double fl = 2.0 * s->M * s->N * s->K, g0 = fl / sec[PER_CALL] / 1e9,
               g1 = fl / sec[PREPACKED] / 1e9;
        printf("gemm_packed engine=%s model=%s what=\"%s\" M=%d N=%d K=%d per_call_gflops=%.1f "
               "prepacked_gflops=%.1f pack_ms=%.3f speedup=%.2f", name, s->model, s->what, s->M,
               s->N, s->K, g0, g1, sec[PACK_ONLY] * 1e3, sec[PER_CALL] / sec[PREPACKED]);
        if (ceiling > 0) printf(" of_ceiling=%.2f/%.2f", g0 / ceiling, g1 / ceiling);
        printf("\n");
        lg[0] += log(g0), lg[1] += log(g1), n++;
    }
    if (!n) return;
    double m0 = exp(lg[0] / n), m1 = exp(lg[1] / n);
    printf("gemm_packed_geomean engine=%s per_call_gflops=%.1f prepacked_gflops=%.1f "
           "speedup=%.2f", name, m0, m1, m1 / m0);
    if (ceiling > 0) printf(" of_ceiling=%.2f/%.2f", m0 / ceiling, m1 / ceiling);
    printf("\n");
}

int main(int argc, char **argv) {
    int rounds = 5, reps = 20;
    const char *model = NULL;
    double ceil_amx = 0, ceil_vdp = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) goto usage;
        if (!strcmp(a, "--rounds")) rounds = atoi(v);
        else if (!strcmp(a, "--reps")) reps = atoi(v);
        else if (!strcmp(a, "--model")) model = v;
        else if (!strcmp(a, "--ceiling-amx")) ceil_amx = atof(v);
        else if (!strcmp(a, "--ceiling-avx512bf16")) ceil_vdp = atof(v);
        else goto usage;
        i++;
    }
    if (rounds < 1 || rounds > MAX_ROUNDS || reps < 1) goto usage;
    printf("zt-gemm-packed-bench: one thread; the weight packed on every call (the training "
           "tasks' call) against packed once (the inference engine's); median of %d rounds of "
           "%d calls\n", rounds, reps);
    run_engine("amx", ZT_GEMM16_AMX, ceil_amx, model, rounds, reps);
    run_engine("avx512bf16", ZT_GEMM16_AVX512BF16, ceil_vdp, model, rounds, reps);
    return 0;
usage:
    fprintf(stderr, "usage: zt-gemm-packed-bench [--rounds 5 (1-%d)] [--reps 20] [--model NAME] "
            "[--ceiling-amx GF] [--ceiling-avx512bf16 GF]\n", MAX_ROUNDS);
    return 2;
}
