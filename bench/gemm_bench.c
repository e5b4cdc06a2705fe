/*
 * bench/gemm_bench.c: zerotask's GEMMs on the products of the bench models: per linear layer the
 * forward (NN), the input gradient (NT) and the weight gradient (TN) of one rank's rows, the tied
 * head, and the attention products (g_shapes). Two modes:
 *
 * fp32 (the default): our AVX-512 GEMM (kernels/cpu/gemm.c) against OpenBLAS cblas_sgemm in the
 * same process, single-threaded both (as each StarPU worker runs them). OpenBLAS picks its
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
 *
 * --bf16: the bf16 GEMM (kernels/cpu/gemm_bf16.c) as the bf16 matmul tasks call it,
 * zt_kern_gemm_bf16_c16 (bf16 A, B and C, fp32 sums, no bias; the weight gradients add into
 * their C as their tasks do, the other products overwrite it), on each bf16 engine the CPU has
 * (amx, avx512bf16), next to our fp32 GEMM zt_kern_sgemm on the same shapes (engine fp32: fp32
 * operands holding the same values, beta 1 for the weight gradients). Each engine runs each
 * product on 1 thread, then on --threads threads where thread t computes its own share of C's
 * rows (M t/n to M (t+1)/n, into its own output block), as that many StarPU workers would: the
 * threads live for the whole run (the kernels keep packing buffers per thread), are pinned one
 * per CPU of the process's CPU set and start together; a product's time runs until the last one
 * finishes. Each figure is --warmup-ms untimed, then about --min-ms timed; --rounds rounds
 * alternate the engines. The table gives the median GFLOP/s (2 M N K flop per product), a
 * geomean row per model, and how far each bf16 engine's C (split over the threads, nothing
 * accumulated) lies from the fp32 product of the same bf16 values: the largest difference over
 * the largest |C| (bf16's rounding alone: up to about 4e-3). For scripts
 * (bench/gemm_bf16_vs_torch.py), after the table one line per shape, engine and thread count
 * (spaces in the product's name become '-'), then one per model, engine and thread count:
 *
 *   gemm_bf16 model=small what=qkv-fwd op=NN M=128 N=1152 K=384 engine=amx threads=2 gflops=...
 *   gemm_bf16_model model=small engine=amx threads=2 geomean_gflops=...
 *
 *   build/bench/zt-gemm-bench --bf16                   # every engine the CPU has, 1 and 2 threads
 *   build/bench/zt-gemm-bench --bf16 --engines amx --threads 2 --model small --rounds 1
 *
 * --model NAME (small or gpt2-124M) keeps one model's products, in either mode.
 */
#define _GNU_SOURCE /* pthread_setaffinity_np, sched_getaffinity, CPU_SET */

#include <cblas.h>   /* cblas_sgemm, openblas_get_corename */
#include <math.h>    /* fabs, exp, log, ceil */
#include <pthread.h> /* pthread_create, pthread_barrier_*, pthread_setaffinity_np */
#include <sched.h>   /* sched_getaffinity, cpu_set_t */
#include <stdint.h>  /* uint16_t, intptr_t */
#include <stdio.h>   /* printf */
#include <stdlib.h>  /* getenv, malloc, calloc */
#include <string.h>  /* strcmp, strtok, strlen */

#include "bench_util.h" /* bench_now, bench_median */
#include "zt_kernels.h" /* zt_kern_sgemm, zt_kern_gemm_set, zt_kern_gemm_bf16_c16, converters */

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

static const char *g_model; /* --model: only this model's products (NULL: all) */

static int usage(void) {
    fprintf(stderr,
            "usage: zt-gemm-bench [--rounds 5] [--min-ms 150] [--model NAME]\n"
            "       zt-gemm-bench --bf16 [--threads 2] [--engines fp32,amx,avx512bf16]\n"
            "                     [--rounds 5] [--min-ms 150] [--warmup-ms 30] [--model NAME]\n");
    return 2;
}

static int skip_shape(const struct shape *s) { return g_model && strcmp(g_model, s->model) != 0; }

// ---------------------------------------------------------------------------------------------
// fp32: ours against OpenBLAS, one thread

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

static int main_fp32(int rounds, double min_ms) {
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
        if (i < n && skip_shape(&g_shapes[i])) continue;
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

// ---------------------------------------------------------------------------------------------
// bf16: the bf16 engines and our fp32 GEMM, on 1 and on n threads splitting C's rows

#define MAX_THREADS 64

/* the engines a --bf16 run can time (--engines names) */
struct engine {
    const char *name;
    int bf16;                  /* 0: zt_kern_sgemm on fp32 operands (ZT_GEMM_AVX512) */
    enum zt_gemm16_engine e16; /* the bf16 engine, when bf16 */
};
static const struct engine g_engines[] = {
    {"fp32", 0, ZT_GEMM16_WIDEN},
    {"amx", 1, ZT_GEMM16_AMX},
    {"avx512bf16", 1, ZT_GEMM16_AVX512BF16},
};
#define NENGINES (int)(sizeof g_engines / sizeof g_engines[0])

/* one thread's output block: its rows of C */
struct part {
    uint16_t *c16; /* bf16 C of the bf16 engines */
    float *wide;   /* fp32 C of zt_kern_sgemm; the bf16 kernel's scratch (deep products) */
};

/* what the pool runs: reps times the product of s, thread t < nparts on its share of C's rows
 * into part[t] */
struct job {
    const struct shape *s;
    const uint16_t *A16, *B16;
    const float *A32, *B32;
    const struct engine *e; /* pool_run sets the process's engine to it */
    int accumulate;         /* the task adds into C (weight gradients) */
    int nparts;
    long reps;
    const struct part *part;
};

/* the weight-gradient tasks add into the gradient; the others overwrite their output */
static int task_accumulates(const struct shape *s) { return strstr(s->what, "dw") != NULL; }

/* the first of thread t's rows of C among n threads */
static int rows_begin(int M, int t, int n) { return (int)((long)M * t / n); }

static void part_run(const struct job *j, int t) {
    const struct shape *s = j->s;
    int m0 = rows_begin(s->M, t, j->nparts), rows = rows_begin(s->M, t + 1, j->nparts) - m0;
    int lda = s->ta ? s->M : s->K, ldb = s->tb ? s->K : s->N;
    size_t a0 = s->ta ? (size_t)m0 : (size_t)m0 * lda; /* op(A)'s row m0 */
    const struct part *p = &j->part[t];
    for (long r = 0; r < j->reps; r++) {
        if (j->e->bf16)
            zt_kern_gemm_bf16_c16(s->ta, s->tb, rows, s->N, s->K, j->A16 + a0, lda, j->B16, ldb,
                                  NULL, j->accumulate, p->c16, s->N, p->wide);
        else
            zt_kern_sgemm(s->ta, s->tb, rows, s->N, s->K, 1.0f, j->A32 + a0, lda, j->B32, ldb,
                          j->accumulate ? 1.0f : 0.0f, p->wide, s->N);
    }
}

/* persistent threads pinned one per CPU; the main thread joins their two barriers */
static struct {
    int n;
    int cpu[MAX_THREADS]; /* -1: not pinned */
    pthread_t tid[MAX_THREADS];
    pthread_barrier_t go, done;
    const struct job *job; /* NULL: the threads exit */
} g_pool;

static void *pool_main(void *arg) {
    int t = (int)(intptr_t)arg;
    if (g_pool.cpu[t] >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(g_pool.cpu[t], &set);
        pthread_setaffinity_np(pthread_self(), sizeof set, &set); /* best effort */
    }
    for (;;) {
        pthread_barrier_wait(&g_pool.go);
        const struct job *j = g_pool.job;
        if (!j) return NULL;
        if (t < j->nparts) part_run(j, t);
        pthread_barrier_wait(&g_pool.done);
    }
}

static int pool_start(int n) {
    cpu_set_t set;
    int ncpu = 0;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        for (int c = 0; c < CPU_SETSIZE && ncpu < n; c++)
            if (CPU_ISSET(c, &set)) g_pool.cpu[ncpu++] = c;
    if (ncpu < n)
        printf("note: %d threads on %d CPUs: threads %d.. are not pinned\n", n, ncpu, ncpu);
    for (int t = ncpu; t < n; t++) g_pool.cpu[t] = -1;
    g_pool.n = n;
    pthread_barrier_init(&g_pool.go, NULL, (unsigned)n + 1);
    pthread_barrier_init(&g_pool.done, NULL, (unsigned)n + 1);
    for (int t = 0; t < n; t++)
        if (pthread_create(&g_pool.tid[t], NULL, pool_main, (void *)(intptr_t)t) != 0) {
            /* the threads started wait at the barrier for the missing ones: nothing to join */
            fprintf(stderr, "zt-gemm-bench: cannot start %d threads\n", n);
            return -1;
        }
    return 0;
}

static void pool_stop(void) {
    g_pool.job = NULL;
    pthread_barrier_wait(&g_pool.go);
    for (int t = 0; t < g_pool.n; t++) pthread_join(g_pool.tid[t], NULL);
    pthread_barrier_destroy(&g_pool.go);
    pthread_barrier_destroy(&g_pool.done);
}

/* seconds of one run of j on the pool, from the common start to the last thread's end */
static double pool_run(const struct job *j) {
    if (j->e->bf16) zt_kern_gemm16_set(j->e->e16);
    else zt_kern_gemm_set(ZT_GEMM_AVX512);
    g_pool.job = j;
    pthread_barrier_wait(&g_pool.go);
    double t0 = bench_now();
    pthread_barrier_wait(&g_pool.done);
    return bench_now() - t0;
}

/* seconds per product of j: runs of 1, 2, 4, ... products until warm_s is spent (untimed), then
 * one run of as many products as their rate puts in min_s */
static double time_job(struct job *j, double warm_s, double min_s) {
    double spent = 0, t;
    for (j->reps = 1;; j->reps *= 2) {
        t = pool_run(j);
        spent += t;
        if (spent >= warm_s) break;
    }
    double per = t / (double)j->reps;
    j->reps = per > 0 ? (long)ceil(min_s / per) : 1;
    if (j->reps < 1) j->reps = 1;
    return pool_run(j) / (double)j->reps;
}

/* a table column: an engine on a thread count */
struct column {
    const struct engine *e;
    int threads;
    char label[24];
};

static int col_width(const struct column *c) {
    int n = (int)strlen(c->label);
    return n < 8 ? 8 : n;
}

/* the columns of --engines (NULL: every engine the CPU has), each on 1 and on n threads; their
 * count, or -1 after a message */
static int parse_engines(const char *engines, int n, struct column *col) {
    int ncol = 0;
    char list[128];
    snprintf(list, sizeof list, "%s", engines ? engines : "fp32,amx,avx512bf16");
    char *save = NULL;
    for (char *name = strtok_r(list, ",", &save); name; name = strtok_r(NULL, ",", &save)) {
        const struct engine *e = NULL;
        for (int i = 0; i < NENGINES; i++)
            if (!strcmp(name, g_engines[i].name)) e = &g_engines[i];
        if (!e) {
            fprintf(stderr, "zt-gemm-bench: unknown engine '%s' (fp32, amx, avx512bf16)\n", name);
            return -1;
        }
        for (int k = 0; k < ncol; k++)
            if (col[k].e == e) {
                fprintf(stderr, "zt-gemm-bench: engine '%s' named twice\n", name);
                return -1;
            }
        if (e->bf16 && !zt_kern_gemm16_available(e->e16)) {
            if (engines) {
                fprintf(stderr, "zt-gemm-bench: this CPU (or OS) does not give %s\n", name);
                return -1;
            }
            printf("note: %s is not available on this CPU: skipped\n", name);
            continue;
        }
        int threads[2] = {1, n};
        for (int q = 0; q < (n > 1 ? 2 : 1); q++) {
            col[ncol] = (struct column){.e = e, .threads = threads[q]};
            snprintf(col[ncol].label, sizeof col[ncol].label, "%s %dt", e->name, threads[q]);
            ncol++;
        }
    }
    if (!ncol) fprintf(stderr, "zt-gemm-bench: no engine to run\n");
    return ncol ? ncol : -1;
}

/* the figures of one product: gf[k] the median GFLOP/s of column k; *diff the largest
 * max|C - fp32 product| / max|C| of the bf16 engines (-1 when none ran). 0, or -1 when out of
 * memory. */
static int bench_shape(const struct shape *s, const struct column *col, int ncol, int nthreads,
                       int rounds, double warm_s, double min_s, double *gf, double *diff) {
    size_t na = (size_t)s->M * s->K, nb = (size_t)s->K * s->N, nc = (size_t)s->M * s->N;
    uint16_t *A16 = malloc(na * 2), *B16 = malloc(nb * 2);
    float *A32 = malloc(na * 4), *B32 = malloc(nb * 4), *ref = malloc(nc * 4);
    struct part part[MAX_THREADS] = {{0}};
    int ok = A16 && B16 && A32 && B32 && ref;
    /* thread t's block holds the most rows it computes (thread 0 alone: all M), zeroed: the
     * accumulating products start from 0 */
    for (int t = 0; t < nthreads; t++) {
        size_t most =
            (size_t)(t ? rows_begin(s->M, t + 1, nthreads) - rows_begin(s->M, t, nthreads) : s->M);
        part[t].c16 = calloc(most * s->N, 2);
        part[t].wide = calloc(most * s->N, 4);
        ok = ok && part[t].c16 && part[t].wide;
    }
    if (ok) {
        /* bf16 operands, and fp32 ones holding the same values (widening is exact) */
        srand(1);
        for (size_t q = 0; q < na; q++) A32[q] = (float)rand() / RAND_MAX - 0.5f;
        for (size_t q = 0; q < nb; q++) B32[q] = (float)rand() / RAND_MAX - 0.5f;
        zt_kern_f32_to_bf16(A16, A32, na);
        zt_kern_f32_to_bf16(B16, B32, nb);
        zt_kern_bf16_to_f32(A32, A16, na);
        zt_kern_bf16_to_f32(B32, B16, nb);
        struct job j = {.s = s, .A16 = A16, .B16 = B16, .A32 = A32, .B32 = B32,
                        .accumulate = task_accumulates(s), .part = part};
        double t[2 * NENGINES][99];
        for (int r = 0; r < rounds; r++)
            for (int k = 0; k < ncol; k++) {
                j.e = col[k].e;
                j.nparts = col[k].threads;
                t[k][r] = time_job(&j, warm_s, min_s);
            }
        for (int k = 0; k < ncol; k++)
            gf[k] = 2.0 * s->M * s->N * s->K / bench_median(t[k], rounds) / 1e9;
        /* each bf16 engine once more on all threads, nothing accumulated, against fp32 */
        zt_kern_gemm_set(ZT_GEMM_AVX512);
        zt_kern_sgemm(s->ta, s->tb, s->M, s->N, s->K, 1.0f, A32, s->ta ? s->M : s->K, B32,
                      s->tb ? s->K : s->N, 0.0f, ref, s->N);
        double big = 0;
        for (size_t q = 0; q < nc; q++)
            if (fabs((double)ref[q]) > big) big = fabs((double)ref[q]);
        *diff = -1;
        for (int k = 0; k < ncol; k++) {
            if (!col[k].e->bf16 || col[k].threads != nthreads) continue;
            j = (struct job){.s = s, .A16 = A16, .B16 = B16, .e = col[k].e,
                             .nparts = nthreads, .reps = 1, .part = part};
            pool_run(&j);
            double d = 0;
            for (int th = 0; th < nthreads; th++) {
                int m0 = rows_begin(s->M, th, nthreads), m1 = rows_begin(s->M, th + 1, nthreads);
                size_t n = (size_t)(m1 - m0) * s->N;
                zt_kern_bf16_to_f32(part[th].wide, part[th].c16, n);
                for (size_t q = 0; q < n; q++) {
                    double e = fabs((double)part[th].wide[q] - ref[(size_t)m0 * s->N + q]);
                    if (e > d) d = e;
                }
            }
            d /= big > 0 ? big : 1;
            if (d > *diff) *diff = d;
        }
    }
    for (int t = 0; t < nthreads; t++) {
        free(part[t].c16);
        free(part[t].wide);
    }
    free(A16), free(B16), free(A32), free(B32), free(ref);
    if (!ok) fprintf(stderr, "zt-gemm-bench: out of memory\n");
    return ok ? 0 : -1;
}

#define NSHAPE (sizeof g_shapes / sizeof g_shapes[0])
static double g_gf[NSHAPE][2 * NENGINES]; /* median GFLOP/s of each shape and column */

/* the geometric mean of column k's GFLOP/s over shapes a..b-1 */
static double geomean(size_t a, size_t b, int k) {
    double l = 0;
    for (size_t i = a; i < b; i++) l += log(g_gf[i][k]);
    return exp(l / (double)(b - a));
}

static const char *op_name(const struct shape *s) { return s->ta ? "TN" : s->tb ? "NT" : "NN"; }

static int main_bf16(int rounds, double min_ms, double warm_ms, int nthreads, const char *engines) {
    if (!zt_kern_gemm_avx512_available()) {
        fprintf(stderr, "zt-gemm-bench: this CPU has no AVX-512F: no engine of --bf16 can run\n");
        return 2;
    }
    zt_kern_blas_init();
    struct column col[2 * NENGINES];
    int ncol = parse_engines(engines, nthreads, col);
    if (ncol < 0) return 2;
    int nbf16 = 0;
    for (int k = 0; k < ncol; k++) nbf16 += col[k].e->bf16;
    if (pool_start(nthreads) != 0) return 1;
    char on[48] = "1 thread";
    if (nthreads > 1)
        snprintf(on, sizeof on, "1 thread and on %d (C's rows split)", nthreads);
    printf("zerotask bf16 GEMM (zt_kern_gemm_bf16_c16, bf16 C) and fp32 GEMM (zt_kern_sgemm), "
           "GFLOP/s on %s, median of %d alternating rounds\n", on, rounds);
    printf("%-10s %-12s %2s %5s %5s %5s |", "model", "product", "op", "M", "N", "K");
    for (int k = 0; k < ncol; k++) printf(" %*s", col_width(&col[k]), col[k].label);
    fputs(nbf16 ? " | bf16 max|diff|/max|C|\n" : "\n", stdout);
    fflush(stdout);

    size_t first = 0, end = 0; /* the current model's shapes: first..end-1 */
    const char *model = NULL;
    int rc = 0;
    for (size_t i = 0; i <= NSHAPE; i++) {
        if (i < NSHAPE && skip_shape(&g_shapes[i])) continue;
        if (model && (i == NSHAPE || strcmp(model, g_shapes[i].model) != 0)) {
            printf("%-10s %-12s %2s %5s %5s %5s |", model, "geomean", "", "", "", "");
            for (int k = 0; k < ncol; k++)
                printf(" %*.1f", col_width(&col[k]), geomean(first, end, k));
            fputs(nbf16 ? " |\n" : "\n", stdout);
        }
        if (i == NSHAPE) break;
        const struct shape *s = &g_shapes[i];
        if (!model || strcmp(model, s->model) != 0) first = i;
        model = s->model;
        double diff;
        rc = bench_shape(s, col, ncol, nthreads, rounds, warm_ms / 1e3, min_ms / 1e3, g_gf[i],
                         &diff);
        if (rc) break;
        end = i + 1;
        printf("%-10s %-12s %2s %5d %5d %5d |", s->model, s->what, op_name(s), s->M, s->N, s->K);
        for (int k = 0; k < ncol; k++) printf(" %*.1f", col_width(&col[k]), g_gf[i][k]);
        if (nbf16) printf(" | %.1e", diff);
        printf("\n");
        fflush(stdout);
    }
    pool_stop();
    if (rc) return 1;

    /* the lines for scripts */
    for (size_t i = 0; i < NSHAPE; i++) {
        const struct shape *s = &g_shapes[i];
        if (skip_shape(s)) continue;
        char what[32];
        snprintf(what, sizeof what, "%s", s->what);
        for (char *c = what; *c; c++)
            if (*c == ' ') *c = '-';
        for (int k = 0; k < ncol; k++)
            printf("gemm_bf16 model=%s what=%s op=%s M=%d N=%d K=%d engine=%s threads=%d "
                   "gflops=%.1f\n", s->model, what, op_name(s), s->M, s->N, s->K,
                   col[k].e->name, col[k].threads, g_gf[i][k]);
    }
    for (size_t i = 0, end; i < NSHAPE; i = end) {
        for (end = i; end < NSHAPE && !strcmp(g_shapes[end].model, g_shapes[i].model);) end++;
        if (skip_shape(&g_shapes[i])) continue;
        for (int k = 0; k < ncol; k++)
            printf("gemm_bf16_model model=%s engine=%s threads=%d products=%d "
                   "geomean_gflops=%.1f\n", g_shapes[i].model, col[k].e->name, col[k].threads,
                   (int)(end - i), geomean(i, end, k));
    }
    return 0;
}

int main(int argc, char **argv) {
    int rounds = 5, bf16 = 0, threads = 2;
    double min_ms = 150, warm_ms = 30;
    const char *engines = NULL;
    int bf16_opts = 0; /* options of --bf16 given */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--bf16")) {
            bf16 = 1;
            continue;
        }
        if (!v) return usage();
        if (!strcmp(a, "--rounds")) rounds = atoi(v);
        else if (!strcmp(a, "--min-ms")) min_ms = atof(v);
        else if (!strcmp(a, "--model")) g_model = v;
        else if (!strcmp(a, "--warmup-ms")) warm_ms = atof(v), bf16_opts++;
        else if (!strcmp(a, "--threads")) threads = atoi(v), bf16_opts++;
        else if (!strcmp(a, "--engines")) engines = v, bf16_opts++;
        else return usage();
        i++;
    }
    if (rounds < 1 || rounds > 99 || !(min_ms > 0) || !(warm_ms >= 0) || threads < 1 ||
        threads > MAX_THREADS)
        return usage();
    if (g_model && strcmp(g_model, "small") != 0 && strcmp(g_model, "gpt2-124M") != 0) {
        fprintf(stderr, "zt-gemm-bench: unknown model '%s' (small, gpt2-124M)\n", g_model);
        return 2;
    }
    if (!bf16 && bf16_opts) {
        fprintf(stderr, "zt-gemm-bench: --threads, --engines and --warmup-ms go with --bf16\n");
        return 2;
    }
    return bf16 ? main_bf16(rounds, min_ms, warm_ms, threads, engines)
                : main_fp32(rounds, min_ms);
}
