/*
 * tests/fuzz/fuzz_util.h: what the fuzz targets share.
 *
 * Each target (fuzz_<reader>.c) defines LLVMFuzzerTestOneInput for one of our file readers. The
 * readers take paths, so the input is written to a scratch file first (fuzz_input_file). After
 * a failed read the target checks the contract of a bad input: the error message is set and
 * is one line (fuzz_check_error). libFuzzer (clang -fsanitize=fuzzer) drives the targets in
 * scripts/fuzz.sh; fuzz_replay_main.c drives the same targets over the seed corpora and the
 * saved findings in every normal build (ctest -L fuzz).
 */
#ifndef ZT_FUZZ_UTIL_H
#define ZT_FUZZ_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "zt_status.h"
#include "zt_tokenizer.h" /* zt_tokenizer_load, for fuzz_fixture_tokenizer */

#ifndef ZT_FUZZ_TOKENIZER_FIXTURE
#define ZT_FUZZ_TOKENIZER_FIXTURE "tests/data/tokenizer"
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Stop the run as a finding: libFuzzer saves the input that got here. */
#define FUZZ_FAIL(...)                                                                             \
    do {                                                                                           \
        fprintf(stderr, "fuzz finding: " __VA_ARGS__);                                             \
        fputc('\n', stderr);                                                                       \
        abort();                                                                                   \
    } while (0)

/* The scratch paths handed out (at most 4 distinct suffixes a process), removed at exit. */
static char fuzz_scratch[4][512];
static int fuzz_nscratch;

static inline void fuzz_remove_scratch(void) {
    for (int i = 0; i < fuzz_nscratch; i++) {
        char meta[600];
        /* the checkpoint target's scratch is a directory holding meta.json */
        if (snprintf(meta, sizeof meta, "%s/meta.json", fuzz_scratch[i]) < (int)sizeof meta)
            remove(meta);
        remove(fuzz_scratch[i]);
    }
}

/* A scratch path of this process under TMPDIR (or /tmp), ending in suffix; the same suffix
 * gives the same path. */
static inline const char *fuzz_scratch_path(const char *suffix) {
    const char *tmp = getenv("TMPDIR");
    char p[512];
    snprintf(p, sizeof p, "%s/zt-fuzz-%ld%s", tmp && *tmp ? tmp : "/tmp", (long)getpid(), suffix);
    for (int i = 0; i < fuzz_nscratch; i++)
        if (!strcmp(fuzz_scratch[i], p)) return fuzz_scratch[i];
    if (fuzz_nscratch == 4) FUZZ_FAIL("more than 4 scratch paths");
    if (fuzz_nscratch == 0) atexit(fuzz_remove_scratch);
    snprintf(fuzz_scratch[fuzz_nscratch], sizeof fuzz_scratch[0], "%s", p);
    return fuzz_scratch[fuzz_nscratch++];
}

/* Write the input to path (replacing it). */
static inline void fuzz_write(const char *path, const uint8_t *data, size_t size) {
    FILE *f = fopen(path, "wb");
    if (!f) FUZZ_FAIL("cannot write the scratch file %s", path);
    if (size && fwrite(data, 1, size, f) != size) FUZZ_FAIL("short write to %s", path);
    if (fclose(f) != 0) FUZZ_FAIL("cannot close %s", path);
}

/* The input as a scratch file of this process. */
static inline const char *fuzz_input_file(const uint8_t *data, size_t size, const char *suffix) {
    const char *path = fuzz_scratch_path(suffix);
    fuzz_write(path, data, size);
    return path;
}

/* The input as a NUL-terminated string (caller frees). */
static inline char *fuzz_input_text(const uint8_t *data, size_t size) {
    char *s = malloc(size + 1);
    if (!s) FUZZ_FAIL("out of memory");
    memcpy(s, data, size);
    s[size] = 0;
    return s;
}

/* The test fixture's BPE (tests/data/tokenizer, or ZT_FUZZ_TOKENIZER_DIR), loaded on first use
 * and kept for the process. */
static inline const struct zt_tokenizer *fuzz_fixture_tokenizer(void) {
    static struct zt_tokenizer *tok;
    if (!tok) {
        const char *dir = getenv("ZT_FUZZ_TOKENIZER_DIR");
        if (zt_tokenizer_load(&tok, dir && *dir ? dir : ZT_FUZZ_TOKENIZER_FIXTURE) != ZT_OK)
            FUZZ_FAIL("cannot load the fixture tokenizer: %s", zt_error_last());
    }
    return tok;
}

/* A reader refused the input: its error must be one non-empty line. */
static inline void fuzz_check_error(enum zt_status rc, const char *reader) {
    if (rc == ZT_OK) return;
    const char *msg = zt_error_last();
    if (!msg[0]) FUZZ_FAIL("%s failed (%d) without a message", reader, (int)rc);
    if (strchr(msg, '\n')) FUZZ_FAIL("%s: the message is not one line: %s", reader, msg);
    zt_error_clear();
}

#endif
