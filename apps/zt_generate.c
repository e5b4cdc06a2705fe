/*
 * apps/zt_generate.c: zt-generate, text generation from a trained GPT-2: prompts in (text with a
 * tokenizer, ids, or a JSONL file of many), tokens out, every prompt a request of the
 * generator (graph/zt_generate.h), which decodes them together with continuous batching.
 *
 * Layer: apps/. This file: options, the run and the output; generate_input.c: the prompts file
 * and the inference config.
 */
#include <limits.h>         /* PATH_MAX */
#include <math.h>           /* isinf */
#include <stdio.h>          /* printf, fprintf */
#include <stdlib.h>         /* calloc, free, strtod */
#include <string.h>         /* strcmp, strstr */
#include <time.h>           /* clock_gettime */
#include <unistd.h>         /* sysconf */
#include "cli.h"            /* cli_* */
#include "generate_input.h" /* struct gen_prompt, gen_prompts_*, gen_ds_config_load */
#include "zerotask.h"       /* everything public */
#include "zt_tracefile.h"   /* zt_tracefile_replay_path */

static const char *usage_text =
    "usage: zt-generate --model M.json (--weights W.safetensors | --checkpoint DIR)\n"
    "                   (--prompt TEXT --tokenizer DIR | --prompt-ids 1,2,3 | --prompts F)\n"
    "                   [options]\n"
    "\n"
    "Generate text with a GPT-2 trained by zerotask: the prompts are requests of the inference\n"
    "engine, decoded together (continuous batching: a finished prompt's KV-cache slot goes to\n"
    "the next waiting one); prefill, decode, KV-cache updates and sampling are StarPU tasks.\n"
    "\n"
    "  --model M.json         model shape (vocab_size, seq_len, n_embd, n_layer, n_head); seq_len\n"
    "                         is the context: prompt + generated tokens <= seq_len\n"
    "  --weights W            safetensors with HF GPT-2 names (F32/BF16/F16, computed as stored)\n"
    "  --checkpoint DIR       a zerotask checkpoint (DIR's latest, or DIR/<tag>), any world size\n"
    "  --tokenizer DIR        Hugging Face tokenizer files (tokenizer.json or vocab.json +\n"
    "                         merges.txt): text in and out; <|endoftext|> ends a prompt's output\n"
    "  --prompt TEXT          one prompt (needs --tokenizer)\n"
    "  --prompt-ids 1,2,3     one prompt as token ids\n"
    "  --prompts F            JSONL, one object per line: {\"prompt\": TEXT} or {\"prompt_ids\":\n"
    "                         [..]}, optionally with max_new_tokens, temperature, top_k, top_p,\n"
    "                         seed; results in input order\n"
    "  --max-new-tokens N     tokens to generate per prompt (default 32)\n"
    "  --temperature T        0: greedy (default 1.0)\n"
    "  --top-k K              keep the K most likely tokens (default 0: off)\n"
    "  --top-p P              keep the smallest set holding P of the probability (default 1: off)\n"
    "  --repetition-penalty R CTRL's penalty on tokens already in the sequence (default 1: off)\n"
    "  --stop TEXT            end a prompt's output where its text reaches TEXT (needs\n"
    "                         --tokenizer; the text is cut before it)\n"
    "  --seed S               sampling seed (default 0): the token at position p of a prompt\n"
    "                         draws the random number of (S, p), whatever the batching\n"
    "  --max-batch B          prompts decoded together, KV-cache slots (default 8)\n"
    "  --prefill-chunk N      prompt tokens a prompt feeds per step (default 256): long prompts\n"
    "                         are cut so that running prompts keep decoding between the chunks\n"
    "  --ds-config F          DeepSpeed inference keys: dtype (fp32|bf16|fp16), zero_optimization\n"
    "                         {stage 3, offload_param {device none|cpu|nvme, nvme_path,\n"
    "                         buffer_count N|\"auto\"}}, aio {block_size, queue_depth,\n"
    "                         thread_count}: with nvme the layers stay on disk and are read\n"
    "                         ahead of their use (auto: as many layers in memory as\n"
    "                         ZT_HOST_MEM_LIMIT leaves room for)\n"
    "  --json                 one JSON object per prompt: prompt_ids, ids, text (with a\n"
    "                         tokenizer), finish_reason (length|stop|eos), ms_first_token,\n"
    "                         tokens_per_s\n"
    "  --logits OUT           the first prompt's prompt logits (safetensors, F32 \"logits\"\n"
    "                         [prompt length, vocab_size])\n"
    "  --trace F              Chrome trace-event JSON of every task (prefill, decode, KV cache,\n"
    "                         sampling, swap-ins; open in ui.perfetto.dev) and the replay file\n"
    "                         F.ztr (F without .json) that zt-trace summarises\n"
    "  --quiet                no memory plan and summary lines on stderr\n"
    "  --help                 this text\n"
    "\n"
    "Without --json the text (or ids) of each prompt streams to stdout as it is generated.\n"
    "stderr: the memory plan before the first token and a summary line at the end.\n"
    "Exit status: 0 ok, 2 bad command line, config or prompt, 1 any other error.\n";

struct gen_options {
    const char *model, *weights, *checkpoint, *tokenizer, *prompt, *prompt_ids, *prompts;
    const char *stop, *ds_config, *logits, *trace;
    int json, quiet, max_batch, prefill_chunk;
    struct zt_gen_params p;
};

static const struct cli_program g_cli = {"zt-generate", "zerotask", 1};

// ----------------------------------------------------------------------------
// options

static int float_option(int argc, char **argv, int *i, float *out) {
    const char *v;
    if (cli_string_option(&g_cli, argc, argv, i, &v)) return CLI_EXIT_USAGE;
    char *end;
    double d = strtod(v, &end);
    if (*end || end == v)
        return cli_usage_error(&g_cli, "%s %s: expected a number", argv[*i - 1], v);
    *out = (float)d;
    return 0;
}

static const char **text_option(struct gen_options *o, const char *a) {
    return !strcmp(a, "--model")        ? &o->model
           : !strcmp(a, "--weights")    ? &o->weights
           : !strcmp(a, "--checkpoint") ? &o->checkpoint
           : !strcmp(a, "--tokenizer")  ? &o->tokenizer
           : !strcmp(a, "--prompt")     ? &o->prompt
           : !strcmp(a, "--prompt-ids") ? &o->prompt_ids
           : !strcmp(a, "--prompts")    ? &o->prompts
           : !strcmp(a, "--stop")       ? &o->stop
           : !strcmp(a, "--ds-config")  ? &o->ds_config
           : !strcmp(a, "--logits")     ? &o->logits
           : !strcmp(a, "--trace")      ? &o->trace
                                        : NULL;
}

static float *float_field(struct gen_options *o, const char *a) {
    return !strcmp(a, "--temperature")          ? &o->p.temperature
           : !strcmp(a, "--top-p")              ? &o->p.top_p
           : !strcmp(a, "--repetition-penalty") ? &o->p.repetition_penalty
                                                : NULL;
}

static int int_option(int argc, char **argv, int *i, int64_t min, int *out) {
    int64_t v;
    if (cli_int_option(&g_cli, argc, argv, i, min, &v)) return CLI_EXIT_USAGE;
    if (v > 1 << 30)
        return cli_usage_error(&g_cli, "%s %lld: too large", argv[*i - 1], (long long)v);
    *out = (int)v;
    return 0;
}

static int parse_one(struct gen_options *o, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    const char **text = text_option(o, a);
    float *f = float_field(o, a);
    int64_t seed;
    if (text) return cli_string_option(&g_cli, argc, argv, i, text);
    if (f) return float_option(argc, argv, i, f);
    if (!strcmp(a, "--max-new-tokens")) return int_option(argc, argv, i, 1, &o->p.max_new_tokens);
    if (!strcmp(a, "--top-k")) return int_option(argc, argv, i, 0, &o->p.top_k);
    if (!strcmp(a, "--max-batch")) return int_option(argc, argv, i, 1, &o->max_batch);
    if (!strcmp(a, "--prefill-chunk")) return int_option(argc, argv, i, 1, &o->prefill_chunk);
    if (!strcmp(a, "--seed")) {
        if (cli_int_option(&g_cli, argc, argv, i, 0, &seed)) return CLI_EXIT_USAGE;
        o->p.seed = (uint64_t)seed;
        return 0;
    }
    if (!strcmp(a, "--json")) return o->json = 1, 0;
    if (!strcmp(a, "--quiet")) return o->quiet = 1, 0;
    return cli_usage_error(&g_cli, "unknown option '%s'", a);
}

/* path lies inside directory dir (both resolved; path's file need not exist) */
static int inside(const char *path, const char *dir) {
    char d[PATH_MAX], p[PATH_MAX], parent[PATH_MAX];
    snprintf(parent, sizeof parent, "%s", path);
    char *slash = strrchr(parent, '/');
    if (slash) *slash = '\0';
    else snprintf(parent, sizeof parent, ".");
    if (!realpath(dir, d) || !realpath(parent[0] ? parent : "/", p)) return 0;
    size_t n = strlen(d);
    return !strncmp(p, d, n) && (p[n] == '\0' || p[n] == '/');
}

/* an output (--logits, --trace) must not name one of the inputs, nor a file in an input
 * directory (it would replace it) */
static int check_output(const struct gen_options *o, const char *flag, const char *out) {
    const char *inputs[] = {o->model, o->weights, o->prompts, o->ds_config};
    const char *flags[] = {"--model", "--weights", "--prompts", "--ds-config"};
    const char *dirs[] = {o->tokenizer, o->checkpoint}, *dflags[] = {"--tokenizer", "--checkpoint"};
    for (int i = 0; out && i < 4; i++)
        if (inputs[i] && cli_same_file(out, inputs[i]))
            return cli_usage_error(&g_cli, "%s %s names the same file as %s: an output must not "
                                   "replace an input", flag, out, flags[i]);
    for (int i = 0; out && i < 2; i++)
        if (dirs[i] && inside(out, dirs[i]))
            return cli_usage_error(&g_cli, "%s %s is inside the %s directory %s: an output must "
                                   "not replace an input", flag, out, dflags[i], dirs[i]);
    return 0;
}

static int check_outputs(const struct gen_options *o) {
    char replay[4096] = "";
    if (o->trace) zt_tracefile_replay_path(replay, sizeof replay, o->trace);
    int rc = check_output(o, "--logits", o->logits);
    if (!rc) rc = check_output(o, "--trace", o->trace);
    if (!rc) rc = check_output(o, "--trace (its replay file)", replay[0] ? replay : NULL);
    if (!rc && o->logits && o->trace &&
        (cli_same_file(o->logits, o->trace) || cli_same_file(o->logits, replay)))
        rc = cli_usage_error(&g_cli, "--logits %s and --trace %s name the same file", o->logits,
                             o->trace);
    return rc;
}

static int check_options(const struct gen_options *o) {
    int sources = !!o->prompt + !!o->prompt_ids + !!o->prompts;
    if (!o->model) return cli_usage_error(&g_cli, "missing --model");
    if (!o->weights == !o->checkpoint)
        return cli_usage_error(&g_cli, "expected one of --weights and --checkpoint");
    if (sources != 1)
        return cli_usage_error(&g_cli, "expected one of --prompt, --prompt-ids and --prompts");
    if (o->stop && !*o->stop) return cli_usage_error(&g_cli, "--stop: expected a non-empty text");
    if ((o->prompt || o->stop) && !o->tokenizer)
        return cli_usage_error(&g_cli, "%s needs --tokenizer", o->prompt ? "--prompt" : "--stop");
    const struct zt_gen_params *p = &o->p;
    if (!(p->temperature >= 0) || isinf(p->temperature))
        return cli_usage_error(&g_cli, "--temperature %g: expected a finite number >= 0",
                               p->temperature);
    if (!(p->top_p > 0) || p->top_p > 1)
        return cli_usage_error(&g_cli, "--top-p %g: expected a number in (0, 1]", p->top_p);
    if (!(p->repetition_penalty > 0) || isinf(p->repetition_penalty))
        return cli_usage_error(&g_cli, "--repetition-penalty %g: expected a finite number > 0",
                               p->repetition_penalty);
    return check_outputs(o);
}

static int parse(struct gen_options *o, int argc, char **argv) {
    *o = (struct gen_options){.max_batch = 8,
                              .p = {.max_new_tokens = 32, .temperature = 1.0f, .top_p = 1.0f,
                                    .repetition_penalty = 1.0f, .eos_id = -1}};
    for (int i = 1; i < argc; i++) {
        int rc = parse_one(o, argc, argv, &i);
        if (rc) return rc;
    }
    return check_options(o);
}

// ----------------------------------------------------------------------------
// output: each prompt's tokens as they come, its JSON line when it ends, in input order

struct run {
    struct gen_options *o;
    struct zt_tokenizer *tok;
    struct gen_prompt *pr;  /* [n] */
    int n, next_out;        /* the next prompt to print (input order) */
    double t0;
};

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* the stop strings of the run: --stop, or none */
static int stops(const struct run *r, const char *const **list) {
    *list = (const char *const *)&r->o->stop;
    return r->o->stop ? 1 : 0;
}

/* what prompt p has generated and not yet shown: its ids, or its text up to the last whole
 * character (all of it, invalid bytes as U+FFFD, when it has ended) */
static void stream_out(struct run *r, struct gen_prompt *p, int ended) {
    if (r->o->json) return;
    if (!r->tok) {
        for (; p->shown < p->nout; p->shown++)
            printf("%s%d", p->shown ? " " : "", p->out[p->shown]);
    } else if (p->text.text) {
        const char *const *stop;
        int nstops = stops(r, &stop);
        size_t n = gen_text_showable(&p->text, stop, nstops, ended), shown = (size_t)p->shown;
        if (n > shown && ended) {
            char *rest = gen_utf8_lossy(p->text.text + shown);
            fputs(rest ? rest : "", stdout);
            free(rest);
        } else if (n > shown) {
            fwrite(p->text.text + shown, 1, n - shown, stdout);
        }
        if (n > shown) p->shown = (int)n;
    }
    fflush(stdout);
}

static void print_json(struct run *r, const struct gen_prompt *p) {
    printf("{\"prompt_ids\": [");
    for (int i = 0; i < p->nids; i++) printf("%s%d", i ? ", " : "", p->ids[i]);
    printf("], \"ids\": [");
    for (int i = 0; i < p->nout; i++) printf("%s%d", i ? ", " : "", p->out[i]);
    printf("]");
    if (r->tok) {
        char *text = gen_utf8_lossy(p->text.text ? p->text.text : "");
        printf(", \"text\": ");
        gen_print_json_string(stdout, text ? text : "");
        free(text);
    }
    double gen_ms = p->ms_done - p->ms_first;
    printf(", \"finish_reason\": \"%s\", \"ms_first_token\": %.3f, \"tokens_per_s\": %.3f}\n",
           zt_finish_name(p->finish), p->ms_first - r->t0,
           p->nout > 1 && gen_ms > 0 ? (p->nout - 1) * 1000.0 / gen_ms : 0.0);
}

/* print every finished prompt that is next in input order (one the engine's failure ended is
 * not printed, nor any after it: the run fails with its error) */
static void flush_done(struct run *r) {
    while (r->next_out < r->n && r->pr[r->next_out].finish != ZT_FINISH_NONE &&
           r->pr[r->next_out].finish != ZT_FINISH_ERROR) {
        struct gen_prompt *p = &r->pr[r->next_out++];
        if (r->o->json) print_json(r, p);
        else {
            stream_out(r, p, 1);
            printf("\n");
        }
    }
    fflush(stdout);
}

static int on_token(void *user, int64_t id, int32_t token, enum zt_finish finish) {
    struct run *r = user;
    struct gen_prompt *p = &r->pr[id];
    double t = now_ms();
    if (finish != ZT_FINISH_NONE) {
        p->finish = p->text.stopped ? ZT_FINISH_STOP : finish;
        p->ms_done = t;
        if (!p->nout) p->ms_first = t;
        flush_done(r);
        return 0;
    }
    if (!p->nout) p->ms_first = t;
    p->out[p->nout++] = token;
    if (r->tok) {
        const char *const *stop;
        int nstops = stops(r, &stop);
        gen_text_update(&p->text, r->tok, p->out, p->nout, stop, nstops);
    }
    if (r->next_out == (int)id) stream_out(r, p, 0);
    return p->text.stopped;
}

// ----------------------------------------------------------------------------
// the run

/* every prompt against the model before anything is loaded; a prompts-file line is named */
static int check_prompts(struct run *r, const struct zt_model_shape *s) {
    for (int i = 0; i < r->n; i++) {
        if (zt_generator_check_request(s, r->pr[i].ids, r->pr[i].nids, &r->pr[i].p) == ZT_OK)
            continue;
        if (r->o->prompts) {
            char msg[1024];
            snprintf(msg, sizeof msg, "%s", zt_error_last());
            zt_error_set(ZT_ERR_INVALID, "%s:%d: %s", r->o->prompts, r->pr[i].line, msg);
        }
        return cli_fail(&g_cli, CLI_EXIT_USAGE);
    }
    return 0;
}

static int load_inputs(struct run *r, struct zt_model_shape *shape) {
    const struct gen_options *o = r->o;
    if (zt_model_shape_load(shape, o->model) != ZT_OK) return cli_fail(&g_cli, CLI_EXIT_USAGE);
    if (o->tokenizer && zt_tokenizer_load(&r->tok, o->tokenizer) != ZT_OK)
        return cli_fail(&g_cli, CLI_EXIT_FAILURE);
    enum zt_status rc = o->prompts ? gen_prompts_load(o->prompts, r->tok, &o->p, &r->pr, &r->n)
                        : o->prompt ? gen_prompt_text(o->prompt, r->tok, &o->p, &r->pr, &r->n)
                                    : gen_prompt_ids(o->prompt_ids, &o->p, &r->pr, &r->n);
    if (rc != ZT_OK) return cli_fail(&g_cli, rc == ZT_ERR_IO ? CLI_EXIT_FAILURE : CLI_EXIT_USAGE);
    int eos = r->tok ? zt_tokenizer_special_id(r->tok, "<|endoftext|>") : -1;
    for (int i = 0; i < r->n; i++) {
        r->pr[i].p.eos_id = eos;
        r->pr[i].out = calloc((size_t)shape->seq_len, sizeof(int32_t));
        if (!r->pr[i].out) return zt_error_set(ZT_ERR_NOMEM, "out of memory"),
                                  cli_fail(&g_cli, CLI_EXIT_FAILURE);
    }
    char replay[4096] = "";
    if (o->trace) zt_tracefile_replay_path(replay, sizeof replay, o->trace);
    if ((o->logits && cli_check_output_file("--logits", o->logits, 0) != ZT_OK) ||
        (o->trace && (cli_check_output_file("--trace", o->trace, 0) != ZT_OK ||
                      cli_check_output_file("--trace", replay, 0) != ZT_OK)))
        return cli_fail(&g_cli, CLI_EXIT_FAILURE);
    return check_prompts(r, shape);
}

static int submit_all(struct run *r, zt_generator_t g, const struct zt_model_shape *s,
                      float **logits) {
    if (r->o->logits) {
        *logits = calloc((size_t)r->pr[0].nids * (size_t)s->vocab_size, sizeof(float));
        if (!*logits) return zt_error_set(ZT_ERR_NOMEM, "out of memory for --logits"),
                             cli_fail(&g_cli, CLI_EXIT_FAILURE);
    }
    for (int i = 0; i < r->n; i++) {
        int64_t id;
        if (zt_generator_submit(g, r->pr[i].ids, r->pr[i].nids, &r->pr[i].p, on_token, r,
                                i == 0 ? *logits : NULL, &id) != ZT_OK)
            return cli_fail(&g_cli, CLI_EXIT_FAILURE);
    }
    return 0;
}

static enum zt_status write_logits(const char *path, const float *logits, int rows, int V) {
    struct zt_st_entry e = {.name = "logits", .ndim = 2, .shape = {rows, V}, .data = logits};
    return zt_st_write_f32(path, &e, 1, NULL);
}

static void summary(const struct run *r, double ms) {
    int64_t tokens = 0;
    double first = 0;
    for (int i = 0; i < r->n; i++) tokens += r->pr[i].nout;
    for (int i = 0; i < r->n; i++)
        if (r->pr[i].nout && (first == 0 || r->pr[i].ms_first - r->t0 < first))
            first = r->pr[i].ms_first - r->t0;
    fprintf(stderr, "peak memory: %.1f MiB resident (VmHWM)\n", cli_peak_rss_kib() / 1024.0);
    fprintf(stderr, "zt-generate: %d prompt(s), %lld new tokens in %.0f ms (%.1f tokens/s), "
            "first token after %.1f ms\n", r->n, (long long)tokens, ms,
            ms > 0 ? tokens * 1000.0 / ms : 0.0, first);
}

/* tracing on, with what zt-trace needs to know of the run (docs/traces.md, "meta") */
static void trace_begin(void) {
    char v[64];
    zt_trace_enable(1);
    snprintf(v, sizeof v, "%d", zt_runtime_nworkers());
    zt_trace_meta("workers", v);
    snprintf(v, sizeof v, "%ld", sysconf(_SC_NPROCESSORS_ONLN));
    zt_trace_meta("cores", v);
    zt_trace_meta("sched", zt_runtime_sched_name());
    zt_trace_meta("world", "1");
    zt_trace_meta("program", "zt-generate");
}

static int generate(struct run *r, const struct zt_model_shape *s, struct zt_gen_config *cfg,
                    const struct zt_gen_weights *w) {
    zt_generator_t g = NULL;
    float *logits = NULL;
    int rc = 0;
    if (zt_generator_create(&g, s, w, cfg) != ZT_OK)
        rc = cli_fail(&g_cli, zt_error_last_code() == ZT_ERR_CONFIG ? CLI_EXIT_USAGE
                                                                   : CLI_EXIT_FAILURE);
    if (!rc && r->o->trace) trace_begin();
    if (!rc) rc = submit_all(r, g, s, &logits);
    if (!rc && !r->o->quiet) {
        char line[512];
        zt_generator_plan(g, line, sizeof line);
        fprintf(stderr, "%s\n", line);
    }
    r->t0 = now_ms();
    if (!rc && zt_generator_run(g) != ZT_OK) rc = cli_fail(&g_cli, CLI_EXIT_FAILURE);
    double ms = now_ms() - r->t0;
    if (!rc && logits && write_logits(r->o->logits, logits, r->pr[0].nids, s->vocab_size))
        rc = cli_fail(&g_cli, CLI_EXIT_FAILURE);
    if (!rc && r->o->trace &&
        zt_trace_write(r->o->trace, zt_task_kind_names(), ZT_KIND_COUNT) != ZT_OK)
        rc = cli_fail(&g_cli, CLI_EXIT_FAILURE);
    if (!rc && !r->o->quiet) summary(r, ms);
    free(logits);
    zt_generator_free(g);
    return rc;
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (cli_is_help(argv[i])) return fputs(usage_text, stdout), 0;
    struct gen_options o;
    int rc = parse(&o, argc, argv);
    if (rc) return rc;
    struct run r = {.o = &o};
    struct zt_model_shape shape;
    struct zt_gen_config cfg = {.max_batch = o.max_batch, .prefill_chunk = o.prefill_chunk};
    struct zt_gen_weights w = {.safetensors = o.weights, .checkpoint = o.checkpoint};
    rc = load_inputs(&r, &shape);
    if (!rc && o.ds_config && gen_ds_config_load(o.ds_config, &cfg, &w.dtype) != ZT_OK)
        rc = cli_fail(&g_cli, zt_error_last_code() == ZT_ERR_IO ? CLI_EXIT_FAILURE
                                                               : CLI_EXIT_USAGE);
    if (!rc) rc = generate(&r, &shape, &cfg, &w);
    free((char *)cfg.nvme_path); /* gen_ds_config_load's copy */
    gen_prompts_free(r.pr, r.n);
    zt_tokenizer_free(r.tok);
    return rc;
}
