/*
 * tests/fuzz/fuzz_data_spec.c: the readers of zt_dataset.h on any bytes: the input as a data
 * spec (io/data_spec.c: JSON, sources, weights, valid_split; its files mostly missing, so the
 * parser's errors are what is reached), and the same bytes as a checkpoint's sampler state
 * (io/dataset.c) against a small blend of two fixture token files written once.
 */
#include "fuzz_util.h"
#include "zt_dataset.h"

enum { T = 4, VOCAB = 16 };

/* a blend of two fixture files (linear order) to restore states into, built on first use */
static const struct zt_dataset *fixture(void) {
    static struct zt_dataset d;
    static int ready;
    if (ready) return &d;
    uint16_t tok[41];
    for (int i = 0; i < 41; i++) tok[i] = (uint16_t)(i % VOCAB);
    const char *a = fuzz_scratch_path("-a.bin"), *b = fuzz_scratch_path("-b.bin");
    char data[2 * 512 + 2]; /* two scratch paths (at most 511 bytes each) and a comma */
    snprintf(data, sizeof data, "%.511s,%.511s", a, b);
    if (zt_tokens_write(a, tok, 41) != ZT_OK || zt_tokens_write(b, tok, 21) != ZT_OK ||
        zt_dataset_open(&d, data, NULL, VOCAB, T, ZT_DATA_LINEAR, 1) != ZT_OK)
        FUZZ_FAIL("fixture: %s", zt_error_last());
    ready = 1;
    return &d;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct zt_dataset d;
    enum zt_status rc = zt_dataset_open(&d, fuzz_input_file(data, size, ".json"), NULL, VOCAB, T,
                                        ZT_DATA_SHUFFLE, 7);
    fuzz_check_error(rc, "zt_dataset_open");
    if (rc == ZT_OK) {
        struct zt_sampler_state st = {0};
        struct zt_data_row rows[8];
        int32_t in[T], tg[T];
        zt_dataset_next(&d, &d.train, &st, 8, rows);
        for (int k = 0; k < 8; k++)
            if (zt_tokens_row(d.files, &rows[k], T, T, in, tg) != ZT_OK)
                FUZZ_FAIL("a row of a spec that opened failed: %s", zt_error_last());
        zt_dataset_close(&d);
    }
    const struct zt_dataset *fx = fixture();
    char *text = fuzz_input_text(data, size);
    struct zt_sampler_state st;
    rc = zt_sampler_state_parse(fx, text, "fuzz", &st);
    fuzz_check_error(rc, "zt_sampler_state_parse");
    if (rc == ZT_OK) {
        struct zt_data_row rows[8];
        zt_dataset_next(fx, &fx->train, &st, 8, rows); /* a restored state must stay usable */
    }
    free(text);
    return 0;
}
