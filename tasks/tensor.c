/*
 * tasks/tensor.c: opaque tensors = one host buffer registered as row-block StarPU vectors.
 *
 * Layer: tasks/. Owner rule (redis style): zt_tensor_init creates, zt_tensor_free destroys; free
 * unregisters every handle before freeing the memory (StarPU's vector_scal order).
 */
#include <stdlib.h>      /* posix_memalign, calloc */
#include <string.h>      /* memset, snprintf */
#include <starpu.h>      /* starpu_vector_data_register */
#include "tasks_impl.h"  /* zt_tensor API */
#include "zt_kernels.h"  /* 16-bit conversions */
#include "zt_log.h"      /* ZT_LOG_W */

struct zt_tensor {
    char name[96];
    unsigned char *ptr;
    int owns;   /* ptr was allocated here (freed by zt_tensor_free) */
    int pinned; /* owned memory page-locked for the GPUs (zt_host_pin) */
    int64_t rows, cols;
    size_t elemsize;
    enum zt_dtype dtype;
    int bf16_tiles; /* a bf16 weight in the bf16 engines' tile layout (zt_tensor_set_bf16_tiles) */
    int64_t panel_cols; /* a weight in column panels of this width (zt_tensor_set_col_panels) */
    int nblk;
    int64_t *first_row;           /* [nblk+1]: block j is rows [first_row[j], first_row[j+1]) */
    starpu_data_handle_t *handle; /* [nblk]: one StarPU vector per block */
};

enum zt_status zt_tensor_init(zt_tensor_t *out, const char *name, void *ptr, int64_t rows,
                              int64_t cols, size_t elemsize, int nblk, const int64_t *blk_rows) {
    *out = NULL;
    if (rows <= 0 || cols <= 0 || elemsize == 0 || nblk <= 0 || nblk > rows)
        return zt_error_set(ZT_ERR_INVALID, "tensor %s: bad shape %lld x %lld in %d blocks",
                            name, (long long)rows, (long long)cols, nblk);
    struct zt_tensor *t = calloc(1, sizeof *t);
    if (!t) return zt_error_set(ZT_ERR_NOMEM, "tensor %s: out of memory", name);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->rows = rows;
    t->cols = cols;
    t->elemsize = elemsize;
    t->dtype = elemsize == 4 ? ZT_DTYPE_F32 : ZT_DTYPE_RAW;
    t->nblk = nblk;
    t->first_row = calloc((size_t)nblk + 1, sizeof *t->first_row);
    t->handle = calloc((size_t)nblk, sizeof *t->handle);
    if (!t->first_row || !t->handle) goto nomem;
    for (int j = 0; j < nblk; j++) {
        int64_t r = blk_rows ? blk_rows[j] : (rows * (j + 1)) / nblk - (rows * j) / nblk;
        if (r <= 0 || r * cols > UINT32_MAX) {
            free(t->first_row);
            free(t->handle);
            free(t);
            return zt_error_set(ZT_ERR_INVALID, "tensor %s: block %d has %lld rows of %lld", name,
                                j, (long long)r, (long long)cols);
        }
        t->first_row[j + 1] = t->first_row[j] + r;
    }
    if (t->first_row[nblk] != rows) {
        long long sum = (long long)t->first_row[nblk];
        free(t->first_row);
        free(t->handle);
        free(t);
        return zt_error_set(ZT_ERR_INVALID, "tensor %s: block rows sum to %lld, not %lld", name,
                            sum, (long long)rows);
    }
    size_t bytes = (size_t)rows * (size_t)cols * elemsize;
    if (ptr) {
        t->ptr = ptr;
    } else {
        void *p = NULL;
        /* 4 KiB alignment: O_DIRECT swap and vector loads both want it (DESIGN.md) */
        if (posix_memalign(&p, 4096, bytes ? bytes : 1) != 0) goto nomem;
        memset(p, 0, bytes);
        t->ptr = p;
        t->owns = 1;
        t->pinned = zt_host_pin(p, bytes);
    }
    for (int j = 0; j < nblk; j++) {
        uintptr_t p = (uintptr_t)(t->ptr + (size_t)t->first_row[j] * (size_t)cols * elemsize);
        starpu_vector_data_register(&t->handle[j], STARPU_MAIN_RAM, p,
                                    (uint32_t)((t->first_row[j + 1] - t->first_row[j]) * cols),
                                    elemsize);
    }
    *out = t;
    return ZT_OK;
nomem:
    free(t->first_row);
    free(t->handle);
    free(t);
    return zt_error_set(ZT_ERR_NOMEM, "tensor %s: cannot allocate %lld x %lld x %zu bytes", name,
                        (long long)rows, (long long)cols, elemsize);
}

const char *zt_dtype_name(enum zt_dtype d) {
    static const char *const n[] = {"f32", "bf16", "f16", "raw"};
    return d >= ZT_DTYPE_F32 && d <= ZT_DTYPE_RAW ? n[d] : "?";
}

size_t zt_dtype_size(enum zt_dtype d) {
    return d == ZT_DTYPE_F32 ? 4 : d == ZT_DTYPE_BF16 || d == ZT_DTYPE_F16 ? 2 : 0;
}

void zt_dtype_from_f32(enum zt_dtype d, void *dst, const float *src, size_t n) {
    if (d == ZT_DTYPE_BF16) zt_kern_f32_to_bf16(dst, src, n);
    else if (d == ZT_DTYPE_F16) zt_kern_f32_to_f16(dst, src, n);
    else if (d == ZT_DTYPE_F32 && n) memcpy(dst, src, n * sizeof(float));
}

void zt_dtype_to_f32(enum zt_dtype d, float *dst, const void *src, size_t n) {
    if (d == ZT_DTYPE_BF16) zt_kern_bf16_to_f32(dst, src, n);
    else if (d == ZT_DTYPE_F16) zt_kern_f16_to_f32(dst, src, n);
    else if (d == ZT_DTYPE_F32 && n) memcpy(dst, src, n * sizeof(float));
}

enum zt_status zt_tensor_init_dtype(zt_tensor_t *t, const char *name, void *ptr, int64_t rows,
                                    int64_t cols, enum zt_dtype dtype, int nblk,
                                    const int64_t *blk_rows) {
    *t = NULL;
    if (zt_dtype_size(dtype) == 0)
        return zt_error_set(ZT_ERR_INVALID, "tensor %s: dtype %s has no fixed size (use "
                                            "zt_tensor_init)", name, zt_dtype_name(dtype));
    ZT_CHECK(zt_tensor_init(t, name, ptr, rows, cols, zt_dtype_size(dtype), nblk, blk_rows));
    (*t)->dtype = dtype;
    return ZT_OK;
}

void zt_tensor_free(zt_tensor_t t) {
    if (!t) return;
    for (int j = 0; j < t->nblk; j++)
        if (t->handle[j]) starpu_data_unregister(t->handle[j]);
    if (t->pinned) zt_host_unpin(t->ptr, (size_t)t->rows * (size_t)t->cols * t->elemsize);
    if (t->owns) free(t->ptr);
    free(t->first_row);
    free(t->handle);
    free(t);
}

int zt_host_pin(void *p, size_t bytes) {
#ifdef ZT_USE_CUDA
    static int warned;
    if (!p || bytes == 0 || starpu_cuda_worker_get_count() == 0) return 0;
    if (starpu_memory_pin(p, bytes) == 0) return 1;
    if (!warned) {
        warned = 1;
        ZT_LOG_W("could not page-lock %zu bytes of host memory for the GPU (cudaHostRegister); "
                 "host-device copies of such memory will not overlap compute", bytes);
    }
#else
    (void)p;
    (void)bytes;
#endif
    return 0;
}

void zt_host_unpin(void *p, size_t bytes) {
#ifdef ZT_USE_CUDA
    starpu_memory_unpin(p, bytes);
#else
    (void)p;
    (void)bytes;
#endif
}

const char *zt_tensor_name(zt_tensor_t t) { return t->name; }
int64_t zt_tensor_rows(zt_tensor_t t) { return t->rows; }
int64_t zt_tensor_cols(zt_tensor_t t) { return t->cols; }
int64_t zt_tensor_numel(zt_tensor_t t) { return t->rows * t->cols; }
size_t zt_tensor_elemsize(zt_tensor_t t) { return t->elemsize; }
enum zt_dtype zt_tensor_dtype(zt_tensor_t t) { return t->dtype; }
enum zt_status zt_tensor_set_bf16_tiles(zt_tensor_t t) {
    if (t->nblk != 1 || t->dtype != ZT_DTYPE_BF16 || t->owns)
        return zt_error_set(ZT_ERR_INVALID, "tensor %s: only a one-block bf16 tensor over the "
                            "caller's memory holds a packed weight", t->name);
    /* its one StarPU vector covers the packed values (padded to 32 rows and columns), which
     * the swaps and any copy StarPU makes must move whole; no task has used it yet */
    size_t n = zt_kern_bf16_packed_elems((int)t->rows, (int)t->cols);
    if (n > UINT32_MAX)
        return zt_error_set(ZT_ERR_INVALID, "tensor %s: %zu packed values", t->name, n);
    starpu_data_unregister(t->handle[0]);
    starpu_vector_data_register(&t->handle[0], STARPU_MAIN_RAM, (uintptr_t)t->ptr, (uint32_t)n,
                                t->elemsize);
    t->bf16_tiles = 1;
    return ZT_OK;
}
int zt_tensor_bf16_tiles(zt_tensor_t t) { return t && t->bf16_tiles; }

enum zt_status zt_tensor_set_col_panels(zt_tensor_t t, int64_t width) {
    if (t->nblk != 1 || t->bf16_tiles || width < 1 || width > t->cols)
        return zt_error_set(ZT_ERR_INVALID, "tensor %s: column panels of %lld columns: expected "
                            "a one-block tensor not packed for the bf16 engine and 1 to %lld "
                            "columns", t->name, (long long)width, (long long)t->cols);
    t->panel_cols = width;
    return ZT_OK;
}
int64_t zt_tensor_col_panels(zt_tensor_t t) { return t ? t->panel_cols : 0; }

void zt_col_panels_from_f32(enum zt_dtype dt, void *dst, const float *src, int64_t rows,
                            int64_t cols, int64_t width) {
    const size_t es = zt_dtype_size(dt);
    for (int64_t o0 = 0; o0 < cols; o0 += width) {
        const int64_t w = cols - o0 < width ? cols - o0 : width;
        char *panel = (char *)dst + (size_t)(rows * o0) * es;
        for (int64_t k = 0; k < rows; k++)
            zt_dtype_from_f32(dt, panel + (size_t)(k * w) * es, src + k * cols + o0, (size_t)w);
    }
}

int64_t zt_tensor_blk_bytes(zt_tensor_t t, int blk) {
    if (t->bf16_tiles)
        return (int64_t)zt_kern_bf16_packed_elems((int)t->rows, (int)t->cols) * 2;
    return zt_tensor_blk_rows(t, blk) * t->cols * (int64_t)t->elemsize;
}
int zt_tensor_nblk(zt_tensor_t t) { return t->nblk; }
int64_t zt_tensor_blk_row0(zt_tensor_t t, int blk) { return t->first_row[blk]; }
int64_t zt_tensor_blk_rows(zt_tensor_t t, int blk) {
    return t->first_row[blk + 1] - t->first_row[blk];
}
void *zt_tensor_data(zt_tensor_t t) { return t->ptr; }
starpu_data_handle_t zt_tensor_handle(zt_tensor_t t, int blk) {
    ZT_ASSERT_MSG(blk >= 0 && blk < t->nblk, "tensor %s has no block %d", t->name, blk);
    return t->handle[blk];
}

enum zt_status zt_tensor_acquire(zt_tensor_t t, int write) {
    for (int j = 0; j < t->nblk; j++) {
        int ret = starpu_data_acquire(t->handle[j], write ? STARPU_RW : STARPU_R);
        if (ret != 0) {
            while (j-- > 0) starpu_data_release(t->handle[j]);
            return zt_error_set(ZT_ERR_RUNTIME, "tensor %s: acquire failed (%d)", t->name, ret);
        }
    }
    return ZT_OK;
}

void zt_tensor_release(zt_tensor_t t) {
    for (int j = 0; j < t->nblk; j++) starpu_data_release(t->handle[j]);
}

void zt_tensor_wont_use(zt_tensor_t t) {
    if (starpu_worker_get_count() == starpu_cpu_worker_get_count()) return;
    for (int j = 0; j < t->nblk; j++) starpu_data_wont_use(t->handle[j]);
}

enum zt_status zt_check_blk(const char *fn, zt_tensor_t t, int blk) {
    if (!t) return zt_error_set(ZT_ERR_INVALID, "%s: missing tensor", fn);
    if (blk < 0 || blk >= t->nblk)
        return zt_error_set(ZT_ERR_INVALID, "%s: tensor %s has %d blocks, no block %d", fn,
                            t->name, t->nblk, blk);
    return ZT_OK;
}

enum zt_status zt_check_same_blocks(const char *fn, zt_tensor_t a, zt_tensor_t b) {
    if (!a || !b) return zt_error_set(ZT_ERR_INVALID, "%s: missing tensor", fn);
    if (a->nblk != b->nblk)
        return zt_error_set(ZT_ERR_INVALID, "%s: tensors %s and %s have %d and %d blocks", fn,
                            a->name, b->name, a->nblk, b->nblk);
    return ZT_OK;
}
