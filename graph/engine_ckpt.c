/*
 * graph/engine_ckpt.c: checkpoint shards of the engine's state (zt_engine_save_begin/_end,
 * zt_engine_save_shard, zt_engine_load_shards). Each rank keeps the rows of its ZeRO shard's
 * blocks of every parameter's fp32 value, exp_avg and exp_avg_sq, at every stage (so a stage-0
 * job splits its checkpoint like a stage-1 one), and a checkpoint of any world size and stage
 * loads into any other.
 *
 * Layer: graph/, behind the engine (engine_impl.h). The save hands records to the background
 * writer of io/zt_ckpt_writer.h from host tasks (zt_task_io) that hold the blocks they read; the
 * shard format is io/zt_ckpt.h; the collective checkpoint around the shards (meta.json, the
 * directory protocol of io/zt_ckpt_dir.h) is graph/checkpoint_save.c and checkpoint_load.c.
 */
#include <stdio.h>           /* snprintf */
#include <stdlib.h>          /* calloc, realloc, free */
#include "checkpoint_impl.h" /* zt_engine_save_begin_id */
#include "engine_impl.h"     /* struct zt_engine, the ZeRO plan, the offload */
#include "zt_aio.h"          /* struct zt_aio_cfg, zt_aio_alloc (staging for offloaded state) */
#include "zt_ckpt.h"         /* shard records, zt_shard_set_* */
#include "zt_ckpt_writer.h"  /* the background shard writer */

/* a parameter's host task: its rows of the value, exp_avg and exp_avg_sq records */
struct save_req {
    struct zt_engine_save *save;
    const struct zt_param *p;
    int first_rec;          /* its value's record; exp_avg's and exp_avg_sq's follow */
    int moments_at;         /* where the m and v blocks start among its task's pointers */
};

/* the shard being written: its writer, its size, one request per parameter */
struct zt_engine_save {
    zt_engine_t e;
    zt_ckpt_writer_t w;
    int64_t bytes;          /* of the records' data */
    struct save_req *req;   /* [nparams] */
};

/* whether p's shard of rows goes into this rank's checkpoint shard: it has rows, and it is not
 * a pipeline's second copy of a tied parameter (the first stage's copy is saved) */
static int saved(const struct zt_param *p) { return p->own1 > p->own0 && !p->no_norm; }
static int64_t own_row0(const struct zt_param *p) { return zt_param_blk_row0(p, p->own0); }
static int64_t own_row1(const struct zt_param *p) { return zt_param_blk_row0(p, p->own1); }

// ----------------------------------------------------------------------------
// save: one host task (zt_task_io) per parameter reads the state through the blocks that hold
// it (values and moments in memory, or the swap files' order blocks), so it sees exactly what
// the step before it left there and the next update of that state waits for it; the next
// forward and backward only read the values and run alongside

/* one of p's own blocks (k-th) in one role into the stream: from the task's pointers, or read
 * from the swap files into tmp */
static enum zt_status stage_block(const struct save_req *q, void *const *ptrs, int role, int k,
                                  float *tmp, struct zt_shard_stream *st) {
    const zt_engine_t e = q->save->e;
    const struct zt_param *p = q->p;
    const int b = p->first_blk + p->own0 + k;
    const int64_t n = zt_engine_blk_elems(e, b);
    const float *src = tmp;
    if (role == 0 && !p->offloaded) /* its value block */
        src = ptrs[k];
    else if (role == 0) /* its shard is in the swap file */
        ZT_CHECK(zt_offload_read_values(e, b, tmp));
    else if (e->buf.m) /* the m and v blocks of its group */
        src = (const float *)ptrs[q->moments_at + 2 * k + role - 1] + e->buf.master_blk[b].off;
    else /* the optimizer's swap file */
        ZT_CHECK(zt_offload_read_moment(e, b, role - 1, tmp));
    return zt_shard_stream_add(st, src, n);
}

/* on an I/O thread: parameter p's value, exp_avg and exp_avg_sq rows into their records. ptrs:
 * p's own value blocks (unless offloaded), then the m and v blocks of their groups (in memory) */
static void save_param(void *ctx, void *const *ptrs) {
    const struct save_req *q = ctx;
    const zt_engine_t e = q->save->e;
    const zt_ckpt_writer_t w = q->save->w;
    const struct zt_param *p = q->p;
    const int nown = p->own1 - p->own0;
    enum zt_status rc = ZT_OK;
    const int failed = zt_ckpt_writer_failed(w); /* another part failed: the shard is lost */
    float *tmp = NULL;
    if (!failed && (p->offloaded || !e->buf.m)) { /* staging for what is read from the files */
        int64_t maxb = 1;
        for (int k = p->own0; k < p->own1; k++)
            if (zt_engine_blk_elems(e, p->first_blk + k) > maxb)
                maxb = zt_engine_blk_elems(e, p->first_blk + k);
        if (!(tmp = zt_aio_alloc((size_t)zt_plan_pad4k(maxb * 4))))
            rc = zt_error_set(ZT_ERR_NOMEM, "checkpoint shard %s: out of memory",
                              zt_ckpt_writer_path(w));
    }
    struct zt_shard_stream *st = zt_ckpt_writer_lock(w);
    if (!failed && rc == ZT_OK) rc = zt_ckpt_writer_buffer(w);
    for (int role = 0; !failed && rc == ZT_OK && role < 3; role++) {
        rc = zt_shard_stream_record(st, q->first_rec + role);
        for (int k = 0; rc == ZT_OK && k < nown; k++) rc = stage_block(q, ptrs, role, k, tmp, st);
        if (rc == ZT_OK) rc = zt_shard_stream_done(st);
    }
    zt_ckpt_writer_unlock(w, rc);
    free(tmp);
    zt_ckpt_writer_release(w, rc);
}

/* the shard's records: value, exp_avg, exp_avg_sq of each parameter this rank has rows of */
static enum zt_status make_records(zt_engine_t e, struct zt_shard_rec **out, int *nout,
                                   int64_t *bytes) {
    int nrec = 0;
    for (int i = 0; i < e->nparams; i++) nrec += saved(e->params[i]) ? 3 : 0;
    struct zt_shard_rec *recs = calloc((size_t)nrec + 1, sizeof *recs);
    if (!recs) return zt_error_set(ZT_ERR_NOMEM, "checkpoint shard: out of memory");
    *bytes = 0;
    for (int i = 0, k = 0; i < e->nparams; i++) {
        const struct zt_param *p = e->params[i];
        for (int role = 0; saved(p) && role < 3; role++, k++) {
            snprintf(recs[k].name, sizeof recs[k].name, "%s", p->name);
            recs[k].role = role;
            recs[k].rows = p->rows;
            recs[k].cols = p->cols;
            recs[k].row0 = own_row0(p);
            recs[k].row1 = own_row1(p);
            *bytes += (recs[k].row1 - recs[k].row0) * p->cols * 4;
        }
    }
    *out = recs;
    *nout = nrec;
    return ZT_OK;
}

/* the blocks p's task holds: its value blocks (or the parameter file's order blocks when
 * offloaded), then the m and v blocks of their groups (or the optimizer file's order blocks) */
static int task_blocks(zt_engine_t e, const struct zt_param *p, struct save_req *q,
                       struct zt_block_ref *refs) {
    const int b0 = p->first_blk + p->own0, b1 = p->first_blk + p->own1;
    int n = 0;
    if (p->offloaded) {
        n += zt_offload_order_refs(e, ZT_SWAP_PARAM_FILE, b0, b1, refs + n);
    } else {
        for (int b = b0; b < b1; b++) refs[n++] = e->buf.master_blk[b];
    }
    if (!e->buf.m) {
        n += zt_offload_order_refs(e, ZT_SWAP_OPTIM_FILE, b0, b1, refs + n);
    } else {
        q->moments_at = n;
        for (int b = b0; b < b1; b++) {
            const int g = e->plan.blk_local_group[b];
            refs[n++] = (struct zt_block_ref){e->buf.m, g, 0};
            refs[n++] = (struct zt_block_ref){e->buf.v, g, 0};
        }
    }
    return n;
}

/* one host task per parameter with rows in the shard */
static enum zt_status submit_tasks(zt_engine_t e, struct zt_engine_save *save) {
    const struct zt_zero_plan *pl = &e->plan;
    struct zt_block_ref *refs = calloc((size_t)(3 * pl->nblk + 2 * pl->nunits + 1), sizeof *refs);
    if (!refs) return zt_error_set(ZT_ERR_NOMEM, "checkpoint shard: out of memory");
    const struct zt_step_ctx ctx = zt_engine_own_ctx(e, ZT_PRIO_OPTIMIZER);
    enum zt_status rc = ZT_OK;
    for (int i = 0, rec = 0; i < e->nparams && rc == ZT_OK; i++) {
        const struct zt_param *p = e->params[i];
        if (!saved(p)) continue;
        struct save_req *q = &save->req[i];
        *q = (struct save_req){.save = save, .p = p, .first_rec = rec};
        rec += 3;
        const int n = task_blocks(e, p, q, refs);
        const int64_t bytes = (own_row1(p) - own_row0(p)) * p->cols * 12;
        zt_ckpt_writer_hold(save->w);
        if ((rc = zt_task_io(&ctx.opts, refs, n, bytes, save_param, q)) != ZT_OK)
            zt_ckpt_writer_release(save->w, ZT_OK); /* the task never runs */
    }
    free(refs);
    return rc;
}

enum zt_status zt_engine_save_begin(zt_engine_t e, const char *path) {
    const struct zt_shard_id id = {.run_id = 0, .step = -1, .rank = e->rank, .world = e->size};
    return zt_engine_save_begin_id(e, path, &id);
}

enum zt_status zt_engine_save_begin_id(zt_engine_t e, const char *path,
                                       const struct zt_shard_id *id) {
    if (e->save)
        return zt_error_set(ZT_ERR_INVALID, "checkpoint shard %s: a save is still in progress",
                            path);
    if (!e->finalized)
        return zt_error_set(ZT_ERR_INVALID, "checkpoint shard %s: the engine is not finalized",
                            path);
    ZT_CHECK(zt_engine_io_start(e));
    struct zt_engine_save *save = calloc(1, sizeof *save);
    if (save) save->req = calloc((size_t)e->nparams + 1, sizeof *save->req);
    struct zt_shard_rec *recs = NULL;
    int nrec = 0;
    enum zt_status rc = save && save->req
                            ? make_records(e, &recs, &nrec, &save->bytes)
                            : zt_error_set(ZT_ERR_NOMEM, "checkpoint shard %s: out of memory",
                                           path);
    if (rc == ZT_OK) {
        struct zt_aio_cfg ac;
        const int direct = zt_engine_aio_cfg(e, &ac) == ZT_OK;
        rc = zt_ckpt_writer_open(&save->w, path, id, recs, nrec,
                                 direct ? &ac : NULL, zt_runtime_io_thread);
    }
    free(recs);
    if (rc != ZT_OK) {
        if (save) free(save->req);
        free(save);
        return rc;
    }
    save->e = e;
    e->save = save;
    rc = submit_tasks(e, save);
    /* the opener's count: every task is submitted (or failed) */
    zt_ckpt_writer_release(save->w, rc);
    return ZT_OK; /* failures are reported by zt_engine_save_end */
}

enum zt_status zt_engine_save_end(zt_engine_t e, struct zt_save_info *info) {
    struct zt_engine_save *save = e->save;
    if (!save) return zt_error_set(ZT_ERR_INVALID, "checkpoint shard: no save in progress");
    /* idle StarPU workers poll for work: while only the writers run, let them sleep */
    const int paused = !zt_ckpt_writer_done(save->w) && zt_runtime_pause_if_idle();
    double ms = 0;
    enum zt_status rc = zt_ckpt_writer_wait(save->w, &ms);
    if (paused) zt_runtime_resume();
    if (info) {
        info->bytes = save->bytes;
        info->write_ms = ms;
    }
    free(save->req);
    free(save);
    e->save = NULL;
    return rc;
}

enum zt_status zt_engine_save_shard(zt_engine_t e, const char *path) {
    ZT_CHECK(zt_engine_save_begin(e, path));
    return zt_engine_save_end(e, NULL);
}

// ----------------------------------------------------------------------------
// load

/* every record names a tensor of this model, and per tensor and role the records have its
 * shape and cover each row exactly once */
static enum zt_status check_shards(zt_engine_t e, const struct zt_shard_set *s) {
    struct zt_shard_tensor *t = calloc((size_t)e->nparams + 1, sizeof *t);
    if (!t) return zt_error_set(ZT_ERR_NOMEM, "checkpoint: out of memory");
    for (int i = 0; i < e->nparams; i++)
        t[i] = (struct zt_shard_tensor){e->params[i]->name, e->params[i]->rows,
                                        e->params[i]->cols};
    /* a pipeline stage holds some of the checkpoint's tensors: the others' records are the
     * other stages' (meta.json's table was checked against the model) */
    enum zt_status rc = e->pipe.stages > 1 ? zt_shard_set_check_subset(s, t, e->nparams)
                                           : zt_shard_set_check(s, t, e->nparams);
    free(t);
    return rc;
}

/* values: whole where this rank keeps them whole, else its own rows; in mixed precision the
 * master and the working copy from the same rows (the copy rounded) */
static enum zt_status load_values(zt_engine_t e, struct zt_shard_set *s) {
    enum zt_status rc = ZT_OK;
    float *tmp = NULL;
    for (int i = 0; i < e->nparams && rc == ZT_OK; i++) {
        struct zt_param *p = e->params[i];
        if (p->offloaded) continue;
        const int part = zt_engine_partial_values(e, p); /* the copy is whole unless stage 3 */
        const int64_t x0 = part ? own_row0(p) * p->cols : 0;
        const int64_t x1 = part ? own_row1(p) * p->cols : p->rows * p->cols;
        if (e->mixed) {
            float *t = realloc(tmp, (size_t)(p->rows * p->cols) * sizeof(float));
            if (!t) {
                rc = zt_error_set(ZT_ERR_NOMEM, "checkpoint: out of memory");
                break;
            }
            tmp = t;
            rc = zt_param_read_shards(s, p, ZT_ROLE_PARAM, x0, x1, tmp + x0);
            if (rc == ZT_OK) rc = zt_weights_set_values(e, p, tmp);
            continue;
        }
        if (!p->home) continue;
        if ((rc = zt_tensor_acquire(p->home, 1)) != ZT_OK) break;
        rc = zt_param_read_shards(s, p, ZT_ROLE_PARAM, x0, x1, zt_tensor_data(p->home));
        zt_tensor_release(p->home);
    }
    free(tmp);
    return rc;
}

/* exp_avg and exp_avg_sq of this rank's groups, in memory or (unit by unit) in the swap file */
static enum zt_status load_moments(zt_engine_t e, struct zt_shard_set *s) {
    const struct zt_zero_plan *pl = &e->plan;
    if (pl->group_hi <= pl->group_lo) return ZT_OK;
    if (!e->buf.m) return zt_offload_load_moments(e, s);
    const int blo = pl->group[pl->group_lo].first;
    const int bhi = pl->group[pl->group_hi - 1].first + pl->group[pl->group_hi - 1].n;
    ZT_CHECK(zt_tensor_acquire(e->buf.m, 1));
    enum zt_status rc = zt_tensor_acquire(e->buf.v, 1);
    if (rc != ZT_OK) {
        zt_tensor_release(e->buf.m);
        return rc;
    }
    float *mv[2] = {zt_tensor_data(e->buf.m), zt_tensor_data(e->buf.v)};
    const int64_t mbase = pl->blk_start[blo];
    for (int i = 0; i < e->nparams && rc == ZT_OK; i++) {
        const struct zt_param *p = e->params[i];
        int j0 = blo - p->first_blk, j1 = bhi - p->first_blk; /* its blocks in the range */
        j0 = j0 < 0 ? 0 : j0;
        j1 = j1 > p->nblk ? p->nblk : j1;
        for (int v = 0; v < 2 && j1 > j0 && rc == ZT_OK; v++)
            rc = zt_param_read_shards(s, p, v ? ZT_ROLE_EXP_AVG_SQ : ZT_ROLE_EXP_AVG,
                                      zt_param_blk_row0(p, j0) * p->cols,
                                      zt_param_blk_row0(p, j1) * p->cols,
                                      mv[v] + pl->blk_start[p->first_blk + j0] - mbase);
    }
    zt_tensor_release(e->buf.m);
    zt_tensor_release(e->buf.v);
    return rc;
}

enum zt_status zt_engine_load_shards(zt_engine_t e, const char *const *paths, int n) {
    ZT_CHECK(zt_engine_finish(e));
    struct zt_shard_set s;
    ZT_CHECK(zt_shard_set_open(&s, paths, n));
    /* large records O_DIRECT through the aio engine with the config's settings: reading through
     * the page cache would go in readahead-sized requests */
    struct zt_aio_cfg ac;
    zt_aio_t aio = NULL;
    if (zt_engine_aio_cfg(e, &ac) == ZT_OK && zt_aio_init(&aio, &ac) == ZT_OK)
        zt_shard_set_direct(&s, aio);
    enum zt_status rc = check_shards(e, &s);
    if (rc == ZT_OK) rc = load_values(e, &s);
    if (rc == ZT_OK) rc = load_moments(e, &s);
    if (rc == ZT_OK && zt_offload_has_params(e->offload))
        rc = zt_offload_write_params(e, NULL, &s, 0);
    zt_shard_set_close(&s);
    if (aio) zt_aio_free(aio);
    return rc;
}
