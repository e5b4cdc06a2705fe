/*
 * tests/fuzz/fuzz_tokenizer.c: the tokenizer (io/tokenizer.c) on any bytes: the input is the
 * text given to zt_tokenizer_encode with the test fixture's BPE (tests/data/tokenizer, or
 * ZT_FUZZ_TOKENIZER_DIR). Invalid UTF-8 must be refused with one line; valid text must give ids
 * inside the vocabulary that decode back to the input's exact bytes.
 */
#include "fuzz_util.h"
#include "zt_tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const struct zt_tokenizer *tok = fuzz_fixture_tokenizer();
    int32_t *ids = NULL;
    size_t n = 0;
    enum zt_status rc = zt_tokenizer_encode(tok, (const char *)data, size, &ids, &n);
    fuzz_check_error(rc, "zt_tokenizer_encode");
    if (rc != ZT_OK) return 0;
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= zt_tokenizer_vocab_size(tok))
            FUZZ_FAIL("id %d at %zu is outside the vocabulary", ids[i], i);
    char *back = NULL;
    size_t len = 0;
    if (zt_tokenizer_decode(tok, ids, n, &back, &len) != ZT_OK)
        FUZZ_FAIL("decode of encoded ids failed: %s", zt_error_last());
    if (len != size || (size && memcmp(back, data, size) != 0))
        FUZZ_FAIL("decode(encode(input)) is not the input (%zu bytes back of %zu)", len, size);
    free(back);
    free(ids);
    return 0;
}
