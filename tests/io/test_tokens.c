/*
 * tests/io/test_tokens.c: proves the llm.c token-file reader and writer keep their contract:
 * - zt_tokens_write + zt_tokens_open round-trip, with no temporary left behind;
 * - zt_tokens_batch follows the data rule of zt_tokens.h (inputs and targets both wrap mod
 *   count), checked against the formula for several steps, row subsets, a huge step and T > count;
 * - every malformed file fails with the right code and a message naming the file: missing,
 *   empty/truncated header, wrong magic (found vs 20240520), wrong version, size != 1024 + 2*count,
 *   count < 2, a token >= vocab_size (with index and value);
 * - a write that fails part-way (file size limit, EFBIG) leaves the old file intact and no
 *   temporary behind;
 * - a file that changes after it was opened: truncated, a batch read fails naming the file and
 *   its new size; rewritten in place with an id >= vocab_size, naming the token, byte and id;
 *   replaced by rename, batches keep reading the file that was opened.
 */
#include <signal.h>       /* signal, SIGXFSZ */
#include <stdio.h>        /* fopen, fwrite */
#include <stdlib.h>       /* getenv, malloc */
#include <string.h>       /* strstr */
#include <sys/resource.h> /* setrlimit, RLIMIT_FSIZE */
#include <sys/stat.h>     /* mkdir, stat */
#include <sys/wait.h>     /* waitpid */
#include <unistd.h>       /* fork, _exit */

#include "zt_status.h" /* zt_error_last */
#include "zt_test.h"   /* ZT_TEST_TRUE, zt_test_finish */
#include "zt_tokens.h" /* zt_tokens_open, zt_tokens_batch, zt_tokens_write */

static const char *dir;

static void pathof(char *out, const char *name) { snprintf(out, 1024, "%s/%s", dir, name); }

/* Write a raw file: the 3 header ints, `ntok` tokens, then cut the file to `cut` bytes if >= 0. */
static void write_raw(const char *p, int32_t magic, int32_t ver, int32_t count, const uint16_t *tok,
                      size_t ntok, long cut) {
    int32_t h[256] = {magic, ver, count};
    FILE *f = fopen(p, "wb");
    fwrite(h, sizeof h, 1, f);
    if (ntok) fwrite(tok, 2, ntok, f);
    fclose(f);
    if (cut >= 0) truncate(p, cut);
}

static void expect_open_err(int line, const char *p, int vocab, enum zt_status code,
                            const char *want) {
    struct zt_tokens t;
    enum zt_status rc = zt_tokens_open(&t, p, vocab);
    if (rc != code || !strstr(zt_error_last(), p) || !strstr(zt_error_last(), want)) {
        fprintf(stderr, "FAIL %s:%d: %s: got %s \"%s\", want %s with \"%s\"\n", __FILE__, line, p,
                zt_status_str(rc), zt_error_last(), zt_status_str(code), want);
        zt_test_failures++;
    }
    zt_tokens_close(&t); /* must be safe after a failed open */
}

/* tok: the file's tokens, for the expected values */
static void check_batch(const struct zt_tokens *t, const uint16_t *tok, int64_t step, int B, int T,
                        int row0, int nrows) {
    int32_t *in = malloc(sizeof(int32_t) * (size_t)(nrows * T + 1));
    int32_t *tg = malloc(sizeof(int32_t) * (size_t)(nrows * T + 1));
    enum zt_status rc = zt_tokens_batch(t, step, B, T, row0, nrows, in, tg);
    ZT_TEST_TRUE(rc == ZT_OK, "batch step %lld: %s", (long long)step, zt_error_last());
    int bad = 0;
    for (int r = 0; r < nrows; r++) {
        for (int k = 0; k < T; k++) {
            /* the rule of zt_tokens.h, written out with 64-bit arithmetic (no overflow here) */
            int64_t pos = (step - 1) * B * T + (int64_t)(row0 + r) * T + k;
            int32_t wi = tok[pos % (int64_t)t->count], wt = tok[(pos + 1) % (int64_t)t->count];
            if (in[r * T + k] != wi || tg[r * T + k] != wt) bad++;
        }
    }
    ZT_TEST_TRUE(!bad, "batch step %lld B %d T %d rows %d+%d: %d wrong", (long long)step, B, T,
                 row0, nrows, bad);
    free(in);
    free(tg);
}

/* one batch of step 1 (B=1, T=8) of an open file; returns its status */
static enum zt_status read_eight(const struct zt_tokens *t, int32_t *in, int32_t *tg) {
    return zt_tokens_batch(t, 1, 1, 8, 0, 1, in, tg);
}

static int error_has(const char *a, const char *b) {
    return strstr(zt_error_last(), a) && (!b || strstr(zt_error_last(), b));
}

/* The file changes after it was opened (validated): every batch read sees it. */
static void test_changed_under_reader(void) {
    uint16_t sixteen[16];
    for (int i = 0; i < 16; i++) sixteen[i] = (uint16_t)i;
    char p[1024], want[256];
    int32_t in[8], tg[8];
    struct zt_tokens t;
    pathof(p, "shrinks.bin");
    ZT_TEST_TRUE(zt_tokens_write(p, sixteen, 16) == ZT_OK, "write shrinks");
    if (zt_tokens_open(&t, p, 16) == ZT_OK) {
        ZT_TEST_TRUE(read_eight(&t, in, tg) == ZT_OK && in[7] == 7 && tg[7] == 8, "before");
        truncate(p, 1024 + 2 * 4);
        enum zt_status rc = read_eight(&t, in, tg);
        snprintf(want, sizeof want, "file shrank to 1032 bytes while training (expected 1056)");
        ZT_TEST_TRUE(rc == ZT_ERR_DATA && error_has(p, want), "truncated: %s %s",
                     zt_status_str(rc), zt_error_last());
        truncate(p, 0); /* below the header too: still an error, never a fault */
        rc = zt_tokens_batch(&t, 2, 1, 8, 0, 1, in, tg);
        ZT_TEST_TRUE(rc == ZT_ERR_DATA && error_has(p, "file shrank to 0 bytes"), "emptied: %s",
                     zt_error_last());
        zt_tokens_close(&t);
    }
    pathof(p, "rewritten.bin");
    ZT_TEST_TRUE(zt_tokens_write(p, sixteen, 16) == ZT_OK, "write rewritten");
    if (zt_tokens_open(&t, p, 16) == ZT_OK) {
        FILE *f = fopen(p, "r+b"); /* in place: the inode the reader has open */
        uint16_t bad = 60000;
        fseek(f, 1024 + 2 * 5, SEEK_SET);
        fwrite(&bad, 2, 1, f);
        fclose(f);
        enum zt_status rc = read_eight(&t, in, tg);
        ZT_TEST_TRUE(rc == ZT_ERR_DATA && error_has(p, "token 5 at byte 1034 is 60000, not below "
                                                       "vocab_size 16"),
                     "rewritten: %s %s", zt_status_str(rc), zt_error_last());
        /* a target alone (the token after the row's inputs) is checked too */
        rc = zt_tokens_batch(&t, 1, 1, 5, 0, 1, in, tg);
        ZT_TEST_TRUE(rc == ZT_ERR_DATA && error_has(p, "token 5 at byte 1034"), "target: %s",
                     zt_error_last());
        ZT_TEST_TRUE(zt_tokens_batch(&t, 1, 1, 4, 0, 1, in, tg) == ZT_OK, "rows before it read");
        zt_tokens_close(&t);
    }
    pathof(p, "replaced.bin");
    ZT_TEST_TRUE(zt_tokens_write(p, sixteen, 16) == ZT_OK, "write replaced");
    if (zt_tokens_open(&t, p, 16) == ZT_OK) {
        uint16_t other[4] = {9, 9, 9, 9};
        ZT_TEST_TRUE(zt_tokens_write(p, other, 4) == ZT_OK, "replace by rename");
        ZT_TEST_TRUE(read_eight(&t, in, tg) == ZT_OK && in[3] == 3 && tg[7] == 8,
                     "a renamed-over file keeps reading as opened: %s", zt_error_last());
        zt_tokens_close(&t);
    }
}

/* the tokens 0..9, written to ten.bin by test_round_trip and reused by the later groups */
static const uint16_t ten[10] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};

/* zt_tokens_write + zt_tokens_open round-trip (ten.bin), and the batch rule against the formula */
static void test_round_trip(void) {
    char p[1024];
    pathof(p, "ten.bin");
    ZT_TEST_TRUE(zt_tokens_write(p, ten, 10) == ZT_OK, "write: %s", zt_error_last());
    ZT_TEST_TRUE(zt_test_count_tmp(dir) == 0, "no temporary left after a good write");
    struct stat sb;
    ZT_TEST_TRUE(stat(p, &sb) == 0 && sb.st_size == 1024 + 20, "file size %lld",
                 (long long)sb.st_size);
    struct zt_tokens t;
    enum zt_status rc = zt_tokens_open(&t, p, 10);
    ZT_TEST_TRUE(rc == ZT_OK && t.count == 10, "open: %s", zt_error_last());
    if (rc != ZT_OK) return;
    /* hand-checked: B=2, T=3; step 1 rows read 0 1 2 | 3 4 5, step 2 rows 6 7 8 | 9 0 1 */
    int32_t in[6], tg[6];
    zt_tokens_batch(&t, 2, 2, 3, 0, 2, in, tg);
    const int32_t win[6] = {6, 7, 8, 9, 0, 1}, wtg[6] = {7, 8, 9, 0, 1, 2};
    ZT_TEST_TRUE(!memcmp(in, win, sizeof in) && !memcmp(tg, wtg, sizeof tg),
                 "step 2 wraps: in %d %d %d %d %d %d tg %d %d %d %d %d %d", in[0], in[1], in[2],
                 in[3], in[4], in[5], tg[0], tg[1], tg[2], tg[3], tg[4], tg[5]);
    zt_tokens_batch(&t, 1, 2, 3, 1, 1, in, tg); /* row 1 alone = 3 4 5 / 4 5 6 */
    ZT_TEST_TRUE(in[0] == 3 && in[2] == 5 && tg[0] == 4 && tg[2] == 6, "row subset");
    for (int64_t s = 1; s <= 7; s++) check_batch(&t, ten, s, 2, 3, 0, 2);
    check_batch(&t, ten, 3, 4, 5, 1, 2);
    check_batch(&t, ten, 1000000007LL, 3, 7, 0, 3);
    check_batch(&t, ten, 5, 1, 23, 0, 1); /* T > count: wraps inside a row */
    zt_tokens_close(&t);
    ZT_TEST_TRUE(t.fd == -1 && t.count == 0, "close clears");
}

/* the smallest file (two tokens), read with T larger than it */
static void test_two_tokens(void) {
    char p[1024];
    struct zt_tokens t;
    uint16_t two[2] = {1, 0};
    pathof(p, "two.bin");
    ZT_TEST_TRUE(zt_tokens_write(p, two, 2) == ZT_OK, "write two");
    if (zt_tokens_open(&t, p, 2) == ZT_OK) {
        int32_t in[5], tg[5];
        zt_tokens_batch(&t, 1, 1, 5, 0, 1, in, tg);
        ZT_TEST_TRUE(in[0] == 1 && in[1] == 0 && in[4] == 1 && tg[0] == 0 && tg[4] == 0,
                     "two tokens, T=5");
        zt_tokens_close(&t);
    } else {
        ZT_TEST_FAIL("open two: %s", zt_error_last());
    }
}

/* every malformed file fails at open with its code and a message naming the file */
static void test_malformed_files(void) {
    char p[1024];
    pathof(p, "missing.bin");
    expect_open_err(__LINE__, p, 10, ZT_ERR_IO, "cannot open");
    pathof(p, "empty.bin");
    write_raw(p, 0, 0, 0, NULL, 0, 0);
    expect_open_err(__LINE__, p, 10, ZT_ERR_DATA, "truncated header (0 bytes");
    pathof(p, "short.bin");
    write_raw(p, ZT_TOKENS_MAGIC, 1, 10, ten, 10, 100);
    expect_open_err(__LINE__, p, 10, ZT_ERR_DATA, "truncated header (100 bytes");
    pathof(p, "magic.bin");
    write_raw(p, 12345, 1, 10, ten, 10, -1);
    expect_open_err(__LINE__, p, 10, ZT_ERR_DATA, "bad magic 12345, expected 20240520");
    pathof(p, "version.bin");
    write_raw(p, ZT_TOKENS_MAGIC, 2, 10, ten, 10, -1);
    expect_open_err(__LINE__, p, 10, ZT_ERR_DATA, "version 2, expected 1");
    pathof(p, "size.bin");
    write_raw(p, ZT_TOKENS_MAGIC, 1, 10, ten, 8, -1);
    expect_open_err(__LINE__, p, 10, ZT_ERR_DATA,
                    "file is 1040 bytes, but the header's count 10 needs 1044");
    pathof(p, "long.bin");
    write_raw(p, ZT_TOKENS_MAGIC, 1, 4, ten, 10, -1);
    expect_open_err(__LINE__, p, 10, ZT_ERR_DATA, "count 4 needs 1032");
    pathof(p, "one.bin");
    write_raw(p, ZT_TOKENS_MAGIC, 1, 1, ten, 1, -1);
    expect_open_err(__LINE__, p, 10, ZT_ERR_DATA, "count 1; need at least 2");
    pathof(p, "neg.bin");
    write_raw(p, ZT_TOKENS_MAGIC, 1, -3, ten, 0, -1);
    expect_open_err(__LINE__, p, 10, ZT_ERR_DATA, "count -3; need at least 2");
    pathof(p, "ten.bin");
    expect_open_err(__LINE__, p, 5, ZT_ERR_DATA, "token 5 at byte 1034 is 5, not below vocab_size 5");
    expect_open_err(__LINE__, p, 0, ZT_ERR_INVALID, "vocab_size must be >= 1");
}

/* failed writes (a missing directory; EFBIG part-way) leave the old file intact and no
 * temporary behind */
static void test_failed_writes(void) {
    char p[1024];
    pathof(p, "nodir/x.bin");
    enum zt_status rc = zt_tokens_write(p, ten, 10);
    ZT_TEST_TRUE(rc == ZT_ERR_IO && strstr(zt_error_last(), p),
                 "write into a missing directory: %s", zt_error_last());
    pathof(p, "ten.bin");
    size_t big = 1 << 20;
    uint16_t *many = calloc(big, 2);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        /* a 64 KiB file-size limit makes write() fail with EFBIG part-way through */
        signal(SIGXFSZ, SIG_IGN);
        struct rlimit rl = {65536, 65536};
        setrlimit(RLIMIT_FSIZE, &rl);
        enum zt_status w = zt_tokens_write(p, many, big);
        _exit(w == ZT_ERR_IO && strstr(zt_error_last(), "write failed") ? 0 : 1);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    free(many);
    ZT_TEST_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0, "EFBIG write must return ZT_ERR_IO");
    ZT_TEST_TRUE(zt_test_count_tmp(dir) == 0, "no temporary left after a failed write");
    struct zt_tokens t;
    rc = zt_tokens_open(&t, p, 10);
    int32_t last_in = -1, last_tg = -1;
    if (rc == ZT_OK) zt_tokens_batch(&t, 1, 1, 1, 0, 1, &last_in, &last_tg);
    ZT_TEST_TRUE(rc == ZT_OK && t.count == 10 && last_in == 0 && last_tg == 1,
                 "old file intact after failed write");
    zt_tokens_close(&t);
}

int main(void) {
    dir = getenv("ZT_IO_TEST_TMP");
    if (!dir) dir = "/tmp/zt-test-tokens";
    mkdir(dir, 0755);
    test_round_trip();
    test_two_tokens();
    test_malformed_files();
    test_failed_writes();
    test_changed_under_reader();
    return zt_test_finish("test_tokens");
}
