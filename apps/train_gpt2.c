/*
 * apps/train_gpt2.c: zt-train, the demo trainer: GPT-2 on a token file, configured by a
 * DeepSpeed-style JSON, every step a StarPU task graph.
 *
 * Layer: apps/. Includes <zerotask.h> and the shared command-line pieces (apps/cli.h). A run is
 * parse -> validate (train_validate.c) -> start (engine, banner, memory plan) -> train loop
 * (steps, checkpoints in the background, progress, log) -> finish (last checkpoint, peak
 * memory, export, trace); train_errors.c reports a failure.
 * Errors: exactly one line "zerotask: error: <message>" on stderr; exit 2 for a bad command line
 * or config, 1 otherwise.
 */
#include <errno.h>      /* errno */
#include <math.h>       /* isfinite */
#include <stdio.h>      /* printf, fopen */
#include <string.h>     /* strcmp, strerror */
#include <unistd.h>     /* sysconf */
#include "cli.h"        /* option values, one-line usage errors */
#include "zt_clock.h"   /* zt_clock_ms */
#include "train_run.h"  /* the run's state, its checks and error reports */

static const char *usage_text =
    "usage: zt-train --ds-config F --model F --data F [options]\n"
    "\n"
    "Train GPT-2 with zerotask: every step is a StarPU task graph (forward, backward, optimizer).\n"
    "\n"
    "required:\n"
    "  --ds-config F        DeepSpeed-style JSON: train_batch_size, "
    "train_micro_batch_size_per_gpu,\n"
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
    "                       checkpoint {dir, save_interval, keep_last}, autotuning (zt-tune's;\n"
    "                       zt-train trains with the config as given), curriculum_learning\n"
    "                       {enabled, curriculum_type seqlen, min_difficulty, max_difficulty,\n"
    "                       schedule_type fixed_linear|fixed_root|fixed_discrete,\n"
    "                       schedule_config} (docs/data.md), activation_checkpointing\n"
    "                       {number_checkpoints, recompute full|mlp, cpu_checkpointing, ...}\n"
    "                       (recompute during the backward; docs/activation-checkpointing.md)\n"
    "                       (unknown or unimplemented keys are errors)\n"
    "  --model F            model shape JSON: vocab_size, seq_len, n_embd, n_layer, n_head\n"
    "  --data D             token file(s) in llm.c's format (zt-prepare makes them; uint16 or\n"
    "                       uint32 tokens): F | F1,F2,... (shares by size) | W1:F1,W2:F2,...\n"
    "                       (a blend: each file's share of the sequences) | SPEC.json (a data\n"
    "                       spec: train and validation lists, weights, valid_split;\n"
    "                       docs/data.md)\n"
    "options:\n"
    "  --data-order O       linear (default) or shuffle: a seeded permutation of each file's\n"
    "                       sequences per epoch (the seed: the config's, or --seed)\n"
    "  --eval-data D        validation data (F, a list or a blend; default: the spec's)\n"
    "  --eval-interval N    evaluate every N steps (default: only before the first step of a\n"
    "                       fresh run, logged as step 0, and after the last)\n"
    "  --eval-steps M       batches per evaluation (default 10), from the validation data's\n"
    "                       start each time; no gradient, no update\n"
    "  --steps N            total number of training steps (default 10); a resumed run stops at\n"
    "                       the same step as an uninterrupted one\n"
    "  --seed S             seed for the initialisation (overrides the config's \"seed\")\n"
    "  --init-from W        start from these weights (safetensors, HF GPT-2 names; F32/BF16/F16;\n"
    "                       finite values; a tensor the model does not have is an error)\n"
    "  --init-from-relaxed  with --init-from: ignore the tensors the model does not have (one\n"
    "                       warning line lists them) instead of stopping\n"
    "  --export OUT         write the weights after the last step (safetensors, F32)\n"
    "  --save-dir D         save checkpoints in D (D/step<N>, D/latest; docs/checkpoints.md):\n"
    "                       every --save-interval steps and after the last step\n"
    "  --save-interval N    steps between checkpoints (0: only after the last step)\n"
    "                       (defaults: the config's checkpoint {dir, save_interval, keep_last})\n"
    "  --resume P           continue from checkpoint P: a directory (its latest tag) or D/<tag>;\n"
    "                       any world size and ZeRO stage may have written it\n"
    "  --log F              one JSON object per step run: step, loss, lr, ms, tokens_per_s,\n"
    "                       grad_norm, loss_scale, skipped (fp16: 1 when the step's gradients\n"
    "                       overflowed and its update was skipped), epochs (each data source's)\n"
    "                       and, after an evaluation, eval_loss\n"
    "  --trace F            Chrome trace-event JSON of every task and its dependencies (open\n"
    "                       in ui.perfetto.dev), and the replay file F.ztr (F without .json)\n"
    "                       that zt-trace summarises, replays and plots\n"
    "  --eval-only          print the loss of step 1's batch and exit, no update\n"
    "  --dump-grads F       write step 1's parameter gradients (safetensors) for inspection\n"
    "  --dump-data F        each rank writes F.rank<r>: per row it loads, \"step micro_batch\n"
    "                       global_row file position active_length\" (for checking batches)\n"
    "  --quiet              no progress lines (errors only)\n"
    "  --help               this text;  --help-env  environment variables\n"
    "\n"
    "Progress: one line per step (steps_per_print sets how often): step/total, loss (mean over "
    "the\n"
    "step's batch, before the update), lr, ms/step, tokens/s, achieved GFLOP/s; with fp16 the\n"
    "loss scale and the steps skipped so far (an overflow is reported when it happens).\n"
    "Mixed precision (config \"bf16\" or \"fp16\" {\"enabled\": true}, DeepSpeed's keys): 16-bit\n"
    "parameters, activations and gradients, fp32 master weights and moments (docs/precision.md).\n"
    "A memory summary is printed before step 1, and each rank's peak resident memory (VmHWM)\n"
    "after the last step.\n"
    "At ZeRO stage >= 2 the memory lines also show the slots (gathered parameters at\n"
    "stage 3, micro-batch gradients waiting for their reduce-scatter); with NVMe offload they\n"
    "show the swap buffers and this rank's NVMe bytes. ZT_HOST_MEM_LIMIT caps the host bytes.\n"
    "Data: with one --data file in linear order, step i, row k (0..B-1) reads tokens from\n"
    "(i-1)*B*T + k*T, wrapping at the end. Otherwise a file's sequences are tokens j*T..j*T+T,\n"
    "drawn by the blend and (shuffle) permuted per epoch; checkpoints keep the position.\n"
    "\n"
    "Several ranks (ZeRO data parallelism over MPI):\n"
    "  mpirun [--allow-run-as-root] [--oversubscribe] [--hostfile H] -np N -x STARPU_NCPU=1 \\\n"
    "         zt-train ...\n"
    "  train_batch_size = micro x accumulation x N; rank r, micro-batch j trains rows\n"
    "  (j*N + r)*micro .. (j*N + r + 1)*micro - 1 of the step's batch, so N ranks see one rank's\n"
    "  data. Rank 0 prints progress and writes --log, --export and --trace (one file, a process\n"
    "  lane per rank); every rank prints its memory. Every rank must be given the same config,\n"
    "  model, options, --data and --init-from contents (checked at start-up). A collective\n"
    "  waiting longer than ZT_COMM_TIMEOUT seconds reports the ranks that have not reached it\n"
    "  or have gone silent in it, then aborts.\n"
    "\n"
    "Environment: STARPU_SCHED (default lws), STARPU_NCPU, and ZT_* knobs: see --help-env.\n"
    "Outputs (--export, --trace, --log, --dump-grads, --save-dir) are checked before step 1, on\n"
    "rank 0 (the ranks share one set of outputs): a missing or unwritable directory, or an\n"
    "output naming an input, stops the run at once.\n"
    "Exit status: 0 ok, 2 bad command line or config, 1 any other error.\n";

static double mib(int64_t bytes) { return bytes / 1048576.0; }

// ----------------------------------------------------------------------------
// parse: the command line

/* the field a text option sets, or NULL when name is not one */
static const char **text_option(struct train_options *o, const char *name) {
    return !strcmp(name, "--ds-config")    ? &o->ds_config
           : !strcmp(name, "--model")      ? &o->model
           : !strcmp(name, "--data")       ? &o->data
           : !strcmp(name, "--data-order") ? &o->data_order
           : !strcmp(name, "--eval-data")  ? &o->eval_data
           : !strcmp(name, "--dump-data")  ? &o->dump_data
           : !strcmp(name, "--init-from")  ? &o->init_from
           : !strcmp(name, "--export")     ? &o->export_path
           : !strcmp(name, "--log")        ? &o->log_path
           : !strcmp(name, "--trace")      ? &o->trace_path
           : !strcmp(name, "--dump-grads") ? &o->grads_path
           : !strcmp(name, "--save-dir")   ? &o->save_dir
           : !strcmp(name, "--resume")     ? &o->resume
                                           : NULL;
}

/* the field an integer option sets and its least value, or NULL when name is not one */
static int64_t *int_option(struct train_options *o, const char *name, int64_t *min) {
    *min = !strcmp(name, "--steps") || !strcmp(name, "--eval-steps") ? 1 : 0;
    return !strcmp(name, "--steps")           ? &o->steps
           : !strcmp(name, "--seed")          ? &o->seed
           : !strcmp(name, "--save-interval") ? &o->save_interval
           : !strcmp(name, "--eval-interval") ? &o->eval_interval
           : !strcmp(name, "--eval-steps")    ? &o->eval_steps
                                              : NULL;
}

/* The options into r->opt (the defaults set by the caller). Returns 0 or exit code 2. */
static int parse_options(struct train_run *r, int argc, char **argv) {
    struct train_options *o = &r->opt;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], **text;
        int64_t *number, min;
        int rc = 0;
        if (!strcmp(a, "--eval-only"))
            o->eval_only = 1;
        else if (!strcmp(a, "--quiet"))
            o->quiet = 1;
        else if (!strcmp(a, "--init-from-relaxed"))
            o->init_from_relaxed = 1;
        else if ((text = text_option(o, a)))
            rc = cli_string_option(&r->cli, argc, argv, &i, text);
        else if ((number = int_option(o, a, &min)))
            rc = cli_int_option(&r->cli, argc, argv, &i, min, number);
        else
            rc = cli_usage_error(&r->cli, "unknown option '%s'", a);
        if (rc) return rc;
    }
    if (!o->ds_config) return cli_usage_error(&r->cli, "missing %s", "--ds-config");
    if (!o->model) return cli_usage_error(&r->cli, "missing %s", "--model");
    if (!o->data) return cli_usage_error(&r->cli, "missing %s", "--data");
    if (o->init_from_relaxed && !o->init_from)
        return cli_usage_error(&r->cli, "--init-from-relaxed: needs --init-from");
    if (o->resume && o->init_from)
        return cli_usage_error(&r->cli, "%s: --resume and --init-from exclude each other",
                               o->resume);
    if (o->resume && o->eval_only)
        return cli_usage_error(&r->cli, "%s: --resume and --eval-only exclude each other",
                               o->resume);
    return 0;
}

// ----------------------------------------------------------------------------
// start: engine and model, the banner, the memory plan

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
                        mib(limit), rank, mib(host), mib(m->params), mib(m->grads), mib(m->optim),
                        mib(m->acts));
}

/* the engine and the model, from --init-from's weights or --resume's checkpoint */
static enum zt_status build_model(struct train_run *r) {
    const struct train_options *o = &r->opt;
    ZT_CHECK(zt_engine_init(&r->engine, &r->cfg));
    ZT_CHECK(zt_gpt2_init(&r->model, r->engine, &r->shape));
    if (o->init_from) ZT_CHECK(zt_engine_load_safetensors(r->engine, o->init_from));
    if (!o->resume) return ZT_OK;
    ZT_CHECK(zt_checkpoint_check_model(r->engine, r->resume_tag, &r->shape, o->model));
    ZT_CHECK(train_data_resume(&r->data, r->resume_tag, r->resume_info.step)); /* before loading */
    /* the ranks start the load together, so that "loaded in" times the load itself, not how
     * much later than the others the last rank got here */
    double together = 0;
    ZT_CHECK(zt_comm_sum_double(&together));
    double t0 = zt_clock_ms();
    ZT_CHECK(zt_checkpoint_load(r->engine, r->resume_tag, &r->resume_info));
    r->load_ms = zt_clock_ms() - t0;
    return ZT_OK;
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

/* rank 0: the model, the batch rule, ZeRO stage, scheduler and precision */
static void print_banner(const struct train_run *r) {
    const struct zt_model_shape *sh = &r->shape;
    const struct zt_config *c = &r->cfg;
    const char *precision_note = c->precision == ZT_PREC_FP16
                                     ? " (fp32 master weights, loss scaling)"
                                 : c->precision == ZT_PREC_BF16 ? " (fp32 master weights)"
                                                                : "";
    const int stages = c->pipeline.stages > 1 ? c->pipeline.stages : 1;
    printf("zerotask %s | GPT-2 V=%d T=%d C=%d L=%d NH=%d | %lld parameters\n", ZEROTASK_VERSION,
           sh->vocab_size, sh->seq_len, sh->n_embd, sh->n_layer, sh->n_head,
           (long long)zt_gpt2_numel(sh));
    printf("batch %d = micro %d x accumulation %d x %s %d%s | ZeRO stage %d | %d workers | "
           "scheduler %s | %d row blocks | %s%s\n", c->train_batch_size, c->micro_batch,
           c->grad_accum, stages > 1 ? "replicas" : "world", r->world / stages,
           stages > 1 ? " (pipeline stages: see above)" : "", c->zero_stage,
           zt_runtime_nworkers(), zt_runtime_sched_name(), zt_engine_nblk(r->engine),
           zt_precision_name(c->precision), precision_note);
    fflush(stdout);
}

/* every rank, in turn: its own memory plan per tier and its predicted peak resident memory
 * (zt_memory_predict, compared with the peak printed at the end) (collective) */
static void print_memory_plan(const struct train_run *r) {
    const struct zt_engine_mem *m = &r->mem;
    char line[1024]; /* every part below at its longest fits */
    int at = snprintf(line, sizeof line, "memory (host, rank %d of %d): params %.3f MiB | grads "
                      "%.3f MiB | optimizer %.3f MiB | activations %.3f MiB | total %.3f MiB",
                      r->rank, r->world, mib(m->params), mib(m->grads), mib(m->optim),
                      mib(m->acts), mib(m->params + m->grads + m->optim + m->acts));
    const struct zt_mem_inputs in = {.shape = &r->shape, .cfg = &r->cfg, .world_size = r->world,
                                     .rank = r->rank, .workers = zt_runtime_nworkers()};
    struct zt_mem_prediction pred;
    if (zt_memory_predict(&in, &pred) == ZT_OK) /* a pipeline rank: its stage's */
        at += snprintf(line + at, sizeof line - (size_t)at, " | predicted peak %.1f MiB",
                       mib(pred.peak));
    struct zt_gpt2_recompute rc;
    zt_gpt2_recompute_info(r->model, &rc);
    if (rc.nckpt) /* inside the activations */
        at += snprintf(line + at, sizeof line - (size_t)at, " | recompute: %d of %d layers "
                       "checkpointed, window of %d%s (%.3f MiB)%s", rc.nckpt, r->shape.n_layer,
                       rc.window, rc.act_sets > 1 ? " per activation set" : "",
                       mib(rc.window_bytes),
                       rc.nckpt > rc.window ? "" : ", so none is recomputed and nothing saved");
    if (rc.moved) /* the sets inside the activations too */
        at += snprintf(line + at, sizeof line - (size_t)at, " | checkpointed inputs: %d in %d "
                       "set(s) (%.3f MiB), %d through NVMe (%.3f MiB)%s", rc.moved, rc.sets,
                       mib(rc.set_bytes), rc.swapped, mib(rc.file_bytes),
                       rc.act_sets > 1 ? " (counts per activation set, MiB over all)" : "");
    if (r->cfg.zero_stage >= 2) /* the slots inside params and grads */
        at += snprintf(line + at, sizeof line - (size_t)at, " | windows: gathered params %.3f "
                       "MiB, gradient slots %.3f MiB", mib(m->value_slots), mib(m->grad_slots));
    if (m->nvme > 0)
        snprintf(line + at, sizeof line - (size_t)at, " | swap buffers %.3f MiB (in optimizer) "
                 "| NVMe %.3f MiB", mib(m->swap_buffers), mib(m->nvme));
    strncat(line, "\n", sizeof line - strlen(line) - 1);
    print_in_turn(line);
}

/* what zt-trace needs to know of the run (docs/traces.md, "meta") */
static void trace_meta(const struct train_run *r) {
    const struct zt_config *cfg = &r->cfg;
    const struct zt_engine_mem *mem = &r->mem;
    char v[64];
#define META(k, fmt, x)                                                                          \
    do {                                                                                         \
        snprintf(v, sizeof v, fmt, x);                                                           \
        zt_trace_meta(k, v);                                                                     \
    } while (0)
    META("world", "%d", r->world);
    META("ranks_per_node", "%d", zt_comm_local_size());
    META("cores", "%ld", sysconf(_SC_NPROCESSORS_ONLN));
    META("workers", "%d", zt_runtime_nworkers());
    META("sched", "%s", zt_runtime_sched_name());
    META("stage", "%d", cfg->zero_stage);
    META("pipeline_stages", "%d", cfg->pipeline.stages > 1 ? cfg->pipeline.stages : 1);
    META("offload_optimizer", "%s", zt_offload_device_name(cfg->offload_optimizer.device));
    META("offload_param", "%s", zt_offload_device_name(cfg->offload_param.device));
    META("params", "%lld", (long long)zt_engine_numel(r->engine));
    META("micro_batch", "%d", cfg->micro_batch);
    META("grad_accum", "%d", cfg->grad_accum);
    META("seq_len", "%d", r->shape.seq_len);
    META("n_layer", "%d", r->shape.n_layer);
    META("n_embd", "%d", r->shape.n_embd);
    META("n_head", "%d", r->shape.n_head);
    META("vocab_size", "%d", r->shape.vocab_size);
    META("flops_per_step", "%.6g", zt_gpt2_step_flops(r->model));
    META("mem_params", "%lld", (long long)mem->params);
    META("mem_grads", "%lld", (long long)mem->grads);
    META("mem_optim", "%lld", (long long)mem->optim);
    META("mem_acts", "%lld", (long long)mem->acts);
    META("mem_nvme", "%lld", (long long)mem->nvme);
#undef META
}

static enum zt_status start_run(struct train_run *r) {
    r->talk = !r->opt.quiet && r->rank == 0;
    ZT_CHECK(train_data_open_dump(&r->data));
    ZT_CHECK(build_model(r));
    zt_knobs_log_effective();
    if (r->opt.trace_path) zt_trace_enable(1);
    zt_engine_memory(r->engine, &r->mem);
    if (r->talk) print_banner(r);
    if (!r->opt.quiet) print_memory_plan(r);
    ZT_CHECK(check_budget(&r->mem, r->rank));
    if (r->opt.trace_path) trace_meta(r);
    return ZT_OK;
}

// ----------------------------------------------------------------------------
// the training loop: steps, checkpoints, progress, log

/* --eval-only: the loss of step 1's batch, no update */
static enum zt_status evaluate(struct train_run *r) {
    double loss;
    ZT_CHECK(train_data_first_loss(&r->data, r->model, &loss));
    if (r->rank == 0) printf("eval loss %.6f\n", loss);
    return ZT_OK;
}

/* --log on rank 0; the steps to run and how often to print; "resumed from" */
static enum zt_status plan_loop(struct train_run *r) {
    const struct train_options *o = &r->opt;
    if (o->log_path && r->rank == 0 && !(r->log = fopen(o->log_path, "w")))
        return zt_error_set(ZT_ERR_IO, "log %s: cannot create (%s)", o->log_path,
                            strerror(errno));
    r->flops_per_step = zt_gpt2_step_flops(r->model);
    r->tokens_per_step = (int64_t)r->cfg.train_batch_size * r->shape.seq_len;
    r->print_every = r->cfg.steps_per_print > 0 ? r->cfg.steps_per_print : 1;
    r->first_step = o->resume ? r->resume_info.step + 1 : 1;
    if (r->talk && o->resume)
        printf("resumed from %s: step %lld done (written by %d rank(s) at ZeRO stage %d; "
               "loaded in %.0f ms)%s\n", r->resume_tag, (long long)r->resume_info.step,
               r->resume_info.world_size, r->resume_info.zero_stage, r->load_ms,
               r->first_step > o->steps ? "; nothing left to train (--steps)" : "");
    if (r->talk) train_data_describe(&r->data);
    return ZT_OK;
}

/* Begin saving the state after step s: the shards are written in the background, during the
 * next step. meta.json gets the model shape and where the data continues. */
static enum zt_status begin_save(struct train_run *r, int64_t s) {
    const struct zt_model_shape *sh = &r->shape;
    char *sampler = train_data_meta(&r->data, s);
    size_t n = (sampler ? strlen(sampler) : 0) + 512;
    char *extra = sampler ? malloc(n) : NULL;
    if (!extra) {
        free(sampler);
        return zt_error_set(ZT_ERR_NOMEM, "checkpoint: out of memory for its metadata");
    }
    snprintf(extra, n, "{\"model\": {\"vocab_size\": %d, \"seq_len\": %d, \"n_embd\": %d, "
             "\"n_layer\": %d, \"n_head\": %d}, \"data\": {\"next_step\": %lld, "
             "\"tokens_per_step\": %lld, \"tokens_consumed\": %lld, %s}}", sh->vocab_size,
             sh->seq_len, sh->n_embd, sh->n_layer, sh->n_head, (long long)(s + 1),
             (long long)r->tokens_per_step, (long long)(s * r->tokens_per_step), sampler);
    free(sampler);
    double t0 = zt_clock_ms();
    enum zt_status rc = zt_checkpoint_save_begin(r->engine, r->save_dir, s, extra,
                                                 r->cfg.ckpt_keep_last, &r->saving);
    free(extra);
    ZT_CHECK(rc);
    r->pending =
        (struct pending_save){.step = s, .begin_ms = zt_clock_ms() - t0, .dir = r->save_dir};
    return ZT_OK;
}

/* Publish the save begun earlier (collective) and say what it cost: the shard's bytes and write
 * time (rank 0's) and how long the training loop was held by it. */
static enum zt_status finish_save(struct train_run *r) {
    const struct pending_save *ps = &r->pending;
    struct zt_save_info si = {0};
    double t0 = zt_clock_ms();
    enum zt_status rc = zt_checkpoint_save_end(r->saving, &si);
    r->saving = NULL;
    if (rc != ZT_OK || !r->talk) return rc;
    double held = ps->begin_ms + (zt_clock_ms() - t0);
    printf("checkpoint %s/step%lld saved: %.1f MiB per rank written in %.0f ms (%.0f MB/s) "
           "alongside training, which it held %.1f ms\n", ps->dir, (long long)ps->step,
           mib(si.bytes), si.write_ms, si.write_ms > 0 ? si.bytes / (si.write_ms * 1e3) : 0.0,
           held);
    fflush(stdout);
    return ZT_OK;
}

/* rank 0's progress line: step, loss, lr, time, throughput, grad norm (fp16: loss scale) */
static void print_progress(const struct train_run *r, int64_t s, double loss,
                           const struct zt_step_info *info, double ms) {
    char scale[96] = "";
    if (r->cfg.precision == ZT_PREC_FP16) {
        struct zt_train_state ts;
        zt_engine_get_train_state(r->engine, &ts);
        snprintf(scale, sizeof scale, " | loss scale %g%s | skipped %lld", info->loss_scale,
                 info->skipped ? " (overflow: skipped)" : "", (long long)ts.skipped);
    }
    printf("step %5lld/%lld | loss %.6f | lr %.3e | %8.1f ms | %8.0f tok/s | %6.1f GFLOP/s "
           "| grad norm %.4f%s\n", (long long)s, (long long)r->opt.steps, loss, info->lr, ms,
           r->tokens_per_step / (ms / 1e3), r->flops_per_step / (ms * 1e6), info->grad_norm,
           scale);
    fflush(stdout);
}

/* one JSON line per step as it ends (for tail -f and the benches); write errors are checked
 * once at the end. JSON has no inf or NaN: a non-finite value (an fp16 overflow's norm) is
 * null. */
static void write_log_line(const struct train_run *r, int64_t s, double loss,
                           const struct zt_step_info *info, double ms, const double *eval) {
    char gn[32] = "null", ls[32] = "null", epochs[1024], ev[64] = "";
    if (isfinite(loss)) snprintf(ls, sizeof ls, "%.17g", loss);
    if (isfinite(info->grad_norm)) snprintf(gn, sizeof gn, "%.9g", info->grad_norm);
    if (eval && isfinite(*eval)) snprintf(ev, sizeof ev, ", \"eval_loss\": %.17g", *eval);
    else if (eval) snprintf(ev, sizeof ev, ", \"eval_loss\": null");
    train_data_epochs(&r->data, epochs, sizeof epochs);
    fprintf(r->log, "{\"step\": %lld, \"loss\": %s, \"lr\": %.9g, \"ms\": %.3f, "
                    "\"tokens_per_s\": %.1f, \"grad_norm\": %s, \"loss_scale\": %.17g, "
                    "\"skipped\": %d, \"epochs\": %s%s}\n", (long long)s, ls, info->lr, ms,
            r->tokens_per_step / (ms / 1e3), gn, info->loss_scale, info->skipped, epochs, ev);
    fflush(r->log);
}

/* the validation loss after step s, when one is due: printed (rank 0) and returned in *loss */
static enum zt_status maybe_evaluate(struct train_run *r, int64_t s, const double **loss,
                                     double *value) {
    *loss = NULL;
    if (!train_data_eval_due(&r->data, s, r->opt.steps)) return ZT_OK;
    double t0 = zt_clock_ms();
    ZT_CHECK(train_data_eval(&r->data, r->model, value));
    *loss = value;
    if (r->talk) {
        printf("eval  %5lld/%lld | val loss %.6f | %lld batches of %d in %.0f ms\n",
               (long long)s, (long long)r->opt.steps, *value, (long long)r->data.eval_steps,
               r->data.B, zt_clock_ms() - t0);
        fflush(stdout);
    }
    return ZT_OK;
}

/* a fresh run with validation data: the validation loss of the initial weights (llm.c's step 0),
 * logged as step 0 */
static enum zt_status evaluate_start(struct train_run *r) {
    const double *eval;
    double value;
    ZT_CHECK(maybe_evaluate(r, 0, &eval, &value));
    if (eval && r->log) {
        fprintf(r->log, "{\"step\": 0, \"eval_loss\": %.17g}\n", value);
        fflush(r->log);
    }
    return ZT_OK;
}

static int save_due(const struct train_run *r, int64_t s) {
    return r->save_dir &&
           (s == r->opt.steps || (r->save_interval > 0 && s % r->save_interval == 0));
}

static enum zt_status train_step(struct train_run *r, int64_t s) {
    const struct train_options *o = &r->opt;
    double t0 = zt_clock_ms(), loss;
    struct zt_step_info info;
    ZT_CHECK(train_data_submit(&r->data, r->model, s, r->talk));
    ZT_CHECK(zt_gpt2_step_wait(r->model, &loss, &info));
    /* the save begun after the step before was written during this one: publish it */
    if (r->saving) ZT_CHECK(finish_save(r));
    if (save_due(r, s)) ZT_CHECK(begin_save(r, s));
    double ms = zt_clock_ms() - t0; /* a save's share of the loop's time included */
    if (s == r->first_step && r->cfg.zero_stage >= 2) { /* the gradient slots grew to their size */
        zt_engine_memory(r->engine, &r->mem);
        ZT_CHECK(check_budget(&r->mem, r->rank));
    }
    if (s == 1 && o->grads_path)
        ZT_CHECK(zt_engine_save_grads_safetensors(r->engine, o->grads_path));
    if (r->talk && (s == r->first_step || s == o->steps || s % r->print_every == 0))
        print_progress(r, s, loss, &info, ms);
    const double *eval;
    double eval_value;
    ZT_CHECK(maybe_evaluate(r, s, &eval, &eval_value));
    if (r->log) write_log_line(r, s, loss, &info, ms, eval);
    return ZT_OK;
}

// ----------------------------------------------------------------------------
// finish: the last checkpoint, peak memory, log, export, trace


/* every rank, in turn: its peak resident memory and its final gradient slots (collective) */
static void print_peak_memory(const struct train_run *r) {
    char line[512];
    int at = snprintf(line, sizeof line, "peak memory (rank %d of %d): %.1f MiB resident",
                      r->rank, r->world, cli_peak_rss_kib() / 1024.0);
    if (r->cfg.zero_stage >= 2)
        snprintf(line + at, sizeof line - (size_t)at, " | gradient slots %.3f MiB",
                 mib(r->mem.grad_slots));
    strncat(line, "\n", sizeof line - strlen(line) - 1);
    print_in_turn(line);
}

static enum zt_status finish_run(struct train_run *r) {
    const struct train_options *o = &r->opt;
    /* the last save: nothing left to overlap it with */
    if (r->saving) ZT_CHECK(finish_save(r));
    ZT_CHECK(zt_engine_finish(r->engine)); /* the last swap-outs, their errors */
    zt_engine_memory(r->engine, &r->mem);  /* the gradient slots grow on demand */
    if (!o->quiet) print_peak_memory(r);
    if (r->data.dump && fflush(r->data.dump) != 0)
        return zt_error_set(ZT_ERR_IO, "--dump-data %s: write failed (%s)", r->data.dump_path,
                            strerror(errno));
    if (r->log && fflush(r->log) != 0)
        return zt_error_set(ZT_ERR_IO, "log %s: write failed (%s)", o->log_path, strerror(errno));
    if (o->export_path) ZT_CHECK(zt_engine_save_safetensors(r->engine, o->export_path));
    if (o->trace_path)
        ZT_CHECK(zt_trace_write(o->trace_path, zt_task_kind_names(), ZT_KIND_COUNT));
    return ZT_OK;
}

// ----------------------------------------------------------------------------
// the phases in order

static enum zt_status run_training(struct train_run *r) {
    ZT_CHECK(start_run(r));
    if (r->opt.eval_only) return evaluate(r);
    ZT_CHECK(plan_loop(r));
    if (r->first_step == 1) ZT_CHECK(evaluate_start(r));
    for (int64_t s = r->first_step; s <= r->opt.steps; s++) ZT_CHECK(train_step(r, s));
    return finish_run(r);
}

static void free_run(struct train_run *r) {
    if (r->log) fclose(r->log);
    zt_checkpoint_save_abandon(r->saving);
    zt_gpt2_free(r->model);
    zt_engine_free(r->engine);
    train_data_close(&r->data);
}

/* parse -> validate -> start -> loop -> finish; returns the exit code */
static int train_main(struct train_run *r, int argc, char **argv) {
    int code = parse_options(r, argc, argv);
    if (!code) code = train_validate_inputs(r);
    if (!code && run_training(r) != ZT_OK) code = train_report_failure(r);
    free_run(r);
    return code;
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) { /* help wins wherever it is, before MPI starts */
        if (cli_is_help(argv[i])) {
            fputs(usage_text, stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--help-env") || !strcmp(argv[i], "--help-env=markdown")) {
            zt_knobs_print(stdout, argv[i][10] == '=');
            return 0;
        }
    }
    /* MPI first: world size and rank decide the batch rule and who prints; it checks every
     * ZT_* knob before anything reads one (a bad one: exit 2, as a bad config) */
    if (zt_comm_init() != ZT_OK) {
        /* every rank found a bad knob: rank 0 says it, before the barrier in zt_comm_free */
        int code = train_fail(zt_error_last_code() == ZT_ERR_CONFIG ? 2 : 1);
        zt_comm_free();
        return code;
    }
    struct train_run run = {
        .rank = zt_comm_rank(),
        .world = zt_comm_size(),
        .cli = {.name = "zt-train", .error_prefix = "zerotask",
                .print_errors = zt_comm_rank() == 0},
        .opt = {.steps = 10, .seed = -1, .save_interval = -1, .eval_interval = -1,
                .eval_steps = -1},
    };
    int rc = train_main(&run, argc, argv);
    zt_comm_free();
    return rc;
}
