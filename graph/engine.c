/*
 * graph/engine.c: the engine's lifecycle behind zt_engine.h: init/free, parameter declaration,
 * finalize (plan -> allocate -> initialise -> register), activations, accessors, the step
 * context and the I/O service the swaps and checkpoint writes share.
 *
 * Layer: graph/. No starpu_* call here: everything goes through tasks/ (zt_task_*, zt_tensor_*).
 */
#include <stdio.h>        /* snprintf */
#include <stdlib.h>       /* calloc, getenv, posix_memalign */
#include <string.h>       /* strcmp, memset, memcpy */
#include "engine_impl.h"  /* struct zt_engine, the engine's internal functions */
#include "zt_aio.h"       /* struct zt_aio_cfg */
#include "zt_ckpt.h"      /* zt_shard_set_read */
#include "zt_comm.h"      /* zt_comm_rank, zt_comm_size */

#define NOMEM() zt_error_set(ZT_ERR_NOMEM, "engine: out of memory")

// ----------------------------------------------------------------------------
// lifecycle

enum zt_status zt_engine_init(zt_engine_t *out, const struct zt_config *cfg) {
    *out = NULL;
    int64_t chunks = 0, group_elems = 0;
    ZT_CHECK(zt_engine_plan_knobs(&chunks, &group_elems));
    const char *on_nonfinite = "stop";
    ZT_CHECK(zt_knob_str("ZT_ON_NONFINITE", &on_nonfinite));
    if (cfg->micro_batch < 1 || cfg->grad_accum < 1)
        return zt_error_set(ZT_ERR_CONFIG, "engine: micro batch and accumulation must be >= 1");
    ZT_CHECK(zt_pipeline_check_runnable(cfg));
    struct zt_engine *e = calloc(1, sizeof *e);
    if (!e) return NOMEM();
    e->cfg = *cfg;
    e->chunks = (int)chunks;
    e->stage = cfg->zero_stage;
    e->group_elems = group_elems;
    e->nonfinite_warn = strcmp(on_nonfinite, "warn") == 0;
    e->rng = cfg->seed ^ 0x5A17C0DEull;
    e->mixed = cfg->precision != ZT_PREC_FP32;
    e->work_dtype = zt_engine_config_dtype(cfg);
    zt_loss_scaler_init(&e->scaler, cfg);
    /* activation blocks hold whole sequences; their number depends only on the config and
     * ZT_GRAPH_CHUNKS, never on the worker count (determinism) */
    struct zt_engine_acts *a = &e->act;
    a->nblk = zt_engine_act_blocks(cfg->micro_batch, e->chunks);
    a->blk_seqs = calloc((size_t)a->nblk, sizeof *a->blk_seqs);
    if (!a->blk_seqs) {
        free(e);
        return NOMEM();
    }
    for (int j = 0; j < a->nblk; j++)
        a->blk_seqs[j] = (int64_t)cfg->micro_batch * (j + 1) / a->nblk -
                         (int64_t)cfg->micro_batch * j / a->nblk;
    enum zt_status rc = zt_tasks_init(); /* starts MPI (zt_comm_init) and StarPU */
    if (rc == ZT_OK && cfg->world_size != zt_comm_size()) {
        zt_tasks_free();
        rc = zt_error_set(ZT_ERR_CONFIG, "engine: the config's batch rule was resolved for %d "
                                         "ranks, but this job has %d", cfg->world_size,
                          zt_comm_size());
    }
    if (rc != ZT_OK) {
        free(a->blk_seqs);
        free(e);
        return rc;
    }
    e->rank = zt_comm_rank();
    e->size = zt_comm_size();
    rc = zt_engine_pipe_init(e); /* a pipeline: the stage's own data-parallel job */
    if (rc != ZT_OK) {
        zt_tasks_free();
        free(a->blk_seqs);
        free(e);
        return rc;
    }
    *out = e;
    return ZT_OK;
}

static void free_buffers(struct zt_engine_buffers *b) {
    zt_tensor_free(b->m);
    zt_tensor_free(b->v);
    zt_tensor_free(b->grad_sumsq);
    zt_tensor_free(b->clip);
    zt_tensor_free(b->comm_token);
}

void zt_engine_free(zt_engine_t e) {
    if (!e) return;
    if (e->save) zt_engine_save_end(e, NULL); /* its tasks hold blocks freed here */
    zt_runtime_wait_all();
    if (e->io_held) zt_io_service_wait(); /* nothing still moves into the buffers freed here */
    zt_offload_free(e);
    if (e->io_held) zt_io_service_free();
    for (int i = 0; i < e->nparams; i++) {
        zt_tensor_free(e->params[i]->home);
        zt_tensor_free(e->params[i]->grad_sums);
        zt_tensor_free(e->params[i]->work);
        free(e->params[i]);
    }
    zt_slots_free(e);
    for (int i = 0; i < e->act.n; i++) zt_tensor_free(e->act.t[i]);
    free_buffers(&e->buf);
    zt_engine_pipe_free(e);
    zt_tasks_free();
    struct zt_engine_buffers *b = &e->buf;
    void *flat[3] = {b->master, b->grad_sums, b->work};
    for (int i = 0; i < 3; i++)
        if (b->pinned[i]) zt_host_unpin(flat[i], b->bytes[i]);
    free(b->master);
    free(b->grad_sums);
    free(b->work);
    free(b->master_blk);
    free(b->grad_blk);
    free(b->work_blk);
    free(b->persist_blk);
    free(e->st.reduce);
    free(e->st.parts);
    zt_zero_plan_free(&e->plan);
    free(e->params);
    free(e->act.t);
    free(e->act.blk_seqs);
    free(e);
}

// ----------------------------------------------------------------------------
// parameters

zt_param_t zt_engine_param(zt_engine_t e, const char *name, int ndim, const int64_t *shape,
                           enum zt_init init, float std) {
    if (e->finalized) {
        zt_error_set(ZT_ERR_INVALID, "parameter %s: declared after zt_engine_finalize", name);
        return NULL;
    }
    if (ndim < 1 || ndim > ZT_MAX_DIMS || strlen(name) >= sizeof((struct zt_param *)0)->name) {
        zt_error_set(ZT_ERR_INVALID, "parameter %s: bad rank %d or name too long", name, ndim);
        return NULL;
    }
    if (zt_engine_param_find(e, name)) {
        zt_error_set(ZT_ERR_INVALID, "parameter %s: declared twice", name);
        return NULL;
    }
    if (e->nparams == e->cap_params) {
        int cap = e->cap_params ? 2 * e->cap_params : 64;
        struct zt_param **p = realloc(e->params, (size_t)cap * sizeof *p);
        if (!p) {
            zt_error_set(ZT_ERR_NOMEM, "parameter %s: out of memory", name);
            return NULL;
        }
        e->params = p;
        e->cap_params = cap;
    }
    struct zt_param *p = calloc(1, sizeof *p);
    if (!p) {
        zt_error_set(ZT_ERR_NOMEM, "parameter %s: out of memory", name);
        return NULL;
    }
    snprintf(p->name, sizeof p->name, "%s", name);
    p->ndim = ndim;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] <= 0) {
            free(p);
            zt_error_set(ZT_ERR_INVALID, "parameter %s: dimension %d is %lld", name, d,
                         (long long)shape[d]);
            return NULL;
        }
        p->shape[d] = shape[d];
    }
    const struct zt_plan_shape ps = zt_plan_shape_of(ndim, shape);
    p->rows = ps.rows;
    p->cols = ps.cols;
    p->init = init;
    p->std = std;
    p->skip_before = e->pipe.pending_skip; /* the draws of other stages' parameters before it */
    e->pipe.pending_skip = 0;
    e->params[e->nparams++] = p;
    return p;
}

// ----------------------------------------------------------------------------
// what the engine and the memory model (memory_model.c) both derive from a config

enum zt_status zt_engine_plan_knobs(int64_t *chunks, int64_t *group_elems) {
    ZT_CHECK(zt_knob_int("ZT_GRAPH_CHUNKS", chunks));
    /* a GPU runs a whole tensor's op as one kernel: row blocks would only multiply its tasks
     * and the copies that gather a slot's blocks (bench/gpu_sweep.py measures both) */
    const char *set = getenv("ZT_GRAPH_CHUNKS");
    if ((!set || !*set) && zt_runtime_uses_cuda()) *chunks = 1;
    ZT_ASSERT_MSG(*chunks <= ZT_PLAN_MAX_BLOCKS, "ZT_GRAPH_CHUNKS's range in sched/knobs.c "
                  "exceeds ZT_PLAN_MAX_BLOCKS");
    return zt_knob_int("ZT_OPT_GROUP_ELEMS", group_elems);
}

enum zt_status zt_engine_graph_chunks(int64_t *chunks) {
    int64_t group_elems = 0;
    return zt_engine_plan_knobs(chunks, &group_elems);
}

struct zt_plan_cfg zt_engine_plan_cfg(const struct zt_config *c, int rank, int world_size,
                                      int chunks, int64_t group_elems) {
    const int params_nvme = c->offload_param.device == ZT_OFFLOAD_NVME;
    return (struct zt_plan_cfg){
        .rank = rank, .world_size = world_size, .stage = c->zero_stage, .chunks = chunks,
        .group_elems = group_elems, .reduce_bucket_elems = c->reduce_bucket_size,
        .allgather_bucket_elems = c->allgather_bucket_size,
        .persistence_threshold = c->stage3_param_persistence_threshold,
        .optim_on_nvme = c->offload_optimizer.device == ZT_OFFLOAD_NVME,
        .params_on_nvme = params_nvme,
        .params16_on_nvme = c->precision != ZT_PREC_FP32 && params_nvme};
}

// ----------------------------------------------------------------------------
// finalize 1/4: the ZeRO plan (zero_plan.h), and each parameter's place in it

static enum zt_status plan(zt_engine_t e, const struct zt_plan_shape *shapes) {
    const struct zt_plan_cfg pc = zt_engine_plan_cfg(&e->cfg, e->rank, e->size, e->chunks,
                                                     e->group_elems);
    ZT_CHECK(zt_zero_plan_make(&e->plan, &pc, shapes, e->nparams));
    for (int i = 0; i < e->nparams; i++) {
        struct zt_param *p = e->params[i];
        const struct zt_plan_param *pp = &e->plan.param[i];
        p->e = e;
        p->off = pp->off;
        p->nblk = pp->nblk;
        p->first_blk = pp->first_blk;
        p->own0 = pp->own0;
        p->own1 = pp->own1;
        p->persistent = pp->persistent;
        p->offloaded = pp->offloaded;
        p->reduce_bucket = pp->reduce_bucket;
        p->value_slot = p->grad_slot = -1;
    }
    return ZT_OK;
}

// ----------------------------------------------------------------------------
// finalize 2/4: this rank's flat buffers, sized and laid out by zt_plan_buffers (zero_plan.h)

static enum zt_status allocate(zt_engine_t e, const struct zt_plan_shape *shapes,
                               int64_t *master_at, int64_t *work_at, int64_t *grad_at) {
    struct zt_engine_buffers *b = &e->buf;
    const int nb = e->plan.nblk;
    b->master_blk = calloc((size_t)nb, sizeof *b->master_blk);
    b->grad_blk = calloc((size_t)nb, sizeof *b->grad_blk);
    b->work_blk = calloc((size_t)nb, sizeof *b->work_blk);
    e->st.parts = calloc(2 * (size_t)e->size, sizeof *e->st.parts);
    e->st.reduce = calloc((size_t)e->plan.nreduce + 1, sizeof *e->st.reduce);
    if (!b->master_blk || !b->grad_blk || !b->work_blk || !e->st.parts || !e->st.reduce)
        return NOMEM();
    struct zt_plan_buffers sizes;
    zt_plan_buffers(&e->plan, shapes, e->stage, e->mixed, master_at, work_at, grad_at, &sizes);
    b->master_n = sizes.master_n;
    b->work_n = sizes.work_n;
    b->grad_sums_n = sizes.grad_n;
    const size_t ws = zt_dtype_size(e->work_dtype); /* bytes of a gradient / working element */
    const int64_t nm = b->master_n > 0 ? b->master_n : 1;
    const int64_t ng = b->grad_sums_n > 0 ? b->grad_sums_n : 1;
    const int64_t nw = b->work_n > 0 ? b->work_n : 1;
    void *fm = NULL, *fg = NULL, *fw = NULL;
    if (posix_memalign(&fm, 4096, (size_t)nm * sizeof(float)) ||
        posix_memalign(&fg, 4096, (size_t)ng * ws) ||
        (e->mixed && posix_memalign(&fw, 4096, (size_t)nw * ws))) {
        free(fm);
        free(fg);
        return zt_error_set(ZT_ERR_NOMEM, "engine: cannot allocate %lld parameters and %lld "
                            "gradients (%.1f MiB)", (long long)b->master_n,
                            (long long)b->grad_sums_n,
                            (b->master_n * 4.0 + (b->grad_sums_n + b->work_n) * (double)ws) /
                                1048576);
    }
    b->master = fm;
    b->grad_sums = fg;
    b->work = fw;
    b->bytes[0] = (size_t)nm * sizeof(float);
    b->bytes[1] = (size_t)ng * ws;
    b->bytes[2] = fw ? (size_t)nw * ws : 0;
    void *flat[3] = {fm, fg, fw};
    for (int i = 0; i < 3; i++) {
        if (flat[i]) memset(flat[i], 0, b->bytes[i]);
        /* GPU build with CUDA workers: page-locked, so host-device copies overlap compute */
        b->pinned[i] = zt_host_pin(flat[i], b->bytes[i]);
    }
    return ZT_OK;
}

// ----------------------------------------------------------------------------
// finalize 3/4: initial values, in declaration order from the seeded generator, the whole
// stream on every rank, so that any world size and stage starts from the same weights. An
// offloaded parameter's draws are skipped here: zt_offload_init draws them into the swap file.

static enum zt_status initialise(zt_engine_t e, const int64_t *master_at,
                                 const int64_t *work_at) {
    struct zt_engine_buffers *b = &e->buf;
    const size_t ws = zt_dtype_size(e->work_dtype);
    int64_t maxn = 0;
    for (int i = 0; i < e->nparams; i++)
        if (e->params[i]->rows * e->params[i]->cols > maxn)
            maxn = e->params[i]->rows * e->params[i]->cols;
    float *tmp = malloc((size_t)maxn * sizeof(float));
    if (!tmp) return NOMEM();
    for (int i = 0; i < e->nparams; i++) {
        const struct zt_param *p = e->params[i];
        const int64_t n = p->rows * p->cols, own = zt_param_own_elems(p);
        if (p->skip_before) zt_rng_skip_normal(p->skip_before, &e->rng);
        if (p->offloaded) {
            if (p->init == ZT_INIT_NORMAL) zt_rng_skip_normal(n, &e->rng);
            continue;
        }
        for (int64_t k = 0; k < n; k++) tmp[k] = p->init == ZT_INIT_ONE ? 1.0f : 0.0f;
        if (p->init == ZT_INIT_NORMAL) zt_rng_normal(tmp, n, p->std, &e->rng);
        const float *own_first = tmp + zt_param_blk_row0(p, p->own0) * p->cols;
        const int pm = zt_engine_partial_master(e, p), pv = zt_engine_partial_values(e, p);
        memcpy(b->master + master_at[i], pm ? own_first : tmp,
               (size_t)(pm ? own : n) * sizeof(float));
        if (e->mixed) /* the working copy: the same values, rounded */
            zt_dtype_from_f32(e->work_dtype, (char *)b->work + (size_t)work_at[i] * ws,
                              pv ? own_first : tmp, (size_t)(pv ? own : n));
    }
    free(tmp);
    return ZT_OK;
}

// ----------------------------------------------------------------------------
// finalize 4/4: the tensors (StarPU handles) over the buffers, the block views, the optimizer
// state, the slot pools and the offload

/* a tensor of type dt over p's own blocks (or all of them) at ptr */
static enum zt_status own_tensor(zt_tensor_t *t, const char *name, void *ptr,
                                 const struct zt_param *p, int whole, enum zt_dtype dt) {
    *t = NULL;
    int j0 = whole ? 0 : p->own0, j1 = whole ? p->nblk : p->own1;
    if (j1 <= j0) return ZT_OK;
    int64_t rows[ZT_PLAN_MAX_BLOCKS];
    for (int j = j0; j < j1; j++)
        rows[j - j0] = zt_param_blk_row0(p, j + 1) - zt_param_blk_row0(p, j);
    return zt_tensor_init_dtype(t, name, ptr, zt_param_blk_row0(p, j1) - zt_param_blk_row0(p, j0),
                                p->cols, dt, j1 - j0, rows);
}

static enum zt_status register_param(zt_engine_t e, struct zt_param *p, void *master, void *work,
                                     void *grad) {
    const int pm = zt_engine_partial_master(e, p), pv = zt_engine_partial_values(e, p);
    const int pg = zt_engine_partial_grads(e);
    char name[200];
    if (!p->offloaded) { /* an offloaded shard has no host copy */
        snprintf(name, sizeof name, "%s%s", e->mixed ? "master:" : "", p->name);
        ZT_CHECK(own_tensor(&p->home, name, master, p, !pm, ZT_DTYPE_F32));
        if (e->mixed) ZT_CHECK(own_tensor(&p->work, p->name, work, p, !pv, e->work_dtype));
    }
    snprintf(name, sizeof name, "grad:%s", p->name);
    ZT_CHECK(own_tensor(&p->grad_sums, name, grad, p, !pg, e->work_dtype));
    p->value = pv ? NULL : zt_param_work(p);
    p->grad = pg ? NULL : p->grad_sums;
    return ZT_OK;
}

/* block j of p in its storage t, which holds all of p's blocks or (partial) only its own; a
 * block of another rank's has no tensor. off: its offset in its optimizer group */
static struct zt_block_ref block_ref(const struct zt_param *p, zt_tensor_t t, int partial, int j,
                                     int64_t off) {
    if (!partial) return (struct zt_block_ref){t, j, off};
    int mine = j >= p->own0 && j < p->own1;
    return (struct zt_block_ref){mine ? t : NULL, j - p->own0, off};
}

static void register_blocks(zt_engine_t e) {
    const struct zt_zero_plan *pl = &e->plan;
    struct zt_engine_buffers *b = &e->buf;
    for (int g = 0; g < pl->ngroups; g++) {
        const int64_t g0 = pl->blk_start[pl->group[g].first];
        for (int k = pl->group[g].first; k < pl->group[g].first + pl->group[g].n; k++) {
            const struct zt_param *p = e->params[pl->blk_param[k]];
            const int j = k - p->first_blk;
            const int64_t off = pl->blk_start[k] - g0;
            b->master_blk[k] = block_ref(p, p->home, zt_engine_partial_master(e, p), j, off);
            b->work_blk[k] = block_ref(p, zt_param_work(p), zt_engine_partial_values(e, p), j,
                                       off);
            b->grad_blk[k] = block_ref(p, p->grad_sums, zt_engine_partial_grads(e), j, off);
        }
    }
}

/* exp_avg and exp_avg_sq (one block per group this rank updates, unless on NVMe), the norm's
 * per-group sums, the clip coefficient and the collectives' token */
static enum zt_status register_optimizer(zt_engine_t e) {
    const struct zt_zero_plan *pl = &e->plan;
    struct zt_engine_buffers *b = &e->buf;
    const int nl = pl->group_hi - pl->group_lo;
    if (nl > 0 && e->cfg.offload_optimizer.device != ZT_OFFLOAD_NVME) {
        int64_t *rows = calloc((size_t)nl, sizeof *rows), mrows = 0;
        if (!rows) return NOMEM();
        for (int li = 0; li < nl; li++) mrows += rows[li] = pl->group[pl->group_lo + li].elems;
        enum zt_status rc = zt_tensor_init(&b->m, "exp_avg", NULL, mrows, 1, sizeof(float), nl,
                                           rows);
        if (rc == ZT_OK)
            rc = zt_tensor_init(&b->v, "exp_avg_sq", NULL, mrows, 1, sizeof(float), nl, rows);
        free(rows);
        ZT_CHECK(rc);
    }
    /* a group's sum of squares per block; a pipeline's stages share theirs (engine_pipe.c) */
    ZT_CHECK(zt_engine_pipe_finalize(e));
    const int nsums = e->pipe.group0[e->pipe.stages];
    ZT_CHECK(zt_tensor_init(&b->grad_sumsq, "grad_sumsq", NULL, nsums, 1, sizeof(double), nsums,
                            NULL));
    ZT_CHECK(zt_tensor_init(&b->clip, "grad_clip", NULL, 1, 3, sizeof(float), 1, NULL));
    ZT_CHECK(zt_tensor_init(&b->comm_token, "comm_token", NULL, 1, 1, sizeof(float), 1, NULL));
    return ZT_OK;
}

/* stage 3: the persistent parameters' blocks (of what the model reads), all-gathered after the
 * optimizer */
static enum zt_status register_persistent(zt_engine_t e) {
    const struct zt_zero_plan *pl = &e->plan;
    e->buf.persist_blk = calloc((size_t)pl->npersist + 1, sizeof *e->buf.persist_blk);
    if (!e->buf.persist_blk) return NOMEM();
    for (int k = 0; k < pl->npersist; k++) {
        const struct zt_param *p = e->params[pl->blk_param[pl->persist_blk[k]]];
        e->buf.persist_blk[k] =
            (struct zt_block_ref){zt_param_work(p), pl->persist_blk[k] - p->first_blk, 0};
    }
    return ZT_OK;
}

static enum zt_status register_all(zt_engine_t e, const int64_t *master_at,
                                   const int64_t *work_at, const int64_t *grad_at) {
    struct zt_engine_buffers *b = &e->buf;
    const size_t ws = zt_dtype_size(e->work_dtype);
    for (int i = 0; i < e->nparams; i++)
        ZT_CHECK(register_param(e, e->params[i], b->master + master_at[i],
                                b->work ? (char *)b->work + (size_t)work_at[i] * ws : NULL,
                                (char *)b->grad_sums + (size_t)grad_at[i] * ws));
    register_blocks(e);
    ZT_CHECK(register_optimizer(e));
    ZT_CHECK(zt_slots_init(e));
    if (e->stage >= 3) ZT_CHECK(register_persistent(e));
    return ZT_OK;
}

enum zt_status zt_engine_finalize(zt_engine_t e) {
    if (e->finalized) return ZT_OK;
    if (e->nparams == 0) return zt_error_set(ZT_ERR_INVALID, "engine: no parameters declared");
    const uint64_t rng0 = e->rng; /* offloaded shards are drawn from it by zt_offload_init */
    struct zt_plan_shape *shapes = calloc((size_t)e->nparams, sizeof *shapes);
    int64_t *at = calloc(3 * (size_t)e->nparams, sizeof *at);
    if (!shapes || !at) {
        free(shapes);
        free(at);
        return NOMEM();
    }
    for (int i = 0; i < e->nparams; i++)
        shapes[i] = zt_plan_shape_of(e->params[i]->ndim, e->params[i]->shape);
    int64_t *master_at = at, *work_at = at + e->nparams, *grad_at = at + 2 * e->nparams;
    enum zt_status rc = plan(e, shapes);
    if (rc == ZT_OK) rc = allocate(e, shapes, master_at, work_at, grad_at);
    if (rc == ZT_OK) rc = initialise(e, master_at, work_at);
    if (rc == ZT_OK) rc = register_all(e, master_at, work_at, grad_at);
    free(at);
    free(shapes);
    ZT_CHECK(rc);
    ZT_CHECK(zt_offload_init(e, rng0));
    e->finalized = 1;
    return ZT_OK;
}

// ----------------------------------------------------------------------------
// accessors

const char *zt_param_name(zt_param_t p) { return p->name; }
int zt_param_ndim(zt_param_t p) { return p->ndim; }
const int64_t *zt_param_shape(zt_param_t p) { return p->shape; }
int zt_engine_nparams(zt_engine_t e) { return e->nparams; }
zt_param_t zt_engine_param_at(zt_engine_t e, int i) {
    return (i >= 0 && i < e->nparams) ? e->params[i] : NULL;
}
zt_param_t zt_engine_param_find(zt_engine_t e, const char *name) {
    for (int i = 0; i < e->nparams; i++)
        if (strcmp(e->params[i]->name, name) == 0) return e->params[i];
    return NULL;
}
int64_t zt_engine_numel(zt_engine_t e) {
    int64_t n = 0;
    for (int i = 0; i < e->nparams; i++) n += e->params[i]->rows * e->params[i]->cols;
    return n;
}
int zt_engine_nblk(zt_engine_t e) { return e->act.nblk; }
const struct zt_config *zt_engine_config(zt_engine_t e) { return &e->cfg; }
enum zt_dtype zt_engine_dtype(zt_engine_t e) { return e->work_dtype; }
enum zt_dtype zt_engine_config_dtype(const struct zt_config *cfg) {
    return cfg->precision == ZT_PREC_BF16   ? ZT_DTYPE_BF16
           : cfg->precision == ZT_PREC_FP16 ? ZT_DTYPE_F16
                                            : ZT_DTYPE_F32;
}
int zt_engine_rank(zt_engine_t e) { return e->rank; }
int zt_engine_world_size(zt_engine_t e) { return e->size; }

void zt_engine_shard_range(zt_engine_t e, int r, int64_t *lo, int64_t *hi) {
    *lo = e->plan.blk_start[e->plan.shard_first_blk[r]];
    *hi = e->plan.blk_start[e->plan.shard_first_blk[r + 1]];
}

void zt_engine_memory(zt_engine_t e, struct zt_engine_mem *m) {
    const struct zt_engine_buffers *b = &e->buf;
    m->value_slots = zt_slots_value_bytes(e);
    m->grad_slots = zt_slots_grad_bytes(e);
    const int64_t ws = (int64_t)zt_dtype_size(e->work_dtype);
    m->params = b->master_n * (int64_t)sizeof(float) + b->work_n * ws + m->value_slots;
    m->grads = b->grad_sums_n * ws + m->grad_slots;
    m->swap_buffers = m->nvme = 0;
    zt_offload_memory(e->offload, &m->swap_buffers, &m->nvme);
    m->optim = (b->m ? 2 * zt_tensor_numel(b->m) * (int64_t)sizeof(float) : 0) + m->swap_buffers;
    m->acts = e->act.bytes;
}

// ----------------------------------------------------------------------------
// activations

static enum zt_status keep_act(zt_engine_t e, zt_tensor_t t) {
    struct zt_engine_acts *a = &e->act;
    if (a->n == a->cap) {
        int cap = a->cap ? 2 * a->cap : 64;
        zt_tensor_t *nt = realloc(a->t, (size_t)cap * sizeof *nt);
        if (!nt) return NOMEM();
        a->t = nt;
        a->cap = cap;
    }
    a->t[a->n++] = t;
    a->bytes += zt_tensor_numel(t) * (int64_t)zt_tensor_elemsize(t);
    return ZT_OK;
}

int64_t zt_engine_act_size(const struct zt_config *cfg, int chunks, int64_t rows_per_seq,
                           int64_t cols, size_t elemsize) {
    if (rows_per_seq == 0) /* zt_engine_act_partials */
        return zt_engine_act_blocks(cfg->micro_batch, chunks) * cols * (int64_t)sizeof(float);
    return (int64_t)cfg->micro_batch * rows_per_seq * cols * (int64_t)elemsize;
}

enum zt_status zt_engine_act(zt_engine_t e, const char *name, int64_t rows_per_seq, int64_t cols,
                             size_t elemsize, zt_tensor_t *out) {
    int64_t rows[ZT_PLAN_MAX_BLOCKS];
    for (int j = 0; j < e->act.nblk; j++) rows[j] = e->act.blk_seqs[j] * rows_per_seq;
    ZT_CHECK(zt_tensor_init(out, name, NULL, (int64_t)e->cfg.micro_batch * rows_per_seq, cols,
                            elemsize, e->act.nblk, rows));
    return keep_act(e, *out);
}

enum zt_status zt_engine_act_dtype(zt_engine_t e, const char *name, int64_t rows_per_seq,
                                   int64_t cols, enum zt_dtype dtype, zt_tensor_t *out) {
    int64_t rows[ZT_PLAN_MAX_BLOCKS];
    for (int j = 0; j < e->act.nblk; j++) rows[j] = e->act.blk_seqs[j] * rows_per_seq;
    ZT_CHECK(zt_tensor_init_dtype(out, name, NULL, (int64_t)e->cfg.micro_batch * rows_per_seq,
                                  cols, dtype, e->act.nblk, rows));
    return keep_act(e, *out);
}

enum zt_status zt_engine_act_partials(zt_engine_t e, const char *name, int64_t cols,
                                      zt_tensor_t *out) {
    ZT_CHECK(zt_tensor_init(out, name, NULL, e->act.nblk, cols, sizeof(float), e->act.nblk,
                            NULL));
    return keep_act(e, *out);
}

// ----------------------------------------------------------------------------
// step context

struct zt_task_opts zt_engine_task_opts(const struct zt_engine *e, const struct zt_step_ctx *ctx,
                                        enum zt_prio_class c) {
    return (struct zt_task_opts){.layer = ctx->layer, .mb = ctx->mb, .step = e->st.step,
                                 .priority = zt_prio(c, ctx->layer, ctx->n_layer)};
}

struct zt_step_ctx zt_engine_ctx(zt_engine_t e, enum zt_prio_class c, int layer, int n_layer,
                                 int mb) {
    struct zt_step_ctx ctx = {.cls = c, .layer = layer, .n_layer = n_layer, .mb = mb};
    ctx.opts = zt_engine_task_opts(e, &ctx, c);
    return ctx;
}

struct zt_step_ctx zt_engine_own_ctx(const struct zt_engine *e, enum zt_prio_class c) {
    struct zt_step_ctx ctx = {.cls = c, .layer = -1, .n_layer = 0, .mb = -1};
    ctx.opts = zt_engine_task_opts(e, &ctx, c);
    return ctx;
}

// ----------------------------------------------------------------------------
// shared services

enum zt_status zt_param_read_shards(struct zt_shard_set *s, const struct zt_param *p, int role,
                                    int64_t x0, int64_t x1, float *dst) {
    return zt_shard_set_read(s, p->name, role, p->cols, x0, x1, dst);
}

enum zt_status zt_engine_aio_cfg(const struct zt_engine *e, struct zt_aio_cfg *ac) {
    const struct zt_config *c = &e->cfg;
    const char *eng = "auto";
    ZT_CHECK(zt_knob_str("ZT_AIO_ENGINE", &eng));
    *ac = (struct zt_aio_cfg){.block_size = c->aio_block_size, .queue_depth = c->aio_queue_depth,
                              .single_submit = c->aio_single_submit,
                              .overlap_events = c->aio_overlap_events,
                              .engine = zt_aio_engine_named(eng)};
    return ZT_OK;
}

enum zt_status zt_engine_io_start(zt_engine_t e) {
    if (e->io_held) return ZT_OK;
    struct zt_aio_cfg ac;
    ZT_CHECK(zt_engine_aio_cfg(e, &ac));
    ZT_CHECK(zt_io_service_init(&ac, e->cfg.aio_thread_count));
    e->io_held = 1;
    return ZT_OK;
}
