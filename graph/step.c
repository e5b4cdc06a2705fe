/*
 * graph/step.c: the step.
 *
 * Layer: graph/ (behind zt_engine.h). No starpu_* call: work goes through tasks/.
 */
#include "engine_impl.h" /* struct zt_engine, internal functions */
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
const int64_t *zt_engine_bucket_parts(zt_engine_t e, int b0, int b1) {
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
enum zt_status zt_engine_allgather_buckets(zt_engine_t e, const struct zt_task_opts *o,
                                        const struct zt_bucket *bks, int n,
                                        const struct zt_block_ref *refs) {
    for (int k = 0; k < n; k++)
        ZT_CHECK(zt_task_comm_allgather(o, &refs[bks[k].b0], bks[k].b1 - bks[k].b0,
                                        zt_engine_bucket_parts(e, bks[k].b0, bks[k].b1), NULL, 0,
                                        sizeof(float), e->token));
    return ZT_OK;
}

static enum zt_status reduce_bucket(zt_engine_t e, int k) {
    struct zt_bucket *bk = &e->rbuckets[k];
    bk->submitted = 1;
    /* the reductions the optimizer waits on last: those of the first layers' buckets (their
     * gradients are the backward's last) and those left to the step's end */
    struct zt_task_opts o =
        zt_engine_task_opts(e, e->cur_class == ZT_PRIO_OPTIMIZER || e->cur_layer <= 0
                           ? ZT_PRIO_REDUCE_LAST : ZT_PRIO_REDUCE);
    const int n = bk->b1 - bk->b0;
    if (e->stage < 2) {
        const int64_t *part = zt_engine_bucket_parts(e, bk->b0, bk->b1);
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
        const int64_t *part = zt_engine_bucket_parts(e, bk->b0, bk->b1);
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
    struct zt_task_opts onorm = zt_engine_task_opts(e, ZT_PRIO_REDUCE_LAST);
    /* the updated parameters to every rank: the next forward's first reads */
    struct zt_task_opts ogather = zt_engine_task_opts(e, ZT_PRIO_PREFETCH_FWD);
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
        zt_slots_drop_gathered(e);
        if (e->size > 1) ZT_CHECK(allgather_persistent(e, &ogather));
    } else if (e->size > 1 && e->stage >= 1) { /* updated shards to every rank */
        ZT_CHECK(zt_engine_allgather_buckets(e, &ogather, e->gbuckets, e->ngb, e->wblk));
    }
    e->updating = 1;
    return ZT_OK;
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
    if (e->cfg.precision == ZT_PREC_FP16) ZT_CHECK(zt_loss_scale_update(e, overflow));
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
