/*
 * apps/zt_prepare/documents.c: the documents of one batch: a whole file, or the lines of a
 * JSONL chunk (one JSON object with a string "text" each), through the rules of zt-prepare:
 *   - an empty document (an empty file, a blank JSONL line, "text": "") is skipped and counted;
 *   - a JSONL object without "text" (or with "text": null) is skipped and counted, or is an
 *     error when the rules are strict (tokenizer training); a line that is not one JSON object,
 *     or whose "text" is not a string, is an error naming the file and line;
 *   - with a tokenizer, a document that is not valid UTF-8 is skipped and counted, repaired as
 *     Python's bytes.decode("utf-8", errors="replace") repairs it, or is an error (--bad-utf8);
 *   - every kept document becomes <|endoftext|> (when the tokenizer has it) and its ids, or,
 *     byte-level, one token per byte; or, for training, its pieces are counted.
 *
 * Layer: apps/ (private to zt-prepare, prepare.h). batch_run touches only its batch and the
 * read-only tokenizer (io/zt_tokenizer.h: encode may run on many threads), so batches run on
 * any number of threads at once; counting pieces for training is the exception (one thread).
 * Error lines are copied into the batch: io/'s last-error buffer is per thread.
 */
#include <stdlib.h>      /* malloc, realloc, free */
#include <string.h>      /* memcpy, memchr, strlen, strspn */
#include <cjson/cJSON.h> /* JSONL lines */
#include "prepare.h"

// ---------------------------------------------------------------------------------------------
// UTF-8, as Python decodes it

/* The length (1-4) of the valid UTF-8 sequence at s[0..n), or minus the length of its maximal
 * invalid subpart: the bytes that begin a valid sequence but do not finish it, at least 1
 * (Unicode's "maximal subpart" rule, which CPython's decoder follows: each such subpart becomes
 * one U+FFFD). Overlong forms, surrogates and code points above U+10FFFF are invalid. */
static int utf8_step(const unsigned char *s, size_t n) {
    unsigned c = s[0], lo = 0x80, hi = 0xBF;
    int need;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) {
        need = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 2;
        if (c == 0xE0) lo = 0xA0; /* overlong below */
        if (c == 0xED) hi = 0x9F; /* surrogates above */
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 3;
        if (c == 0xF0) lo = 0x90; /* overlong below */
        if (c == 0xF4) hi = 0x8F; /* past U+10FFFF above */
    } else {
        return -1;
    }
    for (int k = 1; k <= need; k++) {
        if ((size_t)k >= n || s[k] < lo || s[k] > hi) return -k;
        lo = 0x80;
        hi = 0xBF;
    }
    return need + 1;
}

size_t utf8_first_invalid(const char *text, size_t len) {
    const unsigned char *s = (const unsigned char *)text;
    size_t i = 0;
    while (i < len) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        int k = utf8_step(s + i, len - i);
        if (k < 0) return i;
        i += (size_t)k;
    }
    return len;
}

char *utf8_replace(const char *text, size_t len, size_t *out_len) {
    static const char fffd[3] = {(char)0xEF, (char)0xBF, (char)0xBD};
    char *out = malloc(3 * len + 1); /* at worst each byte becomes the 3 bytes of U+FFFD */
    if (!out) return NULL;
    const unsigned char *s = (const unsigned char *)text;
    size_t i = 0, o = 0;
    while (i < len) {
        int k = utf8_step(s + i, len - i);
        if (k > 0) {
            memcpy(out + o, text + i, (size_t)k);
            o += (size_t)k;
            i += (size_t)k;
        } else {
            memcpy(out + o, fffd, sizeof fffd);
            o += sizeof fffd;
            i += (size_t)-k;
        }
    }
    out[o] = '\0';
    *out_len = o;
    return out;
}

// ---------------------------------------------------------------------------------------------
// one document

/* room in b for n more tokens and one more document */
static enum zt_status batch_reserve(struct batch *b, size_t n) {
    if (b->ntok + n > b->tokcap) {
        size_t cap = b->tokcap ? b->tokcap : 4096;
        while (cap < b->ntok + n) cap *= 2;
        uint16_t *t = realloc(b->tok, cap * sizeof *t);
        if (!t) return zt_error_set(ZT_ERR_NOMEM, "input %s: out of memory for %zu tokens",
                                    b->path, b->ntok + n);
        b->tok = t;
        b->tokcap = cap;
    }
    if (b->ndoc == b->doccap) {
        size_t cap = b->doccap ? 2 * b->doccap : 64;
        size_t *d = realloc(b->doc_end, cap * sizeof *d);
        if (!d) return zt_error_set(ZT_ERR_NOMEM, "input %s: out of memory", b->path);
        b->doc_end = d;
        b->doccap = cap;
    }
    return ZT_OK;
}

/* an error of the tokenizer (its line already set) as "input PATH[ line N]: <it>" */
static enum zt_status doc_error(const struct batch *b, size_t line) {
    char why[900];
    snprintf(why, sizeof why, "%s", zt_error_last());
    if (line) return zt_error_set(ZT_ERR_DATA, "input %s line %zu: %s", b->path, line, why);
    return zt_error_set(ZT_ERR_DATA, "input %s: %s", b->path, why);
}

/* text[0..len), valid UTF-8 unless byte-level, into b: its tokens, or its counted pieces */
static enum zt_status doc_keep(struct batch *b, const struct doc_rules *r, const char *text,
                               size_t len, size_t line) {
    if (r->train) {
        if (zt_bpe_counts_add(r->train, text, len) != ZT_OK) return doc_error(b, line);
        b->ndoc++;
        return ZT_OK;
    }
    if (!r->tok) { /* byte-level: every byte one token */
        ZT_CHECK(batch_reserve(b, len));
        for (size_t i = 0; i < len; i++) b->tok[b->ntok++] = (unsigned char)text[i];
        b->doc_end[b->ndoc++] = b->ntok;
        return ZT_OK;
    }
    int32_t *ids = NULL;
    size_t n = 0;
    if (zt_tokenizer_encode(r->tok, text, len, &ids, &n) != ZT_OK) return doc_error(b, line);
    enum zt_status rc = batch_reserve(b, n + 1);
    if (rc == ZT_OK) {
        if (r->eot >= 0) b->tok[b->ntok++] = (uint16_t)r->eot;
        for (size_t i = 0; i < n; i++) b->tok[b->ntok++] = (uint16_t)ids[i]; /* < 65536 */
        b->doc_end[b->ndoc++] = b->ntok;
    }
    free(ids);
    return rc;
}

/* one document text[0..len) (line: its JSONL line, 0 for a whole file) through the rules */
static enum zt_status doc_run(struct batch *b, const struct doc_rules *r, const char *text,
                              size_t len, size_t line) {
    if (len == 0) {
        b->empty++;
        return ZT_OK;
    }
    int text_rules = r->tok || r->train;
    if (!text_rules || r->bad_utf8 == BAD_UTF8_ERROR || utf8_first_invalid(text, len) == len)
        return doc_keep(b, r, text, len, line); /* an invalid one fails in there, named */
    b->bad_utf8++;
    if (r->bad_utf8 == BAD_UTF8_SKIP) return ZT_OK;
    size_t n = 0;
    char *fixed = utf8_replace(text, len, &n);
    if (!fixed) return zt_error_set(ZT_ERR_NOMEM, "input %s: out of memory", b->path);
    enum zt_status rc = doc_keep(b, r, fixed, n, line);
    free(fixed);
    return rc;
}

// ---------------------------------------------------------------------------------------------
// JSONL

/* one JSONL line s[0..n) (not blank), line its number */
static enum zt_status jsonl_line(struct batch *b, const struct doc_rules *r, const char *s,
                                 size_t n, size_t line) {
    const char *end = NULL;
    cJSON *obj = cJSON_ParseWithLengthOpts(s, n, &end, 0);
    size_t at = end ? (size_t)(end - s) : 0;
    if (obj && at < n && strspn(end, " \t\r") < n - at) { /* one value, then more */
        cJSON_Delete(obj);
        obj = NULL;
    }
    if (!obj)
        return zt_error_set(ZT_ERR_DATA, "input %s line %zu: not valid JSON (at column %zu); "
                                         "expected one JSON object with a string \"text\"",
                            b->path, line, at + 1);
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(obj, "text");
    enum zt_status rc = ZT_OK;
    if (!cJSON_IsObject(obj) || (text && !cJSON_IsNull(text) && !cJSON_IsString(text)) ||
        (!cJSON_IsString(text) && r->strict_text))
        rc = zt_error_set(ZT_ERR_DATA, "input %s line %zu: expected a JSON object with a "
                                       "string \"text\"", b->path, line);
    else if (!cJSON_IsString(text))
        b->no_text++;
    else
        rc = doc_run(b, r, text->valuestring, strlen(text->valuestring), line);
    cJSON_Delete(obj);
    return rc;
}

/* every line of b (whole lines: the reader cuts after a newline) */
static enum zt_status jsonl_lines(struct batch *b, const struct doc_rules *r) {
    size_t line = b->line0;
    for (char *s = b->buf, *end = b->buf + b->len; s < end; line++) {
        char *nl = memchr(s, '\n', (size_t)(end - s));
        size_t n = nl ? (size_t)(nl - s) : (size_t)(end - s);
        if (strspn(s, " \t\r") >= n) { /* a blank line: an empty document */
            b->empty++;
        } else {
            enum zt_status rc = jsonl_line(b, r, s, n, line);
            if (rc != ZT_OK) return rc;
        }
        s = nl ? nl + 1 : end;
    }
    return ZT_OK;
}

enum zt_status batch_run(struct batch *b, const struct doc_rules *r) {
    b->rc = b->jsonl ? jsonl_lines(b, r) : doc_run(b, r, b->buf, b->len, 0);
    if (b->rc != ZT_OK) snprintf(b->err, sizeof b->err, "%s", zt_error_last());
    return b->rc;
}

void batch_clear(struct batch *b) {
    free(b->buf);
    free(b->tok);
    free(b->doc_end);
    *b = (struct batch){0};
}
