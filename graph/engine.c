/*
 * graph/engine.c: the engine behind zt_engine.h: flat buffers, parameter table, optimizer
 * groups, and the step lifecycle.
 *
 * Layer: graph/. No starpu_* call here: everything goes through tasks/ (zt_task_*, zt_tensor_*).
 */
#include <math.h>            /* sqrt, log, cos */
#include <stdlib.h>          /* calloc, posix_memalign */
#include <string.h>          /* strcmp, memset */
#include "zt_comm.h"         /* ranks */
#include "zt_engine.h"       /* our API */
#include "zt_log.h"          /* ZT_LOG_I */
#include "zt_safetensors.h"  /* zt_st_* */

#define ZT_ALIGN_ELEMS 16 /* 64-byte alignment of every parameter slice */
#define ZT_MAX_DIMS 8

struct zt_param {
    char name[160];
    int ndim;
    int64_t shape[ZT_MAX_DIMS];
    int64_t rows, cols, off; /* off: element offset in the flat buffers */
    int nblk;
    enum zt_init init;
    float std;
    zt_tensor_t value, grad;
    int first_blk;         /* index of its first block in the engine's block list */
    int bucket;            /* gradient-reduction bucket */
    int ready;             /* zt_engine_grad_ready called this step */
};

/* a contiguous run of whole parameters (blocks [b0, b1)) reduced or gathered by one collective */
struct zt_bucket {
    int b0, b1;
    int nparams, pending;  /* parameters in it; not yet ready this step */
    int submitted;         /* its collective is submitted this step */
};

struct zt_group {
    int first, n;          /* range in the engine's block list */
};

struct zt_engine {
    struct zt_config cfg;
    int chunks;            /* ZT_GRAPH_CHUNKS */
    int64_t group_elems;   /* ZT_OPT_GROUP_ELEMS */
    int nblk;              /* activation blocks */
    int64_t *blk_seqs;     /* [nblk] sequences per activation block */
    struct zt_param **params; /* each allocated alone: zt_param_t stays valid */
    int np, capp;
    int finalized;
    int64_t flat_n;        /* elements of each flat buffer, padding included */
    float *flat_p, *flat_g;
    zt_tensor_t m, v, partial, clip;
    struct zt_block_ref *pblk, *gblk; /* every parameter block in flat order */
    int nb;
    struct zt_group *groups;
    int ng;
    zt_tensor_t *acts;
    int nacts, capacts;
    int64_t act_bytes;
    int64_t step;
    float lr;
    uint64_t rng;
    /* data parallelism (ZeRO): ranks, shards, buckets */
    int rank, size, stage;
    int64_t *babs;         /* [nb + 1] absolute element offset of each block; babs[nb] = flat_n */
    int *shard_blk;        /* [size + 1] first block of each rank's shard */
    int *gfirst;           /* [size + 1] first optimizer group of each rank */
    int g0, g1;            /* optimizer groups this rank updates */
    struct zt_bucket *rbuckets, *gbuckets; /* gradient reduction / parameter all-gather */
    int nrb, ngb;
    zt_tensor_t token;     /* orders every collective of this rank (zt_tasks.h) */
    int64_t *part;         /* [2 * size] scratch for collective parts */
};

/* ---------------------------------------------------------------------------------------------
 * deterministic normal generator (splitmix64 + Box-Muller), independent of libc */
static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static double uniform01(uint64_t *s) { return ((splitmix64(s) >> 11) + 0.5) * (1.0 / 9007199254740992.0); }
static void fill_normal(float *x, int64_t n, float std, uint64_t *s) {
    for (int64_t i = 0; i < n; i += 2) {
        double u1 = uniform01(s), u2 = uniform01(s);
        double r = sqrt(-2.0 * log(u1));
        x[i] = (float)(std * r * cos(2 * M_PI * u2));
        if (i + 1 < n) x[i + 1] = (float)(std * r * sin(2 * M_PI * u2));
    }
}

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
    zt_runtime_wait_all();
    for (int i = 0; i < e->np; i++) {
        zt_tensor_free(e->params[i]->value);
        zt_tensor_free(e->params[i]->grad);
        free(e->params[i]);
    }
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
    free(e->flat_p);
    free(e->flat_g);
    free(e->params);
    free(e->acts);
    free(e->pblk);
    free(e->gblk);
    free(e->groups);
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
        bk[n - 1].nparams++;
        if (assign) p->bucket = n - 1;
    }
    *out = bk;
    *nout = n;
    return ZT_OK;
}

enum zt_status zt_engine_finalize(zt_engine_t e) {
    if (e->finalized) return ZT_OK;
    if (e->np == 0) return zt_error_set(ZT_ERR_INVALID, "engine: no parameters declared");
    /* layout */
    int64_t off = 0;
    int nb = 0;
    for (int i = 0; i < e->np; i++) {
        struct zt_param *p = e->params[i];
        p->off = off;
        off += (p->rows * p->cols + ZT_ALIGN_ELEMS - 1) / ZT_ALIGN_ELEMS * ZT_ALIGN_ELEMS;
        p->nblk = param_nblk(e, p);
        nb += p->nblk;
    }
    e->flat_n = off;
    void *fp = NULL, *fg = NULL;
    if (posix_memalign(&fp, 4096, (size_t)off * sizeof(float)) ||
        posix_memalign(&fg, 4096, (size_t)off * sizeof(float))) {
        free(fp);
        return zt_error_set(ZT_ERR_NOMEM, "engine: cannot allocate %lld parameters (%.1f MiB "
                                          "each for values and gradients)",
                            (long long)off, off * 4.0 / 1048576);
    }
    e->flat_p = fp;
    e->flat_g = fg;
    memset(e->flat_p, 0, (size_t)off * sizeof(float));
    memset(e->flat_g, 0, (size_t)off * sizeof(float));
    /* initial values, in declaration order from the seeded generator */
    for (int i = 0; i < e->np; i++) {
        struct zt_param *p = e->params[i];
        float *x = e->flat_p + p->off;
        int64_t n = p->rows * p->cols;
        if (p->init == ZT_INIT_ONE)
            for (int64_t k = 0; k < n; k++) x[k] = 1.0f;
        else if (p->init == ZT_INIT_NORMAL)
            fill_normal(x, n, p->std, &e->rng);
    }
    /* tensors */
    e->pblk = calloc((size_t)nb, sizeof *e->pblk);
    e->gblk = calloc((size_t)nb, sizeof *e->gblk);
    if (!e->pblk || !e->gblk) return zt_error_set(ZT_ERR_NOMEM, "engine: out of memory");
    int k = 0;
    for (int i = 0; i < e->np; i++) {
        struct zt_param *p = e->params[i];
        char gname[200];
        snprintf(gname, sizeof gname, "grad:%s", p->name);
        ZT_CHECK(zt_tensor_init(&p->value, p->name, e->flat_p + p->off, p->rows, p->cols,
                                sizeof(float), p->nblk, NULL));
        ZT_CHECK(zt_tensor_init(&p->grad, gname, e->flat_g + p->off, p->rows, p->cols,
                                sizeof(float), p->nblk, NULL));
        p->first_blk = k;
        for (int j = 0; j < p->nblk; j++, k++) {
            int64_t boff = p->off + zt_tensor_blk_row0(p->value, j) * p->cols;
            e->pblk[k] = (struct zt_block_ref){p->value, j, boff};
            e->gblk[k] = (struct zt_block_ref){p->grad, j, boff};
        }
    }
    e->nb = nb;
    e->babs = calloc((size_t)nb + 1, sizeof *e->babs);
    e->shard_blk = calloc((size_t)e->size + 1, sizeof *e->shard_blk);
    e->gfirst = calloc((size_t)e->size + 1, sizeof *e->gfirst);
    e->part = calloc(2 * (size_t)e->size, sizeof *e->part);
    if (!e->babs || !e->shard_blk || !e->gfirst || !e->part)
        return zt_error_set(ZT_ERR_NOMEM, "engine: out of memory");
    for (int b = 0; b < nb; b++) e->babs[b] = e->pblk[b].off;
    e->babs[nb] = e->flat_n;
    /* ZeRO shards: rank r owns the blocks [shard_blk[r], shard_blk[r+1]), a contiguous range of
     * the flat buffers starting at the first block at or after r/N of the elements (whole blocks,
     * so a shard is a set of tensors' row blocks; balanced up to one block) */
    for (int r = 0, b = 0; r <= e->size; r++) {
        int64_t target = e->flat_n * r / e->size;
        while (b < nb && e->babs[b] < target) b++;
        e->shard_blk[r] = r == e->size ? nb : b;
    }
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
            e->gblk[b].off -= g0;
        }
    }
    /* stage 0: every rank updates every group; stage >= 1: only its own (optimizer state 1/N) */
    e->g0 = e->stage >= 1 ? e->gfirst[e->rank] : 0;
    e->g1 = e->stage >= 1 ? e->gfirst[e->rank + 1] : e->ng;
    enum zt_status rc = ZT_OK;
    if (e->g1 > e->g0) {
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
    ZT_CHECK(zt_tensor_init(&e->clip, "grad_clip", NULL, 1, 2, sizeof(float), 1, NULL));
    ZT_CHECK(zt_tensor_init(&e->token, "comm_token", NULL, 1, 1, sizeof(float), 1, NULL));
    /* buckets of whole parameters in flat order, cut when they reach the configured size */
    ZT_CHECK(make_buckets(e, e->cfg.reduce_bucket_size, &e->rbuckets, &e->nrb, 1));
    ZT_CHECK(make_buckets(e, e->cfg.allgather_bucket_size, &e->gbuckets, &e->ngb, 0));
    e->finalized = 1;
    return ZT_OK;
}

zt_tensor_t zt_param_value(zt_param_t p) { return p->value; }
zt_tensor_t zt_param_grad(zt_param_t p) { return p->grad; }
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

enum zt_status zt_engine_act_partials(zt_engine_t e, const char *name, int64_t cols,
                                      zt_tensor_t *out) {
    ZT_CHECK(zt_tensor_init(out, name, NULL, e->nblk, cols, sizeof(float), e->nblk, NULL));
    return keep_act(e, *out);
}

int zt_engine_nblk(zt_engine_t e) { return e->nblk; }
const struct zt_config *zt_engine_config(zt_engine_t e) { return &e->cfg; }

struct zt_task_opts zt_engine_opts(zt_engine_t e, enum zt_prio_class c, int layer, int n_layer,
                                   int mb) {
    struct zt_task_opts o = {.layer = layer, .mb = mb, .step = e->step,
                             .priority = zt_prio(c, layer, n_layer)};
    return o;
}

/* ---------------------------------------------------------------------------------------------
 * step */
enum zt_status zt_engine_step_begin(zt_engine_t e, int64_t step) {
    if (!e->finalized) return zt_error_set(ZT_ERR_INVALID, "engine: step before finalize");
    e->step = step;
    e->lr = zt_config_lr(&e->cfg, step);
    struct zt_task_opts o = zt_engine_opts(e, ZT_PRIO_DEFAULT, -1, 0, -1);
    for (int i = 0; i < e->np; i++) {
        ZT_CHECK(zt_task_zero(&o, e->params[i]->grad));
        e->params[i]->ready = 0;
    }
    for (int k = 0; k < e->nrb; k++) {
        e->rbuckets[k].pending = e->rbuckets[k].nparams;
        e->rbuckets[k].submitted = 0;
    }
    return ZT_OK;
}

/* parts of the flat range [babs[b0], babs[b1]) that each rank owns, relative to its start */
static const int64_t *bucket_parts(zt_engine_t e, int b0, int b1) {
    int64_t lo = e->babs[b0], hi = e->babs[b1];
    for (int r = 0; r < e->size; r++) {
        int64_t s0 = e->babs[e->shard_blk[r]], s1 = e->babs[e->shard_blk[r + 1]];
        s0 = s0 < lo ? lo : s0 > hi ? hi : s0;
        s1 = s1 < lo ? lo : s1 > hi ? hi : s1;
        e->part[2 * r] = s0 - lo;
        e->part[2 * r + 1] = s1 - lo;
    }
    return e->part;
}

/* all-gather every rank's part of refs (parameter or gradient blocks), bucket by bucket */
static enum zt_status allgather_buckets(zt_engine_t e, const struct zt_task_opts *o,
                                        const struct zt_bucket *bks, int n,
                                        const struct zt_block_ref *refs) {
    for (int k = 0; k < n; k++)
        ZT_CHECK(zt_task_comm_allgather(o, &refs[bks[k].b0], bks[k].b1 - bks[k].b0,
                                        bucket_parts(e, bks[k].b0, bks[k].b1), sizeof(float),
                                        e->token));
    return ZT_OK;
}

static enum zt_status reduce_bucket(zt_engine_t e, int k) {
    struct zt_bucket *bk = &e->rbuckets[k];
    bk->submitted = 1;
    struct zt_task_opts o = zt_engine_opts(e, ZT_PRIO_BACKWARD, -1, 0, -1);
    const int64_t *part = bucket_parts(e, bk->b0, bk->b1);
    /* stage 2 keeps only this rank's part of the summed gradients; 0 and 1 need all of it */
    if (e->stage >= 2 && e->cfg.reduce_scatter)
        return zt_task_comm_reduce_scatter(&o, &e->gblk[bk->b0], bk->b1 - bk->b0, part,
                                           e->token);
    return zt_task_comm_allreduce(&o, &e->gblk[bk->b0], bk->b1 - bk->b0, part, e->token);
}

enum zt_status zt_engine_grad_ready(zt_engine_t e, zt_param_t p) {
    if (p->ready) return ZT_OK;
    p->ready = 1;
    struct zt_bucket *bk = &e->rbuckets[p->bucket];
    if (--bk->pending == 0 && e->size > 1 && e->cfg.overlap_comm) return reduce_bucket(e, p->bucket);
    return ZT_OK;
}

enum zt_status zt_engine_step_end(zt_engine_t e) {
    struct zt_task_opts o = zt_engine_opts(e, ZT_PRIO_OPTIMIZER, -1, 0, -1);
    if (e->size > 1) /* buckets not reduced during the backward, in bucket order */
        for (int k = 0; k < e->nrb; k++)
            if (!e->rbuckets[k].submitted) ZT_CHECK(reduce_bucket(e, k));
    for (int g = e->g0; g < e->g1; g++)
        ZT_CHECK(zt_task_grad_sumsq(&o, e->partial, g, &e->gblk[e->groups[g].first],
                                    e->groups[g].n));
    if (e->size > 1 && e->stage >= 1) {
        /* every rank's sums of squares (one double per group) to every rank */
        struct zt_block_ref *refs = calloc((size_t)e->ng, sizeof *refs);
        if (!refs) return zt_error_set(ZT_ERR_NOMEM, "engine: out of memory");
        for (int g = 0; g < e->ng; g++) refs[g] = (struct zt_block_ref){e->partial, g, 0};
        for (int r = 0; r < e->size; r++) {
            e->part[2 * r] = e->gfirst[r];
            e->part[2 * r + 1] = e->gfirst[r + 1];
        }
        enum zt_status rc = zt_task_comm_allgather(&o, refs, e->ng, e->part, sizeof(double),
                                                   e->token);
        free(refs);
        ZT_CHECK(rc);
    }
    ZT_CHECK(zt_task_grad_clip(&o, e->clip, e->partial, e->cfg.gradient_clipping));
    struct zt_adamw_hparams hp = {
        .lr = e->lr, .beta1 = e->cfg.beta1, .beta2 = e->cfg.beta2, .eps = e->cfg.eps,
        .weight_decay = e->cfg.weight_decay, .t = e->step,
        .decoupled = e->cfg.optim == ZT_OPTIM_ADAMW || e->cfg.adam_w_mode};
    for (int g = e->g0; g < e->g1; g++)
        ZT_CHECK(zt_task_adamw(&o, &e->pblk[e->groups[g].first], &e->gblk[e->groups[g].first],
                               e->groups[g].n, e->m, e->v, g - e->g0, e->clip, &hp));
    if (e->size > 1 && e->stage >= 1) /* updated shards to every rank */
        ZT_CHECK(allgather_buckets(e, &o, e->gbuckets, e->ngb, e->pblk));
    return ZT_OK;
}

enum zt_status zt_engine_step_wait(zt_engine_t e, struct zt_step_info *info) {
    ZT_CHECK(zt_runtime_wait_all());
    if (info) {
        info->step = e->step;
        info->lr = e->lr;
        ZT_CHECK(zt_tensor_acquire(e->clip, 0));
        info->grad_norm = ((const float *)zt_tensor_data(e->clip))[1];
        zt_tensor_release(e->clip);
    }
    return ZT_OK;
}

/* ---------------------------------------------------------------------------------------------
 * safetensors */
enum zt_status zt_engine_load_safetensors(zt_engine_t e, const char *path) {
    struct zt_safetensors st;
    ZT_CHECK(zt_st_open(&st, path));
    enum zt_status rc = ZT_OK;
    for (int i = 0; i < e->np && rc == ZT_OK; i++) {
        struct zt_param *p = e->params[i];
        rc = zt_tensor_acquire(p->value, 1);
        if (rc != ZT_OK) break;
        rc = zt_st_read_f32(&st, p->name, p->ndim, p->shape, zt_tensor_data(p->value));
        zt_tensor_release(p->value);
    }
    zt_st_close(&st);
    return rc;
}

/* which: 0 = values, 1 = gradients */
static enum zt_status write_tensors(zt_engine_t e, const char *path, int which);

/* Rank 0 writes (every rank holds every parameter after the step's all-gather); the outcome is
 * shared so that all ranks succeed or fail together. */
static enum zt_status save_tensors(zt_engine_t e, const char *path, int which) {
    if (which && e->size > 1 && e->stage >= 2) {
        /* each rank holds only its shard of the summed gradients: gather the shards (in the
         * reduction buckets' ranges) so that rank 0 holds all of them */
        struct zt_task_opts o = zt_engine_opts(e, ZT_PRIO_DEFAULT, -1, 0, -1);
        ZT_CHECK(allgather_buckets(e, &o, e->rbuckets, e->nrb, e->gblk));
        ZT_CHECK(zt_runtime_wait_all());
    }
    enum zt_status rc = e->rank == 0 ? write_tensors(e, path, which) : ZT_OK;
    if (e->size > 1) {
        double bad = rc != ZT_OK;
        ZT_CHECK(zt_comm_sum_double(&bad));
        if (bad > 0 && rc == ZT_OK)
            rc = zt_error_set(ZT_ERR_IO, "safetensors %s: rank 0 could not write it", path);
    }
    return rc;
}

static enum zt_status write_tensors(zt_engine_t e, const char *path, int which) {
    struct zt_st_entry *ent = calloc((size_t)e->np, sizeof *ent);
    if (!ent) return zt_error_set(ZT_ERR_NOMEM, "export %s: out of memory", path);
    enum zt_status rc = ZT_OK;
    int acq = 0;
    for (; acq < e->np; acq++) {
        struct zt_param *p = e->params[acq];
        zt_tensor_t t = which ? p->grad : p->value;
        rc = zt_tensor_acquire(t, 0);
        if (rc != ZT_OK) break;
        ent[acq].name = p->name;
        ent[acq].ndim = p->ndim;
        memcpy(ent[acq].shape, p->shape, sizeof(int64_t) * (size_t)p->ndim);
        ent[acq].data = zt_tensor_data(t);
    }
    if (rc == ZT_OK) rc = zt_st_write_f32(path, ent, e->np, NULL);
    for (int i = 0; i < acq; i++)
        zt_tensor_release(which ? e->params[i]->grad : e->params[i]->value);
    free(ent);
    return rc;
}

enum zt_status zt_engine_save_safetensors(zt_engine_t e, const char *path) {
    return save_tensors(e, path, 0);
}

enum zt_status zt_engine_save_grads_safetensors(zt_engine_t e, const char *path) {
    return save_tensors(e, path, 1);
}

void zt_engine_memory(zt_engine_t e, struct zt_engine_mem *m) {
    m->params = e->flat_n * (int64_t)sizeof(float);
    m->grads = e->flat_n * (int64_t)sizeof(float);
    m->optim = e->m ? 2 * zt_tensor_numel(e->m) * (int64_t)sizeof(float) : 0;
    m->acts = e->act_bytes;
}

int zt_engine_rank(zt_engine_t e) { return e->rank; }
int zt_engine_world_size(zt_engine_t e) { return e->size; }
