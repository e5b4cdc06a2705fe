/*
 * kernels/cuda/kern_math.cuh: zt_kern_expf (kernels/cpu/kern_math.h) on the device, operation
 * for operation and each rounded on its own, so it returns the CPU polynomial's bits (GELU,
 * cross-entropy, attention's softmax); the CPU's 8-lane summation tree over a warp's lanes; and
 * the setup of a cuBLAS call on a caller's handle and stream.
 */
#ifndef ZT_KERN_MATH_CUH
#define ZT_KERN_MATH_CUH

#include <cublas_v2.h>
#include <stdint.h>

__device__ static inline float zt_expf(float x) {
    float t = __fadd_rn(__fmul_rn(x, 1.44269504088896341f), 12582912.0f);
    float fx = __fsub_rn(t, 12582912.0f);
    int32_t n = __float_as_int(t) - 0x4B400000;
    float r = __fsub_rn(x, __fmul_rn(fx, 0.693359375f));
    r = __fsub_rn(r, __fmul_rn(fx, -2.12194440e-4f));
    float p = 1.9875691500e-4f;
    p = __fadd_rn(__fmul_rn(p, r), 1.3981999507e-3f);
    p = __fadd_rn(__fmul_rn(p, r), 8.3334519073e-3f);
    p = __fadd_rn(__fmul_rn(p, r), 4.1665795894e-2f);
    p = __fadd_rn(__fmul_rn(p, r), 1.6666665459e-1f);
    p = __fadd_rn(__fmul_rn(p, r), 5.0000001201e-1f);
    p = __fadd_rn(__fadd_rn(__fmul_rn(p, __fmul_rn(r, r)), r), 1.0f);
    n = n < -126 ? -126 : n;
    n = n > 127 ? 127 : n;
    return __fmul_rn(p, __int_as_float((n + 127) << 23));
}

/* the row's 8 lane partials (8 consecutive threads, lane = threadIdx.x % 8) added in the CPU
 * kernels' tree order ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)); every lane gets the sum */
__device__ static inline float zt_lanes_sum8(float acc) {
    float l[8];
#pragma unroll
    for (int k = 0; k < 8; k++) l[k] = __shfl_sync(0xffffffffu, acc, k, 8);
    return __fadd_rn(__fadd_rn(__fadd_rn(l[0], l[1]), __fadd_rn(l[2], l[3])),
                     __fadd_rn(__fadd_rn(l[4], l[5]), __fadd_rn(l[6], l[7])));
}

/* bind handle (a cublasHandle_t) to stream in true fp32 (CUBLAS_PEDANTIC_MATH: no TF32);
 * 0 or the cublasStatus_t */
static inline int zt_cublas_prepare(void *handle, void *stream) {
    cublasHandle_t h = (cublasHandle_t)handle;
    cublasStatus_t st = cublasSetStream(h, (cudaStream_t)stream);
    if (st == CUBLAS_STATUS_SUCCESS) st = cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH);
    return (int)st;
}

#endif /* ZT_KERN_MATH_CUH */
