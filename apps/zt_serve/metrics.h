/*
 * apps/zt_serve/metrics.h: zt-serve's Prometheus metrics: counters and latency histograms,
 * updated from the HTTP and generator threads, written as the text exposition format.
 *
 * Layer: apps/ (zt-serve). Every function is thread-safe (one mutex per metrics object).
 */
#ifndef ZT_SERVE_METRICS_H
#define ZT_SERVE_METRICS_H

#include <pthread.h>  /* pthread_mutex_t */
#include <stdint.h>   /* int64_t */

#define SERVE_HIST_BOUNDS 14 /* finite bucket bounds of a histogram */
#define SERVE_MAX_SERIES 64  /* distinct (endpoint, status) request counters */

struct serve_hist {
    const double *le;                        /* SERVE_HIST_BOUNDS upper bounds, seconds */
    int64_t count[SERVE_HIST_BOUNDS + 1];    /* per bucket (the last: +Inf) */
    int64_t n;
    double sum;
};

struct serve_metrics {
    pthread_mutex_t mu;
    struct {
        const char *endpoint;                /* a string literal */
        int status;
        int64_t n;
    } req[SERVE_MAX_SERIES];
    int nreq;
    int64_t prompt_tokens, generation_tokens, cancelled;
    struct serve_hist ttft, itl, e2e;
};

/* what the server knows at scrape time (gauges) */
struct serve_gauges {
    int running, waiting, unstarted, max_batch, max_queue, max_prefill;
    int64_t decode_steps, decode_rows, prefill_rows;
};

void serve_metrics_init(struct serve_metrics *m);
void serve_metrics_free(struct serve_metrics *m);
/* one HTTP request answered with status on endpoint (a string literal: "/v1/completions") */
void serve_metrics_request(struct serve_metrics *m, const char *endpoint, int status);
void serve_metrics_tokens(struct serve_metrics *m, int64_t prompt, int64_t generated);
/* a prompt's time to first token, one inter-token gap, a prompt's whole time (seconds) */
void serve_metrics_ttft(struct serve_metrics *m, double s);
void serve_metrics_itl(struct serve_metrics *m, double s);
void serve_metrics_e2e(struct serve_metrics *m, double s);
/* a prompt stopped because its client went away */
void serve_metrics_cancelled(struct serve_metrics *m);
/* the exposition text (malloc'd; NULL when out of memory) */
char *serve_metrics_text(struct serve_metrics *m, const struct serve_gauges *g);

#endif /* ZT_SERVE_METRICS_H */
