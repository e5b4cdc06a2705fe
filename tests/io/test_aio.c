/*
 * tests/io/test_aio.c: proves the async I/O engine (io/zt_aio.h) keeps its contract, for both
 * engines (io_uring and the pread/pwrite threads) and several request shapes (block size, queue
 * depth, single_submit, overlap_events):
 * - a buffer written with O_DIRECT in many requests reads back identical, whole and in parts;
 * - zt_aio_writev: segments from different buffers, out of file order, one of them not a
 *   multiple of the block size, land at their offsets; a misaligned segment is refused;
 * - reading past the end of the file fails with ZT_ERR_IO naming the file, "read" and the offset
 *   where the data ends;
 * - a misaligned buffer, length or offset is refused (ZT_ERR_INVALID, says "multiples of 4096");
 * - a bad file descriptor fails with the file's name and the system's reason;
 * - a write that hits the file size limit (RLIMIT_FSIZE: EFBIG, as a full disk gives ENOSPC)
 *   fails with ZT_ERR_IO naming the file and the offset of the first byte not written;
 * - ZT_AIO_AUTO picks io_uring on this kernel;
 * - zt_aio_alloc gives 4096-aligned small buffers and 2 MiB-aligned large ones marked for
 *   transparent huge pages.
 */
#define _GNU_SOURCE       /* O_DIRECT */
#include <fcntl.h>        /* open, O_DIRECT */
#include <signal.h>       /* signal, SIGXFSZ */
#include <stdio.h>        /* snprintf */
#include <stdint.h>       /* uintptr_t */
#include <stdlib.h>       /* getenv, aligned_alloc */
#include <string.h>       /* memcmp, strstr */
#include <sys/resource.h> /* setrlimit */
#include <sys/stat.h>     /* mkdir, fstat */
#include <sys/wait.h>     /* waitpid */
#include <unistd.h>       /* fork, close */

#include "zt_aio.h"    /* zt_aio_* */
#include "zt_status.h" /* zt_error_last */
#include "zt_test.h"   /* ZT_TEST_TRUE, zt_test_finish */

static char path[1024];

static int expect_err(int line, enum zt_status rc, enum zt_status code, const char *a,
                      const char *b) {
    if (rc == code && strstr(zt_error_last(), a) && (!b || strstr(zt_error_last(), b))) return 1;
    fprintf(stderr, "FAIL %s:%d: got %s \"%s\", want %s with \"%s\" and \"%s\"\n", __FILE__, line,
            zt_status_str(rc), zt_error_last(), zt_status_str(code), a, b ? b : "");
    zt_test_failures++;
    return 0;
}

/* zt_aio_read_progress's reports: growing, whole requests, the last the whole length, and the
 * reported front really there when it is reported */
struct prog {
    const unsigned char *want, *buf;
    size_t n, last, bs, calls; /* n: the read's length (its last report may be short) */
    int bad;
};
static void on_progress(void *ctx, size_t k) {
    struct prog *p = ctx;
    p->calls++;
    if (k <= p->last || (k % p->bs != 0 && k != p->n) || memcmp(p->want, p->buf, k) != 0)
        p->bad = 1;
    p->last = k;
}

/* zt_aio_write_stream's producer: segment i of nseg at offset perm(i) * len, each buffer handed
 * back once before it is given out again (3 buffers for more segments) */
struct feed {
    unsigned char *buf[3];
    int out[3];   /* 1 while the stream holds it */
    int i, nseg, misalign_at, twice;
    size_t len;
};
static int feed_next(void *ctx, struct zt_aio_seg *seg, int wait) {
    struct feed *f = ctx;
    if (f->i == f->nseg) return -1;
    int b = 0;
    while (b < 3 && f->out[b]) b++;
    if (b == 3) {
        if (wait) f->twice = 1; /* the stream waits while holding every buffer: a bug */
        return wait ? -1 : 0;
    }
    int slot = (f->i * 5) % f->nseg; /* out of file order */
    memset(f->buf[b], 'a' + slot, f->len);
    f->out[b] = 1;
    *seg = (struct zt_aio_seg){f->buf[b], f->len, (int64_t)(slot * f->len)};
    if (f->i == f->misalign_at) seg->off += 512;
    f->i++;
    return 1;
}
static void feed_done(void *ctx, void *buf) {
    struct feed *f = ctx;
    for (int b = 0; b < 3; b++)
        if (f->buf[b] == buf) {
            if (!f->out[b]) f->twice = 1;
            f->out[b] = 0;
        }
}

static void stream(enum zt_aio_engine eng, int64_t bs, int qd) {
    struct zt_aio_cfg cfg = {bs, qd, 0, 1, eng};
    zt_aio_t a;
    if (zt_aio_init(&a, &cfg) != ZT_OK) return;
    struct feed f = {.nseg = 7, .misalign_at = -1, .len = 3 * 65536};
    for (int b = 0; b < 3; b++) f.buf[b] = aligned_alloc(4096, f.len);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_DIRECT, 0644);
    struct zt_aio_stream st = {feed_next, feed_done, &f};
    ZT_TEST_TRUE(zt_aio_write_stream(a, fd, path, &st) == ZT_OK, "%s", zt_error_last());
    ZT_TEST_TRUE(!f.twice && !f.out[0] && !f.out[1] && !f.out[2],
                 "stream (%s, bs %lld, qd %d): every buffer back once, none held at the end",
                 zt_aio_engine_name(a), (long long)bs, qd);
    unsigned char *back = aligned_alloc(4096, f.len * 7);
    ZT_TEST_TRUE(zt_aio_read(a, fd, path, back, f.len * 7, 0) == ZT_OK, "%s", zt_error_last());
    int ok = 1;
    for (size_t k = 0; k < f.len * 7; k++) ok &= back[k] == 'a' + (int)(k / f.len);
    ZT_TEST_TRUE(ok, "stream (%s): each segment at its offset", zt_aio_engine_name(a));
    f = (struct feed){.buf = {f.buf[0], f.buf[1], f.buf[2]}, .nseg = 7, .misalign_at = 3,
                      .len = f.len};
    enum zt_status rc = zt_aio_write_stream(a, fd, path, &st);
    ZT_TEST_TRUE(rc != ZT_OK && strstr(zt_error_last(), path) && !f.twice && !f.out[0] &&
                     !f.out[1] && !f.out[2] && f.i == 7,
                 "stream (%s): a misaligned segment fails it (%s); every buffer back, the "
                 "stream read to its end", zt_aio_engine_name(a), zt_error_last());
    close(fd);
    free(back);
    for (int b = 0; b < 3; b++) free(f.buf[b]);
    zt_aio_free(a);
}

static void round_trip(enum zt_aio_engine eng, int64_t bs, int qd, int single, int overlap) {
    struct zt_aio_cfg cfg = {bs, qd, single, overlap, eng};
    zt_aio_t a;
    ZT_TEST_TRUE(zt_aio_init(&a, &cfg) == ZT_OK, zt_error_last());
    if (!a) return;
    const char *want = eng == ZT_AIO_THREADS ? "threads" : "io_uring";
    ZT_TEST_TRUE(strcmp(zt_aio_engine_name(a), want) == 0, "engine name");
    size_t n = (1 << 20) + 3 * 4096; /* not a multiple of the block size */
    unsigned char *w = aligned_alloc(4096, n), *r = aligned_alloc(4096, n);
    for (size_t i = 0; i < n; i++) w[i] = (unsigned char)(i * 131 + (i >> 12) + bs + qd);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_DIRECT, 0644);
    ZT_TEST_TRUE(fd >= 0, "open with O_DIRECT");
    ZT_TEST_TRUE(zt_aio_write(a, fd, path, w, n, 0) == ZT_OK, zt_error_last());
    memset(r, 0, n);
    ZT_TEST_TRUE(zt_aio_read(a, fd, path, r, n, 0) == ZT_OK, zt_error_last());
    ZT_TEST_TRUE(memcmp(w, r, n) == 0, "read back what was written");
    memset(r, 0, n);
    ZT_TEST_TRUE(zt_aio_read(a, fd, path, r, 5 * 4096, 7 * 4096) == ZT_OK, zt_error_last());
    ZT_TEST_TRUE(memcmp(w + 7 * 4096, r, 5 * 4096) == 0, "a part at an offset");
    memset(r, 0, n);
    struct prog pg = {w, r, n, 0, (size_t)bs, 0, 0};
    ZT_TEST_TRUE(zt_aio_read_progress(a, fd, path, r, n, 0, on_progress, &pg) == ZT_OK,
                 zt_error_last());
    ZT_TEST_TRUE(!pg.bad && pg.last == n && pg.calls >= 1 && memcmp(w, r, n) == 0,
                 "progress (%s, bs %lld, qd %d): %zu reports, growing, of whole requests that had "
                 "arrived, the last %zu of %zu", want, (long long)bs, qd, pg.calls, pg.last, n);
    pg = (struct prog){w + n - 4096, r, 8 * 4096, 0, (size_t)bs, 0, 0};
    expect_err(__LINE__, zt_aio_read_progress(a, fd, path, r, 8 * 4096, (int64_t)n - 4096,
                                              on_progress, &pg),
               ZT_ERR_IO, path, "unexpected end of file");
    ZT_TEST_TRUE(!pg.bad && pg.last < 8 * 4096, "a failed read never reports its whole length");
    /* past the end: the data ends at n */
    expect_err(__LINE__, zt_aio_read(a, fd, path, r, 8 * 4096, (int64_t)n - 4096), ZT_ERR_IO,
               path, "unexpected end of file");
    char off[64];
    snprintf(off, sizeof off, "read at offset %zu", n);
    expect_err(__LINE__, zt_aio_read(a, fd, path, r, 8 * 4096, (int64_t)n - 4096), ZT_ERR_IO,
               path, off);
    /* misaligned buffer, length, offset */
    expect_err(__LINE__, zt_aio_read(a, fd, path, r + 1, 4096, 0), ZT_ERR_INVALID, path,
               "multiples of 4096");
    expect_err(__LINE__, zt_aio_write(a, fd, path, w, 100, 0), ZT_ERR_INVALID, path,
               "multiples of 4096");
    expect_err(__LINE__, zt_aio_read(a, fd, path, r, 4096, 10), ZT_ERR_INVALID, path,
               "multiples of 4096");
    /* writev: r's halves and a piece of w, out of order, over the file's start */
    size_t h = n / 2 / 4096 * 4096;
    for (size_t i = 0; i < n; i++) r[i] = (unsigned char)(i * 7 + 3);
    struct zt_aio_seg seg[3] = {{r + h, n - h, (int64_t)h}, {w, 3 * 4096, (int64_t)n},
                                {r, h, 0}};
    ZT_TEST_TRUE(zt_aio_writev(a, fd, path, seg, 3) == ZT_OK, zt_error_last());
    unsigned char *back = aligned_alloc(4096, n + 3 * 4096);
    ZT_TEST_TRUE(zt_aio_read(a, fd, path, back, n + 3 * 4096, 0) == ZT_OK, zt_error_last());
    ZT_TEST_TRUE(memcmp(back, r, n) == 0 && memcmp(back + n, w, 3 * 4096) == 0,
                 "writev's segments at their offsets");
    /* the file was sized to the writes' end before they ran, and an inner write keeps it */
    struct stat sb;
    ZT_TEST_TRUE(fstat(fd, &sb) == 0 && sb.st_size == (off_t)(n + 3 * 4096),
                 "file size after an extending writev: %lld, want %zu", (long long)sb.st_size,
                 n + 3 * 4096);
    ZT_TEST_TRUE(zt_aio_write(a, fd, path, w, 4096, 4096) == ZT_OK, zt_error_last());
    ZT_TEST_TRUE(fstat(fd, &sb) == 0 && sb.st_size == (off_t)(n + 3 * 4096),
                 "an inner write changed the file size to %lld", (long long)sb.st_size);
    free(back);
    seg[1].len = 100;
    expect_err(__LINE__, zt_aio_writev(a, fd, path, seg, 3), ZT_ERR_INVALID, path,
               "multiples of 4096");
    close(fd);
    /* a closed descriptor */
    expect_err(__LINE__, zt_aio_read(a, fd, path, r, 4096, 0), ZT_ERR_IO, path,
               "Bad file descriptor");
    free(w);
    free(r);
    zt_aio_free(a);
}

/* in a child: a file size limit of 64 KiB, then a 256 KiB write */
static void size_limit(enum zt_aio_engine eng) {
    pid_t pid = fork();
    if (pid == 0) {
        struct rlimit rl = {65536, 65536};
        signal(SIGXFSZ, SIG_IGN);
        setrlimit(RLIMIT_FSIZE, &rl);
        struct zt_aio_cfg cfg = {16384, 4, 0, 1, eng};
        zt_aio_t a;
        if (zt_aio_init(&a, &cfg) != ZT_OK) _exit(2);
        void *w = aligned_alloc(4096, 262144);
        memset(w, 7, 262144);
        int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_DIRECT, 0644);
        enum zt_status rc = zt_aio_write(a, fd, path, w, 262144, 0);
        int ok = rc == ZT_OK ? 0
                             : expect_err(__LINE__, rc, ZT_ERR_IO, path, "write at offset 65536");
        ok = ok && strstr(zt_error_last(), "File too large");
        if (!ok) fprintf(stderr, "size limit: %s\n", zt_error_last());
        zt_aio_free(a);
        _exit(ok ? 0 : 1);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    ZT_TEST_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0, "a write past the file size limit fails "
                                                        "with the file and offset");
}

/* the VmFlags of the mapping that holds p (/proc/self/smaps), or "" */
static void vm_flags(const void *p, char *out, size_t n) {
    FILE *f = fopen("/proc/self/smaps", "r");
    char line[512];
    int in = 0;
    out[0] = '\0';
    while (f && fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' '))
            in = (uintptr_t)p >= lo && (uintptr_t)p < hi;
        else if (in && strncmp(line, "VmFlags:", 8) == 0) {
            snprintf(out, n, "%s", line + 8);
            break;
        }
    }
    if (f) fclose(f);
}

/* zt_aio_alloc: small buffers 4096-aligned; large ones 2 MiB-aligned, usable to their rounded
 * end, on a mapping marked for huge pages ("hg" in VmFlags: MADV_HUGEPAGE was applied; whether
 * the kernel then backs it with huge pages is its THP policy) */
static void alloc_buffers(void) {
    char *s = zt_aio_alloc(12288), *b = zt_aio_alloc((5 << 20) + 4096);
    ZT_TEST_TRUE(s && (uintptr_t)s % ZT_AIO_ALIGN == 0, "small buffer 4096-aligned");
    ZT_TEST_TRUE(b && (uintptr_t)b % ZT_AIO_HUGE == 0, "large buffer 2 MiB-aligned");
    if (b) {
        memset(b, 0x5a, 6 << 20); /* rounded up to whole huge pages: all of it is ours */
        char flags[512];
        vm_flags(b, flags, sizeof flags);
        ZT_TEST_TRUE(strstr(flags, " hg") != NULL, "large buffer marked MADV_HUGEPAGE "
                     "(VmFlags:%s)", flags);
    }
    free(s);
    free(b);
}

int main(void) {
    const char *tmp = getenv("ZT_IO_TEST_TMP");
    if (!tmp) tmp = "/tmp/zt-test-aio";
    mkdir(tmp, 0755);
    snprintf(path, sizeof path, "%s/swap.bin", tmp);
    for (int e = ZT_AIO_URING; e <= ZT_AIO_THREADS; e++) {
        round_trip((enum zt_aio_engine)e, 1 << 20, 8, 0, 1); /* DeepSpeed's defaults */
        round_trip((enum zt_aio_engine)e, 8192, 4, 1, 0);
        round_trip((enum zt_aio_engine)e, 4096, 1, 0, 1);
        round_trip((enum zt_aio_engine)e, 65536, 64, 0, 0);
        size_limit((enum zt_aio_engine)e);
        stream((enum zt_aio_engine)e, 65536, 4);
        stream((enum zt_aio_engine)e, 1 << 20, 8);
    }
    struct zt_aio_cfg cfg = {1 << 20, 8, 0, 1, ZT_AIO_AUTO};
    zt_aio_t a;
    ZT_TEST_TRUE(zt_aio_init(&a, &cfg) == ZT_OK && strcmp(zt_aio_engine_name(a), "io_uring") == 0,
                 "AUTO picks io_uring here");
    zt_aio_free(a);
    cfg.block_size = 1000;
    expect_err(__LINE__, zt_aio_init(&a, &cfg), ZT_ERR_CONFIG, "aio: block_size", "4096");
    alloc_buffers();
    unlink(path);
    return zt_test_finish("test_aio");
}
