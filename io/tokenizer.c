/*
 * io/tokenizer.c: GPT-2-style byte-level BPE (zt_tokenizer.h), bit-identical to Hugging Face
 * `tokenizers`.
 *
 * Layer: io/ (no StarPU). Every token is kept as its raw bytes: the byte-level alphabet of GPT-2
 * (bytes_to_unicode) maps each byte to one printable character, so a vocabulary string is
 * decoded once at load and the vocabulary, the merges and decode all work on bytes. A merge is
 * a hash entry (left id, right id) -> (rank, merged id). A word is merged the way `tokenizers`
 * does it (models/bpe/word.rs): a min-heap of candidate pairs keyed by (rank, position), a pair
 * popped stale is skipped, so a word of n bytes costs O(n log n).
 */
#include "zt_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <cjson/cJSON.h> /* the JSON files */
#include <errno.h>       /* errno */
#include <pcre2.h>       /* GPT-2's pre-tokenisation regex */
#include <stdio.h>       /* snprintf */
#include <stdlib.h>      /* malloc, free */
#include <string.h>      /* memcpy, strcmp, strerror */
#include <unistd.h>      /* access */

#include "zt_file.h"     /* zt_file_read_all */
#include "zt_status.h"   /* zt_error_set */
#include "tokenizer_impl.h"  /* ZT_GPT2_PATTERN, zt_bpe_byte_alphabet, zt_bpe_hash_* */

/* GPT-2's pre-tokenisation pattern (tokenizer_impl.h says why \s is spelled out) */
static const char GPT2_PATTERN[] = ZT_GPT2_PATTERN;

#define MAX_FILE_BYTES ((size_t)1 << 30)

/* one hash table slot: a byte string -> id (vocab), or a pair -> merge (merges) */
struct vslot {
    const char *key; /* points into the token's bytes; NULL: empty */
    size_t len;
    int32_t id;
};
struct mslot {
    uint64_t pair; /* left << 32 | right; UINT64_MAX: empty */
    int32_t rank, merged;
};
struct added {
    char *content;
    size_t len;
    int32_t id;
};

struct zt_tokenizer {
    char path[600];       /* the file being read, for errors */
    int32_t nvocab;       /* one past the largest id */
    char **tok;           /* [nvocab] a token's raw bytes (NULL: no token has that id) */
    size_t *tok_len;      /* [nvocab] */
    struct vslot *vocab;  /* bytes -> id, vcap slots */
    size_t vcap;
    struct mslot *merges; /* pair -> merge, mcap slots */
    size_t mcap;
    int32_t byte_id[256]; /* the id of each single byte */
    int16_t byte_of_cp[512]; /* the byte-level alphabet backwards: code point -> byte, or -1 */
    struct added *added;  /* added tokens, matched before the regex */
    int nadded;
    pcre2_code *re;
};

// ---------------------------------------------------------------------------------------------
// UTF-8 (the byte-level alphabet: tokenizer_impl.h)

/* Length of the valid UTF-8 sequence at s[0..n) (1-4), or 0 when invalid (overlong, surrogate,
 * above U+10FFFF, truncated); *cp its code point. */
static int utf8_next(const unsigned char *s, size_t n, uint32_t *cp) {
    unsigned c = s[0];
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || (size_t)len > n) return 0;
    uint32_t v = len == 1 ? c : c & (0x7fu >> len);
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        v = v << 6 | (s[i] & 0x3f);
    }
    static const uint32_t min_of_len[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (v < min_of_len[len] || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff)) return 0;
    *cp = v;
    return len;
}

/* offset of the first invalid UTF-8 byte of s[0..n), or n */
static size_t utf8_invalid_at(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    uint32_t cp;
    while (i < n) {
        if (u[i] < 0x80) {
            i++;
            continue;
        }
        int l = utf8_next(u + i, n - i, &cp);
        if (!l) return i;
        i += (size_t)l;
    }
    return n;
}

/* A vocabulary string (byte-level characters) -> its raw bytes in out (at most n bytes);
 * returns the byte count, or -1 when a character is outside the alphabet. */
static long unmap_token(const char *s, size_t n, const int16_t *byte_of_cp, char *out) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    long k = 0;
    while (i < n) {
        uint32_t cp;
        int l = utf8_next(u + i, n - i, &cp);
        if (!l || cp >= 512 || byte_of_cp[cp] < 0) return -1;
        out[k++] = (char)byte_of_cp[cp];
        i += (size_t)l;
    }
    return k;
}

// ---------------------------------------------------------------------------------------------
// hash tables


static size_t pow2_at_least(size_t n) {
    size_t c = 16;
    while (c < 2 * n) c *= 2;
    return c;
}

static int32_t vocab_find(const struct zt_tokenizer *t, const char *s, size_t n) {
    for (size_t i = zt_bpe_hash_bytes(s, n) & (t->vcap - 1);; i = (i + 1) & (t->vcap - 1)) {
        const struct vslot *v = &t->vocab[i];
        if (!v->key) return -1;
        if (v->len == n && memcmp(v->key, s, n) == 0) return v->id;
    }
}

/* 0, or -1 when s is already there */
static int vocab_insert(struct zt_tokenizer *t, const char *s, size_t n, int32_t id) {
    size_t i = zt_bpe_hash_bytes(s, n) & (t->vcap - 1);
    for (; t->vocab[i].key; i = (i + 1) & (t->vcap - 1))
        if (t->vocab[i].len == n && memcmp(t->vocab[i].key, s, n) == 0) return -1;
    t->vocab[i] = (struct vslot){s, n, id};
    return 0;
}

static const struct mslot *merge_find(const struct zt_tokenizer *t, int32_t a, int32_t b) {
    uint64_t p = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    for (size_t i = zt_bpe_hash_pair(p) & (t->mcap - 1);; i = (i + 1) & (t->mcap - 1)) {
        if (t->merges[i].pair == UINT64_MAX) return NULL;
        if (t->merges[i].pair == p) return &t->merges[i];
    }
}

// ---------------------------------------------------------------------------------------------
// loading

/* the tokens: ids from a JSON object {"string": id}; added tokens keep their content as bytes */
static enum zt_status load_vocab(struct zt_tokenizer *t, const cJSON *vocab) {
    if (!cJSON_IsObject(vocab))
        return zt_error_set(ZT_ERR_CONFIG, "tokenizer %s: expected the vocabulary as an object "
                                           "{\"token\": id}", t->path);
    int32_t n = 0;
    for (const cJSON *e = vocab->child; e; e = e->next) {
        if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble > 1e8 ||
            e->valuedouble != (double)(int32_t)e->valuedouble)
            return zt_error_set(ZT_ERR_CONFIG, "tokenizer %s: vocabulary entry \"%s\": expected "
                                               "an integer id in [0, 1e8]", t->path, e->string);
        if ((int32_t)e->valuedouble >= n) n = (int32_t)e->valuedouble + 1;
    }
    for (int a = 0; a < t->nadded; a++)
        if (t->added[a].id >= n) n = t->added[a].id + 1;
    if (n == 0)
        return zt_error_set(ZT_ERR_CONFIG, "tokenizer %s: expected a non-empty vocabulary",
                            t->path);
    t->nvocab = n;
    t->tok = calloc((size_t)n, sizeof *t->tok);
    t->tok_len = calloc((size_t)n, sizeof *t->tok_len);
    t->vcap = pow2_at_least((size_t)n);
    t->vocab = calloc(t->vcap, sizeof *t->vocab);
    if (!t->tok || !t->tok_len || !t->vocab)
        return zt_error_set(ZT_ERR_NOMEM, "tokenizer %s: no memory for %d tokens", t->path, n);
    for (int a = 0; a < t->nadded; a++) {
        int32_t id = t->added[a].id;
        if (t->tok[id] && (t->tok_len[id] != t->added[a].len ||
                           memcmp(t->tok[id], t->added[a].content, t->added[a].len) != 0))
            return zt_error_set(ZT_ERR_CONFIG, "tokenizer %s: added tokens \"%s\" and \"%s\" "
                                               "share id %d", t->path, t->tok[id],
                                t->added[a].content, id);
        if (!(t->tok[id] = strdup(t->added[a].content)))
            return zt_error_set(ZT_ERR_NOMEM, "tokenizer %s: no memory", t->path);
        t->tok_len[id] = t->added[a].len;
    }
    return ZT_OK;
}

/* the bytes of each vocabulary string, the bytes -> id table and byte_id */
static enum zt_status index_vocab(struct zt_tokenizer *t, const cJSON *vocab) {
    for (const cJSON *e = vocab->child; e; e = e->next) {
        int32_t id = (int32_t)e->valuedouble;
        size_t n = strlen(e->string);
        if (t->tok[id]) { /* an added token's id: its content is the token */
            continue;
        }
        if (!(t->tok[id] = malloc(n + 1)))
            return zt_error_set(ZT_ERR_NOMEM, "tokenizer %s: no memory", t->path);
        long k = unmap_token(e->string, n, t->byte_of_cp, t->tok[id]);
        if (k < 0)
            return zt_error_set(ZT_ERR_CONFIG, "tokenizer %s: token \"%s\" (id %d) has a "
                                               "character outside GPT-2's byte-level alphabet",
                                t->path, e->string, id);
        t->tok[id][k] = '\0';
        t->tok_len[id] = (size_t)k;
    }
    for (int32_t id = 0; id < t->nvocab; id++) {
        if (t->tok[id] && vocab_insert(t, t->tok[id], t->tok_len[id], id) != 0)
            return zt_error_set(ZT_ERR_CONFIG, "tokenizer %s: token id %d repeats the bytes of "
                                               "another token", t->path, id);
    }
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        if ((t->byte_id[b] = vocab_find(t, &c, 1)) < 0)
            return zt_error_set(ZT_ERR_CONFIG, "tokenizer %s: the vocabulary lacks byte 0x%02x "
                                               "(expected all 256 byte-level symbols)", t->path,
                                b);
    }
    return ZT_OK;
}

/* the id of the byte-level string s[0..n) (a merge's side), or -1 */
static int32_t id_of_string(const struct zt_tokenizer *t, const char *s, size_t n) {
    char small[256], *buf = n <= sizeof small ? small : malloc(n);
    if (!buf) return -1;
    long k = unmap_token(s, n, t->byte_of_cp, buf);
    int32_t id = k < 0 ? -1 : vocab_find(t, buf, (size_t)k);
    if (buf != small) free(buf);
    return id;
}

/* merge number `rank` of "a b": both sides and their concatenation must be tokens */
static enum zt_status add_merge(struct zt_tokenizer *t, int32_t rank, const char *a, size_t na,
                                const char *b, size_t nb) {
    int32_t ia = id_of_string(t, a, na), ib = id_of_string(t, b, nb);
    if (ia < 0 || ib < 0)
        return zt_error_set(ZT_ERR_CONFIG, "tokenizer %s: merge %d \"%.*s %.*s\": expected both "
                                           "sides in the vocabulary", t->path, rank, (int)na, a,
                            (int)nb, b);
    size_t n = t->tok_len[ia] + t->tok_len[ib];
    char *cat = malloc(n + 1);
    if (!cat) return zt_error_set(ZT_ERR_NOMEM, "tokenizer %s: no memory", t->path);
    memcpy(cat, t->tok[ia], t->tok_len[ia]);
    memcpy(cat + t->tok_len[ia], t->tok[ib], t->tok_len[ib]);
    int32_t merged = vocab_find(t, cat, n);
    free(cat);
    if (merged < 0)
        return zt_error_set(ZT_ERR_CONFIG, "tokenizer %s: merge %d \"%.*s %.*s\": expected the "
                                           "merged token in the vocabulary", t->path, rank,
                            (int)na, a, (int)nb, b);
    uint64_t p = (uint64_t)(uint32_t)ia << 32 | (uint32_t)ib;
    size_t i = zt_bpe_hash_pair(p) & (t->mcap - 1);
    while (t->merges[i].pair != UINT64_MAX && t->merges[i].pair != p) i = (i + 1) & (t->mcap - 1);
    if (t->merges[i].pair == p) return ZT_OK; /* a repeated merge keeps its first rank */
    t->merges[i] = (struct mslot){p, rank, merged};
    return ZT_OK;
}

static enum zt_status alloc_merges(struct zt_tokenizer *t, size_t n) {
    t->mcap = pow2_at_least(n);
    t->merges = malloc(t->mcap * sizeof *t->merges);
    if (!t->merges) return zt_error_set(ZT_ERR_NOMEM, "tokenizer %s: no memory", t->path);
    for (size_t i = 0; i < t->mcap; i++) t->merges[i].pair = UINT64_MAX;
    return ZT_OK;
}

/* "a b" -> the two sides split at its one space */
static enum zt_status add_merge_line(struct zt_tokenizer *t, int32_t rank, const char *s,
                                     size_t n) {
    const char *sp = memchr(s, ' ', n);
    if (!sp || sp == s || sp == s + n - 1 || memchr(sp + 1, ' ', (size_t)(s + n - sp - 1)))
        return zt_error_set(ZT_ERR_CONFIG, "tokenizer %s: merge %d \"%.*s\": expected two "
                                           "tokens separated by one space", t->path, rank,
                            (int)n, s);
    return add_merge(t, rank, s, (size_t)(sp - s), sp + 1, (size_t)(s + n - sp - 1));
}

/* model.merges of tokenizer.json: ["a b", ...] or [["a", "b"], ...] */
static enum zt_status load_json_merges(struct zt_tokenizer *t, const cJSON *merges) {
    if (!cJSON_IsArray(merges))
        return zt_error_set(ZT_ERR_CONFIG, "tokenizer %s: expected model.merges as an array",
                            t->path);
    ZT_CHECK(alloc_merges(t, (size_t)cJSON_GetArraySize(merges)));
    int32_t rank = 0;
    for (const cJSON *m = merges->child; m; m = m->next, rank++) {
        if (cJSON_IsString(m)) {
            ZT_CHECK(add_merge_line(t, rank, m->valuestring, strlen(m->valuestring)));
            continue;
        }
        const cJSON *a = cJSON_GetArrayItem(m, 0), *b = cJSON_GetArrayItem(m, 1);
        if (!cJSON_IsArray(m) || cJSON_GetArraySize(m) != 2 || !cJSON_IsString(a) ||
            !cJSON_IsString(b))
            return zt_error_set(ZT_ERR_CONFIG, "tokenizer %s: merge %d: expected \"a b\" or "
                                               "[\"a\", \"b\"]", t->path, rank);
        ZT_CHECK(add_merge(t, rank, a->valuestring, strlen(a->valuestring), b->valuestring,
                           strlen(b->valuestring)));
    }
    return ZT_OK;
}

/* merges.txt: an optional "#version" line, then one "a b" per line */
static enum zt_status load_merges_txt(struct zt_tokenizer *t, char *text, size_t len) {
    size_t lines = 1;
    for (size_t i = 0; i < len; i++) lines += text[i] == '\n';
    ZT_CHECK(alloc_merges(t, lines));
    int32_t rank = 0;
    for (char *s = text, *end = text + len; s < end;) {
        char *nl = memchr(s, '\n', (size_t)(end - s));
        size_t n = nl ? (size_t)(nl - s) : (size_t)(end - s);
        if (n && s[n - 1] == '\r') n--;
        if (n && !(rank == 0 && s == text && strncmp(s, "#version", 8) == 0))
            ZT_CHECK(add_merge_line(t, rank++, s, n));
        s = nl ? nl + 1 : end;
    }
    return ZT_OK;
}

static enum zt_status add_special(struct zt_tokenizer *t, const char *content, int32_t id) {
    struct added *a = realloc(t->added, (size_t)(t->nadded + 1) * sizeof *a);
    if (!a) return zt_error_set(ZT_ERR_NOMEM, "tokenizer %s: no memory", t->path);
    t->added = a;
    if (!(a[t->nadded].content = strdup(content)))
        return zt_error_set(ZT_ERR_NOMEM, "tokenizer %s: no memory", t->path);
    a[t->nadded].len = strlen(content);
    a[t->nadded++].id = id;
    return ZT_OK;
}

/* added_tokens: [{"id": N, "content": S, ...}]; lstrip, rstrip and single_word are refused */
static enum zt_status load_added(struct zt_tokenizer *t, const cJSON *list) {
    if (!list || cJSON_IsNull(list)) return ZT_OK;
    if (!cJSON_IsArray(list))
        return zt_error_set(ZT_ERR_CONFIG, "tokenizer %s: expected added_tokens as an array",
                            t->path);
    for (const cJSON *e = list->child; e; e = e->next) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id");
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(e, "content");
        if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble > 1e8 ||
            !cJSON_IsString(c) || !c->valuestring[0])
            return zt_error_set(ZT_ERR_CONFIG, "tokenizer %s: added_tokens: expected {\"id\": "
                                               "N >= 0, \"content\": non-empty string}", t->path);
        static const char *const unsupported[] = {"lstrip", "rstrip", "single_word"};
        for (int k = 0; k < 3; k++)
            if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, unsupported[k])))
                return zt_error_set(ZT_ERR_CONFIG, "tokenizer %s: added token \"%s\": %s true is"
                                                   " not supported (expected false)", t->path,
                                    c->valuestring, unsupported[k]);
        ZT_CHECK(add_special(t, c->valuestring, (int32_t)id->valuedouble));
    }
    return ZT_OK;
}

/* what this tokenizer implements: a BPE model, GPT-2's ByteLevel pre-tokenizer, no normalizer */
static enum zt_status check_pipeline(const struct zt_tokenizer *t, const cJSON *root,
                                     const cJSON *model) {
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(model, "type");
    if (!cJSON_IsString(type) || strcmp(type->valuestring, "BPE") != 0)
        return zt_error_set(ZT_ERR_CONFIG, "tokenizer %s: expected model.type \"BPE\"", t->path);
    const cJSON *norm = cJSON_GetObjectItemCaseSensitive(root, "normalizer");
    if (norm && !cJSON_IsNull(norm))
        return zt_error_set(ZT_ERR_CONFIG, "tokenizer %s: expected no normalizer (null), as "
                                           "GPT-2", t->path);
    const cJSON *pre = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
    const cJSON *pt = cJSON_GetObjectItemCaseSensitive(pre, "type");
    const cJSON *aps = cJSON_GetObjectItemCaseSensitive(pre, "add_prefix_space");
    const cJSON *rx = cJSON_GetObjectItemCaseSensitive(pre, "use_regex");
    if (!cJSON_IsString(pt) || strcmp(pt->valuestring, "ByteLevel") != 0 || cJSON_IsTrue(aps) ||
        cJSON_IsFalse(rx))
        return zt_error_set(ZT_ERR_CONFIG, "tokenizer %s: expected pre_tokenizer ByteLevel with "
                                           "add_prefix_space false and the regex, as GPT-2",
                            t->path);
    static const char *const off[] = {"dropout", "continuing_subword_prefix",
                                      "end_of_word_suffix"};
    for (int k = 0; k < 3; k++) { /* GPT-2's own tokenizer.json has "" for the last two */
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(model, off[k]);
        if (v && !cJSON_IsNull(v) && !(cJSON_IsString(v) && !v->valuestring[0]))
            return zt_error_set(ZT_ERR_CONFIG, "tokenizer %s: expected model.%s null", t->path,
                                off[k]);
    }
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "byte_fallback")) ||
        cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "ignore_merges")))
        return zt_error_set(ZT_ERR_CONFIG, "tokenizer %s: expected model.byte_fallback and "
                                           "model.ignore_merges false", t->path);
    return ZT_OK;
}

/* read path and parse it as JSON (*root owned by the caller) */
static enum zt_status read_json(struct zt_tokenizer *t, const char *path, cJSON **root) {
    char *buf = NULL;
    size_t len = 0;
    snprintf(t->path, sizeof t->path, "%s", path);
    if (zt_file_read_all(path, MAX_FILE_BYTES, &buf, &len) != 0)
        return zt_error_set(ZT_ERR_IO, "tokenizer %s: cannot read (%s)", path, strerror(errno));
    *root = cJSON_ParseWithLength(buf, len);
    free(buf);
    if (!*root)
        return zt_error_set(ZT_ERR_CONFIG, "tokenizer %s: not valid JSON (expected a tokenizer "
                                           "object)", path);
    return ZT_OK;
}

static enum zt_status load_tokenizer_json(struct zt_tokenizer *t, const char *path) {
    cJSON *root = NULL;
    ZT_CHECK(read_json(t, path, &root));
    enum zt_status rc = ZT_OK;
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!cJSON_IsObject(model)) {
        rc = zt_error_set(ZT_ERR_CONFIG, "tokenizer %s: expected a \"model\" object", path);
        goto out;
    }
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    ZT_CHECK_GOTO(check_pipeline(t, root, model), rc, out);
    ZT_CHECK_GOTO(load_added(t, cJSON_GetObjectItemCaseSensitive(root, "added_tokens")), rc, out);
    ZT_CHECK_GOTO(load_vocab(t, vocab), rc, out);
    ZT_CHECK_GOTO(index_vocab(t, vocab), rc, out);
    ZT_CHECK_GOTO(load_json_merges(t, cJSON_GetObjectItemCaseSensitive(model, "merges")), rc,
                  out);
out:
    cJSON_Delete(root);
    return rc;
}

/* vocab.json + merges.txt; "<|endoftext|>" in the vocabulary is GPT-2's special token */
static enum zt_status load_two_files(struct zt_tokenizer *t, const char *dir) {
    char path[600];
    snprintf(path, sizeof path, "%s/vocab.json", dir);
    cJSON *vocab = NULL;
    ZT_CHECK(read_json(t, path, &vocab));
    enum zt_status rc = ZT_OK;
    const cJSON *eot = cJSON_GetObjectItemCaseSensitive(vocab, "<|endoftext|>");
    if (cJSON_IsNumber(eot) && eot->valuedouble >= 0)
        ZT_CHECK_GOTO(add_special(t, "<|endoftext|>", (int32_t)eot->valuedouble), rc, out);
    ZT_CHECK_GOTO(load_vocab(t, vocab), rc, out);
    ZT_CHECK_GOTO(index_vocab(t, vocab), rc, out);
    snprintf(t->path, sizeof t->path, "%s/merges.txt", dir);
    char *text = NULL;
    size_t len = 0;
    if (zt_file_read_all(t->path, MAX_FILE_BYTES, &text, &len) != 0) {
        rc = zt_error_set(ZT_ERR_IO, "tokenizer %s: cannot read (%s)", t->path, strerror(errno));
        goto out;
    }
    rc = load_merges_txt(t, text, len);
    free(text);
out:
    cJSON_Delete(vocab);
    return rc;
}

static enum zt_status compile_pattern(struct zt_tokenizer *t) {
    int err = 0;
    PCRE2_SIZE at = 0;
    t->re = pcre2_compile((PCRE2_SPTR)GPT2_PATTERN, PCRE2_ZERO_TERMINATED,
                          PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &err, &at, NULL);
    if (!t->re)
        return zt_error_set(ZT_ERR_RUNTIME, "tokenizer: PCRE2 refused GPT-2's pattern at %zu "
                                            "(error %d)", (size_t)at, err);
    pcre2_jit_compile(t->re, PCRE2_JIT_COMPLETE); /* best effort: the interpreter also works */
    return ZT_OK;
}

enum zt_status zt_tokenizer_load(struct zt_tokenizer **out, const char *dir) {
    *out = NULL;
    struct zt_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return zt_error_set(ZT_ERR_NOMEM, "tokenizer %s: no memory", dir);
    uint32_t cp_of_byte[256];
    zt_bpe_byte_alphabet(cp_of_byte);
    memset(t->byte_of_cp, 0xff, sizeof t->byte_of_cp);
    for (int b = 0; b < 256; b++) t->byte_of_cp[cp_of_byte[b]] = (int16_t)b;
    char path[600];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    enum zt_status rc;
    if (access(path, F_OK) == 0) rc = load_tokenizer_json(t, path);
    else rc = load_two_files(t, dir);
    if (rc == ZT_OK) rc = compile_pattern(t);
    if (rc != ZT_OK) {
        zt_tokenizer_free(t);
        return rc;
    }
    *out = t;
    return ZT_OK;
}

void zt_tokenizer_free(struct zt_tokenizer *t) {
    if (!t) return;
    for (int32_t i = 0; t->tok && i < t->nvocab; i++) free(t->tok[i]);
    for (int a = 0; a < t->nadded; a++) free(t->added[a].content);
    free(t->tok);
    free(t->tok_len);
    free(t->vocab);
    free(t->merges);
    free(t->added);
    if (t->re) pcre2_code_free(t->re);
    free(t);
}

int zt_tokenizer_vocab_size(const struct zt_tokenizer *t) { return t->nvocab; }

int zt_tokenizer_known(const struct zt_tokenizer *t, int32_t id) {
    return id >= 0 && id < t->nvocab && t->tok[id] != NULL;
}

int zt_tokenizer_special_id(const struct zt_tokenizer *t, const char *content) {
    for (int a = 0; a < t->nadded; a++)
        if (strcmp(t->added[a].content, content) == 0) return t->added[a].id;
    return -1;
}

// ---------------------------------------------------------------------------------------------
// encoding

/* the ids being produced */
struct idvec {
    int32_t *v;
    size_t n, cap;
};

static int idvec_push(struct idvec *o, int32_t id) {
    if (o->n == o->cap) {
        size_t cap = o->cap ? 2 * o->cap : 1024;
        int32_t *v = realloc(o->v, cap * sizeof *v);
        if (!v) return -1;
        o->v = v;
        o->cap = cap;
    }
    o->v[o->n++] = id;
    return 0;
}

/* one symbol of a word being merged: a doubly linked list over the word's bytes */
struct sym {
    int32_t id, prev, next, len; /* len 0: merged into its left neighbour */
};
/* a candidate merge of the pair starting at pos */
struct cand {
    int32_t rank, pos, merged;
};

static int cand_less(const struct cand *a, const struct cand *b) {
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static void heap_push(struct cand *h, size_t *n, struct cand c) {
    size_t i = (*n)++;
    for (; i > 0 && cand_less(&c, &h[(i - 1) / 2]); i = (i - 1) / 2) h[i] = h[(i - 1) / 2];
    h[i] = c;
}

static struct cand heap_pop(struct cand *h, size_t *n) {
    struct cand top = h[0], last = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && cand_less(&h[c + 1], &h[c])) c++;
        if (!cand_less(&h[c], &last)) break;
        h[i] = h[c];
        i = c;
    }
    h[i] = last;
    return top;
}

/* the pair (pos, next of pos) as a candidate, when it is a merge */
static void push_pair(const struct zt_tokenizer *t, const struct sym *s, int32_t pos,
                      struct cand *h, size_t *nh) {
    if (pos < 0 || s[pos].next < 0) return;
    const struct mslot *m = merge_find(t, s[pos].id, s[s[pos].next].id);
    if (m) heap_push(h, nh, (struct cand){m->rank, pos, m->merged});
}

/* BPE of one word w[0..n) (n > 0) into out, lowest-rank merge first as `tokenizers` does;
 * s and h: scratch of n and 3 n entries */
static int bpe_word(const struct zt_tokenizer *t, const unsigned char *w, int32_t n,
                    struct sym *s, struct cand *h, struct idvec *out) {
    size_t nh = 0;
    for (int32_t i = 0; i < n; i++) s[i] = (struct sym){t->byte_id[w[i]], i - 1, i + 1, 1};
    s[n - 1].next = -1;
    for (int32_t i = 0; i + 1 < n; i++) push_pair(t, s, i, h, &nh);
    while (nh) {
        struct cand c = heap_pop(h, &nh);
        struct sym *l = &s[c.pos];
        if (l->len == 0 || l->next < 0) continue; /* stale: the symbol was merged away */
        const struct mslot *m = merge_find(t, l->id, s[l->next].id);
        if (!m || m->merged != c.merged) continue; /* stale: its right side changed */
        struct sym *r = &s[l->next];
        l->id = c.merged;
        l->len += r->len;
        r->len = 0;
        l->next = r->next;
        if (r->next >= 0) s[r->next].prev = c.pos;
        push_pair(t, s, l->prev, h, &nh);
        push_pair(t, s, c.pos, h, &nh);
    }
    for (int32_t i = 0; i >= 0; i = s[i].next)
        if (idvec_push(out, s[i].id) != 0) return -1;
    return 0;
}

/* scratch of one encode call: a word's symbols and candidates, grown to the longest word */
struct scratch {
    struct sym *s;
    struct cand *h;
    size_t cap;
};

/* the regex pieces of seg[0..n) (text between added tokens), each through BPE */
static enum zt_status encode_stretch(const struct zt_tokenizer *t, const char *seg, size_t n,
                                     pcre2_match_data *md, struct scratch *sc,
                                     struct idvec *out) {
    size_t at = 0;
    while (at < n) {
        int rc = pcre2_match(t->re, (PCRE2_SPTR)seg, n, at, PCRE2_NO_UTF_CHECK, md, NULL);
        if (rc < 0)
            return zt_error_set(ZT_ERR_RUNTIME, "tokenizer: PCRE2 match failed (error %d)", rc);
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t b = ov[0], e = ov[1];
        if (e <= b) return zt_error_set(ZT_ERR_RUNTIME, "tokenizer: empty regex match");
        if (e - b > sc->cap) {
            size_t cap = 2 * (e - b);
            struct sym *s = realloc(sc->s, cap * sizeof *s);
            if (s) sc->s = s;
            /* every merge pops one candidate and pushes at most two: n - 1 first pushes and
             * at most 2 (n - 1) more, so the heap never holds more than 3 n */
            struct cand *h = realloc(sc->h, 3 * cap * sizeof *h);
            if (h) sc->h = h;
            if (!s || !h) return zt_error_set(ZT_ERR_NOMEM, "tokenizer: no memory");
            sc->cap = cap;
        }
        if (bpe_word(t, (const unsigned char *)seg + b, (int32_t)(e - b), sc->s, sc->h, out))
            return zt_error_set(ZT_ERR_NOMEM, "tokenizer: no memory");
        at = e;
    }
    return ZT_OK;
}

/* the leftmost, then longest, added token in text[from..len): its index, *at its offset */
static int next_added(const struct zt_tokenizer *t, const char *text, size_t len, size_t from,
                      size_t *at) {
    int best = -1;
    *at = len;
    for (int a = 0; a < t->nadded; a++) {
        const struct added *ad = &t->added[a];
        for (size_t i = from; i + ad->len <= len && i <= *at; i++) {
            if (memcmp(text + i, ad->content, ad->len) != 0) continue;
            if (best < 0 || i < *at || ad->len > t->added[best].len) best = a, *at = i;
            break;
        }
    }
    return best;
}

enum zt_status zt_tokenizer_encode(const struct zt_tokenizer *t, const char *text, size_t len,
                                   int32_t **ids, size_t *n) {
    *ids = NULL;
    *n = 0;
    size_t bad = utf8_invalid_at(text, len);
    if (bad < len)
        return zt_error_set(ZT_ERR_DATA, "tokenizer: input is not valid UTF-8 at byte %zu "
                                         "(0x%02x); expected UTF-8 text", bad,
                            (unsigned char)text[bad]);
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(t->re, NULL);
    if (!md) return zt_error_set(ZT_ERR_NOMEM, "tokenizer: no memory");
    struct idvec out = {0};
    struct scratch sc = {0};
    enum zt_status rc = ZT_OK;
    for (size_t from = 0; from < len && rc == ZT_OK;) {
        size_t at;
        int a = next_added(t, text, len, from, &at);
        rc = encode_stretch(t, text + from, at - from, md, &sc, &out);
        if (rc == ZT_OK && a >= 0 && idvec_push(&out, t->added[a].id) != 0)
            rc = zt_error_set(ZT_ERR_NOMEM, "tokenizer: no memory");
        from = a >= 0 ? at + t->added[a].len : len;
    }
    pcre2_match_data_free(md);
    free(sc.s);
    free(sc.h);
    if (rc != ZT_OK) {
        free(out.v);
        return rc;
    }
    *ids = out.v;
    *n = out.n;
    return ZT_OK;
}

// ---------------------------------------------------------------------------------------------
// decoding

enum zt_status zt_tokenizer_decode(const struct zt_tokenizer *t, const int32_t *ids, size_t n,
                                   char **text, size_t *len) {
    *text = NULL;
    *len = 0;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->nvocab || !t->tok[ids[i]])
            return zt_error_set(ZT_ERR_DATA, "tokenizer: id %d (at %zu) is not in the "
                                             "vocabulary (expected 0..%d)", ids[i], i,
                                t->nvocab - 1);
        total += t->tok_len[ids[i]];
    }
    char *s = malloc(total + 1);
    if (!s) return zt_error_set(ZT_ERR_NOMEM, "tokenizer: no memory for %zu bytes", total);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        memcpy(s + k, t->tok[ids[i]], t->tok_len[ids[i]]);
        k += t->tok_len[ids[i]];
    }
    s[k] = '\0';
    *text = s;
    *len = k;
    return ZT_OK;
}
