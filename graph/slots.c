/*
 * graph/slots.c: stage-2/3 slots.
 *
 * Layer: graph/ (behind zt_engine.h). No starpu_* call: work goes through tasks/.
 */
#include "engine_impl.h" /* struct zt_engine, internal functions */
static enum zt_status pool_grow(struct zt_pool *pl, const char *name) {
    if (pl->n == pl->cap) {
        int cap = pl->cap ? 2 * pl->cap : 4;
        zt_tensor_t *t = realloc(pl->t, (size_t)cap * sizeof *t);
        if (t) pl->t = t;
        struct zt_param **w = realloc(pl->who, (size_t)cap * sizeof *w);
        if (w) pl->who = w;
        uint64_t *st = realloc(pl->stamp, (size_t)cap * sizeof *st);
        if (st) pl->stamp = st;
        if (!t || !w || !st) return zt_error_set(ZT_ERR_NOMEM, "engine: out of memory for slots");
        pl->cap = cap;
    }
    ZT_CHECK(zt_tensor_init_dtype(&pl->t[pl->n], name, NULL, pl->rows, pl->cols, pl->dt,
                                  pl->nblk, NULL));
    pl->who[pl->n] = NULL;
    pl->stamp[pl->n] = 0;
    pl->n++;
    return ZT_OK;
}

int64_t zt_slots_bytes(const struct zt_pool *pools, int n) {
    int64_t b = 0;
    for (int c = 0; pools && c < n; c++)
        b += pools[c].n * pools[c].rows * pools[c].cols * (int64_t)zt_dtype_size(pools[c].dt);
    return b;
}

/* shape classes and the slot pools: stage 3 gathers each non-persistent parameter into a slot of
 * its shape, min(stage3_max_live_parameters, stage3_prefetch_bucket_size) elements in all, shared
 * among the shapes in proportion to their elements, at least two slots per shape (a task may
 * read two parameters of one shape); stage >= 2 gradient slots start at one per shape and grow
 * when every slot waits for its bucket's reduction */
enum zt_status zt_slots_init(zt_engine_t e) {
    e->ppool = calloc((size_t)e->np, sizeof *e->ppool);
    e->gpool = calloc((size_t)e->np, sizeof *e->gpool);
    if (!e->ppool || !e->gpool) return zt_error_set(ZT_ERR_NOMEM, "engine: out of memory");
    int64_t *count = calloc((size_t)e->np, sizeof *count);
    if (!count) return zt_error_set(ZT_ERR_NOMEM, "engine: out of memory");
    int64_t enp = 0;
    for (int i = 0; i < e->np; i++) {
        struct zt_param *p = e->params[i];
        int c = 0;
        while (c < e->ncls && !(e->gpool[c].rows == p->rows && e->gpool[c].cols == p->cols)) c++;
        if (c == e->ncls) {
            struct zt_pool z = {.rows = p->rows, .cols = p->cols, .dt = e->wdt, .nblk = p->nblk};
            e->ppool[c] = e->gpool[c] = z;
            e->ncls++;
        }
        p->cls = c;
        if (!p->persistent) {
            count[c]++;
            enp += p->rows * p->cols;
        }
    }
    int64_t w = e->cfg.stage3_max_live_parameters < e->cfg.stage3_prefetch_bucket_size
                    ? e->cfg.stage3_max_live_parameters : e->cfg.stage3_prefetch_bucket_size;
    const struct zt_offload_cfg *op = &e->cfg.offload_param;
    if (e->stage >= 3 && op->device == ZT_OFFLOAD_NVME) {
        /* the gathered slots are the buffers the shards are read into: at most max_in_cpu and
         * buffer_count x buffer_size elements, each parameter within one buffer (DeepSpeed) */
        int64_t cap = op->buffer_count * op->buffer_size;
        w = w < op->max_in_cpu ? w : op->max_in_cpu;
        w = w < cap ? w : cap;
        for (int i = 0; i < e->np; i++) {
            const struct zt_param *p = e->params[i];
            if (!p->persistent && p->rows * p->cols > op->buffer_size) {
                free(count);
                return zt_error_set(ZT_ERR_CONFIG, "config %s: zero_optimization.offload_param."
                                    "buffer_size is %lld elements, smaller than parameter %s "
                                    "(%lld elements); raise it", e->cfg.path,
                                    (long long)op->buffer_size, p->name,
                                    (long long)(p->rows * p->cols));
            }
        }
    }
    enum zt_status rc = ZT_OK;
    for (int c = 0; c < e->ncls && rc == ZT_OK; c++) {
        if (e->stage >= 3 && count[c] > 0) {
            int64_t k = (int64_t)((double)w * (double)count[c] / (double)enp);
            int64_t lo = count[c] < 2 ? count[c] : 2;
            k = k < lo ? lo : k > count[c] ? count[c] : k;
            for (int64_t j = 0; j < k && rc == ZT_OK; j++) rc = pool_grow(&e->ppool[c], "slot");
        }
        if (e->stage >= 2 && rc == ZT_OK) rc = pool_grow(&e->gpool[c], "grad_slot");
    }
    free(count);
    return rc;
}


static int in_backward(zt_engine_t e) {
    return e->cur_class == ZT_PRIO_BACKWARD || e->cur_class == ZT_PRIO_WEIGHT_GRAD;
}


/* ---- slots ---- */

/* stage >= 2: give p a gradient slot for the micro-batches until its bucket's next reduction:
 * a free slot of its shape (or a new one), zeroed by a task */
static zt_tensor_t grad_slot(struct zt_param *p) {
    struct zt_engine *e = p->e;
    struct zt_pool *pl = &e->gpool[p->cls];
    int i = 0;
    while (i < pl->n && pl->who[i]) i++;
    if (i == pl->n && pool_grow(pl, "grad_slot") != ZT_OK) return NULL;
    pl->who[i] = p;
    p->gslot = i;
    p->grad = pl->t[i];
    struct zt_task_opts o = zt_engine_task_opts(e, ZT_PRIO_WEIGHT_GRAD);
    if (zt_task_zero(&o, p->grad) != ZT_OK) return NULL;
    return p->grad;
}

/* stage 3: slot i of a gathered-value pool loses its tenant, which must be gathered again */
static void evict(struct zt_pool *pl, int i) {
    if (!pl->who[i]) return;
    pl->who[i]->pslot = -1;
    pl->who[i]->value = NULL;
    pl->who[i] = NULL;
}

/* stage 3: gather p's blocks from their owners into the least recently gathered slot of its
 * shape (its old tenant must be gathered again when next read) */
static zt_tensor_t gather(struct zt_param *p) {
    struct zt_engine *e = p->e;
    struct zt_pool *pl = &e->ppool[p->cls];
    int i = 0;
    for (int j = 1; j < pl->n && pl->who[i]; j++)
        if (!pl->who[j] || pl->stamp[j] < pl->stamp[i]) i = j;
    evict(pl, i);
    pl->who[i] = p;
    pl->stamp[i] = ++e->clock;
    p->pslot = i;
    p->value = pl->t[i];
    struct zt_block_ref refs[64], src[64], *ord = NULL;
    struct zt_swap_seg segs[64];
    int nord = 0;
    if (p->offl && p->own1 > p->own0) { /* the file-order blocks of the units it spans */
        int b0 = p->first_blk + p->own0, b1 = p->first_blk + p->own1 - 1;
        int li0 = e->blk_group[b0], li1 = e->blk_group[b1];
        ord = malloc((size_t)(e->ufirst[li1 + 1] - e->ufirst[li0]) * sizeof *ord);
        if (!ord) {
            zt_error_set(ZT_ERR_NOMEM, "engine: out of memory");
            return NULL;
        }
    }
    for (int j = 0; j < p->nblk; j++) {
        refs[j] = (struct zt_block_ref){p->value, j, 0};
        if (j < p->own0 || j >= p->own1) continue;
        src[j - p->own0] = (struct zt_block_ref){work_of(p), j - p->own0, 0};
        if (!p->offl) continue;
        /* offloaded: this rank's blocks are read from the swap file into their places in the
         * slot, after the optimizer's last write of their groups (file-order blocks) */
        int b = p->first_blk + j, li = e->blk_group[b];
        int64_t n = (blk_row0(p, j + 1) - blk_row0(p, j)) * p->cols;
        segs[j - p->own0] = (struct zt_swap_seg){p->value, j, 0, n * esB(e), fileB_off(e, b)};
        for (int u = unit_at(e, li, e->pblk[b].off);
             u < e->ufirst[li + 1] && e->units[u].lo < e->pblk[b].off + n; u++)
            if (nord == 0 || ord[nord - 1].blk != u)
                ord[nord++] = (struct zt_block_ref){e->fordB, u, 0};
    }
    const int64_t *part = zt_engine_bucket_parts(e, p->first_blk, p->first_blk + p->nblk);
    /* the next layer's parameters: ahead of the compute of the layer before it */
    struct zt_task_opts o =
        zt_engine_task_opts(e, in_backward(e) ? ZT_PRIO_PREFETCH_BWD : ZT_PRIO_PREFETCH_FWD);
    enum zt_status rc = ZT_OK;
    if (p->offl && p->own1 > p->own0)
        rc = zt_task_swap(&o, 0, &e->fB, segs, p->own1 - p->own0, ord, nord, NULL);
    free(ord);
    if (rc != ZT_OK) return NULL;
    if (zt_task_comm_allgather(&o, refs, p->nblk, part, p->offl ? NULL : src,
                               p->offl ? 0 : p->own1 - p->own0, sizeof(float), e->token) != ZT_OK)
        return NULL;
    return p->value;
}

/* stage 3: every gathered value is stale once the optimizer updates the shards */
void zt_slots_drop_gathered(zt_engine_t e) {
    for (int c = 0; c < e->ncls; c++)
        for (int i = 0; i < e->ppool[c].n; i++) evict(&e->ppool[c], i);
}

zt_tensor_t zt_param_value(zt_param_t p) {
    if (p->value || !p->e || !p->e->finalized || p->e->stage < 3) return p->value;
    return gather(p);
}

zt_tensor_t zt_param_grad(zt_param_t p) {
    if (p->grad || !p->e || !p->e->finalized || p->e->stage < 2) return p->grad;
    return grad_slot(p);
}

