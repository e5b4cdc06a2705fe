/*
 * io/aio.c: the engine behind zt_aio.h: io_uring rings (one per concurrent caller, from a pool)
 * or a pool of pread/pwrite threads; one buffer cut into requests (zt_aio_read/_write/_writev)
 * and a stream of segments kept queue_depth deep (zt_aio_write_stream).
 *
 * Layer: io/ (platform; no StarPU). Its callers are the offload swap transfers
 * (tasks/io_service.c) and the checkpoint shard files (io/ckpt.c, io/ckpt_read.c,
 * io/ckpt_writer.c).
 */
#include "zt_aio.h"

#include <errno.h>     /* errno, EINTR, EAGAIN */
#include <liburing.h>  /* io_uring_* */
#include <pthread.h>   /* pthread_* */
#include <stdlib.h>    /* calloc, free */
#include <string.h>    /* strerror, strcmp */
#include <sys/mman.h>  /* madvise */
#include <sys/stat.h>  /* fstat, S_ISREG */
#include <unistd.h>    /* pread, pwrite, ftruncate */
#include "zt_log.h"    /* ZT_LOG_I */

#define MAX_THREADS 64

struct chunk {
    char *buf;
    size_t len, done;
    int64_t off;
    int fin; /* thread pool: set under the engine's mutex when the chunk has all arrived */
};

/* a read's progress report (zt_aio_read_progress): the chunks before `next` have all arrived */
struct progress {
    void (*fn)(void *ctx, size_t bytes);
    void *ctx;
    int next;
    size_t bytes;
};

/* step past the finished chunks at the front; 1 when there is something new to report */
static int advance(struct progress *pg, const struct chunk *c, int n, int pool) {
    if (!pg) return 0;
    int before = pg->next;
    while (pg->next < n && (pool ? c[pg->next].fin : c[pg->next].done == c[pg->next].len))
        pg->bytes += c[pg->next++].len;
    return pg->next > before;
}

/* keep the failure at the lowest offset (the one a call reports) */
static void note_err(int *err, int64_t *err_off, int e, int64_t off) {
    if (!*err || off < *err_off) {
        *err = e;
        *err_off = off;
    }
}

/* a request of the thread pool: one chunk of one caller's call */
struct job {
    int fd, write;
    struct chunk *c;
    int *err;              /* first errno of the call (0: none) */
    int64_t *err_off;
    int *left;             /* chunks of the call not finished */
    struct job *next;
};

struct zt_aio {
    struct zt_aio_cfg cfg;
    int uring;
    pthread_mutex_t mu;
    /* io_uring: free rings */
    struct io_uring **rings;
    int nrings, caprings;
    /* threads */
    pthread_t th[MAX_THREADS];
    int nth, stop;
    pthread_cond_t work, done;
    struct job *head, *tail;
};

const char *zt_aio_engine_name(zt_aio_t a) { return a->uring ? "io_uring" : "threads"; }

enum zt_aio_engine zt_aio_engine_named(const char *name) {
    return !name                           ? ZT_AIO_AUTO
           : strcmp(name, "io_uring") == 0 ? ZT_AIO_URING
           : strcmp(name, "threads") == 0  ? ZT_AIO_THREADS
                                           : ZT_AIO_AUTO;
}

void *zt_aio_alloc(size_t bytes) {
    void *p = NULL;
    if (bytes < ZT_AIO_HUGE) return posix_memalign(&p, ZT_AIO_ALIGN, bytes ? bytes : 1) ? NULL : p;
    size_t n = (bytes + ZT_AIO_HUGE - 1) / ZT_AIO_HUGE * ZT_AIO_HUGE;
    if (posix_memalign(&p, ZT_AIO_HUGE, n) != 0) return NULL;
    madvise(p, n, MADV_HUGEPAGE); /* a hint: without THP the buffer still works */
    return p;
}

/* ---------------------------------------------------------------------------------------------
 * thread pool */
static void *worker(void *arg) {
    struct zt_aio *a = arg;
    pthread_mutex_lock(&a->mu);
    for (;;) {
        while (!a->head && !a->stop) pthread_cond_wait(&a->work, &a->mu);
        if (!a->head) break;
        struct job *j = a->head;
        a->head = j->next;
        if (!a->head) a->tail = NULL;
        pthread_mutex_unlock(&a->mu);
        int err = 0;
        struct chunk *c = j->c;
        while (c->done < c->len && !err) {
            ssize_t r = j->write ? pwrite(j->fd, c->buf + c->done, c->len - c->done,
                                          (off_t)(c->off + (int64_t)c->done))
                                 : pread(j->fd, c->buf + c->done, c->len - c->done,
                                         (off_t)(c->off + (int64_t)c->done));
            if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
            if (r < 0) err = errno;
            else if (r == 0) err = j->write ? EIO : ENODATA; /* no progress: end of file */
            else c->done += (size_t)r;
        }
        pthread_mutex_lock(&a->mu);
        if (err) note_err(j->err, j->err_off, err, c->off + (int64_t)c->done);
        c->fin = !err;
        --*j->left;
        pthread_cond_broadcast(&a->done);
        free(j);
    }
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

static int threads_io(struct zt_aio *a, int fd, int write, struct chunk *c, int n,
                      int64_t *err_off, struct progress *pg) {
    int err = 0, left = n;
    pthread_mutex_lock(&a->mu);
    for (int i = 0; i < n; i++) {
        struct job *j = calloc(1, sizeof *j);
        if (!j) { /* what is queued finishes; the rest is an error */
            if (!err) {
                err = ENOMEM;
                *err_off = c[i].off;
            }
            left -= n - i;
            break;
        }
        *j = (struct job){.fd = fd, .write = write, .c = &c[i], .err = &err, .err_off = err_off,
                          .left = &left};
        if (a->tail) a->tail->next = j;
        else a->head = j;
        a->tail = j;
    }
    pthread_cond_broadcast(&a->work);
    while (left > 0) {
        pthread_cond_wait(&a->done, &a->mu);
        if (!err && advance(pg, c, n, 1)) { /* reported without the engine's lock */
            pthread_mutex_unlock(&a->mu);
            pg->fn(pg->ctx, pg->bytes);
            pthread_mutex_lock(&a->mu);
        }
    }
    int last = !err && advance(pg, c, n, 1); /* what finished while the report ran */
    pthread_mutex_unlock(&a->mu);
    if (last) pg->fn(pg->ctx, pg->bytes);
    return err;
}

/* ---------------------------------------------------------------------------------------------
 * io_uring */
static struct io_uring *ring_get(struct zt_aio *a) {
    struct io_uring *r = NULL;
    pthread_mutex_lock(&a->mu);
    if (a->nrings > 0) r = a->rings[--a->nrings];
    pthread_mutex_unlock(&a->mu);
    if (r) return r;
    r = calloc(1, sizeof *r);
    if (r && io_uring_queue_init((unsigned)a->cfg.queue_depth, r, 0) < 0) {
        free(r);
        r = NULL;
    }
    return r;
}

static void ring_put(struct zt_aio *a, struct io_uring *r) {
    pthread_mutex_lock(&a->mu);
    if (a->nrings == a->caprings) {
        int cap = a->caprings ? 2 * a->caprings : 8;
        struct io_uring **p = realloc(a->rings, (size_t)cap * sizeof *p);
        if (!p) {
            pthread_mutex_unlock(&a->mu);
            io_uring_queue_exit(r);
            free(r);
            return;
        }
        a->rings = p;
        a->caprings = cap;
    }
    a->rings[a->nrings++] = r;
    pthread_mutex_unlock(&a->mu);
}

static void prep(struct io_uring_sqe *s, int fd, int write, struct chunk *c, int i) {
    if (write)
        io_uring_prep_write(s, fd, c->buf + c->done, (unsigned)(c->len - c->done),
                            (uint64_t)(c->off + (int64_t)c->done));
    else
        io_uring_prep_read(s, fd, c->buf + c->done, (unsigned)(c->len - c->done),
                           (uint64_t)(c->off + (int64_t)c->done));
    io_uring_sqe_set_data64(s, (uint64_t)i);
}

/* submit what is queued; on failure none of it went out (-errno) */
static int flush(struct io_uring *r, int *pending, int *inflight) {
    int k = 0;
    if (*pending > 0)
        while ((k = io_uring_submit(r)) == -EINTR || k == -EAGAIN) {}
    if (k < 0) *inflight -= *pending;
    *pending = 0;
    return k < 0 ? k : 0;
}

static int uring_io(struct zt_aio *a, int fd, int write, struct chunk *c, int n,
                    int64_t *err_off, struct progress *pg) {
    struct io_uring *r = ring_get(a);
    if (!r) {
        *err_off = n ? c[0].off : 0;
        return ENOMEM;
    }
    /* requests to (re)submit: a FIFO of chunk indices (continuations of short ones at the end) */
    int *todo = malloc((size_t)(n > 0 ? n : 1) * sizeof *todo), nt = 0, head = 0;
    if (!todo) {
        ring_put(a, r);
        *err_off = n ? c[0].off : 0;
        return ENOMEM;
    }
    for (int i = 0; i < n; i++) todo[nt++] = i;
    int err = 0, inflight = 0, qd = a->cfg.queue_depth, pending = 0, broken = 0;
    /* todo is a ring buffer of capacity n: an index is in it or in flight, never both */
    while (head != nt || inflight > 0) {
        int can = a->cfg.overlap_events || inflight == 0, k = 0;
        while (can && inflight < qd && head != nt) {
            int i = todo[head % n];
            /* after a failure only what lies before it still matters */
            if (err && c[i].off + (int64_t)c[i].done >= *err_off) {
                head++;
                continue;
            }
            struct io_uring_sqe *s = io_uring_get_sqe(r);
            if (!s) break;
            prep(s, fd, write, &c[i], i);
            head++;
            inflight++;
            pending++;
            if (a->cfg.single_submit && (k = flush(r, &pending, &inflight)) < 0) break;
        }
        if (k == 0) k = flush(r, &pending, &inflight);
        if (k < 0) { /* the ring refused a submission: wait for what is in flight, then stop */
            note_err(&err, err_off, -k, c[todo[(head - 1) % n]].off);
            broken = 1; /* its queue may still hold requests: never reuse this ring */
            head = nt;
        }
        if (inflight == 0) continue;
        struct io_uring_cqe *cqe;
        k = io_uring_wait_cqe(r, &cqe);
        if (k == -EINTR || k == -EAGAIN) continue;
        if (k < 0) { /* the ring itself failed: nothing more will complete */
            if (!err) {
                err = -k;
                *err_off = c[0].off;
            }
            broken = 1;
            break;
        }
        int i = (int)io_uring_cqe_get_data64(cqe), res = cqe->res;
        io_uring_cqe_seen(r, cqe);
        inflight--;
        struct chunk *ch = &c[i];
        if (res == -EINTR || res == -EAGAIN) {
            todo[nt++ % n] = i; /* resubmit as is */
        } else if (res < 0 || res == 0) {
            note_err(&err, err_off, res < 0 ? -res : (write ? EIO : ENODATA),
                     ch->off + (int64_t)ch->done);
        } else {
            ch->done += (size_t)res;
            if (ch->done < ch->len) todo[nt++ % n] = i; /* short: continue from where it stopped */
            else if (!err && advance(pg, c, n, 0)) pg->fn(pg->ctx, pg->bytes);
        }
    }
    free(todo);
    if (broken) {
        io_uring_queue_exit(r);
        free(r);
    } else {
        ring_put(a, r);
    }
    return err;
}

/* ---------------------------------------------------------------------------------------------
 * a stream of writes (zt_aio_write_stream): segments are taken from the caller while earlier
 * ones are in flight, and each is handed back as soon as its last request completes */
struct sreq { /* one request of a segment */
    struct sseg *sg;
    char *buf;
    size_t len, done;
    int64_t off;
};
struct sseg {
    struct zt_aio_seg seg;
    struct sreq *rq;
    int n, next, left; /* requests, the next to submit, those not finished */
    struct sseg *prev, *succ; /* the segments not handed back yet */
};

static void sseg_link(struct sseg **live, struct sseg *sg) {
    sg->succ = *live;
    if (*live) (*live)->prev = sg;
    *live = sg;
}

/* hand sg's buffer back and forget it */
static void sseg_done(struct sseg **live, struct sseg *sg, const struct zt_aio_stream *st) {
    if (sg->prev) sg->prev->succ = sg->succ;
    else *live = sg->succ;
    if (sg->succ) sg->succ->prev = sg->prev;
    st->done(st->ctx, sg->seg.buf);
    free(sg->rq);
    free(sg);
}

static int seg_check(const struct zt_aio_seg *g) {
    return (((uintptr_t)g->buf | g->len | (uint64_t)g->off) % ZT_AIO_ALIGN) == 0;
}

static struct sseg *sseg_new(const struct zt_aio_seg *g, size_t bs) {
    struct sseg *sg = calloc(1, sizeof *sg);
    int n = (int)((g->len + bs - 1) / bs);
    if (!sg || !(sg->rq = calloc((size_t)(n > 0 ? n : 1), sizeof *sg->rq))) {
        free(sg);
        return NULL;
    }
    sg->seg = *g;
    sg->n = sg->left = n;
    for (int i = 0; i < n; i++)
        sg->rq[i] = (struct sreq){sg, (char *)g->buf + (size_t)i * bs,
                                  g->len - (size_t)i * bs < bs ? g->len - (size_t)i * bs : bs, 0,
                                  g->off + (int64_t)((size_t)i * bs)};
    return sg;
}

/* Ask the stream for its next segment (wait: block until there is one) and make it the current
 * one, *cur, linked into *live; a segment of no bytes goes back at once, and so does one that
 * comes after a failure (*err) or is misaligned (*bad, EINVAL) or finds no memory (ENOMEM),
 * unwritten. 1: a segment was taken (*cur may still be NULL); 0: none ready; -1: the end. */
static int take_segment(const struct zt_aio_stream *st, int wait, size_t bs, struct sseg **cur,
                        struct sseg **live, int *err, int64_t *err_off, int *bad) {
    struct zt_aio_seg g;
    int got = st->next(st->ctx, &g, wait);
    if (got <= 0) return got;
    if (!*err && !seg_check(&g)) {
        *bad = 1;
        note_err(err, err_off, EINVAL, g.off);
    }
    if (*err || !(*cur = sseg_new(&g, bs))) { /* after a failure: back unwritten */
        if (!*err) note_err(err, err_off, ENOMEM, g.off);
        st->done(st->ctx, g.buf);
        return 1;
    }
    sseg_link(live, *cur);
    if ((*cur)->n == 0) {
        sseg_done(live, *cur, st);
        *cur = NULL;
    }
    return 1;
}

/* zt_aio_write_stream on a ring: requests of the current segment go out queue_depth deep, short
 * or interrupted ones again; each segment's buffer goes back when its last request completes.
 * Returns the first errno (0: none), at *err_off; *bad: it was a misaligned segment. */
static int uring_stream(struct zt_aio *a, int fd, const struct zt_aio_stream *st, int *bad,
                        int64_t *err_off) {
    struct io_uring *r = ring_get(a);
    if (!r) return ENOMEM;
    const size_t bs = (size_t)a->cfg.block_size;
    const int qd = a->cfg.queue_depth;
    int err = 0, inflight = 0, pending = 0, end = 0, broken = 0;
    struct sseg *cur = NULL, *live = NULL; /* cur: the segment whose requests go out now */
    struct sreq **redo = malloc((size_t)qd * sizeof *redo); /* short or interrupted: again */
    int nredo = 0;
    if (!redo) {
        ring_put(a, r);
        return ENOMEM;
    }
    for (;;) {
        /* fill the queue: requests to redo, then the current segment's, then new segments */
        int k = 0;
        while (!broken && inflight < qd && (a->cfg.overlap_events || inflight == 0 || pending)) {
            struct sreq *q = NULL;
            if (nredo > 0) {
                q = redo[--nredo];
            } else if (cur && cur->next < cur->n) {
                q = &cur->rq[cur->next++];
            } else {
                cur = NULL;
                if (end) break;
                int got = take_segment(st, inflight == 0 && pending == 0, bs, &cur, &live, &err,
                                       err_off, bad);
                if (got < 0) end = 1;
                if (got <= 0) break;
                continue;
            }
            struct io_uring_sqe *sq = io_uring_get_sqe(r);
            if (!sq) {
                redo[nredo++] = q;
                break;
            }
            io_uring_prep_write(sq, fd, q->buf + q->done, (unsigned)(q->len - q->done),
                                (uint64_t)(q->off + (int64_t)q->done));
            io_uring_sqe_set_data(sq, q);
            inflight++;
            pending++;
            if (a->cfg.single_submit && (k = flush(r, &pending, &inflight)) < 0) break;
        }
        if (k == 0) k = flush(r, &pending, &inflight);
        if (k < 0) { /* refused: this ring is left as it is; the stream fails */
            note_err(&err, err_off, -k, cur ? cur->seg.off : 0);
            broken = 1;
        }
        if (inflight == 0) {
            if (end || broken) break;
            continue; /* next() waits for the next segment */
        }
        struct io_uring_cqe *cqe;
        k = io_uring_wait_cqe(r, &cqe);
        if (k == -EINTR || k == -EAGAIN) continue;
        if (k < 0) { /* the ring itself failed: nothing more will complete */
            note_err(&err, err_off, -k, 0);
            broken = 1;
            break;
        }
        struct sreq *q = io_uring_cqe_get_data(cqe);
        int res = cqe->res;
        io_uring_cqe_seen(r, cqe);
        inflight--;
        if (res == -EINTR || res == -EAGAIN) {
            redo[nredo++] = q;
            continue;
        }
        if (res <= 0) note_err(&err, err_off, res < 0 ? -res : EIO, q->off + (int64_t)q->done);
        else q->done += (size_t)res;
        if (res > 0 && q->done < q->len && !err) { /* short: the rest again */
            redo[nredo++] = q;
            continue;
        }
        struct sseg *sg = q->sg;
        sg->left--;
        if (err && sg->next < sg->n) { /* a failed stream submits no more of it */
            sg->left -= sg->n - sg->next;
            sg->next = sg->n;
        }
        if (sg->left == 0) { /* its last request: the buffer goes back */
            if (sg == cur) cur = NULL;
            sseg_done(&live, sg, st);
        }
    }
    free(redo);
    if (broken) { /* torn down first: the kernel lets go of what the ring still held */
        io_uring_queue_exit(r);
        free(r);
    } else {
        ring_put(a, r);
    }
    /* after a broken ring: its segments go back unwritten, and so does the rest of the stream */
    while (live) sseg_done(&live, live, st);
    struct zt_aio_seg g;
    while (!end && st->next(st->ctx, &g, 1) > 0) st->done(st->ctx, g.buf);
    return err;
}

enum zt_status zt_aio_write_stream(zt_aio_t a, int fd, const char *path,
                                   const struct zt_aio_stream *st) {
    int err = 0, bad = 0;
    int64_t err_off = 0;
    if (a->uring) {
        err = uring_stream(a, fd, st, &bad, &err_off);
    } else { /* the thread pool: one segment at a time */
        struct zt_aio_seg g;
        int failed = 0;
        while (st->next(st->ctx, &g, 1) > 0) {
            if (!failed && zt_aio_write(a, fd, path, g.buf, g.len, g.off) != ZT_OK) failed = 1;
            st->done(st->ctx, g.buf);
        }
        return failed ? zt_error_last_code() : ZT_OK;
    }
    if (!err) return ZT_OK;
    if (bad)
        return zt_error_set(ZT_ERR_INVALID, "%s: write at offset %lld: buffer, length and "
                            "offset must be multiples of %d (O_DIRECT)", path, (long long)err_off,
                            ZT_AIO_ALIGN);
    return zt_error_set(ZT_ERR_IO, "%s: write at offset %lld failed: %s", path,
                        (long long)err_off, strerror(err));
}

/* ---------------------------------------------------------------------------------------------
 * API */
enum zt_status zt_aio_init(zt_aio_t *out, const struct zt_aio_cfg *cfg) {
    *out = NULL;
    if (cfg->block_size < ZT_AIO_ALIGN || cfg->block_size % ZT_AIO_ALIGN || cfg->queue_depth < 1 ||
        cfg->queue_depth > 4096)
        return zt_error_set(ZT_ERR_CONFIG, "aio: block_size must be a positive multiple of %d "
                                           "and queue_depth in [1, 4096] (got %lld and %d)",
                            ZT_AIO_ALIGN, (long long)cfg->block_size, cfg->queue_depth);
    struct zt_aio *a = calloc(1, sizeof *a);
    if (!a) return zt_error_set(ZT_ERR_NOMEM, "aio: out of memory");
    a->cfg = *cfg;
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->work, NULL);
    pthread_cond_init(&a->done, NULL);
    if (cfg->engine != ZT_AIO_THREADS) {
        struct io_uring *r = calloc(1, sizeof *r);
        int k = r ? io_uring_queue_init((unsigned)cfg->queue_depth, r, 0) : -ENOMEM;
        if (k == 0) {
            a->uring = 1;
            ring_put(a, r);
        } else {
            free(r);
            if (cfg->engine == ZT_AIO_URING) {
                zt_aio_free(a);
                return zt_error_set(ZT_ERR_IO, "aio: io_uring was asked for but the kernel "
                                               "refuses it (%s)", strerror(-k));
            }
            ZT_LOG_I("aio: io_uring refused (%s); using %d pread/pwrite threads", strerror(-k),
                     cfg->queue_depth < MAX_THREADS ? cfg->queue_depth : MAX_THREADS);
        }
    }
    if (!a->uring) {
        int n = cfg->queue_depth < MAX_THREADS ? cfg->queue_depth : MAX_THREADS;
        for (; a->nth < n; a->nth++)
            if (pthread_create(&a->th[a->nth], NULL, worker, a) != 0) break;
        if (a->nth == 0) {
            zt_aio_free(a);
            return zt_error_set(ZT_ERR_RUNTIME, "aio: cannot start I/O threads");
        }
    }
    *out = a;
    return ZT_OK;
}

void zt_aio_free(zt_aio_t a) {
    if (!a) return;
    pthread_mutex_lock(&a->mu);
    a->stop = 1;
    pthread_cond_broadcast(&a->work);
    pthread_mutex_unlock(&a->mu);
    for (int i = 0; i < a->nth; i++) pthread_join(a->th[i], NULL);
    for (int i = 0; i < a->nrings; i++) {
        io_uring_queue_exit(a->rings[i]);
        free(a->rings[i]);
    }
    free(a->rings);
    pthread_mutex_destroy(&a->mu);
    pthread_cond_destroy(&a->work);
    pthread_cond_destroy(&a->done);
    free(a);
}

/* A write that ends past the end of a regular file first sets the file's size to its end, as
 * the swap files are sized when created: ext4 completes an O_DIRECT write that extends the file
 * synchronously under the inode lock, so request after request would extend it one at a time
 * (queue depth 1 in effect), while writes inside the size (into a hole) run queue_depth at a
 * time (bench/README.md, zt-swap-bench --layout new, has the figures).
 * Nothing is written by it: a failed write leaves a hole, and one the size cannot take (a file
 * size limit) fails as it would have. */
static void size_ahead(int fd, int64_t end) {
    struct stat st;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size < end &&
        ftruncate(fd, (off_t)end) != 0)
        ZT_LOG_D("aio: could not size the file to %lld bytes before writing (%s); writing anyway",
                 (long long)end, strerror(errno));
}

static enum zt_status io(zt_aio_t a, int fd, const char *path, const struct zt_aio_seg *seg,
                         int nseg, int write, struct progress *pg) {
    const char *op = write ? "write" : "read";
    size_t bs = (size_t)a->cfg.block_size;
    int n = 0;
    int64_t end = 0; /* of the furthest segment */
    for (int k = 0; k < nseg; k++) {
        if (((uintptr_t)seg[k].buf | seg[k].len | (uint64_t)seg[k].off) % ZT_AIO_ALIGN)
            return zt_error_set(ZT_ERR_INVALID, "%s: %s of %zu bytes at offset %lld: buffer, "
                                "length and offset must be multiples of %d (O_DIRECT)", path, op,
                                seg[k].len, (long long)seg[k].off, ZT_AIO_ALIGN);
        n += (int)((seg[k].len + bs - 1) / bs);
        if (seg[k].off + (int64_t)seg[k].len > end) end = seg[k].off + (int64_t)seg[k].len;
    }
    if (n == 0) return ZT_OK;
    if (write) size_ahead(fd, end);
    struct chunk *c = calloc((size_t)n, sizeof *c);
    if (!c) return zt_error_set(ZT_ERR_NOMEM, "%s: out of memory for a %s", path, op);
    for (int k = 0, i = 0; k < nseg; k++)
        for (size_t at = 0; at < seg[k].len; at += bs, i++)
            c[i] = (struct chunk){(char *)seg[k].buf + at,
                                  seg[k].len - at < bs ? seg[k].len - at : bs, 0,
                                  seg[k].off + (int64_t)at, 0};
    int64_t err_off = c[0].off;
    int err = a->uring ? uring_io(a, fd, write, c, n, &err_off, pg)
                       : threads_io(a, fd, write, c, n, &err_off, pg);
    free(c);
    if (!err) return ZT_OK;
    if (err == ENODATA)
        return zt_error_set(ZT_ERR_IO, "%s: %s at offset %lld: unexpected end of file", path, op,
                            (long long)err_off);
    return zt_error_set(ZT_ERR_IO, "%s: %s at offset %lld failed: %s", path, op,
                        (long long)err_off, strerror(err));
}

enum zt_status zt_aio_writev(zt_aio_t a, int fd, const char *path, const struct zt_aio_seg *seg,
                             int nseg) {
    return io(a, fd, path, seg, nseg, 1, NULL);
}

enum zt_status zt_aio_read(zt_aio_t a, int fd, const char *path, void *buf, size_t len,
                           int64_t off) {
    struct zt_aio_seg seg = {buf, len, off};
    return io(a, fd, path, &seg, 1, 0, NULL);
}

enum zt_status zt_aio_read_progress(zt_aio_t a, int fd, const char *path, void *buf, size_t len,
                                    int64_t off, void (*fn)(void *ctx, size_t bytes),
                                    void *ctx) {
    struct zt_aio_seg seg = {buf, len, off};
    struct progress pg = {fn, ctx, 0, 0};
    return io(a, fd, path, &seg, 1, 0, fn ? &pg : NULL);
}

enum zt_status zt_aio_write(zt_aio_t a, int fd, const char *path, const void *buf, size_t len,
                            int64_t off) {
    struct zt_aio_seg seg = {(void *)buf, len, off};
    return io(a, fd, path, &seg, 1, 1, NULL);
}
