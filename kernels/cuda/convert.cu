/*
 * kernels/cuda/convert.cu: fp32 <-> bf16/fp16 over arrays on the device, the bits of
 * kernels/cpu/convert.c (the element converters and their rules are in convert.cuh).
 */
#include <cuda_runtime.h>
#include "zt_kernels_cuda.h"
#include "convert.cuh" /* the converters on the device */

#define THREADS 256

static unsigned blocks_for(size_t n) {
    size_t b = (n + THREADS - 1) / THREADS;
    return (unsigned)(b > 65535u * 32u ? 65535u * 32u : b); /* grid-stride loops cover the rest */
}

/* d[i] = F(s[i]), grid-stride */
template <typename D, typename S, D (*F)(S)>
__global__ static void k_map(D *d, const S *s, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        d[i] = F(s[i]);
}

#define LAUNCH(kernel, dst, src, n, stream)                                                      \
    do {                                                                                         \
        if ((n) == 0) return 0;                                                                  \
        kernel<<<blocks_for(n), THREADS, 0, (cudaStream_t)(stream)>>>(dst, src, n);             \
        return (int)cudaGetLastError();                                                          \
    } while (0)

extern "C" int zt_cuda_f32_to_bf16(uint16_t *dst, const float *src, size_t n, void *stream) {
    LAUNCH((k_map<uint16_t, float, to_bf16>), dst, src, n, stream);
}
extern "C" int zt_cuda_bf16_to_f32(float *dst, const uint16_t *src, size_t n, void *stream) {
    LAUNCH((k_map<float, uint16_t, from_bf16>), dst, src, n, stream);
}
extern "C" int zt_cuda_f32_to_f16(uint16_t *dst, const float *src, size_t n, void *stream) {
    LAUNCH((k_map<uint16_t, float, to_f16>), dst, src, n, stream);
}
extern "C" int zt_cuda_f16_to_f32(float *dst, const uint16_t *src, size_t n, void *stream) {
    LAUNCH((k_map<float, uint16_t, from_f16>), dst, src, n, stream);
}
