/*
 * io/zt_safetensors.h: safetensors reader and writer.
 *
 * Layer: io/. Format: 8-byte little-endian header length n, n bytes of JSON
 * {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {..}},
 * then the data. Reading validates the header (JSON, dtypes, offsets inside the file, sizes
 * matching shapes); F32, BF16 and F16 are read (converted to fp32).
 */
#ifndef ZT_SAFETENSORS_H
#define ZT_SAFETENSORS_H

#include <stddef.h>    /* size_t */
#include <stdint.h>    /* int64_t */
#include "zt_status.h" /* enum zt_status */

#ifdef __cplusplus
extern "C" {
#endif

#define ZT_ST_MAX_DIMS 8
#define ZT_ST_MAX_NAME 160

enum zt_st_dtype { ZT_ST_F32 = 0, ZT_ST_BF16 = 1, ZT_ST_F16 = 2 };

struct zt_st_tensor {
    char name[ZT_ST_MAX_NAME];
    enum zt_st_dtype dtype;
    int ndim;
    int64_t shape[ZT_ST_MAX_DIMS];
    size_t begin, end; /* byte offsets in the data section */
};

struct zt_safetensors {
    char path[512];
    int n;
    struct zt_st_tensor *t; /* [n], in the header's order */
    struct zt_st_tensor **by_name; /* [n] the same, sorted by name (zt_st_find) */
    const unsigned char *data; /* data section (inside the map) */
    void *map;
    size_t maplen;
    int finite_only; /* 0 after zt_st_open; set it to make zt_st_read_f32 refuse NaN and Inf */
};

/* Open and validate (ZT_ERR_IO if missing/unreadable, ZT_ERR_CKPT_CORRUPT for a bad header). */
enum zt_status zt_st_open(struct zt_safetensors *st, const char *path);
void zt_st_close(struct zt_safetensors *st);
/* NULL if absent. */
const struct zt_st_tensor *zt_st_find(const struct zt_safetensors *st, const char *name);
/* Read tensor `name` into dst as fp32, checking it exists and its shape equals shape[0..ndim-1];
 * a missing tensor or wrong shape is ZT_ERR_CKPT_CORRUPT naming the file, tensor, expected and
 * found shapes. With st->finite_only a NaN or Inf value is ZT_ERR_CKPT_CORRUPT naming the
 * tensor and the index of the first one (dst then holds the converted values). */
enum zt_status zt_st_read_f32(const struct zt_safetensors *st, const char *name, int ndim,
                              const int64_t *shape, float *dst);

/* One tensor to write (always F32). */
struct zt_st_entry {
    const char *name;
    int ndim;
    int64_t shape[ZT_ST_MAX_DIMS];
    const float *data;
};
/* Write all entries in the given order to path, atomically: a temporary file in the same
 * directory, fsync, rename; on any error the temporary is removed and no file is left at path
 * (an existing file at path is untouched). metadata_json may be NULL or a JSON object text of
 * string values for "__metadata__". */
enum zt_status zt_st_write_f32(const char *path, const struct zt_st_entry *e, int n,
                               const char *metadata_json);

/* As zt_st_write_f32, but an entry with data NULL gets its values from fill(ctx, i, dst) (dst:
 * the tensor's element count of floats), one tensor at a time, so only the largest tensor is in
 * memory. A fill's error stops the write (no file is left). */
typedef enum zt_status (*zt_st_fill_fn)(void *ctx, int i, float *dst);
enum zt_status zt_st_write_f32_stream(const char *path, const struct zt_st_entry *e, int n,
                                      const char *metadata_json, zt_st_fill_fn fill, void *ctx);
/* As zt_st_write_f32_stream; with to_bf16 (fp32 -> bf16 rounding, e.g. zt_dtype_from_f32 of
 * tasks/zt_tensor.h for ZT_DTYPE_BF16) every tensor is written as BF16 rounded by it, else F32. */
typedef void (*zt_st_narrow_fn)(uint16_t *dst, const float *src, size_t n);
enum zt_status zt_st_write_stream(const char *path, const struct zt_st_entry *e, int n,
                                  const char *metadata_json, zt_st_fill_fn fill, void *ctx,
                                  zt_st_narrow_fn to_bf16);

#ifdef __cplusplus
}
#endif
#endif /* ZT_SAFETENSORS_H */
