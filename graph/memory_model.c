/*
 * graph/memory_model.c: the memory model behind zt_memory_model.h: one rank's bytes per tier
 * and its predicted peak resident memory, from the plan the engine would make.
 *
 * Layer: graph/. Pure: every size comes from the function the engine or the model sizes it
 * with (zt_plan_buffers, zt_slots_plan, zt_offload_buffers, zt_gpt2_act_bytes), and the
 * gradient slots' growth replays the engine's slot rule (slots.c, step.c) over the backward's
 * gradient order (zt_gpt2_grad_events). What is not the engine's own buffers (the runtime term)
 * is the process base below plus what each worker keeps: the GEMM packing buffers and the
 * largest reduction scratch it ran.
 */
#include <stdlib.h>            /* calloc, free */
#include "engine_impl.h"       /* zt_engine_plan_cfg, zt_slots_plan, zt_offload_buffers */
#include "zt_gpt2.h"           /* zt_gpt2_param_info, zt_gpt2_act_bytes, zt_gpt2_grad_events */
#include "zt_memory_model.h"   /* our API */
#include "zt_pipe_plan.h"      /* zt_pipe_stage_specs: a pipeline rank's stage */
#include "zt_tasks.h"          /* zt_task_comm_reduce_scratch, zt_task_worker_gemm_bytes */

/* What a zt-train process holds resident before the model's own memory: the code and data of
 * zerotask, StarPU, Open MPI and OpenBLAS, StarPU's worker and driver threads, MPI's
 * initialisation (also as a singleton without mpirun) and the token file's pages. Measured as
 * the peak of a run of the smallest model (docs/architecture.md, "Memory model"). */
#define ZT_MEM_PROCESS_BASE ((int64_t)21 << 20)

/* everything the model of one rank is made of: its parameters (shapes, names) and its plan */
struct mm_ctx {
    const struct zt_config *cfg;
    int n;
    struct zt_plan_shape *shapes;
    char (*names)[160];
    const char **name_ptr;
    struct zt_zero_plan plan;
    int *cls;                      /* [n] each parameter's slot class */
    struct zt_slot_class *classes; /* [n] */
    int nclasses;
};

static void ctx_free(struct mm_ctx *m) {
    zt_zero_plan_free(&m->plan);
    free(m->shapes);
    free(m->names);
    free(m->name_ptr);
    free(m->cls);
    free(m->classes);
}

/* What one rank builds: the layer specs of its pipeline stage and its place among the stage's
 * replicas, over which the ZeRO plan runs; the whole model over the world without a pipeline. */
struct mm_stage {
    int spec0, spec1;
    int rank, world;
};

static enum zt_status stage_of(const struct zt_mem_inputs *in, struct mm_stage *st) {
    *st = (struct mm_stage){0, in->shape->n_layer + 3, in->rank, in->world_size};
    if (in->cfg->pipeline.stages <= 1) return ZT_OK;
    ZT_CHECK(zt_pipeline_check_runnable(in->cfg));
    /* the stage-2 slots' replay (grad_slot_bytes) indexes the whole model's parameters */
    if (in->cfg->zero_stage >= 2)
        return zt_error_set(ZT_ERR_CONFIG, "memory model: a pipeline runs ZeRO stages 0-1");
    const struct zt_pipe_rank x = zt_pipe_rank(&in->cfg->pipeline, in->world_size, in->rank);
    *st = (struct mm_stage){.rank = x.dp_rank, .world = x.dp};
    return zt_pipe_stage_specs(in->shape, &in->cfg->pipeline, in->cfg->path, x.stage, &st->spec0,
                               &st->spec1);
}

/* the parameters the stage holds (zt_gpt2_param_info's order), the ZeRO plan and the slot
 * classes */
static enum zt_status ctx_make(struct mm_ctx *m, const struct zt_mem_inputs *in,
                               const struct mm_stage *st, int chunks, int64_t group_elems) {
    const int all = zt_gpt2_nparams(in->shape);
    const size_t n = (size_t)all;
    m->shapes = calloc(n, sizeof *m->shapes);
    m->names = calloc(n, sizeof *m->names);
    m->name_ptr = calloc(n, sizeof *m->name_ptr);
    m->cls = calloc(n, sizeof *m->cls);
    m->classes = calloc(n, sizeof *m->classes);
    if (!m->shapes || !m->names || !m->name_ptr || !m->cls || !m->classes)
        return zt_error_set(ZT_ERR_NOMEM, "memory model: out of memory");
    m->n = 0;
    for (int i = 0; i < all; i++) {
        if (!zt_gpt2_param_in_specs(in->shape, i, st->spec0, st->spec1)) continue;
        int ndim;
        int64_t shape[2];
        const int k = m->n++;
        zt_gpt2_param_info(in->shape, i, m->names[k], sizeof m->names[k], &ndim, shape);
        m->shapes[k] = zt_plan_shape_of(ndim, shape);
        m->name_ptr[k] = m->names[k];
    }
    const struct zt_plan_cfg pc = zt_engine_plan_cfg(in->cfg, st->rank, st->world, chunks,
                                                     group_elems);
    ZT_CHECK(zt_zero_plan_make(&m->plan, &pc, m->shapes, m->n));
    return zt_slots_plan(in->cfg, m->n, m->shapes, m->plan.param, m->name_ptr, m->cls,
                         m->classes, &m->nclasses);
}

static int64_t blk_elems(const struct mm_ctx *m, int b) {
    const int i = m->plan.blk_param[b];
    const struct zt_plan_param *p = &m->plan.param[i];
    const int j = b - p->first_blk;
    return (zt_plan_blk_row0(m->shapes[i].rows, p->nblk, j + 1) -
            zt_plan_blk_row0(m->shapes[i].rows, p->nblk, j)) * m->shapes[i].cols;
}

// ----------------------------------------------------------------------------
// stage >= 2: the gradient slots after step 1, the engine's rules replayed

struct grad_sim {
    const struct mm_ctx *m;
    char *held, *declared;   /* [n] has a slot; declared ready since its bucket's reduction */
    int64_t *in_use, *pool;  /* [nclasses] slots with a tenant, slots made */
    int *pending;            /* [nreduce] parameters of the bucket not yet declared */
};

/* zt_param_grad: a free slot of its class, or a new one */
static void sim_take(struct grad_sim *g, int i) {
    if (g->held[i]) return;
    g->held[i] = 1;
    const int c = g->m->cls[i];
    if (++g->in_use[c] > g->pool[c]) g->pool[c] = g->in_use[c];
}

/* reduce_slots: every parameter of bucket k takes a slot (zeros for one without), then all go */
static void sim_reduce(struct grad_sim *g, int k) {
    const struct zt_plan_bucket *bk = &g->m->plan.reduce_bucket[k];
    for (int i = bk->i0; i < bk->i1; i++) sim_take(g, i);
    for (int i = bk->i0; i < bk->i1; i++) {
        g->held[i] = g->declared[i] = 0;
        g->in_use[g->m->cls[i]]--;
    }
    g->pending[k] = bk->nparams;
}

/* zt_engine_grad_ready at stage >= 2 */
static void sim_ready(struct grad_sim *g, int i) {
    if (g->declared[i]) return;
    g->declared[i] = 1;
    const int k = g->m->plan.param[i].reduce_bucket;
    if (--g->pending[k] == 0 && g->m->cfg->overlap_comm) sim_reduce(g, k);
}

static enum zt_status grad_slot_bytes(const struct mm_ctx *m, const struct zt_model_shape *s,
                                      int64_t es, int64_t *bytes) {
    const int nev = zt_gpt2_grad_events(s, NULL), nr = m->plan.nreduce;
    int *ev = calloc((size_t)nev, sizeof *ev);
    struct grad_sim g = {m, calloc((size_t)m->n, 1), calloc((size_t)m->n, 1),
                         calloc((size_t)m->nclasses, sizeof(int64_t)),
                         calloc((size_t)m->nclasses, sizeof(int64_t)),
                         calloc((size_t)nr + 1, sizeof(int))};
    enum zt_status rc = ZT_OK;
    if (!ev || !g.held || !g.declared || !g.in_use || !g.pool || !g.pending) {
        rc = zt_error_set(ZT_ERR_NOMEM, "memory model: out of memory");
        goto out;
    }
    zt_gpt2_grad_events(s, ev);
    for (int c = 0; c < m->nclasses; c++) g.pool[c] = 1; /* zt_slots_init: one per class */
    for (int k = 0; k < nr; k++) g.pending[k] = m->plan.reduce_bucket[k].nparams;
    for (int mb = 0; mb < m->cfg->grad_accum; mb++)
        for (int k = 0; k < nev; k++) {
            if (ev[k] >= 0) sim_take(&g, ev[k]);
            else sim_ready(&g, ~ev[k]);
        }
    for (int k = 0; k < nr; k++) { /* step_end: the buckets left */
        const struct zt_plan_bucket *bk = &m->plan.reduce_bucket[k];
        int left = 0;
        for (int i = bk->i0; i < bk->i1; i++) left |= g.held[i];
        if (left) sim_reduce(&g, k);
    }
    *bytes = 0;
    for (int c = 0; c < m->nclasses; c++)
        *bytes += g.pool[c] * m->classes[c].rows * m->classes[c].cols * es;
out:
    free(ev);
    free(g.held);
    free(g.declared);
    free(g.in_use);
    free(g.pool);
    free(g.pending);
    return rc;
}

// ----------------------------------------------------------------------------
// the runtime term

/* the largest scratch of this rank's gradient reductions: every reduction bucket at stage >= 2
 * (a rank sums its slots into its shard even alone), at stages 0-1 only with several ranks */
static int64_t reduce_scratch(const struct mm_ctx *m, int rank, int world, enum zt_dtype dt) {
    const int stage = m->cfg->zero_stage;
    if (stage < 2 && world == 1) return 0;
    const enum zt_dtype acc = stage >= 2 ? dt : ZT_DTYPE_F32; /* the shard's sums, or none */
    int64_t most = 0;
    for (int k = 0; k < m->plan.nreduce; k++) {
        const struct zt_plan_bucket *bk = &m->plan.reduce_bucket[k];
        int s0 = m->plan.shard_first_blk[rank], s1 = m->plan.shard_first_blk[rank + 1];
        s0 = s0 < bk->b0 ? bk->b0 : s0 > bk->b1 ? bk->b1 : s0;
        s1 = s1 < bk->b0 ? bk->b0 : s1 > bk->b1 ? bk->b1 : s1;
        int64_t my = 0, max_block = 0;
        for (int b = s0; b < s1; b++) {
            const int64_t e = blk_elems(m, b);
            my += e;
            max_block = e > max_block ? e : max_block;
        }
        const int64_t x = (int64_t)zt_task_comm_reduce_scratch(my, world, dt, acc, max_block);
        most = x > most ? x : most;
    }
    return most;
}

/* GPT-2's products reach M = max(V, 4C, an activation block's rows) rows (the tied head's and
 * the MLP's weight gradients, the forward's row blocks), N = max(V, 4C) columns and K =
 * max(4C, block rows) along the sum: the packing buffers a worker touches for the largest */
static int64_t gemm_bytes(const struct zt_model_shape *s, const struct zt_config *c, int chunks) {
    const int nblk = zt_engine_act_blocks(c->micro_batch, chunks);
    const int64_t rows = (int64_t)(c->micro_batch + nblk - 1) / nblk * s->seq_len;
    const int64_t c4 = 4 * (int64_t)s->n_embd, v = s->vocab_size;
    const int64_t M = v > c4 ? (v > rows ? v : rows) : (c4 > rows ? c4 : rows);
    return (int64_t)zt_task_worker_gemm_bytes(M, v > c4 ? v : c4, c4 > rows ? c4 : rows);
}

// ----------------------------------------------------------------------------

static enum zt_status check_inputs(const struct zt_mem_inputs *in, int64_t *chunks) {
    if (!in || !in->shape || !in->cfg || in->world_size < 1 || in->rank < 0 ||
        in->rank >= in->world_size || in->workers < 1 || in->chunks < 0 ||
        in->chunks > ZT_PLAN_MAX_BLOCKS)
        return zt_error_set(ZT_ERR_INVALID, "memory model: bad inputs");
    ZT_CHECK(zt_gpt2_check_shape(in->shape));
    ZT_CHECK(zt_offload_check(in->cfg));
    if (in->chunks > 0) *chunks = in->chunks;
    return ZT_OK;
}

/* the tiers zt_engine_memory reports, before step 1 */
static enum zt_status engine_tiers(const struct mm_ctx *m, struct zt_mem_prediction *o) {
    const struct zt_config *c = m->cfg;
    const int stage = c->zero_stage, mixed = c->precision != ZT_PREC_FP32;
    const int64_t ws = (int64_t)zt_dtype_size(zt_engine_config_dtype(c));
    struct zt_plan_buffers b;
    zt_plan_buffers(&m->plan, m->shapes, stage, mixed, NULL, NULL, NULL, &b);
    int64_t grad_slots0 = 0;
    for (int k = 0; k < m->nclasses; k++) {
        const int64_t slot = m->classes[k].rows * m->classes[k].cols * ws;
        o->value_slots += m->classes[k].value_slots * slot;
        if (stage >= 2) grad_slots0 += slot;
    }
    o->params = b.master_n * 4 + b.work_n * ws + o->value_slots;
    o->grads = b.grad_n * ws + grad_slots0;
    if (c->offload_optimizer.device == ZT_OFFLOAD_NVME) {
        int nbuf = 0;
        int64_t buf_bytes = 0;
        ZT_CHECK(zt_offload_buffers(c, &m->plan, &nbuf, &buf_bytes));
        o->swap_buffers = nbuf * buf_bytes;
        o->nvme = m->plan.optim_file_bytes + m->plan.param_file_bytes;
        o->optim = o->swap_buffers;
    } else {
        for (int g = m->plan.group_lo; g < m->plan.group_hi; g++)
            o->optim += 2 * m->plan.group[g].elems * 4; /* exp_avg, exp_avg_sq */
    }
    o->grad_slots = grad_slots0;
    return ZT_OK;
}

enum zt_status zt_memory_predict(const struct zt_mem_inputs *in, struct zt_mem_prediction *out) {
    *out = (struct zt_mem_prediction){0};
    int64_t chunks = 0, group_elems = 0;
    ZT_CHECK(zt_engine_plan_knobs(&chunks, &group_elems));
    ZT_CHECK(check_inputs(in, &chunks));
    struct mm_stage st;
    ZT_CHECK(stage_of(in, &st));
    struct mm_ctx m = {.cfg = in->cfg};
    enum zt_status rc = ctx_make(&m, in, &st, (int)chunks, group_elems);
    if (rc == ZT_OK) rc = engine_tiers(&m, out);
    const enum zt_dtype dt = zt_engine_config_dtype(in->cfg);
    const int64_t grad_slots0 = out->grad_slots; /* before step 1 */
    if (rc == ZT_OK && in->cfg->zero_stage >= 2) /* no pipeline: stages 0-1 only */
        rc = grad_slot_bytes(&m, in->shape, (int64_t)zt_dtype_size(dt), &out->grad_slots);
    if (rc == ZT_OK) {
        out->acts = zt_gpt2_stage_act_bytes(in->shape, in->cfg, (int)chunks, st.spec0,
                                            st.spec1);
        if (out->acts < 0) rc = zt_error_last_code();
        const int64_t per_worker = gemm_bytes(in->shape, in->cfg, (int)chunks) +
                                   reduce_scratch(&m, st.rank, st.world, dt);
        out->runtime = ZT_MEM_PROCESS_BASE + in->workers * per_worker;
        /* at the peak (the end of a step) the gradient slots have grown */
        out->peak = out->runtime + out->params + out->grads - grad_slots0 + out->grad_slots +
                    out->optim + out->acts;
    }
    ctx_free(&m);
    return rc;
}
