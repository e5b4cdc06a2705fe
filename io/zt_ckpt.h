/*
 * io/zt_ckpt.h: checkpoint shard files (one per rank per tag): the writer (io/ckpt.c) and the
 * reader (io/ckpt_read.c); records are checksummed with CRC32C (io/zt_crc32c.h).
 *
 * Layer: io/. No StarPU, no engine: a shard is a list of fp32 records, each a row range of one
 * named tensor in one role (parameter, exp_avg, exp_avg_sq). Layout (docs/checkpoints.md):
 *
 *   bytes 0..7    magic "ZTSHARD1"
 *   bytes 8..11   header length H (little-endian u32)
 *   bytes 12..15  CRC32C of the header
 *   16..16+H      header JSON: {"format": 1, "run_id": "<16 hex>", "step": s, "rank": r,
 *                 "world_size": n, "records": [{"name", "role", "rows", "cols", "row0", "row1",
 *                 "offset", "bytes", "crc32c"}, ...]} (run_id and step: the checkpoint the
 *                 shard belongs to; absent in shards written without an identity)
 *   then, from the next 4096 boundary, each record's data (row-major fp32, little-endian) at
 *   its offset (relative to the file start), each with its own CRC32C in the header.
 *
 * A writer is given every record up front (so the header's size is known), streams the data,
 * then rewrites the header with the CRCs and commits the file atomically (io/zt_file.h): a
 * crash or a full disk leaves no partial shard under the final name.
 */
#ifndef ZT_CKPT_H
#define ZT_CKPT_H

#include <stddef.h>    /* size_t */
#include <stdint.h>    /* int64_t, uint32_t */
#include "zt_file.h"   /* struct zt_afile */
#include "zt_status.h" /* enum zt_status */

struct zt_aio; /* io/zt_aio.h */

#ifdef __cplusplus
extern "C" {
#endif

#define ZT_SHARD_FORMAT 1
#define ZT_SHARD_MAX_NAME 160

enum zt_shard_role { ZT_ROLE_PARAM = 0, ZT_ROLE_EXP_AVG = 1, ZT_ROLE_EXP_AVG_SQ = 2 };
const char *zt_shard_role_name(int role); /* "param", "exp_avg", "exp_avg_sq" */

struct zt_shard_rec {
    char name[ZT_SHARD_MAX_NAME];
    int role;
    int64_t rows, cols;   /* the whole tensor's shape (rows x cols) */
    int64_t row0, row1;   /* the rows this record holds */
    int64_t offset, bytes; /* in the file */
    uint32_t crc;          /* CRC32C of the record's bytes */
};

/* The checkpoint a shard belongs to, recorded in its header so that a shard copied in from
 * another checkpoint (another step, another run) is refused: the run's id (random, made at the
 * run's first save and carried across resumes; 0: none recorded), the tag's step, the writer's
 * rank and world size. */
struct zt_shard_id {
    uint64_t run_id;
    int64_t step;
    int rank, world;
};

/* A run id as meta.json and the shard headers write it: exactly 16 hex digits (no sign, no
 * blanks, no prefix), not all zero. Returns 0 with *id set, or -1. */
int zt_run_id_parse(const char *hex, uint64_t *id);

/* The largest tensor a shard record or meta.json may describe, in elements (and so the largest
 * size of one dimension): products of sizes up to it, and their bytes, fit int64_t. */
#define ZT_CKPT_MAX_ELEMENTS ((int64_t)1 << 40)

struct zt_shard_writer {
    struct zt_afile f;
    int n;                    /* records */
    int cur;                  /* the record zt_shard_append is writing */
    struct zt_shard_rec *rec; /* [n], owned */
    int64_t cur_bytes;        /* bytes of record cur written */
    int rank, world;
    uint64_t run_id;          /* 0: the header records no run id and step */
    int64_t step;
    int64_t header_bytes;     /* reserved for the header (data starts here) */
    int64_t *put_bytes;       /* [n] bytes of each record written by zt_shard_put */
    int dfd;                  /* the temporary opened O_DIRECT (zt_shard_direct), or -1 */
    struct zt_aio *aio;       /* borrowed (io/zt_aio.h): moves the direct writes */
};

/* Records streamed through an aligned staging buffer that mirrors the file: checksummed while
 * copied, written with O_DIRECT through aio (the page cache is bypassed: no dirty-page
 * throttling, and the copy is the only CPU work besides the CRC), or with zt_shard_put when the
 * file system refuses O_DIRECT. Records that follow each other in the file share the buffer (the
 * padding between them is zeroed), so small records go out in one write, not one each; a record
 * that does not follow the staged ones flushes them first. One thread at a time per stream. */
struct zt_shard_stream {
    struct zt_shard_writer *w;
    int i;                    /* the record being staged, or -1 */
    char *buf;                /* 4096-aligned staging buffer of cap bytes */
    int64_t cap, fill, at;    /* fill: staged bytes; at: bytes of record i staged or written */
    int64_t base;             /* file offset of buf[0] */
    /* optional: takes a full buffer (len bytes, 4096-padded, for file offset off) to write
     * later and puts an empty one of the same size in *buf; NULL: written here and now */
    enum zt_status (*flush)(void *ctx, char **buf, int64_t len, int64_t off);
    void *ctx;
};

/* Create path's temporary and reserve the header for recs[0..n) (offsets are assigned here);
 * the header records id: rank and world size, and the run id and step when id->run_id != 0
 * (0: a shard without an identity, as written before run ids). */
enum zt_status zt_shard_create(struct zt_shard_writer *w, const char *path,
                               const struct zt_shard_id *id, const struct zt_shard_rec *recs,
                               int n);
/* Append nfloats of record w->cur's data (records in order; a record may come in pieces). */
enum zt_status zt_shard_append(struct zt_shard_writer *w, const float *data, int64_t nfloats);
/* Write the next nfloats of record i at its place in the file (pwrite): a record's pieces come in
 * order, from one thread at a time; different records may be written from different threads at
 * once. Either this or zt_shard_append for one writer. On failure the error is set (this thread)
 * and the writer must be aborted by its owner. */
enum zt_status zt_shard_put(struct zt_shard_writer *w, int i, const float *data, int64_t nfloats);
/* Writes go O_DIRECT through aio from now on (1), or stay buffered (0: no aio, or the file
 * system refuses O_DIRECT). */
int zt_shard_direct(struct zt_shard_writer *w, struct zt_aio *aio);
/* Begin a stream with a 4096-aligned buffer of cap (>= 4096) bytes; for each record: record
 * (start record i), add its data in order, done (the record must be complete); end writes what
 * is staged. Errors are set on this thread. */
void zt_shard_stream_begin(struct zt_shard_stream *st, struct zt_shard_writer *w, char *buf,
                           int64_t cap);
enum zt_status zt_shard_stream_record(struct zt_shard_stream *st, int i);
enum zt_status zt_shard_stream_add(struct zt_shard_stream *st, const float *data,
                                   int64_t nfloats);
enum zt_status zt_shard_stream_done(struct zt_shard_stream *st);
enum zt_status zt_shard_stream_end(struct zt_shard_stream *st);
/* Every record complete: write the header with the CRCs, fsync, rename into place. */
enum zt_status zt_shard_commit(struct zt_shard_writer *w);
/* Give up: remove the temporary (the error is already set). Returns the given status. */
enum zt_status zt_shard_abort(struct zt_shard_writer *w, enum zt_status rc);

struct zt_shard {
    char path[512];
    int fd;
    int rank, world, n;
    uint64_t run_id;          /* from the header; 0: it records none (written without one) */
    int64_t step;             /* the header's step (-1 when it records no run id) */
    struct zt_shard_rec *rec; /* [n] */
    int dfd;                  /* opened O_DIRECT for aio (zt_shard_set_direct), or -1 */
    struct zt_aio *aio;       /* borrowed: moves large reads through dfd, or NULL */
};

/* Open and validate a shard: magic, format, header CRC, every record inside the file. */
enum zt_status zt_shard_open(struct zt_shard *s, const char *path);
/* Read record i (all of it) into dst, checking its CRC32C. With an aio engine attached
 * (zt_shard_set_direct) and dst 4096-aligned, a large record is read O_DIRECT through it (its
 * last partial 4096 bytes buffered): no page cache, queue_depth requests in flight. */
enum zt_status zt_shard_read(const struct zt_shard *s, int i, float *dst);
/* Check every record's CRC32C without keeping the data (zt-ckpt verify). */
enum zt_status zt_shard_verify(const struct zt_shard *s);
void zt_shard_close(struct zt_shard *s);

/* The shards of one checkpoint (rank k's at paths[k], written by n ranks), read as tensors: a
 * tensor's role is the union of its records' row ranges across the shards. */
struct zt_shard_set {
    struct zt_shard *sh; /* [n] */
    int n;
    int buf_shard;       /* shard and record whose data is in buf (-1: none): callers read */
    int buf_record;      /* rows in order, so a record's rows are read from disk once */
    float *buf;
    int64_t cap;         /* floats in buf */
};
/* Open every shard (header checks) and check that shard k says rank k of n. */
enum zt_status zt_shard_set_open(struct zt_shard_set *s, const char *const *paths, int n);
/* Every shard of the set belongs to the checkpoint of run run_id at step `step` (else
 * ZT_ERR_CKPT_CORRUPT naming the shard and the field: "step 20, expected 40"). run_id 0: the
 * checkpoint records none (written before run ids), and neither may its shards. */
enum zt_status zt_shard_set_check_id(const struct zt_shard_set *s, uint64_t run_id,
                                     int64_t step);
/* Read records through aio (borrowed; it must outlive the set's reads) with O_DIRECT where the
 * file system allows it (else buffered, as without it). */
void zt_shard_set_direct(struct zt_shard_set *s, struct zt_aio *aio);
/* Tensor `name` in `role` must be rows x cols in every record that holds it, and its records
 * must hold each row exactly once (else ZT_ERR_CKPT_CORRUPT naming the file or the tensor). */
enum zt_status zt_shard_set_cover(const struct zt_shard_set *s, const char *name, int role,
                                  int64_t rows, int64_t cols);
/* Every record names one of the tensors t[0..n), and each of them is covered in each role
 * (zt_shard_set_cover). */
struct zt_shard_tensor {
    const char *name;
    int64_t rows, cols;
};
enum zt_status zt_shard_set_check(const struct zt_shard_set *s, const struct zt_shard_tensor *t,
                                  int n);
/* Each of the tensors t[0..n) is covered in each role; records of other tensors may be there
 * too (a pipeline stage's view of a checkpoint: the other stages' tensors). */
enum zt_status zt_shard_set_check_subset(const struct zt_shard_set *s,
                                         const struct zt_shard_tensor *t, int n);
/* Elements [x0, x1) (row-major, cols per row) of tensor `name` in `role` into dst; each record
 * touched is read whole and its CRC32C checked. Call zt_shard_set_cover first. */
enum zt_status zt_shard_set_read(struct zt_shard_set *s, const char *name, int role,
                                 int64_t cols, int64_t x0, int64_t x1, float *dst);
void zt_shard_set_close(struct zt_shard_set *s);

#ifdef __cplusplus
}
#endif
#endif /* ZT_CKPT_H */
