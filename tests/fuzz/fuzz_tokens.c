/*
 * tests/fuzz/fuzz_tokens.c: the token-file reader (io/tokens.c) on any bytes: open (header,
 * size and every id checked), then read the batches of a few steps.
 */
#include "fuzz_util.h"
#include "zt_tokens.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* the first byte picks the vocabulary size, so both sides of the id check are reached */
    int vocab = size ? 1 + data[0] * 257 : 50257;
    struct zt_tokens t;
    enum zt_status rc = zt_tokens_open(&t, fuzz_input_file(data, size, ".bin"), vocab);
    fuzz_check_error(rc, "zt_tokens_open");
    if (rc != ZT_OK) return 0;
    enum { B = 2, T = 5 };
    int32_t in[B * T], tg[B * T];
    for (int64_t step = 1; step <= 3; step++) {
        enum zt_status brc = zt_tokens_batch(&t, step, B, T, 0, B, in, tg);
        if (brc != ZT_OK) FUZZ_FAIL("a batch of a file that opened failed: %s", zt_error_last());
        for (int i = 0; i < B * T; i++)
            if (in[i] < 0 || in[i] >= vocab || tg[i] < 0 || tg[i] >= vocab)
                FUZZ_FAIL("token %d or %d of a batch is outside vocab %d", in[i], tg[i], vocab);
    }
    zt_tokens_close(&t);
    return 0;
}
