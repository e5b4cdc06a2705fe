/*
 * graph/ckpt_swap.c: the inputs kept by checkpointed blocks on NVMe: between a block's forward
 * and its backward, the input it recomputes from waits in a swap file instead of memory.
 *
 * Layer: graph/. The blocks whose backward recomputes (zt_recompute_needed) are the "moved"
 * ones; their inputs live in `window` sets of activation tensors (ZT_RECOMPUTE_WINDOW, as the
 * recomputed activations do), moved block k of them in set k mod window, planned by a second
 * zt_recompute_plan over the moved blocks: a moved input the forward overwrites (a later moved
 * block took its set) goes to the file after its block's forward and comes back before its
 * backward; the last `window` moved inputs stay in their sets. The swaps are the I/O service's
 * tasks (tasks/zt_tasks.h), so StarPU orders them by data like any task: a set's next write
 * waits for its swap-out, a swap-in waits for the last reader of what the set held, and the
 * recompute waits for the swap-in. The file holds one region per swapped input, each row block
 * rounded up to 4096 bytes (O_DIRECT); rows go through the I/O service's bounce buffer when a
 * block is not aligned. A pipeline stage moves only its own blocks' inputs, and each of its
 * activation sets (micro-batches in flight) has its own sets and regions (activation set a's
 * after the a - 1 before it).
 */
#include <stdlib.h>       /* calloc, free */
#include "engine_impl.h"  /* zt_engine_io_start */
#include "zt_sched.h"     /* zt_runtime_wait_all, zt_prio */
#include "zt_recompute.h" /* our API */
#include "zt_swapdir.h"   /* struct zt_swapdir, struct zt_swapfile */
#include "zt_tasks.h"     /* zt_task_swap_in, zt_task_swap_out */

struct zt_ckpt_swap {
    const struct zt_recompute_plan *blocks; /* the model's plan */
    int block0, block1;                     /* the blocks whose inputs may move */
    int act_sets;                           /* activation sets */
    struct zt_recompute_plan moved;         /* over the blocks: set and swap of each input */
    int *block_of;                          /* [moved.nckpt]: the block of each moved input */
    zt_tensor_t *set;                       /* [act_sets][moved.window] */
    int64_t *blk_off;                       /* [nblk + 1]: row block offsets in a region */
    int nblk;
    int swapped;                            /* the moved inputs that go to the file */
    struct zt_swapdir dir;
    struct zt_swapfile file;
};

int zt_ckpt_swap_moves(const struct zt_recompute_plan *blocks, int block0, int block1, int b) {
    return b >= block0 && b < block1 && zt_recompute_needed(blocks, b);
}

int zt_ckpt_swap_sets(const struct zt_recompute_plan *blocks, int block0, int block1) {
    int n = 0;
    for (int b = 0; b < blocks->nblocks; b++) n += zt_ckpt_swap_moves(blocks, block0, block1, b);
    return n < blocks->window ? n : blocks->window;
}

static enum zt_status plan_moved(struct zt_ckpt_swap *s) {
    const int nb = s->blocks->nblocks;
    unsigned char *m = calloc((size_t)nb + 1, 1);
    if (!m) return zt_error_set(ZT_ERR_NOMEM, "checkpointed inputs: out of memory");
    for (int b = 0; b < nb; b++)
        m[b] = (unsigned char)zt_ckpt_swap_moves(s->blocks, s->block0, s->block1, b);
    /* the blocks' window (at most the moved inputs): what zt_ckpt_swap_sets sized */
    enum zt_status rc = zt_recompute_init(&s->moved, nb, m, s->blocks->window);
    free(m);
    ZT_CHECK(rc);
    s->block_of = calloc((size_t)s->moved.nckpt + 1, sizeof *s->block_of);
    s->set = calloc((size_t)s->act_sets * (size_t)s->moved.window + 1, sizeof *s->set);
    if (!s->block_of || !s->set)
        return zt_error_set(ZT_ERR_NOMEM, "checkpointed inputs: out of memory");
    for (int b = 0; b < nb; b++)
        if (s->moved.index[b] >= 0) s->block_of[s->moved.index[b]] = b;
    return ZT_OK;
}

/* the sets, the row blocks' places in a region, the file (one region per swapped input of each
 * activation set; when none is swapped, no file: nvme_path is only checked) */
static enum zt_status open_storage(struct zt_ckpt_swap *s, zt_engine_t e,
                                   const struct zt_ckpt_swap_spec *sp) {
    for (int w = 0; w < s->act_sets * s->moved.window; w++)
        ZT_CHECK(zt_engine_act_dtype(e, "ckpt_input", sp->rows_per_seq, sp->cols, sp->dtype,
                                     &s->set[w]));
    const zt_tensor_t t = s->set[0];
    s->nblk = zt_tensor_nblk(t);
    if (!(s->blk_off = calloc((size_t)s->nblk + 1, sizeof *s->blk_off)))
        return zt_error_set(ZT_ERR_NOMEM, "checkpointed inputs: out of memory");
    for (int r = 0; r < s->nblk; r++) {
        const int64_t bytes = zt_tensor_blk_rows(t, r) * sp->cols * (int64_t)zt_tensor_elemsize(t);
        s->blk_off[r + 1] = s->blk_off[r] + (bytes + 4095) / 4096 * 4096;
    }
    for (int k = 0; k < s->moved.nckpt; k++)
        s->swapped += zt_recompute_needed(&s->moved, s->block_of[k]);
    if (s->swapped == 0) return zt_swapdir_check(sp->nvme_path, sp->key);
    const int64_t bytes = (int64_t)s->act_sets * s->swapped * s->blk_off[s->nblk];
    ZT_CHECK(zt_swapdir_open(&s->dir, sp->nvme_path, sp->key, bytes));
    ZT_CHECK(zt_swapdir_file(&s->dir, "ckpt_inputs.swp", bytes, &s->file));
    return zt_engine_io_start(e);
}

enum zt_status zt_ckpt_swap_init(zt_ckpt_swap_t *out, zt_engine_t e,
                                 const struct zt_recompute_plan *blocks,
                                 const struct zt_ckpt_swap_spec *spec) {
    *out = NULL;
    if (zt_ckpt_swap_sets(blocks, spec->block0, spec->block1) == 0) /* nothing moves */
        return zt_swapdir_check(spec->nvme_path, spec->key);
    struct zt_ckpt_swap *s = calloc(1, sizeof *s);
    if (!s) return zt_error_set(ZT_ERR_NOMEM, "checkpointed inputs: out of memory");
    s->blocks = blocks;
    s->block0 = spec->block0, s->block1 = spec->block1;
    s->act_sets = spec->act_sets > 1 ? spec->act_sets : 1;
    s->dir.lock_fd = -1;
    s->file.fd = -1;
    enum zt_status rc = plan_moved(s);
    if (rc == ZT_OK) rc = open_storage(s, e, spec);
    if (rc != ZT_OK) {
        zt_ckpt_swap_free(s);
        return rc;
    }
    *out = s;
    return ZT_OK;
}

void zt_ckpt_swap_free(zt_ckpt_swap_t s) {
    if (!s) return;
    /* the swaps still queued (after a failed submission, say) point at the file */
    (void)zt_runtime_wait_all();
    if (s->swapped) zt_io_service_wait();
    if (s->file.fd >= 0) zt_swapfile_close(&s->file);
    zt_swapdir_close(&s->dir);
    zt_recompute_free(&s->moved);
    free(s->block_of);
    free(s->set);
    free(s->blk_off);
    free(s); /* the sets are the engine's */
}

int64_t zt_ckpt_swap_info(zt_ckpt_swap_t s, int *moved, int *sets, int *swapped,
                          int64_t *file_bytes) {
    *moved = s ? s->moved.nckpt : 0;
    *sets = s ? s->moved.window : 0;
    *swapped = s ? s->swapped : 0;
    *file_bytes = s ? (int64_t)s->act_sets * s->swapped * s->blk_off[s->nblk] : 0;
    int64_t bytes = 0;
    for (int w = 0; s && w < s->act_sets * *sets; w++)
        bytes += zt_tensor_numel(s->set[w]) * (int64_t)zt_tensor_elemsize(s->set[w]);
    return bytes;
}

zt_tensor_t zt_ckpt_swap_input(zt_ckpt_swap_t s, int k, int b) {
    const int w = s ? zt_recompute_slot(&s->moved, b) : -1;
    return w < 0 ? NULL : s->set[k * s->moved.window + w];
}

/* a swap of block b's input between its set and its region of the file, in the activation set
 * of o's micro-batch (the swapped inputs are the first moved ones, so its place among the moved
 * is its region within the activation set's) */
static enum zt_status swap(zt_ckpt_swap_t s, const struct zt_task_opts *o, int b, int out) {
    struct zt_swap_seg segs[64];
    const int k = s->moved.index[b], a = o->mb > 0 ? o->mb % s->act_sets : 0;
    const zt_tensor_t t = zt_ckpt_swap_input(s, a, b);
    const int64_t region = ((int64_t)a * s->swapped + k) * s->blk_off[s->nblk];
    int n = 0;
    for (int r = 0; r < s->nblk; r++) {
        segs[n++] = (struct zt_swap_seg){t, r, 0, zt_tensor_blk_rows(t, r) * zt_tensor_cols(t) *
                                         (int64_t)zt_tensor_elemsize(t), region + s->blk_off[r]};
        if (n < (int)(sizeof segs / sizeof *segs) && r + 1 < s->nblk) continue;
        ZT_CHECK(out ? zt_task_swap_out(o, &s->file, segs, n, NULL, 0, NULL)
                     : zt_task_swap_in(o, &s->file, segs, n, NULL, 0, NULL));
        n = 0;
    }
    return ZT_OK;
}

enum zt_status zt_ckpt_swap_out(zt_ckpt_swap_t s, const struct zt_step_ctx *forward, int b) {
    if (!s || !zt_recompute_needed(&s->moved, b)) return ZT_OK;
    return swap(s, &forward->opts, b, 1);
}

enum zt_status zt_ckpt_swap_in(zt_ckpt_swap_t s, const struct zt_step_ctx *backward, int b) {
    if (!s || s->moved.index[b] < 0) return ZT_OK;
    /* the input whose set block b's input was the last to hold (window W: W - 1 moved blocks
     * down), as soon as the backward that reads what it holds is submitted */
    const int k = s->moved.index[b] - (s->moved.window - 1);
    if (k < 0 || !zt_recompute_needed(&s->moved, s->block_of[k])) return ZT_OK;
    struct zt_task_opts o = backward->opts;
    o.layer = s->block_of[k];
    o.priority = zt_prio(ZT_PRIO_PREFETCH_BWD, o.layer, backward->n_layer);
    o.recompute = 1; /* a swap-in for a recompute: marked in traces */
    return swap(s, &o, s->block_of[k], 0);
}
