/*
 * graph/generate_weights.c: the generator's weights as tensors, read from a safetensors file or
 * a zerotask checkpoint (consolidated from the shards of any world size), checked against the
 * model shape, in the type they are computed in.
 *
 * Layer: graph/. bf16 matrices (wte and the layers' four) are packed once, as they are loaded,
 * for the bf16 engine where the CPU has one (zt_bf16_tiles_pack): a decode step's products then
 * read them as they lie. Other matrices of the layers (fp32, f16, bf16 without an engine) are
 * kept in column panels of the decode step's part widths (zt_tensor_set_col_panels) when
 * several workers share a step: each part then reads one contiguous run of the weight, where
 * its columns of the row-major weight are a short run every row (bench/README.md measures the
 * two). Resident: every tensor lives in one host buffer. Streamed
 * (ZeRO-Inference): the embeddings and ln_f stay resident; the layers are written once to a
 * swap file under nvme_path (each parameter padded to 4096 bytes, for O_DIRECT; packed, when
 * packed), and a pass over the layers reads each into a window of prefetch + 1 layer buffers by
 * swap-in tasks submitted `prefetch` layers ahead of their use; StarPU orders a buffer's next
 * swap-in after the tasks that read it, so the reads overlap the compute of the layers before.
 */
#include <stdio.h>          /* snprintf */
#include <stdlib.h>         /* calloc, free */
#include <string.h>         /* memset, strcmp */
#include "zt_aio.h"         /* ZT_AIO_ALIGN, zt_aio_alloc, struct zt_aio_cfg */
#include "zt_checkpoint.h"  /* zt_checkpoint_* */
#include "zt_ckpt.h"        /* zt_shard_set_* */
#include "zt_safetensors.h" /* zt_st_* */
#include "zt_sched.h"       /* zt_knob_size, zt_knob_str */
#include "generate_impl.h"  /* struct gen_weights */
#include "generate_split.h" /* gen_split_cols: the decode parts' widths */

/* a source of fp32 values by parameter index */
struct weights_src {
    const struct zt_model_shape *s;
    struct zt_safetensors st;
    int have_st;
    struct zt_shard_set shards;
    int have_shards;
    enum zt_dtype stored; /* safetensors: the type of wte as stored; checkpoint: f32 */
};

static int64_t numel(int ndim, const int64_t shape[2]) {
    return ndim == 1 ? shape[0] : shape[0] * shape[1];
}
static int64_t pad4k(int64_t b) { return (b + ZT_AIO_ALIGN - 1) / ZT_AIO_ALIGN * ZT_AIO_ALIGN; }

static enum zt_status open_safetensors(struct weights_src *r, const char *path) {
    ZT_CHECK(zt_st_open(&r->st, path));
    r->have_st = 1;
    r->st.finite_only = 1;
    ZT_CHECK(zt_gpt2_check_weights(r->s, &r->st, 0));
    const struct zt_st_tensor *t = zt_st_find(&r->st, "transformer.wte.weight");
    r->stored = !t ? ZT_DTYPE_F32 : t->dtype == ZT_ST_BF16 ? ZT_DTYPE_BF16
                                  : t->dtype == ZT_ST_F16  ? ZT_DTYPE_F16
                                                           : ZT_DTYPE_F32;
    return ZT_OK;
}

static void shape_text(char *buf, size_t n, int ndim, const int64_t *sh) {
    if (ndim == 2) snprintf(buf, n, "[%lld, %lld]", (long long)sh[0], (long long)sh[1]);
    else snprintf(buf, n, "[%lld]", (long long)sh[0]);
}

/* the tag's tensor table must be the model's, name by name and shape by shape */
static enum zt_status check_table(const char *tagdir, const struct zt_model_shape *s) {
    struct zt_ckpt_tensor *t = NULL;
    int n = 0;
    ZT_CHECK(zt_checkpoint_tensors(tagdir, &t, &n));
    enum zt_status rc = ZT_OK;
    if (n != zt_gpt2_nparams(s))
        rc = zt_error_set(ZT_ERR_CKPT_CORRUPT, "checkpoint %s holds %d tensors, the model (n_layer "
                          "%d) has %d: a checkpoint of another model?", tagdir, n, s->n_layer,
                          zt_gpt2_nparams(s));
    for (int i = 0; rc == ZT_OK && i < n; i++) {
        char name[160], got[64], want[64];
        int ndim;
        int64_t sh[2];
        zt_gpt2_param_info(s, i, name, sizeof name, &ndim, sh);
        if (!strcmp(name, t[i].name) && t[i].ndim == ndim && t[i].shape[0] == sh[0] &&
            (ndim == 1 || t[i].shape[1] == sh[1]))
            continue;
        shape_text(got, sizeof got, t[i].ndim, t[i].shape);
        shape_text(want, sizeof want, ndim, sh);
        rc = zt_error_set(ZT_ERR_CKPT_CORRUPT, "checkpoint %s: tensor %d is %s %s, the model "
                          "expects %s %s: a checkpoint of another model?", tagdir, i, t[i].name,
                          got, name, want);
    }
    free(t);
    return rc;
}

static enum zt_status open_checkpoint(struct weights_src *r, const char *path) {
    char tagdir[1024];
    struct zt_ckpt_info info;
    ZT_CHECK(zt_checkpoint_resolve(path, tagdir, sizeof tagdir));
    ZT_CHECK(zt_checkpoint_info(tagdir, &info));
    ZT_CHECK(check_table(tagdir, r->s));
    ZT_CHECK(zt_checkpoint_open_shards(tagdir, &info, &r->shards));
    r->have_shards = 1;
    r->stored = ZT_DTYPE_F32;
    for (int i = 0; i < zt_gpt2_nparams(r->s); i++) {
        char name[160];
        int ndim;
        int64_t sh[2];
        zt_gpt2_param_info(r->s, i, name, sizeof name, &ndim, sh);
        /* the shards hold a vector as one row */
        ZT_CHECK(zt_shard_set_cover(&r->shards, name, ZT_ROLE_PARAM, ndim == 2 ? sh[0] : 1,
                                    ndim == 2 ? sh[1] : sh[0]));
    }
    return ZT_OK;
}

/* parameter i as fp32 into dst */
static enum zt_status read_param(struct weights_src *r, int i, float *dst) {
    char name[160];
    int ndim;
    int64_t sh[2];
    zt_gpt2_param_info(r->s, i, name, sizeof name, &ndim, sh);
    if (r->have_st) return zt_st_read_f32(&r->st, name, ndim, sh, dst);
    return zt_shard_set_read(&r->shards, name, ZT_ROLE_PARAM, ndim == 2 ? sh[1] : sh[0], 0,
                             numel(ndim, sh), dst);
}

static void close_src(struct weights_src *r) {
    if (r->have_st) zt_st_close(&r->st);
    if (r->have_shards) zt_shard_set_close(&r->shards);
}

// ----------------------------------------------------------------------------
// tensors

/* parameter i is packed for the bf16 engine: a matrix that products read (wte, whose transpose
 * is the head, and the layers' four; not wpe, which the embedding reads by rows) */
static int packed(const struct gen_weights *w, int i, int ndim) {
    return w->tiles && ndim == 2 && i != 1;
}

/* the width of parameter i's column panels (0: row-major): the layers' four matrices, unpacked,
 * when a decode step splits their columns among several workers, in panels of its parts'
 * widths (generate_split.c), so that each part reads one contiguous run of the weight */
static int64_t panel_width(const struct gen_weights *w, int i, int ndim, const int64_t *sh) {
    if (w->tiles || ndim != 2 || i < 2 || w->workers < 2) return 0;
    int64_t o0;
    return gen_split_cols(w->workers, sh[1], 0, &o0);
}

/* parameter i's tensor over ptr, one block, in w's type (marked when packed or in panels) */
static enum zt_status param_tensor(struct gen_weights *w, int i, void *ptr, zt_tensor_t *t) {
    char name[160];
    int ndim;
    int64_t sh[2];
    zt_gpt2_param_info(&w->s, i, name, sizeof name, &ndim, sh);
    ZT_CHECK(zt_tensor_init_dtype(t, name, ptr, ndim == 1 ? 1 : sh[0], ndim == 1 ? sh[0] : sh[1],
                                  w->dtype, 1, NULL));
    const int64_t panels = panel_width(w, i, ndim, sh);
    if (panels) return zt_tensor_set_col_panels(*t, panels);
    return packed(w, i, ndim) ? zt_tensor_set_bf16_tiles(*t) : ZT_OK;
}

/* the bytes of parameter i as the generator keeps it (wte transposed, matrices maybe packed) */
static int64_t param_bytes(const struct gen_weights *w, int i) {
    char name[160];
    int ndim;
    int64_t sh[2];
    zt_gpt2_param_info(&w->s, i, name, sizeof name, &ndim, sh);
    if (packed(w, i, ndim))
        return (int64_t)zt_bf16_tiles_elems(i == 0 ? sh[1] : sh[0], i == 0 ? sh[0] : sh[1]) * 2;
    return numel(ndim, sh) * (int64_t)zt_dtype_size(w->dtype);
}

/* index of the resident (non-layer) parameters: wte, wpe, ln_f weight, ln_f bias */
static int outer_index(const struct gen_weights *w, int k) {
    return k < 2 ? k : 2 + ZT_GPT2_LAYER_PARAMS * w->s.n_layer + (k - 2);
}

/* read parameter i, converted to w's type (a matrix packed, with w->tiles, from its bf16
 * values in tmp16), into dst; tmp holds the largest parameter in fp32 */
static enum zt_status load_param(struct gen_weights *w, struct weights_src *r, int i, void *dst,
                                 float *tmp, uint16_t *tmp16) {
    char name[160];
    int ndim;
    int64_t sh[2];
    zt_gpt2_param_info(&w->s, i, name, sizeof name, &ndim, sh);
    ZT_CHECK(read_param(r, i, tmp));
    const int64_t panels = panel_width(w, i, ndim, sh);
    if (panels) {
        zt_col_panels_from_f32(w->dtype, dst, tmp, sh[0], sh[1], panels);
        return ZT_OK;
    }
    int pack = packed(w, i, ndim);
    zt_dtype_from_f32(w->dtype, pack ? (void *)tmp16 : dst, tmp, (size_t)numel(ndim, sh));
    return pack ? zt_bf16_tiles_pack(tmp16, sh[1], sh[0], sh[1], dst) : ZT_OK;
}

/* the token table [V, C] as the generator keeps it: transposed, [C, V], in w's type (packed,
 * with w->tiles, from the transposed table in tmp16); the tied head then streams it row after
 * row, like every other weight (each logit's sum is unchanged: its k order does not depend on
 * the layout), and the embedding gathers a column */
static enum zt_status load_wte_t(struct gen_weights *w, struct weights_src *r, void *dst,
                                 float *tmp, uint16_t *tmp16) {
    enum { STRIP = 64 }; /* tokens per pass: their rows stay in cache while each column goes */
    ZT_CHECK(read_param(r, 0, tmp));
    int64_t V = w->s.vocab_size, C = w->s.n_embd;
    size_t es = zt_dtype_size(w->dtype);
    char *t = w->tiles ? (char *)tmp16 : dst;
    float strip[STRIP];
    for (int64_t v0 = 0; v0 < V; v0 += STRIP) {
        int64_t n = V - v0 < STRIP ? V - v0 : STRIP;
        for (int64_t c = 0; c < C; c++) {
            for (int64_t v = 0; v < n; v++) strip[v] = tmp[(v0 + v) * C + c];
            zt_dtype_from_f32(w->dtype, t + (size_t)(c * V + v0) * es, strip, (size_t)n);
        }
    }
    return w->tiles ? zt_bf16_tiles_pack(tmp16, V, C, V, dst) : ZT_OK;
}

/* where each parameter goes: offsets in a layer's bytes, the resident bytes, the window */
static enum zt_status layout(struct gen_weights *w) {
    int64_t off = 0;
    for (int k = 0; k < ZT_GPT2_LAYER_PARAMS; k++) {
        w->param_off[k] = off;
        off += pad4k(param_bytes(w, 2 + k));
    }
    w->layer_bytes = off;
    w->resident_bytes = 0;
    for (int k = 0; k < 4; k++) w->resident_bytes += pad4k(param_bytes(w, outer_index(w, k)));
    if (!w->streamed) w->resident_bytes += w->layer_bytes * w->s.n_layer;
    w->nbuf = w->streamed ? w->prefetch + 1 : w->s.n_layer;
    if (w->nbuf > w->s.n_layer) w->nbuf = w->s.n_layer;
    w->resident_pass = w->streamed && w->nbuf == w->s.n_layer;
    return ZT_OK;
}

static int64_t largest_param(const struct zt_model_shape *s) {
    int64_t most = 0;
    for (int i = 0; i < zt_gpt2_nparams(s); i++) {
        char name[160];
        int ndim;
        int64_t sh[2];
        zt_gpt2_param_info(s, i, name, sizeof name, &ndim, sh);
        if (numel(ndim, sh) > most) most = numel(ndim, sh);
    }
    return most;
}

/* the host bytes beside the weights at the peak: the KV cache and activations (others), or
 * while loading, before they exist, the conversion buffers */
static int64_t beside_weights(const struct gen_weights *w, int64_t others) {
    return others > w->staging_bytes ? others : w->staging_bytes;
}

enum zt_dtype gen_kv_dtype(const struct gen_weights *w) {
    return w->tiles ? ZT_DTYPE_BF16 : w->dtype == ZT_DTYPE_F16 ? ZT_DTYPE_F16 : ZT_DTYPE_F32;
}

int64_t gen_weights_peak_bytes(const struct gen_weights *w, int64_t others) {
    return gen_weights_host_bytes(w) + beside_weights(w, others);
}

/* streamed with prefetch 0 (auto): the window as large as ZT_HOST_MEM_LIMIT leaves room for
 * beside the resident tensors and the others' bytes, from 2 layers to all of them */
static enum zt_status auto_window(struct gen_weights *w, int64_t others) {
    int64_t limit = 0;
    ZT_CHECK(zt_knob_size("ZT_HOST_MEM_LIMIT", &limit));
    int64_t room = limit - beside_weights(w, others) - w->resident_bytes;
    int64_t fit = limit > 0 && room > 0 ? room / w->layer_bytes : 0;
    w->prefetch = limit <= 0 ? 1 : fit >= w->s.n_layer ? w->s.n_layer - 1
                               : fit >= 2            ? (int)fit - 1
                                                     : 1;
    return layout(w);
}

/* ZT_HOST_MEM_LIMIT (0: none) against the weights in memory and the others' bytes */
static enum zt_status check_budget(const struct gen_weights *w, int64_t others) {
    int64_t limit = 0, weights = gen_weights_host_bytes(w);
    const int64_t peak = gen_weights_peak_bytes(w, others);
    ZT_CHECK(zt_knob_size("ZT_HOST_MEM_LIMIT", &limit));
    if (limit <= 0 || peak <= limit) return ZT_OK;
    const double mib = 1048576.0;
    return zt_error_set(ZT_ERR_NOMEM, "ZT_HOST_MEM_LIMIT=%.1f MiB: generation needs %.1f MiB "
                        "(weights in memory %.1f, then KV cache and activations %.1f, while "
                        "loading conversion buffers %.1f); %s",
                        limit / mib, peak / mib, weights / mib, others / mib,
                        w->staging_bytes / mib,
                        w->streamed ? "lower --max-batch or offload_param.buffer_count"
                                    : "stream the layers from NVMe (offload_param device nvme) "
                                      "or lower --max-batch");
}

static enum zt_status allocate(struct gen_weights *w) {
    w->resident = zt_aio_alloc((size_t)w->resident_bytes);
    w->buf = calloc((size_t)w->nbuf, sizeof *w->buf);
    if (w->streamed) w->window = zt_aio_alloc((size_t)(w->layer_bytes * w->nbuf));
    if (!w->resident || !w->buf || (w->streamed && !w->window))
        return zt_error_set(ZT_ERR_NOMEM, "weights: out of memory for %.1f MiB",
                            (w->resident_bytes + w->layer_bytes * w->nbuf) / 1048576.0);
    return ZT_OK;
}

/* the outer tensors, and the layer buffers' tensors (over `layers`: nbuf layers) */
static enum zt_status make_tensors(struct gen_weights *w, char *layers) {
    zt_tensor_t *outer[4] = {&w->wte, &w->wpe, &w->lnfw, &w->lnfb};
    char *p = w->resident;
    for (int k = 0; k < 4; k++) {
        if (k == 0)
            ZT_CHECK(zt_tensor_init_dtype(outer[k], "transformer.wte.weight (transposed)", p,
                                          w->s.n_embd, w->s.vocab_size, w->dtype, 1, NULL));
        else ZT_CHECK(param_tensor(w, outer_index(w, k), p, outer[k]));
        if (k == 0 && w->tiles) ZT_CHECK(zt_tensor_set_bf16_tiles(*outer[k]));
        p += pad4k(param_bytes(w, outer_index(w, k)));
    }
    for (int b = 0; b < w->nbuf; b++)
        for (int k = 0; k < ZT_GPT2_LAYER_PARAMS; k++)
            ZT_CHECK(param_tensor(w, 2 + k, layers + b * w->layer_bytes + w->param_off[k],
                                  &w->buf[b].p[k]));
    return ZT_OK;
}

/* the values: outer ones into their tensors; layers into their buffers, or the swap file */
static enum zt_status fill(struct gen_weights *w, struct weights_src *r, char *layers,
                           float *tmp, uint16_t *tmp16) {
    zt_tensor_t outer[4] = {w->wte, w->wpe, w->lnfw, w->lnfb};
    ZT_CHECK(load_wte_t(w, r, zt_tensor_data(outer[0]), tmp, tmp16));
    for (int k = 1; k < 4; k++)
        ZT_CHECK(load_param(w, r, outer_index(w, k), zt_tensor_data(outer[k]), tmp, tmp16));
    for (int l = 0; l < w->s.n_layer; l++) {
        char *dst = w->streamed ? w->window : layers + l * w->layer_bytes;
        if (w->streamed) memset(dst, 0, (size_t)w->layer_bytes);
        for (int k = 0; k < ZT_GPT2_LAYER_PARAMS; k++)
            ZT_CHECK(load_param(w, r, 2 + ZT_GPT2_LAYER_PARAMS * l + k, dst + w->param_off[k],
                                tmp, tmp16));
        if (w->streamed)
            ZT_CHECK(zt_io_write_sync(&w->file, dst, w->layer_bytes, l * w->layer_bytes));
    }
    return ZT_OK;
}

static enum zt_status open_stream(struct gen_weights *w, const struct zt_gen_config *cfg) {
    const char *engine = "auto";
    ZT_CHECK(zt_knob_str("ZT_AIO_ENGINE", &engine));
    struct zt_aio_cfg aio = {.block_size = cfg->aio_block_size > 0 ? cfg->aio_block_size
                                                                   : 1 << 20,
                             .queue_depth = cfg->aio_queue_depth > 0 ? cfg->aio_queue_depth : 8,
                             .overlap_events = 1, .engine = zt_aio_engine_named(engine)};
    ZT_CHECK(zt_io_service_init(&aio, cfg->aio_threads > 0 ? cfg->aio_threads : 1));
    w->io_up = 1;
    int64_t bytes = w->layer_bytes * w->s.n_layer;
    ZT_CHECK(zt_swapdir_open(&w->dir, cfg->nvme_path, "offload_param.nvme_path", bytes));
    return zt_swapdir_file(&w->dir, "weights.swp", bytes, &w->file);
}

enum zt_status gen_weights_load(struct gen_weights *w, const struct zt_model_shape *s,
                                const struct zt_gen_weights *src,
                                const struct zt_gen_config *cfg, int workers, int64_t kv_f32,
                                int64_t acts) {
    memset(w, 0, sizeof *w);
    w->s = *s;
    w->workers = gen_split_workers(workers); /* as the step's parts count them */
    w->file.fd = -1;
    w->dir.lock_fd = -1;
    w->streamed = cfg->stream_weights;
    w->prefetch = cfg->prefetch > 0 ? cfg->prefetch : 1; /* 0 (auto): auto_window */
    struct weights_src r = {.s = s};
    enum zt_status rc = src->safetensors ? open_safetensors(&r, src->safetensors)
                                         : open_checkpoint(&r, src->checkpoint);
    static const enum zt_dtype types[] = {ZT_DTYPE_F32, ZT_DTYPE_F32, ZT_DTYPE_BF16,
                                          ZT_DTYPE_F16};
    if (src->dtype < 0 || src->dtype > ZT_GEN_DTYPE_F16)
        rc = zt_error_set(ZT_ERR_INVALID, "weights: dtype %d is not a ZT_GEN_DTYPE_*", src->dtype);
    w->dtype = rc != ZT_OK ? ZT_DTYPE_F32 : src->dtype == ZT_GEN_DTYPE_STORED ? r.stored
                                                                             : types[src->dtype];
    w->tiles = w->dtype == ZT_DTYPE_BF16 && zt_bf16_tiles_available();
    w->staging_bytes = largest_param(s) * (int64_t)(sizeof(float) + (w->tiles ? 2 : 0));
    int64_t others = (gen_kv_dtype(w) != ZT_DTYPE_F32 ? kv_f32 / 2 : kv_f32) + acts;
    if (rc == ZT_OK) rc = layout(w);
    if (rc == ZT_OK && w->streamed && cfg->prefetch == 0) rc = auto_window(w, others);
    if (rc == ZT_OK) rc = check_budget(w, others);
    if (rc == ZT_OK) rc = allocate(w);
    float *tmp = rc == ZT_OK ? malloc((size_t)largest_param(s) * sizeof(float)) : NULL;
    uint16_t *tmp16 = rc == ZT_OK && w->tiles ? malloc((size_t)largest_param(s) * 2) : NULL;
    if (rc == ZT_OK && (!tmp || (w->tiles && !tmp16)))
        rc = zt_error_set(ZT_ERR_NOMEM, "weights: out of memory");
    char *layers = w->streamed ? w->window : (char *)w->resident + (w->resident_bytes -
                                                                    w->layer_bytes * s->n_layer);
    if (rc == ZT_OK && w->streamed) rc = open_stream(w, cfg);
    if (rc == ZT_OK) rc = make_tensors(w, layers);
    if (rc == ZT_OK) rc = fill(w, &r, layers, tmp, tmp16);
    free(tmp);
    free(tmp16);
    close_src(&r);
    return rc;
}

// ----------------------------------------------------------------------------
// a pass over the layers

/* layer l from the file into its window buffer: each parameter as its 4096-aligned head (read
 * straight into place with O_DIRECT) and its tail (through the I/O service's bounce buffer) */
static enum zt_status swap_in_layer(struct gen_weights *w, int l) {
    struct gen_layer *b = &w->buf[l % w->nbuf];
    struct zt_swap_seg seg[2 * ZT_GPT2_LAYER_PARAMS];
    int n = 0;
    for (int k = 0; k < ZT_GPT2_LAYER_PARAMS; k++) {
        int64_t bytes = param_bytes(w, 2 + k), head = bytes / ZT_AIO_ALIGN * ZT_AIO_ALIGN;
        int64_t off = l * w->layer_bytes + w->param_off[k];
        if (head > 0)
            seg[n++] = (struct zt_swap_seg){.t = b->p[k], .blk = 0, .mem_off = 0, .len = head,
                                            .file_off = off};
        if (bytes > head)
            seg[n++] = (struct zt_swap_seg){.t = b->p[k], .blk = 0, .mem_off = head,
                                            .len = bytes - head, .file_off = off + head};
    }
    struct zt_task_opts o = {.layer = l, .mb = -1, .step = w->step, .priority = 0};
    w->bytes_read += w->layer_bytes;
    return zt_task_swap_in(&o, &w->file, seg, n, NULL, 0, NULL);
}

enum zt_status gen_weights_layer(struct gen_weights *w, int l, int64_t step,
                                 struct gen_layer **out) {
    *out = &w->buf[l % w->nbuf];
    if (!w->streamed) return ZT_OK;
    w->step = step;
    int L = w->s.n_layer;
    if (l == 0 && !w->resident_pass) w->loaded_until = w->next_pass; /* a new pass */
    int want = l + w->prefetch < L ? l + w->prefetch + 1 : L;
    if (want > l + w->nbuf) want = l + w->nbuf; /* never past the window */
    while (w->loaded_until < want) ZT_CHECK(swap_in_layer(w, w->loaded_until++));
    return ZT_OK;
}

enum zt_status gen_weights_pass_end(struct gen_weights *w) {
    if (!w->streamed || w->resident_pass) return ZT_OK;
    /* the next pass's first layers, into buffers whose readers (this pass's last layers, all
     * submitted) StarPU lets finish first */
    int L = w->s.n_layer;
    w->next_pass = w->prefetch < L ? w->prefetch : L;
    for (int j = 0; j < w->next_pass; j++) ZT_CHECK(swap_in_layer(w, j));
    return ZT_OK;
}

int64_t gen_weights_host_bytes(const struct gen_weights *w) {
    return w->resident_bytes + (w->streamed ? w->layer_bytes * w->nbuf : 0);
}

void gen_weights_free(struct gen_weights *w) {
    if (w->io_up) zt_io_service_wait(); /* no swap-in may still write a buffer freed below */
    zt_tensor_t outer[4] = {w->wte, w->wpe, w->lnfw, w->lnfb};
    for (int k = 0; k < 4; k++)
        if (outer[k]) zt_tensor_free(outer[k]);
    for (int b = 0; w->buf && b < w->nbuf; b++)
        for (int k = 0; k < ZT_GPT2_LAYER_PARAMS; k++)
            if (w->buf[b].p[k]) zt_tensor_free(w->buf[b].p[k]);
    if (w->file.fd >= 0) zt_swapfile_close(&w->file);
    if (w->streamed) zt_swapdir_close(&w->dir);
    if (w->io_up) zt_io_service_free();
    free(w->buf);
    free(w->resident);
    free(w->window);
    memset(w, 0, sizeof *w);
}
