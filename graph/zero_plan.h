/*
 * graph/zero_plan.h: the ZeRO plan of a model: where every parameter lies in the flat buffers,
 * how it is cut into row blocks, which rank owns which blocks, the optimizer groups, the
 * reduction and all-gather buckets, the stage-3 persistent set and the NVMe swap units.
 *
 * Layer: graph/, below the engine (engine_impl.h). Pure arithmetic: no tensors, no StarPU, no
 * MPI. Inputs are the parameter shapes, the config numbers and this rank's place in the job;
 * outputs are plain arrays. Every rank computes the same plan (only the "this rank" fields
 * differ), so collectives agree on block ranges without talking.
 *
 * The flat layout (llm.c): the parameters in declaration order, each a slice padded to
 * ZT_PLAN_ALIGN elements (64 bytes of fp32). A parameter of two or more dimensions with at least
 * 4096 elements is cut into min(chunks, rows) row blocks (block j holds rows
 * [rows * j / nblk, rows * (j + 1) / nblk)); any other parameter is one block. Blocks are
 * numbered in flat order across the model. A rank's ZeRO shard is a contiguous run of whole
 * blocks: rank r's starts at the first block at or after r/N of the flat elements.
 */
#ifndef ZT_ZERO_PLAN_H
#define ZT_ZERO_PLAN_H

#include <stdint.h>    /* int64_t */
#include "zt_status.h" /* enum zt_status */

#define ZT_PLAN_ALIGN 16              /* elements: 64-byte alignment of every parameter slice */
#define ZT_PLAN_MIN_SPLIT_ELEMS 4096  /* smaller parameters stay one block */
#define ZT_PLAN_MAX_BLOCKS 64         /* most row blocks of one parameter (ZT_GRAPH_CHUNKS) */

/* One parameter as the plan sees it: rows x cols (a vector is 1 x n), its rank ndim. */
struct zt_plan_shape {
    int64_t rows, cols;
    int ndim;
};
/* a parameter of dimensions shape[0..ndim) as the plan sees it: shape[0] rows of the product of
 * the others, a vector one row */
static inline struct zt_plan_shape zt_plan_shape_of(int ndim, const int64_t *shape) {
    struct zt_plan_shape s = {ndim == 1 ? 1 : shape[0], 1, ndim};
    for (int d = ndim == 1 ? 0 : 1; d < ndim; d++) s.cols *= shape[d];
    return s;
}

struct zt_plan_cfg {
    int rank, world_size;   /* this rank, ranks in the job */
    int stage;              /* ZeRO stage 0-3 */
    int chunks;             /* row blocks of a large parameter (ZT_GRAPH_CHUNKS) */
    int64_t group_elems;    /* optimizer group size (ZT_OPT_GROUP_ELEMS) */
    int64_t reduce_bucket_elems;    /* zero_optimization.reduce_bucket_size */
    int64_t allgather_bucket_elems; /* zero_optimization.allgather_bucket_size */
    int64_t persistence_threshold;  /* stage3_param_persistence_threshold */
    int optim_on_nvme;      /* offload_optimizer nvme: plan the swap units */
    int params_on_nvme;     /* offload_param nvme: stage-3 shards live in the parameter file */
    int params16_on_nvme;   /* mixed precision with parameters on NVMe: the parameter file holds
                             * the 16-bit copy (2 bytes per element) */
};

struct zt_plan_param {
    int64_t off;            /* first element in the flat layout (a multiple of ZT_PLAN_ALIGN) */
    int nblk, first_blk;    /* row blocks; the first one's index in the model's block list */
    int own0, own1;         /* the blocks [own0, own1) of it in this rank's shard */
    int persistent;         /* stage 3: small enough to stay whole on every rank */
    int offloaded;          /* stage 3 with params_on_nvme: its shard lives in the swap file */
    int reduce_bucket;      /* the gradient-reduction bucket it belongs to */
};

/* A contiguous run of whole parameters (blocks [b0, b1), parameters [i0, i1)) reduced or
 * all-gathered by one collective; a bucket is cut before it would exceed its element budget
 * (a parameter larger than the budget is a bucket of its own). */
struct zt_plan_bucket {
    int b0, b1, i0, i1;
    int nparams;
};

/* An optimizer group: consecutive blocks [first, first + n) of about group_elems elements that
 * never cross a shard boundary; its moments span elems elements (the padding between its
 * blocks included), so a block's place in the group is blk_start[b] - blk_start[first]. */
struct zt_plan_group {
    int first, n;
    int64_t elems;
};

/* NVMe offload: a swap unit is a range [lo, hi) of one of this rank's groups (local index
 * group) of at most unit_elems elements. In the optimizer file a unit has parts of
 * unit_file_bytes each, [exp_avg | exp_avg_sq] (and the fp32 master weights with
 * params16_on_nvme), at optim_off; in the parameter file its elements lie at
 * param_group_off[group] + lo * param_elem_bytes. */
struct zt_plan_unit {
    int group;
    int64_t lo, hi;
    int64_t optim_off;
};

struct zt_zero_plan {
    int nparams;
    struct zt_plan_param *param;  /* [nparams] */
    int64_t flat_n;               /* elements of the flat layout, padding included */
    int nblk;                     /* row blocks of the whole model */
    int64_t *blk_start;           /* [nblk + 1] first flat element of each block; [nblk] flat_n */
    int *blk_param;               /* [nblk] the parameter each block belongs to */
    int *shard_first_blk;         /* [world_size + 1] rank r owns blocks [s[r], s[r + 1]) */
    int ngroups;
    struct zt_plan_group *group;  /* [ngroups] in flat order */
    int *rank_first_group;        /* [world_size + 1] rank r's shard holds these groups */
    int group_lo, group_hi;       /* the groups this rank updates: all at stage 0, else its own */
    int *blk_local_group;         /* [nblk] index in [group_lo, group_hi) of a block's group
                                   * minus group_lo, or -1 when this rank does not update it */
    int nreduce, ngather;
    struct zt_plan_bucket *reduce_bucket; /* gradient reductions (reduce_bucket_elems) */
    struct zt_plan_bucket *gather_bucket; /* parameter all-gathers (allgather_bucket_elems) */
    int npersist;                 /* stage 3: the persistent parameters' blocks in flat order */
    int *persist_blk, *persist_owner; /* [npersist] block index, owning rank */
    /* NVMe swap units of this rank's groups (only with optim_on_nvme or params_on_nvme) */
    int64_t unit_elems;           /* a multiple of 1024 (2048 with params16_on_nvme) */
    int nunits;
    struct zt_plan_unit *unit;    /* [nunits] in flat order */
    int *group_first_unit;        /* [local groups + 1] */
    int64_t max_unit_elems;       /* the largest unit (at least 1024) */
    int64_t param_elem_bytes;     /* bytes of one element in the parameter file: 4, or 2 */
    int64_t *param_group_off;     /* [local groups] byte offset of each group's values */
    int64_t optim_file_bytes, param_file_bytes;
};

/* This rank's flat buffers (element counts): the fp32 values (mixed precision: the master
 * weights), the 16-bit working copy (mixed precision only) and the gradient sums. */
struct zt_plan_buffers {
    int64_t master_n, work_n, grad_n;
};

/* Plan n parameters. Owner: the caller, with zt_zero_plan_free (also after a failure). */
enum zt_status zt_zero_plan_make(struct zt_zero_plan *pl, const struct zt_plan_cfg *cfg,
                                 const struct zt_plan_shape *shapes, int n);
void zt_zero_plan_free(struct zt_zero_plan *pl);

/* n rounded up to whole ZT_PLAN_ALIGN elements */
static inline int64_t zt_plan_pad(int64_t n) {
    return (n + ZT_PLAN_ALIGN - 1) / ZT_PLAN_ALIGN * ZT_PLAN_ALIGN;
}
/* bytes rounded up to whole 4 KiB pages (O_DIRECT's unit) */
static inline int64_t zt_plan_pad4k(int64_t bytes) { return (bytes + 4095) / 4096 * 4096; }
/* the first row of block j of a parameter of `rows` rows cut into nblk blocks (j = nblk: rows) */
static inline int64_t zt_plan_blk_row0(int64_t rows, int nblk, int j) {
    return rows * j / nblk;
}
/* a parameter's value storage (the working copy) is only its own blocks: stage 3, not
 * persistent */
static inline int zt_plan_partial_values(int stage, int persistent) {
    return stage >= 3 && !persistent;
}
/* the gradient sums are only this rank's blocks: stage >= 2 */
static inline int zt_plan_partial_grads(int stage) { return stage >= 2; }
/* the fp32 values are only this rank's blocks: stage 3 (not persistent), and in mixed precision
 * every stage >= 1 (the master weights live with the optimizer state, DeepSpeed's layout) */
static inline int zt_plan_partial_master(int stage, int mixed, int persistent) {
    return mixed ? stage >= 1 : zt_plan_partial_values(stage, persistent);
}
/* elements of the blocks of parameter p (of shape s) in this rank's shard */
static inline int64_t zt_plan_own_elems(const struct zt_plan_param *p,
                                        const struct zt_plan_shape *s) {
    return (zt_plan_blk_row0(s->rows, p->nblk, p->own1) -
            zt_plan_blk_row0(s->rows, p->nblk, p->own0)) * s->cols;
}

/* This rank's flat buffers under pl at ZeRO stage `stage` (mixed: 16-bit training). Each holds
 * whole slices laid out like the flat layout, or only the rank's own blocks packed in flat order
 * (stage-3 values, stage >= 2 gradient sums, mixed-precision master weights at stage >= 1); an
 * offloaded parameter has no host values. *_at[i] (each may be NULL): where parameter i's
 * storage starts in each buffer. */
void zt_plan_buffers(const struct zt_zero_plan *pl, const struct zt_plan_shape *shapes, int stage,
                     int mixed, int64_t *master_at, int64_t *work_at, int64_t *grad_at,
                     struct zt_plan_buffers *out);

/* bytes of one of unit u's parts in the optimizer file (4 KiB padded) */
static inline int64_t zt_plan_unit_file_bytes(const struct zt_zero_plan *pl, int u) {
    return zt_plan_pad4k((pl->unit[u].hi - pl->unit[u].lo) * 4);
}
/* the unit of local group li that holds the group's element x */
static inline int zt_plan_unit_at(const struct zt_zero_plan *pl, int li, int64_t x) {
    return pl->group_first_unit[li] + (int)(x / pl->unit_elems);
}

#endif /* ZT_ZERO_PLAN_H */
