/*
 * tests/zt_test.h: check helpers shared by every test (llm.c's check_tensor, StarPU's skip code).
 */
#ifndef ZT_TEST_H
#define ZT_TEST_H

#include <dirent.h> /* opendir */
#include <math.h>   /* fabs */
#include <stdio.h>  /* fprintf */
#include <stdlib.h> /* exit */
#include <string.h> /* strstr */

#define ZT_TEST_SKIP 77

static int zt_test_failures = 0;

#define ZT_TEST_FAIL(...)                                                                        \
    do {                                                                                         \
        fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                     \
        fprintf(stderr, __VA_ARGS__);                                                            \
        fprintf(stderr, "\n");                                                                   \
        zt_test_failures++;                                                                      \
    } while (0)

#define ZT_TEST_TRUE(cond, ...)                                                                  \
    do {                                                                                         \
        if (!(cond)) ZT_TEST_FAIL(__VA_ARGS__);                                                  \
    } while (0)

/* Temporaries of the crash-safe writer (io/zt_file.h: "<name>.tmp-...") left in directory dir. */
static inline int zt_test_count_tmp(const char *dir) {
    int n = 0;
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));)
        if (strstr(e->d_name, ".tmp-")) n++;
    if (d) closedir(d);
    return n;
}

/* Compare n values elementwise with |a-b| <= tol * max(1, |b|); print max diff and first values.
 * Returns 1 if ok. */
static inline int zt_check_close_(const char *file, int line, const double *a, const double *b,
                                  size_t n, double tol, const char *label) {
    double maxd = 0;
    size_t at = 0, bad = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs(a[i] - b[i]);
        double s = fabs(b[i]) > 1 ? fabs(b[i]) : 1;
        if (!(d <= tol * s)) bad++;
        if (d > maxd || d != d) {
            maxd = d;
            at = i;
        }
    }
    if (bad) {
        fprintf(stderr, "FAIL %s:%d: %s: %zu of %zu values off (tol %g), max diff %g at %zu "
                        "(got %g, want %g)\n",
                file, line, label, bad, n, tol, maxd, at, a[at], b[at]);
        zt_test_failures++;
        return 0;
    }
    return 1;
}
#define ZT_CHECK_CLOSE(a, b, n, tol, label) zt_check_close_(__FILE__, __LINE__, a, b, n, tol, label)

/* End of main: print the plain result line and return the exit status. */
static inline int zt_test_finish(const char *name) {
    if (zt_test_failures) {
        fprintf(stderr, "%s: %d check(s) failed\n", name, zt_test_failures);
        return EXIT_FAILURE;
    }
    fprintf(stderr, "%s: ok\n", name);
    return EXIT_SUCCESS;
}

#endif /* ZT_TEST_H */
