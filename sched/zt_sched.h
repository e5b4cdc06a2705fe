/*
 * sched/zt_sched.h: StarPU lifetime, the ZT_* knob table, task priorities and tracing.
 *
 * Layer: sched/ (above io/, below tasks/). zt_runtime_init fills a starpu_conf and starts StarPU;
 * it never overrides a STARPU_* variable the user has set (StarPU's environment wins over the
 * conf, and we only choose a scheduler when STARPU_SCHED is unset).
 */
#ifndef ZT_SCHED_H
#define ZT_SCHED_H

#include <stdint.h>       /* int64_t */
#include <stdio.h>        /* FILE */
#include "zt_status.h"    /* enum zt_status */
#include "zt_tracefile.h" /* ZT_TRACE_IO_WORKER, the trace files' format */

#ifdef __cplusplus
extern "C" {
#endif

/* ---- runtime ---- */
/* Start MPI, StarPU and, in the GPU build, the collectives' NCCL communicator (idempotent,
 * reference counted). ZT_ERR_NO_DEVICE if no CPU worker starts; ZT_ERR_RUNTIME if StarPU or
 * NCCL fails to start. zt_runtime_free stops them in the reverse order. */
enum zt_status zt_runtime_init(void);
void zt_runtime_free(void);
/* Wait for every submitted task. */
enum zt_status zt_runtime_wait_all(void);
/* With no task submitted and unfinished, park the workers (starpu_pause: they sleep instead of
 * polling for work, leaving the cores to host threads such as a checkpoint's writers) and
 * return 1; else 0. A 1 must be followed by zt_runtime_resume before tasks are submitted. */
int zt_runtime_pause_if_idle(void);
/* Called by each of zerotask's own I/O threads (swap service, checkpoint writer) as it starts:
 * gives it the ZT_IO_NICE priority (Linux: per thread). Their short CPU bursts keep the disk
 * busy, so they go ahead of the compute workers; a negative value needs CAP_SYS_NICE, and
 * without it (or before zt_runtime_init) the thread keeps the process's priority. */
void zt_runtime_io_thread(void);
/* Called by a thread that submits tasks and waits for them step after step (the generator's):
 * asks the kernel for a short time slice (Linux sched_setattr, EEVDF: a waking task with a
 * shorter slice than the running one preempts it), so that when a step's last task ends this
 * thread gets a core at once instead of waiting out the slice of a worker polling for work.
 * Once per thread, and only for a thread under the normal policy (SCHED_OTHER; its nice value
 * kept); where the kernel refuses, the thread keeps its default slice. */
void zt_runtime_host_thread(void);
void zt_runtime_resume(void);
int zt_runtime_nworkers(void);
/* Name of the scheduling policy in use ("lws", ...). */
const char *zt_runtime_sched_name(void);
/* the policy zerotask starts StarPU with when STARPU_SCHED is unset */
const char *zt_runtime_default_sched(void);
/* a caller's own default for the next start of StarPU only (a static name, or NULL for none;
 * ignored while StarPU runs): used in place of zt_runtime_default_sched when STARPU_SCHED is
 * unset and no CUDA workers will start */
void zt_runtime_prefer_sched(const char *name);
/* 1 when StarPU runs CUDA workers (once started), or will start them (before zt_runtime_init:
 * a GPU build, a device, STARPU_NCUDA not 0); else 0 */
int zt_runtime_uses_cuda(void);

/* ---- knobs (NCCL-style single table; see knobs.c) ---- */
enum zt_knob_type { ZT_KNOB_INT, ZT_KNOB_BOOL, ZT_KNOB_STR, ZT_KNOB_SIZE };
struct zt_knob {
    const char *name;
    enum zt_knob_type type;
    const char *def;     /* default, as text */
    const char *doc;     /* one line */
    int64_t lo, hi;      /* ZT_KNOB_INT: the accepted range (ZT_KNOB_BOOL: 0 and 1) */
    const char *choices; /* ZT_KNOB_STR: the accepted values, "a|b|c" (NULL: checked where read) */
};
/* The table of every ZT_* knob, terminated by a {NULL} row. */
const struct zt_knob *zt_knobs(void);
/* Typed readers: value of the knob from the environment or its default, checked against the
 * knob's row (int/bool: its range; string: its choices, exactly). A value that does not parse
 * or is out of range is ZT_ERR_CONFIG naming the variable and what was expected. */
enum zt_status zt_knob_int(const char *name, int64_t *out);
enum zt_status zt_knob_str(const char *name, const char **out);
/* A size: bytes, or a number with K, M, G or T (powers of 1024; "MiB"/"MB" also accepted). */
enum zt_status zt_knob_size(const char *name, int64_t *out);
/* The same syntax for any text (a command-line option): 0, or -1 when v is not a size. */
int zt_size_parse(const char *v, int64_t *out);
/* Every ZT_* knob set in the environment checked against its row of the table (range, choices,
 * size syntax) before anything uses it: ZT_ERR_CONFIG naming the first bad one. zt_comm_init
 * (the start of zt_runtime_init) calls it; programs that start neither call it themselves. */
enum zt_status zt_knobs_check(void);
/* Print the knob table and the StarPU variables that matter (for --help-env / README). */
void zt_knobs_print(FILE *f, int markdown);
/* Log effective values of ours and StarPU's at info level (once, rank 0). */
void zt_knobs_log_effective(void);

/* ---- priorities ---- */
/* What a task is to the step's critical path (sched/priority.c has the order and its reasons). */
enum zt_prio_class {
    ZT_PRIO_DEFAULT = 0,
    ZT_PRIO_FORWARD,
    ZT_PRIO_BACKWARD,      /* activation gradients: the backward's chain through the layers */
    ZT_PRIO_WEIGHT_GRAD,   /* parameter-gradient products: feed the reductions, graded by layer */
    ZT_PRIO_OPTIMIZER,
    ZT_PRIO_IO,            /* the micro-batch's input */
    ZT_PRIO_PREFETCH_FWD,  /* all-gather / swap-in of a parameter the forward of `layer` reads */
    ZT_PRIO_PREFETCH_BWD,  /* the same for the backward of `layer` */
    ZT_PRIO_REDUCE,        /* gradient reduce-scatter / all-reduce of a bucket */
    ZT_PRIO_REDUCE_LAST,   /* the reductions the optimizer waits on last (and the norm) */
    ZT_PRIO_OPT_READ,      /* swap-in of optimizer state ahead of its update */
};
/* Priority for a task of class c at layer `layer` (-1: embeddings, 0..n_layer-1: blocks,
 * n_layer: final norm and head) of n_layer; 0 when ZT_SCHED_PRIORITY=0. Levels from
 * zt_prio_level, mapped onto the running policy's [min, max] priorities. */
int zt_prio(enum zt_prio_class c, int layer, int n_layer);
/* The policy-independent level (ZT_PRIO_MIN_LEVEL..ZT_PRIO_MAX_LEVEL, higher runs first) and
 * its order-preserving map onto a policy's range [lo, hi]. */
#define ZT_PRIO_MIN_LEVEL (-5)
#define ZT_PRIO_MAX_LEVEL 5
int zt_prio_level(enum zt_prio_class c, int layer, int n_layer);
int zt_prio_map(int level, int lo, int hi);

/* ---- tracing ---- */
/* What the codelet dispatcher (and the I/O threads) record of a task as it ends. */
struct zt_trace_rec {
    int kind;      /* task kind (tasks/zt_task_kinds.h) */
    int layer;     /* -1 when not per layer */
    int mb;        /* micro-batch, -1 when not */
    int blk;       /* row block, -1 when whole */
    int recompute; /* 1: it recomputes a checkpointed block's activations (zt_task_opts) */
    int worker;    /* StarPU worker, or ZT_TRACE_IO_WORKER + index of one of our I/O threads */
    int node;      /* memory node the task ran on (StarPU's numbering; 0 = host memory) */
    int64_t step;
    int64_t id;    /* from zt_trace_submit (0: submitted while tracing was off) */
    double start_us, end_us; /* starpu_timing_now() */
    double cpu_us;           /* the worker thread's CPU time in the task (CLOCK_THREAD_CPUTIME_ID):
                              * end - start less the time the thread waited for a core; < 0 when
                              * not measured (I/O threads) */
    double waited_us;        /* how long the worker thread waited for a core (runnable, not
                              * running: the kernel's schedstat run delay) between its previous
                              * task's end and this task's start; < 0 when not measured */
    int64_t bytes;           /* bytes of the task's buffers */
};
/* Turn recording on (before the tasks to record are submitted). */
void zt_trace_enable(int on);
int zt_trace_enabled(void);
/* Called for each task (and swap or host task) with its data accesses d[0..n) and StarPU
 * priority as it is submitted, in submission order: returns its id (1, 2, ... per rank; 0 when
 * tracing is off) and records its submit time, priority, bytes read and written and the tasks
 * it depends on, derived as StarPU's sequential consistency does (a read waits for the
 * handle's last writer, a write for its last writer and the readers since; scratch buffers for
 * none). */
struct starpu_data_descr;
int64_t zt_trace_submit(const struct starpu_data_descr *d, int n, int prio);
/* Describe the run for the tools that read the trace (zt-trace: world size, ZeRO stage, workers,
 * cores, parameters, memory per tier, ...): key=value on the replay file's "# meta" line and in
 * the JSON's otherData (zt_tracefile_meta_set: a key set again is replaced, blanks and quotes in
 * the value become '_', ZT_TRACEFILE_META_MAX keys at most). Rank 0's are written. */
void zt_trace_meta(const char *key, const char *value);
/* Called by the codelet dispatcher after each task when enabled (thread-safe, per worker). */
void zt_trace_record(const struct zt_trace_rec *r);
/* Sum of recorded task time by kind for the step (or all steps with step < 0). */
double zt_trace_busy_us(int64_t step);
/* Write every record of every rank as Chrome trace-event JSON to path (Perfetto opens it): one
 * process per rank, one thread per worker, a flow arrow per dependency; kind names from
 * names[kind]. Also writes the replay file beside it (zt_tracefile_replay_path: path with .json
 * replaced by, or else followed by, .ztr), a line per task. Both formats are io/zt_tracefile.h's
 * (docs/traces.md). Collective: every rank calls it; rank 0 writes both files, atomically
 * (tmp + rename). */
enum zt_status zt_trace_write(const char *path, const char *const *names, int nnames);
void zt_trace_reset(void);

#ifdef __cplusplus
}
#endif
#endif /* ZT_SCHED_H */
