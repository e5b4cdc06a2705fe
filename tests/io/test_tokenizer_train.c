/*
 * tests/io/test_tokenizer_train.c: proves io/tokenizer_train.c and io/tokenizer_save.c on corpora
 * small enough to work out by hand (the comparison with Hugging Face's trainer on real corpora
 * is tests/apps/test_train_tokenizer.py):
 * - the byte tokens are GPT-2's order ("!" 0, "a" 64, "b" 65, the space 220);
 * - the most frequent pair is merged first, a tie goes to the smaller (left, right) ids,
 *   overlapping pairs count ("aaaa" holds (a, a) three times, and merges to "aa" "aa");
 * - training stops at vocab_size - 1 tokens or when no pair is left;
 * - the saved directory loads in io/tokenizer.c (both file forms) and encodes the corpus with the
 *   learned merges, <|endoftext|> the last id; decode gives the text back;
 * - errors: vocabulary sizes outside 257..65536, invalid UTF-8 (its offset named), a directory
 *   whose parent is missing (nothing created).
 */
#include <stdio.h>    /* snprintf, remove */
#include <stdlib.h>   /* getenv, free */
#include <string.h>   /* strlen, strstr, memcmp */
#include <sys/stat.h> /* stat, mkdir */

#include "zt_file.h"      /* zt_file_remove_dir */
#include "zt_status.h"    /* zt_error_last */
#include "zt_test.h"      /* ZT_TEST_TRUE, zt_test_finish */
#include "zt_tokenizer.h" /* the unit under test */

enum { A = 64, B = 65, SPACE = 220 }; /* byte token ids of 'a', 'b', ' ' */

static char tmp_dir[1024];

/* train on the documents docs[0..n) for vocab_size; ZT_OK or the status */
static enum zt_status train(const char *const *docs, int n, int vocab_size,
                            struct zt_bpe_vocab *v) {
    struct zt_bpe_counts *c = NULL;
    enum zt_status rc = zt_bpe_counts_new(&c);
    for (int i = 0; i < n && rc == ZT_OK; i++) rc = zt_bpe_counts_add(c, docs[i], strlen(docs[i]));
    if (rc == ZT_OK) rc = zt_bpe_train(c, vocab_size, v);
    zt_bpe_counts_free(c);
    return rc;
}

/* v's merges are want[0..2n) (left, right pairs) */
static int merges_are(const struct zt_bpe_vocab *v, const int32_t *want, int n) {
    return v->nmerges == n && memcmp(v->merges, want, 2 * (size_t)n * sizeof *want) == 0;
}

static void check_merges(void) {
    struct zt_bpe_vocab v;
    /* "abab" once, " ab" twice: (a,b) 4 -> "ab" 256; (Ġ,ab) 2 -> " ab" 257; (ab,ab) -> 258 */
    const char *docs1[] = {"abab ab ab"};
    ZT_TEST_TRUE(train(docs1, 1, 1000, &v) == ZT_OK, "train: %s", zt_error_last());
    const int32_t want1[] = {A, B, SPACE, 256, 256, 256};
    ZT_TEST_TRUE(merges_are(&v, want1, 3) && v.ntok == 259, "counts: %d merges, %d tokens",
                 v.nmerges, v.ntok);
    ZT_TEST_TRUE(v.tok[64][0] == 'a' && v.tok[0][0] == '!' && v.tok[220][0] == ' ' &&
                 v.tok_len[258] == 4 && memcmp(v.tok[258], "abab", 4) == 0, "token bytes");
    zt_bpe_vocab_free(&v);
    /* every pair once: (a,b) < (b,a) < (Ġ,a) by ids; vocab 259 stops after two merges */
    const char *docs2[] = {"ba", " ab"};
    ZT_TEST_TRUE(train(docs2, 2, 259, &v) == ZT_OK, "train: %s", zt_error_last());
    const int32_t want2[] = {A, B, B, A};
    ZT_TEST_TRUE(merges_are(&v, want2, 2) && v.ntok == 258, "ties: %d merges", v.nmerges);
    zt_bpe_vocab_free(&v);
    /* overlapping pairs: "aaaa" -> "aa" "aa" -> "aaaa"; "aaa" -> "aa" "a" */
    const char *docs3[] = {"aaaa"};
    ZT_TEST_TRUE(train(docs3, 1, 300, &v) == ZT_OK, "train: %s", zt_error_last());
    const int32_t want3[] = {A, A, 256, 256};
    ZT_TEST_TRUE(merges_are(&v, want3, 2) && v.ntok == 258, "aaaa: %d merges", v.nmerges);
    zt_bpe_vocab_free(&v);
    const char *docs4[] = {"aaa"};
    ZT_TEST_TRUE(train(docs4, 1, 300, &v) == ZT_OK, "train: %s", zt_error_last());
    const int32_t want4[] = {A, A, 256, A};
    ZT_TEST_TRUE(merges_are(&v, want4, 2), "aaa: %d merges", v.nmerges);
    zt_bpe_vocab_free(&v);
    /* nothing to merge: the 256 bytes only */
    const char *docs5[] = {"a b"};
    ZT_TEST_TRUE(train(docs5, 1, 257, &v) == ZT_OK && v.nmerges == 0 && v.ntok == 256,
                 "no pairs: %d merges", v.nmerges);
    zt_bpe_vocab_free(&v);
}

/* the saved directory d encodes text to want[0..n) and decodes back */
static void check_encodes(const char *d, const char *text, const int32_t *want, size_t n) {
    struct zt_tokenizer *t = NULL;
    ZT_TEST_TRUE(zt_tokenizer_load(&t, d) == ZT_OK, "load %s: %s", d, zt_error_last());
    if (!t) return;
    int32_t *ids = NULL;
    size_t k = 0, len = 0;
    char *back = NULL;
    ZT_TEST_TRUE(zt_tokenizer_encode(t, text, strlen(text), &ids, &k) == ZT_OK && k == n &&
                 memcmp(ids, want, n * sizeof *ids) == 0, "%s: ids differ (%zu of %zu)", d, k,
                 n);
    ZT_TEST_TRUE(zt_tokenizer_decode(t, ids, k, &back, &len) == ZT_OK && len == strlen(text) &&
                 memcmp(back, text, len) == 0, "%s: decode is not the text", d);
    ZT_TEST_TRUE(zt_tokenizer_special_id(t, "<|endoftext|>") == 259 &&
                 zt_tokenizer_vocab_size(t) == 260, "%s: <|endoftext|> %d, vocab %d", d,
                 zt_tokenizer_special_id(t, "<|endoftext|>"), zt_tokenizer_vocab_size(t));
    free(ids);
    free(back);
    zt_tokenizer_free(t);
}

static void check_save(void) {
    struct zt_bpe_vocab v;
    const char *docs[] = {"abab ab ab"};
    ZT_TEST_TRUE(train(docs, 1, 1000, &v) == ZT_OK, "train: %s", zt_error_last());
    char d[1200], p[1300];
    snprintf(d, sizeof d, "%s/tok", tmp_dir);
    zt_file_remove_dir(d);
    ZT_TEST_TRUE(zt_bpe_save(&v, d) == ZT_OK, "save: %s", zt_error_last());
    ZT_TEST_TRUE(zt_test_count_tmp(d) == 0, "temporaries left in %s", d);
    const int32_t want[] = {258, 257, 257, 259, 256};
    check_encodes(d, "abab ab ab<|endoftext|>ab", want, 5);
    snprintf(p, sizeof p, "%s/tokenizer.json", d); /* the two-file form alone */
    remove(p);
    check_encodes(d, "abab ab ab<|endoftext|>ab", want, 5);
    snprintf(d, sizeof d, "%s/missing/tok", tmp_dir);
    struct stat sb;
    ZT_TEST_TRUE(zt_bpe_save(&v, d) == ZT_ERR_IO && strstr(zt_error_last(), d) &&
                 stat(d, &sb) != 0, "save under a missing parent: %s", zt_error_last());
    zt_bpe_vocab_free(&v);
}

static void check_errors(void) {
    struct zt_bpe_vocab v;
    const char *docs[] = {"abab"};
    ZT_TEST_TRUE(train(docs, 1, 256, &v) == ZT_ERR_INVALID && strstr(zt_error_last(), "256"),
                 "vocab 256: %s", zt_error_last());
    ZT_TEST_TRUE(train(docs, 1, 65537, &v) == ZT_ERR_INVALID, "vocab 65537 accepted");
    const char *bad[] = {"ok \xe2\x82 then"};
    ZT_TEST_TRUE(train(bad, 1, 300, &v) == ZT_ERR_DATA && strstr(zt_error_last(), "byte 3"),
                 "invalid UTF-8: %s", zt_error_last());
}

int main(void) {
    const char *tmp = getenv("ZT_IO_TEST_TMP");
    snprintf(tmp_dir, sizeof tmp_dir, "%s", tmp ? tmp : "/tmp/zt-test-tokenizer-train");
    mkdir(tmp_dir, 0755);
    check_merges();
    check_save();
    check_errors();
    return zt_test_finish("test_tokenizer_train");
}
