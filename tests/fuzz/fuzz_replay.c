/*
 * tests/fuzz/fuzz_replay.c: the replay-file reader (io/tracefile.c) on any bytes: open (the
 * header), then every task line to the end.
 */
#include "fuzz_util.h"
#include "zt_tracefile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct zt_tracefile_reader r;
    enum zt_status rc = zt_tracefile_open(&r, fuzz_input_file(data, size, ".ztr"));
    fuzz_check_error(rc, "zt_tracefile_open");
    if (rc != ZT_OK) return 0;
    struct zt_tracefile_task t;
    int got = 1;
    while (got && rc == ZT_OK) rc = zt_tracefile_next(&r, &t, &got);
    fuzz_check_error(rc, "zt_tracefile_next");
    zt_tracefile_close(&r);
    return 0;
}
