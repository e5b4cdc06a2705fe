/*
 * apps/train_validate.c: zt-train's inputs checked before the runtime starts or any output file
 * is touched: config, model shape, pipeline plan, data, host memory, checkpointing, the files a
 * start reads, the outputs, and that every rank runs the same job.
 *
 * Layer: apps/ (zt-train only). Each check reports its own error and returns the exit code.
 */
#include <stdio.h>          /* printf, snprintf */
#include "train_digest.h"   /* the inputs' fingerprints */
#include "train_run.h"      /* struct train_run */
#include "zt_tracefile.h"   /* zt_tracefile_replay_path */

/* A pipeline: the plan (rank 0 prints each rank's place and layers), then what it cannot
 * combine with yet (refused). Returns 0 or the exit code, the error reported. */
static int plan_pipeline(const struct train_run *r) {
    struct zt_pipe_plan pl;
    if (zt_pipe_plan_gpt2(&r->shape, &r->cfg.pipeline, &pl) != ZT_OK) return train_fail(2);
    for (int k = 0; r->rank == 0 && k < r->world; k++) {
        const struct zt_pipe_rank x = zt_pipe_rank(&r->cfg.pipeline, r->world, k);
        char what[192];
        zt_pipe_plan_describe(&pl, &r->shape, x.stage, what, sizeof what);
        printf("pipeline: rank %d: data-parallel rank %d of %d, %s\n", k, x.dp_rank, x.dp, what);
    }
    if (zt_pipe_plan_check_gpt2(&pl, &r->shape, r->cfg.path) != ZT_OK ||
        zt_pipeline_check_runnable(&r->cfg) != ZT_OK)
        return train_fail(2);
    return 0;
}

/* the host bytes this rank needs at most (zt_gpt2_mem_estimate; a pipeline rank: its stage's
 * parameters and activation sets, so that stages on machines of their own are not refused for
 * the whole model's size, and its stage named into stage[n]) */
static int64_t rank_mem_estimate(const struct train_run *r, char *stage, size_t n) {
    if (r->cfg.pipeline.stages <= 1) return zt_gpt2_mem_estimate(&r->shape, &r->cfg);
    const int st = zt_pipe_rank(&r->cfg.pipeline, r->world, r->rank).stage;
    snprintf(stage, n, ", pipeline stage %d of %d", st, r->cfg.pipeline.stages);
    int spec0, spec1;
    if (zt_pipe_stage_specs(&r->shape, &r->cfg.pipeline, r->cfg.path, st, &spec0, &spec1) != ZT_OK)
        return -1;
    return zt_gpt2_stage_mem_estimate(&r->shape, &r->cfg, spec0, spec1);
}

/* config (the --seed override applied), model shape, token file, and whether the model fits in
 * the host memory available. Returns 0 or the exit code, the error reported. */
static int load_inputs(struct train_run *r) {
    const struct train_options *o = &r->opt;
    if (zt_config_load(&r->cfg, o->ds_config, r->world) != ZT_OK) return train_fail(2);
    if (o->seed >= 0) r->cfg.seed = (uint64_t)o->seed;
    if (r->cfg.autotune.enabled && r->rank == 0)
        ZT_LOG_I("config %s: autotuning.enabled: zt-tune reads that section; zt-train trains "
                 "with the config as given", o->ds_config);
    if (zt_model_shape_load(&r->shape, o->model) != ZT_OK ||
        zt_model_shape_check_sizes(&r->shape, r->cfg.micro_batch, o->model) != ZT_OK ||
        zt_actckpt_check_layers(&r->cfg.actckpt, r->shape.n_layer) != ZT_OK)
        return train_fail(2);
    const int prc = r->cfg.pipeline.stages > 1 ? plan_pipeline(r) : 0;
    if (prc != 0) return prc;
    const struct train_data_options d = {o->data, o->eval_data, o->data_order, o->eval_interval,
                                         o->eval_steps, o->dump_data, r->rank};
    if (train_data_open(&r->data, &d, &r->cfg, &r->shape) != ZT_OK) {
        const enum zt_status why = zt_error_last_code();
        return train_fail(why == ZT_ERR_USAGE || why == ZT_ERR_CONFIG ? 2 : 1);
    }
    char stage[64] = "", largest[256];
    int64_t need = rank_mem_estimate(r, stage, sizeof stage), have = cli_mem_available();
    if (need < 0) return train_fail(1);
    if (need <= have) return 0;
    zt_model_shape_largest(&r->shape, r->cfg.micro_batch, largest, sizeof largest);
    zt_error_set(ZT_ERR_NOMEM, "model %s%s: needs about %.2f GiB of host memory, %.2f GiB "
                 "available (the model's largest array: %s)", o->model, stage,
                 need / 1073741824.0, have / 1073741824.0, largest);
    return train_fail(1);
}

/* where and how often to save: the options, else the config's checkpoint section */
static int resolve_checkpointing(struct train_run *r) {
    r->save_dir = r->opt.save_dir;
    if (!r->save_dir && r->cfg.ckpt_dir[0]) r->save_dir = r->cfg.ckpt_dir;
    r->save_interval = r->opt.save_interval;
    if (r->save_interval < 0) r->save_interval = r->cfg.ckpt_save_interval;
    if (r->save_interval > 0 && !r->save_dir) {
        zt_error_set(ZT_ERR_USAGE, "--save-interval %lld: no checkpoint directory (--save-dir or "
                     "the config's checkpoint.dir)", (long long)r->save_interval);
        return train_fail(2);
    }
    return 0;
}

/* the checkpoint's metadata (--resume) and the weights file's header (--init-from), read
 * before anything is built: a bad one fails here */
static int check_start_files(struct train_run *r) {
    const struct train_options *o = &r->opt;
    if (o->resume &&
        (zt_checkpoint_resolve(o->resume, r->resume_tag, sizeof r->resume_tag) != ZT_OK ||
         zt_checkpoint_info(r->resume_tag, &r->resume_info) != ZT_OK))
        return train_fail(1);
    if (r->save_dir &&
        zt_checkpoint_lock(r->save_dir, o->save_dir ? "--save-dir" : "checkpoint.dir") != ZT_OK)
        return train_fail(1);
    if (o->init_from) {
        struct zt_safetensors st;
        if (zt_st_open(&st, o->init_from) != ZT_OK) return train_fail(1);
        enum zt_status rc = zt_gpt2_check_weights(&r->shape, &st, o->init_from_relaxed);
        zt_st_close(&st);
        if (rc != ZT_OK) return train_fail(1);
    }
    return 0;
}

/* Rank 0, which writes them (the checkpoint shards of every rank go to one shared directory):
 * every output can be written (else exit 1, as for a missing input), and none is an input or
 * another output (exit 2, a bad command line); checked before any work, so that a bad path
 * fails now instead of after the last step. */
static int check_outputs(const struct train_run *r) {
    const struct train_options *o = &r->opt;
    char replay[4096] = "";
    if (o->trace_path) zt_tracefile_replay_path(replay, sizeof replay, o->trace_path);
    const struct { const char *flag, *path; int in_place; } out[] = {
        {"--export", o->export_path, 0},
        {"--log", o->log_path, 1},
        {"--trace", o->trace_path, 0},
        {"--trace (its replay file)", replay[0] ? replay : NULL, 0},
        {"--dump-grads", o->grads_path, 0},
        {"--dump-data", r->data.dump_path[0] ? r->data.dump_path : NULL, 0}};
    const struct { const char *flag, *path; } in[] = {
        {"--ds-config", o->ds_config}, {"--model", o->model}, {"--data", o->data},
        {"--init-from", o->init_from}};
    enum { NOUT = sizeof out / sizeof out[0], NIN = sizeof in / sizeof in[0] };
    for (int i = 0; i < NOUT; i++) {
        if (!out[i].path) continue;
        if (cli_check_output_file(out[i].flag, out[i].path, out[i].in_place) != ZT_OK)
            return train_fail(1);
        for (int k = 0; k < NIN + i; k++) {
            const char *flag = k < NIN ? in[k].flag : out[k - NIN].flag;
            const char *other = k < NIN ? in[k].path : out[k - NIN].path;
            if (other && cli_same_file(out[i].path, other)) {
                zt_error_set(ZT_ERR_USAGE, "%s %s: is also the %s file (%s)", out[i].flag,
                             out[i].path, flag, k < NIN ? "an output must not overwrite an "
                                                          "input" : "each output needs its own");
                return train_fail(2);
            }
        }
    }
    for (int i = 0; i < NOUT; i++) /* the token files a list, blend or spec names */
        for (int f = 0; out[i].path && f < r->data.ds.nfiles; f++)
            if (cli_same_file(out[i].path, r->data.ds.files[f].path)) {
                zt_error_set(ZT_ERR_USAGE, "%s %s: is also a data file (an output must not "
                             "overwrite an input)", out[i].flag, out[i].path);
                return train_fail(2);
            }
    if (r->save_dir && cli_check_output_dir(o->save_dir ? "--save-dir" : "checkpoint.dir",
                                            r->save_dir) != ZT_OK)
        return train_fail(1);
    return 0;
}

/* every rank must run the same job: same config, model, steps, seed and mode, and the same
 * --data and --init-from contents (collective) */
static int check_same_job(const struct train_run *r) {
    const struct train_options *o = &r->opt;
    uint64_t h = train_file_hash(train_file_hash(0, o->ds_config), o->model);
    /* knobs that shape the graph, and so the order of its collectives */
    int64_t chunks = 0, window = 0;
    (void)zt_engine_graph_chunks(&chunks); /* the knob, or 1 with CUDA workers */
    (void)zt_knob_int("ZT_RECOMPUTE_WINDOW", &window);
    int64_t options[11] = {o->steps, o->seed, o->eval_only, (int64_t)(o->init_from != NULL),
                           (int64_t)(o->resume != NULL), r->save_interval, r->data.ds.order,
                           r->data.eval_interval, r->data.eval_steps, chunks, window};
    h = zt_hash_bytes(h, options, sizeof options);
    if (zt_comm_check_same(h, "config, model file, --steps, --seed, --eval-only, --resume, "
                              "--save-interval, --data-order, --eval-*, ZT_GRAPH_CHUNKS or "
                              "ZT_RECOMPUTE_WINDOW") != ZT_OK ||
        zt_comm_check_same(train_data_digest(&r->data.ds),
                           "--data file set (size+digest of each)") != ZT_OK ||
        (o->init_from && /* the same on every rank: the check above compared its presence */
         zt_comm_check_same(train_sampled_digest(o->init_from), "--init-from file (size+digest)") !=
             ZT_OK))
        return train_fail(2);
    return 0;
}

/* Returns 0 when every rank's inputs are good, else the exit code (errors reported). */
int train_validate_inputs(struct train_run *r) {
    int code = load_inputs(r);
    if (!code) code = resolve_checkpointing(r);
    /* the outputs first: the save-dir lock of check_start_files creates the directory */
    if (!code && r->rank == 0) code = check_outputs(r);
    if (!code) code = check_start_files(r);
    code = train_agree(code);
    if (!code && r->world > 1) code = check_same_job(r);
    return code;
}
