/*
 * graph/step.c: the step lifecycle behind zt_engine.h: step_begin (zero the gradient sums),
 * grad_ready (submit a bucket's reduction as soon as the backward is done with it), step_end
 * (the reductions left, the gradient norm, clipping, AdamW, the all-gathers of the updated
 * shards), step_wait and finish.
 *
 * Layer: graph/, behind the engine (engine_impl.h). Submits through tasks/ only; the
 * collectives are tasks ordered by the engine's token, so every rank runs them in the same
 * order whatever the scheduler.
 */
#include <stdlib.h>      /* calloc, free */
#include "engine_impl.h" /* struct zt_engine, the ZeRO plan, the slots, the offload */

// ----------------------------------------------------------------------------
// buckets

const int64_t *zt_engine_bucket_parts(zt_engine_t e, int b0, int b1) {
    for (int r = 0; r < e->size; r++) {
        int s0 = e->plan.shard_first_blk[r], s1 = e->plan.shard_first_blk[r + 1];
        s0 = s0 < b0 ? b0 : s0 > b1 ? b1 : s0;
        s1 = s1 < b0 ? b0 : s1 > b1 ? b1 : s1;
        e->st.parts[2 * r] = s0 - b0;
        e->st.parts[2 * r + 1] = s1 - b0;
    }
    return e->st.parts;
}

enum zt_status zt_engine_allgather_buckets(zt_engine_t e, const struct zt_task_opts *o,
                                           const struct zt_plan_bucket *bks, int n,
                                           const struct zt_block_ref *refs) {
    for (int k = 0; k < n; k++)
        ZT_CHECK(zt_task_comm_allgather(o, &refs[bks[k].b0], bks[k].b1 - bks[k].b0,
                                        zt_engine_bucket_parts(e, bks[k].b0, bks[k].b1), NULL, 0,
                                        sizeof(float), e->buf.comm_token));
    return ZT_OK;
}

/* stage >= 2: the bucket's gradient slots (a parameter without one contributes zeros), summed
 * over the ranks into this rank's part of the gradient sums; then the slots are free */
static enum zt_status reduce_slots(zt_engine_t e, const struct zt_step_ctx *ctx,
                                   const struct zt_plan_bucket *bk,
                                   const struct zt_task_opts *o) {
    const int n = bk->b1 - bk->b0;
    struct zt_block_ref *refs = calloc((size_t)n, sizeof *refs);
    if (!refs) return zt_error_set(ZT_ERR_NOMEM, "engine: out of memory");
    enum zt_status rc = ZT_OK;
    for (int i = bk->i0; i < bk->i1 && rc == ZT_OK; i++) {
        struct zt_param *p = e->params[i];
        if (!zt_param_grad(ctx, p)) rc = zt_error_last_code();
        for (int j = 0; j < p->nblk && rc == ZT_OK; j++)
            refs[p->first_blk - bk->b0 + j] = (struct zt_block_ref){p->grad, j, 0};
    }
    if (rc == ZT_OK) {
        const int64_t *part = zt_engine_bucket_parts(e, bk->b0, bk->b1);
        const struct zt_block_ref *acc = &e->buf.grad_blk[bk->b0 + part[2 * e->rank]];
        int nacc = (int)(part[2 * e->rank + 1] - part[2 * e->rank]);
        rc = e->cfg.reduce_scatter
                 ? zt_task_comm_reduce_scatter(o, refs, n, part, acc, nacc, e->buf.comm_token)
                 : zt_task_comm_allreduce(o, refs, n, part, acc, nacc, e->buf.comm_token);
    }
    free(refs);
    for (int i = bk->i0; i < bk->i1; i++) {
        zt_slots_release_grad(e, e->params[i]);
        e->params[i]->declared = 0;
    }
    return rc;
}

/* submit reduction bucket k's collective; ctx: the model's context that completed it, or the
 * engine's own at step_end */
static enum zt_status reduce_bucket(zt_engine_t e, const struct zt_step_ctx *ctx, int k) {
    const struct zt_plan_bucket *bk = &e->plan.reduce_bucket[k];
    struct zt_reduce_state *rs = &e->st.reduce[k];
    rs->submitted = 1;
    /* the reductions the optimizer waits on last: those of the first layers' buckets (their
     * gradients are the backward's last) and those left to the step's end */
    struct zt_task_opts o =
        zt_engine_task_opts(e, ctx, ctx->cls == ZT_PRIO_OPTIMIZER || ctx->layer <= 0
                                        ? ZT_PRIO_REDUCE_LAST : ZT_PRIO_REDUCE);
    if (e->stage >= 2) {
        enum zt_status rc = reduce_slots(e, ctx, bk, &o);
        rs->pending = bk->nparams;
        return rc;
    }
    const int n = bk->b1 - bk->b0;
    const int64_t *part = zt_engine_bucket_parts(e, bk->b0, bk->b1);
    /* stage 1: a rank's AdamW reads only its part of the sums, and the norm is gathered as
     * per-group sums of squares, so the other parts need not come back: half the traffic of an
     * all-reduce (the same sums, bit for bit). reduce_scatter false keeps the all-reduce. */
    if (zt_engine_scattered_sums(e))
        return zt_task_comm_reduce_scatter(&o, &e->buf.grad_blk[bk->b0], n, part, NULL, 0,
                                           e->buf.comm_token);
    return zt_task_comm_allreduce(&o, &e->buf.grad_blk[bk->b0], n, part, NULL, 0,
                                  e->buf.comm_token);
}

// ----------------------------------------------------------------------------
// step

enum zt_status zt_engine_step_begin(zt_engine_t e, int64_t step) {
    if (!e->finalized) return zt_error_set(ZT_ERR_INVALID, "engine: step before finalize");
    e->st.step = step;
    /* the schedule moves with the updates applied (a skipped fp16 step moves nothing) */
    e->st.lr = zt_config_lr(&e->cfg, e->st.applied + 1);
    const struct zt_step_ctx ctx = zt_engine_own_ctx(e, ZT_PRIO_DEFAULT);
    for (int i = 0; i < e->nparams; i++) {
        struct zt_param *p = e->params[i];
        if (p->grad_sums) ZT_CHECK(zt_task_zero(&ctx.opts, p->grad_sums));
        p->ready_count = p->declared = 0;
    }
    for (int k = 0; k < e->plan.nreduce; k++)
        e->st.reduce[k] = (struct zt_reduce_state){.pending = e->plan.reduce_bucket[k].nparams};
    return ZT_OK;
}

enum zt_status zt_engine_grad_ready(zt_engine_t e, const struct zt_step_ctx *ctx, zt_param_t p) {
    struct zt_reduce_state *rs = &e->st.reduce[p->reduce_bucket];
    if (e->stage >= 2) { /* every micro-batch: reduce the bucket once all of it is declared */
        if (p->declared) return ZT_OK;
        p->declared = 1;
        if (--rs->pending == 0 && e->cfg.overlap_comm)
            return reduce_bucket(e, ctx, p->reduce_bucket);
        return ZT_OK;
    }
    /* stages 0-1: the sums are final after the last micro-batch */
    if (++p->ready_count != e->cfg.grad_accum) return ZT_OK;
    if (p == e->pipe.tied) {
        /* a pipeline's tied copy: both ends' sums added before the replicas reduce them. Its
         * bucket waits for the step's end (reduce_left): on the last stage the other end's sums
         * come only when the first stage's backward ends, and the collectives run in order */
        const struct zt_task_opts o = zt_engine_task_opts(e, ctx, ZT_PRIO_REDUCE);
        return zt_engine_pipe_tie_grads(e, &o);
    }
    if (--rs->pending == 0 && e->size > 1 && e->cfg.overlap_comm)
        return reduce_bucket(e, ctx, p->reduce_bucket);
    return ZT_OK;
}

/* the buckets not reduced during the backward, in bucket order: at stage >= 2 those with
 * gradients in slots, at stages 0-1 (several ranks) those whose reduction was not submitted */
static enum zt_status reduce_left(zt_engine_t e, const struct zt_step_ctx *ctx) {
    for (int k = 0; k < e->plan.nreduce; k++) {
        const struct zt_plan_bucket *bk = &e->plan.reduce_bucket[k];
        int left = 0;
        if (e->stage >= 2)
            for (int i = bk->i0; i < bk->i1; i++) left |= e->params[i]->grad != NULL;
        else
            left = e->size > 1 && !e->st.reduce[k].submitted;
        if (left) ZT_CHECK(reduce_bucket(e, ctx, k));
    }
    return ZT_OK;
}

/* the options of the optimizer's own tasks (the gradients' sums of squares and AdamW): with
 * offload_optimizer (ZeRO-Offload) they run on CPU workers, next to the state in host memory,
 * also where a GPU could take them */
static struct zt_task_opts optimizer_opts(zt_engine_t e, const struct zt_task_opts *o) {
    struct zt_task_opts h = *o;
    h.on_host = e->cfg.offload_optimizer.device != ZT_OFFLOAD_NONE;
    return h;
}

/* group g's gradient blocks that the norm counts: all, but a pipeline's last stage leaves out
 * its copy of the tied parameter (the first stage counts it); *n their number, NULL when out
 * of memory */
static struct zt_block_ref *norm_blocks(const struct zt_engine *e, int g, int *n) {
    const struct zt_plan_group *gr = &e->plan.group[g];
    struct zt_block_ref *refs = calloc((size_t)gr->n + 1, sizeof *refs);
    *n = 0;
    for (int k = 0; refs && k < gr->n; k++)
        if (!e->params[e->plan.blk_param[gr->first + k]]->no_norm)
            refs[(*n)++] = e->buf.grad_blk[gr->first + k];
    return refs;
}

/* the global gradient norm: each updated group's sum of squares, every rank's sums to every
 * rank (one double per group; then a pipeline's stages exchange their whole tables), then the
 * clip coefficient (and the fp16 overflow flag) */
static enum zt_status grad_norm(zt_engine_t e, const struct zt_task_opts *o) {
    const struct zt_zero_plan *pl = &e->plan;
    const struct zt_engine_buffers *b = &e->buf;
    const struct zt_task_opts host = optimizer_opts(e, o);
    const int g0 = e->pipe.group0[e->pipe.stage]; /* this stage's first sum */
    for (int g = pl->group_lo; g < pl->group_hi; g++) {
        int n = 0;
        struct zt_block_ref *refs = norm_blocks(e, g, &n);
        if (!refs) return zt_error_set(ZT_ERR_NOMEM, "engine: out of memory");
        enum zt_status rc = zt_task_grad_sumsq(&host, b->grad_sumsq, g0 + g, refs, n);
        free(refs);
        ZT_CHECK(rc);
    }
    if (e->size > 1 && e->stage >= 1) {
        struct zt_block_ref *refs = calloc((size_t)pl->ngroups, sizeof *refs);
        if (!refs) return zt_error_set(ZT_ERR_NOMEM, "engine: out of memory");
        for (int g = 0; g < pl->ngroups; g++)
            refs[g] = (struct zt_block_ref){b->grad_sumsq, g0 + g, 0};
        for (int r = 0; r < e->size; r++) {
            e->st.parts[2 * r] = pl->rank_first_group[r];
            e->st.parts[2 * r + 1] = pl->rank_first_group[r + 1];
        }
        enum zt_status rc = zt_task_comm_allgather(o, refs, pl->ngroups, e->st.parts, NULL, 0,
                                                   sizeof(double), b->comm_token);
        free(refs);
        ZT_CHECK(rc);
    }
    ZT_CHECK(zt_engine_pipe_norm_sums(e, &host)); /* the stage's whole table, after its replicas' */
    return zt_task_grad_clip(o, b->clip, b->grad_sumsq, e->cfg.gradient_clipping,
                             (float)e->scaler.scale);
}

/* AdamW on the groups this rank updates: in memory, or swapped through the NVMe buffers */
static enum zt_status update(zt_engine_t e, const struct zt_task_opts *o, zt_tensor_t coef) {
    const struct zt_config *c = &e->cfg;
    const struct zt_zero_plan *pl = &e->plan;
    const struct zt_engine_buffers *b = &e->buf;
    const struct zt_adamw_hparams hp = {
        .lr = e->st.lr, .beta1 = c->beta1, .beta2 = c->beta2, .eps = c->eps,
        .weight_decay = c->weight_decay, .t = e->st.applied + 1,
        .decoupled = c->optim == ZT_OPTIM_ADAMW || c->adam_w_mode,
        /* fp16: DeepSpeed skips an overflowing step; fp32/bf16 stopping at a non-finite step
         * leave the weights of the step before (where the update waits for the norm) */
        .skip_nonfinite = c->precision == ZT_PREC_FP16 || !e->nonfinite_warn};
    const struct zt_task_opts host = optimizer_opts(e, o);
    if (e->offload) return zt_offload_adamw(e, &host, &hp, coef);
    for (int g = pl->group_lo; g < pl->group_hi; g++) {
        const int first = pl->group[g].first;
        ZT_CHECK(zt_task_adamw(&host, &b->master_blk[first], &b->grad_blk[first], pl->group[g].n,
                               b->m, b->v, g - pl->group_lo, coef, &hp,
                               e->mixed ? &b->work_blk[first] : NULL));
    }
    return ZT_OK;
}

/* stage 3: all-gather the persistent parameters' blocks after the optimizer, in buckets of at
 * most allgather_bucket_size elements (whole blocks) */
static enum zt_status allgather_persistent(zt_engine_t e, const struct zt_task_opts *o) {
    const struct zt_zero_plan *pl = &e->plan;
    const struct zt_block_ref *refs = e->buf.persist_blk;
    for (int b0 = 0; b0 < pl->npersist;) {
        int b1 = b0;
        int64_t el = 0;
        do {
            el += zt_tensor_blk_rows(refs[b1].t, refs[b1].blk) * zt_tensor_cols(refs[b1].t);
            b1++;
        } while (b1 < pl->npersist &&
                 el + zt_tensor_blk_rows(refs[b1].t, refs[b1].blk) * zt_tensor_cols(refs[b1].t) <=
                     e->cfg.allgather_bucket_size);
        for (int r = 0, b = b0; r < e->size; r++) {
            e->st.parts[2 * r] = b - b0;
            while (b < b1 && pl->persist_owner[b] == r) b++;
            e->st.parts[2 * r + 1] = b - b0;
        }
        ZT_CHECK(zt_task_comm_allgather(o, &refs[b0], b1 - b0, e->st.parts, NULL, 0,
                                        sizeof(float), e->buf.comm_token));
        b0 = b1;
    }
    return ZT_OK;
}

enum zt_status zt_engine_step_end(zt_engine_t e) {
    const struct zt_step_ctx ctx = zt_engine_own_ctx(e, ZT_PRIO_OPTIMIZER);
    /* the gradient norm: every update waits on it (with clipping) */
    const struct zt_task_opts onorm = zt_engine_task_opts(e, &ctx, ZT_PRIO_REDUCE_LAST);
    /* the updated parameters to every rank: the next forward's first reads */
    const struct zt_task_opts ogather = zt_engine_task_opts(e, &ctx, ZT_PRIO_PREFETCH_FWD);
    ZT_CHECK(reduce_left(e, &ctx));
    ZT_CHECK(grad_norm(e, &onorm));
    /* without clipping (and without fp16's overflow check) the updates need no global norm
     * (still computed, for the log): each group's AdamW (and its swaps) waits only for its own
     * gradients */
    const int fp16 = e->cfg.precision == ZT_PREC_FP16;
    zt_tensor_t coef = e->cfg.gradient_clipping > 0 || fp16 ? e->buf.clip : NULL;
    ZT_CHECK(update(e, &ctx.opts, coef));
    if (e->stage >= 3) { /* gathered values are stale; persistent ones to every rank */
        zt_slots_drop_gathered(e);
        if (e->size > 1) ZT_CHECK(allgather_persistent(e, &ogather));
    } else if (e->size > 1 && e->stage >= 1) { /* updated shards to every rank */
        ZT_CHECK(zt_engine_allgather_buckets(e, &ogather, e->plan.gather_bucket, e->plan.ngather,
                                             e->buf.work_blk));
    }
    e->st.updating = 1;
    return ZT_OK;
}

enum zt_status zt_engine_step_wait(zt_engine_t e, struct zt_step_info *info) {
    if (e->offload) {
        /* the swap-outs (and whatever else remains) run on under the next step's forward: the
         * graph orders a group's next swap-in after its swap-out. A failed swap fails the step
         * after it (or zt_engine_finish). */
        ZT_CHECK(zt_io_service_status());
    } else {
        ZT_CHECK(zt_runtime_wait_all());
    }
    ZT_CHECK(zt_tensor_acquire(e->buf.clip, 0));
    const float *clip = zt_tensor_data(e->buf.clip);
    const float norm = clip[1];
    const int fp16 = e->cfg.precision == ZT_PREC_FP16;
    const int overflow = fp16 && clip[2] != 0.0f;
    zt_tensor_release(e->buf.clip);
    if (info) {
        info->step = e->st.step;
        info->lr = e->st.lr;
        info->grad_norm = norm;
        info->loss_scale = e->scaler.scale; /* the scale this step's gradients were made with */
        info->skipped = overflow;
    }
    e->st.updated = e->st.updating;
    if (!e->st.updating) return ZT_OK; /* an evaluation: nothing was updated */
    e->st.updating = 0;
    if (overflow) e->st.skipped++;
    else e->st.applied++;
    if (fp16)
        ZT_CHECK(zt_loss_scaler_update(&e->scaler, &e->cfg, overflow, e->st.step,
                                       zt_engine_talks(e)));
    return ZT_OK;
}

enum zt_status zt_engine_finish(zt_engine_t e) {
    ZT_CHECK(zt_runtime_wait_all());
    if (e->io_held) {
        zt_io_service_wait(); /* the last swap-outs: no task waits for them */
        ZT_CHECK(zt_io_service_status());
    }
    return ZT_OK;
}
