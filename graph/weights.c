/*
 * graph/weights.c: weights in and out under their Hugging Face names (safetensors): load into
 * whatever this rank holds (finite values only), export the values (finite ones, see
 * ZT_ON_NONFINITE) or the gradient sums (consolidating the ranks' shards first where the state
 * is partitioned).
 *
 * Layer: graph/, behind the engine (engine_impl.h); the file format is io/zt_safetensors.h.
 */
#include <stdio.h>          /* fprintf */
#include <stdlib.h>         /* calloc, realloc, free */
#include <string.h>         /* memcpy */
#include "engine_impl.h"    /* struct zt_engine, the ZeRO plan, the offload */
#include "zt_comm.h"        /* zt_comm_count_failed */
#include "zt_finite.h"      /* zt_first_nonfinite, zt_nonfinite_name */
#include "zt_safetensors.h" /* zt_st_* */

/* what an export writes */
enum tensors { VALUES, GRADS };

// ----------------------------------------------------------------------------
// load

/* p's values from the whole tensor v (fp32): the master blocks this rank keeps, and the working
 * copy rounded (mixed precision). Between steps only. */
enum zt_status zt_weights_set_values(zt_engine_t e, struct zt_param *p, const float *v) {
    const float *own = v + zt_param_blk_row0(p, p->own0) * p->cols;
    if (p->home) {
        ZT_CHECK(zt_tensor_acquire(p->home, 1));
        const int partial = zt_engine_partial_master(e, p);
        memcpy(zt_tensor_data(p->home), partial ? own : v,
               (size_t)(partial ? zt_param_own_elems(p) : p->rows * p->cols) * sizeof(float));
        zt_tensor_release(p->home);
    }
    if (p->work) {
        ZT_CHECK(zt_tensor_acquire(p->work, 1));
        const int partial = zt_engine_partial_values(e, p);
        zt_dtype_from_f32(e->work_dtype, zt_tensor_data(p->work), partial ? own : v,
                          (size_t)(partial ? zt_param_own_elems(p) : p->rows * p->cols));
        zt_tensor_release(p->work);
    }
    return ZT_OK;
}

enum zt_status zt_engine_load_safetensors(zt_engine_t e, const char *path) {
    struct zt_safetensors st;
    ZT_CHECK(zt_st_open(&st, path));
    st.finite_only = 1; /* a NaN or Inf weight is an error naming it */
    enum zt_status rc = ZT_OK;
    float *tmp = NULL;
    for (int i = 0; i < e->nparams && rc == ZT_OK; i++) {
        struct zt_param *p = e->params[i];
        /* read it whole, keep what this rank holds */
        if (zt_engine_partial_master(e, p) || e->mixed) {
            float *t = realloc(tmp, (size_t)(p->rows * p->cols) * sizeof(float));
            if (!t) {
                rc = zt_error_set(ZT_ERR_NOMEM, "safetensors %s: out of memory", path);
                break;
            }
            tmp = t;
            rc = zt_st_read_f32(&st, p->name, p->ndim, p->shape, tmp);
            if (rc == ZT_OK) rc = zt_weights_set_values(e, p, tmp);
            continue;
        }
        rc = zt_tensor_acquire(p->home, 1);
        if (rc != ZT_OK) break;
        rc = zt_st_read_f32(&st, p->name, p->ndim, p->shape, zt_tensor_data(p->home));
        zt_tensor_release(p->home);
    }
    if (rc == ZT_OK && zt_offload_has_params(e->offload)) { /* to the swap file */
        rc = zt_runtime_wait_all();
        if (rc == ZT_OK) rc = zt_offload_write_params(e, &st, NULL, 0);
    }
    free(tmp);
    zt_st_close(&st);
    return rc;
}

// ----------------------------------------------------------------------------
// export

/* whether this rank holds only its blocks of the values or gradient sums (stage 3 values,
 * mixed-precision masters at stage >= 1, stage >= 2 gradients, stage 1's reduce-scattered sums) */
static int partitioned(const struct zt_engine *e, enum tensors which) {
    if (which == GRADS) return !(e->stage < 2 && !e->mixed && !zt_engine_scattered_sums(e));
    return e->mixed ? e->stage >= 1 : e->stage >= 3;
}

/* this rank's blocks of the values or gradients (widened to fp32) into dst, the flat layout */
static enum zt_status copy_own(zt_engine_t e, enum tensors which, float *dst) {
    enum zt_status rc = ZT_OK;
    if (which == VALUES && zt_offload_has_params(e->offload)) {
        for (int i = 0; i < e->nparams && rc == ZT_OK; i++) {
            const struct zt_param *p = e->params[i]; /* offloaded shards: from the swap file */
            for (int j = p->own0; p->offloaded && j < p->own1 && rc == ZT_OK; j++) {
                const int b = p->first_blk + j;
                rc = zt_offload_read_values(e, b, dst + e->plan.blk_start[b]);
            }
        }
    }
    for (int i = 0; i < e->nparams && rc == ZT_OK; i++) {
        const struct zt_param *p = e->params[i];
        zt_tensor_t src = which == GRADS ? p->grad_sums : p->home;
        if (!src) continue;
        const int whole =
            which == GRADS ? !zt_engine_partial_grads(e) : !zt_engine_partial_master(e, p);
        ZT_CHECK(zt_tensor_acquire(src, 0));
        const int64_t at = p->off + (whole ? 0 : zt_param_blk_row0(p, p->own0) * p->cols);
        /* gradients in mixed precision: widened (exact) into the fp32 copy */
        zt_dtype_to_f32(zt_tensor_dtype(src), dst + at, zt_tensor_data(src),
                        (size_t)(whole ? p->rows * p->cols : zt_param_own_elems(p)));
        zt_tensor_release(src);
    }
    return rc;
}

/* a flat fp32 temporary in the engine's blocks, holding this rank's own part (*out; NULL on
 * failure) */
static enum zt_status own_part(zt_engine_t e, enum tensors which, zt_tensor_t *out) {
    const struct zt_zero_plan *pl = &e->plan;
    int64_t *rows = calloc((size_t)pl->nblk, sizeof *rows);
    if (!rows) return zt_error_set(ZT_ERR_NOMEM, "engine: out of memory");
    for (int b = 0; b < pl->nblk; b++) rows[b] = pl->blk_start[b + 1] - pl->blk_start[b];
    enum zt_status rc = zt_tensor_init(out, which == GRADS ? "gathered_grads" : "gathered_params",
                                       NULL, pl->flat_n, 1, sizeof(float), pl->nblk, rows);
    free(rows);
    ZT_CHECK(rc);
    if (which == VALUES && zt_offload_has_params(e->offload)) { /* the file is current */
        rc = zt_runtime_wait_all();
        zt_io_service_wait();
    }
    if (rc == ZT_OK) rc = zt_tensor_acquire(*out, 1);
    if (rc == ZT_OK) {
        rc = copy_own(e, which, zt_tensor_data(*out));
        zt_tensor_release(*out);
    }
    return rc;
}

/* A whole copy of the values or gradient sums on every rank when they are partitioned: each
 * rank copies its blocks into a temporary tensor in the flat layout, then the blocks are
 * all-gathered bucket by bucket. *out is NULL when the rank's own tensors are whole already. */
static enum zt_status consolidate(zt_engine_t e, enum tensors which, zt_tensor_t *out) {
    *out = NULL;
    if (!partitioned(e, which)) return ZT_OK;
    const struct zt_zero_plan *pl = &e->plan;
    enum zt_status rc = own_part(e, which, out);
    struct zt_block_ref *refs = calloc((size_t)pl->nblk, sizeof *refs);
    if (rc == ZT_OK && !refs) rc = zt_error_set(ZT_ERR_NOMEM, "engine: out of memory");
    if (e->size > 1) { /* every replica's part ready, or none enters the all-gather */
        int nfailed = 0;
        const enum zt_status crc = zt_comm_count_failed(rc != ZT_OK, &nfailed);
        if (rc == ZT_OK && crc != ZT_OK) rc = crc;
        if (rc == ZT_OK && nfailed > 0)
            rc = zt_error_set(ZT_ERR_PEER, "consolidating the weights: another rank could not "
                              "read its part (see its message)");
    }
    if (rc == ZT_OK && e->size > 1) { /* the temporary's blocks are the engine's blocks */
        for (int b = 0; b < pl->nblk; b++) refs[b] = (struct zt_block_ref){*out, b, 0};
        const struct zt_step_ctx ctx = zt_engine_own_ctx(e, ZT_PRIO_DEFAULT);
        rc = zt_engine_allgather_buckets(e, &ctx.opts, pl->reduce_bucket, pl->nreduce, refs);
    }
    free(refs);
    if (rc == ZT_OK) rc = zt_runtime_wait_all();
    if (rc != ZT_OK) {
        zt_tensor_free(*out);
        *out = NULL;
    }
    return rc;
}

/* Exported values must be finite: a NaN or Inf weight is ZT_ERR_NUMERIC naming the first (the
 * file is not written), or with ZT_ON_NONFINITE=warn a warning line and ZT_OK. Every rank
 * holds the same whole values here, so every rank comes to the same verdict. */
static enum zt_status check_finite_values(zt_engine_t e, const char *path, zt_tensor_t whole) {
    if (whole) ZT_CHECK(zt_tensor_acquire(whole, 0));
    enum zt_status rc = ZT_OK;
    int64_t k = 0, n = 0;
    int i = 0;
    for (; i < e->nparams && k == n && rc == ZT_OK; i++) {
        const struct zt_param *p = e->params[i];
        if (!whole && (rc = zt_tensor_acquire(p->home, 0)) != ZT_OK) break;
        const float *v = whole ? (const float *)zt_tensor_data(whole) + p->off
                               : (const float *)zt_tensor_data(p->home);
        n = p->rows * p->cols;
        k = (int64_t)zt_first_nonfinite(v, (size_t)n);
        const char *what = k == n ? NULL : zt_nonfinite_name(v[k]);
        if (what && !e->nonfinite_warn)
            rc = zt_error_set(ZT_ERR_NUMERIC, "export %s: tensor '%s' has %s at index %lld; not "
                              "written (ZT_ON_NONFINITE=warn writes it)", path, p->name, what,
                              (long long)k);
        else if (what && e->rank == 0)
            fprintf(stderr, "zerotask: warning: export %s: tensor '%s' has %s at index %lld; "
                            "written anyway (ZT_ON_NONFINITE=warn)\n", path, p->name, what,
                    (long long)k);
        if (!whole) zt_tensor_release(p->home);
    }
    if (whole) zt_tensor_release(whole);
    return rc;
}

/* rank 0: every parameter under its name, from the whole copy or (when this rank's tensors are
 * whole) straight from them */
static enum zt_status write_tensors(zt_engine_t e, const char *path, enum tensors which,
                                    zt_tensor_t whole) {
    struct zt_st_entry *ent = calloc((size_t)e->nparams, sizeof *ent);
    if (!ent) return zt_error_set(ZT_ERR_NOMEM, "export %s: out of memory", path);
    enum zt_status rc = ZT_OK;
    int acquired = 0; /* parameters whose tensor is acquired (without a whole copy) */
    if (whole) rc = zt_tensor_acquire(whole, 0);
    for (; acquired < e->nparams && rc == ZT_OK; acquired++) {
        struct zt_param *p = e->params[acquired];
        struct zt_st_entry *en = &ent[acquired];
        en->name = p->name;
        en->ndim = p->ndim;
        memcpy(en->shape, p->shape, sizeof(int64_t) * (size_t)p->ndim);
        if (whole) {
            en->data = (const float *)zt_tensor_data(whole) + p->off;
            continue;
        }
        zt_tensor_t t = which == GRADS ? p->grad_sums : p->home;
        rc = zt_tensor_acquire(t, 0);
        if (rc != ZT_OK) break;
        en->data = zt_tensor_data(t);
    }
    if (rc == ZT_OK) rc = zt_st_write_f32(path, ent, e->nparams, NULL);
    if (whole) {
        zt_tensor_release(whole);
    } else {
        for (int i = 0; i < acquired; i++)
            zt_tensor_release(which == GRADS ? e->params[i]->grad_sums : e->params[i]->home);
    }
    free(ent);
    return rc;
}

/* Rank 0 writes (after gathering what the ranks hold in parts); the outcome is shared so that
 * all ranks succeed or fail together. */
static enum zt_status save_tensors(zt_engine_t e, const char *path, enum tensors which) {
    zt_tensor_t whole = NULL;
    enum zt_status rc = consolidate(e, which, &whole); /* a pipeline: among a stage's replicas */
    if (e->pipe.stages > 1) { /* each stage's own, to world rank 0 (engine_pipe.c) */
        if (rc == ZT_OK && which == VALUES) rc = check_finite_values(e, path, whole);
        int nfailed = 0;
        enum zt_status crc = zt_comm_count_failed(rc != ZT_OK, &nfailed);
        if (rc == ZT_OK && crc != ZT_OK) rc = crc;
        if (rc == ZT_OK && nfailed > 0)
            rc = zt_error_set(ZT_ERR_NUMERIC, "export %s: another stage's weights are not "
                              "finite (its rank says which)", path);
        if (rc == ZT_OK) rc = zt_engine_pipe_save(e, path, which == GRADS, whole);
        zt_tensor_free(whole);
        return rc;
    }
    if (rc == ZT_OK && which == VALUES) rc = check_finite_values(e, path, whole);
    if (rc == ZT_OK && e->rank == 0) rc = write_tensors(e, path, which, whole);
    zt_tensor_free(whole);
    if (e->size > 1) {
        int nfailed = 0;
        ZT_CHECK(zt_comm_count_failed(rc != ZT_OK, &nfailed));
        if (nfailed > 0 && rc == ZT_OK)
            rc = zt_error_set(ZT_ERR_PEER, "safetensors %s: rank 0 could not write it", path);
    }
    return rc;
}

enum zt_status zt_engine_save_safetensors(zt_engine_t e, const char *path) {
    return save_tensors(e, path, VALUES);
}

enum zt_status zt_engine_save_grads_safetensors(zt_engine_t e, const char *path) {
    return save_tensors(e, path, GRADS);
}
