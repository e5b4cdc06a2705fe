/*
 * bench/adam_bench.c: throughput of zerotask's CPU AdamW task (zt_task_adamw, kernel
 * zt_kern_adamw) on a flat fp32 shard, and a STREAM-style triad as the machine's memory-bandwidth
 * ceiling, for bench/adam_vs_torch.py.
 *
 * AdamW: parameters p, gradients g and moments m, v are [P] fp32 tensors (zt_tensor_init) split
 * into blocks of GROUP elements; group b is block b of each, and one zt_task_adamw per group and
 * step is submitted, then zt_runtime_wait_all: the StarPU workers (STARPU_NCPU, 2 unless set) run
 * the groups in parallel, as the engine does with ZT_OPT_GROUP_ELEMS. Clip coefficient 1. After
 * WARMUP steps, STEPS steps are timed one by one (submission included); the figure is the median.
 * Bytes moved per parameter: 28 (read p, g, m, v = 16; write p, m, v = 12).
 *
 * Triad: a[i] = b[i] + s * c[i] over 3 arrays of TRIAD elements (fp32), THREADS pthreads each on
 * its own contiguous share (first touched by that thread); best of TRIAD_REPS; 12 bytes per
 * element (GBps, STREAM's count) or 16 (traffic_GBps: a is also read into the cache before it
 * is written, write-allocate, which AdamW does not pay: p, m, v are read anyway).
 *
 * Output (one line each, key=value):
 *   adam_bench params=P group=G groups=N workers=W steps=K ms_per_step=T params_per_s=X GBps=Y
 *   triad elems=E threads=T reps=R GBps=Z traffic_GBps=Z'
 * Usage: adam_bench [--params 50M] [--group 1M] [--steps 10] [--warmup 2] [--triad 200M]
 *                   [--triad-reps 5] [--threads 2] [--no-triad] [--no-adam]
 * Counts take a K/M/G suffix (powers of 1000 for params; e.g. 50M = 50,000,000).
 */
#include <pthread.h>  /* pthread_create, pthread_barrier_* */
#include <stdint.h>   /* int64_t */
#include <stdio.h>    /* printf, fprintf */
#include <stdlib.h>   /* strtod, setenv, qsort, aligned_alloc */
#include <string.h>   /* strcmp */
#include <time.h>     /* clock_gettime */

#include "bench_util.h" /* bench_now, bench_median, bench_parse_scaled */
#include "zt_sched.h"  /* zt_runtime_wait_all */
#include "zt_status.h" /* zt_error_last */
#include "zt_tasks.h"  /* zt_tasks_init, zt_task_adamw */
#include "zt_tensor.h" /* zt_tensor_* */


/* ---- triad ---- */
struct triad {
    float *a, *b, *c;
    int64_t n;
    int nth, reps;
    pthread_barrier_t bar;
    double best;
};
struct triad_arg {
    struct triad *t;
    int id;
};

static void *triad_thread(void *p) {
    struct triad_arg *ta = p;
    struct triad *t = ta->t;
    int64_t lo = t->n * ta->id / t->nth, hi = t->n * (ta->id + 1) / t->nth;
    float *restrict a = t->a, *restrict b = t->b, *restrict c = t->c;
    for (int64_t i = lo; i < hi; i++) { /* first touch by the thread that uses the pages */
        a[i] = 0.0f;
        b[i] = 1.0f;
        c[i] = 2.0f;
    }
    const float s = 3.0f;
    for (int r = 0; r < t->reps; r++) {
        pthread_barrier_wait(&t->bar);
        double t0 = bench_now();
        for (int64_t i = lo; i < hi; i++) a[i] = b[i] + s * c[i];
        pthread_barrier_wait(&t->bar);
        if (ta->id == 0) {
            double dt = bench_now() - t0;
            if (t->best == 0 || dt < t->best) t->best = dt;
        }
    }
    return NULL;
}

static int run_triad(int64_t n, int nth, int reps) {
    struct triad t = {.n = n, .nth = nth, .reps = reps};
    size_t bytes = ((size_t)n * sizeof(float) + 4095) / 4096 * 4096;
    t.a = aligned_alloc(4096, bytes);
    t.b = aligned_alloc(4096, bytes);
    t.c = aligned_alloc(4096, bytes);
    if (!t.a || !t.b || !t.c) {
        fprintf(stderr, "adam_bench: cannot allocate the triad arrays (3 x %zu bytes)\n", bytes);
        return 1;
    }
    pthread_barrier_init(&t.bar, NULL, (unsigned)nth);
    pthread_t th[64];
    struct triad_arg ar[64];
    for (int i = 0; i < nth; i++) {
        ar[i] = (struct triad_arg){&t, i};
        pthread_create(&th[i], NULL, triad_thread, &ar[i]);
    }
    for (int i = 0; i < nth; i++) pthread_join(th[i], NULL);
    pthread_barrier_destroy(&t.bar);
    /* use the result so that the loop cannot be dropped */
    double chk = (double)t.a[0] + (double)t.a[n - 1];
    printf("triad elems=%lld threads=%d reps=%d GBps=%.3f traffic_GBps=%.3f check=%g\n",
           (long long)n, nth, reps, 12.0 * (double)n / t.best / 1e9,
           16.0 * (double)n / t.best / 1e9, chk);
    fflush(stdout);
    free(t.a);
    free(t.b);
    free(t.c);
    return 0;
}

/* ---- AdamW ---- */
#define CHECK(call)                                                                              \
    do {                                                                                         \
        if ((call) != ZT_OK) {                                                                   \
            fprintf(stderr, "adam_bench: %s: %s\n", #call, zt_error_last());                     \
            return 1;                                                                            \
        }                                                                                        \
    } while (0)

static int run_adam(int64_t P, int64_t group, int steps, int warmup) {
    int ng = (int)((P + group - 1) / group);
    int64_t *rows = malloc((size_t)ng * sizeof *rows);
    for (int b = 0; b < ng; b++) rows[b] = P - (int64_t)b * group < group ? P - (int64_t)b * group
                                                                          : group;
    CHECK(zt_tasks_init());
    zt_tensor_t p, g, m, v, clip;
    CHECK(zt_tensor_init(&p, "p", NULL, P, 1, sizeof(float), ng, rows));
    CHECK(zt_tensor_init(&g, "g", NULL, P, 1, sizeof(float), ng, rows));
    CHECK(zt_tensor_init(&m, "m", NULL, P, 1, sizeof(float), ng, rows));
    CHECK(zt_tensor_init(&v, "v", NULL, P, 1, sizeof(float), ng, rows));
    CHECK(zt_tensor_init(&clip, "clip", NULL, 1, 3, sizeof(float), 1, NULL));
    float *pp = zt_tensor_data(p), *gp = zt_tensor_data(g), *cp = zt_tensor_data(clip);
    for (int64_t i = 0; i < P; i++) { /* m, v start at zero (zero-filled) */
        pp[i] = 0.01f * (float)((i % 1000) - 500);
        gp[i] = 1e-3f * (float)((i * 7 % 1000) - 500);
    }
    cp[0] = 1.0f; /* coefficient */
    cp[1] = 0.0f; /* norm (unused) */
    struct zt_block_ref *pr = malloc((size_t)ng * sizeof *pr),
                        *gr = malloc((size_t)ng * sizeof *gr);
    for (int b = 0; b < ng; b++) {
        pr[b] = (struct zt_block_ref){p, b, 0};
        gr[b] = (struct zt_block_ref){g, b, 0};
    }
    double *ms = calloc((size_t)steps, sizeof *ms);
    for (int s = 0; s < warmup + steps; s++) {
        struct zt_adamw_hparams hp = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                                      .weight_decay = 0.01f, .t = s + 1, .decoupled = 1};
        struct zt_task_opts o = {.layer = -1, .mb = -1, .step = s + 1, .priority = 0};
        double t0 = bench_now();
        for (int b = 0; b < ng; b++)
            CHECK(zt_task_adamw(&o, &pr[b], &gr[b], 1, m, v, b, clip, &hp, NULL));
        CHECK(zt_runtime_wait_all());
        double dt = bench_now() - t0;
        if (s >= warmup) ms[s - warmup] = 1e3 * dt;
    }
    double med = bench_median(ms, steps); /* ms[0]: the fastest step */
    printf("adam_bench params=%lld group=%lld groups=%d workers=%u steps=%d ms_per_step=%.3f "
           "min_ms=%.3f params_per_s=%.4g GBps=%.3f\n",
           (long long)P, (long long)group, ng, starpu_worker_get_count(), steps, med, ms[0],
           (double)P / (med * 1e-3), 28.0 * (double)P / (med * 1e-3) / 1e9);
    fflush(stdout);
    zt_tensor_free(clip);
    zt_tensor_free(v);
    zt_tensor_free(m);
    zt_tensor_free(g);
    zt_tensor_free(p);
    zt_tasks_free();
    free(ms);
    free(pr);
    free(gr);
    free(rows);
    return 0;
}

int main(int argc, char **argv) {
    int64_t P = 50000000, group = 1 << 20, triad = 200000000;
    int steps = 10, warmup = 2, treps = 5, nth = 2, do_triad = 1, do_adam = 1;
    for (int i = 1; i < argc; i++) {
        const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(k, "--no-triad")) { do_triad = 0; continue; }
        if (!strcmp(k, "--no-adam")) { do_adam = 0; continue; }
        if (!v) goto usage;
        i++;
        if (!strcmp(k, "--params")) P = bench_parse_scaled("adam_bench", v, 1e3);
        else if (!strcmp(k, "--group")) group = bench_parse_scaled("adam_bench", v, 1e3);
        else if (!strcmp(k, "--steps")) steps = atoi(v);
        else if (!strcmp(k, "--warmup")) warmup = atoi(v);
        else if (!strcmp(k, "--triad")) triad = bench_parse_scaled("adam_bench", v, 1e3);
        else if (!strcmp(k, "--triad-reps")) treps = atoi(v);
        else if (!strcmp(k, "--threads")) nth = atoi(v);
        else goto usage;
    }
    if (P < 1 || group < 1 || steps < 1 || warmup < 0 || triad < nth || treps < 1 || nth < 1 ||
        nth > 64)
        goto usage;
    setenv("STARPU_NCPU", "2", 0); /* the benchmark's default; an explicit setting wins */
    if (do_adam && run_adam(P, group, steps, warmup)) return 1;
    if (do_triad && run_triad(triad, nth, treps)) return 1;
    return 0;
usage:
    fprintf(stderr, "usage: adam_bench [--params 50M] [--group 1M] [--steps 10] [--warmup 2] "
                    "[--triad 200M] [--triad-reps 5] [--threads 2] [--no-triad] [--no-adam]\n");
    return 2;
}
