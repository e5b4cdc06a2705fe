/*
 * apps/zt_serve/http.c: zt-serve's HTTP side on libmicrohttpd: the daemon, request bodies
 * under a size limit, the routes, JSON errors, and the responses (one buffer, or a completion's
 * event stream read as it grows).
 *
 * One thread per connection (MHD_USE_THREAD_PER_CONNECTION): a completion's thread may block
 * waiting for tokens without holding up anybody else; the number of connections is bounded
 * (--max-batch + --max-queue + a margin for /health and /metrics), and a connection idle for
 * --timeout seconds is closed, which ends slow clients that send nothing.
 */
#include <arpa/inet.h>   /* inet_pton */
#include <microhttpd.h>
#include <netinet/in.h>  /* struct sockaddr_in */
#include <stdlib.h>      /* calloc, free, realloc, strtoull */
#include <string.h>      /* strcmp, memcpy */
#include <unistd.h>      /* close */
#include "api.h"
#include "completion.h"
#include "serve.h"

#define CONN_MARGIN 64 /* connections beyond the prompts that may be held, for the rest */

struct body {
    char *data;
    size_t len;
    int refused; /* 1 answered from the headers (413, 429), 2: 413 once the body has ended */
};

static const char *const EP_COMPLETIONS = "/v1/completions", *const EP_TOKENIZE = "/v1/tokenize",
                         *const EP_DETOKENIZE = "/v1/detokenize", *const EP_MODELS = "/v1/models",
                         *const EP_HEALTH = "/health", *const EP_METRICS = "/metrics",
                         *const EP_OTHER = "other";

// ----------------------------------------------------------------------------
// responses

/* body (taken over) as the response with status */
static enum MHD_Result reply(struct serve *s, struct MHD_Connection *conn, const char *ep,
                             int status, char *body, const char *type) {
    if (!body) {
        status = 500;
        body = strdup("{\"error\": {\"message\": \"out of memory\", \"type\": \"server_error\", "
                      "\"param\": null, \"code\": null}}");
        if (!body) return MHD_NO;
    }
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (status == 429) MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, "1");
    enum MHD_Result ok = MHD_queue_response(conn, (unsigned)status, r);
    MHD_destroy_response(r);
    serve_metrics_request(&s->metrics, ep, status);
    return ok;
}

static enum MHD_Result reply_json(struct serve *s, struct MHD_Connection *conn, const char *ep,
                                  int status, char *body) {
    return reply(s, conn, ep, status, body, "application/json");
}

static enum MHD_Result reply_error(struct serve *s, struct MHD_Connection *conn, const char *ep,
                                   const struct api_error *err) {
    return reply_json(s, conn, ep, err->status, api_error_json(err));
}

// ----------------------------------------------------------------------------
// routes

static enum MHD_Result completions(struct serve *s, struct MHD_Connection *conn,
                                   const struct body *b) {
    struct api_completion req;
    struct api_error err = {0};
    struct completion *c = NULL;
    if (api_completion_parse(s, b->data ? b->data : "", b->len, &req, &err) == 0)
        c = completion_start(s, &req, &err);
    api_completion_free(&req);
    if (!c) return reply_error(s, conn, EP_COMPLETIONS, &err);
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (ci) completion_watch(c, ci->connect_fd);
    if (!completion_streams(c)) {
        char *json;
        int status = completion_wait_json(c, &json);
        completion_release(c);
        if (!status) return MHD_NO; /* the client left: close, do not pretend it finished */
        return reply_json(s, conn, EP_COMPLETIONS, status, json);
    }
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096,
                                                               completion_read, c,
                                                               completion_release);
    if (!r) {
        completion_release(c);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    enum MHD_Result ok = MHD_queue_response(conn, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    serve_metrics_request(&s->metrics, EP_COMPLETIONS, 200);
    return ok;
}

static enum MHD_Result metrics(struct serve *s, struct MHD_Connection *conn) {
    struct zt_gen_stats st;
    zt_generator_stats(s->gen, &st);
    int inflight = serve_inflight(s), slots = s->o->max_batch;
    struct serve_gauges g = {.running = inflight < slots ? inflight : slots,
                             .waiting = inflight > slots ? inflight - slots : 0,
                             .unstarted = serve_unstarted(s), .max_batch = slots,
                             .max_queue = s->o->max_queue, .max_prefill = s->o->max_prefill,
                             .decode_steps = st.steps, .decode_rows = st.decode_rows,
                             .prefill_rows = st.prefill_rows};
    return reply(s, conn, EP_METRICS, 200, serve_metrics_text(&s->metrics, &g),
                 "text/plain; version=0.0.4; charset=utf-8");
}

static enum MHD_Result health(struct serve *s, struct MHD_Connection *conn) {
    pthread_mutex_lock(&s->mu);
    int draining = s->draining;
    pthread_mutex_unlock(&s->mu);
    const char *state = zt_generator_status(s->gen) != ZT_OK ? "{\"status\": \"failed\"}"
                        : draining                            ? "{\"status\": \"draining\"}"
                                                              : NULL;
    return reply_json(s, conn, EP_HEALTH, state ? 503 : 200,
                      strdup(state ? state : "{\"status\": \"ok\"}"));
}

/* the route of url: its endpoint name, or EP_OTHER; *allowed: the method it takes */
static const char *route(const char *url, const char **allowed) {
    static const struct {
        const char *const *ep;
        const char *method;
    } routes[] = {{&EP_COMPLETIONS, "POST"}, {&EP_TOKENIZE, "POST"}, {&EP_DETOKENIZE, "POST"},
                  {&EP_MODELS, "GET"},       {&EP_HEALTH, "GET"},   {&EP_METRICS, "GET"}};
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
        if (strcmp(url, *routes[i].ep) == 0) {
            *allowed = routes[i].method;
            return *routes[i].ep;
        }
    *allowed = NULL;
    return EP_OTHER;
}

static enum MHD_Result dispatch(struct serve *s, struct MHD_Connection *conn, const char *url,
                                const char *method, const struct body *b) {
    const char *allowed, *ep = route(url, &allowed);
    struct api_error err = {0};
    if (ep == EP_OTHER) {
        api_fail(&err, 404, "not_found_error", NULL, "no route %s %s (see GET /v1/models, POST "
                 "/v1/completions)", method, url);
        return reply_error(s, conn, ep, &err);
    }
    if (strcmp(method, allowed) != 0 && !(strcmp(method, "HEAD") == 0 && !strcmp(allowed, "GET"))) {
        api_fail(&err, 405, "invalid_request_error", NULL, "%s takes %s, not %s", url, allowed,
                 method);
        return reply_error(s, conn, ep, &err);
    }
    if (ep == EP_COMPLETIONS) return completions(s, conn, b);
    if (ep == EP_METRICS) return metrics(s, conn);
    if (ep == EP_HEALTH) return health(s, conn);
    char *json = ep == EP_MODELS     ? api_models(s, &err)
                 : ep == EP_TOKENIZE ? api_tokenize(s, b->data ? b->data : "", b->len, &err)
                                     : api_detokenize(s, b->data ? b->data : "", b->len, &err);
    return json ? reply_json(s, conn, ep, 200, json) : reply_error(s, conn, ep, &err);
}

// ----------------------------------------------------------------------------
// the daemon

/* an answer before the body has been read (or with what was read dropped) */
static enum MHD_Result refuse(struct serve *s, struct MHD_Connection *conn, const char *url,
                              struct body *b, const struct api_error *err) {
    const char *allowed;
    b->refused = 1;
    free(b->data);
    b->data = NULL;
    b->len = 0;
    return reply_error(s, conn, route(url, &allowed), err);
}

/* the 413 answer; the body read so far is dropped */
static enum MHD_Result too_large(struct serve *s, struct MHD_Connection *conn, const char *url,
                                 struct body *b) {
    struct api_error err;
    api_fail(&err, 413, "invalid_request_error", NULL, "the request body is larger than %zu "
             "bytes (--max-body)", s->o->max_body);
    return refuse(s, conn, url, b, &err);
}

/* A completion while the server is full: 429 from the headers, its body never read nor its
 * prompt tokenized, so that a storm of refused requests takes as little as possible from the
 * running ones. */
static int full_for(struct serve *s, const char *url, const char *method) {
    const char *allowed;
    return route(url, &allowed) == EP_COMPLETIONS && !strcmp(method, allowed) && serve_full(s);
}

/* libmicrohttpd's access handler: called with the headers, for each piece of the body, then
 * once more with none left */
static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version,
                                  const char *upload, size_t *upload_size, void **state) {
    (void)version;
    struct serve *s = cls;
    struct body *b = *state;
    if (!b) { /* the headers: refuse a declared body that is too large before reading it */
        if (!(b = calloc(1, sizeof *b))) return MHD_NO;
        *state = b;
        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                     MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > s->o->max_body) return too_large(s, conn, url, b);
        if (full_for(s, url, method)) {
            struct api_error err;
            completion_at_capacity(s, &err);
            return refuse(s, conn, url, b, &err);
        }
        return MHD_YES;
    }
    if (b->refused == 1) { /* answered from its Content-Length: the rest is dropped */
        *upload_size = 0;
        return MHD_YES;
    }
    if (b->refused == 2 && *upload_size == 0) return too_large(s, conn, url, b);
    if (*upload_size > 0 && (b->refused || b->len + *upload_size > s->o->max_body)) {
        /* a body without a length (chunked) that grew too large: read to its end, dropped,
         * then answered (libmicrohttpd 0.9.75 takes no response in the middle of a body) */
        free(b->data);
        b->data = NULL;
        b->len = 0;
        b->refused = 2;
        *upload_size = 0;
        return MHD_YES;
    }
    if (*upload_size > 0) {
        char *d = realloc(b->data, b->len + *upload_size + 1);
        if (!d) return MHD_NO;
        memcpy(d + b->len, upload, *upload_size);
        b->data = d;
        b->len += *upload_size;
        b->data[b->len] = '\0';
        *upload_size = 0;
        return MHD_YES;
    }
    return dispatch(s, conn, url, method, b);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **state,
                         enum MHD_RequestTerminationCode why) {
    (void)cls, (void)conn, (void)why;
    struct body *b = *state;
    if (!b) return;
    free(b->data);
    free(b);
    *state = NULL;
}

struct MHD_Daemon *serve_http_start(struct serve *s, int *port) {
    struct sockaddr_in a4 = {.sin_family = AF_INET, .sin_port = htons((uint16_t)s->o->port)};
    struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)s->o->port)};
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                     MHD_USE_ITC;
    const struct sockaddr *addr = (const struct sockaddr *)&a4;
    if (inet_pton(AF_INET6, s->o->host, &a6.sin6_addr) == 1) {
        addr = (const struct sockaddr *)&a6;
        flags |= MHD_USE_IPv6;
    } else if (inet_pton(AF_INET, s->o->host, &a4.sin_addr) != 1) {
        zt_error_set(ZT_ERR_CONFIG, "--host %s: expected an IPv4 or IPv6 address (127.0.0.1, "
                     "0.0.0.0, ::1)", s->o->host);
        return NULL;
    }
    unsigned conns = (unsigned)(s->o->max_batch + s->o->max_queue + CONN_MARGIN);
    struct MHD_Daemon *d = MHD_start_daemon(
        flags, (uint16_t)s->o->port, NULL, NULL, on_request, s, MHD_OPTION_SOCK_ADDR, addr,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)s->o->timeout_s, MHD_OPTION_CONNECTION_LIMIT,
        conns, MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_END);
    if (!d) {
        zt_error_set(ZT_ERR_IO, "cannot listen on %s port %d (in use, or not an address of "
                     "this machine?)", s->o->host, s->o->port);
        return NULL;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    *port = info ? info->port : s->o->port;
    return d;
}

void serve_http_quiesce(struct MHD_Daemon *d) {
    MHD_socket fd = MHD_quiesce_daemon(d); /* ours to close: new clients are refused at once */
    if (fd != MHD_INVALID_SOCKET) close(fd);
}

int serve_http_connections(struct MHD_Daemon *d) {
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);
    return info ? (int)info->num_connections : 0;
}

void serve_http_stop(struct MHD_Daemon *d) {
    if (d) MHD_stop_daemon(d);
}
