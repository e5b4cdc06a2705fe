/*
 * sched/starpu_env.c: StarPU's own environment variables, checked before starpu_init.
 *
 * Layer: sched/ (zt_runtime_init calls it; nothing above sees it). StarPU 1.3 reads its
 * variables inside starpu_init and meets a bad value with an assertion (a backtrace and SIGABRT):
 * an integer variable holding a sign or letters, a STARPU_HOME that is a file, a CPU list it
 * cannot parse. Here each variable we rely on is checked with StarPU's own rule for it, and a
 * bad value is a configuration error (ZT_ERR_CONFIG, one line "NAME=value: expected ...")
 * before StarPU starts. Values StarPU accepts keep working, except the ones that only happen to
 * parse: a sign, spaces or an empty value where a number belongs, a CPU number past the last
 * CPU (StarPU wraps it silently onto another one).
 */
#include "zt_starpu_env.h"

#include <errno.h>    /* errno */
#include <limits.h>   /* INT_MAX */
#include <stdio.h>    /* snprintf */
#include <stdlib.h>   /* getenv, strtol */
#include <string.h>   /* memcpy, strcat, strcmp, strerror, strlen, strrchr */
#include <sys/stat.h> /* stat, S_ISDIR */
#include <unistd.h>   /* sysconf */
#include <starpu.h>   /* starpu_sched_get_predefined_policies */
#include "zt_file.h"  /* zt_file_mkdirs */

/* StarPU reads these with starpu_get_env_number: a non-negative decimal integer (int range) */
static const char *const g_int_vars[] = {
    "STARPU_NCPU", "STARPU_NCPUS", "STARPU_RESERVE_NCPU", "STARPU_NCUDA",
    "STARPU_NWORKER_PER_CUDA", "STARPU_NOPENCL", "STARPU_WORKERS_NOBIND",
    "STARPU_MAIN_THREAD_CPUID", "STARPU_MAIN_THREAD_BIND", "STARPU_CALIBRATE",
    "STARPU_BUS_CALIBRATE", "STARPU_PREFETCH", "STARPU_SILENT", "STARPU_STATS",
    "STARPU_MEMORY_STATS", "STARPU_LIMIT_CPU_MEM", "STARPU_LIMIT_CPU_NUMA_MEM",
    "STARPU_LIMIT_CUDA_MEM", "STARPU_LIMIT_OPENCL_MEM", "STARPU_LIMIT_MAX_SUBMITTED_TASKS",
    "STARPU_LIMIT_MIN_SUBMITTED_TASKS", "STARPU_MINIMUM_AVAILABLE_MEM",
    "STARPU_TARGET_AVAILABLE_MEM", "STARPU_MINIMUM_CLEAN_BUFFERS", "STARPU_TARGET_CLEAN_BUFFERS",
    "STARPU_DISABLE_PINNING", "STARPU_TRACE_BUFFER_SIZE", "STARPU_CATCH_SIGNALS",
    "STARPU_DISPLAY_BINDINGS", NULL};

/* StarPU 1.3's calibration directory, which it creates (mkdir -p) or aborts: the first variable
 * set of these, and the directory under it. STARPU_PERF_MODEL_DIR names it (core/perfmodel/
 * perfmodel.c); else it is .starpu/sampling under StarPU's home, the first set of XDG_CACHE_HOME,
 * STARPU_HOME, HOME, TMPDIR, TEMP, TMP (_starpu_get_home_path, common/utils.c). With none of the
 * first three set, sched/runtime.c makes STARPU_HOME $HOME/.cache/zerotask, hence HOME's row. */
static const struct {
    const char *name, *sub;
} g_dir_vars[] = {{"STARPU_PERF_MODEL_DIR", ""},
                  {"XDG_CACHE_HOME", "/.starpu/sampling"},
                  {"STARPU_HOME", "/.starpu/sampling"},
                  {"HOME", "/.cache/zerotask/.starpu/sampling"},
                  {"TMPDIR", "/.starpu/sampling"},
                  {"TEMP", "/.starpu/sampling"},
                  {"TMP", "/.starpu/sampling"}};

/* lists of CPU (or core) numbers to bind workers to */
static const char *const g_cpu_list_vars[] = {"STARPU_WORKERS_CPUID", "STARPU_WORKERS_COREID",
                                              NULL};

static int is_digit(char c) { return c >= '0' && c <= '9'; }

/* digits at *p as a number (p advanced past them); -1 when there are none, INT_MAX + 1 past
 * the int range */
static long read_number(const char **p) {
    if (!is_digit(**p)) return -1;
    long v = 0;
    for (; is_digit(**p); (*p)++)
        if ((v = v * 10 + (**p - '0')) > INT_MAX) v = (long)INT_MAX + 1;
    return v;
}

static enum zt_status check_int(const char *name, const char *v) {
    const char *p = v;
    long n = read_number(&p);
    if (n < 0 || *p)
        return zt_error_set(ZT_ERR_CONFIG, "%s=%s: expected a non-negative integer", name, v);
    if (n > INT_MAX)
        return zt_error_set(ZT_ERR_CONFIG, "%s=%s: expected a non-negative integer up to %d",
                            name, v, INT_MAX);
    return ZT_OK;
}

/* name=v chose StarPU's calibration directory v + sub: it is created now, as StarPU would
 * create it, so that a failure is ours to report; the message names the part that is in the way */
static enum zt_status check_dir(const char *name, const char *v, const char *sub) {
    char path[4096];
    if (!*v) return zt_error_set(ZT_ERR_CONFIG, "%s=: expected a directory", name);
    if (strlen(v) + strlen(sub) >= sizeof path)
        return zt_error_set(ZT_ERR_CONFIG, "%s: expected a path shorter than %zu characters",
                            name, sizeof path - strlen(sub));
    memcpy(path, v, strlen(v));
    memcpy(path + strlen(v), sub, strlen(sub) + 1); /* fits: checked above */
    if (zt_file_mkdirs(path, 0700) == 0) return ZT_OK;
    const int err = errno;
    struct stat st; /* the nearest existing ancestor of v + sub */
    while (stat(path, &st) != 0) {
        if (errno != ENOENT && errno != ENOTDIR) /* else: look one level up */
            return zt_error_set(ZT_ERR_CONFIG, "%s=%s: cannot reach %s (%s); expected a "
                                               "directory", name, v, path, strerror(errno));
        char *slash = strrchr(path, '/');
        if (!slash) snprintf(path, sizeof path, ".");
        else if (slash == path) path[1] = '\0';
        else *slash = '\0';
    }
    if (!S_ISDIR(st.st_mode) && strcmp(path, v) == 0)
        return zt_error_set(ZT_ERR_CONFIG, "%s=%s: not a directory (expected a directory for "
                                           "StarPU's files)", name, v);
    if (!S_ISDIR(st.st_mode))
        return zt_error_set(ZT_ERR_CONFIG, "%s=%s: %s is not a directory (expected a path "
                                           "StarPU can create directories in)", name, v, path);
    return zt_error_set(ZT_ERR_CONFIG, "%s=%s: cannot create %s%s (%s); expected a directory "
                                       "StarPU can write", name, v, v, sub, strerror(err));
}

/* StarPU's syntax: numbers N, ranges N-M and N- (to the last CPU), separated by commas or
 * spaces. Each number must name a CPU that exists. */
static enum zt_status check_cpu_list(const char *name, const char *v) {
    long ncpus = sysconf(_SC_NPROCESSORS_ONLN), conf = sysconf(_SC_NPROCESSORS_CONF);
    if (conf > ncpus) ncpus = conf;
    const char *p = v;
    int items = 0;
    for (;;) {
        while (*p == ' ') p++;
        if (!*p) break;
        if (items > 0) { /* one comma between items, spaces around it */
            if (*p == ',') p++;
            while (*p == ' ') p++;
            if (!*p) break;
        }
        long lo = read_number(&p), hi = lo;
        if (lo >= 0 && *p == '-') {
            p++;
            hi = is_digit(*p) ? read_number(&p) : ncpus - 1;
        }
        if (lo < 0 || (*p && *p != ' ' && *p != ','))
            return zt_error_set(ZT_ERR_CONFIG, "%s=%s: expected CPU numbers N, ranges N-M or "
                                               "N- separated by commas or spaces", name, v);
        if (lo >= ncpus || hi >= ncpus)
            return zt_error_set(ZT_ERR_CONFIG, "%s=%s: CPU %ld does not exist (expected CPU "
                                               "numbers below %ld)", name, v,
                                lo >= ncpus ? lo : hi, ncpus);
        if (hi < lo)
            return zt_error_set(ZT_ERR_CONFIG, "%s=%s: range %ld-%ld runs backwards (expected "
                                               "N-M with N <= M)", name, v, lo, hi);
        items++;
    }
    if (items == 0)
        return zt_error_set(ZT_ERR_CONFIG, "%s=%s: expected at least one CPU number", name, v);
    return ZT_OK;
}

/* STARPU_SCHED names one of this StarPU's policies (StarPU would fall back to its default) */
static enum zt_status check_sched(const char *v, const char **policy) {
    struct starpu_sched_policy **pols = starpu_sched_get_predefined_policies();
    char known[1024] = "";
    for (int i = 0; pols[i]; i++) {
        if (strcmp(pols[i]->policy_name, v) == 0) {
            *policy = pols[i]->policy_name;
            return ZT_OK;
        }
        if (strlen(known) + strlen(pols[i]->policy_name) + 3 < sizeof known) {
            if (known[0]) strcat(known, ", ");
            strcat(known, pols[i]->policy_name);
        }
    }
    return zt_error_set(ZT_ERR_CONFIG, "STARPU_SCHED=%s: not a StarPU scheduling policy "
                                       "(expected one of: %s)", v, known);
}

/* each set variable of names with check */
static enum zt_status check_each(const char *const *names,
                                 enum zt_status (*check)(const char *, const char *)) {
    for (int i = 0; names[i]; i++) {
        const char *v = getenv(names[i]);
        if (v) ZT_CHECK(check(names[i], v));
    }
    return ZT_OK;
}

enum zt_status zt_starpu_env_check(const char **policy) {
    *policy = NULL;
    const char *s = getenv("STARPU_SCHED");
    if (s && *s) ZT_CHECK(check_sched(s, policy));
    ZT_CHECK(check_each(g_int_vars, check_int));
    /* only the directory StarPU will use: the first of g_dir_vars that is set */
    for (size_t i = 0; i < sizeof g_dir_vars / sizeof g_dir_vars[0]; i++) {
        const char *v = getenv(g_dir_vars[i].name);
        if (v) {
            ZT_CHECK(check_dir(g_dir_vars[i].name, v, g_dir_vars[i].sub));
            break;
        }
    }
    ZT_CHECK(check_each(g_cpu_list_vars, check_cpu_list));
    return ZT_OK;
}
