/*
 * graph/engine_ckpt.c: checkpoint shards.
 *
 * Layer: graph/ (behind zt_engine.h). No starpu_* call: work goes through tasks/.
 */
#include "engine_impl.h" /* struct zt_engine, internal functions */
/* ---------------------------------------------------------------------------------------------
 * checkpoint shards: each rank keeps the rows of its ZeRO shard's blocks (at every stage, so a
 * stage-0 job splits its checkpoint like a stage-1 one) */
static int64_t own_row0(const struct zt_param *p) { return blk_row0(p, p->own0); }
static int64_t own_row1(const struct zt_param *p) { return blk_row0(p, p->own1); }


/* ---------------------------------------------------------------------------------------------
 * background shard save: one host task (zt_task_io) per parameter reads the state through the
 * blocks that hold it (values and moments in memory, or the swap files' order blocks), so it
 * sees exactly what the step before it left there and the next update of that state waits for
 * it; the next forward and backward only read the values and run alongside */
struct save_req {
    struct save_job *job;
    const struct zt_param *p;
    int rec0;                  /* its first record (value, exp_avg, exp_avg_sq follow) */
    int mv0;                   /* where the m and v blocks start among its task's pointers */
};

#define SAVE_STAGE_BYTES (8 << 20)
#define SAVE_STAGES 8 /* staging buffers per save: 64 MiB */

struct save_job {
    zt_engine_t e;
    struct zt_shard_writer w;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int left;                  /* parameter tasks not yet run, plus one until all are submitted */
    enum zt_status rc;         /* first failure (its message in msg) */
    char msg[1024];
    int64_t bytes;
    double t0, t1;             /* submitted, shard committed (ms) */
    struct save_req *req;      /* [np] */
    char path[1024];           /* the shard (the writer borrows it) */
    zt_aio_t aio;              /* its direct writes (NULL: buffered) */
    char *stage[SAVE_STAGES];  /* staging buffers not in use */
    int nstage, nalloc;        /* free ones, all of them */
    /* direct writes: staged buffers go to a writer thread, so the next buffer is checksummed and
     * copied while the previous one is on its way to the disk */
    pthread_t writer;
    int writer_on, stop;
    struct zt_aio_seg q[SAVE_STAGES];
    int qn;                    /* queued chunks */
    /* one stream for every record: parameter tasks stage in turn (smu), so records that follow
     * each other in the file (most tasks run in file order) share buffers and writes */
    pthread_mutex_t smu;
    struct zt_shard_stream st;
};

/* a free staging buffer (waits for the writer to return one when all are in use) */
static char *stage_get(struct save_job *j) {
    char *b = NULL;
    pthread_mutex_lock(&j->mu);
    while (j->nstage == 0 && j->nalloc >= SAVE_STAGES) pthread_cond_wait(&j->cv, &j->mu);
    if (j->nstage > 0) b = j->stage[--j->nstage];
    else j->nalloc++;
    pthread_mutex_unlock(&j->mu);
    if (!b && !(b = zt_aio_alloc(SAVE_STAGE_BYTES))) {
        pthread_mutex_lock(&j->mu);
        j->nalloc--;
        pthread_mutex_unlock(&j->mu);
    }
    return b;
}

static void stage_put(struct save_job *j, char *b) {
    if (!b) return;
    pthread_mutex_lock(&j->mu);
    j->stage[j->nstage++] = b;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

static void save_fail(struct save_job *j, enum zt_status rc) {
    pthread_mutex_lock(&j->mu);
    if (j->rc == ZT_OK) {
        j->rc = rc;
        snprintf(j->msg, sizeof j->msg, "%s", zt_error_last());
    }
    pthread_mutex_unlock(&j->mu);
}

/* the writer's stream (zt_aio_write_stream): queued buffers in order, each handed back to the
 * stager as soon as it is on the disk, while the buffers after it are still being written */
static int writer_next(void *ctx, struct zt_aio_seg *seg, int wait) {
    struct save_job *j = ctx;
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

static void writer_done(void *ctx, void *buf) {
    stage_put(ctx, buf);
}

static void *save_writer(void *arg) {
    struct save_job *j = arg;
    zt_runtime_io_thread(); /* ZT_IO_NICE */
    struct zt_aio_stream st = {writer_next, writer_done, j};
    enum zt_status rc = zt_aio_write_stream(j->aio, j->w.dfd, j->w.f.path, &st);
    if (rc != ZT_OK) save_fail(j, rc);
    return NULL;
}

/* zt_shard_stream's flush: queue the full buffer for the writer, continue in a free one */
static enum zt_status save_flush(void *ctx, char **buf, int64_t len, int64_t off) {
    struct save_job *j = ctx;
    pthread_mutex_lock(&j->mu);
    j->q[j->qn++] = (struct zt_aio_seg){*buf, (size_t)len, off}; /* < SAVE_STAGES: one is ours */
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    *buf = stage_get(j);
    if (!*buf) return zt_error_set(ZT_ERR_NOMEM, "checkpoint shard %s: out of memory", j->path);
    return ZT_OK;
}

/* every queued chunk written; the writer stopped */
static void writer_drain(struct save_job *j) {
    if (!j->writer_on) return;
    pthread_mutex_lock(&j->mu);
    j->stop = 1;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    pthread_join(j->writer, NULL);
    j->writer_on = 0;
}

static double ms_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* a parameter task is done: the last one commits the shard (header, fsync, rename) */
static void save_done(struct save_job *j, enum zt_status rc) {
    if (rc != ZT_OK) save_fail(j, rc);
    pthread_mutex_lock(&j->mu);
    int last = --j->left == 0;
    pthread_mutex_unlock(&j->mu);
    if (!last) return;
    if (j->rc == ZT_OK && (rc = zt_shard_stream_end(&j->st)) != ZT_OK) save_fail(j, rc);
    stage_put(j, j->st.buf);
    j->st.buf = NULL;
    writer_drain(j);
    rc = j->rc == ZT_OK ? zt_shard_commit(&j->w) : zt_shard_abort(&j->w, j->rc);
    if (rc != ZT_OK) save_fail(j, rc);
    pthread_mutex_lock(&j->mu);
    j->t1 = ms_now();
    j->left = -1; /* finished */
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

/* on an I/O thread: parameter p's value, exp_avg and exp_avg_sq rows into their records. ptrs:
 * p's own value blocks (unless offloaded), then the m and v blocks of their groups (in memory) */
static void save_param(void *ctx, void *const *ptrs) {
    struct save_req *q = ctx;
    struct save_job *j = q->job;
    zt_engine_t e = j->e;
    const struct zt_param *p = q->p;
    int nown = p->own1 - p->own0;
    enum zt_status rc = ZT_OK;
    pthread_mutex_lock(&j->mu);
    int failed = j->rc != ZT_OK; /* another part failed: the shard is lost anyway */
    pthread_mutex_unlock(&j->mu);
    float *tmp = NULL;
    if (!failed && (p->offl || !e->m)) {
        int64_t maxb = 1;
        for (int k = p->own0; k < p->own1; k++)
            if (blk_elems(e, p->first_blk + k) > maxb) maxb = blk_elems(e, p->first_blk + k);
        if (!(tmp = zt_aio_alloc((size_t)pad4k(maxb * 4)))) {
            rc = zt_error_set(ZT_ERR_NOMEM, "checkpoint shard %s: out of memory", j->w.f.path);
        }
    }
    pthread_mutex_lock(&j->smu);
    struct zt_shard_stream *st = &j->st;
    if (!failed && rc == ZT_OK && !st->buf && j->w.dfd >= 0 && !(st->buf = stage_get(j)))
        rc = zt_error_set(ZT_ERR_NOMEM, "checkpoint shard %s: out of memory", j->w.f.path);
    for (int role = 0; !failed && rc == ZT_OK && role < 3; role++) {
        rc = zt_shard_stream_record(st, q->rec0 + role);
        for (int k = 0; rc == ZT_OK && k < nown; k++) {
            int b = p->first_blk + p->own0 + k;
            int64_t n = blk_elems(e, b);
            const float *src = tmp;
            if (role == 0 && !p->offl) {
                src = ptrs[k];
            } else if (role == 0) { /* its shard is in file B (inf: its master in file A) */
                rc = zt_offload_read_values(e, b, tmp);
            } else if (e->m) { /* m and v blocks of each value block's group */
                src = (const float *)ptrs[q->mv0 + 2 * k + role - 1] + e->pblk[b].off;
            } else { /* file A */
                rc = zt_offload_read_optim(e, e->blk_group[b], e->pblk[b].off, e->pblk[b].off + n,
                                 role - 1, tmp);
            }
            if (rc == ZT_OK) rc = zt_shard_stream_add(st, src, n);
        }
        if (rc == ZT_OK) rc = zt_shard_stream_done(st);
    }
    if (rc != ZT_OK) st->i = -1; /* the shard is lost: nothing more is staged */
    pthread_mutex_unlock(&j->smu);
    free(tmp);
    save_done(j, rc);
}

enum zt_status zt_engine_save_begin(zt_engine_t e, const char *path) {
    if (e->save)
        return zt_error_set(ZT_ERR_INVALID, "checkpoint shard %s: a save is still in progress",
                            path);
    if (!e->finalized)
        return zt_error_set(ZT_ERR_INVALID, "checkpoint shard %s: the engine is not finalized",
                            path);
    ZT_CHECK(zt_engine_io_start(e));
    int nrec = 0;
    for (int i = 0; i < e->np; i++) nrec += e->params[i]->own1 > e->params[i]->own0 ? 3 : 0;
    struct save_job *j = calloc(1, sizeof *j);
    struct zt_shard_rec *recs = calloc((size_t)nrec + 1, sizeof *recs);
    struct zt_block_ref *refs = calloc((size_t)(3 * e->nb + 2 * e->nunits + 1), sizeof *refs);
    if (j) j->req = calloc((size_t)e->np + 1, sizeof *j->req);
    if (!j || !recs || !refs || !j->req) {
        if (j) free(j->req);
        free(j);
        free(recs);
        free(refs);
        return zt_error_set(ZT_ERR_NOMEM, "checkpoint shard %s: out of memory", path);
    }
    for (int i = 0, k = 0; i < e->np; i++) {
        const struct zt_param *p = e->params[i];
        for (int role = 0; p->own1 > p->own0 && role < 3; role++, k++) {
            snprintf(recs[k].name, sizeof recs[k].name, "%s", p->name);
            recs[k].role = role;
            recs[k].rows = p->rows;
            recs[k].cols = p->cols;
            recs[k].row0 = own_row0(p);
            recs[k].row1 = own_row1(p);
            j->bytes += (recs[k].row1 - recs[k].row0) * p->cols * 4;
        }
    }
    snprintf(j->path, sizeof j->path, "%s", path);
    enum zt_status rc = strlen(path) >= sizeof j->path
                            ? zt_error_set(ZT_ERR_INVALID, "checkpoint shard %s: path too long",
                                           path)
                            : zt_shard_create(&j->w, j->path, e->rank, e->size, recs, nrec);
    free(recs);
    if (rc != ZT_OK) {
        free(j->req);
        free(j);
        free(refs);
        return rc;
    }
    struct zt_aio_cfg ac;
    if (zt_engine_aio_cfg(e, &ac) == ZT_OK && zt_aio_init(&j->aio, &ac) == ZT_OK &&
        !zt_shard_direct(&j->w, j->aio)) {
        zt_aio_free(j->aio); /* the file system refuses O_DIRECT: buffered writes */
        j->aio = NULL;
    }
    j->e = e;
    pthread_mutex_init(&j->mu, NULL);
    pthread_mutex_init(&j->smu, NULL);
    pthread_cond_init(&j->cv, NULL);
    zt_shard_stream_begin(&j->st, &j->w, NULL, SAVE_STAGE_BYTES);
    if (j->aio && pthread_create(&j->writer, NULL, save_writer, j) == 0) j->writer_on = 1;
    if (j->writer_on) {
        j->st.flush = save_flush;
        j->st.ctx = j;
    }
    j->left = 1;
    j->t0 = ms_now();
    e->save = j;
    struct zt_task_opts o = zt_engine_opts(e, ZT_PRIO_OPTIMIZER, -1, 0, -1);
    for (int i = 0, rec = 0; i < e->np && rc == ZT_OK; i++) {
        const struct zt_param *p = e->params[i];
        int nown = p->own1 - p->own0, n = 0;
        if (nown <= 0) continue;
        struct save_req *q = &j->req[i];
        *q = (struct save_req){.job = j, .p = p, .rec0 = rec};
        rec += 3;
        int64_t bytes = (own_row1(p) - own_row0(p)) * p->cols * 12;
        int hi_unit = -1; /* file-order blocks of the units the state lies in, each once */
        for (int pass = 0; pass < 2; pass++) {
            if (pass == 0 ? p->offl : !e->m) { /* in a swap file: its units' order blocks */
                zt_tensor_t ford = pass == 0 ? e->fordB : e->fordA;
                for (int k = 0; k < nown; k++) {
                    int b = p->first_blk + p->own0 + k, li = e->blk_group[b];
                    int u0 = unit_at(e, li, e->pblk[b].off);
                    int u1 = unit_at(e, li, e->pblk[b].off + blk_elems(e, b) - 1);
                    for (int u = u0 > hi_unit ? u0 : hi_unit + 1; u <= u1; u++)
                        refs[n++] = (struct zt_block_ref){ford, u, 0};
                    if (u1 > hi_unit) hi_unit = u1;
                }
                hi_unit = -1;
            } else if (pass == 0) { /* value blocks */
                for (int k = 0; k < nown; k++) refs[n++] = e->pblk[p->first_blk + p->own0 + k];
            } else { /* m and v blocks of each value block's group */
                q->mv0 = n;
                for (int k = 0; k < nown; k++) {
                    int g = e->blk_group[p->first_blk + p->own0 + k];
                    refs[n++] = (struct zt_block_ref){e->m, g, 0};
                    refs[n++] = (struct zt_block_ref){e->v, g, 0};
                }
            }
        }
        pthread_mutex_lock(&j->mu);
        j->left++;
        pthread_mutex_unlock(&j->mu);
        if ((rc = zt_task_io(&o, refs, n, bytes, save_param, q)) != ZT_OK) {
            pthread_mutex_lock(&j->mu);
            j->left--;
            pthread_mutex_unlock(&j->mu);
        }
    }
    free(refs);
    save_done(j, rc); /* the extra count: every task submitted (or a failure) */
    return ZT_OK;     /* failures are reported by zt_engine_save_end */
}

enum zt_status zt_engine_save_end(zt_engine_t e, struct zt_save_info *info) {
    struct save_job *j = e->save;
    if (!j) return zt_error_set(ZT_ERR_INVALID, "checkpoint shard: no save in progress");
    pthread_mutex_lock(&j->mu);
    int done = j->left < 0;
    pthread_mutex_unlock(&j->mu);
    /* idle StarPU workers poll for work: while only the writers run, let them sleep */
    int paused = !done && zt_runtime_pause_if_idle();
    pthread_mutex_lock(&j->mu);
    while (j->left >= 0) pthread_cond_wait(&j->cv, &j->mu);
    pthread_mutex_unlock(&j->mu);
    if (paused) zt_runtime_resume();
    if (info) {
        info->bytes = j->bytes;
        info->write_ms = j->t1 - j->t0;
    }
    enum zt_status rc = j->rc;
    if (rc != ZT_OK) zt_error_set(rc, "%s", j->msg);
    pthread_mutex_destroy(&j->mu);
    pthread_mutex_destroy(&j->smu);
    pthread_cond_destroy(&j->cv);
    if (j->aio) zt_aio_free(j->aio);
    for (int i = 0; i < j->nstage; i++) free(j->stage[i]);
    free(j->req);
    free(j);
    e->save = NULL;
    return rc;
}

enum zt_status zt_engine_save_shard(zt_engine_t e, const char *path) {
    ZT_CHECK(zt_engine_save_begin(e, path));
    return zt_engine_save_end(e, NULL);
}

/* every record names a tensor of this model, and per tensor and role the records have its
 * shape and cover each row exactly once */
static enum zt_status ck_check(zt_engine_t e, const struct zt_shard_set *s) {
    struct zt_shard_tensor *t = calloc((size_t)e->np + 1, sizeof *t);
    if (!t) return zt_error_set(ZT_ERR_NOMEM, "checkpoint: out of memory");
    for (int i = 0; i < e->np; i++)
        t[i] = (struct zt_shard_tensor){e->params[i]->name, e->params[i]->rows,
                                        e->params[i]->cols};
    enum zt_status rc = zt_shard_set_check(s, t, e->np);
    free(t);
    return rc;
}

/* exp_avg and exp_avg_sq of this rank's groups, in memory or (unit by unit) in file A */
static enum zt_status ck_load_moments(zt_engine_t e, struct zt_shard_set *s) {
    if (e->g1 <= e->g0) return ZT_OK;
    const int blo = e->groups[e->g0].first;
    const int bhi = e->groups[e->g1 - 1].first + e->groups[e->g1 - 1].n;
    if (e->m) {
        ZT_CHECK(zt_tensor_acquire(e->m, 1));
        enum zt_status rc = zt_tensor_acquire(e->v, 1);
        if (rc != ZT_OK) {
            zt_tensor_release(e->m);
            return rc;
        }
        float *mv[2] = {zt_tensor_data(e->m), zt_tensor_data(e->v)};
        const int64_t mbase = e->babs[blo];
        for (int i = 0; i < e->np && rc == ZT_OK; i++) {
            const struct zt_param *p = e->params[i];
            int j0 = blo - p->first_blk, j1 = bhi - p->first_blk; /* its blocks in the range */
            j0 = j0 < 0 ? 0 : j0;
            j1 = j1 > p->nblk ? p->nblk : j1;
            for (int v = 0; v < 2 && j1 > j0 && rc == ZT_OK; v++)
                rc = ck_elems(s, p, v ? ZT_ROLE_EXP_AVG_SQ : ZT_ROLE_EXP_AVG,
                              blk_row0(p, j0) * p->cols, blk_row0(p, j1) * p->cols,
                              mv[v] + e->babs[p->first_blk + j0] - mbase);
        }
        zt_tensor_release(e->m);
        zt_tensor_release(e->v);
        return rc;
    }
    /* file A: each unit [m | v] staged whole (O_DIRECT wants aligned writes) */
    const struct zt_param **bp = malloc((size_t)e->nb * sizeof *bp);
    void *stage = NULL;
    if (!bp || !(stage = zt_aio_alloc((size_t)(2 * pad4k(e->buf_elems * 4))))) {
        free(bp);
        return zt_error_set(ZT_ERR_NOMEM, "checkpoint: out of memory for the swap staging");
    }
    for (int i = 0; i < e->np; i++)
        for (int j = 0; j < e->params[i]->nblk; j++) bp[e->params[i]->first_blk + j] = e->params[i];
    enum zt_status rc = ZT_OK;
    for (int u = 0; u < e->nunits && rc == ZT_OK; u++) {
        const struct zt_unit *un = &e->units[u];
        const struct zt_group *gr = &e->groups[e->g0 + un->li];
        const int64_t len = unit_bytes(e, u);
        memset(stage, 0, (size_t)(2 * len));
        for (int b = gr->first; b < gr->first + gr->n && rc == ZT_OK; b++) {
            const struct zt_param *p = bp[b];
            int64_t s0 = e->pblk[b].off, s1 = s0 + blk_elems(e, b);
            int64_t x0 = s0 > un->lo ? s0 : un->lo, x1 = s1 < un->hi ? s1 : un->hi;
            if (x1 <= x0) continue;
            int64_t pe = blk_row0(p, b - p->first_blk) * p->cols - s0; /* param element - group's */
            for (int v = 0; v < 2 && rc == ZT_OK; v++)
                rc = ck_elems(s, p, v ? ZT_ROLE_EXP_AVG_SQ : ZT_ROLE_EXP_AVG, pe + x0, pe + x1,
                              (float *)((char *)stage + v * len) + (x0 - un->lo));
        }
        if (rc == ZT_OK) rc = zt_swap_write_sync(&e->fA, stage, 2 * len, un->offA);
    }
    free(stage);
    free(bp);
    return rc;
}

enum zt_status zt_engine_load_shards(zt_engine_t e, const char *const *paths, int n) {
    ZT_CHECK(zt_engine_finish(e));
    struct zt_shard_set s;
    ZT_CHECK(zt_shard_set_open(&s, paths, n));
    /* large records O_DIRECT through the aio engine with the config's settings: a cold read
     * through the page cache went at a third of the disk's speed (readahead-sized requests) */
    struct zt_aio_cfg ac;
    zt_aio_t aio = NULL;
    if (zt_engine_aio_cfg(e, &ac) == ZT_OK && zt_aio_init(&aio, &ac) == ZT_OK) zt_shard_set_direct(&s, aio);
    enum zt_status rc = ck_check(e, &s);
    /* values: whole where this rank keeps them whole, else its own rows */
    float *tmp = NULL;
    for (int i = 0; i < e->np && rc == ZT_OK; i++) {
        struct zt_param *p = e->params[i];
        if (p->offl) continue;
        if (e->mp) { /* master and working copy from the same rows (the copy rounded) */
            int part = partial_home(e, p); /* the copy is whole unless stage 3 splits it */
            float *t = realloc(tmp, (size_t)(p->rows * p->cols) * sizeof(float));
            if (!t) {
                rc = zt_error_set(ZT_ERR_NOMEM, "checkpoint: out of memory");
                break;
            }
            tmp = t;
            int64_t x0 = part ? own_row0(p) * p->cols : 0;
            rc = ck_elems(&s, p, ZT_ROLE_PARAM, x0,
                          part ? own_row1(p) * p->cols : p->rows * p->cols, tmp + x0);
            if (rc == ZT_OK) rc = zt_weights_set_values(e, p, tmp);
            continue;
        }
        if (!p->home) continue;
        int part = partial_home(e, p);
        if ((rc = zt_tensor_acquire(p->home, 1)) != ZT_OK) break;
        rc = ck_elems(&s, p, ZT_ROLE_PARAM, part ? own_row0(p) * p->cols : 0,
                      part ? own_row1(p) * p->cols : p->rows * p->cols, zt_tensor_data(p->home));
        zt_tensor_release(p->home);
    }
    free(tmp);
    if (rc == ZT_OK) rc = ck_load_moments(e, &s);
    if (rc == ZT_OK && e->par_nvme) rc = zt_offload_write_params(e, NULL, &s, 0);
    zt_shard_set_close(&s);
    if (aio) zt_aio_free(aio);
    return rc;
}
