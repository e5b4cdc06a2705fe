/*
 * apps/gen_text.h: the text of a request's generated ids as it grows (zt-generate, zt-serve):
 * decoded with the tokenizer, cut before the first stop string it reaches, and how much of it
 * can be shown so far (whole UTF-8 characters only, and no end that may still turn out to
 * begin a stop string).
 *
 * Layer: apps/ (compiled into the programs that stream text).
 */
#ifndef ZT_APPS_GEN_TEXT_H
#define ZT_APPS_GEN_TEXT_H

#include <stddef.h>    /* size_t */
#include <stdint.h>    /* int32_t */
#include "zerotask.h"  /* struct zt_tokenizer */

struct gen_text {
    char *text;  /* the decoded ids up to a stop string (NUL-terminated; NULL before any) */
    size_t len;
    int stopped; /* a stop string was reached: text ends before it */
};

/* ids[0..n) as text for people and JSON: ids the tokenizer does not know (a model's padded
 * vocabulary) are left out, as Hugging Face's decode does, and a NUL byte (the byte-level token
 * of 0x00) becomes U+FFFD, so that the text is a C string (*len bytes, malloc'd) */
enum zt_status gen_text_decode(const struct zt_tokenizer *tok, const int32_t *ids, int n,
                               char **text, size_t *len);
/* t := gen_text_decode of ids[0..n), cut before the earliest of stops[0..nstops) (empty
 * strings are never matched); ZT_ERR_NOMEM leaves t as it was */
enum zt_status gen_text_update(struct gen_text *t, const struct zt_tokenizer *tok,
                               const int32_t *ids, int n, const char *const *stops, int nstops);
/* bytes of t->text that may be shown: all of it once the request has ended; before that, up
 * to the last whole UTF-8 character and short of any end that is the start of a stop string */
size_t gen_text_showable(const struct gen_text *t, const char *const *stops, int nstops,
                         int ended);
void gen_text_free(struct gen_text *t);

#endif /* ZT_APPS_GEN_TEXT_H */
