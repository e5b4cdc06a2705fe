/*
 * io/finite.c: the first NaN or Inf in float data (zt_finite.h).
 *
 * Layer: io/ (platform; no StarPU). The scan is branch-free over each chunk, so the compiler
 * vectorises it; the exact index is searched only in a chunk that holds one.
 */
#include "zt_finite.h"

#include <math.h>   /* isfinite, isnan */
#include <stdint.h> /* uint32_t */
#include <string.h> /* memcpy */

size_t zt_first_nonfinite(const float *x, size_t n) {
    enum { CHUNK = 4096 };
    for (size_t i0 = 0; i0 < n; i0 += CHUNK) {
        size_t i1 = n - i0 < CHUNK ? n : i0 + CHUNK;
        uint32_t any = 0;
        for (size_t i = i0; i < i1; i++) {
            uint32_t bits;
            memcpy(&bits, &x[i], 4);
            any |= (bits & 0x7f800000u) == 0x7f800000u; /* exponent all ones: Inf or NaN */
        }
        for (size_t i = i0; any && i < i1; i++)
            if (!isfinite(x[i])) return i;
    }
    return n;
}

const char *zt_nonfinite_name(float v) { return isnan(v) ? "NaN" : v > 0 ? "Inf" : "-Inf"; }
