/*
 * tasks/inference.c: the task kinds that only generation needs: the embedding of rows at their
 * own positions, appending K/V to a KV cache, attention against it, and gathering rows.
 *
 * Layer: tasks/ (an op file), over kernels/cpu/encoder.c and kernels/cpu/attention.c. A step's
 * rows belong to sequences in KV-cache slots (struct zt_row_pos); a task on row block blk takes
 * the cache blocks of the slots its rows belong to (a list slot), so steps of different slots
 * only wait for each other where they share a block. The rows' positions travel in the task's
 * arguments (a flexible array), not in a tensor: the host knows them when it submits.
 */
#include <stdlib.h>      /* calloc */
#include <string.h>      /* memcpy */
#include "zt_kernels.h"  /* zt_kern_encoder_forward, zt_kern_attention_cached */
#include "tasks_impl.h"  /* builder, slots */

struct zt_row_arg {
    int32_t pos;   /* position in its sequence (gather_rows: the source row) */
    int32_t kvi;   /* index of its slot's block in the task's cache list */
    int32_t token; /* embed_rows: its token */
};

struct zt_rows_args {
    struct zt_task_hdr hdr;
    int C, NH, nrows;
    int ctx;    /* positions per cache slot */
    int fed;    /* embed_rows: the tokens are in the int32 buffer 3 (row.token: their index) */
    int tiles;  /* embed_rows: wte_t packed for the bf16 engine (zt_tensor_bf16_tiles) */
    int64_t V;  /* embed_rows: the columns of wte_t (the vocabulary) */
    int h0, h1; /* attention: the heads it computes */
    struct zt_row_arg row[]; /* the block's rows */
};

/* The args of a task on row block blk of t: its rows, and in refs the distinct cache blocks
 * of their slots (kvi indexes refs). NULL when out of memory. */
static struct zt_rows_args *rows_args(zt_tensor_t t, int blk, zt_tensor_t kv,
                                      const struct zt_row_pos *rows, const int32_t *tokens,
                                      struct zt_block_ref **refs, int *nrefs) {
    int64_t r0 = zt_tensor_blk_row0(t, blk), n = zt_tensor_blk_rows(t, blk);
    struct zt_rows_args *a = calloc(1, sizeof *a + (size_t)n * sizeof a->row[0]);
    *refs = kv ? calloc((size_t)n, sizeof **refs) : NULL;
    *nrefs = 0;
    if (!a || (kv && !*refs)) {
        free(a);
        free(*refs);
        *refs = NULL;
        return NULL;
    }
    a->nrows = (int)n;
    for (int64_t i = 0; i < n; i++) {
        const struct zt_row_pos *rp = &rows[r0 + i];
        a->row[i].pos = rp->pos;
        a->row[i].token = tokens ? tokens[r0 + i] : 0;
        if (!kv) continue;
        int k = *nrefs - 1; /* rows of one slot are consecutive: the last slot seen, or new */
        if (k < 0 || (*refs)[k].blk != rp->slot) {
            k = (*nrefs)++;
            (*refs)[k] = (struct zt_block_ref){.t = kv, .blk = rp->slot};
        }
        a->row[i].kvi = k;
    }
    return a;
}

static size_t rows_args_size(const struct zt_rows_args *a) {
    return sizeof *a + (size_t)a->nrows * sizeof a->row[0];
}

/* slot s appears among rows[r0..i) */
static int slot_seen(const struct zt_row_pos *rows, int64_t r0, int64_t i, int32_t s) {
    for (int64_t j = r0; j < i; j++)
        if (rows[j].slot == s) return 1;
    return 0;
}

/* the rows must name slots of kv (each slot's rows together in the block) and positions inside
 * a slot's cache */
static enum zt_status check_rows(const char *fn, zt_tensor_t t, int blk, zt_tensor_t kv,
                                 const struct zt_row_pos *rows, int64_t ctx) {
    ZT_CHECK(zt_check_blk(fn, t, blk));
    int64_t r0 = zt_tensor_blk_row0(t, blk), n = zt_tensor_blk_rows(t, blk);
    for (int64_t i = r0; i < r0 + n; i++) {
        int bad_slot = kv && (rows[i].slot < 0 || rows[i].slot >= zt_tensor_nblk(kv));
        if (bad_slot || rows[i].pos < 0 || rows[i].pos >= ctx)
            return zt_error_set(ZT_ERR_INVALID, "%s: row %lld names slot %d position %d, "
                                                "outside the cache (%d slots of %lld positions)",
                                fn, (long long)i, rows[i].slot, rows[i].pos,
                                kv ? zt_tensor_nblk(kv) : 0, (long long)ctx);
        if (kv && i > r0 && rows[i].slot != rows[i - 1].slot &&
            slot_seen(rows, r0, i - 1, rows[i].slot))
            return zt_error_set(ZT_ERR_INVALID, "%s: the rows of slot %d are not together in "
                                                "block %d", fn, rows[i].slot, blk);
    }
    return ZT_OK;
}

// ----------------------------------------------------------------------------
// embedding: out row = column token of wte_t + wpe[pos], 16-bit tables widened a row at a time

/* column j of t ([rows, cols] of elements of es bytes, or bf16 in the engine's tiles) into
 * dst, as stored */
static void gather_col(void *dst, const void *t, int64_t rows, int64_t cols, int64_t j,
                       size_t es, int tiles) {
    const char *p = (const char *)t + (size_t)j * es;
    for (int64_t r = 0; r < rows && tiles; r++)
        ((uint16_t *)dst)[r] = zt_kern_bf16_packed_at(t, (int)rows, (int)cols, (int)r, (int)j);
    for (int64_t r = 0; r < rows && !tiles; r++)
        memcpy((char *)dst + (size_t)r * es, p + (size_t)(r * cols) * es, es);
}

void embed_rows_cpu(void *buffers[], void *cl_arg) {
    const struct zt_rows_args *a = cl_arg;
    float *out = zt_slot_ptr(buffers, &a->hdr, 0);
    const void *wte = zt_slot_ptr(buffers, &a->hdr, 1), *wpe = zt_slot_ptr(buffers, &a->hdr, 2);
    enum zt_dtype dt = (enum zt_dtype)a->hdr.dtype[1], dp = (enum zt_dtype)a->hdr.dtype[2];
    size_t et = zt_dtype_size(dt), ep = zt_dtype_size(dp);
    int64_t V = a->V;
    float *w = zt_worker_scratch(ZT_SCRATCH_BODY, 3 * (size_t)a->C), *p = w + a->C;
    void *col = p + a->C; /* the token's column as stored */
    const int32_t zero = 0, *fed = a->fed ? zt_slot_ptr(buffers, &a->hdr, 3) : NULL;
    for (int i = 0; i < a->nrows; i++) {
        int32_t token = fed ? fed[a->row[i].token] : a->row[i].token;
        ZT_ASSERT_MSG(token >= 0 && token < V, "embed_rows: token %d outside [0, %lld)", token,
                      (long long)V); /* checked at submission, or picked by the sampler */
        gather_col(col, wte, a->C, V, token, et, a->tiles);
        zt_dtype_to_f32(dt, w, col, (size_t)a->C);
        zt_dtype_to_f32(dp, p, (const char *)wpe + (size_t)a->row[i].pos * a->C * ep,
                        (size_t)a->C);
        zt_kern_encoder_forward(out + (size_t)i * a->C, &zero, w, p, 1, 1, 0, a->C);
    }
}

static enum zt_status check_embed(const char *fn, zt_tensor_t out, int blk, zt_tensor_t wte_t,
                                  zt_tensor_t wpe, const struct zt_row_pos *rows) {
    ZT_CHECK(check_rows(fn, out, blk, NULL, rows, zt_tensor_rows(wpe)));
    int64_t C = zt_tensor_cols(out);
    if (zt_tensor_dtype(out) != ZT_DTYPE_F32 || zt_tensor_rows(wte_t) != C ||
        zt_tensor_cols(wpe) != C || zt_tensor_nblk(wte_t) != 1)
        return zt_error_set(ZT_ERR_INVALID, "%s: %s must be f32 with the rows of %s (one block) "
                            "and the columns of %s", fn, zt_tensor_name(out),
                            zt_tensor_name(wte_t), zt_tensor_name(wpe));
    return ZT_OK;
}

/* the embedding task of out block blk; fed: the tokens come from that int32 tensor */
static enum zt_status submit_embed(const struct zt_task_opts *o, zt_tensor_t out, int blk,
                                   zt_tensor_t wte_t, zt_tensor_t wpe, const int32_t *tokens,
                                   zt_tensor_t fed, const struct zt_row_pos *rows) {
    struct zt_block_ref *refs;
    int nrefs;
    struct zt_rows_args *a = rows_args(out, blk, NULL, rows, tokens, &refs, &nrefs);
    if (!a) return zt_error_set(ZT_ERR_NOMEM, "out of memory for task arguments");
    a->C = (int)zt_tensor_cols(out);
    a->hdr.native16 = 1; /* the body widens the rows it reads, not the whole tables */
    a->fed = fed != NULL;
    a->tiles = zt_tensor_bf16_tiles(wte_t);
    a->V = zt_tensor_cols(wte_t);
    for (int i = 0; fed && i < a->nrows; i++)
        a->row[i].token = (int32_t)zt_tensor_blk_row0(out, blk) + i;
    struct zt_builder tb;
    zt_builder_init(&tb, &a->hdr, ZT_KIND_embed_rows, o, blk);
    zt_builder_add(&tb, out, blk, STARPU_W);
    zt_builder_add(&tb, wte_t, -1, STARPU_R);
    zt_builder_add(&tb, wpe, -1, STARPU_R);
    if (fed) zt_builder_add(&tb, fed, -1, STARPU_R);
    return zt_builder_submit(&tb, a, rows_args_size(a), o ? o->priority : 0);
}

enum zt_status zt_task_embed_rows(const struct zt_task_opts *o, zt_tensor_t out, int blk,
                                  zt_tensor_t wte_t, zt_tensor_t wpe, const int32_t *tokens,
                                  const struct zt_row_pos *rows) {
    const char *fn = "zt_task_embed_rows";
    ZT_CHECK(check_embed(fn, out, blk, wte_t, wpe, rows));
    int64_t r0 = zt_tensor_blk_row0(out, blk);
    for (int64_t i = r0; i < r0 + zt_tensor_blk_rows(out, blk); i++)
        if (tokens[i] < 0 || tokens[i] >= zt_tensor_cols(wte_t))
            return zt_error_set(ZT_ERR_INVALID, "%s: token %d of row %lld is outside the "
                                                "vocabulary [0, %lld)", fn, tokens[i],
                                (long long)i, (long long)zt_tensor_cols(wte_t));
    return submit_embed(o, out, blk, wte_t, wpe, tokens, NULL, rows);
}

enum zt_status zt_task_embed_fed(const struct zt_task_opts *o, zt_tensor_t out, int blk,
                                 zt_tensor_t wte_t, zt_tensor_t wpe, zt_tensor_t ids,
                                 const struct zt_row_pos *rows) {
    const char *fn = "zt_task_embed_fed";
    ZT_CHECK(check_embed(fn, out, blk, wte_t, wpe, rows));
    if (!ids || zt_tensor_elemsize(ids) != sizeof(int32_t) || zt_tensor_nblk(ids) != 1 ||
        zt_tensor_numel(ids) < zt_tensor_rows(out))
        return zt_error_set(ZT_ERR_INVALID, "%s: the ids must be one block of int32, one per "
                            "row of %s (%lld)", fn, zt_tensor_name(out),
                            (long long)zt_tensor_rows(out));
    return submit_embed(o, out, blk, wte_t, wpe, NULL, ids, rows);
}

// ----------------------------------------------------------------------------
// KV cache: append the rows' K and V, attend against the cache

void kv_append_cpu(void *buffers[], void *cl_arg) {
    const struct zt_rows_args *a = cl_arg;
    const float *qkv = zt_slot_ptr(buffers, &a->hdr, 1);
    for (int i = 0; i < a->nrows; i++) {
        const float *k = qkv + (size_t)i * 3 * a->C + a->C;
        void *kv = zt_slot_buf_ptr(buffers, &a->hdr, 0, a->row[i].kvi);
        if (zt_dtype_is16(a->hdr.dtype[0]))
            zt_kern_kv_store16(kv, a->hdr.dtype[0] == ZT_DTYPE_F16, a->ctx, a->row[i].pos, k,
                               k + a->C, a->C, a->NH);
        else zt_kern_kv_store(kv, a->ctx, a->row[i].pos, k, k + a->C, a->C, a->NH);
    }
}

void attention_cached_cpu(void *buffers[], void *cl_arg) {
    const struct zt_rows_args *a = cl_arg;
    float *out = zt_slot_ptr(buffers, &a->hdr, 0);
    const float *qkv = zt_slot_ptr(buffers, &a->hdr, 1);
    for (int i0 = 0; i0 < a->nrows;) { /* a run of one slot's consecutive positions */
        int i1 = i0 + 1;
        while (i1 < a->nrows && a->row[i1].kvi == a->row[i0].kvi &&
               a->row[i1].pos == a->row[i1 - 1].pos + 1)
            i1++;
        int p0 = a->row[i0].pos, m = i1 - i0, hs = a->C / a->NH, ldo = (a->h1 - a->h0) * hs;
        const void *kv = zt_slot_buf_ptr(buffers, &a->hdr, 2, a->row[i0].kvi);
        const float *q = qkv + (size_t)i0 * 3 * a->C;
        if (zt_dtype_is16(a->hdr.dtype[2])) {
            float *scratch = zt_worker_scratch(
                ZT_SCRATCH_BODY, zt_kern_attention_cached16_scratch_floats(p0 + m, hs));
            zt_kern_attention_cached16(out + (size_t)i0 * ldo, ldo, scratch, q, 3 * a->C, kv,
                                       a->hdr.dtype[2] == ZT_DTYPE_F16, a->ctx, p0, m, a->C,
                                       a->NH, a->h0, a->h1);
        } else {
            float *scratch = zt_worker_scratch(ZT_SCRATCH_BODY,
                                               zt_kern_attention_cached_scratch_floats(p0 + m));
            zt_kern_attention_cached(out + (size_t)i0 * ldo, ldo, scratch, q, 3 * a->C, kv,
                                     a->ctx, p0, m, a->C, a->NH, a->h0, a->h1);
        }
        i0 = i1;
    }
}

static enum zt_status check_cache(const char *fn, zt_tensor_t x, int blk, zt_tensor_t qkv,
                                  zt_tensor_t kv, const struct zt_row_pos *rows, int C) {
    ZT_CHECK(zt_check_same_blocks(fn, x, qkv));
    int S = zt_tensor_nblk(kv);
    enum zt_dtype dt = zt_tensor_dtype(kv);
    if (zt_tensor_cols(qkv) != 3 * C || zt_tensor_cols(kv) != 2 * C ||
        zt_tensor_dtype(qkv) != ZT_DTYPE_F32 ||
        (dt != ZT_DTYPE_F32 && !zt_dtype_is16(dt)) || zt_tensor_rows(kv) % S != 0)
        return zt_error_set(ZT_ERR_INVALID, "%s: %s (f32) [.., %lld] and the f32/bf16/f16 "
                            "cache %s [%lld, %lld] in %d slots do not agree", fn,
                            zt_tensor_name(qkv),
                            (long long)zt_tensor_cols(qkv), zt_tensor_name(kv),
                            (long long)zt_tensor_rows(kv), (long long)zt_tensor_cols(kv), S);
    return check_rows(fn, x, blk, kv, rows, zt_tensor_rows(kv) / S);
}

static enum zt_status submit_cached(const struct zt_task_opts *o, enum zt_task_kind kind,
                                    zt_tensor_t out, int blk, zt_tensor_t qkv, zt_tensor_t kv,
                                    const struct zt_row_pos *rows, int C, int NH, int h0,
                                    int h1) {
    struct zt_block_ref *refs;
    int nrefs;
    struct zt_rows_args *a = rows_args(qkv, blk, kv, rows, NULL, &refs, &nrefs);
    if (!a) return zt_error_set(ZT_ERR_NOMEM, "out of memory for task arguments");
    a->C = C;
    a->NH = NH;
    a->ctx = (int)(zt_tensor_rows(kv) / zt_tensor_nblk(kv));
    a->h0 = h0;
    a->h1 = h1;
    a->hdr.native16 = 1; /* a 16-bit cache is read and written by the kernels themselves */
    struct zt_builder tb;
    zt_builder_init(&tb, &a->hdr, kind, o, blk);
    if (kind == ZT_KIND_kv_append) {
        zt_builder_add_list(&tb, refs, nrefs, STARPU_RW);
        zt_builder_add(&tb, qkv, blk, STARPU_R);
    } else {
        zt_builder_add(&tb, out, blk, STARPU_W);
        zt_builder_add(&tb, qkv, blk, STARPU_R);
        zt_builder_add_list(&tb, refs, nrefs, STARPU_R);
    }
    free(refs);
    return zt_builder_submit(&tb, a, rows_args_size(a), o ? o->priority : 0);
}

enum zt_status zt_task_kv_append(const struct zt_task_opts *o, zt_tensor_t kv, zt_tensor_t qkv,
                                 int blk, const struct zt_row_pos *rows, int n_head) {
    int C = (int)(zt_tensor_cols(qkv) / 3);
    if (n_head <= 0 || C % n_head != 0)
        return zt_error_set(ZT_ERR_INVALID, "zt_task_kv_append: %d heads do not divide the %d "
                                            "channels of %s", n_head, C, zt_tensor_name(qkv));
    ZT_CHECK(check_cache("zt_task_kv_append", qkv, blk, qkv, kv, rows, C));
    return submit_cached(o, ZT_KIND_kv_append, NULL, blk, qkv, kv, rows, C, n_head, 0, 1);
}

static enum zt_status attention(const char *fn, const struct zt_task_opts *o, zt_tensor_t out,
                                int blk, zt_tensor_t qkv, zt_tensor_t kv,
                                const struct zt_row_pos *rows, int n_head, int h0, int h1) {
    if (!out || !qkv || !kv)
        return zt_error_set(ZT_ERR_INVALID, "%s: out, qkv and kv are required", fn);
    int C = (int)(zt_tensor_cols(qkv) / 3);
    if (n_head <= 0 || C % n_head != 0 || h0 < 0 || h0 >= h1 || h1 > n_head ||
        zt_tensor_cols(out) != (int64_t)(h1 - h0) * (C / n_head) ||
        zt_tensor_dtype(out) != ZT_DTYPE_F32)
        return zt_error_set(ZT_ERR_INVALID, "%s: heads %d..%d of %d (of %d channels) do not make "
                            "the %lld f32 columns of %s", fn, h0, h1 - 1, n_head, C,
                            (long long)zt_tensor_cols(out), zt_tensor_name(out));
    ZT_CHECK(check_cache(fn, out, blk, qkv, kv, rows, C));
    return submit_cached(o, ZT_KIND_attention_cached, out, blk, qkv, kv, rows, C, n_head, h0,
                         h1);
}

enum zt_status zt_task_attention_heads(const struct zt_task_opts *o, zt_tensor_t out, int blk,
                                       zt_tensor_t qkv, zt_tensor_t kv,
                                       const struct zt_row_pos *rows, int n_head, int h0,
                                       int h1) {
    return attention("zt_task_attention_heads", o, out, blk, qkv, kv, rows, n_head, h0, h1);
}

enum zt_status zt_task_attention_cached(const struct zt_task_opts *o, zt_tensor_t out, int blk,
                                        zt_tensor_t qkv, zt_tensor_t kv,
                                        const struct zt_row_pos *rows, int n_head) {
    return attention("zt_task_attention_cached", o, out, blk, qkv, kv, rows, n_head, 0, n_head);
}

// ----------------------------------------------------------------------------
// gather: out row i = inp row idx[i]

void gather_rows_cpu(void *buffers[], void *cl_arg) {
    const struct zt_rows_args *a = cl_arg;
    float *out = zt_slot_ptr(buffers, &a->hdr, 0);
    const float *inp = zt_slot_ptr(buffers, &a->hdr, 1);
    for (int i = 0; i < a->nrows; i++)
        memcpy(out + (size_t)i * a->C, inp + (size_t)a->row[i].pos * a->C,
               (size_t)a->C * sizeof(float));
}

enum zt_status zt_task_gather_rows(const struct zt_task_opts *o, zt_tensor_t out,
                                   zt_tensor_t inp, const int32_t *idx) {
    int64_t n = zt_tensor_rows(out), C = zt_tensor_cols(out);
    if (zt_tensor_cols(inp) != C || zt_tensor_dtype(out) != ZT_DTYPE_F32 ||
        zt_tensor_dtype(inp) != ZT_DTYPE_F32)
        return zt_error_set(ZT_ERR_INVALID, "zt_task_gather_rows: %s and %s must be f32 with the "
                                            "same columns", zt_tensor_name(out),
                            zt_tensor_name(inp));
    struct zt_rows_args *a = calloc(1, sizeof *a + (size_t)n * sizeof a->row[0]);
    if (!a) return zt_error_set(ZT_ERR_NOMEM, "out of memory for task arguments");
    a->nrows = (int)n;
    a->C = (int)C;
    for (int64_t i = 0; i < n; i++) {
        if (idx[i] < 0 || idx[i] >= zt_tensor_rows(inp)) {
            free(a);
            return zt_error_set(ZT_ERR_INVALID, "zt_task_gather_rows: row %d of %s does not exist",
                                idx[i], zt_tensor_name(inp));
        }
        a->row[i].pos = idx[i];
    }
    struct zt_builder tb;
    zt_builder_init(&tb, &a->hdr, ZT_KIND_gather_rows, o, -1);
    zt_builder_add(&tb, out, -1, STARPU_W);
    zt_builder_add(&tb, inp, -1, STARPU_R);
    return zt_builder_submit(&tb, a, rows_args_size(a), o ? o->priority : 0);
}
