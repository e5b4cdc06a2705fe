/*
 * graph/gpt2_weights.c: which tensors of a weights file (safetensors, Hugging Face GPT-2 names)
 * a GPT-2 of a given shape takes, and the one-line refusal (or, relaxed, the warning) naming
 * those it does not.
 *
 * Layer: graph/. Reads the file's header and, for lm_head.weight, compares its bytes with wte's
 * (the tie); the parameters' names come from zt_gpt2_param_info (graph/gpt2.c).
 */
#include <stdio.h>          /* snprintf, fprintf */
#include <string.h>         /* strcmp, strncmp, memcmp */
#include "zt_comm.h"        /* zt_comm_rank */
#include "zt_gpt2.h"        /* our API */
#include "zt_safetensors.h" /* struct zt_safetensors, zt_st_find */

/* whether suffix (after "transformer.h.<l>.") names one of a layer's parameters */
static int layer_param_suffix(const struct zt_model_shape *sh, const char *suffix) {
    static const char layer0[] = "transformer.h.0.";
    char name[160];
    for (int i = 0; i < zt_gpt2_nparams(sh); i++) {
        int ndim;
        int64_t shape[2];
        zt_gpt2_param_info(sh, i, name, sizeof name, &ndim, shape);
        if (!strncmp(name, layer0, sizeof layer0 - 1) && !strcmp(name + sizeof layer0 - 1, suffix))
            return 1;
    }
    return 0;
}

/* what a tensor of a weights file is to a GPT-2 of a given shape */
enum file_tensor {
    FT_TAKEN,        /* one of the model's parameters */
    FT_LEFT,         /* what Hugging Face files hold besides them: a layer's attention mask
                      * buffers (attn.bias, attn.masked_bias), lm_head.weight equal to wte */
    FT_OTHER_LAYER,  /* a tensor of a layer the model does not have */
    FT_UNTIED_HEAD,  /* lm_head.weight differing from transformer.wte.weight */
    FT_UNKNOWN,
};

/* the layer number at s ("<l>." with no sign and no leading zero), -1 when there is none;
 * *rest: after the dot */
static long layer_number(const char *s, const char **rest) {
    long l = 0;
    const char *c = s;
    for (; *c >= '0' && *c <= '9' && c - s < 9; c++) l = l * 10 + (*c - '0');
    if (c == s || *c != '.' || (s[0] == '0' && c - s > 1)) return -1;
    *rest = c + 1;
    return l;
}

/* lm_head.weight is the model's wte (tied): accepted when it is the same bytes */
static int head_is_wte(const struct zt_safetensors *st, const struct zt_st_tensor *head) {
    const struct zt_st_tensor *wte = zt_st_find(st, "transformer.wte.weight");
    if (!wte || wte->dtype != head->dtype || wte->ndim != head->ndim ||
        wte->end - wte->begin != head->end - head->begin)
        return 0;
    for (int d = 0; d < wte->ndim; d++)
        if (wte->shape[d] != head->shape[d]) return 0;
    return memcmp(st->data + wte->begin, st->data + head->begin, wte->end - wte->begin) == 0;
}

static enum file_tensor classify(const struct zt_model_shape *sh, const struct zt_safetensors *st,
                                 const struct zt_st_tensor *t) {
    static const char *const whole_model[] = {"transformer.wte.weight", "transformer.wpe.weight",
                                              "transformer.ln_f.weight", "transformer.ln_f.bias"};
    static const char prefix[] = "transformer.h.";
    for (size_t i = 0; i < sizeof whole_model / sizeof *whole_model; i++)
        if (!strcmp(t->name, whole_model[i])) return FT_TAKEN;
    if (!strcmp(t->name, "lm_head.weight"))
        return head_is_wte(st, t) ? FT_LEFT : FT_UNTIED_HEAD;
    if (strncmp(t->name, prefix, sizeof prefix - 1) != 0) return FT_UNKNOWN;
    const char *suffix = NULL;
    long l = layer_number(t->name + sizeof prefix - 1, &suffix);
    if (l < 0) return FT_UNKNOWN;
    enum file_tensor kind = layer_param_suffix(sh, suffix) ? FT_TAKEN : FT_UNKNOWN;
    if (!strcmp(suffix, "attn.bias") || !strcmp(suffix, "attn.masked_bias")) kind = FT_LEFT;
    if (kind != FT_UNKNOWN && l >= sh->n_layer) kind = FT_OTHER_LAYER;
    return kind;
}

enum { NAMED = 3 }; /* tensors the model does not take that a message names */

/* rank 0, relaxed: one warning line naming the first few tensors ignored */
static void warn_ignored(const struct zt_safetensors *st, const int *first, int n) {
    char names[4 * ZT_ST_MAX_NAME] = "";
    size_t at = 0;
    for (int k = 0; k < n && k < NAMED; k++)
        at += (size_t)snprintf(names + at, sizeof names - at, "%s'%s'", k ? ", " : "",
                               st->t[first[k]].name);
    fprintf(stderr, "zerotask: warning: safetensors %s: ignored %d tensor(s) the model does not "
                    "have (--init-from-relaxed): %s%s\n", st->path, n, names,
            n > NAMED ? ", ..." : "");
}

enum zt_status zt_gpt2_check_weights(const struct zt_model_shape *sh,
                                     const struct zt_safetensors *st, int relaxed) {
    int first[NAMED], n = 0; /* the first tensors not taken (header order), how many in all */
    enum file_tensor first_kind = FT_TAKEN;
    for (int i = 0; i < st->n; i++) {
        enum file_tensor kind = classify(sh, st, &st->t[i]);
        if (kind == FT_TAKEN || kind == FT_LEFT) continue;
        if (n == 0) first_kind = kind;
        if (n < NAMED) first[n] = i;
        n++;
    }
    if (n == 0) return ZT_OK;
    if (relaxed) {
        if (zt_comm_rank() == 0) warn_ignored(st, first, n);
        return ZT_OK;
    }
    char why[96] = "";
    if (first_kind == FT_OTHER_LAYER) snprintf(why, sizeof why, " (n_layer is %d)", sh->n_layer);
    if (first_kind == FT_UNTIED_HEAD)
        snprintf(why, sizeof why, " (the model ties it to transformer.wte.weight, which differs)");
    return zt_error_set(ZT_ERR_CKPT_CORRUPT, "safetensors %s: %d tensor(s) the model does not "
                        "have, first '%s'%s; --init-from-relaxed loads anyway", st->path, n,
                        st->t[first[0]].name, why);
}
