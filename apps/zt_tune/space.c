/*
 * apps/zt_tune/space.c: the tuner's space: the candidates of the micro-batch phase (ZeRO stage x
 * offload placement x precision x micro-batch), the neighbours a replay predicts (scheduler
 * policy, workers per rank) and those a refinement measures (chunking, buckets, overlap, stage-3
 * windows, aio); each candidate's DeepSpeed config and the memory model's verdict on it.
 *
 * Layer: apps/ (private to zt-tune).
 */
#include <stdlib.h>   /* realloc, getenv, atoi */
#include <string.h>   /* strcmp, snprintf */
#include "tune.h"

// ----------------------------------------------------------------------------
// one configuration

void knobs_from_config(struct knobs *k, const struct zt_config *cfg) {
    *k = (struct knobs){
        .stage = cfg->zero_stage, .micro = cfg->micro_batch, .accum = cfg->grad_accum,
        .train_batch = cfg->train_batch_size, .prec = cfg->precision,
        .opt_dev = cfg->offload_optimizer.device, .param_dev = cfg->offload_param.device,
        .reduce_bucket = cfg->reduce_bucket_size, .allgather_bucket = cfg->allgather_bucket_size,
        .overlap_comm = cfg->overlap_comm, .s3_max_live = cfg->stage3_max_live_parameters,
        .s3_prefetch = cfg->stage3_prefetch_bucket_size,
        .opt_buffers = cfg->offload_optimizer.buffer_count,
        .param_buffers = cfg->offload_param.buffer_count, .aio_block = cfg->aio_block_size,
        .aio_queue_depth = cfg->aio_queue_depth, .workers = 1};
    const char *s = getenv("STARPU_SCHED");
    snprintf(k->sched, sizeof k->sched, "%s", s && *s ? s : zt_runtime_default_sched());
    int64_t chunks = 4;
    zt_knob_int("ZT_GRAPH_CHUNKS", &chunks); /* checked at start-up (zt_knobs_check) */
    k->chunks = (int)chunks;
}

void knobs_key(const struct knobs *k, char *out, size_t n) {
    snprintf(out, n, "ranks=%d stage=%d micro=%d accum=%d batch=%d prec=%s opt=%s param=%s rb=%lld "
             "ag=%lld overlap=%d live=%lld prefetch=%lld buffers=%d/%d aio=%lld/%d workers=%d "
             "chunks=%d sched=%s", k->ranks, k->stage, k->micro, k->accum, k->train_batch,
             zt_precision_name(k->prec), zt_offload_device_name(k->opt_dev),
             zt_offload_device_name(k->param_dev), (long long)k->reduce_bucket,
             (long long)k->allgather_bucket, k->overlap_comm, (long long)k->s3_max_live,
             (long long)k->s3_prefetch, k->opt_buffers, k->param_buffers,
             (long long)k->aio_block, k->aio_queue_depth, k->workers,
             k->chunks, k->sched);
}

void knobs_describe(const struct knobs *k, char *out, size_t n) {
    int at = snprintf(out, n, "stage %d | micro %d x accum %d | %s", k->stage, k->micro,
                      k->accum, zt_precision_name(k->prec));
    if (k->opt_dev != ZT_OFFLOAD_NONE && at < (int)n)
        at += snprintf(out + at, n - (size_t)at, " | optimizer on %s",
                       zt_offload_device_name(k->opt_dev));
    if (k->param_dev != ZT_OFFLOAD_NONE && at < (int)n)
        at += snprintf(out + at, n - (size_t)at, " | params on %s",
                       zt_offload_device_name(k->param_dev));
    if (at < (int)n)
        snprintf(out + at, n - (size_t)at, " | %d rank(s) x %d workers | %s | chunks %d",
                 k->ranks, k->workers, k->sched, k->chunks);
}

int tune_add(struct tune *t, const struct knobs *k, const char *phase) {
    char key[sizeof t->c[0].key];
    knobs_key(k, key, sizeof key);
    for (int i = 0; i < t->n; i++)
        if (!strcmp(t->c[i].key, key)) return i;
    if (t->n == t->cap) {
        int cap = t->cap ? 2 * t->cap : 64;
        struct cand *c = realloc(t->c, (size_t)cap * sizeof *c);
        if (!c) return -1;
        t->c = c;
        t->cap = cap;
    }
    struct cand *c = &t->c[t->n];
    *c = (struct cand){.k = *k, .state = CAND_PENDING, .phase = phase, .pred_ms = -1,
                       .meas_ms = -1, .meas_peak_mib = -1, .from = -1};
    snprintf(c->key, sizeof c->key, "%s", key);
    return t->n++;
}

// ----------------------------------------------------------------------------
// its DeepSpeed config

/* root[section] as an object, made when missing */
static cJSON *section(cJSON *root, const char *name) {
    cJSON *s = cJSON_GetObjectItemCaseSensitive(root, name);
    if (!cJSON_IsObject(s)) {
        cJSON_DeleteItemFromObjectCaseSensitive(root, name);
        s = cJSON_AddObjectToObject(root, name);
    }
    return s;
}

static void set_num(cJSON *obj, const char *key, double v) {
    cJSON_DeleteItemFromObjectCaseSensitive(obj, key);
    cJSON_AddNumberToObject(obj, key, v);
}

static void set_bool(cJSON *obj, const char *key, int v) {
    cJSON_DeleteItemFromObjectCaseSensitive(obj, key);
    cJSON_AddBoolToObject(obj, key, v);
}

/* an offload section: the device, the NVMe directory when it goes there, its buffers (0: as
 * the user's config has it) */
static void set_offload(const struct tune *t, cJSON *zero, const char *name,
                        enum zt_offload_device d, int buffers) {
    if (d == ZT_OFFLOAD_NONE) {
        cJSON_DeleteItemFromObjectCaseSensitive(zero, name);
        return;
    }
    cJSON *o = section(zero, name);
    cJSON_DeleteItemFromObjectCaseSensitive(o, "device");
    cJSON_AddStringToObject(o, "device", zt_offload_device_name(d));
    if (d == ZT_OFFLOAD_NVME && t->nvme_path) {
        cJSON_DeleteItemFromObjectCaseSensitive(o, "nvme_path");
        cJSON_AddStringToObject(o, "nvme_path", t->nvme_path);
    }
    if (buffers > 0) set_num(o, "buffer_count", buffers);
}

static void set_precision(cJSON *root, enum zt_precision p) {
    cJSON_DeleteItemFromObjectCaseSensitive(root, "bfloat16");
    static const char *const names[] = {"bf16", "fp16"};
    for (int i = 0; i < 2; i++) {
        int on = p == (i ? ZT_PREC_FP16 : ZT_PREC_BF16);
        cJSON *s = cJSON_GetObjectItemCaseSensitive(root, names[i]);
        if (!s && !on) continue;
        set_bool(section(root, names[i]), "enabled", on);
    }
}

cJSON *knobs_config(const struct tune *t, const struct knobs *k, int trial) {
    cJSON *root = cJSON_Duplicate(t->user, 1);
    if (!root) return NULL;
    set_num(root, "train_batch_size", k->train_batch);
    set_num(root, "train_micro_batch_size_per_gpu", k->micro);
    set_num(root, "gradient_accumulation_steps", k->accum);
    cJSON *zero = section(root, "zero_optimization");
    set_num(zero, "stage", k->stage);
    set_num(zero, "reduce_bucket_size", (double)k->reduce_bucket);
    set_num(zero, "allgather_bucket_size", (double)k->allgather_bucket);
    set_bool(zero, "overlap_comm", k->overlap_comm);
    if (k->stage == 3) {
        set_num(zero, "stage3_max_live_parameters", (double)k->s3_max_live);
        set_num(zero, "stage3_prefetch_bucket_size", (double)k->s3_prefetch);
    }
    set_offload(t, zero, "offload_optimizer", k->opt_dev, k->opt_buffers);
    set_offload(t, zero, "offload_param", k->param_dev, k->param_buffers);
    set_precision(root, k->prec);
    if (k->opt_dev == ZT_OFFLOAD_NVME || k->param_dev == ZT_OFFLOAD_NVME) {
        cJSON *aio = section(root, "aio");
        set_num(aio, "block_size", (double)k->aio_block);
        set_num(aio, "queue_depth", k->aio_queue_depth);
    }
    cJSON_DeleteItemFromObjectCaseSensitive(root, "autotuning");
    if (trial) cJSON_DeleteItemFromObjectCaseSensitive(root, "checkpoint");
    return root;
}

// ----------------------------------------------------------------------------
// the memory model's verdict

int64_t tune_budget(const struct tune *t, const struct knobs *k) {
    return t->budget ? t->budget : t->machine_mem / k->ranks;
}

int cand_fits(const struct tune *t, const struct cand *c) {
    return c->pred_peak * TUNE_MEMORY_MARGIN <= (double)tune_budget(t, &c->k);
}

enum zt_status cand_predict_memory(struct tune *t, struct cand *c) {
    cJSON *js = knobs_config(t, &c->k, 1);
    char *text = js ? cJSON_PrintUnformatted(js) : NULL;
    cJSON_Delete(js);
    if (!text) return zt_error_set(ZT_ERR_NOMEM, "out of memory");
    struct zt_config cfg;
    enum zt_log_level level = zt_log_level(); /* its notes were said for the user's config */
    zt_log_set_level(ZT_LOG_WARN < level ? ZT_LOG_WARN : level);
    enum zt_status rc = zt_config_parse(&cfg, text, "(candidate)", c->k.ranks);
    zt_log_set_level(level);
    cJSON_free(text);
    if (rc != ZT_OK) { /* a combination zt-train refuses: not part of the space */
        c->state = CAND_PRUNED;
        snprintf(c->why, sizeof c->why, "not a valid config: %s", zt_error_last());
        return ZT_OK;
    }
    c->pred_peak = 0;
    for (int r = 0; r < c->k.ranks; r++) {
        struct zt_mem_prediction p;
        const struct zt_mem_inputs in = {.shape = &t->shape, .cfg = &cfg,
                                         .world_size = c->k.ranks, .rank = r,
                                         .workers = c->k.workers, .chunks = c->k.chunks};
        if (zt_memory_predict(&in, &p) != ZT_OK) {
            if (zt_error_last_code() != ZT_ERR_CONFIG) return zt_error_last_code();
            c->state = CAND_PRUNED; /* the engine would refuse it too */
            snprintf(c->why, sizeof c->why, "not a valid config: %s", zt_error_last());
            return ZT_OK;
        }
        if (p.peak > c->pred_peak) c->pred_peak = p.peak;
    }
    if (!cand_fits(t, c)) {
        c->state = CAND_PRUNED;
        snprintf(c->why, sizeof c->why, "memory: predicted peak %.1f MiB, with the model's "
                 "%.0f%% margin %.1f MiB > budget %.1f MiB", c->pred_peak / 1048576.0,
                 100 * (TUNE_MEMORY_MARGIN - 1), c->pred_peak * TUNE_MEMORY_MARGIN / 1048576.0,
                 tune_budget(t, &c->k) / 1048576.0);
    }
    return ZT_OK;
}

// ----------------------------------------------------------------------------
// the micro-batch phase: stage x placement x precision x micro-batch

/* The micro-batch sizes to try on `ranks` ranks, largest first, with their accumulation:
 * divisors of the per-rank batch (global batch fixed), or powers of two within
 * max_train_batch_size with the configured accumulation. Returns how many. */
static int micro_sizes(const struct tune *t, int ranks, int *micro, int *accum, int max) {
    const struct zt_autotune_cfg *at = &t->at;
    int n = 0;
    if (!at->max_train_batch_size) {
        if (t->cfg.train_batch_size % ranks) return 0;
        int per_rank = t->cfg.train_batch_size / ranks;
        for (int m = per_rank; m >= 1 && n < max; m--)
            if (per_rank % m == 0 && m >= at->min_train_micro_batch_size_per_gpu &&
                m <= at->max_train_micro_batch_size_per_gpu) {
                micro[n] = m;
                accum[n++] = per_rank / m;
            }
        return n;
    }
    for (int m = at->max_train_micro_batch_size_per_gpu; m >= 1 && n < max; m /= 2) {
        int64_t tbs = (int64_t)m * t->cfg.grad_accum * ranks;
        if (tbs > at->max_train_batch_size || tbs < at->min_train_batch_size ||
            m < at->min_train_micro_batch_size_per_gpu)
            continue;
        micro[n] = m;
        accum[n++] = t->cfg.grad_accum;
    }
    return n;
}

/* Of a class's candidates (largest micro-batch first), those that fit: keep
 * num_tuning_micro_batch_sizes spread from the largest to the smallest, prune the others. */
static void keep_spread(struct tune *t, const int *idx, int n) {
    int fit[256], nfit = 0;
    for (int i = 0; i < n; i++)
        if (t->c[idx[i]].state == CAND_PENDING) fit[nfit++] = idx[i];
    int keep = t->at.num_tuning_micro_batch_sizes;
    if (nfit <= keep) return;
    for (int i = 0; i < nfit; i++) {
        int chosen = 0;
        for (int j = 0; j < keep && !chosen; j++)
            chosen = i == (keep > 1 ? (int)((double)j * (nfit - 1) / (keep - 1) + 0.5) : 0);
        if (chosen) continue;
        struct cand *c = &t->c[fit[i]];
        c->state = CAND_PRUNED;
        snprintf(c->why, sizeof c->why, "not among the %d micro-batch sizes tried per class "
                 "(autotuning.num_tuning_micro_batch_sizes)", keep);
    }
}

/* the placements: nothing offloaded; the optimizer state on NVMe (stage >= 1); the parameters
 * too (stage 3). Offload to "cpu" moves nothing on a machine without accelerators: the state is
 * in host memory already. */
static int placements(const struct tune *t, int stage, enum zt_offload_device opt[3],
                      enum zt_offload_device par[3]) {
    int n = 0;
    opt[n] = par[n] = ZT_OFFLOAD_NONE, n++;
    if (!t->nvme_path || stage == 0) return n;
    opt[n] = ZT_OFFLOAD_NVME, par[n] = ZT_OFFLOAD_NONE, n++;
    if (stage == 3) opt[n] = par[n] = ZT_OFFLOAD_NVME, n++;
    return n;
}

/* the rank counts to try: --ranks, or (auto) every count that divides the cores and the
 * global batch, each rank with cores / ranks workers */
static int rank_choices(const struct tune *t, int *out, int max) {
    if (t->ranks > 0) {
        out[0] = t->ranks;
        return 1;
    }
    int n = 0;
    for (int r = 1; r <= t->cores && n < max; r++)
        if (t->cores % r == 0 && t->cfg.train_batch_size % r == 0) out[n++] = r;
    return n;
}

/* one class (ranks, stage, placement, precision) and its micro-batch sizes */
static enum zt_status add_class(struct tune *t, const struct knobs *k0, const int *micro,
                                const int *accum, int nm) {
    int idx[256];
    for (int m = 0; m < nm; m++) {
        struct knobs k = *k0;
        k.micro = micro[m], k.accum = accum[m];
        k.train_batch = micro[m] * accum[m] * k.ranks;
        if ((idx[m] = tune_add(t, &k, "micro-batch")) < 0)
            return zt_error_set(ZT_ERR_NOMEM, "out of memory");
        ZT_CHECK(cand_predict_memory(t, &t->c[idx[m]]));
    }
    keep_spread(t, idx, nm);
    return ZT_OK;
}

enum zt_status space_micro_batch(struct tune *t) {
    struct knobs base;
    knobs_from_config(&base, &t->cfg);
    enum zt_precision precs[2] = {t->cfg.precision, ZT_PREC_BF16};
    if (t->cfg.precision == ZT_PREC_BF16) precs[1] = ZT_PREC_FP32;
    int ranks[64], nr = rank_choices(t, ranks, 64), classes = 0;
    for (int ri = 0; ri < nr; ri++) {
        int micro[256], accum[256], nm = micro_sizes(t, ranks[ri], micro, accum, 256);
        base.ranks = ranks[ri];
        base.workers = t->cores / ranks[ri] > 0 ? t->cores / ranks[ri] : 1;
        for (int stage = 0; stage <= 3 && nm > 0; stage++) {
            enum zt_offload_device opt[3], par[3];
            int np = placements(t, stage, opt, par);
            for (int pi = 0; pi < np; pi++)
                for (int pr = 0; pr < (t->allow_precision ? 2 : 1); pr++, classes++) {
                    struct knobs k = base;
                    k.stage = stage, k.opt_dev = opt[pi], k.param_dev = par[pi];
                    k.prec = precs[pr];
                    ZT_CHECK(add_class(t, &k, micro, accum, nm));
                }
        }
    }
    if (classes == 0)
        return zt_error_set(ZT_ERR_CONFIG, "config %s: no micro-batch size between %d and %d "
                            "divides the per-rank batch (train_batch_size %d)", t->ds_config,
                            t->at.min_train_micro_batch_size_per_gpu,
                            t->at.max_train_micro_batch_size_per_gpu, t->cfg.train_batch_size);
    return ZT_OK;
}

// ----------------------------------------------------------------------------
// neighbours of a measured candidate

/* add k as a neighbour of b (memory predicted; what it changes in its note) to out[n] */
static int add_neighbour(struct tune *t, const struct knobs *k, const char *phase,
                         const char *change, int b, int *out, int n, int max) {
    if (n >= max) return n;
    int i = tune_add(t, k, phase);
    if (i < 0 || i == b) return n;
    struct cand *c = &t->c[i];
    if (c->state == CAND_PENDING && !c->why[0])
        snprintf(c->why, sizeof c->why, "%.160s (from exp%03d)", change, b);
    if (c->state == CAND_PENDING && cand_predict_memory(t, c) != ZT_OK) return n;
    out[n] = i;
    return n + 1;
}

int space_replay_neighbours(struct tune *t, int b, int *out, int max) {
    static const char *const scheds[] = {"lws", "eager", "prio", "dmdas"};
    const int ranks = t->c[b].k.ranks;
    int n = 0, most = t->cores / ranks > 0 ? t->cores / ranks : 1;
    for (int s = 0; s < 4; s++)
        for (int w = 1; w <= most; w++) {
            struct knobs k = t->c[b].k;
            snprintf(k.sched, sizeof k.sched, "%s", scheds[s]);
            k.workers = w;
            n = add_neighbour(t, &k, "replay", "", b, out, n, max);
        }
    return n;
}

/* the one-knob changes of base: knobs and what changed, at most 16 */
static int refine_changes(const struct tune *t, const struct knobs *base, struct knobs *v,
                          char (*what)[64]) {
    const int64_t numel = zt_gpt2_numel(&t->shape);
    const int nvme_opt = base->opt_dev == ZT_OFFLOAD_NVME;
    const int nvme_par = base->param_dev == ZT_OFFLOAD_NVME;
    int n = 0;
#define CHANGE(cond, field, value, fmt)                                                          \
    do {                                                                                         \
        if ((cond) && base->field != (value)) {                                                  \
            v[n] = *base, v[n].field = (value);                                                  \
            snprintf(what[n++], 64, fmt, (long long)(value));                                    \
        }                                                                                        \
    } while (0)
    CHANGE(1, chunks, 2, "ZT_GRAPH_CHUNKS %lld");
    CHANGE(1, chunks, 8, "ZT_GRAPH_CHUNKS %lld");
    CHANGE(base->stage >= 1, reduce_bucket, numel / 8, "reduce_bucket_size %lld");
    CHANGE(base->stage >= 1, allgather_bucket, numel / 8, "allgather_bucket_size %lld");
    CHANGE(base->stage >= 2, overlap_comm, !base->overlap_comm, "overlap_comm %lld");
    CHANGE(base->stage == 3, s3_prefetch, numel / 16, "stage3_prefetch_bucket_size %lld");
    CHANGE(base->stage == 3, s3_max_live, numel / 4, "stage3_max_live_parameters %lld");
    CHANGE(nvme_opt, opt_buffers, 4, "offload_optimizer.buffer_count %lld");
    CHANGE(nvme_opt, opt_buffers, 16, "offload_optimizer.buffer_count %lld");
    CHANGE(nvme_par, param_buffers, 3, "offload_param.buffer_count %lld");
    CHANGE(nvme_par, param_buffers, 8, "offload_param.buffer_count %lld");
    CHANGE(nvme_opt || nvme_par, aio_block, 262144, "aio.block_size %lld");
    CHANGE(nvme_opt || nvme_par, aio_block, 4194304, "aio.block_size %lld");
    CHANGE(nvme_opt || nvme_par, aio_queue_depth, 4, "aio.queue_depth %lld");
    CHANGE(nvme_opt || nvme_par, aio_queue_depth, 32, "aio.queue_depth %lld");
#undef CHANGE
    return n;
}

int space_refine_neighbours(struct tune *t, int b, int *out, int max) {
    struct knobs v[16];
    char what[16][64];
    int nv = refine_changes(t, &t->c[b].k, v, what), n = 0;
    for (int i = 0; i < nv; i++) n = add_neighbour(t, &v[i], "refine", what[i], b, out, n, max);
    return n;
}
