/*
 * graph/offload.c: NVMe offload (zero_optimization.offload_optimizer / offload_param nvme): the
 * swap files, the swap buffers the state goes through, AdamW on swapped state, the stage-3
 * reads of offloaded parameter shards, and the blocking reads and writes of that state between
 * steps (export, checkpoints).
 *
 * Layer: graph/, behind the engine (engine_impl.h); its interface is the zt_offload_* section
 * there, and nothing else reads struct zt_offload. Swaps are tasks (tasks/zt_tasks.h) served by
 * the I/O threads; the files come from io/zt_swapdir.h.
 *
 * Files: the optimizer file holds per swap unit (zero_plan.h) [exp_avg | exp_avg_sq], and with
 * 16-bit parameters on NVMe also the fp32 master weights, each part 4 KiB padded; the parameter
 * file holds the stage-3 shards of this rank's groups, fp32 (or the 16-bit copy the model reads
 * with mixed precision). A file's regions are ordered across tasks by one "order block" per
 * unit: a swap-out takes it RW, readers take it R, so a read waits for the last write before it.
 */
#include <stdlib.h>        /* calloc, malloc, free */
#include <string.h>        /* memcpy, memset, strcmp */
#include "engine_impl.h"   /* struct zt_engine, the ZeRO plan */
#include "zt_aio.h"        /* zt_aio_alloc */
#include "zt_ckpt.h"       /* ZT_ROLE_* */
#include "zt_log.h"        /* ZT_LOG_I */
#include "zt_safetensors.h" /* zt_st_read_f32 */
#include "zt_swapdir.h"    /* swap directories and files */

struct zt_offload {
    int params;               /* the stage-3 parameter shards are in the parameter file */
    int params16;             /* ... as the 16-bit copy (mixed precision): the optimizer file's
                               * units then hold the fp32 master weights as a third part */
    struct zt_swapdir optim_dir, param_dir;
    struct zt_swapfile optim_file, param_file;
    int nbuf;                 /* swap buffers: units in flight */
    int64_t buf_elems;        /* elements of one part of a swap buffer (the largest unit) */
    int64_t buf_bytes;        /* bytes of each swap buffer */
    void **buf;               /* [nbuf] [m | v (| w) (| 16-bit w)] */
    char *buf_pinned;         /* [nbuf] page-locked for the GPUs (zt_host_pin) */
    zt_tensor_t *buf_m, *buf_v, *buf_w, *buf_w16; /* [nbuf] one block each, over the parts */
    zt_tensor_t optim_order, param_order; /* one block per unit: orders each file's regions */
    zt_tensor_t pipeline;     /* serializes reads/writes with updates when not pipelined */
    int64_t file_bytes;       /* both files */
};

// ----------------------------------------------------------------------------
// where things are in the files

/* byte offset of block b (of this rank) in the parameter file */
static int64_t param_blk_off(const struct zt_engine *e, int b) {
    const struct zt_zero_plan *pl = &e->plan;
    return pl->param_group_off[pl->blk_local_group[b]] +
           e->buf.master_blk[b].off * pl->param_elem_bytes; /* off: element in its group */
}
/* unit u's values in the parameter file: their offset and (4 KiB padded) bytes */
static int64_t unit_param_off(const struct zt_zero_plan *pl, int u) {
    return pl->param_group_off[pl->unit[u].group] + pl->unit[u].lo * pl->param_elem_bytes;
}
static int64_t unit_param_bytes(const struct zt_zero_plan *pl, int u) {
    return zt_plan_pad4k((pl->unit[u].hi - pl->unit[u].lo) * pl->param_elem_bytes);
}

/* elements [s0, s1) of local group li's part of the optimizer file (0 exp_avg, 1 exp_avg_sq,
 * 2 fp32 master weights) into buf, unit by unit */
static enum zt_status read_optim(zt_engine_t e, int li, int64_t s0, int64_t s1, int part,
                                 float *buf) {
    const struct zt_zero_plan *pl = &e->plan;
    for (int u = zt_plan_unit_at(pl, li, s0);
         u < pl->group_first_unit[li + 1] && pl->unit[u].lo < s1; u++) {
        const struct zt_plan_unit *un = &pl->unit[u];
        int64_t x0 = s0 > un->lo ? s0 : un->lo, x1 = s1 < un->hi ? s1 : un->hi;
        ZT_CHECK(zt_io_read_sync(&e->offload->optim_file, buf + (x0 - s0), (x1 - x0) * 4,
                                 un->optim_off + part * zt_plan_unit_file_bytes(pl, u) +
                                     (x0 - un->lo) * 4));
    }
    return ZT_OK;
}

enum zt_status zt_offload_read_values(zt_engine_t e, int b, float *dst) {
    const int64_t n = zt_engine_blk_elems(e, b), off = e->buf.master_blk[b].off;
    if (e->offload->params16)
        return read_optim(e, e->plan.blk_local_group[b], off, off + n, 2, dst);
    return zt_io_read_sync(&e->offload->param_file, dst, n * 4, param_blk_off(e, b));
}

enum zt_status zt_offload_read_moment(zt_engine_t e, int b, int moment, float *dst) {
    const int64_t n = zt_engine_blk_elems(e, b), off = e->buf.master_blk[b].off;
    return read_optim(e, e->plan.blk_local_group[b], off, off + n, moment, dst);
}

int zt_offload_has_params(const struct zt_offload *o) { return o && o->params; }

int zt_offload_order_refs(zt_engine_t e, enum zt_swap_file f, int b0, int b1,
                          struct zt_block_ref *refs) {
    const struct zt_zero_plan *pl = &e->plan;
    zt_tensor_t order = f == ZT_SWAP_PARAM_FILE ? e->offload->param_order : e->offload->optim_order;
    int n = 0, hi_unit = -1;
    for (int b = b0; b < b1; b++) {
        const int li = pl->blk_local_group[b];
        const int64_t off = e->buf.master_blk[b].off;
        int u0 = zt_plan_unit_at(pl, li, off);
        int u1 = zt_plan_unit_at(pl, li, off + zt_engine_blk_elems(e, b) - 1);
        for (int u = u0 > hi_unit ? u0 : hi_unit + 1; u <= u1; u++)
            refs[n++] = (struct zt_block_ref){order, u, 0};
        if (u1 > hi_unit) hi_unit = u1;
    }
    return n;
}

void zt_offload_memory(const struct zt_offload *o, int64_t *buffers, int64_t *files) {
    *buffers = *files = 0;
    if (!o) return;
    *buffers = (int64_t)o->nbuf * o->buf_bytes;
    *files = o->file_bytes;
}

// ----------------------------------------------------------------------------
// blocking writes (initial values, safetensors and checkpoint loads)

/* unit u's values, staged in fp32 (padding zero), to its swap file(s): the parameter file, or
 * (16-bit parameters) the optimizer file's master part and the 16-bit copy (through stage16) */
static enum zt_status put_unit(zt_engine_t e, int u, const float *stage, void *stage16) {
    const struct zt_zero_plan *pl = &e->plan;
    struct zt_offload *o = e->offload;
    const int64_t len = zt_plan_unit_file_bytes(pl, u);
    if (!o->params16) return zt_io_write_sync(&o->param_file, stage, len, unit_param_off(pl, u));
    ZT_CHECK(zt_io_write_sync(&o->optim_file, stage, len, pl->unit[u].optim_off + 2 * len));
    memset(stage16, 0, (size_t)unit_param_bytes(pl, u));
    zt_dtype_from_f32(e->work_dtype, stage16, stage, (size_t)(pl->unit[u].hi - pl->unit[u].lo));
    return zt_io_write_sync(&o->param_file, stage16, unit_param_bytes(pl, u),
                            unit_param_off(pl, u));
}

/* p's whole values into tmp (only its own rows from checkpoint shards): from st, ck, or (both
 * NULL) the initializer, whose normal draws the caller made */
static enum zt_status source_values(const struct zt_param *p, struct zt_safetensors *st,
                                    struct zt_shard_set *ck, float *tmp) {
    const int64_t n = p->rows * p->cols;
    if (st) return zt_st_read_f32(st, p->name, p->ndim, p->shape, tmp);
    if (ck) {
        const int64_t x0 = zt_param_blk_row0(p, p->own0) * p->cols;
        return zt_param_read_shards(ck, p, ZT_ROLE_PARAM, x0,
                                    zt_param_blk_row0(p, p->own1) * p->cols, tmp + x0);
    }
    if (p->init != ZT_INIT_NORMAL)
        for (int64_t k = 0; k < n; k++) tmp[k] = p->init == ZT_INIT_ONE ? 1.0f : 0.0f;
    return ZT_OK;
}

/* Write this rank's blocks of the offloaded parameters, unit by unit through one aligned
 * staging buffer (*cur: the unit in it). With the initializer (st and ck NULL) rng is the state
 * finalize started from: finalize skipped the offloaded parameters' draws, here they are drawn
 * and every other parameter's skipped, so each value is generated once. */
enum zt_status zt_offload_write_params(zt_engine_t e, struct zt_safetensors *st,
                                       struct zt_shard_set *ck, uint64_t rng) {
    const struct zt_zero_plan *pl = &e->plan;
    int64_t maxn = 0;
    for (int i = 0; i < e->nparams; i++)
        if (e->params[i]->rows * e->params[i]->cols > maxn)
            maxn = e->params[i]->rows * e->params[i]->cols;
    float *tmp = malloc((size_t)maxn * sizeof(float));
    void *stage = NULL, *stage16 = NULL;
    const size_t sb = (size_t)(e->offload->buf_elems > 0 ? e->offload->buf_elems : 1) * 4;
    if (!tmp || !(stage = zt_aio_alloc(sb)) || !(stage16 = zt_aio_alloc(sb))) {
        free(tmp);
        free(stage);
        return zt_error_set(ZT_ERR_NOMEM, "engine: out of memory for the parameter swap file");
    }
    enum zt_status rc = ZT_OK;
    int cur = -1; /* the unit in the staging buffer */
    for (int i = 0; i < e->nparams && rc == ZT_OK; i++) {
        const struct zt_param *p = e->params[i];
        const int64_t n = p->rows * p->cols;
        const int need = p->offloaded && p->own1 > p->own0;
        if (!st && !ck && p->init == ZT_INIT_NORMAL) {
            if (need) zt_rng_normal(tmp, n, p->std, &rng);
            else zt_rng_skip_normal(n, &rng);
        }
        if (!need) continue;
        rc = source_values(p, st, ck, tmp);
        for (int j = p->own0; j < p->own1 && rc == ZT_OK; j++) {
            const int b = p->first_blk + j, li = pl->blk_local_group[b];
            const int64_t s0 = e->buf.master_blk[b].off, s1 = s0 + zt_engine_blk_elems(e, b);
            const float *src = tmp + zt_param_blk_row0(p, j) * p->cols;
            for (int u = zt_plan_unit_at(pl, li, s0);
                 u < pl->group_first_unit[li + 1] && pl->unit[u].lo < s1 && rc == ZT_OK; u++) {
                const struct zt_plan_unit *un = &pl->unit[u];
                if (u != cur) {
                    if (cur >= 0) rc = put_unit(e, cur, stage, stage16);
                    cur = u;
                    memset(stage, 0, (size_t)zt_plan_unit_file_bytes(pl, u));
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

/* the moments of the group's blocks that fall in unit u into stage ([m | v], len bytes each) */
static enum zt_status stage_unit_moments(zt_engine_t e, struct zt_shard_set *s, int u,
                                         char *stage, int64_t len) {
    const struct zt_zero_plan *pl = &e->plan;
    const struct zt_plan_unit *un = &pl->unit[u];
    const struct zt_plan_group *gr = &pl->group[pl->group_lo + un->group];
    for (int b = gr->first; b < gr->first + gr->n; b++) {
        const struct zt_param *p = e->params[pl->blk_param[b]];
        int64_t s0 = e->buf.master_blk[b].off, s1 = s0 + zt_engine_blk_elems(e, b);
        int64_t x0 = s0 > un->lo ? s0 : un->lo, x1 = s1 < un->hi ? s1 : un->hi;
        if (x1 <= x0) continue;
        /* the block's first element in the parameter, minus its place in the group */
        int64_t pe = zt_param_blk_row0(p, b - p->first_blk) * p->cols - s0;
        for (int v = 0; v < 2; v++)
            ZT_CHECK(zt_param_read_shards(s, p, v ? ZT_ROLE_EXP_AVG_SQ : ZT_ROLE_EXP_AVG,
                                          pe + x0, pe + x1,
                                          (float *)(stage + v * len) + (x0 - un->lo)));
    }
    return ZT_OK;
}

enum zt_status zt_offload_load_moments(zt_engine_t e, struct zt_shard_set *s) {
    const struct zt_zero_plan *pl = &e->plan;
    /* each unit [m | v] staged whole (O_DIRECT wants aligned writes) */
    char *stage = zt_aio_alloc((size_t)(2 * zt_plan_pad4k(e->offload->buf_elems * 4)));
    if (!stage) return zt_error_set(ZT_ERR_NOMEM, "checkpoint: out of memory for the swap staging");
    enum zt_status rc = ZT_OK;
    for (int u = 0; u < pl->nunits && rc == ZT_OK; u++) {
        const int64_t len = zt_plan_unit_file_bytes(pl, u);
        memset(stage, 0, (size_t)(2 * len));
        rc = stage_unit_moments(e, s, u, stage, len);
        if (rc == ZT_OK)
            rc = zt_io_write_sync(&e->offload->optim_file, stage, 2 * len, pl->unit[u].optim_off);
    }
    free(stage);
    return rc;
}

// ----------------------------------------------------------------------------
// tasks: the stage-3 read of a shard, AdamW on swapped state

enum zt_status zt_offload_gather(zt_engine_t e, const struct zt_param *p, zt_tensor_t slot,
                                 const struct zt_task_opts *o) {
    const struct zt_zero_plan *pl = &e->plan;
    const int b0 = p->first_blk + p->own0, b1 = p->first_blk + p->own1;
    const int li0 = pl->blk_local_group[b0], li1 = pl->blk_local_group[b1 - 1];
    struct zt_block_ref *order =
        malloc((size_t)(pl->group_first_unit[li1 + 1] - pl->group_first_unit[li0]) *
               sizeof *order);
    if (!order) return zt_error_set(ZT_ERR_NOMEM, "engine: out of memory");
    /* each of this rank's blocks from the file into its place in the slot, after the
     * optimizer's last write of the units it spans */
    struct zt_swap_seg segs[ZT_PLAN_MAX_BLOCKS];
    for (int j = p->own0; j < p->own1; j++) {
        const int64_t n = (zt_param_blk_row0(p, j + 1) - zt_param_blk_row0(p, j)) * p->cols;
        segs[j - p->own0] = (struct zt_swap_seg){slot, j, 0, n * pl->param_elem_bytes,
                                                 param_blk_off(e, p->first_blk + j)};
    }
    const int norder = zt_offload_order_refs(e, ZT_SWAP_PARAM_FILE, b0, b1, order);
    enum zt_status rc = zt_task_swap_in(o, &e->offload->param_file, segs, p->own1 - p->own0,
                                        order, norder, NULL);
    free(order);
    return rc;
}

/* the blocks [*b0, *b1) of unit u's group with elements in the unit (the padding after a block
 * excluded); none when the unit holds padding only */
static void unit_blocks(const struct zt_engine *e, int u, int *b0, int *b1) {
    const struct zt_zero_plan *pl = &e->plan;
    const struct zt_plan_unit *un = &pl->unit[u];
    const struct zt_plan_group *gr = &pl->group[pl->group_lo + un->group];
    const struct zt_block_ref *mb = e->buf.master_blk;
    int lo = gr->first, hi = gr->first + gr->n;
    while (lo < hi && mb[lo].off + zt_engine_blk_elems(e, lo) <= un->lo) lo++;
    while (hi > lo && mb[hi - 1].off >= un->hi) hi--;
    *b0 = lo;
    *b1 = hi;
}

/* AdamW with the optimizer state (and stage-3 parameter shards) on NVMe: per swap unit, swap
 * its state into swap buffer k = unit mod buffer_count, update the unit's range of its group,
 * swap it out. The slot's reuse waits for the swap-out of its previous unit (write after read),
 * so buffer_count units are in flight: the reads of the next units and the writes of the
 * previous ones overlap the update, and the first units' reads start as soon as the previous
 * step's writes let them (under this step's forward). pipeline_read/pipeline_write false
 * serialize reads/writes with the updates (a token). */
enum zt_status zt_offload_adamw(zt_engine_t e, const struct zt_task_opts *o,
                                const struct zt_adamw_hparams *hp, zt_tensor_t coef) {
    const struct zt_zero_plan *pl = &e->plan;
    const struct zt_offload *of = e->offload;
    const struct zt_offload_cfg *oc = &e->cfg.offload_optimizer;
    zt_tensor_t read_token = oc->pipeline_read ? NULL : of->pipeline;
    zt_tensor_t write_token = oc->pipeline_write ? NULL : of->pipeline;
    struct zt_task_opts read_opts = *o; /* reads ahead of the updates that wait on them */
    read_opts.priority = zt_prio(ZT_PRIO_OPT_READ, -1, 0);
    for (int i = 0; i < pl->nunits; i++) {
        /* with clipping every update waits for the global norm, and the next forward wants the
         * parameters in flat order; without, a unit is ready once its gradients are final,
         * which the backward makes them in reverse flat order */
        const int u = coef ? i : pl->nunits - 1 - i, k = i % of->nbuf;
        const struct zt_plan_unit *un = &pl->unit[u];
        const int64_t len = zt_plan_unit_file_bytes(pl, u);
        /* optimizer file: [m | v] (| fp32 master); parameter file: the fp32 values, or the
         * 16-bit copy the update writes (nothing to read from it) */
        const struct zt_swap_seg optim_segs[3] = {
            {of->buf_m[k], 0, 0, len, un->optim_off},
            {of->buf_v[k], 0, 0, len, un->optim_off + len},
            {of->buf_w[k], 0, 0, len, un->optim_off + 2 * len}};
        const int noptim_segs = 2 + of->params16;
        const struct zt_swap_seg param_seg = {of->params16 ? of->buf_w16[k] : of->buf_w[k], 0, 0,
                                              of->params ? unit_param_bytes(pl, u) : 0,
                                              of->params ? unit_param_off(pl, u) : 0};
        const struct zt_block_ref optim_order = {of->optim_order, u, 0};
        const struct zt_block_ref param_order = {of->param_order, u, 0};
        int b0, b1;
        unit_blocks(e, u, &b0, &b1);
        if (b1 == b0) continue; /* padding only */
        ZT_CHECK(zt_task_swap_in(&read_opts, &of->optim_file, optim_segs, noptim_segs,
                                 &optim_order, 1, read_token));
        if (of->params && !of->params16)
            ZT_CHECK(zt_task_swap_in(&read_opts, &of->param_file, &param_seg, 1, &param_order, 1,
                                     read_token));
        const struct zt_adamw_window win = {
            .params = &e->buf.master_blk[b0], .grads = &e->buf.grad_blk[b0], .n = b1 - b0,
            .w = of->params ? of->buf_w[k] : NULL, .m = of->buf_m[k], .v = of->buf_v[k],
            .g = 0, .lo = un->lo, .clip = coef, .hp = hp, .pipe = of->pipeline,
            .outs = e->mixed ? &e->buf.work_blk[b0] : NULL,
            .wout = of->params16 ? of->buf_w16[k] : NULL};
        ZT_CHECK(zt_task_adamw_window(o, &win));
        ZT_CHECK(zt_task_swap_out(o, &of->optim_file, optim_segs, noptim_segs, &optim_order, 1,
                                  write_token));
        if (of->params)
            ZT_CHECK(zt_task_swap_out(o, &of->param_file, &param_seg, 1, &param_order, 1,
                                      write_token));
    }
    return ZT_OK;
}

// ----------------------------------------------------------------------------
// lifecycle

/* open the swap directories and files, sized by the plan */
static enum zt_status open_files(zt_engine_t e, struct zt_offload *o) {
    const struct zt_config *c = &e->cfg;
    const int64_t optim_bytes = e->plan.optim_file_bytes, param_bytes = e->plan.param_file_bytes;
    const int same = strcmp(c->offload_optimizer.nvme_path, c->offload_param.nvme_path) == 0;
    ZT_CHECK(zt_swapdir_open(&o->optim_dir, c->offload_optimizer.nvme_path,
                             "zero_optimization.offload_optimizer.nvme_path",
                             optim_bytes + (o->params && same ? param_bytes : 0)));
    ZT_CHECK(zt_swapdir_file(&o->optim_dir, "optim.swp", optim_bytes > 0 ? optim_bytes : 4096,
                             &o->optim_file));
    if (o->params) {
        struct zt_swapdir *d = &o->optim_dir;
        if (!same) {
            ZT_CHECK(zt_swapdir_open(&o->param_dir, c->offload_param.nvme_path,
                                     "zero_optimization.offload_param.nvme_path", param_bytes));
            d = &o->param_dir;
        }
        ZT_CHECK(zt_swapdir_file(d, "params.swp", param_bytes > 0 ? param_bytes : 4096,
                                 &o->param_file));
    }
    o->file_bytes = optim_bytes + param_bytes;
    return ZT_OK;
}

enum zt_status zt_offload_buffers(const struct zt_config *c, const struct zt_zero_plan *pl,
                                  int *nbuf, int64_t *buf_bytes) {
    const int params = c->offload_param.device == ZT_OFFLOAD_NVME;
    const int params16 = params && c->precision != ZT_PREC_FP32;
    const int64_t part = zt_plan_pad4k(pl->max_unit_elems * 4); /* bytes of one part */
    const int64_t w16 = params16 ? zt_plan_pad4k(part / 2) : 0;  /* the 16-bit copy's */
    *buf_bytes = (2 + params) * part + w16;
    int64_t n = c->offload_optimizer.buffer_count;
    if (n == 0) {
        int64_t mem = 0, limit = 0;
        ZT_CHECK(zt_knob_size("ZT_SWAP_BUFFER_MEM", &mem));
        ZT_CHECK(zt_knob_size("ZT_HOST_MEM_LIMIT", &limit));
        if (limit > 0 && limit / 8 < mem) mem = limit / 8;
        n = mem / *buf_bytes;
        if (n < 4) n = 4;
    }
    *nbuf = n < pl->nunits ? (int)n : pl->nunits;
    return ZT_OK;
}

/* the swap buffers, as zt_offload_buffers sizes them */
static enum zt_status make_buffers(zt_engine_t e, struct zt_offload *o) {
    ZT_CHECK(zt_offload_buffers(&e->cfg, &e->plan, &o->nbuf, &o->buf_bytes));
    const int64_t part = zt_plan_pad4k(e->plan.max_unit_elems * 4); /* bytes of one part */
    o->buf_elems = part / 4;
    const size_t n = (size_t)o->nbuf + 1;
    o->buf = calloc(n, sizeof *o->buf);
    o->buf_m = calloc(n, sizeof *o->buf_m);
    o->buf_v = calloc(n, sizeof *o->buf_v);
    o->buf_w = calloc(n, sizeof *o->buf_w);
    o->buf_w16 = calloc(n, sizeof *o->buf_w16);
    o->buf_pinned = calloc(n, 1);
    if (!o->buf || !o->buf_m || !o->buf_v || !o->buf_w || !o->buf_w16 || !o->buf_pinned)
        return zt_error_set(ZT_ERR_NOMEM, "engine: out of memory");
    for (int k = 0; k < o->nbuf; k++) {
        if (!(o->buf[k] = zt_aio_alloc((size_t)o->buf_bytes)))
            return zt_error_set(ZT_ERR_NOMEM, "engine: cannot allocate %d swap buffers of %.1f "
                                "MiB", o->nbuf, o->buf_bytes / 1048576.0);
        memset(o->buf[k], 0, (size_t)o->buf_bytes);
        o->buf_pinned[k] = (char)zt_host_pin(o->buf[k], (size_t)o->buf_bytes);
        char *b = o->buf[k];
        ZT_CHECK(zt_tensor_init(&o->buf_m[k], "swap_exp_avg", b, o->buf_elems, 1, 4, 1, NULL));
        ZT_CHECK(zt_tensor_init(&o->buf_v[k], "swap_exp_avg_sq", b + part, o->buf_elems, 1, 4,
                                1, NULL));
        if (o->params)
            ZT_CHECK(zt_tensor_init(&o->buf_w[k], "swap_params", b + 2 * part, o->buf_elems, 1,
                                    4, 1, NULL));
        if (o->params16) /* the 16-bit copy's part: a unit's values padded to 4 KiB, which for
                          * an odd number of 2 KiB may exceed half of an fp32 part */
            ZT_CHECK(zt_tensor_init_dtype(&o->buf_w16[k], "swap_params16", b + 3 * part,
                                          zt_plan_pad4k(part / 2) / 2, 1, e->work_dtype, 1,
                                          NULL));
    }
    return ZT_OK;
}

/* the order blocks (one per unit and file) and the pipeline token */
static enum zt_status make_order(zt_engine_t e, struct zt_offload *o) {
    const int nu = e->plan.nunits;
    const struct zt_offload_cfg *oc = &e->cfg.offload_optimizer;
    if (nu > 0) {
        ZT_CHECK(zt_tensor_init(&o->optim_order, "swap_order_optim", NULL, nu, 1, 4, nu, NULL));
        if (o->params)
            ZT_CHECK(zt_tensor_init(&o->param_order, "swap_order_params", NULL, nu, 1, 4, nu,
                                    NULL));
    }
    if (!oc->pipeline_read || !oc->pipeline_write)
        ZT_CHECK(zt_tensor_init(&o->pipeline, "swap_pipeline", NULL, 1, 1, 4, 1, NULL));
    return ZT_OK;
}

enum zt_status zt_offload_check(const struct zt_config *c) {
    if (c->offload_param.device == ZT_OFFLOAD_NVME &&
        c->offload_optimizer.device != ZT_OFFLOAD_NVME)
        return zt_error_set(ZT_ERR_CONFIG, "config %s: zero_optimization.offload_param nvme needs "
                            "offload_optimizer nvme too (the optimizer updates the swapped "
                            "parameter shards in its swap buffers)", c->path);
    return ZT_OK;
}

enum zt_status zt_offload_init(zt_engine_t e, uint64_t rng0) {
    const struct zt_config *c = &e->cfg;
    if (c->offload_optimizer.device == ZT_OFFLOAD_CPU || c->offload_param.device == ZT_OFFLOAD_CPU)
        ZT_LOG_I("offload \"cpu\": %s stays in host memory%s (without a GPU worker this is "
                 "where everything is: the same placement as \"none\")",
                 c->offload_param.device == ZT_OFFLOAD_CPU ? "the model state" : "optimizer state",
                 c->offload_optimizer.device == ZT_OFFLOAD_CPU
                     ? " and CPU workers run the optimizer (ZeRO-Offload)" : "");
    const int optim = c->offload_optimizer.device == ZT_OFFLOAD_NVME;
    const int params = c->offload_param.device == ZT_OFFLOAD_NVME;
    if (!optim && !params) return ZT_OK;
    ZT_CHECK(zt_offload_check(c));
    struct zt_offload *o = calloc(1, sizeof *o);
    if (!o) return zt_error_set(ZT_ERR_NOMEM, "engine: out of memory");
    e->offload = o; /* freed by zt_offload_free, also after a failure below */
    o->params = params;
    o->params16 = e->mixed && params;
    ZT_CHECK(zt_engine_io_start(e));
    ZT_CHECK(open_files(e, o));
    ZT_CHECK(make_buffers(e, o));
    ZT_CHECK(make_order(e, o));
    if (o->params) ZT_CHECK(zt_offload_write_params(e, NULL, NULL, rng0));
    ZT_LOG_I("offload: rank %d swaps %.1f MiB of %s through %d buffers%s of %.1f MiB (%s, "
             "%s%s%s)",
             e->rank, o->file_bytes / 1048576.0,
             o->params ? "optimizer state and parameter shards" : "optimizer state", o->nbuf,
             c->offload_optimizer.buffer_count == 0 ? " (auto)" : "", o->buf_bytes / 1048576.0,
             zt_io_service_engine_name(),
             c->offload_optimizer.pipeline_read ? "reads pipelined" : "reads not pipelined",
             c->offload_optimizer.pipeline_write ? ", writes pipelined" : ", writes not pipelined",
             o->optim_file.direct ? ", O_DIRECT" : ", buffered");
    return ZT_OK;
}

void zt_offload_free(zt_engine_t e) {
    struct zt_offload *o = e->offload;
    if (!o) return;
    for (int k = 0; k < o->nbuf; k++) {
        zt_tensor_free(o->buf_m[k]);
        zt_tensor_free(o->buf_v[k]);
        zt_tensor_free(o->buf_w[k]);
        zt_tensor_free(o->buf_w16[k]);
        if (o->buf_pinned && o->buf_pinned[k]) zt_host_unpin(o->buf[k], (size_t)o->buf_bytes);
        free(o->buf[k]);
    }
    free(o->buf_pinned);
    free(o->buf_m);
    free(o->buf_v);
    free(o->buf_w);
    free(o->buf_w16);
    free(o->buf);
    zt_tensor_free(o->optim_order);
    zt_tensor_free(o->param_order);
    zt_tensor_free(o->pipeline);
    if (o->optim_file.path[0]) zt_swapfile_close(&o->optim_file);
    if (o->param_file.path[0]) zt_swapfile_close(&o->param_file);
    zt_swapdir_close(&o->optim_dir);
    zt_swapdir_close(&o->param_dir);
    free(o);
    e->offload = NULL;
}
