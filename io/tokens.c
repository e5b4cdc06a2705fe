/*
 * io/tokens.c: token files in llm.c's format (pread reader, atomic writer).
 *
 * Layer: io/ (platform; no StarPU). Format: 256 little-endian int32 (magic, version, token
 * count, rest 0), then `count` tokens, uint16 (magic 20240520, version 1) or uint32 (magic
 * 20240801, version 7). zt_tokens_open validates the header and the exact size, and every token
 * of a file small enough to scan, so a bad file fails before training starts with one line
 * naming the file. zt_tokens_batch implements the data rule of zt_tokens.h and zt_tokens_row
 * reads one planned row; both read with pread from the descriptor kept open and check every
 * token again, because the file may be truncated or rewritten while training runs: a mapping
 * would turn that into SIGBUS, or an id past the vocabulary into a wild read in a kernel.
 */
#include "zt_tokens.h"

#include <errno.h>     /* errno, EINTR */
#include <fcntl.h>     /* posix_fadvise */
#include <stdio.h>     /* snprintf */
#include <string.h>    /* memset, strerror */
#include <sys/stat.h>  /* fstat */
#include <unistd.h>    /* close, pread */

#include "zt_file.h"   /* zt_afile_*, zt_file_open_input */
#include "zt_status.h" /* zt_error_set, ZT_ASSERT_MSG */

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "token files are little-endian; this reader assumes a little-endian host"
#endif

#define HEADER_BYTES ((size_t)ZT_TOKENS_HEADER_INTS * sizeof(int32_t))

/* Tokens per pread: a batch row of up to this many tokens is one read (two when it wraps). */
#define CHUNK_TOKENS 4096

/* pread until len bytes or end of file; returns the bytes read, or -1 (errno set) */
static ssize_t pread_full(int fd, void *buf, size_t len, off_t off) {
    size_t got = 0;
    while (got < len) {
        ssize_t r = pread(fd, (char *)buf + got, len - got, off + (off_t)got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return -1;
        if (r == 0) break;
        got += (size_t)r;
    }
    return (ssize_t)got;
}

static size_t file_bytes(const struct zt_tokens *t) {
    return HEADER_BYTES + (size_t)t->width * t->count;
}

/* A read that came back short: the file is smaller than its header says (truncated since it
 * was opened) */
static enum zt_status short_read(const struct zt_tokens *t, const char *when, off_t off) {
    struct stat st;
    size_t expected = file_bytes(t);
    if (fstat(t->fd, &st) == 0 && (size_t)st.st_size < expected)
        return zt_error_set(ZT_ERR_DATA, "tokens %s: file shrank to %lld bytes %s (expected "
                                         "%zu)", t->path, (long long)st.st_size, when, expected);
    return zt_error_set(ZT_ERR_DATA, "tokens %s: read at byte %lld came back short %s (the file "
                                     "changed; expected %zu bytes)", t->path, (long long)off,
                        when, expected);
}

/* Tokens first .. first+n-1 (first + n <= count, n <= CHUNK_TOKENS + 1) into dst as uint32, each
 * checked below vocab_size. checked_at_open: the file was validated whole when opened, so a bad
 * token now means it changed since. */
static enum zt_status read_span(const struct zt_tokens *t, size_t first, size_t n, uint32_t *dst,
                                const char *when, int checked_at_open) {
    off_t off = (off_t)(HEADER_BYTES + (size_t)t->width * first);
    uint16_t narrow[CHUNK_TOKENS + 1];
    void *raw = t->width == 2 ? (void *)narrow : (void *)dst;
    ssize_t got = pread_full(t->fd, raw, (size_t)t->width * n, off);
    if (got < 0)
        return zt_error_set(ZT_ERR_IO, "tokens %s: read at byte %lld failed %s (%s)", t->path,
                            (long long)off, when, strerror(errno));
    if ((size_t)got < (size_t)t->width * n) return short_read(t, when, off + got);
    if (t->width == 2)
        for (size_t i = 0; i < n; i++) dst[i] = narrow[i];
    for (size_t i = 0; i < n; i++) {
        if (dst[i] < (unsigned)t->vocab_size) continue;
        return zt_error_set(ZT_ERR_DATA, "tokens %s: token %zu at byte %lld is %u, not below "
                                         "vocab_size %d%s", t->path, first + i,
                            (long long)(off + (off_t)t->width * (off_t)i), (unsigned)dst[i],
                            t->vocab_size, checked_at_open ? " (the file changed while "
                                                             "training)" : "");
    }
    return ZT_OK;
}

/* n (<= CHUNK_TOKENS + 1) tokens from position pos (< count), wrapping to the start of the file
 * as often as needed */
static enum zt_status read_wrapped(const struct zt_tokens *t, uint64_t pos, size_t n,
                                   uint32_t *dst) {
    int scanned = (size_t)t->width * t->count <= ZT_TOKENS_SCAN_BYTES;
    while (n > 0) {
        size_t run = t->count - (size_t)pos < n ? t->count - (size_t)pos : n;
        ZT_CHECK(read_span(t, (size_t)pos, run, dst, "while training", scanned));
        dst += run;
        n -= run;
        pos = 0;
    }
    return ZT_OK;
}

/* the token width the header's magic and version name, or 0 */
static int header_width(const int32_t *h) {
    if (h[0] == ZT_TOKENS_MAGIC && h[1] == ZT_TOKENS_VERSION) return 2;
    if (h[0] == ZT_TOKENS_MAGIC_WIDE && h[1] == ZT_TOKENS_VERSION_WIDE) return 4;
    return 0;
}

/* the header's fields against the file's size */
static enum zt_status check_header(const char *path, const int32_t *h, size_t size) {
    if (h[0] != ZT_TOKENS_MAGIC && h[0] != ZT_TOKENS_MAGIC_WIDE)
        return zt_error_set(ZT_ERR_DATA, "tokens %s: bad magic %d, expected %d (uint16 tokens) "
                                         "or %d (uint32) (not an llm.c token file)", path, h[0],
                            ZT_TOKENS_MAGIC, ZT_TOKENS_MAGIC_WIDE);
    int width = header_width(h);
    if (!width)
        return zt_error_set(ZT_ERR_DATA, "tokens %s: version %d, expected %d with magic %d (%s "
                                         "tokens)", path, h[1],
                            h[0] == ZT_TOKENS_MAGIC ? ZT_TOKENS_VERSION : ZT_TOKENS_VERSION_WIDE,
                            h[0], h[0] == ZT_TOKENS_MAGIC ? "uint16" : "uint32");
    if (h[2] < 2)
        return zt_error_set(ZT_ERR_DATA, "tokens %s: header token count %d; need at least 2 (one "
                                         "input and its target)", path, h[2]);
    size_t need = HEADER_BYTES + (size_t)width * (size_t)h[2];
    if (size != need)
        return zt_error_set(ZT_ERR_DATA, "tokens %s: file is %zu bytes, but the header's count %d "
                                         "needs %zu (1024 + %d * count: uint%d tokens)", path,
                            size, h[2], need, width, 8 * width);
    return ZT_OK;
}

/* header and size, and every token below vocab_size when the file is small enough to scan */
static enum zt_status validate(struct zt_tokens *t, size_t size) {
    if (size < HEADER_BYTES)
        return zt_error_set(ZT_ERR_DATA, "tokens %s: truncated header (%zu bytes; the header "
                                         "alone is %zu)", t->path, size, HEADER_BYTES);
    int32_t h[3];
    ssize_t got = pread_full(t->fd, h, sizeof h, 0);
    if (got < 0)
        return zt_error_set(ZT_ERR_IO, "tokens %s: cannot read the header (%s)", t->path,
                            strerror(errno));
    if ((size_t)got < sizeof h) return short_read(t, "while opening", got);
    ZT_CHECK(check_header(t->path, h, size));
    t->count = (size_t)h[2];
    t->width = header_width(h);
    if ((size_t)t->width * t->count > ZT_TOKENS_SCAN_BYTES) return ZT_OK;
    uint32_t buf[CHUNK_TOKENS];
    for (size_t i = 0; i < t->count; i += CHUNK_TOKENS) {
        size_t n = t->count - i < CHUNK_TOKENS ? t->count - i : CHUNK_TOKENS;
        ZT_CHECK(read_span(t, i, n, buf, "while opening", 0));
    }
    return ZT_OK;
}

enum zt_status zt_tokens_open(struct zt_tokens *t, const char *path, int vocab_size) {
    ZT_ASSERT_MSG(t && path, "zt_tokens_open: NULL argument");
    memset(t, 0, sizeof *t);
    t->fd = -1;
    if (vocab_size < 1)
        return zt_error_set(ZT_ERR_INVALID, "tokens %s: vocab_size must be >= 1, got %d", path,
                            vocab_size);
    snprintf(t->path, sizeof t->path, "%s", path);
    t->vocab_size = vocab_size;
    int64_t file_size = 0;
    ZT_CHECK(zt_file_open_input("tokens", path, &t->fd, &file_size));
    enum zt_status rc = validate(t, (size_t)file_size);
    if (rc != ZT_OK) {
        close(t->fd);
        t->fd = -1;
        t->count = 0;
    }
    return rc;
}

void zt_tokens_close(struct zt_tokens *t) {
    if (!t) return;
    if (t->count && t->fd >= 0) close(t->fd); /* count is 0 unless a file is open */
    memset(t, 0, sizeof *t);
    t->fd = -1;
}

/* T + 1 tokens from position p (< count) of t: inputs the first T, targets the last T, targets
 * from position `active` on -1 */
static enum zt_status read_row(const struct zt_tokens *t, uint64_t p, int T, int active,
                               int32_t *in, int32_t *tg) {
    uint32_t buf[CHUNK_TOKENS + 1];
    for (int k = 0; k < T; k += CHUNK_TOKENS) {
        int m = T - k < CHUNK_TOKENS ? T - k : CHUNK_TOKENS;
        ZT_CHECK(read_wrapped(t, (p + (uint64_t)k) % t->count, (size_t)m + 1, buf));
        for (int j = 0; j < m; j++) {
            in[k + j] = (int32_t)buf[j];
            tg[k + j] = k + j < active ? (int32_t)buf[j + 1] : -1;
        }
    }
    return ZT_OK;
}

enum zt_status zt_tokens_batch(const struct zt_tokens *t, int64_t step, int B, int T, int row0,
                               int nrows, int32_t *inputs, int32_t *targets) {
    ZT_ASSERT_MSG(t && t->fd >= 0 && t->count >= 2, "zt_tokens_batch: file not open");
    ZT_ASSERT_MSG(step >= 1 && B >= 1 && T >= 1 && row0 >= 0 && nrows >= 0 && row0 + nrows <= B,
                  "zt_tokens_batch: bad step %lld / rows %d+%d of B=%d / T=%d", (long long)step,
                  row0, nrows, B, T);
    /* position ((step-1)*B*T + k*T + t) mod count without overflow: count < 2^31, so a product
     * of two residues fits in 64 bits */
    /* row k of the step is the run's row (step-1)*B + k; only its residue mod count matters,
     * and a product of two residues (count < 2^31) fits in 64 bits */
    const uint64_t n = t->count, first = ((uint64_t)(step - 1) % n) * ((uint64_t)B % n) % n;
    for (int r = 0; r < nrows; r++) {
        uint64_t p = zt_tokens_step_pos(t, (first + (uint64_t)(row0 + r)) % n, T);
        ZT_CHECK(read_row(t, p, T, T, inputs + (size_t)r * T, targets + (size_t)r * T));
    }
    return ZT_OK;
}

uint64_t zt_tokens_step_pos(const struct zt_tokens *t, uint64_t g, int T) {
    const uint64_t n = t->count; /* (g * T) mod n without overflow: residues below 2^31 */
    return ((g % n) * ((uint64_t)T % n)) % n;
}

enum zt_status zt_tokens_row(const struct zt_tokens *files, const struct zt_data_row *row, int T,
                             int active, int32_t *inputs, int32_t *targets) {
    const struct zt_tokens *t = files + row->file;
    ZT_ASSERT_MSG(t->fd >= 0 && t->count >= 2 && row->pos >= 0 && (size_t)row->pos < t->count &&
                      T >= 1 && active >= 1 && active <= T,
                  "zt_tokens_row: bad row (file %d, position %lld) or T %d / active %d",
                  row->file, (long long)row->pos, T, active);
    return read_row(t, (uint64_t)row->pos, T, active, inputs, targets);
}

void zt_tokens_prefetch(const struct zt_tokens *files, const struct zt_data_row *row, int T) {
    const struct zt_tokens *t = files + row->file;
    size_t first = (size_t)row->pos, n = (size_t)T + 1;
    if (first + n > t->count) n = t->count - first; /* the wrapped part is the file's start */
    (void)posix_fadvise(t->fd, (off_t)(HEADER_BYTES + (size_t)t->width * first),
                        (off_t)((size_t)t->width * n), POSIX_FADV_WILLNEED);
}

// ----------------------------------------------------------------------------
// atomic write (the redis rdbSave sequence: tmp in the same directory, fsync, rename, fsync dir)

static enum zt_status write_file(const char *path, const void *tok, size_t count, int width) {
    if (!path || (!tok && count))
        return zt_error_set(ZT_ERR_INVALID, "zt_tokens_write: NULL argument");
    if (count > INT32_MAX)
        return zt_error_set(ZT_ERR_INVALID, "tokens %s: %zu tokens do not fit the int32 header "
                                            "count", path, count);
    struct zt_afile f;
    enum zt_status rc = zt_afile_open(&f, "tokens", path);
    if (rc != ZT_OK) return rc;
    int32_t h[ZT_TOKENS_HEADER_INTS] = {ZT_TOKENS_MAGIC, ZT_TOKENS_VERSION, (int32_t)count};
    if (width == 4) {
        h[0] = ZT_TOKENS_MAGIC_WIDE;
        h[1] = ZT_TOKENS_VERSION_WIDE;
    }
    if (zt_afile_write(&f, h, sizeof h) != 0 || zt_afile_write(&f, tok, count * width) != 0)
        return zt_afile_fail(&f);
    return zt_afile_commit(&f);
}

enum zt_status zt_tokens_write(const char *path, const uint16_t *tok, size_t count) {
    return write_file(path, tok, count, 2);
}

enum zt_status zt_tokens_write_wide(const char *path, const uint32_t *tok, size_t count) {
    return write_file(path, tok, count, 4);
}
