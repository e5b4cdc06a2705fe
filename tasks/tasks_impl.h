/*
 * tasks/tasks_impl.h: private helpers shared by the files of tasks/ (never installed).
 *
 * The files of tasks/ depend one way, each on those below it:
 *
 *   op files (matmul.c, attention.c, collective.c, ...)  args, <kind>_cpu bodies, inserts
 *     -> task_builder.c   zt_builder_*: slots, access modes, submission on the kind's codelet
 *     -> registry.c       codelets and perf models; zt_tasks_init / zt_tasks_free
 *     -> dispatch.c       running a body: slots, 16-bit widening, tracing, placement
 *     -> task_kinds.c     kind names, classes and phases (the X-macro's tables)
 *   tensor.c (zt_tensor_t) sits beside them and is used by all; sched/ and kernels/ are below.
 *
 * The registry names each kind's body (<kind>_cpu, <kind>_cuda) from the kind list to put it in
 * the kind's codelet; that registration is the only reference from a lower file to the op files.
 *
 * Every codelet takes a variable number of StarPU buffers: a task argument ("slot") is a whole
 * tensor (all its blocks) or one block. The args struct of every kind starts with struct
 * zt_task_hdr, which records which buffers form each slot, so a codelet asks for slot s and gets
 * the host pointer of its first block. Blocks of one tensor are consecutive ranges of one host
 * buffer, so on CPU workers a whole tensor is one contiguous array (checked by zt_slot_ptr).
 */
#ifndef ZT_TASKS_IMPL_H
#define ZT_TASKS_IMPL_H

#include <stdint.h>        /* int64_t, uintptr_t */
#include <starpu.h>        /* starpu_data_descr, STARPU_VECTOR_GET_PTR */
#include "zt_tasks.h"      /* public task API */

#define ZT_MAX_SLOTS 10

/* The head of every kind's args struct: what the task is (trace fields) and its slots. */
struct zt_task_hdr {
    int kind;                /* enum zt_task_kind */
    int layer, mb, blk;      /* layer, micro-batch, row block (-1: none), from the opts */
    int recompute;           /* 1: it recomputes a checkpointed block's activations (opts) */
    int64_t step;
    int64_t trace_id;        /* zt_trace_submit's id (0: not traced) */
    int nslot;
    int first[ZT_MAX_SLOTS]; /* index of the slot's first buffer */
    int count[ZT_MAX_SLOTS]; /* number of buffers (0: slot absent, pointer NULL) */
    unsigned char dtype[ZT_MAX_SLOTS]; /* enum zt_dtype of the slot's blocks */
    unsigned char wr[ZT_MAX_SLOTS];    /* the task writes the slot (W, RW, SCRATCH) */
    unsigned char rd[ZT_MAX_SLOTS];    /* the task reads the slot (R, RW) */
    unsigned char native16;  /* the body handles 16-bit slots itself (no widening; it may use
                              * the widening scratch area, which the dispatcher leaves free) */
    unsigned char elementwise; /* element i of each slot depends only on element i of the
                                * others: the dispatcher may widen and run it in chunks (the
                                * body reads its slots through zt_slot_ptr / zt_slot_nx only,
                                * and is not called for an empty task) */
    unsigned char cpu_only;    /* GPU build: a variant of a kind with a CUDA body that has no
                                * device kernel (CPU workers take it) */
    unsigned char cuda_blocks; /* GPU build: the CUDA body takes its blocks as stored, one by
                                * one (dispatch_cuda.c neither gathers nor widens them) */
};

/* bf16 or fp16: a slot of that type is widened to fp32 for the body (dispatch.c) */
static inline int zt_dtype_is16(int dtype) {
    return dtype == ZT_DTYPE_BF16 || dtype == ZT_DTYPE_F16;
}

// ----------------------------------------------------------------------------
// dispatch.c: what a body sees, and how it is run

/* A task kind's body: unpacks its slots from buffers and calls the kernel. */
typedef void (*zt_body_fn)(void *buffers[], void *cl_arg);
/* How a worker type runs a body (the CPU's widening, the GPU's gathering), and the one entry
 * of both that also records the task when tracing is on. */
typedef void (*zt_run_fn)(void *buffers[], const struct zt_task_hdr *h, void *cl_arg,
                          zt_body_fn body);
void zt_dispatch_run(void *buffers[], void *cl_arg, zt_body_fn body, zt_run_fn run);

/* Host pointer of slot s (NULL if absent); asserts that its blocks are contiguous. */
void *zt_slot_ptr(void *buffers[], const struct zt_task_hdr *h, int s);
/* Total elements of slot s. */
int64_t zt_slot_nx(void *buffers[], const struct zt_task_hdr *h, int s);
/* Pointer/elements of the i-th buffer of slot s. */
void *zt_slot_buf_ptr(void *buffers[], const struct zt_task_hdr *h, int s, int i);
int64_t zt_slot_buf_nx(void *buffers[], const struct zt_task_hdr *h, int s, int i);

/* For bodies that handle their 16-bit slots themselves (hdr.native16), a few values at a time:
 * count values of slot s from element at as fp32 (the slot's own memory when it is fp32, else
 * widened into buf), and the store of count fp32 values there (rounded to nearest even when
 * 16-bit): the bits the dispatcher's whole-slot widening and narrowing give. */
const float *zt_slot_f32(void *buffers[], const struct zt_task_hdr *h, int s, size_t at,
                         size_t count, float *buf);
void zt_slot_store_f32(void *buffers[], const struct zt_task_hdr *h, int s, size_t at,
                       size_t count, const float *x);

/* Run body on a CPU worker: widened 16-bit slots, a trace record when tracing is on. */
void zt_dispatch_cpu(void *buffers[], void *cl_arg, zt_body_fn body);

/* Per-worker scratch areas, owned by the worker thread (kept for its next task, freed when it
 * exits): the dispatcher's widening uses one, a body may use the other while it runs. */
enum zt_scratch_area { ZT_SCRATCH_WIDENING, ZT_SCRATCH_BODY, ZT_SCRATCH_COUNT };
/* At least n floats, 64-byte aligned, contents undefined; valid until the worker's next call
 * for the same area. */
float *zt_worker_scratch(enum zt_scratch_area area, size_t n);

// ----------------------------------------------------------------------------
// matmul_bf16.c: matmul bodies on bf16 slots with the CPU's bf16 engine

/* the shape of a matmul task: weight [C,OC] (tied: [OC,C]), += or =, weight-gradient rows */
struct zt_mm16 {
    int C, OC, accumulate;
    int64_t r0, r1;
};
/* 1 when a task's products on these three tensors run on the CPU's bf16 engine as stored (all
 * bf16, and the CPU has an engine): the matmul and attention kinds */
int zt_bf16_native(zt_tensor_t x, zt_tensor_t y, zt_tensor_t z);
/* 1 when a product of fp32 rows and the weight w takes the bf16 model's products
 * (zt_kern_matmul_forward_bf16): w is bf16 and the CPU has a bf16 engine */
int zt_bf16_products(zt_tensor_t w);
/* that product in a task body: out[N, oc] (rows ldo apart) (= or, add, +=) bf16(inp[N, C]) @
 * columns [o0, o0 + oc) of w [C, OC], packed (tiles) or as stored; the rounded rows in the
 * worker's widening scratch */
void zt_bf16_products_run(float *out, int ldo, const float *inp, const uint16_t *w, int tiles,
                          int OC, int64_t o0, int add, int N, int C, int oc);
/* the body of a native matmul task of kind h->kind (slots as matmul.c builds them) */
void zt_matmul_bf16_body(void *buffers[], const struct zt_task_hdr *h, const struct zt_mm16 *m);
/* matmul.c: out (N rows, ldo floats apart) = inp [N, C] @ the weight part w ([C, cols] stored as
 * dt, rows ldw elements apart), onto what out holds when beta is 1: fp32 as stored, 16-bit
 * through the few-rows path as stored, else widened into scratch (the fp32 product's bits) */
void zt_part_product(float *out, int ldo, const float *inp, int N, int C, const void *w,
                     enum zt_dtype dt, int ldw, int cols, float beta);

// ----------------------------------------------------------------------------
// registry.c

/* The codelet of a kind. */
struct starpu_codelet *zt_codelet(enum zt_task_kind kind);

// ----------------------------------------------------------------------------
// task_builder.c: used by every insert function

/* A task being built: its header's slots and its buffers' handles and modes, in slot order. */
struct zt_builder {
    struct zt_task_hdr *h;
    struct starpu_data_descr *d;       /* n buffers of cap: inl, or on the heap past it */
    int n, cap;
    int bad; /* a slot was invalid; submit returns ZT_ERR_INVALID */
    struct starpu_data_descr inl[24];  /* room for most tasks without an allocation */
};
void zt_builder_init(struct zt_builder *tb, struct zt_task_hdr *h, enum zt_task_kind kind,
                     const struct zt_task_opts *o, int blk);
/* Append slot: blk < 0 = every block of t; t == NULL = absent slot. */
void zt_builder_add(struct zt_builder *tb, zt_tensor_t t, int blk,
                    enum starpu_data_access_mode mode);
/* Append one slot made of a list of blocks (of possibly different tensors), in list order. */
void zt_builder_add_list(struct zt_builder *tb, const struct zt_block_ref *refs, int n,
                         enum starpu_data_access_mode mode);
/* Submit with args (malloc'd, handed to StarPU which frees it); frees tb's storage. */
enum zt_status zt_builder_submit(struct zt_builder *tb, void *args, size_t argsz, int priority);

/* Allocate a zeroed args struct of the given type size or return ZT_ERR_NOMEM from the caller. */
#define ZT_ARGS_NEW(type, var)                                                                   \
    type *var = calloc(1, sizeof(type));                                                         \
    if (!var) return zt_error_set(ZT_ERR_NOMEM, "out of memory for task arguments")

// ----------------------------------------------------------------------------
// tensor.c: validation helpers (tier 2: API misuse by a user's model is reported, not asserted)

enum zt_status zt_check_blk(const char *fn, zt_tensor_t t, int blk);
enum zt_status zt_check_same_blocks(const char *fn, zt_tensor_t a, zt_tensor_t b);

// ----------------------------------------------------------------------------
// io_service.c and p2p.c: the tasks served by zerotask's own threads

/* The I/O service's thread count (0 when it is not running): the communication thread of the
 * point-to-point tasks records its tasks on the trace lane after them. */
/* zt_tasks_free (the last one): wait for every send and recv, stop the communication thread and
 * forget the streams (a later run numbers them from 0 again, as every rank does). */
void zt_p2p_free(void);

// ----------------------------------------------------------------------------
// op files: the bodies, one per kind

#define ZT_KIND_DECL_(k, cls, phase) void k##_cpu(void *buffers[], void *cl_arg);
ZT_TASK_KINDS(ZT_KIND_DECL_)
#undef ZT_KIND_DECL_

#ifdef ZT_USE_CUDA
// ----------------------------------------------------------------------------
// GPU build

/* Kinds with a CUDA body (<kind>_cuda, next to <kind>_cpu): it launches kernels/cuda on the
 * worker's stream (STARPU_CUDA_ASYNC) and returns. With CUDA workers such a task runs only on
 * them (zt_dispatch_cuda_can_run), so the placement never depends on the scheduler. The body
 * sees every slot as one contiguous fp32 device array: StarPU places each block of a tensor in
 * device memory on its own, so dispatch_cuda.c gathers a slot of several blocks into a device
 * scratch area (widening 16-bit blocks) and scatters what the body wrote back into them. */
#define ZT_CUDA_KINDS(X)                                                                         \
    X(layernorm_forward)                                                                         \
    X(layernorm_backward)                                                                        \
    X(matmul_forward)                                                                            \
    X(matmul_backward_inp)                                                                       \
    X(matmul_backward_weight)                                                                    \
    X(matmul_backward_bias)                                                                      \
    X(matmul_t_forward)                                                                          \
    X(matmul_t_backward_inp)                                                                     \
    X(matmul_t_backward_weight)                                                                  \
    X(gelu_forward)                                                                              \
    X(gelu_backward)                                                                             \
    X(residual_forward)                                                                          \
    X(residual_backward)                                                                         \
    X(crossentropy)                                                                              \
    X(attention_forward)                                                                         \
    X(attention_backward)                                                                        \
    X(encoder_forward)                                                                           \
    X(encoder_backward)                                                                          \
    X(fill_zero)                                                                                 \
    X(grad_sumsq)                                                                                \
    X(layernorm_param_reduce)                                                                    \
    X(adamw)
#define ZT_KIND_DECL_CUDA_(k) void k##_cuda(void *buffers[], void *cl_arg);
ZT_CUDA_KINDS(ZT_KIND_DECL_CUDA_)
#ifdef ZT_USE_NCCL
/* The collectives with an NCCL body on their CUDA worker (collective_nccl.c), taken there only
 * while zt_nccl_active() (sched/zt_nccl.h: one CUDA worker per rank on every rank, ZT_NCCL=1). */
#define ZT_NCCL_KINDS(X) X(comm_allreduce) X(comm_reduce_scatter) X(comm_allgather)
ZT_NCCL_KINDS(ZT_KIND_DECL_CUDA_)
#endif
#undef ZT_KIND_DECL_CUDA_

/* dispatch_cuda.c: run body on a CUDA worker (a trace record when tracing is on) */
void zt_dispatch_cuda(void *buffers[], void *cl_arg, zt_body_fn body);
/* dispatch_cuda.c: a device scratch area of the running CUDA worker, at least bytes, valid for
 * work on its stream until the worker's next call for the same area (stream-ordered: growing
 * it frees the old one after the work queued before) */
enum zt_cuda_area { ZT_CUDA_GATHER, ZT_CUDA_BODY, ZT_CUDA_AREA_COUNT };
void *zt_cuda_scratch(enum zt_cuda_area area, size_t bytes);
/* dispatch_cuda.c: the codelets' can_execute, StarPU's signature: may this worker run the task?
 * cuda_can_run: the placement rule above; nccl_can_run: the collectives on the transport that
 * every rank chose. */
struct starpu_task;
int zt_dispatch_cuda_can_run(unsigned workerid, struct starpu_task *task, unsigned nimpl);
int zt_dispatch_nccl_can_run(unsigned workerid, struct starpu_task *task, unsigned nimpl);
/* the running CUDA worker's stream (cudaStream_t) and cuBLAS handle (cublasHandle_t) */
void *zt_cuda_stream(void);
void *zt_cuda_blas(void);
/* a CUDA body's kernel launch returned rc (cudaError_t or cublasStatus_t): abort naming the
 * kind, as a CPU body cannot fail either */
#define ZT_CUDA_OK(kind, call)                                                                   \
    do {                                                                                         \
        int zt_rc_ = (int)(call);                                                                \
        ZT_ASSERT_MSG(zt_rc_ == 0, "CUDA task %s: launch failed (%d)", kind, zt_rc_);            \
    } while (0)
#endif

#endif /* ZT_TASKS_IMPL_H */
