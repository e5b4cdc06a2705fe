/*
 * bench/swap_bench.c: sequential write and read bandwidth of zerotask's NVMe swap engine
 * (io/zt_aio.h) on one O_DIRECT file, for bench/swap_vs_fio.py.
 *
 * Per rep: create DIR/zt_swap_bench.<pid> (O_DIRECT, truncated; --layout sized (default): then
 * sized to BYTES as the engine's swap files are; new: left empty (zt_aio_write sizes it to the
 * write's end before its requests, as it does for any write past the end of a file);
 * allocated: written once, untimed, so the timed write overwrites allocated blocks), write
 * BYTES from one buffer of zt_aio_alloc (as the engine's) with zt_aio_write (one call per CALL
 * bytes, default one call for all), then fsync (timed
 * apart: fio's bandwidth does not include it either), then read the file back into a second
 * buffer with zt_aio_read and delete it. The first rep checks that what was read is what was
 * written. Prints the median over the reps in one line:
 *   swap_bench engine=io_uring layout=L bytes=N block_size=B queue_depth=Q call_bytes=C reps=R
 *              write_GBps=W read_GBps=R fsync_ms=F
 * (GB = 1e9 bytes).
 *
 * Usage: swap_bench --dir D [--bytes N] [--block-size B] [--queue-depth Q]
 *                   [--engine auto|io_uring|threads] [--reps R] [--call-bytes C]
 *                   [--single-submit] [--no-overlap] [--layout sized|new|allocated]
 * Sizes take a K/M/G suffix (powers of 1024).
 */
#define _GNU_SOURCE   /* O_DIRECT */
#include <fcntl.h>    /* open, O_DIRECT */
#include <stdint.h>   /* int64_t */
#include <stdio.h>    /* printf, fprintf */
#include <stdlib.h>   /* strtoll, qsort */
#include <string.h>   /* strcmp, memcmp */
#include <time.h>     /* clock_gettime */
#include <unistd.h>   /* fsync, close, unlink, getpid, ftruncate */

#include "bench_util.h" /* bench_now, bench_median, bench_parse_scaled */
#include "zt_aio.h"    /* zt_aio_*, zt_aio_alloc */
#include "zt_status.h" /* zt_error_last */


static void usage(void) {
    fprintf(stderr, "usage: swap_bench --dir D [--bytes N] [--block-size B] [--queue-depth Q] "
                    "[--engine auto|io_uring|threads] [--reps R] [--call-bytes C] "
                    "[--single-submit] [--no-overlap] [--layout sized|new|allocated]\n");
    exit(2);
}

/* move len bytes in calls of at most call bytes each */
static enum zt_status move(zt_aio_t a, int fd, const char *path, char *buf, int64_t len,
                           int64_t call, int write) {
    for (int64_t off = 0; off < len; off += call) {
        size_t n = (size_t)(len - off < call ? len - off : call);
        enum zt_status rc = write ? zt_aio_write(a, fd, path, buf + off, n, off)
                                  : zt_aio_read(a, fd, path, buf + off, n, off);
        if (rc != ZT_OK) return rc;
    }
    return ZT_OK;
}

int main(int argc, char **argv) {
    const char *dir = NULL;
    int64_t bytes = 1LL << 30, call = 0;
    struct zt_aio_cfg cfg = {.block_size = 1 << 20, .queue_depth = 8, .single_submit = 0,
                             .overlap_events = 1, .engine = ZT_AIO_AUTO};
    int reps = 3, layout = 1; /* 0 new, 1 sized, 2 allocated */
    for (int i = 1; i < argc; i++) {
        const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(k, "--single-submit")) { cfg.single_submit = 1; continue; }
        if (!strcmp(k, "--no-overlap")) { cfg.overlap_events = 0; continue; }
        if (!v) usage();
        i++;
        if (!strcmp(k, "--dir")) dir = v;
        else if (!strcmp(k, "--bytes")) bytes = bench_parse_scaled("swap_bench", v, 1024.0);
        else if (!strcmp(k, "--block-size"))
            cfg.block_size = bench_parse_scaled("swap_bench", v, 1024.0);
        else if (!strcmp(k, "--queue-depth")) cfg.queue_depth = atoi(v);
        else if (!strcmp(k, "--reps")) reps = atoi(v);
        else if (!strcmp(k, "--call-bytes")) call = bench_parse_scaled("swap_bench", v, 1024.0);
        else if (!strcmp(k, "--layout")) {
            if (!strcmp(v, "new")) layout = 0;
            else if (!strcmp(v, "sized")) layout = 1;
            else if (!strcmp(v, "allocated")) layout = 2;
            else usage();
        }
        else if (!strcmp(k, "--engine")) {
            if (!strcmp(v, "auto")) cfg.engine = ZT_AIO_AUTO;
            else if (!strcmp(v, "io_uring")) cfg.engine = ZT_AIO_URING;
            else if (!strcmp(v, "threads")) cfg.engine = ZT_AIO_THREADS;
            else usage();
        } else usage();
    }
    if (!dir || bytes <= 0 || bytes % ZT_AIO_ALIGN || reps < 1) usage();
    if (call <= 0 || call > bytes) call = bytes;
    if (call % ZT_AIO_ALIGN) {
        fprintf(stderr, "swap_bench: --call-bytes must be a multiple of %d\n", ZT_AIO_ALIGN);
        return 2;
    }

    zt_aio_t a;
    if (zt_aio_init(&a, &cfg) != ZT_OK) {
        fprintf(stderr, "swap_bench: %s\n", zt_error_last());
        return 1;
    }
    /* the engine's own buffers come from zt_aio_alloc (huge pages) */
    char *w = zt_aio_alloc((size_t)bytes), *r = zt_aio_alloc((size_t)bytes);
    if (!w || !r) {
        fprintf(stderr, "swap_bench: cannot allocate 2 x %lld bytes\n", (long long)bytes);
        return 1;
    }
    for (int64_t i = 0; i < bytes; i += 8) { /* touch every page before timing */
        uint64_t x = (uint64_t)i * 0x9E3779B97F4A7C15ull;
        memcpy(w + i, &x, 8);
    }
    memset(r, 0, (size_t)bytes);

    char path[4096];
    snprintf(path, sizeof path, "%s/zt_swap_bench.%d", dir, (int)getpid());
    double *tw = calloc((size_t)reps, sizeof *tw), *tr = calloc((size_t)reps, sizeof *tr),
           *tf = calloc((size_t)reps, sizeof *tf);
    int status = 0;
    for (int rep = 0; rep < reps && !status; rep++) {
        int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_DIRECT, 0644);
        /* sized: as the engine's swap files are (io/swapdir.c; on ext4 a direct write past the
         * end of the file waits for its own completion, one request at a time); allocated: the
         * blocks written once before the timed write (a swap file from the second step on) */
        int bad = fd < 0 || (layout == 1 && ftruncate(fd, (off_t)bytes) != 0) ||
                  (layout == 2 && (move(a, fd, path, w, bytes, call, 1) != ZT_OK || fsync(fd)));
        if (bad) {
            fprintf(stderr, "swap_bench: %s: cannot prepare the file (%s)\n", path,
                    zt_error_last()[0] ? zt_error_last() : "system error");
            if (fd >= 0) close(fd);
            status = 1;
            break;
        }
        double t0 = bench_now();
        enum zt_status rc = move(a, fd, path, w, bytes, call, 1);
        double t1 = bench_now();
        if (rc == ZT_OK && fsync(fd) != 0) {
            perror("fsync");
            status = 1;
        }
        double t2 = bench_now();
        if (rc == ZT_OK && !status) rc = move(a, fd, path, r, bytes, call, 0);
        double t3 = bench_now();
        close(fd);
        unlink(path);
        if (rc != ZT_OK) {
            fprintf(stderr, "swap_bench: %s\n", zt_error_last());
            status = 1;
            break;
        }
        if (rep == 0 && memcmp(w, r, (size_t)bytes) != 0) {
            fprintf(stderr, "swap_bench: the data read back differs from what was written\n");
            status = 1;
            break;
        }
        tw[rep] = (double)bytes / (t1 - t0) / 1e9;
        tf[rep] = 1e3 * (t2 - t1);
        tr[rep] = (double)bytes / (t3 - t2) / 1e9;
        fprintf(stderr, "swap_bench: rep %d: write %.3f GB/s (fsync %.1f ms), read %.3f GB/s\n",
                rep + 1, tw[rep], tf[rep], tr[rep]);
    }
    static const char *const layouts[] = {"new", "sized", "allocated"};
    if (!status)
        printf("swap_bench engine=%s layout=%s bytes=%lld block_size=%lld queue_depth=%d "
               "call_bytes=%lld reps=%d write_GBps=%.4f read_GBps=%.4f fsync_ms=%.2f\n",
               zt_aio_engine_name(a), layouts[layout], (long long)bytes,
               (long long)cfg.block_size, cfg.queue_depth, (long long)call, reps,
               bench_median(tw, reps), bench_median(tr, reps), bench_median(tf, reps));
    free(tw);
    free(tr);
    free(tf);
    free(w);
    free(r);
    zt_aio_free(a);
    return status;
}
