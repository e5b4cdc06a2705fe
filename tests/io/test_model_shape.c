/*
 * tests/io/test_model_shape.c: proves the size check of a model shape (io/model_shape.c): a
 * shape whose arrays would hold more than 2^56 elements is ZT_ERR_CONFIG naming the file, the
 * field it grows with, its value and the limit, through the parser (one sequence) and with a
 * micro-batch; the limit itself passes; zt_model_shape_largest names the largest array.
 */
#include <stdio.h>  /* snprintf */
#include <string.h> /* strstr */

#include "zt_config.h" /* zt_model_shape_parse, zt_model_shape_check_sizes */
#include "zt_status.h" /* zt_error_last */
#include "zt_test.h"   /* ZT_TEST_TRUE, zt_test_finish */

static enum zt_status parse(int V, int T, int C, int L, int NH, struct zt_model_shape *m) {
    char json[256];
    snprintf(json, sizeof json, "{\"vocab_size\": %d, \"seq_len\": %d, \"n_embd\": %d, "
             "\"n_layer\": %d, \"n_head\": %d}", V, T, C, L, NH);
    return zt_model_shape_parse(m, json, "m.json");
}

/* the last error is ZT_ERR_CONFIG holding every word */
static void expect_config_(int line, enum zt_status rc, const char *w1, const char *w2) {
    const char *msg = zt_error_last();
    ZT_TEST_TRUE(rc == ZT_ERR_CONFIG && strstr(msg, "model shape m.json") && strstr(msg, w1) &&
                     strstr(msg, w2) && strstr(msg, "2^56") && !strchr(msg, '\n'),
                 "line %d: %s: %s (want %s, %s)", line, zt_status_str(rc), msg, w1, w2);
}
#define EXPECT_CONFIG(rc, w1, w2) expect_config_(__LINE__, rc, w1, w2)

static void test_parse(void) {
    struct zt_model_shape m;
    /* 12 n_embd^2 overflows int64_t */
    EXPECT_CONFIG(parse(64, 8, 2000000000, 1, 2, &m), "n_embd: 2000000000 is too large",
                  "one layer's weights");
    /* n_layer x 12 n_embd^2: each layer fits, all of them do not */
    EXPECT_CONFIG(parse(64, 8, 65536, 2000000, 2, &m), "n_layer: 2000000 is too large",
                  "all layers");
    /* the attention scores of one sequence: n_layer x n_head x seq_len^2 */
    EXPECT_CONFIG(parse(64, 1 << 30, 64, 1, 64, &m), "seq_len: 1073741824 is too large",
                  "attention scores");
    /* vocab_size x n_embd = 2^56 exactly (12 n_embd^2 below it): the limit itself passes */
    ZT_TEST_TRUE(parse(1 << 30, 8, 1 << 26, 1, 1, &m) == ZT_OK, "2^56: %s", zt_error_last());
    EXPECT_CONFIG(parse((1 << 30) + 1, 8, 1 << 26, 1, 1, &m), "vocab_size: 1073741825 is too "
                  "large", "token embedding");
    ZT_TEST_TRUE(parse(50257, 1024, 768, 12, 12, &m) == ZT_OK, "gpt2: %s", zt_error_last());
}

static void test_micro_batch(void) {
    struct zt_model_shape m = {.vocab_size = 64, .seq_len = 1 << 20, .n_embd = 16,
                               .n_layer = 64, .n_head = 1};
    ZT_TEST_TRUE(zt_model_shape_check_sizes(&m, 1, "m.json") == ZT_OK, "one sequence: %s",
                 zt_error_last());
    EXPECT_CONFIG(zt_model_shape_check_sizes(&m, 4096, "m.json"), "seq_len: 1048576",
                  "with a micro-batch of 4096");
    struct zt_model_shape wide = {.vocab_size = 1000000000, .seq_len = 8, .n_embd = 1000000,
                                  .n_layer = 1, .n_head = 2};
    ZT_TEST_TRUE(zt_model_shape_check_sizes(&wide, 4, "m.json") == ZT_OK, "1e15: %s",
                 zt_error_last());
    char big[256];
    zt_model_shape_largest(&wide, 4, big, sizeof big);
    ZT_TEST_TRUE(strstr(big, "token embedding") && strstr(big, "vocab_size 1000000000"),
                 "largest: %s", big);
}

int main(void) {
    test_parse();
    test_micro_batch();
    return zt_test_finish("test_model_shape");
}
