/*
 * io/zt_aio.h: the asynchronous I/O engine behind NVMe offload and checkpoints: io_uring through
 * liburing on files opened with O_DIRECT, or a pool of pread/pwrite threads when io_uring is
 * refused (seccomp, io_uring_disabled) or ZT_AIO_ENGINE=threads forces it.
 *
 * One call moves one buffer: it is cut into block_size requests with up to queue_depth in flight
 * (DeepSpeed's aio settings: single_submit submits each request alone, overlap_events submits
 * more while earlier ones complete instead of waiting for the whole batch). Short transfers are
 * continued and EINTR/EAGAIN retried; every failure is a ZT_ERR_IO status whose message names
 * the file, the operation and the byte offset. Calls from several threads at once are safe (a
 * ring per concurrent caller). With O_DIRECT, buffers, lengths and offsets must be multiples of
 * ZT_AIO_ALIGN: the engine checks it and says so.
 *
 * Layer: io/. No StarPU.
 */
#ifndef ZT_AIO_H
#define ZT_AIO_H

#include <stddef.h>    /* size_t */
#include <stdint.h>    /* int64_t */
#include "zt_status.h" /* enum zt_status */

#define ZT_AIO_ALIGN 4096

enum zt_aio_engine { ZT_AIO_AUTO = 0, ZT_AIO_URING, ZT_AIO_THREADS };

struct zt_aio_cfg {
    int64_t block_size;   /* bytes per request (DeepSpeed default 1 MiB), multiple of 4096 */
    int queue_depth;      /* requests in flight (default 8) */
    int single_submit;    /* submit requests one by one (default false) */
    int overlap_events;   /* keep submitting while requests complete (default true) */
    enum zt_aio_engine engine; /* AUTO: io_uring if the kernel allows it, else threads */
};

typedef struct zt_aio *zt_aio_t;

/* A buffer for O_DIRECT transfers of bytes (free it with free()): 4096-aligned, and from
 * ZT_AIO_HUGE up 2 MiB-aligned, rounded up to 2 MiB and with transparent huge pages asked for
 * (MADV_HUGEPAGE; THP is "madvise" on Debian), so each 2 MiB is physically contiguous and a
 * 1 MiB request is one DMA segment instead of 256: a block driver with few segments per request
 * (virtio-blk) then takes a request whole instead of requeueing it (docs/checkpoints.md). NULL
 * when out of memory. */
#define ZT_AIO_HUGE (2 << 20)
void *zt_aio_alloc(size_t bytes);

/* Start the engine (AUTO probes io_uring; the fallback and its reason are logged). */
enum zt_status zt_aio_init(zt_aio_t *a, const struct zt_aio_cfg *cfg);
void zt_aio_free(zt_aio_t a);
/* "io_uring" or "threads" */
const char *zt_aio_engine_name(zt_aio_t a);
/* the engine a ZT_AIO_ENGINE value names: "io_uring", "threads", else AUTO ("auto") */
enum zt_aio_engine zt_aio_engine_named(const char *name);

/* Read or write len bytes at byte offset off of fd (path names it in messages). Blocks until
 * every byte moved or one request failed. Reading past the end of the file is an error. */
enum zt_status zt_aio_read(zt_aio_t a, int fd, const char *path, void *buf, size_t len,
                           int64_t off);
enum zt_status zt_aio_write(zt_aio_t a, int fd, const char *path, const void *buf, size_t len,
                            int64_t off);
/* zt_aio_read that also says how far it has got: fn(ctx, k) from the calling thread each time
 * the first k bytes of buf have all arrived (k grows by whole requests; the last call has
 * k == len unless the read fails), so that another thread can work on the front of the buffer
 * while the rest is still in flight. */
enum zt_status zt_aio_read_progress(zt_aio_t a, int fd, const char *path, void *buf, size_t len,
                                    int64_t off, void (*fn)(void *ctx, size_t bytes),
                                    void *ctx);

/* Write several buffers (each at its own offset) as one stream of requests: queue_depth stay in
 * flight across their boundaries. The same rules and errors as zt_aio_write. */
struct zt_aio_seg {
    void *buf;
    size_t len;
    int64_t off;
};
enum zt_status zt_aio_writev(zt_aio_t a, int fd, const char *path, const struct zt_aio_seg *seg,
                             int nseg);
/* A stream of writes to one file: next(ctx, &seg, wait) gives the next segment (1), none yet
 * (0; only when wait is 0) or the end (-1), and is asked again whenever a request slot is free,
 * so queue_depth requests stay in flight across segments that arrive while others are written;
 * done(ctx, seg.buf) hands each segment's buffer back as soon as its last request completed
 * (also after a failure, unwritten), so a producer can refill it. Both are called from the
 * calling thread. The first failure is the result, with the file offset (ZT_ERR_IO), after
 * every segment up to the end was handed back; the thread-pool engine writes one segment at a
 * time. */
struct zt_aio_stream {
    int (*next)(void *ctx, struct zt_aio_seg *seg, int wait);
    void (*done)(void *ctx, void *buf);
    void *ctx;
};
enum zt_status zt_aio_write_stream(zt_aio_t a, int fd, const char *path,
                                   const struct zt_aio_stream *st);
#endif /* ZT_AIO_H */
