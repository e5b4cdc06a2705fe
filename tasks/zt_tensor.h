/*
 * tasks/zt_tensor.h: opaque tensors: one contiguous host buffer split into row blocks, each block
 * a StarPU vector handle.
 *
 * Layer: tasks/. A task names a whole tensor (all its blocks) or one block; StarPU derives the
 * dependencies from the access modes on the blocks, so tasks on different blocks of a tensor run
 * in parallel. Blocks never overlap, and the same memory is never registered twice.
 */
#ifndef ZT_TENSOR_H
#define ZT_TENSOR_H

#include <stddef.h>    /* size_t */
#include <stdint.h>    /* int64_t */
#include <starpu.h>    /* starpu_data_handle_t (for zt_tensor_handle) */
#include "zt_status.h" /* enum zt_status */

#ifdef __cplusplus
extern "C" {
#endif

typedef struct zt_tensor *zt_tensor_t;

/* What a tensor's elements are. Tasks compute in fp32: they read bf16/fp16 tensors widened to
 * fp32 and store their results rounded to nearest even (tasks/dispatch.c), so every task kind
 * accepts 16-bit floating tensors wherever it takes fp32 ones. RAW: anything else (int32
 * tokens, doubles, bytes), passed as is. */
enum zt_dtype { ZT_DTYPE_F32 = 0, ZT_DTYPE_BF16, ZT_DTYPE_F16, ZT_DTYPE_RAW };
/* "f32", "bf16", "f16", "raw" */
const char *zt_dtype_name(enum zt_dtype d);
/* bytes of one element: 4, 2, 2 (0 for RAW) */
size_t zt_dtype_size(enum zt_dtype d);
/* n fp32 values into dst of type d, rounded to nearest even (F32: copied), and back (exact).
 * RAW is not a float type: nothing is done. dst and src must not overlap. */
void zt_dtype_from_f32(enum zt_dtype d, void *dst, const float *src, size_t n);
void zt_dtype_to_f32(enum zt_dtype d, float *dst, const void *src, size_t n);

/* Create a tensor of rows x cols elements of elemsize bytes, split into nblk row blocks.
 * ptr: memory the caller owns and keeps alive until zt_tensor_free (NULL: the tensor allocates
 * it, 4 KiB-aligned and zero-filled). blk_rows: rows of each block (NULL: as even as possible).
 * Owner: the caller, with zt_tensor_free. ZT_ERR_INVALID for bad sizes, ZT_ERR_NOMEM. */
enum zt_status zt_tensor_init(zt_tensor_t *t, const char *name, void *ptr, int64_t rows,
                              int64_t cols, size_t elemsize, int nblk, const int64_t *blk_rows);
/* The same with an element type: elemsize 4 for F32, 2 for BF16/F16 (zt_tensor_init makes F32
 * tensors of elemsize 4 and RAW ones of any other size). */
enum zt_status zt_tensor_init_dtype(zt_tensor_t *t, const char *name, void *ptr, int64_t rows,
                                    int64_t cols, enum zt_dtype dtype, int nblk,
                                    const int64_t *blk_rows);
/* Page-lock host memory for DMA to and from the GPUs (starpu_memory_pin: cudaHostRegister), as
 * DeepSpeed pins its offload buffers, so that StarPU's copies between a tensor's host blocks and
 * a CUDA worker run asynchronously on its streams, overlapped with compute. Only in a CUDA build
 * (-DZT_USE_CUDA=ON) whose process has CUDA workers; returns 1 when pinned (then call
 * zt_host_unpin before freeing p), 0 when not: no CUDA worker, or the driver refused (a warning
 * once; the memory stays pageable and everything still works, the copies just go synchronous).
 * Tensors that allocate their memory pin it themselves; the engine pins its flat parameter,
 * gradient and swap buffers. */
int zt_host_pin(void *p, size_t bytes);
void zt_host_unpin(void *p, size_t bytes);

/* Unregister every block (waits for the tasks using them), then free owned memory. */
void zt_tensor_free(zt_tensor_t t);

const char *zt_tensor_name(zt_tensor_t t);
int64_t zt_tensor_rows(zt_tensor_t t);
int64_t zt_tensor_cols(zt_tensor_t t);
int64_t zt_tensor_numel(zt_tensor_t t);
size_t zt_tensor_elemsize(zt_tensor_t t);
enum zt_dtype zt_tensor_dtype(zt_tensor_t t);
int zt_tensor_nblk(zt_tensor_t t);
int64_t zt_tensor_blk_row0(zt_tensor_t t, int blk); /* first row of block blk */
int64_t zt_tensor_blk_rows(zt_tensor_t t, int blk);
/* Mark a one-block BF16 tensor [rows, cols] over the caller's memory, before any task uses it,
 * as holding a weight packed for the bf16 engines (zt_bf16_tiles_pack:
 * zt_bf16_tiles_elems(rows, cols) values, in their tile layout; its StarPU handle then covers
 * all of them): the inference products (zt_task_matmul_forward with fp32 rows,
 * zt_task_matmul_cols) read it without packing it again, and the embedding reads its columns
 * from it; no other task takes such a tensor. ZT_ERR_INVALID for another tensor. */
enum zt_status zt_tensor_set_bf16_tiles(zt_tensor_t t);
int zt_tensor_bf16_tiles(zt_tensor_t t);
/* Mark a one-block tensor [rows, cols] (not packed for the bf16 engines) as a weight stored in
 * column panels of `width` columns (the last one narrower): panel p, columns [p * width,
 * p * width + w_p), lies row-major [rows, w_p] at element rows * p * width
 * (zt_col_panels_from_f32 lays one out), so that a product's column part reads one contiguous
 * run. Only forward products of fp32 rows read it (zt_task_matmul_forward, zt_task_matmul_cols,
 * whose parts must then be whole panels). ZT_ERR_INVALID for another tensor or width. */
enum zt_status zt_tensor_set_col_panels(zt_tensor_t t, int64_t width);
int64_t zt_tensor_col_panels(zt_tensor_t t); /* the panels' width; 0: row-major */
/* dst (dt, rows x cols in column panels of `width`) = src (fp32, row-major, rows x cols) */
void zt_col_panels_from_f32(enum zt_dtype dt, void *dst, const float *src, int64_t rows,
                            int64_t cols, int64_t width);
/* The bytes of block blk's memory (its StarPU handle's): its rows x cols elements, or the
 * packed values of a packed weight. */
int64_t zt_tensor_blk_bytes(zt_tensor_t t, int blk);
/* Host memory of the whole tensor: read or write it only between acquire and release (or
 * before any task on it was submitted). */
void *zt_tensor_data(zt_tensor_t t);
/* Raw StarPU handle of block blk, for users who write their own codelets. */
starpu_data_handle_t zt_tensor_handle(zt_tensor_t t, int blk);

/* Wait until every submitted task on the tensor is done and make the host copy valid;
 * write != 0 also allows the caller to modify it. Pair with zt_tensor_release. */
enum zt_status zt_tensor_acquire(zt_tensor_t t, int write);
void zt_tensor_release(zt_tensor_t t);
/* Hint that the tensor is not used on a device again soon: with device (CUDA, OpenCL) workers,
 * StarPU writes its device copies back to host memory and frees them, in submission order
 * (starpu_data_wont_use); on a run with CPU workers only, where host memory is its only place,
 * nothing is submitted. */
void zt_tensor_wont_use(zt_tensor_t t);

#ifdef __cplusplus
}
#endif
#endif /* ZT_TENSOR_H */
