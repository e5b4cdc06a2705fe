/*
 * graph/engine_impl.h: the engine's private structs and the functions its files share.
 *
 * Layer: graph/. Included only by the engine's own files (engine.c, zero_plan.c, slots.c,
 * step.c, loss_scale.c, offload.c, weights.c, engine_ckpt.c, rng.c); the public API is
 * zt_engine.h.
 */
#ifndef ZT_ENGINE_IMPL_H
#define ZT_ENGINE_IMPL_H

#include <math.h>            /* sqrt, log, cos, ldexp */
#include <stdlib.h>          /* calloc, malloc, free */
#include <string.h>          /* memcpy, memset, strcmp */
#include "zt_aio.h"          /* struct zt_aio_cfg, zt_aio_alloc */
#include "zt_ckpt.h"         /* checkpoint shard files */
#include "zt_comm.h"         /* ranks */
#include "zt_engine.h"       /* the public API */
#include "zt_log.h"          /* ZT_LOG_I */
#include "zt_safetensors.h"  /* zt_st_* */
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
static inline int64_t pad16(int64_t n) { return (n + ZT_ALIGN_ELEMS - 1) / ZT_ALIGN_ELEMS * ZT_ALIGN_ELEMS; }
/* first row of block j of p (zt_tensor_init's even split) */
static inline int64_t blk_row0(const struct zt_param *p, int j) { return p->rows * j / p->nblk; }
static inline int64_t own_elems(const struct zt_param *p) {
    return (blk_row0(p, p->own1) - blk_row0(p, p->own0)) * p->cols;
}
/* p's value storage is only its own blocks (stage 3, not persistent) */
static inline int partial_home(const struct zt_engine *e, const struct zt_param *p) {
    return e->stage >= 3 && !p->persistent;
}
static inline int partial_ghome(const struct zt_engine *e) { return e->stage >= 2; }
/* stage 1 (with reduce_scatter, more than one rank): ghome is whole, but after the reduction
 * only the rank's own blocks hold the sums (reduce_bucket) */
static inline int scattered_sums(const struct zt_engine *e) {
    return e->stage == 1 && e->size > 1 && e->cfg.reduce_scatter;
}
/* the fp32 values are only this rank's blocks: stage 3 (not persistent), and in mixed precision
 * every stage >= 1 (the master weights live with the optimizer state, DeepSpeed's layout) */
static inline int partial_master(const struct zt_engine *e, const struct zt_param *p) {
    return e->mp ? e->stage >= 1 : partial_home(e, p);
}
/* the blocks the model reads and the optimizer's all-gathers send: the working copy (mp) */
static inline zt_tensor_t work_of(const struct zt_param *p) { return p->work ? p->work : p->home; }

/* block j of p in its storage t, which holds all of p's blocks or (partial) only its own; a
 * block of another rank's has no tensor. off: its offset in the flat layout */
static inline struct zt_block_ref home_ref(const struct zt_param *p, zt_tensor_t t, int partial, int j,
                                    int64_t off) {
    if (!partial) return (struct zt_block_ref){t, j, off};
    int mine = j >= p->own0 && j < p->own1;
    return (struct zt_block_ref){mine ? t : NULL, j - p->own0, off};
}
/* ---------------------------------------------------------------------------------------------
 * NVMe offload: swap files and buffers */
static inline int64_t pad4k(int64_t bytes) { return (bytes + 4095) / 4096 * 4096; }
static inline int64_t group_elems(const struct zt_engine *e, int g) {
    return e->babs[e->groups[g].first + e->groups[g].n] - e->babs[e->groups[g].first];
}
/* bytes of an element in file B: the parameters' fp32 values, or (inf) their 16-bit copy */
static inline int64_t esB(const struct zt_engine *e) { return e->inf ? 2 : 4; }

/* byte offset of block b (of this rank) in file B */
static inline int64_t fileB_off(const struct zt_engine *e, int b) {
    return e->goffB[e->blk_group[b]] + e->pblk[b].off * esB(e); /* off: element in its group */
}

/* elements of parameter block b (its padding excluded) */
static inline int64_t blk_elems(const struct zt_engine *e, int b) {
    return zt_tensor_blk_rows(e->gblk[b].t, e->gblk[b].blk) * zt_tensor_cols(e->gblk[b].t);
}

/* byte length of unit u's part in a file (4 KiB padded; the last unit of a group ends at the
 * group's padded end) */
static inline int64_t unit_bytes(const struct zt_engine *e, int u) {
    return pad4k((e->units[u].hi - e->units[u].lo) * 4);
}

/* byte offset of unit u's values in file B (its range of its group's part), and their bytes */
static inline int64_t unitB_off(const struct zt_engine *e, int u) {
    return e->goffB[e->units[u].li] + e->units[u].lo * esB(e);
}
static inline int64_t unitB_bytes(const struct zt_engine *e, int u) {
    return pad4k((e->units[u].hi - e->units[u].lo) * esB(e));
}

/* the unit of local group li that holds the group's element x */
static inline int unit_at(const struct zt_engine *e, int li, int64_t x) {
    return e->ufirst[li] + (int)(x / e->unit_elems);
}

/* elements [x0, x1) of p's values or moments from a checkpoint (io/zt_ckpt.h) */
static inline enum zt_status ck_elems(struct zt_shard_set *s, const struct zt_param *p, int role,
                               int64_t x0, int64_t x1, float *dst) {
    return zt_shard_set_read(s, p->name, role, p->cols, x0, x1, dst);
}


/* rng.c */
void zt_rng_normal(float *x, int64_t n, float std, uint64_t *s);
void zt_rng_skip_normal(int64_t n, uint64_t *s);
/* engine.c */
struct zt_task_opts zt_engine_task_opts(zt_engine_t e, enum zt_prio_class c);
/* slots.c */
enum zt_status zt_slots_init(zt_engine_t e);
int64_t zt_slots_bytes(const struct zt_pool *pools, int n);
void zt_slots_drop_gathered(zt_engine_t e);
/* step.c */
const int64_t *zt_engine_bucket_parts(zt_engine_t e, int b0, int b1);
enum zt_status zt_engine_allgather_buckets(zt_engine_t e, const struct zt_task_opts *o,
                                           const struct zt_bucket *bks, int n,
                                           const struct zt_block_ref *refs);
/* loss_scale.c */
enum zt_status zt_loss_scale_update(zt_engine_t e, int overflow);
/* offload.c */
enum zt_status zt_engine_aio_cfg(const struct zt_engine *e, struct zt_aio_cfg *ac);
enum zt_status zt_engine_io_start(zt_engine_t e);
enum zt_status zt_offload_init(zt_engine_t e, uint64_t rng0);
void zt_offload_free(zt_engine_t e);
enum zt_status zt_offload_read_optim(zt_engine_t e, int li, int64_t s0, int64_t s1, int part,
                                     float *buf);
enum zt_status zt_offload_read_values(zt_engine_t e, int b, float *dst);
enum zt_status zt_offload_write_params(zt_engine_t e, struct zt_safetensors *st,
                                       struct zt_shard_set *ck, uint64_t rng);
/* weights.c */
enum zt_status zt_weights_set_values(zt_engine_t e, struct zt_param *p, const float *v);

#endif /* ZT_ENGINE_IMPL_H */
