/*
 * apps/zt_serve/completion.c: a completion's prompts from submission to the last byte sent
 * (completion.h).
 *
 * The generator's thread calls on_token for each token and once more when a prompt ends; it
 * appends the token, updates the prompt's text (stop strings cut it, gen_text.c) and wakes the
 * connection's thread. That thread either waits for the end and writes one JSON body, or turns
 * what is new into Server-Sent Events: a chunk per prompt with new text (held back while it
 * ends inside a UTF-8 character or may be the start of a stop string), a chunk with its
 * finish_reason when it ends, the usage chunk when asked, then "data: [DONE]". Waiting a
 * second with nothing new sends an SSE comment, which also notices a client that left.
 */
#define _GNU_SOURCE      /* POLLRDHUP */
#include <errno.h>       /* ETIMEDOUT */
#include <microhttpd.h>  /* MHD_CONTENT_READER_END_OF_STREAM */
#include <poll.h>        /* poll, POLLRDHUP */
#include <pthread.h>
#include <stdio.h>       /* snprintf */
#include <stdlib.h>      /* calloc, free, realloc */
#include <string.h>      /* memcpy */
#include <time.h>        /* clock_gettime, time */
#include <cjson/cJSON.h>
#include "completion.h"
#include "gen_text.h"
#include "generate_input.h" /* gen_utf8_lossy */

struct cmpl_prompt {
    struct completion *c;
    int index;
    int64_t id;            /* the generator's */
    int32_t *ids, *out;    /* the prompt; the generated ids (room for the context) */
    int nids, nout;
    struct gen_text text;  /* of out, cut before a stop string */
    size_t *shown_at;      /* [k]: bytes of text that may be shown after k tokens */
    int tokens_sent;       /* stream: tokens whose text has been sent */
    size_t sent;           /* stream: bytes of text sent */
    enum zt_finish finish; /* NONE while it runs */
    int final_sent;        /* stream: its finish_reason chunk is queued */
    int cancel_seen;       /* counted as cancelled */
    double t_last;         /* its last token (or its arrival) */
};

struct completion {
    struct serve *s;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs, running, cancelled;
    int stream, include_usage;
    char *stops[API_MAX_STOPS];
    int nstops;
    int n;
    struct cmpl_prompt *pr;
    char id[48];
    uint64_t serial;       /* the server's count of completions */
    int64_t created;
    double t0;
    int fd;                /* the client's socket (-1: not watched) */
    int gone;              /* the client was seen to leave: no answer is sent */
    double checked;        /* when the socket was last looked at */
    char *pend;            /* stream bytes not handed to libmicrohttpd yet */
    size_t plen, poff, pcap;
    int done;              /* "data: [DONE]" queued */
    int idle_waits;        /* 100 ms waits with nothing new (a comment every 10) */
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void drop(struct completion *c) {
    pthread_mutex_lock(&c->mu);
    int last = --c->refs == 0;
    pthread_mutex_unlock(&c->mu);
    if (!last) return;
    for (int i = 0; i < c->n; i++) {
        free(c->pr[i].ids);
        free(c->pr[i].out);
        free(c->pr[i].shown_at);
        gen_text_free(&c->pr[i].text);
    }
    for (int i = 0; i < c->nstops; i++) free(c->stops[i]);
    free(c->pr);
    free(c->pend);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    free(c);
}

// ----------------------------------------------------------------------------
// the generator's side

static void ended(struct cmpl_prompt *p, enum zt_finish why, double t) {
    struct completion *c = p->c;
    struct serve_metrics *m = &c->s->metrics;
    p->finish = p->text.stopped ? ZT_FINISH_STOP : why;
    c->running--;
    serve_metrics_e2e(m, t - c->t0);
    serve_metrics_tokens(m, p->nids, p->nout);
}

static int on_token(void *user, int64_t id, int32_t token, enum zt_finish finish) {
    (void)id;
    struct cmpl_prompt *p = user;
    struct completion *c = p->c;
    struct serve_metrics *m = &c->s->metrics;
    double t = now_s();
    pthread_mutex_lock(&c->mu);
    if (finish != ZT_FINISH_NONE) {
        ended(p, finish, t);
        int unstarted = p->nout == 0;
        pthread_cond_broadcast(&c->cv);
        pthread_mutex_unlock(&c->mu);
        serve_release(c->s, 1, unstarted);
        drop(c);
        return 0;
    }
    int first = p->nout == 0;
    if (first) serve_metrics_ttft(m, t - c->t0);
    else serve_metrics_itl(m, t - p->t_last);
    p->t_last = t;
    p->out[p->nout++] = token;
    gen_text_update(&p->text, c->s->tok, p->out, p->nout, (const char *const *)c->stops,
                    c->nstops);
    p->shown_at[p->nout] = gen_text_showable(&p->text, (const char *const *)c->stops, c->nstops,
                                             0);
    int stop = p->text.stopped || c->cancelled;
    if (c->cancelled && !p->cancel_seen) {
        p->cancel_seen = 1;
        serve_metrics_cancelled(m);
    }
    if (first) serve_started(c->s); /* before the client can see the token (s->mu is a leaf) */
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    return stop;
}

// ----------------------------------------------------------------------------
// start

static struct completion *create(struct serve *s, struct api_completion *req) {
    struct completion *c = calloc(1, sizeof *c);
    if (!c || !(c->pr = calloc((size_t)req->nprompts, sizeof *c->pr))) {
        free(c);
        return NULL;
    }
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    c->s = s;
    c->fd = -1;
    c->n = req->nprompts;
    c->refs = 1;
    c->stream = req->stream;
    c->include_usage = req->include_usage;
    c->nstops = req->nstops;
    memcpy(c->stops, req->stops, sizeof c->stops);
    memset(req->stops, 0, sizeof req->stops);
    req->nstops = 0;
    c->t0 = now_s();
    c->created = (int64_t)time(NULL);
    pthread_mutex_lock(&s->mu);
    c->serial = (uint64_t)s->next_cmpl++ ^ (uint64_t)s->started << 20;
    snprintf(c->id, sizeof c->id, "cmpl-%llx%06llx", (unsigned long long)s->started,
             (unsigned long long)(s->next_cmpl - 1));
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < c->n; i++) {
        struct cmpl_prompt *p = &c->pr[i];
        *p = (struct cmpl_prompt){.c = c, .index = i, .ids = req->ids[i], .nids = req->nids[i],
                                  .t_last = c->t0};
        req->ids[i] = NULL;
        p->out = calloc((size_t)s->shape.seq_len, sizeof *p->out);
        p->shown_at = calloc((size_t)s->shape.seq_len + 1, sizeof *p->shown_at);
        if (!p->out || !p->shown_at) {
            c->refs = 1;
            drop(c);
            return NULL;
        }
    }
    return c;
}

static uint64_t mix64(uint64_t x) { /* splitmix64's finalizer */
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* prompts [0, n) to the generator (without a seed in the request, each prompt its own seed,
 * new for every completion); on a failure, the rest are released and those submitted
 * cancelled */
static int submit(struct completion *c, const struct api_completion *req,
                  struct api_error *err) {
    for (int i = 0; i < c->n; i++) {
        struct zt_gen_params params = req->p;
        if (!req->seeded) params.seed = mix64(c->serial * 0x9E3779B97F4A7C15ull + (uint64_t)i);
        pthread_mutex_lock(&c->mu);
        c->refs++;
        c->running++;
        pthread_mutex_unlock(&c->mu);
        struct cmpl_prompt *p = &c->pr[i];
        if (zt_generator_submit(c->s->gen, p->ids, p->nids, &params, on_token, p, NULL,
                                &p->id) == ZT_OK)
            continue;
        int invalid = zt_error_last_code() == ZT_ERR_INVALID;
        pthread_mutex_lock(&c->mu);
        c->refs--;
        c->running--;
        c->cancelled = 1;
        for (int j = i; j < c->n; j++) c->pr[j].finish = ZT_FINISH_STOP;
        pthread_mutex_unlock(&c->mu);
        serve_release(c->s, c->n - i, c->n - i);
        return api_fail(err, invalid ? 400 : 500, invalid ? "invalid_request_error"
                        : "server_error", NULL, "%s", zt_error_last());
    }
    return 0;
}

void completion_at_capacity(struct serve *s, struct api_error *err) {
    int p = s->o->max_prefill;
    if (p > 0 && serve_unstarted(s) >= p)
        api_fail(err, 429, "rate_limit_error", NULL, "the server is at capacity (--max-prefill "
                 "%d: that many admitted prompts still wait for their first token); retry later",
                 p);
    else
        api_fail(err, 429, "rate_limit_error", NULL, "the server is at capacity (--max-batch "
                 "running and --max-queue waiting); retry later");
}

struct completion *completion_start(struct serve *s, struct api_completion *req,
                                    struct api_error *err) {
    int status;
    if (!serve_admit(s, req->nprompts, &status)) {
        if (status == 429)
            completion_at_capacity(s, err);
        else if (zt_generator_status(s->gen) != ZT_OK)
            api_fail(err, 503, "service_unavailable", NULL, "the generation engine failed: %s",
                     zt_error_last());
        else
            api_fail(err, 503, "service_unavailable", NULL, "the server is shutting down");
        return NULL;
    }
    struct completion *c = create(s, req);
    if (!c) {
        serve_release(s, req->nprompts, req->nprompts);
        api_fail(err, 500, "server_error", NULL, "out of memory");
        return NULL;
    }
    if (submit(c, req, err)) {
        drop(c);
        return NULL;
    }
    return c;
}

int completion_streams(const struct completion *c) { return c->stream; }

void completion_watch(struct completion *c, int fd) { c->fd = fd; }

/* the client has closed its side or the socket failed (looked at once per 100 ms at most;
 * c->mu held). A client that shuts down only its sending side counts as gone. */
static int client_gone(struct completion *c) {
    double t = now_s();
    if (c->gone || c->fd < 0 || t - c->checked < 0.1) return c->gone;
    c->checked = t;
    struct pollfd p = {.fd = c->fd, .events = POLLRDHUP};
    c->gone = poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
    return c->gone;
}

/* wait on c->cv for at most ms (c->mu held); 1 on a timeout */
static int wait_ms(struct completion *c, long ms) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += ms * 1000000L;
    until.tv_sec += until.tv_nsec / 1000000000L;
    until.tv_nsec %= 1000000000L;
    return pthread_cond_timedwait(&c->cv, &c->mu, &until) == ETIMEDOUT;
}

/* a running prompt stops at its next token; a waiting one leaves the queue now (its call-back
 * runs here, outside the lock; the caller's reference keeps c alive meanwhile) */
static void cancel_prompts(struct completion *c) {
    pthread_mutex_lock(&c->mu);
    int cancel = c->running > 0;
    if (cancel) c->cancelled = 1;
    pthread_mutex_unlock(&c->mu);
    for (int i = 0; cancel && i < c->n; i++) {
        pthread_mutex_lock(&c->mu);
        int waiting = c->pr[i].finish == ZT_FINISH_NONE && c->pr[i].nout == 0;
        pthread_mutex_unlock(&c->mu);
        if (waiting && zt_generator_cancel(c->s->gen, c->pr[i].id))
            serve_metrics_cancelled(&c->s->metrics);
    }
}

void completion_release(void *cls) {
    struct completion *c = cls;
    cancel_prompts(c);
    drop(c);
}

// ----------------------------------------------------------------------------
// what the client receives

static const char *finish_reason(enum zt_finish f) {
    return f == ZT_FINISH_LENGTH ? "length" : "stop";
}

/* the fields every completion object starts with; choices added by the caller */
static cJSON *object(const struct completion *c) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", c->id);
    cJSON_AddStringToObject(o, "object", "text_completion");
    cJSON_AddNumberToObject(o, "created", (double)c->created);
    cJSON_AddStringToObject(o, "model", c->s->model_name);
    return o;
}

/* text[0..n) as a JSON choice (invalid UTF-8 as U+FFFD); reason NULL: null */
static void add_choice(cJSON *choices, int index, const char *text, size_t n,
                       const char *reason) {
    char *raw = malloc(n + 1), *clean = NULL;
    if (raw) {
        memcpy(raw, text, n);
        raw[n] = '\0';
        clean = gen_utf8_lossy(raw);
    }
    cJSON *ch = cJSON_CreateObject();
    cJSON_AddStringToObject(ch, "text", clean ? clean : "");
    cJSON_AddNumberToObject(ch, "index", index);
    cJSON_AddNullToObject(ch, "logprobs");
    if (reason) cJSON_AddStringToObject(ch, "finish_reason", reason);
    else cJSON_AddNullToObject(ch, "finish_reason");
    cJSON_AddItemToArray(choices, ch);
    free(raw);
    free(clean);
}

static void add_usage(cJSON *o, const struct completion *c) {
    int prompt = 0, gen = 0;
    for (int i = 0; i < c->n; i++) {
        prompt += c->pr[i].nids;
        gen += c->pr[i].nout;
    }
    cJSON *u = cJSON_AddObjectToObject(o, "usage");
    cJSON_AddNumberToObject(u, "prompt_tokens", prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", gen);
    cJSON_AddNumberToObject(u, "total_tokens", prompt + gen);
}

/* a prompt ended because the generator failed */
static int failed(const struct completion *c) {
    for (int i = 0; i < c->n; i++)
        if (c->pr[i].finish == ZT_FINISH_ERROR) return 1;
    return 0;
}

/* the generator's failure as the client's error */
static void engine_error(struct completion *c, struct api_error *err) {
    zt_generator_status(c->s->gen);
    api_fail(err, 500, "server_error", NULL, "the generation engine failed: %s",
             zt_error_last());
}

int completion_wait_json(struct completion *c, char **json) {
    pthread_mutex_lock(&c->mu);
    while (c->running > 0) {
        wait_ms(c, 100);
        if (!c->cancelled && client_gone(c)) {
            pthread_mutex_unlock(&c->mu);
            cancel_prompts(c);
            pthread_mutex_lock(&c->mu);
        }
    }
    if (c->gone || failed(c)) {
        int gone = c->gone;
        pthread_mutex_unlock(&c->mu);
        struct api_error err;
        if (gone) return *json = NULL, 0;
        engine_error(c, &err);
        *json = api_error_json(&err);
        return 500;
    }
    cJSON *o = object(c), *choices = cJSON_AddArrayToObject(o, "choices");
    for (int i = 0; i < c->n; i++) {
        const struct cmpl_prompt *p = &c->pr[i];
        add_choice(choices, i, p->text.text ? p->text.text : "", p->text.len,
                   finish_reason(p->finish));
    }
    add_usage(o, c);
    pthread_mutex_unlock(&c->mu);
    *json = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return 200;
}

// ---- the event stream

static void queue(struct completion *c, const char *a, size_t n) {
    if (c->plen + n > c->pcap) {
        size_t cap = (c->plen + n) * 2;
        char *p = realloc(c->pend, cap);
        if (!p) return; /* out of memory: the event is lost, the stream goes on */
        c->pend = p;
        c->pcap = cap;
    }
    memcpy(c->pend + c->plen, a, n);
    c->plen += n;
}

/* json (taken over; NULL: out of memory, nothing sent) as one event */
static void queue_data(struct completion *c, char *json) {
    if (!json) return;
    queue(c, "data: ", 6);
    queue(c, json, strlen(json));
    queue(c, "\n\n", 2);
    free(json);
}

static void queue_event(struct completion *c, cJSON *o) {
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    queue_data(c, s);
}

/* prompt i's text up to byte upto as an event, when there is some (or it ends: reason) */
static void queue_text(struct completion *c, int i, size_t upto, const char *reason) {
    struct cmpl_prompt *p = &c->pr[i];
    if (upto <= p->sent && !reason) return;
    cJSON *o = object(c), *choices = cJSON_AddArrayToObject(o, "choices");
    add_choice(choices, i, p->text.text ? p->text.text + p->sent : "",
               upto > p->sent ? upto - p->sent : 0, reason);
    queue_event(c, o);
    if (upto > p->sent) p->sent = upto;
}

/* events for what the prompts have that the client has not: new text, ends, then [DONE]; a
 * failed generator: an error event, then [DONE] */
static void queue_news(struct completion *c) {
    if (failed(c) && !c->done) {
        struct api_error err;
        engine_error(c, &err);
        queue_data(c, api_error_json(&err));
        queue(c, "data: [DONE]\n\n", 14);
        c->done = 1;
        return;
    }
    int all = 1;
    for (int i = 0; i < c->n; i++) {
        struct cmpl_prompt *p = &c->pr[i];
        while (p->tokens_sent < p->nout) /* an event per token that shows text */
            queue_text(c, i, p->shown_at[++p->tokens_sent], NULL);
        if (p->finish != ZT_FINISH_NONE && !p->final_sent) {
            size_t n = gen_text_showable(&p->text, (const char *const *)c->stops, c->nstops, 1);
            queue_text(c, i, n, finish_reason(p->finish));
            p->final_sent = 1;
        }
        all &= p->final_sent;
    }
    if (!all || c->done) return;
    if (c->include_usage) {
        cJSON *o = object(c);
        cJSON_AddArrayToObject(o, "choices");
        add_usage(o, c);
        queue_event(c, o);
    }
    queue(c, "data: [DONE]\n\n", 14);
    c->done = 1;
}

ssize_t completion_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    struct completion *c = cls;
    pthread_mutex_lock(&c->mu);
    while (c->poff == c->plen) {
        c->plen = c->poff = 0;
        if (c->done) {
            pthread_mutex_unlock(&c->mu);
            return MHD_CONTENT_READER_END_OF_STREAM;
        }
        queue_news(c);
        if (c->plen) break;
        if (!wait_ms(c, 100)) continue;
        if (client_gone(c)) { /* libmicrohttpd closes it and calls completion_release */
            pthread_mutex_unlock(&c->mu);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        if (++c->idle_waits % 10 == 0) queue(c, ": waiting\n\n", 11); /* an SSE comment */
    }
    size_t k = c->plen - c->poff < max ? c->plen - c->poff : max;
    memcpy(buf, c->pend + c->poff, k);
    c->poff += k;
    pthread_mutex_unlock(&c->mu);
    return (ssize_t)k;
}
