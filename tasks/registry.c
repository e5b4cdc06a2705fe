/*
 * tasks/registry.c: kind -> name, codelet and perf model; the codelet dispatcher; the task
 * builder every insert function uses.
 *
 * Layer: tasks/. Every codelet's CPU function is zt_dispatch_cpu, which runs the kind's body and,
 * when tracing is on, records kind/layer/micro-batch/block/worker/start/end/bytes, the worker's
 * CPU time in the task and how long it waited for a core before it. Perf models
 * are history based with symbol "zt_<kind>" so our calibration files never mix with others'.
 *
 * Mixed precision: the bodies compute in fp32. When a task has bf16/fp16 slots (and its kind
 * does not handle them itself, as the collectives do), the dispatcher widens each of their blocks
 * into a per-worker fp32 scratch area (the slots it reads: a write-only (W) slot is, as StarPU
 * defines W, wholly written by the body), hands the body vector interfaces that point there, and
 * afterwards rounds the slots the task writes back into the 16-bit blocks (nearest even). So a
 * 16-bit result is exactly round(fp32 computation on the widened inputs), and an accumulating
 * task (+=) rounds once per task.
 */
#include <pthread.h>       /* pthread_key_t: the scratch area's destructor */
#include <stdint.h>        /* uint16_t */
#include <stdlib.h>        /* malloc, free */
#include <string.h>        /* memcpy */
#include <time.h>          /* clock_gettime: a traced task's CPU time */
#include <fcntl.h>         /* open: /proc/thread-self/schedstat */
#include <stdio.h>         /* sscanf */
#include <unistd.h>        /* pread, close */
#include <starpu.h>        /* starpu_task_insert, starpu_codelet */
#include "zt_kernels.h"    /* zt_kern_blas_init, zt_kern_gemm_set */
#include "zt_log.h"        /* ZT_LOG_D */
#include "zt_sched.h"      /* zt_runtime_init, zt_trace_record, zt_knob_str */
#include "tasks_impl.h"    /* struct zt_task_hdr, struct zt_tb */

static const char *const g_names[ZT_KIND_COUNT] = {
#define ZT_KIND_NAME_(k, cls, phase) #k,
    ZT_TASK_KINDS(ZT_KIND_NAME_)
#undef ZT_KIND_NAME_
};
static const enum zt_task_class g_class[ZT_KIND_COUNT] = {
#define ZT_KIND_CLASS_(k, cls, phase) ZT_TASK_CLASS_##cls,
    ZT_TASK_KINDS(ZT_KIND_CLASS_)
#undef ZT_KIND_CLASS_
};
static const enum zt_task_phase g_phase[ZT_KIND_COUNT] = {
#define ZT_KIND_PHASE_(k, cls, phase) ZT_TASK_PHASE_##phase,
    ZT_TASK_KINDS(ZT_KIND_PHASE_)
#undef ZT_KIND_PHASE_
};
static const char *const g_class_names[ZT_TASK_CLASS_COUNT] = {
    "compute", "communication", "swap", "checkpoint", "data"};
static const char *const g_phase_names[ZT_TASK_PHASE_COUNT] = {
    "none", "forward", "backward", "weight_grad", "optimizer"};

const char *zt_task_kind_name(int kind) {
    return (kind >= 0 && kind < ZT_KIND_COUNT) ? g_names[kind] : "?";
}
const char *const *zt_task_kind_names(void) { return g_names; }
int zt_task_kind_find(const char *name) {
    for (int k = 0; k < ZT_KIND_COUNT; k++)
        if (!strcmp(g_names[k], name)) return k;
    return -1;
}
enum zt_task_class zt_task_kind_class(int kind) {
    return (kind >= 0 && kind < ZT_KIND_COUNT) ? g_class[kind] : ZT_TASK_CLASS_COMPUTE;
}
enum zt_task_phase zt_task_kind_phase(int kind) {
    return (kind >= 0 && kind < ZT_KIND_COUNT) ? g_phase[kind] : ZT_TASK_PHASE_NONE;
}
const char *zt_task_class_name(enum zt_task_class cls) {
    return ((int)cls >= 0 && cls < ZT_TASK_CLASS_COUNT) ? g_class_names[cls] : "?";
}
const char *zt_task_phase_name(enum zt_task_phase phase) {
    return ((int)phase >= 0 && phase < ZT_TASK_PHASE_COUNT) ? g_phase_names[phase] : "?";
}

/* ---- dispatcher ---- */
typedef void (*zt_impl_fn)(void *buffers[], void *cl_arg);
static const zt_impl_fn g_impl[ZT_KIND_COUNT] = {
#define ZT_KIND_IMPL_(k, cls, phase) k##_cpu,
    ZT_TASK_KINDS(ZT_KIND_IMPL_)
#undef ZT_KIND_IMPL_
};

/* ---- widening of 16-bit slots ---- */
static pthread_key_t g_wide_key;
static pthread_once_t g_wide_once = PTHREAD_ONCE_INIT;
struct wide_area {
    float *buf;
    size_t cap; /* floats */
};
static void wide_free(void *p) {
    struct wide_area *w = p;
    if (w) free(w->buf);
    free(w);
}
static void wide_key_init(void) { pthread_key_create(&g_wide_key, wide_free); }

/* this thread's scratch of at least n floats (kept for the next task; freed at thread exit) */
static float *wide_scratch(size_t n) {
    pthread_once(&g_wide_once, wide_key_init);
    struct wide_area *w = pthread_getspecific(g_wide_key);
    if (!w) {
        w = calloc(1, sizeof *w);
        ZT_ASSERT_MSG(w != NULL, "out of memory for a widening area");
        pthread_setspecific(g_wide_key, w);
    }
    if (w->cap < n) {
        free(w->buf);
        w->buf = NULL;
        ZT_ASSERT_MSG(posix_memalign((void **)&w->buf, 64, n * sizeof(float)) == 0,
                      "out of memory for %zu widened floats", n);
        w->cap = n;
    }
    return w->buf;
}

/* run the body on fp32 views of the task's 16-bit slots (see the file comment) */
static void run_widened(void *buffers[], const struct zt_task_hdr *h, void *cl_arg) {
    size_t need = 0;
    int nwide = 0, nbuf = 0;
    for (int s = 0; s < h->nslot; s++) {
        if (h->first[s] + h->count[s] > nbuf) nbuf = h->first[s] + h->count[s];
        if (!zt_dtype_is16(h->dtype[s])) continue;
        for (int i = 0; i < h->count[s]; i++)
            need += STARPU_VECTOR_GET_NX(buffers[h->first[s] + i]);
        nwide += h->count[s];
    }
    float *scratch = wide_scratch(need ? need : 1);
    void **vb = malloc((size_t)(nbuf ? nbuf : 1) * sizeof *vb);
    struct starpu_vector_interface *vi = malloc((size_t)(nwide ? nwide : 1) * sizeof *vi);
    ZT_ASSERT_MSG(vb && vi, "out of memory widening a %s task", zt_task_kind_name(h->kind));
    memcpy(vb, buffers, (size_t)nbuf * sizeof *vb);
    size_t at = 0;
    int k = 0;
    for (int s = 0; s < h->nslot; s++) {
        if (!zt_dtype_is16(h->dtype[s])) continue;
        for (int i = 0; i < h->count[s]; i++, k++) {
            void *b = buffers[h->first[s] + i];
            size_t n = STARPU_VECTOR_GET_NX(b);
            const uint16_t *src = (const uint16_t *)STARPU_VECTOR_GET_PTR(b);
            if (h->rd[s]) zt_dtype_to_f32(h->dtype[s], scratch + at, src, n);
            vi[k] = *(struct starpu_vector_interface *)b;
            vi[k].ptr = vi[k].dev_handle = (uintptr_t)(scratch + at);
            vi[k].offset = 0;
            vi[k].elemsize = sizeof(float);
            vb[h->first[s] + i] = &vi[k];
            at += n;
        }
    }
    g_impl[h->kind](vb, cl_arg);
    at = 0;
    for (int s = 0; s < h->nslot; s++) {
        if (!zt_dtype_is16(h->dtype[s])) continue;
        for (int i = 0; i < h->count[s]; i++) {
            void *b = buffers[h->first[s] + i];
            size_t n = STARPU_VECTOR_GET_NX(b);
            uint16_t *dst = (uint16_t *)STARPU_VECTOR_GET_PTR(b);
            if (h->wr[s]) zt_dtype_from_f32(h->dtype[s], dst, scratch + at, n);
            at += n;
        }
    }
    free(vi);
    free(vb);
}

static void run_body(void *buffers[], const struct zt_task_hdr *h, void *cl_arg) {
    int wide = 0;
    for (int s = 0; s < h->nslot && !h->native16; s++)
        wide |= zt_dtype_is16(h->dtype[s]) && h->count[s];
    if (wide) run_widened(buffers, h, cl_arg);
    else g_impl[h->kind](buffers, cl_arg);
}

/* ---- tracing ---- */
static pthread_key_t g_sched_key;
static pthread_once_t g_sched_once = PTHREAD_ONCE_INIT;
static void sched_close(void *p) { close((int)(intptr_t)p - 1); }
static void sched_key_init(void) { pthread_key_create(&g_sched_key, sched_close); }

/* this thread's run-queue wait so far (us; /proc/thread-self/schedstat's second field: time
 * runnable but not running), or -1 where the kernel does not keep it */
static double run_delay_us(void) {
    pthread_once(&g_sched_once, sched_key_init);
    int fd = (int)(intptr_t)pthread_getspecific(g_sched_key) - 1; /* stored + 1: NULL is none */
    if (fd == -1) {
        fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
        if (fd < 0) fd = -2; /* not available: do not try again */
        pthread_setspecific(g_sched_key, (void *)(intptr_t)(fd + 1));
    }
    if (fd < 0) return -1;
    char b[96];
    ssize_t n = pread(fd, b, sizeof b - 1, 0);
    if (n <= 0) return -1;
    b[n] = 0;
    unsigned long long run, delay;
    return sscanf(b, "%llu %llu", &run, &delay) == 2 ? (double)delay / 1e3 : -1;
}

typedef void (*zt_run_fn)(void *buffers[], const struct zt_task_hdr *h, void *cl_arg);

/* run the body (run) and, when tracing is on, record it */
static void dispatch(void *buffers[], void *cl_arg, zt_run_fn run) {
    const struct zt_task_hdr *h = cl_arg;
    if (!zt_trace_enabled()) {
        run(buffers, h, cl_arg);
        return;
    }
    /* how long the worker waited for a core (runnable, not running) since its previous traced
     * task ended: the part of a ready task's delay that other threads caused */
    static _Thread_local double last_wait = -1;
    double wait0 = run_delay_us();
    struct timespec c0, c1;
    int cpu_ok = clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0) == 0;
    double t0 = starpu_timing_now();
    run(buffers, h, cl_arg);
    double t1 = starpu_timing_now();
    cpu_ok = cpu_ok && clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1) == 0;
    double waited = wait0 >= 0 && last_wait >= 0 ? wait0 - last_wait : -1;
    last_wait = run_delay_us();
    int w = starpu_worker_get_id();
    struct zt_trace_rec r = {.kind = h->kind, .layer = h->layer, .mb = h->mb, .blk = h->blk,
                             .worker = w, .node = (int)starpu_worker_get_memory_node(w),
                             .step = h->step, .id = h->trace_id, .start_us = t0, .end_us = t1,
                             .cpu_us = cpu_ok ? (double)(c1.tv_sec - c0.tv_sec) * 1e6 +
                                                    (double)(c1.tv_nsec - c0.tv_nsec) / 1e3
                                              : -1,
                             .waited_us = waited, .bytes = 0};
    struct starpu_task *task = starpu_task_get_current();
    unsigned nb = task ? STARPU_TASK_GET_NBUFFERS(task) : 0;
    for (unsigned i = 0; i < nb; i++)
        r.bytes += (int64_t)STARPU_VECTOR_GET_NX(buffers[i]) *
                   (int64_t)STARPU_VECTOR_GET_ELEMSIZE(buffers[i]);
    zt_trace_record(&r);
}

static void zt_dispatch_cpu(void *buffers[], void *cl_arg) { dispatch(buffers, cl_arg, run_body); }

#ifdef ZT_USE_CUDA
#include <cuda_runtime_api.h> /* cudaGetLastError */
#include <starpu_cublas.h>    /* starpu_cublas_init, starpu_cublas_shutdown */
#include <starpu_cublas_v2.h> /* starpu_cublas_get_local_handle (declared only here) */

static zt_impl_fn g_impl_cuda[ZT_KIND_COUNT];

static void run_cuda(void *buffers[], const struct zt_task_hdr *h, void *cl_arg) {
    /* StarPU's event polling can leave cudaErrorNotReady as the thread's last error: clear it,
     * so the body's launch checks see only their own */
    (void)cudaGetLastError();
    g_impl_cuda[h->kind](buffers, cl_arg);
}

/* asynchronous (STARPU_CUDA_ASYNC): a traced CUDA task's times are those of its launches */
static void zt_dispatch_cuda(void *buffers[], void *cl_arg) { dispatch(buffers, cl_arg, run_cuda); }

void *zt_cuda_stream(void) { return (void *)starpu_cuda_get_local_stream(); }
void *zt_cuda_blas(void) { return (void *)starpu_cublas_get_local_handle(); }

/* Where a task of a kind with a CUDA body runs, decided by the task alone, never by the
 * scheduler: with CUDA workers, a task whose slots are each one fp32 block runs only on them
 * (zerotask's placement rule: the GPU computes what it can), any other only on CPU workers.
 * cuBLAS and OpenBLAS sum in different orders, so a scheduler free to choose would make the
 * losses depend on its choices; this way they depend only on the model and the machine. */
static int zt_cuda_can_run(unsigned workerid, struct starpu_task *task, unsigned nimpl) {
    (void)nimpl;
    const struct zt_task_hdr *h = task->cl_arg;
    int on_gpu = h && g_impl_cuda[h->kind] && starpu_cuda_worker_get_count() > 0;
    for (int s = 0; on_gpu && s < h->nslot; s++)
        on_gpu = h->count[s] <= 1 && !(h->count[s] && zt_dtype_is16(h->dtype[s]));
    return on_gpu == (starpu_worker_get_type((int)workerid) == STARPU_CUDA_WORKER);
}

#ifdef ZT_USE_NCCL
/* a collective runs on the CUDA worker (NCCL) on every rank, or on CPU workers (MPI) on every
 * rank: zt_comm_nccl_init agreed on one with the others, so no rank waits for a message the
 * other transport carries */
static int zt_nccl_can_run(unsigned workerid, struct starpu_task *task, unsigned nimpl) {
    (void)task, (void)nimpl;
    return zt_comm_nccl_active() == (starpu_worker_get_type((int)workerid) == STARPU_CUDA_WORKER);
}
#endif
#endif

/* ---- codelets and perf models, generated from the kind list ---- */
#define ZT_KIND_PM_(k, cls, phase)                                                                           \
    static struct starpu_perfmodel zt_pm_##k = {.type = STARPU_HISTORY_BASED,                     \
                                                .symbol = "zt_" #k};
ZT_TASK_KINDS(ZT_KIND_PM_)
#undef ZT_KIND_PM_

static struct starpu_codelet g_cl[ZT_KIND_COUNT] = {
#define ZT_KIND_CL_(k, cls, phase)                                                                           \
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

#ifdef ZT_USE_CUDA
/* the kinds with a CUDA body get it as their second implementation, before any submission */
static void cuda_codelets(void) {
#define ZT_KIND_CUDA_(k) g_impl_cuda[ZT_KIND_##k] = k##_cuda;
    ZT_CUDA_KINDS(ZT_KIND_CUDA_)
#ifdef ZT_USE_NCCL
    ZT_NCCL_KINDS(ZT_KIND_CUDA_)
#endif
#undef ZT_KIND_CUDA_
    for (int k = 0; k < ZT_KIND_COUNT; k++) {
        if (!g_impl_cuda[k] || g_cl[k].cuda_funcs[0]) continue;
        g_cl[k].cuda_funcs[0] = zt_dispatch_cuda;
        g_cl[k].cuda_flags[0] = STARPU_CUDA_ASYNC;
        g_cl[k].can_execute = zt_cuda_can_run;
    }
#ifdef ZT_USE_NCCL
#define ZT_KIND_NCCL_(k) g_cl[ZT_KIND_##k].can_execute = zt_nccl_can_run;
    ZT_NCCL_KINDS(ZT_KIND_NCCL_)
#undef ZT_KIND_NCCL_
#endif
}
#endif

#ifdef ZT_USE_CUDA
static int g_tasks_refs; /* zt_tasks_init calls not yet matched by zt_tasks_free */
#endif

/* ZT_GEMM: the engine of every CPU product (kernels/cpu/gemm.c), before any task runs */
static enum zt_status gemm_engine(void) {
    static const char *const engines[] = {"auto", "avx512", "openblas", NULL};
    const char *eng = "auto";
    ZT_CHECK(zt_knob_str("ZT_GEMM", engines, &eng));
    int own = strcmp(eng, "avx512") == 0 ||
              (strcmp(eng, "auto") == 0 && zt_kern_gemm_avx512_available());
    if (zt_kern_gemm_set(own ? ZT_GEMM_AVX512 : ZT_GEMM_OPENBLAS) != 0)
        return zt_error_set(ZT_ERR_CONFIG, "ZT_GEMM=avx512: this CPU has no AVX-512F; expected "
                                           "auto or openblas");
    ZT_LOG_D("CPU products: %s", own ? "zerotask AVX-512 GEMM" : "OpenBLAS sgemm");
    return ZT_OK;
}

enum zt_status zt_tasks_init(void) {
    ZT_CHECK(gemm_engine());
    ZT_CHECK(zt_runtime_init());
#ifdef ZT_USE_CUDA
    cuda_codelets();
    /* one handle per CUDA worker, on its stream (nothing without one); once per StarPU run:
     * StarPU creates new handles on every call and destroys them on every shutdown */
    if (g_tasks_refs++ == 0) {
        starpu_cublas_init();
#ifdef ZT_USE_NCCL
        enum zt_status st = zt_comm_nccl_init();
        if (st != ZT_OK) {
            starpu_cublas_shutdown();
            g_tasks_refs--;
            zt_runtime_free();
            return st;
        }
#endif
    }
#endif
    zt_kern_blas_init();
    /* OpenBLAS' thread count is per process, but be explicit on every worker too */
    starpu_execute_on_each_worker(blas_init_worker, NULL, STARPU_CPU);
    return ZT_OK;
}

void zt_tasks_free(void) {
    starpu_task_wait_for_all();
    zt_attention_scratch_free();
#ifdef ZT_USE_CUDA
    if (--g_tasks_refs == 0) {
#ifdef ZT_USE_NCCL
        zt_comm_nccl_free();
#endif
        starpu_cublas_shutdown();
    }
#endif
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
    h->dtype[s] = t ? (unsigned char)zt_tensor_dtype(t) : ZT_DTYPE_F32;
    h->wr[s] = (mode & (STARPU_W | STARPU_SCRATCH)) != 0;
    h->rd[s] = (mode & STARPU_R) != 0;
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
    h->dtype[s] = n > 0 && refs[0].t ? (unsigned char)zt_tensor_dtype(refs[0].t) : ZT_DTYPE_F32;
    h->wr[s] = (mode & (STARPU_W | STARPU_SCRATCH)) != 0;
    h->rd[s] = (mode & STARPU_R) != 0;
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
