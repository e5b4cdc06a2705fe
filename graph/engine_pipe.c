/*
 * graph/engine_pipe.c: the engine's part of a pipeline (docs/pipeline.md): which stage this rank
 * runs, the parameters of other stages skipped in the initializer's stream, the tied parameter
 * whose gradients the first and the last stage add, the gradient norm's group sums exchanged
 * between stages, and the weights of every stage written by world rank 0.
 *
 * Layer: graph/, behind the engine (engine_impl.h). The data-parallel job that the ZeRO plan
 * and the collectives see is the stage's own: its replicas (world ranks stage * dp .. + dp - 1,
 * the collectives' group), so nothing of the plan changes; replica r of a stage talks to
 * replica r of the others. The messages between stages are point-to-point tasks (tasks/zt_tasks.h
 * zt_task_send/recv) on the engine's tags (zt_engine.h enum zt_pipe_tag).
 */
#include <stdlib.h>      /* calloc, free */
#include <string.h>      /* memcpy */
#include "engine_impl.h" /* struct zt_engine */
#include "zt_comm.h"     /* zt_comm_sum_doubles, zt_comm_gatherv_bytes, zt_comm_count_failed */
#include "zt_safetensors.h" /* zt_st_write_f32 */

enum zt_status zt_engine_pipe_init(zt_engine_t e) {
    const struct zt_pipeline_cfg *p = &e->cfg.pipeline;
    e->pipe.stages = p->stages > 1 ? p->stages : 1;
    e->pipe.tied_peer = -1;
    if (e->pipe.stages == 1) return zt_comm_set_group(0, zt_comm_size());
    const struct zt_pipe_rank x = zt_pipe_rank(p, zt_comm_size(), zt_comm_rank());
    e->pipe.stage = x.stage;
    e->rank = x.dp_rank;
    e->size = x.dp;
    /* the data-parallel collectives run among the stage's replicas: world ranks stage * dp ..
     * stage * dp + dp - 1 (the layout of zt_pipe_rank) */
    return zt_comm_set_group(x.stage * x.dp, x.dp);
}

int zt_engine_pipe_stage(zt_engine_t e, int *stages) {
    if (stages) *stages = e->pipe.stages;
    return e->pipe.stage;
}

int zt_engine_pipe_rank(zt_engine_t e, int s) { return s * e->size + e->rank; }

int zt_engine_talks(const struct zt_engine *e) { return e->rank == 0 && e->pipe.stage == 0; }

void zt_engine_param_skip(zt_engine_t e, int ndim, const int64_t *shape, enum zt_init init) {
    if (init != ZT_INIT_NORMAL) return; /* zeros and ones draw nothing */
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    e->pipe.pending_skip += (n + 1) / 2 * 2; /* Box-Muller draws a parameter's values in pairs */
}

enum zt_status zt_engine_pipe_tie(zt_engine_t e, zt_param_t p) {
    const int s = e->pipe.stage, last = e->pipe.stages - 1;
    if (e->pipe.stages < 2) return ZT_OK;
    if (s != 0 && s != last)
        return zt_error_set(ZT_ERR_INVALID, "engine: parameter %s is tied between the first and "
                            "the last stage, but stage %d of %d holds it", p->name, s,
                            e->pipe.stages);
    e->pipe.tied = p;
    e->pipe.tied_peer = zt_engine_pipe_rank(e, s == 0 ? last : 0);
    p->no_norm = s == last; /* one copy in the norm: the first stage's */
    return ZT_OK;
}

/* a tensor shaped and blocked as p's gradient sums, for the other copy's */
static enum zt_status tied_buffer(zt_engine_t e) {
    const struct zt_param *p = e->pipe.tied;
    int64_t *rows = calloc((size_t)p->nblk, sizeof *rows);
    if (!rows) return zt_error_set(ZT_ERR_NOMEM, "engine: out of memory");
    for (int j = 0; j < p->nblk; j++)
        rows[j] = zt_param_blk_row0(p, j + 1) - zt_param_blk_row0(p, j);
    enum zt_status rc = zt_tensor_init_dtype(&e->pipe.tied_in, "tied_grad_in", NULL, p->rows,
                                             p->cols, e->work_dtype, p->nblk, rows);
    free(rows);
    return rc;
}

enum zt_status zt_engine_pipe_finalize(zt_engine_t e) {
    struct zt_engine_pipe *pp = &e->pipe;
    const int P = pp->stages;
    pp->group0 = calloc((size_t)P + 1, sizeof *pp->group0);
    double *n = calloc((size_t)P, sizeof *n);
    enum zt_status rc = pp->group0 && n ? ZT_OK : zt_error_set(ZT_ERR_NOMEM, "engine: out of "
                                                                             "memory");
    if (rc == ZT_OK && P > 1) { /* every stage's group count, by its first replica */
        if (e->rank == 0) n[pp->stage] = e->plan.ngroups;
        rc = zt_comm_sum_doubles(n, P);
    } else if (rc == ZT_OK) {
        n[0] = e->plan.ngroups;
    }
    for (int s = 0; rc == ZT_OK && s < P; s++) pp->group0[s + 1] = pp->group0[s] + (int)n[s];
    free(n);
    if (rc == ZT_OK && pp->tied) rc = tied_buffer(e);
    return rc;
}

void zt_engine_pipe_free(zt_engine_t e) {
    zt_tensor_free(e->pipe.tied_in);
    e->pipe.tied_in = NULL;
    free(e->pipe.group0);
    e->pipe.group0 = NULL;
}

enum zt_status zt_engine_pipe_tie_grads(zt_engine_t e, const struct zt_task_opts *o) {
    struct zt_param *p = e->pipe.tied;
    if (!p) return ZT_OK;
    const int peer = e->pipe.tied_peer;
    /* each end sends its own sums before adding the other's: a + b on one, b + a on the other,
     * the same bits */
    for (int j = 0; j < p->nblk; j++)
        ZT_CHECK(zt_task_send(o, p->grad_sums, j, peer, ZT_PIPE_TAG_TIED));
    for (int j = 0; j < p->nblk; j++)
        ZT_CHECK(zt_task_recv(o, e->pipe.tied_in, j, peer, ZT_PIPE_TAG_TIED));
    for (int j = 0; j < p->nblk; j++)
        ZT_CHECK(zt_task_residual_backward(o, p->grad_sums, NULL, j, e->pipe.tied_in));
    return ZT_OK;
}

enum zt_status zt_engine_pipe_norm_sums(zt_engine_t e, const struct zt_task_opts *o) {
    const struct zt_engine_pipe *pp = &e->pipe;
    zt_tensor_t t = e->buf.grad_sumsq;
    for (int s = 0; s < pp->stages; s++) {
        if (s == pp->stage) continue;
        const int peer = zt_engine_pipe_rank(e, s);
        for (int g = pp->group0[pp->stage]; g < pp->group0[pp->stage + 1]; g++)
            ZT_CHECK(zt_task_send(o, t, g, peer, ZT_PIPE_TAG_NORM));
        for (int g = pp->group0[s]; g < pp->group0[s + 1]; g++)
            ZT_CHECK(zt_task_recv(o, t, g, peer, ZT_PIPE_TAG_NORM));
    }
    return ZT_OK;
}

// ----------------------------------------------------------------------------
// the weights of every stage, written by world rank 0

/* one tensor in a stage's record: its header, then n floats */
struct record_head {
    char name[160];
    int32_t ndim;
    int64_t shape[ZT_MAX_DIMS];
    int64_t n;
};

/* a record's bytes: its header and its floats, padded to 8 bytes (the next header's int64s) */
static size_t record_bytes(int64_t n) {
    return sizeof(struct record_head) + ((size_t)n * sizeof(float) + 7) / 8 * 8;
}

/* one parameter's values or gradients (widened to fp32) into dst: from whole (the stage's
 * consolidated flat buffer, fp32) when there is one, else from its own tensor */
static enum zt_status param_floats(const struct zt_param *p, int grads, zt_tensor_t whole,
                                   float *dst, int64_t n) {
    if (whole) {
        memcpy(dst, (const float *)zt_tensor_data(whole) + p->off, (size_t)n * sizeof(float));
        return ZT_OK;
    }
    zt_tensor_t src = grads ? p->grad_sums : p->home;
    ZT_CHECK(zt_tensor_acquire(src, 0));
    zt_dtype_to_f32(zt_tensor_dtype(src), dst, zt_tensor_data(src), (size_t)n);
    zt_tensor_release(src);
    return ZT_OK;
}

/* floats a record of p carries: its values, or none for a table of names and shapes */
static int64_t record_floats(const struct zt_param *p, int heads_only) {
    return heads_only ? 0 : p->rows * p->cols;
}

/* this stage's parameters (the last stage's tied copy left out) as records, fp32 (grads: the
 * gradients; heads_only: names and shapes alone), from the stage's first replica (the others
 * hold the same values: none) */
static enum zt_status stage_records(zt_engine_t e, int grads, int heads_only, zt_tensor_t whole,
                                    char **out, size_t *bytes) {
    size_t total = 0;
    for (int i = 0; i < e->nparams && e->rank == 0; i++)
        if (!e->params[i]->no_norm) total += record_bytes(record_floats(e->params[i], heads_only));
    char *buf = calloc(total ? total : 1, 1), *at = buf;
    if (!buf) return zt_error_set(ZT_ERR_NOMEM, "export: out of memory");
    enum zt_status rc = whole ? zt_tensor_acquire(whole, 0) : ZT_OK;
    for (int i = 0; i < e->nparams && e->rank == 0 && rc == ZT_OK; i++) {
        const struct zt_param *p = e->params[i];
        if (p->no_norm) continue;
        struct record_head h = {.ndim = p->ndim, .n = record_floats(p, heads_only)};
        memcpy(h.name, p->name, sizeof h.name);
        memcpy(h.shape, p->shape, sizeof h.shape);
        memcpy(at, &h, sizeof h);
        if (!heads_only) rc = param_floats(p, grads, whole, (float *)(at + sizeof h), h.n);
        at += record_bytes(h.n);
    }
    if (whole) zt_tensor_release(whole);
    if (rc != ZT_OK) {
        free(buf);
        return rc;
    }
    *out = buf;
    *bytes = total;
    return ZT_OK;
}

/* rank 0: the records of every stage, in stage order (a 1-rank run's order), into path */
static enum zt_status write_records(const char *path, const char *all, size_t total) {
    int n = 0;
    for (size_t at = 0; at < total; n++)
        at += record_bytes(((const struct record_head *)(all + at))->n);
    struct zt_st_entry *ent = calloc((size_t)n + 1, sizeof *ent);
    if (!ent) return zt_error_set(ZT_ERR_NOMEM, "export %s: out of memory", path);
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        const struct record_head *h = (const struct record_head *)(all + at);
        ent[i].name = h->name;
        ent[i].ndim = h->ndim;
        memcpy(ent[i].shape, h->shape, sizeof(int64_t) * (size_t)h->ndim);
        ent[i].data = (const float *)(all + at + sizeof *h);
        at += record_bytes(h->n);
    }
    enum zt_status rc = zt_st_write_f32(path, ent, n, NULL);
    free(ent);
    return rc;
}

enum zt_status zt_engine_pipe_save(zt_engine_t e, const char *path, int grads,
                                   zt_tensor_t whole) {
    char *mine = NULL, *all = NULL;
    size_t bytes = 0, total = 0;
    enum zt_status rc = zt_runtime_wait_all();
    if (rc == ZT_OK) rc = stage_records(e, grads, 0, whole, &mine, &bytes);
    int nfailed = 0;
    ZT_CHECK(zt_comm_count_failed(rc != ZT_OK, &nfailed)); /* every rank on, or none */
    if (rc == ZT_OK && nfailed > 0)
        rc = zt_error_set(ZT_ERR_PEER, "export %s: another stage could not read its weights", path);
    if (rc == ZT_OK) rc = zt_comm_gatherv_bytes(mine, bytes, (void **)&all, &total);
    if (rc == ZT_OK && zt_comm_rank() == 0) rc = write_records(path, all, total);
    free(mine);
    free(all);
    ZT_CHECK(zt_comm_count_failed(rc != ZT_OK, &nfailed));
    if (nfailed > 0 && rc == ZT_OK)
        rc = zt_error_set(ZT_ERR_PEER, "safetensors %s: rank 0 could not write it", path);
    return rc;
}

_Static_assert(sizeof((struct zt_engine_tensor *)0)->shape == ZT_MAX_DIMS * sizeof(int64_t) &&
                   sizeof((struct zt_engine_tensor *)0)->name ==
                       sizeof((struct record_head *)0)->name,
               "zt_engine_tensor mirrors a record's head");

enum zt_status zt_engine_pipe_tensors(zt_engine_t e, struct zt_engine_tensor **out, int *n) {
    *out = NULL;
    *n = 0;
    char *mine = NULL, *all = NULL;
    size_t bytes = 0, total = 0;
    enum zt_status rc = stage_records(e, 0, 1, NULL, &mine, &bytes);
    int nfailed = 0;
    ZT_CHECK(zt_comm_count_failed(rc != ZT_OK, &nfailed)); /* every rank on, or none */
    if (rc == ZT_OK && nfailed > 0)
        rc = zt_error_set(ZT_ERR_PEER, "checkpoint: another stage could not list its tensors");
    if (rc == ZT_OK) rc = zt_comm_gatherv_bytes(mine, bytes, (void **)&all, &total);
    free(mine);
    const size_t each = record_bytes(0);
    struct zt_engine_tensor *t = rc == ZT_OK && all ? calloc(total / each + 1, sizeof *t) : NULL;
    if (rc == ZT_OK && all && !t) rc = zt_error_set(ZT_ERR_NOMEM, "checkpoint: out of memory");
    for (size_t at = 0; t && at + each <= total; at += each, (*n)++) {
        const struct record_head *h = (const struct record_head *)(all + at);
        memcpy(t[*n].name, h->name, sizeof t[*n].name);
        t[*n].ndim = h->ndim;
        memcpy(t[*n].shape, h->shape, sizeof t[*n].shape);
    }
    free(all);
    *out = t;
    return rc;
}
