/*
 * tasks/dispatch.c: how a task's body runs on a worker: the slots it reads, the widening of its
 * 16-bit slots and its trace record (a CUDA worker's side: dispatch_cuda.c).
 *
 * Layer: tasks/, below the registry: the registry's codelets enter here with the kind's body
 * (zt_dispatch_cpu, zt_dispatch_cuda), and the bodies in the op files read their slots through
 * zt_slot_*. This file knows no kind, codelet or op file; it reads only kind names (messages)
 * and sched/'s trace recorder.
 *
 * Mixed precision: the bodies compute in fp32. When a task has bf16/fp16 slots (and its kind
 * does not handle them itself, as the collectives do), the dispatcher widens each of their blocks
 * into a per-worker fp32 scratch area (the slots it reads: a write-only (W) slot is, as StarPU
 * defines W, wholly written by the body), hands the body vector interfaces that point there, and
 * afterwards rounds the slots the task writes back into the 16-bit blocks (nearest even). So a
 * 16-bit result is exactly round(fp32 computation on the widened inputs), and an accumulating
 * task (+=) rounds once per task.
 *
 * Tracing: when it is on, each task records kind/layer/micro-batch/block/recompute mark/worker/
 * start/end/bytes, the worker's CPU time in the task and how long the worker waited for a core
 * before it.
 */
#include <fcntl.h>         /* open: /proc/thread-self/schedstat */
#include <pthread.h>       /* pthread_key_t: per-worker areas and their destructors */
#include <stdint.h>        /* uint16_t, intptr_t */
#include <stdio.h>         /* sscanf */
#include <stdlib.h>        /* malloc, free, posix_memalign */
#include <string.h>        /* memcpy */
#include "zt_clock.h"      /* zt_clock_thread_cpu_us: a traced task's CPU time */
#include <unistd.h>        /* pread, close */
#include <starpu.h>        /* STARPU_VECTOR_GET_*, starpu_timing_now, starpu_worker_get_id */
#include "zt_sched.h"      /* zt_trace_enabled, zt_trace_record */
#include "tasks_impl.h"    /* struct zt_task_hdr, our prototypes */

// ----------------------------------------------------------------------------
// slots: a body's view of its task's buffers

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

const float *zt_slot_f32(void *buffers[], const struct zt_task_hdr *h, int s, size_t at,
                         size_t count, float *buf) {
    const unsigned char *p = zt_slot_ptr(buffers, h, s);
    if (!zt_dtype_is16(h->dtype[s])) return (const float *)p + at;
    zt_dtype_to_f32((enum zt_dtype)h->dtype[s], buf, p + at * 2, count);
    return buf;
}

void zt_slot_store_f32(void *buffers[], const struct zt_task_hdr *h, int s, size_t at,
                       size_t count, const float *x) {
    unsigned char *p = zt_slot_ptr(buffers, h, s);
    if (zt_dtype_is16(h->dtype[s]))
        zt_dtype_from_f32((enum zt_dtype)h->dtype[s], p + at * 2, x, count);
    else
        memcpy((float *)p + at, x, count * sizeof *x);
}

// ----------------------------------------------------------------------------
// per-worker scratch areas: owned by the worker thread, freed when it exits

static pthread_key_t g_area_key;
static pthread_once_t g_area_once = PTHREAD_ONCE_INIT;
struct worker_areas {
    float *buf[ZT_SCRATCH_COUNT];
    size_t cap[ZT_SCRATCH_COUNT]; /* floats */
};

static void areas_free(void *p) {
    struct worker_areas *w = p;
    for (int i = 0; w && i < ZT_SCRATCH_COUNT; i++) free(w->buf[i]);
    free(w);
}

static void area_key_init(void) { pthread_key_create(&g_area_key, areas_free); }

float *zt_worker_scratch(enum zt_scratch_area area, size_t n) {
    pthread_once(&g_area_once, area_key_init);
    struct worker_areas *w = pthread_getspecific(g_area_key);
    if (!w) {
        w = calloc(1, sizeof *w);
        ZT_ASSERT_MSG(w != NULL, "out of memory for a worker's scratch areas");
        pthread_setspecific(g_area_key, w);
    }
    if (w->cap[area] < n) {
        free(w->buf[area]);
        w->buf[area] = NULL;
        ZT_ASSERT_MSG(posix_memalign((void **)&w->buf[area], 64, n * sizeof(float)) == 0,
                      "out of memory for %zu scratch floats", n);
        w->cap[area] = n;
    }
    return w->buf[area];
}

// ----------------------------------------------------------------------------
// widening of 16-bit slots (see the file comment)

/* point vb's buffers of the 16-bit slots at fp32 copies in scratch (vi: their interfaces),
 * widening the slots the task reads */
static void widen_slots(void *vb[], struct starpu_vector_interface *vi, float *scratch,
                        void *buffers[], const struct zt_task_hdr *h) {
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
}

/* round the fp32 results of the 16-bit slots the task writes back into their blocks */
static void narrow_slots(void *buffers[], const struct zt_task_hdr *h, const float *scratch) {
    size_t at = 0;
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
}

/* run the body on fp32 views of the task's 16-bit slots */
static void run_widened(void *buffers[], const struct zt_task_hdr *h, void *cl_arg,
                        zt_body_fn body) {
    size_t need = 0;
    int nwide = 0, nbuf = 0;
    for (int s = 0; s < h->nslot; s++) {
        if (h->first[s] + h->count[s] > nbuf) nbuf = h->first[s] + h->count[s];
        if (!zt_dtype_is16(h->dtype[s])) continue;
        for (int i = 0; i < h->count[s]; i++)
            need += STARPU_VECTOR_GET_NX(buffers[h->first[s] + i]);
        nwide += h->count[s];
    }
    float *scratch = zt_worker_scratch(ZT_SCRATCH_WIDENING, need ? need : 1);
    void **vb = malloc((size_t)(nbuf ? nbuf : 1) * sizeof *vb);
    struct starpu_vector_interface *vi = malloc((size_t)(nwide ? nwide : 1) * sizeof *vi);
    ZT_ASSERT_MSG(vb && vi, "out of memory widening a %s task", zt_task_kind_name(h->kind));
    memcpy(vb, buffers, (size_t)nbuf * sizeof *vb);
    widen_slots(vb, vi, scratch, buffers, h);
    body(vb, cl_arg);
    narrow_slots(buffers, h, scratch);
    free(vi);
    free(vb);
}

#define CHUNK_ELEMS 4096 /* an elementwise task's slots widened this many values at a time */

/* the elements of an elementwise task's slots (each one block of the same length), or -1 */
static int64_t elementwise_len(void *buffers[], const struct zt_task_hdr *h) {
    int64_t n = -1;
    for (int s = 0; s < h->nslot; s++) {
        if (h->count[s] == 0) continue;
        int64_t m = STARPU_VECTOR_GET_NX(buffers[h->first[s]]);
        if (h->count[s] != 1 || (n >= 0 && m != n)) return -1;
        n = m;
    }
    return n;
}

/* An elementwise task with 16-bit slots, CHUNK_ELEMS values at a time: each chunk's 16-bit
 * values widened into the worker's scratch (fp32 slots read in place), the body run on views of
 * the chunk, and the values it writes rounded back: the bits of widening the whole slots, with
 * the fp32 copies in L1 instead of memory. */
static void run_chunked(void *buffers[], const struct zt_task_hdr *h, void *cl_arg,
                        zt_body_fn body, int64_t n) {
    float *scratch = zt_worker_scratch(ZT_SCRATCH_WIDENING, (size_t)h->nslot * CHUNK_ELEMS);
    struct starpu_vector_interface vi[ZT_MAX_SLOTS];
    void *vb[ZT_MAX_SLOTS];
    for (int64_t i0 = 0; i0 < n; i0 += CHUNK_ELEMS) {
        size_t len = (size_t)(n - i0 < CHUNK_ELEMS ? n - i0 : CHUNK_ELEMS);
        for (int s = 0; s < h->nslot; s++) {
            if (h->count[s] == 0) continue;
            struct starpu_vector_interface *b = buffers[h->first[s]];
            vi[s] = *b;
            if (zt_dtype_is16(h->dtype[s])) {
                float *f = scratch + (size_t)s * CHUNK_ELEMS;
                if (h->rd[s])
                    zt_dtype_to_f32((enum zt_dtype)h->dtype[s], f, (uint16_t *)b->ptr + i0, len);
                vi[s].ptr = (uintptr_t)f;
                vi[s].elemsize = sizeof(float);
            } else {
                vi[s].ptr = b->ptr + (uintptr_t)i0 * b->elemsize;
            }
            vi[s].dev_handle = vi[s].ptr;
            vi[s].offset = 0;
            vi[s].nx = (uint32_t)len;
            vb[h->first[s]] = &vi[s];
        }
        body(vb, cl_arg);
        for (int s = 0; s < h->nslot; s++)
            if (h->count[s] && h->wr[s] && zt_dtype_is16(h->dtype[s]))
                zt_dtype_from_f32((enum zt_dtype)h->dtype[s],
                                  (uint16_t *)((struct starpu_vector_interface *)
                                                   buffers[h->first[s]])->ptr + i0,
                                  scratch + (size_t)s * CHUNK_ELEMS, len);
    }
}

static void run_cpu(void *buffers[], const struct zt_task_hdr *h, void *cl_arg,
                    zt_body_fn body) {
    int wide = 0;
    for (int s = 0; s < h->nslot && !h->native16; s++)
        wide |= zt_dtype_is16(h->dtype[s]) && h->count[s];
    int64_t n = wide && h->elementwise ? elementwise_len(buffers, h) : -1;
    if (n >= 0) run_chunked(buffers, h, cl_arg, body, n);
    else if (wide) run_widened(buffers, h, cl_arg, body);
    else body(buffers, cl_arg);
}

// ----------------------------------------------------------------------------
// tracing

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

/* the worker's run-queue wait at the end of its previous traced task (-1: none yet) */
static _Thread_local double g_last_wait = -1;

/* record a task that ran from t0 to t1 (us), cpu_us of it on a core, after waiting waited_us */
static void record(void *buffers[], const struct zt_task_hdr *h, double t0, double t1,
                   double cpu_us, double waited_us) {
    int w = starpu_worker_get_id();
    struct zt_trace_rec r = {.kind = h->kind, .layer = h->layer, .mb = h->mb, .blk = h->blk,
                             .recompute = h->recompute, .worker = w,
                             .node = (int)starpu_worker_get_memory_node(w), .step = h->step,
                             .id = h->trace_id, .start_us = t0, .end_us = t1, .cpu_us = cpu_us,
                             .waited_us = waited_us, .bytes = 0};
    struct starpu_task *task = starpu_task_get_current();
    unsigned nb = task ? STARPU_TASK_GET_NBUFFERS(task) : 0;
    for (unsigned i = 0; i < nb; i++)
        r.bytes += (int64_t)STARPU_VECTOR_GET_NX(buffers[i]) *
                   (int64_t)STARPU_VECTOR_GET_ELEMSIZE(buffers[i]);
    zt_trace_record(&r);
}

/* run the body through run and, when tracing is on, record it */
void zt_dispatch_run(void *buffers[], void *cl_arg, zt_body_fn body, zt_run_fn run) {
    const struct zt_task_hdr *h = cl_arg;
    if (!zt_trace_enabled()) {
        run(buffers, h, cl_arg, body);
        return;
    }
    /* how long the worker waited for a core (runnable, not running) since its previous traced
     * task ended: the part of a ready task's delay that other threads caused */
    double wait0 = run_delay_us();
    double cpu0 = zt_clock_thread_cpu_us();
    double t0 = starpu_timing_now();
    run(buffers, h, cl_arg, body);
    double t1 = starpu_timing_now();
    double cpu1 = zt_clock_thread_cpu_us();
    double waited = wait0 >= 0 && g_last_wait >= 0 ? wait0 - g_last_wait : -1;
    g_last_wait = run_delay_us();
    double cpu_us = cpu0 >= 0 && cpu1 >= 0 ? cpu1 - cpu0 : -1;
    record(buffers, h, t0, t1, cpu_us, waited);
}

void zt_dispatch_cpu(void *buffers[], void *cl_arg, zt_body_fn body) {
    zt_dispatch_run(buffers, cl_arg, body, run_cpu);
}
