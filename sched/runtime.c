/*
 * sched/runtime.c: start and stop MPI, StarPU and (GPU build) the NCCL communicator for
 * zerotask, in that order, and stop them in the reverse one.
 *
 * Layer: sched/. Fills a starpu_conf with zerotask's defaults. StarPU's own environment
 * variables (STARPU_SCHED, STARPU_NCPU, ...) take precedence over the conf, as StarPU documents,
 * so the user's settings always win; we only pick a scheduler when STARPU_SCHED is unset. Those
 * variables are checked first (sched/starpu_env.c): a STARPU_SCHED that names no policy, or a
 * value StarPU would assert on, is a configuration error instead of a fallback or an abort.
 */
#include <errno.h>     /* errno */
#include <stdlib.h>    /* getenv, setenv */
#include <string.h>    /* strerror */
#include <sys/resource.h> /* setpriority */
#include <sys/syscall.h> /* SYS_gettid */
#include <starpu.h>    /* starpu_init, starpu_conf */
#include <unistd.h>    /* sysconf */
#include <stdint.h>    /* uint32_t */
#include <sched.h>     /* SCHED_OTHER */
#include "zt_comm.h"   /* zt_comm_init, local rank */
#include "zt_log.h"    /* ZT_LOG_I */
#include "zt_sched.h"  /* our prototypes */
#include "zt_starpu_env.h" /* zt_starpu_env_check */
#ifdef ZT_USE_NCCL
#include "zt_nccl.h"   /* zt_nccl_init, zt_nccl_free */
#endif
#ifdef ZT_USE_CUDA
#include <cuda_runtime_api.h> /* cudaGetDeviceCount */
#endif

static int g_refs = 0;
static int g_io_nice = 0; /* ZT_IO_NICE, once the runtime has read it */
/* Default StarPU policy: lws honours priorities (PLATFORM.md item 10) and needs no calibration.
 * With CUDA workers dmdas instead: zerotask puts each task on one kind of worker (the GPU takes
 * every kind it has a kernel for), and in lws/ws every idle CPU worker then scans the CUDA
 * worker's queue for a task it may steal, under that worker's lock, for every pop: thousands
 * of tasks only the GPU may run starve the GPU (bench/sched_one_worker.c measures it). dmdas
 * queues each task at a worker that may run it, never steals, and honours priorities too. */
#define ZT_DEFAULT_SCHED "lws"
#define ZT_DEFAULT_SCHED_CUDA "dmdas"

static const char *g_sched_name = ZT_DEFAULT_SCHED;
static const char *g_preferred_sched = NULL; /* zt_runtime_prefer_sched, for the next start */

const char *zt_runtime_default_sched(void) { return ZT_DEFAULT_SCHED; }

void zt_runtime_prefer_sched(const char *name) {
    if (g_refs == 0) g_preferred_sched = name;
}

/* will StarPU start CUDA workers? (GPU build: a device, and STARPU_NCUDA not 0; asked before
 * starpu_init, since the policy is chosen there) */
static int cuda_workers_expected(void) {
#ifdef ZT_USE_CUDA
    const char *n = getenv("STARPU_NCUDA");
    if (n && *n && atoi(n) == 0) return 0; /* starpu_env.c checked it is a decimal integer */
    int count = 0;
    return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
#else
    return 0;
#endif
}

int zt_runtime_uses_cuda(void) {
    return g_refs > 0 ? starpu_cuda_worker_get_count() > 0 : cuda_workers_expected();
}

/* Keep calibration files out of the current directory and the user's other StarPU runs unless
 * the user chose a place: a per-user zerotask directory. */
static void default_starpu_home(void) {
    /* StarPU takes its home from XDG_CACHE_HOME before STARPU_HOME: with it set, calibration
     * already goes to a cache directory ($XDG_CACHE_HOME/.starpu) */
    if (getenv("STARPU_HOME") || getenv("STARPU_PERF_MODEL_DIR") || getenv("XDG_CACHE_HOME"))
        return;
    const char *home = getenv("HOME");
    if (!home || !*home) return;
    char path[1024];
    snprintf(path, sizeof path, "%s/.cache/zerotask", home);
    setenv("STARPU_HOME", path, 0);
}

/* Several ranks on one machine: unless the user chose (STARPU_NCPU, STARPU_WORKERS_CPUID,
 * STARPU_WORKERS_NOBIND), give each rank its share of the cores and bind its workers to that
 * share; otherwise every rank would start a worker per core and bind them all from core 0. */
static void share_cores(struct starpu_conf *conf) {
    int lsize = zt_comm_local_size(), lrank = zt_comm_local_rank();
    if (lsize <= 1) return;
    long ncores = sysconf(_SC_NPROCESSORS_ONLN);
    if (ncores < 1) ncores = 1;
    int per = (int)(ncores / lsize) > 0 ? (int)(ncores / lsize) : 1;
    if (!getenv("STARPU_NCPU")) conf->ncpus = per;
    int n = getenv("STARPU_NCPU") ? atoi(getenv("STARPU_NCPU")) : per;
    if (getenv("STARPU_WORKERS_CPUID") || getenv("STARPU_WORKERS_NOBIND") || n < 1 ||
        n > STARPU_NMAXWORKERS)
        return;
    conf->use_explicit_workers_bindid = 1;
    for (int i = 0; i < n; i++)
        conf->workers_bindid[i] = (unsigned)(((long)lrank * n + i) % ncores);
}

enum zt_status zt_runtime_init(void) {
    if (g_refs++ > 0) return ZT_OK;
    const char *preferred = g_preferred_sched; /* one start's, whether it succeeds or not */
    g_preferred_sched = NULL;
    enum zt_status rc = zt_comm_init();
    int64_t nice = 0;
    if (rc == ZT_OK) {
        const char *policy = NULL;
        rc = zt_starpu_env_check(&policy); /* StarPU would assert on a bad one */
        if (policy) g_sched_name = policy;
        if (rc == ZT_OK) rc = zt_knob_int("ZT_IO_NICE", &nice);
    }
    if (rc != ZT_OK) zt_comm_free(); /* a no-op when MPI did not start */
    g_io_nice = (int)nice;
    if (rc != ZT_OK) {
        g_refs = 0;
        return rc;
    }
    default_starpu_home();
    struct starpu_conf conf;
    starpu_conf_init(&conf);
    if (!getenv("STARPU_SCHED")) {
        const char *cpu = preferred ? preferred : ZT_DEFAULT_SCHED;
        g_sched_name = cuda_workers_expected() ? ZT_DEFAULT_SCHED_CUDA : cpu;
        conf.sched_policy_name = g_sched_name;
    }
    /* our codelets are CPU (and CUDA when built); OpenCL workers would only idle */
    conf.nopencl = 0;
    share_cores(&conf);
    int ret = starpu_init(&conf);
    if (ret != 0) zt_comm_free();
    if (ret == -ENODEV) {
        g_refs = 0;
        return zt_error_set(ZT_ERR_NO_DEVICE, "StarPU: no worker could be started (check "
                                              "STARPU_NCPU)");
    }
    if (ret != 0) {
        g_refs = 0;
        return zt_error_set(ZT_ERR_RUNTIME, "StarPU: starpu_init failed (%d)", ret);
    }
    if (starpu_cpu_worker_get_count() == 0) {
        starpu_shutdown();
        zt_comm_free();
        g_refs = 0;
        return zt_error_set(ZT_ERR_NO_DEVICE, "StarPU: no CPU worker (STARPU_NCPU=0?); zerotask "
                                              "needs at least one");
    }
#ifdef ZT_USE_NCCL
    /* the collectives' transport, once StarPU's CUDA workers exist */
    rc = zt_nccl_init();
    if (rc != ZT_OK) {
        starpu_shutdown();
        zt_comm_free();
        g_refs = 0;
        return rc;
    }
#endif
    return ZT_OK;
}

void zt_runtime_free(void) {
    if (g_refs == 0) return;
    if (--g_refs > 0) return;
    starpu_task_wait_for_all();
#ifdef ZT_USE_NCCL
    zt_nccl_free();
#endif
    starpu_shutdown();
    zt_comm_free();
}

enum zt_status zt_runtime_wait_all(void) {
    int ret = starpu_task_wait_for_all();
    if (ret != 0) return zt_error_set(ZT_ERR_RUNTIME, "StarPU: task_wait_for_all failed (%d)", ret);
    return ZT_OK;
}

int zt_runtime_pause_if_idle(void) {
    if (starpu_task_nsubmitted() != 0) return 0;
    starpu_pause();
    return 1;
}

void zt_runtime_resume(void) { starpu_resume(); }

void zt_runtime_io_thread(void) {
    if (g_io_nice != 0 && setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), g_io_nice) != 0)
        ZT_LOG_D("ZT_IO_NICE=%d: not allowed here (%s); the I/O thread keeps its priority",
                 g_io_nice, strerror(errno));
}

void zt_runtime_host_thread(void) {
#if defined(__linux__) && defined(SYS_sched_setattr) && defined(SYS_sched_getattr)
    struct { /* the kernel's struct sched_attr (glibc 2.36 has no wrapper nor type) */
        uint32_t size, sched_policy;
        uint64_t sched_flags;
        int32_t sched_nice;
        uint32_t sched_priority;
        uint64_t sched_runtime, sched_deadline, sched_period;
        uint32_t util_min, util_max;
    } a = {0};
    static _Thread_local int done;
    if (done) return;
    done = 1;
    /* only a normal thread's slice changes: a caller's real-time or batch policy, its nice
     * value and flags stay as they are */
    if (syscall(SYS_sched_getattr, 0, &a, sizeof a, 0) != 0 || a.sched_policy != SCHED_OTHER)
        return;
    a.size = sizeof a;
    a.sched_flags &= 1; /* SCHED_FLAG_RESET_ON_FORK kept; clamps left alone (not asked) */
    a.sched_runtime = 100 * 1000; /* ns: the shortest slice the kernel allows */
    if (syscall(SYS_sched_setattr, 0, &a, 0) != 0)
        ZT_LOG_D("host thread: short slice refused (%s)", strerror(errno));
#endif
}

int zt_runtime_nworkers(void) { return (int)starpu_worker_get_count(); }

const char *zt_runtime_sched_name(void) { return g_sched_name; }
