/*
 * tests/io/test_dataset.c: proves the data side of io/ keeps zt_dataset.h's contract:
 * - the blend: with 2..6 sources of random weights, every source's count stays within one
 *   sequence of weight * g at every prefix g of 200,000 draws;
 * - the shuffle: zt_dataset_permute is a bijection of 0..n-1 for many n, differs between
 *   epochs, sources and seeds, and is the same on every call;
 * - the rows: a shuffled blend's epoch over a source draws each of its sequences exactly once;
 *   one file by its path in linear order gives the step rule of zt_tokens.h (against
 *   zt_tokens_batch's inputs); rows read from a uint32 file with ids above 65,535 come back
 *   whole; the curriculum's active length turns the later targets into -1;
 * - the sampler's state survives its JSON, and refuses other data, order or seed;
 * - a token file of 8 GiB (sparse, uint32, 2^31 - 1 tokens) opens and serves shuffled rows
 *   while reading well under a megabyte of it (the process's read count, /proc/self/io) and,
 *   outside sanitizers, under an address-space limit of 1 GiB;
 * - every bad input is one error naming it: a weight <= 0 or not a number, weights on some
 *   sources only, a missing file, an empty source, a file shorter than one sequence, a uint32
 *   header over a uint16-sized body, and the data spec's malformed cases.
 */
#include <fcntl.h>        /* open */
#include <inttypes.h>     /* PRIu64 */
#include <stdio.h>        /* fopen, fprintf */
#include <stdlib.h>       /* getenv, malloc, rand */
#include <string.h>       /* strstr */
#include <sys/resource.h> /* setrlimit */
#include <sys/stat.h>     /* mkdir */
#include <sys/wait.h>     /* waitpid */
#include <unistd.h>       /* fork, ftruncate */

#include "zt_dataset.h" /* the unit */
#include "zt_status.h"  /* zt_error_last */
#include "zt_test.h"    /* ZT_TEST_TRUE */

static const char *dir;

static const char *pathof(const char *name) {
    static char buf[4][1024];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

/* a uint16 file of n tokens: token i = (i * mul + add) % vocab */
static void make_tokens(const char *name, size_t n, int mul, int add, int vocab) {
    uint16_t *t = malloc(n * sizeof *t);
    for (size_t i = 0; i < n; i++) t[i] = (uint16_t)((i * (size_t)mul + (size_t)add) % vocab);
    ZT_TEST_TRUE(zt_tokens_write(pathof(name), t, n) == ZT_OK, "write %s", name);
    free(t);
}

static void write_text(const char *name, const char *text) {
    FILE *f = fopen(pathof(name), "w");
    fputs(text, f);
    fclose(f);
}

// ----------------------------------------------------------------------------
// the blend and the shuffle

static void test_blend_exact(void) {
    srand(7);
    for (int trial = 0; trial < 20; trial++) {
        struct zt_data_set set = {.nsources = 2 + trial % 5};
        double sum = 0;
        for (int s = 0; s < set.nsources; s++) sum += set.src[s].weight = 1 + rand() % 1000;
        for (int s = 0; s < set.nsources; s++) set.src[s].weight /= sum;
        int64_t drawn[ZT_DATA_MAX_SOURCES] = {0};
        double worst = 0;
        for (int64_t g = 0; g < 200000; g++) {
            drawn[zt_dataset_pick(&set, drawn, g)]++;
            for (int s = 0; s < set.nsources; s++) {
                double off = fabs((double)drawn[s] - set.src[s].weight * (double)(g + 1));
                if (off > worst) worst = off;
            }
        }
        ZT_TEST_TRUE(worst <= 1.0, "blend of %d sources: a count strays %.3f sequences from its "
                     "share", set.nsources, worst);
    }
}

static void test_permutation(void) {
    const int64_t sizes[] = {1, 2, 3, 4, 5, 7, 16, 17, 100, 1000, 4097, 65537};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        int64_t n = sizes[i];
        char *seen = calloc((size_t)n, 1);
        int bad = 0, moved = 0, differs = 0;
        for (int64_t j = 0; j < n; j++) {
            int64_t p = zt_dataset_permute(1234, 1, 0, j, n);
            if (p < 0 || p >= n || seen[p]++) bad++;
            moved += p != j;
            differs += p != zt_dataset_permute(1234, 1, 1, j, n); /* another epoch */
            bad += p != zt_dataset_permute(1234, 1, 0, j, n);     /* the same on every call */
        }
        ZT_TEST_TRUE(!bad, "permutation of %lld: not a bijection (%d bad)", (long long)n, bad);
        ZT_TEST_TRUE(n < 16 || (moved > n / 2 && differs > n / 2), "permutation of %lld moves "
                     "%d and differs between epochs at %d positions", (long long)n, moved,
                     differs);
        free(seen);
    }
    int64_t n = 1000, same_seed = 0, same_src = 0;
    for (int64_t j = 0; j < n; j++) {
        same_seed += zt_dataset_permute(1, 0, 0, j, n) == zt_dataset_permute(2, 0, 0, j, n);
        same_src += zt_dataset_permute(1, 0, 0, j, n) == zt_dataset_permute(1, 1, 0, j, n);
    }
    ZT_TEST_TRUE(same_seed < 20 && same_src < 20, "seeds agree at %lld, sources at %lld of 1000",
                 (long long)same_seed, (long long)same_src);
}

// ----------------------------------------------------------------------------
// rows

static void test_shuffled_epochs(void) {
    make_tokens("a.bin", 1601, 3, 1, 50); /* 100 sequences of T = 16 */
    make_tokens("b.bin", 801, 5, 2, 50);  /* 50 */
    struct zt_dataset d;
    char data[2100];
    snprintf(data, sizeof data, "2:%s,1:%s", pathof("a.bin"), pathof("b.bin"));
    enum zt_status rc = zt_dataset_open(&d, data, NULL, 50, 16, ZT_DATA_SHUFFLE, 99);
    ZT_TEST_TRUE(rc == ZT_OK, "open %s: %s", data, zt_error_last());
    if (rc != ZT_OK) return;
    ZT_TEST_TRUE(d.train.nsources == 2 && d.train.src[0].nseq == 100 &&
                 d.train.src[1].nseq == 50 && fabs(d.train.src[0].weight - 2.0 / 3) < 1e-15,
                 "sources: %lld and %lld sequences, weight %g", (long long)d.train.src[0].nseq,
                 (long long)d.train.src[1].nseq, d.train.src[0].weight);
    struct zt_sampler_state st = {0};
    struct zt_data_row rows[450];
    zt_dataset_next(&d, &d.train, &st, 450, rows); /* 3 epochs of each */
    int count[2][100] = {{0}}, bad = 0;
    for (int k = 0; k < 450; k++) {
        int f = rows[k].file;
        if (rows[k].pos % 16) bad++;
        else count[f][rows[k].pos / 16]++;
    }
    for (int s = 0; s < 2; s++)
        for (int j = 0; j < (s ? 50 : 100); j++) bad += count[s][j] != 3;
    ZT_TEST_TRUE(!bad, "three epochs do not draw every sequence three times (%d off)", bad);
    ZT_TEST_TRUE(st.consumed == 450 && st.drawn[0] == 300 && st.drawn[1] == 150 &&
                 zt_dataset_epoch(&d, &d.train, &st, 0) == 4, "state after 450: %lld %lld %lld",
                 (long long)st.consumed, (long long)st.drawn[0], (long long)st.drawn[1]);
    zt_dataset_close(&d);
}

static void test_linear_rule(void) {
    make_tokens("lin.bin", 1000, 7, 3, 64);
    struct zt_dataset d;
    ZT_TEST_TRUE(zt_dataset_open(&d, pathof("lin.bin"), NULL, 64, 24, ZT_DATA_LINEAR, 1) ==
                 ZT_OK && d.legacy, "one file by its path: the step rule (%s)", zt_error_last());
    struct zt_sampler_state st = {0};
    struct zt_data_row rows[5];
    int32_t a[24], at[24], b[24], bt[24];
    int bad = 0;
    for (int64_t step = 1; step <= 30; step++) { /* 30 * 5 * 24 tokens: several wraps */
        zt_dataset_next(&d, &d.train, &st, 5, rows);
        for (int k = 0; k < 5; k++) {
            zt_tokens_batch(&d.files[0], step, 5, 24, k, 1, a, at);
            zt_tokens_row(d.files, &rows[k], 24, 24, b, bt);
            bad += memcmp(a, b, sizeof a) != 0 || memcmp(at, bt, sizeof at) != 0;
        }
    }
    ZT_TEST_TRUE(!bad, "the sampler's linear rows differ from zt_tokens_batch in %d rows", bad);
    zt_tokens_row(d.files, &rows[0], 24, 10, b, bt);
    ZT_TEST_TRUE(bt[9] >= 0 && bt[10] == -1 && bt[23] == -1, "active 10: targets 10.. are -1");
    zt_dataset_close(&d);
}

static void test_wide_tokens(void) {
    uint32_t t[300];
    for (int i = 0; i < 300; i++) t[i] = 70000u + (uint32_t)i * 97u;
    ZT_TEST_TRUE(zt_tokens_write_wide(pathof("wide.bin"), t, 300) == ZT_OK, "write uint32");
    struct zt_tokens f;
    ZT_TEST_TRUE(zt_tokens_open(&f, pathof("wide.bin"), 100000) == ZT_OK && f.width == 4,
                 "open uint32: %s", zt_error_last());
    struct zt_data_row row = {0, 290};
    int32_t in[20], tg[20];
    ZT_TEST_TRUE(zt_tokens_row(&f, &row, 20, 20, in, tg) == ZT_OK &&
                 in[0] == (int32_t)t[290] && in[10] == (int32_t)t[0] && tg[9] == (int32_t)t[0],
                 "uint32 row wrapping at the end: %d %d", in[0], in[10]);
    zt_tokens_close(&f);
    ZT_TEST_TRUE(zt_tokens_open(&f, pathof("wide.bin"), 99000) == ZT_ERR_DATA &&
                 strstr(zt_error_last(), "not below vocab_size 99000"), "uint32 id over the "
                 "vocabulary: %s", zt_error_last());
    /* a uint32 header over a body of uint16 size: the width named */
    int32_t h[256] = {ZT_TOKENS_MAGIC_WIDE, ZT_TOKENS_VERSION_WIDE, 100};
    FILE *w = fopen(pathof("mixed.bin"), "wb");
    fwrite(h, sizeof h, 1, w);
    fwrite(t, 2, 100, w);
    fclose(w);
    ZT_TEST_TRUE(zt_tokens_open(&f, pathof("mixed.bin"), 100000) == ZT_ERR_DATA &&
                 strstr(zt_error_last(), "needs 1424 (1024 + 4 * count: uint32 tokens)"),
                 "width mismatch: %s", zt_error_last());
}

// ----------------------------------------------------------------------------
// the state

static void test_state_json(void) {
    struct zt_dataset d, other;
    char data[2100];
    snprintf(data, sizeof data, "%s,%s", pathof("a.bin"), pathof("b.bin"));
    if (zt_dataset_open(&d, data, NULL, 50, 16, ZT_DATA_SHUFFLE, 5) != ZT_OK) {
        ZT_TEST_FAIL("open %s: %s", data, zt_error_last());
        return;
    }
    struct zt_sampler_state st = {0}, back;
    struct zt_data_row rows[77];
    zt_dataset_next(&d, &d.train, &st, 77, rows);
    char *json = zt_sampler_state_json(&d, &st);
    ZT_TEST_TRUE(json && zt_sampler_state_parse(&d, json, "ckpt", &back) == ZT_OK &&
                 back.consumed == 77 && back.drawn[0] == st.drawn[0] &&
                 back.drawn[1] == st.drawn[1], "state round trip: %s", zt_error_last());
    ZT_TEST_TRUE(zt_dataset_open(&other, data, NULL, 50, 16, ZT_DATA_SHUFFLE, 6) == ZT_OK &&
                 zt_sampler_state_parse(&other, json, "ckpt", &back) == ZT_ERR_USAGE &&
                 strstr(zt_error_last(), "seed 5; this run asks for shuffle order with seed 6"),
                 "another seed: %s", zt_error_last());
    zt_dataset_close(&other);
    ZT_TEST_TRUE(zt_dataset_open(&other, pathof("a.bin"), NULL, 50, 16, ZT_DATA_SHUFFLE, 5) ==
                 ZT_OK && zt_sampler_state_parse(&other, json, "ckpt", &back) == ZT_ERR_USAGE &&
                 strstr(zt_error_last(), "2 source(s), --data has 1"), "other data: %s",
                 zt_error_last());
    zt_dataset_close(&other);
    ZT_TEST_TRUE(zt_sampler_state_parse(&d, "{\"order\": 1}", "ckpt", &back) ==
                 ZT_ERR_CKPT_CORRUPT, "malformed state: %s", zt_error_last());
    /* the step rule (one file by its path) and whole sequences (the same file as "1:F") */
    struct zt_dataset step_rule, seqs;
    char one[1100];
    snprintf(one, sizeof one, "1:%s", pathof("a.bin"));
    if (zt_dataset_open(&step_rule, pathof("a.bin"), NULL, 50, 16, ZT_DATA_LINEAR, 5) == ZT_OK &&
        zt_dataset_open(&seqs, one, NULL, 50, 16, ZT_DATA_LINEAR, 5) == ZT_OK) {
        char *sj = zt_sampler_state_json(&step_rule, &(struct zt_sampler_state){0});
        ZT_TEST_TRUE(zt_sampler_state_parse(&seqs, sj, "ckpt", &back) == ZT_ERR_USAGE &&
                     strstr(zt_error_last(), "read by the step rule"), "another rule: %s",
                     zt_error_last());
        free(sj);
        zt_dataset_close(&seqs);
        zt_dataset_close(&step_rule);
    } else {
        ZT_TEST_FAIL("open one file two ways: %s", zt_error_last());
    }
    /* one file shorter than a sequence reads the step rule; its state still round-trips */
    make_tokens("tiny.bin", 9, 1, 0, 50);
    if (zt_dataset_open(&other, pathof("tiny.bin"), NULL, 50, 16, ZT_DATA_LINEAR, 5) == ZT_OK) {
        char *tj = zt_sampler_state_json(&other, &(struct zt_sampler_state){0});
        ZT_TEST_TRUE(tj && zt_sampler_state_parse(&other, tj, "ckpt", &back) == ZT_OK,
                     "a short file's state: %s", zt_error_last());
        free(tj);
        zt_dataset_close(&other);
    } else {
        ZT_TEST_FAIL("open a file shorter than a sequence: %s", zt_error_last());
    }
    free(json);
    zt_dataset_close(&d);
}

// ----------------------------------------------------------------------------
// a file larger than the process may hold

static uint64_t bytes_read(void) {
    FILE *f = fopen("/proc/self/io", "r");
    char line[128];
    uint64_t v = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "rchar: %" SCNu64, &v) == 1) break;
    if (f) fclose(f);
    return v;
}

static int big_file_child(const char *p) {
#if !defined(__SANITIZE_ADDRESS__) && !defined(ZT_UNDER_SANITIZER)
    struct rlimit lim = {(rlim_t)1 << 30, (rlim_t)1 << 30};
    if (setrlimit(RLIMIT_AS, &lim) != 0) return 3;
#endif
    uint64_t before = bytes_read();
    struct zt_dataset d;
    if (zt_dataset_open(&d, p, NULL, 50000, 1024, ZT_DATA_SHUFFLE, 3) != ZT_OK) {
        fprintf(stderr, "big file: %s\n", zt_error_last());
        return 4;
    }
    struct zt_sampler_state st = {0};
    struct zt_data_row rows[8];
    int32_t in[1024], tg[1024];
    for (int step = 0; step < 4; step++) {
        zt_dataset_next(&d, &d.train, &st, 8, rows);
        for (int k = 0; k < 8; k++)
            if (zt_tokens_row(d.files, &rows[k], 1024, 1024, in, tg) != ZT_OK || in[7] != 0)
                return 5;
    }
    uint64_t read = bytes_read() - before;
    zt_dataset_close(&d);
    fprintf(stderr, "big file: %" PRIu64 " bytes read for 32 rows of an 8 GiB file\n", read);
    return read < ((uint64_t)1 << 20) ? 0 : 6;
}

static void test_big_sparse_file(void) {
    const char *p = pathof("big.bin");
    int fd = open(p, O_CREAT | O_TRUNC | O_WRONLY, 0644);
    int32_t h[256] = {ZT_TOKENS_MAGIC_WIDE, ZT_TOKENS_VERSION_WIDE, INT32_MAX};
    int ok = fd >= 0 && write(fd, h, sizeof h) == (ssize_t)sizeof h &&
             ftruncate(fd, (off_t)sizeof h + 4 * (off_t)INT32_MAX) == 0;
    if (fd >= 0) close(fd);
    if (!ok) {
        printf("SKIP big file: cannot make an 8 GiB sparse file in %s\n", dir);
        return;
    }
    pid_t pid = fork();
    if (pid == 0) _exit(big_file_child(p));
    int status = 0;
    waitpid(pid, &status, 0);
    ZT_TEST_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0, "8 GiB sparse file: child "
                 "status %d (3 rlimit, 4 open, 5 rows, 6 read too much)", WEXITSTATUS(status));
    unlink(p);
}

// ----------------------------------------------------------------------------
// bad input

static void expect_err(const char *data, const char *eval, enum zt_status code, const char *want) {
    struct zt_dataset d;
    enum zt_status rc = zt_dataset_open(&d, data, eval, 50, 16, ZT_DATA_LINEAR, 1);
    ZT_TEST_TRUE(rc == code && strstr(zt_error_last(), want) && !strchr(zt_error_last(), '\n'),
                 "%s: got %s \"%s\", want %s with \"%s\"", data, zt_status_str(rc),
                 zt_error_last(), zt_status_str(code), want);
    if (rc == ZT_OK) zt_dataset_close(&d);
}

static void test_bad_inputs(void) {
    char a[1024], b[1024], buf[2200];
    snprintf(a, sizeof a, "%s", pathof("a.bin"));
    snprintf(b, sizeof b, "%s", pathof("b.bin"));
    snprintf(buf, sizeof buf, "0:%s,1:%s", a, b);
    expect_err(buf, NULL, ZT_ERR_USAGE, "expected a number > 0");
    snprintf(buf, sizeof buf, "-2:%s", a);
    expect_err(buf, NULL, ZT_ERR_USAGE, "weight -2 of");
    snprintf(buf, sizeof buf, "0.5:%s,%s", a, b);
    expect_err(buf, NULL, ZT_ERR_USAGE, "1 of 2 sources have a weight");
    expect_err(pathof("missing.bin"), NULL, ZT_ERR_IO, "missing.bin");
    snprintf(buf, sizeof buf, "%s,", a);
    expect_err(buf, NULL, ZT_ERR_USAGE, "an empty source");
    expect_err("", NULL, ZT_ERR_USAGE, "an empty source");
    snprintf(buf, sizeof buf, "0.5:");
    expect_err(buf, NULL, ZT_ERR_USAGE, "without a path");
    snprintf(buf, sizeof buf, "1e308:%s,1e308:%s", a, b);
    expect_err(buf, NULL, ZT_ERR_USAGE, "add up to more than a double holds");
    make_tokens("short.bin", 10, 1, 0, 50);
    snprintf(buf, sizeof buf, "%s,%s", a, pathof("short.bin"));
    expect_err(buf, NULL, ZT_ERR_DATA, "fewer than one sequence of seq_len 16");
    expect_err(a, pathof("spec.json"), ZT_ERR_USAGE, "a spec's validation list comes with");
    write_text("sv.json", "{\"train\": [{\"path\": \"a.bin\"}], \"valid_split\": 0.1}");
    expect_err(pathof("sv.json"), b, ZT_ERR_USAGE, "names validation data already");
    /* the spec */
    write_text("s1.json", "{\"train\": []}");
    expect_err(pathof("s1.json"), NULL, ZT_ERR_CONFIG, "train: expected a non-empty list");
    write_text("s2.json", "{\"train\": [{\"path\": \"a.bin\"}], \"valid_split\": 1.5}");
    expect_err(pathof("s2.json"), NULL, ZT_ERR_CONFIG, "valid_split");
    write_text("s3.json", "{\"train\": [{\"path\": \"a.bin\", \"wieght\": 1}]}");
    expect_err(pathof("s3.json"), NULL, ZT_ERR_CONFIG, "did you mean");
    write_text("s4.json", "{\"train\": [{\"path\": \"a.bin\", \"tokens\": 1600}]}");
    expect_err(pathof("s4.json"), NULL, ZT_ERR_DATA, "holds 1601 tokens, the spec says 1600");
    write_text("s5.json", "{\"train\": [{\"path\": \"a.bin\"}], \"validation\": [{\"path\": "
                          "\"b.bin\"}], \"valid_split\": 0.1}");
    expect_err(pathof("s5.json"), NULL, ZT_ERR_CONFIG, "either validation or valid_split");
    write_text("s6.json", "{\"train\": [{\"path\": \"a.bin\", \"weight\": 0}]}");
    expect_err(pathof("s6.json"), NULL, ZT_ERR_CONFIG, "weight");
    write_text("s7.json", "{\"train\": [{\"path\": \"b.bin\"}], \"valid_split\": 0.001}");
    expect_err(pathof("s7.json"), NULL, ZT_OK, "");
    write_text("s8.json", "{\"train\": [{\"path\": \"a.bin\"}, {\"path\": \"b.bin\"}], "
                          "\"valid_split\": 0.1}");
    struct zt_dataset d;
    ZT_TEST_TRUE(zt_dataset_open(&d, pathof("s8.json"), NULL, 50, 16, ZT_DATA_LINEAR, 1) ==
                 ZT_OK && d.valid.nsources == 2 && d.valid.src[0].nseq == 10 &&
                 d.valid.src[0].first == 90 && d.train.src[0].nseq == 90 &&
                 d.valid.src[1].nseq == 5 && !d.legacy, "valid_split 0.1: %s", zt_error_last());
    zt_dataset_close(&d);
}

int main(void) {
    dir = getenv("ZT_IO_TEST_TMP");
    if (!dir) {
        fprintf(stderr, "test_dataset: ZT_IO_TEST_TMP is not set\n");
        return 1;
    }
    mkdir(dir, 0755);
    test_blend_exact();
    test_permutation();
    test_shuffled_epochs();
    test_linear_rule();
    test_wide_tokens();
    test_state_json();
    test_big_sparse_file();
    test_bad_inputs();
    return zt_test_finish("test_dataset");
}
