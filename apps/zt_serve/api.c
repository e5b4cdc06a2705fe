/*
 * apps/zt_serve/api.c: OpenAI-style request parsing and response bodies (api.h).
 *
 * The fields and their checks follow OpenAI's legacy completions API: prompt (a string, a
 * list of strings, a list of token ids or a list of such lists), max_tokens (default 16),
 * temperature [0, 2] (default 1), top_p (0, 1], stop (a string or up to 4), seed, stream with
 * stream_options.include_usage, n = 1; the extensions top_k and repetition_penalty are vLLM's.
 * Fields this server cannot honour (n > 1, echo, logprobs, suffix, best_of > 1, non-zero
 * presence/frequency penalties, logit_bias) are refused rather than silently dropped.
 */
#include <math.h>     /* floor, isfinite, isnan, NAN */
#include <stdarg.h>   /* va_list */
#include <stdio.h>    /* vsnprintf */
#include <stdlib.h>   /* calloc, free */
#include <string.h>   /* strcmp, strdup */
#include <cjson/cJSON.h>
#include "api.h"
#include "gen_text.h"       /* gen_text_decode */
#include "generate_input.h" /* gen_utf8_lossy */

/* msg as one line of valid UTF-8 that fits its buffer (it may quote the client's bytes):
 * control characters as spaces, invalid sequences as U+FFFD, cut at a character's end */
static void clean_message(char *msg, size_t cap) {
    for (char *c = msg; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7F) *c = ' ';
    char *clean = gen_utf8_lossy(msg);
    if (!clean) return;
    size_t n = strlen(clean);
    if (n >= cap) {
        n = cap - 1;
        while (n > 0 && ((unsigned char)clean[n] & 0xC0) == 0x80) n--; /* not inside one */
    }
    memcpy(msg, clean, n);
    msg[n] = '\0';
    free(clean);
}

int api_fail(struct api_error *err, int status, const char *type, const char *param,
             const char *fmt, ...) {
    err->status = status;
    err->type = type;
    snprintf(err->param, sizeof err->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    clean_message(err->message, sizeof err->message);
    return -1;
}

static int bad(struct api_error *err, const char *param, const char *expected) {
    return api_fail(err, 400, "invalid_request_error", param, "%s: expected %s", param,
                    expected);
}

char *api_error_json(const struct api_error *err) {
    cJSON *root = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(root, "error");
    cJSON_AddStringToObject(e, "message", err->message);
    cJSON_AddStringToObject(e, "type", err->type);
    if (err->param[0]) cJSON_AddStringToObject(e, "param", err->param);
    else cJSON_AddNullToObject(e, "param");
    cJSON_AddNullToObject(e, "code");
    char *s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return s;
}

static cJSON *parse_body(const char *body, size_t n, struct api_error *err) {
    if (gen_json_has_nul(body, n)) {
        api_fail(err, 400, "invalid_request_error", NULL, "a string of the body holds \\u0000 "
                 "(a NUL character): not supported");
        return NULL;
    }
    cJSON *root = cJSON_ParseWithLength(body, n);
    if (!root) {
        api_fail(err, 400, "invalid_request_error", NULL, "the body is not valid JSON");
        return NULL;
    }
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        api_fail(err, 400, "invalid_request_error", NULL, "the body must be a JSON object");
        return NULL;
    }
    return root;
}

// ----------------------------------------------------------------------------
// typed fields: absent (or null) leaves *out as it is; 0, or -1 with *err

static int get_number(const cJSON *o, const char *name, double lo, double hi, int lo_open,
                      double *out, struct api_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!v || cJSON_IsNull(v)) return 0;
    char range[96];
    snprintf(range, sizeof range, "a number in %s%g, %g]", lo_open ? "(" : "[", lo, hi);
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble > hi ||
        (lo_open ? v->valuedouble <= lo : v->valuedouble < lo))
        return bad(err, name, range);
    *out = v->valuedouble;
    return 0;
}

static int get_int(const cJSON *o, const char *name, double lo, double hi, double *out,
                   struct api_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!v || cJSON_IsNull(v)) return 0;
    char range[96];
    snprintf(range, sizeof range, "an integer in [%.0f, %.0f]", lo, hi);
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < lo ||
        v->valuedouble > hi)
        return bad(err, name, range);
    *out = v->valuedouble;
    return 0;
}

static int get_bool(const cJSON *o, const char *name, int *out, struct api_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsBool(v)) return bad(err, name, "true or false");
    *out = cJSON_IsTrue(v);
    return 0;
}

/* fields whose only accepted values are "not used" */
static int refuse_unsupported(const cJSON *o, struct api_error *err) {
    static const char *const zero[] = {"presence_penalty", "frequency_penalty"};
    static const char *const one[] = {"n", "best_of"};
    for (int i = 0; i < 2; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, zero[i]);
        if (v && !cJSON_IsNull(v) && !(cJSON_IsNumber(v) && v->valuedouble == 0))
            return api_fail(err, 400, "invalid_request_error", zero[i], "%s: not supported "
                            "(expected 0 or absent; repetition_penalty is)", zero[i]);
        v = cJSON_GetObjectItemCaseSensitive(o, one[i]);
        if (v && !cJSON_IsNull(v) && !(cJSON_IsNumber(v) && v->valuedouble == 1))
            return api_fail(err, 400, "invalid_request_error", one[i], "%s: only 1 is "
                            "supported", one[i]);
    }
    const cJSON *echo = cJSON_GetObjectItemCaseSensitive(o, "echo");
    if (echo && !cJSON_IsNull(echo) && !cJSON_IsFalse(echo))
        return api_fail(err, 400, "invalid_request_error", "echo", "echo: not supported");
    static const char *const null_only[] = {"logprobs", "suffix"};
    for (int i = 0; i < 2; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, null_only[i]);
        if (v && !cJSON_IsNull(v))
            return api_fail(err, 400, "invalid_request_error", null_only[i], "%s: not "
                            "supported (expected null or absent)", null_only[i]);
    }
    const cJSON *bias = cJSON_GetObjectItemCaseSensitive(o, "logit_bias");
    if (bias && !cJSON_IsNull(bias) && !(cJSON_IsObject(bias) && !bias->child))
        return api_fail(err, 400, "invalid_request_error", "logit_bias", "logit_bias: not "
                        "supported");
    return 0;
}

// ----------------------------------------------------------------------------
// prompts

/* token ids of array v (each in [0, vocab)), field param */
static int ids_of(struct serve *s, const cJSON *v, const char *param, int32_t **ids, int *n,
                  struct api_error *err) {
    int k = cJSON_GetArraySize(v), i = 0;
    *ids = calloc((size_t)(k > 0 ? k : 1), sizeof **ids);
    if (!*ids) return api_fail(err, 500, "server_error", NULL, "out of memory");
    *n = k;
    for (const cJSON *e = v->child; e; e = e->next, i++) {
        if (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble) ||
            e->valuedouble < 0 || e->valuedouble >= s->shape.vocab_size)
            return api_fail(err, 400, "invalid_request_error", param, "%s: element %d is not "
                            "a token id in [0, %d)", param, i, s->shape.vocab_size);
        (*ids)[i] = (int32_t)e->valuedouble;
    }
    return 0;
}

/* one prompt: a string (encoded with the tokenizer) or a list of token ids */
static int one_prompt(struct serve *s, const cJSON *v, int32_t **ids, int *n,
                      struct api_error *err) {
    if (cJSON_IsArray(v)) return ids_of(s, v, "prompt", ids, n, err);
    if (!cJSON_IsString(v))
        return bad(err, "prompt", "a string, a list of strings, a list of token ids or a list "
                                  "of such lists");
    size_t len = 0;
    if (zt_tokenizer_encode(s->tok, v->valuestring, strlen(v->valuestring), ids, &len) != ZT_OK)
        return api_fail(err, 400, "invalid_request_error", "prompt", "prompt: %s",
                        zt_error_last());
    *n = (int)len;
    return 0;
}

/* prompt: one string or id list, or a list of them (each element then a prompt) */
static int parse_prompts(struct serve *s, const cJSON *root, struct api_completion *c,
                         struct api_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "prompt");
    if (!v || cJSON_IsNull(v))
        return api_fail(err, 400, "invalid_request_error", "prompt", "prompt: required");
    int many = cJSON_IsArray(v) && v->child && !cJSON_IsNumber(v->child);
    int n = many ? cJSON_GetArraySize(v) : 1, most = s->o->max_batch + s->o->max_queue;
    if (n > most)
        return api_fail(err, 400, "invalid_request_error", "prompt", "prompt: %d prompts in "
                        "one request; this server holds at most %d at once", n, most);
    c->ids = calloc((size_t)n, sizeof *c->ids);
    c->nids = calloc((size_t)n, sizeof *c->nids);
    if (!c->ids || !c->nids) return api_fail(err, 500, "server_error", NULL, "out of memory");
    c->nprompts = n;
    const cJSON *e = many ? v->child : v;
    for (int i = 0; i < n; i++, e = e->next) {
        if (many && cJSON_IsArray(e) && e->child && !cJSON_IsNumber(e->child))
            return bad(err, "prompt", "a list of token ids as an element of the list");
        if (one_prompt(s, e, &c->ids[i], &c->nids[i], err)) return -1;
        if (c->nids[i] < 1)
            return api_fail(err, 400, "invalid_request_error", "prompt", "prompt %d: empty "
                            "(expected at least one token)", i);
    }
    return 0;
}

/* every prompt and its completion fit the context */
static int check_context(struct serve *s, const struct api_completion *c,
                         struct api_error *err) {
    int ctx = s->shape.seq_len, want = c->p.max_new_tokens;
    for (int i = 0; i < c->nprompts; i++)
        if (c->nids[i] + want > ctx)
            return api_fail(err, 400, "invalid_request_error",
                            c->nids[i] >= ctx ? "prompt" : "max_tokens",
                            "This model's maximum context length is %d tokens. However, you "
                            "requested %d tokens (%d in your prompt; %d for the completion). "
                            "Please reduce your prompt; or completion length.", ctx,
                            c->nids[i] + want, c->nids[i], want);
    return 0;
}

// ----------------------------------------------------------------------------
// sampling, stops, streaming

static int parse_stops(const cJSON *root, struct api_completion *c, struct api_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "stop");
    if (!v || cJSON_IsNull(v)) return 0;
    if (cJSON_IsArray(v) && cJSON_GetArraySize(v) > API_MAX_STOPS)
        return bad(err, "stop", "a string or a list of at most 4 strings");
    const cJSON *e = cJSON_IsArray(v) ? v->child : v;
    for (; e; e = cJSON_IsArray(v) ? e->next : NULL) {
        if (!cJSON_IsString(e)) return bad(err, "stop", "a string or a list of strings");
        if (!(c->stops[c->nstops++] = strdup(e->valuestring)))
            return api_fail(err, 500, "server_error", NULL, "out of memory");
    }
    return 0;
}

static int parse_sampling(struct serve *s, const cJSON *root, struct api_completion *c,
                          struct api_error *err) {
    double max_tokens = 16, temperature = 1, top_p = 1, top_k = 0, penalty = 1, seed = NAN;
    int ctx = s->shape.seq_len;
    if (get_int(root, "max_tokens", 1, ctx, &max_tokens, err) ||
        get_number(root, "temperature", 0, 2, 0, &temperature, err) ||
        get_number(root, "top_p", 0, 1, 1, &top_p, err) ||
        get_int(root, "top_k", -1, 1 << 30, &top_k, err) ||
        get_number(root, "repetition_penalty", 0, 1e6, 1, &penalty, err) ||
        get_int(root, "seed", -9007199254740991.0, 9007199254740991.0, &seed, err))
        return -1;
    /* values a double holds and a float does not (1e-50 > 0, but 0.0f) */
    if (!((float)top_p > 0)) return bad(err, "top_p", "a number in (0, 1]");
    if (!((float)penalty > 0)) return bad(err, "repetition_penalty", "a number in (0, 1e+06]");
    c->p = (struct zt_gen_params){.max_new_tokens = (int)max_tokens,
                                  .temperature = (float)temperature, .top_p = (float)top_p,
                                  .top_k = top_k < 0 ? 0 : (int)top_k,
                                  .repetition_penalty = (float)penalty, .eos_id = s->eos_id};
    /* no seed: completion.c gives each prompt its own (OpenAI's sampling is not reproducible
     * then) */
    c->seeded = !isnan(seed);
    c->p.seed = c->seeded ? (uint64_t)(int64_t)seed : 0;
    return 0;
}

static int parse_stream(const cJSON *root, struct api_completion *c, struct api_error *err) {
    if (get_bool(root, "stream", &c->stream, err)) return -1;
    const cJSON *so = cJSON_GetObjectItemCaseSensitive(root, "stream_options");
    if (!so || cJSON_IsNull(so)) return 0;
    if (!cJSON_IsObject(so)) return bad(err, "stream_options", "an object");
    return get_bool(so, "include_usage", &c->include_usage, err);
}

static int check_model(struct serve *s, const cJSON *root, struct api_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsString(v)) return bad(err, "model", "a string");
    if (strcmp(v->valuestring, s->model_name) != 0)
        return api_fail(err, 404, "not_found_error", "model", "The model `%.64s` does not exist "
                        "(this server serves `%s`)", v->valuestring, s->model_name);
    return 0;
}

int api_completion_parse(struct serve *s, const char *body, size_t n,
                         struct api_completion *out, struct api_error *err) {
    memset(out, 0, sizeof *out);
    cJSON *root = parse_body(body, n, err);
    if (!root) return -1;
    int rc = check_model(s, root, err) || refuse_unsupported(root, err) ||
             parse_sampling(s, root, out, err) || parse_stops(root, out, err) ||
             parse_stream(root, out, err) || parse_prompts(s, root, out, err) ||
             check_context(s, out, err) ? -1 : 0;
    cJSON_Delete(root);
    return rc;
}

void api_completion_free(struct api_completion *c) {
    for (int i = 0; c->ids && i < c->nprompts; i++) free(c->ids[i]);
    free(c->ids);
    free(c->nids);
    for (int i = 0; i < c->nstops; i++) free(c->stops[i]);
    memset(c, 0, sizeof *c);
}

// ----------------------------------------------------------------------------
// the small endpoints

static char *print(cJSON *root, struct api_error *err) {
    char *s = root ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    if (!s) api_fail(err, 500, "server_error", NULL, "out of memory");
    return s;
}

char *api_models(struct serve *s, struct api_error *err) {
    cJSON *root = cJSON_CreateObject(), *list = cJSON_AddArrayToObject(root, "data"), *m;
    cJSON_AddStringToObject(root, "object", "list");
    cJSON_AddItemToArray(list, m = cJSON_CreateObject());
    cJSON_AddStringToObject(m, "id", s->model_name);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)s->started);
    cJSON_AddStringToObject(m, "owned_by", "zerotask");
    cJSON_AddNumberToObject(m, "max_model_len", s->shape.seq_len);
    return print(root, err);
}

char *api_tokenize(struct serve *s, const char *body, size_t n, struct api_error *err) {
    cJSON *req = parse_body(body, n, err);
    if (!req) return NULL;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(req, "prompt");
    int32_t *ids = NULL;
    size_t k = 0;
    char *out = NULL;
    if (!cJSON_IsString(v)) bad(err, "prompt", "a string");
    else if (zt_tokenizer_encode(s->tok, v->valuestring, strlen(v->valuestring), &ids, &k))
        api_fail(err, 400, "invalid_request_error", "prompt", "prompt: %s", zt_error_last());
    else {
        cJSON *root = cJSON_CreateObject(), *list = cJSON_AddArrayToObject(root, "tokens");
        for (size_t i = 0; i < k; i++) cJSON_AddItemToArray(list, cJSON_CreateNumber(ids[i]));
        cJSON_AddNumberToObject(root, "count", (double)k);
        cJSON_AddNumberToObject(root, "max_model_len", s->shape.seq_len);
        out = print(root, err);
    }
    free(ids);
    cJSON_Delete(req);
    return out;
}

char *api_detokenize(struct serve *s, const char *body, size_t n, struct api_error *err) {
    cJSON *req = parse_body(body, n, err);
    if (!req) return NULL;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(req, "tokens");
    int32_t *ids = NULL;
    int k = 0;
    char *text = NULL, *out = NULL;
    size_t len = 0;
    if (!cJSON_IsArray(v)) bad(err, "tokens", "a list of token ids");
    else if (!ids_of(s, v, "tokens", &ids, &k, err)) {
        if (gen_text_decode(s->tok, ids, k, &text, &len) != ZT_OK) {
            api_fail(err, 400, "invalid_request_error", "tokens", "tokens: %s", zt_error_last());
        } else {
            char *clean = gen_utf8_lossy(text);
            cJSON *root = cJSON_CreateObject();
            cJSON_AddStringToObject(root, "prompt", clean ? clean : "");
            free(clean);
            out = print(root, err);
        }
    }
    free(ids);
    free(text);
    cJSON_Delete(req);
    return out;
}
