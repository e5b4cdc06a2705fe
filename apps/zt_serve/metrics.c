/*
 * apps/zt_serve/metrics.c: counters, histograms and their Prometheus text (metrics.h).
 *
 * Names follow Prometheus conventions (base units: seconds; counters end in _total) with a
 * zt_serve_ prefix; the latency histograms use vLLM's idea of buckets from milliseconds to
 * tens of seconds so that both a CPU decode step and a long queue wait are resolved.
 */
#include <stdarg.h>   /* va_list */
#include <stdio.h>    /* vsnprintf */
#include <stdlib.h>   /* malloc, realloc, free */
#include <string.h>   /* memset */
#include "metrics.h"

static const double g_ttft_le[SERVE_HIST_BOUNDS] = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75,
                                                    1, 2.5, 5, 7.5, 10, 20, 40};
static const double g_itl_le[SERVE_HIST_BOUNDS] = {0.005, 0.01, 0.015, 0.02, 0.03, 0.04, 0.05,
                                                   0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1};
static const double g_e2e_le[SERVE_HIST_BOUNDS] = {0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60,
                                                   120, 240, 480, 960};

void serve_metrics_init(struct serve_metrics *m) {
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
    m->ttft.le = g_ttft_le;
    m->itl.le = g_itl_le;
    m->e2e.le = g_e2e_le;
}

void serve_metrics_free(struct serve_metrics *m) { pthread_mutex_destroy(&m->mu); }

void serve_metrics_request(struct serve_metrics *m, const char *endpoint, int status) {
    pthread_mutex_lock(&m->mu);
    int i = 0;
    while (i < m->nreq && (m->req[i].endpoint != endpoint || m->req[i].status != status)) i++;
    if (i == m->nreq && m->nreq < SERVE_MAX_SERIES) {
        m->req[i].endpoint = endpoint;
        m->req[i].status = status;
        m->nreq++;
    }
    if (i < m->nreq) m->req[i].n++;
    pthread_mutex_unlock(&m->mu);
}

void serve_metrics_tokens(struct serve_metrics *m, int64_t prompt, int64_t generated) {
    pthread_mutex_lock(&m->mu);
    m->prompt_tokens += prompt;
    m->generation_tokens += generated;
    pthread_mutex_unlock(&m->mu);
}

static void observe(struct serve_metrics *m, struct serve_hist *h, double s) {
    pthread_mutex_lock(&m->mu);
    int b = 0;
    while (b < SERVE_HIST_BOUNDS && s > h->le[b]) b++;
    h->count[b]++;
    h->n++;
    h->sum += s;
    pthread_mutex_unlock(&m->mu);
}

void serve_metrics_ttft(struct serve_metrics *m, double s) { observe(m, &m->ttft, s); }
void serve_metrics_itl(struct serve_metrics *m, double s) { observe(m, &m->itl, s); }
void serve_metrics_e2e(struct serve_metrics *m, double s) { observe(m, &m->e2e, s); }

void serve_metrics_cancelled(struct serve_metrics *m) {
    pthread_mutex_lock(&m->mu);
    m->cancelled++;
    pthread_mutex_unlock(&m->mu);
}

// ----------------------------------------------------------------------------
// the text

struct out {
    char *buf;
    size_t len, cap;
    int failed;
};

static void put(struct out *o, const char *fmt, ...) {
    for (int tries = 0; tries < 2 && !o->failed; tries++) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(o->buf + o->len, o->cap - o->len, fmt, ap);
        va_end(ap);
        if (n < 0) break;
        if ((size_t)n < o->cap - o->len) {
            o->len += (size_t)n;
            return;
        }
        size_t cap = (o->cap + (size_t)n) * 2;
        char *b = realloc(o->buf, cap);
        if (!b) break;
        o->buf = b;
        o->cap = cap;
    }
    o->failed = 1;
}

static void head(struct out *o, const char *name, const char *type, const char *help) {
    put(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void hist(struct out *o, const char *name, const char *help, const struct serve_hist *h) {
    head(o, name, "histogram", help);
    int64_t cum = 0;
    for (int b = 0; b < SERVE_HIST_BOUNDS; b++) {
        cum += h->count[b];
        put(o, "%s_bucket{le=\"%g\"} %lld\n", name, h->le[b], (long long)cum);
    }
    put(o, "%s_bucket{le=\"+Inf\"} %lld\n%s_sum %.6f\n%s_count %lld\n", name, (long long)h->n,
        name, h->sum, name, (long long)h->n);
}

static void counters(struct out *o, const struct serve_metrics *m) {
    head(o, "zt_serve_requests_total", "counter", "HTTP requests answered, by endpoint and status");
    for (int i = 0; i < m->nreq; i++)
        put(o, "zt_serve_requests_total{endpoint=\"%s\",status=\"%d\"} %lld\n",
            m->req[i].endpoint, m->req[i].status, (long long)m->req[i].n);
    head(o, "zt_serve_prompt_tokens_total", "counter", "prompt tokens of finished prompts");
    put(o, "zt_serve_prompt_tokens_total %lld\n", (long long)m->prompt_tokens);
    head(o, "zt_serve_generation_tokens_total", "counter", "tokens generated");
    put(o, "zt_serve_generation_tokens_total %lld\n", (long long)m->generation_tokens);
    head(o, "zt_serve_cancelled_total", "counter", "prompts stopped because the client left");
    put(o, "zt_serve_cancelled_total %lld\n", (long long)m->cancelled);
}

static void gauges(struct out *o, const struct serve_gauges *g) {
    head(o, "zt_serve_requests_running", "gauge", "prompts holding a KV-cache slot");
    put(o, "zt_serve_requests_running %d\n", g->running);
    head(o, "zt_serve_requests_waiting", "gauge", "prompts queued for a slot (queue depth)");
    put(o, "zt_serve_requests_waiting %d\n", g->waiting);
    head(o, "zt_serve_requests_unstarted", "gauge", "admitted prompts without their first token "
         "(queued or being fed)");
    put(o, "zt_serve_requests_unstarted %d\n", g->unstarted);
    head(o, "zt_serve_batch_occupancy", "gauge", "running prompts over the KV-cache slots");
    put(o, "zt_serve_batch_occupancy %.4f\n", g->max_batch ? (double)g->running / g->max_batch
                                                           : 0.0);
    head(o, "zt_serve_max_batch", "gauge", "KV-cache slots (--max-batch)");
    put(o, "zt_serve_max_batch %d\n", g->max_batch);
    head(o, "zt_serve_max_queue", "gauge", "queued prompts allowed (--max-queue)");
    put(o, "zt_serve_max_queue %d\n", g->max_queue);
    head(o, "zt_serve_max_prefill", "gauge", "unstarted prompts allowed (--max-prefill; 0: no "
         "limit of its own)");
    put(o, "zt_serve_max_prefill %d\n", g->max_prefill);
    head(o, "zt_serve_steps_total", "counter", "generation steps run");
    put(o, "zt_serve_steps_total %lld\n", (long long)g->decode_steps);
    head(o, "zt_serve_rows_total", "counter", "rows computed by the steps, by kind");
    put(o, "zt_serve_rows_total{kind=\"prefill\"} %lld\nzt_serve_rows_total{kind=\"decode\"} "
        "%lld\n", (long long)g->prefill_rows, (long long)g->decode_rows);
}

char *serve_metrics_text(struct serve_metrics *m, const struct serve_gauges *g) {
    struct out o = {malloc(4096), 0, 4096, 0};
    if (!o.buf) return NULL;
    pthread_mutex_lock(&m->mu);
    counters(&o, m);
    hist(&o, "zt_serve_time_to_first_token_seconds", "from arrival to the first token",
         &m->ttft);
    hist(&o, "zt_serve_inter_token_latency_seconds", "between two tokens of a prompt", &m->itl);
    hist(&o, "zt_serve_request_seconds", "from arrival to the last token", &m->e2e);
    pthread_mutex_unlock(&m->mu);
    gauges(&o, g);
    if (o.failed) {
        free(o.buf);
        return NULL;
    }
    return o.buf;
}
