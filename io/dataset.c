/*
 * io/dataset.c: the sampler of zt_dataset.h: the blend (which source the g-th sequence comes
 * from), the shuffle (which of its sequences), the rows of a batch, and the sampler's state as
 * JSON for checkpoints.
 *
 * Layer: io/ (platform; no StarPU). Everything here is a function of the data's shape, the seed
 * and the position: no random state is carried, so a state restored from a checkpoint (the
 * position and the per-source counts) continues exactly where the run stopped. The shuffle is
 * a keyed Feistel permutation of the next power of four above a source's sequence count,
 * walked until it lands below the count: a bijection of 0..N-1 in O(1) memory, whatever N is.
 */
#include "zt_dataset.h"

#include <math.h>        /* fabs */
#include <stdio.h>       /* snprintf */
#include <stdlib.h>      /* free */
#include <string.h>      /* strcmp */
#include <cjson/cJSON.h> /* the state's JSON */

/* the sampler's answer for the g-th sequence of the run */

int zt_dataset_pick(const struct zt_data_set *set, const int64_t *drawn, int64_t g) {
    int best = 0;
    double lag = -INFINITY;
    for (int s = 0; s < set->nsources; s++) {
        double l = set->src[s].weight * (double)(g + 1) - (double)drawn[s];
        if (l > lag) {
            lag = l;
            best = s;
        }
    }
    return best;
}

/* splitmix64's finaliser: a bijective mix of 64 bits */
static uint64_t mix64(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

#define FEISTEL_ROUNDS 4

int64_t zt_dataset_permute(uint64_t seed, int s, int64_t e, int64_t j, int64_t n) {
    if (n <= 1) return 0;
    int bits = 64 - __builtin_clzll((unsigned long long)(n - 1));
    if (bits < 2) bits = 2;
    bits += bits & 1; /* two halves of equal width */
    const int half = bits / 2;
    const uint64_t mask = (1ull << half) - 1;
    const uint64_t key = mix64(seed ^ mix64((uint64_t)s ^ mix64((uint64_t)e)));
    uint64_t x = (uint64_t)j;
    do { /* cycle walking: the permutation of 0..2^bits-1 applied until x < n */
        uint64_t l = x >> half, r = x & mask;
        for (int k = 0; k < FEISTEL_ROUNDS; k++) {
            uint64_t f = mix64(r ^ key ^ ((uint64_t)k << 56)) & mask;
            uint64_t nl = r;
            r = l ^ f;
            l = nl;
        }
        x = (l << half) | r;
    } while (x >= (uint64_t)n);
    return (int64_t)x;
}

/* the train set of a dataset built by its path alone reads zt_tokens.h's rule */
static int is_legacy(const struct zt_dataset *d, const struct zt_data_set *set) {
    return d->legacy && set == &d->train;
}

void zt_dataset_next(const struct zt_dataset *d, const struct zt_data_set *set,
                     struct zt_sampler_state *st, int B, struct zt_data_row *rows) {
    for (int k = 0; k < B; k++, st->consumed++) {
        int64_t g = st->consumed;
        if (is_legacy(d, set)) {
            const int f = set->src[0].file;
            rows[k] = (struct zt_data_row){f, (int64_t)zt_tokens_step_pos(&d->files[f],
                                                                          (uint64_t)g, d->T)};
            st->drawn[0]++;
            continue;
        }
        int s = zt_dataset_pick(set, st->drawn, g);
        const struct zt_data_source *src = &set->src[s];
        int64_t dn = st->drawn[s]++, e = dn / src->nseq, j = dn % src->nseq;
        /* the validation data is read in order: every evaluation the same batches */
        int64_t seq = d->order == ZT_DATA_SHUFFLE && set == &d->train
                          ? zt_dataset_permute(d->seed, s, e, j, src->nseq)
                          : j;
        rows[k] = (struct zt_data_row){src->file, (src->first + seq) * (int64_t)d->T};
    }
}

int64_t zt_dataset_epoch(const struct zt_dataset *d, const struct zt_data_set *set,
                         const struct zt_sampler_state *st, int s) {
    if (is_legacy(d, set)) /* (g * T) / count without overflow: g * T < 2^63 for any real run */
        return (int64_t)((uint64_t)st->drawn[0] * (uint64_t)d->T /
                         d->files[set->src[0].file].count) + 1;
    return st->drawn[s] / set->src[s].nseq + 1;
}

// ----------------------------------------------------------------------------
// the state as JSON

static const char *order_name(enum zt_data_order o) {
    return o == ZT_DATA_SHUFFLE ? "shuffle" : "linear";
}

/* the two ways of reading: zt_tokens.h's step rule, or whole sequences */
static const char *rule_name(const struct zt_dataset *d) {
    return d->legacy ? "step" : "sequences";
}

char *zt_sampler_state_json(const struct zt_dataset *d, const struct zt_sampler_state *st) {
    cJSON *o = cJSON_CreateObject();
    char seed[32];
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)d->seed);
    cJSON_AddStringToObject(o, "order", order_name(d->order));
    cJSON_AddStringToObject(o, "rule", rule_name(d));
    cJSON_AddStringToObject(o, "seed", seed);
    cJSON_AddNumberToObject(o, "consumed", (double)st->consumed);
    cJSON *list = cJSON_AddArrayToObject(o, "sources");
    for (int s = 0; s < d->train.nsources; s++) {
        const struct zt_data_source *src = &d->train.src[s];
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "path", src->path);
        cJSON_AddNumberToObject(e, "sequences", (double)src->nseq);
        cJSON_AddNumberToObject(e, "weight", src->weight);
        cJSON_AddNumberToObject(e, "drawn", (double)st->drawn[s]);
        cJSON_AddNumberToObject(e, "epoch", (double)zt_dataset_epoch(d, &d->train, st, s));
        cJSON_AddItemToArray(list, e);
    }
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return text;
}

#define MAX_WHOLE 9007199254740992.0 /* 2^53 */

static int whole(const cJSON *x) {
    return cJSON_IsNumber(x) && x->valuedouble >= 0 && x->valuedouble <= MAX_WHOLE &&
           x->valuedouble == floor(x->valuedouble);
}

/* source s of the state against this run's: its sequence count and weight */
static enum zt_status parse_source(const struct zt_dataset *d, const cJSON *e, int s,
                                   const char *what, struct zt_sampler_state *st) {
    const struct zt_data_source *src = &d->train.src[s];
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(e, "sequences");
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(e, "weight");
    const cJSON *dn = cJSON_GetObjectItemCaseSensitive(e, "drawn");
    if (!whole(n) || !cJSON_IsNumber(w) || !isfinite(w->valuedouble) || !whole(dn))
        return zt_error_set(ZT_ERR_CKPT_CORRUPT, "%s: data source %d is malformed (expected "
                            "sequences, weight, drawn)", what, s);
    if ((int64_t)n->valuedouble != src->nseq || fabs(w->valuedouble - src->weight) > 1e-12)
        return zt_error_set(ZT_ERR_USAGE, "%s: data source %d had %lld sequences of weight %.6g, "
                            "--data's %s has %lld of weight %.6g: the data position cannot carry "
                            "over to other data", what, s, (long long)n->valuedouble,
                            w->valuedouble, src->path, (long long)src->nseq, src->weight);
    st->drawn[s] = (int64_t)dn->valuedouble;
    return ZT_OK;
}

static enum zt_status parse_state(const struct zt_dataset *d, const cJSON *o, const char *what,
                                  struct zt_sampler_state *st) {
    const cJSON *order = cJSON_GetObjectItemCaseSensitive(o, "order");
    const cJSON *rule = cJSON_GetObjectItemCaseSensitive(o, "rule");
    const cJSON *seed = cJSON_GetObjectItemCaseSensitive(o, "seed");
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(o, "consumed");
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(o, "sources");
    if (!cJSON_IsString(order) || !cJSON_IsString(rule) || !cJSON_IsString(seed) || !whole(c) ||
        !cJSON_IsArray(list))
        return zt_error_set(ZT_ERR_CKPT_CORRUPT, "%s: the data sampler's state is malformed "
                            "(expected order, rule, seed, consumed, sources)", what);
    if (strcmp(rule->valuestring, rule_name(d)))
        return zt_error_set(ZT_ERR_USAGE, "%s: the data was read by the %s rule, --data %s reads "
                            "by the %s rule (one file by its path in linear order is the step "
                            "rule): the data position cannot carry over", what,
                            rule->valuestring, d->train.src[0].path, rule_name(d));
    char mine[32];
    snprintf(mine, sizeof mine, "%llu", (unsigned long long)d->seed);
    if (strcmp(order->valuestring, order_name(d->order)) || strcmp(seed->valuestring, mine))
        return zt_error_set(ZT_ERR_USAGE, "%s: the data was read in %s order with seed %s; this "
                            "run asks for %s order with seed %s (--data-order, seed)", what,
                            order->valuestring, seed->valuestring, order_name(d->order), mine);
    if (cJSON_GetArraySize(list) != d->train.nsources)
        return zt_error_set(ZT_ERR_USAGE, "%s: the data had %d source(s), --data has %d: the "
                            "data position cannot carry over to other data", what,
                            cJSON_GetArraySize(list), d->train.nsources);
    int s = 0;
    int64_t sum = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, list) {
        ZT_CHECK(parse_source(d, e, s, what, st));
        sum += st->drawn[s++];
    }
    st->consumed = (int64_t)c->valuedouble;
    if (sum != st->consumed)
        return zt_error_set(ZT_ERR_CKPT_CORRUPT, "%s: the data sampler's counts (%lld drawn) do "
                            "not add up to its position %lld", what, (long long)sum,
                            (long long)st->consumed);
    return ZT_OK;
}

enum zt_status zt_sampler_state_parse(const struct zt_dataset *d, const char *json,
                                      const char *what, struct zt_sampler_state *st) {
    memset(st, 0, sizeof *st);
    cJSON *o = cJSON_Parse(json);
    enum zt_status rc = cJSON_IsObject(o) ? parse_state(d, o, what, st)
                                          : zt_error_set(ZT_ERR_CKPT_CORRUPT, "%s: the data "
                                                         "sampler's state is not a JSON object",
                                                         what);
    cJSON_Delete(o);
    return rc;
}
