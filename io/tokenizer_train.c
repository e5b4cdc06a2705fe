/*
 * io/tokenizer_train.c: learning a GPT-2-style byte-level BPE from a corpus (zt_tokenizer.h),
 * merge for merge what `tokenizers`' BpeTrainer learns from the same documents.
 *
 * Layer: io/ (no StarPU). Documents are split by GPT-2's regex (tokenizer_impl.h) and the
 * distinct pieces counted. Training then works on the distinct pieces ("words"), each an array of
 * token ids, with the trainer's own bookkeeping, because its merges depend on it:
 *   - pair_counts: pair -> occurrences over all words (overlapping pairs count: "aaa" has two);
 *   - a max-heap of entries (count, pair, the words where the pair was seen when the entry was
 *     made). The top entry is merged when its count is current; a stale count is refreshed and
 *     the entry pushed back. A merge only visits its entry's words, and every word where a merge
 *     creates a pair adds that word to a new entry for the pair;
 *   - merging a word replaces each occurrence of the pair, left to right, and reports the pairs
 *     it destroyed (-1) and created (+1) around each occurrence; the merged pair's own count is
 *     left as it is, as the reference does. When a pair has two entries (its string was formed
 *     twice) it can so be merged twice; the later merge is the one kept, as the reference's
 *     merge table keeps it.
 * One merge costs the length of the words its entry names, plus log(heap) per new pair.
 */
#include "zt_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>  /* GPT-2's pre-tokenisation regex */
#include <stdlib.h> /* malloc, realloc, free */
#include <string.h> /* memcpy, memcmp */

#include "tokenizer_impl.h" /* ZT_GPT2_PATTERN, zt_bpe_byte_alphabet, zt_bpe_hash_* */
#include "zt_status.h"      /* zt_error_set */

// ---------------------------------------------------------------------------------------------
// hash tables: byte strings (pieces, tokens) and id pairs

static uint64_t pair_of(int32_t a, int32_t b) { return (uint64_t)(uint32_t)a << 32 | (uint32_t)b; }

/* a set of byte strings kept in one arena, each with a value: piece -> count, token -> id */
struct strmap {
    char *arena;
    size_t used, room;
    struct strslot {
        size_t off, len; /* len SIZE_MAX: empty slot */
        int64_t value;
    } *slot;
    size_t cap, n;
};

static int strmap_grow(struct strmap *m) {
    size_t cap = m->cap ? 2 * m->cap : 1024;
    struct strslot *s = malloc(cap * sizeof *s);
    if (!s) return -1;
    for (size_t i = 0; i < cap; i++) s[i].len = SIZE_MAX;
    for (size_t i = 0; i < m->cap; i++) {
        if (m->slot[i].len == SIZE_MAX) continue;
        size_t j = zt_bpe_hash_bytes(m->arena + m->slot[i].off, m->slot[i].len) & (cap - 1);
        while (s[j].len != SIZE_MAX) j = (j + 1) & (cap - 1);
        s[j] = m->slot[i];
    }
    free(m->slot);
    m->slot = s;
    m->cap = cap;
    return 0;
}

/* the slot of s[0..n), added with value 0 when new; NULL when out of memory */
static struct strslot *strmap_get(struct strmap *m, const char *s, size_t n, int *added) {
    *added = 0;
    if (2 * (m->n + 1) > m->cap && strmap_grow(m) != 0) return NULL;
    size_t j = zt_bpe_hash_bytes(s, n) & (m->cap - 1);
    for (; m->slot[j].len != SIZE_MAX; j = (j + 1) & (m->cap - 1))
        if (m->slot[j].len == n && memcmp(m->arena + m->slot[j].off, s, n) == 0)
            return &m->slot[j];
    if (m->used + n > m->room) {
        size_t room = m->room ? m->room : 1 << 16;
        while (room < m->used + n) room *= 2;
        char *a = realloc(m->arena, room);
        if (!a) return NULL;
        m->arena = a;
        m->room = room;
    }
    memcpy(m->arena + m->used, s, n);
    m->slot[j] = (struct strslot){m->used, n, 0};
    m->used += n;
    m->n++;
    *added = 1;
    return &m->slot[j];
}

static void strmap_free(struct strmap *m) {
    free(m->arena);
    free(m->slot);
}

/* a growable list of word indices */
struct wlist {
    int32_t *v;
    int32_t n, cap;
};

/* append w unless it is already the last one (a word's pairs are visited together) */
static int wlist_add(struct wlist *l, int32_t w) {
    if (l->n && l->v[l->n - 1] == w) return 0;
    if (l->n == l->cap) {
        int32_t cap = l->cap ? 2 * l->cap : 4;
        int32_t *v = realloc(l->v, (size_t)cap * sizeof *v);
        if (!v) return -1;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = w;
    return 0;
}

/* pair -> count, and (while a merge's changes are gathered) pair -> words where it appeared */
struct pairmap {
    struct pairslot {
        uint64_t pair; /* UINT64_MAX: empty */
        int64_t count;
        struct wlist where; /* words that gained the pair in the current step */
        int32_t touched;    /* where is in use: the slot is on the touched list */
    } *slot;
    size_t cap, n;
    size_t *touched; /* slots whose `where` is in use, in the order they were first touched */
    size_t ntouched, touched_cap;
};

static int pairmap_grow(struct pairmap *m) {
    size_t cap = m->cap ? 2 * m->cap : 4096;
    struct pairslot *s = calloc(cap, sizeof *s);
    if (!s) return -1;
    for (size_t i = 0; i < cap; i++) s[i].pair = UINT64_MAX;
    for (size_t i = 0; i < m->cap; i++) {
        if (m->slot[i].pair == UINT64_MAX) continue;
        size_t j = zt_bpe_hash_pair(m->slot[i].pair) & (cap - 1);
        while (s[j].pair != UINT64_MAX) j = (j + 1) & (cap - 1);
        s[j] = m->slot[i];
    }
    for (size_t k = 0; k < m->ntouched; k++) { /* the touched slots moved: find them again */
        uint64_t p = m->slot[m->touched[k]].pair;
        size_t j = zt_bpe_hash_pair(p) & (cap - 1);
        while (s[j].pair != p) j = (j + 1) & (cap - 1);
        m->touched[k] = j;
    }
    free(m->slot);
    m->slot = s;
    m->cap = cap;
    return 0;
}

/* the slot of pair p (added with count 0 when new), or NULL when out of memory */
static struct pairslot *pairmap_get(struct pairmap *m, uint64_t p) {
    if (2 * (m->n + 1) > m->cap && pairmap_grow(m) != 0) return NULL;
    size_t j = zt_bpe_hash_pair(p) & (m->cap - 1);
    for (; m->slot[j].pair != UINT64_MAX; j = (j + 1) & (m->cap - 1))
        if (m->slot[j].pair == p) return &m->slot[j];
    m->slot[j].pair = p;
    m->n++;
    return &m->slot[j];
}

/* the count of pair p, which is in the map */
static int64_t pairmap_count(const struct pairmap *m, uint64_t p) {
    size_t j = zt_bpe_hash_pair(p) & (m->cap - 1);
    while (m->slot[j].pair != p) j = (j + 1) & (m->cap - 1);
    return m->slot[j].count;
}

/* count occurrences of pair p in word w (weight: the word's count); a gain records w */
static int pairmap_change(struct pairmap *m, uint64_t p, int64_t delta, int32_t w) {
    struct pairslot *s = pairmap_get(m, p);
    if (!s) return -1;
    s->count += delta;
    if (delta <= 0) return 0;
    if (!s->touched) {
        if (m->ntouched == m->touched_cap) {
            size_t cap = m->touched_cap ? 2 * m->touched_cap : 1024;
            size_t *t = realloc(m->touched, cap * sizeof *t);
            if (!t) return -1;
            m->touched = t;
            m->touched_cap = cap;
        }
        m->touched[m->ntouched++] = (size_t)(s - m->slot);
        s->touched = 1;
    }
    return wlist_add(&s->where, w);
}

static void pairmap_free(struct pairmap *m) {
    for (size_t i = 0; i < m->cap; i++) free(m->slot[i].where.v);
    free(m->slot);
    free(m->touched);
}

// ---------------------------------------------------------------------------------------------
// counting the pieces of the documents

struct zt_bpe_counts {
    pcre2_code *re;
    pcre2_match_data *md;
    struct strmap pieces; /* piece bytes -> count */
    size_t total;         /* pieces counted, repeats included */
};

enum zt_status zt_bpe_counts_new(struct zt_bpe_counts **out) {
    *out = NULL;
    struct zt_bpe_counts *c = calloc(1, sizeof *c);
    if (!c) return zt_error_set(ZT_ERR_NOMEM, "tokenizer training: no memory");
    int err = 0;
    PCRE2_SIZE at = 0;
    c->re = pcre2_compile((PCRE2_SPTR)ZT_GPT2_PATTERN, PCRE2_ZERO_TERMINATED,
                          PCRE2_UTF | PCRE2_UCP, &err, &at, NULL);
    if (!c->re) {
        zt_bpe_counts_free(c);
        return zt_error_set(ZT_ERR_RUNTIME, "tokenizer training: PCRE2 refused GPT-2's pattern "
                                            "at %zu (error %d)", (size_t)at, err);
    }
    pcre2_jit_compile(c->re, PCRE2_JIT_COMPLETE); /* best effort: the interpreter also works */
    if (!(c->md = pcre2_match_data_create_from_pattern(c->re, NULL))) {
        zt_bpe_counts_free(c);
        return zt_error_set(ZT_ERR_NOMEM, "tokenizer training: no memory");
    }
    *out = c;
    return ZT_OK;
}

void zt_bpe_counts_free(struct zt_bpe_counts *c) {
    if (!c) return;
    if (c->md) pcre2_match_data_free(c->md);
    if (c->re) pcre2_code_free(c->re);
    strmap_free(&c->pieces);
    free(c);
}

size_t zt_bpe_counts_pieces(const struct zt_bpe_counts *c) { return c->total; }

enum zt_status zt_bpe_counts_add(struct zt_bpe_counts *c, const char *text, size_t len) {
    /* the first match checks the whole text's UTF-8; the later ones skip that */
    uint32_t check = 0;
    for (size_t at = 0; at < len; check = PCRE2_NO_UTF_CHECK) {
        int rc = pcre2_match(c->re, (PCRE2_SPTR)text, len, at, check, c->md, NULL);
        if (rc <= PCRE2_ERROR_UTF8_ERR1 && rc >= PCRE2_ERROR_UTF8_ERR21) {
            size_t bad = pcre2_get_startchar(c->md);
            return zt_error_set(ZT_ERR_DATA, "text is not valid UTF-8 at byte %zu (0x%02x); "
                                             "expected UTF-8 text", bad,
                                (unsigned char)text[bad]);
        }
        if (rc < 0)
            return zt_error_set(ZT_ERR_RUNTIME, "tokenizer training: PCRE2 match failed "
                                                "(error %d)", rc);
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(c->md);
        if (ov[1] <= ov[0])
            return zt_error_set(ZT_ERR_RUNTIME, "tokenizer training: empty regex match");
        int added;
        struct strslot *s = strmap_get(&c->pieces, text + ov[0], ov[1] - ov[0], &added);
        if (!s) return zt_error_set(ZT_ERR_NOMEM, "tokenizer training: no memory for pieces");
        s->value++;
        c->total++;
        at = ov[1];
    }
    return ZT_OK;
}

// ---------------------------------------------------------------------------------------------
// the heap of candidate merges

struct entry {
    int64_t count;
    uint64_t pair;
    struct wlist where; /* the words to merge in (owned) */
};

/* a before b: the higher count, then the smaller pair (left id, then right id) */
static int entry_before(const struct entry *a, const struct entry *b) {
    return a->count != b->count ? a->count > b->count : a->pair < b->pair;
}

struct heap {
    struct entry *e;
    size_t n, cap;
};

static int heap_push(struct heap *h, struct entry x) {
    if (h->n == h->cap) {
        size_t cap = h->cap ? 2 * h->cap : 4096;
        struct entry *e = realloc(h->e, cap * sizeof *e);
        if (!e) return -1;
        h->e = e;
        h->cap = cap;
    }
    size_t i = h->n++;
    for (; i > 0 && entry_before(&x, &h->e[(i - 1) / 2]); i = (i - 1) / 2)
        h->e[i] = h->e[(i - 1) / 2];
    h->e[i] = x;
    return 0;
}

static struct entry heap_pop(struct heap *h) {
    struct entry top = h->e[0], last = h->e[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && entry_before(&h->e[c + 1], &h->e[c])) c++;
        if (!entry_before(&h->e[c], &last)) break;
        h->e[i] = h->e[c];
        i = c;
    }
    h->e[i] = last;
    return top;
}

static void heap_free(struct heap *h) {
    for (size_t i = 0; i < h->n; i++) free(h->e[i].where.v);
    free(h->e);
}

// ---------------------------------------------------------------------------------------------
// training

struct trainer {
    int32_t nwords;
    int32_t *sym;      /* every word's token ids, one after the other */
    size_t *start;     /* [nwords] where word w starts in sym */
    int32_t *len;      /* [nwords] its current length (shrinks as it is merged) */
    int64_t *count;    /* [nwords] how often the word occurs */
    struct pairmap pairs;
    struct heap heap;
    struct strmap tokens; /* token bytes -> id */
    struct zt_bpe_vocab *v;
    int32_t tok_cap, merge_cap;
};

/* GPT-2's byte-level character of each byte (bytes_to_unicode) sorted by code point gives the
 * byte tokens' order: the printable bytes first, then the others, each group by value */
static void byte_order(int32_t order[256]) {
    uint32_t cp[256];
    zt_bpe_byte_alphabet(cp);
    int k = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int b = 0; b < 256; b++)
            if ((cp[b] == (uint32_t)b) == (pass == 0)) order[k++] = b;
}

/* token id -> its bytes: a new token (its id is v->ntok) */
static enum zt_status add_token(struct trainer *t, const char *s, size_t n) {
    struct zt_bpe_vocab *v = t->v;
    if (v->ntok == t->tok_cap) {
        int32_t cap = 2 * t->tok_cap;
        char **tok = realloc(v->tok, (size_t)cap * sizeof *tok);
        if (tok) v->tok = tok;
        size_t *tl = realloc(v->tok_len, (size_t)cap * sizeof *tl);
        if (tl) v->tok_len = tl;
        if (!tok || !tl) return zt_error_set(ZT_ERR_NOMEM, "tokenizer training: no memory");
        t->tok_cap = cap;
    }
    int added;
    struct strslot *slot = strmap_get(&t->tokens, s, n, &added);
    char *copy = malloc(n + 1);
    if (!slot || !copy) {
        free(copy);
        return zt_error_set(ZT_ERR_NOMEM, "tokenizer training: no memory");
    }
    memcpy(copy, s, n);
    copy[n] = '\0';
    slot->value = v->ntok;
    v->tok[v->ntok] = copy;
    v->tok_len[v->ntok++] = n;
    return ZT_OK;
}

/* the words (distinct pieces) as byte-token ids, and the 256 byte tokens */
static enum zt_status init_words(struct trainer *t, const struct zt_bpe_counts *c) {
    int32_t order[256], id_of_byte[256];
    byte_order(order);
    for (int k = 0; k < 256; k++) {
        char b = (char)order[k];
        id_of_byte[order[k]] = k;
        ZT_CHECK(add_token(t, &b, 1));
    }
    const struct strmap *p = &c->pieces;
    t->nwords = (int32_t)p->n;
    t->sym = malloc((p->used ? p->used : 1) * sizeof *t->sym);
    t->start = malloc((p->n ? p->n : 1) * sizeof *t->start);
    t->len = malloc((p->n ? p->n : 1) * sizeof *t->len);
    t->count = malloc((p->n ? p->n : 1) * sizeof *t->count);
    if (!t->sym || !t->start || !t->len || !t->count)
        return zt_error_set(ZT_ERR_NOMEM, "tokenizer training: no memory for %zu pieces", p->n);
    int32_t w = 0;
    size_t at = 0;
    for (size_t i = 0; i < p->cap; i++) {
        const struct strslot *s = &p->slot[i];
        if (s->len == SIZE_MAX) continue;
        t->start[w] = at;
        t->len[w] = (int32_t)s->len;
        t->count[w] = s->value;
        for (size_t k = 0; k < s->len; k++)
            t->sym[at++] = id_of_byte[(unsigned char)p->arena[s->off + k]];
        w++;
    }
    return ZT_OK;
}

/* one heap entry per pair that gained occurrences (every pair, at the start), then the
 * touched list is emptied */
static enum zt_status push_touched(struct trainer *t) {
    struct pairmap *m = &t->pairs;
    for (size_t k = 0; k < m->ntouched; k++) {
        struct pairslot *s = &m->slot[m->touched[k]];
        struct entry e = {s->count, s->pair, s->where};
        s->where = (struct wlist){0};
        s->touched = 0;
        if (e.count <= 0) {
            free(e.where.v);
        } else if (heap_push(&t->heap, e) != 0) {
            free(e.where.v);
            return zt_error_set(ZT_ERR_NOMEM, "tokenizer training: no memory for the heap");
        }
    }
    m->ntouched = 0;
    return ZT_OK;
}

static enum zt_status count_pairs(struct trainer *t) {
    for (int32_t w = 0; w < t->nwords; w++) {
        const int32_t *s = t->sym + t->start[w];
        for (int32_t i = 0; i + 1 < t->len[w]; i++)
            if (pairmap_change(&t->pairs, pair_of(s[i], s[i + 1]), t->count[w], w) != 0)
                return zt_error_set(ZT_ERR_NOMEM, "tokenizer training: no memory for pairs");
    }
    return push_touched(t);
}

/* every occurrence of (a, b) in word w, left to right, becomes r; the pairs around each are
 * counted out and in */
static int merge_word(struct trainer *t, int32_t w, int32_t a, int32_t b, int32_t r) {
    int32_t *s = t->sym + t->start[w], n = t->len[w], out = 0;
    int64_t c = t->count[w];
    struct pairmap *m = &t->pairs;
    for (int32_t i = 0; i < n;) {
        if (s[i] != a || i + 1 >= n || s[i + 1] != b) {
            s[out++] = s[i++];
            continue;
        }
        if (out > 0 && (pairmap_change(m, pair_of(s[out - 1], a), -c, w) != 0 ||
                        pairmap_change(m, pair_of(s[out - 1], r), c, w) != 0))
            return -1;
        if (i + 2 < n && (pairmap_change(m, pair_of(b, s[i + 2]), -c, w) != 0 ||
                          pairmap_change(m, pair_of(r, s[i + 2]), c, w) != 0))
            return -1;
        s[out++] = r;
        i += 2;
    }
    t->len[w] = out;
    return 0;
}

/* the id of the token a + b, a new token when its bytes are not one yet */
static enum zt_status merged_token(struct trainer *t, int32_t a, int32_t b, int32_t *id) {
    struct zt_bpe_vocab *v = t->v;
    size_t n = v->tok_len[a] + v->tok_len[b];
    char *cat = malloc(n);
    if (!cat) return zt_error_set(ZT_ERR_NOMEM, "tokenizer training: no memory");
    memcpy(cat, v->tok[a], v->tok_len[a]);
    memcpy(cat + v->tok_len[a], v->tok[b], v->tok_len[b]);
    int added;
    struct strslot *s = strmap_get(&t->tokens, cat, n, &added);
    enum zt_status rc = ZT_OK;
    if (!s) rc = zt_error_set(ZT_ERR_NOMEM, "tokenizer training: no memory");
    else if (!added) *id = (int32_t)s->value;
    else if ((rc = add_token(t, cat, n)) == ZT_OK) *id = v->ntok - 1;
    free(cat);
    return rc;
}

static enum zt_status record_merge(struct trainer *t, int32_t a, int32_t b) {
    struct zt_bpe_vocab *v = t->v;
    if (v->nmerges == t->merge_cap) {
        int32_t cap = t->merge_cap ? 2 * t->merge_cap : 1024;
        int32_t *m = realloc(v->merges, 2 * (size_t)cap * sizeof *m);
        if (!m) return zt_error_set(ZT_ERR_NOMEM, "tokenizer training: no memory");
        v->merges = m;
        t->merge_cap = cap;
    }
    v->merges[2 * v->nmerges] = a;
    v->merges[2 * v->nmerges + 1] = b;
    v->nmerges++;
    return ZT_OK;
}

/* merge the top entry's pair in its words; *done when training is over */
static enum zt_status merge_step(struct trainer *t, int32_t ntarget, int *done) {
    *done = t->v->ntok >= ntarget || t->heap.n == 0;
    if (*done) return ZT_OK;
    struct entry top = heap_pop(&t->heap);
    int64_t now = pairmap_count(&t->pairs, top.pair);
    if (top.count != now) { /* stale: back in the heap with its current count */
        top.count = now;
        if (heap_push(&t->heap, top) != 0) {
            free(top.where.v);
            return zt_error_set(ZT_ERR_NOMEM, "tokenizer training: no memory for the heap");
        }
        return ZT_OK;
    }
    enum zt_status rc = ZT_OK;
    int32_t a = (int32_t)(top.pair >> 32), b = (int32_t)(uint32_t)top.pair, r = -1;
    if (top.count < 1) *done = 1;
    else if ((rc = merged_token(t, a, b, &r)) == ZT_OK && (rc = record_merge(t, a, b)) == ZT_OK) {
        for (int32_t k = 0; k < top.where.n && rc == ZT_OK; k++)
            if (merge_word(t, top.where.v[k], a, b, r) != 0)
                rc = zt_error_set(ZT_ERR_NOMEM, "tokenizer training: no memory for pairs");
        if (rc == ZT_OK) rc = push_touched(t);
    }
    free(top.where.v);
    return rc;
}

/* a pair merged twice keeps its later rank: the earlier entries are dropped */
static enum zt_status drop_repeated_merges(struct zt_bpe_vocab *v) {
    struct pairmap seen = {0};
    int32_t kept = v->nmerges;
    for (int32_t k = v->nmerges - 1; k >= 0; k--) {
        struct pairslot *s = pairmap_get(&seen, pair_of(v->merges[2 * k], v->merges[2 * k + 1]));
        if (!s) {
            pairmap_free(&seen);
            return zt_error_set(ZT_ERR_NOMEM, "tokenizer training: no memory");
        }
        if (s->count++) continue;
        kept--;
        v->merges[2 * kept] = v->merges[2 * k];
        v->merges[2 * kept + 1] = v->merges[2 * k + 1];
    }
    pairmap_free(&seen);
    if (kept)
        memmove(v->merges, v->merges + 2 * kept,
                2 * (size_t)(v->nmerges - kept) * sizeof *v->merges);
    v->nmerges -= kept;
    return ZT_OK;
}

static void trainer_free(struct trainer *t) {
    free(t->sym);
    free(t->start);
    free(t->len);
    free(t->count);
    pairmap_free(&t->pairs);
    heap_free(&t->heap);
    strmap_free(&t->tokens);
}

enum zt_status zt_bpe_train(const struct zt_bpe_counts *c, int vocab_size,
                            struct zt_bpe_vocab *v) {
    memset(v, 0, sizeof *v);
    if (vocab_size < 257 || vocab_size > 65536)
        return zt_error_set(ZT_ERR_INVALID, "tokenizer training: vocabulary size %d: expected "
                                            "257..65536 (256 bytes, <|endoftext|>, merges)",
                            vocab_size);
    struct trainer t = {.v = v, .tok_cap = 512};
    v->tok = malloc((size_t)t.tok_cap * sizeof *v->tok);
    v->tok_len = malloc((size_t)t.tok_cap * sizeof *v->tok_len);
    enum zt_status rc = ZT_OK;
    if (!v->tok || !v->tok_len)
        rc = zt_error_set(ZT_ERR_NOMEM, "tokenizer training: no memory");
    if (rc == ZT_OK) rc = init_words(&t, c);
    if (rc == ZT_OK) rc = count_pairs(&t);
    for (int done = 0; rc == ZT_OK && !done;) rc = merge_step(&t, vocab_size - 1, &done);
    if (rc == ZT_OK) rc = drop_repeated_merges(v);
    trainer_free(&t);
    if (rc != ZT_OK) zt_bpe_vocab_free(v);
    return rc;
}

void zt_bpe_vocab_free(struct zt_bpe_vocab *v) {
    for (int32_t i = 0; v->tok && i < v->ntok; i++) free(v->tok[i]);
    free(v->tok);
    free(v->tok_len);
    free(v->merges);
    memset(v, 0, sizeof *v);
}
