/*
 * io/tokens.c: token files in llm.c's format (memory-mapped reader, atomic writer).
 *
 * Layer: io/ (platform; no StarPU). Format: 256 little-endian int32 (magic 20240520, version 1,
 * token count, rest 0), then `count` uint16 tokens. zt_tokens_open validates everything up front
 * (header, exact size, every token < vocab_size), so a bad file fails before training starts
 * with one line naming the file. zt_tokens_batch implements the data rule of zt_tokens.h.
 */
#include "zt_tokens.h"

#include <errno.h>     /* errno, EINTR */
#include <stdio.h>     /* snprintf */
#include <stdlib.h>    /* malloc, free, mkstemp */
#include <string.h>    /* memcpy, memset, strerror, strrchr, strdup */
#include <sys/mman.h>  /* mmap, munmap */
#include <unistd.h>    /* close, write, fsync, unlink */

#include "zt_file.h"   /* zt_afile_*, zt_file_open_input */
#include "zt_status.h" /* zt_error_set, ZT_ASSERT_MSG */

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "token files are little-endian; this reader assumes a little-endian host"
#endif

#define HEADER_BYTES ((size_t)ZT_TOKENS_HEADER_INTS * sizeof(int32_t))

enum zt_status zt_tokens_open(struct zt_tokens *t, const char *path, int vocab_size) {
    ZT_ASSERT_MSG(t && path, "zt_tokens_open: NULL argument");
    memset(t, 0, sizeof *t);
    if (vocab_size < 1)
        return zt_error_set(ZT_ERR_INVALID, "tokens %s: vocab_size must be >= 1, got %d", path,
                            vocab_size);
    snprintf(t->path, sizeof t->path, "%s", path);
    int64_t file_size = 0;
    int fd = -1;
    ZT_CHECK(zt_file_open_input("tokens", path, &fd, &file_size));
    size_t size = (size_t)file_size;
    if (size < HEADER_BYTES) {
        close(fd);
        return zt_error_set(ZT_ERR_DATA, "tokens %s: truncated header (%zu bytes; the header "
                                         "alone is %zu)", path, size, HEADER_BYTES);
    }
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int merr = errno;
    close(fd); /* the mapping keeps the file referenced */
    if (map == MAP_FAILED)
        return zt_error_set(ZT_ERR_IO, "tokens %s: mmap failed (%s)", path, strerror(merr));
    int32_t h[3];
    memcpy(h, map, sizeof h);
    enum zt_status rc = ZT_OK;
    if (h[0] != ZT_TOKENS_MAGIC)
        rc = zt_error_set(ZT_ERR_DATA, "tokens %s: bad magic %d, expected %d (not an llm.c token "
                                       "file)", path, h[0], ZT_TOKENS_MAGIC);
    else if (h[1] != ZT_TOKENS_VERSION)
        rc = zt_error_set(ZT_ERR_DATA, "tokens %s: version %d, expected %d (uint16 tokens)", path,
                          h[1], ZT_TOKENS_VERSION);
    else if (h[2] < 2)
        rc = zt_error_set(ZT_ERR_DATA, "tokens %s: header token count %d; need at least 2 (one "
                                       "input and its target)", path, h[2]);
    else if (size != HEADER_BYTES + 2 * (size_t)h[2])
        rc = zt_error_set(ZT_ERR_DATA, "tokens %s: file is %zu bytes, but the header's count %d "
                                       "needs %zu (1024 + 2 * count)", path, size, h[2],
                          HEADER_BYTES + 2 * (size_t)h[2]);
    if (rc != ZT_OK) {
        munmap(map, size);
        return rc;
    }
    const uint16_t *tok = (const uint16_t *)((const char *)map + HEADER_BYTES);
    size_t count = (size_t)h[2];
    for (size_t i = 0; i < count; i++) {
        if (tok[i] >= (unsigned)vocab_size) {
            rc = zt_error_set(ZT_ERR_DATA, "tokens %s: token %zu is %u, not below vocab_size %d",
                              path, i, (unsigned)tok[i], vocab_size);
            munmap(map, size);
            return rc;
        }
    }
    t->tok = tok;
    t->count = count;
    t->map = map;
    t->maplen = size;
    return ZT_OK;
}

void zt_tokens_close(struct zt_tokens *t) {
    if (!t) return;
    if (t->map) munmap(t->map, t->maplen);
    memset(t, 0, sizeof *t);
}

void zt_tokens_batch(const struct zt_tokens *t, int64_t step, int B, int T, int row0, int nrows,
                     int32_t *inputs, int32_t *targets) {
    ZT_ASSERT_MSG(t && t->tok && t->count >= 2, "zt_tokens_batch: file not open");
    ZT_ASSERT_MSG(step >= 1 && B >= 1 && T >= 1 && row0 >= 0 && nrows >= 0 && row0 + nrows <= B,
                  "zt_tokens_batch: bad step %lld / rows %d+%d of B=%d / T=%d", (long long)step,
                  row0, nrows, B, T);
    /* position ((step-1)*B*T + k*T + t) mod count without overflow: count < 2^31, so a product
     * of two residues fits in 64 bits */
    uint64_t n = t->count;
    uint64_t base = (((uint64_t)(step - 1) % n) * (((uint64_t)B * (uint64_t)T) % n)) % n;
    for (int r = 0; r < nrows; r++) {
        uint64_t p = (base + ((uint64_t)(row0 + r) * (uint64_t)T) % n) % n;
        int32_t *in = inputs + (size_t)r * T, *tg = targets + (size_t)r * T;
        for (int k = 0; k < T; k++) {
            uint64_t q = p + 1 == n ? 0 : p + 1;
            in[k] = t->tok[p];
            tg[k] = t->tok[q];
            p = q;
        }
    }
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
