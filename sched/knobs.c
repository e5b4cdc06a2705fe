/*
 * sched/knobs.c: the single table of every ZT_* environment knob (NCCL's param table).
 *
 * Layer: sched/. `zt-train --help-env` and the README table are generated from this table; add a
 * knob here and nowhere else.
 */
#include <errno.h>     /* errno */
#include <stdio.h>     /* fprintf */
#include <stdlib.h>    /* getenv, strtoll */
#include <string.h>    /* strcmp, strncmp, strcspn, strlen */
#include <strings.h>   /* strncasecmp */
#include "zt_log.h"    /* ZT_LOG_I */
#include "zt_sched.h"  /* struct zt_knob */

static const struct zt_knob g_knobs[] = {
    {"ZT_LOG_LEVEL", ZT_KNOB_STR, "info", "log verbosity: error, warn, info or debug",
     0, 0, "error|warn|info|debug"},
    {"ZT_GRAPH_CHUNKS", ZT_KNOB_INT, "4",
     "row blocks per activation and weight tensor (tasks per op); fixed independently of the "
     "worker count so results do not depend on STARPU_NCPU; unset where StarPU will start CUDA "
     "workers (a GPU build, a device, STARPU_NCUDA not 0): 1 (the GPU runs a whole tensor's op "
     "as one kernel)",
     1, 64, NULL},
    {"ZT_OPT_GROUP_ELEMS", ZT_KNOB_INT, "1048576",
     "parameters per optimizer task (AdamW and gradient-norm tasks work on groups of about this "
     "many elements of the flat buffer)",
     1024, (int64_t)1 << 31, NULL},
    {"ZT_SCHED_PRIORITY", ZT_KNOB_BOOL, "1",
     "critical-path task priorities (sched/priority.c: the last reductions, the next layer's "
     "gathers and swap-ins, the backward chain first; optimizer last), honoured by the prio, "
     "dmdas and lws policies and by the swap I/O threads; 0: every task at 0",
     0, 1, NULL},
    {"ZT_COMM_TIMEOUT", ZT_KNOB_INT, "300",
     "seconds a collective may wait for the other ranks, or a send or recv for its peer once it "
     "is due (the previous message of its peer and tag done); past it, the rank reports which "
     "ranks have not reached which collective (number and task name), or the peer and tag of "
     "the send or recv, and aborts the job",
     1, 7 * 86400, NULL},
    {"ZT_NCCL", ZT_KNOB_BOOL, "1",
     "GPU build with one CUDA worker per rank on every rank: 1 = the collectives run on that "
     "worker through NCCL on device memory, 0 = through MPI on host memory (same sums, same "
     "bits); ignored otherwise",
     0, 1, NULL},
    {"ZT_CUDA_SYNC", ZT_KNOB_BOOL, "0",
     "GPU build, profiling: 1 = each task on a CUDA worker waits for its stream before it ends, "
     "so a trace's CUDA task times are the GPU's own (a task's kernels and copies) instead of "
     "the time to queue them; slower, never for production runs",
     0, 1, NULL},
    {"ZT_GEMM", ZT_KNOB_STR, "auto",
     "CPU matrix products: avx512 (zerotask's fp32 GEMM; an error without AVX-512F; bf16 "
     "operands widened to fp32), openblas (OpenBLAS sgemm; bf16 widened), avx512bf16 (fp32 on "
     "avx512, bf16 products on VDPBF16PS) or amx (fp32 on avx512, bf16 on AMX tiles); auto: "
     "avx512 where the CPU has AVX-512F, else openblas, with the best bf16 engine it has. Ours "
     "ignores OPENBLAS_CORETYPE, which can force OpenBLAS's slower AVX2 kernels on an AVX-512 "
     "CPU; each engine gives its own (deterministic) bits. With a bf16 engine, zt-generate and "
     "zt-serve run bf16 weights as a bf16 model (product inputs rounded, a bf16 KV cache); "
     "under avx512 or openblas they widen them and compute in fp32",
     0, 0, "auto|avx512|openblas|avx512bf16|amx"},
    {"ZT_AIO_ENGINE", ZT_KNOB_STR, "auto",
     "NVMe swap engine: auto (io_uring, or pread/pwrite threads when the kernel refuses "
     "io_uring), io_uring, or threads",
     0, 0, "auto|io_uring|threads"},
    {"ZT_IO_NICE", ZT_KNOB_INT, "-10",
     "nice value (-20 to 19) of zerotask's own I/O threads (NVMe swaps, checkpoint staging "
     "and writing), per thread: their short CPU bursts keep the disk busy, so they go ahead of "
     "the compute workers (bench/README.md, ckpt_vs_fio, has the effect on a save); below 0 "
     "needs CAP_SYS_NICE (root), else they keep the process's priority; 0 leaves them alone",
     -20, 19, NULL},
    {"ZT_HOST_MEM_LIMIT", ZT_KNOB_SIZE, "0",
     "host memory budget per rank (bytes, or with K, M, G suffix; 0: none): the plan printed "
     "before step 1 must fit under it or the run stops; offload with zero_optimization."
     "offload_optimizer / offload_param nvme to fit",
     0, 0, NULL},
    {"ZT_SWAP_BUFFER_MEM", ZT_KNOB_SIZE, "512M",
     "host bytes of swap buffers that zero_optimization.offload_optimizer buffer_count \"auto\" "
     "(the default) fills, at least 4 buffers, at most one per swap unit; under "
     "ZT_HOST_MEM_LIMIT at most 1/8 of the limit. More buffers read further ahead",
     0, 0, NULL},
    {"ZT_RECOMPUTE_WINDOW", ZT_KNOB_INT, "2",
     "activation checkpointing: checkpointed layers whose recomputed activations exist at once "
     "(and, with offload nvme, kept inputs in memory); 1 keeps the least memory (each "
     "recompute waits for the backward of the layer above to finish with the buffers), 2 lets "
     "a layer's recompute run beside the layer above's backward",
     1, 8, NULL},
    {"ZT_ON_NONFINITE", ZT_KNOB_STR, "stop",
     "fp32/bf16 training step whose loss or gradient norm is NaN or Inf: stop (exit 1 naming "
     "the step; with gradient_clipping its update is skipped) or warn (one warning line, "
     "training goes on; --export then writes non-finite weights with a warning, where stop "
     "refuses them). fp16 skips such steps (loss scaling) either way",
     0, 0, "stop|warn"},
    {"ZT_DECODE_AHEAD", ZT_KNOB_BOOL, "1",
     "generation: submit each decode step before the host waits for the one it follows (its "
     "tokens read from that step's sampling task), so the host's work between steps overlaps "
     "the workers' (docs/inference.md says when a step may go ahead); 0: one step at a time. "
     "The same ids either way",
     0, 1, NULL},
    {"ZT_TEST_SKIP_COLLECTIVE", ZT_KNOB_STR, "",
     "test only: RANK:SEQ makes that rank skip its collective number SEQ, RANK:SEQ:stop makes "
     "it stop itself (SIGSTOP) inside it (both prove the ZT_COMM_TIMEOUT report)",
     0, 0, NULL},
    {NULL, 0, NULL, NULL, 0, 0, NULL},
};

/* StarPU variables users tune, documented next to ours (StarPU's meaning). */
static const struct {
    const char *name, *doc;
} g_starpu_vars[] = {
    {"STARPU_SCHED", "scheduling policy (eager, lws, ws, prio, dmda, dmdas, random, ...); "
                     "zerotask uses lws when unset, prio for the inference engine (zt-generate, "
                     "zt-serve: docs/inference.md), dmdas when StarPU will start CUDA workers "
                     "(docs/cuda.md); unknown names are rejected"},
    {"STARPU_NCPU", "number of CPU workers (Debian's StarPU allows at most 4)"},
    {"STARPU_HOME", "where StarPU keeps calibration; zerotask defaults it to "
                    "~/.cache/zerotask when neither it, STARPU_PERF_MODEL_DIR nor "
                    "XDG_CACHE_HOME (which StarPU reads first) is set"},
    {"STARPU_CALIBRATE", "1 to recalibrate performance models (dmda, dmdas)"},
    {"STARPU_SILENT", "1 to silence StarPU's own messages"},
    {NULL, NULL},
};

const struct zt_knob *zt_knobs(void) { return g_knobs; }

static const struct zt_knob *find(const char *name) {
    for (int i = 0; g_knobs[i].name; i++)
        if (strcmp(g_knobs[i].name, name) == 0) return &g_knobs[i];
    return NULL;
}

static const char *value_of(const struct zt_knob *k) {
    const char *v = getenv(k->name);
    return (v && *v) ? v : k->def;
}

static const struct zt_knob *knob(const char *name) {
    const struct zt_knob *k = find(name);
    ZT_ASSERT_MSG(k != NULL, "unknown knob %s", name);
    return k;
}

static enum zt_status read_int(const struct zt_knob *k, int64_t *out) {
    const char *v = value_of(k);
    char *end = NULL;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end != '\0' || x < k->lo || x > k->hi)
        return zt_error_set(ZT_ERR_CONFIG, "%s=%s: expected an integer in [%lld, %lld]", k->name,
                            v, (long long)k->lo, (long long)k->hi);
    *out = x;
    return ZT_OK;
}

enum zt_status zt_knob_int(const char *name, int64_t *out) { return read_int(knob(name), out); }

int zt_size_parse(const char *v, int64_t *out) {
    char *end = NULL;
    errno = 0;
    double x = strtod(v, &end);
    double mul = 1;
    if (end && *end) {
        char c = *end;
        mul = (c == 'k' || c == 'K') ? 1024.0 : (c == 'm' || c == 'M') ? 1048576.0
            : (c == 'g' || c == 'G') ? 1073741824.0 : (c == 't' || c == 'T') ? 1099511627776.0 : 0;
        if (mul > 0) end++;
        if (mul > 0 && (*end == 'i' || *end == 'I')) end++;
        if (mul > 0 && (*end == 'b' || *end == 'B')) end++;
    }
    if (errno || end == v || *end != '\0' || mul == 0 || !(x >= 0) || x * mul > 9.0e18)
        return -1;
    *out = (int64_t)(x * mul);
    return 0;
}

enum zt_status zt_knob_size(const char *name, int64_t *out) {
    const char *v = value_of(knob(name));
    if (zt_size_parse(v, out) != 0)
        return zt_error_set(ZT_ERR_CONFIG, "%s=%s: expected a size in bytes, like 512M or 2G",
                            name, v);
    return ZT_OK;
}

/* value v of knob k is one of k->choices ("a|b|c"), compared exactly or ignoring case */
static int is_choice(const struct zt_knob *k, const char *v, int ignore_case) {
    size_t n = strlen(v);
    for (const char *c = k->choices; *c;) {
        size_t len = strcspn(c, "|");
        if (len == n && (ignore_case ? strncasecmp(c, v, n) : strncmp(c, v, n)) == 0) return 1;
        c += len + (c[len] == '|');
    }
    return 0;
}

static enum zt_status not_a_choice(const struct zt_knob *k, const char *v) {
    char list[256] = "";
    for (const char *c = k->choices; *c;) {
        size_t len = strcspn(c, "|"), at = strlen(list);
        snprintf(list + at, sizeof list - at, "%s%.*s", at ? ", " : "", (int)len, c);
        c += len + (c[len] == '|');
    }
    return zt_error_set(ZT_ERR_CONFIG, "%s=%s: expected one of %s", k->name, v, list);
}

enum zt_status zt_knob_str(const char *name, const char **out) {
    const struct zt_knob *k = knob(name);
    ZT_ASSERT_MSG(k->choices != NULL, "knob %s has no choices", name);
    const char *v = value_of(k);
    if (!is_choice(k, v, 0)) return not_a_choice(k, v);
    *out = v;
    return ZT_OK;
}

/* a string knob is checked ignoring case (ZT_LOG_LEVEL takes debug or DEBUG); the reader that
 * uses a value decides on case */
static enum zt_status check_knob(const struct zt_knob *k) {
    int64_t x;
    switch (k->type) {
    case ZT_KNOB_INT:
    case ZT_KNOB_BOOL: return read_int(k, &x);
    case ZT_KNOB_SIZE: return zt_knob_size(k->name, &x);
    default: break;
    }
    const char *v = value_of(k);
    return !k->choices || is_choice(k, v, 1) ? ZT_OK : not_a_choice(k, v);
}

enum zt_status zt_knobs_check(void) {
    zt_log_env_checked(); /* a bad ZT_LOG_LEVEL is our one error line, not also a warning */
    for (int i = 0; g_knobs[i].name; i++)
        if (getenv(g_knobs[i].name)) ZT_CHECK(check_knob(&g_knobs[i]));
    return ZT_OK;
}

static const char *type_name(enum zt_knob_type t) {
    switch (t) {
    case ZT_KNOB_INT: return "int";
    case ZT_KNOB_BOOL: return "bool";
    case ZT_KNOB_SIZE: return "size";
    default: return "string";
    }
}

void zt_knobs_print(FILE *f, int markdown) {
    if (markdown) {
        fprintf(f, "| variable | type | default | meaning |\n|---|---|---|---|\n");
        for (int i = 0; g_knobs[i].name; i++)
            fprintf(f, "| `%s` | %s | `%s` | %s |\n", g_knobs[i].name, type_name(g_knobs[i].type),
                    g_knobs[i].def, g_knobs[i].doc);
        for (int i = 0; g_starpu_vars[i].name; i++)
            fprintf(f, "| `%s` | StarPU | | %s |\n", g_starpu_vars[i].name, g_starpu_vars[i].doc);
        return;
    }
    fprintf(f, "zerotask environment variables:\n");
    for (int i = 0; g_knobs[i].name; i++)
        fprintf(f, "  %-20s %-6s default %-8s %s\n", g_knobs[i].name, type_name(g_knobs[i].type),
                g_knobs[i].def, g_knobs[i].doc);
    fprintf(f, "StarPU environment variables that matter (StarPU's meaning):\n");
    for (int i = 0; g_starpu_vars[i].name; i++)
        fprintf(f, "  %-20s %s\n", g_starpu_vars[i].name, g_starpu_vars[i].doc);
}

void zt_knobs_log_effective(void) {
    for (int i = 0; g_knobs[i].name; i++)
        ZT_LOG_D("knob %s=%s%s", g_knobs[i].name, value_of(&g_knobs[i]),
                 getenv(g_knobs[i].name) ? "" : " (default)");
    const char *vars[] = {"STARPU_SCHED", "STARPU_NCPU", "STARPU_HOME", "STARPU_CALIBRATE", NULL};
    for (int i = 0; vars[i]; i++) {
        const char *v = getenv(vars[i]);
        if (v) ZT_LOG_D("env %s=%s", vars[i], v);
    }
}
