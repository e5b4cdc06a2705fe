/*
 * io/zt_finite.h: finding the first NaN or Inf in float data.
 *
 * Layer: io/ (platform; no StarPU). Weights read from a file (io/safetensors.c) and weights
 * about to be exported (graph/weights.c) must be finite; both name the first value that is not.
 */
#ifndef ZT_FINITE_H
#define ZT_FINITE_H

#include <stddef.h> /* size_t */

#ifdef __cplusplus
extern "C" {
#endif

/* The index of the first NaN or Inf of x[0..n), or n when every value is finite. */
size_t zt_first_nonfinite(const float *x, size_t n);
/* "NaN", "Inf" or "-Inf" for a value that is not finite (for messages). */
const char *zt_nonfinite_name(float v);

#ifdef __cplusplus
}
#endif

#endif
