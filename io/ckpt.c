/*
 * io/ckpt.c: writing checkpoint shard files (see zt_ckpt.h): the header JSON, a writer that
 * streams records in file order (zt_shard_append) or puts them at their places from several
 * threads (zt_shard_put), the O_DIRECT staging stream (zt_shard_stream_*), commit and abort.
 *
 * Layer: io/ (platform; no StarPU). The reading side is io/ckpt_read.c, the byte layout both
 * share io/ckpt_format.h, the checksum io/crc32c.c.
 */
#define _GNU_SOURCE      /* O_DIRECT */
#include "zt_ckpt.h"
#include <errno.h>       /* errno */
#include <fcntl.h>       /* open */
#include <inttypes.h>    /* PRId64 */
#include <stdio.h>       /* snprintf */
#include <stdlib.h>      /* malloc, free */
#include <string.h>      /* memcpy, strerror */
#include <unistd.h>      /* pwrite, lseek, ftruncate, close */
#include "ckpt_format.h" /* SHARD_MAGIC, SHARD_PREFIX_BYTES, SHARD_ALIGN, shard_put_u32 */
#include "zt_aio.h"      /* zt_aio_write (direct record writes) */
#include "zt_crc32c.h"   /* zt_crc32c, zt_crc32c_copy */

static const char *const role_names[] = {"param", "exp_avg", "exp_avg_sq"};
const char *zt_shard_role_name(int role) {
    return role >= 0 && role < 3 ? role_names[role] : "?";
}

/* The header JSON. Offsets, lengths and CRCs are printed right-aligned in fixed widths (leading
 * blanks: still valid JSON) so its length does not depend on them: the space reserved for it
 * when the shard is created (offsets not assigned yet) holds it at commit. */
static char *header_json(const struct zt_shard_writer *w, const struct zt_shard_rec *r, int n) {
    size_t cap = 320 + (size_t)n * (ZT_SHARD_MAX_NAME + 256), at = 0;
    char *s = malloc(cap);
    if (!s) return NULL;
    at += (size_t)snprintf(s + at, cap - at, "{\"format\": %d, ", ZT_SHARD_FORMAT);
    if (w->run_id) /* the checkpoint the shard belongs to */
        at += (size_t)snprintf(s + at, cap - at, "\"run_id\": \"%016" PRIx64 "\", \"step\": %"
                               PRId64 ", ", w->run_id, w->step);
    at += (size_t)snprintf(s + at, cap - at, "\"rank\": %d, \"world_size\": %d, \"records\": [",
                           w->rank, w->world);
    for (int i = 0; i < n; i++)
        at += (size_t)snprintf(s + at, cap - at,
                               "%s\n {\"name\": \"%s\", \"role\": \"%s\", \"rows\": %" PRId64
                               ", \"cols\": %" PRId64 ", \"row0\": %" PRId64 ", \"row1\": %" PRId64
                               ", \"offset\": %15" PRId64 ", \"bytes\": %15" PRId64
                               ", \"crc32c\": %10" PRIu32 "}",
                               i ? "," : "", r[i].name, zt_shard_role_name(r[i].role), r[i].rows,
                               r[i].cols, r[i].row0, r[i].row1, r[i].offset, r[i].bytes, r[i].crc);
    snprintf(s + at, cap - at, "]}\n");
    return s;
}

static int64_t align_up(int64_t x) { return (x + SHARD_ALIGN - 1) / SHARD_ALIGN * SHARD_ALIGN; }

enum zt_status zt_shard_create(struct zt_shard_writer *w, const char *path,
                               const struct zt_shard_id *id, const struct zt_shard_rec *recs,
                               int n) {
    memset(w, 0, sizeof *w);
    w->f.fd = -1;
    w->dfd = -1;
    w->rec = calloc((size_t)n + 1, sizeof *w->rec);
    w->put_bytes = calloc((size_t)n + 1, sizeof *w->put_bytes);
    if (!w->rec || !w->put_bytes) {
        free(w->rec);
        free(w->put_bytes);
        w->rec = NULL;
        w->put_bytes = NULL;
        return zt_error_set(ZT_ERR_NOMEM, "checkpoint shard %s: out of memory", path);
    }
    for (int i = 0; i < n; i++) {
        w->rec[i] = recs[i];
        const struct zt_shard_rec *r = &recs[i];
        if (strchr(r->name, '"') || strchr(r->name, '\\') || r->row0 < 0 || r->row1 < r->row0 ||
            r->row1 > r->rows || r->cols < 1 || r->role < 0 || r->role > 2)
            return zt_shard_abort(w, zt_error_set(ZT_ERR_INVALID, "checkpoint shard %s: record "
                                                  "%d (%s) is invalid", path, i, r->name));
    }
    w->n = n;
    w->rank = id->rank;
    w->world = id->world;
    w->run_id = id->run_id;
    w->step = id->step;
    char *h = header_json(w, w->rec, n);
    if (!h)
        return zt_shard_abort(w, zt_error_set(ZT_ERR_NOMEM, "checkpoint shard %s: out of memory",
                                              path));
    w->header_bytes = align_up(SHARD_PREFIX_BYTES + (int64_t)strlen(h));
    free(h);
    int64_t off = w->header_bytes;
    for (int i = 0; i < n; i++) {
        w->rec[i].offset = off;
        w->rec[i].bytes = (w->rec[i].row1 - w->rec[i].row0) * w->rec[i].cols * 4;
        w->rec[i].crc = 0;
        off = align_up(off + w->rec[i].bytes);
    }
    enum zt_status rc = zt_afile_open(&w->f, "checkpoint shard", path);
    if (rc != ZT_OK) return zt_shard_abort(w, rc); /* no temporary: frees the records */
    /* the data starts after the header's reserved space */
    if (lseek(w->f.fd, w->header_bytes, SEEK_SET) < 0) {
        w->f.what = "seek";
        return zt_shard_abort(w, zt_afile_fail(&w->f));
    }
    return ZT_OK;
}

static enum zt_status pad_to(struct zt_shard_writer *w, int64_t off) {
    static const char zero[SHARD_ALIGN];
    off_t at = lseek(w->f.fd, 0, SEEK_CUR);
    if (at < 0) return zt_afile_fail(&w->f);
    if (off > at && zt_afile_write(&w->f, zero, (size_t)(off - at)) != 0)
        return zt_afile_fail(&w->f);
    return ZT_OK;
}

enum zt_status zt_shard_append(struct zt_shard_writer *w, const float *data, int64_t nfloats) {
    while (nfloats > 0) {
        if (w->cur >= w->n)
            return zt_shard_abort(w, zt_error_set(ZT_ERR_INVALID, "checkpoint shard %s: more data "
                                                  "than its records", w->f.path));
        struct zt_shard_rec *r = &w->rec[w->cur];
        if (w->cur_bytes == 0) {
            enum zt_status rc = pad_to(w, r->offset);
            if (rc != ZT_OK) return zt_shard_abort(w, rc);
        }
        int64_t take = (r->bytes - w->cur_bytes) / 4;
        if (take > nfloats) take = nfloats;
        r->crc = zt_crc32c(r->crc, data, (size_t)take * 4);
        if (zt_afile_write(&w->f, data, (size_t)take * 4) != 0)
            return zt_shard_abort(w, zt_afile_fail(&w->f));
        w->cur_bytes += take * 4;
        data += take;
        nfloats -= take;
        if (w->cur_bytes == r->bytes) {
            w->cur++;
            w->cur_bytes = 0;
        }
    }
    while (w->cur < w->n && w->rec[w->cur].bytes == 0) w->cur++;
    return ZT_OK;
}

enum zt_status zt_shard_put(struct zt_shard_writer *w, int i, const float *data, int64_t nfloats) {
    if (i < 0 || i >= w->n || w->put_bytes[i] + nfloats * 4 > w->rec[i].bytes)
        return zt_error_set(ZT_ERR_INVALID, "checkpoint shard %s: more data than record %d",
                            w->f.path, i);
    struct zt_shard_rec *r = &w->rec[i];
    r->crc = zt_crc32c(r->crc, data, (size_t)nfloats * 4);
    const char *p = (const char *)data;
    int64_t left = nfloats * 4, at = r->offset + w->put_bytes[i];
    while (left > 0) {
        ssize_t k = pwrite(w->f.fd, p, (size_t)left, at);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0)
            return zt_error_set(ZT_ERR_IO, "checkpoint shard %s: write failed (%s)", w->f.path,
                                k < 0 ? strerror(errno) : "no progress");
        p += k;
        at += k;
        left -= k;
    }
    w->put_bytes[i] += nfloats * 4;
    return ZT_OK;
}

/* where the file ends: where its last record does (an empty one after the data included) */
static int64_t data_end(const struct zt_shard_writer *w) {
    int64_t end = w->header_bytes;
    for (int i = 0; i < w->n; i++)
        if (w->rec[i].offset + w->rec[i].bytes > end) end = w->rec[i].offset + w->rec[i].bytes;
    return end;
}

/* ---- direct writes of whole records (zt_shard_stream_*) ---- */
static void close_direct(struct zt_shard_writer *w) {
    if (w->dfd >= 0) close(w->dfd);
    w->dfd = -1;
}

int zt_shard_direct(struct zt_shard_writer *w, struct zt_aio *aio) {
    if (!aio || !w->f.tmp) return 0;
    w->dfd = open(w->f.tmp, O_WRONLY | O_DIRECT | O_CLOEXEC);
    if (w->dfd < 0) return 0; /* e.g. tmpfs: the buffered path it is */
    /* the file has its final (4096-padded) size before the first write, as fio lays its file
     * out: on ext4 a direct write past the end of the file waits for its own completion
     * (IOMAP_DIO_FORCE_WAIT for extending writes), so requests would reach the device one at
     * a time; inside the file they stay queue_depth deep. No blocks are allocated here (a full
     * disk still fails at the write), and the commit cuts the file to its exact end. */
    if (ftruncate(w->dfd, align_up(data_end(w))) != 0) {
        close_direct(w);
        return 0;
    }
    w->aio = aio;
    return 1;
}

/* write the staged bytes (padded to 4096 with zeros) at the buffer's file offset */
static enum zt_status stream_flush(struct zt_shard_stream *st) {
    struct zt_shard_writer *w = st->w;
    if (st->fill == 0) return ZT_OK;
    int64_t len = align_up(st->fill);
    if (len > st->fill) memset(st->buf + st->fill, 0, (size_t)(len - st->fill));
    if (st->flush)
        ZT_CHECK(st->flush(st->ctx, &st->buf, len, st->base));
    else
        ZT_CHECK(zt_aio_write(w->aio, w->dfd, w->f.path, st->buf, (size_t)len, st->base));
    st->base += len;
    st->fill = 0;
    return ZT_OK;
}

void zt_shard_stream_begin(struct zt_shard_stream *st, struct zt_shard_writer *w, char *buf,
                           int64_t cap) {
    *st = (struct zt_shard_stream){
        .w = w, .i = -1, .buf = buf, .cap = cap / SHARD_ALIGN * SHARD_ALIGN};
}

enum zt_status zt_shard_stream_record(struct zt_shard_stream *st, int i) {
    struct zt_shard_writer *w = st->w;
    if (i < 0 || i >= w->n || st->i >= 0)
        return zt_error_set(ZT_ERR_INVALID, "checkpoint shard %s: record %d started while "
                            "record %d is open", w->f.path, i, st->i);
    st->i = i;
    st->at = 0;
    if (w->dfd < 0) return ZT_OK;
    int64_t off = w->rec[i].offset, pad = off - st->base - st->fill;
    if (st->fill > 0 && (pad < 0 || pad >= SHARD_ALIGN || off - st->base >= st->cap))
        ZT_CHECK(stream_flush(st)); /* it does not follow the staged bytes in the buffer */
    if (st->fill == 0) {
        st->base = off;
    } else {
        memset(st->buf + st->fill, 0, (size_t)pad);
        st->fill += pad;
    }
    return ZT_OK;
}

enum zt_status zt_shard_stream_add(struct zt_shard_stream *st, const float *data,
                                   int64_t nfloats) {
    struct zt_shard_writer *w = st->w;
    if (st->i < 0)
        return zt_error_set(ZT_ERR_INVALID, "checkpoint shard %s: data outside a record",
                            w->f.path);
    struct zt_shard_rec *r = &w->rec[st->i];
    int64_t left = nfloats * 4;
    if (st->at + left > r->bytes)
        return zt_error_set(ZT_ERR_INVALID, "checkpoint shard %s: more data than record %d",
                            w->f.path, st->i);
    if (w->dfd < 0) {
        ZT_CHECK(zt_shard_put(w, st->i, data, nfloats));
        st->at += left;
        return ZT_OK;
    }
    const char *p = (const char *)data;
    while (left > 0) { /* checksum and stage in cache-sized pieces, write whole buffers */
        int64_t k = st->cap - st->fill;
        if (k > left) k = left;
        if (k > 256 << 10) k = 256 << 10;
        r->crc = zt_crc32c_copy(r->crc, st->buf + st->fill, p, (size_t)k);
        st->fill += k;
        st->at += k;
        p += k;
        left -= k;
        if (st->fill == st->cap) ZT_CHECK(stream_flush(st));
    }
    return ZT_OK;
}

enum zt_status zt_shard_stream_done(struct zt_shard_stream *st) {
    struct zt_shard_writer *w = st->w;
    int i = st->i;
    st->i = -1;
    if (i < 0 || st->at != w->rec[i].bytes)
        return zt_error_set(ZT_ERR_INVALID, "checkpoint shard %s: record %d (%s) got %lld of "
                            "%lld bytes", w->f.path, i, i < 0 ? "none" : w->rec[i].name,
                            (long long)st->at, (long long)(i < 0 ? 0 : w->rec[i].bytes));
    if (w->dfd >= 0) w->put_bytes[i] = st->at;
    return ZT_OK;
}

enum zt_status zt_shard_stream_end(struct zt_shard_stream *st) {
    if (st->i >= 0)
        return zt_error_set(ZT_ERR_INVALID, "checkpoint shard %s: record %d (%s) not finished",
                            st->w->f.path, st->i, st->w->rec[st->i].name);
    return st->w->dfd >= 0 ? stream_flush(st) : ZT_OK;
}

enum zt_status zt_shard_commit(struct zt_shard_writer *w) {
    close_direct(w); /* its data reached the device; fsync below covers the inode */
    int put = 0; /* written with zt_shard_put: every record must be whole */
    for (int i = 0; i < w->n; i++) put |= w->put_bytes[i] > 0;
    for (int i = 0; put && i < w->n; i++)
        if (w->put_bytes[i] != w->rec[i].bytes)
            return zt_shard_abort(w, zt_error_set(ZT_ERR_INVALID, "checkpoint shard %s: record "
                                                  "%d (%s) incomplete", w->f.path, i,
                                                  w->rec[i].name));
    if (put) w->cur = w->n;
    while (w->cur < w->n && w->rec[w->cur].bytes == 0) w->cur++;
    if (w->cur != w->n)
        return zt_shard_abort(w, zt_error_set(ZT_ERR_INVALID, "checkpoint shard %s: record %d "
                                              "(%s) incomplete", w->f.path, w->cur,
                                              w->rec[w->cur].name));
    char *h = header_json(w, w->rec, w->n);
    if (!h) return zt_shard_abort(w, zt_error_set(ZT_ERR_NOMEM, "out of memory"));
    size_t hl = strlen(h);
    unsigned char *buf = calloc(1, (size_t)w->header_bytes);
    if (!buf || SHARD_PREFIX_BYTES + (int64_t)hl > w->header_bytes) {
        free(h);
        free(buf);
        return zt_shard_abort(w, zt_error_set(ZT_ERR_NOMEM, "checkpoint shard %s: out of memory "
                                              "or the header outgrew its space",
                                              w->f.path));
    }
    memcpy(buf, SHARD_MAGIC, 8);
    shard_put_u32(buf + 8, (uint32_t)hl);
    shard_put_u32(buf + 12, zt_crc32c(0, h, hl));
    memcpy(buf + SHARD_PREFIX_BYTES, h, hl);
    free(h);
    enum zt_status rc = ZT_OK;
    if (ftruncate(w->f.fd, data_end(w)) != 0) {
        w->f.what = "extend";
        rc = zt_afile_fail(&w->f);
    } else if (lseek(w->f.fd, 0, SEEK_SET) < 0 ||
               zt_afile_write(&w->f, buf, (size_t)w->header_bytes) != 0) {
        rc = zt_afile_fail(&w->f);
    }
    free(buf);
    if (rc == ZT_OK) rc = zt_afile_commit(&w->f);
    free(w->rec);
    free(w->put_bytes);
    w->rec = NULL;
    w->put_bytes = NULL;
    return rc;
}

enum zt_status zt_shard_abort(struct zt_shard_writer *w, enum zt_status rc) {
    close_direct(w);
    if (w->f.tmp) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", zt_error_last());
        zt_afile_fail(&w->f); /* removes the temporary */
        zt_error_set(rc, "%s", msg);
    }
    free(w->rec);
    free(w->put_bytes);
    w->rec = NULL;
    w->put_bytes = NULL;
    return rc;
}
