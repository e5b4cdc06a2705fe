/*
 * graph/weights.c: safetensors.
 *
 * Layer: graph/ (behind zt_engine.h). No starpu_* call: work goes through tasks/.
 */
#include "engine_impl.h" /* struct zt_engine, internal functions */
/* ---------------------------------------------------------------------------------------------
 * safetensors */

/* p's values from the whole tensor v (fp32): the master blocks this rank keeps, and the working
 * copy rounded (mixed precision). Between steps only. */
enum zt_status zt_weights_set_values(zt_engine_t e, struct zt_param *p, const float *v) {
    const float *own = v + blk_row0(p, p->own0) * p->cols;
    if (p->home) {
        ZT_CHECK(zt_tensor_acquire(p->home, 1));
        int pm = partial_master(e, p);
        memcpy(zt_tensor_data(p->home), pm ? own : v,
               (size_t)(pm ? own_elems(p) : p->rows * p->cols) * sizeof(float));
        zt_tensor_release(p->home);
    }
    if (p->work) {
        ZT_CHECK(zt_tensor_acquire(p->work, 1));
        int ph = partial_home(e, p);
        zt_dtype_from_f32(e->wdt, zt_tensor_data(p->work), ph ? own : v,
                          (size_t)(ph ? own_elems(p) : p->rows * p->cols));
        zt_tensor_release(p->work);
    }
    return ZT_OK;
}
enum zt_status zt_engine_load_safetensors(zt_engine_t e, const char *path) {
    struct zt_safetensors st;
    ZT_CHECK(zt_st_open(&st, path));
    enum zt_status rc = ZT_OK;
    float *tmp = NULL;
    for (int i = 0; i < e->np && rc == ZT_OK; i++) {
        struct zt_param *p = e->params[i];
        if (partial_master(e, p) || e->mp) { /* read it whole, keep what this rank holds */
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
    if (rc == ZT_OK && e->par_nvme) { /* offloaded shards go to the swap file */
        rc = zt_runtime_wait_all();
        if (rc == ZT_OK) rc = zt_offload_write_params(e, &st, NULL, 0);
    }
    free(tmp);
    zt_st_close(&st);
    return rc;
}

/* A whole copy of the values (which = 0) or gradient sums (1) on every rank when this rank holds
 * only its blocks of them (stage 3 values, stage >= 2 gradients, stage 1's reduce-scattered
 * sums): each rank copies its blocks
 * into a temporary tensor in the flat layout, then the blocks are all-gathered bucket by bucket.
 * *out is NULL when the rank's own tensors are whole already. */
static enum zt_status consolidate(zt_engine_t e, int which, zt_tensor_t *out) {
    *out = NULL;
    if (which ? e->stage < 2 && !e->mp && !scattered_sums(e)
              : !(e->mp ? e->stage >= 1 : e->stage >= 3))
        return ZT_OK;
    int64_t *rows = calloc((size_t)e->nb, sizeof *rows);
    if (!rows) return zt_error_set(ZT_ERR_NOMEM, "engine: out of memory");
    for (int b = 0; b < e->nb; b++) rows[b] = e->babs[b + 1] - e->babs[b];
    enum zt_status rc = zt_tensor_init(out, which ? "gathered_grads" : "gathered_params", NULL,
                                       e->flat_n, 1, sizeof(float), e->nb, rows);
    free(rows);
    ZT_CHECK(rc);
    if (!which && e->par_nvme) { /* the file is current */
        rc = zt_runtime_wait_all();
        zt_swap_wait();
    }
    if (rc == ZT_OK) rc = zt_tensor_acquire(*out, 1);
    float *dst = zt_tensor_data(*out);
    for (int i = 0; !which && e->par_nvme && i < e->np && rc == ZT_OK; i++) {
        struct zt_param *p = e->params[i]; /* offloaded shards: read from the swap file */
        for (int j = p->own0; p->offl && j < p->own1 && rc == ZT_OK; j++) {
            int b = p->first_blk + j;
            rc = zt_offload_read_values(e, b, dst + e->babs[b]);
        }
    }
    for (int i = 0; i < e->np && rc == ZT_OK; i++) {
        struct zt_param *p = e->params[i];
        zt_tensor_t src = which ? p->ghome : p->home;
        if (!src) continue;
        int whole = which ? !partial_ghome(e) : !partial_master(e, p);
        rc = zt_tensor_acquire(src, 0);
        if (rc != ZT_OK) break;
        int64_t at = p->off + (whole ? 0 : blk_row0(p, p->own0) * p->cols);
        /* gradients in mixed precision: widened (exact) into the fp32 copy */
        zt_dtype_to_f32(zt_tensor_dtype(src), dst + at, zt_tensor_data(src),
                        (size_t)(whole ? p->rows * p->cols : own_elems(p)));
        zt_tensor_release(src);
    }
    if (rc == ZT_OK) zt_tensor_release(*out);
    if (rc == ZT_OK && e->size > 1) { /* the temporary's blocks are the engine's blocks */
        struct zt_block_ref *refs = calloc((size_t)e->nb, sizeof *refs);
        if (!refs) rc = zt_error_set(ZT_ERR_NOMEM, "engine: out of memory");
        for (int b = 0; refs && b < e->nb; b++) refs[b] = (struct zt_block_ref){*out, b, 0};
        struct zt_task_opts o = zt_engine_opts(e, ZT_PRIO_DEFAULT, -1, 0, -1);
        if (rc == ZT_OK) rc = zt_engine_allgather_buckets(e, &o, e->rbuckets, e->nrb, refs);
        free(refs);
    }
    if (rc == ZT_OK) rc = zt_runtime_wait_all();
    if (rc != ZT_OK) {
        zt_tensor_free(*out);
        *out = NULL;
    }
    return rc;
}

static enum zt_status write_tensors(zt_engine_t e, const char *path, int which,
                                    zt_tensor_t whole);

/* Rank 0 writes (after gathering what the ranks hold in parts); the outcome is shared so that
 * all ranks succeed or fail together. */
static enum zt_status save_tensors(zt_engine_t e, const char *path, int which) {
    zt_tensor_t whole = NULL;
    enum zt_status rc = consolidate(e, which, &whole);
    if (rc == ZT_OK && e->rank == 0) rc = write_tensors(e, path, which, whole);
    zt_tensor_free(whole);
    if (e->size > 1) {
        double bad = rc != ZT_OK;
        ZT_CHECK(zt_comm_sum_double(&bad));
        if (bad > 0 && rc == ZT_OK)
            rc = zt_error_set(ZT_ERR_IO, "safetensors %s: rank 0 could not write it", path);
    }
    return rc;
}

static enum zt_status write_tensors(zt_engine_t e, const char *path, int which,
                                    zt_tensor_t whole) {
    struct zt_st_entry *ent = calloc((size_t)e->np, sizeof *ent);
    if (!ent) return zt_error_set(ZT_ERR_NOMEM, "export %s: out of memory", path);
    enum zt_status rc = ZT_OK;
    int acq = 0;
    if (whole) rc = zt_tensor_acquire(whole, 0);
    for (; acq < e->np && rc == ZT_OK; acq++) {
        struct zt_param *p = e->params[acq];
        ent[acq].name = p->name;
        ent[acq].ndim = p->ndim;
        memcpy(ent[acq].shape, p->shape, sizeof(int64_t) * (size_t)p->ndim);
        if (whole) {
            ent[acq].data = (const float *)zt_tensor_data(whole) + p->off;
            continue;
        }
        zt_tensor_t t = which ? p->ghome : p->home;
        rc = zt_tensor_acquire(t, 0);
        if (rc != ZT_OK) break;
        ent[acq].data = zt_tensor_data(t);
    }
    if (rc == ZT_OK) rc = zt_st_write_f32(path, ent, e->np, NULL);
    if (whole) {
        zt_tensor_release(whole);
    } else {
        for (int i = 0; i < acq; i++)
            zt_tensor_release(which ? e->params[i]->ghome : e->params[i]->home);
    }
    free(ent);
    return rc;
}

enum zt_status zt_engine_save_safetensors(zt_engine_t e, const char *path) {
    return save_tensors(e, path, 0);
}

enum zt_status zt_engine_save_grads_safetensors(zt_engine_t e, const char *path) {
    return save_tensors(e, path, 1);
}
