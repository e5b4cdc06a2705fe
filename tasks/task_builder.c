/*
 * tasks/task_builder.c: the task builder every insert function uses (zt_builder_*): it lists a
 * task's slots (a whole tensor, one block or a list of blocks, each with its access mode) in the
 * task's header and its buffers in a StarPU data-mode array, then submits the task on its
 * kind's codelet.
 *
 * Layer: tasks/, above the registry (the codelet of a kind) and below the op files. Submission
 * also tells sched/'s trace recorder about the task's accesses, in submission order.
 */
#include <errno.h>         /* ENODEV */
#include <stdlib.h>        /* malloc, free */
#include <string.h>        /* memset, memcpy */
#include <starpu.h>        /* starpu_task_insert */
#include "zt_sched.h"      /* zt_trace_submit */
#include "tasks_impl.h"    /* struct zt_builder, zt_codelet */

void zt_builder_init(struct zt_builder *tb, struct zt_task_hdr *h, enum zt_task_kind kind,
                     const struct zt_task_opts *o, int blk) {
    memset(tb, 0, sizeof *tb);
    tb->h = h;
    tb->d = tb->inl;
    tb->cap = (int)(sizeof tb->inl / sizeof tb->inl[0]);
    h->kind = kind;
    h->layer = o ? o->layer : -1;
    h->mb = o ? o->mb : -1;
    h->step = o ? o->step : 0;
    h->recompute = o ? o->recompute != 0 : 0;
    h->cpu_only = o ? o->on_host != 0 : 0;
    h->blk = blk;
}

/* append one buffer; past the inline array the list moves to the heap (doubling) */
static void push(struct zt_builder *tb, starpu_data_handle_t hd, enum starpu_data_access_mode m) {
    if (tb->n == tb->cap) {
        int cap = tb->cap * 2;
        struct starpu_data_descr *d = malloc((size_t)cap * sizeof *d);
        if (!d) {
            tb->bad = 1;
            return;
        }
        memcpy(d, tb->d, (size_t)tb->n * sizeof *d);
        if (tb->d != tb->inl) free(tb->d);
        tb->d = d;
        tb->cap = cap;
    }
    tb->d[tb->n].handle = hd;
    tb->d[tb->n].mode = m;
    tb->n++;
}

/* open the next slot, of element type dtype (NULL when every slot is taken) */
static struct zt_task_hdr *open_slot(struct zt_builder *tb, int dtype,
                                     enum starpu_data_access_mode mode, int *s) {
    struct zt_task_hdr *h = tb->h;
    if (h->nslot == ZT_MAX_SLOTS) {
        tb->bad = 1;
        return NULL;
    }
    *s = h->nslot++;
    h->first[*s] = tb->n;
    h->count[*s] = 0;
    h->dtype[*s] = (unsigned char)dtype;
    h->wr[*s] = (mode & (STARPU_W | STARPU_SCRATCH)) != 0;
    h->rd[*s] = (mode & STARPU_R) != 0;
    return h;
}

void zt_builder_add(struct zt_builder *tb, zt_tensor_t t, int blk,
                    enum starpu_data_access_mode mode) {
    int s;
    struct zt_task_hdr *h = open_slot(tb, t ? zt_tensor_dtype(t) : ZT_DTYPE_F32, mode, &s);
    if (!h || !t) return;
    if (blk >= zt_tensor_nblk(t)) {
        tb->bad = 1;
        return;
    }
    int lo = blk < 0 ? 0 : blk, hi = blk < 0 ? zt_tensor_nblk(t) : blk + 1;
    for (int j = lo; j < hi; j++) push(tb, zt_tensor_handle(t, j), mode);
    h->count[s] = hi - lo;
}

void zt_builder_add_list(struct zt_builder *tb, const struct zt_block_ref *refs, int n,
                         enum starpu_data_access_mode mode) {
    int s;
    int dtype = n > 0 && refs[0].t ? zt_tensor_dtype(refs[0].t) : ZT_DTYPE_F32;
    struct zt_task_hdr *h = open_slot(tb, dtype, mode, &s);
    if (!h) return;
    h->count[s] = n;
    for (int i = 0; i < n; i++) {
        /* one element type per slot */
        if (!refs[i].t || refs[i].blk < 0 || refs[i].blk >= zt_tensor_nblk(refs[i].t) ||
            zt_tensor_dtype(refs[i].t) != h->dtype[s]) {
            tb->bad = 1;
            return;
        }
        push(tb, zt_tensor_handle(refs[i].t, refs[i].blk), mode);
    }
}

enum zt_status zt_builder_submit(struct zt_builder *tb, void *args, size_t argsz, int priority) {
    enum zt_status rc = ZT_OK;
    enum zt_task_kind kind = (enum zt_task_kind)tb->h->kind;
    if (tb->bad) {
        free(args);
        rc = zt_error_set(ZT_ERR_INVALID, "task %s: invalid block or too many arguments",
                          zt_task_kind_name(kind));
        goto out;
    }
    /* its dependencies, for the trace */
    tb->h->trace_id = zt_trace_submit(tb->d, tb->n, priority);
    int ret = starpu_task_insert(zt_codelet(kind), STARPU_DATA_MODE_ARRAY, tb->d, tb->n,
                                 STARPU_CL_ARGS, args, argsz, STARPU_PRIORITY, priority,
                                 STARPU_NAME, zt_task_kind_name(kind), 0);
    if (ret == -ENODEV)
        rc = zt_error_set(ZT_ERR_NO_DEVICE, "task %s: no worker can run it",
                          zt_task_kind_name(kind));
    else if (ret != 0)
        rc = zt_error_set(ZT_ERR_RUNTIME, "task %s: starpu_task_insert failed (%d)",
                          zt_task_kind_name(kind), ret);
out:
    if (tb->d != tb->inl) free(tb->d);
    tb->d = tb->inl;
    return rc;
}
