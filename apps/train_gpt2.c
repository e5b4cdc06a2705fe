/*
 * apps/train_gpt2.c: zt-train, the demo trainer: GPT-2 on a token file, configured by a
 * DeepSpeed-style JSON, every step a StarPU task graph.
 *
 * Layer: apps/. Includes only <zerotask.h>. Errors: exactly one line
 * "zerotask: error: <message>" on stderr; exit 2 for a bad command line or config, 1 otherwise.
 */
#include <errno.h>      /* errno */
#include <math.h>       /* isfinite */
#include <stdio.h>      /* printf, fopen */
#include <stdlib.h>     /* strtoll */
#include <string.h>     /* strcmp */
#include <time.h>       /* clock_gettime */
#include <unistd.h>     /* sysconf */
#include "zerotask.h"   /* everything public */

static const char *usage_text =
    "usage: zt-train --ds-config F --model F --data F [options]\n"
    "\n"
    "Train GPT-2 with zerotask: every step is a StarPU task graph (forward, backward, optimizer).\n"
    "\n"
    "required:\n"
    "  --ds-config F        DeepSpeed-style JSON: train_batch_size, train_micro_batch_size_per_gpu,\n"
    "                       gradient_accumulation_steps, optimizer {type Adam|AdamW, params},\n"
    "                       scheduler {WarmupLR|WarmupDecayLR|WarmupCosineLR}, gradient_clipping,\n"
    "                       steps_per_print, seed, zero_optimization {stage 0-3,\n"
    "                       reduce_bucket_size, allgather_bucket_size, overlap_comm,\n"
    "                       reduce_scatter, stage3_max_live_parameters,\n"
    "                       stage3_prefetch_bucket_size, stage3_param_persistence_threshold,\n"
    "                       offload_optimizer {device none|cpu|nvme, nvme_path, buffer_count,\n"
    "                       pipeline_read, pipeline_write, pin_memory}, offload_param {device,\n"
    "                       nvme_path, buffer_count, buffer_size, max_in_cpu, pin_memory}},\n"
    "                       aio {block_size, queue_depth, thread_count, single_submit,\n"
    "                       overlap_events} (README: Offload), bf16 {enabled}, fp16 {enabled,\n"
    "                       loss_scale, initial_scale_power, loss_scale_window, hysteresis,\n"
    "                       consecutive_hysteresis, min_loss_scale}, communication_data_type,\n"
    "                       checkpoint {dir, save_interval, keep_last}\n"
    "                       (unknown or unimplemented keys are errors)\n"
    "  --model F            model shape JSON: vocab_size, seq_len, n_embd, n_layer, n_head\n"
    "  --data F             token file in llm.c's format (zt-prepare makes one)\n"
    "options:\n"
    "  --steps N            total number of training steps (default 10); a resumed run stops at\n"
    "                       the same step as an uninterrupted one\n"
    "  --seed S             seed for the initialisation (overrides the config's \"seed\")\n"
    "  --init-from W        start from these weights (safetensors, HF GPT-2 names; F32/BF16/F16)\n"
    "  --export OUT         write the weights after the last step (safetensors, F32)\n"
    "  --save-dir D         save checkpoints in D (D/step<N>, D/latest; docs/checkpoints.md):\n"
    "                       every --save-interval steps and after the last step\n"
    "  --save-interval N    steps between checkpoints (0: only after the last step)\n"
    "                       (defaults: the config's checkpoint {dir, save_interval, keep_last})\n"
    "  --resume P           continue from checkpoint P: a directory (its latest tag) or D/<tag>;\n"
    "                       any world size and ZeRO stage may have written it\n"
    "  --log F              one JSON object per step run: step, loss, lr, ms, tokens_per_s,\n"
    "                       grad_norm, loss_scale and skipped (fp16: 1 when the step's\n"
    "                       gradients overflowed and its update was skipped)\n"
    "  --trace F            Chrome trace-event JSON of every task and its dependencies (open\n"
    "                       in ui.perfetto.dev), and the replay file F.ztr (F without .json)\n"
    "                       that zt-trace summarises, replays and plots\n"
    "  --eval-only          print the loss of step 1's batch and exit, no update\n"
    "  --dump-grads F       write step 1's parameter gradients (safetensors) for inspection\n"
    "  --quiet              no progress lines (errors only)\n"
    "  --help               this text;  --help-env  environment variables\n"
    "\n"
    "Progress: one line per step (steps_per_print sets how often): step/total, loss (mean over the\n"
    "step's batch, before the update), lr, ms/step, tokens/s, achieved GFLOP/s; with fp16 the\n"
    "loss scale and the steps skipped so far (an overflow is reported when it happens).\n"
    "Mixed precision (config \"bf16\" or \"fp16\" {\"enabled\": true}, DeepSpeed's keys): 16-bit\n"
    "parameters, activations and gradients, fp32 master weights and moments (docs/precision.md).\n"
    "A memory summary is printed before step 1, and each rank's peak resident memory (VmHWM)\n"
    "after the last step.\n"
    "At ZeRO stage >= 2 the memory lines also show the slot windows (gathered parameters at\n"
    "stage 3, micro-batch gradients waiting for their reduce-scatter); with NVMe offload they\n"
    "show the swap buffers and this rank's NVMe bytes. ZT_HOST_MEM_LIMIT caps the host bytes.\n"
    "Data: step i, row k (0..B-1) reads tokens from (i-1)*B*T + k*T, wrapping at the end.\n"
    "\n"
    "Several ranks (ZeRO data parallelism over MPI):\n"
    "  mpirun [--allow-run-as-root] [--oversubscribe] [--hostfile H] -np N -x STARPU_NCPU=1 \\\n"
    "         zt-train ...\n"
    "  train_batch_size = micro x accumulation x N; rank r, micro-batch j trains rows\n"
    "  (j*N + r)*micro .. (j*N + r + 1)*micro - 1 of the step's batch, so N ranks see one rank's\n"
    "  data. Rank 0 prints progress and writes --log, --export and --trace (one file, a process\n"
    "  lane per rank); every rank prints its memory. A collective waiting longer than\n"
    "  ZT_COMM_TIMEOUT seconds reports the ranks that have not reached it, then aborts.\n"
    "\n"
    "Environment: STARPU_SCHED (default lws), STARPU_NCPU, and ZT_* knobs: see --help-env.\n"
    "Exit status: 0 ok, 2 bad command line or config, 1 any other error.\n";

/* A bad command line or config is the same on every rank: rank 0 alone reports it. Anything
 * else may be one rank's own trouble (a file missing on its machine): that rank reports it,
 * prefixed with its rank when there are several. */
static int fail(int code) {
    int cfg = zt_error_last_code() == ZT_ERR_CONFIG || zt_error_last_code() == ZT_ERR_USAGE;
    if (zt_comm_size() == 1)
        fprintf(stderr, "zerotask: error: %s\n", zt_error_last());
    else if (!cfg)
        fprintf(stderr, "zerotask: error: rank %d: %s\n", zt_comm_rank(), zt_error_last());
    else if (zt_comm_rank() == 0)
        fprintf(stderr, "zerotask: error: %s\n", zt_error_last());
    return code;
}

static int usage_error(const char *fmt, const char *arg) {
    zt_error_set(ZT_ERR_USAGE, fmt, arg);
    if (zt_comm_rank() == 0)
        fprintf(stderr, "zerotask: error: %s (see zt-train --help)\n", zt_error_last());
    return 2;
}

/* Every rank passes its start-up outcome (0 or an exit code); all learn whether any failed, so
 * no rank goes on into a collective that the failed one will never reach. */
static int agree(int code) {
    double bad = code != 0;
    if (zt_comm_sum_double(&bad) != ZT_OK) return code ? code : 1;
    if (bad > 0 && code == 0) {
        if (zt_comm_rank() == 0)
            fprintf(stderr, "zerotask: error: stopping: %.0f rank(s) failed at start-up (see "
                            "their messages)\n", bad);
        return 1;
    }
    return code;
}

static uint64_t hash_file(uint64_t h, const char *path) {
    FILE *f = fopen(path, "rb");
    char buf[4096];
    size_t n;
    while (f && (n = fread(buf, 1, sizeof buf, f)) > 0) h = zt_hash_bytes(h, buf, n);
    if (f) fclose(f);
    return h;
}

/* ZT_HOST_MEM_LIMIT: the plan's host bytes must fit */
static enum zt_status check_budget(const struct zt_engine_mem *m, int rank) {
    int64_t limit = 0;
    ZT_CHECK(zt_knob_size("ZT_HOST_MEM_LIMIT", &limit));
    int64_t host = m->params + m->grads + m->optim + m->acts;
    if (limit <= 0 || host <= limit) return ZT_OK;
    return zt_error_set(ZT_ERR_NOMEM, "ZT_HOST_MEM_LIMIT=%.1f MiB: rank %d needs %.1f MiB of host "
                        "memory (params %.1f, grads %.1f, optimizer %.1f, activations %.1f MiB); "
                        "put state on NVMe (zero_optimization.offload_optimizer/offload_param "
                        "device nvme), use more ranks or a higher ZeRO stage, or raise the limit",
                        limit / 1048576.0, rank, host / 1048576.0, m->params / 1048576.0,
                        m->grads / 1048576.0, m->optim / 1048576.0, m->acts / 1048576.0);
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* a checkpoint being written in the background (zt_checkpoint_save_begin) */
struct pending_save {
    int64_t step;
    double begin_ms; /* how long beginning it held the loop */
    const char *dir;
};

/* publish the save begun after the step before (collective) and say what it cost: the shard's
 * bytes and write time (rank 0's) and how long the training loop was held by it */
static enum zt_status finish_save(struct zt_ckpt_save **saving, const struct pending_save *ps,
                                  int talk) {
    struct zt_save_info si = {0};
    double t = now_ms();
    enum zt_status rc = zt_checkpoint_save_end(*saving, &si);
    *saving = NULL;
    if (rc != ZT_OK || !talk) return rc;
    double held = ps->begin_ms + (now_ms() - t);
    printf("checkpoint %s/step%lld saved: %.1f MiB per rank written in %.0f ms (%.0f MB/s) "
           "alongside training, which it held %.1f ms\n", ps->dir, (long long)ps->step,
           si.bytes / 1048576.0, si.write_ms, si.write_ms > 0 ? si.bytes / (si.write_ms * 1e3) : 0.0,
           held);
    fflush(stdout);
    return ZT_OK;
}

/* peak resident set of this process in KiB (VmHWM), -1 when /proc does not say */
static long long peak_rss_kib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    long long kib = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %lld kB", &kib) == 1) break;
    fclose(f);
    return kib;
}

/* Print one line per rank, the ranks taking turns (collective: every rank calls it; mpirun may
 * still mix the order of lines from different ranks). */
static void print_in_turn(const char *line) {
    for (int r = 0; r < zt_comm_size(); r++) {
        if (r == zt_comm_rank()) {
            fputs(line, stdout);
            fflush(stdout);
        }
        zt_comm_barrier();
    }
}

static int64_t mem_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    long long kb = -1;
    char line[256];
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1) break;
    if (f) fclose(f);
    if (kb > 0) return kb * 1024;
    return (int64_t)sysconf(_SC_PHYS_PAGES) * sysconf(_SC_PAGESIZE);
}

static int parse_i64(const char *s, int64_t lo, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo) return -1;
    *out = v;
    return 0;
}

static int train_main(int argc, char **argv);

/* what zt-trace needs to know of the run (docs/traces.md, "meta") */
static void trace_meta(const struct zt_config *cfg, const struct zt_model_shape *sh,
                       const struct zt_engine_mem *mem, int64_t nparams, int world,
                       double flops) {
    static const char *const dev[] = {"none", "cpu", "nvme"};
    char v[64];
#define META(k, fmt, x)                                                                          \
    do {                                                                                         \
        snprintf(v, sizeof v, fmt, x);                                                           \
        zt_trace_meta(k, v);                                                                     \
    } while (0)
    META("world", "%d", world);
    META("ranks_per_node", "%d", zt_comm_local_size());
    META("cores", "%ld", sysconf(_SC_NPROCESSORS_ONLN));
    META("workers", "%d", zt_runtime_nworkers());
    META("sched", "%s", zt_runtime_sched_name());
    META("stage", "%d", cfg->zero_stage);
    META("offload_optimizer", "%s", dev[cfg->offload_optimizer.device]);
    META("offload_param", "%s", dev[cfg->offload_param.device]);
    META("params", "%lld", (long long)nparams);
    META("micro_batch", "%d", cfg->micro_batch);
    META("grad_accum", "%d", cfg->grad_accum);
    META("seq_len", "%d", sh->seq_len);
    META("n_layer", "%d", sh->n_layer);
    META("flops_per_step", "%.6g", flops);
    META("mem_params", "%lld", (long long)mem->params);
    META("mem_grads", "%lld", (long long)mem->grads);
    META("mem_optim", "%lld", (long long)mem->optim);
    META("mem_acts", "%lld", (long long)mem->acts);
    META("mem_nvme", "%lld", (long long)mem->nvme);
#undef META
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(usage_text, stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--help-env") || !strcmp(argv[i], "--help-env=markdown")) {
            zt_knobs_print(stdout, argv[i][10] == '=');
            return 0;
        }
    }
    /* MPI first: world size and rank decide the batch rule and who prints */
    if (zt_comm_init() != ZT_OK) return fail(1);
    int rc = train_main(argc, argv);
    zt_comm_free();
    return rc;
}

static int train_main(int argc, char **argv) {
    const char *ds = NULL, *model = NULL, *data = NULL, *init = NULL, *export = NULL;
    const char *logp = NULL, *tracep = NULL, *gradp = NULL, *save_dir = NULL, *resume = NULL;
    int64_t steps = 10, seed = -1, save_every = -1;
    int eval_only = 0, quiet = 0;
    struct zt_ckpt_save *saving = NULL;
    struct pending_save saved = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char **dst = NULL;
        if (!strcmp(a, "--eval-only")) { eval_only = 1; continue; }
        if (!strcmp(a, "--quiet")) { quiet = 1; continue; }
        if (!strcmp(a, "--ds-config")) dst = &ds;
        else if (!strcmp(a, "--model")) dst = &model;
        else if (!strcmp(a, "--data")) dst = &data;
        else if (!strcmp(a, "--init-from")) dst = &init;
        else if (!strcmp(a, "--export")) dst = &export;
        else if (!strcmp(a, "--log")) dst = &logp;
        else if (!strcmp(a, "--trace")) dst = &tracep;
        else if (!strcmp(a, "--dump-grads")) dst = &gradp;
        else if (!strcmp(a, "--save-dir")) dst = &save_dir;
        else if (!strcmp(a, "--resume")) dst = &resume;
        else if (!strcmp(a, "--steps") || !strcmp(a, "--seed") || !strcmp(a, "--save-interval")) {
            if (i + 1 >= argc) return usage_error("option %s needs a value", a);
            int64_t v;
            if (parse_i64(argv[i + 1], !strcmp(a, "--steps") ? 1 : 0, &v))
                return usage_error(!strcmp(a, "--steps")   ? "--steps %s: expected an integer >= 1"
                                   : !strcmp(a, "--seed") ? "--seed %s: expected an integer >= 0"
                                        : "--save-interval %s: expected an integer >= 0",
                                   argv[i + 1]);
            if (!strcmp(a, "--steps")) steps = v;
            else if (!strcmp(a, "--seed")) seed = v;
            else save_every = v;
            i++;
            continue;
        } else
            return usage_error("unknown option '%s'", a);
        if (i + 1 >= argc || argv[i + 1][0] == '\0') return usage_error("option %s needs a value", a);
        *dst = argv[++i];
    }
    if (!ds) return usage_error("missing %s", "--ds-config");
    if (!model) return usage_error("missing %s", "--model");
    if (!data) return usage_error("missing %s", "--data");
    if (resume && init) return usage_error("%s: --resume and --init-from exclude each other", resume);
    if (resume && eval_only) return usage_error("%s: --resume and --eval-only exclude each other",
                                                resume);

    /* ---- validate every input before touching the runtime or any output file ---- */
    const int world = zt_comm_size(), rank = zt_comm_rank();
    struct zt_config cfg;
    struct zt_model_shape shape;
    struct zt_tokens tok = {0};
    int code = 0, have_tok = 0;
    if (zt_config_load(&cfg, ds, world) != ZT_OK) code = fail(2);
    if (!code && seed >= 0) cfg.seed = (uint64_t)seed;
    if (!code && zt_model_shape_load(&shape, model) != ZT_OK) code = fail(2);
    if (!code && zt_tokens_open(&tok, data, shape.vocab_size) != ZT_OK) code = fail(1);
    have_tok = !code;
    if (!code) {
        int64_t need = zt_gpt2_mem_estimate(&shape, &cfg), have = mem_available();
        if (need > have) {
            zt_error_set(ZT_ERR_NOMEM, "model %s: needs about %.2f GiB of host memory, %.2f GiB "
                                       "available", model, need / 1073741824.0,
                         have / 1073741824.0);
            code = fail(1);
        }
    }
    if (!code && !save_dir && cfg.ckpt_dir[0]) save_dir = cfg.ckpt_dir;
    if (save_every < 0) save_every = cfg.ckpt_save_interval;
    if (!code && save_every > 0 && !save_dir) {
        zt_error_set(ZT_ERR_USAGE, "--save-interval %lld: no checkpoint directory (--save-dir or "
                     "the config's checkpoint.dir)", (long long)save_every);
        code = fail(2);
    }
    char tagdir[1024] = "";
    struct zt_ckpt_info ck = {0};
    if (!code && resume && /* the checkpoint's metadata before building anything */
        (zt_checkpoint_resolve(resume, tagdir, sizeof tagdir) != ZT_OK ||
         zt_checkpoint_info(tagdir, &ck) != ZT_OK))
        code = fail(1);
    if (!code && init) { /* check the file before building anything: a bad header fails here */
        struct zt_safetensors st;
        if (zt_st_open(&st, init) != ZT_OK)
            code = fail(1);
        else
            zt_st_close(&st);
    }
    code = agree(code);
    if (!code && world > 1) {
        /* every rank must run the same job: same config, model, steps, seed and mode */
        uint64_t h = hash_file(hash_file(0, ds), model);
        int64_t knobs[6] = {steps, seed, eval_only, (int64_t)(init != NULL),
                            (int64_t)(resume != NULL), save_every};
        h = zt_hash_bytes(h, knobs, sizeof knobs);
        if (zt_comm_check_same(h, "config, model file, --steps, --seed, --eval-only, --resume or "
                                  "--save-interval") != ZT_OK)
            code = fail(2);
    }
    if (code) {
        if (have_tok) zt_tokens_close(&tok);
        return code;
    }

    int rc = 1;
    zt_engine_t e = NULL;
    zt_gpt2_t m = NULL;
    FILE *logf = NULL;
    if (zt_engine_init(&e, &cfg) != ZT_OK) goto out;
    if (zt_gpt2_init(&m, e, &shape) != ZT_OK) goto out;
    if (init && zt_engine_load_safetensors(e, init) != ZT_OK) goto out;
    /* the ranks start the load together, so that "loaded in" times the load, not how much
     * later the last rank got here (start-up skew of 0.5-0.9 s was counted before) */
    double together = 0;
    if (resume && zt_comm_sum_double(&together) != ZT_OK) goto out;
    double load_ms = now_ms();
    if (resume && zt_checkpoint_load(e, tagdir, &ck) != ZT_OK) goto out;
    load_ms = now_ms() - load_ms;
    zt_knobs_log_effective();
    if (tracep) zt_trace_enable(1);

    struct zt_engine_mem mem;
    zt_engine_memory(e, &mem);
    const int talk = !quiet && rank == 0; /* progress comes from rank 0 */
    if (talk) {
        printf("zerotask %s | GPT-2 V=%d T=%d C=%d L=%d NH=%d | %lld parameters\n",
               ZEROTASK_VERSION, shape.vocab_size, shape.seq_len, shape.n_embd, shape.n_layer,
               shape.n_head, (long long)zt_engine_numel(e));
        static const char *const prec[] = {"fp32", "bf16 (fp32 master weights)",
                                           "fp16 (fp32 master weights, loss scaling)"};
        printf("batch %d = micro %d x accumulation %d x world %d | ZeRO stage %d | %d workers | "
               "scheduler %s | %d row blocks | %s\n", cfg.train_batch_size, cfg.micro_batch,
               cfg.grad_accum, world, cfg.zero_stage, zt_runtime_nworkers(),
               zt_runtime_sched_name(), zt_engine_nblk(e), prec[cfg.precision]);
        fflush(stdout);
    }
    /* every rank accounts for its own memory: the plan per tier */
    char line[512];
    int at = snprintf(line, sizeof line, "memory (host, rank %d of %d): params %.3f MiB | grads "
                      "%.3f MiB | optimizer %.3f MiB | activations %.3f MiB | total %.3f MiB",
                      rank, world, mem.params / 1048576.0, mem.grads / 1048576.0,
                      mem.optim / 1048576.0, mem.acts / 1048576.0,
                      (mem.params + mem.grads + mem.optim + mem.acts) / 1048576.0);
    if (cfg.zero_stage >= 2) /* the slot windows inside params and grads */
        at += snprintf(line + at, sizeof line - (size_t)at, " | windows: gathered params %.3f "
                       "MiB, gradient slots %.3f MiB", mem.param_window / 1048576.0,
                       mem.grad_window / 1048576.0);
    if (mem.nvme > 0)
        snprintf(line + at, sizeof line - (size_t)at, " | swap buffers %.3f MiB (in optimizer) "
                 "| NVMe %.3f MiB", mem.swap_buffers / 1048576.0, mem.nvme / 1048576.0);
    strncat(line, "\n", sizeof line - strlen(line) - 1);
    if (!quiet) print_in_turn(line);
    if (check_budget(&mem, rank) != ZT_OK) goto out;
    if (tracep) trace_meta(&cfg, &shape, &mem, zt_engine_numel(e), world, zt_gpt2_step_flops(m));

    if (eval_only) {
        double loss;
        if (zt_gpt2_step_submit(m, &tok, 1, 0) != ZT_OK) goto out;
        if (zt_gpt2_step_wait(m, &loss, NULL) != ZT_OK) goto out;
        if (rank == 0) printf("eval loss %.6f\n", loss);
        rc = 0;
        goto out;
    }
    if (logp && rank == 0 && !(logf = fopen(logp, "w"))) {
        zt_error_set(ZT_ERR_IO, "log %s: cannot create (%s)", logp, strerror(errno));
        goto out;
    }
    double flops = zt_gpt2_step_flops(m);
    int64_t tokens = (int64_t)cfg.train_batch_size * shape.seq_len;
    int every = cfg.steps_per_print > 0 ? cfg.steps_per_print : 1;
    const int64_t first = resume ? ck.step + 1 : 1;
    if (talk && resume)
        printf("resumed from %s: step %lld done (written by %d rank(s) at ZeRO stage %d; "
               "loaded in %.0f ms)%s\n", tagdir, (long long)ck.step, ck.world_size, ck.zero_stage,
               load_ms, first > steps ? "; nothing left to train (--steps)" : "");
    for (int64_t s = first; s <= steps; s++) {
        double t0 = now_ms(), loss;
        struct zt_step_info info;
        if (zt_gpt2_step_submit(m, &tok, s, 1) != ZT_OK) goto out;
        if (zt_gpt2_step_wait(m, &loss, &info) != ZT_OK) goto out;
        /* the save begun after the step before was written during this one: publish it */
        if (saving && finish_save(&saving, &saved, talk) != ZT_OK) goto out;
        int save_now = save_dir && (s == steps || (save_every > 0 && s % save_every == 0));
        if (save_now) { /* its shards are written in the background, during the next step */
            char extra[1024];
            snprintf(extra, sizeof extra, "{\"model\": {\"vocab_size\": %d, \"seq_len\": %d, "
                     "\"n_embd\": %d, \"n_layer\": %d, \"n_head\": %d}, \"data\": {\"next_step\": "
                     "%lld, \"tokens_per_step\": %lld, \"tokens_consumed\": %lld}}",
                     shape.vocab_size, shape.seq_len, shape.n_embd, shape.n_layer, shape.n_head,
                     (long long)(s + 1), (long long)tokens, (long long)(s * tokens));
            double tb = now_ms();
            if (zt_checkpoint_save_begin(e, save_dir, s, extra, cfg.ckpt_keep_last, &saving) !=
                ZT_OK)
                goto out;
            saved.step = s;
            saved.dir = save_dir;
            saved.begin_ms = now_ms() - tb;
        }
        double ms = now_ms() - t0; /* a save's share of the loop's time included */
        if (s == first && cfg.zero_stage >= 2) { /* the gradient window grew to its size */
            zt_engine_memory(e, &mem);
            if (check_budget(&mem, rank) != ZT_OK) goto out;
        }
        if (s == 1 && gradp && zt_engine_save_grads_safetensors(e, gradp) != ZT_OK) goto out;
        if (talk && (s == first || s == steps || s % every == 0)) {
            char scale[96] = "";
            if (cfg.precision == ZT_PREC_FP16) {
                struct zt_train_state ts;
                zt_engine_get_train_state(e, &ts);
                snprintf(scale, sizeof scale, " | loss scale %g%s | skipped %lld", info.loss_scale,
                         info.skipped ? " (overflow: skipped)" : "", (long long)ts.skipped);
            }
            printf("step %5lld/%lld | loss %.6f | lr %.3e | %8.1f ms | %8.0f tok/s | %6.1f GFLOP/s "
                   "| grad norm %.4f%s\n", (long long)s, (long long)steps, loss, info.lr, ms,
                   tokens / (ms / 1e3), flops / (ms * 1e6), info.grad_norm, scale);
            fflush(stdout);
        }
        if (logf) { /* a line per step as it ends (tail -f, benches), errors checked at exit */
            /* JSON has no inf or NaN: a non-finite value (an fp16 overflow's norm) is null */
            char gn[32] = "null", ls[32] = "null";
            if (isfinite(loss)) snprintf(ls, sizeof ls, "%.17g", loss);
            if (isfinite(info.grad_norm)) snprintf(gn, sizeof gn, "%.9g", info.grad_norm);
            fprintf(logf, "{\"step\": %lld, \"loss\": %s, \"lr\": %.9g, \"ms\": %.3f, "
                          "\"tokens_per_s\": %.1f, \"grad_norm\": %s, \"loss_scale\": %.17g, "
                          "\"skipped\": %d}\n", (long long)s, ls, info.lr, ms,
                    tokens / (ms / 1e3), gn, info.loss_scale, info.skipped);
            fflush(logf);
        }
    }
    /* the last save: nothing left to overlap it with */
    if (saving && finish_save(&saving, &saved, talk) != ZT_OK) goto out;
    if (zt_engine_finish(e) != ZT_OK) goto out; /* the last swap-outs, their errors */
    /* every rank's peak resident memory */
    zt_engine_memory(e, &mem); /* the gradient window grows on demand during the steps */
    at = snprintf(line, sizeof line, "peak memory (rank %d of %d): %.1f MiB resident", rank,
                  world, peak_rss_kib() / 1024.0);
    if (cfg.zero_stage >= 2)
        snprintf(line + at, sizeof line - (size_t)at, " | gradient slots %.3f MiB",
                 mem.grad_window / 1048576.0);
    strncat(line, "\n", sizeof line - strlen(line) - 1);
    if (!quiet) print_in_turn(line);
    if (logf && fflush(logf) != 0) {
        zt_error_set(ZT_ERR_IO, "log %s: write failed (%s)", logp, strerror(errno));
        goto out;
    }
    if (export && zt_engine_save_safetensors(e, export) != ZT_OK) goto out;
    if (tracep &&
        zt_trace_write(tracep, zt_task_kind_names(), ZT_KIND_COUNT) != ZT_OK)
        goto out;
    rc = 0;
out:
    /* a bad environment knob (STARPU_SCHED, ZT_*) is a configuration error: exit 2 */
    if (rc) {
        int cfgerr = zt_error_last_code() == ZT_ERR_CONFIG;
        rc = fail(cfgerr ? 2 : 1);
        /* a config error stops every rank alike; any other failure is this rank's alone, and
         * the others may be waiting in a collective for it: end the whole job */
        if (!cfgerr && world > 1) zt_comm_abort(rc);
    }
    if (logf) fclose(logf);
    zt_checkpoint_save_abandon(saving);
    zt_gpt2_free(m);
    zt_engine_free(e);
    zt_tokens_close(&tok);
    return rc;
}
