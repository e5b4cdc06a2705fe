/*
 * io/zt_clock.h: the clocks zerotask times itself with.
 *
 * Layer: io/ (platform). zt_clock_ms is the monotonic wall clock (never steps back with the
 * time of day) in milliseconds; zt_clock_thread_cpu_us is the CPU time the calling thread has
 * used, in microseconds, or a negative value where the system cannot tell. Both are inline: a
 * traced task reads them twice per run.
 */
#ifndef ZT_CLOCK_H
#define ZT_CLOCK_H

#include <time.h> /* clock_gettime, CLOCK_MONOTONIC, CLOCK_THREAD_CPUTIME_ID */

static inline double zt_clock_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static inline double zt_clock_thread_cpu_us(void) {
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return -1.0;
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

#endif /* ZT_CLOCK_H */
