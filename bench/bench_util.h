/*
 * bench/bench_util.h: the few helpers the bench programs share (clock, median, sizes).
 */
#ifndef ZT_BENCH_UTIL_H
#define ZT_BENCH_UTIL_H

#include <stdint.h> /* int64_t */
#include <stdio.h>  /* fprintf */
#include <stdlib.h> /* strtod, qsort, exit */
#include <time.h>   /* clock_gettime */

static inline double bench_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static inline int bench_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* median of v[0..n) (sorts v: v[0] is then the minimum) */
static inline double bench_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* a number with an optional K, M or G suffix meaning unit, unit^2, unit^3 (1000 for counts,
 * 1024 for bytes); anything else exits with a message naming prog */
static inline int64_t bench_parse_scaled(const char *prog, const char *s, double unit) {
    char *end;
    double v = strtod(s, &end);
    switch (*end) {
    case 'k': case 'K': v *= unit; break;
    case 'm': case 'M': v *= unit * unit; break;
    case 'g': case 'G': v *= unit * unit * unit; break;
    case '\0': break;
    default: fprintf(stderr, "%s: bad number '%s'\n", prog, s); exit(2);
    }
    return (int64_t)v;
}

#endif /* ZT_BENCH_UTIL_H */
