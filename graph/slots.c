/*
 * graph/slots.c: the slot pools: stage-3 value slots (a non-persistent parameter's value is
 * all-gathered into a slot of its shape when the model reads it, least recently gathered slot
 * first) and stage >= 2 gradient slots (a micro-batch's gradients of a parameter until its
 * bucket is reduce-scattered).
 *
 * Layer: graph/, behind the engine (engine_impl.h). Submits through tasks/ only.
 */
#include <stdlib.h>      /* calloc, realloc, free */
#include "engine_impl.h" /* struct zt_engine, struct zt_pool */

static enum zt_status pool_grow(struct zt_pool *pool, const char *name) {
    if (pool->n == pool->cap) {
        int cap = pool->cap ? 2 * pool->cap : 4;
        zt_tensor_t *t = realloc(pool->t, (size_t)cap * sizeof *t);
        if (t) pool->t = t;
        struct zt_param **tn = realloc(pool->tenant, (size_t)cap * sizeof *tn);
        if (tn) pool->tenant = tn;
        uint64_t *st = realloc(pool->stamp, (size_t)cap * sizeof *st);
        if (st) pool->stamp = st;
        if (!t || !tn || !st) return zt_error_set(ZT_ERR_NOMEM, "engine: out of memory for slots");
        pool->cap = cap;
    }
    ZT_CHECK(zt_tensor_init_dtype(&pool->t[pool->n], name, NULL, pool->rows, pool->cols,
                                  pool->dt, pool->nblk, NULL));
    pool->tenant[pool->n] = NULL;
    pool->stamp[pool->n] = 0;
    pool->n++;
    return ZT_OK;
}

static int64_t pools_bytes(const struct zt_pool *pools, int n) {
    int64_t b = 0;
    for (int c = 0; pools && c < n; c++)
        b += pools[c].n * pools[c].rows * pools[c].cols * (int64_t)zt_dtype_size(pools[c].dt);
    return b;
}
int64_t zt_slots_value_bytes(const struct zt_engine *e) {
    return pools_bytes(e->slots.value_pool, e->slots.nshapes);
}
int64_t zt_slots_grad_bytes(const struct zt_engine *e) {
    return pools_bytes(e->slots.grad_pool, e->slots.nshapes);
}

void zt_slots_free(zt_engine_t e) {
    struct zt_engine_slots *s = &e->slots;
    for (int c = 0; c < s->nshapes; c++) {
        struct zt_pool *pools[2] = {&s->value_pool[c], &s->grad_pool[c]};
        for (int k = 0; k < 2; k++) {
            for (int i = 0; i < pools[k]->n; i++) zt_tensor_free(pools[k]->t[i]);
            free(pools[k]->t);
            free(pools[k]->tenant);
            free(pools[k]->stamp);
        }
    }
    free(s->value_pool);
    free(s->grad_pool);
}

// ----------------------------------------------------------------------------
// pools

/* the shape classes: one pool pair per distinct (rows, cols); count[c]: the non-persistent
 * parameters of class c, *elems: their elements in all */
static void make_classes(zt_engine_t e, int64_t *count, int64_t *elems) {
    struct zt_engine_slots *s = &e->slots;
    *elems = 0;
    for (int i = 0; i < e->nparams; i++) {
        struct zt_param *p = e->params[i];
        int c = 0;
        while (c < s->nshapes &&
               !(s->grad_pool[c].rows == p->rows && s->grad_pool[c].cols == p->cols))
            c++;
        if (c == s->nshapes) {
            struct zt_pool z = {.rows = p->rows, .cols = p->cols, .dt = e->work_dtype,
                                .nblk = p->nblk};
            s->value_pool[c] = s->grad_pool[c] = z;
            s->nshapes++;
        }
        p->shape_class = c;
        if (!p->persistent) {
            count[c]++;
            *elems += p->rows * p->cols;
        }
    }
}

/* stage 3: the value slots' budget in elements, min(stage3_max_live_parameters,
 * stage3_prefetch_bucket_size); with offload_param nvme the slots are the buffers the shards
 * are read into: at most max_in_cpu and buffer_count x buffer_size elements, each parameter
 * within one buffer (DeepSpeed) */
static enum zt_status value_slots_budget(const struct zt_engine *e, int64_t *out) {
    const struct zt_config *c = &e->cfg;
    int64_t budget = c->stage3_max_live_parameters < c->stage3_prefetch_bucket_size
                    ? c->stage3_max_live_parameters : c->stage3_prefetch_bucket_size;
    const struct zt_offload_cfg *op = &c->offload_param;
    if (e->stage >= 3 && op->device == ZT_OFFLOAD_NVME) {
        int64_t cap = op->buffer_count * op->buffer_size;
        budget = budget < op->max_in_cpu ? budget : op->max_in_cpu;
        budget = budget < cap ? budget : cap;
        for (int i = 0; i < e->nparams; i++) {
            const struct zt_param *p = e->params[i];
            if (!p->persistent && p->rows * p->cols > op->buffer_size)
                return zt_error_set(ZT_ERR_CONFIG, "config %s: zero_optimization.offload_param."
                                    "buffer_size is %lld elements, smaller than parameter %s "
                                    "(%lld elements); raise it", c->path,
                                    (long long)op->buffer_size, p->name,
                                    (long long)(p->rows * p->cols));
        }
    }
    *out = budget;
    return ZT_OK;
}

/* the slot pools: stage 3 gathers each non-persistent parameter into a slot of its shape, the
 * budget shared among the shapes in proportion to their elements, at least two slots per shape
 * (a task may read two parameters of one shape); stage >= 2 gradient slots start at one per
 * shape and grow when every slot waits for its bucket's reduction */
enum zt_status zt_slots_init(zt_engine_t e) {
    struct zt_engine_slots *s = &e->slots;
    s->value_pool = calloc((size_t)e->nparams, sizeof *s->value_pool);
    s->grad_pool = calloc((size_t)e->nparams, sizeof *s->grad_pool);
    if (!s->value_pool || !s->grad_pool)
        return zt_error_set(ZT_ERR_NOMEM, "engine: out of memory");
    int64_t *count = calloc((size_t)e->nparams, sizeof *count);
    if (!count) return zt_error_set(ZT_ERR_NOMEM, "engine: out of memory");
    int64_t nonpersistent_elems = 0, budget = 0;
    make_classes(e, count, &nonpersistent_elems);
    enum zt_status rc = value_slots_budget(e, &budget);
    for (int c = 0; c < s->nshapes && rc == ZT_OK; c++) {
        if (e->stage >= 3 && count[c] > 0) {
            int64_t k = (int64_t)((double)budget * (double)count[c] /
                                  (double)nonpersistent_elems);
            int64_t lo = count[c] < 2 ? count[c] : 2;
            k = k < lo ? lo : k > count[c] ? count[c] : k;
            for (int64_t j = 0; j < k && rc == ZT_OK; j++)
                rc = pool_grow(&s->value_pool[c], "slot");
        }
        if (e->stage >= 2 && rc == ZT_OK) rc = pool_grow(&s->grad_pool[c], "grad_slot");
    }
    free(count);
    return rc;
}

// ----------------------------------------------------------------------------
// tenants

/* stage >= 2: give p a gradient slot for the micro-batches until its bucket's next reduction:
 * a free slot of its shape (or a new one), zeroed by a task */
static zt_tensor_t take_grad_slot(const struct zt_step_ctx *ctx, struct zt_param *p) {
    struct zt_engine *e = p->e;
    struct zt_pool *pool = &e->slots.grad_pool[p->shape_class];
    int i = 0;
    while (i < pool->n && pool->tenant[i]) i++;
    if (i == pool->n && pool_grow(pool, "grad_slot") != ZT_OK) return NULL;
    pool->tenant[i] = p;
    p->grad_slot = i;
    p->grad = pool->t[i];
    struct zt_task_opts o = zt_engine_task_opts(e, ctx, ZT_PRIO_WEIGHT_GRAD);
    if (zt_task_zero(&o, p->grad) != ZT_OK) return NULL;
    return p->grad;
}

/* stage 3: slot i of a gathered-value pool loses its tenant, which must be gathered again */
static void evict(struct zt_pool *pool, int i) {
    if (!pool->tenant[i]) return;
    pool->tenant[i]->value_slot = -1;
    pool->tenant[i]->value = NULL;
    pool->tenant[i] = NULL;
}

/* whether ctx is a backward context (its gathers prefetch for the backward) */
static int in_backward(const struct zt_step_ctx *ctx) {
    return ctx->cls == ZT_PRIO_BACKWARD || ctx->cls == ZT_PRIO_WEIGHT_GRAD;
}

/* stage 3: gather p's blocks from their owners into the least recently gathered slot of its
 * shape (its old tenant must be gathered again when next read). An offloaded parameter's own
 * blocks are first read from the swap file into their places in the slot. */
static zt_tensor_t gather(const struct zt_step_ctx *ctx, struct zt_param *p) {
    struct zt_engine *e = p->e;
    struct zt_pool *pool = &e->slots.value_pool[p->shape_class];
    int i = 0;
    for (int j = 1; j < pool->n && pool->tenant[i]; j++)
        if (!pool->tenant[j] || pool->stamp[j] < pool->stamp[i]) i = j;
    evict(pool, i);
    pool->tenant[i] = p;
    pool->stamp[i] = ++e->slots.clock;
    p->value_slot = i;
    p->value = pool->t[i];
    struct zt_block_ref refs[ZT_PLAN_MAX_BLOCKS], src[ZT_PLAN_MAX_BLOCKS];
    for (int j = 0; j < p->nblk; j++) {
        refs[j] = (struct zt_block_ref){p->value, j, 0};
        if (j >= p->own0 && j < p->own1)
            src[j - p->own0] = (struct zt_block_ref){zt_param_work(p), j - p->own0, 0};
    }
    const int64_t *part = zt_engine_bucket_parts(e, p->first_blk, p->first_blk + p->nblk);
    /* the next layer's parameters: ahead of the compute of the layer before it */
    struct zt_task_opts o =
        zt_engine_task_opts(e, ctx, in_backward(ctx) ? ZT_PRIO_PREFETCH_BWD
                                                      : ZT_PRIO_PREFETCH_FWD);
    if (p->offloaded && p->own1 > p->own0 && zt_offload_gather(e, p, p->value, &o) != ZT_OK)
        return NULL;
    if (zt_task_comm_allgather(&o, refs, p->nblk, part, p->offloaded ? NULL : src,
                               p->offloaded ? 0 : p->own1 - p->own0, sizeof(float),
                               e->buf.comm_token) != ZT_OK)
        return NULL;
    return p->value;
}

/* stage 3: every gathered value is stale once the optimizer updates the shards */
void zt_slots_drop_gathered(zt_engine_t e) {
    for (int c = 0; c < e->slots.nshapes; c++)
        for (int i = 0; i < e->slots.value_pool[c].n; i++) evict(&e->slots.value_pool[c], i);
}

void zt_slots_release_grad(zt_engine_t e, struct zt_param *p) {
    if (p->grad_slot >= 0) e->slots.grad_pool[p->shape_class].tenant[p->grad_slot] = NULL;
    p->grad_slot = -1;
    p->grad = NULL;
}

zt_tensor_t zt_param_value(const struct zt_step_ctx *ctx, zt_param_t p) {
    if (p->value || !p->e || !p->e->finalized || p->e->stage < 3) return p->value;
    return gather(ctx, p);
}

zt_tensor_t zt_param_grad(const struct zt_step_ctx *ctx, zt_param_t p) {
    if (p->grad || !p->e || !p->e->finalized || p->e->stage < 2) return p->grad;
    return take_grad_slot(ctx, p);
}

