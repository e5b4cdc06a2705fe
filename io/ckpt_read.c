/*
 * io/ckpt_read.c: reading checkpoint shard files (see zt_ckpt.h): opening and validating one
 * shard, reading a record with its checksum checked (O_DIRECT through aio for large ones, a
 * helper thread reading while this one checksums), verifying, and a checkpoint's shards read as
 * whole tensors (zt_shard_set_*).
 *
 * Layer: io/ (platform; no StarPU). The writing side is io/ckpt.c, the byte layout both share
 * io/ckpt_format.h.
 */
#define _GNU_SOURCE      /* O_DIRECT */
#include "zt_ckpt.h"
#include <cjson/cJSON.h> /* header JSON */
#include <errno.h>       /* errno */
#include <fcntl.h>       /* open */
#include <math.h>        /* floor */
#include <pthread.h>     /* pthread_* (a record's read beside its checksum) */
#include <stdio.h>       /* snprintf */
#include <stdlib.h>      /* malloc, free */
#include <string.h>      /* memcpy, strerror */
#include <unistd.h>      /* pread, close */
#include "ckpt_format.h" /* SHARD_MAGIC, SHARD_PREFIX_BYTES, SHARD_ALIGN, shard_get_u32 */
#include "zt_aio.h"      /* zt_aio_read, zt_aio_read_progress, zt_aio_alloc */
#include "zt_crc32c.h"   /* zt_crc32c, zt_crc32c_copy */
#include "zt_file.h"     /* zt_file_open_input */

#define VERIFY_CHUNK (4 << 20)    /* bytes per read when verifying */
#define DIRECT_MIN (256 << 10)    /* smaller records are read buffered (page-cache readahead) */
#define HELPER_READ_MIN (4 << 20) /* from here a helper thread reads while the caller checksums */

/* ---- one shard ---- */
static enum zt_status bad(const struct zt_shard *s, const char *what) {
    return zt_error_set(ZT_ERR_CKPT_CORRUPT, "checkpoint shard %s: %s", s->path, what);
}

/* member k of o as a whole number in [lo, hi] (the range checked before the conversion, which
 * is undefined for a double outside int64_t); 0, or -1 when it is missing or not one */
static int get_int(const cJSON *o, const char *k, int64_t lo, int64_t hi, int64_t *v) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsNumber(x) || !(x->valuedouble >= (double)lo && x->valuedouble <= (double)hi) ||
        x->valuedouble != floor(x->valuedouble))
        return -1;
    *v = (int64_t)x->valuedouble;
    return 0;
}

#define BIG ((int64_t)1 << 53) /* offsets, byte counts and steps: whole doubles up to here */

int zt_run_id_parse(const char *hex, uint64_t *id) {
    uint64_t v = 0;
    int n = 0;
    for (; hex[n] && n < 17; n++) {
        char c = hex[n];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0) return -1;
        v = v << 4 | (uint64_t)d;
    }
    if (n != 16 || v == 0) return -1;
    *id = v;
    return 0;
}

/* The header JSON of the open shard s (file_bytes long) into *json, after checking the prefix:
 * the magic, a header length inside the file (into *header_len), the header's CRC32C. */
static enum zt_status read_header(const struct zt_shard *s, int64_t file_bytes, cJSON **json,
                                  uint32_t *header_len) {
    unsigned char pre[SHARD_PREFIX_BYTES];
    if (pread(s->fd, pre, SHARD_PREFIX_BYTES, 0) != SHARD_PREFIX_BYTES)
        return bad(s, "truncated (no header)");
    if (memcmp(pre, SHARD_MAGIC, 8) != 0) return bad(s, "not a zerotask shard (bad magic)");
    uint32_t hl = shard_get_u32(pre + 8);
    if ((int64_t)hl + SHARD_PREFIX_BYTES > file_bytes) return bad(s, "truncated header");
    char *h = malloc((size_t)hl + 1);
    if (!h) return zt_error_set(ZT_ERR_NOMEM, "oom");
    enum zt_status rc = ZT_OK;
    if (pread(s->fd, h, hl, SHARD_PREFIX_BYTES) != (ssize_t)hl) {
        rc = bad(s, "truncated header");
    } else if (zt_crc32c(0, h, hl) != shard_get_u32(pre + 12)) {
        rc = bad(s, "header checksum mismatch (corrupted)");
    } else {
        h[hl] = '\0';
        if (!(*json = cJSON_Parse(h))) rc = bad(s, "header is not JSON");
    }
    free(h);
    *header_len = hl;
    return rc;
}

/* Record i of the header (o) into *r: every field present and whole, the role a known name, the
 * rows and bytes consistent, the data after the header and inside the file. */
static enum zt_status parse_record(const struct zt_shard *s, const cJSON *o, int i,
                                   uint32_t header_len, int64_t file_bytes,
                                   struct zt_shard_rec *r) {
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(o, "name");
    const cJSON *ro = cJSON_GetObjectItemCaseSensitive(o, "role");
    int64_t crc = -1;
    r->role = -1;
    for (int k = 0; k < 3 && cJSON_IsString(ro); k++)
        if (strcmp(ro->valuestring, zt_shard_role_name(k)) == 0) r->role = k;
    const int64_t M = ZT_CKPT_MAX_ELEMENTS;
    if (!cJSON_IsString(nm) || strlen(nm->valuestring) >= ZT_SHARD_MAX_NAME || r->role < 0 ||
        get_int(o, "rows", 0, M, &r->rows) || get_int(o, "cols", 1, M, &r->cols) ||
        get_int(o, "row0", 0, M, &r->row0) || get_int(o, "row1", 0, M, &r->row1) ||
        get_int(o, "offset", 0, BIG, &r->offset) || get_int(o, "bytes", 0, BIG, &r->bytes) ||
        get_int(o, "crc32c", 0, 0xffffffffll, &crc))
        return zt_error_set(ZT_ERR_CKPT_CORRUPT, "checkpoint shard %s: record %d is malformed "
                            "(expected whole rows, cols, row0, row1 up to 2^40, offset, bytes "
                            "and crc32c)", s->path, i);
    snprintf(r->name, sizeof r->name, "%s", nm->valuestring);
    r->crc = (uint32_t)crc;
    const char *role = zt_shard_role_name(r->role);
    /* bytes == (row1 - row0) * cols * 4 by divisions: rows x cols is checked before any
     * product is formed */
    if (r->row1 < r->row0 || r->row1 > r->rows || r->rows > M / r->cols || r->bytes % 4 != 0 ||
        r->bytes / 4 % r->cols != 0 || r->bytes / 4 / r->cols != r->row1 - r->row0 ||
        r->offset < SHARD_PREFIX_BYTES + (int64_t)header_len)
        return zt_error_set(ZT_ERR_CKPT_CORRUPT, "checkpoint shard %s: record %d (%s %s) has "
                            "inconsistent rows/bytes", s->path, i, r->name, role);
    if (r->offset + r->bytes > file_bytes)
        return zt_error_set(ZT_ERR_CKPT_CORRUPT, "checkpoint shard %s: truncated: tensor %s (%s) "
                            "ends at byte %lld, the file has %lld", s->path, r->name, role,
                            (long long)(r->offset + r->bytes), (long long)file_bytes);
    return ZT_OK;
}

/* The header's run_id (16 hex digits) and step, both or neither: the checkpoint the shard
 * belongs to (zt_shard_set_check_id compares them with meta.json's). */
static enum zt_status read_identity(struct zt_shard *s, const cJSON *j) {
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(j, "run_id");
    s->run_id = 0;
    s->step = -1;
    if (!id && !cJSON_GetObjectItemCaseSensitive(j, "step")) return ZT_OK;
    const char *hex = cJSON_IsString(id) ? id->valuestring : "";
    if (zt_run_id_parse(hex, &s->run_id) != 0 || get_int(j, "step", 0, BIG, &s->step)) {
        s->run_id = 0;
        return bad(s, "header's run_id or step is malformed (expected 16 hex digits and a "
                      "step >= 0)");
    }
    return ZT_OK;
}

enum zt_status zt_shard_open(struct zt_shard *s, const char *path) {
    memset(s, 0, sizeof *s);
    s->dfd = -1;
    snprintf(s->path, sizeof s->path, "%s", path);
    int64_t size = 0;
    ZT_CHECK(zt_file_open_input("checkpoint shard", path, &s->fd, &size));
    cJSON *j = NULL;
    uint32_t hl = 0;
    enum zt_status rc = read_header(s, size, &j, &hl);
    int64_t fmt = 0, rank = 0, world = 0;
    const cJSON *recs = j ? cJSON_GetObjectItemCaseSensitive(j, "records") : NULL;
    if (rc == ZT_OK && (get_int(j, "format", 0, INT32_MAX, &fmt) ||
                        get_int(j, "world_size", 1, 1 << 20, &world) ||
                        get_int(j, "rank", 0, world - 1, &rank) || !cJSON_IsArray(recs)))
        rc = bad(s, "header lacks format, rank, world_size or records (expected whole numbers, "
                    "world_size 1 to 2^20, rank below it)");
    if (rc == ZT_OK && fmt != ZT_SHARD_FORMAT)
        rc = zt_error_set(ZT_ERR_CKPT_CORRUPT, "checkpoint shard %s: format %lld (this zerotask "
                          "reads format %d)", path, (long long)fmt, ZT_SHARD_FORMAT);
    if (rc == ZT_OK) rc = read_identity(s, j);
    if (rc == ZT_OK) {
        s->rank = (int)rank;
        s->world = (int)world;
        s->n = cJSON_GetArraySize(recs);
        s->rec = calloc((size_t)s->n + 1, sizeof *s->rec);
        if (!s->rec) rc = zt_error_set(ZT_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; rc == ZT_OK && i < s->n; i++)
        rc = parse_record(s, cJSON_GetArrayItem(recs, i), i, hl, size, &s->rec[i]);
    cJSON_Delete(j);
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
                        zt_shard_role_name(s->rec[i].role), (long long)s->rec[i].row0,
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
    /* records start on SHARD_ALIGN boundaries: the whole blocks direct, the rest buffered */
    int64_t direct = s->aio && s->dfd >= 0 && (uintptr_t)buf % SHARD_ALIGN == 0 &&
                             r->offset % SHARD_ALIGN == 0 && r->bytes >= DIRECT_MIN
                         ? r->bytes / SHARD_ALIGN * SHARD_ALIGN
                         : 0;
    size_t done = 0; /* bytes checksummed */
    uint32_t crc = 0;
    pthread_t th;
    struct pipe p = {.s = s, .buf = buf, .len = (size_t)direct, .off = r->offset};
    int threaded = 0; /* the direct part was read by the helper thread */
    if (direct >= HELPER_READ_MIN && pthread_mutex_init(&p.mu, NULL) == 0) {
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
    char *buf = malloc(VERIFY_CHUNK);
    if (!buf) return zt_error_set(ZT_ERR_NOMEM, "out of memory");
    enum zt_status rc = ZT_OK;
    for (int i = 0; i < s->n && rc == ZT_OK; i++) {
        uint32_t c = 0;
        for (int64_t at = 0; at < s->rec[i].bytes && rc == ZT_OK; at += VERIFY_CHUNK) {
            int64_t k = s->rec[i].bytes - at < VERIFY_CHUNK ? s->rec[i].bytes - at : VERIFY_CHUNK;
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
    s->buf_shard = s->buf_record = -1;
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

enum zt_status zt_shard_set_check_id(const struct zt_shard_set *s, uint64_t run_id,
                                     int64_t step) {
    for (int k = 0; k < s->n; k++) {
        const struct zt_shard *sh = &s->sh[k];
        if (!run_id && sh->run_id)
            return zt_error_set(ZT_ERR_CKPT_CORRUPT, "checkpoint shard %s: run id %016llx, "
                                "expected none: the checkpoint's meta.json records no run id "
                                "(meta.json from an older checkpoint?)", sh->path,
                                (unsigned long long)sh->run_id);
        if (!run_id) continue;
        if (!sh->run_id)
            return zt_error_set(ZT_ERR_CKPT_CORRUPT, "checkpoint shard %s: no run id, expected "
                                "run id %016llx (copied from an older checkpoint?)", sh->path,
                                (unsigned long long)run_id);
        if (sh->run_id != run_id)
            return zt_error_set(ZT_ERR_CKPT_CORRUPT, "checkpoint shard %s: run id %016llx, "
                                "expected %016llx (copied from another run's checkpoint?)",
                                sh->path, (unsigned long long)sh->run_id,
                                (unsigned long long)run_id);
        if (sh->step != step)
            return zt_error_set(ZT_ERR_CKPT_CORRUPT, "checkpoint shard %s: step %lld, expected "
                                "%lld (copied from another checkpoint?)", sh->path,
                                (long long)sh->step, (long long)step);
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
                                            s->sh[k2].path, name, zt_shard_role_name(role));
                }
            have += r->row1 - r->row0;
        }
    if (have != rows)
        return zt_error_set(ZT_ERR_CKPT_CORRUPT, "checkpoint %s: its shards hold %lld of the "
                            "%lld rows of tensor %s (%s); a rank's shard is missing or from "
                            "another checkpoint", s->n ? s->sh[0].path : "(no shards)",
                            (long long)have, (long long)rows, name, zt_shard_role_name(role));
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
    return zt_shard_set_check_subset(s, t, n);
}

enum zt_status zt_shard_set_check_subset(const struct zt_shard_set *s,
                                         const struct zt_shard_tensor *t, int n) {
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
            if (s->buf_shard != k || s->buf_record != i) {
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
                s->buf_shard = -1; /* the wanted rows are copied as the record is checked */
                const size_t at = (size_t)(lo - r->row0 * cols) * sizeof(float);
                ZT_CHECK(read_rec(&s->sh[k], i, s->buf, dst + (lo - x0), at,
                                  at + (size_t)(hi - lo) * sizeof(float)));
                s->buf_shard = k;
                s->buf_record = i;
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
