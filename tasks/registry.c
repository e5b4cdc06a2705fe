/*
 * tasks/registry.c: kind -> name, codelet and perf model; the codelet dispatcher; the task
 * builder every insert function uses.
 *
 * Layer: tasks/. Every codelet's CPU function is zt_dispatch_cpu, which runs the kind's body and,
 * when tracing is on, records kind/layer/micro-batch/block/worker/start/end/bytes. Perf models
 * are history based with symbol "zt_<kind>" so our calibration files never mix with others'.
 */
#include <stdlib.h>        /* malloc, free */
#include <string.h>        /* memcpy */
#include <starpu.h>        /* starpu_task_insert, starpu_codelet */
#include "zt_kernels.h"    /* zt_kern_blas_init */
#include "zt_sched.h"      /* zt_runtime_init, zt_trace_record */
#include "tasks_impl.h"    /* struct zt_task_hdr, struct zt_tb */

static const char *const g_names[ZT_KIND_COUNT] = {
#define ZT_KIND_NAME_(k) #k,
    ZT_TASK_KINDS(ZT_KIND_NAME_)
#undef ZT_KIND_NAME_
};

const char *zt_task_kind_name(int kind) {
    return (kind >= 0 && kind < ZT_KIND_COUNT) ? g_names[kind] : "?";
}
const char *const *zt_task_kind_names(void) { return g_names; }

/* ---- dispatcher ---- */
typedef void (*zt_impl_fn)(void *buffers[], void *cl_arg);
static const zt_impl_fn g_impl[ZT_KIND_COUNT] = {
#define ZT_KIND_IMPL_(k) k##_cpu,
    ZT_TASK_KINDS(ZT_KIND_IMPL_)
#undef ZT_KIND_IMPL_
};

static void zt_dispatch_cpu(void *buffers[], void *cl_arg) {
    const struct zt_task_hdr *h = cl_arg;
    if (!zt_trace_enabled()) {
        g_impl[h->kind](buffers, cl_arg);
        return;
    }
    double t0 = starpu_timing_now();
    g_impl[h->kind](buffers, cl_arg);
    double t1 = starpu_timing_now();
    int w = starpu_worker_get_id();
    struct zt_trace_rec r = {.kind = h->kind, .layer = h->layer, .mb = h->mb, .blk = h->blk,
                             .worker = w, .node = (int)starpu_worker_get_memory_node(w),
                             .step = h->step, .id = h->trace_id, .start_us = t0, .end_us = t1,
                             .bytes = 0};
    struct starpu_task *task = starpu_task_get_current();
    unsigned nb = task ? STARPU_TASK_GET_NBUFFERS(task) : 0;
    for (unsigned i = 0; i < nb; i++)
        r.bytes += (int64_t)STARPU_VECTOR_GET_NX(buffers[i]) *
                   (int64_t)STARPU_VECTOR_GET_ELEMSIZE(buffers[i]);
    zt_trace_record(&r);
}

/* ---- codelets and perf models, generated from the kind list ---- */
#define ZT_KIND_PM_(k)                                                                           \
    static struct starpu_perfmodel zt_pm_##k = {.type = STARPU_HISTORY_BASED,                     \
                                                .symbol = "zt_" #k};
ZT_TASK_KINDS(ZT_KIND_PM_)
#undef ZT_KIND_PM_

static struct starpu_codelet g_cl[ZT_KIND_COUNT] = {
#define ZT_KIND_CL_(k)                                                                           \
    {.cpu_funcs = {zt_dispatch_cpu}, .cpu_funcs_name = {"zt_dispatch_cpu"},                     \
     .nbuffers = STARPU_VARIABLE_NBUFFERS, .model = &zt_pm_##k, .name = #k},
    ZT_TASK_KINDS(ZT_KIND_CL_)
#undef ZT_KIND_CL_
};

struct starpu_codelet *zt_codelet(enum zt_task_kind kind) { return &g_cl[kind]; }

/* ---- runtime ---- */
static void blas_init_worker(void *arg) {
    (void)arg;
    zt_kern_blas_init();
}

enum zt_status zt_tasks_init(void) {
    ZT_CHECK(zt_runtime_init());
    zt_kern_blas_init();
    /* OpenBLAS' thread count is per process, but be explicit on every worker too */
    starpu_execute_on_each_worker(blas_init_worker, NULL, STARPU_CPU);
    return ZT_OK;
}

void zt_tasks_free(void) {
    starpu_task_wait_for_all();
    zt_attention_scratch_free();
    zt_runtime_free();
}

/* ---- slots ---- */
void *zt_slot_ptr(void *buffers[], const struct zt_task_hdr *h, int s) {
    if (h->count[s] == 0) return NULL;
    unsigned char *p0 = (unsigned char *)STARPU_VECTOR_GET_PTR(buffers[h->first[s]]);
#ifndef NDEBUG
    unsigned char *expect = p0;
    for (int i = 0; i < h->count[s]; i++) {
        void *b = buffers[h->first[s] + i];
        ZT_ASSERT_MSG((unsigned char *)STARPU_VECTOR_GET_PTR(b) == expect,
                      "slot %d of %s: blocks not contiguous", s, zt_task_kind_name(h->kind));
        expect += (size_t)STARPU_VECTOR_GET_NX(b) * STARPU_VECTOR_GET_ELEMSIZE(b);
    }
#endif
    return p0;
}

int64_t zt_slot_nx(void *buffers[], const struct zt_task_hdr *h, int s) {
    int64_t n = 0;
    for (int i = 0; i < h->count[s]; i++) n += STARPU_VECTOR_GET_NX(buffers[h->first[s] + i]);
    return n;
}

void *zt_slot_buf_ptr(void *buffers[], const struct zt_task_hdr *h, int s, int i) {
    return (void *)STARPU_VECTOR_GET_PTR(buffers[h->first[s] + i]);
}

int64_t zt_slot_buf_nx(void *buffers[], const struct zt_task_hdr *h, int s, int i) {
    return STARPU_VECTOR_GET_NX(buffers[h->first[s] + i]);
}

/* ---- builder ---- */
void zt_tb_init(struct zt_tb *tb, struct zt_task_hdr *h, enum zt_task_kind kind,
                const struct zt_task_opts *o, int blk) {
    memset(tb, 0, sizeof *tb);
    tb->h = h;
    tb->d = tb->inl;
    tb->cap = (int)(sizeof tb->inl / sizeof tb->inl[0]);
    h->kind = kind;
    h->layer = o ? o->layer : -1;
    h->mb = o ? o->mb : -1;
    h->step = o ? o->step : 0;
    h->blk = blk;
}

static void push(struct zt_tb *tb, starpu_data_handle_t hd, enum starpu_data_access_mode m) {
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

void zt_tb_add(struct zt_tb *tb, zt_tensor_t t, int blk, enum starpu_data_access_mode mode) {
    struct zt_task_hdr *h = tb->h;
    if (h->nslot == ZT_MAX_SLOTS) {
        tb->bad = 1;
        return;
    }
    int s = h->nslot++;
    h->first[s] = tb->n;
    h->count[s] = 0;
    if (!t) return;
    if (blk >= zt_tensor_nblk(t)) {
        tb->bad = 1;
        return;
    }
    int lo = blk < 0 ? 0 : blk, hi = blk < 0 ? zt_tensor_nblk(t) : blk + 1;
    for (int j = lo; j < hi; j++) push(tb, zt_tensor_handle(t, j), mode);
    h->count[s] = hi - lo;
}

void zt_tb_add_list(struct zt_tb *tb, const struct zt_block_ref *refs, int n,
                    enum starpu_data_access_mode mode) {
    struct zt_task_hdr *h = tb->h;
    if (h->nslot == ZT_MAX_SLOTS) {
        tb->bad = 1;
        return;
    }
    int s = h->nslot++;
    h->first[s] = tb->n;
    h->count[s] = n;
    for (int i = 0; i < n; i++) {
        if (!refs[i].t || refs[i].blk < 0 || refs[i].blk >= zt_tensor_nblk(refs[i].t)) {
            tb->bad = 1;
            return;
        }
        push(tb, zt_tensor_handle(refs[i].t, refs[i].blk), mode);
    }
}

enum zt_status zt_tb_submit(struct zt_tb *tb, void *args, size_t argsz, int priority) {
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
    int ret = starpu_task_insert(&g_cl[kind], STARPU_DATA_MODE_ARRAY, tb->d, tb->n,
                                 STARPU_CL_ARGS, args, argsz, STARPU_PRIORITY, priority,
                                 STARPU_NAME, g_names[kind], 0);
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
