/*
 * graph/rng.c: the initializer's normal generator (splitmix64 + Box-Muller), independent of
 * libc so that every platform and rank draws the same weights from the same seed.
 *
 * Layer: graph/, behind the engine (engine_impl.h). Pure arithmetic.
 */
#include <math.h>        /* sqrt, log, cos, sin, M_PI */
#include "engine_impl.h" /* our prototypes */

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
/* a uniform double in (0, 1): the top 53 bits of a draw, centred in their interval */
static double uniform01(uint64_t *s) {
    return ((splitmix64(s) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

/* x[0..n) = normal(0, std), two values per pair of draws */
void zt_rng_normal(float *x, int64_t n, float std, uint64_t *s) {
    for (int64_t i = 0; i < n; i += 2) {
        double u1 = uniform01(s), u2 = uniform01(s);
        double r = sqrt(-2.0 * log(u1));
        x[i] = (float)(std * r * cos(2 * M_PI * u2));
        if (i + 1 < n) x[i + 1] = (float)(std * r * sin(2 * M_PI * u2));
    }
}

/* advance s past the draws of zt_rng_normal(x, n, ., s) without making them (splitmix64's state
 * moves by one constant per draw; Box-Muller draws two per pair of values) */
void zt_rng_skip_normal(int64_t n, uint64_t *s) {
    *s += (uint64_t)((n + 1) / 2) * 2u * 0x9E3779B97F4A7C15ull;
}
