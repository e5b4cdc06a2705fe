/*
 * apps/zt_serve/serve.h: what the parts of zt-serve share: the options, the server (model,
 * tokenizer, generator, admission counts, metrics) and the functions of each file.
 *
 * Layer: apps/ (zt-serve only). Threads: libmicrohttpd runs one thread per connection
 * (http.c); the generator steps on its own thread (zt_generator_start) and calls back
 * completion.c on it; the main thread waits for SIGTERM/SIGINT and drains (main.c).
 */
#ifndef ZT_SERVE_H
#define ZT_SERVE_H

#include <pthread.h>   /* pthread_mutex_t */
#include <stddef.h>    /* size_t */
#include <stdint.h>    /* int64_t */
#include "metrics.h"   /* struct serve_metrics */
#include "zerotask.h"  /* zt_generator_t, struct zt_tokenizer */

struct serve_options {
    const char *model, *weights, *checkpoint, *tokenizer, *ds_config, *host, *name;
    int port, max_batch, max_queue, max_prefill, prefill_chunk, timeout_s;
    size_t max_body;
};

struct serve {
    const struct serve_options *o;
    struct zt_model_shape shape;
    struct zt_tokenizer *tok;
    zt_generator_t gen;
    const char *model_name;   /* what /v1/models lists and requests must name */
    int eos_id;               /* <|endoftext|>, or -1 */
    int64_t started;          /* unix time, for "created" */
    pthread_mutex_t mu;       /* the counts below */
    int inflight;             /* prompts submitted to the generator and not finished */
    int unstarted;            /* of those, the ones without their first token yet */
    int draining;             /* SIGTERM: no new work */
    int64_t next_cmpl;        /* completion ids */
    struct serve_metrics metrics;
};

/* ---- admission (main.c) ---- */
/* room for n more prompts (running + queued <= max_batch + max_queue; fewer than max_prefill
 * without their first token) and not draining: taken (1), else 0 and *why says what stopped
 * it (429 or 503) */
int serve_admit(struct serve *s, int n, int *status);
/* an admitted prompt has its first token */
void serve_started(struct serve *s);
/* n prompts that were admitted and will not run, or have finished; `unstarted` of them had no
 * first token */
void serve_release(struct serve *s, int n, int unstarted);
int serve_inflight(struct serve *s);
int serve_unstarted(struct serve *s);
/* whether the server is at capacity (every slot and queue place taken, or --max-prefill
 * prompts without their first token; not draining: a new completion would get 429 whatever it
 * asks; a draining server's answer is serve_admit's 503) */
int serve_full(struct serve *s);

/* ---- HTTP (http.c) ---- */
struct MHD_Daemon;
/* the daemon on o->host:o->port (port 0: any free one; *port: the one bound) */
struct MHD_Daemon *serve_http_start(struct serve *s, int *port);
/* stop accepting connections (those open go on); how many are open */
void serve_http_quiesce(struct MHD_Daemon *d);
int serve_http_connections(struct MHD_Daemon *d);
void serve_http_stop(struct MHD_Daemon *d);

#endif /* ZT_SERVE_H */
