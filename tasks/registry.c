/*
 * tasks/registry.c: the codelet and perf model of every task kind, and the start and stop of
 * tasks/ (zt_tasks_init, zt_tasks_free).
 *
 * Layer: tasks/, the top of its base: generated from the ZT_TASK_KINDS X-macro, each codelet
 * enters the dispatcher (dispatch.c) with its kind's body, <kind>_cpu (and <kind>_cuda in the GPU
 * build): naming those bodies is what registering them means, and it is the only reference from
 * here to the op files. The builder (task_builder.c) submits tasks on these codelets. Perf models
 * are history based with symbol "zt_<kind>" so our calibration files never mix with others'.
 */
#include <string.h>        /* strcmp */
#include <starpu.h>        /* starpu_codelet, starpu_perfmodel */
#include "zt_kernels.h"    /* zt_kern_blas_init, zt_kern_gemm_set */
#include "zt_log.h"        /* ZT_LOG_D */
#include "zt_sched.h"      /* zt_runtime_init, zt_knob_str */
#include "tasks_impl.h"    /* zt_dispatch_cpu, the bodies' prototypes */

// ----------------------------------------------------------------------------
// bodies and the codelets' entry points

static const zt_body_fn g_body_cpu[ZT_KIND_COUNT] = {
#define ZT_KIND_BODY_(k, cls, phase) k##_cpu,
    ZT_TASK_KINDS(ZT_KIND_BODY_)
#undef ZT_KIND_BODY_
};

/* every codelet's CPU function: the task's kind's body through the dispatcher */
static void task_cpu(void *buffers[], void *cl_arg) {
    const struct zt_task_hdr *h = cl_arg;
    zt_dispatch_cpu(buffers, cl_arg, g_body_cpu[h->kind]);
}

#ifdef ZT_USE_CUDA
/* the kinds with a CUDA body, filled by cuda_codelets before any submission */
static zt_body_fn g_body_cuda[ZT_KIND_COUNT];

static void task_cuda(void *buffers[], void *cl_arg) {
    const struct zt_task_hdr *h = cl_arg;
    zt_dispatch_cuda(buffers, cl_arg, g_body_cuda[h->kind]);
}
#endif

// ----------------------------------------------------------------------------
// codelets and perf models, generated from the kind list

#define ZT_KIND_PM_(k, cls, phase)                                                               \
    static struct starpu_perfmodel zt_pm_##k = {.type = STARPU_HISTORY_BASED,                    \
                                                .symbol = "zt_" #k};
ZT_TASK_KINDS(ZT_KIND_PM_)
#undef ZT_KIND_PM_

static struct starpu_codelet g_cl[ZT_KIND_COUNT] = {
#define ZT_KIND_CL_(k, cls, phase)                                                               \
    {.cpu_funcs = {task_cpu}, .cpu_funcs_name = {"task_cpu"},                                    \
     .nbuffers = STARPU_VARIABLE_NBUFFERS, .model = &zt_pm_##k, .name = #k},
    ZT_TASK_KINDS(ZT_KIND_CL_)
#undef ZT_KIND_CL_
};

struct starpu_codelet *zt_codelet(enum zt_task_kind kind) { return &g_cl[kind]; }

#ifdef ZT_USE_CUDA
/* the kinds with a CUDA body get it as their second implementation, before any submission */
static void cuda_codelets(void) {
#define ZT_KIND_CUDA_(k) g_body_cuda[ZT_KIND_##k] = k##_cuda;
    ZT_CUDA_KINDS(ZT_KIND_CUDA_)
#ifdef ZT_USE_NCCL
    ZT_NCCL_KINDS(ZT_KIND_CUDA_)
#endif
#undef ZT_KIND_CUDA_
    for (int k = 0; k < ZT_KIND_COUNT; k++) {
        if (!g_body_cuda[k] || g_cl[k].cuda_funcs[0]) continue;
        g_cl[k].cuda_funcs[0] = task_cuda;
        g_cl[k].cuda_flags[0] = STARPU_CUDA_ASYNC;
        g_cl[k].can_execute = zt_dispatch_cuda_can_run;
    }
#ifdef ZT_USE_NCCL
#define ZT_KIND_NCCL_(k) g_cl[ZT_KIND_##k].can_execute = zt_dispatch_nccl_can_run;
    ZT_NCCL_KINDS(ZT_KIND_NCCL_)
#undef ZT_KIND_NCCL_
#endif
}
#endif

// ----------------------------------------------------------------------------
// start and stop

#ifdef ZT_USE_CUDA
#include <starpu_cublas.h> /* starpu_cublas_init, starpu_cublas_shutdown */
#endif

static int g_tasks_refs; /* zt_tasks_init calls not yet matched by zt_tasks_free */

static void blas_init_worker(void *arg) {
    (void)arg;
    zt_kern_blas_init();
}

/* ZT_GEMM: the engines of the CPU products (kernels/cpu/gemm.c, gemm_bf16.c), before any task
 * runs: fp32 products on ours or OpenBLAS; bf16 products on AMX, AVX512-BF16 or widened to fp32 */
static const struct {
    const char *name;
    int fp32_own;                  /* the fp32 engine: 1 ours, 0 OpenBLAS */
    enum zt_gemm16_engine bf16;    /* the bf16 engine */
    const char *needs;             /* what the CPU must have */
} GEMM_CHOICES[] = {
    {"avx512", 1, ZT_GEMM16_WIDEN, "AVX-512F"},
    {"openblas", 0, ZT_GEMM16_WIDEN, ""},
    {"avx512bf16", 1, ZT_GEMM16_AVX512BF16, "AVX512-BF16"},
    {"amx", 1, ZT_GEMM16_AMX, "AMX-BF16 (granted by the kernel)"},
};

/* the engines chosen (the bits depend on them) */
static void log_engines(void) {
    static const char *const BF16[] = {"widened to fp32", "AVX512-BF16", "AMX"};
    ZT_LOG_D("CPU products: fp32 on %s, bf16 %s",
             zt_kern_gemm_get() == ZT_GEMM_AVX512 ? "zerotask's AVX-512 GEMM" : "OpenBLAS sgemm",
             BF16[zt_kern_gemm16_get()]);
}

static enum zt_status gemm_engine(void) {
    const char *eng = "auto";
    ZT_CHECK(zt_knob_str("ZT_GEMM", &eng));
    if (strcmp(eng, "auto") == 0) {
        int own = zt_kern_gemm_avx512_available();
        zt_kern_gemm_set(own ? ZT_GEMM_AVX512 : ZT_GEMM_OPENBLAS);
        for (int e = ZT_GEMM16_AMX; e >= ZT_GEMM16_WIDEN; e--)
            if (zt_kern_gemm16_set((enum zt_gemm16_engine)e) == 0) break;
        log_engines();
        return ZT_OK;
    }
    for (size_t i = 0; i < sizeof GEMM_CHOICES / sizeof *GEMM_CHOICES; i++) {
        if (strcmp(eng, GEMM_CHOICES[i].name) != 0) continue;
        if (zt_kern_gemm_set(GEMM_CHOICES[i].fp32_own ? ZT_GEMM_AVX512 : ZT_GEMM_OPENBLAS) != 0 ||
            zt_kern_gemm16_set(GEMM_CHOICES[i].bf16) != 0)
            return zt_error_set(ZT_ERR_CONFIG, "ZT_GEMM=%s: this CPU has no %s; expected auto or "
                                               "an engine it has", eng, GEMM_CHOICES[i].needs);
        log_engines();
        return ZT_OK;
    }
    return zt_error_set(ZT_ERR_CONFIG, "ZT_GEMM='%s': expected auto, avx512, openblas, avx512bf16 "
                                       "or amx", eng);
}

enum zt_status zt_tasks_init(void) {
    ZT_CHECK(gemm_engine());
    ZT_CHECK(zt_runtime_init()); /* MPI, StarPU and (GPU build) the NCCL communicator */
    g_tasks_refs++;
#ifdef ZT_USE_CUDA
    cuda_codelets();
    /* one handle per CUDA worker, on its stream (nothing without one); once per StarPU run:
     * StarPU creates new handles on every call and destroys them on every shutdown */
    if (g_tasks_refs == 1) starpu_cublas_init();
#endif
    zt_kern_blas_init();
    /* OpenBLAS' thread count is per process, but be explicit on every worker too */
    starpu_execute_on_each_worker(blas_init_worker, NULL, STARPU_CPU);
    return ZT_OK;
}

void zt_tasks_free(void) {
    starpu_task_wait_for_all();
    if (g_tasks_refs > 0 && --g_tasks_refs == 0) {
        /* the sends and recvs no task waits for, before MPI goes down */
        zt_p2p_free();
#ifdef ZT_USE_CUDA
        starpu_cublas_shutdown();
#endif
    }
    zt_runtime_free();
}
