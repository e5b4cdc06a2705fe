/*
 * sched/zt_starpu_env.h: StarPU's environment variables checked before starpu_init.
 *
 * Layer: sched/ (private to it: zt_runtime_init calls it before starpu_init).
 */
#ifndef ZT_STARPU_ENV_H
#define ZT_STARPU_ENV_H

#include "zt_status.h" /* enum zt_status */

/* Check every StarPU variable zerotask relies on that is set: STARPU_SCHED names a policy of
 * this StarPU (*policy gets its name; NULL when STARPU_SCHED is unset or empty); the integer
 * ones (STARPU_NCPU, STARPU_NCUDA, STARPU_NOPENCL, STARPU_LIMIT_CPU_MEM, ...) are non-negative
 * decimal integers; the calibration directory StarPU will use (STARPU_PERF_MODEL_DIR, else
 * .starpu/sampling under the first set of XDG_CACHE_HOME, STARPU_HOME, HOME, ...) is created now,
 * and a failure names the variable that chose it (the others are not StarPU's concern);
 * STARPU_WORKERS_CPUID / _COREID are lists of existing CPU numbers and ranges. A bad one is
 * ZT_ERR_CONFIG with one line "NAME=value: ...". */
enum zt_status zt_starpu_env_check(const char **policy);

#endif /* ZT_STARPU_ENV_H */
