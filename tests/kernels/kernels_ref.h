/*
 * tests/kernels/kernels_ref.h: helpers shared by the kernel tests: read the PyTorch references
 * written by tests/ref/kernels_ref.py (fixture ref_kernels), compare float results with float64
 * references, and check gradients by central finite differences of the float kernels.
 *
 * Reference files live in $ZT_BUILD_DIR/ref/kernels: <case>.meta ("key integer" lines),
 * <case>.<name>.f64 (raw float64) and <case>.<name>.i32 (raw int32). A missing or wrongly sized
 * file is a test failure (exit 1), never a skip: the fixture exists so numerics cannot silently
 * pass. Every allocation goes through kref_alloc and is released by kref_free_all (LeakSanitizer).
 */
#ifndef ZT_KERNELS_REF_H
#define ZT_KERNELS_REF_H

#include <math.h>   /* fabs, isfinite */
#include <stdint.h> /* int32_t */
#include <stdio.h>  /* FILE, fopen, fread, snprintf */
#include <stdlib.h> /* getenv, malloc, free, exit */
#include <string.h> /* strcmp, memcpy */

#include "zt_test.h" /* ZT_TEST_FAIL, ZT_CHECK_CLOSE, zt_test_finish */

#define KREF_MAX_ALLOCS 1024

static void *kref_allocs[KREF_MAX_ALLOCS];
static int kref_nallocs = 0;
static char kref_dir[4096];

static inline void kref_die(const char *what) {
    fprintf(stderr, "FAIL: %s\n", what);
    exit(EXIT_FAILURE);
}

static inline void *kref_alloc(size_t bytes) {
    if (kref_nallocs == KREF_MAX_ALLOCS) kref_die("kref_alloc: too many allocations");
    void *p = malloc(bytes ? bytes : 1);
    if (!p) kref_die("kref_alloc: out of memory");
    kref_allocs[kref_nallocs++] = p;
    return p;
}

static inline void kref_free_all(void) {
    for (int i = 0; i < kref_nallocs; i++) free(kref_allocs[i]);
    kref_nallocs = 0;
}

// locate the reference directory; the fixture writes DONE last, so its absence means it failed
static inline void kref_init(void) {
    const char *b = getenv("ZT_BUILD_DIR");
    if (!b || !*b) kref_die("ZT_BUILD_DIR is not set (run this test through ctest)");
    snprintf(kref_dir, sizeof kref_dir, "%s/ref/kernels", b);
    char path[4200];
    snprintf(path, sizeof path, "%s/DONE", kref_dir);
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "FAIL: %s missing: the ref_kernels fixture (tests/ref/kernels_ref.py under "
                        "ZT_TORCH_PYTHON) did not run or failed\n", path);
        exit(EXIT_FAILURE);
    }
    fclose(f);
}

static inline void *kref_read(const char *cas, const char *name, const char *ext, size_t n,
                              size_t esz) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s.%s.%s", kref_dir, cas, name, ext);
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "FAIL: cannot open reference %s\n", path);
        exit(EXIT_FAILURE);
    }
    void *p = kref_alloc(n * esz + 1);
    size_t got = fread(p, esz, n + 1, f); /* asking for one extra element detects a longer file */
    fclose(f);
    if (got != n) {
        fprintf(stderr, "FAIL: reference %s holds %zu values, expected %zu (shape mismatch with "
                        "kernels_ref.py?)\n", path, got, n);
        exit(EXIT_FAILURE);
    }
    return p;
}

// integer "key value" from <case>.meta
static inline int kref_meta(const char *cas, const char *key) {
    char path[4200], k[64];
    snprintf(path, sizeof path, "%s/%s.meta", kref_dir, cas);
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "FAIL: cannot open %s\n", path);
        exit(EXIT_FAILURE);
    }
    long v;
    while (fscanf(f, "%63s %ld", k, &v) == 2) {
        if (strcmp(k, key) == 0) {
            fclose(f);
            return (int)v;
        }
    }
    fclose(f);
    fprintf(stderr, "FAIL: %s has no key %s\n", path, key);
    exit(EXIT_FAILURE);
}

static inline double *kref_f64(const char *cas, const char *name, size_t n) {
    return (double *)kref_read(cas, name, "f64", n, sizeof(double));
}

static inline int32_t *kref_i32(const char *cas, const char *name, size_t n) {
    return (int32_t *)kref_read(cas, name, "i32", n, sizeof(int32_t));
}

// reference input as float (the file holds float32 values widened exactly to float64)
static inline float *kref_f32(const char *cas, const char *name, size_t n) {
    double *d = kref_f64(cas, name, n);
    float *f = (float *)kref_alloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) f[i] = (float)d[i];
    return f;
}

// the bit pattern of a float
static inline uint32_t kref_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float *kref_floats(size_t n, float fill) {
    float *f = (float *)kref_alloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) f[i] = fill;
    return f;
}

static inline float *kref_copy(const float *src, size_t n) {
    float *f = (float *)kref_alloc(n * sizeof(float));
    memcpy(f, src, n * sizeof(float));
    return f;
}

static inline double *kref_widen(const float *src, size_t n) {
    double *d = (double *)kref_alloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++) d[i] = (double)src[i];
    return d;
}

// |got - want| <= tol * max(1, |want|) elementwise (zt_test.h semantics)
#define KREF_CHECK(got, want, n, tol, label)                                                     \
    ZT_CHECK_CLOSE(kref_widen((got), (n)), (want), (n), (tol), (label))

// relative check |got - want| <= rtol * |want| + atol, for values far from 1 (Adam moments)
static inline int kref_check_rel_(const char *file, int line, const float *got,
                                  const double *want,
                           size_t n, double rtol, double atol, const char *label) {
    size_t bad = 0, at = 0;
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]);
        double lim = rtol * fabs(want[i]) + atol;
        double r = d / (fabs(want[i]) + atol);
        if (!(d <= lim)) bad++;
        if (r > worst || r != r) {
            worst = r;
            at = i;
        }
    }
    if (bad) {
        fprintf(stderr, "FAIL %s:%d: %s: %zu of %zu values off (rtol %g), worst rel %g at %zu "
                        "(got %.9g, want %.9g)\n", file, line, label, bad, n, rtol, worst, at,
                (double)got[at], want[at]);
        zt_test_failures++;
        return 0;
    }
    return 1;
}
#define KREF_CHECK_REL(got, want, n, rtol, atol, label)                                          \
    kref_check_rel_(__FILE__, __LINE__, got, want, n, rtol, atol, label)

// bitwise equality of two float arrays
static inline int kref_check_bits_(const char *file, int line, const float *a, const float *b,
                                   size_t n,
                            const char *label) {
    if (memcmp(a, b, n * sizeof(float)) != 0) {
        fprintf(stderr, "FAIL %s:%d: %s: not bit-identical\n", file, line, label);
        zt_test_failures++;
        return 0;
    }
    return 1;
}
#define KREF_CHECK_BITS(a, b, n, label) kref_check_bits_(__FILE__, __LINE__, a, b, n, label)

// ------------------------------------------------------------------------------------------------
// finite differences: loss(ctx) runs the float forward kernel on the current inputs and returns
// a scalar in double (typically sum dout * out). kref_check_fd perturbs x[i] for i = 0, stride,
// 2 stride, ... by +-eps (rounded to float; the actual step is used in the quotient) and compares
// (L+ - L-) / (x+ - x-) with the analytic gradient grad[i].
typedef double (*kref_loss_fn)(void *ctx);

static inline int kref_check_fd_(const char *file, int line, const float *grad, float *x,
                                 size_t n,
                          size_t stride, double eps, double tol, kref_loss_fn loss, void *ctx,
                          const char *label) {
    size_t m = (n + stride - 1) / stride;
    double *fd = (double *)kref_alloc(m * sizeof(double));
    double *an = (double *)kref_alloc(m * sizeof(double));
    size_t k = 0;
    for (size_t i = 0; i < n; i += stride, k++) {
        const float x0 = x[i];
        const float xp = (float)((double)x0 + eps);
        const float xm = (float)((double)x0 - eps);
        x[i] = xp;
        double lp = loss(ctx);
        x[i] = xm;
        double lm = loss(ctx);
        x[i] = x0;
        fd[k] = (lp - lm) / ((double)xp - (double)xm);
        an[k] = (double)grad[i];
    }
    char full[256];
    snprintf(full, sizeof full, "%s (finite differences, eps %g, every %zu-th input)", label, eps,
             stride);
    return zt_check_close_(file, line, an, fd, m, tol, full);
}
#define KREF_CHECK_FD(grad, x, n, stride, eps, tol, loss, ctx, label)                            \
    kref_check_fd_(__FILE__, __LINE__, grad, x, n, stride, eps, tol, loss, ctx, label)

// sum_i w[i] * out[i] in double: the scalar whose gradient w.r.t. out is w
static inline double kref_dot(const float *out, const float *w, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)w[i] * (double)out[i];
    return s;
}

#endif /* ZT_KERNELS_REF_H */
