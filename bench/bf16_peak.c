/*
 * bench/bf16_peak.c: this CPU's compute ceilings, the roofs a GEMM of each precision can reach:
 *
 *   fp32         vfmadd231ps zmm (_mm512_fmadd_ps)      16 lanes x 2         =    32 FLOP
 *   avx512bf16   vdpbf16ps zmm (_mm512_dpbf16_ps)       16 lanes x 2 x 2     =    64 FLOP
 *   amx          tdpbf16ps (_tile_dpbf16ps)             16 x 16 x 32 x 2     = 16384 FLOP
 *
 * per instruction. Each loop keeps independent accumulators (12 zmm registers; 4 16x16 fp32
 * tiles fed by 4 16x64-byte bf16 tiles) so that only the units' throughput bounds it, never an
 * instruction's latency. A loop runs first on one thread (the per-core ceiling), then on
 * --threads threads at once, one pthread pinned per core of the process's CPU set (the
 * whole-machine ceiling: AVX-512 and AMX clocks drop when every core runs them, and two vCPUs
 * of a VM may be one physical core's hyperthreads). Each run is --warmup-ms untimed (the units
 * power up and the clock settles), then at least --ms timed; its accumulators are checked
 * against the exact sum every call (the inputs are powers of two).
 *
 *   build/bench/zt-bf16-peak                       # 2 threads, 500 ms per run
 *   build/bench/zt-bf16-peak --threads 4 --ms 2000
 *
 * An engine the CPU (cpuid) or the kernel (AMX needs arch_prctl ARCH_REQ_XCOMP_PERM, Linux >=
 * 5.16) lacks prints "not available on this CPU" with the reason and is skipped. The table gives
 * GFLOP/s of one thread, of all threads together, per thread in that run, and the scaling; a
 * "bf16_peak engine=... threads=N gflops=... gflops_1thread=..." line per engine closes the
 * output (for scripts; available=0, or wrong_result=1, and no figures for an engine that cannot
 * run or miscomputed: the program then exits 1).
 */
#define _GNU_SOURCE /* pthread_setaffinity_np, sched_getaffinity, CPU_SET */

#include <cpuid.h>       /* __get_cpuid_count */
#include <errno.h>       /* errno */
#include <immintrin.h>   /* _mm512_*, _tile_* (the target attributes enable them per function) */
#include <pthread.h>     /* pthread_create, pthread_barrier_*, pthread_setaffinity_np */
#include <sched.h>       /* sched_getaffinity, cpu_set_t */
#include <stdint.h>      /* uint8_t, uint16_t */
#include <stdio.h>       /* printf */
#include <stdlib.h>      /* atoi, atof */
#include <string.h>      /* strcmp, memset, strerror */
#include <sys/syscall.h> /* SYS_arch_prctl */
#include <unistd.h>      /* syscall */

#include "bench_util.h" /* bench_now */

#define ARCH_GET_XCOMP_PERM 0x1022
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA  18

#define MAX_THREADS 256

// ---------------------------------------------------------------------------------------------
// the loops: each runs n iterations and returns the sum of its accumulators, whose exact value
// is n * unit (struct engine's unit): every addend is a power of two and every partial sum
// stays below 2^24 of them, so fp32 holds it exactly

/* 12 named accumulators, not an array: GCC keeps an array on the stack and the store-to-load
 * forwarding of each iteration then bounds the loop, not the FMA units */
#define REP12(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
#define ACC_DECL(i) __m512 acc##i = _mm512_setzero_ps();
#define ACC_SUM(i)  s += _mm512_reduce_add_ps(acc##i);
/* the empty asm keeps each chain in its register and the compiler from folding it: without it
 * (and the one hiding the inputs' values) clang turns fma(1, b, acc) into acc + b */
#define ACC_KEEP(i) __asm__ volatile("" : "+v"(acc##i));
#define FMA_PS(i)   acc##i = _mm512_fmadd_ps(a, b, acc##i); ACC_KEEP(i)
#define DP_BF16(i)  acc##i = _mm512_dpbf16_ps(acc##i, a, b); ACC_KEEP(i)

/* 12 x 16 lanes of acc += 1 * 2^-10 per iteration: 12 x 32 FLOP */
__attribute__((target("avx512f"))) static float loop_fp32(long n) {
    REP12(ACC_DECL)
    __m512 a = _mm512_set1_ps(1.0f), b = _mm512_set1_ps(1.0f / 1024);
    __asm__("" : "+v"(a), "+v"(b));
    for (long k = 0; k < n; k++) {
        REP12(FMA_PS)
    }
    float s = 0;
    REP12(ACC_SUM)
    return s;
}

/* 12 x 16 lanes of acc += 1 * 2^-7 + 1 * 2^-7 per iteration (bf16 pairs 0x3f80 = 1.0,
 * 0x3c00 = 2^-7): 12 x 64 FLOP */
__attribute__((target("avx512f,avx512bf16"))) static float loop_avx512bf16(long n) {
    REP12(ACC_DECL)
    __m512i ai = _mm512_set1_epi32(0x3f803f80), bi = _mm512_set1_epi32(0x3c003c00);
    __asm__("" : "+v"(ai), "+v"(bi));
    const __m512bh a = (__m512bh)ai, b = (__m512bh)bi;
    for (long k = 0; k < n; k++) {
        REP12(DP_BF16)
    }
    float s = 0;
    REP12(ACC_SUM)
    return s;
}

/* the 64-byte tile configuration of palette 1 (Intel SDM, LDTILECFG) */
struct tile_config {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16]; /* bytes per row of tile i */
    uint8_t rows[16];   /* rows of tile i */
};

/* tiles 0-3: C (16 x 16 fp32), 4-5: A (16 rows x 32 bf16 pairs), 6-7: B (16 x 64 bytes, VNNI
 * pairs); every bf16 is 2^-7, so each element of C gains 32 x 2 x 2^-14 = 2^-9 per tdpbf16ps.
 * 4 tdpbf16ps per iteration: 4 x 16384 FLOP. The configuration is per thread. */
__attribute__((target("amx-tile,amx-bf16"))) static float loop_amx(long n) {
    _Alignas(64) struct tile_config cfg;
    _Alignas(64) uint16_t ab[16 * 32];
    _Alignas(64) float c[4][16 * 16];
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) {
        cfg.colsb[t] = 64;
        cfg.rows[t] = 16;
    }
    for (int i = 0; i < 16 * 32; i++) ab[i] = 0x3c00;
    _tile_loadconfig(&cfg);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_loadd(4, ab, 64);
    _tile_loadd(5, ab, 64);
    _tile_loadd(6, ab, 64);
    _tile_loadd(7, ab, 64);
    for (long k = 0; k < n; k++) {
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, c[0], 64);
    _tile_stored(1, c[1], 64);
    _tile_stored(2, c[2], 64);
    _tile_stored(3, c[3], 64);
    _tile_release();
    return c[0][0] + c[1][17] + c[2][100] + c[3][255]; /* one element of each tile */
}

// ---------------------------------------------------------------------------------------------
// engines

struct engine {
    const char *name, *instr;
    double flop_per_instr;
    int instr_per_iter;
    long block;               /* iterations per call (a few ms), the granularity of timing */
    float unit;               /* the exact result per iteration */
    float (*loop)(long n);
    char why_not[160];        /* "" when the engine can run here */
};

static struct engine g_engines[] = {
    {"fp32", "vfmadd231ps zmm", 32, 12, 1L << 18, 12 * 16 / 1024.0f, loop_fp32, ""},
    {"avx512bf16", "vdpbf16ps zmm", 64, 12, 1L << 18, 12 * 16 * 2 / 128.0f, loop_avx512bf16, ""},
    {"amx", "tdpbf16ps tmm", 16 * 16 * 32 * 2, 4, 1L << 15, 4 / 512.0f, loop_amx, ""},
};
#define N_ENGINES ((int)(sizeof g_engines / sizeof g_engines[0]))

/* fills each engine's why_not: the CPU's cpuid, and for AMX the kernel's permission (per
 * process, so requested here once, before any thread runs a tile instruction) */
static void probe_engines(void) {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512f"))
        snprintf(g_engines[0].why_not, sizeof g_engines[0].why_not, "no AVX-512F");
    if (!__builtin_cpu_supports("avx512bf16"))
        snprintf(g_engines[1].why_not, sizeof g_engines[1].why_not, "no AVX512-BF16 (cpuid)");
    unsigned eax, ebx, ecx, edx;
    char *why = g_engines[2].why_not;
    size_t len = sizeof g_engines[2].why_not;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) || !(edx & (1u << 22)) ||
        !(edx & (1u << 24))) {
        snprintf(why, len, "no AMX-BF16/AMX-TILE (cpuid leaf 7 EDX bits 22, 24)");
        return;
    }
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0) {
        snprintf(why, len, "the kernel refused AMX tile data (arch_prctl ARCH_REQ_XCOMP_PERM: %s)",
                 strerror(errno));
        return;
    }
    unsigned long long perm = 0;
    if (syscall(SYS_arch_prctl, ARCH_GET_XCOMP_PERM, &perm) != 0 ||
        !(perm & (1ull << XFEATURE_XTILEDATA)))
        snprintf(why, len, "the kernel did not grant AMX tile data (ARCH_GET_XCOMP_PERM)");
}

// ---------------------------------------------------------------------------------------------
// runs: one thread per core, started together

struct worker {
    const struct engine *e;
    int cpu;                    /* pinned to this CPU; -1: not pinned */
    double warm_s, min_s;
    pthread_barrier_t *start;
    double seconds, iters;      /* out: the timed part */
    int wrong;                  /* out: a call returned other than n * unit */
};

static void *worker_main(void *arg) {
    struct worker *w = arg;
    const struct engine *e = w->e;
    if (w->cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(w->cpu, &set);
        pthread_setaffinity_np(pthread_self(), sizeof set, &set); /* best effort */
    }
    pthread_barrier_wait(w->start);
    float want = (float)e->block * e->unit;
    double t0 = bench_now(), t;
    do {
        w->wrong |= e->loop(e->block) != want;
        t = bench_now();
    } while (t - t0 < w->warm_s);
    long calls = 0;
    t0 = t;
    do {
        w->wrong |= e->loop(e->block) != want;
        calls++;
        t = bench_now();
    } while (t - t0 < w->min_s);
    w->seconds = t - t0;
    w->iters = (double)calls * e->block;
    return NULL;
}

/* GFLOP/s of e on n threads together (the sum of each thread's rate; they start at one barrier
 * and run the same time); < 0 when a thread could not start or a result was wrong */
static double run_engine(const struct engine *e, int n, const int *cpus, double warm_s,
                         double min_s) {
    pthread_t th[MAX_THREADS];
    struct worker w[MAX_THREADS];
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, (unsigned)n);
    int started = 0, rc = 0;
    for (int i = 0; i < n; i++) {
        w[i] = (struct worker){e, cpus[i], warm_s, min_s, &start, 0, 0, 0};
        if ((rc = pthread_create(&th[i], NULL, worker_main, &w[i])) != 0) break;
        started++;
    }
    if (started < n) {
        /* the threads started wait at the barrier for the missing ones: nothing to join */
        fprintf(stderr, "zt-bf16-peak: pthread_create: %s\n", strerror(rc));
        exit(1);
    }
    double gflops = 0;
    int wrong = 0;
    for (int i = 0; i < n; i++) {
        pthread_join(th[i], NULL);
        gflops += w[i].iters * e->instr_per_iter * e->flop_per_instr / w[i].seconds / 1e9;
        wrong |= w[i].wrong;
    }
    pthread_barrier_destroy(&start);
    return wrong ? -1 : gflops;
}

static int usage(void) {
    fprintf(stderr, "usage: zt-bf16-peak [--threads 2] [--ms 500] [--warmup-ms 100]\n");
    return 2;
}

int main(int argc, char **argv) {
    int threads = 2;
    double ms = 500, warm_ms = 100;
    for (int i = 1; i < argc; i += 2) {
        if (i + 1 >= argc) return usage();
        if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--ms")) ms = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--warmup-ms")) warm_ms = atof(argv[i + 1]);
        else return usage();
    }
    if (threads < 1 || threads > MAX_THREADS || !(ms > 0) || !(warm_ms >= 0)) return usage();

    /* thread i on the i-th CPU of the process's set, so that each has a core of its own */
    cpu_set_t set;
    int cpus[MAX_THREADS], ncpu = 0;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        for (int c = 0; c < CPU_SETSIZE && ncpu < MAX_THREADS; c++)
            if (CPU_ISSET(c, &set)) cpus[ncpu++] = c;
    for (int i = 0; i < threads; i++) cpus[i] = ncpu ? cpus[i % ncpu] : -1;
    if (threads > ncpu && ncpu > 0)
        printf("note: %d threads on %d CPUs: threads share cores, so the all-threads column is "
               "not a per-core multiple\n", threads, ncpu);

    probe_engines();
    printf("compute ceilings: 1 thread, then %d threads (pinned, CPUs %d..), %.0f ms each after "
           "%.0f ms warm-up\n", threads, cpus[0], ms, warm_ms);
    printf("%-11s %-16s %6s | %13s | %13s %13s | %s\n", "engine", "instruction", "FLOP",
           "1 thread GF/s", "all threads", "per thread", "scaling");
    double one[N_ENGINES], all[N_ENGINES];
    int failed = 0;
    for (int k = 0; k < N_ENGINES; k++) {
        const struct engine *e = &g_engines[k];
        one[k] = all[k] = 0;
        if (e->why_not[0]) {
            printf("%-11s %-16s %6.0f | not available on this CPU: %s\n", e->name, e->instr,
                   e->flop_per_instr, e->why_not);
            continue;
        }
        one[k] = run_engine(e, 1, cpus, warm_ms / 1e3, ms / 1e3);
        all[k] = threads > 1 ? run_engine(e, threads, cpus, warm_ms / 1e3, ms / 1e3) : one[k];
        if (one[k] < 0 || all[k] < 0) {
            printf("%-11s %-16s %6.0f | WRONG RESULT: the accumulators do not hold the exact "
                   "sum\n", e->name, e->instr, e->flop_per_instr);
            failed = 1;
            continue;
        }
        printf("%-11s %-16s %6.0f | %13.1f | %13.1f %13.1f | %.2fx\n", e->name, e->instr,
               e->flop_per_instr, one[k], all[k], all[k] / threads, all[k] / one[k]);
        fflush(stdout);
    }
    for (int k = 0; k < N_ENGINES; k++) {
        const struct engine *e = &g_engines[k];
        if (e->why_not[0])
            printf("bf16_peak engine=%s threads=%d available=0\n", e->name, threads);
        else if (one[k] < 0 || all[k] < 0)
            printf("bf16_peak engine=%s threads=%d available=1 wrong_result=1\n", e->name,
                   threads);
        else
            printf("bf16_peak engine=%s threads=%d available=1 gflops=%.1f gflops_1thread=%.1f\n",
                   e->name, threads, all[k], one[k]);
    }
    return failed;
}
