/*
 * graph/zero_plan.c: the ZeRO plan (zero_plan.h): flat offsets, row blocks, shards, ownership,
 * optimizer groups, buckets, the stage-3 persistent set and the NVMe swap units.
 *
 * Layer: graph/, below the engine. Pure arithmetic on shapes and config numbers: no tensors, no
 * StarPU, no MPI (tests/graph/test_zero_plan.c checks it alone).
 */
#include <stdlib.h>     /* calloc, free */
#include "zero_plan.h"  /* our API */

#define NOMEM() zt_error_set(ZT_ERR_NOMEM, "engine: out of memory for the ZeRO plan")

/* row blocks of a parameter: large matrices are cut so their gradient products run in parallel */
static int param_blocks(const struct zt_plan_shape *s, int chunks) {
    if (s->ndim < 2 || s->rows * s->cols < ZT_PLAN_MIN_SPLIT_ELEMS) return 1;
    return s->rows < chunks ? (int)s->rows : chunks;
}

/* offsets and blocks of every parameter, in declaration order */
static enum zt_status plan_layout(struct zt_zero_plan *pl, const struct zt_plan_cfg *c,
                                  const struct zt_plan_shape *shapes) {
    int64_t off = 0;
    int nb = 0;
    for (int i = 0; i < pl->nparams; i++) {
        const struct zt_plan_shape *s = &shapes[i];
        struct zt_plan_param *p = &pl->param[i];
        p->off = off;
        off += zt_plan_pad(s->rows * s->cols);
        p->nblk = param_blocks(s, c->chunks);
        p->first_blk = nb;
        p->persistent = c->stage >= 3 && s->rows * s->cols <= c->persistence_threshold;
        p->offloaded = c->stage >= 3 && !p->persistent && c->params_on_nvme;
        nb += p->nblk;
    }
    pl->flat_n = off;
    pl->nblk = nb;
    pl->blk_start = calloc((size_t)nb + 1, sizeof *pl->blk_start);
    pl->blk_param = calloc((size_t)nb + 1, sizeof *pl->blk_param);
    if (!pl->blk_start || !pl->blk_param) return NOMEM();
    for (int i = 0; i < pl->nparams; i++) {
        const struct zt_plan_param *p = &pl->param[i];
        for (int j = 0; j < p->nblk; j++) {
            pl->blk_start[p->first_blk + j] =
                p->off + zt_plan_blk_row0(shapes[i].rows, p->nblk, j) * shapes[i].cols;
            pl->blk_param[p->first_blk + j] = i;
        }
    }
    pl->blk_start[nb] = pl->flat_n;
    return ZT_OK;
}

/* Shards: rank r owns the blocks [shard_first_blk[r], shard_first_blk[r + 1]), starting at the
 * first block at or after r/N of the flat elements: whole blocks (a shard is a set of row blocks
 * of whole tensors), balanced up to one block. Then each parameter's own blocks. */
static enum zt_status plan_shards(struct zt_zero_plan *pl, const struct zt_plan_cfg *c) {
    const int N = c->world_size;
    pl->shard_first_blk = calloc((size_t)N + 1, sizeof *pl->shard_first_blk);
    if (!pl->shard_first_blk) return NOMEM();
    for (int r = 0, b = 0; r <= N; r++) {
        int64_t target = pl->flat_n * r / N;
        while (b < pl->nblk && pl->blk_start[b] < target) b++;
        pl->shard_first_blk[r] = r == N ? pl->nblk : b;
    }
    for (int i = 0; i < pl->nparams; i++) {
        struct zt_plan_param *p = &pl->param[i];
        int lo = pl->shard_first_blk[c->rank] - p->first_blk;
        int hi = pl->shard_first_blk[c->rank + 1] - p->first_blk;
        p->own0 = lo < 0 ? 0 : lo > p->nblk ? p->nblk : lo;
        p->own1 = hi < 0 ? 0 : hi > p->nblk ? p->nblk : hi;
        if (p->own1 < p->own0) p->own1 = p->own0;
    }
    return ZT_OK;
}

/* Optimizer groups: consecutive blocks of about group_elems elements, cut at every shard
 * boundary so that a rank updates whole groups; then the groups this rank updates (all at stage
 * 0, its own at stage >= 1: optimizer state 1/N) and each block's local group. */
static enum zt_status plan_groups(struct zt_zero_plan *pl, const struct zt_plan_cfg *c) {
    const int N = c->world_size, nb = pl->nblk;
    pl->group = calloc((size_t)nb + 1, sizeof *pl->group);
    pl->rank_first_group = calloc((size_t)N + 1, sizeof *pl->rank_first_group);
    pl->blk_local_group = malloc(((size_t)nb + 1) * sizeof *pl->blk_local_group);
    if (!pl->group || !pl->rank_first_group || !pl->blk_local_group) return NOMEM();
    int g = 0, r = 0;
    int64_t gstart = 0;
    for (int b = 0; b < nb; b++) {
        while (r < N && pl->shard_first_blk[r] <= b) pl->rank_first_group[r++] = g;
        if (pl->group[g].n == 0) {
            pl->group[g].first = b;
            gstart = pl->blk_start[b];
        }
        pl->group[g].n++;
        int shard_end = 0;
        for (int q = 1; q < N; q++) shard_end |= pl->shard_first_blk[q] == b + 1;
        if (pl->blk_start[b + 1] - gstart >= c->group_elems || b + 1 == nb || shard_end) {
            pl->group[g].elems = pl->blk_start[b + 1] - gstart;
            g++;
        }
    }
    while (r <= N) pl->rank_first_group[r++] = g;
    pl->ngroups = g;
    pl->group_lo = c->stage >= 1 ? pl->rank_first_group[c->rank] : 0;
    pl->group_hi = c->stage >= 1 ? pl->rank_first_group[c->rank + 1] : pl->ngroups;
    for (int b = 0; b < nb; b++) pl->blk_local_group[b] = -1;
    for (int gi = pl->group_lo; gi < pl->group_hi; gi++)
        for (int b = pl->group[gi].first; b < pl->group[gi].first + pl->group[gi].n; b++)
            pl->blk_local_group[b] = gi - pl->group_lo;
    return ZT_OK;
}

/* buckets of whole parameters in flat order, each cut before it would exceed max_elems */
static enum zt_status plan_buckets(struct zt_zero_plan *pl, int64_t max_elems,
                                   struct zt_plan_bucket **out, int *nout, int assign) {
    struct zt_plan_bucket *bk = calloc((size_t)pl->nparams, sizeof *bk);
    if (!bk) return NOMEM();
    int n = 0;
    for (int i = 0; i < pl->nparams; i++) {
        struct zt_plan_param *p = &pl->param[i];
        int b1 = p->first_blk + p->nblk;
        if (n > 0 && pl->blk_start[b1] - pl->blk_start[bk[n - 1].b0] <= max_elems) {
            bk[n - 1].b1 = b1; /* grow the open bucket */
        } else {
            bk[n].b0 = p->first_blk;
            bk[n].b1 = b1;
            n++;
        }
        if (bk[n - 1].nparams++ == 0) bk[n - 1].i0 = i;
        bk[n - 1].i1 = i + 1;
        if (assign) p->reduce_bucket = n - 1;
    }
    *out = bk;
    *nout = n;
    return ZT_OK;
}

/* stage 3: the persistent parameters' blocks in flat order with their owners (all-gathered after
 * every optimizer step) */
static enum zt_status plan_persistent(struct zt_zero_plan *pl, const struct zt_plan_cfg *c) {
    pl->persist_blk = calloc((size_t)pl->nblk + 1, sizeof *pl->persist_blk);
    pl->persist_owner = calloc((size_t)pl->nblk + 1, sizeof *pl->persist_owner);
    if (!pl->persist_blk || !pl->persist_owner) return NOMEM();
    for (int i = 0; i < pl->nparams; i++) {
        const struct zt_plan_param *p = &pl->param[i];
        if (!p->persistent) continue;
        for (int j = 0; j < p->nblk; j++) {
            int b = p->first_blk + j, r = 0;
            while (r + 1 < c->world_size && pl->shard_first_blk[r + 1] <= b) r++;
            pl->persist_blk[pl->npersist] = b;
            pl->persist_owner[pl->npersist++] = r;
        }
    }
    return ZT_OK;
}

/* NVMe swap units: each of this rank's groups cut into ranges of at most unit_elems elements, a
 * multiple of 1024 elements (2048 with the 16-bit copy in the parameter file) so that every unit
 * starts 4 KiB aligned in both files. The optimizer file holds per unit [m | v] (and the fp32
 * master weights with params16_on_nvme), each part 4 KiB padded; the parameter file per group
 * its values, 4 KiB padded. */
static enum zt_status plan_swap_units(struct zt_zero_plan *pl, const struct zt_plan_cfg *c) {
    const int nl = pl->group_hi - pl->group_lo;
    const int64_t ua = c->params16_on_nvme ? 2048 : 1024;
    pl->unit_elems = (c->group_elems + ua - 1) / ua * ua;
    pl->param_elem_bytes = c->params16_on_nvme ? 2 : 4;
    int nu = 0;
    for (int li = 0; li < nl; li++)
        nu += (int)((pl->group[pl->group_lo + li].elems + pl->unit_elems - 1) / pl->unit_elems);
    pl->param_group_off = calloc((size_t)nl + 1, sizeof *pl->param_group_off);
    pl->group_first_unit = calloc((size_t)nl + 1, sizeof *pl->group_first_unit);
    pl->unit = calloc((size_t)nu + 1, sizeof *pl->unit);
    if (!pl->param_group_off || !pl->group_first_unit || !pl->unit) return NOMEM();
    const int optim_parts = 2 + c->params16_on_nvme;
    int64_t maxu = 1024, optim_off = 0, param_off = 0;
    for (int li = 0; li < nl; li++) {
        const int64_t ge = pl->group[pl->group_lo + li].elems;
        pl->param_group_off[li] = param_off;
        if (c->params_on_nvme) param_off += zt_plan_pad4k(ge * pl->param_elem_bytes);
        pl->group_first_unit[li] = pl->nunits;
        for (int64_t lo = 0; lo < ge; lo += pl->unit_elems) {
            int u = pl->nunits++;
            int64_t hi = lo + pl->unit_elems < ge ? lo + pl->unit_elems : ge;
            pl->unit[u] = (struct zt_plan_unit){li, lo, hi, optim_off};
            optim_off += optim_parts * zt_plan_unit_file_bytes(pl, u);
            if (hi - lo > maxu) maxu = hi - lo;
        }
    }
    pl->group_first_unit[nl] = pl->nunits;
    pl->max_unit_elems = maxu;
    pl->optim_file_bytes = optim_off;
    pl->param_file_bytes = param_off;
    return ZT_OK;
}

enum zt_status zt_zero_plan_make(struct zt_zero_plan *pl, const struct zt_plan_cfg *c,
                                 const struct zt_plan_shape *shapes, int n) {
    *pl = (struct zt_zero_plan){.nparams = n};
    if (n < 1 || c->world_size < 1 || c->rank < 0 || c->rank >= c->world_size || c->chunks < 1 ||
        c->chunks > ZT_PLAN_MAX_BLOCKS || c->group_elems < 1)
        return zt_error_set(ZT_ERR_INVALID, "ZeRO plan: bad arguments (%d parameters, rank %d "
                            "of %d, %d chunks)", n, c->rank, c->world_size, c->chunks);
    pl->param = calloc((size_t)n, sizeof *pl->param);
    if (!pl->param) return NOMEM();
    ZT_CHECK(plan_layout(pl, c, shapes));
    ZT_CHECK(plan_shards(pl, c));
    ZT_CHECK(plan_groups(pl, c));
    ZT_CHECK(plan_buckets(pl, c->reduce_bucket_elems, &pl->reduce_bucket, &pl->nreduce, 1));
    ZT_CHECK(plan_buckets(pl, c->allgather_bucket_elems, &pl->gather_bucket, &pl->ngather, 0));
    if (c->stage >= 3) ZT_CHECK(plan_persistent(pl, c));
    if (c->optim_on_nvme || c->params_on_nvme) ZT_CHECK(plan_swap_units(pl, c));
    return ZT_OK;
}

void zt_plan_buffers(const struct zt_zero_plan *pl, const struct zt_plan_shape *shapes, int stage,
                     int mixed, int64_t *master_at, int64_t *work_at, int64_t *grad_at,
                     struct zt_plan_buffers *out) {
    const int master_whole = mixed ? stage == 0 : stage < 3; /* laid out like flat_n */
    int64_t master_next = 0, work_next = 0, grad_next = 0; /* packed storage: the next slice */
    for (int i = 0; i < pl->nparams; i++) {
        const struct zt_plan_param *p = &pl->param[i];
        const int64_t n = shapes[i].rows * shapes[i].cols;
        const int64_t own = zt_plan_own_elems(p, &shapes[i]);
        if (master_at) master_at[i] = master_whole ? p->off : master_next;
        if (work_at) work_at[i] = stage < 3 ? p->off : work_next;
        if (grad_at) grad_at[i] = stage < 2 ? p->off : grad_next;
        const int pm = zt_plan_partial_master(stage, mixed, p->persistent);
        if (!p->offloaded) {
            master_next += zt_plan_pad(pm ? own : n);
            work_next += zt_plan_pad(zt_plan_partial_values(stage, p->persistent) ? own : n);
        }
        grad_next += zt_plan_pad(zt_plan_partial_grads(stage) ? own : n);
    }
    out->master_n = master_whole ? pl->flat_n : master_next;
    out->work_n = !mixed ? 0 : stage < 3 ? pl->flat_n : work_next;
    out->grad_n = stage < 2 ? pl->flat_n : grad_next;
}

void zt_zero_plan_free(struct zt_zero_plan *pl) {
    free(pl->param);
    free(pl->blk_start);
    free(pl->blk_param);
    free(pl->shard_first_blk);
    free(pl->group);
    free(pl->rank_first_group);
    free(pl->blk_local_group);
    free(pl->reduce_bucket);
    free(pl->gather_bucket);
    free(pl->persist_blk);
    free(pl->persist_owner);
    free(pl->unit);
    free(pl->group_first_unit);
    free(pl->param_group_off);
    *pl = (struct zt_zero_plan){0};
}
