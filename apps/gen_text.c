/*
 * apps/gen_text.c: a request's text as its ids come (gen_text.h).
 *
 * Each update decodes every id again: a token can change how the bytes before it read only
 * through the UTF-8 sequences it completes, so decoding the whole list keeps the text exactly
 * what the tokenizer gives for the ids, at a cost (a few KB per token) far below a decode step.
 */
#include <stdlib.h>   /* free, malloc */
#include <string.h>   /* strstr, memcmp, strlen */
#include "gen_text.h"

/* text[0..*len) with each NUL byte as U+FFFD (a new string; text freed) */
static char *without_nul(char *text, size_t *len) {
    size_t nul = 0;
    for (size_t i = 0; i < *len; i++) nul += text[i] == '\0';
    if (!nul) return text;
    char *out = malloc(*len + 2 * nul + 1), *o = out;
    for (size_t i = 0; out && i < *len; i++) {
        if (text[i]) {
            *o++ = text[i];
        } else {
            memcpy(o, "\xEF\xBF\xBD", 3);
            o += 3;
        }
    }
    free(text);
    if (!out) return NULL;
    *o = '\0';
    *len = (size_t)(o - out);
    return out;
}

enum zt_status gen_text_decode(const struct zt_tokenizer *tok, const int32_t *ids, int n,
                               char **text, size_t *len) {
    int32_t *known = malloc(((size_t)n + 1) * sizeof *known);
    if (!known) return zt_error_set(ZT_ERR_NOMEM, "out of memory for a text");
    int k = 0;
    for (int i = 0; i < n; i++)
        if (zt_tokenizer_known(tok, ids[i])) known[k++] = ids[i];
    enum zt_status rc = zt_tokenizer_decode(tok, known, (size_t)k, text, len);
    free(known);
    if (rc != ZT_OK) return rc;
    if (!(*text = without_nul(*text, len)))
        return zt_error_set(ZT_ERR_NOMEM, "out of memory for a text");
    return ZT_OK;
}

enum zt_status gen_text_update(struct gen_text *t, const struct zt_tokenizer *tok,
                               const int32_t *ids, int n, const char *const *stops, int nstops) {
    char *text = NULL;
    size_t len = 0;
    ZT_CHECK(gen_text_decode(tok, ids, n, &text, &len));
    char *cut = NULL;
    for (int i = 0; i < nstops; i++) {
        char *at = stops[i][0] ? strstr(text, stops[i]) : NULL;
        if (at && (!cut || at < cut)) cut = at;
    }
    if (cut) {
        *cut = '\0';
        len = (size_t)(cut - text);
    }
    free(t->text);
    t->text = text;
    t->len = len;
    t->stopped = cut != NULL;
    return ZT_OK;
}

/* bytes of s[0..n) up to the last whole UTF-8 character */
static size_t whole_utf8(const char *s, size_t n) {
    size_t k = n;
    while (k > 0 && ((unsigned char)s[k - 1] & 0xC0) == 0x80) k--;
    if (k == 0) return n;
    unsigned char c = (unsigned char)s[k - 1];
    size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return n - (k - 1) >= need ? n : k - 1;
}

/* text[0..n) less its longest end that is the start of stop */
static size_t before_stop(const char *text, size_t n, const char *stop) {
    size_t ls = strlen(stop), k = ls > 0 ? ls - 1 : 0;
    for (k = k < n ? k : n; k > 0; k--)
        if (!memcmp(text + n - k, stop, k)) return n - k;
    return n;
}

size_t gen_text_showable(const struct gen_text *t, const char *const *stops, int nstops,
                         int ended) {
    if (!t->text) return 0;
    size_t n = t->len;
    if (ended || t->stopped) return n;
    for (int i = 0; i < nstops; i++) n = before_stop(t->text, n, stops[i]);
    return whole_utf8(t->text, n);
}

void gen_text_free(struct gen_text *t) {
    free(t->text);
    *t = (struct gen_text){0};
}
