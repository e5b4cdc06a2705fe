/*
 * io/ckpt.c: checkpoint shard files and CRC32C (see zt_ckpt.h).
 */
#define _GNU_SOURCE      /* O_DIRECT */
#include "zt_ckpt.h"
#include <cjson/cJSON.h> /* header JSON */
#include <errno.h>       /* errno */
#include <fcntl.h>       /* open */
#include <inttypes.h>    /* PRId64 */
#include <pthread.h>     /* pthread_* (a record's read beside its checksum) */
#include <stdio.h>       /* snprintf */
#include <stdlib.h>      /* malloc, free */
#include <string.h>      /* memcpy, strerror */
#include <sys/stat.h>    /* fstat */
#include <unistd.h>      /* pread, pwrite, close */
#include "zt_aio.h"      /* zt_aio_write (direct record writes) */

#define MAGIC "ZTSHARD1"
#define PRE 16           /* magic, header length, header CRC */
#define ALIGN 4096
#define CHUNK (4 << 20)  /* bytes per read when verifying */
#define DIRECT_MIN (256 << 10) /* smaller records are read buffered (page-cache readahead) */
#define PIPE_MIN (4 << 20) /* from here a helper thread reads while the caller checksums */

static const char *const roles[] = {"param", "exp_avg", "exp_avg_sq"};
const char *zt_shard_role_name(int role) {
    return role >= 0 && role < 3 ? roles[role] : "?";
}

/* ---- CRC32C: slicing-by-8 tables of the reflected polynomial 0x82F63B78 ---- */
#define CRC_POLY 0x82F63B78u
static uint32_t tab[8][256];
static uint32_t x2n[32]; /* x^(2^k) mod P, for joining the CRCs of adjacent pieces */
static int tab_ready;

/* a * b mod P, polynomials in the reflected bit order (bit 31: x^0) */
static uint32_t mult_modp(uint32_t a, uint32_t b) {
    uint32_t m = 1u << 31, p = 0;
    for (;;) {
        if (a & m) {
            p ^= b;
            if ((a & (m - 1)) == 0) break;
        }
        m >>= 1;
        b = b & 1 ? (b >> 1) ^ CRC_POLY : b >> 1;
    }
    return p;
}

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ CRC_POLY : c >> 1;
        tab[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++) tab[t][i] = (tab[t - 1][i] >> 8) ^ tab[0][tab[t - 1][i] & 0xff];
    uint32_t p = 1u << 30; /* x^1 */
    x2n[0] = p;
    for (int k = 1; k < 32; k++) x2n[k] = p = mult_modp(p, p);
    __atomic_store_n(&tab_ready, 1, __ATOMIC_RELEASE);
}

static void crc_ready(void) {
    if (!__atomic_load_n(&tab_ready, __ATOMIC_ACQUIRE)) crc_init(); /* idempotent */
}

/* the CRC of A then B from crc(A) = a and crc(B) = b (each from 0) and B's length: a times
 * x^(8 len) mod P, plus b (zlib's crc32_combine, for this polynomial) */
static uint32_t crc_join(uint32_t a, uint32_t b, size_t len) {
    uint32_t op = 1u << 31; /* x^0 */
    for (int k = 3; len; len >>= 1, k++)
        if (len & 1) op = mult_modp(x2n[k & 31], op);
    return mult_modp(op, a) ^ b;
}

uint32_t zt_crc32c_portable(uint32_t crc, const void *p, size_t n) {
    crc_ready();
    const unsigned char *b = p;
    uint32_t c = ~crc;
    while (n > 0 && ((uintptr_t)b & 7)) {
        c = (c >> 8) ^ tab[0][(c ^ *b++) & 0xff];
        n--;
    }
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, b, 8);
        w ^= c; /* little-endian */
        c = tab[7][w & 0xff] ^ tab[6][(w >> 8) & 0xff] ^ tab[5][(w >> 16) & 0xff] ^
            tab[4][(w >> 24) & 0xff] ^ tab[3][(w >> 32) & 0xff] ^ tab[2][(w >> 40) & 0xff] ^
            tab[1][(w >> 48) & 0xff] ^ tab[0][(w >> 56) & 0xff];
        b += 8;
        n -= 8;
    }
    while (n-- > 0) c = (c >> 8) ^ tab[0][(c ^ *b++) & 0xff];
    return ~c;
}


#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
/* SSE4.2's crc32 instruction computes the same CRC32C, 8 bytes per instruction. One chain of
 * them waits for each result (a latency of 3 cycles), so a long buffer is cut into three
 * pieces whose chains run side by side (the instruction issues every cycle) and their
 * CRCs are joined (crc_join). With dst, the words are also stored there as they are read: the
 * checkpoint's staging copy costs one pass over the data instead of two. */
__attribute__((target("sse4.2"))) static uint32_t crc_sse42(uint32_t crc, void *dst,
                                                               const void *p, size_t n) {
    const unsigned char *b = p;
    unsigned char *d = dst;
    uint64_t c = ~crc & 0xffffffffu;
    if (n >= 3 * 256) {
        crc_ready();
        const size_t k = n / 3 / 8 * 8; /* bytes of the first two pieces; the third the rest */
        uint64_t c1 = 0xffffffffu, c2 = 0xffffffffu;
        for (size_t i = 0; i < k; i += 8) {
            uint64_t w0, w1, w2;
            memcpy(&w0, b + i, 8);
            memcpy(&w1, b + k + i, 8);
            memcpy(&w2, b + 2 * k + i, 8);
            c = __builtin_ia32_crc32di(c, w0);
            c1 = __builtin_ia32_crc32di(c1, w1);
            c2 = __builtin_ia32_crc32di(c2, w2);
            if (d) {
                memcpy(d + i, &w0, 8);
                memcpy(d + k + i, &w1, 8);
                memcpy(d + 2 * k + i, &w2, 8);
            }
        }
        for (size_t i = 3 * k; i < n; i++) { /* the third piece's tail */
            c2 = __builtin_ia32_crc32qi((uint32_t)c2, b[i]);
            if (d) d[i] = b[i];
        }
        uint32_t first = ~(uint32_t)c, mid = ~(uint32_t)c1, last = ~(uint32_t)c2;
        return crc_join(crc_join(first, mid, k), last, n - 2 * k);
    }
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, b, 8);
        c = __builtin_ia32_crc32di(c, w);
        if (d) memcpy(d, &w, 8), d += 8;
        b += 8;
        n -= 8;
    }
    while (n-- > 0) {
        if (d) *d++ = *b;
        c = __builtin_ia32_crc32qi((uint32_t)c, *b++);
    }
    return ~(uint32_t)c;
}
#define HAVE_CRC_HW 1

static int crc_hw(void) {
    static int hw = -1; /* racy but idempotent: every thread computes the same answer */
    if (hw < 0) hw = __builtin_cpu_supports("sse4.2") ? 1 : 0;
    return hw;
}
#endif

uint32_t zt_crc32c(uint32_t crc, const void *p, size_t n) {
#ifdef HAVE_CRC_HW
    if (crc_hw()) return crc_sse42(crc, NULL, p, n);
#endif
    return zt_crc32c_portable(crc, p, n);
}

uint32_t zt_crc32c_copy(uint32_t crc, void *dst, const void *src, size_t n) {
#ifdef HAVE_CRC_HW
    if (crc_hw()) return crc_sse42(crc, dst, src, n);
#endif
    memcpy(dst, src, n);
    return zt_crc32c_portable(crc, src, n);
}

/* ---- header ---- */
static void put_u32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t get_u32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The header JSON. Offsets, lengths and CRCs are printed right-aligned in fixed widths (leading
 * blanks: still valid JSON) so its length does not depend on them: the space reserved for it
 * when the shard is created (offsets not assigned yet) holds it at commit. */
static char *header_json(int rank, int world, const struct zt_shard_rec *r, int n) {
    size_t cap = 256 + (size_t)n * (ZT_SHARD_MAX_NAME + 256), at = 0;
    char *s = malloc(cap);
    if (!s) return NULL;
    at += (size_t)snprintf(s + at, cap - at, "{\"format\": %d, \"rank\": %d, \"world_size\": %d, "
                           "\"records\": [", ZT_SHARD_FORMAT, rank, world);
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

static int64_t align_up(int64_t x) { return (x + ALIGN - 1) / ALIGN * ALIGN; }

enum zt_status zt_shard_create(struct zt_shard_writer *w, const char *path, int rank, int world,
                               const struct zt_shard_rec *recs, int n) {
    memset(w, 0, sizeof *w);
    w->f.fd = -1;
    w->dfd = -1;
    w->rec = calloc((size_t)n + 1, sizeof *w->rec);
    w->rdone = calloc((size_t)n + 1, sizeof *w->rdone);
    if (!w->rec || !w->rdone) {
        free(w->rec);
        free(w->rdone);
        w->rec = NULL;
        w->rdone = NULL;
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
    w->rank = rank;
    w->world = world;
    char *h = header_json(rank, world, w->rec, n);
    if (!h)
        return zt_shard_abort(w, zt_error_set(ZT_ERR_NOMEM, "checkpoint shard %s: out of memory",
                                              path));
    w->hdr_bytes = align_up(PRE + (int64_t)strlen(h));
    free(h);
    int64_t off = w->hdr_bytes;
    for (int i = 0; i < n; i++) {
        w->rec[i].offset = off;
        w->rec[i].bytes = (w->rec[i].row1 - w->rec[i].row0) * w->rec[i].cols * 4;
        w->rec[i].crc = 0;
        off = align_up(off + w->rec[i].bytes);
    }
    enum zt_status rc = zt_afile_open(&w->f, "checkpoint shard", path);
    if (rc != ZT_OK) return zt_shard_abort(w, rc); /* no temporary: frees the records */
    /* the data starts after the header's reserved space */
    if (lseek(w->f.fd, w->hdr_bytes, SEEK_SET) < 0) {
        w->f.what = "seek";
        return zt_shard_abort(w, zt_afile_fail(&w->f));
    }
    return ZT_OK;
}

static enum zt_status pad_to(struct zt_shard_writer *w, int64_t off) {
    static const char zero[ALIGN];
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
        if (w->done == 0) {
            enum zt_status rc = pad_to(w, r->offset);
            if (rc != ZT_OK) return zt_shard_abort(w, rc);
        }
        int64_t take = (r->bytes - w->done) / 4;
        if (take > nfloats) take = nfloats;
        r->crc = zt_crc32c(r->crc, data, (size_t)take * 4);
        if (zt_afile_write(&w->f, data, (size_t)take * 4) != 0)
            return zt_shard_abort(w, zt_afile_fail(&w->f));
        w->done += take * 4;
        data += take;
        nfloats -= take;
        if (w->done == r->bytes) {
            w->cur++;
            w->done = 0;
        }
    }
    while (w->cur < w->n && w->rec[w->cur].bytes == 0) w->cur++;
    return ZT_OK;
}

enum zt_status zt_shard_put(struct zt_shard_writer *w, int i, const float *data, int64_t nfloats) {
    if (i < 0 || i >= w->n || w->rdone[i] + nfloats * 4 > w->rec[i].bytes)
        return zt_error_set(ZT_ERR_INVALID, "checkpoint shard %s: more data than record %d",
                            w->f.path, i);
    struct zt_shard_rec *r = &w->rec[i];
    r->crc = zt_crc32c(r->crc, data, (size_t)nfloats * 4);
    const char *p = (const char *)data;
    int64_t left = nfloats * 4, at = r->offset + w->rdone[i];
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
    w->rdone[i] += nfloats * 4;
    return ZT_OK;
}

/* where the file ends: where its last record does (an empty one after the data included) */
static int64_t data_end(const struct zt_shard_writer *w) {
    int64_t end = w->hdr_bytes;
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
    *st = (struct zt_shard_stream){.w = w, .i = -1, .buf = buf, .cap = cap / ALIGN * ALIGN};
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
    if (st->fill > 0 && (pad < 0 || pad >= ALIGN || off - st->base >= st->cap))
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
    if (w->dfd >= 0) w->rdone[i] = st->at;
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
    for (int i = 0; i < w->n; i++) put |= w->rdone[i] > 0;
    for (int i = 0; put && i < w->n; i++)
        if (w->rdone[i] != w->rec[i].bytes)
            return zt_shard_abort(w, zt_error_set(ZT_ERR_INVALID, "checkpoint shard %s: record "
                                                  "%d (%s) incomplete", w->f.path, i,
                                                  w->rec[i].name));
    if (put) w->cur = w->n;
    while (w->cur < w->n && w->rec[w->cur].bytes == 0) w->cur++;
    if (w->cur != w->n)
        return zt_shard_abort(w, zt_error_set(ZT_ERR_INVALID, "checkpoint shard %s: record %d "
                                              "(%s) incomplete", w->f.path, w->cur,
                                              w->rec[w->cur].name));
    char *h = header_json(w->rank, w->world, w->rec, w->n);
    if (!h) return zt_shard_abort(w, zt_error_set(ZT_ERR_NOMEM, "out of memory"));
    size_t hl = strlen(h);
    unsigned char *buf = calloc(1, (size_t)w->hdr_bytes);
    if (!buf || PRE + (int64_t)hl > w->hdr_bytes) {
        free(h);
        free(buf);
        return zt_shard_abort(w, zt_error_set(ZT_ERR_NOMEM, "checkpoint shard %s: out of memory "
                                              "or the header outgrew its space",
                                              w->f.path));
    }
    memcpy(buf, MAGIC, 8);
    put_u32(buf + 8, (uint32_t)hl);
    put_u32(buf + 12, zt_crc32c(0, h, hl));
    memcpy(buf + PRE, h, hl);
    free(h);
    enum zt_status rc = ZT_OK;
    if (ftruncate(w->f.fd, data_end(w)) != 0) {
        w->f.what = "extend";
        rc = zt_afile_fail(&w->f);
    } else if (lseek(w->f.fd, 0, SEEK_SET) < 0 ||
               zt_afile_write(&w->f, buf, (size_t)w->hdr_bytes) != 0) {
        rc = zt_afile_fail(&w->f);
    }
    free(buf);
    if (rc == ZT_OK) rc = zt_afile_commit(&w->f);
    free(w->rec);
    free(w->rdone);
    w->rec = NULL;
    w->rdone = NULL;
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
    free(w->rdone);
    w->rec = NULL;
    w->rdone = NULL;
    return rc;
}

/* ---- reading ---- */
static enum zt_status bad(const struct zt_shard *s, const char *what) {
    return zt_error_set(ZT_ERR_CKPT_CORRUPT, "checkpoint shard %s: %s", s->path, what);
}

static int get_i64(const cJSON *o, const char *k, int64_t *v) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsNumber(x)) return -1;
    *v = (int64_t)x->valuedouble;
    return (double)*v == x->valuedouble ? 0 : -1;
}

enum zt_status zt_shard_open(struct zt_shard *s, const char *path) {
    memset(s, 0, sizeof *s);
    s->dfd = -1;
    snprintf(s->path, sizeof s->path, "%s", path);
    s->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (s->fd < 0)
        return zt_error_set(ZT_ERR_IO, "checkpoint shard %s: cannot open (%s)", path,
                            strerror(errno));
    struct stat st;
    unsigned char pre[PRE];
    enum zt_status rc = ZT_OK;
    if (fstat(s->fd, &st) != 0 || pread(s->fd, pre, PRE, 0) != PRE) rc = bad(s, "truncated "
                                                                             "(no header)");
    else if (memcmp(pre, MAGIC, 8) != 0)
        rc = bad(s, "not a zerotask shard (bad magic)");
    uint32_t hl = rc == ZT_OK ? get_u32(pre + 8) : 0;
    char *h = NULL;
    if (rc == ZT_OK && (int64_t)hl + PRE > (int64_t)st.st_size) rc = bad(s, "truncated header");
    if (rc == ZT_OK && !(h = malloc((size_t)hl + 1))) rc = zt_error_set(ZT_ERR_NOMEM, "oom");
    if (rc == ZT_OK && pread(s->fd, h, hl, PRE) != (ssize_t)hl) rc = bad(s, "truncated header");
    if (rc == ZT_OK && zt_crc32c(0, h, hl) != get_u32(pre + 12))
        rc = bad(s, "header checksum mismatch (corrupted)");
    cJSON *j = NULL;
    if (rc == ZT_OK) {
        h[hl] = '\0';
        j = cJSON_Parse(h);
        if (!j) rc = bad(s, "header is not JSON");
    }
    int64_t fmt = 0, rank = 0, world = 0;
    const cJSON *recs = j ? cJSON_GetObjectItemCaseSensitive(j, "records") : NULL;
    if (rc == ZT_OK && (get_i64(j, "format", &fmt) || get_i64(j, "rank", &rank) ||
                        get_i64(j, "world_size", &world) || !cJSON_IsArray(recs)))
        rc = bad(s, "header lacks format, rank, world_size or records");
    if (rc == ZT_OK && fmt != ZT_SHARD_FORMAT)
        rc = zt_error_set(ZT_ERR_CKPT_CORRUPT,
                          "checkpoint shard %s: format %lld (this zerotask reads "
                          "format %d)",
                          path, (long long)fmt, ZT_SHARD_FORMAT);
    if (rc == ZT_OK) {
        s->rank = (int)rank;
        s->world = (int)world;
        s->n = cJSON_GetArraySize(recs);
        s->rec = calloc((size_t)s->n + 1, sizeof *s->rec);
        if (!s->rec) rc = zt_error_set(ZT_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; rc == ZT_OK && i < s->n; i++) {
        const cJSON *o = cJSON_GetArrayItem(recs, i);
        struct zt_shard_rec *r = &s->rec[i];
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(o, "name");
        const cJSON *ro = cJSON_GetObjectItemCaseSensitive(o, "role");
        int64_t crc = -1;
        r->role = -1;
        for (int k = 0; k < 3 && cJSON_IsString(ro); k++)
            if (strcmp(ro->valuestring, roles[k]) == 0) r->role = k;
        if (!cJSON_IsString(nm) || strlen(nm->valuestring) >= ZT_SHARD_MAX_NAME || r->role < 0 ||
            get_i64(o, "rows", &r->rows) || get_i64(o, "cols", &r->cols) ||
            get_i64(o, "row0", &r->row0) || get_i64(o, "row1", &r->row1) ||
            get_i64(o, "offset", &r->offset) || get_i64(o, "bytes", &r->bytes) ||
            get_i64(o, "crc32c", &crc) || crc < 0 || crc > 0xffffffffll) {
            rc = zt_error_set(ZT_ERR_CKPT_CORRUPT, "checkpoint shard %s: record %d is malformed",
                              path, i);
            break;
        }
        snprintf(r->name, sizeof r->name, "%s", nm->valuestring);
        r->crc = (uint32_t)crc;
        if (r->row0 < 0 || r->row1 < r->row0 || r->row1 > r->rows || r->cols < 1 ||
            r->bytes != (r->row1 - r->row0) * r->cols * 4 || r->offset < PRE + (int64_t)hl)
            rc = zt_error_set(ZT_ERR_CKPT_CORRUPT, "checkpoint shard %s: record %d (%s %s) has "
                              "inconsistent rows/bytes", path, i, r->name, roles[r->role]);
        else if (r->offset + r->bytes > (int64_t)st.st_size)
            rc = zt_error_set(ZT_ERR_CKPT_CORRUPT, "checkpoint shard %s: truncated: tensor %s (%s) "
                              "ends at byte %lld, the file has %lld", path, r->name,
                              roles[r->role], (long long)(r->offset + r->bytes),
                              (long long)st.st_size);
    }
    cJSON_Delete(j);
    free(h);
    if (rc != ZT_OK) zt_shard_close(s);
    return rc;
}

static enum zt_status read_at(const struct zt_shard *s, void *dst, int64_t n, int64_t off) {
    char *p = dst;
    while (n > 0) {
        ssize_t r = pread(s->fd, p, (size_t)(n > (1 << 30) ? (1 << 30) : n), off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0)
            return zt_error_set(ZT_ERR_IO, "checkpoint shard %s: read at %lld failed (%s)",
                                s->path, (long long)off, r < 0 ? strerror(errno) : "end of file");
        p += r;
        n -= r;
        off += r;
    }
    return ZT_OK;
}

static enum zt_status crc_fail(const struct zt_shard *s, int i) {
    return zt_error_set(ZT_ERR_CKPT_CORRUPT, "checkpoint shard %s: tensor %s (%s, rows %lld-%lld) "
                        "checksum mismatch (corrupted)", s->path, s->rec[i].name,
                        roles[s->rec[i].role], (long long)s->rec[i].row0,
                        (long long)s->rec[i].row1);
}

/* the CRC of buf[a, b) continued from crc; what of it lies in [lo, hi) is also copied to
 * dst + (x - lo), in the same pass (dst NULL: nothing copied) */
static uint32_t crc_part(uint32_t crc, const char *buf, size_t a, size_t b, char *dst, size_t lo,
                         size_t hi) {
    if (!dst || b <= lo || a >= hi) return zt_crc32c(crc, buf + a, b - a);
    size_t x0 = a > lo ? a : lo, x1 = b < hi ? b : hi;
    crc = zt_crc32c(crc, buf + a, x0 - a);
    crc = zt_crc32c_copy(crc, dst + (x0 - lo), buf + x0, x1 - x0);
    return zt_crc32c(crc, buf + x1, b - x1);
}

/* a large record's O_DIRECT read on a helper thread, reporting how much of it has arrived */
struct pipe {
    const struct zt_shard *s;
    void *buf;
    size_t len;
    int64_t off;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    size_t ready; /* bytes at the front of buf that have arrived */
    int over;
    enum zt_status rc;
    char msg[512]; /* the reader's error (messages are per thread) */
};

static void pipe_progress(void *ctx, size_t bytes) {
    struct pipe *p = ctx;
    pthread_mutex_lock(&p->mu);
    p->ready = bytes;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

static void *pipe_reader(void *arg) {
    struct pipe *p = arg;
    enum zt_status rc = zt_aio_read_progress(p->s->aio, p->s->dfd, p->s->path, p->buf, p->len,
                                             p->off, pipe_progress, p);
    pthread_mutex_lock(&p->mu);
    p->rc = rc;
    if (rc != ZT_OK) snprintf(p->msg, sizeof p->msg, "%s", zt_error_last());
    p->over = 1;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* Read record i into buf and check its CRC32C; bytes [lo, hi) of it also go to dst (NULL:
 * none), copied in the checksum's pass. A large record read O_DIRECT is read by a helper thread
 * while this one checksums and copies what has arrived, so the disk never waits for the CPU
 * and the checksums cost no time after the last read. dst may hold part of a record that
 * then fails its check: the caller stops. */
static enum zt_status read_rec(const struct zt_shard *s, int i, void *buf, void *dst, size_t lo,
                               size_t hi) {
    const struct zt_shard_rec *r = &s->rec[i];
    /* records start on ALIGN boundaries: the whole blocks direct, the rest buffered */
    int64_t direct = s->aio && s->dfd >= 0 && (uintptr_t)buf % ALIGN == 0 &&
                             r->offset % ALIGN == 0 && r->bytes >= DIRECT_MIN
                         ? r->bytes / ALIGN * ALIGN
                         : 0;
    size_t done = 0; /* bytes checksummed */
    uint32_t crc = 0;
    pthread_t th;
    struct pipe p = {.s = s, .buf = buf, .len = (size_t)direct, .off = r->offset};
    int threaded = 0; /* the direct part was read by the helper thread */
    if (direct >= PIPE_MIN && pthread_mutex_init(&p.mu, NULL) == 0) {
        pthread_cond_init(&p.cv, NULL);
        threaded = pthread_create(&th, NULL, pipe_reader, &p) == 0;
        while (threaded) {
            pthread_mutex_lock(&p.mu);
            while (p.ready == done && !p.over) pthread_cond_wait(&p.cv, &p.mu);
            size_t k = p.ready;
            int over = p.over;
            pthread_mutex_unlock(&p.mu);
            if (k > done) {
                crc = crc_part(crc, buf, done, k, dst, lo, hi);
                done = k;
            } else if (over) {
                break;
            }
        }
        if (threaded) pthread_join(th, NULL);
        pthread_cond_destroy(&p.cv);
        pthread_mutex_destroy(&p.mu);
        if (p.rc != ZT_OK) return zt_error_set(p.rc, "%s", p.msg);
    }
    if (direct > 0 && !threaded) /* no helper: read here */
        ZT_CHECK(zt_aio_read(s->aio, s->dfd, s->path, buf, (size_t)direct, r->offset));
    ZT_CHECK(read_at(s, (char *)buf + direct, r->bytes - direct, r->offset + direct));
    if (crc_part(crc, buf, done, (size_t)r->bytes, dst, lo, hi) != r->crc) return crc_fail(s, i);
    return ZT_OK;
}

enum zt_status zt_shard_read(const struct zt_shard *s, int i, float *dst) {
    return read_rec(s, i, dst, NULL, 0, 0);
}

enum zt_status zt_shard_verify(const struct zt_shard *s) {
    char *buf = malloc(CHUNK);
    if (!buf) return zt_error_set(ZT_ERR_NOMEM, "out of memory");
    enum zt_status rc = ZT_OK;
    for (int i = 0; i < s->n && rc == ZT_OK; i++) {
        uint32_t c = 0;
        for (int64_t at = 0; at < s->rec[i].bytes && rc == ZT_OK; at += CHUNK) {
            int64_t k = s->rec[i].bytes - at < CHUNK ? s->rec[i].bytes - at : CHUNK;
            rc = read_at(s, buf, k, s->rec[i].offset + at);
            if (rc == ZT_OK) c = zt_crc32c(c, buf, (size_t)k);
        }
        if (rc == ZT_OK && c != s->rec[i].crc) rc = crc_fail(s, i);
    }
    free(buf);
    return rc;
}

void zt_shard_close(struct zt_shard *s) {
    if (s->fd >= 0) close(s->fd);
    if (s->dfd >= 0) close(s->dfd);
    s->fd = s->dfd = -1;
    s->aio = NULL;
    free(s->rec);
    s->rec = NULL;
}

/* ---- a checkpoint's shards as tensors ---- */
enum zt_status zt_shard_set_open(struct zt_shard_set *s, const char *const *paths, int n) {
    memset(s, 0, sizeof *s);
    s->ck = s->ci = -1;
    if (!(s->sh = calloc((size_t)n + 1, sizeof *s->sh)))
        return zt_error_set(ZT_ERR_NOMEM, "checkpoint: out of memory");
    for (; s->n < n; s->n++) {
        enum zt_status rc = zt_shard_open(&s->sh[s->n], paths[s->n]);
        if (rc == ZT_OK && (s->sh[s->n].rank != s->n || s->sh[s->n].world != n)) {
            rc = zt_error_set(ZT_ERR_CKPT_CORRUPT, "checkpoint shard %s: written by rank %d of "
                              "%d, expected rank %d of %d", paths[s->n], s->sh[s->n].rank,
                              s->sh[s->n].world, s->n, n);
            zt_shard_close(&s->sh[s->n]);
        }
        if (rc != ZT_OK) {
            zt_shard_set_close(s);
            return rc;
        }
    }
    return ZT_OK;
}

void zt_shard_set_direct(struct zt_shard_set *s, struct zt_aio *aio) {
    for (int k = 0; k < s->n; k++) {
        struct zt_shard *sh = &s->sh[k];
        if (sh->dfd < 0) sh->dfd = open(sh->path, O_RDONLY | O_DIRECT | O_CLOEXEC);
        sh->aio = sh->dfd >= 0 ? aio : NULL; /* no O_DIRECT here: buffered reads */
    }
}

enum zt_status zt_shard_set_cover(const struct zt_shard_set *s, const char *name, int role,
                                  int64_t rows, int64_t cols) {
    int64_t have = 0;
    for (int k = 0; k < s->n; k++)
        for (int i = 0; i < s->sh[k].n; i++) {
            const struct zt_shard_rec *r = &s->sh[k].rec[i];
            if (r->role != role || strcmp(r->name, name) != 0) continue;
            if (r->rows != rows || r->cols != cols)
                return zt_error_set(ZT_ERR_CKPT_CORRUPT, "checkpoint shard %s: tensor %s is %lld "
                                    "x %lld, expected %lld x %lld (model shape mismatch)",
                                    s->sh[k].path, name, (long long)r->rows, (long long)r->cols,
                                    (long long)rows, (long long)cols);
            for (int k2 = 0; k2 < s->n; k2++) /* no row twice */
                for (int i2 = 0; i2 < s->sh[k2].n; i2++) {
                    const struct zt_shard_rec *q = &s->sh[k2].rec[i2];
                    if ((k2 != k || i2 != i) && q->role == role && q->row0 < r->row1 &&
                        r->row0 < q->row1 && strcmp(q->name, name) == 0)
                        return zt_error_set(ZT_ERR_CKPT_CORRUPT, "checkpoint shards %s and %s "
                                            "both hold rows of tensor %s (%s)", s->sh[k].path,
                                            s->sh[k2].path, name, roles[role]);
                }
            have += r->row1 - r->row0;
        }
    if (have != rows)
        return zt_error_set(ZT_ERR_CKPT_CORRUPT, "checkpoint %s: its shards hold %lld of the "
                            "%lld rows of tensor %s (%s); a rank's shard is missing or from "
                            "another checkpoint", s->n ? s->sh[0].path : "(no shards)",
                            (long long)have, (long long)rows, name, roles[role]);
    return ZT_OK;
}

enum zt_status zt_shard_set_check(const struct zt_shard_set *s, const struct zt_shard_tensor *t,
                                  int n) {
    for (int k = 0; k < s->n; k++)
        for (int i = 0; i < s->sh[k].n; i++) {
            int j = 0;
            while (j < n && strcmp(t[j].name, s->sh[k].rec[i].name) != 0) j++;
            if (j == n)
                return zt_error_set(ZT_ERR_CKPT_CORRUPT, "checkpoint shard %s: tensor %s is not "
                                    "one of the model's (another model's checkpoint?)",
                                    s->sh[k].path, s->sh[k].rec[i].name);
        }
    for (int j = 0; j < n; j++)
        for (int role = 0; role < 3; role++)
            ZT_CHECK(zt_shard_set_cover(s, t[j].name, role, t[j].rows, t[j].cols));
    return ZT_OK;
}

enum zt_status zt_shard_set_read(struct zt_shard_set *s, const char *name, int role,
                                 int64_t cols, int64_t x0, int64_t x1, float *dst) {
    for (int k = 0; k < s->n; k++)
        for (int i = 0; i < s->sh[k].n; i++) {
            const struct zt_shard_rec *r = &s->sh[k].rec[i];
            int64_t lo = r->row0 * cols, hi = r->row1 * cols;
            lo = lo > x0 ? lo : x0;
            hi = hi < x1 ? hi : x1;
            if (r->role != role || lo >= hi || strcmp(r->name, name) != 0) continue;
            if (s->ck != k || s->ci != i) {
                int64_t nf = (r->row1 - r->row0) * r->cols;
                if (nf > s->cap) { /* aligned: large records are read O_DIRECT into it */
                    float *b = zt_aio_alloc((size_t)nf * sizeof(float));
                    if (!b)
                        return zt_error_set(ZT_ERR_NOMEM, "checkpoint shard %s: out of "
                                            "memory for tensor %s", s->sh[k].path, name);
                    free(s->buf);
                    s->buf = b;
                    s->cap = nf;
                }
                s->ck = -1; /* the wanted rows are copied as the record is checked */
                const size_t at = (size_t)(lo - r->row0 * cols) * sizeof(float);
                ZT_CHECK(read_rec(&s->sh[k], i, s->buf, dst + (lo - x0), at,
                                  at + (size_t)(hi - lo) * sizeof(float)));
                s->ck = k;
                s->ci = i;
                continue;
            }
            memcpy(dst + (lo - x0), s->buf + (lo - r->row0 * cols),
                   (size_t)(hi - lo) * sizeof(float));
        }
    return ZT_OK;
}

void zt_shard_set_close(struct zt_shard_set *s) {
    for (int k = 0; s->sh && k < s->n; k++) zt_shard_close(&s->sh[k]);
    free(s->sh);
    free(s->buf);
    memset(s, 0, sizeof *s);
}
