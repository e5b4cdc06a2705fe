/*
 * tasks/io_service.c: the I/O service: threads that run the host I/O tasks of the graph
 * (swap_in / swap_out of NVMe offload, and the checkpoint writer's staging tasks, zt_task_io)
 * and the blocking transfers outside the graph (zt_io_read_sync / zt_io_write_sync).
 *
 * Layer: tasks/. An I/O task is not a codelet: zt_task_swap_in/_out acquire its data handles
 * asynchronously (starpu_data_acquire_cb, in submission order like any task, so the graph's
 * dependencies hold), and once all are held the request goes to an I/O thread, which moves the
 * bytes with the aio engine and releases the handles; that starts the successors. No worker is
 * involved at any point: a swap neither waits for a free worker (behind long matmuls) to start
 * nor to end, and a worker never sleeps in I/O.
 */
#include <pthread.h>    /* pthread_* */
#include <stdlib.h>     /* calloc */
#include <string.h>     /* memcpy */
#include "zt_aio.h"     /* zt_aio_read/write */
#include "zt_sched.h"   /* zt_trace_record */
#include "zt_swapdir.h" /* struct zt_swapfile */
#include "tasks_impl.h" /* zt_tensor_handle */

#define MAX_IO_THREADS (ZT_TRACE_IO_THREADS_MAX - 1) /* the last trace lane is the comm thread's */

/* a transfer: its handles (each once), the segments, and how many acquisitions are pending */
struct io_request {
    const struct zt_swapfile *f;
    int to_file;  /* swap_out (blocks -> file), else swap_in */
    int nseg;     /* segments (a host task: its blocks) */
    int nhandles; /* distinct handles in d */
    int kind, layer, mb;
    int recompute; /* 1: submitted for a recompute of a checkpointed block (the opts' mark) */
    int prio;    /* the task's priority: ready requests are served highest first */
    int pending; /* acquisitions not yet granted, plus one while submitting */
    int64_t step;
    struct starpu_data_descr *d; /* [nh] handles and their access modes */
    int *segh;                   /* [n] handle of each segment */
    int64_t (*seg)[3];           /* [n] {mem_off, len, file_off} */
    zt_io_fn fn;                 /* a host task (zt_task_io) instead of a transfer */
    void *ctx;
    int64_t bytes;    /* a host task's bytes, for traces */
    int64_t trace_id; /* zt_trace_submit's id (0: not traced) */
    struct io_request *next;
};

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t th[MAX_IO_THREADS];
    int nth, stop, started;
    int users; /* zt_io_service_init calls not yet matched by zt_io_service_free */
    struct io_request *head, *tail;
    int64_t inflight;    /* requests submitted and not yet released */
    pthread_cond_t idle; /* signalled when inflight drops to 0 */
    zt_aio_t aio;
    int64_t bounce_bytes;
    enum zt_status err; /* first failure */
    char msg[512];
} g = {.mu = PTHREAD_MUTEX_INITIALIZER,
       .cv = PTHREAD_COND_INITIALIZER,
       .idle = PTHREAD_COND_INITIALIZER};

static void set_error(enum zt_status rc) {
    pthread_mutex_lock(&g.mu);
    if (g.err == ZT_OK) {
        g.err = rc;
        snprintf(g.msg, sizeof g.msg, "%s", zt_error_last());
    }
    pthread_mutex_unlock(&g.mu);
}

/* a transfer the aio engine takes as it is: it wants 4096-aligned buffers, lengths and offsets
 * whether or not the file is O_DIRECT (a buffered fallback file included) */
static int is_aligned(const void *p, int64_t len, int64_t off) {
    return (((uintptr_t)p | (uintptr_t)len | (uintptr_t)off) % ZT_AIO_ALIGN) == 0;
}

/* an unaligned read: aligned chunks through a bounce buffer */
static enum zt_status read_bounce(const struct zt_swapfile *f, char *dst, int64_t len, int64_t off,
                                  char *bounce) {
    int64_t a0 = off / ZT_AIO_ALIGN * ZT_AIO_ALIGN;
    int64_t a1 = (off + len + ZT_AIO_ALIGN - 1) / ZT_AIO_ALIGN * ZT_AIO_ALIGN;
    for (int64_t at = a0; at < a1; at += g.bounce_bytes) {
        int64_t n = a1 - at < g.bounce_bytes ? a1 - at : g.bounce_bytes;
        ZT_CHECK(zt_aio_read(g.aio, f->fd, f->path, bounce, (size_t)n, at));
        int64_t lo = off > at ? off : at, hi = off + len < at + n ? off + len : at + n;
        if (hi > lo) memcpy(dst + (lo - off), bounce + (lo - at), (size_t)(hi - lo));
    }
    return ZT_OK;
}

/* an unaligned write at an aligned offset: through the bounce buffer, the last chunk padded
 * with zeros to the next 4096 boundary (the file region of the segment, rounded up, is the
 * caller's) */
static enum zt_status write_bounce(const struct zt_swapfile *f, const char *src, int64_t len,
                                   int64_t off, char *bounce) {
    if (off % ZT_AIO_ALIGN)
        return zt_error_set(ZT_ERR_INVALID, "swap file %s: write of %lld bytes at offset %lld: "
                            "expected a 4096-aligned offset", f->path, (long long)len,
                            (long long)off);
    for (int64_t at = 0; at < len; at += g.bounce_bytes) {
        int64_t n = len - at < g.bounce_bytes ? len - at : g.bounce_bytes;
        int64_t padded = (n + ZT_AIO_ALIGN - 1) / ZT_AIO_ALIGN * ZT_AIO_ALIGN;
        memcpy(bounce, src + at, (size_t)n);
        memset(bounce + n, 0, (size_t)(padded - n));
        ZT_CHECK(zt_aio_write(g.aio, f->fd, f->path, bounce, (size_t)padded, off + at));
    }
    return ZT_OK;
}

static enum zt_status move(const struct io_request *r, char *bounce) {
    const struct zt_swapfile *f = r->f;
    for (int i = 0; i < r->nseg; i++) {
        char *p = (char *)starpu_vector_get_local_ptr(r->d[r->segh[i]].handle) + r->seg[i][0];
        int64_t len = r->seg[i][1], off = r->seg[i][2];
        if (len == 0) continue;
        int aligned = is_aligned(p, len, off);
        if (r->to_file && aligned) {
            ZT_CHECK(zt_aio_write(g.aio, f->fd, f->path, p, (size_t)len, off));
        } else if (r->to_file) {
            ZT_CHECK(write_bounce(f, p, len, off, bounce));
        } else if (aligned) {
            ZT_CHECK(zt_aio_read(g.aio, f->fd, f->path, p, (size_t)len, off));
        } else {
            ZT_CHECK(read_bounce(f, p, len, off, bounce));
        }
    }
    return ZT_OK;
}

/* release the request's handles (its successors start) and forget it */
static void finish(struct io_request *r) {
    for (int i = 0; i < r->nhandles; i++) starpu_data_release(r->d[i].handle);
    free(r);
    pthread_mutex_lock(&g.mu);
    if (--g.inflight == 0) pthread_cond_broadcast(&g.idle);
    pthread_mutex_unlock(&g.mu);
}

static void *io_thread(void *arg) {
    int id = (int)(intptr_t)arg;
    zt_runtime_io_thread(); /* ZT_IO_NICE */
    char *bounce = NULL;
    bounce = zt_aio_alloc((size_t)g.bounce_bytes);
    pthread_mutex_lock(&g.mu);
    for (;;) {
        while (!g.head && !g.stop) pthread_cond_wait(&g.cv, &g.mu);
        if (!g.head) break;
        struct io_request *r = g.head;
        g.head = r->next;
        if (!g.head) g.tail = NULL;
        int failed = g.err != ZT_OK;
        pthread_mutex_unlock(&g.mu);
        double t0 = starpu_timing_now();
        if (r->fn) { /* a host task: always runs (its owner counts on it), reports its own errors */
            void **ptrs = (void **)r->seg; /* room for n pointers, see zt_task_io */
            for (int i = 0; i < r->nseg; i++)
                ptrs[i] = (void *)starpu_vector_get_local_ptr(r->d[r->segh[i]].handle);
            r->fn(r->ctx, ptrs);
        } else if (!failed) { /* after a failure the step is lost: skip the rest, end quickly */
            enum zt_status rc =
                bounce ? move(r, bounce) : zt_error_set(ZT_ERR_NOMEM, "swap: no bounce buffer");
            if (rc != ZT_OK) set_error(rc);
        }
        if ((r->fn || !failed) && zt_trace_enabled()) {
            struct zt_trace_rec t = {.kind = r->kind,
                                     .layer = r->layer,
                                     .mb = r->mb,
                                     .blk = -1,
                                     .recompute = r->recompute,
                                     .worker = ZT_TRACE_IO_WORKER + id,
                                     .node = STARPU_MAIN_RAM,
                                     .step = r->step,
                                     .id = r->trace_id,
                                     .start_us = t0,
                                     .end_us = starpu_timing_now(),
                                     .cpu_us = -1,
                                     .waited_us = -1,
                                     .bytes = r->bytes};
            for (int i = 0; !r->fn && i < r->nseg; i++) t.bytes += r->seg[i][1];
            zt_trace_record(&t);
        }
        finish(r);
        pthread_mutex_lock(&g.mu);
    }
    pthread_mutex_unlock(&g.mu);
    free(bounce);
    return NULL;
}

enum zt_status zt_io_service_init(const struct zt_aio_cfg *cfg, int nthreads) {
    if (g.started) {
        g.users++;
        return ZT_OK;
    }
    if (nthreads < 1 || nthreads > MAX_IO_THREADS)
        return zt_error_set(ZT_ERR_INVALID, "swap: %d I/O threads (expected 1 to %d)", nthreads,
                            MAX_IO_THREADS);
    ZT_CHECK(zt_aio_init(&g.aio, cfg));
    /* unaligned transfers go through a bounce buffer of queue_depth requests (at most 16 MiB) */
    int64_t bs = cfg->block_size > 0 ? cfg->block_size : 1 << 20;
    int64_t qd = cfg->queue_depth > 0 ? cfg->queue_depth : 8;
    g.bounce_bytes = bs * qd < (16 << 20) ? bs * qd : (16 << 20) / bs * bs;
    if (g.bounce_bytes < bs) g.bounce_bytes = bs;
    g.err = ZT_OK;
    g.msg[0] = '\0';
    g.stop = 0;
    for (g.nth = 0; g.nth < nthreads; g.nth++)
        if (pthread_create(&g.th[g.nth], NULL, io_thread, (void *)(intptr_t)g.nth) != 0) break;
    if (g.nth == 0) {
        zt_aio_free(g.aio);
        return zt_error_set(ZT_ERR_RUNTIME, "swap: cannot start an I/O thread");
    }
    g.started = 1;
    g.users = 1;
    return ZT_OK;
}

void zt_io_service_free(void) {
    if (!g.started || --g.users > 0) return;
    zt_io_service_wait();
    pthread_mutex_lock(&g.mu);
    g.stop = 1;
    pthread_cond_broadcast(&g.cv);
    pthread_mutex_unlock(&g.mu);
    for (int i = 0; i < g.nth; i++) pthread_join(g.th[i], NULL);
    zt_aio_free(g.aio);
    g.aio = NULL;
    g.started = 0;
}

const char *zt_io_service_engine_name(void) { return g.aio ? zt_aio_engine_name(g.aio) : "none"; }

enum zt_status zt_io_write_sync(const struct zt_swapfile *f, const void *buf, int64_t len,
                                int64_t off) {
    if (!g.started) return zt_error_set(ZT_ERR_INVALID, "swap: zt_io_service_init not called");
    return zt_aio_write(g.aio, f->fd, f->path, buf, (size_t)len, off);
}

enum zt_status zt_io_read_sync(const struct zt_swapfile *f, void *buf, int64_t len, int64_t off) {
    if (!g.started) return zt_error_set(ZT_ERR_INVALID, "swap: zt_io_service_init not called");
    if (is_aligned(buf, len, off)) return zt_aio_read(g.aio, f->fd, f->path, buf, (size_t)len, off);
    char *bounce = NULL;
    if (!(bounce = zt_aio_alloc((size_t)g.bounce_bytes)))
        return zt_error_set(ZT_ERR_NOMEM, "swap file %s: out of memory", f->path);
    enum zt_status rc = read_bounce(f, buf, len, off, bounce);
    free(bounce);
    return rc;
}

enum zt_status zt_io_service_status(void) {
    pthread_mutex_lock(&g.mu);
    enum zt_status rc = g.err;
    char msg[512];
    snprintf(msg, sizeof msg, "%s", g.msg);
    pthread_mutex_unlock(&g.mu);
    if (rc != ZT_OK) return zt_error_set(rc, "%s", msg);
    return ZT_OK;
}

void zt_io_service_wait(void) {
    pthread_mutex_lock(&g.mu);
    while (g.inflight > 0) pthread_cond_wait(&g.idle, &g.mu);
    pthread_mutex_unlock(&g.mu);
}

/* an acquisition granted (from whichever thread released the handle's previous user): the last
 * one queues the request for an I/O thread, behind every ready request of its priority or
 * higher (so the next layer's parameters are read before the last step's state is written;
 * equal priorities keep their order). Every queued request holds all its handles, so the order
 * they are served in never changes a result. */
static void acquired(void *arg) {
    struct io_request *r = arg;
    pthread_mutex_lock(&g.mu);
    if (--r->pending == 0) {
        if (!g.tail || g.tail->prio >= r->prio) {
            if (g.tail)
                g.tail->next = r;
            else
                g.head = r;
            g.tail = r;
        } else {
            struct io_request **at = &g.head;
            while ((*at)->prio >= r->prio) at = &(*at)->next;
            r->next = *at;
            *at = r;
        }
        pthread_cond_signal(&g.cv);
    }
    pthread_mutex_unlock(&g.mu);
}

/* add handle h with mode m to the request (once: a repeated handle gets the union of modes) */
static int add_handle(struct io_request *r, starpu_data_handle_t h,
                      enum starpu_data_access_mode m) {
    for (int i = 0; i < r->nhandles; i++)
        if (r->d[i].handle == h) {
            r->d[i].mode = (enum starpu_data_access_mode)(r->d[i].mode | m);
            return i;
        }
    r->d[r->nhandles] = (struct starpu_data_descr){h, m};
    return r->nhandles++;
}

/* never run: swaps and host tasks are served by the I/O threads, not by codelets; the kinds
 * exist for traces */
void swap_in_cpu(void *buffers[], void *cl_arg) { (void)buffers, (void)cl_arg; }
void swap_out_cpu(void *buffers[], void *cl_arg) { (void)buffers, (void)cl_arg; }
void ckpt_write_cpu(void *buffers[], void *cl_arg) { (void)buffers, (void)cl_arg; }

/* queue r once every handle is acquired (the pending count as in swap) */
static void submit(struct io_request *r, const char *what) {
    /* ordered as StarPU orders the acquisitions */
    r->trace_id = zt_trace_submit(r->d, r->nhandles, r->prio);
    /* the extra one: no I/O thread sees r before every call is made */
    r->pending = r->nhandles + 1;
    pthread_mutex_lock(&g.mu);
    g.inflight++;
    pthread_mutex_unlock(&g.mu);
    for (int i = 0; i < r->nhandles; i++)
        if (starpu_data_acquire_cb(r->d[i].handle, r->d[i].mode, acquired, r) != 0) {
            /* StarPU refuses only a handle it does not know, which zt_tensor_handle gave: a
             * bug; the handles already asked for cannot be taken back */
            set_error(zt_error_set(ZT_ERR_RUNTIME, "%s: StarPU refused to acquire a block", what));
            r->nhandles = i;
            break;
        }
    acquired(r);
}

/* the request's priority and trace fields from the task options (NULL: none) */
static void take_opts(struct io_request *r, const struct zt_task_opts *o) {
    r->prio = o ? o->priority : 0;
    r->layer = o ? o->layer : -1;
    r->mb = o ? o->mb : -1;
    r->step = o ? o->step : 0;
    r->recompute = o ? o->recompute != 0 : 0;
}

enum zt_status zt_task_io(const struct zt_task_opts *o, const struct zt_block_ref *refs, int n,
                          int64_t bytes, zt_io_fn fn, void *ctx) {
    if (!g.started)
        return zt_error_set(ZT_ERR_INVALID, "zt_task_io: zt_io_service_init not called");
    if (!fn || n < 0 || (n > 0 && !refs))
        return zt_error_set(ZT_ERR_INVALID, "zt_task_io: bad arguments");
    /* seg's room holds the pointers handed to fn */
    struct io_request *r =
        calloc(1, sizeof *r + (size_t)(n + 1) * (sizeof(void *) + sizeof(struct starpu_data_descr) +
                                                 sizeof(int)));
    if (!r) return zt_error_set(ZT_ERR_NOMEM, "out of memory for a host task");
    r->seg = (int64_t (*)[3])(r + 1);
    r->d = (struct starpu_data_descr *)((void **)(r + 1) + n + 1);
    r->segh = (int *)(r->d + n + 1);
    for (int i = 0; i < n; i++) {
        if (!refs[i].t || refs[i].blk < 0 || refs[i].blk >= zt_tensor_nblk(refs[i].t)) {
            free(r);
            return zt_error_set(ZT_ERR_INVALID, "zt_task_io: block %d is invalid", i);
        }
        r->segh[i] = add_handle(r, zt_tensor_handle(refs[i].t, refs[i].blk), STARPU_R);
    }
    r->nseg = n;
    r->fn = fn;
    r->ctx = ctx;
    r->bytes = bytes;
    r->kind = ZT_KIND_ckpt_write;
    take_opts(r, o);
    submit(r, "host task");
    return ZT_OK;
}

/* a swap request in either direction (out: blocks -> file) */
static enum zt_status swap(const struct zt_task_opts *o, int out, const struct zt_swapfile *f,
                           const struct zt_swap_seg *segs, int n, const struct zt_block_ref *order,
                           int norder, zt_tensor_t pipe) {
    const char *fn = out ? "zt_task_swap_out" : "zt_task_swap_in";
    if (!g.started) return zt_error_set(ZT_ERR_INVALID, "%s: zt_io_service_init not called", fn);
    if (!f || n < 1 || !segs || norder < 0 || (norder > 0 && !order))
        return zt_error_set(ZT_ERR_INVALID, "%s: bad arguments", fn);
    int maxh = n + norder + 1;
    struct io_request *r = calloc(1, sizeof *r + (size_t)maxh * sizeof(struct starpu_data_descr) +
                                  (size_t)n * (sizeof(int) + 3 * sizeof(int64_t)));
    if (!r) return zt_error_set(ZT_ERR_NOMEM, "out of memory for a swap request");
    r->seg = (int64_t (*)[3])(r + 1);
    r->d = (struct starpu_data_descr *)(r->seg + n);
    r->segh = (int *)(r->d + maxh);
    r->f = f;
    r->to_file = out;
    r->nseg = n;
    r->kind = out ? ZT_KIND_swap_out : ZT_KIND_swap_in;
    take_opts(r, o);
    for (int i = 0; i < n; i++) {
        const struct zt_swap_seg *s = &segs[i];
        int64_t bytes = s->t && s->blk >= 0 && s->blk < zt_tensor_nblk(s->t)
                            ? zt_tensor_blk_bytes(s->t, s->blk)
                            : -1;
        if (bytes < 0 || s->mem_off < 0 || s->len < 0 || s->file_off < 0 ||
            s->mem_off + s->len > bytes) {
            free(r);
            return zt_error_set(ZT_ERR_INVALID,
                                "%s: segment %d (block %d, %lld bytes at %lld) "
                                "is outside its tensor block",
                                fn, i, s->blk, (long long)s->len, (long long)s->mem_off);
        }
        r->segh[i] = add_handle(r, zt_tensor_handle(s->t, s->blk), out ? STARPU_R : STARPU_W);
        r->seg[i][0] = s->mem_off;
        r->seg[i][1] = s->len;
        r->seg[i][2] = s->file_off;
    }
    for (int i = 0; i < norder; i++) {
        if (!order[i].t || order[i].blk < 0 || order[i].blk >= zt_tensor_nblk(order[i].t)) {
            free(r);
            return zt_error_set(ZT_ERR_INVALID, "%s: order block %d is invalid", fn, i);
        }
        add_handle(r, zt_tensor_handle(order[i].t, order[i].blk), out ? STARPU_RW : STARPU_R);
    }
    if (pipe) add_handle(r, zt_tensor_handle(pipe, 0), STARPU_RW);
    char what[800];
    snprintf(what, sizeof what, "swap file %s", f->path);
    submit(r, what);
    return ZT_OK;
}

enum zt_status zt_task_swap_in(const struct zt_task_opts *o, const struct zt_swapfile *f,
                               const struct zt_swap_seg *segs, int n,
                               const struct zt_block_ref *order, int norder, zt_tensor_t pipe) {
    return swap(o, 0, f, segs, n, order, norder, pipe);
}

enum zt_status zt_task_swap_out(const struct zt_task_opts *o, const struct zt_swapfile *f,
                                const struct zt_swap_seg *segs, int n,
                                const struct zt_block_ref *order, int norder, zt_tensor_t pipe) {
    return swap(o, 1, f, segs, n, order, norder, pipe);
}
