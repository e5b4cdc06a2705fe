/*
 * tests/io/test_tokenizer.c: proves io/tokenizer.c gives Hugging Face `tokenizers`' ids:
 * - both forms of the fixture (tokenizer.json; vocab.json + merges.txt) load, with the same
 *   vocabulary size as HF reports;
 * - every edge case of tests/data/tokenizer/expected.json (written by HF through
 *   make_tokenizer_fixture.py) encodes to HF's ids with both forms, and decodes back to its
 *   exact bytes;
 * - errors are one line naming the file or the id: a missing directory, malformed JSON, a model
 *   that is not BPE, a merge whose side is not a token, an id past the vocabulary, invalid UTF-8.
 *
 * With --encode DIR TEXT OUT it writes the ids of file TEXT as little-endian int32 to OUT, after
 * checking that they decode back to TEXT's bytes (tokenizer_oracle.py's 1 MB comparison).
 */
#include <cjson/cJSON.h> /* expected.json */
#include <stdio.h>       /* fopen, snprintf */
#include <stdlib.h>      /* getenv, free */
#include <string.h>      /* strstr, memcmp */
#include <sys/stat.h>    /* mkdir */

#include "zt_file.h"      /* zt_file_read_all */
#include "zt_status.h"    /* zt_error_last */
#include "zt_test.h"      /* ZT_TEST_TRUE, zt_test_finish */
#include "zt_tokenizer.h" /* the unit under test */

static char data_dir[1024], tmp_dir[1024];

/* the edge cases of expected.json through tokenizer t: ids equal HF's, decode is the input */
static void check_edges(const struct zt_tokenizer *t, const cJSON *edge, const char *form) {
    int i = 0, bad = 0;
    for (const cJSON *e = edge->child; e; e = e->next, i++) {
        const char *hex = cJSON_GetObjectItem(e, "hex")->valuestring;
        const cJSON *want = cJSON_GetObjectItem(e, "ids");
        char s[4096];
        size_t slen = strlen(hex) / 2, n = 0;
        for (size_t k = 0; k < slen && k < sizeof s; k++) sscanf(hex + 2 * k, "%2hhx", &s[k]);
        int32_t *ids = NULL;
        ZT_TEST_TRUE(slen < sizeof s && zt_tokenizer_encode(t, s, slen, &ids, &n) == ZT_OK,
                     "%s: encode %d: %s", form, i, zt_error_last());
        int same = (int)n == cJSON_GetArraySize(want);
        for (size_t k = 0; same && k < n; k++)
            same = ids[k] == (int32_t)cJSON_GetArrayItem(want, (int)k)->valuedouble;
        if (!same && bad++ < 5) ZT_TEST_FAIL("%s: edge case %d (hex %s): ids differ from HF's "
                                             "(%zu ids, HF %d)", form, i, hex, n,
                                             cJSON_GetArraySize(want));
        char *back = NULL;
        size_t len = 0;
        ZT_TEST_TRUE(zt_tokenizer_decode(t, ids, n, &back, &len) == ZT_OK, "decode: %s",
                     zt_error_last());
        ZT_TEST_TRUE(back && len == slen && memcmp(back, s, len) == 0,
                     "%s: edge case %d: decode(encode) is not the input", form, i);
        free(back);
        free(ids);
    }
    printf("test_tokenizer: %s: %d edge cases, %d differ from HF\n", form, i, bad);
}

static void write_file(const char *name, const char *text) {
    char p[1100];
    snprintf(p, sizeof p, "%s/%s", tmp_dir, name);
    FILE *f = fopen(p, "w");
    fputs(text, f);
    fclose(f);
}

/* loading tmp_dir fails with a message holding want */
static void expect_load_error(const char *what, const char *want) {
    struct zt_tokenizer *t = NULL;
    enum zt_status rc = zt_tokenizer_load(&t, tmp_dir);
    ZT_TEST_TRUE(rc != ZT_OK && !t && strstr(zt_error_last(), want), "%s: expected an error "
                 "with \"%s\", got %d \"%s\"", what, want, rc, zt_error_last());
    printf("test_tokenizer: %s -> %s\n", what, zt_error_last());
}

static void check_load_errors(void) {
    static const char *const names[] = {"tokenizer.json", "vocab.json", "merges.txt"};
    for (int i = 0; i < 3; i++) {
        char p[1100];
        snprintf(p, sizeof p, "%s/%s", tmp_dir, names[i]);
        remove(p);
    }
    expect_load_error("no files", "vocab.json: cannot read");
    write_file("tokenizer.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": ");
    expect_load_error("malformed JSON", "tokenizer.json: not valid JSON");
    write_file("tokenizer.json", "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}");
    expect_load_error("not BPE", "expected model.type \"BPE\"");
    write_file("tokenizer.json", "{\"pre_tokenizer\": {\"type\": \"ByteLevel\"}, \"model\": "
                                 "{\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}}");
    expect_load_error("bytes missing", "lacks byte 0x00");
    remove(strcat(strcpy((char[1200]){0}, tmp_dir), "/tokenizer.json"));
    write_file("vocab.json", "{\"a\": 0, \"b\": 1}");
    expect_load_error("vocab.json of two tokens", "lacks byte");
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "cp '%s/vocab.json' '%s/'", data_dir, tmp_dir);
    ZT_TEST_TRUE(system(cmd) == 0, "%s failed", cmd);
    expect_load_error("vocab.json without merges.txt", "merges.txt: cannot read");
    write_file("merges.txt", "#version: 0.2\nt h\nzzzz q\n");
    expect_load_error("merge of unknown tokens", "merge 1 \"zzzz q\": expected both sides");
    write_file("merges.txt", "t h e\n");
    expect_load_error("merge of three", "expected two tokens separated by one space");
}

static void check_data_errors(const struct zt_tokenizer *t) {
    int32_t ids[2] = {1, zt_tokenizer_vocab_size(t)};
    char *text = NULL;
    size_t len = 0, n = 0;
    ZT_TEST_TRUE(zt_tokenizer_decode(t, ids, 2, &text, &len) == ZT_ERR_DATA &&
                 strstr(zt_error_last(), "id 2000 (at 1)"), "decode of id past vocab: %s",
                 zt_error_last());
    printf("test_tokenizer: id out of range -> %s\n", zt_error_last());
    int32_t *out = NULL;
    ZT_TEST_TRUE(zt_tokenizer_encode(t, "ok\xff", 3, &out, &n) == ZT_ERR_DATA &&
                 strstr(zt_error_last(), "byte 2"), "invalid UTF-8: %s", zt_error_last());
    printf("test_tokenizer: invalid UTF-8 -> %s\n", zt_error_last());
    static const char *const bad[] = {"\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xe2\x82"};
    for (int i = 0; i < 4; i++)
        ZT_TEST_TRUE(zt_tokenizer_encode(t, bad[i], strlen(bad[i]), &out, &n) == ZT_ERR_DATA,
                     "invalid UTF-8 case %d accepted", i);
}

/* --encode DIR TEXT OUT */
static int encode_file(const char *dir, const char *in, const char *outp) {
    struct zt_tokenizer *t = NULL;
    char *text = NULL;
    size_t len = 0, n = 0;
    int32_t *ids = NULL;
    if (zt_tokenizer_load(&t, dir) != ZT_OK || zt_file_read_all(in, 1 << 30, &text, &len) != 0 ||
        zt_tokenizer_encode(t, text, len, &ids, &n) != ZT_OK) {
        fprintf(stderr, "test_tokenizer: %s\n", zt_error_last());
        return 1;
    }
    char *back = NULL;
    size_t blen = 0;
    if (zt_tokenizer_decode(t, ids, n, &back, &blen) != ZT_OK || blen != len ||
        memcmp(back, text, len) != 0) {
        fprintf(stderr, "test_tokenizer: decode(encode(%s)) is not the input\n", in);
        return 1;
    }
    free(back);
    FILE *f = fopen(outp, "wb");
    int ok = f && (n == 0 || fwrite(ids, sizeof *ids, n, f) == n); /* ids is NULL when n is 0 */
    if (f) fclose(f);
    zt_tokenizer_free(t);
    free(text);
    free(ids);
    return ok ? 0 : 1;
}

int main(int argc, char **argv) {
    if (argc == 5 && strcmp(argv[1], "--encode") == 0) return encode_file(argv[2], argv[3], argv[4]);
    const char *src = getenv("ZT_IO_TEST_SRC"), *tmp = getenv("ZT_IO_TEST_TMP");
    snprintf(data_dir, sizeof data_dir, "%s/../data/tokenizer", src ? src : "tests/io");
    snprintf(tmp_dir, sizeof tmp_dir, "%s", tmp ? tmp : "/tmp/zt-test-tokenizer");
    char p[4096], *js = NULL;
    size_t len = 0;
    snprintf(p, sizeof p, "%s/expected.json", data_dir);
    ZT_TEST_TRUE(zt_file_read_all(p, 1 << 24, &js, &len) == 0, "cannot read %s", p);
    cJSON *exp = cJSON_Parse(js);
    free(js);
    ZT_TEST_TRUE(exp != NULL, "%s is not JSON", p);
    struct zt_tokenizer *t = NULL;
    ZT_TEST_TRUE(zt_tokenizer_load(&t, data_dir) == ZT_OK, "load: %s", zt_error_last());
    if (!t || !exp) return zt_test_finish("test_tokenizer");
    ZT_TEST_TRUE(zt_tokenizer_vocab_size(t) ==
                 (int)cJSON_GetObjectItem(exp, "vocab_size")->valuedouble, "vocab size %d",
                 zt_tokenizer_vocab_size(t));
    ZT_TEST_TRUE(zt_tokenizer_special_id(t, "<|endoftext|>") == 0, "<|endoftext|> is not id 0");
    check_edges(t, cJSON_GetObjectItem(exp, "edge"), "tokenizer.json");
    check_data_errors(t);
    zt_tokenizer_free(t);
    /* the two-file form: a directory holding only vocab.json and merges.txt */
    mkdir(tmp_dir, 0755);
    snprintf(p, sizeof p, "%s/tokenizer.json", tmp_dir);
    remove(p);
    snprintf(p, sizeof p, "cp '%s/vocab.json' '%s/merges.txt' '%s/'", data_dir, data_dir,
             tmp_dir);
    ZT_TEST_TRUE(system(p) == 0, "%s failed", p);
    ZT_TEST_TRUE(zt_tokenizer_load(&t, tmp_dir) == ZT_OK, "load vocab.json: %s",
                 zt_error_last());
    if (!t) return zt_test_finish("test_tokenizer");
    check_edges(t, cJSON_GetObjectItem(exp, "edge"), "vocab.json+merges.txt");
    zt_tokenizer_free(t);
    check_load_errors();
    cJSON_Delete(exp);
    return zt_test_finish("test_tokenizer");
}
