/*
 * apps/zt_serve/api.h: the OpenAI-compatible JSON of zt-serve: a /v1/completions body parsed
 * and checked into a completion request, the error object, and the small endpoints
 * (/v1/models, /v1/tokenize, /v1/detokenize).
 *
 * Layer: apps/ (zt-serve). Unknown fields of a request are ignored, as vLLM and llama.cpp's
 * server do; a known field of the wrong type or value is a 400 naming it (docs/serving.md).
 */
#ifndef ZT_SERVE_API_H
#define ZT_SERVE_API_H

#include <stddef.h>    /* size_t */
#include <stdint.h>    /* int32_t */
#include "serve.h"     /* struct serve */

#define API_MAX_STOPS 4 /* stop strings per request, as OpenAI allows */

/* an answer that is not a success: HTTP status, OpenAI error type, the field at fault */
struct api_error {
    int status;
    const char *type;   /* "invalid_request_error", "not_found_error", ... */
    char param[64];     /* "" when no single field is at fault */
    char message[512];
};

struct api_completion {
    int nprompts;
    int32_t **ids;      /* [nprompts] each prompt's ids */
    int *nids;
    struct zt_gen_params p;
    char *stops[API_MAX_STOPS];
    int nstops;
    int stream, include_usage;
    int seeded;         /* the request gave a seed (else each prompt gets its own) */
};

/* body[0..n) of a POST /v1/completions into *out (freed with api_completion_free, also on
 * failure): 0, or -1 with *err filled */
int api_completion_parse(struct serve *s, const char *body, size_t n,
                         struct api_completion *out, struct api_error *err);
void api_completion_free(struct api_completion *c);

/* {"error": {"message", "type", "param", "code"}} (malloc'd; NULL when out of memory) */
char *api_error_json(const struct api_error *err);
/* fill *err (printf-style message); returns -1 */
int api_fail(struct api_error *err, int status, const char *type, const char *param,
             const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* the bodies of GET /v1/models, POST /v1/tokenize, POST /v1/detokenize (malloc'd JSON), or
 * NULL with *err filled */
char *api_models(struct serve *s, struct api_error *err);
char *api_tokenize(struct serve *s, const char *body, size_t n, struct api_error *err);
char *api_detokenize(struct serve *s, const char *body, size_t n, struct api_error *err);

#endif /* ZT_SERVE_API_H */
