/*
 * apps/zt_serve/main.c: zt-serve, an OpenAI-compatible completions server on the inference
 * engine: options, loading, the generator's stepping thread, the HTTP daemon, and the drain on
 * SIGTERM/SIGINT (new requests get 503, running ones finish, then the process exits 0).
 *
 * Layer: apps/. The admission counts (how many prompts the server holds) live here too.
 */
#include <arpa/inet.h> /* inet_pton */
#include <limits.h>   /* INT_MAX */
#include <signal.h>   /* sigwait */
#include <stdio.h>    /* fprintf */
#include <stdlib.h>   /* free */
#include <string.h>   /* strcmp, strrchr */
#include <time.h>     /* time, nanosleep */
#include "cli.h"
#include "generate_input.h" /* gen_ds_config_load */
#include "serve.h"


static const struct cli_program g_cli = {"zt-serve", "zt-serve", 1};

static const char *usage_text =
    "usage: zt-serve --model M.json (--weights W.safetensors | --checkpoint DIR) --tokenizer DIR\n"
    "                [--host 127.0.0.1] [--port 8080] [--max-batch 8] [--max-queue 64]\n"
    "                [options]\n"
    "\n"
    "Serve a GPT-2 trained by zerotask over HTTP with an OpenAI-compatible API. Requests share\n"
    "the generation engine's steps (continuous batching: a prompt joins at the next step and\n"
    "leaves when it ends; long prompts are fed in chunks between the running prompts' decode\n"
    "steps).\n"
    "\n"
    "  --model M.json        model shape (vocab_size, seq_len, n_embd, n_layer, n_head)\n"
    "  --weights W           safetensors with HF GPT-2 names (F32/BF16/F16)\n"
    "  --checkpoint DIR      a zerotask checkpoint (DIR's latest, or DIR/<tag>)\n"
    "  --tokenizer DIR       Hugging Face tokenizer files (tokenizer.json or vocab.json +\n"
    "                        merges.txt); <|endoftext|> ends a completion (finish_reason stop)\n"
    "  --model-name NAME     the model's name in /v1/models and requests (default: M.json's\n"
    "                        file name without .json)\n"
    "  --host ADDR           address to listen on (default 127.0.0.1: this machine only)\n"
    "  --port P              port (default 8080; 0: any free one, printed at start)\n"
    "  --max-batch N         prompts decoded together: KV-cache slots (default 8)\n"
    "  --max-queue Q         prompts waiting for a slot beyond them; more get 429 with\n"
    "                        Retry-After (default 64)\n"
    "  --max-prefill P       while P admitted prompts have no first token yet (queued or\n"
    "                        being fed), completions get 429: a burst is refused instead of\n"
    "                        sharing the prompt steps (default 0: no limit but the two above)\n"
    "  --prefill-chunk N     prompt tokens a prompt feeds per step (default 256)\n"
    "  --timeout S           close a connection idle for S seconds (default 30)\n"
    "  --max-body BYTES      largest request body (default 1048576); larger: 413\n"
    "  --ds-config F         DeepSpeed inference keys (dtype, zero_optimization.offload_param,\n"
    "                        aio), as zt-generate takes them\n"
    "  --help                this text\n"
    "\n"
    "Endpoints: POST /v1/completions (prompt, max_tokens, temperature, top_p, top_k, stop,\n"
    "seed, stream, stream_options.include_usage, repetition_penalty), POST /v1/tokenize,\n"
    "POST /v1/detokenize, GET /v1/models, GET /health, GET /metrics (Prometheus).\n"
    "docs/serving.md has every field, error and metric.\n"
    "\n"
    "stderr: the memory plan and \"zt-serve: listening on http://HOST:PORT\" once ready.\n"
    "Exit status: 0 after a drain (SIGTERM, SIGINT), 2 bad command line or config, 1 any\n"
    "other error.\n";

// ----------------------------------------------------------------------------
// admission

/* prompts that may still be admitted: running + queued below max_batch + max_queue; none while
 * max_prefill (0: no such limit) admitted prompts have no first token yet. (A completion of
 * several prompts is taken whole when fewer than max_prefill wait: never refused for its size
 * alone.) s->mu held */
static int room_locked(const struct serve *s) {
    if (s->o->max_prefill > 0 && s->unstarted >= s->o->max_prefill) return 0;
    return s->o->max_batch + s->o->max_queue - s->inflight;
}

int serve_admit(struct serve *s, int n, int *status) {
    if (zt_generator_status(s->gen) != ZT_OK) return *status = 503, 0;
    pthread_mutex_lock(&s->mu);
    *status = s->draining ? 503 : n > room_locked(s) ? 429 : 200;
    if (*status == 200) s->inflight += n, s->unstarted += n;
    pthread_mutex_unlock(&s->mu);
    return *status == 200;
}

void serve_started(struct serve *s) {
    pthread_mutex_lock(&s->mu);
    s->unstarted--;
    pthread_mutex_unlock(&s->mu);
}

void serve_release(struct serve *s, int n, int unstarted) {
    pthread_mutex_lock(&s->mu);
    s->inflight -= n;
    s->unstarted -= unstarted;
    pthread_mutex_unlock(&s->mu);
}

int serve_full(struct serve *s) {
    pthread_mutex_lock(&s->mu);
    int full = !s->draining && room_locked(s) < 1;
    pthread_mutex_unlock(&s->mu);
    return full;
}

int serve_inflight(struct serve *s) {
    pthread_mutex_lock(&s->mu);
    int n = s->inflight;
    pthread_mutex_unlock(&s->mu);
    return n;
}

int serve_unstarted(struct serve *s) {
    pthread_mutex_lock(&s->mu);
    int n = s->unstarted;
    pthread_mutex_unlock(&s->mu);
    return n;
}

// ----------------------------------------------------------------------------
// options

static const char **text_option(struct serve_options *o, const char *a) {
    return !strcmp(a, "--model")        ? &o->model
           : !strcmp(a, "--weights")    ? &o->weights
           : !strcmp(a, "--checkpoint") ? &o->checkpoint
           : !strcmp(a, "--tokenizer")  ? &o->tokenizer
           : !strcmp(a, "--ds-config")  ? &o->ds_config
           : !strcmp(a, "--host")       ? &o->host
           : !strcmp(a, "--model-name") ? &o->name
                                        : NULL;
}

/* an integer option in [min, max] */
static int int_option(int argc, char **argv, int *i, int64_t min, int64_t max, int64_t *out) {
    if (cli_int_option(&g_cli, argc, argv, i, min, out)) return CLI_EXIT_USAGE;
    if (*out > max)
        return cli_usage_error(&g_cli, "%s %lld: expected at most %lld", argv[*i - 1],
                               (long long)*out, (long long)max);
    return 0;
}

static int parse_one(struct serve_options *o, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    const char **text = text_option(o, a);
    int64_t v;
    if (text) return cli_string_option(&g_cli, argc, argv, i, text);
    int rc = !strcmp(a, "--port")            ? int_option(argc, argv, i, 0, 65535, &v)
             : !strcmp(a, "--max-batch")     ? int_option(argc, argv, i, 1, 4096, &v)
             : !strcmp(a, "--max-queue")     ? int_option(argc, argv, i, 0, 1 << 20, &v)
             : !strcmp(a, "--max-prefill")   ? int_option(argc, argv, i, 0, 1 << 20, &v)
             : !strcmp(a, "--prefill-chunk") ? int_option(argc, argv, i, 1, 1 << 20, &v)
             : !strcmp(a, "--timeout")       ? int_option(argc, argv, i, 1, 86400, &v)
             : !strcmp(a, "--max-body")      ? int_option(argc, argv, i, 1024, 1 << 30, &v)
                                             : cli_usage_error(&g_cli, "unknown option '%s'", a);
    if (rc) return rc;
    if (!strcmp(a, "--port")) o->port = (int)v;
    else if (!strcmp(a, "--max-batch")) o->max_batch = (int)v;
    else if (!strcmp(a, "--max-queue")) o->max_queue = (int)v;
    else if (!strcmp(a, "--max-prefill")) o->max_prefill = (int)v;
    else if (!strcmp(a, "--prefill-chunk")) o->prefill_chunk = (int)v;
    else if (!strcmp(a, "--timeout")) o->timeout_s = (int)v;
    else o->max_body = (size_t)v;
    return 0;
}

static int parse(struct serve_options *o, int argc, char **argv) {
    *o = (struct serve_options){.host = "127.0.0.1", .port = 8080, .max_batch = 8,
                                .max_queue = 64, .timeout_s = 30, .max_body = 1 << 20};
    for (int i = 1; i < argc; i++) {
        int rc = parse_one(o, argc, argv, &i);
        if (rc) return rc;
    }
    if (!o->model) return cli_usage_error(&g_cli, "--model is required");
    if (!o->weights == !o->checkpoint)
        return cli_usage_error(&g_cli, "give exactly one of --weights and --checkpoint");
    if (!o->tokenizer) return cli_usage_error(&g_cli, "--tokenizer is required");
    unsigned char addr[16];
    if (inet_pton(AF_INET, o->host, addr) != 1 && inet_pton(AF_INET6, o->host, addr) != 1)
        return cli_usage_error(&g_cli, "--host %s: expected an IPv4 or IPv6 address "
                               "(127.0.0.1, 0.0.0.0, ::1)", o->host);
    return 0;
}

// ----------------------------------------------------------------------------
// the run

/* the model's name: --model-name, or the model file's name less its directory and .json */
static void name_model(struct serve *s, char *buf, size_t n) {
    if (s->o->name) {
        snprintf(buf, n, "%s", s->o->name);
    } else {
        const char *b = strrchr(s->o->model, '/');
        snprintf(buf, n, "%s", b ? b + 1 : s->o->model);
        size_t k = strlen(buf);
        if (k > 5 && !strcmp(buf + k - 5, ".json")) buf[k - 5] = '\0';
    }
    s->model_name = buf;
}

static int load(struct serve *s, struct zt_gen_config *cfg, struct zt_gen_weights *w) {
    const struct serve_options *o = s->o;
    if (zt_model_shape_load(&s->shape, o->model) != ZT_OK) return cli_fail(&g_cli, CLI_EXIT_USAGE);
    if (zt_tokenizer_load(&s->tok, o->tokenizer) != ZT_OK)
        return cli_fail(&g_cli, CLI_EXIT_FAILURE);
    if (zt_tokenizer_vocab_size(s->tok) > s->shape.vocab_size)
        return zt_error_set(ZT_ERR_CONFIG, "--tokenizer %s: %d tokens, more than the model's "
                            "vocab_size %d", o->tokenizer, zt_tokenizer_vocab_size(s->tok),
                            s->shape.vocab_size), cli_fail(&g_cli, CLI_EXIT_USAGE);
    s->eos_id = zt_tokenizer_special_id(s->tok, "<|endoftext|>");
    if (o->ds_config && gen_ds_config_load(o->ds_config, cfg, &w->dtype) != ZT_OK)
        return cli_fail(&g_cli, zt_error_last_code() == ZT_ERR_IO ? CLI_EXIT_FAILURE
                                                                 : CLI_EXIT_USAGE);
    if (zt_generator_create(&s->gen, &s->shape, w, cfg) != ZT_OK)
        return cli_fail(&g_cli, zt_error_last_code() == ZT_ERR_CONFIG ? CLI_EXIT_USAGE
                                                                     : CLI_EXIT_FAILURE);
    if (zt_generator_start(s->gen) != ZT_OK) return cli_fail(&g_cli, CLI_EXIT_FAILURE);
    return 0;
}

static void sleep_ms(long ms) {
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

/* no new work; the admitted prompts run to their end; the connections finish writing (for up
 * to --timeout seconds: an idle keep-alive connection is not waited for longer); the daemon
 * stops */
static void drain(struct serve *s, struct MHD_Daemon *d) {
    pthread_mutex_lock(&s->mu);
    s->draining = 1;
    pthread_mutex_unlock(&s->mu);
    fprintf(stderr, "zt-serve: draining %d prompt(s)\n", serve_inflight(s));
    while (serve_inflight(s) > 0) sleep_ms(10);
    serve_http_quiesce(d);
    for (int waited = 0; serve_http_connections(d) > 0 && waited < s->o->timeout_s * 100;
         waited++)
        sleep_ms(10);
    serve_http_stop(d);
}

/* the signals that drain the server */
static void stop_signals(sigset_t *set) {
    sigemptyset(set);
    sigaddset(set, SIGTERM);
    sigaddset(set, SIGINT);
}

static int serve(struct serve *s) {
    int port;
    struct MHD_Daemon *d = serve_http_start(s, &port);
    if (!d) return cli_fail(&g_cli, zt_error_last_code() == ZT_ERR_CONFIG ? CLI_EXIT_USAGE
                                                                         : CLI_EXIT_FAILURE);
    char plan[512]; /* after the bind: a refused start is one line */
    zt_generator_plan(s->gen, plan, sizeof plan);
    fprintf(stderr, "%s\n", plan);
    char prefill[48] = "";
    if (s->o->max_prefill > 0) snprintf(prefill, sizeof prefill, ", prefill %d", s->o->max_prefill);
    fprintf(stderr, "zt-serve: listening on http://%s:%d (model %s, %d slots, queue %d%s)\n",
            s->o->host, port, s->model_name, s->o->max_batch, s->o->max_queue, prefill);
    sigset_t set;
    stop_signals(&set);
    int sig = 0;
    sigwait(&set, &sig);
    fprintf(stderr, "zt-serve: %s (again to stop at once)\n", sig == SIGTERM ? "SIGTERM"
                                                                            : "SIGINT");
    pthread_sigmask(SIG_UNBLOCK, &set, NULL); /* a second one ends the process */
    drain(s, d);
    fprintf(stderr, "zt-serve: stopped\n");
    return 0;
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (cli_is_help(argv[i])) return fputs(usage_text, stdout), 0;
    struct serve_options o;
    int rc = parse(&o, argc, argv);
    if (rc) return rc;
    /* every thread started from here on leaves SIGTERM/SIGINT to sigwait */
    sigset_t set;
    stop_signals(&set);
    sigaddset(&set, SIGPIPE); /* a client gone mid-write: an error, not the end of the server */
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    struct serve s = {.o = &o, .eos_id = -1, .started = (int64_t)time(NULL)};
    pthread_mutex_init(&s.mu, NULL);
    serve_metrics_init(&s.metrics);
    char name[256];
    name_model(&s, name, sizeof name);
    struct zt_gen_config cfg = {.max_batch = o.max_batch, .prefill_chunk = o.prefill_chunk};
    struct zt_gen_weights w = {.safetensors = o.weights, .checkpoint = o.checkpoint};
    rc = load(&s, &cfg, &w);
    if (!rc) rc = serve(&s);
    zt_generator_free(s.gen); /* stops its thread */
    free((char *)cfg.nvme_path); /* gen_ds_config_load's copy */
    zt_tokenizer_free(s.tok);
    serve_metrics_free(&s.metrics);
    pthread_mutex_destroy(&s.mu);
    return rc;
}
