/*
 * tests/fuzz/fuzz_ckpt_shard.c: the checkpoint shard reader (io/ckpt_read.c) on any bytes:
 * open (header, CRC, records inside the file), verify every record's CRC, read each record.
 */
#include "fuzz_util.h"
#include "zt_ckpt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct zt_shard s;
    enum zt_status rc = zt_shard_open(&s, fuzz_input_file(data, size, ".shard"));
    fuzz_check_error(rc, "zt_shard_open");
    if (rc != ZT_OK) return 0;
    fuzz_check_error(zt_shard_verify(&s), "zt_shard_verify");
    for (int i = 0; i < s.n; i++) {
        int64_t floats = s.rec[i].bytes / (int64_t)sizeof(float);
        if (floats > (1 << 20)) continue; /* the reader checked the size; keep the run fast */
        float *dst = malloc((size_t)(floats ? floats : 1) * sizeof *dst);
        if (!dst) FUZZ_FAIL("out of memory");
        fuzz_check_error(zt_shard_read(&s, i, dst), "zt_shard_read");
        free(dst);
    }
    zt_shard_close(&s);
    return 0;
}
