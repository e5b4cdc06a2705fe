/*
 * graph/engine.c: the engine behind zt_engine.h: flat buffers, parameter table, optimizer
 * groups, and the step lifecycle.
 *
 * Layer: graph/. No starpu_* call here: everything goes through tasks/ (zt_task_*, zt_tensor_*).
 */
#include <math.h>            /* sqrt, log, cos */
#include <pthread.h>         /* the background save's lock */
#include <time.h>            /* clock_gettime */
#include <stdlib.h>          /* calloc, posix_memalign */
#include <string.h>          /* strcmp, memset */
#include "zt_comm.h"         /* ranks */
#include "zt_engine.h"       /* our API */
#include "zt_log.h"          /* ZT_LOG_I */
#include "zt_safetensors.h"  /* zt_st_* */
#include "zt_aio.h"          /* struct zt_aio_cfg, zt_aio_alloc */
#include "zt_ckpt.h"         /* checkpoint shard files */
#include "zt_swapdir.h"      /* swap directories and files */

#define ZT_ALIGN_ELEMS 16 /* 64-byte alignment of every parameter slice */
#define ZT_MAX_DIMS 8

struct zt_param {
    char name[160];
    int ndim;
    int64_t shape[ZT_MAX_DIMS];
    int64_t rows, cols, off; /* off: element offset in the (whole-model) flat layout */
    int nblk;
    enum zt_init init;
    float std;
    struct zt_engine *e;
    /* this rank's storage: home holds the values (whole at stages 0-2 and for persistent
     * parameters at stage 3, else only its own blocks), ghome the gradient sums (whole at
     * stages 0-1, else its own blocks; at stage 1 only its own blocks are summed over the
     * ranks: scattered_sums); NULL when it owns none of the parameter's blocks */
    zt_tensor_t home, ghome;
    /* mixed precision: home holds the fp32 master weights (this rank's blocks at stage >= 1,
     * else whole) and work the bf16/fp16 copy the model reads (whole, or its own blocks where
     * stage 3 gathers it); NULL in fp32 training, where home is both */
    zt_tensor_t work;
    /* what the model reads and accumulates into now: home/ghome, or (stage 3 values, stage >= 2
     * gradients) a slot of the pool of its shape, NULL when it has none */
    zt_tensor_t value, grad;
    int own0, own1;        /* the blocks [own0, own1) of it that this rank owns */
    int persistent;        /* stage 3: small enough to stay whole on every rank */
    int offl;              /* stage 3 offload_param nvme: its shard lives in the swap file */
    int cls;               /* shape class of its slots */
    int pslot, gslot;      /* its gathered-value and gradient slots, -1 when none */
    int first_blk;         /* index of its first block in the engine's block list */
    int bucket;            /* gradient-reduction bucket */
    int ready;             /* zt_engine_grad_ready calls this step */
    int done;              /* stage >= 2: declared since its bucket was last reduced */
};

/* a contiguous run of whole parameters (blocks [b0, b1), parameters [i0, i1)) reduced or gathered
 * by one collective */
struct zt_bucket {
    int b0, b1, i0, i1;
    int nparams, pending;  /* parameters in it; not yet ready this step (or micro-batch) */
    int submitted;         /* its collective is submitted this step */
};

/* Slots of one parameter shape: full-size tensors that parameters occupy in turn (stage 3
 * gathered values; stage >= 2 a micro-batch's gradients). A slot changes tenant only after every
 * task of the old tenant was submitted, so StarPU's implicit dependencies (write after read)
 * make the new tenant's first task wait for the old tenant's last one. */
struct zt_pool {
    int64_t rows, cols;
    enum zt_dtype dt;
    int nblk, n, cap;
    zt_tensor_t *t;
    struct zt_param **who; /* tenant or NULL */
    uint64_t *stamp;       /* when the tenant moved in (least recently gathered is evicted) */
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
    float *flat_p;         /* values (fp32; the master weights in mixed precision) */
    void *flat_g;          /* gradient sums, of element type wdt */
    /* mixed precision: wdt is the type of what the model reads and writes (working copy,
     * gradients, slots, activations); F32 in fp32 training */
    int mp;
    enum zt_dtype wdt;
    void *flat_w;          /* the working copy (mp) */
    size_t flat_bytes[3];  /* bytes of flat_p, flat_g, flat_w */
    int flat_pin[3];       /* each page-locked for the GPUs (zt_host_pin) */
    int64_t work_n;
    struct zt_block_ref *wblk; /* working-copy blocks in flat order (pblk in fp32 training) */
    /* fp16 loss scaling (DeepSpeed's DynamicLossScaler, or a static scale) and the optimizer
     * steps applied (a skipped step moves neither Adam's step count nor the LR schedule) */
    struct zt_scaler {
        double scale;
        int64_t cur_iter, last_overflow_iter;
        int cur_hysteresis;
    } sc;
    int64_t applied, skipped;
    int updating;          /* step_end submitted an update that step_wait has not counted */
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
    int64_t home_n, ghome_n; /* elements of flat_p and flat_g on this rank */
    /* slots (stage 3 values, stage >= 2 gradients), one pool per parameter shape */
    struct zt_pool *ppool, *gpool;
    int ncls;
    uint64_t clock;
    int cur_layer, cur_nlayer, cur_mb; /* of the model's latest zt_engine_opts: tags gathers */
    enum zt_prio_class cur_class;      /* and its class: whether a gather serves a backward */
    /* stage 3: the persistent parameters' blocks, all-gathered after the optimizer */
    struct zt_block_ref *prefs;
    int *powner, npb;
    /* NVMe offload: each local group is cut into swap units of at most unit_elems elements
     * (group-relative ranges; large row blocks span several units). Optimizer state: file A,
     * per unit [m | v]; stage-3 parameter shards: file B, per local group [w] (a unit is a 4 KiB
     * aligned range of it); each part padded to 4 KiB. nbuf slot buffers hold the units being
     * swapped (slot k: bm/bv/bw tensors of one block each, unit_elems elements) */
    int opt_nvme, par_nvme;
    int inf;               /* mixed precision with parameters on NVMe: file A's units hold the
                            * fp32 master weights too ([m | v | w]), file B the 16-bit copy */
    int swap_on;           /* holds a reference to the swap I/O service (zt_swap_init) */
    struct zt_swapdir dirA, dirB;
    struct zt_swapfile fA, fB;
    int64_t *goffB;        /* [local groups] byte offset in file B */
    struct zt_unit { int li; int64_t lo, hi, offA; } *units; /* [nunits], in flat order */
    int nunits;
    int *ufirst;           /* [local groups + 1] first unit of each local group */
    int64_t unit_elems;
    int *blk_group;        /* [nb] local group of each block, -1 when not this rank's */
    int nbuf;
    int64_t buf_elems;     /* elements of one part of a slot buffer (the largest unit) */
    void **bufmem;
    int64_t bufmem_bytes;  /* bytes of each bufmem[k] */
    char *bufpin;          /* [nbuf] bufmem[k] page-locked for the GPUs (zt_host_pin) */
    zt_tensor_t *bm, *bv, *bw;
    zt_tensor_t *bh;       /* inf: each slot's 16-bit copy of its unit (swapped to file B) */
    zt_tensor_t fordA, fordB, pipe; /* file-order blocks (one per unit), pipeline token */
    int64_t nvme_bytes;    /* both files */
    struct save_job *save; /* the shard being written in the background, or NULL */
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

/* advance s past the draws of fill_normal(x, n, ., s) without making them (splitmix64's state
 * moves by one constant per draw; Box-Muller draws two per pair of values) */
static void skip_normal(int64_t n, uint64_t *s) {
    *s += (uint64_t)((n + 1) / 2) * 2u * 0x9E3779B97F4A7C15ull;
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

static void offload_free(zt_engine_t e);

void zt_engine_free(zt_engine_t e) {
    if (!e) return;
    if (e->save) zt_engine_save_end(e, NULL); /* its tasks hold blocks freed here */
    zt_runtime_wait_all();
    offload_free(e);
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

static int64_t pad16(int64_t n) { return (n + ZT_ALIGN_ELEMS - 1) / ZT_ALIGN_ELEMS * ZT_ALIGN_ELEMS; }
/* first row of block j of p (zt_tensor_init's even split) */
static int64_t blk_row0(const struct zt_param *p, int j) { return p->rows * j / p->nblk; }
static int64_t own_elems(const struct zt_param *p) {
    return (blk_row0(p, p->own1) - blk_row0(p, p->own0)) * p->cols;
}
/* p's value storage is only its own blocks (stage 3, not persistent) */
static int partial_home(const struct zt_engine *e, const struct zt_param *p) {
    return e->stage >= 3 && !p->persistent;
}
static int partial_ghome(const struct zt_engine *e) { return e->stage >= 2; }
/* stage 1 (with reduce_scatter, more than one rank): ghome is whole, but after the reduction
 * only the rank's own blocks hold the sums (reduce_bucket) */
static int scattered_sums(const struct zt_engine *e) {
    return e->stage == 1 && e->size > 1 && e->cfg.reduce_scatter;
}
/* the fp32 values are only this rank's blocks: stage 3 (not persistent), and in mixed precision
 * every stage >= 1 (the master weights live with the optimizer state, DeepSpeed's layout) */
static int partial_master(const struct zt_engine *e, const struct zt_param *p) {
    return e->mp ? e->stage >= 1 : partial_home(e, p);
}
/* the blocks the model reads and the optimizer's all-gathers send: the working copy (mp) */
static zt_tensor_t work_of(const struct zt_param *p) { return p->work ? p->work : p->home; }

/* block j of p in its storage t, which holds all of p's blocks or (partial) only its own; a
 * block of another rank's has no tensor. off: its offset in the flat layout */
static struct zt_block_ref home_ref(const struct zt_param *p, zt_tensor_t t, int partial, int j,
                                    int64_t off) {
    if (!partial) return (struct zt_block_ref){t, j, off};
    int mine = j >= p->own0 && j < p->own1;
    return (struct zt_block_ref){mine ? t : NULL, j - p->own0, off};
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

static int64_t pool_bytes(const struct zt_pool *pools, int n) {
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
static enum zt_status make_pools(zt_engine_t e) {
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

/* ---------------------------------------------------------------------------------------------
 * NVMe offload: swap files and buffers */
static int64_t pad4k(int64_t bytes) { return (bytes + 4095) / 4096 * 4096; }
static int64_t group_elems(const struct zt_engine *e, int g) {
    return e->babs[e->groups[g].first + e->groups[g].n] - e->babs[e->groups[g].first];
}
/* bytes of an element in file B: the parameters' fp32 values, or (inf) their 16-bit copy */
static int64_t esB(const struct zt_engine *e) { return e->inf ? 2 : 4; }

/* byte offset of block b (of this rank) in file B */
static int64_t fileB_off(const struct zt_engine *e, int b) {
    return e->goffB[e->blk_group[b]] + e->pblk[b].off * esB(e); /* off: element in its group */
}

/* elements of parameter block b (its padding excluded) */
static int64_t blk_elems(const struct zt_engine *e, int b) {
    return zt_tensor_blk_rows(e->gblk[b].t, e->gblk[b].blk) * zt_tensor_cols(e->gblk[b].t);
}

/* byte length of unit u's part in a file (4 KiB padded; the last unit of a group ends at the
 * group's padded end) */
static int64_t unit_bytes(const struct zt_engine *e, int u) {
    return pad4k((e->units[u].hi - e->units[u].lo) * 4);
}

/* byte offset of unit u's values in file B (its range of its group's part), and their bytes */
static int64_t unitB_off(const struct zt_engine *e, int u) {
    return e->goffB[e->units[u].li] + e->units[u].lo * esB(e);
}
static int64_t unitB_bytes(const struct zt_engine *e, int u) {
    return pad4k((e->units[u].hi - e->units[u].lo) * esB(e));
}

/* the unit of local group li that holds the group's element x */
static int unit_at(const struct zt_engine *e, int li, int64_t x) {
    return e->ufirst[li] + (int)(x / e->unit_elems);
}

/* elements [s0, s1) of local group li's exp_avg (part 0), exp_avg_sq (1) or (inf) fp32 master
 * weights (2) from file A into buf, unit by unit */
static enum zt_status fileA_range(zt_engine_t e, int li, int64_t s0, int64_t s1, int part,
                                  float *buf) {
    for (int u = unit_at(e, li, s0); u < e->ufirst[li + 1] && e->units[u].lo < s1; u++) {
        const struct zt_unit *un = &e->units[u];
        int64_t x0 = s0 > un->lo ? s0 : un->lo, x1 = s1 < un->hi ? s1 : un->hi;
        ZT_CHECK(zt_swap_read_sync(&e->fA, buf + (x0 - s0), (x1 - x0) * 4,
                                   un->offA + part * unit_bytes(e, u) + (x0 - un->lo) * 4));
    }
    return ZT_OK;
}

/* the fp32 values of offloaded block b (this rank's): file B, or (inf) the masters in file A */
static enum zt_status offloaded_values(zt_engine_t e, int b, float *dst) {
    const int64_t n = blk_elems(e, b);
    if (e->inf) return fileA_range(e, e->blk_group[b], e->pblk[b].off, e->pblk[b].off + n, 2, dst);
    return zt_swap_read_sync(&e->fB, dst, n * 4, fileB_off(e, b));
}

/* elements [x0, x1) of p's values or moments from a checkpoint (io/zt_ckpt.h) */
static enum zt_status ck_elems(struct zt_shard_set *s, const struct zt_param *p, int role,
                               int64_t x0, int64_t x1, float *dst) {
    return zt_shard_set_read(s, p->name, role, p->cols, x0, x1, dst);
}

/* unit u's values, staged in fp32 (padding zero), to its swap file(s): file B, or (inf) file A's
 * master part and file B's 16-bit copy (through stage16) */
static enum zt_status put_unit(zt_engine_t e, int u, const float *stage, void *stage16) {
    if (!e->inf) return zt_swap_write_sync(&e->fB, stage, unit_bytes(e, u), unitB_off(e, u));
    const int64_t len = unit_bytes(e, u);
    ZT_CHECK(zt_swap_write_sync(&e->fA, stage, len, e->units[u].offA + 2 * len));
    memset(stage16, 0, (size_t)unitB_bytes(e, u));
    zt_dtype_from_f32(e->wdt, stage16, stage, (size_t)(e->units[u].hi - e->units[u].lo));
    return zt_swap_write_sync(&e->fB, stage16, unitB_bytes(e, u), unitB_off(e, u));
}

/* Write this rank's blocks of the offloaded parameters to file B (and, inf, their fp32 master
 * weights to file A), unit by unit through one aligned staging buffer: values from st, from
 * checkpoint shards ck, or (both NULL) the initializer's stream from rng, the state finalize
 * started from (finalize skipped the offloaded parameters' draws; here they are drawn and every
 * other parameter's are skipped, so each value is generated once). */
static enum zt_status write_offloaded(zt_engine_t e, struct zt_safetensors *st,
                                      struct zt_shard_set *ck, uint64_t rng) {
    int64_t maxn = 0;
    for (int i = 0; i < e->np; i++)
        if (e->params[i]->rows * e->params[i]->cols > maxn)
            maxn = e->params[i]->rows * e->params[i]->cols;
    float *tmp = malloc((size_t)maxn * sizeof(float));
    void *stage = NULL, *stage16 = NULL;
    const size_t sb = (size_t)(e->buf_elems > 0 ? e->buf_elems : 1) * 4;
    if (!tmp || !(stage = zt_aio_alloc(sb)) || !(stage16 = zt_aio_alloc(sb))) {
        free(tmp);
        free(stage);
        return zt_error_set(ZT_ERR_NOMEM, "engine: out of memory for the parameter swap file");
    }
    enum zt_status rc = ZT_OK;
    int cur = -1; /* unit in the staging buffer */
    for (int i = 0; i < e->np && rc == ZT_OK; i++) {
        struct zt_param *p = e->params[i];
        int64_t n = p->rows * p->cols;
        int need = p->offl && p->own1 > p->own0;
        if (!st && !ck && p->init == ZT_INIT_NORMAL) {
            if (need) fill_normal(tmp, n, p->std, &rng);
            else skip_normal(n, &rng);
        }
        if (!need) continue;
        if (st) rc = zt_st_read_f32(st, p->name, p->ndim, p->shape, tmp);
        else if (ck) /* its own rows only */
            rc = ck_elems(ck, p, ZT_ROLE_PARAM, blk_row0(p, p->own0) * p->cols,
                          blk_row0(p, p->own1) * p->cols, tmp + blk_row0(p, p->own0) * p->cols);
        else if (p->init != ZT_INIT_NORMAL)
            for (int64_t k = 0; k < n; k++) tmp[k] = p->init == ZT_INIT_ONE ? 1.0f : 0.0f;
        for (int j = p->own0; j < p->own1 && rc == ZT_OK; j++) {
            int b = p->first_blk + j, li = e->blk_group[b];
            int64_t s0 = e->pblk[b].off, s1 = s0 + blk_elems(e, b);
            const float *src = tmp + blk_row0(p, j) * p->cols;
            for (int u = unit_at(e, li, s0);
                 u < e->ufirst[li + 1] && e->units[u].lo < s1 && rc == ZT_OK; u++) {
                const struct zt_unit *un = &e->units[u];
                if (u != cur) {
                    if (cur >= 0) rc = put_unit(e, cur, stage, stage16);
                    cur = u;
                    memset(stage, 0, (size_t)unit_bytes(e, u));
                }
                int64_t x0 = s0 > un->lo ? s0 : un->lo, x1 = s1 < un->hi ? s1 : un->hi;
                memcpy((float *)stage + (x0 - un->lo), src + (x0 - s0),
                       (size_t)(x1 - x0) * sizeof(float));
            }
        }
    }
    if (rc == ZT_OK && cur >= 0) rc = put_unit(e, cur, stage, stage16);
    free(tmp);
    free(stage);
    free(stage16);
    return rc;
}

/* the aio engine's settings (the config's aio section, ZT_AIO_ENGINE) */
static enum zt_status aio_cfg(const struct zt_engine *e, struct zt_aio_cfg *ac) {
    const struct zt_config *c = &e->cfg;
    static const char *const engines[] = {"auto", "io_uring", "threads", NULL};
    const char *eng = "auto";
    ZT_CHECK(zt_knob_str("ZT_AIO_ENGINE", engines, &eng));
    *ac = (struct zt_aio_cfg){.block_size = c->aio_block_size, .queue_depth = c->aio_queue_depth,
                             .single_submit = c->aio_single_submit,
                             .overlap_events = c->aio_overlap_events,
                             .engine = strcmp(eng, "io_uring") == 0 ? ZT_AIO_URING
                                     : strcmp(eng, "threads") == 0  ? ZT_AIO_THREADS
                                                                    : ZT_AIO_AUTO};
    return ZT_OK;
}

/* the swap I/O service (its threads serve swaps and checkpoint writes), once per engine */
static enum zt_status swap_start(zt_engine_t e) {
    if (e->swap_on) return ZT_OK;
    struct zt_aio_cfg ac;
    ZT_CHECK(aio_cfg(e, &ac));
    ZT_CHECK(zt_swap_init(&ac, e->cfg.aio_thread_count));
    e->swap_on = 1;
    return ZT_OK;
}

static enum zt_status offload_init(zt_engine_t e, uint64_t rng0) {
    const struct zt_config *c = &e->cfg;
    if (c->offload_optimizer.device == ZT_OFFLOAD_CPU || c->offload_param.device == ZT_OFFLOAD_CPU)
        ZT_LOG_I("offload \"cpu\": %s stays in host memory, where this build's workers compute "
                 "(no GPU: the same placement as \"none\")",
                 c->offload_param.device == ZT_OFFLOAD_CPU ? "the model state" : "optimizer state");
    e->opt_nvme = c->offload_optimizer.device == ZT_OFFLOAD_NVME;
    e->par_nvme = c->offload_param.device == ZT_OFFLOAD_NVME;
    if (!e->opt_nvme && !e->par_nvme) return ZT_OK;
    if (e->par_nvme && !e->opt_nvme)
        return zt_error_set(ZT_ERR_CONFIG, "config %s: zero_optimization.offload_param nvme needs "
                            "offload_optimizer nvme too (the optimizer updates the swapped "
                            "parameter shards in its swap buffers)", c->path);
    e->inf = e->mp && e->par_nvme;
    const int nl = e->g1 - e->g0;
    /* swap units: group-relative ranges of at most unit_elems elements (a multiple of 1024, or
     * of 2048 with 16-bit parameters in file B, so that every unit starts 4 KiB aligned in its
     * files) */
    const int64_t ua = e->inf ? 2048 : 1024;
    e->unit_elems = (e->group_elems + ua - 1) / ua * ua;
    int nu = 0;
    for (int li = 0; li < nl; li++)
        nu += (int)((group_elems(e, e->g0 + li) + e->unit_elems - 1) / e->unit_elems);
    e->goffB = calloc((size_t)nl + 1, sizeof *e->goffB);
    e->ufirst = calloc((size_t)nl + 1, sizeof *e->ufirst);
    e->units = calloc((size_t)nu + 1, sizeof *e->units);
    if (!e->goffB || !e->ufirst || !e->units)
        return zt_error_set(ZT_ERR_NOMEM, "engine: out of memory");
    int64_t maxu = 1024, offA = 0, offB = 0;
    for (int li = 0; li < nl; li++) {
        int64_t ge = group_elems(e, e->g0 + li);
        e->goffB[li] = offB;
        if (e->par_nvme) offB += pad4k(ge * esB(e));
        e->ufirst[li] = e->nunits;
        for (int64_t lo = 0; lo < ge; lo += e->unit_elems) {
            struct zt_unit *un = &e->units[e->nunits++];
            *un = (struct zt_unit){li, lo, lo + e->unit_elems < ge ? lo + e->unit_elems : ge, offA};
            offA += (2 + e->inf) * unit_bytes(e, e->nunits - 1);
            if (un->hi - un->lo > maxu) maxu = un->hi - un->lo;
        }
    }
    e->ufirst[nl] = e->nunits;
    const int64_t maxg = pad4k(maxu * 4); /* bytes of one part of a slot buffer */
    ZT_CHECK(swap_start(e));
    int same = strcmp(c->offload_optimizer.nvme_path, c->offload_param.nvme_path) == 0;
    ZT_CHECK(zt_swapdir_open(&e->dirA, c->offload_optimizer.nvme_path,
                             "zero_optimization.offload_optimizer.nvme_path",
                             offA + (e->par_nvme && same ? offB : 0)));
    ZT_CHECK(zt_swapdir_file(&e->dirA, "optim.swp", offA > 0 ? offA : 4096, &e->fA));
    if (e->par_nvme) {
        struct zt_swapdir *d = &e->dirA;
        if (!same) {
            ZT_CHECK(zt_swapdir_open(&e->dirB, c->offload_param.nvme_path,
                                     "zero_optimization.offload_param.nvme_path", offB));
            d = &e->dirB;
        }
        ZT_CHECK(zt_swapdir_file(d, "params.swp", offB > 0 ? offB : 4096, &e->fB));
    }
    e->nvme_bytes = offA + offB;
    /* slot buffers: buffer_count units in flight, each [m | v (| w) (| 16-bit w)] of the
     * largest unit; "auto" (0): as many as ZT_SWAP_BUFFER_MEM holds (at most 1/8 of
     * ZT_HOST_MEM_LIMIT), at least 4 (DeepSpeed's default count) */
    const int parts = 2 + e->par_nvme;
    const int64_t hbytes = e->inf ? pad4k(maxg / 2) : 0; /* the 16-bit copy's part */
    const int64_t slot_bytes = parts * maxg + hbytes;
    int64_t nbuf = c->offload_optimizer.buffer_count;
    if (nbuf == 0) {
        int64_t mem = 0, limit = 0;
        ZT_CHECK(zt_knob_size("ZT_SWAP_BUFFER_MEM", &mem));
        ZT_CHECK(zt_knob_size("ZT_HOST_MEM_LIMIT", &limit));
        if (limit > 0 && limit / 8 < mem) mem = limit / 8;
        nbuf = mem / slot_bytes;
        if (nbuf < 4) nbuf = 4;
    }
    e->nbuf = nbuf < e->nunits ? (int)nbuf : e->nunits;
    e->buf_elems = maxg / 4;
    e->bufmem = calloc((size_t)e->nbuf + 1, sizeof *e->bufmem);
    e->bm = calloc((size_t)e->nbuf + 1, sizeof *e->bm);
    e->bv = calloc((size_t)e->nbuf + 1, sizeof *e->bv);
    e->bw = calloc((size_t)e->nbuf + 1, sizeof *e->bw);
    e->bh = calloc((size_t)e->nbuf + 1, sizeof *e->bh);
    e->bufpin = calloc((size_t)e->nbuf + 1, 1);
    e->bufmem_bytes = slot_bytes;
    if (!e->bufmem || !e->bm || !e->bv || !e->bw || !e->bh || !e->bufpin)
        return zt_error_set(ZT_ERR_NOMEM, "engine: out of memory");
    for (int k = 0; k < e->nbuf; k++) {
        if (!(e->bufmem[k] = zt_aio_alloc((size_t)slot_bytes)))
            return zt_error_set(ZT_ERR_NOMEM, "engine: cannot allocate %d swap buffers of %.1f "
                                "MiB", e->nbuf, slot_bytes / 1048576.0);
        memset(e->bufmem[k], 0, (size_t)slot_bytes);
        e->bufpin[k] = (char)zt_host_pin(e->bufmem[k], (size_t)slot_bytes);
        char *b = e->bufmem[k];
        ZT_CHECK(zt_tensor_init(&e->bm[k], "swap_exp_avg", b, e->buf_elems, 1, 4, 1, NULL));
        ZT_CHECK(zt_tensor_init(&e->bv[k], "swap_exp_avg_sq", b + maxg, e->buf_elems, 1, 4, 1,
                                NULL));
        if (e->par_nvme)
            ZT_CHECK(zt_tensor_init(&e->bw[k], "swap_params", b + 2 * maxg, e->buf_elems, 1, 4,
                                    1, NULL));
        if (e->inf)
            ZT_CHECK(zt_tensor_init_dtype(&e->bh[k], "swap_params16", b + 3 * maxg, e->buf_elems,
                                          1, e->wdt, 1, NULL));
    }
    if (e->nunits > 0) {
        ZT_CHECK(zt_tensor_init(&e->fordA, "swap_order_optim", NULL, e->nunits, 1, 4, e->nunits,
                                NULL));
        if (e->par_nvme)
            ZT_CHECK(zt_tensor_init(&e->fordB, "swap_order_params", NULL, e->nunits, 1, 4,
                                    e->nunits, NULL));
    }
    if (!c->offload_optimizer.pipeline_read || !c->offload_optimizer.pipeline_write)
        ZT_CHECK(zt_tensor_init(&e->pipe, "swap_pipeline", NULL, 1, 1, 4, 1, NULL));
    if (e->par_nvme) ZT_CHECK(write_offloaded(e, NULL, NULL, rng0));
    ZT_LOG_I("offload: rank %d swaps %.1f MiB of %s through %d buffers%s of %.1f MiB (%s, "
             "%s%s%s)", e->rank, e->nvme_bytes / 1048576.0,
             e->par_nvme ? "optimizer state and parameter shards" : "optimizer state", e->nbuf,
             c->offload_optimizer.buffer_count == 0 ? " (auto)" : "",
             slot_bytes / 1048576.0, zt_swap_engine_name(),
             c->offload_optimizer.pipeline_read ? "reads pipelined" : "reads not pipelined",
             c->offload_optimizer.pipeline_write ? ", writes pipelined" : ", writes not pipelined",
             e->fA.direct ? ", O_DIRECT" : ", buffered");
    return ZT_OK;
}

static void offload_free(zt_engine_t e) {
    if (e->swap_on) zt_swap_wait(); /* nothing still moves into the buffers freed here */
    for (int k = 0; k < e->nbuf; k++) {
        zt_tensor_free(e->bm[k]);
        zt_tensor_free(e->bv[k]);
        zt_tensor_free(e->bw[k]);
        zt_tensor_free(e->bh[k]);
        if (e->bufpin && e->bufpin[k]) zt_host_unpin(e->bufmem[k], (size_t)e->bufmem_bytes);
        free(e->bufmem[k]);
    }
    free(e->bufpin);
    free(e->bm);
    free(e->bv);
    free(e->bw);
    free(e->bh);
    free(e->bufmem);
    zt_tensor_free(e->fordA);
    zt_tensor_free(e->fordB);
    zt_tensor_free(e->pipe);
    if (e->swap_on) zt_swap_free();
    if (e->fA.path[0]) zt_swapfile_close(&e->fA);
    if (e->fB.path[0]) zt_swapfile_close(&e->fB);
    zt_swapdir_close(&e->dirA);
    zt_swapdir_close(&e->dirB);
    free(e->goffB);
    free(e->ufirst);
    free(e->units);
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
            if (p->init == ZT_INIT_NORMAL) skip_normal(n, &e->rng);
        } else {
            for (int64_t k = 0; k < n; k++) tmp[k] = p->init == ZT_INIT_ONE ? 1.0f : 0.0f;
            if (p->init == ZT_INIT_NORMAL) fill_normal(tmp, n, p->std, &e->rng);
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
    ZT_CHECK(make_pools(e));
    if (e->stage >= 3) ZT_CHECK(make_persistent_list(e));
    ZT_CHECK(offload_init(e, rng0));
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
static struct zt_task_opts engine_opts(zt_engine_t e, enum zt_prio_class c) {
    return (struct zt_task_opts){.layer = e->cur_layer, .mb = e->cur_mb, .step = e->step,
                                 .priority = zt_prio(c, e->cur_layer, e->cur_nlayer)};
}

struct zt_task_opts zt_engine_opts(zt_engine_t e, enum zt_prio_class c, int layer, int n_layer,
                                   int mb) {
    e->cur_layer = layer;
    e->cur_nlayer = n_layer;
    e->cur_mb = mb;
    e->cur_class = c;
    return engine_opts(e, c);
}

static int in_backward(zt_engine_t e) {
    return e->cur_class == ZT_PRIO_BACKWARD || e->cur_class == ZT_PRIO_WEIGHT_GRAD;
}

/* ---------------------------------------------------------------------------------------------
 * step */
enum zt_status zt_engine_step_begin(zt_engine_t e, int64_t step) {
    if (!e->finalized) return zt_error_set(ZT_ERR_INVALID, "engine: step before finalize");
    e->step = step;
    /* the schedule moves with the updates applied (a skipped fp16 step moves nothing) */
    e->lr = zt_config_lr(&e->cfg, e->applied + 1);
    struct zt_task_opts o = zt_engine_opts(e, ZT_PRIO_DEFAULT, -1, 0, -1);
    for (int i = 0; i < e->np; i++) {
        struct zt_param *p = e->params[i];
        if (p->ghome) ZT_CHECK(zt_task_zero(&o, p->ghome));
        p->ready = p->done = 0;
    }
    for (int k = 0; k < e->nrb; k++) {
        e->rbuckets[k].pending = e->rbuckets[k].nparams;
        e->rbuckets[k].submitted = 0;
    }
    return ZT_OK;
}

/* parts of the blocks [b0, b1) that each rank owns, as block ranges relative to b0 */
static const int64_t *bucket_parts(zt_engine_t e, int b0, int b1) {
    for (int r = 0; r < e->size; r++) {
        int s0 = e->shard_blk[r], s1 = e->shard_blk[r + 1];
        s0 = s0 < b0 ? b0 : s0 > b1 ? b1 : s0;
        s1 = s1 < b0 ? b0 : s1 > b1 ? b1 : s1;
        e->part[2 * r] = s0 - b0;
        e->part[2 * r + 1] = s1 - b0;
    }
    return e->part;
}

/* all-gather every rank's part of refs (parameter or gradient blocks), bucket by bucket */
static enum zt_status allgather_buckets(zt_engine_t e, const struct zt_task_opts *o,
                                        const struct zt_bucket *bks, int n,
                                        const struct zt_block_ref *refs) {
    for (int k = 0; k < n; k++)
        ZT_CHECK(zt_task_comm_allgather(o, &refs[bks[k].b0], bks[k].b1 - bks[k].b0,
                                        bucket_parts(e, bks[k].b0, bks[k].b1), NULL, 0,
                                        sizeof(float), e->token));
    return ZT_OK;
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
    struct zt_task_opts o = engine_opts(e, ZT_PRIO_WEIGHT_GRAD);
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
    const int64_t *part = bucket_parts(e, p->first_blk, p->first_blk + p->nblk);
    /* the next layer's parameters: ahead of the compute of the layer before it */
    struct zt_task_opts o =
        engine_opts(e, in_backward(e) ? ZT_PRIO_PREFETCH_BWD : ZT_PRIO_PREFETCH_FWD);
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
static void drop_gathered(zt_engine_t e) {
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

static enum zt_status reduce_bucket(zt_engine_t e, int k) {
    struct zt_bucket *bk = &e->rbuckets[k];
    bk->submitted = 1;
    /* the reductions the optimizer waits on last: those of the first layers' buckets (their
     * gradients are the backward's last) and those left to the step's end */
    struct zt_task_opts o =
        engine_opts(e, e->cur_class == ZT_PRIO_OPTIMIZER || e->cur_layer <= 0
                           ? ZT_PRIO_REDUCE_LAST : ZT_PRIO_REDUCE);
    const int n = bk->b1 - bk->b0;
    if (e->stage < 2) {
        const int64_t *part = bucket_parts(e, bk->b0, bk->b1);
        /* stage 1: a rank's AdamW reads only its part of the sums, and the norm is gathered
         * as per-group sums of squares, so the other parts need not come back: half the
         * traffic of an all-reduce (the same sums, bit for bit). reduce_scatter false keeps
         * the all-reduce. */
        if (scattered_sums(e))
            return zt_task_comm_reduce_scatter(&o, &e->gblk[bk->b0], n, part, NULL, 0,
                                               e->token);
        return zt_task_comm_allreduce(&o, &e->gblk[bk->b0], n, part, NULL, 0, e->token);
    }
    /* stage >= 2: the bucket's gradient slots (a parameter without one contributes zeros), summed
     * over the ranks into this rank's part of the gradient sums; then the slots are free */
    struct zt_block_ref *refs = calloc((size_t)n, sizeof *refs);
    if (!refs) return zt_error_set(ZT_ERR_NOMEM, "engine: out of memory");
    enum zt_status rc = ZT_OK;
    for (int i = bk->i0; i < bk->i1 && rc == ZT_OK; i++) {
        struct zt_param *p = e->params[i];
        if (!zt_param_grad(p)) rc = zt_error_last_code();
        for (int j = 0; j < p->nblk && rc == ZT_OK; j++)
            refs[p->first_blk - bk->b0 + j] = (struct zt_block_ref){p->grad, j, 0};
    }
    if (rc == ZT_OK) {
        const int64_t *part = bucket_parts(e, bk->b0, bk->b1);
        const struct zt_block_ref *acc = &e->gblk[bk->b0 + part[2 * e->rank]];
        int nacc = (int)(part[2 * e->rank + 1] - part[2 * e->rank]);
        rc = e->cfg.reduce_scatter
                 ? zt_task_comm_reduce_scatter(&o, refs, n, part, acc, nacc, e->token)
                 : zt_task_comm_allreduce(&o, refs, n, part, acc, nacc, e->token);
    }
    free(refs);
    for (int i = bk->i0; i < bk->i1; i++) {
        struct zt_param *p = e->params[i];
        if (p->gslot >= 0) e->gpool[p->cls].who[p->gslot] = NULL;
        p->gslot = -1;
        p->grad = NULL;
        p->done = 0;
    }
    bk->pending = bk->nparams;
    return rc;
}

enum zt_status zt_engine_grad_ready(zt_engine_t e, zt_param_t p) {
    struct zt_bucket *bk = &e->rbuckets[p->bucket];
    if (e->stage >= 2) { /* every micro-batch: reduce the bucket once all of it is declared */
        if (p->done) return ZT_OK;
        p->done = 1;
        if (--bk->pending == 0 && e->cfg.overlap_comm) return reduce_bucket(e, p->bucket);
        return ZT_OK;
    }
    /* stages 0-1: the sums are final after the last micro-batch */
    if (++p->ready != e->cfg.grad_accum) return ZT_OK;
    if (--bk->pending == 0 && e->size > 1 && e->cfg.overlap_comm) return reduce_bucket(e, p->bucket);
    return ZT_OK;
}

/* stage 3: all-gather the persistent parameters' blocks after the optimizer, in buckets of at
 * most allgather_bucket_size elements (whole blocks) */
static enum zt_status allgather_persistent(zt_engine_t e, const struct zt_task_opts *o) {
    for (int b0 = 0; b0 < e->npb;) {
        int b1 = b0;
        int64_t el = 0;
        do {
            el += zt_tensor_blk_rows(e->prefs[b1].t, e->prefs[b1].blk) *
                  zt_tensor_cols(e->prefs[b1].t);
            b1++;
        } while (b1 < e->npb &&
                 el + zt_tensor_blk_rows(e->prefs[b1].t, e->prefs[b1].blk) *
                          zt_tensor_cols(e->prefs[b1].t) <= e->cfg.allgather_bucket_size);
        for (int r = 0, b = b0; r < e->size; r++) {
            e->part[2 * r] = b - b0;
            while (b < b1 && e->powner[b] == r) b++;
            e->part[2 * r + 1] = b - b0;
        }
        ZT_CHECK(zt_task_comm_allgather(o, &e->prefs[b0], b1 - b0, e->part, NULL, 0,
                                        sizeof(float), e->token));
        b0 = b1;
    }
    return ZT_OK;
}

/* AdamW with the optimizer state (and stage-3 parameter shards) on NVMe: per swap unit, swap
 * its state into slot buffer k = unit mod buffer_count, update the unit's window of its group,
 * swap it out. The slot's reuse waits for the swap-out of its previous unit (write after read),
 * so buffer_count units are in flight: the reads of the next units and the writes of the
 * previous ones overlap the update, and the first units' reads start as soon as the previous
 * step's writes let them (under this step's forward). pipeline_read/pipeline_write false
 * serialize reads/writes with the updates (a token). */
static enum zt_status adamw_swapped(zt_engine_t e, const struct zt_task_opts *o,
                                    const struct zt_adamw_hparams *hp, zt_tensor_t coef) {
    const struct zt_offload_cfg *oc = &e->cfg.offload_optimizer;
    zt_tensor_t rpipe = oc->pipeline_read ? NULL : e->pipe;
    zt_tensor_t wpipe = oc->pipeline_write ? NULL : e->pipe;
    struct zt_task_opts ord = *o; /* reads ahead of the updates that wait on them */
    ord.priority = zt_prio(ZT_PRIO_OPT_READ, -1, 0);
    for (int i = 0; i < e->nunits; i++) {
        /* with clipping every update waits for the global norm, and the next forward wants the
         * parameters in flat order; without, a unit is ready once its gradients are final,
         * which the backward makes them in reverse flat order */
        int u = coef ? i : e->nunits - 1 - i;
        const struct zt_unit *un = &e->units[u];
        const struct zt_group *gr = &e->groups[e->g0 + un->li];
        int k = i % e->nbuf;
        int64_t len = unit_bytes(e, u);
        /* file A: [m | v], or (inf) [m | v | fp32 master]; file B: the fp32 values, or (inf)
         * the 16-bit copy the update writes (nothing to read from it) */
        struct zt_swap_seg mv[3] = {{e->bm[k], 0, 0, len, un->offA},
                                    {e->bv[k], 0, 0, len, un->offA + len},
                                    {e->bw[k], 0, 0, len, un->offA + 2 * len}};
        const int nA = 2 + e->inf;
        struct zt_swap_seg w = {e->inf ? e->bh[k] : e->bw[k], 0, 0,
                                e->par_nvme ? unitB_bytes(e, u) : 0,
                                e->par_nvme ? unitB_off(e, u) : 0};
        struct zt_block_ref oa = {e->fordA, u, 0}, ob = {e->fordB, u, 0};
        /* the group's blocks with elements in the unit (padding after a block excluded) */
        int b0 = gr->first, b1 = gr->first + gr->n;
        while (b0 < b1 && e->pblk[b0].off + blk_elems(e, b0) <= un->lo) b0++;
        while (b1 > b0 && e->pblk[b1 - 1].off >= un->hi) b1--;
        if (b1 == b0) continue; /* padding only */
        ZT_CHECK(zt_task_swap(&ord, 0, &e->fA, mv, nA, &oa, 1, rpipe));
        if (e->par_nvme && !e->inf)
            ZT_CHECK(zt_task_swap(&ord, 0, &e->fB, &w, 1, &ob, 1, rpipe));
        ZT_CHECK(zt_task_adamw_w(o, &e->pblk[b0], &e->gblk[b0], b1 - b0,
                                 e->par_nvme ? e->bw[k] : NULL, e->bm[k], e->bv[k], 0, un->lo,
                                 coef, hp, e->pipe, e->mp ? &e->wblk[b0] : NULL,
                                 e->inf ? e->bh[k] : NULL));
        ZT_CHECK(zt_task_swap(o, 1, &e->fA, mv, nA, &oa, 1, wpipe));
        if (e->par_nvme) ZT_CHECK(zt_task_swap(o, 1, &e->fB, &w, 1, &ob, 1, wpipe));
    }
    return ZT_OK;
}

enum zt_status zt_engine_step_end(zt_engine_t e) {
    struct zt_task_opts o = zt_engine_opts(e, ZT_PRIO_OPTIMIZER, -1, 0, -1);
    /* the gradient norm: every update waits on it (with clipping) */
    struct zt_task_opts onorm = engine_opts(e, ZT_PRIO_REDUCE_LAST);
    /* the updated parameters to every rank: the next forward's first reads */
    struct zt_task_opts ogather = engine_opts(e, ZT_PRIO_PREFETCH_FWD);
    if (e->stage >= 2) { /* buckets with gradients not reduced yet, in bucket order */
        for (int k = 0; k < e->nrb; k++) {
            int left = 0;
            for (int i = e->rbuckets[k].i0; i < e->rbuckets[k].i1; i++)
                left |= e->params[i]->grad != NULL;
            if (left) ZT_CHECK(reduce_bucket(e, k));
        }
    } else if (e->size > 1) { /* buckets not reduced during the backward, in bucket order */
        for (int k = 0; k < e->nrb; k++)
            if (!e->rbuckets[k].submitted) ZT_CHECK(reduce_bucket(e, k));
    }
    for (int g = e->g0; g < e->g1; g++)
        ZT_CHECK(zt_task_grad_sumsq(&onorm, e->partial, g, &e->gblk[e->groups[g].first],
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
        enum zt_status rc = zt_task_comm_allgather(&onorm, refs, e->ng, e->part, NULL, 0,
                                                   sizeof(double), e->token);
        free(refs);
        ZT_CHECK(rc);
    }
    const int fp16 = e->cfg.precision == ZT_PREC_FP16;
    ZT_CHECK(zt_task_grad_clip(&onorm, e->clip, e->partial, e->cfg.gradient_clipping,
                               (float)e->sc.scale));
    /* without clipping (and without fp16's overflow check) the updates need no global norm
     * (still computed, for the log): each group's AdamW (and its swaps) waits only for its own
     * gradients */
    zt_tensor_t coef = e->cfg.gradient_clipping > 0 || fp16 ? e->clip : NULL;
    struct zt_adamw_hparams hp = {
        .lr = e->lr, .beta1 = e->cfg.beta1, .beta2 = e->cfg.beta2, .eps = e->cfg.eps,
        .weight_decay = e->cfg.weight_decay, .t = e->applied + 1,
        .decoupled = e->cfg.optim == ZT_OPTIM_ADAMW || e->cfg.adam_w_mode,
        .skip_nonfinite = fp16};
    if (e->opt_nvme) {
        ZT_CHECK(adamw_swapped(e, &o, &hp, coef));
    } else {
        for (int g = e->g0; g < e->g1; g++)
            ZT_CHECK(zt_task_adamw(&o, &e->pblk[e->groups[g].first],
                                   &e->gblk[e->groups[g].first], e->groups[g].n, e->m, e->v,
                                   g - e->g0, coef, &hp,
                                   e->mp ? &e->wblk[e->groups[g].first] : NULL));
    }
    if (e->stage >= 3) { /* gathered values are stale; persistent ones to every rank */
        drop_gathered(e);
        if (e->size > 1) ZT_CHECK(allgather_persistent(e, &ogather));
    } else if (e->size > 1 && e->stage >= 1) { /* updated shards to every rank */
        ZT_CHECK(allgather_buckets(e, &ogather, e->gbuckets, e->ngb, e->wblk));
    }
    e->updating = 1;
    return ZT_OK;
}

/* DeepSpeed's DynamicLossScaler.update_scale (deepspeed/runtime/fp16/loss_scaler.py), after each
 * step, with its defaults for what the config cannot set: scale_factor 2 and
 * raise_error_at_min_scale (an overflow at the minimum scale ends the run). A static scale
 * (fp16.loss_scale > 0) never changes; its overflowing steps are skipped all the same. */
static enum zt_status scaler_update(zt_engine_t e, int overflow) {
    struct zt_scaler *sc = &e->sc;
    const struct zt_config *c = &e->cfg;
    if (c->loss_scale > 0) return ZT_OK;
    if (overflow) {
        if (c->hysteresis == 1 || sc->cur_hysteresis == 1) {
            if (sc->scale == c->min_loss_scale)
                return zt_error_set(ZT_ERR_NUMERIC, "fp16: the gradients of step %lld overflow "
                                    "at the minimum loss scale %g (fp16.min_loss_scale); the "
                                    "loss scale cannot go lower (DeepSpeed stops here too)",
                                    (long long)e->step, c->min_loss_scale);
            double next = sc->scale / 2 > c->min_loss_scale ? sc->scale / 2 : c->min_loss_scale;
            if (e->rank == 0)
                ZT_LOG_I("fp16: overflow in step %lld, skipped; loss scale %g -> %g",
                         (long long)e->step, sc->scale, next);
            sc->scale = next;
        } else {
            if (e->rank == 0)
                ZT_LOG_I("fp16: overflow in step %lld, skipped; loss scale %g kept (hysteresis "
                         "%d -> %d)", (long long)e->step, sc->scale, sc->cur_hysteresis,
                         sc->cur_hysteresis - 1);
            sc->cur_hysteresis--;
        }
        sc->last_overflow_iter = sc->cur_iter;
    } else {
        if (c->consecutive_hysteresis) sc->cur_hysteresis = c->hysteresis;
        if ((sc->cur_iter - sc->last_overflow_iter) % c->loss_scale_window == 0) {
            if (!c->consecutive_hysteresis) sc->cur_hysteresis = c->hysteresis;
            sc->scale *= 2;
        }
    }
    sc->cur_iter++;
    return ZT_OK;
}

float zt_engine_loss_scale(zt_engine_t e) { return (float)e->sc.scale; }
enum zt_dtype zt_engine_dtype(zt_engine_t e) { return e->wdt; }

void zt_engine_get_train_state(zt_engine_t e, struct zt_train_state *st) {
    *st = (struct zt_train_state){.applied = e->applied, .skipped = e->skipped,
                                  .loss_scale = e->sc.scale, .cur_iter = e->sc.cur_iter,
                                  .last_overflow_iter = e->sc.last_overflow_iter,
                                  .cur_hysteresis = e->sc.cur_hysteresis};
}

void zt_engine_set_train_state(zt_engine_t e, const struct zt_train_state *st) {
    e->applied = st->applied;
    e->skipped = st->skipped;
    e->sc.scale = st->loss_scale;
    e->sc.cur_iter = st->cur_iter;
    e->sc.last_overflow_iter = st->last_overflow_iter;
    e->sc.cur_hysteresis = st->cur_hysteresis;
}

enum zt_status zt_engine_step_wait(zt_engine_t e, struct zt_step_info *info) {
    if (e->opt_nvme) {
        /* the swap-outs (and whatever else remains) run on under the next step's forward: the
         * graph orders a group's next swap-in after its swap-out. A failed swap fails the step
         * after it (or zt_engine_finish). */
        ZT_CHECK(zt_swap_status());
    } else {
        ZT_CHECK(zt_runtime_wait_all());
    }
    ZT_CHECK(zt_tensor_acquire(e->clip, 0));
    const float *clip = zt_tensor_data(e->clip);
    const float norm = clip[1];
    const int overflow = e->cfg.precision == ZT_PREC_FP16 && clip[2] != 0.0f;
    zt_tensor_release(e->clip);
    const double scale = e->sc.scale; /* the scale this step's gradients were computed with */
    if (info) {
        info->step = e->step;
        info->lr = e->lr;
        info->grad_norm = norm;
        info->loss_scale = scale;
        info->skipped = overflow;
    }
    if (!e->updating) return ZT_OK; /* an evaluation: nothing was updated */
    e->updating = 0;
    if (overflow) e->skipped++;
    else e->applied++;
    if (e->cfg.precision == ZT_PREC_FP16) ZT_CHECK(scaler_update(e, overflow));
    return ZT_OK;
}

enum zt_status zt_engine_finish(zt_engine_t e) {
    ZT_CHECK(zt_runtime_wait_all());
    if (e->swap_on) {
        zt_swap_wait(); /* the last swap-outs: no task waits for them */
        ZT_CHECK(zt_swap_status());
    }
    return ZT_OK;
}

/* ---------------------------------------------------------------------------------------------
 * safetensors */

/* p's values from the whole tensor v (fp32): the master blocks this rank keeps, and the working
 * copy rounded (mixed precision). Between steps only. */
static enum zt_status set_values(zt_engine_t e, struct zt_param *p, const float *v) {
    const float *own = v + blk_row0(p, p->own0) * p->cols;
    if (p->home) {
        ZT_CHECK(zt_tensor_acquire(p->home, 1));
        int pm = partial_master(e, p);
        memcpy(zt_tensor_data(p->home), pm ? own : v,
               (size_t)(pm ? own_elems(p) : p->rows * p->cols) * sizeof(float));
        zt_tensor_release(p->home);
    }
    if (p->work) {
        ZT_CHECK(zt_tensor_acquire(p->work, 1));
        int ph = partial_home(e, p);
        zt_dtype_from_f32(e->wdt, zt_tensor_data(p->work), ph ? own : v,
                          (size_t)(ph ? own_elems(p) : p->rows * p->cols));
        zt_tensor_release(p->work);
    }
    return ZT_OK;
}
enum zt_status zt_engine_load_safetensors(zt_engine_t e, const char *path) {
    struct zt_safetensors st;
    ZT_CHECK(zt_st_open(&st, path));
    enum zt_status rc = ZT_OK;
    float *tmp = NULL;
    for (int i = 0; i < e->np && rc == ZT_OK; i++) {
        struct zt_param *p = e->params[i];
        if (partial_master(e, p) || e->mp) { /* read it whole, keep what this rank holds */
            float *t = realloc(tmp, (size_t)(p->rows * p->cols) * sizeof(float));
            if (!t) {
                rc = zt_error_set(ZT_ERR_NOMEM, "safetensors %s: out of memory", path);
                break;
            }
            tmp = t;
            rc = zt_st_read_f32(&st, p->name, p->ndim, p->shape, tmp);
            if (rc == ZT_OK) rc = set_values(e, p, tmp);
            continue;
        }
        rc = zt_tensor_acquire(p->home, 1);
        if (rc != ZT_OK) break;
        rc = zt_st_read_f32(&st, p->name, p->ndim, p->shape, zt_tensor_data(p->home));
        zt_tensor_release(p->home);
    }
    if (rc == ZT_OK && e->par_nvme) { /* offloaded shards go to the swap file */
        rc = zt_runtime_wait_all();
        if (rc == ZT_OK) rc = write_offloaded(e, &st, NULL, 0);
    }
    free(tmp);
    zt_st_close(&st);
    return rc;
}

/* A whole copy of the values (which = 0) or gradient sums (1) on every rank when this rank holds
 * only its blocks of them (stage 3 values, stage >= 2 gradients, stage 1's reduce-scattered
 * sums): each rank copies its blocks
 * into a temporary tensor in the flat layout, then the blocks are all-gathered bucket by bucket.
 * *out is NULL when the rank's own tensors are whole already. */
static enum zt_status consolidate(zt_engine_t e, int which, zt_tensor_t *out) {
    *out = NULL;
    if (which ? e->stage < 2 && !e->mp && !scattered_sums(e)
              : !(e->mp ? e->stage >= 1 : e->stage >= 3))
        return ZT_OK;
    int64_t *rows = calloc((size_t)e->nb, sizeof *rows);
    if (!rows) return zt_error_set(ZT_ERR_NOMEM, "engine: out of memory");
    for (int b = 0; b < e->nb; b++) rows[b] = e->babs[b + 1] - e->babs[b];
    enum zt_status rc = zt_tensor_init(out, which ? "gathered_grads" : "gathered_params", NULL,
                                       e->flat_n, 1, sizeof(float), e->nb, rows);
    free(rows);
    ZT_CHECK(rc);
    if (!which && e->par_nvme) { /* the file is current */
        rc = zt_runtime_wait_all();
        zt_swap_wait();
    }
    if (rc == ZT_OK) rc = zt_tensor_acquire(*out, 1);
    float *dst = zt_tensor_data(*out);
    for (int i = 0; !which && e->par_nvme && i < e->np && rc == ZT_OK; i++) {
        struct zt_param *p = e->params[i]; /* offloaded shards: read from the swap file */
        for (int j = p->own0; p->offl && j < p->own1 && rc == ZT_OK; j++) {
            int b = p->first_blk + j;
            rc = offloaded_values(e, b, dst + e->babs[b]);
        }
    }
    for (int i = 0; i < e->np && rc == ZT_OK; i++) {
        struct zt_param *p = e->params[i];
        zt_tensor_t src = which ? p->ghome : p->home;
        if (!src) continue;
        int whole = which ? !partial_ghome(e) : !partial_master(e, p);
        rc = zt_tensor_acquire(src, 0);
        if (rc != ZT_OK) break;
        int64_t at = p->off + (whole ? 0 : blk_row0(p, p->own0) * p->cols);
        /* gradients in mixed precision: widened (exact) into the fp32 copy */
        zt_dtype_to_f32(zt_tensor_dtype(src), dst + at, zt_tensor_data(src),
                        (size_t)(whole ? p->rows * p->cols : own_elems(p)));
        zt_tensor_release(src);
    }
    if (rc == ZT_OK) zt_tensor_release(*out);
    if (rc == ZT_OK && e->size > 1) { /* the temporary's blocks are the engine's blocks */
        struct zt_block_ref *refs = calloc((size_t)e->nb, sizeof *refs);
        if (!refs) rc = zt_error_set(ZT_ERR_NOMEM, "engine: out of memory");
        for (int b = 0; refs && b < e->nb; b++) refs[b] = (struct zt_block_ref){*out, b, 0};
        struct zt_task_opts o = zt_engine_opts(e, ZT_PRIO_DEFAULT, -1, 0, -1);
        if (rc == ZT_OK) rc = allgather_buckets(e, &o, e->rbuckets, e->nrb, refs);
        free(refs);
    }
    if (rc == ZT_OK) rc = zt_runtime_wait_all();
    if (rc != ZT_OK) {
        zt_tensor_free(*out);
        *out = NULL;
    }
    return rc;
}

static enum zt_status write_tensors(zt_engine_t e, const char *path, int which,
                                    zt_tensor_t whole);

/* Rank 0 writes (after gathering what the ranks hold in parts); the outcome is shared so that
 * all ranks succeed or fail together. */
static enum zt_status save_tensors(zt_engine_t e, const char *path, int which) {
    zt_tensor_t whole = NULL;
    enum zt_status rc = consolidate(e, which, &whole);
    if (rc == ZT_OK && e->rank == 0) rc = write_tensors(e, path, which, whole);
    zt_tensor_free(whole);
    if (e->size > 1) {
        double bad = rc != ZT_OK;
        ZT_CHECK(zt_comm_sum_double(&bad));
        if (bad > 0 && rc == ZT_OK)
            rc = zt_error_set(ZT_ERR_IO, "safetensors %s: rank 0 could not write it", path);
    }
    return rc;
}

static enum zt_status write_tensors(zt_engine_t e, const char *path, int which,
                                    zt_tensor_t whole) {
    struct zt_st_entry *ent = calloc((size_t)e->np, sizeof *ent);
    if (!ent) return zt_error_set(ZT_ERR_NOMEM, "export %s: out of memory", path);
    enum zt_status rc = ZT_OK;
    int acq = 0;
    if (whole) rc = zt_tensor_acquire(whole, 0);
    for (; acq < e->np && rc == ZT_OK; acq++) {
        struct zt_param *p = e->params[acq];
        ent[acq].name = p->name;
        ent[acq].ndim = p->ndim;
        memcpy(ent[acq].shape, p->shape, sizeof(int64_t) * (size_t)p->ndim);
        if (whole) {
            ent[acq].data = (const float *)zt_tensor_data(whole) + p->off;
            continue;
        }
        zt_tensor_t t = which ? p->ghome : p->home;
        rc = zt_tensor_acquire(t, 0);
        if (rc != ZT_OK) break;
        ent[acq].data = zt_tensor_data(t);
    }
    if (rc == ZT_OK) rc = zt_st_write_f32(path, ent, e->np, NULL);
    if (whole) {
        zt_tensor_release(whole);
    } else {
        for (int i = 0; i < acq; i++)
            zt_tensor_release(which ? e->params[i]->ghome : e->params[i]->home);
    }
    free(ent);
    return rc;
}

enum zt_status zt_engine_save_safetensors(zt_engine_t e, const char *path) {
    return save_tensors(e, path, 0);
}

enum zt_status zt_engine_save_grads_safetensors(zt_engine_t e, const char *path) {
    return save_tensors(e, path, 1);
}

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
                rc = offloaded_values(e, b, tmp);
            } else if (e->m) { /* m and v blocks of each value block's group */
                src = (const float *)ptrs[q->mv0 + 2 * k + role - 1] + e->pblk[b].off;
            } else { /* file A */
                rc = fileA_range(e, e->blk_group[b], e->pblk[b].off, e->pblk[b].off + n,
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
    ZT_CHECK(swap_start(e));
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
    if (aio_cfg(e, &ac) == ZT_OK && zt_aio_init(&j->aio, &ac) == ZT_OK &&
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
    if (aio_cfg(e, &ac) == ZT_OK && zt_aio_init(&aio, &ac) == ZT_OK) zt_shard_set_direct(&s, aio);
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
            if (rc == ZT_OK) rc = set_values(e, p, tmp);
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
    if (rc == ZT_OK && e->par_nvme) rc = write_offloaded(e, NULL, &s, 0);
    zt_shard_set_close(&s);
    if (aio) zt_aio_free(aio);
    return rc;
}

void zt_engine_memory(zt_engine_t e, struct zt_engine_mem *m) {
    m->param_window = pool_bytes(e->ppool, e->ncls);
    m->grad_window = pool_bytes(e->gpool, e->ncls);
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
