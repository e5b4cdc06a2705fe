/*
 * graph/generate.c: the generator: requests, KV-cache slots and the step loop (continuous
 * batching: a finished request's slot goes to the next waiting one at the next step).
 *
 * Layer: graph/ (the API is graph/zt_generate.h). A step: free slots take waiting requests;
 * every running request gives its rows (its last token when decoding, else the next chunk of
 * its prompt, decode rows first within the step's row budget); generate_step.c submits the
 * step's task graph; the logits come back and each request whose rows reached its last id
 * samples its next one (kernels/cpu/sample.c) with the random number of (seed, position).
 * Decoding, the next step goes ahead (ZT_DECODE_AHEAD): submitted before the host waits for
 * this one, its rows embedding the tokens that this step's sampling task writes, so the host's
 * wake-up, bookkeeping and submission overlap the workers' compute instead of separating two
 * steps. It goes ahead only when every request of the step is sure to want one more token
 * (none ends by length, none samples with a repetition penalty, which needs the token) and no
 * waiting request could take a free slot; a request that ends otherwise (eos, a stop) leaves
 * its row of the step ahead unused. The ids are the same either way.
 */
#include <math.h>           /* isinf */
#include <pthread.h>        /* pthread_mutex_t */
#include <stdio.h>          /* snprintf */
#include <stdlib.h>         /* calloc, free */
#include <string.h>         /* memcpy */
#include <time.h>           /* clock_gettime */
#include "zt_sched.h"       /* zt_runtime_nworkers, zt_knob_int */
#include "generate_impl.h"  /* gen_* */

/* a prompt a step may feed, and its place in the order (prompt_order) */
struct gen_pick {
    int64_t key;
    int slot;
};

/* a step submitted and not yet consumed: its rows, where its logits rows go, its results */
struct gen_flight {
    struct gen_batch b;           /* arrays of the flight's rows */
    int32_t *logit_slot;          /* the slot of each logits row */
    int32_t *picked;              /* the tokens its sample task picks */
    struct gen_acts *acts;        /* its step tensors */
    zt_tensor_t logits, tokens;   /* tokens: NULL when no row samples */
    int want_logits;              /* a row goes to a request's prompt_logits */
};

struct zt_generator {
    struct zt_model_shape s;
    struct zt_gen_config cfg;
    struct gen_weights w;
    int tasks_up, max_rows, nworkers;
    struct gen_flight fl[2];       /* a step built from the requests is fl[0]; a step ahead
                                    * takes the other one (fl[1] holds max_batch rows) */
    int cur, inflight, ahead_on;   /* fl[cur] is submitted and not consumed when inflight */
    zt_tensor_t *kv;               /* [L] */
    struct gen_request **slot;     /* [max_batch] */
    struct gen_pick *picks;        /* [max_batch] the prompts a step feeds, in order */
    struct gen_request *wait_head, *wait_tail;
    pthread_mutex_t mu;            /* the waiting queue and next_id */
    int64_t next_id;
    struct zt_sample_params *sp;   /* [max_rows] the sampling of each logits row */
    struct zt_gen_stats stats;
    struct zt_gen_stats stats_seen; /* stats at the end of the last step, under mu (other
                                     * threads read it while the stepping thread steps) */
    pthread_cond_t work;           /* signalled on submit and stop (the stepping thread waits) */
    pthread_t thread;              /* zt_generator_start's stepping thread */
    int thread_up, stopping, idle; /* idle: the thread waits with nothing to do */
    pthread_cond_t idled;          /* signalled when the thread becomes idle or stops */
    enum zt_status failed;         /* a step failed: every later one returns it (under mu) */
    char error[512];               /* its message */
};

const char *zt_finish_name(enum zt_finish f) {
    return f == ZT_FINISH_LENGTH  ? "length"
           : f == ZT_FINISH_STOP  ? "stop"
           : f == ZT_FINISH_EOS   ? "eos"
           : f == ZT_FINISH_ERROR ? "error"
                                  : "";
}

static enum zt_status flight_init(struct gen_flight *f, const struct zt_model_shape *s, int R,
                                  int parts) {
    f->b.tokens = calloc((size_t)R, sizeof *f->b.tokens);
    f->b.rows = calloc((size_t)R, sizeof *f->b.rows);
    f->b.logit_rows = calloc((size_t)R, sizeof *f->b.logit_rows);
    f->logit_slot = calloc((size_t)R, sizeof *f->logit_slot);
    f->picked = calloc((size_t)R, sizeof *f->picked);
    if (!f->b.tokens || !f->b.rows || !f->b.logit_rows || !f->logit_slot || !f->picked)
        return zt_error_set(ZT_ERR_NOMEM, "generate: out of memory");
    return gen_acts_create(&f->acts, s, R, parts);
}

/* the flight's tensors unregistered (which waits for the tasks that use them) */
static void flight_end(struct gen_flight *f) {
    if (f->tokens) zt_tensor_free(f->tokens);
    f->tokens = f->logits = NULL; /* the logits are a step tensor of f->acts */
    if (f->acts) gen_step_end(f->acts);
}

static void flight_free(struct gen_flight *f) {
    flight_end(f);
    gen_acts_free(f->acts);
    free(f->b.tokens);
    free(f->b.rows);
    free(f->b.logit_rows);
    free(f->logit_slot);
    free(f->picked);
}

/* the KV cache's type (gen_kv_dtype) */
static enum zt_dtype kv_dtype(const zt_generator_t g) { return gen_kv_dtype(&g->w); }

/* the KV cache's bytes in fp32 (before the weights are loaded) or in its type */
static int64_t kv_bytes_as(const zt_generator_t g, enum zt_dtype dt) {
    return (int64_t)g->s.n_layer * g->cfg.max_batch * g->s.seq_len * 2 * g->s.n_embd *
           (int64_t)zt_dtype_size(dt);
}

static int64_t kv_bytes(const zt_generator_t g) { return kv_bytes_as(g, kv_dtype(g)); }

static enum zt_status make_state(zt_generator_t g) {
    int S = g->cfg.max_batch, R = g->max_rows, L = g->s.n_layer;
    g->kv = calloc((size_t)L, sizeof *g->kv);
    g->slot = calloc((size_t)S, sizeof *g->slot);
    g->sp = calloc((size_t)R, sizeof *g->sp);
    g->picks = calloc((size_t)S, sizeof *g->picks);
    if (!g->kv || !g->slot || !g->sp || !g->picks)
        return zt_error_set(ZT_ERR_NOMEM, "generate: out of memory");
    for (int l = 0; l < L; l++)
        ZT_CHECK(zt_tensor_init_dtype(&g->kv[l], "kv_cache", NULL, (int64_t)S * g->s.seq_len,
                                      2 * (int64_t)g->s.n_embd, kv_dtype(g), S, NULL));
    ZT_CHECK(flight_init(&g->fl[0], &g->s, R, g->nworkers));
    return g->ahead_on ? flight_init(&g->fl[1], &g->s, S, g->nworkers) : ZT_OK;
}

/* the activations of both flights */
static int64_t acts_bytes(const zt_generator_t g) {
    int64_t ahead = g->ahead_on ? gen_acts_bytes(&g->s, g->cfg.max_batch, g->nworkers) : 0;
    return gen_acts_bytes(&g->s, g->max_rows, g->nworkers) + ahead;
}

static enum zt_status check_config(const struct zt_model_shape *s,
                                   const struct zt_gen_config *cfg) {
    if (cfg->max_batch < 1 || cfg->max_batch > 65536)
        return zt_error_set(ZT_ERR_CONFIG, "generate: max_batch %d: expected 1 to 65536",
                            cfg->max_batch);
    if (cfg->prefill_chunk < 0)
        return zt_error_set(ZT_ERR_CONFIG, "generate: prefill_chunk %d: expected >= 0 (0: the "
                            "default)", cfg->prefill_chunk);
    if (cfg->stream_weights && !cfg->nvme_path)
        return zt_error_set(ZT_ERR_CONFIG, "generate: streamed weights need an nvme_path");
    if (s->seq_len < 2 || s->vocab_size < 1)
        return zt_error_set(ZT_ERR_CONFIG, "generate: seq_len %d, vocab_size %d: expected a "
                            "context of at least 2 and a vocabulary", s->seq_len, s->vocab_size);
    return ZT_OK;
}

enum zt_status zt_generator_create(zt_generator_t *out, const struct zt_model_shape *s,
                                   const struct zt_gen_weights *w,
                                   const struct zt_gen_config *cfg) {
    *out = NULL;
    ZT_CHECK(check_config(s, cfg));
    struct zt_generator *g = calloc(1, sizeof *g);
    if (!g) return zt_error_set(ZT_ERR_NOMEM, "generate: out of memory");
    *out = g;
    g->s = *s;
    g->cfg = *cfg;
    /* a chunk never longer than a prompt can be (seq_len - 1 tokens) */
    int most = s->seq_len - 1, chunk = g->cfg.prefill_chunk ? g->cfg.prefill_chunk : 256;
    g->cfg.prefill_chunk = chunk < most ? chunk : most;
    g->max_rows = g->cfg.prefill_chunk + g->cfg.max_batch;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->work, NULL);
    pthread_cond_init(&g->idled, NULL);
    /* a decode step is a nearly serial chain of short tasks: prio's one central queue hands the
     * next task to an idle worker sooner than lws' per-worker queues (bench/README.md,
     * generate_vs_peers); it honours the same priorities. Only where this starts StarPU. */
    zt_runtime_prefer_sched("prio");
    enum zt_status up = zt_tasks_init();
    zt_runtime_prefer_sched(NULL); /* not left for a later start when this one failed early */
    ZT_CHECK(up);
    g->tasks_up = 1;
    g->nworkers = zt_runtime_nworkers() > 0 ? zt_runtime_nworkers() : 1;
    int64_t ahead;
    ZT_CHECK(zt_knob_int("ZT_DECODE_AHEAD", &ahead));
    g->ahead_on = (int)ahead;
    ZT_CHECK(gen_weights_load(&g->w, s, w, cfg, g->nworkers, kv_bytes_as(g, ZT_DTYPE_F32),
                              acts_bytes(g)));
    if (g->w.streamed) g->ahead_on = 0; /* a pass ahead would need a second window of layers */
    return make_state(g);
}

static void free_request(struct gen_request *r) {
    if (!r) return;
    free(r->ids);
    free(r);
}

/* request r ends (why), its callback told, its memory freed */
static void end_request(struct gen_request *r, enum zt_finish why) {
    r->finish = why;
    if (r->fn) r->fn(r->user, r->id, -1, why);
    free_request(r);
}

void zt_generator_free(zt_generator_t g) {
    if (!g) return;
    zt_generator_stop(g);
    if (g->inflight) zt_runtime_wait_all(); /* a failed step's flights: their tasks first */
    for (int i = 0; i < 2; i++) flight_free(&g->fl[i]);
    for (int l = 0; g->kv && l < g->s.n_layer; l++)
        if (g->kv[l]) zt_tensor_free(g->kv[l]);
    gen_weights_free(&g->w);
    for (int i = 0; g->slot && i < g->cfg.max_batch; i++) free_request(g->slot[i]);
    while (g->wait_head) {
        struct gen_request *r = g->wait_head;
        g->wait_head = r->next;
        free_request(r);
    }
    free(g->kv);
    free(g->slot);
    free(g->sp);
    free(g->picks);
    if (g->tasks_up) zt_tasks_free();
    pthread_cond_destroy(&g->work);
    pthread_cond_destroy(&g->idled);
    pthread_mutex_destroy(&g->mu);
    free(g);
}

// ----------------------------------------------------------------------------
// requests

enum zt_status zt_generator_check_request(const struct zt_model_shape *shape,
                                         const int32_t *prompt, int n,
                                         const struct zt_gen_params *p) {
    if (n < 1) return zt_error_set(ZT_ERR_INVALID, "prompt: empty (expected at least one token)");
    for (int i = 0; i < n; i++)
        if (prompt[i] < 0 || prompt[i] >= shape->vocab_size)
            return zt_error_set(ZT_ERR_INVALID, "prompt: token %d at position %d is outside the "
                                "vocabulary [0, %d)", prompt[i], i, shape->vocab_size);
    if (n >= shape->seq_len)
        return zt_error_set(ZT_ERR_INVALID, "prompt: %d tokens leave no room to generate in the "
                            "model's context of %d (seq_len)", n, shape->seq_len);
    if (p->max_new_tokens < 1 || !(p->temperature >= 0) || isinf(p->temperature) ||
        p->top_k < 0 || !(p->top_p > 0) || p->top_p > 1 || !(p->repetition_penalty > 0) ||
        isinf(p->repetition_penalty))
        return zt_error_set(ZT_ERR_INVALID, "sampling: max_new_tokens %d (expected >= 1), "
                            "temperature %g (>= 0), top_k %d (>= 0), top_p %g (in (0, 1]), "
                            "repetition_penalty %g (> 0)", p->max_new_tokens, p->temperature,
                            p->top_k, p->top_p, p->repetition_penalty);
    return ZT_OK;
}

enum zt_status zt_generator_submit(zt_generator_t g, const int32_t *prompt, int n,
                                   const struct zt_gen_params *p, zt_gen_token_fn fn,
                                   void *user, float *prompt_logits, int64_t *id) {
    ZT_CHECK(zt_generator_check_request(&g->s, prompt, n, p));
    struct gen_request *r = calloc(1, sizeof *r);
    int32_t *ids = calloc((size_t)g->s.seq_len, sizeof *ids);
    if (!r || !ids) {
        free(r);
        free(ids);
        return zt_error_set(ZT_ERR_NOMEM, "generate: out of memory");
    }
    memcpy(ids, prompt, (size_t)n * sizeof *ids);
    *r = (struct gen_request){.ids = ids, .nprompt = n, .n = n, .p = *p, .fn = fn,
                              .user = user, .prompt_logits = prompt_logits};
    pthread_mutex_lock(&g->mu);
    if (g->failed != ZT_OK) {
        enum zt_status why = g->failed;
        pthread_mutex_unlock(&g->mu);
        free_request(r);
        return zt_error_set(why, "generate: a step failed, no request is taken: %s", g->error);
    }
    r->id = g->next_id++;
    if (g->wait_tail) g->wait_tail->next = r;
    else g->wait_head = r;
    g->wait_tail = r;
    pthread_cond_signal(&g->work);
    pthread_mutex_unlock(&g->mu);
    if (id) *id = r->id;
    return ZT_OK;
}

/* free slots take waiting requests, in order */
int zt_generator_cancel(zt_generator_t g, int64_t id) {
    pthread_mutex_lock(&g->mu);
    struct gen_request *r = g->wait_head, *prev = NULL;
    while (r && r->id != id) {
        prev = r;
        r = r->next;
    }
    if (r) {
        *(prev ? &prev->next : &g->wait_head) = r->next;
        if (g->wait_tail == r) g->wait_tail = prev;
    }
    pthread_mutex_unlock(&g->mu);
    if (!r) return 0;
    end_request(r, ZT_FINISH_STOP);
    return 1;
}

static void admit(zt_generator_t g) {
    pthread_mutex_lock(&g->mu);
    for (int s = 0; s < g->cfg.max_batch && g->wait_head; s++) {
        if (g->slot[s]) continue;
        struct gen_request *r = g->wait_head;
        g->wait_head = r->next;
        if (!g->wait_head) g->wait_tail = NULL;
        r->next = NULL;
        r->admitted_step = g->stats.steps;
        g->slot[s] = r;
    }
    pthread_mutex_unlock(&g->mu);
}

// ----------------------------------------------------------------------------
// one step

/* rows [fed, fed + m) of slot s's request into flight f; logits for its last id, and for
 * prompt positions when asked */
static void add_rows(zt_generator_t g, struct gen_flight *f, int s, int m) {
    struct gen_request *r = g->slot[s];
    struct gen_batch *b = &f->b;
    for (int i = 0; i < m; i++) {
        int pos = r->fed + i, last = pos == r->n - 1;
        b->tokens[b->n] = r->ids[pos];
        b->rows[b->n] = (struct zt_row_pos){.slot = s, .pos = pos};
        if (r->prompt_logits && pos < r->nprompt) f->want_logits = 1;
        if (last || (r->prompt_logits && pos < r->nprompt)) {
            f->logit_slot[b->nlogits] = s;
            b->logit_rows[b->nlogits++] = b->n;
        }
        b->n++;
        *(pos < r->nprompt ? &g->stats.prefill_rows : &g->stats.decode_rows) += 1;
    }
    r->fed += m;
}

static int pick_cmp(const void *a, const void *b) {
    const struct gen_pick *x = a, *y = b;
    return x->key != y->key ? (x->key < y->key ? -1 : 1) : x->slot - y->slot;
}

/* The prompts still to feed, in the order a step feeds them (into g->picks; their number):
 * the fewest rows left first, less one chunk for every step since the request took its slot.
 * Shortest first keeps a short prompt from waiting behind a long one (of two that arrive
 * together neither waits much more than the other's time); the credit for waiting bounds how
 * long a long prompt can be passed over by shorter ones arriving after it. Ties: the lower
 * slot. */
static int prompt_order(zt_generator_t g) {
    int n = 0;
    for (int s = 0; s < g->cfg.max_batch; s++) {
        const struct gen_request *r = g->slot[s];
        if (!r || r->n - r->fed < 1) continue;
        g->picks[n++] = (struct gen_pick){
            .key = (r->n - r->fed) -
                   (int64_t)g->cfg.prefill_chunk * (g->stats.steps - r->admitted_step),
            .slot = s};
    }
    qsort(g->picks, (size_t)n, sizeof *g->picks, pick_cmp);
    return n;
}

/* decode rows first (one each), then prompt chunks within the row budget, shortest first */
static void build_batch(zt_generator_t g, struct gen_flight *f) {
    f->b.n = f->b.nlogits = f->want_logits = 0;
    f->b.fed = NULL;
    for (int s = 0; s < g->cfg.max_batch; s++)
        if (g->slot[s] && g->slot[s]->n - g->slot[s]->fed == 1) add_rows(g, f, s, 1);
    const int n = prompt_order(g);
    for (int i = 0; i < n && f->b.n < g->max_rows; i++) {
        const int s = g->picks[i].slot;
        int left = g->max_rows - f->b.n, todo = g->slot[s]->n - g->slot[s]->fed;
        int m = todo < g->cfg.prefill_chunk ? todo : g->cfg.prefill_chunk;
        add_rows(g, f, s, m < left ? m : left);
    }
}

static uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* the uniform number of a request's token at position pos */
static double uniform(uint64_t seed, int pos) {
    uint64_t x = splitmix64(seed ^ splitmix64((uint64_t)pos + 1));
    return (double)(x >> 11) * (1.0 / 9007199254740992.0);
}

static void finish(zt_generator_t g, int s, enum zt_finish why) {
    end_request(g->slot[s], why);
    g->slot[s] = NULL;
}

/* the sampling of request r's token number n (its history: its first nhist ids) */
static struct zt_sample_params request_params(const struct gen_request *r, int n, int nhist) {
    const struct zt_gen_params *p = &r->p;
    return (struct zt_sample_params){.temperature = p->temperature, .top_p = p->top_p,
                                     .penalty = p->repetition_penalty, .top_k = p->top_k,
                                     .u = uniform(p->seed, n), .history = r->ids,
                                     .nhist = nhist};
}

/* the sampling of flight f's logits row i: its request's, for the row of its last id; else
 * greedy */
static void sample_params(zt_generator_t g, const struct gen_flight *f, int i) {
    struct gen_request *r = g->slot[f->logit_slot[i]];
    const struct zt_row_pos *rp = &f->b.rows[f->b.logit_rows[i]];
    if (rp->pos != r->n - 1) {
        g->sp[i] = (struct zt_sample_params){.temperature = 0, .top_p = 1, .penalty = 1};
        return;
    }
    g->sp[i] = request_params(r, r->n, r->n);
}

/* a request takes the token picked for it */
static void take(zt_generator_t g, int s, int32_t tok) {
    struct gen_request *r = g->slot[s];
    const struct zt_gen_params *p = &r->p;
    if (tok == p->eos_id) {
        finish(g, s, ZT_FINISH_EOS);
        return;
    }
    r->ids[r->n++] = tok;
    r->generated++;
    int stop = r->fn ? r->fn(r->user, r->id, tok, ZT_FINISH_NONE) : 0;
    if (stop) finish(g, s, ZT_FINISH_STOP);
    else if (r->generated >= p->max_new_tokens || r->n >= g->s.seq_len)
        finish(g, s, ZT_FINISH_LENGTH);
}

/* flight f's results: prompt logits copied out (logits NULL when none is wanted), picked
 * tokens taken; rows of a request that ended meanwhile (a flight ahead) are left */
static void use_results(zt_generator_t g, const struct gen_flight *f, const float *logits) {
    int V = g->s.vocab_size;
    for (int i = 0; i < f->b.nlogits; i++) {
        int s = f->logit_slot[i];
        struct gen_request *r = g->slot[s];
        const struct zt_row_pos *rp = &f->b.rows[f->b.logit_rows[i]];
        if (!r) continue;
        if (logits && r->prompt_logits && rp->pos < r->nprompt)
            memcpy(r->prompt_logits + (size_t)rp->pos * V, logits + (size_t)i * V,
                   (size_t)V * sizeof *logits);
        if (rp->pos == r->n - 1 && r->fed == r->n) take(g, s, f->picked[i]);
    }
}

/* flight f's sampling task (none when no row ends a prompt or decodes); f->tokens: its output */
static enum zt_status submit_sampling(zt_generator_t g, struct gen_flight *f) {
    struct zt_task_opts o = {.layer = -1, .mb = -1, .step = f->b.step, .priority = 0};
    if (f->b.nlogits == 0) return ZT_OK;
    ZT_CHECK(zt_tensor_init(&f->tokens, "picked", f->picked, f->b.nlogits, 1, sizeof(int32_t),
                            1, NULL));
    return zt_task_sample(&o, f->tokens, f->logits, g->sp);
}

/* flight f's step graph and sampling (a flight ahead: build_ahead set g->sp) */
static enum zt_status submit_flight(zt_generator_t g, struct gen_flight *f, int64_t step) {
    f->b.step = step;
    for (int i = 0; !f->b.fed && i < f->b.nlogits; i++) sample_params(g, f, i);
    ZT_CHECK(gen_step_submit(f->acts, &g->w, g->kv, &f->b, g->nworkers, &f->logits));
    return submit_sampling(g, f);
}

/* every request of flight f wants a token after the one f samples for it, and knows how to
 * sample it without that one; no waiting request could take a free slot meanwhile */
static int can_go_ahead(zt_generator_t g, const struct gen_flight *f) {
    if (!g->ahead_on || f->b.n != f->b.nlogits || f->b.n == 0) return 0;
    int running = 0;
    for (int s = 0; s < g->cfg.max_batch; s++) running += g->slot[s] != NULL;
    if (running != f->b.n) return 0; /* a request not in f (its prompt waits for room) */
    for (int i = 0; i < f->b.n; i++) {
        const struct gen_request *r = g->slot[f->logit_slot[i]];
        if (!r || f->b.logit_rows[i] != i || f->b.rows[i].pos != r->n - 1 || r->fed != r->n ||
            r->p.repetition_penalty != 1.0f || r->generated + 1 >= r->p.max_new_tokens ||
            r->n + 1 >= g->s.seq_len)
            return 0;
    }
    pthread_mutex_lock(&g->mu);
    int waiting = g->wait_head != NULL;
    pthread_mutex_unlock(&g->mu);
    return !waiting || running == g->cfg.max_batch;
}

/* flight nx: the step after f, each row the next position of f's row, its token the one f's
 * sampling picks (read from f->tokens when it runs) */
static void build_ahead(zt_generator_t g, const struct gen_flight *f, struct gen_flight *nx) {
    nx->b.n = nx->b.nlogits = f->b.n;
    nx->want_logits = 0;
    nx->b.fed = f->tokens;
    for (int i = 0; i < f->b.n; i++) {
        int s = f->logit_slot[i];
        const struct gen_request *r = g->slot[s];
        nx->b.rows[i] = (struct zt_row_pos){.slot = s, .pos = r->n};
        nx->b.logit_rows[i] = i;
        nx->logit_slot[i] = s;
        g->sp[i] = request_params(r, r->n + 1, r->n); /* no penalty: the history is unread */
        g->stats.decode_rows++;
    }
}

/* wait for flight f (its sampling task when a flight ahead reads its tokens, else every task),
 * use its results, unregister its tensors */
static enum zt_status consume(zt_generator_t g, struct gen_flight *f, int ahead) {
    enum zt_status rc = ahead ? ZT_OK : zt_runtime_wait_all();
    if (rc == ZT_OK && g->w.streamed) rc = zt_io_service_status();
    int have = rc == ZT_OK && f->tokens, with_logits = have && f->want_logits;
    if (have) rc = zt_tensor_acquire(f->tokens, 0);
    if (rc == ZT_OK && with_logits) rc = zt_tensor_acquire(f->logits, 0);
    if (rc == ZT_OK && have) {
        use_results(g, f, with_logits ? zt_tensor_data(f->logits) : NULL);
        if (with_logits) zt_tensor_release(f->logits);
        zt_tensor_release(f->tokens);
    }
    flight_end(f); /* the flight ahead reads f->tokens: this waits for its embedding task */
    g->stats.steps++;
    return rc;
}

/* the flight ahead, nx, is the one in flight now: its rows' K/V are fed; with no request left
 * in it, it is waited for and dropped */
static enum zt_status adopt(zt_generator_t g, struct gen_flight *nx) {
    g->cur ^= 1;
    int live = 0;
    for (int i = 0; i < nx->b.n; i++) {
        struct gen_request *r = g->slot[nx->logit_slot[i]];
        if (r) r->fed = r->n;
        live |= r != NULL;
    }
    if (live) return ZT_OK;
    g->inflight = 0;
    return consume(g, nx, 0);
}

/* submit the step (unless it is in flight already) and the one ahead when it may, consume it */
static enum zt_status run_step(zt_generator_t g) {
    struct gen_flight *f = &g->fl[g->cur], *nx = &g->fl[g->cur ^ 1];
    enum zt_status rc = ZT_OK;
    if (!g->inflight) rc = submit_flight(g, f, g->stats.steps + 1);
    g->inflight = 1;
    int ahead = rc == ZT_OK && can_go_ahead(g, f);
    if (ahead) {
        build_ahead(g, f, nx);
        rc = submit_flight(g, nx, g->stats.steps + 2);
    }
    if (rc == ZT_OK) rc = consume(g, f, ahead);
    if (rc != ZT_OK) { /* every task first, even after a failed submission */
        zt_runtime_wait_all();
        flight_end(f);
        flight_end(nx);
        g->inflight = 0;
        return rc;
    }
    if (!ahead) {
        g->inflight = 0;
        return ZT_OK;
    }
    return adopt(g, nx);
}

/* every request running or waiting (under the queue's lock: submit may run meanwhile) */
static int busy_now(zt_generator_t g) {
    pthread_mutex_lock(&g->mu);
    int busy = g->wait_head != NULL;
    pthread_mutex_unlock(&g->mu);
    for (int s = 0; s < g->cfg.max_batch; s++) busy |= g->slot[s] != NULL;
    return busy;
}

/* a step failed (rc): it is recorded, and every request running or waiting ends with ERROR */
static void fail_all(zt_generator_t g, enum zt_status rc) {
    pthread_mutex_lock(&g->mu);
    g->failed = rc;
    snprintf(g->error, sizeof g->error, "%s", zt_error_last());
    struct gen_request *wait = g->wait_head;
    g->wait_head = g->wait_tail = NULL;
    pthread_mutex_unlock(&g->mu);
    for (int s = 0; s < g->cfg.max_batch; s++)
        if (g->slot[s]) finish(g, s, ZT_FINISH_ERROR);
    while (wait) {
        struct gen_request *r = wait;
        wait = r->next;
        end_request(r, ZT_FINISH_ERROR);
    }
}

enum zt_status zt_generator_status(zt_generator_t g) {
    pthread_mutex_lock(&g->mu);
    enum zt_status rc = g->failed;
    if (rc != ZT_OK) zt_error_set(rc, "generate: a step failed: %s", g->error);
    pthread_mutex_unlock(&g->mu);
    return rc;
}

enum zt_status zt_generator_step(zt_generator_t g, int *busy) {
    /* a failed step leaves caches half written: every later step fails the same way */
    enum zt_status failed = zt_generator_status(g);
    if (failed != ZT_OK) return failed;
    zt_runtime_host_thread(); /* this thread's wake-ups start each step */
    if (!g->inflight) { /* a step built from the requests (none is ahead) */
        g->cur = 0;
        admit(g);
        build_batch(g, &g->fl[0]);
    }
    if (g->inflight || g->fl[0].b.n > 0) {
        enum zt_status rc = run_step(g);
        if (rc != ZT_OK) {
            fail_all(g, rc);
            return zt_error_set(rc, "%s", g->error);
        }
    }
    pthread_mutex_lock(&g->mu);
    g->stats_seen = g->stats;
    g->stats_seen.weight_bytes_read = g->w.bytes_read;
    pthread_mutex_unlock(&g->mu);
    *busy = busy_now(g);
    return ZT_OK;
}

// ----------------------------------------------------------------------------
// the stepping thread

/* wait on g->work for at most 20 ms (g->mu held) */
static void wait_a_little(zt_generator_t g) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += 20 * 1000000L;
    until.tv_sec += until.tv_nsec / 1000000000L;
    until.tv_nsec %= 1000000000L;
    pthread_cond_timedwait(&g->work, &g->mu, &until);
}

/* steps while there is work; waits (idle) when there is none, the workers parked meanwhile
 * (they would poll for tasks on every core: a server waiting for requests would keep the
 * machine busy); ends on stop or a failed step */
static void *stepping(void *arg) {
    zt_generator_t g = arg;
    for (;;) {
        pthread_mutex_lock(&g->mu);
        int running = 0, parked = 0;
        for (int s = 0; s < g->cfg.max_batch; s++) running |= g->slot[s] != NULL;
        while (!g->stopping && !running && !g->wait_head) {
            g->idle = 1;
            pthread_cond_broadcast(&g->idled);
            if (parked) {
                pthread_cond_wait(&g->work, &g->mu);
                continue;
            }
            /* outside the lock (submit and cancel never wait for it); tasks still finishing
             * (the last step's) keep the workers up: look again a little later */
            pthread_mutex_unlock(&g->mu);
            parked = zt_runtime_pause_if_idle();
            pthread_mutex_lock(&g->mu);
            if (!parked && !g->stopping && !g->wait_head) wait_a_little(g);
        }
        g->idle = 0;
        int stop = g->stopping;
        pthread_mutex_unlock(&g->mu);
        if (parked) zt_runtime_resume();
        int busy;
        if (stop || zt_generator_step(g, &busy) != ZT_OK) break;
    }
    pthread_mutex_lock(&g->mu);
    g->idle = 1;
    pthread_cond_broadcast(&g->idled);
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

enum zt_status zt_generator_start(zt_generator_t g) {
    if (g->thread_up) return ZT_OK;
    g->stopping = 0;
    g->idle = 0; /* until the thread says so */
    if (pthread_create(&g->thread, NULL, stepping, g) != 0)
        return zt_error_set(ZT_ERR_RUNTIME, "generate: cannot start the stepping thread");
    g->thread_up = 1;
    return ZT_OK;
}

enum zt_status zt_generator_drain(zt_generator_t g) {
    pthread_mutex_lock(&g->mu);
    while (g->thread_up && (!g->idle || g->wait_head != NULL) && g->failed == ZT_OK)
        pthread_cond_wait(&g->idled, &g->mu);
    pthread_mutex_unlock(&g->mu);
    if (g->failed != ZT_OK)
        return zt_error_set(g->failed, "generate: a step failed: %s", g->error);
    return ZT_OK;
}

void zt_generator_stop(zt_generator_t g) {
    if (!g->thread_up) return;
    pthread_mutex_lock(&g->mu);
    g->stopping = 1;
    pthread_cond_signal(&g->work);
    pthread_mutex_unlock(&g->mu);
    pthread_join(g->thread, NULL);
    g->thread_up = 0;
}

enum zt_status zt_generator_run(zt_generator_t g) {
    int busy = 1;
    while (busy) ZT_CHECK(zt_generator_step(g, &busy));
    return ZT_OK;
}

void zt_generator_plan(zt_generator_t g, char *line, size_t n) {
    const double mib = 1048576.0;
    const struct gen_weights *w = &g->w;
    int64_t kv = kv_bytes(g), acts = acts_bytes(g);
    int64_t layers = w->layer_bytes * g->s.n_layer, outer = w->resident_bytes;
    if (!w->streamed) outer -= layers;
    int at = snprintf(line, n, "memory (inference): weights %s: embeddings+ln_f %.1f MiB "
                      "resident, layers %.1f MiB ", zt_dtype_name(w->dtype), outer / mib,
                      layers / mib);
    if (at > 0 && (size_t)at < n && w->streamed)
        at += snprintf(line + at, n - (size_t)at, "streamed from NVMe through a window of %d "
                       "layers (%.1f MiB; swap engine %s)", w->nbuf,
                       w->layer_bytes * w->nbuf / mib, zt_io_service_engine_name());
    else if (at > 0 && (size_t)at < n)
        at += snprintf(line + at, n - (size_t)at, "resident");
    if (at > 0 && (size_t)at < n)
        snprintf(line + at, n - (size_t)at, " | KV cache %s %.1f MiB (%d slots x %d positions) "
                 "| activations %.1f MiB | load buffers %.1f MiB | host total %.1f MiB",
                 zt_dtype_name(kv_dtype(g)), kv / mib, g->cfg.max_batch, g->s.seq_len,
                 acts / mib, w->staging_bytes / mib, gen_weights_peak_bytes(w, kv + acts) / mib);
}

void zt_generator_stats(zt_generator_t g, struct zt_gen_stats *s) {
    pthread_mutex_lock(&g->mu);
    *s = g->stats_seen;
    pthread_mutex_unlock(&g->mu);
}
