/*
 * kernels/cpu/sample.c: picking the next token from a row of logits, as Hugging Face generate's
 * logits processors do it, in their order: repetition penalty, then (sampling) temperature,
 * top-k, top-p, and a draw from the renormalised distribution (bottom layer, pure compute).
 *
 * The candidates are ordered by logit, then by id (a tie goes to the lower id), and the draw
 * takes a uniform number from the caller, so a token depends only on the logits, the parameters
 * and that number. Reference: transformers' RepetitionPenaltyLogitsProcessor,
 * TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper.
 */
#include <math.h>       /* exp, INFINITY */
#include <stdlib.h>     /* qsort */
#include <string.h>     /* memset */
#include "zt_kernels.h" /* prototype */

/* CTRL's penalty, once per distinct id of history (idx: V ints of scratch) */
static void penalize(float *logits, int V, const int32_t *history, int nhist, float penalty,
                     int32_t *idx) {
    memset(idx, 0, (size_t)V * sizeof *idx);
    for (int i = 0; i < nhist; i++) {
        int32_t h = history[i];
        if (h < 0 || h >= V || idx[h]) continue;
        idx[h] = 1;
        logits[h] = logits[h] > 0 ? logits[h] / penalty : logits[h] * penalty;
    }
}

/* the lowest id of the largest logit; NaNs are never picked (all NaN: id 0) */
static int argmax(const float *x, int V) {
    int best = 0;
    while (best < V - 1 && x[best] != x[best]) best++;
    for (int i = best + 1; i < V; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* qsort has no context argument: the row being sorted, per thread */
static _Thread_local const float *t_sort_logits;

static int by_logit(const void *pa, const void *pb) {
    int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
    float la = t_sort_logits[a], lb = t_sort_logits[b];
    return la > lb ? -1 : la < lb ? 1 : (a > b) - (a < b);
}

/* the first n of idx hold the candidates (not -inf, not NaN), best first, top_k of them */
static int candidates(const float *logits, int V, int top_k, int32_t *idx) {
    int n = 0;
    for (int i = 0; i < V; i++)
        if (logits[i] > -INFINITY) idx[n++] = i;
    if (n == 0) { /* every logit -inf or NaN: the lowest id */
        idx[0] = 0;
        return 1;
    }
    t_sort_logits = logits;
    qsort(idx, (size_t)n, sizeof *idx, by_logit);
    return top_k > 0 && top_k < n ? top_k : n;
}

/* candidate i's weight exp((logit - best) / temperature), in double: a tiny temperature sends
 * every logit below the best to 0 instead of overflowing */
static double weight(const float *logits, const int32_t *idx, int i, float temperature) {
    return exp(((double)logits[idx[i]] - (double)logits[idx[0]]) / (double)temperature);
}

int zt_kern_sample(float *logits, int V, const int32_t *history, int nhist, float temperature,
                   int top_k, float top_p, float penalty, double u, int32_t *idx) {
    if (penalty != 1.0f && penalty > 0) penalize(logits, V, history, nhist, penalty, idx);
    if (!(temperature > 0)) return argmax(logits, V);
    int n = candidates(logits, V, top_k, idx);
    double total = 0, keep = 0;
    for (int i = 0; i < n; i++) total += weight(logits, idx, i, temperature);
    int m = 0; /* the smallest prefix holding top_p of the mass (at least one) */
    while (m < n) {
        keep += weight(logits, idx, m, temperature);
        m++;
        if (top_p < 1.0f && keep >= top_p * total) break;
    }
    double r = u * keep, acc = 0;
    for (int i = 0; i < m; i++) {
        acc += weight(logits, idx, i, temperature);
        if (r < acc) return idx[i];
    }
    return idx[m - 1];
}
