/*
 * tasks/dispatch_cuda.c: how a task's body runs on a CUDA worker (GPU build): its slots as
 * contiguous fp32 device arrays, the worker's device scratch areas, its stream and cuBLAS
 * handle, and which tasks go to the GPU at all.
 *
 * Layer: tasks/, beside dispatch.c (the CPU's side and the tracing wrapper both use). StarPU
 * gives each block of a tensor its own device allocation, so a slot of several blocks is not
 * one array on the GPU; and the CUDA kernels compute in fp32. So before the body, each slot
 * of several blocks or of 16-bit blocks is gathered into the worker's gather area (16-bit
 * blocks widened there exactly), the body sees one array per slot, and afterwards the slots it
 * writes are scattered back (16-bit rounded to nearest even): the CPU dispatcher's widening
 * semantics, with device-to-device copies. All of it is queued on the worker's stream
 * (STARPU_CUDA_ASYNC), so the next task's gather into the same area comes after this one's
 * scatter.
 */
#include <stdatomic.h>            /* atomic_int */
#include <stdint.h>               /* uint16_t, uintptr_t */
#include <stdlib.h>               /* malloc, free */
#include <string.h>               /* memcpy */
#include <cuda_runtime_api.h>     /* cudaMemcpyAsync, cudaMallocAsync, cudaGetLastError */
#include <starpu.h>               /* starpu_cuda_get_local_stream, STARPU_VECTOR_GET_* */
#include <starpu_cublas_v2.h>     /* starpu_cublas_get_local_handle (declared only here) */
#include "zt_kernels_cuda.h"      /* zt_cuda_bf16_to_f32 and the other converters */
#include "tasks_impl.h"           /* struct zt_task_hdr, zt_dispatch_run, our prototypes */
#include "zt_sched.h"             /* zt_knob_int */
#ifdef ZT_USE_NCCL
#include "zt_nccl.h"              /* zt_nccl_active */
#endif

void *zt_cuda_stream(void) { return (void *)starpu_cuda_get_local_stream(); }
void *zt_cuda_blas(void) { return (void *)starpu_cublas_get_local_handle(); }

// ----------------------------------------------------------------------------
// device scratch areas: one set per CUDA worker thread, stream-ordered

/* Per worker, not per thread: with STARPU_NWORKER_PER_CUDA > 1 one thread drives several
 * workers, each on its own stream. Only the worker itself touches its entries. The areas live
 * until the process ends, as the CUDA context they belong to does. */
static void *g_area[STARPU_NMAXWORKERS][ZT_CUDA_AREA_COUNT];
static size_t g_area_cap[STARPU_NMAXWORKERS][ZT_CUDA_AREA_COUNT];

void *zt_cuda_scratch(enum zt_cuda_area area, size_t bytes) {
    int w = starpu_worker_get_id();
    ZT_ASSERT_MSG(w >= 0 && w < STARPU_NMAXWORKERS, "zt_cuda_scratch outside a CUDA worker");
    void **p = &g_area[w][area];
    if (g_area_cap[w][area] >= bytes && *p) return *p;
    cudaStream_t st = starpu_cuda_get_local_stream();
    if (*p) cudaFreeAsync(*p, st); /* after the work queued before on this worker's stream */
    size_t cap = bytes + bytes / 4 + 256; /* room to grow a little without reallocating */
    *p = NULL;
    if (cudaMallocAsync(p, cap, st) != cudaSuccess) {
        /* StarPU keeps freed data buffers cached on the device: let it release them, once */
        (void)cudaGetLastError();
        starpu_memchunk_tidy(starpu_worker_get_memory_node((unsigned)w));
        ZT_ASSERT_MSG(cudaMallocAsync(p, cap, st) == cudaSuccess,
                      "out of device memory for a %zu-byte scratch area (StarPU's data fills "
                      "the device: STARPU_LIMIT_CUDA_MEM caps its share, in MiB)", cap);
    }
    g_area_cap[w][area] = cap;
    return *p;
}

// ----------------------------------------------------------------------------
// gathering and widening slots on the device

/* slot s reaches the body through the gather area: several blocks, or 16-bit ones */
static int gathered(const struct zt_task_hdr *h, int s) {
    return h->count[s] > 1 || (h->count[s] == 1 && zt_dtype_is16(h->dtype[s]));
}

/* bytes one element of slot s takes in the gather area (16-bit ones are widened) */
static size_t area_elemsize(void *buffers[], const struct zt_task_hdr *h, int s) {
    return zt_dtype_is16(h->dtype[s]) ? sizeof(float)
                                      : STARPU_VECTOR_GET_ELEMSIZE(buffers[h->first[s]]);
}

/* block b into the area at dst (widening 16-bit), or with back != 0 the area into block b */
static void move_block(const struct zt_task_hdr *h, int s, struct starpu_vector_interface *b,
                       unsigned char *area, int back, cudaStream_t st) {
    size_t n = b->nx;
    uint16_t *blk16 = (uint16_t *)b->ptr;
    int rc;
    if (h->dtype[s] == ZT_DTYPE_BF16)
        rc = back ? zt_cuda_f32_to_bf16(blk16, (const float *)area, n, st)
                  : zt_cuda_bf16_to_f32((float *)area, blk16, n, st);
    else if (h->dtype[s] == ZT_DTYPE_F16)
        rc = back ? zt_cuda_f32_to_f16(blk16, (const float *)area, n, st)
                  : zt_cuda_f16_to_f32((float *)area, blk16, n, st);
    else
        rc = (int)(back ? cudaMemcpyAsync((void *)b->ptr, area, n * b->elemsize,
                                          cudaMemcpyDeviceToDevice, st)
                        : cudaMemcpyAsync(area, (const void *)b->ptr, n * b->elemsize,
                                          cudaMemcpyDeviceToDevice, st));
    ZT_ASSERT_MSG(rc == 0, "CUDA task %s: moving slot %d through the gather area failed (%d)",
                  zt_task_kind_name(h->kind), s, rc);
}

/* Point vb's buffers of the gathered slots at consecutive parts of the area (vi: their
 * interfaces), filling the parts of the slots the task reads; with back != 0 instead copy the
 * parts of the slots it writes back into their blocks. Returns the bytes the area needs. */
static size_t walk_gathered(void *buffers[], const struct zt_task_hdr *h, unsigned char *area,
                            void *vb[], struct starpu_vector_interface *vi, int back,
                            cudaStream_t st) {
    size_t at = 0;
    int k = 0;
    for (int s = 0; s < h->nslot; s++) {
        if (!gathered(h, s)) continue;
        size_t es = area_elemsize(buffers, h, s);
        for (int i = 0; i < h->count[s]; i++, k++) {
            struct starpu_vector_interface *b = buffers[h->first[s] + i];
            if (area && (back ? h->wr[s] : h->rd[s])) move_block(h, s, b, area + at, back, st);
            if (area && !back) {
                vi[k] = *b;
                vi[k].ptr = vi[k].dev_handle = (uintptr_t)(area + at);
                vi[k].offset = 0;
                vi[k].elemsize = es;
                vb[h->first[s] + i] = &vi[k];
            }
            at += b->nx * es; /* a slot's blocks meet: the body sees one array */
        }
        at = (at + 255) / 256 * 256; /* each slot's part 256-byte aligned */
    }
    return at;
}

static void run_gathered(void *buffers[], const struct zt_task_hdr *h, void *cl_arg,
                         zt_body_fn body) {
    /* StarPU's event polling can leave cudaErrorNotReady as the thread's last error: clear it,
     * so the body's launch checks see only their own */
    (void)cudaGetLastError();
    int nbuf = 0, ngather = 0;
    for (int s = 0; s < h->nslot; s++) {
        if (h->first[s] + h->count[s] > nbuf) nbuf = h->first[s] + h->count[s];
        if (gathered(h, s)) ngather += h->count[s];
    }
    if (ngather == 0 || h->cuda_blocks) {
        body(buffers, cl_arg);
        return;
    }
    cudaStream_t st = starpu_cuda_get_local_stream();
    size_t bytes = walk_gathered(buffers, h, NULL, NULL, NULL, 0, st);
    unsigned char *area = zt_cuda_scratch(ZT_CUDA_GATHER, bytes);
    void **vb = malloc((size_t)nbuf * sizeof *vb);
    struct starpu_vector_interface *vi = malloc((size_t)ngather * sizeof *vi);
    ZT_ASSERT_MSG(vb && vi, "out of memory gathering a %s task", zt_task_kind_name(h->kind));
    memcpy(vb, buffers, (size_t)nbuf * sizeof *vb);
    walk_gathered(buffers, h, area, vb, vi, 0, st);
    body(vb, cl_arg);
    walk_gathered(buffers, h, area, vb, vi, 1, st);
    free(vi);
    free(vb);
}

/* ZT_CUDA_SYNC, read once (the runtime checked every knob when it started) */
static int sync_each_task(void) {
    static atomic_int value = -1;
    int v = atomic_load_explicit(&value, memory_order_relaxed);
    if (v < 0) {
        int64_t knob = 0;
        (void)zt_knob_int("ZT_CUDA_SYNC", &knob);
        v = knob != 0;
        atomic_store_explicit(&value, v, memory_order_relaxed);
    }
    return v;
}

/* the body, and with ZT_CUDA_SYNC its wait for the stream: the traced end is then the GPU's */
static void run_cuda(void *buffers[], const struct zt_task_hdr *h, void *cl_arg,
                     zt_body_fn body) {
    run_gathered(buffers, h, cl_arg, body);
    if (sync_each_task())
        ZT_ASSERT_MSG(cudaStreamSynchronize(starpu_cuda_get_local_stream()) == cudaSuccess,
                      "CUDA task %s failed on the device (ZT_CUDA_SYNC)",
                      zt_task_kind_name(h->kind));
}

/* asynchronous (STARPU_CUDA_ASYNC): a traced CUDA task's times are those of its launches */
void zt_dispatch_cuda(void *buffers[], void *cl_arg, zt_body_fn body) {
    zt_dispatch_run(buffers, cl_arg, body, run_cuda);
}

// ----------------------------------------------------------------------------
// where a task runs

/* Decided by the task alone, never by the scheduler: with CUDA workers, a task of a kind with
 * a CUDA body runs only on them (zerotask's placement rule: the GPU computes what it can),
 * unless it is a variant without a device kernel or asked to stay on the host (cpu_only); any
 * other only on CPU workers. cuBLAS and OpenBLAS sum in different orders, so a scheduler free
 * to choose would make the losses depend on its choices; this way they depend only on the
 * model, the options and the machine. */
int zt_dispatch_cuda_can_run(unsigned workerid, struct starpu_task *task, unsigned nimpl) {
    (void)nimpl;
    const struct zt_task_hdr *h = task->cl_arg;
    int on_gpu = h && !h->cpu_only && task->cl->cuda_funcs[0] &&
                 starpu_cuda_worker_get_count() > 0;
    return on_gpu == (starpu_worker_get_type((int)workerid) == STARPU_CUDA_WORKER);
}

#ifdef ZT_USE_NCCL
/* a collective runs on the CUDA worker (NCCL) on every rank, or on CPU workers (MPI) on every
 * rank: zt_nccl_init agreed on one with the others, so no rank waits for a message the other
 * transport carries */
int zt_dispatch_nccl_can_run(unsigned workerid, struct starpu_task *task, unsigned nimpl) {
    (void)task, (void)nimpl;
    return zt_nccl_active() == (starpu_worker_get_type((int)workerid) == STARPU_CUDA_WORKER);
}
#endif
