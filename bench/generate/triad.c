/* bench/generate/triad.c: the STREAM triad (a[i] = b[i] + s * c[i] over three arrays of
 * doubles, each larger than the caches), the memory-bandwidth figure bench/generate_vs_peers
 * divides weight bytes per token by. Threads: OpenMP (OMP_NUM_THREADS), static schedule so
 * each thread touches the pages it first wrote. Prints the best of REPS passes, counted as
 * STREAM counts them (24 bytes per element: two reads and one write), and the traffic with
 * the write-allocate read of a (32 bytes per element).
 * Build: cc -O2 -march=native -fopenmp triad.c -o triad
 * Usage: triad [MIB_PER_ARRAY (default 512)] [REPS (default 10)] */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

int main(int argc, char **argv) {
    long mib = argc > 1 ? atol(argv[1]) : 512;
    int reps = argc > 2 ? atoi(argv[2]) : 10;
    long n = mib * (1L << 20) / (long)sizeof(double);
    double *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b), *c = malloc(n * sizeof *c);
    if (mib < 1 || reps < 1 || !a || !b || !c) {
        fprintf(stderr, "triad: cannot allocate 3 x %ld MiB\n", mib);
        return 1;
    }
#pragma omp parallel for schedule(static)
    for (long i = 0; i < n; i++) a[i] = 0.0, b[i] = 1.0, c[i] = 2.0;
    double best = 1e30, s = 3.0;
    for (int r = 0; r < reps; r++) {
        double t0 = now();
#pragma omp parallel for schedule(static)
        for (long i = 0; i < n; i++) a[i] = b[i] + s * c[i];
        double dt = now() - t0;
        if (dt < best) best = dt;
    }
    double check = a[n / 2] + a[n - 1]; /* keeps the loops; 7 + 7 */
    printf("triad threads=%d mib_per_array=%ld best_s=%.6f stream_GBps=%.3f traffic_GBps=%.3f "
           "check=%g\n", omp_get_max_threads(), mib, best, 24.0 * n / best / 1e9,
           32.0 * n / best / 1e9, check);
    free(a), free(b), free(c);
    return 0;
}
