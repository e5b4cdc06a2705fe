/*
 * graph/pipe_plan.c: cutting a model's layer specs into pipeline stages (zt_pipe_plan.h).
 *
 * Layer: graph/. The balanced cut is an exact dynamic programme over (stages, specs), run twice:
 * the least possible largest stage, then the most even cut that keeps it. With at most
 * ZT_PIPE_MAX_STAGES stages and a few hundred specs it costs nothing.
 */
#include "zt_pipe_plan.h"

#include <float.h>   /* DBL_MAX */
#include <regex.h>   /* regcomp, regexec */
#include <stdio.h>   /* snprintf */
#include <stdlib.h>  /* calloc, free */

enum zt_status zt_pipe_partition_uniform(int n, int parts, int *first) {
    if (parts < 1 || n < parts)
        return zt_error_set(ZT_ERR_CONFIG, "pipeline: %d stages for %d layers (expected at "
                            "least one layer per stage)", parts, n);
    const int chunk = n / parts, extra = n % parts;
    first[0] = 0;
    for (int k = 0; k < parts; k++) first[k + 1] = first[k] + chunk + (k < extra);
    return ZT_OK;
}

/* The cut of items 0..n-1 into `parts` non-empty parts, by dynamic programme: best[k][i] is the
 * least cost of items 0..i-1 in k + 1 parts and cut[k][i] where its last part starts. cap < 0:
 * the cost is the largest part; cap >= 0: the sum of the parts' squares, every part at most cap
 * (DBL_MAX: no such cut). Row `parts` of cut receives the answer: first[k] for k = 1..parts. */
static void cut_dp(const double *prefix, int n, int parts, double cap, double *best, int *cut) {
#define AT_(k, i) ((size_t)(k) * (size_t)(n + 1) + (size_t)(i))
#define COST_(last) (cap < 0 ? (last) : (last) > cap ? DBL_MAX : (last) * (last))
    for (int i = 1; i <= n; i++) {
        best[AT_(0, i)] = COST_(prefix[i]);
        cut[AT_(0, i)] = 0;
    }
    for (int k = 1; k < parts; k++)
        for (int i = k + 1; i <= n; i++) {
            double b = DBL_MAX;
            int at = k;
            for (int j = k; j < i; j++) { /* the last part: items j..i-1 */
                const double head = best[AT_(k - 1, j)], last = COST_(prefix[i] - prefix[j]);
                if (head == DBL_MAX || last == DBL_MAX) continue;
                const double m = cap < 0 ? (head > last ? head : last) : head + last;
                if (m < b) {
                    b = m;
                    at = j;
                }
            }
            best[AT_(k, i)] = b;
            cut[AT_(k, i)] = at;
        }
    for (int k = parts - 1, i = n; k >= 0; k--) { /* the cuts, from the last part back */
        cut[AT_(parts, k + 1)] = i;
        i = cut[AT_(k, i)];
    }
#undef COST_
#undef AT_
}

enum zt_status zt_pipe_partition_balanced(const double *w, int n, int parts, int *first) {
    ZT_CHECK(zt_pipe_partition_uniform(n, parts, first)); /* the same checks */
    double *prefix = calloc((size_t)n + 1, sizeof *prefix);
    double *best = calloc((size_t)(parts + 1) * (size_t)(n + 1), sizeof *best);
    int *cut = calloc((size_t)(parts + 1) * (size_t)(n + 1), sizeof *cut);
    if (!prefix || !best || !cut) {
        free(prefix);
        free(best);
        free(cut);
        return zt_error_set(ZT_ERR_NOMEM, "pipeline: out of memory");
    }
    for (int i = 0; i < n; i++) prefix[i + 1] = prefix[i] + w[i];
    /* the least largest part, then among the cuts that reach it the most even (the least sum
     * of squares): with many equally good bottlenecks (one heavy layer), the others share the
     * rest instead of the last stages taking it all */
    cut_dp(prefix, n, parts, -1, best, cut);
    cut_dp(prefix, n, parts, best[(size_t)(parts - 1) * (size_t)(n + 1) + (size_t)n], best, cut);
    first[0] = 0;
    for (int k = 0; k < parts; k++) first[k + 1] = cut[(size_t)parts * (size_t)(n + 1) + k + 1];
    free(prefix);
    free(best);
    free(cut);
    return ZT_OK;
}

const char *zt_pipe_spec_name(const struct zt_model_shape *s, int i) {
    if (i == 0) return "embed";
    if (i <= s->n_layer) return "block";
    return i == s->n_layer + 1 ? "ln_f" : "head";
}

int64_t zt_pipe_spec_params(const struct zt_model_shape *s, int i) {
    const int64_t V = s->vocab_size, T = s->seq_len, C = s->n_embd;
    if (i == 0) return V * C + T * C;                /* wte, wpe */
    if (i <= s->n_layer) return 12 * C * C + 13 * C; /* 2 norms, qkv, proj, fc, fc proj */
    return i == s->n_layer + 1 ? 2 * C : V * C;      /* ln_f; the head's tied wte */
}

/* the weight of each spec under p's partition method: its parameters, 1, 1 when its name
 * matches the REGEX, or the config's partition_weights */
static enum zt_status spec_weights(const struct zt_model_shape *s,
                                   const struct zt_pipeline_cfg *p, int n, double *w) {
    if (p->partition == ZT_PIPE_WEIGHTS) {
        if (p->nweights != n)
            return zt_error_set(ZT_ERR_CONFIG, "pipeline.partition_weights has %d entries, the "
                                "model has %d layers (embed, %d blocks, ln_f, head)",
                                p->nweights, n, s->n_layer);
        for (int i = 0; i < n; i++) w[i] = p->weights[i];
        return ZT_OK;
    }
    regex_t re;
    if (p->partition == ZT_PIPE_TYPE &&
        regcomp(&re, p->partition_type, REG_EXTENDED | REG_ICASE | REG_NOSUB) != 0)
        return zt_error_set(ZT_ERR_CONFIG, "pipeline.partition \"type:%s\": not a regular "
                            "expression", p->partition_type);
    int matched = 0;
    for (int i = 0; i < n; i++) {
        if (p->partition == ZT_PIPE_PARAMETERS) w[i] = (double)zt_pipe_spec_params(s, i);
        else if (p->partition == ZT_PIPE_UNIFORM) w[i] = 1;
        else matched += (w[i] = regexec(&re, zt_pipe_spec_name(s, i), 0, NULL, 0) == 0);
    }
    if (p->partition != ZT_PIPE_TYPE) return ZT_OK;
    regfree(&re);
    if (matched) return ZT_OK;
    return zt_error_set(ZT_ERR_CONFIG, "pipeline.partition \"type:%s\" matches none of the "
                        "layers (expected a pattern over embed, block, ln_f, head)",
                        p->partition_type);
}

enum zt_status zt_pipe_plan_gpt2(const struct zt_model_shape *s, const struct zt_pipeline_cfg *p,
                                 struct zt_pipe_plan *out) {
    const int n = s->n_layer + 3;
    *out = (struct zt_pipe_plan){.stages = p->stages, .nspecs = n};
    if (p->stages > ZT_PIPE_MAX_STAGES || p->stages > n)
        return zt_error_set(ZT_ERR_CONFIG, "pipeline.stages %d: expected at most %d (the %d "
                            "layers of the model: embed, %d blocks, ln_f, head%s)", p->stages,
                            n < ZT_PIPE_MAX_STAGES ? n : ZT_PIPE_MAX_STAGES, n, s->n_layer,
                            n < ZT_PIPE_MAX_STAGES ? "" : "; and zerotask's limit");
    double *w = calloc((size_t)n, sizeof *w);
    if (!w) return zt_error_set(ZT_ERR_NOMEM, "pipeline: out of memory");
    enum zt_status rc = spec_weights(s, p, n, w);
    if (rc == ZT_OK)
        rc = p->partition == ZT_PIPE_UNIFORM
                 ? zt_pipe_partition_uniform(n, p->stages, out->first)
                 : zt_pipe_partition_balanced(w, n, p->stages, out->first);
    for (int k = 0; rc == ZT_OK && k < p->stages; k++)
        for (int i = out->first[k]; i < out->first[k + 1]; i++) out->weight[k] += w[i];
    free(w);
    return rc;
}

/* "block 3" or "embed": spec i's name with its block index */
static void spec_label(const struct zt_model_shape *s, int i, char *buf, size_t n) {
    if (i >= 1 && i <= s->n_layer) snprintf(buf, n, "block %d", i - 1);
    else snprintf(buf, n, "%s", zt_pipe_spec_name(s, i));
}

void zt_pipe_plan_describe(const struct zt_pipe_plan *pl, const struct zt_model_shape *s,
                           int stage, char *buf, size_t n) {
    char a[32], b[32];
    const int i0 = pl->first[stage], i1 = pl->first[stage + 1] - 1;
    int64_t params = 0;
    for (int i = i0; i <= i1; i++) params += zt_pipe_spec_params(s, i);
    spec_label(s, i0, a, sizeof a);
    spec_label(s, i1, b, sizeof b);
    snprintf(buf, n, "stage %d of %d: layers %d-%d (%s .. %s), %.2fM parameters", stage,
             pl->stages, i0, i1, a, b, (double)params / 1e6);
}

enum zt_status zt_pipe_stage_specs(const struct zt_model_shape *s, const struct zt_pipeline_cfg *p,
                                   const char *config_path, int stage, int *spec0, int *spec1) {
    *spec0 = 0, *spec1 = s->n_layer + 3;
    if (p->stages <= 1) return ZT_OK;
    struct zt_pipe_plan pl;
    ZT_CHECK(zt_pipe_plan_gpt2(s, p, &pl));
    ZT_CHECK(zt_pipe_plan_check_gpt2(&pl, s, config_path));
    *spec0 = pl.first[stage], *spec1 = pl.first[stage + 1];
    return ZT_OK;
}

enum zt_status zt_pipe_plan_check_gpt2(const struct zt_pipe_plan *pl,
                                       const struct zt_model_shape *s, const char *config_path) {
    for (int k = 1; k < pl->stages; k++)
        if (pl->first[k] == s->n_layer + 2)
            return zt_error_set(ZT_ERR_CONFIG, "config %s: pipeline.partition cuts between ln_f "
                                "and the head (stage %d starts at the head): not implemented; "
                                "another partition or stage count keeps them together",
                                config_path, k);
    return ZT_OK;
}
