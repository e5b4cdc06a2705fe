/*
 * graph/offload.c: NVMe offload.
 *
 * Layer: graph/ (behind zt_engine.h). No starpu_* call: work goes through tasks/.
 */
#include "engine_impl.h" /* struct zt_engine, internal functions */
/* ---------------------------------------------------------------------------------------------
 * NVMe offload: swap files and buffers */
/* elements [s0, s1) of local group li's exp_avg (part 0), exp_avg_sq (1) or (inf) fp32 master
 * weights (2) from file A into buf, unit by unit */
enum zt_status zt_offload_read_optim(zt_engine_t e, int li, int64_t s0, int64_t s1, int part,
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
enum zt_status zt_offload_read_values(zt_engine_t e, int b, float *dst) {
    const int64_t n = blk_elems(e, b);
    if (e->inf) return zt_offload_read_optim(e, e->blk_group[b], e->pblk[b].off, e->pblk[b].off + n, 2, dst);
    return zt_swap_read_sync(&e->fB, dst, n * 4, fileB_off(e, b));
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
enum zt_status zt_offload_write_params(zt_engine_t e, struct zt_safetensors *st,
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
            if (need) zt_rng_normal(tmp, n, p->std, &rng);
            else zt_rng_skip_normal(n, &rng);
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
enum zt_status zt_engine_aio_cfg(const struct zt_engine *e, struct zt_aio_cfg *ac) {
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
enum zt_status zt_engine_io_start(zt_engine_t e) {
    if (e->swap_on) return ZT_OK;
    struct zt_aio_cfg ac;
    ZT_CHECK(zt_engine_aio_cfg(e, &ac));
    ZT_CHECK(zt_swap_init(&ac, e->cfg.aio_thread_count));
    e->swap_on = 1;
    return ZT_OK;
}

enum zt_status zt_offload_init(zt_engine_t e, uint64_t rng0) {
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
    ZT_CHECK(zt_engine_io_start(e));
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
    if (e->par_nvme) ZT_CHECK(zt_offload_write_params(e, NULL, NULL, rng0));
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

void zt_offload_free(zt_engine_t e) {
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
