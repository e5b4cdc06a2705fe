/*
 * tests/fuzz/fuzz_serve_request.c: zt-serve's request bodies (apps/zt_serve/api.c, compiled
 * into this target only) on any bytes: the input as a POST /v1/completions body, a
 * /v1/tokenize body and a /v1/detokenize body, against a model of the fixture tokenizer's
 * vocabulary (tests/data/tokenizer) and a context of 64. A refusal must be an HTTP 4xx (or a
 * 500 for memory) with a one-line message of valid UTF-8 (it may quote the client's bytes) and
 * an error object that prints; a completion taken
 * must have what the server relies on: 1 to max_batch + max_queue prompts, each non-empty,
 * every id in the vocabulary, prompt + max_tokens within the context, sampling in range, at
 * most 4 stop strings.
 */
#include <math.h>        /* isfinite */

#include "fuzz_util.h"
#include "generate_input.h" /* gen_utf8_lossy */
#include "zt_serve/api.h"   /* api_completion_parse, api_tokenize, api_detokenize */

static struct serve *server(void) {
    static struct serve s;
    static struct serve_options o = {.max_batch = 4, .max_queue = 4};
    if (!s.o) {
        s.o = &o;
        s.tok = (struct zt_tokenizer *)fuzz_fixture_tokenizer();
        s.shape = (struct zt_model_shape){.vocab_size = zt_tokenizer_vocab_size(s.tok),
                                          .seq_len = 64, .n_embd = 64, .n_layer = 2,
                                          .n_head = 4};
        s.model_name = "model";
        s.eos_id = zt_tokenizer_special_id(s.tok, "<|endoftext|>");
    }
    return &s;
}

/* a refusal: a status the client can act on, one line, an error object */
static void check_refusal(const struct api_error *err, const char *what) {
    if (!(err->status == 400 || err->status == 404 || err->status == 500))
        FUZZ_FAIL("%s: status %d", what, err->status);
    if (!err->message[0] || strchr(err->message, '\n') || !err->type)
        FUZZ_FAIL("%s: message '%s'", what, err->message);
    char *clean = gen_utf8_lossy(err->message);
    if (!clean || strcmp(clean, err->message) != 0)
        FUZZ_FAIL("%s: the message is not valid UTF-8: '%s'", what, err->message);
    free(clean);
    char *json = api_error_json(err);
    if (!json) FUZZ_FAIL("%s: the error object does not print", what);
    free(json);
}

static void check_completion(const struct serve *s, const struct api_completion *c) {
    const struct zt_gen_params *p = &c->p;
    int most = s->o->max_batch + s->o->max_queue;
    if (c->nprompts < 1 || c->nprompts > most) FUZZ_FAIL("%d prompts", c->nprompts);
    for (int i = 0; i < c->nprompts; i++) {
        if (c->nids[i] < 1 || c->nids[i] + p->max_new_tokens > s->shape.seq_len)
            FUZZ_FAIL("prompt %d: %d ids + %d new", i, c->nids[i], p->max_new_tokens);
        for (int k = 0; k < c->nids[i]; k++)
            if (c->ids[i][k] < 0 || c->ids[i][k] >= s->shape.vocab_size)
                FUZZ_FAIL("prompt %d: id %d", i, c->ids[i][k]);
    }
    if (p->max_new_tokens < 1 || !(p->temperature >= 0 && p->temperature <= 2) ||
        !(p->top_p > 0 && p->top_p <= 1) || p->top_k < 0 || !(p->repetition_penalty > 0) ||
        !isfinite(p->repetition_penalty) || c->nstops < 0 || c->nstops > API_MAX_STOPS)
        FUZZ_FAIL("sampling out of range");
    for (int i = 0; i < c->nstops; i++)
        if (!c->stops[i]) FUZZ_FAIL("stop %d missing", i);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct serve *s = server();
    const char *body = (const char *)data;
    struct api_completion c;
    struct api_error err = {0};
    if (api_completion_parse(s, body, size, &c, &err) == 0) check_completion(s, &c);
    else check_refusal(&err, "completions");
    api_completion_free(&c);
    for (int k = 0; k < 2; k++) {
        struct api_error e = {0};
        char *out = k ? api_detokenize(s, body, size, &e) : api_tokenize(s, body, size, &e);
        if (out) free(out);
        else check_refusal(&e, k ? "detokenize" : "tokenize");
    }
    return 0;
}
