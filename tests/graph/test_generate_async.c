/*
 * tests/graph/test_generate_async.c: the generator's stepping thread (zt_generator_start):
 * requests submitted from several threads while it runs complete on their own, with the ids a
 * synchronous zt_generator_run gives them; drain waits for them; stop and free end the thread.
 * Decode steps submitted ahead (ZT_DECODE_AHEAD) give the ids of one step at a time, also when
 * requests stop (their token callback says so) while the step ahead already has their row.
 * A request withdrawn while it waits (zt_generator_cancel) ends at once, unfed. Of two prompts
 * taken together, the shorter is fed first.
 *
 * The demo shape with the engine's seeded initial weights (exported here). Usage:
 * test_generate_async DS_CONFIG MODEL WORKDIR
 */
#include <pthread.h>    /* pthread_create */
#include <stdio.h>      /* snprintf */
#include <stdlib.h>     /* setenv */
#include <string.h>     /* memcmp */
#include "zerotask.h"   /* the public API */
#include "zt_test.h"    /* ZT_TEST_* */

#define NREQ 8
#define NEW 12

struct outcome {
    int32_t ids[NREQ][NEW];
    int n[NREQ];
    enum zt_finish finish[NREQ];
    int64_t first_id; /* the id of the run's first request */
};

static int on_token(void *user, int64_t id, int32_t token, enum zt_finish finish) {
    struct outcome *o = user;
    int r = (int)(id - o->first_id);
    if (finish != ZT_FINISH_NONE) o->finish[r] = finish;
    else if (o->n[r] < NEW) o->ids[r][o->n[r]++] = token;
    return 0;
}

/* the tokens after which request r stops itself (0: it runs to max_new_tokens) */
static int stop_at(int r) { return r % 3 == 0 ? 3 + r % 4 : 0; }

static int on_token_stopping(void *user, int64_t id, int32_t token, enum zt_finish finish) {
    struct outcome *o = user;
    on_token(user, id, token, finish);
    int r = (int)(id - o->first_id);
    return finish == ZT_FINISH_NONE && o->n[r] == stop_at(r);
}

static struct zt_gen_params params(int r) {
    struct zt_gen_params p = {.max_new_tokens = NEW, .temperature = r % 2 ? 0.9f : 0.0f,
                              .top_k = 20, .top_p = 0.95f, .repetition_penalty = 1.0f,
                              .seed = (uint64_t)r, .eos_id = -1};
    return p;
}

static void prompt(int r, int32_t *ids, int *n) {
    *n = 1 + (r * 7) % 30;
    for (int i = 0; i < *n; i++) ids[i] = (i * 13 + r) % 256;
}

struct submitter {
    zt_generator_t g;
    struct outcome *o;
    int r0, r1;
    enum zt_status rc;
    zt_gen_token_fn fn; /* NULL: on_token */
};

static void *submit_range(void *arg) {
    struct submitter *s = arg;
    for (int r = s->r0; r < s->r1 && s->rc == ZT_OK; r++) {
        int32_t ids[64];
        int n;
        prompt(r, ids, &n);
        struct zt_gen_params p = params(r);
        s->rc = zt_generator_submit(s->g, ids, n, &p, s->fn ? s->fn : on_token, s->o, NULL,
                                    NULL);
    }
    return NULL;
}

/* every request at once, stepped here; st: the generator's counts at the end (may be NULL) */
static enum zt_status run_sync(const struct zt_model_shape *s, const struct zt_gen_weights *w,
                               struct outcome *o, zt_gen_token_fn fn, struct zt_gen_stats *st) {
    zt_generator_t g;
    struct zt_gen_config cfg = {.max_batch = 3};
    ZT_CHECK(zt_generator_create(&g, s, w, &cfg));
    struct submitter all = {g, o, 0, NREQ, ZT_OK, fn};
    submit_range(&all);
    enum zt_status rc = all.rc == ZT_OK ? zt_generator_run(g) : all.rc;
    if (st) zt_generator_stats(g, st);
    zt_generator_free(g);
    return rc;
}

/* a waiting request withdrawn: it ends at once with STOP and nothing generated; the others
 * run as before; a request that is not waiting (ended, unknown) is not withdrawn */
static void check_cancel(const struct zt_model_shape *s, const struct zt_gen_weights *w,
                         const struct outcome *ref) {
    static struct outcome o;
    zt_generator_t g;
    struct zt_gen_config cfg = {.max_batch = 3};
    ZT_TEST_TRUE(zt_generator_create(&g, s, w, &cfg) == ZT_OK, "create: %s", zt_error_last());
    struct submitter all = {g, &o, 0, NREQ, ZT_OK, NULL};
    submit_range(&all);
    int withdrawn = zt_generator_cancel(g, 5), again = zt_generator_cancel(g, 5);
    ZT_TEST_TRUE(all.rc == ZT_OK && zt_generator_run(g) == ZT_OK, "run: %s", zt_error_last());
    ZT_TEST_TRUE(withdrawn == 1 && again == 0 && zt_generator_cancel(g, 0) == 0 &&
                 zt_generator_cancel(g, 99) == 0, "cancel: %d then %d for a waiting request "
                 "(expected 1, 0), and 0 for an ended or unknown one", withdrawn, again);
    for (int r = 0; r < NREQ; r++)
        ZT_TEST_TRUE(r == 5 ? o.n[r] == 0 && o.finish[r] == ZT_FINISH_STOP
                            : o.n[r] == NEW && !memcmp(o.ids[r], ref->ids[r], sizeof o.ids[r]),
                     "request %d after request 5 was withdrawn: %d tokens", r, o.n[r]);
    zt_generator_free(g);
}

/* one step at a time and steps ahead, with requests stopping themselves: the same tokens; the
 * rows ahead of a stop are computed and dropped */
static void check_ahead(const struct zt_model_shape *s, const struct zt_gen_weights *w) {
    static struct outcome one, ahead;
    struct zt_gen_stats st_one, st_ahead;
    setenv("ZT_DECODE_AHEAD", "0", 1);
    ZT_TEST_TRUE(run_sync(s, w, &one, on_token_stopping, &st_one) == ZT_OK,
                 "ZT_DECODE_AHEAD=0: %s", zt_error_last());
    setenv("ZT_DECODE_AHEAD", "1", 1);
    ZT_TEST_TRUE(run_sync(s, w, &ahead, on_token_stopping, &st_ahead) == ZT_OK,
                 "ZT_DECODE_AHEAD=1: %s", zt_error_last());
    for (int r = 0; r < NREQ; r++) {
        int want = stop_at(r) ? stop_at(r) : NEW;
        ZT_TEST_TRUE(one.n[r] == want && ahead.n[r] == want &&
                     !memcmp(one.ids[r], ahead.ids[r], sizeof one.ids[r]) &&
                     one.finish[r] == ahead.finish[r] &&
                     one.finish[r] == (stop_at(r) ? ZT_FINISH_STOP : ZT_FINISH_LENGTH),
                     "request %d: %d and %d tokens (expected %d), or other ids, with steps "
                     "ahead", r, one.n[r], ahead.n[r], want);
    }
    ZT_TEST_TRUE(st_ahead.decode_rows > st_one.decode_rows &&
                 st_ahead.prefill_rows == st_one.prefill_rows,
                 "decode rows: %lld ahead, %lld one step at a time: expected rows ahead of the "
                 "stops", (long long)st_ahead.decode_rows, (long long)st_one.decode_rows);
}

/* the order in which requests got their first token: first[r] = 1 + how many got theirs
 * before request r */
struct first_order {
    int first[2], seen;
    int64_t first_id;
};

static int on_first_token(void *user, int64_t id, int32_t token, enum zt_finish finish) {
    struct first_order *o = user;
    int r = (int)(id - o->first_id);
    (void)token;
    if (finish == ZT_FINISH_NONE && !o->first[r]) o->first[r] = ++o->seen;
    return 0;
}

/* A long prompt submitted first and a shorter one after it, both taken at the same step: the
 * shorter one is fed first and gets its first token first, at step 2 (in slot order the long
 * one, in slot 0, takes each step's chunk; both prompts end at step 4, the long one's logits
 * row first, so its token comes first). */
static void check_shortest_first(const struct zt_model_shape *s, const struct zt_gen_weights *w) {
    zt_generator_t g;
    struct zt_gen_config cfg = {.max_batch = 2, .prefill_chunk = 8};
    struct first_order o = {.first_id = -1};
    ZT_TEST_TRUE(zt_generator_create(&g, s, w, &cfg) == ZT_OK, "create: %s", zt_error_last());
    const int len[2] = {28, 12};
    for (int r = 0; r < 2; r++) {
        int32_t ids[28];
        for (int i = 0; i < len[r]; i++) ids[i] = (i * 5 + r) % 256;
        struct zt_gen_params p = params(0);
        p.max_new_tokens = 2;
        int64_t id = -1;
        ZT_TEST_TRUE(zt_generator_submit(g, ids, len[r], &p, on_first_token, &o, NULL, &id) ==
                     ZT_OK, "submit: %s", zt_error_last());
        if (r == 0) o.first_id = id;
    }
    ZT_TEST_TRUE(zt_generator_run(g) == ZT_OK, "run: %s", zt_error_last());
    ZT_TEST_TRUE(o.first[1] == 1 && o.first[0] == 2, "first tokens: the 12-token prompt's came "
                 "%d, the 28-token prompt's %d (expected the shorter first)", o.first[1],
                 o.first[0]);
    zt_generator_free(g);
}

/* two threads submit while the stepping thread runs: half, drain, then the rest at once */
static enum zt_status run_async(const struct zt_model_shape *s, const struct zt_gen_weights *w,
                                struct outcome *o) {
    zt_generator_t g;
    struct zt_gen_config cfg = {.max_batch = 3};
    ZT_CHECK(zt_generator_create(&g, s, w, &cfg));
    ZT_CHECK(zt_generator_start(g));
    struct submitter a = {g, o, 0, NREQ / 2, ZT_OK, NULL};
    struct submitter b = {g, o, NREQ / 2, NREQ, ZT_OK, NULL};
    submit_range(&a);
    enum zt_status rc = zt_generator_drain(g);
    ZT_TEST_TRUE(rc == ZT_OK && o->n[0] == NEW, "drain returned before the first half ended");
    pthread_t t;
    pthread_create(&t, NULL, submit_range, &b);
    pthread_join(t, NULL);
    if (rc == ZT_OK) rc = b.rc == ZT_OK ? zt_generator_drain(g) : b.rc;
    zt_generator_stop(g);
    zt_generator_free(g);
    return rc;
}

int main(int argc, char **argv) {
    if (argc != 4) return fprintf(stderr, "usage: %s DS_CONFIG MODEL WORKDIR\n", argv[0]), 2;
    struct zt_config cfg;
    struct zt_model_shape s;
    zt_engine_t e;
    zt_gpt2_t m;
    char weights[1024];
    snprintf(weights, sizeof weights, "%s/async.safetensors", argv[3]);
    if (zt_tasks_init() != ZT_OK || zt_config_load(&cfg, argv[1], 1) != ZT_OK ||
        zt_model_shape_load(&s, argv[2]) != ZT_OK || zt_engine_init(&e, &cfg) != ZT_OK ||
        zt_gpt2_init(&m, e, &s) != ZT_OK || zt_engine_save_safetensors(e, weights) != ZT_OK)
        return fprintf(stderr, "FAIL setup: %s\n", zt_error_last()), 1;
    zt_gpt2_free(m);
    zt_engine_free(e);
    struct zt_gen_weights w = {.safetensors = weights};
    static struct outcome sync, async;
    ZT_TEST_TRUE(run_sync(&s, &w, &sync, NULL, NULL) == ZT_OK, "synchronous run: %s",
                 zt_error_last());
    ZT_TEST_TRUE(run_async(&s, &w, &async) == ZT_OK, "stepping thread: %s", zt_error_last());
    for (int r = 0; r < NREQ; r++)
        ZT_TEST_TRUE(sync.n[r] == NEW && async.n[r] == NEW &&
                     !memcmp(sync.ids[r], async.ids[r], sizeof sync.ids[r]) &&
                     async.finish[r] == ZT_FINISH_LENGTH,
                     "request %d: the stepping thread's ids differ from the synchronous run's",
                     r);
    check_ahead(&s, &w);
    check_cancel(&s, &w, &sync);
    check_shortest_first(&s, &w);
    zt_tasks_free();
    return zt_test_finish("test_generate_async");
}
