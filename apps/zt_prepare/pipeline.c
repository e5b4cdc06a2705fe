/*
 * apps/zt_prepare/pipeline.c: zt-prepare's pipeline: this thread reads batches and hands their
 * documents to the output in input order; worker threads (pthreads) run the batches meanwhile.
 * The progress bar is drawn here too.
 *
 * Layer: apps/ (private to zt-prepare, prepare.h). A ring of RING_PER_THREAD batches a thread:
 * batch k sits in slot k mod the ring's size from its reading to its output, workers take them
 * in order, and the output takes batch k only once batches 0..k-1 are out. So the tokens, the
 * counts and the first error reported are those of one thread, whatever the thread count.
 * Reading stops ahead of the output when the ring is full or MAX_AHEAD_BYTES of input wait.
 */
#include <pthread.h>    /* pthread_create, mutexes, condition variables */
#include <stdio.h>      /* fprintf, stderr */
#include <stdlib.h>     /* calloc, free */
#include <string.h>     /* snprintf */
#include <time.h>       /* clock_gettime */
#include "prepare.h"
#include "zt_clock.h"   /* zt_clock_ms */

#define RING_PER_THREAD 4
#define MAX_AHEAD_BYTES ((uint64_t)256 << 20)
#define PROGRESS_EVERY_MS 100.0 /* at most ~10 redraws a second */

/* the progress bar on stderr: bytes done of the total, rate, time left */
struct progress {
    int on;
    uint64_t total, done;
    double t0, last; /* ms: the start, the last redraw */
};

static void progress_draw(struct progress *p, int final) {
    double now = zt_clock_ms();
    if (!p->on || (!final && now - p->last < PROGRESS_EVERY_MS)) return;
    p->last = now;
    double s = (now - p->t0) / 1e3, rate = s > 0 ? (double)p->done / 1e6 / s : 0;
    char eta[32] = "";
    if (p->total > p->done && rate > 0) {
        long left = (long)((double)(p->total - p->done) / 1e6 / rate + 0.5);
        snprintf(eta, sizeof eta, ", ETA %ld:%02ld", left / 60, left % 60);
    }
    if (p->total)
        fprintf(stderr, "\rzt-prepare: %.1f / %.1f MB (%3.0f%%), %.1f MB/s%s    ",
                (double)p->done / 1e6, (double)p->total / 1e6,
                100.0 * (double)p->done / (double)p->total, rate, eta);
    else
        fprintf(stderr, "\rzt-prepare: %.1f MB, %.1f MB/s    ", (double)p->done / 1e6, rate);
    if (final) fputc('\n', stderr);
    fflush(stderr);
}

/* what the reading thread and the workers share */
struct pool {
    pthread_mutex_t mu;
    pthread_cond_t work; /* a batch was read, or stop */
    pthread_cond_t done; /* a batch was run */
    const struct doc_rules *rules;
    struct batch *ring;  /* [cap] */
    char *ready;         /* [cap] the slot's batch has run */
    size_t cap;
    size_t read, taken, out; /* batches read, taken by a worker, handed to the output */
    uint64_t ahead;      /* bytes read and not yet out */
    int stop;
};

static void *worker(void *arg) {
    struct pool *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (p->taken == p->read && !p->stop) pthread_cond_wait(&p->work, &p->mu);
        if (p->stop) break;
        size_t k = p->taken++ % p->cap;
        pthread_mutex_unlock(&p->mu);
        batch_run(&p->ring[k], p->rules);
        pthread_mutex_lock(&p->mu);
        p->ready[k] = 1;
        pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* b's counts and documents to the output */
static enum zt_status batch_out(struct batch *b, struct sink *out, struct run_totals *t,
                                struct progress *pg) {
    if (b->rc != ZT_OK) return zt_error_set(b->rc, "%s", b->err);
    t->docs += b->ndoc;
    t->empty += b->empty;
    t->no_text += b->no_text;
    t->bad_utf8 += b->bad_utf8;
    t->bytes += b->len;
    for (size_t i = 0, from = 0; out && i < b->ndoc; from = b->doc_end[i++])
        ZT_CHECK(sink_doc(out, b->tok + from, b->doc_end[i] - from));
    pg->done += b->len;
    progress_draw(pg, 0);
    return ZT_OK;
}

/* one thread: read, run, output, batch after batch */
static enum zt_status run_inline(struct reader *rd, const struct doc_rules *rules,
                                 struct sink *out, struct run_totals *t, struct progress *pg) {
    struct batch b = {0};
    int k;
    while ((k = reader_next(rd, &b)) > 0) {
        batch_run(&b, rules);
        enum zt_status rc = batch_out(&b, out, t, pg);
        batch_clear(&b);
        if (rc != ZT_OK) return rc;
    }
    return k < 0 ? zt_error_last_code() : ZT_OK;
}

/* wait (redrawing the bar) until the oldest batch has run or, unless eof, a slot is free */
static int wait_turn(struct pool *p, int eof, struct progress *pg) {
    struct timespec ts;
    for (;;) {
        int oldest = p->out < p->read && p->ready[p->out % p->cap];
        int room = !eof && p->read - p->out < p->cap &&
                   (p->ahead < MAX_AHEAD_BYTES || p->read == p->out);
        if (oldest || room || (eof && p->out == p->read)) return oldest;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += (long)(PROGRESS_EVERY_MS * 1e6);
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&p->done, &p->mu, &ts);
        progress_draw(pg, 0);
    }
}

/* the reading thread's loop: read into free slots, hand run batches out in order */
static enum zt_status run_ring(struct pool *p, struct reader *rd, struct sink *out,
                               struct run_totals *t, struct progress *pg) {
    enum zt_status rc = ZT_OK, read_rc = ZT_OK;
    char read_err[1024] = "";
    int eof = 0;
    pthread_mutex_lock(&p->mu);
    while (rc == ZT_OK) {
        int oldest = wait_turn(p, eof, pg);
        if (!oldest && eof) break; /* all read and all out */
        if (oldest) {
            struct batch *b = &p->ring[p->out % p->cap];
            pthread_mutex_unlock(&p->mu);
            rc = batch_out(b, out, t, pg);
            uint64_t len = b->len;
            batch_clear(b);
            pthread_mutex_lock(&p->mu);
            p->ready[p->out++ % p->cap] = 0;
            p->ahead -= len;
            continue;
        }
        struct batch *b = &p->ring[p->read % p->cap]; /* free: only this thread fills slots */
        pthread_mutex_unlock(&p->mu);
        int k = reader_next(rd, b);
        pthread_mutex_lock(&p->mu);
        if (k < 0) { /* reported after the batches before it, which may hold an earlier error */
            read_rc = zt_error_last_code();
            snprintf(read_err, sizeof read_err, "%s", zt_error_last());
        }
        if (k <= 0) {
            eof = 1;
            continue;
        }
        p->read++;
        p->ahead += b->len;
        pthread_cond_signal(&p->work);
    }
    p->stop = 1;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->mu);
    if (rc == ZT_OK && read_rc != ZT_OK) rc = zt_error_set(read_rc, "%s", read_err);
    return rc;
}

/* threads workers over a ring of batches */
static enum zt_status run_threads(struct reader *rd, const struct doc_rules *rules, int threads,
                                  struct sink *out, struct run_totals *t, struct progress *pg) {
    struct pool p = {.rules = rules, .cap = (size_t)threads * RING_PER_THREAD};
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&p.mu, NULL);
    pthread_cond_init(&p.work, NULL);
    pthread_cond_init(&p.done, &ca);
    pthread_condattr_destroy(&ca);
    p.ring = calloc(p.cap, sizeof *p.ring);
    p.ready = calloc(p.cap, 1);
    pthread_t *tid = calloc((size_t)threads, sizeof *tid);
    enum zt_status rc = ZT_OK;
    int started = 0;
    if (!p.ring || !p.ready || !tid)
        rc = zt_error_set(ZT_ERR_NOMEM, "out of memory for %d threads", threads);
    for (; rc == ZT_OK && started < threads; started++)
        if (pthread_create(&tid[started], NULL, worker, &p) != 0)
            rc = zt_error_set(ZT_ERR_RUNTIME, "--threads %d: cannot start thread %d", threads,
                              started + 1);
    if (rc == ZT_OK) {
        rc = run_ring(&p, rd, out, t, pg);
    } else {
        pthread_mutex_lock(&p.mu);
        p.stop = 1;
        pthread_cond_broadcast(&p.work);
        pthread_mutex_unlock(&p.mu);
    }
    for (int i = 0; i < started; i++) pthread_join(tid[i], NULL);
    for (size_t i = 0; p.ring && i < p.cap; i++) batch_clear(&p.ring[i]);
    free(tid);
    free(p.ring);
    free(p.ready);
    pthread_cond_destroy(&p.work);
    pthread_cond_destroy(&p.done);
    pthread_mutex_destroy(&p.mu);
    return rc;
}

enum zt_status pipeline_run(struct reader *rd, const struct doc_rules *rules, int threads,
                            int progress, struct sink *out, struct run_totals *t) {
    *t = (struct run_totals){0};
    double t0 = zt_clock_ms();
    uint64_t total = rd->in->total_bytes < rd->max_bytes ? rd->in->total_bytes : rd->max_bytes;
    struct progress pg = {.on = progress, .total = total, .t0 = t0, .last = t0};
    enum zt_status rc = threads <= 1 || rules->train
                            ? run_inline(rd, rules, out, t, &pg)
                            : run_threads(rd, rules, threads, out, t, &pg);
    reader_close(rd);
    if (rc == ZT_OK) progress_draw(&pg, 1);
    else if (progress) fputc('\n', stderr); /* the error line starts a line of its own */
    t->seconds = (zt_clock_ms() - t0) / 1e3;
    return rc;
}
