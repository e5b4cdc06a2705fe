/*
 * io/ckpt_writer.c: the background checkpoint shard writer (zt_ckpt_writer.h): staging buffers,
 * the queue of full ones, the writer thread, and the producer count that ends the shard.
 *
 * Layer: io/. No StarPU; the shard format itself is io/ckpt.c.
 */
#include "zt_ckpt_writer.h"
#include <pthread.h> /* the writer thread, its lock and condition */
#include <stdio.h>   /* snprintf */
#include <stdlib.h>  /* calloc, free */
#include <string.h>  /* memmove, strlen */
#include "zt_clock.h" /* zt_clock_ms */
#include "zt_aio.h"  /* zt_aio_write_stream, zt_aio_alloc */

#define STAGE_BYTES (8 << 20) /* one staging buffer: large direct writes */
#define STAGES 8              /* staging buffers per shard: 64 MiB in all */

struct zt_ckpt_writer {
    struct zt_shard_writer w;
    char path[1024];           /* the shard (the shard writer borrows it) */
    pthread_mutex_t mu;        /* everything below but the stream */
    pthread_cond_t cv;
    int producers;             /* producers not yet released; -1 once the shard is ended */
    enum zt_status rc;         /* first failure (its message in msg) */
    char msg[1024];
    double t0, t1;             /* opened, ended (ms) */
    zt_aio_t aio;              /* its direct writes (NULL: buffered) */
    char *stage[STAGES];       /* staging buffers not in use */
    int nstage, nalloc;        /* free ones, all of them */
    /* direct writes: full buffers go to the writer thread, so the next buffer is checksummed
     * and copied while the previous one is on its way to the disk */
    pthread_t writer;
    void (*thread_init)(void);
    int writer_on, stop;
    struct zt_aio_seg q[STAGES];
    int qn;                    /* queued buffers */
    /* one stream for every record: producers stage in turn (smu), so records that follow each
     * other in the file share buffers and writes */
    pthread_mutex_t smu;
    struct zt_shard_stream st;
};

/* a free staging buffer (waits for the writer to return one when all are in use) */
static char *stage_get(struct zt_ckpt_writer *j) {
    char *b = NULL;
    pthread_mutex_lock(&j->mu);
    while (j->nstage == 0 && j->nalloc >= STAGES) pthread_cond_wait(&j->cv, &j->mu);
    if (j->nstage > 0) b = j->stage[--j->nstage];
    else j->nalloc++;
    pthread_mutex_unlock(&j->mu);
    if (!b && !(b = zt_aio_alloc(STAGE_BYTES))) {
        pthread_mutex_lock(&j->mu);
        j->nalloc--;
        pthread_mutex_unlock(&j->mu);
    }
    return b;
}

static void stage_put(struct zt_ckpt_writer *j, char *b) {
    if (!b) return;
    pthread_mutex_lock(&j->mu);
    j->stage[j->nstage++] = b;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

static void fail(struct zt_ckpt_writer *j, enum zt_status rc) {
    pthread_mutex_lock(&j->mu);
    if (j->rc == ZT_OK) {
        j->rc = rc;
        snprintf(j->msg, sizeof j->msg, "%s", zt_error_last());
    }
    pthread_mutex_unlock(&j->mu);
}

/* the writer's stream (zt_aio_write_stream): queued buffers in order, each handed back to the
 * stagers as soon as it is on the disk, while the buffers after it are still being written */
static int writer_next(void *ctx, struct zt_aio_seg *seg, int wait) {
    struct zt_ckpt_writer *j = ctx;
    pthread_mutex_lock(&j->mu);
    while (wait && j->qn == 0 && !j->stop) pthread_cond_wait(&j->cv, &j->mu);
    int got = j->qn > 0 ? 1 : j->stop ? -1 : 0;
    if (got > 0) {
        *seg = j->q[0];
        memmove(j->q, j->q + 1, (size_t)--j->qn * sizeof *j->q);
    }
    pthread_mutex_unlock(&j->mu);
    return got;
}

static void writer_done(void *ctx, void *buf) { stage_put(ctx, buf); }

static void *writer_main(void *arg) {
    struct zt_ckpt_writer *j = arg;
    if (j->thread_init) j->thread_init();
    struct zt_aio_stream st = {writer_next, writer_done, j};
    enum zt_status rc = zt_aio_write_stream(j->aio, j->w.dfd, j->w.f.path, &st);
    if (rc != ZT_OK) fail(j, rc);
    return NULL;
}

/* zt_shard_stream's flush: queue the full buffer for the writer, continue in a free one */
static enum zt_status queue_flush(void *ctx, char **buf, int64_t len, int64_t off) {
    struct zt_ckpt_writer *j = ctx;
    pthread_mutex_lock(&j->mu);
    j->q[j->qn++] = (struct zt_aio_seg){*buf, (size_t)len, off}; /* < STAGES: one is ours */
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    *buf = stage_get(j);
    if (!*buf) return zt_error_set(ZT_ERR_NOMEM, "checkpoint shard %s: out of memory", j->path);
    return ZT_OK;
}

/* every queued buffer written; the writer stopped */
static void writer_drain(struct zt_ckpt_writer *j) {
    if (!j->writer_on) return;
    pthread_mutex_lock(&j->mu);
    j->stop = 1;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    pthread_join(j->writer, NULL);
    j->writer_on = 0;
}

enum zt_status zt_ckpt_writer_open(zt_ckpt_writer_t *out, const char *path,
                                   const struct zt_shard_id *id, const struct zt_shard_rec *recs,
                                   int n,
                                   const struct zt_aio_cfg *aio, void (*thread_init)(void)) {
    *out = NULL;
    struct zt_ckpt_writer *j = calloc(1, sizeof *j);
    if (!j) return zt_error_set(ZT_ERR_NOMEM, "checkpoint shard %s: out of memory", path);
    if (strlen(path) >= sizeof j->path) {
        free(j);
        return zt_error_set(ZT_ERR_INVALID, "checkpoint shard %s: path too long", path);
    }
    snprintf(j->path, sizeof j->path, "%s", path);
    enum zt_status rc = zt_shard_create(&j->w, j->path, id, recs, n);
    if (rc != ZT_OK) {
        free(j);
        return rc;
    }
    if (aio && zt_aio_init(&j->aio, aio) == ZT_OK && !zt_shard_direct(&j->w, j->aio)) {
        zt_aio_free(j->aio); /* the file system refuses O_DIRECT: buffered writes */
        j->aio = NULL;
    }
    pthread_mutex_init(&j->mu, NULL);
    pthread_mutex_init(&j->smu, NULL);
    pthread_cond_init(&j->cv, NULL);
    zt_shard_stream_begin(&j->st, &j->w, NULL, STAGE_BYTES);
    j->thread_init = thread_init;
    if (j->aio && pthread_create(&j->writer, NULL, writer_main, j) == 0) j->writer_on = 1;
    if (j->writer_on) {
        j->st.flush = queue_flush;
        j->st.ctx = j;
    }
    j->producers = 1;
    j->t0 = zt_clock_ms();
    *out = j;
    return ZT_OK;
}

const char *zt_ckpt_writer_path(zt_ckpt_writer_t j) { return j->w.f.path; }

void zt_ckpt_writer_hold(zt_ckpt_writer_t j) {
    pthread_mutex_lock(&j->mu);
    j->producers++;
    pthread_mutex_unlock(&j->mu);
}

int zt_ckpt_writer_failed(zt_ckpt_writer_t j) {
    pthread_mutex_lock(&j->mu);
    int failed = j->rc != ZT_OK;
    pthread_mutex_unlock(&j->mu);
    return failed;
}

struct zt_shard_stream *zt_ckpt_writer_lock(zt_ckpt_writer_t j) {
    pthread_mutex_lock(&j->smu);
    return &j->st;
}

enum zt_status zt_ckpt_writer_buffer(zt_ckpt_writer_t j) {
    if (!j->st.buf && j->w.dfd >= 0 && !(j->st.buf = stage_get(j)))
        return zt_error_set(ZT_ERR_NOMEM, "checkpoint shard %s: out of memory", j->w.f.path);
    return ZT_OK;
}

void zt_ckpt_writer_unlock(zt_ckpt_writer_t j, enum zt_status rc) {
    if (rc != ZT_OK) j->st.i = -1; /* the shard is lost: nothing more is staged */
    pthread_mutex_unlock(&j->smu);
}

/* the last producer is done: write what is staged, stop the writer, commit or abort */
static void end_shard(struct zt_ckpt_writer *j) {
    enum zt_status rc;
    if (j->rc == ZT_OK && (rc = zt_shard_stream_end(&j->st)) != ZT_OK) fail(j, rc);
    stage_put(j, j->st.buf);
    j->st.buf = NULL;
    writer_drain(j);
    rc = j->rc == ZT_OK ? zt_shard_commit(&j->w) : zt_shard_abort(&j->w, j->rc);
    if (rc != ZT_OK) fail(j, rc);
    pthread_mutex_lock(&j->mu);
    j->t1 = zt_clock_ms();
    j->producers = -1;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

void zt_ckpt_writer_release(zt_ckpt_writer_t j, enum zt_status rc) {
    if (rc != ZT_OK) fail(j, rc);
    pthread_mutex_lock(&j->mu);
    int last = --j->producers == 0;
    pthread_mutex_unlock(&j->mu);
    if (last) end_shard(j);
}

int zt_ckpt_writer_done(zt_ckpt_writer_t j) {
    pthread_mutex_lock(&j->mu);
    int done = j->producers < 0;
    pthread_mutex_unlock(&j->mu);
    return done;
}

enum zt_status zt_ckpt_writer_wait(zt_ckpt_writer_t j, double *ms) {
    pthread_mutex_lock(&j->mu);
    while (j->producers >= 0) pthread_cond_wait(&j->cv, &j->mu);
    pthread_mutex_unlock(&j->mu);
    if (ms) *ms = j->t1 - j->t0;
    enum zt_status rc = j->rc;
    if (rc != ZT_OK) zt_error_set(rc, "%s", j->msg);
    pthread_mutex_destroy(&j->mu);
    pthread_mutex_destroy(&j->smu);
    pthread_cond_destroy(&j->cv);
    if (j->aio) zt_aio_free(j->aio);
    for (int i = 0; i < j->nstage; i++) free(j->stage[i]);
    free(j);
    return rc;
}
