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

/* stage 3: the value slots' budget in elements, min(stage3_max_live_parameters,
 * stage3_prefetch_bucket_size); with offload_param nvme the slots are the buffers the shards
 * are read into: at most max_in_cpu and buffer_count x buffer_size elements, each parameter
 * within one buffer (DeepSpeed) */
static enum zt_status value_slots_budget(const struct zt_config *c, int n,
                                         const struct zt_plan_shape *shapes,
                                         const struct zt_plan_param *pp,
                                         const char *const *names, int64_t *out) {
    int64_t budget = c->stage3_max_live_parameters < c->stage3_prefetch_bucket_size
                    ? c->stage3_max_live_parameters : c->stage3_prefetch_bucket_size;
    const struct zt_offload_cfg *op = &c->offload_param;
    if (c->zero_stage >= 3 && op->device == ZT_OFFLOAD_NVME) {
        int64_t cap = op->buffer_count * op->buffer_size;
        budget = budget < op->max_in_cpu ? budget : op->max_in_cpu;
        budget = budget < cap ? budget : cap;
        for (int i = 0; i < n; i++) {
            const int64_t elems = shapes[i].rows * shapes[i].cols;
            if (!pp[i].persistent && elems > op->buffer_size)
                return zt_error_set(ZT_ERR_CONFIG, "config %s: zero_optimization.offload_param."
                                    "buffer_size is %lld elements, smaller than parameter %s "
                                    "(%lld elements); raise it", c->path,
                                    (long long)op->buffer_size, names[i], (long long)elems);
        }
    }
    *out = budget;
    return ZT_OK;
}

enum zt_status zt_slots_plan(const struct zt_config *c, int n, const struct zt_plan_shape *shapes,
                             const struct zt_plan_param *pp, const char *const *names, int *cls,
                             struct zt_slot_class *out, int *nclasses) {
    int nc = 0;
    int64_t nonpersistent_elems = 0, budget = 0;
    for (int i = 0; i < n; i++) {
        int k = 0;
        while (k < nc && !(out[k].rows == shapes[i].rows && out[k].cols == shapes[i].cols)) k++;
        if (k == nc)
            out[nc++] = (struct zt_slot_class){.rows = shapes[i].rows, .cols = shapes[i].cols,
                                               .nblk = pp[i].nblk};
        cls[i] = k;
        if (!pp[i].persistent) {
            out[k].count++;
            nonpersistent_elems += shapes[i].rows * shapes[i].cols;
        }
    }
    *nclasses = nc;
    ZT_CHECK(value_slots_budget(c, n, shapes, pp, names, &budget));
    for (int k = 0; k < nc && c->zero_stage >= 3; k++) {
        if (out[k].count == 0) continue;
        int64_t v = (int64_t)((double)budget * (double)out[k].count /
                              (double)nonpersistent_elems);
        int64_t lo = out[k].count < 2 ? out[k].count : 2;
        out[k].value_slots = v < lo ? lo : v > out[k].count ? out[k].count : v;
    }
    return ZT_OK;
}

/* the slot pools, as zt_slots_plan says */
enum zt_status zt_slots_init(zt_engine_t e) {
    struct zt_engine_slots *s = &e->slots;
    const size_t n = (size_t)e->nparams;
    s->value_pool = calloc(n, sizeof *s->value_pool);
    s->grad_pool = calloc(n, sizeof *s->grad_pool);
    struct zt_plan_shape *shapes = calloc(n, sizeof *shapes);
    const char **names = calloc(n, sizeof *names);
    int *cls = calloc(n, sizeof *cls);
    struct zt_slot_class *classes = calloc(n, sizeof *classes);
    enum zt_status rc = ZT_OK;
    if (!s->value_pool || !s->grad_pool || !shapes || !names || !cls || !classes)
        rc = zt_error_set(ZT_ERR_NOMEM, "engine: out of memory");
    for (int i = 0; rc == ZT_OK && i < e->nparams; i++) {
        shapes[i] = (struct zt_plan_shape){e->params[i]->rows, e->params[i]->cols,
                                           e->params[i]->ndim};
        names[i] = e->params[i]->name;
    }
    if (rc == ZT_OK)
        rc = zt_slots_plan(&e->cfg, e->nparams, shapes, e->plan.param, names, cls, classes,
                           &s->nshapes);
    for (int i = 0; rc == ZT_OK && i < e->nparams; i++) e->params[i]->shape_class = cls[i];
    for (int c = 0; rc == ZT_OK && c < s->nshapes; c++) {
        struct zt_pool z = {.rows = classes[c].rows, .cols = classes[c].cols,
                            .dt = e->work_dtype, .nblk = classes[c].nblk};
        s->value_pool[c] = s->grad_pool[c] = z;
        for (int64_t j = 0; j < classes[c].value_slots && rc == ZT_OK; j++)
            rc = pool_grow(&s->value_pool[c], "slot");
        if (e->stage >= 2 && rc == ZT_OK) rc = pool_grow(&s->grad_pool[c], "grad_slot");
    }
    free(shapes);
    free(names);
    free(cls);
    free(classes);
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

