/*
 * graph/engine.c: engine lifecycle, parameters, layout, activations.
 *
 * Layer: graph/ (behind zt_engine.h). No starpu_* call: work goes through tasks/.
 */
#include "engine_impl.h" /* struct zt_engine, internal functions */
/* ---------------------------------------------------------------------------------------------
 * lifecycle */
enum zt_status zt_engine_init(zt_engine_t *out, const struct zt_config *cfg) {
    *out = NULL;
    int64_t chunks = 4, gel = 1 << 20;
    ZT_CHECK(zt_knob_int("ZT_GRAPH_CHUNKS", 1, 64, &chunks));
    ZT_CHECK(zt_knob_int("ZT_OPT_GROUP_ELEMS", 1024, (int64_t)1 << 31, &gel));
    if (cfg->micro_batch < 1 || cfg->grad_accum < 1)
        return zt_error_set(ZT_ERR_CONFIG, "engine: micro batch and accumulation must be >= 1");
    struct zt_engine *e = calloc(1, sizeof *e);
    if (!e) return zt_error_set(ZT_ERR_NOMEM, "engine: out of memory");
    e->cfg = *cfg;
    e->chunks = (int)chunks;
    e->stage = cfg->zero_stage;
    e->group_elems = gel;
    e->rng = cfg->seed ^ 0x5A17C0DEull;
    e->mp = cfg->precision != ZT_PREC_FP32;
    e->wdt = cfg->precision == ZT_PREC_BF16   ? ZT_DTYPE_BF16
             : cfg->precision == ZT_PREC_FP16 ? ZT_DTYPE_F16
                                              : ZT_DTYPE_F32;
    e->sc.scale = cfg->precision != ZT_PREC_FP16 ? 1.0
                  : cfg->loss_scale > 0          ? cfg->loss_scale
                                                 : ldexp(1.0, cfg->initial_scale_power);
    e->sc.last_overflow_iter = -1;
    e->sc.cur_hysteresis = cfg->hysteresis;
    /* activation blocks hold whole sequences; their number depends only on the config and
     * ZT_GRAPH_CHUNKS, never on the worker count (determinism) */
    e->nblk = cfg->micro_batch < e->chunks ? cfg->micro_batch : e->chunks;
    e->blk_seqs = calloc((size_t)e->nblk, sizeof *e->blk_seqs);
    if (!e->blk_seqs) {
        free(e);
        return zt_error_set(ZT_ERR_NOMEM, "engine: out of memory");
    }
    for (int j = 0; j < e->nblk; j++)
        e->blk_seqs[j] = (int64_t)cfg->micro_batch * (j + 1) / e->nblk -
                         (int64_t)cfg->micro_batch * j / e->nblk;
    enum zt_status rc = zt_tasks_init(); /* starts MPI (zt_comm_init) and StarPU */
    if (rc != ZT_OK) {
        free(e->blk_seqs);
        free(e);
        return rc;
    }
    e->rank = zt_comm_rank();
    e->size = zt_comm_size();
    if (cfg->world_size != e->size) {
        zt_tasks_free();
        free(e->blk_seqs);
        free(e);
        return zt_error_set(ZT_ERR_CONFIG, "engine: the config's batch rule was resolved for %d "
                                           "ranks, but this job has %d", cfg->world_size,
                            zt_comm_size());
    }
    *out = e;
    return ZT_OK;
}
void zt_engine_free(zt_engine_t e) {
    if (!e) return;
    if (e->save) zt_engine_save_end(e, NULL); /* its tasks hold blocks freed here */
    zt_runtime_wait_all();
    zt_offload_free(e);
    for (int i = 0; i < e->np; i++) {
        zt_tensor_free(e->params[i]->home);
        zt_tensor_free(e->params[i]->ghome);
        zt_tensor_free(e->params[i]->work);
        free(e->params[i]);
    }
    for (int c = 0; c < e->ncls; c++) {
        struct zt_pool *pools[2] = {&e->ppool[c], &e->gpool[c]};
        for (int k = 0; k < 2; k++) {
            for (int i = 0; i < pools[k]->n; i++) zt_tensor_free(pools[k]->t[i]);
            free(pools[k]->t);
            free(pools[k]->who);
            free(pools[k]->stamp);
        }
    }
    free(e->ppool);
    free(e->gpool);
    free(e->prefs);
    free(e->powner);
    for (int i = 0; i < e->nacts; i++) zt_tensor_free(e->acts[i]);
    zt_tensor_free(e->m);
    zt_tensor_free(e->v);
    zt_tensor_free(e->partial);
    zt_tensor_free(e->clip);
    zt_tensor_free(e->token);
    zt_tasks_free();
    free(e->babs);
    free(e->shard_blk);
    free(e->gfirst);
    free(e->rbuckets);
    free(e->gbuckets);
    free(e->part);
    void *flat[3] = {e->flat_p, e->flat_g, e->flat_w};
    for (int i = 0; i < 3; i++)
        if (e->flat_pin[i]) zt_host_unpin(flat[i], e->flat_bytes[i]);
    free(e->flat_p);
    free(e->flat_g);
    free(e->flat_w);
    free(e->wblk);
    free(e->params);
    free(e->acts);
    free(e->pblk);
    free(e->gblk);
    free(e->groups);
    free(e->blk_group);
    free(e->blk_seqs);
    free(e);
}

/* ---------------------------------------------------------------------------------------------
 * parameters */
zt_param_t zt_engine_param(zt_engine_t e, const char *name, int ndim, const int64_t *shape,
                           enum zt_init init, float std) {
    if (e->finalized) {
        zt_error_set(ZT_ERR_INVALID, "parameter %s: declared after zt_engine_finalize", name);
        return NULL;
    }
    if (ndim < 1 || ndim > ZT_MAX_DIMS || strlen(name) >= sizeof ((struct zt_param *)0)->name) {
        zt_error_set(ZT_ERR_INVALID, "parameter %s: bad rank %d or name too long", name, ndim);
        return NULL;
    }
    if (zt_engine_param_find(e, name)) {
        zt_error_set(ZT_ERR_INVALID, "parameter %s: declared twice", name);
        return NULL;
    }
    if (e->np == e->capp) {
        int cap = e->capp ? 2 * e->capp : 64;
        struct zt_param **p = realloc(e->params, (size_t)cap * sizeof *p);
        if (!p) {
            zt_error_set(ZT_ERR_NOMEM, "parameter %s: out of memory", name);
            return NULL;
        }
        e->params = p;
        e->capp = cap;
    }
    struct zt_param *p = calloc(1, sizeof *p);
    if (!p) {
        zt_error_set(ZT_ERR_NOMEM, "parameter %s: out of memory", name);
        return NULL;
    }
    snprintf(p->name, sizeof p->name, "%s", name);
    p->ndim = ndim;
    p->rows = ndim == 1 ? 1 : shape[0];
    p->cols = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] <= 0) {
            free(p);
            zt_error_set(ZT_ERR_INVALID, "parameter %s: dimension %d is %lld", name, d,
                         (long long)shape[d]);
            return NULL;
        }
        p->shape[d] = shape[d];
        if (d > 0 || ndim == 1) p->cols *= shape[d];
    }
    p->init = init;
    p->std = std;
    e->params[e->np++] = p;
    return p;
}

static int param_nblk(const struct zt_engine *e, const struct zt_param *p) {
    if (p->ndim < 2 || p->rows * p->cols < 4096) return 1;
    return p->rows < e->chunks ? (int)p->rows : e->chunks;
}

static enum zt_status make_buckets(zt_engine_t e, int64_t max_elems, struct zt_bucket **out,
                                   int *nout, int assign) {
    struct zt_bucket *bk = calloc((size_t)e->np, sizeof *bk);
    if (!bk) return zt_error_set(ZT_ERR_NOMEM, "engine: out of memory");
    int n = 0;
    for (int i = 0; i < e->np; i++) {
        struct zt_param *p = e->params[i];
        int b1 = p->first_blk + p->nblk;
        if (n > 0 && e->babs[b1] - e->babs[bk[n - 1].b0] <= max_elems) {
            bk[n - 1].b1 = b1; /* grow the open bucket */
        } else {
            bk[n].b0 = p->first_blk;
            bk[n].b1 = b1;
            n++;
        }
        if (bk[n - 1].nparams++ == 0) bk[n - 1].i0 = i;
        bk[n - 1].i1 = i + 1;
        if (assign) p->bucket = n - 1;
    }
    *out = bk;
    *nout = n;
    return ZT_OK;
}


/* a tensor of type dt over p's own blocks (or all of them) at ptr */
static enum zt_status own_tensor(zt_tensor_t *t, const char *name, void *ptr,
                                 const struct zt_param *p, int whole, enum zt_dtype dt) {
    *t = NULL;
    int j0 = whole ? 0 : p->own0, j1 = whole ? p->nblk : p->own1;
    if (j1 <= j0) return ZT_OK;
    int64_t rows[64];
    for (int j = j0; j < j1; j++) rows[j - j0] = blk_row0(p, j + 1) - blk_row0(p, j);
    return zt_tensor_init_dtype(t, name, ptr, blk_row0(p, j1) - blk_row0(p, j0), p->cols, dt,
                                j1 - j0, rows);
}


/* stage 3: the persistent parameters' blocks in flat order with their owners */
static enum zt_status make_persistent_list(zt_engine_t e) {
    e->prefs = calloc((size_t)e->nb, sizeof *e->prefs);
    e->powner = calloc((size_t)e->nb, sizeof *e->powner);
    if (!e->prefs || !e->powner) return zt_error_set(ZT_ERR_NOMEM, "engine: out of memory");
    for (int i = 0; i < e->np; i++) {
        struct zt_param *p = e->params[i];
        if (!p->persistent) continue;
        for (int j = 0; j < p->nblk; j++) {
            int b = p->first_blk + j, r = 0;
            while (r + 1 < e->size && e->shard_blk[r + 1] <= b) r++;
            e->prefs[e->npb] = (struct zt_block_ref){work_of(p), j, 0};
            e->powner[e->npb++] = r;
        }
    }
    return ZT_OK;
}

enum zt_status zt_engine_finalize(zt_engine_t e) {
    if (e->finalized) return ZT_OK;
    if (e->np == 0) return zt_error_set(ZT_ERR_INVALID, "engine: no parameters declared");
    /* layout of the whole model: every parameter a slice aligned to 16 floats, in row blocks */
    int64_t off = 0;
    int nb = 0;
    for (int i = 0; i < e->np; i++) {
        struct zt_param *p = e->params[i];
        p->e = e;
        p->off = off;
        off += pad16(p->rows * p->cols);
        p->nblk = param_nblk(e, p);
        p->first_blk = nb;
        p->pslot = p->gslot = -1;
        p->persistent = e->stage >= 3 &&
                        p->rows * p->cols <= e->cfg.stage3_param_persistence_threshold;
        p->offl = e->stage >= 3 && !p->persistent &&
                  e->cfg.offload_param.device == ZT_OFFLOAD_NVME;
        nb += p->nblk;
    }
    e->flat_n = off;
    e->nb = nb;
    e->babs = calloc((size_t)nb + 1, sizeof *e->babs);
    e->shard_blk = calloc((size_t)e->size + 1, sizeof *e->shard_blk);
    e->gfirst = calloc((size_t)e->size + 1, sizeof *e->gfirst);
    e->part = calloc(2 * (size_t)e->size, sizeof *e->part);
    e->pblk = calloc((size_t)nb, sizeof *e->pblk);
    e->gblk = calloc((size_t)nb, sizeof *e->gblk);
    e->wblk = calloc((size_t)nb, sizeof *e->wblk);
    if (!e->babs || !e->shard_blk || !e->gfirst || !e->part || !e->pblk || !e->gblk || !e->wblk)
        return zt_error_set(ZT_ERR_NOMEM, "engine: out of memory");
    for (int i = 0; i < e->np; i++) {
        struct zt_param *p = e->params[i];
        for (int j = 0; j < p->nblk; j++)
            e->babs[p->first_blk + j] = p->off + blk_row0(p, j) * p->cols;
    }
    e->babs[nb] = e->flat_n;
    /* ZeRO shards: rank r owns the blocks [shard_blk[r], shard_blk[r+1]), a contiguous range of
     * the flat layout starting at the first block at or after r/N of the elements (whole blocks,
     * so a shard is a set of tensors' row blocks; balanced up to one block) */
    for (int r = 0, b = 0; r <= e->size; r++) {
        int64_t target = e->flat_n * r / e->size;
        while (b < nb && e->babs[b] < target) b++;
        e->shard_blk[r] = r == e->size ? nb : b;
    }
    /* this rank's storage: whole slices, or only its own blocks (stage 3 values, stage >= 2
     * gradient sums, mixed-precision master weights at stage >= 1), packed in flat order */
    e->home_n = e->ghome_n = e->work_n = 0;
    for (int i = 0; i < e->np; i++) {
        struct zt_param *p = e->params[i];
        int lo = e->shard_blk[e->rank] - p->first_blk, hi = e->shard_blk[e->rank + 1] - p->first_blk;
        p->own0 = lo < 0 ? 0 : lo > p->nblk ? p->nblk : lo;
        p->own1 = hi < 0 ? 0 : hi > p->nblk ? p->nblk : hi;
        if (p->own1 < p->own0) p->own1 = p->own0;
        e->home_n += p->offl ? 0 : pad16(partial_master(e, p) ? own_elems(p) : p->rows * p->cols);
        e->work_n += p->offl ? 0 : pad16(partial_home(e, p) ? own_elems(p) : p->rows * p->cols);
        e->ghome_n += pad16(partial_ghome(e) ? own_elems(p) : p->rows * p->cols);
    }
    const int master_whole = e->mp ? e->stage == 0 : e->stage < 3; /* laid out like flat_n */
    if (master_whole) e->home_n = e->flat_n;
    if (e->stage < 3) e->work_n = e->flat_n;
    if (e->stage < 2) e->ghome_n = e->flat_n;
    if (!e->mp) e->work_n = 0;
    const size_t ws = zt_dtype_size(e->wdt); /* bytes of a gradient / working element */
    void *fp = NULL, *fg = NULL, *fw = NULL;
    int64_t np_ = e->home_n > 0 ? e->home_n : 1, ng_ = e->ghome_n > 0 ? e->ghome_n : 1;
    int64_t nw_ = e->work_n > 0 ? e->work_n : 1;
    if (posix_memalign(&fp, 4096, (size_t)np_ * sizeof(float)) ||
        posix_memalign(&fg, 4096, (size_t)ng_ * ws) ||
        (e->mp && posix_memalign(&fw, 4096, (size_t)nw_ * ws))) {
        free(fp);
        free(fg);
        return zt_error_set(ZT_ERR_NOMEM, "engine: cannot allocate %lld parameters and %lld "
                                          "gradients (%.1f MiB)", (long long)e->home_n,
                            (long long)e->ghome_n,
                            (e->home_n * 4.0 + (e->ghome_n + e->work_n) * (double)ws) / 1048576);
    }
    e->flat_p = fp;
    e->flat_g = fg;
    e->flat_w = fw;
    memset(e->flat_p, 0, (size_t)np_ * sizeof(float));
    memset(e->flat_g, 0, (size_t)ng_ * ws);
    if (fw) memset(fw, 0, (size_t)nw_ * ws);
    /* GPU build with CUDA workers: page-locked, so host-device copies overlap compute */
    e->flat_bytes[0] = (size_t)np_ * sizeof(float);
    e->flat_bytes[1] = (size_t)ng_ * ws;
    e->flat_bytes[2] = fw ? (size_t)nw_ * ws : 0;
    void *flat[3] = {fp, fg, fw};
    for (int i = 0; i < 3; i++) e->flat_pin[i] = zt_host_pin(flat[i], e->flat_bytes[i]);
    /* tensors and initial values (declaration order from the seeded generator, the whole
     * stream on every rank, so that any world size and stage starts from the same weights) */
    int64_t hcur = 0, gcur = 0, wcur = 0, maxn = 0;
    for (int i = 0; i < e->np; i++)
        if (e->params[i]->rows * e->params[i]->cols > maxn)
            maxn = e->params[i]->rows * e->params[i]->cols;
    float *tmp = malloc((size_t)maxn * sizeof(float));
    if (!tmp) return zt_error_set(ZT_ERR_NOMEM, "engine: out of memory");
    enum zt_status rc = ZT_OK;
    const uint64_t rng0 = e->rng; /* offloaded shards are drawn from it by write_offloaded */
    for (int i = 0; i < e->np && rc == ZT_OK; i++) {
        struct zt_param *p = e->params[i];
        int64_t n = p->rows * p->cols;
        int ph = partial_home(e, p), pm = partial_master(e, p), pg = partial_ghome(e);
        const float *own = tmp + blk_row0(p, p->own0) * p->cols; /* its blocks' first value */
        char *gp = (char *)e->flat_g + (size_t)(e->stage < 2 ? p->off : gcur) * ws;
        char name[200];
        if (p->offl) { /* no host copy: write_offloaded puts its shard in the swap file */
            if (p->init == ZT_INIT_NORMAL) zt_rng_skip_normal(n, &e->rng);
        } else {
            for (int64_t k = 0; k < n; k++) tmp[k] = p->init == ZT_INIT_ONE ? 1.0f : 0.0f;
            if (p->init == ZT_INIT_NORMAL) zt_rng_normal(tmp, n, p->std, &e->rng);
            float *hp = e->flat_p + (master_whole ? p->off : hcur);
            memcpy(hp, pm ? own : tmp, (size_t)(pm ? own_elems(p) : n) * sizeof(float));
            hcur += pad16(pm ? own_elems(p) : n);
            snprintf(name, sizeof name, "%s%s", e->mp ? "master:" : "", p->name);
            rc = own_tensor(&p->home, name, hp, p, !pm, ZT_DTYPE_F32);
            if (rc == ZT_OK && e->mp) { /* the working copy: the same values, rounded */
                char *wp = (char *)e->flat_w + (size_t)(e->stage < 3 ? p->off : wcur) * ws;
                zt_dtype_from_f32(e->wdt, wp, ph ? own : tmp, (size_t)(ph ? own_elems(p) : n));
                wcur += pad16(ph ? own_elems(p) : n);
                rc = own_tensor(&p->work, p->name, wp, p, !ph, e->wdt);
            }
        }
        gcur += pad16(pg ? own_elems(p) : n);
        snprintf(name, sizeof name, "grad:%s", p->name);
        if (rc == ZT_OK) rc = own_tensor(&p->ghome, name, gp, p, !pg, e->wdt);
        p->value = ph ? NULL : work_of(p);
        p->grad = pg ? NULL : p->ghome;
        for (int j = 0; j < p->nblk; j++) {
            int k = p->first_blk + j;
            e->pblk[k] = home_ref(p, p->home, pm, j, e->babs[k]);
            e->wblk[k] = home_ref(p, work_of(p), ph, j, e->babs[k]);
            e->gblk[k] = home_ref(p, p->ghome, pg, j, e->babs[k]);
        }
    }
    free(tmp);
    ZT_CHECK(rc);
    /* optimizer groups: consecutive blocks of about group_elems elements that never cross a
     * shard boundary; each group's m/v block spans its flat range (padding included), so block
     * offsets are relative to it */
    e->groups = calloc((size_t)nb, sizeof *e->groups);
    int64_t *grows = calloc((size_t)nb, sizeof *grows);
    if (!e->groups || !grows) {
        free(grows);
        return zt_error_set(ZT_ERR_NOMEM, "engine: out of memory");
    }
    int g = 0, r = 0;
    int64_t gstart = 0;
    for (int b = 0; b < nb; b++) {
        while (r < e->size && e->shard_blk[r] <= b) e->gfirst[r++] = g;
        if (e->groups[g].n == 0) {
            e->groups[g].first = b;
            gstart = e->babs[b];
        }
        e->groups[g].n++;
        int shard_end = 0;
        for (int q = 1; q < e->size; q++) shard_end |= e->shard_blk[q] == b + 1;
        if (e->babs[b + 1] - gstart >= e->group_elems || b + 1 == nb || shard_end) {
            grows[g] = e->babs[b + 1] - gstart;
            g++;
        }
    }
    while (r <= e->size) e->gfirst[r++] = g;
    e->ng = g;
    for (int gi = 0; gi < e->ng; gi++) {
        int64_t g0 = e->babs[e->groups[gi].first];
        for (int b = e->groups[gi].first; b < e->groups[gi].first + e->groups[gi].n; b++) {
            e->pblk[b].off -= g0;
            e->wblk[b].off -= g0;
            e->gblk[b].off -= g0;
        }
    }
    /* stage 0: every rank updates every group; stage >= 1: only its own (optimizer state 1/N) */
    e->g0 = e->stage >= 1 ? e->gfirst[e->rank] : 0;
    e->g1 = e->stage >= 1 ? e->gfirst[e->rank + 1] : e->ng;
    if (!(e->blk_group = malloc(((size_t)e->nb + 1) * sizeof *e->blk_group))) {
        free(grows);
        return zt_error_set(ZT_ERR_NOMEM, "engine: out of memory");
    }
    for (int b = 0; b < e->nb; b++) e->blk_group[b] = -1;
    for (int gi = e->g0; gi < e->g1; gi++)
        for (int b = e->groups[gi].first; b < e->groups[gi].first + e->groups[gi].n; b++)
            e->blk_group[b] = gi - e->g0;
    rc = ZT_OK;
    if (e->g1 > e->g0 && e->cfg.offload_optimizer.device != ZT_OFFLOAD_NVME) {
        int64_t mrows = 0;
        for (int gi = e->g0; gi < e->g1; gi++) mrows += grows[gi];
        rc = zt_tensor_init(&e->m, "exp_avg", NULL, mrows, 1, sizeof(float), e->g1 - e->g0,
                            grows + e->g0);
        if (rc == ZT_OK)
            rc = zt_tensor_init(&e->v, "exp_avg_sq", NULL, mrows, 1, sizeof(float),
                                e->g1 - e->g0, grows + e->g0);
    }
    free(grows);
    ZT_CHECK(rc);
    ZT_CHECK(zt_tensor_init(&e->partial, "grad_sumsq", NULL, e->ng, 1, sizeof(double), e->ng,
                            NULL));
    ZT_CHECK(zt_tensor_init(&e->clip, "grad_clip", NULL, 1, 3, sizeof(float), 1, NULL));
    ZT_CHECK(zt_tensor_init(&e->token, "comm_token", NULL, 1, 1, sizeof(float), 1, NULL));
    /* buckets of whole parameters in flat order, cut when they reach the configured size */
    ZT_CHECK(make_buckets(e, e->cfg.reduce_bucket_size, &e->rbuckets, &e->nrb, 1));
    ZT_CHECK(make_buckets(e, e->cfg.allgather_bucket_size, &e->gbuckets, &e->ngb, 0));
    ZT_CHECK(zt_slots_init(e));
    if (e->stage >= 3) ZT_CHECK(make_persistent_list(e));
    ZT_CHECK(zt_offload_init(e, rng0));
    e->finalized = 1;
    return ZT_OK;
}

const char *zt_param_name(zt_param_t p) { return p->name; }
int zt_param_ndim(zt_param_t p) { return p->ndim; }
const int64_t *zt_param_shape(zt_param_t p) { return p->shape; }
int zt_engine_nparams(zt_engine_t e) { return e->np; }
zt_param_t zt_engine_param_at(zt_engine_t e, int i) {
    return (i >= 0 && i < e->np) ? e->params[i] : NULL;
}
zt_param_t zt_engine_param_find(zt_engine_t e, const char *name) {
    for (int i = 0; i < e->np; i++)
        if (strcmp(e->params[i]->name, name) == 0) return e->params[i];
    return NULL;
}
int64_t zt_engine_numel(zt_engine_t e) {
    int64_t n = 0;
    for (int i = 0; i < e->np; i++) n += e->params[i]->rows * e->params[i]->cols;
    return n;
}

/* ---------------------------------------------------------------------------------------------
 * activations */
static enum zt_status keep_act(zt_engine_t e, zt_tensor_t t) {
    if (e->nacts == e->capacts) {
        int cap = e->capacts ? 2 * e->capacts : 64;
        zt_tensor_t *a = realloc(e->acts, (size_t)cap * sizeof *a);
        if (!a) return zt_error_set(ZT_ERR_NOMEM, "engine: out of memory");
        e->acts = a;
        e->capacts = cap;
    }
    e->acts[e->nacts++] = t;
    e->act_bytes += zt_tensor_numel(t) * (int64_t)zt_tensor_elemsize(t);
    return ZT_OK;
}

enum zt_status zt_engine_act(zt_engine_t e, const char *name, int64_t rows_per_seq, int64_t cols,
                             size_t elemsize, zt_tensor_t *out) {
    int64_t rows[64];
    for (int j = 0; j < e->nblk; j++) rows[j] = e->blk_seqs[j] * rows_per_seq;
    ZT_CHECK(zt_tensor_init(out, name, NULL, (int64_t)e->cfg.micro_batch * rows_per_seq, cols,
                            elemsize, e->nblk, rows));
    return keep_act(e, *out);
}

enum zt_status zt_engine_act_dtype(zt_engine_t e, const char *name, int64_t rows_per_seq,
                                   int64_t cols, enum zt_dtype dtype, zt_tensor_t *out) {
    int64_t rows[64];
    for (int j = 0; j < e->nblk; j++) rows[j] = e->blk_seqs[j] * rows_per_seq;
    ZT_CHECK(zt_tensor_init_dtype(out, name, NULL, (int64_t)e->cfg.micro_batch * rows_per_seq,
                                  cols, dtype, e->nblk, rows));
    return keep_act(e, *out);
}

enum zt_status zt_engine_act_partials(zt_engine_t e, const char *name, int64_t cols,
                                      zt_tensor_t *out) {
    ZT_CHECK(zt_tensor_init(out, name, NULL, e->nblk, cols, sizeof(float), e->nblk, NULL));
    return keep_act(e, *out);
}

int zt_engine_nblk(zt_engine_t e) { return e->nblk; }
const struct zt_config *zt_engine_config(zt_engine_t e) { return &e->cfg; }

/* options for a task the engine adds on behalf of the model's latest task (a gather, a
 * reduction): its layer and micro-batch, class c, the model's context left as it is */
struct zt_task_opts zt_engine_task_opts(zt_engine_t e, enum zt_prio_class c) {
    return (struct zt_task_opts){.layer = e->cur_layer, .mb = e->cur_mb, .step = e->step,
                                 .priority = zt_prio(c, e->cur_layer, e->cur_nlayer)};
}

struct zt_task_opts zt_engine_opts(zt_engine_t e, enum zt_prio_class c, int layer, int n_layer,
                                   int mb) {
    e->cur_layer = layer;
    e->cur_nlayer = n_layer;
    e->cur_mb = mb;
    e->cur_class = c;
    return zt_engine_task_opts(e, c);
}


void zt_engine_memory(zt_engine_t e, struct zt_engine_mem *m) {
    m->param_window = zt_slots_bytes(e->ppool, e->ncls);
    m->grad_window = zt_slots_bytes(e->gpool, e->ncls);
    const int64_t ws = (int64_t)zt_dtype_size(e->wdt);
    m->params = e->home_n * (int64_t)sizeof(float) + e->work_n * ws + m->param_window;
    m->grads = e->ghome_n * ws + m->grad_window;
    m->swap_buffers = (int64_t)e->nbuf * ((2 + e->par_nvme) * e->buf_elems * 4 +
                                          (e->inf ? pad4k(e->buf_elems * 2) : 0));
    m->optim = (e->m ? 2 * zt_tensor_numel(e->m) * (int64_t)sizeof(float) : 0) + m->swap_buffers;
    m->nvme = e->nvme_bytes;
    m->acts = e->act_bytes;
}

void zt_engine_shard_range(zt_engine_t e, int r, int64_t *lo, int64_t *hi) {
    *lo = e->babs[e->shard_blk[r]];
    *hi = e->babs[e->shard_blk[r + 1]];
}

int zt_engine_rank(zt_engine_t e) { return e->rank; }
int zt_engine_world_size(zt_engine_t e) { return e->size; }
