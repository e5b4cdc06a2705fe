/*
 * io/tokens.c: token files in llm.c's format (pread reader, atomic writer).
 *
 * Layer: io/ (platform; no StarPU). Format: 256 little-endian int32 (magic 20240520, version 1,
 * token count, rest 0), then `count` uint16 tokens. zt_tokens_open validates everything up front
 * (header, exact size, every token < vocab_size), so a bad file fails before training starts
 * with one line naming the file. zt_tokens_batch implements the data rule of zt_tokens.h; it
 * reads each row with pread from the descriptor kept open and checks every token again, because
 * the file may be truncated or rewritten while training runs: a mapping would turn that into
 * SIGBUS, or an id past the vocabulary into a wild read in a kernel.
 */
#include "zt_tokens.h"

#include <errno.h>     /* errno, EINTR */
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

/* A read that came back short: the file is smaller than its header says (truncated since it
 * was opened) */
static enum zt_status short_read(const struct zt_tokens *t, const char *when, off_t off) {
    struct stat st;
    size_t expected = HEADER_BYTES + 2 * t->count;
    if (fstat(t->fd, &st) == 0 && (size_t)st.st_size < expected)
        return zt_error_set(ZT_ERR_DATA, "tokens %s: file shrank to %lld bytes %s (expected "
                                         "%zu)", t->path, (long long)st.st_size, when, expected);
    return zt_error_set(ZT_ERR_DATA, "tokens %s: read at byte %lld came back short %s (the file "
                                     "changed; expected %zu bytes)", t->path, (long long)off,
                        when, expected);
}

/* Tokens first .. first+n-1 (first + n <= count) into dst, each checked below vocab_size.
 * training: the file was validated at open, so a bad token now means it changed since. */
static enum zt_status read_span(const struct zt_tokens *t, size_t first, size_t n, uint16_t *dst,
                                int training) {
    const char *when = training ? "while training" : "while opening";
    off_t off = (off_t)(HEADER_BYTES + 2 * first);
    ssize_t got = pread_full(t->fd, dst, 2 * n, off);
    if (got < 0)
        return zt_error_set(ZT_ERR_IO, "tokens %s: read at byte %lld failed %s (%s)", t->path,
                            (long long)off, when, strerror(errno));
    if ((size_t)got < 2 * n) return short_read(t, when, off + got);
    for (size_t i = 0; i < n; i++) {
        if (dst[i] < (unsigned)t->vocab_size) continue;
        if (!training)
            return zt_error_set(ZT_ERR_DATA, "tokens %s: token %zu is %u, not below vocab_size "
                                             "%d", t->path, first + i, (unsigned)dst[i],
                                t->vocab_size);
        return zt_error_set(ZT_ERR_DATA, "tokens %s: token %zu at byte %lld is %u, not below "
                                         "vocab_size %d (the file changed while training)",
                            t->path, first + i, (long long)(off + 2 * (off_t)i),
                            (unsigned)dst[i], t->vocab_size);
    }
    return ZT_OK;
}

/* n tokens from position pos (< count), wrapping to the start of the file as often as needed */
static enum zt_status read_wrapped(const struct zt_tokens *t, uint64_t pos, size_t n,
                                   uint16_t *dst) {
    while (n > 0) {
        size_t run = t->count - (size_t)pos < n ? t->count - (size_t)pos : n;
        ZT_CHECK(read_span(t, (size_t)pos, run, dst, 1));
        dst += run;
        n -= run;
        pos = 0;
    }
    return ZT_OK;
}

/* the header's fields against the file's size */
static enum zt_status check_header(const char *path, const int32_t *h, size_t size) {
    if (h[0] != ZT_TOKENS_MAGIC)
        return zt_error_set(ZT_ERR_DATA, "tokens %s: bad magic %d, expected %d (not an llm.c "
                                         "token file)", path, h[0], ZT_TOKENS_MAGIC);
    if (h[1] != ZT_TOKENS_VERSION)
        return zt_error_set(ZT_ERR_DATA, "tokens %s: version %d, expected %d (uint16 tokens)",
                            path, h[1], ZT_TOKENS_VERSION);
    if (h[2] < 2)
        return zt_error_set(ZT_ERR_DATA, "tokens %s: header token count %d; need at least 2 (one "
                                         "input and its target)", path, h[2]);
    if (size != HEADER_BYTES + 2 * (size_t)h[2])
        return zt_error_set(ZT_ERR_DATA, "tokens %s: file is %zu bytes, but the header's count %d "
                                         "needs %zu (1024 + 2 * count)", path, size, h[2],
                            HEADER_BYTES + 2 * (size_t)h[2]);
    return ZT_OK;
}

/* header, size, and every token below vocab_size, read through t->fd */
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
    uint16_t buf[CHUNK_TOKENS];
    for (size_t i = 0; i < t->count; i += CHUNK_TOKENS) {
        size_t n = t->count - i < CHUNK_TOKENS ? t->count - i : CHUNK_TOKENS;
        ZT_CHECK(read_span(t, i, n, buf, 0));
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

enum zt_status zt_tokens_batch(const struct zt_tokens *t, int64_t step, int B, int T, int row0,
                               int nrows, int32_t *inputs, int32_t *targets) {
    ZT_ASSERT_MSG(t && t->fd >= 0 && t->count >= 2, "zt_tokens_batch: file not open");
    ZT_ASSERT_MSG(step >= 1 && B >= 1 && T >= 1 && row0 >= 0 && nrows >= 0 && row0 + nrows <= B,
                  "zt_tokens_batch: bad step %lld / rows %d+%d of B=%d / T=%d", (long long)step,
                  row0, nrows, B, T);
    /* position ((step-1)*B*T + k*T + t) mod count without overflow: count < 2^31, so a product
     * of two residues fits in 64 bits */
    uint64_t n = t->count;
    uint64_t base = (((uint64_t)(step - 1) % n) * (((uint64_t)B * (uint64_t)T) % n)) % n;
    uint16_t buf[CHUNK_TOKENS + 1];
    for (int r = 0; r < nrows; r++) {
        uint64_t p = (base + ((uint64_t)(row0 + r) * (uint64_t)T) % n) % n;
        int32_t *in = inputs + (size_t)r * T, *tg = targets + (size_t)r * T;
        /* a row reads T + 1 tokens from p: inputs are the first T, targets the last T */
        for (int k = 0; k < T; k += CHUNK_TOKENS) {
            int m = T - k < CHUNK_TOKENS ? T - k : CHUNK_TOKENS;
            ZT_CHECK(read_wrapped(t, (p + (uint64_t)k) % n, (size_t)m + 1, buf));
            for (int j = 0; j < m; j++) {
                in[k + j] = buf[j];
                tg[k + j] = buf[j + 1];
            }
        }
    }
    return ZT_OK;
}

// ----------------------------------------------------------------------------
// atomic write (the redis rdbSave sequence: tmp in the same directory, fsync, rename, fsync dir)

enum zt_status zt_tokens_write(const char *path, const uint16_t *tok, size_t count) {
    if (!path || (!tok && count))
        return zt_error_set(ZT_ERR_INVALID, "zt_tokens_write: NULL argument");
    if (count > INT32_MAX)
        return zt_error_set(ZT_ERR_INVALID, "tokens %s: %zu tokens do not fit the int32 header "
                                            "count", path, count);
    struct zt_afile f;
    enum zt_status rc = zt_afile_open(&f, "tokens", path);
    if (rc != ZT_OK) return rc;
    int32_t h[ZT_TOKENS_HEADER_INTS] = {ZT_TOKENS_MAGIC, ZT_TOKENS_VERSION, (int32_t)count};
    if (zt_afile_write(&f, h, sizeof h) != 0 || zt_afile_write(&f, tok, count * sizeof *tok) != 0)
        return zt_afile_fail(&f);
    return zt_afile_commit(&f);
}
